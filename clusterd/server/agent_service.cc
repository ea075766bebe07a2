#include "clusterd/server/agent_service.h"

#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>

#include <google/protobuf/util/time_util.h>
#include <grpcpp/alarm.h>

#include "clusterd/edge/auth.h"
#include "clusterd/edge/grpc_status.h"
#include "clusterd/edge/stream_writer.h"
#include "clusterd/state/evidence.h"
#include "clusterd/state/validation_rule.h"
#include "clusterd/state/pingmesh_rule.h"
#include "common/duration.h"
#include "common/validation.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"

namespace clusterd {
namespace {

constexpr std::string_view kConnectMethod = "/clusterd.v1.NodeAgentService/Connect";

using google::protobuf::util::TimeUtil;

// Round-trip times a NodeD sends are its word: negative or past 60 s they
// are refused, not stored. Fills the sum over `replies` and the longest.
Status ProbeRtt(const std::string& what, const google::protobuf::Duration* mean, const google::protobuf::Duration* max,
                uint32_t replies, pingmesh::PairStats* stats) {
  if (replies == 0 || mean == nullptr) return Status::Ok();
  const int64_t mean_us = google::protobuf::util::TimeUtil::DurationToMicroseconds(*mean);
  const int64_t max_us = max != nullptr ? google::protobuf::util::TimeUtil::DurationToMicroseconds(*max) : mean_us;
  constexpr int64_t kMaxRttUs = 60'000'000;
  if (mean_us < 0 || max_us < 0 || mean_us > kMaxRttUs || max_us > kMaxRttUs) {
    return InvalidArgument("probes.peers: " + what + " with a round-trip time outside 0..60s");
  }
  stats->rtt_sum_us = static_cast<uint64_t>(mean_us) * replies;
  stats->rtt_max_us = static_cast<uint32_t>(max_us);
  return Status::Ok();
}

// A ProbeReport as the pingmesh counts it, from `node`'s point of view: at
// most 256 peers, each a node name, at most 10 probes sent, no more lost than
// sent; on the device plane at most 64 port pairs per peer, ports named
// "<node>#<device>".
struct ProbeRoundResults {
  std::vector<pingmesh::PairStats> tcp;
  std::vector<pingmesh::PairStats> device;
  bool device_unprobed = false;
};

StatusOr<ProbeRoundResults> ProbeResults(const std::string& node, const v1::ProbeReport& report) {
  constexpr int kMaxPeers = 256;
  constexpr int kMaxPortPairs = 64;
  constexpr uint32_t kMaxDevice = 65535;
  if (report.peers_size() > kMaxPeers) {
    return InvalidArgument("probes.peers: at most " + std::to_string(kMaxPeers) + ", not " +
                           std::to_string(report.peers_size()));
  }
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("probes.device_plane_detail", report.device_plane_detail(), 1024));
  ProbeRoundResults out;
  out.device_unprobed = report.device_plane() == v1::DEVICE_PLANE_STATE_NO_TOOL;
  out.tcp.reserve(report.peers_size());
  for (const auto& p : report.peers()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("probes.peers.node", p.node()));
    if (p.sent() > 10 || p.lost() > p.sent()) {
      return InvalidArgument("probes.peers: peer " + p.node() + " with " + std::to_string(p.lost()) + " of " +
                             std::to_string(p.sent()) + " probes lost (at most 10 sent, no more lost than sent)");
    }
    pingmesh::PairStats stats{node, p.node(), p.sent(), p.lost()};
    CLUSTERD_RETURN_IF_ERROR(ProbeRtt("peer " + p.node(), p.has_rtt_mean() ? &p.rtt_mean() : nullptr,
                                      p.has_rtt_max() ? &p.rtt_max() : nullptr, p.sent() - p.lost(), &stats));
    out.tcp.push_back(std::move(stats));
    if (p.devices_size() > kMaxPortPairs) {
      return InvalidArgument("probes.peers: peer " + p.node() + " with more than " + std::to_string(kMaxPortPairs) +
                             " device port pairs");
    }
    for (const auto& d : p.devices()) {
      if (d.device_id() > kMaxDevice || d.peer_device_id() > kMaxDevice || d.sent() > 10 || d.lost() > d.sent()) {
        return InvalidArgument("probes.peers.devices: peer " + p.node() +
                               ": device ids at most 65535, at most 10 probes sent, no more lost than sent");
      }
      pingmesh::PairStats port{PingmeshPortName(node, d.device_id()), PingmeshPortName(p.node(), d.peer_device_id()),
                               d.sent(), d.lost()};
      CLUSTERD_RETURN_IF_ERROR(ProbeRtt("port " + port.target, d.has_rtt_mean() ? &d.rtt_mean() : nullptr,
                                        d.has_rtt_max() ? &d.rtt_max() : nullptr, d.sent() - d.lost(), &port));
      out.device.push_back(std::move(port));
    }
  }
  return out;
}

