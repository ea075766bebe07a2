// Clients of clusterd for the benchmark: agent messages, the thread-per-stream
// driver of scenarios 1 and 2 (DriveAgents), and multiplexed agent and Watch
// streams on gRPC's callback API (AgentPool, WatchPool) for the scenarios
// that need hundreds or thousands of streams on a 2-core machine.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "clusterd/v1/agent.grpc.pb.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "common.h"

namespace clusterd::bench {

constexpr uint64_t kEpoch = 1;
// Devices a scenario's faults are spread over (scenarios 5 and 6 map events
// back to transitions with it).
constexpr int kDevices = 8;
// Devices each simulated node announces in its Hello: kDevices unless
// --devices says otherwise (scenarios 3, 4 and 7 at MindCluster's 16).
int DevicesPerNode();
void SetDevicesPerNode(int n);
// The model those devices announce (vendor "huawei"): "910B3" unless a
// scenario sets another (scenario 13: "Ascend910B3"). Set it only while no
// AgentPool or DriveAgents runs; `model` must outlive its use (a literal).
const char* DeviceModel();
void SetDeviceModel(const char* model);

// An edit of every Hello MakeHello builds (scenario 15: each node's software
// chain); nullptr: none. Set it only while no AgentPool or DriveAgents runs.
void SetHelloEdit(std::function<void(v1::Hello*)> edit);

// Hello of node `node` with DevicesPerNode() accelerators of DeviceModel(),
// epoch kEpoch, then the HelloEdit.
v1::ConnectRequest MakeHello(const std::string& node);
// A transition (epoch kEpoch, `seq`) timestamped now.
void FillFault(uint64_t seq, v1::TransitionAction action, uint32_t device, const std::string& code,
               v1::FaultLevel level, v1::ConnectRequest* req);
// Scenario 1/2 shape: odd seq raises catalog code 020000002 (SUB_HEALTH) on
// device ((seq-1)/2) % kDevices, the next even seq clears it.
void FillTransition(uint64_t seq, v1::ConnectRequest* req);
size_t RecordSize();

// prefix0, prefix1, ... prefix(n-1): the node names of n simulated agents.
std::vector<std::string> NodeNames(const std::string& prefix, int n);

// `channels` channels to target, each its own HTTP/2 connection, for one
// kind of client (`role`). gRPC shares a connection between channels of
// the same target and arguments (its global subchannel pool), so the role
// keeps a pool's connections its own: a Watch opened after a restart must
// not land on the agents' connection that is still in reconnect backoff
// from while the server was down (it fails at once with that connection's
// last "Connection refused"), nor share its HTTP/2 flow control with the
// agents' load.
std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(const std::string& target, int channels,
                                                         const std::string& role = "agent");

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
// transitions queued with Send (and heartbeats), one write in flight at a
// time; send and ack times are recorded per seq. With reconnect, a stream
// whose call fails starts a new one after NodeD's backoff (200 ms doubling to
// 10 s, jitter 0.5-1x, reset by a call that lasted 10 s): a new Hello with the
// faults active now, then every transition not acknowledged yet.
class AgentPool {
 public:
  AgentPool(const std::string& target, std::vector<std::string> names, int channels = 4, bool reconnect = false);
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
  uint64_t Send(size_t i, v1::TransitionAction action, uint32_t device, const std::string& code, v1::FaultLevel level);
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

  // Heartbeats: every stream that is attached sends one every interval_s,
  // spread evenly over the interval, from `threads` threads (each a share
  // of the streams). Started before Connect, a stream's heartbeats begin
  // with its Welcome, as NodeD's do.
  void StartHeartbeats(double interval_s, size_t threads = 1);
  void StopHeartbeats();
  void SetHeartbeating(size_t i, bool on);
  bool Heartbeat(size_t i);  // one now; false if stream i is not attached
  uint64_t heartbeats() const { return heartbeats_.load(); }
  // The most a heartbeat was queued after its slot since the last call (ns):
  // how far this process's heartbeat threads fell behind (a co-located client
  // starved of CPU), as opposed to the server being late to read it.
  int64_t TakeHeartbeatMaxLateNs() { return hb_max_late_.exchange(0); }
  // Cancels stream i for good, as an agent that died (no reconnect).
  void Kill(size_t i);
  // When stream i last queued a message (Hello, transition or heartbeat).
  int64_t LastMessageNs(size_t i) const;
  bool Attached(size_t i) const;
  // Streams whose current call is welcomed; WaitAttached waits until at
  // least n are (or the deadline) and returns how many are.
  size_t attached() const { return attached_.load(); }
  size_t WaitAttached(size_t n, int64_t deadline_ns);
  uint64_t reconnect_attempts() const { return reconnects_.load(); }
  // Messages from clusterd other than Welcome and Ack (a probe plan, a
  // validation request) go to `on_message` on a gRPC thread, one at a time
  // per stream. Set it before Connect.
  using OnMessage = std::function<void(size_t i, const v1::ConnectResponse& msg)>;
  void set_on_message(OnMessage on_message) { on_message_ = std::move(on_message); }
  // Queues any message on stream i's current call; false when it has none.
  bool SendMessage(size_t i, v1::ConnectRequest req);

  uint64_t welcomes() const { return welcomes_total_.load(); }

 private:
  class Call;
  class Stream;
  void Notify(std::atomic<size_t>* counter, bool call_ended = false);
  void ScheduleReconnect(Stream* s, int64_t due_ns);
  void TimerLoop();
  v1::NodeAgentService::Stub* Stub(size_t slot, size_t rotation) const {
    return stubs_[rotation * slots_ + slot].get();
  }
  // Each slot's channel, once per rotation of the target's addresses.
  const size_t rotations_, slots_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::NodeAgentService::Stub>> stubs_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::unordered_map<std::string, int> index_;
  const bool reconnect_;
  const int64_t backoff_min_ns_ = 200'000'000, backoff_max_ns_ = 10'000'000'000;
  std::mutex mu_;  // guards timers_, stopping_ and the waits below
  std::condition_variable cv_;
  std::atomic<size_t> welcomed_{0}, done_{0}, attached_{0}, live_calls_{0}, welcomes_total_{0}, reconnects_{0};
  std::atomic<bool> stopping_{false};
  std::multimap<int64_t, Stream*> timers_;  // reconnects due
  std::thread timer_;
  std::vector<std::thread> hb_;
  std::atomic<bool> hb_stop_{true};
  std::unique_ptr<std::atomic<bool>[]> hb_skip_;
  std::atomic<uint64_t> heartbeats_{0};
  std::atomic<int64_t> hb_max_late_{0};
  OnMessage on_message_;
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
  // Streams whose server sent its response headers (the raw sink sends them
  // once the stream is subscribed; clusterd with its first response).
  size_t headers() const { return headers_.load(); }
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
  std::atomic<size_t> ended_{0}, headers_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string first_end_;
  size_t done_ = 0;
  bool cancelled_ = false;
};

}  // namespace clusterd::bench
