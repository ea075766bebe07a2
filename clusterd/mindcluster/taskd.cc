#include "clusterd/mindcluster/taskd.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/signal.h"
#include "clusterd/recovery/types.h"
#include "common/config_util.h"

namespace clusterd::mindcluster {
namespace {

std::string Trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

std::string LabelOf(const v1::Job& job, std::string_view key) {
  auto it = job.labels().find(std::string(key));
  return it == job.labels().end() ? std::string() : Trimmed(it->second);
}

// A FaultRank's rankId: plain decimal digits that fit a rank.
std::optional<uint32_t> RankIdOf(const ::FaultRank& f) {
  const std::string& id = f.rankid();
  uint32_t rank = 0;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), rank);
  if (id.empty() || ec != std::errc() || end != id.data() + id.size()) return std::nullopt;
  return rank;
}

// TaskD's fault types a step retry handles: "0" (UCE) and "2" (HCCL).
bool RetryType(const std::string& type) { return type == "0" || type == "2"; }

bool Contains(const std::vector<std::string>& items, std::string_view s) {
  return std::find(items.begin(), items.end(), s) != items.end();
}

}  // namespace

RecoverOptIn JobRecoverStrategies(const v1::Job& job) {
  RecoverOptIn out;
  const std::string enable = LabelOf(job, kLabelProcessRecoverEnable);
  if (enable != "on" && enable != "pause") {
    out.code = kRecoverNotEnabled;
    out.info = "job " + job.id() + " is not opted in to process recovery (its PodGroup's " +
               std::string(kKeyProcessRecoverEnable) + " is \"" + enable +
               "\"; ascend-operator sets it on for a job with a recover-strategy annotation)";
    return out;
  }
  std::set<std::string> listed;
  const std::string value = LabelOf(job, kLabelRecoverStrategy);
  for (size_t start = 0; start <= value.size();) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    listed.insert(Trimmed(std::string_view(value).substr(start, comma - start)));
    start = comma + 1;
  }
  for (std::string_view s :
       {kStrategyRetry, kStrategyRecoverInPlace, kStrategyRecover, kStrategyElastic, kStrategyDump, kStrategyExit}) {
    if (listed.count(std::string(s))) out.strategies.emplace_back(s);
  }
  const std::string scheduling = LabelOf(job, kLabelFaultScheduling);
  if (scheduling == "grace" || scheduling == "force") out.strategies.emplace_back("job-rescheduling");
  if (LabelOf(job, kLabelPodRescheduling) == "on") out.strategies.emplace_back("pod-rescheduling");
  if (!Contains(out.strategies, kStrategyExit)) out.strategies.emplace_back(kStrategyExit);
  return out;
}

std::vector<std::string> NodeRanksOf(const v1::Job& job, const std::vector<uint32_t>& ranks) {
  struct Node {
    uint32_t lowest = UINT32_MAX;
    uint32_t count = 0;
  };
  std::map<std::string, Node> nodes;
  std::map<uint32_t, const std::string*> node_of;
  for (const auto& p : job.placement()) {
    Node& n = nodes[p.node()];
    n.lowest = std::min(n.lowest, p.rank());
    ++n.count;
  }
  for (const auto& p : job.placement()) node_of[p.rank()] = &nodes.find(p.node())->first;
  std::set<uint32_t> pod_ranks;
  for (uint32_t r : ranks) {
    auto it = node_of.find(r);
    if (it == node_of.end()) continue;
    const Node& n = nodes[*it->second];
    pod_ranks.insert(n.lowest / std::max<uint32_t>(n.count, 1));
  }
  std::vector<std::string> out;
  out.reserve(pod_ranks.size());
  for (uint32_t r : pod_ranks) out.push_back(std::to_string(r));
  return out;
}

TaskdJobRef TaskdJobRefOf(const v1::Job& job) {
  // Discovery's labels (clusterd/k8s/discovery.h: kLabelNamespace, kLabelName,
  // kLabelPodGroup; the tests hold the two to the same names).
  return {job.id(), LabelOf(job, "k8s.namespace"), LabelOf(job, "k8s.name"), LabelOf(job, "k8s.podgroup")};
}

