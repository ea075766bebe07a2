#include "clusterd/server/cluster_service.h"

#include <memory>
#include <mutex>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "clusterd/state/evidence.h"
#include "clusterd/state/incidents.h"
#include "clusterd/state/pingmesh_rule.h"
#include "clusterd/state/response_limits.h"
#include "clusterd/edge/auth.h"
#include "clusterd/state/validation_rule.h"
#include "clusterd/server/wire_events.h"
#include "clusterd/edge/stream_writer.h"
#include "clusterd/server/submit.h"
#include "common/logging.h"

namespace clusterd {
namespace {

// A raw request's message, or INVALID_ARGUMENT.
grpc::Status ParseRequest(const grpc::ByteBuffer& raw, v1::WatchRequest* req) {
  std::vector<grpc::Slice> slices;
  if (raw.Valid() && !raw.Dump(&slices).ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "watch request unreadable");
  }
  std::string bytes;
  bytes.reserve(raw.Valid() ? raw.Length() : 0);
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (!req->ParseFromString(bytes)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "watch request is not a clusterd.v1.WatchRequest");
  }
  return grpc::Status::OK;
}

// One Watch stream. It pulls batches from the hub on the watch pool (which may
// read the disk), writes one batch at a time, and goes idle when caught up
// until the hub notifies it. Responses are written as bytes framed once per
// event for every watcher (wire_events.h). State is under a recursive mutex
// held while any gRPC operation starts (see AgentReactor for why).
class WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                           public std::enable_shared_from_this<WatchReactor> {
 public:
  WatchReactor(ClusterServiceImpl* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx), timer_(service->pool()->get_executor()) {}

