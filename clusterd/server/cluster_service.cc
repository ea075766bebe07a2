#include "clusterd/server/cluster_service.h"

#include <memory>
#include <mutex>

#include <boost/asio/post.hpp>

#include "clusterd/server/stream_writer.h"
#include "clusterd/server/submit.h"
#include "common/logging.h"

namespace clusterd {
namespace {

// One Watch stream. It pulls batches from the hub on the watch pool (which may
// read the disk), writes one batch at a time, and goes idle when caught up
// until the hub notifies it. State is under a recursive mutex held while any
// gRPC operation starts (see AgentReactor for why).
class WatchReactor final : public grpc::ServerWriteReactor<v1::WatchResponse>,
                           public std::enable_shared_from_this<WatchReactor> {
 public:
  WatchReactor(ClusterServiceImpl* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx) {}

  void Begin(std::shared_ptr<WatchReactor> self, const v1::WatchRequest& req) {
    self_ = std::move(self);
    std::lock_guard lock(mu_);
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
    self_.reset();
  }

 private:
  Status CheckRangeLocked() {
    const uint64_t compacted = service_->state()->compacted_revision();
    if (after_ < compacted) {
      return OutOfRange("revision " + std::to_string(after_) + " is compacted; the oldest revision available is " +
                        std::to_string(compacted + 1) + " (watch from_revision=" + std::to_string(compacted) + ")");
    }
    return Status::Ok();
  }

  // A watcher that had caught up and now trails the head by more than the
  // limit is ended: it can resume from its revision.
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
    if (LaggingLocked(head)) return;
    ScheduleLocked();
  }

  void ScheduleLocked() {
    if (out_.finishing() || out_.writing() || scheduled_) return;
    scheduled_ = true;
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
      v1::WatchResponse resp;
      for (const auto& e : *batch) {
        if (filter_.Matches(*e)) *resp.add_events() = *e;
        after = e->revision();
      }
      std::lock_guard lock(mu_);
      after_ = after;
      if (resp.events_size() > 0) {
        scheduled_ = false;
        if (out_.finishing()) return;
        resp.set_revision(after);
        if (service_->watch_events_sent) service_->watch_events_sent->Inc(resp.events_size());
        out_.Push(std::move(resp));
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
  bool live_ = false;
  bool scheduled_ = false;
  // One batch in flight at a time: the queue never holds more than one.
  StreamWriter<WatchReactor, v1::WatchResponse> out_{this};
};

}  // namespace

ClusterServiceImpl::ClusterServiceImpl(const ClusterState* state, WatchHub* hub, boost::asio::thread_pool* watch_pool,
                                       WatchOptions options, MetricsRegistry* metrics)
    : state_(state), hub_(hub), pool_(watch_pool), options_(options) {
  if (metrics) {
    watch_ended_lagging = &metrics->AddCounter("clusterd_watch_lagging_ended_total",
                                               "Watch streams ended because they fell too far behind.");
    watch_events_sent = &metrics->AddCounter("clusterd_watch_events_sent_total", "Events written to watchers.");
    metrics->AddCallbackGauge("clusterd_watchers", "Open Watch streams.",
                              [this] { return static_cast<double>(hub_->watcher_count()); });
  }
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetSummary(grpc::CallbackServerContext* ctx,
                                                         const v1::GetSummaryRequest*, v1::GetSummaryResponse* resp) {
  return AnswerRead(ctx, state_, [resp](const ClusterState& state) {
    *resp = state.GetSummary();
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListNodes(grpc::CallbackServerContext* ctx,
                                                        const v1::ListNodesRequest* req, v1::ListNodesResponse* resp) {
  return AnswerQuery(ctx, state_, resp, [req](const ClusterState& state) { return state.ListNodes(*req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetNode(grpc::CallbackServerContext* ctx, const v1::GetNodeRequest* req,
                                                      v1::GetNodeResponse* resp) {
  return AnswerQuery(ctx, state_, resp, [req](const ClusterState& state) { return state.GetNode(*req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListFaults(grpc::CallbackServerContext* ctx,
                                                         const v1::ListFaultsRequest* req,
                                                         v1::ListFaultsResponse* resp) {
  return AnswerQuery(ctx, state_, resp, [req](const ClusterState& state) { return state.ListFaults(*req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListRecoveries(grpc::CallbackServerContext* ctx,
                                                             const v1::ListRecoveriesRequest* req,
                                                             v1::ListRecoveriesResponse* resp) {
  return AnswerQuery(ctx, state_, resp, [req](const ClusterState& state) { return state.ListRecoveries(*req); });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetRecovery(grpc::CallbackServerContext* ctx,
                                                          const v1::GetRecoveryRequest* req,
                                                          v1::GetRecoveryResponse* resp) {
  return AnswerQuery(ctx, state_, resp->mutable_recovery(),
                     [req](const ClusterState& state) { return state.GetRecovery(req->id()); });
}

grpc::ServerWriteReactor<v1::WatchResponse>* ClusterServiceImpl::Watch(grpc::CallbackServerContext* ctx,
                                                                       const v1::WatchRequest* req) {
  auto reactor = std::make_shared<WatchReactor>(this, ctx);
  WatchReactor* raw = reactor.get();
  raw->Begin(std::move(reactor), *req);
  return raw;
}

grpc::ServerUnaryReactor* FaultServiceImpl::Report(grpc::CallbackServerContext* ctx, const v1::ReportRequest* req,
                                                   v1::ReportResponse* resp) {
  if (Status st = ValidateReport(*req); !st.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpc(st));
    return reactor;
  }
  return SubmitWrite(ctx, engine_, [req, resp](ClusterState& state, Mutation* m) {
    auto result = state.ApplyReport(*req, m);
    if (!result.ok()) return result.status();
    *resp = std::move(*result);
    return Status::Ok();
  });
}

}  // namespace clusterd