std::string ResetConfigJson(std::string_view current, ResetOp op, const std::vector<ResetRank>& ranks, int64_t now_s) {
  int64_t retry_time = 0, graceful_exit = 0;
  bool restart_fault_process = false;
  const auto doc = nlohmann::json::parse(current, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object()) {
    auto integer = [&](const char* key, int64_t* out) {
      if (auto it = doc.find(key); it != doc.end() && it->is_number_integer()) *out = it->get<int64_t>();
    };
    integer("RetryTime", &retry_time);
    integer("GracefulExit", &graceful_exit);
    if (auto it = doc.find("RestartFaultProcess"); it != doc.end() && it->is_boolean()) {
      restart_fault_process = it->get<bool>();
    }
  }
  std::string list = "[";
  if (op == ResetOp::kFaults || op == ResetOp::kFaultsInPlace) {
    restart_fault_process = op == ResetOp::kFaultsInPlace;
    for (const ResetRank& r : ranks) {
      std::string codes, hex;
      for (const std::string& code : r.codes) {
        int64_t value = 0;
        const auto [end, ec] = std::from_chars(code.data(), code.data() + code.size(), value, 16);
        if (code.empty() || code.size() > 15 || ec != std::errc() || end != code.data() + code.size()) continue;
        codes += (codes.empty() ? "" : ",") + std::to_string(value);
        hex += (hex.empty() ? "" : ",") + code;
      }
      const std::string policy = nlohmann::json(r.policy).dump();
      if (list.size() > 1) list += ',';
      list += R"({"RankId":)" + std::to_string(r.rank) + R"(,"LogicId":)" + std::to_string(r.logic_id) +
              R"(,"Status":"fault","Policy":)" + policy + R"(,"InitialPolicy":)" + policy + R"(,"ErrorCode":[)" +
              codes + R"(],"ErrorCodeHex":)" + nlohmann::json(hex).dump() + "}";
    }
  }
  list += ']';
  return R"({"RankList":)" + list + R"(,"UpdateTime":)" + std::to_string(now_s) + R"(,"RetryTime":)" +
         std::to_string(retry_time + (op == ResetOp::kRestartAll ? 1 : 0)) + R"(,"FaultFlushing":)" +
         (op == ResetOp::kFlushing ? "true" : "false") + R"(,"GracefulExit":)" + std::to_string(graceful_exit) +
         R"(,"RestartFaultProcess":)" + (restart_fault_process ? "true" : "false") + "}";
}

std::vector<v1::ReportRequest> ProcessFaultReports(const v1::Job& job,
                                                   const google::protobuf::RepeatedPtrField<::FaultRank>& ranks,
                                                   std::string* info) {
  std::map<uint32_t, const v1::RankPlacement*> placed;
  for (const auto& p : job.placement()) placed.emplace(p.rank(), &p);
  std::map<uint32_t, std::string> wanted;  // rank -> type, deduplicated
  std::vector<std::string> unknown;
  size_t over = 0;
  for (const auto& f : ranks) {
    const auto rank = RankIdOf(f);
    auto it = rank ? placed.find(*rank) : placed.end();
    if (it == placed.end()) {
      if (unknown.size() < 8) unknown.push_back(f.rankid());
      continue;
    }
    if (wanted.size() >= kMaxProcessFaultRanks && !wanted.count(*rank)) {
      ++over;
      continue;
    }
    wanted.emplace(*rank, f.faulttype());
  }
  std::vector<v1::ReportRequest> out;
  out.reserve(wanted.size());
  for (const auto& [rank, type] : wanted) {
    const v1::RankPlacement& p = *placed.at(rank);
    v1::ReportRequest r;
    r.set_reporter(std::string(kTaskdReporter));
    r.set_id(job.id() + "/rank/" + std::to_string(rank));
    r.set_node(p.node());
    if (p.has_device_id()) r.set_device_id(p.device_id());
    const bool retry = RetryType(type);
    r.set_code(type == "0" ? "TASKD_UCE" : type == "2" ? "TASKD_HCCL" : "TASKD_PROCESS_FAULT");
    r.set_level(retry ? v1::FAULT_LEVEL_RESTART_REQUEST : v1::FAULT_LEVEL_RESTART_BUSINESS);
    r.set_action(v1::TRANSITION_ACTION_RAISE);
    r.set_message("TaskD reports a process fault of rank " + std::to_string(rank) + " (faultType \"" +
                  type.substr(0, 16) + "\")");
    out.push_back(std::move(r));
  }
  std::string text = std::to_string(out.size()) + " rank(s) reported";
  if (!unknown.empty()) {
    text += "; not ranks of the job: ";
    for (size_t i = 0; i < unknown.size(); ++i) text += (i ? "," : "") + unknown[i].substr(0, 16);
  }
  if (over > 0)
    text += "; " + std::to_string(over) + " past the " + std::to_string(kMaxProcessFaultRanks) + " per report";
  if (info != nullptr) *info = std::move(text);
  return out;
}

std::string ResumeStage(const v1::Recovery& recovery, uint32_t index) {
  if (index >= static_cast<uint32_t>(recovery.steps_size())) return "";
  const std::string& message = recovery.steps(static_cast<int>(index)).message();
  if (message.rfind(TaskdJob::kStagePrefix, 0) == 0) return message;
  for (int i = static_cast<int>(index) - 1; i >= 0; --i) {
    const v1::RecoveryStep& before = recovery.steps(i);
    if (before.command() == v1::JOB_COMMAND_UNSPECIFIED) continue;  // an actuator's step
    const bool stopped =
        before.state() == v1::STEP_STATE_SUCCEEDED &&
        (before.command() == v1::JOB_COMMAND_PAUSE ||
         (before.command() == v1::JOB_COMMAND_STOP && before.strategy() != v1::RECOVERY_STRATEGY_JOB_RESCHEDULE));
    if (!stopped) return "";
    if (before.message().rfind(TaskdJob::kStagePrefix, 0) == 0) return before.message();
    return std::string(TaskdJob::kStagePrefix) + std::string(TaskdJob::PhaseName(TaskdJob::Phase::kStopped));
  }
  return "";
}

