// NodeD's side of the pingmesh (docs/pingmesh.md): ClusterD sends the peers
// to probe each round on the stream (ProbePlan); a thread of this worker runs
// the newest plan with the TCP probe (collectors/peer_probe.h) and keeps its
// report for the stream's sender. A plan that arrives while one runs waits;
// a newer one replaces it (only the current round matters), and a report not
// yet sent is replaced by the next one. A plan that does not validate is
// refused and logged, never run.
//
// Thread contract: Submit and TakeReady are thread-safe; `ready` runs on the
// worker's thread without its lock held.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "clusterd/v1/agent.pb.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd::noded {

class PingmeshWorker {
 public:
  // `ready` is told when a report waits (the stream's sender wakes up);
  // `metrics` may be null.
  PingmeshWorker(std::function<void()> ready, MetricsRegistry* metrics);
  ~PingmeshWorker();
  PingmeshWorker(const PingmeshWorker&) = delete;
  PingmeshWorker& operator=(const PingmeshWorker&) = delete;

  void Start();
  void Stop();
  // A plan from ClusterD. InvalidArgument (nothing changes) for one that does
  // not validate: too many targets, an address that is no IP literal, a port
  // out of range, attempts or a timeout out of bounds.
  Status Submit(const v1::ProbePlan& plan);
  // The report of the last round run, once.
  std::optional<v1::ProbeReport> TakeReady();

 private:
  void Run();

  std::function<void()> ready_;
  Counter* rounds_ = nullptr;
  Counter* refused_ = nullptr;
  Counter* sent_ = nullptr;
  Counter* lost_ = nullptr;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::optional<v1::ProbePlan> next_;
  std::optional<v1::ProbeReport> report_;
  std::thread thread_;
};

}  // namespace clusterd::noded