  void Begin(std::shared_ptr<WatchReactor> self, const grpc::ByteBuffer& raw) {
    self_ = std::move(self);
    std::lock_guard lock(mu_);
    if (auto who = service_->auth()->Authorize(*ctx_, "/clusterd.v1.ClusterService/Watch"); !who.ok()) {
      FinishLocked(ToGrpc(who.status()));
      return;
    }
    v1::WatchRequest req;
    if (grpc::Status parsed = ParseRequest(raw, &req); !parsed.ok()) {
      FinishLocked(std::move(parsed));
      return;
    }
    peer_key_ = PeerLimiter::PeerKey(ctx_->peer());
    if (grpc::Status admitted = service_->AdmitWatch(peer_key_); !admitted.ok()) {
      FinishLocked(std::move(admitted));
      return;
    }
    admitted_ = true;
    auto filter = WatchFilter::FromRequest(req);
    if (!filter.ok()) {
      FinishLocked(ToGrpc(filter.status()));
      return;
    }
    filter_ = std::move(*filter);
    after_ = req.from_revision();
    if (Status st = CheckRangeLocked(); !st.ok()) {
      FinishLocked(ToGrpc(st));
      return;
    }
    std::weak_ptr<WatchReactor> weak = shared_from_this();
    subscription_ = service_->hub()->Subscribe([weak](uint64_t head) {
      if (auto self = weak.lock()) self->OnPublished(head);
    });
    subscribed_ = true;
    ScheduleLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (out_.WriteDone()) return;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to watcher failed"));
      return;
    }
    if (LaggingLocked(service_->hub()->head())) return;
    ScheduleLocked();
  }

  void OnCancel() override {
    std::lock_guard lock(mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    if (subscribed_) service_->hub()->Unsubscribe(subscription_);
    if (admitted_) service_->ReleaseWatch(peer_key_);
    self_.reset();
  }

 private:
  Status CheckRangeLocked() {
    const uint64_t compacted = service_->compacted_revision();
    if (after_ < compacted) {
      return OutOfRange("revision " + std::to_string(after_) + " is compacted; the oldest revision available is " +
                        std::to_string(compacted + 1) + " (watch from_revision=" + std::to_string(compacted) + ")");
    }
    return Status::Ok();
  }

  // A watcher that had caught up and now trails the head by more than the
  // limit is ended: it can resume from its revision. Only its client can
  // hold it back, so the limit is checked while a write is in flight and
  // when one completes: a watcher whose pump waits for the watch pool (a
  // hello storm on a busy server) or whose filter skips everything it reads
  // is behind by the server's doing, and holds no more than before.
  bool LaggingLocked(uint64_t head) {
    if (!live_ || head <= after_ || head - after_ <= service_->options().max_lag_events) return false;
    if (service_->watch_ended_lagging) service_->watch_ended_lagging->Inc();
    const std::string msg = "watcher fell more than " + std::to_string(service_->options().max_lag_events) +
                            " events behind; resume with from_revision=" + std::to_string(after_);
    // With a write in flight (a client that stopped reading) the status goes
    // out after it: the stream then holds one batch, nothing more.
    FinishLocked(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, msg));
    return true;
  }

  void OnPublished(uint64_t head) {
    std::lock_guard lock(mu_);
    if (out_.finishing()) return;
    if (out_.writing() && LaggingLocked(head)) return;
    ScheduleLocked();
  }

  void ScheduleLocked() {
    if (out_.finishing() || out_.writing() || scheduled_) return;
    // Caught up: the hub's next publish schedules it (it takes mu_ after
    // moving the head, so none is missed).
    if (live_ && service_->hub()->head() <= after_) return;
    scheduled_ = true;
    // watch_coalesce: a live watcher's next response waits until that long
    // after its previous one, so the events in between go together.
    const auto window = service_->options().coalesce;
    if (live_ && window.count() > 0 && last_push_ != std::chrono::steady_clock::time_point{}) {
      const auto due = last_push_ + window;
      if (std::chrono::steady_clock::now() < due) {
        timer_.expires_at(due);
        timer_.async_wait([self = shared_from_this()](const boost::system::error_code&) { self->Pump(); });
        return;
      }
    }
    boost::asio::post(*service_->pool(), [self = shared_from_this()] { self->Pump(); });
  }

  // On the watch pool: fetch, filter, write.
  void Pump() {
    uint64_t after;
    {
      std::lock_guard lock(mu_);
      if (out_.finishing()) return;
      after = after_;
    }
    for (;;) {
      Status range;
      {
        std::lock_guard lock(mu_);
        range = CheckRangeLocked();
      }
      if (!range.ok()) {
        std::lock_guard lock(mu_);
        scheduled_ = false;
        FinishLocked(ToGrpc(range));
        return;
      }
      auto batch = service_->hub()->Fetch(after, service_->options().batch_events);
      if (!batch.ok()) {
        if (batch.status().code() != StatusCode::kOutOfRange) {
          GetLogger("watch")->error("fetch after {}: {}", after, batch.status().ToString());
        }
        std::lock_guard lock(mu_);
        scheduled_ = false;
        FinishLocked(ToGrpc(batch.status()));
        return;
      }
      // Split by bytes as well as by count: a response stays within
      // kWatchBatchBytes unless one event alone is larger (a job event can
      // reach kMaxJobBytes), so it always fits a client's 4 MiB. The rest of
      // the batch goes in the next response.
      WireResponseBuilder resp;
      for (const auto& e : *batch) {
        if (filter_.Matches(*e)) {
          grpc::Slice framed = service_->wire_cache()->Framed(e);
          if (resp.events() > 0 && resp.bytes() + framed.size() > kWatchBatchBytes) break;
          resp.Add(std::move(framed));
        }
        after = e->revision();
      }
      std::lock_guard lock(mu_);
      after_ = after;
      if (resp.events() > 0) {
        scheduled_ = false;
        if (out_.finishing()) return;
        if (service_->watch_events_sent) service_->watch_events_sent->Inc(resp.events());
        last_push_ = std::chrono::steady_clock::now();
        out_.Push(resp.Finish(after));
        return;
      }
      if (batch->empty() || after >= service_->hub()->head()) {
        // Caught up. Clear scheduled_ under the lock the hub's notification
        // also takes, so a publish after this point schedules a new pump.
        live_ = true;
        scheduled_ = false;
        if (after < service_->hub()->head()) ScheduleLocked();
        return;
      }
      // Everything in the batch was filtered out and more is available.
    }
  }

  void FinishLocked(grpc::Status status) { out_.Finish(std::move(status)); }

  ClusterServiceImpl* service_;
  grpc::CallbackServerContext* ctx_;
  std::shared_ptr<WatchReactor> self_;
  std::recursive_mutex mu_;
  WatchFilter filter_;
  uint64_t after_ = 0;
  uint64_t subscription_ = 0;
  bool subscribed_ = false;
  std::string peer_key_;   // client IP address, for the per-peer limit
  bool admitted_ = false;  // counted in the Watch limits; released in OnDone
  bool live_ = false;
  bool scheduled_ = false;
  // watch_coalesce: when the last response was handed to gRPC, and the
  // timer that holds the next one until the window has passed (on the pool).
  std::chrono::steady_clock::time_point last_push_{};
  boost::asio::steady_timer timer_;
  // One batch in flight at a time: the queue never holds more than one.
  StreamWriter<WatchReactor, WireResponse> out_{this};
};

}  // namespace

ClusterServiceImpl::ClusterServiceImpl(const ClusterState* state, WatchHub* hub, boost::asio::thread_pool* watch_pool,
                                       WatchOptions options, MetricsRegistry* metrics, const Authenticator* auth)
    // Not owned: an aliasing pointer with no owner counts nothing.
    : ClusterServiceImpl([state] { return std::shared_ptr<const ClusterState>(std::shared_ptr<void>(), state); }, hub,
                         watch_pool, options, metrics, auth) {}