RankFaults RankFaultsOf(const v1::Job& job, const std::vector<v1::Fault>& faults) {
  RankFaults out;
  for (const v1::Fault& f : faults) {
    for (const auto& p : job.placement()) {
      if (p.node() != f.node()) continue;
      // The one rule (a rank holding devices not known, any_device, is hit
      // by any chip fault of its node).
      if (!recovery::FaultHitsRank(f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt,
                                   p.has_device_id() ? std::optional<uint32_t>(p.device_id()) : std::nullopt,
                                   p.any_device())) {
        continue;
      }
      RankFault& r = out[p.rank()];
      if (r.codes.size() < 16 && std::find(r.codes.begin(), r.codes.end(), f.code()) == r.codes.end()) {
        r.codes.push_back(f.code());
      }
      r.level = std::max(r.level, f.level());
      r.hccl = r.hccl || f.code() == "TASKD_HCCL" || f.source() == v1::FAULT_SOURCE_NETWORK;
    }
  }
  return out;
}

std::map<std::string, std::string> PodFaultTypes(const v1::Job& job,
                                                 const google::protobuf::RepeatedPtrField<::FaultRank>& ranks) {
  std::map<uint32_t, const std::string*> node_of;
  for (const auto& p : job.placement()) node_of.emplace(p.rank(), &p.node());
  std::map<std::string, std::string> out;
  for (const auto& f : ranks) {
    const auto rank = RankIdOf(f);
    auto it = rank ? node_of.find(*rank) : node_of.end();
    if (it == node_of.end()) continue;
    const bool retry = RetryType(f.faulttype());
    std::string& type = out[*it->second];
    if (!retry) {
      type = "software";
    } else if (type.empty()) {
      type = "retry-fault";
    }
  }
  return out;
}

TaskdJob::TaskdJob(std::string job_id, std::vector<std::string> strategies, TaskdWaits waits)
    : job_id_(std::move(job_id)), strategies_(std::move(strategies)), waits_(waits) {}

std::string_view TaskdJob::PhaseName(Phase p) {
  switch (p) {
    case Phase::kIdle: return "idle";
    case Phase::kAwaitPreExit: return "await-process-fault";
    case Phase::kAwaitStop: return "await-stop-complete";
    case Phase::kStopped: return "stopped";
    case Phase::kAwaitStrategy: return "await-recover-strategy";
    case Phase::kChoosing: return "choosing-strategy";
    case Phase::kAwaitStatus: return "await-recover-status";
  }
  return "?";
}

std::string_view TaskdJob::TargetOf(const v1::Command& command) {
  switch (command.kind()) {
    case v1::JOB_COMMAND_RETRY_STEP: return kStrategyRetry;
    case v1::JOB_COMMAND_RESTART_PROCESSES: return kStrategyRecoverInPlace;
    case v1::JOB_COMMAND_RESUME: return kStrategyRecover;
    case v1::JOB_COMMAND_SCALE_IN: return kStrategyElastic;
    case v1::JOB_COMMAND_STOP:
      // The job restarts after it: TaskD exits (after a dump if it can).
      return command.strategy() == v1::RECOVERY_STRATEGY_JOB_RESCHEDULE ? kStrategyExit : "";
    default: return "";
  }
}

std::string_view TaskdJob::FollowUpOf(const v1::Command& command) {
  // The reference sends globalFault right after the stop, and the pods move
  // (or the chips reset) while MindIO waits for the strategy.
  if (command.kind() == v1::JOB_COMMAND_PAUSE && command.strategy() == v1::RECOVERY_STRATEGY_POD_RESCHEDULE) {
    return kStrategyRecover;
  }
  if (command.kind() == v1::JOB_COMMAND_STOP && command.strategy() == v1::RECOVERY_STRATEGY_PROCESS_RESTART) {
    return kStrategyRecoverInPlace;
  }
  return "";
}

std::string_view TaskdJob::WireOf(std::string_view target) {
  if (target == kStrategyRecoverInPlace) return kStrategyRecover;
  if (target == kStrategyElastic) return kStrategyDowngrade;
  return target;
}

bool TaskdJob::Allows(std::string_view strategy) const { return Contains(strategies_, strategy); }

bool TaskdJob::Refused(std::string_view target, std::string* why) const {
  if (!only_dump_exit_ || target.empty() || target == kStrategyExit) return false;
  if (target == kStrategyDump && !no_dump_) return false;
  *why = "TaskD accepts only " + std::string(no_dump_ ? "exit" : "dump or exit") + " after " + refusal_ +
         " (MindIO's rule): not " + std::string(target);
  return true;
}

bool TaskdJob::DumpOnly() const {
  if (!Allows(kStrategyDump)) return false;
  for (std::string_view s : {kStrategyRetry, kStrategyRecoverInPlace, kStrategyRecover, kStrategyElastic}) {
    if (Allows(s)) return false;
  }
  return true;
}

bool TaskdJob::NeedsPreExit() const {
  if (!current_ || pre_exited_) return false;
  const v1::JobCommand kind = current_->kind();
  if (kind == v1::JOB_COMMAND_RETRY_STEP || kind == v1::JOB_COMMAND_CHECKPOINT) return false;
  // The ranks TaskD reported itself have stopped already.
  return std::any_of(ranks_.begin(), ranks_.end(), [&](uint32_t r) { return !reported_.count(r); });
}

