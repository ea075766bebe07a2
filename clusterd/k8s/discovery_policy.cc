// Kubernetes job discovery, the recovery policy annotations and the job kind
// (discovery.h: ParsePolicyAnnotations, ParseJobKind). Any invalid value
// voids the whole annotation policy: never half-applied.
#include "clusterd/k8s/discovery.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <set>
#include <tuple>
#include <utility>

#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/api_input.h"
#include "clusterd/state/fault_table.h"
#include "common/duration.h"
#include "common/levels.h"
#include "common/validation.h"

namespace clusterd::k8s {

using input::ParseUnsigned;
using input::Printable;
using input::Quoted;
using input::SplitComma;
using input::Trim;
using input::Upper;
using nlohmann::json;

namespace {

constexpr size_t kMaxPolicyValueBytes = 4096;  // one policy annotation's value
constexpr size_t kMaxPolicyKeys = 64;
constexpr size_t kMaxSilences = 64;
constexpr uint32_t kMaxRetries = 1'000'000;
constexpr uint32_t kMaxReplicaCount = 16'777'216;

StatusOr<google::protobuf::Duration> ParseProtoDuration(const std::string& key, const std::string& value,
                                                        bool positive) {
  auto d = ParseDuration(Trim(value));
  if (!d.ok()) return InvalidArgument(key + ": " + d.status().message());
  if (positive && d->count() <= 0) return InvalidArgument(key + ": must be positive");
  google::protobuf::Duration out;
  out.set_seconds(d->count() / 1'000'000'000);
  out.set_nanos(static_cast<int32_t>(d->count() % 1'000'000'000));
  return out;
}

std::optional<v1::RecoveryStrategy> ParseStrategyName(std::string_view text) {
  std::string upper = Upper(Trim(text));
  if (upper.rfind("RECOVERY_STRATEGY_", 0) != 0) upper = "RECOVERY_STRATEGY_" + upper;
  v1::RecoveryStrategy s;
  if (!v1::RecoveryStrategy_Parse(upper, &s) || s == v1::RECOVERY_STRATEGY_UNSPECIFIED) return std::nullopt;
  return s;
}

Status SetCount(const std::string& key, const std::string& value, uint32_t max, uint32_t* out) {
  auto v = ParseUnsigned(Trim(value), max);
  if (!v)
    return InvalidArgument(key + ": " + Quoted(value) + " is not a whole number from 0 to " + std::to_string(max));
  *out = static_cast<uint32_t>(*v);
  return Status::Ok();
}

}  // namespace

std::optional<v1::JobKind> ParseJobKind(std::string_view text) {
  std::string upper = Upper(Trim(text));
  if (upper.rfind("JOB_KIND_", 0) != 0) upper = "JOB_KIND_" + upper;
  v1::JobKind k;
  if (!v1::JobKind_Parse(upper, &k) || k == v1::JOB_KIND_UNSPECIFIED) return std::nullopt;
  return k;
}

StatusOr<v1::RecoveryPolicy> ParsePolicyAnnotations(const std::map<std::string, std::string>& annotations,
                                                    const DiscoveryOptions& opts, std::vector<std::string>* warnings) {
  v1::RecoveryPolicy policy;
  if (opts.policy_prefix.empty()) return policy;
  const std::string& prefix = opts.policy_prefix;
  size_t keys = 0;
  std::set<v1::RecoveryStrategy> timed;
  for (const auto& [full_key, value] : annotations) {
    if (full_key.rfind(prefix, 0) != 0 || full_key == opts.job_kind_label) continue;
    if (++keys > kMaxPolicyKeys)
      return InvalidArgument("more than " + std::to_string(kMaxPolicyKeys) + " " + prefix + " annotations");
    const std::string key = Printable(full_key, 128);
    if (value.size() > kMaxPolicyValueBytes) return InvalidArgument(key + ": value longer than 4096 bytes");
    const std::string_view name = std::string_view(full_key).substr(prefix.size());
    if (name == "allowed-strategies") {
      std::set<v1::RecoveryStrategy> seen;
      for (std::string_view item : SplitComma(value)) {
        auto s = ParseStrategyName(item);
        if (!s) {
          return InvalidArgument(key + ": " + Quoted(item) +
                                 " is not a strategy (STEP_RETRY, PROCESS_RESTART, POD_RESCHEDULE, JOB_RESCHEDULE, "
                                 "SCALE_IN, FAIL)");
        }
        if (seen.insert(*s).second) policy.add_allowed_strategies(*s);
      }
    } else if (name == "max-retries-per-job" || name == "max-retries-per-node") {
      uint32_t v = 0;
      CLUSTERD_RETURN_IF_ERROR(SetCount(key, value, kMaxRetries, &v));
      if (name == "max-retries-per-job") {
        policy.set_max_retries_per_job(v);
      } else {
        policy.set_max_retries_per_node(v);
      }
    } else if (name == "hold-down" || name == "escalation-window" || name == "agent-attach-grace") {
      auto d = ParseProtoDuration(key, value, /*positive=*/false);
      if (!d.ok()) return d.status();
      *(name == "hold-down"           ? policy.mutable_hold_down()
        : name == "escalation-window" ? policy.mutable_escalation_window()
                                      : policy.mutable_agent_attach_grace()) = *d;
    } else if (name == "require-agent") {
      const std::string_view v = Trim(value);
      if (v != "true" && v != "false") return InvalidArgument(key + ": " + Quoted(value) + " is not true or false");
      policy.set_require_agent(v == "true");
    } else if (name == "min-replicas" || name == "ranks-per-replica") {
      uint32_t v = 0;
      CLUSTERD_RETURN_IF_ERROR(SetCount(key, value, kMaxReplicaCount, &v));
      if (name == "min-replicas") {
        policy.set_min_replicas(v);
      } else {
        policy.set_ranks_per_replica(v);
      }
    } else if (name == "silences") {
      std::set<std::string> seen;
      for (std::string_view item : SplitComma(value)) {
        std::string code(item);
        std::string bare = code;
        if (!bare.empty() && bare.back() == '*') bare.pop_back();
        if (Status st = ValidateCode(key + " code " + Quoted(item), bare); !st.ok()) return st;
        if (!seen.insert(code).second) continue;
        if (seen.size() > kMaxSilences) return InvalidArgument(key + ": more than 64 codes");
        policy.add_silences()->set_code(code);
      }
    } else if (name.rfind("step-timeout.", 0) == 0) {
      auto s = ParseStrategyName(name.substr(13));
      if (!s) return InvalidArgument(key + ": " + Quoted(name.substr(13)) + " is not a strategy");
      if (!timed.insert(*s).second) {
        return InvalidArgument(key + ": a second step timeout for " + v1::RecoveryStrategy_Name(*s));
      }
      auto d = ParseProtoDuration(key, value, /*positive=*/true);
      if (!d.ok()) return d.status();
      auto* t = policy.add_step_timeouts();
      t->set_strategy(*s);
      *t->mutable_timeout() = *d;
    } else if (warnings) {
      warnings->push_back("unknown policy annotation " + key + " ignored");
    }
  }
  return policy;
}

}  // namespace clusterd::k8s