// One agent stream. All state lives under mu_; every gRPC operation is
// started with mu_ held so that Finish can never race a StartRead/StartWrite.
// The mutex is recursive because gRPC may run a reaction inline from inside
// an operation started on a non-gRPC thread (the Engine's).
class AgentReactor final : public grpc::ServerBidiReactor<v1::ConnectRequest, v1::ConnectResponse>,
                           public std::enable_shared_from_this<AgentReactor> {
 public:
  AgentReactor(AgentService* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context), session_(service->NextSession()) {}

  void Begin(std::shared_ptr<AgentReactor> self) {
    self_ = std::move(self);
    std::lock_guard lock(mu_);
    const AgentServiceOptions& opts = service_->options();
    if (service_->open_streams().fetch_add(1) >= static_cast<int64_t>(opts.max_streams)) {
      if (service_->streams_rejected) service_->streams_rejected->Inc();
      FinishLocked(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                "too many agent streams (max_streams=" + std::to_string(opts.max_streams) + ")"));
      return;
    }
    // Only a node's agent (or an admin) may open a stream; which node it may
    // speak for is checked at its hello.
    auto who = service_->auth()->Authorize(*context_, kConnectMethod);
    if (!who.ok()) {
      FinishLocked(ToGrpc(who.status()));
      return;
    }
    principal_ = std::move(*who);
    peer_key_ = PeerLimiter::PeerKey(context_->peer());
    if (!service_->peers().TryAcquire(peer_key_)) {
      if (service_->streams_rejected_per_peer) service_->streams_rejected_per_peer->Inc();
      GetLogger("agent")->warn("agent stream from {} refused: it holds max_streams_per_peer={} streams", peer_key_,
                               opts.max_streams_per_peer);
      FinishLocked(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                "too many agent streams from " + peer_key_ +
                                    " (max_streams_per_peer=" + std::to_string(opts.max_streams_per_peer) + ")"));
      return;
    }
    peer_counted_ = true;
    // A stream that never says hello would hold its slots forever. The
    // deadline runs on the service's timers (cancelled when the hello comes
    // or the stream ends) and holds only a weak reference: it never keeps
    // the stream alive, and one that fires after the stream is done finds
    // nothing.
    std::weak_ptr<AgentReactor> weak = self_;
    hello_deadline_ = service_->timers()->PostAfter(opts.hello_timeout, [weak] {
      if (auto reactor = weak.lock()) reactor->OnHelloDeadline();
    });
    StartReadLocked();
  }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    reading_ = false;
    if (!ok) {
      read_closed_ = true;
      // The agent is done: what waits for its interval is applied now.
      next_inventory_ = {};
      if (Status st = FlushInventoryLocked(); !st.ok()) {
        FinishLocked(ToGrpc(st));
        return;
      }
      MaybeCloseLocked();
      return;
    }
    Status st = HandleLocked();
    if (!st.ok()) {
      GetLogger("agent")->warn("stream from {} rejected: {}", node_.empty() ? context_->peer() : node_, st.ToString());
      FinishLocked(ToGrpc(st));
      return;
    }
    if (inflight_ < service_->options().max_inflight_per_stream) StartReadLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (out_.WriteDone()) return;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to agent failed"));
      return;
    }
    out_.Next();
    MaybeCloseLocked();
  }

  void OnCancel() override {
    std::lock_guard lock(mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
  }

  void OnDone() override {
    service_->open_streams().fetch_sub(1);
    if (peer_counted_) service_->peers().Release(peer_key_);
    {
      std::lock_guard lock(mu_);
      hello_deadline_.Cancel();
      if (inventory_alarm_) inventory_alarm_->Cancel();
    }
    if (!node_.empty()) {
      std::string node = node_;
      uint64_t session = session_;
      if (service_->outbox()) service_->outbox()->Detach(node, session);
      service_->engine()->Submit([node, session](ClusterState& state, Mutation*) -> Engine::Done {
        state.ApplyDisconnect(node, session);
        if (auto* pingmesh = state.Attached<PingmeshRule>()) pingmesh->AgentDown(node, session);
        return nullptr;
      });
    }
    self_.reset();  // may delete this
  }

 private:
  Status HandleLocked() {
    auto self = shared_from_this();
    if (node_.empty()) {
      if (!req_.has_hello()) return InvalidArgument("the first message of a stream must be a hello");
      // Validated here, on the stream's thread, once: the writer takes it as is.
      auto hello = Validate(std::move(*req_.mutable_hello()));
      if (!hello.ok()) return hello.status();
      // An agent says hello for its own node only: another node's stream
      // would be ended and its faults cleared.
      if (!MayActForNode(principal_, (*hello)->node_name())) {
        return service_->auth()->Deny(
            principal_, kConnectMethod,
            "may say hello only for node \"" + principal_.node + "\", not \"" + (*hello)->node_name() + "\"");
      }
      node_ = (*hello)->node_name();
      hello_deadline_.Cancel();
      if (service_->messages_other) service_->messages_other->Inc();
      ++inflight_;
      uint64_t session = session_;
      // Where peers probe this agent in the pingmesh: ":port" is at the IP
      // its stream comes from.
      std::string probe_ip;
      uint16_t probe_port = 0;
      if (const std::string& a = (*hello)->probe_address(); !a.empty()) {
        const size_t colon = a.rfind(':');
        probe_ip = colon == 0 ? peer_key_ : a.substr(0, colon);
        if (probe_ip.size() > 2 && probe_ip.front() == '[') probe_ip = probe_ip.substr(1, probe_ip.size() - 2);
        probe_port = static_cast<uint16_t>(std::stoi(a.substr(colon + 1)));  // validated: 1..65535
      }
      return Submit(
          [self, hello = *hello, session, probe_ip, probe_port](ClusterState& state, Mutation* m) -> Engine::Done {
            auto welcome = state.ApplyHello(hello, session, m);
            if (auto* pingmesh = state.Attached<PingmeshRule>(); pingmesh && welcome.ok() && probe_port != 0) {
              std::vector<std::pair<uint32_t, std::string>> devices;
              for (const auto& d : hello->device_addresses()) devices.emplace_back(d.device_id(), d.address());
              pingmesh->AgentUp(hello->node_name(), session, probe_ip, probe_port, std::move(devices));
            }
            if (auto* evidence = state.Attached<EvidenceRule>(); evidence && welcome.ok()) {
              evidence->AgentUp(hello->node_name(), session, hello->collects_evidence());
            }
            return [self, welcome = std::move(welcome)] { self->OnWelcome(welcome); };
          });
    }
    // An inventory update that waits for its interval goes out with the
    // first message after it (ordered before this one).
    CLUSTERD_RETURN_IF_ERROR(FlushInventoryLocked());
    switch (req_.msg_case()) {
      case v1::ConnectRequest::kHello: return FailedPrecondition("hello may only be the first message of a stream");
      case v1::ConnectRequest::kHeartbeat: {
        if (service_->messages_heartbeat) service_->messages_heartbeat->Inc();
        // Most heartbeats only refresh a time: no trip through the writer.
        if (service_->state()->Read([this](const StateView& s) { return s.TryHeartbeat(node_, session_); })) {
          return Status::Ok();
        }
        ++inflight_;
        std::string node = node_;
        uint64_t session = session_;
        return Submit([self, node, session](ClusterState& state, Mutation* m) -> Engine::Done {
          Status st = state.ApplyHeartbeat(node, session, m);
          return [self, st] { self->OnApplied(st); };
        });
      }
      case v1::ConnectRequest::kMetrics: {
        if (service_->messages_other) service_->messages_other->Inc();
        auto snapshot = Validate(std::move(*req_.mutable_metrics()));
        if (!snapshot.ok()) return snapshot.status();
        ++inflight_;
        std::string node = node_;
        uint64_t session = session_;
        return Submit(
            [self, node, session, snapshot = *snapshot](ClusterState& state, Mutation*) -> Engine::Done {
              Status st = state.ApplyMetrics(node, session, snapshot);
              return [self, st] { self->OnApplied(st); };
            },
            /*write=*/false);
      }
      case v1::ConnectRequest::kTransition: {
        if (service_->messages_transition) service_->messages_transition->Inc();
        auto valid = Validate(std::move(*req_.mutable_transition()));
        if (!valid.ok()) return valid.status();
        ++inflight_;
        std::string node = node_;
        uint64_t session = session_;
        return Submit([self, node, session, t = *valid](ClusterState& state, Mutation* m) -> Engine::Done {
          auto result = state.ApplyTransition(node, session, t, m);
          Status st = result.ok() ? Status::Ok() : result.status();
          bool duplicate = result.ok() && result->duplicate;
          uint64_t revision = state.revision();
          return [self, st, t, duplicate, revision] { self->OnTransitionDurable(st, t->id(), duplicate, revision); };
        });
      }
      case v1::ConnectRequest::kChain: {
        if (service_->messages_other) service_->messages_other->Inc();
        auto update = Validate(std::move(*req_.mutable_chain()));
        if (!update.ok()) return update.status();
        if (pending_chain_) CoalescedLocked("ChainUpdate");
        pending_chain_ = std::move(*update);
        return FlushInventoryLocked();
      }
      case v1::ConnectRequest::kPodDevices: {
        if (service_->messages_other) service_->messages_other->Inc();
        auto update = Validate(std::move(*req_.mutable_pod_devices()));
        if (!update.ok()) return update.status();
        if (pending_pods_) CoalescedLocked("PodDevicesUpdate");
        pending_pods_ = std::move(*update);
        return FlushInventoryLocked();
      }
      case v1::ConnectRequest::kProgress: {
        // Progress of ranks on this node (their processes' files): a bad
        // report is refused and logged, never the end of the node's stream.
        if (service_->messages_other) service_->messages_other->Inc();
        if (service_->progress() == nullptr) return Status::Ok();
        // Who may report which rank, and the job: the monitor's
        // (progress/monitor.h, ReportFromNode).
        const Status st = service_->progress()->ReportFromNode(node_, req_.progress());
        if (!st.ok()) LogProgressRefused(st);
        return Status::Ok();
      }
      case v1::ConnectRequest::kValidationResult: {
        // The outcome of a validation this node was asked for
        // (docs/validation.md); another node's is refused and ends the
        // stream (PERMISSION_DENIED, counted), changing nothing.
        if (service_->messages_other) service_->messages_other->Inc();
        if (req_.validation_result().validation_id().size() > 64) {
          return InvalidArgument("validation_result.validation_id: at most 64 characters");
        }
        ++inflight_;
        std::string node = node_;
        return Submit(
            [self, node, result = std::move(*req_.mutable_validation_result()),
             refused = service_->validation_results_refused](ClusterState& state, Mutation* m) -> Engine::Done {
              ValidationRule* rule = state.Attached<ValidationRule>();
              Status st = rule == nullptr ? FailedPrecondition("this ClusterD runs no validations")
                                          : rule->ApplyResult(state, node, result, m).status();
              if (st.code() == StatusCode::kPermissionDenied) {
                if (refused) refused->Inc();
              } else if (!st.ok()) {
                GetLogger("agent")->warn("validation result from node {} ignored: {}", node, st.ToString());
                st = Status::Ok();
              }
              return [self, st] { self->OnApplied(st); };
            });
      }
      case v1::ConnectRequest::kProbes: {
        // One round of this node's pingmesh probes (docs/pingmesh.md): a
        // report that does not validate ends the stream, changing nothing.
        if (service_->messages_other) service_->messages_other->Inc();
        auto results = ProbeResults(node_, req_.probes());
        if (!results.ok()) return results.status();
        ++inflight_;
        return Submit(
            [self, results = std::move(*results), node = node_](ClusterState& state, Mutation*) -> Engine::Done {
              if (auto* pingmesh = state.Attached<PingmeshRule>()) {
                pingmesh->Record(node, results.tcp);
                pingmesh->RecordDevices(node, results.device, results.device_unprobed);
              }
              return [self] { self->OnApplied(Status::Ok()); };
            },
            /*write=*/false);
      }
      case v1::ConnectRequest::kEvidence: {
        // This node's evidence of an incident it was asked about
        // (docs/domains.md): one for another node or an incident it was not
        // asked about is refused and ends the stream (PERMISSION_DENIED),
        // changing nothing; one over the cap or sent twice is refused and
        // logged.
        if (service_->messages_other) service_->messages_other->Inc();
        if (req_.evidence().incident_id().empty() || req_.evidence().incident_id().size() > 64) {
          return InvalidArgument("evidence.incident_id: 1 to 64 characters");
        }
        ++inflight_;
        return Submit([self, node = node_, bundle = std::move(*req_.mutable_evidence())](
                          ClusterState& state, Mutation* m) mutable -> Engine::Done {
          EvidenceRule* rule = state.Attached<EvidenceRule>();
          Status st = rule == nullptr ? FailedPrecondition("this ClusterD collects no evidence")
                                      : rule->ApplyBundle(state, node, std::move(bundle), m);
          if (st.ok() || st.code() == StatusCode::kPermissionDenied) return [self, st] { self->OnApplied(st); };
          GetLogger("agent")->warn("evidence from node {} refused: {}", node, st.ToString());
          return [self] { self->OnApplied(Status::Ok()); };
        });
      }
      default: return InvalidArgument("empty or unknown message");
    }
  }

  // The waiting inventory updates, once inventory_update_interval has passed
  // since the last ones applied (AgentServiceOptions).
  Status FlushInventoryLocked() {
    if (!pending_chain_ && !pending_pods_) return Status::Ok();
    const auto now = std::chrono::steady_clock::now();
    if (now < next_inventory_) {
      if (!inventory_alarm_set_) {
        // Due even if the agent sends nothing more. The alarm holds only a
        // weak reference: it never keeps the stream alive.
        inventory_alarm_set_ = true;
        inventory_alarm_ = std::make_unique<grpc::Alarm>();
        std::weak_ptr<AgentReactor> weak = self_;
        inventory_alarm_->Set(std::chrono::system_clock::now() + (next_inventory_ - now), [weak](bool fired) {
          if (auto reactor = weak.lock()) reactor->OnInventoryDue(fired);
        });
      }
      return Status::Ok();
    }
    next_inventory_ = now + service_->options().inventory_update_interval;
    auto self = shared_from_this();
    const std::string node = node_;
    const uint64_t session = session_;
    if (pending_chain_) {
      ++inflight_;
      Status st = Submit(
          [self, node, session, update = std::move(*pending_chain_)](ClusterState& state, Mutation* m) -> Engine::Done {
            Status st = state.ApplyChainUpdate(node, session, update, m);
            return [self, st] { self->OnApplied(st); };
          });
      pending_chain_.reset();
      CLUSTERD_RETURN_IF_ERROR(st);
    }
    if (pending_pods_) {
      ++inflight_;
      Status st = Submit(
          [self, node, session, update = std::move(*pending_pods_)](ClusterState& state, Mutation* m) -> Engine::Done {
            Status st = state.ApplyPodDevices(node, session, update, m);
            return [self, st] { self->OnApplied(st); };
          });
      pending_pods_.reset();
      CLUSTERD_RETURN_IF_ERROR(st);
    }
    return Status::Ok();
  }

  void OnInventoryDue(bool fired) {
    std::lock_guard lock(mu_);
    inventory_alarm_set_ = false;
    if (!fired || out_.finishing()) return;
    if (Status st = FlushInventoryLocked(); !st.ok()) FinishLocked(ToGrpc(st));
  }

  // A waiting inventory update replaced by a newer one: counted, and logged
  // at most once a minute per stream.
  void CoalescedLocked(const char* kind) {
    ++coalesced_;
    if (service_->inventory_coalesced) service_->inventory_coalesced->Inc();
    const auto now = std::chrono::steady_clock::now();
    if (now < next_coalesce_log_) return;
    next_coalesce_log_ = now + std::chrono::minutes(1);
    GetLogger("agent")->warn(
        "inventory updates from node {} come faster than one per {} (inventory_update_interval): {} {} replaced by a "
        "newer one so far on this stream; only the latest is stored",
        node_, FormatDuration(service_->options().inventory_update_interval), coalesced_, kind);
  }

  // At most one line a minute per stream: a job's files can be wrong for a
  // long time.
  void LogProgressRefused(const Status& st) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_progress_log_) return;
    next_progress_log_ = now + std::chrono::minutes(1);
    GetLogger("agent")->warn("job progress from node {} refused: {}", node_, st.ToString());
  }

  void OnHelloDeadline() {
    std::lock_guard lock(mu_);
    if (!node_.empty() || out_.finishing()) return;
    if (service_->hello_timeouts) service_->hello_timeouts->Inc();
    const std::string timeout = FormatDuration(service_->options().hello_timeout);
    GetLogger("agent")->warn("stream from {} ended: no valid hello within {}", context_->peer(), timeout);
    FinishLocked(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                              "no valid hello within " + timeout + " (hello_timeout) of opening the stream"));
  }

  // A write (hello, transition, heartbeat through the writer) is refused
  // while the store cannot take writes (disk below its reserve): the stream
  // ends with UNAVAILABLE and the reason, nothing unacknowledged is acked,
  // and the agent backs off, reconnects and resends its outbox. Metrics
  // change nothing durable and are never refused.
  Status Submit(Engine::Apply apply, bool write = true) {
    Status st = write ? service_->engine()->SubmitWrite(std::move(apply))
                      : (service_->engine()->Submit(std::move(apply)) ? Status::Ok()
                                                                      : Unavailable("clusterd is shutting down"));
    if (!st.ok()) --inflight_;
    return st;
  }

  void OnWelcome(const StatusOr<v1::Welcome>& welcome) {
    std::lock_guard lock(mu_);
    if (!welcome.ok()) {
      FinishLocked(ToGrpc(welcome.status()));
      return;
    }
    v1::ConnectResponse resp;
    *resp.mutable_welcome() = *welcome;
    *resp.mutable_welcome()->mutable_heartbeat_interval() =
        TimeUtil::NanosecondsToDuration(service_->options().heartbeat_interval.count());
    *resp.mutable_welcome()->mutable_node_grace() =
        TimeUtil::NanosecondsToDuration(service_->options().node_grace.count());
    out_.Push(std::move(resp));
    // The writer's messages for this node (validation requests, probe plans) come on this
    // stream from now on.
    if (AgentOutbox* outbox = service_->outbox()) {
      std::weak_ptr<AgentReactor> weak = self_;
      outbox->Attach(node_, session_, [weak](const v1::ConnectResponse& msg) {
        if (auto reactor = weak.lock()) reactor->Push(msg);
      });
    }
    AppliedLocked();
  }

 public:
  // A message of a writer rule for this agent (state/agent_outbox.h).
  void Push(const v1::ConnectResponse& msg) {
    std::lock_guard lock(mu_);
    if (out_.finishing()) return;
    out_.Push(v1::ConnectResponse(msg));
  }

 private:
  void OnApplied(const Status& st) {
    std::lock_guard lock(mu_);
    if (!st.ok()) {
      FinishLocked(ToGrpc(st));
      return;
    }
    AppliedLocked();
  }

  void OnTransitionDurable(const Status& st, const v1::TransitionId& id, bool duplicate, uint64_t revision) {
    std::lock_guard lock(mu_);
    if (!st.ok()) {
      FinishLocked(ToGrpc(st));
      return;
    }
    if (duplicate && service_->transitions_duplicate) service_->transitions_duplicate->Inc();
    // Acks are cumulative within an epoch: a newer ack replaces a queued one.
    auto& queue = out_.queue();
    if (!queue.empty() && queue.back().has_ack() && queue.back().ack().id().epoch() == id.epoch()) queue.pop_back();
    v1::ConnectResponse resp;
    *resp.mutable_ack()->mutable_id() = id;
    resp.mutable_ack()->set_revision(revision);
    out_.Push(std::move(resp));
    AppliedLocked();
  }

  void AppliedLocked() {
    --inflight_;
    if (out_.finishing()) return;
    out_.Next();
    if (!reading_ && !read_closed_ && inflight_ < service_->options().max_inflight_per_stream) StartReadLocked();
    MaybeCloseLocked();
  }

  void StartReadLocked() {
    if (out_.finishing() || reading_ || read_closed_) return;
    reading_ = true;
    StartRead(&req_);
  }

  // The agent closed its side: finish once everything it sent is answered.
  void MaybeCloseLocked() {
    if (read_closed_ && inflight_ == 0 && out_.idle()) FinishLocked(grpc::Status::OK);
  }

  // Queued acks are dropped; the agent resends anything not acknowledged.
  void FinishLocked(grpc::Status status) {
    read_closed_ = true;
    out_.Finish(std::move(status));
  }

  AgentService* service_;
  grpc::CallbackServerContext* context_;
  const uint64_t session_;
  std::shared_ptr<AgentReactor> self_;  // owned by gRPC until OnDone

  std::recursive_mutex mu_;
  v1::ConnectRequest req_;
  StreamWriter<AgentReactor, v1::ConnectResponse> out_{this};
  std::string node_;
  Principal principal_;
  std::string peer_key_;       // client IP address, for the per-peer limit
  bool peer_counted_ = false;  // peer_key_ holds one of the peer's slots
  TaskHandle hello_deadline_;  // ends the stream if no hello arrives in time
  uint32_t inflight_ = 0;
  bool reading_ = false;
  bool read_closed_ = false;
  std::chrono::steady_clock::time_point next_progress_log_{};
  // Inventory updates waiting for inventory_update_interval (the latest of
  // each kind), and when the next may be applied.
  std::optional<Validated<v1::ChainUpdate>> pending_chain_;
  std::optional<Validated<v1::PodDevicesUpdate>> pending_pods_;
  std::chrono::steady_clock::time_point next_inventory_{};
  std::unique_ptr<grpc::Alarm> inventory_alarm_;  // applies them when due
  bool inventory_alarm_set_ = false;
  std::chrono::steady_clock::time_point next_coalesce_log_{};
  uint64_t coalesced_ = 0;
};

}  // namespace