TaskdAck TaskdJob::Done(bool success, std::string message) {
  TaskdAck ack{current_ ? current_->id() : std::string(), success, std::move(message)};
  current_.reset();
  return ack;
}

::ProcessManageSignal TaskdJob::Signal(std::string_view type, std::string_view stage) const {
  ::ProcessManageSignal s;
  s.set_uuid((current_ ? current_->id() : job_id_) + "/" + std::string(stage));
  s.set_jobid(job_id_);
  s.set_signaltype(std::string(type));
  return s;
}

void TaskdJob::AddFaultRanks(::ProcessManageSignal* s) const {
  // A step retry answers an uncorrectable memory error (type "0") or an
  // HCCL error ("2"); anything else is a fault of the process ("1").
  const bool retry = kind_ == v1::JOB_COMMAND_RETRY_STEP;
  s->mutable_faultranks()->Reserve(static_cast<int>(ranks_.size()));
  for (uint32_t r : ranks_) {
    auto* f = s->add_faultranks();
    f->set_rankid(std::to_string(r));
    auto it = faults_.find(r);
    f->set_faulttype(!retry ? "1" : it != faults_.end() && it->second.hccl ? "2" : "0");
  }
}

bool TaskdJob::Hccl() const {
  if (kind_ != v1::JOB_COMMAND_RETRY_STEP) return false;
  return std::any_of(faults_.begin(), faults_.end(), [](const auto& f) { return f.second.hccl; });
}

TaskdOutput TaskdJob::Resend() {
  TaskdOutput out;
  out.signals.push_back(last_);
  // TaskD drops a signal whose uuid it has seen; if it was never answered
  // (the answer was lost while ClusterD restarted), none will come.
  out.expire_after_ms = waits_.mindio_wait_ms;
  out.expire_token = "resent:" + last_.uuid();
  return out;
}

TaskdOutput TaskdJob::OnCommand(const v1::Command& command, const v1::Job& job, const RankFaults& faults) {
  TaskdOutput out;
  if (current_ && current_->id() == command.id()) {
    // A resend: repeat what is awaited (same uuid), or go on from here.
    if (phase_ == Phase::kAwaitPreExit || phase_ == Phase::kAwaitStop || phase_ == Phase::kAwaitStrategy ||
        phase_ == Phase::kAwaitStatus) {
      return Resend();
    }
    return Advance();
  }
  Take(command, job, faults);
  const v1::JobCommand kind = command.kind();
  const std::string_view target = TargetOf(command);
  const std::string_view follow = FollowUpOf(command);
  if (pending_ && (target != pending_->target || command.recovery_id() != pending_->command.recovery_id())) {
    pending_.reset();  // the recovery went another way
    early_result_.reset();
  }
  if (kind != v1::JOB_COMMAND_PAUSE && kind != v1::JOB_COMMAND_STOP && target.empty()) {
    out.ack = Done(false, "TaskD cannot " + std::string(v1::JobCommand_Name(kind)) +
                              ": the Recover protocol has no checkpoint-and-continue");
    return out;
  }
  if (kind == v1::JOB_COMMAND_PAUSE && follow == kStrategyRecover && !Allows(kStrategyRecover)) {
    // The pods would move for nothing: TaskD cannot recover onto them.
    out.ack = Done(false, "job " + job_id_ + "'s recover-strategy (" + JoinCommaList(strategies_) +
                              ") does not list recover: no pod is rescheduled, the job restarts instead");
    return out;
  }
  for (std::string_view wanted : {target, follow}) {
    if (!wanted.empty() && !Allows(wanted)) {
      out.ack = Done(false, "job " + job_id_ + "'s recover-strategy (" + JoinCommaList(strategies_) +
                                ") does not list " + std::string(wanted));
      return out;
    }
    if (std::string why; Refused(wanted, &why)) {
      out.ack = Done(false, why);
      return out;
    }
  }
  if (target == kStrategyElastic && Contains(node_ranks_, "0")) {
    out.ack = Done(false, "a downgrade cannot drop pod rank 0 (MindIO refuses it with 406): the job needs another way");
    return out;
  }
  if (pending_ && pending_->sent) {
    // The changeStrategy went out early (the pods took longer than MindIO
    // waits): this command is its answer's.
    answer_base_ = pending_->command.id();  // its status answers this command
    pending_.reset();
    if (!early_result_) return out;  // the status is still to come
    const auto [code, info] = *early_result_;
    early_result_.reset();
    return Finish(target, code, info);
  }
  pending_.reset();
  return Advance();
}

TaskdOutput TaskdJob::Finish(std::string_view target, int32_t code, const std::string& info) {
  TaskdOutput out;
  const std::string name(target);
  if (code == kRecoverOk) {
    out.reset = ResetOp::kClear;
    reported_.clear();
    out.ack = Done(true, "TaskD recovered the job with " + name);
  } else {
    out.ack =
        Done(false, "TaskD's " + name + " failed: code " + std::to_string(code) + (info.empty() ? "" : ", " + info));
  }
  return out;
}

