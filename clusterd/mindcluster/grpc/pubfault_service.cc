#include "clusterd/mindcluster/grpc/pubfault_service.h"

#include <set>
#include <string_view>
#include <utility>

#include "common/logging.h"

namespace clusterd {
namespace {

constexpr std::string_view kMethod = "/PubFault/SendPublicFault";

// The reasons, each once ("node X is not registered" comes once per device
// of a fault), cut at max_bytes.
std::string Join(const std::vector<std::string>& parts, size_t max_bytes) {
  std::string out;
  std::set<std::string_view> said;
  for (const auto& p : parts) {
    if (!said.insert(p).second) continue;
    if (!out.empty()) out += "; ";
    out += p;
    if (out.size() > max_bytes) {
      out.resize(max_bytes);
      out += " ...";
      break;
    }
  }
  return out;
}

}  // namespace

PubFaultServiceImpl::PubFaultServiceImpl(Engine* engine, const Authenticator* auth, const Clock* clock,
                                         PubFaultCodeTable table, PubFaultOptions options, MetricsRegistry* metrics,
                                         Hooks hooks)
    : engine_(engine),
      auth_(auth),
      table_(std::move(table)),
      options_(std::move(options)),
      hooks_(std::move(hooks)),
      limiter_(clock, options_.rate_per_second, options_.burst, options_.resources) {
  if (metrics != nullptr) {
    const char* help = "MindCluster PubFault.SendPublicFault replies, by RespStatus code.";
    for (int32_t code : {kPubFaultOk, kPubFaultInvalid, kPubFaultRefused, int32_t{500}}) {
      replies_[code] = &metrics->AddCounter("clusterd_pubfault_requests_total", help, {{"code", std::to_string(code)}});
    }
    faults_applied_ =
        &metrics->AddCounter("clusterd_pubfault_faults_total", "Public faults by outcome.", {{"outcome", "applied"}});
    faults_dropped_ =
        &metrics->AddCounter("clusterd_pubfault_faults_total", "Public faults by outcome.", {{"outcome", "dropped"}});
    const char* refused_help =
        "PubFault requests refused with 410 for load: over their resource's rate limit, "
        "or the planning queue full.";
    rate_limited_ = &metrics->AddCounter("clusterd_pubfault_refused_total", refused_help, {{"reason", "rate_limit"}});
    busy_ = &metrics->AddCounter("clusterd_pubfault_refused_total", refused_help, {{"reason", "busy"}});
    queue_depth_ = &metrics->AddGauge("clusterd_pubfault_queued",
                                      "PubFault requests waiting to be validated (at most pubfault max_queued).");
  }
  worker_ = std::thread([this] { RunWorker(); });
}

PubFaultServiceImpl::~PubFaultServiceImpl() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

size_t PubFaultServiceImpl::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void PubFaultServiceImpl::Count(int32_t code) {
  auto it = replies_.find(code);
  if (it != replies_.end()) it->second->Inc();
}

void PubFaultServiceImpl::Answer(grpc::ServerUnaryReactor* reactor, ::RespStatus* resp, int32_t code,
                                 std::string info) {
  resp->set_code(code);
  resp->set_info(std::move(info));
  Count(code);
  reactor->Finish(grpc::Status::OK);
}

grpc::ServerUnaryReactor* PubFaultServiceImpl::SendPublicFault(grpc::CallbackServerContext* ctx,
                                                               const ::PublicFaultRequest* req, ::RespStatus* resp) {
  auto who = auth_->Authorize(*ctx, kMethod);
  if (!who.ok()) return FinishUnary(ctx, who.status());
  auto* reactor = ctx->DefaultReactor();
  PubFaultVerdict verdict = CheckPubFaultResource(*req, options_);
  if (verdict.code != kPubFaultOk) {
    Answer(reactor, resp, verdict.code, std::move(verdict.info));
    return reactor;
  }
  // A reporter sends under its own resource name only (an admin as any):
  // checked once the resource is known to be one ClusterD accepts.
  if (!MayReportAs(*who, req->resource())) {
    reactor->Finish(ToGrpc(auth_->Deny(
        *who, kMethod,
        "may send public faults only as resource \"" + ReporterScope(*who) + "\", not \"" + req->resource() + "\"")));
    return reactor;
  }
  // Charged before anything that costs more than a look at the request: a
  // request refused as invalid takes its token too.
  if (!limiter_.Allow(req->resource())) {
    if (rate_limited_) rate_limited_->Inc();
    Answer(reactor, resp, kPubFaultRefused, "resource " + req->resource() + " is over its rate limit; retry later");
    return reactor;
  }
  verdict = CheckPubFaultRequest(*req, options_);
  if (verdict.code != kPubFaultOk) {
    Answer(reactor, resp, verdict.code, std::move(verdict.info));
    return reactor;
  }
  {
    std::unique_lock lock(mu_);
    if (!stopping_ && queue_.size() < options_.max_queued) {
      queue_.push_back(Pending{ctx, req, resp, reactor});
      if (queue_depth_) queue_depth_->Set(static_cast<double>(queue_.size()));
      lock.unlock();
      wake_.notify_one();
      return reactor;
    }
  }
  if (busy_) busy_->Inc();
  Answer(reactor, resp, kPubFaultRefused,
         "busy: " + std::to_string(options_.max_queued) +
             " public-fault requests are already waiting to be validated (the most that may wait); retry later");
  return reactor;
}

void PubFaultServiceImpl::RunWorker() {
  for (;;) {
    Pending p;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every queued call answered
      p = queue_.front();
      queue_.pop_front();
      if (queue_depth_) queue_depth_->Set(static_cast<double>(queue_.size()));
    }
    Plan(p);
  }
}

