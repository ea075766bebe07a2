// MindCluster's fault.Fault service (docs/mindcluster.md): MindIE's
// controller and other platforms register for a job's faults (or the whole
// cluster's), subscribe to a stream of FaultMsgSignal and query the faults
// now. The signal's content is the domain's (mindcluster/signal.h); this
// adapter decides when to send it.
//
// Change detection follows ClusterD's event stream, not a poll of the state:
// one WatchHub subscription (held while any stream is open) feeds a pump on
// the watch pool that reads the new events and tells each subscriber which
// jobs they touched; a subscriber recomputes only those jobs' signals, at
// most once per min_send_interval (the reference checks every second), and
// sends those whose content changed since the last message (or since it
// subscribed: there is no initial snapshot).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include <boost/asio/thread_pool.hpp>

#include "clusterd/engine/watch_hub.h"
#include "clusterd/edge/auth.h"
#include "clusterd/state/cluster_state.h"
#include "common/executor.h"
#include "common/metrics.h"
#include "mindcluster/fault.grpc.pb.h"

namespace clusterd {

// Reply codes of the reference server (Status.code, FaultQueryResult.code).
inline constexpr int32_t kMindClusterRegistered = 0;
inline constexpr int32_t kMindClusterQueryOk = 200;
inline constexpr int32_t kMindClusterUnknownJob = 402;
inline constexpr int32_t kMindClusterInvalid = 409;

struct MindClusterFaultOptions {
  // Registrations, and subscription streams, at most; more are refused with
  // RESOURCE_EXHAUSTED.
  uint32_t max_subscribers = 1000;
  // Registrations one client holds at most (RESOURCE_EXHAUSTED beyond), so
  // that no client takes every slot of max_subscribers. A client is the
  // authenticated principal (its name); without authentication (--insecure,
  // where every caller is anonymous) its IP address. A registration belongs
  // to whoever registered its (jobId, role) last.
  uint32_t max_registrations_per_principal = 100;
  // A registration with no subscription stream open for this long expires (a
  // client that registered and went away holds no slot for good); one with a
  // stream open never does. Checked when a slot is needed and when a stream
  // subscribes.
  std::chrono::seconds registration_ttl{300};
  // A subscriber recomputes (and sends) at most once per this interval; the
  // first change after a quiet spell goes out at once.
  std::chrono::milliseconds min_send_interval{1000};
  // Where a subscriber's next flush waits out min_send_interval
  // (common/executor.h); its clock also times registration_ttl. nullptr: a
  // thread of the service's own on the monotonic clock. A test's ManualExecutor on a
  // FakeClock steps the interval instead of waiting it; it must outlive the
  // service.
  Executor* timers = nullptr;
};

class MindClusterFaultService final : public fault::Fault::CallbackService {
 public:
  // `state`, `hub`, `pool` and `auth` must outlive this and every stream.
  // Metrics (registered in `metrics`, which may be nullptr):
  // clusterd_mindcluster_fault_subscribers, the streams that took their
  // baseline (from then on every change is told), and
  // clusterd_mindcluster_fault_messages_total; clusterd_mindcluster_fault_registrations,
  // clusterd_mindcluster_fault_registrations_expired_total and
  // clusterd_mindcluster_fault_registrations_refused_total{reason="total"|"per_principal"}.
  MindClusterFaultService(const ClusterState* state, WatchHub* hub, boost::asio::thread_pool* pool,
                          MindClusterFaultOptions options, MetricsRegistry* metrics, const Authenticator* auth);
  ~MindClusterFaultService() override;

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const fault::ClientInfo* req,
                                     fault::Status* resp) override;
  grpc::ServerWriteReactor<fault::FaultMsgSignal>* SubscribeFaultMsgSignal(grpc::CallbackServerContext* ctx,
                                                                           const fault::ClientInfo* req) override;
  grpc::ServerUnaryReactor* GetFaultMsgSignal(grpc::CallbackServerContext* ctx, const fault::ClientInfo* req,
                                              fault::FaultQueryResult* resp) override;

  size_t subscriber_count() const;
  size_t registration_count() const;

  struct Core;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace clusterd