ClusterServiceImpl::ClusterServiceImpl(StateFn state, WatchHub* hub, boost::asio::thread_pool* watch_pool,
                                       WatchOptions options, MetricsRegistry* metrics, const Authenticator* auth,
                                       std::function<uint64_t()> compacted)
    : state_(std::move(state)),
      compacted_(std::move(compacted)),
      hub_(hub),
      pool_(watch_pool),
      options_(options),
      auth_(auth),
      watch_peers_(options.max_streams_per_peer) {
  if (metrics) {
    watch_rejected =
        &metrics->AddCounter("clusterd_watch_streams_rejected_total", "Watch streams refused at max_watch_streams.");
    watch_rejected_per_peer = &metrics->AddCounter("clusterd_watch_streams_rejected_per_peer_total",
                                                   "Watch streams refused at max_watch_streams_per_peer.");
    watch_ended_lagging = &metrics->AddCounter("clusterd_watch_lagging_ended_total",
                                               "Watch streams ended because they fell too far behind.");
    watch_events_sent = &metrics->AddCounter("clusterd_watch_events_sent_total", "Events written to watchers.");
    metrics->AddCallbackGauge("clusterd_watchers", "Open Watch streams.",
                              [this] { return static_cast<double>(hub_->watcher_count()); });
    metrics->AddCallbackGauge("clusterd_watch_wire_cache_bytes",
                              "Bytes of events kept serialized for every watcher (at most 64 MiB).",
                              [this] { return static_cast<double>(wire_cache_.bytes()); });
    wire_cache_.set_counters(
        &metrics->AddCounter("clusterd_watch_wire_cache_hits_total",
                             "Events written to a watcher from the bytes serialized for another."),
        &metrics->AddCounter("clusterd_watch_wire_cache_misses_total",
                             "Events serialized for a watcher (no other had, or they were not kept)."));
  }
}

grpc::Status ClusterServiceImpl::AdmitWatch(const std::string& peer_key) {
  if (open_watches_.fetch_add(1) >= static_cast<int64_t>(options_.max_streams)) {
    open_watches_.fetch_sub(1);
    if (watch_rejected) watch_rejected->Inc();
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        "too many Watch streams (max_watch_streams=" + std::to_string(options_.max_streams) + "); retry later");
  }
  if (!watch_peers_.TryAcquire(peer_key)) {
    open_watches_.fetch_sub(1);
    if (watch_rejected_per_peer) watch_rejected_per_peer->Inc();
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many Watch streams from " + peer_key + " (max_watch_streams_per_peer=" +
                            std::to_string(options_.max_streams_per_peer) + "); close some or retry later");
  }
  return grpc::Status::OK;
}