void PubFaultServiceImpl::Plan(const Pending& p) {
  if (hooks_.before_plan) hooks_.before_plan();
  // The caller gave up, or the server is shutting down and cancelled it: no
  // reason to validate.
  if (p.ctx->IsCancelled()) {
    p.reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before it was validated"));
    return;
  }
  auto plan = std::make_shared<PubFaultPlan>();
  PubFaultVerdict verdict = PlanPublicFaults(*p.req, table_, options_, plan.get());
  if (verdict.code != kPubFaultOk) {
    Answer(p.reactor, p.resp, verdict.code, std::move(verdict.info));
    return;
  }
  auto* reactor = p.reactor;
  auto* resp = p.resp;
  Status submitted =
      engine_->SubmitWrite([this, reactor, resp, plan](ClusterState& state, Mutation* m) -> Engine::Done {
        auto applied = state.ApplyPublicFaults(*plan, options_, m);
        return [this, reactor, resp, plan, applied = std::move(applied)] {
          std::vector<std::string> dropped = plan->dropped;
          int32_t code = kPubFaultOk;
          std::string info;
          if (!applied.ok()) {
            code = applied.status().code() == StatusCode::kResourceExhausted ? kPubFaultRefused : kPubFaultInvalid;
            info = applied.status().message();
          } else {
            dropped.insert(dropped.end(), applied->dropped.begin(), applied->dropped.end());
            if (faults_applied_) faults_applied_->Inc(applied->applied);
            if (applied->applied == 0) {
              code = kPubFaultInvalid;
              info = "no fault applied: " + Join(dropped, 2048);
            } else {
              info = dropped.empty() ? "ok" : "accepted; dropped: " + Join(dropped, 2048);
            }
          }
          if (faults_dropped_) faults_dropped_->Inc(dropped.size());
          Answer(reactor, resp, code, std::move(info));
        };
      });
  // The store cannot take writes (disk below its reserve, shutting down): a
  // gRPC error, so that the sender retries as it would for a lost server.
  if (!submitted.ok()) reactor->Finish(ToGrpc(submitted));
}

}  // namespace clusterd
