// gRPC adapter for NodeAgentService.Connect. Each stream is a bidi reactor
// that validates messages, submits them to the Engine and writes back the
// Welcome and the acknowledgements once the Engine reports them durable.
//
// Admission: at most max_streams streams in all and max_streams_per_peer per
// client IP address; a stream must send its Hello within hello_timeout
// (a deadline on the service's executor, AgentServiceOptions::timers).
// Threading: Connect is called by gRPC on any thread; the metrics and
// accessors are thread-safe.
#pragma once

#include <atomic>
#include <memory>

#include "clusterd/engine/engine.h"
#include "clusterd/progress/monitor.h"
#include "clusterd/edge/auth.h"
#include "clusterd/edge/peer_limiter.h"
#include "clusterd/state/agent_outbox.h"
#include "clusterd/v1/agent.grpc.pb.h"
#include "common/executor.h"
#include "common/metrics.h"

namespace clusterd {

struct AgentServiceOptions {
  uint32_t max_inflight_per_stream = 256;
  uint32_t max_streams = 20'000;
  std::chrono::nanoseconds heartbeat_interval = std::chrono::seconds(2);
  std::chrono::nanoseconds node_grace = std::chrono::seconds(10);
  // A stream that has not sent a valid Hello this long after it opened is
  // ended with DEADLINE_EXCEEDED, freeing its slot.
  std::chrono::nanoseconds hello_timeout = std::chrono::seconds(10);
  // Where the streams' hello deadlines run (common/executor.h; a test's
  // ManualExecutor steps a FakeClock past hello_timeout instead of waiting
  // it out). nullptr: a thread of the service's own on the monotonic clock.
  // Must outlive the service.
  Executor* timers = nullptr;
  // Agent streams one peer IP address may hold; more are refused with
  // RESOURCE_EXHAUSTED (a node runs one agent; this stops one host from
  // taking all max_streams slots).
  uint32_t max_streams_per_peer = 1'000;
  // Inventory updates (PodDevicesUpdate, ChainUpdate) applied per stream: at
  // most one per interval; one that comes sooner waits for the stream's next
  // message after the interval (every agent heartbeats), and a newer one of
  // the same kind replaces it (only the latest matters). Each stored update
  // is a NODE_UPDATED event carrying the node, so an agent alternating two
  // updates cannot fill the event log and the watch cache with copies of its
  // node. 0: every update is applied at once.
  std::chrono::nanoseconds inventory_update_interval = std::chrono::seconds(1);
};

class AgentService final : public v1::NodeAgentService::CallbackService {
 public:
  // `auth` decides who may open a stream and for which node; it must
  // outlive this.
  AgentService(const ClusterState* state, Engine* engine, AgentServiceOptions options, MetricsRegistry* metrics,
               const Authenticator* auth);

  grpc::ServerBidiReactor<v1::ConnectRequest, v1::ConnectResponse>* Connect(
      grpc::CallbackServerContext* context) override;

  const AgentServiceOptions& options() const { return options_; }
  Engine* engine() const { return engine_; }
  const ClusterState* state() const { return state_; }
  const Authenticator* auth() const { return auth_; }
  std::atomic<int64_t>& open_streams() { return open_streams_; }
  uint64_t NextSession() { return next_session_.fetch_add(1) + 1; }

  Counter* messages_heartbeat = nullptr;
  Counter* messages_transition = nullptr;
  Counter* messages_other = nullptr;
  Counter* transitions_duplicate = nullptr;
  Counter* streams_rejected = nullptr;
  Counter* streams_rejected_per_peer = nullptr;
  Counter* hello_timeouts = nullptr;
  Counter* inventory_coalesced = nullptr;

  PeerLimiter& peers() { return peers_; }
  // Where the hello deadlines run (options().timers, or the service's own).
  Executor* timers() const { return timers_; }
  // Takes the job progress NodeD reads from the node's files (null: such
  // reports are ignored). Set before serving.
  void set_progress(ProgressMonitor* progress) { progress_ = progress; }
  ProgressMonitor* progress() const { return progress_; }
  // Where the writer's rules leave messages for the agents' streams
  // (state/agent_outbox.h; null: none are delivered). Set before serving.
  void set_outbox(AgentOutbox* outbox) { outbox_ = outbox; }
  AgentOutbox* outbox() const { return outbox_; }
  Counter* validation_results_refused = nullptr;

 private:
  const ClusterState* state_;
  Engine* engine_;
  AgentServiceOptions options_;
  const Authenticator* auth_;
  std::atomic<int64_t> open_streams_{0};
  std::atomic<uint64_t> next_session_{0};
  PeerLimiter peers_;
  ProgressMonitor* progress_ = nullptr;
  AgentOutbox* outbox_ = nullptr;
  Executor* timers_ = nullptr;
  // options.timers unset: the hello deadlines' thread, stopped first when
  // the service goes (a deadline still waiting then finds no stream).
  std::unique_ptr<ThreadExecutor> own_timers_;
};

}  // namespace clusterd
