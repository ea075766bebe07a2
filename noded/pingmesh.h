// NodeD's side of the pingmesh (docs/pingmesh.md): ClusterD sends the peers
// to probe each round on the stream (ProbePlan); a thread of this worker runs
// the newest plan with the TCP probe (collectors/peer_probe.h) and keeps its
// report for the stream's sender. A plan that arrives while one runs waits;
// a newer one replaces it (only the current round matters), and a report not
// yet sent is replaced by the next one. A plan that does not validate is
// refused and logged, never run.
//
// The device plane (collectors/device_probe.h): with this node's NPU ports
// (hccn.conf) and the peers' in the plan, each of this node's ports probes
// the peer's port of the same device id with the configured tool, while the
// TCP probe runs. Without the tool nothing is probed on that plane and the
// report says so (DEVICE_PLANE_STATE_NO_TOOL): not probed is never healthy.
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
#include "noded/collectors/device_probe.h"

namespace clusterd::noded {

struct DevicePlaneOptions {
  // This node's NPU ports (ReadHccnConf); empty: not on the device plane.
  std::vector<DevicePort> ports;
  // The tool's path, its packets per probe come from the plan's attempts.
  std::string tool = "/usr/local/Ascend/driver/tools/hccn_tool";
  std::chrono::milliseconds timeout{5000};
};

class PingmeshWorker {
 public:
  // `ready` is told when a report waits (the stream's sender wakes up);
  // `metrics` may be null.
  PingmeshWorker(std::function<void()> ready, MetricsRegistry* metrics, DevicePlaneOptions device = {});
  // The ports the hello announces (fixed for the worker's life).
  const std::vector<DevicePort>& device_ports() const { return device_.ports; }
  ~PingmeshWorker();
  PingmeshWorker(const PingmeshWorker&) = delete;
  PingmeshWorker& operator=(const PingmeshWorker&) = delete;

  void Start();
  void Stop();
  // A plan from ClusterD. InvalidArgument (nothing changes) for one that does
  // not validate: too many targets, an address that is no IP literal, a port
  // out of range, attempts or a timeout out of bounds, more than 64 device
  // ports of a peer or a port address that is no IPv4 literal.
  Status Submit(const v1::ProbePlan& plan);
  // The report of the last round run, once.
  std::optional<v1::ProbeReport> TakeReady();

 private:
  void Run();
  void ProbeDevicePlane(const v1::ProbePlan& plan, std::vector<DeviceProbeOutcome>* outcomes,
                        v1::DevicePlaneState* state, std::string* detail);

  std::function<void()> ready_;
  DevicePlaneOptions device_;
  Counter* device_sent_ = nullptr;
  Counter* device_lost_ = nullptr;
  Counter* device_errors_ = nullptr;
  Counter* device_unprobed_ = nullptr;
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