TaskdOutput TaskdJob::Advance() {
  TaskdOutput out;
  if (!current_) return out;
  const std::string_view target = TargetOf(*current_);
  const std::string_view follow = FollowUpOf(*current_);
  switch (phase_) {
    case Phase::kIdle: {
      if (NeedsPreExit()) {
        last_ = BuildSignal(Phase::kAwaitPreExit);
        out.signals.push_back(last_);
        phase_ = Phase::kAwaitPreExit;
        return out;
      }
      if (target == kStrategyExit && DumpOnly()) {
        // The reference's rule when dump is the job's best strategy:
        // TaskD saves and exits, no exchange.
        out.signals.push_back(Signal(kSignalSaveAndExit, "save-and-exit"));
        out.signals.back().add_actions(std::string(kActionSaveAndExit));
        AddFaultRanks(&out.signals.back());
        for (const auto& n : node_ranks_) out.signals.back().add_noderankids(n);
        out.reset = ResetOp::kFaults;
        out.reset_ranks = fault_chips_;
        out.recover_enable = "pause";
        out.clear_process_faults = true;
        out.process_recover_status = "dump-success";
        reported_.clear();
        out.ack = Done(true, "TaskD saves and exits (saveAndExit); the job restarts");
        return out;
      }
      last_ = BuildSignal(Phase::kAwaitStop);
      out.signals.push_back(last_);
      out.reset = ResetOp::kFlushing;
      phase_ = Phase::kAwaitStop;
      return out;
    }
    case Phase::kStopped: {
      if (target.empty() && follow.empty()) {
        out.ack = Done(true, "TaskD stopped the training");
        return out;
      }
      last_ = BuildSignal(Phase::kAwaitStrategy);
      out.signals.push_back(last_);
      out.reset = ResetOp::kFaults;
      out.reset_ranks = fault_chips_;
      // The chips' processes restart in place (the reference's
      // RestartFaultProcess), or their pods leave.
      if ((target.empty() ? follow : target) == kStrategyRecoverInPlace) out.reset = ResetOp::kFaultsInPlace;
      phase_ = Phase::kAwaitStrategy;
      return out;
    }
    case Phase::kChoosing: {
      if (std::string why; Refused(target, &why) || Refused(follow, &why)) {
        out.ack = Done(false, why);
        return out;
      }
      if (!follow.empty()) {
        // TaskD offered; the pods move (the chips reset) while MindIO waits
        // for the strategy, which the next command sends, or this wait does.
        const std::string_view wire = WireOf(follow);
        if (!Contains(offered_, wire)) {
          out.ack =
              Done(false, "TaskD offered " + (offered_.empty() ? std::string("no strategy") : JoinCommaList(offered_)) +
                              ", not " + std::string(wire));
          return out;
        }
        pending_ = Pending{*current_, std::string(follow), false};
        out.expire_after_ms = waits_.strategy_wait_ms;
        out.expire_token = "strategy:" + current_->id();
        // The stage TaskD is left in: the next step goes on from it
        // (ResumeStage), even after a restart.
        out.ack = Done(true, Stage());
        return out;
      }
      if (target.empty()) {
        out.ack = Done(true, "TaskD's training is stopped");
        return out;
      }
      if (target == kStrategyExit) {
        // A dump first where the job lists it and TaskD offers it.
        if (no_dump_ || !Allows(kStrategyDump) || !Contains(offered_, kStrategyDump)) return Exit(false);
        last_ = BuildSignal(Phase::kAwaitStatus);
        out.signals.push_back(last_);
        phase_ = Phase::kAwaitStatus;
        return out;
      }
      const std::string_view wire = WireOf(target);
      if (!Contains(offered_, wire)) {
        out.ack =
            Done(false, "TaskD offered " + (offered_.empty() ? std::string("no strategy") : JoinCommaList(offered_)) +
                            ", not " + std::string(wire) + (wire == target ? "" : " (" + std::string(target) + ")"));
        return out;
      }
      last_ = BuildSignal(Phase::kAwaitStatus);
      out.signals.push_back(last_);
      if (Hccl()) out.delay_ms = kHcclRouteWaitMs;  // the routes converge first
      phase_ = Phase::kAwaitStatus;
      return out;
    }
    case Phase::kAwaitPreExit:
    case Phase::kAwaitStop:
    case Phase::kAwaitStrategy:
    case Phase::kAwaitStatus:
      // The answer to what is awaited moves the new command on.
      return out;
  }
  return out;
}

TaskdOutput TaskdJob::Exit(bool dumped) {
  TaskdOutput out;
  ::ProcessManageSignal s = Signal("changeStrategy", "change-strategy/exit");
  s.add_actions("change_strategy");
  s.set_changestrategy(std::string(kStrategyExit));
  if (dumped) s.set_extraparams(std::string(kExtraDumpExit));
  AddFaultRanks(&s);
  for (const auto& n : node_ranks_) s.add_noderankids(n);
  out.signals.push_back(std::move(s));
  out.reset = ResetOp::kRestartAll;
  out.recover_enable = "pause";
  out.clear_process_faults = true;
  if (!dumped) out.process_recover_status = "exit-completed";
  phase_ = Phase::kIdle;
  offered_.clear();
  reported_.clear();
  // The job restarts: a new TaskD and a new MindIO.
  only_dump_exit_ = no_dump_ = false;
  scaled_in_.reset();
  pending_.reset();
  early_result_.reset();
  out.ack = Done(true, std::string("TaskD exits") + (dumped ? " after its dump" : "") + "; the job restarts");
  return out;
}

