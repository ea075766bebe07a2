// get recoveries [ID], describe recovery ID.
#include <algorithm>

#include "clusterctl/resources/resources.h"

namespace clusterctl {
namespace {

using RecoveryResource =
    Resource<v1::Recovery, v1::GetRecoveryResponse, v1::ListRecoveriesRequest, v1::ListRecoveriesResponse>;

std::string DeviceRefsText(const google::protobuf::RepeatedPtrField<v1::DeviceRef>& refs) {
  std::vector<std::string> items;
  for (const auto& d : refs) items.push_back(d.node() + " dev " + std::to_string(d.device_id()));
  return JoinText(items, ", ");
}

std::vector<uint32_t> Ranks(const google::protobuf::RepeatedField<uint32_t>& ranks) {
  return std::vector<uint32_t>(ranks.begin(), ranks.end());
}

std::vector<std::string> Strings(const google::protobuf::RepeatedPtrField<std::string>& items) {
  return std::vector<std::string>(items.begin(), items.end());
}

// WAITING: why it waits; otherwise the outcome in words.
std::string RecoveryNote(const v1::Recovery& r) {
  if (r.state() == v1::RECOVERY_STATE_WAITING && !r.wait_reason().empty()) return r.wait_reason();
  return r.message().empty() ? "-" : r.message();
}

// "agent RESTART_PROCESSES ranks 1-3", "actuator isolate_device worker02 dev 0".
std::string StepWhat(const v1::RecoveryStep& s) {
  std::string out;
  if (s.action() != v1::CLUSTER_ACTION_UNSPECIFIED) {
    out = "actuator " + ShortClusterAction(s.action());
  } else {
    out = "agent " + ShortJobCommand(s.command());
  }
  if (!s.node().empty()) out += " " + s.node();
  if (s.has_device_id()) out += " dev " + std::to_string(s.device_id());
  if (!s.ranks().empty()) out += " ranks " + RankRanges(Ranks(s.ranks()));
  return out;
}

Columns<v1::Recovery> RecoveryColumns() {
  return {
      {"ID", false, [](const v1::Recovery& r, bool) { return r.id(); }},
      {"JOB", false, [](const v1::Recovery& r, bool) { return r.job_id(); }},
      {"STATE", false, [](const v1::Recovery& r, bool) { return ShortRecoveryState(r.state()); }},
      {"STRATEGY", false, [](const v1::Recovery& r, bool) { return RecoveryStrategyText(r); }},
      {"LEVEL", false, [](const v1::Recovery& r, bool) { return ShortLevel(r.level()); }},
      {"RANKS", false, [](const v1::Recovery& r, bool) { return RankRanges(Ranks(r.hit_ranks())); }},
      {"STEPS", false, [](const v1::Recovery& r, bool) { return StepsText(r); }},
      {"CREATED", false, [](const v1::Recovery& r, bool) { return FormatTime(r.create_time()); }},
      {"TRIGGERS", true, [](const v1::Recovery& r, bool) { return JoinText(Strings(r.trigger_fault_ids())); }},
      {"UPDATED", true, [](const v1::Recovery& r, bool) { return FormatTime(r.update_time()); }},
      {"ENDED", true, [](const v1::Recovery& r, bool) { return FormatTime(r.end_time()); }},
      {"REVISION", true, [](const v1::Recovery& r, bool) { return std::to_string(r.revision()); }},
      {"MESSAGE", false,
       [](const v1::Recovery& r, bool wide) { return wide ? RecoveryNote(r) : Truncate(RecoveryNote(r), 60); }},
  };
}

Columns<const v1::RecoveryStep*> StepColumns() {
  using Step = const v1::RecoveryStep*;
  return {
      {"INDEX", false, [](Step s, bool) { return std::to_string(s->index()); }},
      {"RUNG", false, [](Step s, bool) { return ShortStrategy(s->strategy()); }},
      {"WHAT", false, [](Step s, bool) { return StepWhat(*s); }},
      {"STATE", false, [](Step s, bool) { return ShortStepState(s->state()); }},
      {"STARTED", false, [](Step s, bool) { return FormatTime(s->start_time(), true); }},
      {"ENDED", false, [](Step s, bool) { return FormatTime(s->end_time(), true); }},
      {"DEADLINE", true, [](Step s, bool) { return FormatTime(s->deadline(), true); }},
      {"KEY", true, [](Step s, bool) { return s->idempotency_key().empty() ? "-" : s->idempotency_key(); }},
      {"MESSAGE", false, [](Step s, bool) { return s->message().empty() ? "-" : s->message(); }},
  };
}

std::string RecoveryStateNames() {
  std::string out;
  for (int s = v1::RECOVERY_STATE_UNSPECIFIED + 1; s <= v1::RecoveryState_MAX; ++s) {
    if (!v1::RecoveryState_IsValid(s)) continue;
    if (!out.empty()) out += ", ";
    out += ShortRecoveryState(static_cast<v1::RecoveryState>(s));
  }
  return out;
}

std::optional<int> ReadRecoveryFilters(Context& c, v1::ListRecoveriesRequest* req) {
  req->set_job(c.args.Get("job"));
  if (c.args.Has("state")) {
    auto s = ParseRecoveryState(c.args.Get("state"));
    if (!s) {
      return Usage(
          c, "--state: unknown recovery state '" + c.args.Get("state") + "' (one of " + RecoveryStateNames() + ")");
    }
    req->set_state(*s);
  }
  return std::nullopt;
}

void DescribeRecovery(Context& c, const v1::GetRecoveryResponse& resp) {
  const v1::Recovery& r = resp.recovery();
  PrintKeyValues(
      c.out, {
                 {"Id", r.id()},
                 {"Job", r.job_id()},
                 {"State", ShortRecoveryState(r.state())},
                 {"Strategy", ShortStrategy(r.strategy())},
                 {"Initial strategy", ShortStrategy(r.initial_strategy())},
                 {"Level", ShortLevel(r.level())},
                 {"Hit ranks", RankRanges(Ranks(r.hit_ranks()))},
                 {"Steps ended", StepsText(r)},
                 {"Dry run", r.dry_run() ? "yes" : "no"},
                 {"Graceful", r.graceful() ? "yes (checkpoint first, replacement before stop)" : "no"},
                 {"Isolate nodes", JoinText(Strings(r.isolate_nodes()), ", ")},
                 {"Isolate devices", DeviceRefsText(r.isolate_devices())},
                 {"Reset devices", DeviceRefsText(r.reset_devices())},
                 {"Wait reason", r.wait_reason().empty() ? "-" : r.wait_reason()},
                 {"Message", r.message().empty() ? "-" : r.message()},
                 {"Created", FormatTime(r.create_time()) + " (revision " + std::to_string(r.create_revision()) + ")"},
                 {"Updated", FormatTime(r.update_time())},
                 {"Ended", FormatTime(r.end_time())},
                 {"Revision", std::to_string(r.revision())},
             });

  c.out << "\nTrigger faults:\n";
  if (r.trigger_fault_ids().empty()) c.out << "  <none>\n";
  for (const auto& id : r.trigger_fault_ids()) c.out << "  " << Sanitize(id) << "\n";

  c.out << "\nReasons:\n";
  if (r.reasons().empty()) c.out << "  <none>\n";
  for (const auto& reason : r.reasons()) c.out << "  - " << Sanitize(reason) << "\n";

  c.out << "\nSteps:\n";
  if (r.steps().empty()) {
    c.out << "  <none>\n";
    return;
  }
  std::vector<const v1::RecoveryStep*> steps;
  for (const auto& s : r.steps()) steps.push_back(&s);
  std::stable_sort(steps.begin(), steps.end(), [](const auto* a, const auto* b) { return a->index() < b->index(); });
  c.out << Indent(TableText(MakeTable(StepColumns(), c.wide(), steps)));
}

}  // namespace

std::vector<Command> RecoveryCommands() {
  auto recoveries = std::make_shared<const RecoveryResource>(RecoveryResource{
      .singular = "recovery",
      .plural = "recoveries",
      .operand = "ID",
      .columns = RecoveryColumns(),
      .list_rpc = "ListRecoveries",
      .list = &ClusterClient::ListAllRecoveries,
      .items = [](const v1::ListRecoveriesResponse& r) -> const auto& { return r.recoveries();
}
, .filters = {"job", "state"}, .read_filters = ReadRecoveryFilters, .get_rpc = "GetRecovery",
  .get = &ClusterClient::GetRecovery, .item = [](const v1::GetRecoveryResponse& r) -> const auto& {
  return r.recovery();
}
, .describe = DescribeRecovery,
}  // namespace clusterctl
);
return {
    GetCommand(recoveries, {"recoveries", "recovery"}, {{"job", 0, true, false}, {"state", 0, true, false}},
               "  get recoveries [ID] [--job J] [--state S]\n"
               "                                      recoveries (all pages), newest first: state, strategy\n"
               "                                      (A->B once escalated), level, hit ranks, steps ended/total,\n"
               "                                      message (WAITING: why it waits); -o wide adds the trigger\n"
               "                                      faults. S: RUNNING, WAITING, SUCCEEDED, FAILED, DRY_RUN,\n"
               "                                      CANCELLED\n"),
    DescribeCommand(recoveries, {"recovery", "recoveries"},
                    "  describe recovery ID                recovery (e.g. train-a.2): every field, the trigger "
                    "faults,\n"
                    "                                      the decision's reasons and escalations, and each step\n"
                    "                                      (agent command or actuator action, state, times, "
                    "answer)\n"),
};
}

}  // namespace clusterctl
