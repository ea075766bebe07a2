#include "clusterd/recovery/convert.h"

#include <google/protobuf/util/time_util.h>

#include "common/time_proto.h"

namespace clusterd::recovery {
namespace {

using google::protobuf::util::TimeUtil;

Duration ToDuration(const google::protobuf::Duration& d) {
  return std::chrono::nanoseconds(TimeUtil::DurationToNanoseconds(d));
}

JobStatus FromProto(v1::JobState s) {
  switch (s) {
    case v1::JOB_STATE_PENDING: return JobStatus::kPending;
    case v1::JOB_STATE_RECOVERING: return JobStatus::kRecovering;
    case v1::JOB_STATE_SUCCEEDED: return JobStatus::kSucceeded;
    case v1::JOB_STATE_FAILED: return JobStatus::kFailed;
    default: return JobStatus::kRunning;
  }
}

}  // namespace

Strategy FromProto(v1::RecoveryStrategy s) {
  switch (s) {
    case v1::RECOVERY_STRATEGY_STEP_RETRY: return Strategy::kStepRetry;
    case v1::RECOVERY_STRATEGY_PROCESS_RESTART: return Strategy::kProcessRestart;
    case v1::RECOVERY_STRATEGY_POD_RESCHEDULE: return Strategy::kPodReschedule;
    case v1::RECOVERY_STRATEGY_JOB_RESCHEDULE: return Strategy::kJobReschedule;
    case v1::RECOVERY_STRATEGY_SCALE_IN: return Strategy::kScaleIn;
    default: return Strategy::kFail;
  }
}

v1::RecoveryStrategy ToProto(Strategy s) {
  switch (s) {
    case Strategy::kStepRetry: return v1::RECOVERY_STRATEGY_STEP_RETRY;
    case Strategy::kProcessRestart: return v1::RECOVERY_STRATEGY_PROCESS_RESTART;
    case Strategy::kPodReschedule: return v1::RECOVERY_STRATEGY_POD_RESCHEDULE;
    case Strategy::kJobReschedule: return v1::RECOVERY_STRATEGY_JOB_RESCHEDULE;
    case Strategy::kScaleIn: return v1::RECOVERY_STRATEGY_SCALE_IN;
    case Strategy::kFail: return v1::RECOVERY_STRATEGY_FAIL;
  }
  return v1::RECOVERY_STRATEGY_FAIL;
}

JobPolicy FromProto(const v1::RecoveryPolicy& p) {
  JobPolicy out;
  if (p.allowed_strategies_size() > 0) {
    out.allowed.clear();
    for (int s : p.allowed_strategies()) out.allowed.insert(FromProto(static_cast<v1::RecoveryStrategy>(s)));
  }
  for (const auto& t : p.step_timeouts()) out.step_timeouts[FromProto(t.strategy())] = ToDuration(t.timeout());
  if (p.has_max_retries_per_job()) out.max_retries_per_job = static_cast<int>(p.max_retries_per_job());
  if (p.has_max_retries_per_node()) out.max_retries_per_node = static_cast<int>(p.max_retries_per_node());
  for (const auto& w : p.silences()) {
    SilenceWindow window;
    window.code = w.code();
    if (w.has_until()) window.until = FromTimestamp(w.until());
    out.silences.push_back(std::move(window));
  }
  if (p.has_hold_down()) out.hold_down = ToDuration(p.hold_down());
  if (p.has_escalation_window()) out.escalation_window = ToDuration(p.escalation_window());
  if (p.min_replicas() > 0) out.min_replicas = static_cast<int>(p.min_replicas());
  return out;
}

Job FromProto(const v1::Job& job) {
  Job out;
  out.id = job.id();
  out.kind = job.kind() == v1::JOB_KIND_INFERENCE ? JobKind::kInference : JobKind::kTraining;
  for (const auto& p : job.placement()) {
    RankPlacement placement;
    placement.node = p.node();
    if (p.has_device_id()) placement.device = p.device_id();
    placement.any_device = p.any_device();
    out.placement[static_cast<int>(p.rank())] = std::move(placement);
  }
  out.ranks_per_replica = job.policy().ranks_per_replica() > 0 ? static_cast<int>(job.policy().ranks_per_replica()) : 1;
  out.ranks_per_device = job.ranks_per_device() > 0 ? static_cast<int>(job.ranks_per_device()) : 1;
  out.policy = FromProto(job.policy());
  out.status = FromProto(job.state());
  out.Index();
  return out;
}

FaultView FromProto(const v1::Fault& f) {
  FaultView out;
  out.id = f.id();
  out.node = f.node();
  if (f.has_device_id()) out.device = f.device_id();
  out.code = f.code();
  out.level = f.level();
  out.source = f.source();
  out.active = f.state() == v1::FAULT_STATE_ACTIVE;
  // Hold-down counts from the current activation; older records lack it.
  out.first_seen = FromTimestamp(f.has_activated_time() ? f.activated_time() : f.first_seen());
  if (f.has_cleared_time() && !out.active) out.cleared_at = FromTimestamp(f.cleared_time());
  return out;
}

}  // namespace clusterd::recovery