::ProcessManageSignal TaskdJob::ChangeStrategy(std::string_view uuid_base, std::string_view target) const {
  ::ProcessManageSignal s;
  s.set_uuid(std::string(uuid_base) + "/change-strategy/" + std::string(target));
  s.set_jobid(job_id_);
  s.set_signaltype("changeStrategy");
  s.add_actions("change_strategy");
  s.set_changestrategy(std::string(WireOf(target)));
  AddFaultRanks(&s);
  if (target == kStrategyRecoverInPlace) {
    // TaskD's recover plugin restarts these pods' workers in place.
    s.set_extraparams(std::string(kStrategyRecoverInPlace));
    s.add_actions(std::string(kActionFaultNodesRestart));
  } else if (target == kStrategyElastic) {
    s.set_extraparams(std::string(kExtraScaleIn));
  }
  for (const auto& n : node_ranks_) s.add_noderankids(n);
  return s;
}

::ProcessManageSignal TaskdJob::BuildSignal(Phase awaiting) const {
  const std::string_view target = current_ ? TargetOf(*current_) : std::string_view();
  const std::string_view follow = current_ ? FollowUpOf(*current_) : std::string_view();
  ::ProcessManageSignal s;
  switch (awaiting) {
    case Phase::kAwaitPreExit:
      s = Signal(kSignalPreExit, "pre-exit");
      s.add_actions(std::string(kActionPreExit));
      AddFaultRanks(&s);
      for (const auto& n : node_ranks_) s.add_noderankids(n);
      return s;
    case Phase::kAwaitStrategy: {
      const std::string_view next = target.empty() ? follow : target;
      s = Signal("globalFault", "global-fault");
      s.add_actions("on_global_rank");
      AddFaultRanks(&s);
      if (next == kStrategyRetry) {
        for (const auto& n : node_ranks_) s.add_noderankids(n);
      } else {
        // The pods to leave exit now (none when they restart in place: the
        // changeStrategy restarts them, after MindIO chose).
        s.add_actions(std::string(kActionFaultNodesExit));
        if (next != kStrategyRecoverInPlace) {
          for (const auto& n : node_ranks_) s.add_noderankids(n);
        }
      }
      if (Hccl()) s.set_timeout(kHcclRetryTimeoutS);
      return s;
    }
    case Phase::kAwaitStatus:
      // The one status an exit waits for is its dump's.
      return ChangeStrategy(current_ ? current_->id() : job_id_, target == kStrategyExit ? kStrategyDump : target);
    default:
      s = Signal("stopTrain", "stop");
      s.add_actions("stop_train");
      AddFaultRanks(&s);
      return s;
  }
}

std::string TaskdJob::Stage() const {
  std::string out = std::string(kStagePrefix) + std::string(PhaseName(phase_));
  if (!offered_.empty()) out += "; offered " + JoinCommaList(offered_);
  return out;
}

void TaskdJob::Take(const v1::Command& command, const v1::Job& job, const RankFaults& faults) {
  current_ = command;
  answer_base_ = command.id();
  kind_ = command.kind();
  pre_exited_ = false;
  faults_.clear();
  const auto& ranks = command.hit_ranks().empty() ? command.ranks() : command.hit_ranks();
  ranks_.assign(ranks.begin(), ranks.end());
  node_ranks_ = NodeRanksOf(job, ranks_);
  *job_.mutable_placement() = job.placement();
  fault_chips_.clear();
  const std::set<uint32_t> wanted(ranks_.begin(), ranks_.end());
  for (const auto& p : job.placement()) {
    if (wanted.count(p.rank())) {
      ResetRank r{p.rank(), p.has_device_id() ? p.device_id() : 0, "", {}};
      if (auto f = faults.find(p.rank()); f != faults.end()) {
        faults_.emplace(f->first, f->second);
        r.policy = std::string(LevelName(f->second.level));
        r.codes = f->second.codes;
      }
      fault_chips_.push_back(std::move(r));
    }
  }
}

TaskdOutput TaskdJob::Resume(const v1::Command& command, const v1::Job& job, std::string_view stage,
                             const RankFaults& faults) {
  std::optional<Phase> phase;
  std::vector<std::string> offered;
  if (stage.rfind(kStagePrefix, 0) == 0) {
    stage.remove_prefix(kStagePrefix.size());
    const size_t semi = stage.find(';');
    const std::string_view name = stage.substr(0, semi);
    for (Phase p : {Phase::kIdle, Phase::kAwaitPreExit, Phase::kAwaitStop, Phase::kStopped, Phase::kAwaitStrategy,
                    Phase::kChoosing, Phase::kAwaitStatus}) {
      if (PhaseName(p) == name) phase = p;
    }
    constexpr std::string_view kOffered = "; offered ";
    if (semi != std::string_view::npos && stage.substr(semi, kOffered.size()) == kOffered) {
      offered = SplitCommaList(stage.substr(semi + kOffered.size()));
    }
  }
  if (!phase) {  // nothing stored (or not ours): the step from its start
    phase_ = Phase::kIdle;
    offered_.clear();
    current_.reset();
    return OnCommand(command, job, faults);
  }
  Take(command, job, faults);
  offered_ = std::move(offered);
  phase_ = *phase;
  // Stopped before (a stage past the preExitProcess): not again.
  pre_exited_ = phase_ != Phase::kIdle && phase_ != Phase::kAwaitPreExit;
  switch (phase_) {
    case Phase::kAwaitPreExit:
    case Phase::kAwaitStop:
    case Phase::kAwaitStrategy:
    case Phase::kAwaitStatus:
      // Sent, not answered: the same signal again (the same uuid).
      last_ = BuildSignal(phase_);
      return Resend();
    default:
      // Answered: go on from there, never back.
      return Advance();
  }
}

