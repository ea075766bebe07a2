// Clients of clusterd for the benchmark: agent messages, the thread-per-stream
// driver of scenarios 1 and 2 (DriveAgents), and multiplexed agent and Watch
// streams on gRPC's callback API (AgentPool, WatchPool) for the scenarios
// that need hundreds or thousands of streams on a 2-core machine.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "clusterd/v1/agent.grpc.pb.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "common.h"

namespace clusterd::bench {

constexpr uint64_t kEpoch = 1;
constexpr int kDevices = 8;

// Hello of node `node` with kDevices accelerators, epoch kEpoch.
v1::ConnectRequest MakeHello(const std::string& node);
// A transition (epoch kEpoch, `seq`) timestamped now.
void FillFault(uint64_t seq, v1::TransitionAction action, uint32_t device, const std::string& code,
               v1::FaultLevel level, v1::ConnectRequest* req);
// Scenario 1/2 shape: odd seq raises catalog code 020000002 (SUB_HEALTH) on
// device ((seq-1)/2) % kDevices, the next even seq clears it.
void FillTransition(uint64_t seq, v1::ConnectRequest* req);
size_t RecordSize();

// `channels` channels to target, each its own HTTP/2 connection.
std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(const std::string& target, int channels);

// ---------------------------------------------------------------- DriveAgents

struct DriveResult {
  double acked_per_s = 0;  // acknowledged transitions per second in the window
  double sent_per_s = 0;   // sent per second in the window
  uint64_t acked_total = 0;
  double p50_ms = NAN, p90_ms = NAN, p99_ms = NAN, max_ms = NAN;
  uint64_t latency_samples = 0;
  double send_lag_p99_ms = NAN;  // how late the paced sender was against its schedule
  double window_s = 0;
  bool ok = true;
  std::string error;
};

// Drives `streams` agent streams (a reader and a writer thread each) against
// target. rate <= 0: each stream sends as fast as acks allow with at most
// `window` unacknowledged transitions; rate > 0: transitions are paced on a
// steady-clock schedule and per-transition latency (send -> covering ack) is
// recorded after the warm-up.
DriveResult DriveAgents(const std::string& target, const std::string& node_prefix, int streams, double duration_s,
                        double rate, uint64_t window = 512);
json DriveJson(const DriveResult& r);

// ---------------------------------------------------------------- AgentPool

// Agent streams (one node each) multiplexed on the callback API over a few
// channels: no thread per stream. Each stream sends its Hello, then the
// transitions queued with Send, one write in flight at a time; send and ack
// times are recorded per seq.
class AgentPool {
 public:
  AgentPool(const std::string& target, std::vector<std::string> names, int channels = 4);
  ~AgentPool();
  AgentPool(const AgentPool&) = delete;
  AgentPool& operator=(const AgentPool&) = delete;

  // Starts every stream and waits for every Welcome; "" or why not.
  std::string Connect(double timeout_s = 60);
  size_t size() const { return streams_.size(); }
  const std::string& name(size_t i) const;
  // Index of a node name, or -1.
  int IndexOf(const std::string& name) const;

  // Queues a transition on stream i and returns its seq (1, 2, ...); its
  // send time is taken now.
  uint64_t Send(size_t i, v1::TransitionAction action, uint32_t device, const std::string& code,
                v1::FaultLevel level);
  int64_t SentNs(size_t i, uint64_t seq) const;
  int64_t AckedNs(size_t i, uint64_t seq) const;  // 0 while not acknowledged
  uint64_t Sent(size_t i) const;
  // Waits until everything sent is acknowledged; false on timeout or a failed stream.
  bool WaitAllAcked(double timeout_s);
  // Ack latencies (ns) of the transitions sent in [from_ns, to_ns).
  std::vector<int64_t> AckLatencies(int64_t from_ns, int64_t to_ns = INT64_MAX) const;
  // Half-closes every stream and waits for clusterd to end them; "" or the
  // first error.
  std::string Close(double timeout_s = 30);

 private:
  class Stream;
  void Notify(std::atomic<size_t>* counter);
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::NodeAgentService::Stub>> stubs_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::unordered_map<std::string, int> index_;
  std::mutex mu_;  // guards nothing but the waits below
  std::condition_variable cv_;
  std::atomic<size_t> welcomed_{0}, done_{0};
};

// ---------------------------------------------------------------- WatchPool

// ClusterService.Watch streams multiplexed on the callback API. on_response
// runs on a gRPC thread, one call at a time per watcher.
class WatchPool {
 public:
  using OnResponse = std::function<void(size_t watcher, const v1::WatchResponse& resp, int64_t recv_ns)>;
  WatchPool(const std::string& target, int count, const v1::WatchRequest& req, OnResponse on_response,
            int channels = 4);
  ~WatchPool();  // cancels what is still open
  WatchPool(const WatchPool&) = delete;
  WatchPool& operator=(const WatchPool&) = delete;
  size_t size() const { return watchers_.size(); }
  // Streams that ended (clusterd ended them or they failed) and the first such status.
  size_t ended() const { return ended_.load(); }
  std::string first_end_status() const;
  // Cancels every stream and waits until each is done.
  void Cancel();

 private:
  class Watcher;
  void OnWatcherDone(const grpc::Status& s);
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::ClusterService::Stub>> stubs_;
  std::vector<std::unique_ptr<Watcher>> watchers_;
  OnResponse on_response_;
  std::atomic<size_t> ended_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string first_end_;
  size_t done_ = 0;
  bool cancelled_ = false;
};

}  // namespace clusterd::bench