AgentService::AgentService(const ClusterState* state, Engine* engine, AgentServiceOptions options,
                           MetricsRegistry* metrics, const Authenticator* auth)
    : state_(state), engine_(engine), options_(options), auth_(auth), peers_(options.max_streams_per_peer) {
  timers_ = options_.timers;
  if (timers_ == nullptr) {
    own_timers_ = std::make_unique<ThreadExecutor>(&MonotonicClock::Instance(), "agent-hello");
    timers_ = own_timers_.get();
  }
  if (metrics) {
    messages_heartbeat = &metrics->AddCounter("clusterd_agent_messages_total", "Messages received from agents.",
                                              {{"type", "heartbeat"}});
    messages_transition = &metrics->AddCounter("clusterd_agent_messages_total", "Messages received from agents.",
                                               {{"type", "transition"}});
    messages_other =
        &metrics->AddCounter("clusterd_agent_messages_total", "Messages received from agents.", {{"type", "other"}});
    inventory_coalesced = &metrics->AddCounter(
        "clusterd_agent_inventory_updates_coalesced_total",
        "Inventory updates (PodDevicesUpdate, ChainUpdate) replaced by a newer one before they were applied "
        "(inventory_update_interval).");
    transitions_duplicate = &metrics->AddCounter("clusterd_agent_duplicate_transitions_total",
                                                 "Fault transitions already stored, acknowledged again.");
    streams_rejected =
        &metrics->AddCounter("clusterd_agent_streams_rejected_total", "Agent streams refused at the stream limit.");
    streams_rejected_per_peer = &metrics->AddCounter("clusterd_agent_streams_rejected_per_peer_total",
                                                     "Agent streams refused at max_streams_per_peer.");
    validation_results_refused = &metrics->AddCounter(
        "clusterd_validation_results_refused_total",
        "Validation results an agent sent for another node's validation (refused, the stream ended).");
    hello_timeouts = &metrics->AddCounter("clusterd_agent_hello_timeouts_total",
                                          "Agent streams ended because no valid hello came within hello_timeout.");
    metrics->AddCallbackGauge("clusterd_agent_streams", "Open agent streams.",
                              [this] { return static_cast<double>(open_streams_.load()); });
  }
}

grpc::ServerBidiReactor<v1::ConnectRequest, v1::ConnectResponse>* AgentService::Connect(
    grpc::CallbackServerContext* context) {
  auto reactor = std::make_shared<AgentReactor>(this, context);
  AgentReactor* raw = reactor.get();
  raw->Begin(std::move(reactor));
  return raw;
}

}  // namespace clusterd