TaskdOutput TaskdJob::OnStopComplete(const ::StopCompleteRequest& req) {
  TaskdOutput out;
  if (phase_ != Phase::kAwaitStop) {
    out.info = "no stop awaited (" + std::string(PhaseName(phase_)) + "): ignored";
    return out;
  }
  if (req.status().code() != kRecoverOk) {
    phase_ = Phase::kIdle;
    if (current_) {
      out.ack = Done(false, "TaskD could not stop the training: code " + std::to_string(req.status().code()) +
                                (req.status().info().empty() ? "" : ", " + req.status().info()));
    }
    return out;
  }
  phase_ = Phase::kStopped;
  return Advance();
}

TaskdOutput TaskdJob::OnRecoverStrategy(const ::RecoverStrategyRequest& req) {
  TaskdOutput out;
  if (phase_ != Phase::kAwaitStrategy) {
    out.info = "no strategy list awaited (" + std::string(PhaseName(phase_)) + "): ignored";
    return out;
  }
  offered_.assign(req.strategies().begin(), req.strategies().end());
  phase_ = Phase::kChoosing;
  return Advance();
}

TaskdOutput TaskdJob::OnRecoverStatus(const ::RecoverStatusRequest& req) {
  TaskdOutput out;
  if (phase_ != Phase::kAwaitStatus) {
    out.info = "no recovery status awaited (" + std::string(PhaseName(phase_)) + "): ignored";
    return out;
  }
  const std::string strategy = last_.changestrategy();
  // The ClusterD name of what was asked ("recover-in-place" is "recover"
  // with that extraParams).
  const std::string asked = strategy == kStrategyRecover && last_.extraparams() == kStrategyRecoverInPlace
                                ? std::string(kStrategyRecoverInPlace)
                                : strategy;
  const int32_t code = req.status().code();
  if (strategy == kStrategyDowngrade && code == kRecoverChooseScaleInRanks) {
    // MindIO chose the ranks to isolate: their pods exit, its result follows.
    // The job's ranks among them (others name nothing to isolate).
    std::set<uint32_t> placed_ranks;
    for (const auto& p : job_.placement()) placed_ranks.insert(p.rank());
    std::set<uint32_t> named;
    for (const auto& id : req.isolaterankids()) {
      uint32_t rank = 0;
      const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), rank);
      if (!id.empty() && ec == std::errc() && end == id.data() + id.size() && placed_ranks.count(rank)) {
        named.insert(rank);
      }
    }
    const std::vector<uint32_t> isolate(named.begin(), named.end());
    ::ProcessManageSignal s;
    s.set_uuid(last_.uuid() + "/fault-nodes-exit");
    s.set_jobid(job_id_);
    s.set_signaltype(std::string(kSignalFaultNodesExit));
    s.add_actions(std::string(kActionFaultNodesExit));
    v1::Job placed;
    *placed.mutable_placement() = job_.placement();
    isolating_ = isolate.empty() ? ranks_ : isolate;
    for (const auto& n : NodeRanksOf(placed, isolating_)) s.add_noderankids(n);
    out.signals.push_back(std::move(s));
    out.info = "the ranks to isolate are told to exit";
    return out;
  }
  const bool ok = code == kRecoverOk;
  out.process_recover_status = asked + (ok ? "-success" : "-failed");
  if (strategy == kStrategyUpgrade) {
    // The isolated ranks are back (0), or MindIO goes to its dump state.
    phase_ = Phase::kIdle;
    scaled_in_.reset();
    if (!ok) {
      only_dump_exit_ = true;
      refusal_ = "its upgrade failed with code " + std::to_string(code);
    }
    out.info = ok ? "scaled out: the isolated ranks train again" : "the upgrade failed: " + refusal_;
    if (current_) {  // a command that came meanwhile goes on
      TaskdOutput next = Advance();
      next.process_recover_status = out.process_recover_status;
      return next;
    }
    return out;
  }
  if (ok && strategy == kStrategyDowngrade) scaled_in_ = isolating_.empty() ? ranks_ : isolating_;
  // Whose changeStrategy this answers: a command the coordinator gave up on
  // (it timed out, a newer one is current) is not acked for.
  const bool answers_current = current_ && last_.uuid().rfind(answer_base_ + "/", 0) == 0;
  const bool answers_early =
      !answers_current && pending_ && pending_->sent && last_.uuid().rfind(pending_->command.id() + "/", 0) == 0;
  if (strategy == kStrategyDump && answers_current) {
    // Dumped (or not): TaskD exits either way, the job restarts.
    TaskdOutput exit = Exit(true);
    exit.process_recover_status = out.process_recover_status;
    return exit;
  }
  // What MindIO accepts next: after a retry's 405 it waits for a new
  // globalFault and offers again; after anything else that failed, only
  // dump (not after 499, nor after a dump) or exit.
  if (ok) {
    phase_ = Phase::kIdle;
  } else if (strategy == kStrategyRetry && code == kRecoverRetryRecoverable) {
    phase_ = Phase::kStopped;
    offered_.clear();
  } else {
    phase_ = Phase::kChoosing;
    only_dump_exit_ = true;
    no_dump_ = no_dump_ || code == kRecoverClientError || strategy == kStrategyDump;
    refusal_ = "its " + asked + " failed with code " + std::to_string(code);
    std::vector<std::string> left;
    for (const auto& s : offered_) {
      if (s == kStrategyExit || (s == kStrategyDump && !no_dump_)) left.push_back(s);
    }
    offered_ = std::move(left);
  }
  if (answers_early) {
    // The command that waits for it has not come yet: it finds this.
    early_result_ = std::make_pair(code, req.status().info());
    return out;
  }
  if (!answers_current) {
    TaskdOutput next = Advance();
    next.process_recover_status = out.process_recover_status;
    return next;
  }
  TaskdOutput done = Finish(asked, code, req.status().info());
  done.process_recover_status = out.process_recover_status;
  return done;
}

