// Decision tables: every fault level x job kind x policy.
//
// 1. LiteralTable: the expected decision of each cell is written out by hand,
//    one row per level, one column per named policy, so that any change of the
//    level -> rung mapping or of the ladder rule shows up as a changed cell.
// 2. ExhaustiveSweep: every level x kind x fault scope (device, node) x each
//    of the 32 subsets of allowed strategies, against a small independent
//    oracle (the ladder walk written out again).
#include <gtest/gtest.h>

#include "fixtures.h"

namespace clusterd::recovery {
namespace {

using namespace testing;
using S = Strategy;

// Cell values: "-" no recovery (kNone); otherwise the strategy of a kRecover.
enum class Cell { kNone, SR, PR, POD, JOB, SI, F };

std::string CellName(Cell c) {
  switch (c) {
    case Cell::kNone: return "-";
    case Cell::SR: return "STEP_RETRY";
    case Cell::PR: return "PROCESS_RESTART";
    case Cell::POD: return "POD_RESCHEDULE";
    case Cell::JOB: return "JOB_RESCHEDULE";
    case Cell::SI: return "SCALE_IN";
    case Cell::F: return "FAIL";
  }
  return "?";
}

struct NamedPolicy {
  const char* name;
  std::set<Strategy> allowed;
};

// Columns of the literal table.
const std::vector<NamedPolicy>& Policies() {
  static const std::vector<NamedPolicy> p = {
      {"ALL", {S::kStepRetry, S::kProcessRestart, S::kPodReschedule, S::kJobReschedule, S::kScaleIn}},
      {"NO_STEP_RETRY", {S::kProcessRestart, S::kPodReschedule, S::kJobReschedule, S::kScaleIn}},
      {"NO_IN_PLACE", {S::kPodReschedule, S::kJobReschedule, S::kScaleIn}},
      {"POD_ONLY", {S::kPodReschedule}},
      {"JOB_ONLY", {S::kJobReschedule}},
      {"SCALE_IN_ONLY", {S::kScaleIn}},
      {"STEP_RETRY_ONLY", {S::kStepRetry}},
      {"NOTHING", {}},
  };
  return p;
}

using v1::FaultLevel;
constexpr Cell _ = Cell::kNone;
constexpr Cell SR = Cell::SR, PR = Cell::PR, POD = Cell::POD, JOB = Cell::JOB, SI = Cell::SI, F = Cell::F;

struct Row {
  FaultLevel level;
  std::array<Cell, 8> cells;  // in Policies() order
};

// clang-format off
//                                          ALL  NO_SR NO_IP POD  JOB  SI   SR   NOTHING
const std::vector<Row> kTrainingTable = {
    {v1::FAULT_LEVEL_UNSPECIFIED,      {_,   _,    _,    _,   _,   _,   _,   _}},
    {v1::FAULT_LEVEL_NOT_HANDLE,       {_,   _,    _,    _,   _,   _,   _,   _}},
    {v1::FAULT_LEVEL_SUB_HEALTH,       {_,   _,    _,    _,   _,   _,   _,   _}},
    {v1::FAULT_LEVEL_PRE_SEPARATE,     {_,   _,    _,    _,   _,   _,   _,   _}},
    {v1::FAULT_LEVEL_RESTART_REQUEST,  {SR,  PR,   POD,  POD, JOB, SI,  SR,  F}},
    {v1::FAULT_LEVEL_RESTART_BUSINESS, {PR,  PR,   POD,  POD, JOB, SI,  F,   F}},
    {v1::FAULT_LEVEL_FREE_RESTART_NPU, {PR,  PR,   POD,  POD, JOB, SI,  F,   F}},
    {v1::FAULT_LEVEL_RESTART_NPU,      {PR,  PR,   POD,  POD, JOB, SI,  F,   F}},
    {v1::FAULT_LEVEL_SEPARATE,         {POD, POD,  POD,  POD, JOB, SI,  F,   F}},
};
//                                          ALL  NO_SR NO_IP POD  JOB  SI   SR   NOTHING
const std::vector<Row> kInferenceTable = {
    {v1::FAULT_LEVEL_UNSPECIFIED,      {_,   _,    _,    _,   _,   _,   _,   _}},
    {v1::FAULT_LEVEL_NOT_HANDLE,       {_,   _,    _,    _,   _,   _,   _,   _}},
    {v1::FAULT_LEVEL_SUB_HEALTH,       {_,   _,    _,    _,   _,   _,   _,   _}},
    {v1::FAULT_LEVEL_PRE_SEPARATE,     {POD, POD,  POD,  POD, _,   _,   _,   _}},
    {v1::FAULT_LEVEL_RESTART_REQUEST,  {PR,  PR,   POD,  POD, JOB, SI,  F,   F}},
    {v1::FAULT_LEVEL_RESTART_BUSINESS, {PR,  PR,   POD,  POD, JOB, SI,  F,   F}},
    {v1::FAULT_LEVEL_FREE_RESTART_NPU, {PR,  PR,   POD,  POD, JOB, SI,  F,   F}},
    {v1::FAULT_LEVEL_RESTART_NPU,      {PR,  PR,   POD,  POD, JOB, SI,  F,   F}},
    {v1::FAULT_LEVEL_SEPARATE,         {POD, POD,  POD,  POD, JOB, SI,  F,   F}},
};
// clang-format on

struct TableCase {
  FaultLevel level;
  JobKind kind;
  size_t policy;
  Cell expected;
};

std::vector<TableCase> TableCases() {
  std::vector<TableCase> out;
  for (JobKind kind : {JobKind::kTraining, JobKind::kInference}) {
    for (const Row& row : kind == JobKind::kTraining ? kTrainingTable : kInferenceTable) {
      for (size_t p = 0; p < Policies().size(); ++p) out.push_back({row.level, kind, p, row.cells[p]});
    }
  }
  return out;
}

std::string LevelShort(FaultLevel level) {
  std::string n = v1::FaultLevel_Name(level);
  return n.substr(std::string("FAULT_LEVEL_").size());
}

class LiteralTable : public ::testing::TestWithParam<TableCase> {};

TEST_P(LiteralTable, Cell) {
  const TableCase& c = GetParam();
  Job job = MakeJob(c.kind);
  job.policy.allowed = Policies()[c.policy].allowed;
  const FaultView fault = DeviceFault("worker01", 3, c.level);
  const Decision d = Decide(job, {fault}, Cluster(), Limits{}, History{}, kT0);

  SCOPED_TRACE(::testing::Message() << "reasons: " << ::testing::PrintToString(d.reasons));
  if (c.expected == Cell::kNone) {
    EXPECT_EQ(d.action, Action::kNone);
    EXPECT_FALSE(d.strategy.has_value());
    EXPECT_TRUE(d.trigger_fault_ids.empty());
    ASSERT_FALSE(d.reasons.empty());  // a record-only fault always says so
    return;
  }
  ASSERT_EQ(d.action, Action::kRecover);
  ASSERT_TRUE(d.strategy.has_value());
  EXPECT_EQ(StrategyName(*d.strategy), CellName(c.expected));
  EXPECT_EQ(d.gate, Gate::kNone);
  EXPECT_EQ(d.trigger_fault_ids, std::vector<std::string>{fault.id});
  EXPECT_EQ(d.hit_ranks, std::vector<int>{3});
  EXPECT_EQ(d.level, c.level);
  // Isolation for SEPARATE (and a proactive PRE_SEPARATE move) whenever ranks leave.
  const bool leaves = c.expected == Cell::POD || c.expected == Cell::JOB || c.expected == Cell::SI;
  const bool isolates = leaves && (c.level == v1::FAULT_LEVEL_SEPARATE || c.level == v1::FAULT_LEVEL_PRE_SEPARATE);
  EXPECT_EQ(d.isolate_devices, (isolates ? std::vector<DeviceRef>{{"worker01", 3}} : std::vector<DeviceRef>{}));
  EXPECT_TRUE(d.isolate_nodes.empty());
  const bool resets =
      c.expected != Cell::F && (c.level == v1::FAULT_LEVEL_RESTART_NPU || c.level == v1::FAULT_LEVEL_FREE_RESTART_NPU);
  EXPECT_EQ(d.reset_devices, (resets ? std::vector<DeviceRef>{{"worker01", 3}} : std::vector<DeviceRef>{}));
  EXPECT_EQ(d.graceful, c.level == v1::FAULT_LEVEL_PRE_SEPARATE);
  EXPECT_EQ(d.step_timeout, c.expected == Cell::F ? Duration::zero() : DefaultStepTimeout(*d.strategy));
}

INSTANTIATE_TEST_SUITE_P(Recovery, LiteralTable, ::testing::ValuesIn(TableCases()),
                         [](const ::testing::TestParamInfo<TableCase>& info) {
                           const TableCase& c = info.param;
                           return std::string(c.kind == JobKind::kTraining ? "Training_" : "Inference_") +
                                  LevelShort(c.level) + "_" + Policies()[c.policy].name;
                         });

// ---- Exhaustive sweep against an independent oracle --------------------------

// The mapping again, written independently of StartingStrategy.
std::optional<Strategy> OracleStart(FaultLevel level, JobKind kind) {
  const bool training = kind == JobKind::kTraining;
  if (level == v1::FAULT_LEVEL_RESTART_REQUEST) return training ? S::kStepRetry : S::kProcessRestart;
  if (level >= v1::FAULT_LEVEL_RESTART_BUSINESS && level <= v1::FAULT_LEVEL_RESTART_NPU) return S::kProcessRestart;
  if (level == v1::FAULT_LEVEL_SEPARATE) return S::kPodReschedule;
  if (level == v1::FAULT_LEVEL_PRE_SEPARATE && !training) return S::kPodReschedule;
  return std::nullopt;
}

std::optional<Strategy> Oracle(FaultLevel level, JobKind kind, const std::set<Strategy>& allowed) {
  std::optional<Strategy> start = OracleStart(level, kind);
  if (!start) return std::nullopt;
  if (level == v1::FAULT_LEVEL_PRE_SEPARATE) {  // proactive: POD_RESCHEDULE or nothing
    return allowed.contains(S::kPodReschedule) ? std::optional<Strategy>(S::kPodReschedule) : std::nullopt;
  }
  for (int i = static_cast<int>(*start); i < 5; ++i) {
    const auto s = static_cast<Strategy>(i);
    if (s == S::kStepRetry && kind == JobKind::kInference) continue;
    if (allowed.contains(s)) return s;
  }
  return S::kFail;
}

struct SweepCase {
  FaultLevel level;
  JobKind kind;
  bool node_level;
};

class ExhaustiveSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(ExhaustiveSweep, AllPolicySubsets) {
  const SweepCase& c = GetParam();
  for (unsigned mask = 0; mask < 32; ++mask) {
    Job job = MakeJob(c.kind);
    job.policy.allowed = FromMask(mask);
    const FaultView fault = c.node_level ? NodeFault("worker02", c.level, "NODE_X", kT0 - 1min, v1::FAULT_SOURCE_KERNEL)
                                         : DeviceFault("worker02", 5, c.level);
    const Decision d = Decide(job, {fault}, Cluster(), Limits{}, History{}, kT0);
    const std::optional<Strategy> want = Oracle(c.level, c.kind, job.policy.allowed);
    SCOPED_TRACE(::testing::Message() << "mask " << mask << " reasons " << ::testing::PrintToString(d.reasons));
    if (!want) {
      EXPECT_EQ(d.action, Action::kNone);
      continue;
    }
    ASSERT_EQ(d.action, Action::kRecover);
    EXPECT_EQ(d.strategy, want);
    const std::vector<int> ranks = c.node_level ? std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15} : std::vector<int>{13};
    EXPECT_EQ(d.hit_ranks, ranks);
    // A node-level fault that needs isolation isolates the node when ranks move
    // to other pods; SCALE_IN just leaves it.
    const bool isolating = (*want == S::kPodReschedule || *want == S::kJobReschedule) &&
                           (c.level == v1::FAULT_LEVEL_SEPARATE || c.level == v1::FAULT_LEVEL_PRE_SEPARATE);
    EXPECT_EQ(d.isolate_nodes.size(), c.node_level && isolating ? 1u : 0u);
  }
}

std::vector<SweepCase> SweepCases() {
  std::vector<SweepCase> out;
  for (int l = v1::FAULT_LEVEL_UNSPECIFIED; l <= v1::FAULT_LEVEL_SEPARATE; ++l) {
    for (JobKind kind : {JobKind::kTraining, JobKind::kInference}) {
      for (bool node_level : {false, true}) out.push_back({static_cast<FaultLevel>(l), kind, node_level});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Recovery, ExhaustiveSweep, ::testing::ValuesIn(SweepCases()),
                         [](const ::testing::TestParamInfo<SweepCase>& info) {
                           const SweepCase& c = info.param;
                           return std::string(c.kind == JobKind::kTraining ? "Training_" : "Inference_") +
                                  LevelShort(c.level) + (c.node_level ? "_Node" : "_Device");
                         });

TEST(StartingStrategy, MatchesTheDocumentedTable) {
  // The table in docs/recovery.md, once more as pairs.
  const std::vector<std::tuple<FaultLevel, std::optional<Strategy>, std::optional<Strategy>>> table = {
      {v1::FAULT_LEVEL_NOT_HANDLE, std::nullopt, std::nullopt},
      {v1::FAULT_LEVEL_SUB_HEALTH, std::nullopt, std::nullopt},
      {v1::FAULT_LEVEL_PRE_SEPARATE, std::nullopt, S::kPodReschedule},
      {v1::FAULT_LEVEL_RESTART_REQUEST, S::kStepRetry, S::kProcessRestart},
      {v1::FAULT_LEVEL_RESTART_BUSINESS, S::kProcessRestart, S::kProcessRestart},
      {v1::FAULT_LEVEL_FREE_RESTART_NPU, S::kProcessRestart, S::kProcessRestart},
      {v1::FAULT_LEVEL_RESTART_NPU, S::kProcessRestart, S::kProcessRestart},
      {v1::FAULT_LEVEL_SEPARATE, S::kPodReschedule, S::kPodReschedule},
  };
  for (const auto& [level, training, inference] : table) {
    EXPECT_EQ(StartingStrategy(level, JobKind::kTraining), training) << LevelShort(level);
    EXPECT_EQ(StartingStrategy(level, JobKind::kInference), inference) << LevelShort(level);
  }
}

}  // namespace
}  // namespace clusterd::recovery
