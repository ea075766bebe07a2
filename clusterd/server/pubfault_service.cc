#include "clusterd/server/pubfault_service.h"

#include <set>
#include <string_view>

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
                                         PubFaultCodeTable table, PubFaultOptions options, MetricsRegistry* metrics)
    : engine_(engine),
      auth_(auth),
      table_(std::move(table)),
      options_(std::move(options)),
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
  }
}

void PubFaultServiceImpl::Count(int32_t code) {
  auto it = replies_.find(code);
  if (it != replies_.end()) it->second->Inc();
}

grpc::ServerUnaryReactor* PubFaultServiceImpl::SendPublicFault(grpc::CallbackServerContext* ctx,
                                                               const ::PublicFaultRequest* req, ::RespStatus* resp) {
  auto who = auth_->Authorize(*ctx, kMethod);
  if (!who.ok()) return FinishUnary(ctx, who.status());
  auto plan = std::make_shared<PubFaultPlan>();
  PubFaultVerdict verdict = PlanPublicFaults(*req, table_, options_, plan.get());
  auto answer = [this, ctx, resp](int32_t code, std::string info) {
    resp->set_code(code);
    resp->set_info(std::move(info));
    Count(code);
    return FinishUnary(ctx, Status::Ok());
  };
  if (verdict.code != kPubFaultOk) return answer(verdict.code, verdict.info);
  // A reporter sends under its own resource name only (an admin as any):
  // checked once the resource is known to be one ClusterD accepts.
  if (!MayReportAs(*who, req->resource())) {
    return FinishUnary(ctx, auth_->Deny(*who, kMethod,
                                        "may send public faults only as resource \"" + ReporterScope(*who) +
                                            "\", not \"" + req->resource() + "\""));
  }
  if (!limiter_.Allow(req->resource())) {
    return answer(kPubFaultRefused, "resource " + req->resource() + " is over its rate limit; retry later");
  }
  auto* reactor = ctx->DefaultReactor();
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
          resp->set_code(code);
          resp->set_info(info);
          Count(code);
          reactor->Finish(grpc::Status::OK);
        };
      });
  // The store cannot take writes (disk below its reserve, shutting down): a
  // gRPC error, so that the sender retries as it would for a lost server.
  if (!submitted.ok()) reactor->Finish(ToGrpc(submitted));
  return reactor;
}

}  // namespace clusterd