void ClusterServiceImpl::ReleaseWatch(const std::string& peer_key) {
  watch_peers_.Release(peer_key);
  open_watches_.fetch_sub(1);
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetSummary(grpc::CallbackServerContext* ctx, const v1::GetSummaryRequest*,
                                                         v1::GetSummaryResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/GetSummary")) return refused;
  return AnswerRead(ctx, state_().get(), [resp](const StateView& state) {
    *resp = state.GetSummary();
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListNodes(grpc::CallbackServerContext* ctx,
                                                        const v1::ListNodesRequest* req, v1::ListNodesResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/ListNodes")) return refused;
  auto st = state_();
  return AnswerQuery(ctx, st.get(), resp,
                     [req, st](const StateView& state) { return ListNodesWithDomains(state, IncidentsOf(*st), *req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetNode(grpc::CallbackServerContext* ctx, const v1::GetNodeRequest* req,
                                                      v1::GetNodeResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/GetNode")) return refused;
  auto st = state_();
  return AnswerQuery(ctx, st.get(), resp,
                     [req, st](const StateView& state) { return GetNodeWithDomains(state, IncidentsOf(*st), *req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListFaults(grpc::CallbackServerContext* ctx,
                                                         const v1::ListFaultsRequest* req,
                                                         v1::ListFaultsResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/ListFaults")) return refused;
  return AnswerQuery(ctx, state_().get(), resp, [req](const StateView& state) { return state.ListFaults(*req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListRecoveries(grpc::CallbackServerContext* ctx,
                                                             const v1::ListRecoveriesRequest* req,
                                                             v1::ListRecoveriesResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/ListRecoveries")) return refused;
  return AnswerQuery(ctx, state_().get(), resp, [req](const StateView& state) { return state.ListRecoveries(*req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListValidations(grpc::CallbackServerContext* ctx,
                                                              const v1::ListValidationsRequest* req,
                                                              v1::ListValidationsResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/ListValidations")) return refused;
  const auto state = state_();
  const ClusterState* cs = state.get();
  return AnswerQuery(ctx, cs, resp, [req, cs](const StateView&) -> StatusOr<v1::ListValidationsResponse> {
    const ValidationRule* rule = cs->Attached<ValidationRule>();
    if (rule == nullptr) return v1::ListValidationsResponse{};
    return rule->List(*req);
  });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetRecovery(grpc::CallbackServerContext* ctx,
                                                          const v1::GetRecoveryRequest* req,
                                                          v1::GetRecoveryResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/GetRecovery")) return refused;
  return AnswerQuery(ctx, state_().get(), resp->mutable_recovery(),
                     [req](const StateView& state) { return state.GetRecovery(req->id()); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListDomains(grpc::CallbackServerContext* ctx,
                                                          const v1::ListDomainsRequest* req,
                                                          v1::ListDomainsResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/ListDomains")) return refused;
  auto st = state_();
  return AnswerQuery(ctx, st.get(), resp,
                     [req, st](const StateView& state) { return ListDomainsWith(state, IncidentsOf(*st), *req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetIncident(grpc::CallbackServerContext* ctx,
                                                          const v1::GetIncidentRequest* req,
                                                          v1::GetIncidentResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/GetIncident")) return refused;
  auto st = state_();
  return AnswerQuery(ctx, st.get(), resp->mutable_incident(),
                     [req, st](const StateView& /*state*/) { return GetIncidentWith(IncidentsOf(*st), req->id()); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListIncidents(grpc::CallbackServerContext* ctx,
                                                            const v1::ListIncidentsRequest* req,
                                                            v1::ListIncidentsResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/ListIncidents")) return refused;
  auto st = state_();
  return AnswerQuery(ctx, st.get(), resp,
                     [req, st](const StateView& /*state*/) { return ListIncidentsWith(IncidentsOf(*st), *req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListLinks(grpc::CallbackServerContext* ctx,
                                                        const v1::ListLinksRequest* req, v1::ListLinksResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/ListLinks")) return refused;
  auto st = state_();
  return AnswerQuery(ctx, st.get(), resp, [req, st](const StateView& /*state*/) { return ListLinksWith(*st, *req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetIncidentEvidence(grpc::CallbackServerContext* ctx,
                                                                  const v1::GetIncidentEvidenceRequest* req,
                                                                  v1::GetIncidentEvidenceResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.ClusterService/GetIncidentEvidence")) return refused;
  auto st = state_();
  return AnswerQuery(ctx, st.get(), resp,
                     [req, st](const StateView& /*state*/) -> StatusOr<v1::GetIncidentEvidenceResponse> {
                       const EvidenceRule* rule = st->Attached<EvidenceRule>();
                       if (rule == nullptr) {
                         return Unavailable("no incident evidence on this replica (a standby): ask the leader");
                       }
                       return rule->Get(IncidentsOf(*st), *req);
                     });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ClusterServiceImpl::Watch(grpc::CallbackServerContext* ctx,
                                                                      const grpc::ByteBuffer* req) {
  auto reactor = std::make_shared<WatchReactor>(this, ctx);
  WatchReactor* raw = reactor.get();
  raw->Begin(std::move(reactor), *req);
  return raw;
}

grpc::ServerUnaryReactor* FaultServiceImpl::Report(grpc::CallbackServerContext* ctx, const v1::ReportRequest* req,
                                                   v1::ReportResponse* resp) {
  // Who first: a caller that may not report learns nothing from validation.
  auto who = auth_->Authorize(*ctx, "/clusterd.v1.FaultService/Report");
  if (!who.ok()) return FinishUnary(ctx, who.status());
  // Validated here, once: the writer takes it as is.
  auto valid = Validate(*req);
  if (!valid.ok()) return FinishUnary(ctx, valid.status());
  // A reporter reports, and clears, only under its own name.
  if (!MayReportAs(*who, req->reporter())) {
    return FinishUnary(ctx, auth_->Deny(*who, "/clusterd.v1.FaultService/Report",
                                        "may report only as reporter \"" + ReporterScope(*who) + "\", not \"" +
                                            req->reporter() + "\""));
  }
  return SubmitWriteAs(ctx, engine_, std::move(*who),
                       [valid = *valid, resp](const Principal&, ClusterState& state, Mutation* m) {
                         auto result = state.ApplyReport(valid, m);
                         if (!result.ok()) return result.status();
                         *resp = std::move(*result);
                         return Status::Ok();
                       });
}

}  // namespace clusterd