TaskdOutput TaskdJob::OnProcessFault(const ::ProcessFaultRequest& req) {
  for (const auto& f : req.faultranks()) {
    // Bounded by what a job can have (the adapter caps a report's ranks).
    if (auto rank = RankIdOf(f); rank && reported_.size() < 131072) reported_.insert(*rank);
  }
  if (phase_ != Phase::kAwaitPreExit) return {};
  pre_exited_ = true;
  phase_ = Phase::kIdle;
  return Advance();
}

TaskdOutput TaskdJob::Restart() {
  phase_ = Phase::kIdle;
  offered_.clear();
  return Advance();
}

TaskdOutput TaskdJob::ScaleOut() {
  TaskdOutput out;
  if (!scaled_in_ || current_ || phase_ != Phase::kIdle || only_dump_exit_) return out;
  ::ProcessManageSignal s;
  s.set_uuid(job_id_ + "/scale-out/" + std::to_string(++scale_outs_));
  s.set_jobid(job_id_);
  s.set_signaltype("changeStrategy");
  s.add_actions("change_strategy");
  s.set_changestrategy(std::string(kStrategyUpgrade));
  s.set_extraparams(std::string(kExtraScaleOut));
  for (uint32_t r : *scaled_in_) {
    auto* f = s.add_faultranks();
    f->set_rankid(std::to_string(r));
    f->set_faulttype("1");
  }
  v1::Job placed;
  *placed.mutable_placement() = job_.placement();
  for (const auto& n : NodeRanksOf(placed, *scaled_in_)) s.add_noderankids(n);
  last_ = s;
  out.signals.push_back(std::move(s));
  phase_ = Phase::kAwaitStatus;
  out.info = "the isolated ranks' chips are back: upgrade";
  return out;
}

TaskdOutput TaskdJob::Expire(std::string_view token) {
  TaskdOutput out;
  constexpr std::string_view kStrategy = "strategy:", kResent = "resent:";
  if (token.rfind(kStrategy, 0) == 0) {
    token.remove_prefix(kStrategy.size());
    // Still choosing, the next command not here: MindIO would give up, so
    // its strategy goes out now (the reference's order: it sends recover
    // right after the offer and the pods come while MindIO's ARF waits).
    if (!pending_ || pending_->sent || pending_->command.id() != token || phase_ != Phase::kChoosing || current_) {
      return out;
    }
    if (std::string why; Refused(pending_->target, &why) || !Contains(offered_, WireOf(pending_->target))) return out;
    pending_->sent = true;
    last_ = ChangeStrategy(pending_->command.id(), pending_->target);
    out.signals.push_back(last_);
    phase_ = Phase::kAwaitStatus;
    out.info = "sent before the next command: MindIO waits " + std::to_string(waits_.mindio_wait_ms / 1000) + " s";
    return out;
  }
  if (token.rfind(kResent, 0) == 0) {
    token.remove_prefix(kResent.size());
    const bool awaiting = phase_ == Phase::kAwaitPreExit || phase_ == Phase::kAwaitStop ||
                          phase_ == Phase::kAwaitStrategy || phase_ == Phase::kAwaitStatus;
    if (!current_ || !awaiting || last_.uuid() != token) return out;
    const std::string type = last_.signaltype();
    phase_ = Phase::kIdle;
    offered_.clear();
    out.ack = Done(false, "TaskD did not answer the " + type + " sent again (" + std::string(token) + ") within " +
                              std::to_string(waits_.mindio_wait_ms / 1000) +
                              " s, MindIO's wait: TaskD drops a signal it has seen and never resends a report it "
                              "could not deliver");
    return out;
  }
  return out;
}

}  // namespace clusterd::mindcluster
