// Decide(): impact, grouping, flap suppression, silencing, cordon, pause,
// dry-run, budgets, blast radius and escalation.
#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "clusterd/recovery/convert.h"
#include "fixtures.h"

namespace clusterd::recovery {
namespace {

using namespace testing;
using ::testing::HasSubstr;
using S = Strategy;

constexpr auto SEPARATE = v1::FAULT_LEVEL_SEPARATE;
constexpr auto RESTART_NPU = v1::FAULT_LEVEL_RESTART_NPU;
constexpr auto RESTART_BUSINESS = v1::FAULT_LEVEL_RESTART_BUSINESS;
constexpr auto RESTART_REQUEST = v1::FAULT_LEVEL_RESTART_REQUEST;
constexpr auto PRE_SEPARATE = v1::FAULT_LEVEL_PRE_SEPARATE;

std::string AllReasons(const Decision& d) {
  std::string out;
  for (const auto& r : d.reasons) out += r + "\n";
  return out;
}

Decision DecideFor(const Job& job, const std::vector<FaultView>& faults, const ClusterView& cluster = Cluster(),
                   const Limits& limits = Limits{}, const History& history = History{}, TimePoint now = kT0) {
  return Decide(job, faults, cluster, limits, history, now);
}

// ---- Impact ----------------------------------------------------------------

TEST(MapImpact, DeviceFaultHitsTheRankOnThatDeviceOnly) {
  const Job job = MakeJob();
  const auto impact = MapImpact(job, {DeviceFault("worker02", 4, SEPARATE)});
  ASSERT_EQ(impact.size(), 1u);
  EXPECT_EQ(impact[0].ranks, std::vector<int>{12});
}

TEST(MapImpact, NodeFaultHitsEveryRankOnTheNode) {
  const Job job = MakeJob();
  const auto impact = MapImpact(job, {NodeFault("worker01", SEPARATE)});
  ASSERT_EQ(impact.size(), 1u);
  EXPECT_EQ(impact[0].ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(MapImpact, SkipsClearedFaultsAndFaultsThatHitNothing) {
  Job job = MakeJob(JobKind::kTraining, 1, 4);  // worker01 devices 0-3
  FaultView cleared = DeviceFault("worker01", 1, SEPARATE);
  cleared.active = false;
  cleared.cleared_at = kT0 - 10s;
  const auto impact =
      MapImpact(job, {DeviceFault("worker01", 6, SEPARATE), DeviceFault("worker05", 0, SEPARATE),
                      NodeFault("worker07", SEPARATE), cleared, DeviceFault("worker01", 2, RESTART_NPU)});
  ASSERT_EQ(impact.size(), 1u);
  EXPECT_EQ(impact[0].fault_id, DeviceFault("worker01", 2, RESTART_NPU).id);
}

TEST(MapImpact, RankWithoutDeviceIsHitOnlyByNodeFaults) {
  Job job;
  job.id = "cpu";
  job.placement[0] = RankPlacement{"worker01", std::nullopt};
  EXPECT_TRUE(MapImpact(job, {DeviceFault("worker01", 0, SEPARATE)}).empty());
  EXPECT_EQ(MapImpact(job, {NodeFault("worker01", SEPARATE)}).size(), 1u);
}

// The index (Job::Index, what FromProto builds) answers as FaultHitsRank over
// every rank: devices shared by ranks, ranks without a device, other nodes.
TEST(RanksHit, IndexedAnswersAsTheWalk) {
  Job walked;
  walked.id = "shared";
  walked.ranks_per_device = 2;
  walked.placement[0] = RankPlacement{"worker01", 0u};
  walked.placement[1] = RankPlacement{"worker01", 0u};
  walked.placement[2] = RankPlacement{"worker01", 1u};
  walked.placement[3] = RankPlacement{"worker01", std::nullopt};
  walked.placement[4] = RankPlacement{"worker02", 0u};
  walked.placement[7] = RankPlacement{"worker01", 3u};
  Job indexed = walked;
  indexed.Index();
  ASSERT_EQ(indexed.indexed_ranks, indexed.placement.size());
  const std::vector<FaultView> faults = {NodeFault("worker01", SEPARATE),      DeviceFault("worker01", 0, SEPARATE),
                                         DeviceFault("worker01", 1, SEPARATE), DeviceFault("worker01", 2, SEPARATE),
                                         DeviceFault("worker01", 3, SEPARATE), NodeFault("worker02", SEPARATE),
                                         DeviceFault("worker02", 1, SEPARATE), NodeFault("worker03", SEPARATE)};
  for (const FaultView& f : faults) {
    std::vector<int> walk;  // FaultHitsRank over every rank
    for (const auto& [rank, where] : walked.placement) {
      if (where.node == f.node && FaultHitsRank(f.device, where.device, where.any_device)) walk.push_back(rank);
    }
    EXPECT_EQ(RanksHit(indexed, f), walk) << f.id;
    EXPECT_EQ(RanksHit(walked, f), walk) << f.id;
    const std::span<const int> hits = indexed.Hits(f.node, f.device);
    EXPECT_EQ(std::vector<int>(hits.begin(), hits.end()), walk) << f.id;
  }
  EXPECT_EQ(RanksHit(indexed, NodeFault("worker01", SEPARATE)), (std::vector<int>{0, 1, 2, 3, 7}));
  EXPECT_EQ(RanksHit(indexed, DeviceFault("worker01", 0, SEPARATE)), (std::vector<int>{0, 1}));
  EXPECT_TRUE(RanksHit(indexed, DeviceFault("worker01", 2, SEPARATE)).empty());
  // A rank added after Index() is not lost: the job is indexed again.
  indexed.placement[9] = RankPlacement{"worker02", 1u};
  EXPECT_EQ(RanksHit(indexed, DeviceFault("worker02", 1, SEPARATE)), (std::vector<int>{9}));
}

// A rank that holds devices of its node without knowing which (a GPU pod,
// any_device) is hit by a fault on any device there, and still by node
// faults; a rank without devices by node faults only.
TEST(RanksHit, AnyDeviceRanksAreHitByEveryDeviceOfTheirNode) {
  Job walked;
  walked.id = "gpu";
  walked.placement[0] = RankPlacement{"gpu01", 0u};
  walked.placement[1] = RankPlacement{"gpu01", std::nullopt, true};
  walked.placement[2] = RankPlacement{"gpu01", std::nullopt};
  walked.placement[3] = RankPlacement{"gpu02", std::nullopt, true};
  Job indexed = walked;
  indexed.Index();
  for (const FaultView& f : {DeviceFault("gpu01", 0, SEPARATE), DeviceFault("gpu01", 5, SEPARATE),
                             NodeFault("gpu01", SEPARATE), DeviceFault("gpu02", 3, SEPARATE)}) {
    std::vector<int> walk;
    for (const auto& [rank, where] : walked.placement) {
      if (where.node == f.node && FaultHitsRank(f.device, where.device, where.any_device)) walk.push_back(rank);
    }
    EXPECT_EQ(RanksHit(indexed, f), walk) << f.id;
    EXPECT_EQ(RanksHit(walked, f), walk) << f.id;
  }
  EXPECT_EQ(RanksHit(indexed, DeviceFault("gpu01", 0, SEPARATE)), (std::vector<int>{0, 1}));
  EXPECT_EQ(RanksHit(indexed, DeviceFault("gpu01", 5, SEPARATE)), (std::vector<int>{1}));
  EXPECT_EQ(RanksHit(indexed, NodeFault("gpu01", SEPARATE)), (std::vector<int>{0, 1, 2}));
  // Through the proto: FromProto carries the flag.
  v1::Job proto;
  proto.set_id("gpu");
  auto* p = proto.add_placement();
  p->set_rank(0);
  p->set_node("gpu01");
  p->set_any_device(true);
  EXPECT_EQ(RanksHit(FromProto(proto), DeviceFault("gpu01", 3, SEPARATE)), (std::vector<int>{0}));
}

TEST(Decide, NoFaultsMeansNothingToDo) {
  const Decision d = DecideFor(MakeJob(), {});
  EXPECT_EQ(d.action, Action::kNone);
  EXPECT_EQ(d.gate, Gate::kNone);
  EXPECT_THAT(AllReasons(d), HasSubstr("no active fault hits the job"));
}

TEST(Decide, FaultsOnDevicesAndNodesTheJobDoesNotUseMeanNothingToDo) {
  Job job = MakeJob(JobKind::kTraining, 1, 4);  // worker01 devices 0-3
  const Decision d = DecideFor(job, {DeviceFault("worker01", 5, SEPARATE), DeviceFault("worker01", 7, RESTART_NPU),
                                     DeviceFault("worker02", 0, SEPARATE), NodeFault("worker03", SEPARATE)});
  EXPECT_EQ(d.action, Action::kNone);
  EXPECT_TRUE(d.hit_ranks.empty());
  EXPECT_THAT(AllReasons(d), HasSubstr("no active fault hits the job"));
}

TEST(Decide, FinishedOrPendingJobsAreNeverRecovered) {
  for (JobStatus status : {JobStatus::kPending, JobStatus::kSucceeded, JobStatus::kFailed}) {
    Job job = MakeJob();
    job.status = status;
    const Decision d = DecideFor(job, {DeviceFault("worker01", 0, SEPARATE)});
    EXPECT_EQ(d.action, Action::kNone) << JobStatusName(status);
    EXPECT_EQ(d.gate, Gate::kJobNotRunning);
  }
}

TEST(Decide, RecoveringJobWaitsForItsRunningRecovery) {
  Job job = MakeJob();
  job.status = JobStatus::kRecovering;
  const Decision d = DecideFor(job, {DeviceFault("worker01", 0, SEPARATE)});
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.gate, Gate::kRecoveryRunning);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_FALSE(d.wait_until.has_value());
}

// ---- Grouping ----------------------------------------------------------------

TEST(Grouping, ChipFaultAndNeighbourLinkFaultsAreOneRecovery) {
  Job job = MakeJob();
  const FaultView chip = DeviceFault("worker01", 3, RESTART_NPU, "80E18005", kT0 - 12s);
  const FaultView link2 = DeviceFault("worker01", 2, RESTART_REQUEST, "81078603", kT0 - 11s, v1::FAULT_SOURCE_NETWORK);
  const FaultView link4 = DeviceFault("worker01", 4, RESTART_REQUEST, "81078603", kT0 - 11s, v1::FAULT_SOURCE_NETWORK);
  const Decision d = DecideFor(job, {link4, chip, link2});
  ASSERT_EQ(d.action, Action::kRecover) << AllReasons(d);
  EXPECT_EQ(d.strategy, S::kProcessRestart);  // from the worst: RESTART_NPU
  EXPECT_EQ(d.level, RESTART_NPU);
  EXPECT_EQ(d.trigger_fault_ids, (std::vector<std::string>{chip.id, link2.id, link4.id}));  // root cause first
  EXPECT_EQ(d.hit_ranks, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(d.reset_devices, (std::vector<DeviceRef>{{"worker01", 3}}));
  EXPECT_TRUE(d.isolate_devices.empty());
}

TEST(Grouping, NodeThatDiesWithItsEightDevicesIsOneRecovery) {
  Job job = MakeJob();
  std::vector<FaultView> faults = {NodeFault("worker02", SEPARATE, "HEARTBEAT_LOST", kT0 - 15s)};
  for (uint32_t dev = 0; dev < 8; ++dev) {
    faults.push_back(DeviceFault("worker02", dev, dev % 2 ? RESTART_NPU : SEPARATE, "80E01801", kT0 - 14s));
  }
  const Decision d = DecideFor(job, faults);
  ASSERT_EQ(d.action, Action::kRecover) << AllReasons(d);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_EQ(d.trigger_fault_ids.size(), 9u);
  EXPECT_EQ(d.trigger_fault_ids.front(), faults.front().id);
  EXPECT_EQ(d.hit_ranks, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(d.isolate_nodes, std::vector<std::string>{"worker02"});
  EXPECT_TRUE(d.isolate_devices.empty());  // the node covers them
  EXPECT_TRUE(d.reset_devices.empty());
}

TEST(Grouping, WorstLevelDecidesWhateverTheOrder) {
  Job job = MakeJob();
  std::vector<FaultView> faults = {DeviceFault("worker01", 0, RESTART_REQUEST, "A"),
                                   DeviceFault("worker02", 1, SEPARATE, "B"),
                                   DeviceFault("worker01", 5, RESTART_BUSINESS, "C")};
  const Decision first = DecideFor(job, faults);
  std::reverse(faults.begin(), faults.end());
  const Decision second = DecideFor(job, faults);
  for (const Decision* d : {&first, &second}) {
    EXPECT_EQ(d->strategy, S::kPodReschedule);
    EXPECT_EQ(d->hit_ranks, (std::vector<int>{0, 5, 9}));
    EXPECT_EQ(d->isolate_devices, (std::vector<DeviceRef>{{"worker02", 1}}));
  }
  EXPECT_EQ(first.trigger_fault_ids, second.trigger_fault_ids);
  EXPECT_EQ(first.reasons, second.reasons);
}

TEST(Grouping, NodeLevelFaultWithDeviceSeparateFaults) {
  Job job = MakeJob();
  const Decision d =
      DecideFor(job, {NodeFault("worker01", RESTART_BUSINESS, "NODE_OOM", kT0 - 1min, v1::FAULT_SOURCE_MEMORY),
                      DeviceFault("worker01", 6, SEPARATE)});
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_EQ(d.hit_ranks.size(), 8u);
  EXPECT_TRUE(d.isolate_nodes.empty());  // the node-level fault is not SEPARATE
  EXPECT_EQ(d.isolate_devices, (std::vector<DeviceRef>{{"worker01", 6}}));
}

TEST(Grouping, PreSeparateDevicesJoinATrainingReschedule) {
  Job job = MakeJob();
  const FaultView sep = DeviceFault("worker01", 0, SEPARATE, "A");
  const FaultView pre = DeviceFault("worker01", 5, PRE_SEPARATE, "B");
  Decision d = DecideFor(job, {sep, pre});
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_EQ(d.trigger_fault_ids, (std::vector<std::string>{sep.id, pre.id}));
  EXPECT_EQ(d.hit_ranks, (std::vector<int>{0, 5}));
  EXPECT_EQ(d.isolate_devices, (std::vector<DeviceRef>{{"worker01", 0}, {"worker01", 5}}));
  EXPECT_THAT(AllReasons(d), HasSubstr("joins the POD_RESCHEDULE"));

  // A restart in place is not a scheduling point: the PRE_SEPARATE stays recorded.
  d = DecideFor(job, {DeviceFault("worker01", 0, RESTART_BUSINESS, "A"), pre});
  EXPECT_EQ(d.strategy, S::kProcessRestart);
  EXPECT_EQ(d.hit_ranks, std::vector<int>{0});
  EXPECT_TRUE(d.isolate_devices.empty());
}

TEST(Grouping, InferencePreSeparateIsAGracefulMoveOfTheReplica) {
  Job job = MakeJob(JobKind::kInference);
  job.ranks_per_replica = 4;
  const Decision d = DecideFor(job, {DeviceFault("worker02", 6, PRE_SEPARATE)});
  ASSERT_EQ(d.action, Action::kRecover);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_TRUE(d.graceful);
  EXPECT_EQ(d.hit_ranks, std::vector<int>{14});
  EXPECT_EQ(d.hit_replicas, std::vector<int>{3});
  EXPECT_EQ(d.isolate_devices, (std::vector<DeviceRef>{{"worker02", 6}}));

  // Not allowed to move proactively: recorded only, no escalation.
  job.policy.allowed = {S::kProcessRestart, S::kJobReschedule};
  const Decision none = DecideFor(job, {DeviceFault("worker02", 6, PRE_SEPARATE)});
  EXPECT_EQ(none.action, Action::kNone);
  EXPECT_THAT(AllReasons(none), HasSubstr("does not allow a proactive POD_RESCHEDULE"));
}

TEST(Grouping, RecordOnlyFaultsSayWhy) {
  const Decision d = DecideFor(MakeJob(), {DeviceFault("worker01", 0, v1::FAULT_LEVEL_SUB_HEALTH),
                                           DeviceFault("worker01", 1, v1::FAULT_LEVEL_NOT_HANDLE)});
  EXPECT_EQ(d.action, Action::kNone);
  ASSERT_EQ(d.reasons.size(), 2u);
  EXPECT_THAT(d.reasons[0], HasSubstr("recorded only"));
}

// ---- Flap suppression --------------------------------------------------------

TEST(HoldDown, YoungFaultWaitsUntilItHasBeenActiveForTheHoldDown) {
  Job job = MakeJob();
  job.policy.hold_down = 10s;
  const FaultView f = DeviceFault("worker01", 2, SEPARATE, "80E01801", kT0 - 3s);
  Decision d = DecideFor(job, {f});
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.gate, Gate::kHoldDown);
  EXPECT_EQ(d.wait_until, f.first_seen + 10s);
  EXPECT_THAT(AllReasons(d), HasSubstr("hold-down"));
  EXPECT_EQ(d.trigger_fault_ids, std::vector<std::string>{f.id});

  d = DecideFor(job, {f}, Cluster(), Limits{}, History{}, f.first_seen + 10s);  // exactly at the end
  EXPECT_EQ(d.action, Action::kRecover);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
}

TEST(HoldDown, FaultThatClearedWithinTheHoldDownIsAFlap) {
  Job job = MakeJob();
  job.policy.hold_down = 10s;
  FaultView f = DeviceFault("worker01", 2, SEPARATE, "80E01801", kT0 - 5s);
  f.active = false;
  f.cleared_at = kT0 - 3s;
  const Decision d = DecideFor(job, {f});
  EXPECT_EQ(d.action, Action::kNone);
  EXPECT_THAT(AllReasons(d), HasSubstr("flapped"));
}

TEST(HoldDown, ReRaisedFaultStartsItsHoldDownAgain) {
  Job job = MakeJob();
  job.policy.hold_down = 10s;
  // The same identity, raised again 2 s ago: first_seen is the current activation.
  const FaultView again = DeviceFault("worker01", 2, SEPARATE, "80E01801", kT0 - 2s);
  EXPECT_EQ(DecideFor(job, {again}).action, Action::kWait);
}

TEST(HoldDown, ZeroHoldDownActsAtOnce) {
  Job job = MakeJob();
  job.policy.hold_down = 0s;
  EXPECT_EQ(DecideFor(job, {DeviceFault("worker01", 2, SEPARATE, "X", kT0)}).action, Action::kRecover);
}

TEST(HoldDown, WorseYoungFaultIsWaitedForSoOneRecoveryCoversBoth) {
  Job job = MakeJob();
  job.policy.hold_down = 10s;
  const FaultView old_mild = DeviceFault("worker01", 1, RESTART_REQUEST, "A", kT0 - 30s);
  const FaultView young_bad = DeviceFault("worker01", 2, SEPARATE, "B", kT0 - 4s);
  Decision d = DecideFor(job, {old_mild, young_bad});
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.gate, Gate::kHoldDown);
  EXPECT_EQ(d.wait_until, kT0 + 6s);
  EXPECT_THAT(AllReasons(d), HasSubstr(young_bad.id));

  d = DecideFor(job, {old_mild, young_bad}, Cluster(), Limits{}, History{}, kT0 + 6s);
  EXPECT_EQ(d.action, Action::kRecover);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_EQ(d.trigger_fault_ids, (std::vector<std::string>{old_mild.id, young_bad.id}));
}

TEST(HoldDown, MilderYoungFaultJoinsTheSettledOnesRecovery) {
  Job job = MakeJob();
  job.policy.hold_down = 10s;
  const FaultView old_bad = DeviceFault("worker01", 3, SEPARATE, "A", kT0 - 30s);
  const FaultView young_link = DeviceFault("worker01", 4, RESTART_REQUEST, "B", kT0 - 1s);
  const Decision d = DecideFor(job, {young_link, old_bad});
  ASSERT_EQ(d.action, Action::kRecover);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_EQ(d.trigger_fault_ids, (std::vector<std::string>{old_bad.id, young_link.id}));
  EXPECT_EQ(d.hit_ranks, (std::vector<int>{3, 4}));
}

// ---- Silencing and cordon ------------------------------------------------------

TEST(Silence, OpenWindowSilencesTheCodeAndSaysSo) {
  Job job = MakeJob();
  job.policy.silences = {SilenceWindow::For("80E01801", kT0 - 1h, 2h)};
  const Decision d = DecideFor(job, {DeviceFault("worker01", 0, SEPARATE, "80E01801")});
  EXPECT_EQ(d.action, Action::kNone);
  EXPECT_THAT(AllReasons(d), HasSubstr("silenced"));
}

TEST(Silence, ExpiredWindowSilencesNothing) {
  Job job = MakeJob();
  job.policy.silences = {SilenceWindow{"80E01801", kT0 - 1s}};
  const Decision d = DecideFor(job, {DeviceFault("worker01", 0, SEPARATE, "80E01801")});
  EXPECT_EQ(d.action, Action::kRecover);
  EXPECT_THAT(AllReasons(d), ::testing::Not(HasSubstr("silenced")));
}

TEST(Silence, WindowEndsExactlyAtUntil) {
  Job job = MakeJob();
  job.policy.silences = {SilenceWindow{"80E01801", kT0}};
  EXPECT_EQ(DecideFor(job, {DeviceFault("worker01", 0, SEPARATE, "80E01801")}).action, Action::kRecover);
}

TEST(Silence, PatternsAndOpenEndedWindows) {
  Job job = MakeJob();
  job.policy.silences = {SilenceWindow{"80e0*", std::nullopt}};  // case-insensitive glob, no end
  const FaultView silenced = DeviceFault("worker01", 0, SEPARATE, "80E01801");
  const FaultView other = DeviceFault("worker01", 1, RESTART_BUSINESS, "81078603");
  const Decision d = DecideFor(job, {silenced, other});
  ASSERT_EQ(d.action, Action::kRecover);
  EXPECT_EQ(d.strategy, S::kProcessRestart);  // the silenced SEPARATE does not count
  EXPECT_EQ(d.trigger_fault_ids, std::vector<std::string>{other.id});
  EXPECT_THAT(AllReasons(d), HasSubstr("silenced: code 80E01801 matches '80e0*' (no end)"));
}

TEST(Cordon, FaultsOnCordonedNodesStartNoRecovery) {
  ClusterView cluster = Cluster();
  cluster.cordoned_nodes = {"worker01"};
  Decision d = DecideFor(MakeJob(), {NodeFault("worker01", SEPARATE)}, cluster);
  EXPECT_EQ(d.action, Action::kNone);
  EXPECT_THAT(AllReasons(d), HasSubstr("cordoned or in maintenance"));

  // A fault elsewhere still acts, alone.
  const FaultView other = DeviceFault("worker02", 0, RESTART_BUSINESS);
  d = DecideFor(MakeJob(), {NodeFault("worker01", SEPARATE), other}, cluster);
  EXPECT_EQ(d.strategy, S::kProcessRestart);
  EXPECT_EQ(d.trigger_fault_ids, std::vector<std::string>{other.id});
}

// ---- Pause and dry-run -------------------------------------------------------

TEST(Pause, RecoveryWaitsAndSaysWhatItWouldDo) {
  ClusterView cluster = Cluster();
  cluster.paused = true;
  Decision d = DecideFor(MakeJob(), {DeviceFault("worker01", 0, SEPARATE)}, cluster);
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.gate, Gate::kPaused);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_THAT(AllReasons(d), HasSubstr("paused"));

  // Pause also holds a FAIL back, and leaves "nothing to do" alone.
  Job nothing_allowed = MakeJob();
  nothing_allowed.policy.allowed = {};
  d = DecideFor(nothing_allowed, {DeviceFault("worker01", 0, SEPARATE)}, cluster);
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.strategy, S::kFail);
  EXPECT_EQ(DecideFor(MakeJob(), {}, cluster).action, Action::kNone);
}

TEST(DryRun, DecisionIsMadeAndMarked) {
  ClusterView cluster = Cluster();
  cluster.dry_run = true;
  const Decision d = DecideFor(MakeJob(), {DeviceFault("worker01", 0, SEPARATE)}, cluster);
  EXPECT_EQ(d.action, Action::kRecover);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_TRUE(d.dry_run);
  EXPECT_EQ(d.isolate_devices, (std::vector<DeviceRef>{{"worker01", 0}}));
  EXPECT_FALSE(DecideFor(MakeJob(), {DeviceFault("worker01", 0, SEPARATE)}).dry_run);
  // Gates still apply in dry-run: it records what would really happen.
  cluster.paused = true;
  const Decision paused = DecideFor(MakeJob(), {DeviceFault("worker01", 0, SEPARATE)}, cluster);
  EXPECT_EQ(paused.action, Action::kWait);
  EXPECT_TRUE(paused.dry_run);
}

// ---- Budgets -----------------------------------------------------------------

TEST(Budget, JobBudgetExhaustedFails) {
  Job job = MakeJob();
  job.policy.max_retries_per_job = 3;
  History h;
  h.job_retries_used = 2;
  EXPECT_EQ(DecideFor(job, {DeviceFault("worker01", 0, RESTART_BUSINESS)}, Cluster(), Limits{}, h).strategy,
            S::kProcessRestart);
  h.job_retries_used = 3;
  const Decision d = DecideFor(job, {DeviceFault("worker01", 0, SEPARATE)}, Cluster(), Limits{}, h);
  EXPECT_EQ(d.action, Action::kRecover);
  EXPECT_EQ(d.strategy, S::kFail);
  EXPECT_EQ(d.gate, Gate::kJobBudget);
  EXPECT_TRUE(d.isolate_devices.empty());
  EXPECT_THAT(AllReasons(d), HasSubstr("job retry budget exhausted: 3 of 3 used"));

  job.policy.max_retries_per_job = std::nullopt;  // unlimited
  h.job_retries_used = 1000;
  EXPECT_EQ(DecideFor(job, {DeviceFault("worker01", 0, SEPARATE)}, Cluster(), Limits{}, h).strategy, S::kPodReschedule);

  job.policy.max_retries_per_job = 0;  // no automatic recovery at all
  EXPECT_EQ(DecideFor(job, {DeviceFault("worker01", 0, SEPARATE)}).gate, Gate::kJobBudget);
}

TEST(Budget, NodeBudgetExhaustedOnAHitNodeFails) {
  Job job = MakeJob();
  job.policy.max_retries_per_node = 2;
  History h;
  h.node_retries_used = {{"worker01", 2}, {"worker02", 1}};
  // The spent node is not hit: fine.
  EXPECT_EQ(DecideFor(job, {DeviceFault("worker02", 0, RESTART_BUSINESS)}, Cluster(), Limits{}, h).strategy,
            S::kProcessRestart);
  const Decision d =
      DecideFor(job, {DeviceFault("worker02", 0, RESTART_BUSINESS), DeviceFault("worker01", 3, RESTART_NPU)}, Cluster(),
                Limits{}, h);
  EXPECT_EQ(d.strategy, S::kFail);
  EXPECT_EQ(d.gate, Gate::kNodeBudget);
  EXPECT_THAT(AllReasons(d), HasSubstr("node retry budget exhausted on worker01: 2 of 2 used"));
}

// ---- Blast radius ------------------------------------------------------------

TEST(BlastRadius, ConcurrentRecoveriesLimit) {
  Limits limits;
  limits.max_concurrent_recoveries = 2;
  ClusterView cluster = Cluster();
  cluster.recoveries_running = 1;
  EXPECT_EQ(DecideFor(MakeJob(), {DeviceFault("worker01", 0, SEPARATE)}, cluster, limits).action, Action::kRecover);
  cluster.recoveries_running = 2;
  const Decision d = DecideFor(MakeJob(), {DeviceFault("worker01", 0, SEPARATE)}, cluster, limits);
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.gate, Gate::kMaxConcurrent);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_THAT(AllReasons(d), HasSubstr("2 recoveries already running, the limit is 2"));
}

TEST(BlastRadius, IsolatedNodePercentLimitMakesItWait) {
  Job job = MakeJob();
  job.policy.allowed = {S::kProcessRestart, S::kPodReschedule, S::kJobReschedule};  // no SCALE_IN
  Limits limits;
  limits.max_isolated_node_percent = 10;
  ClusterView cluster = Cluster(20);  // 10% of 20 = 2 nodes
  cluster.isolated_nodes = {"worker09"};
  EXPECT_EQ(DecideFor(job, {NodeFault("worker01", SEPARATE)}, cluster, limits).action, Action::kRecover);

  cluster.isolated_nodes = {"worker09", "worker10"};
  const Decision d = DecideFor(job, {NodeFault("worker01", SEPARATE)}, cluster, limits);
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.gate, Gate::kMaxIsolated);
  EXPECT_THAT(AllReasons(d), HasSubstr("3 of 20 nodes isolated, over the 10% limit"));

  // A node already isolated is not a new isolation; device isolation does not count.
  cluster.isolated_nodes = {"worker01", "worker10"};
  EXPECT_EQ(DecideFor(job, {NodeFault("worker01", SEPARATE)}, cluster, limits).action, Action::kRecover);
  cluster.isolated_nodes = {"worker09", "worker10"};
  EXPECT_EQ(DecideFor(job, {DeviceFault("worker01", 1, SEPARATE)}, cluster, limits).action, Action::kRecover);
}

TEST(BlastRadius, TrainingScalesInWhenIsolationIsOverTheLimit) {
  Job job = MakeJob();  // all strategies allowed
  Limits limits;
  ClusterView cluster = Cluster(10);  // 10% of 10 = 1 node
  cluster.isolated_nodes = {"worker09"};
  const Decision d = DecideFor(job, {NodeFault("worker01", SEPARATE)}, cluster, limits);
  ASSERT_EQ(d.action, Action::kRecover) << AllReasons(d);
  EXPECT_EQ(d.strategy, S::kScaleIn);
  EXPECT_EQ(d.gate, Gate::kMaxIsolated);
  EXPECT_TRUE(d.isolate_nodes.empty());
  EXPECT_EQ(d.hit_replicas.size(), 8u);
  EXPECT_THAT(AllReasons(d), HasSubstr("scaling in"));
  EXPECT_EQ(d.step_timeout, DefaultStepTimeout(S::kScaleIn));

  // Not if too few replicas would remain.
  job.policy.min_replicas = 9;
  EXPECT_EQ(DecideFor(job, {NodeFault("worker01", SEPARATE)}, cluster, limits).gate, Gate::kMaxIsolated);
  EXPECT_EQ(DecideFor(job, {NodeFault("worker01", SEPARATE)}, cluster, limits).action, Action::kWait);
}

TEST(BlastRadius, ScaleInFallbackLeavesPreSeparateFaultsRecorded) {
  Job job = MakeJob();
  ClusterView cluster = Cluster(10);
  cluster.isolated_nodes = {"worker09"};
  const FaultView node = NodeFault("worker02", SEPARATE);
  const FaultView pre = DeviceFault("worker01", 5, PRE_SEPARATE);
  const Decision d = DecideFor(job, {node, pre}, cluster);
  ASSERT_EQ(d.strategy, S::kScaleIn) << AllReasons(d);
  EXPECT_EQ(d.trigger_fault_ids, std::vector<std::string>{node.id});
  EXPECT_EQ(d.hit_ranks, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_TRUE(d.isolate_devices.empty());
  EXPECT_THAT(AllReasons(d), HasSubstr("PRE_SEPARATE faults stay recorded"));
}

TEST(BlastRadius, SmallClusterMayIsolateOneNodeButZeroPercentIsolatesNone) {
  Job job = MakeJob();
  job.policy.allowed = {S::kPodReschedule};
  Limits limits;
  EXPECT_EQ(DecideFor(job, {NodeFault("worker01", SEPARATE)}, Cluster(2), limits).action, Action::kRecover);
  limits.max_isolated_node_percent = 0;
  EXPECT_EQ(DecideFor(job, {NodeFault("worker01", SEPARATE)}, Cluster(2), limits).gate, Gate::kMaxIsolated);
}

// ---- Escalation --------------------------------------------------------------

TEST(Escalate, WalksTheLadderToFail) {
  JobPolicy all;
  std::vector<Strategy> seen;
  for (Strategy s = S::kStepRetry; s != S::kFail; s = Escalate(s, all)) seen.push_back(s);
  EXPECT_EQ(seen, (std::vector<Strategy>{S::kStepRetry, S::kProcessRestart, S::kPodReschedule, S::kJobReschedule,
                                         S::kScaleIn}));
  EXPECT_EQ(Escalate(S::kFail, all), S::kFail);

  JobPolicy sparse;
  sparse.allowed = {S::kProcessRestart, S::kJobReschedule};
  EXPECT_EQ(Escalate(S::kStepRetry, sparse), S::kProcessRestart);
  EXPECT_EQ(Escalate(S::kProcessRestart, sparse), S::kJobReschedule);
  EXPECT_EQ(Escalate(S::kJobReschedule, sparse), S::kFail);
  EXPECT_EQ(FirstAllowed(S::kStepRetry, all, JobKind::kInference), S::kProcessRestart);
}

TEST(Escalate, FailedRungsOfThisIncidentAreSkippedUntilFail) {
  Job job = MakeJob();
  const std::vector<FaultView> faults = {DeviceFault("worker01", 0, RESTART_REQUEST)};
  History h;
  std::vector<Strategy> sequence;
  for (int i = 0; i < 7; ++i) {
    const Decision d = DecideFor(job, faults, Cluster(), Limits{}, h);
    ASSERT_EQ(d.action, Action::kRecover) << AllReasons(d);
    sequence.push_back(*d.strategy);
    if (*d.strategy == S::kFail) break;
    h.recent.push_back(PastRecovery{*d.strategy, i % 2 ? RecoveryOutcome::kTimedOut : RecoveryOutcome::kFailed,
                                    kT0 - 1min + std::chrono::seconds(i)});
    h.job_retries_used++;
  }
  EXPECT_EQ(sequence, (std::vector<Strategy>{S::kStepRetry, S::kProcessRestart, S::kPodReschedule, S::kJobReschedule,
                                             S::kScaleIn, S::kFail}));
}

TEST(Escalate, OnlyRecentFailuresOfTheSameIncidentCount) {
  Job job = MakeJob();
  job.policy.escalation_window = 10min;
  const std::vector<FaultView> faults = {DeviceFault("worker01", 0, RESTART_BUSINESS)};
  History h;
  h.recent = {PastRecovery{S::kProcessRestart, RecoveryOutcome::kFailed, kT0 - 5min}};
  Decision d = DecideFor(job, faults, Cluster(), Limits{}, h);
  EXPECT_EQ(d.strategy, S::kPodReschedule);
  EXPECT_THAT(AllReasons(d), HasSubstr("previous PROCESS_RESTART failed"));

  h.recent = {PastRecovery{S::kProcessRestart, RecoveryOutcome::kFailed, kT0 - 11min}};  // outside the window
  EXPECT_EQ(DecideFor(job, faults, Cluster(), Limits{}, h).strategy, S::kProcessRestart);

  // A success since the failure ends that incident.
  h.recent = {PastRecovery{S::kProcessRestart, RecoveryOutcome::kFailed, kT0 - 5min},
              PastRecovery{S::kPodReschedule, RecoveryOutcome::kSucceeded, kT0 - 2min}};
  EXPECT_EQ(DecideFor(job, faults, Cluster(), Limits{}, h).strategy, S::kProcessRestart);

  // A failure below the level's own start changes nothing.
  h.recent = {PastRecovery{S::kStepRetry, RecoveryOutcome::kFailed, kT0 - 1min}};
  EXPECT_EQ(DecideFor(job, {DeviceFault("worker01", 0, SEPARATE)}, Cluster(), Limits{}, h).strategy, S::kPodReschedule);
}

TEST(Escalate, ScaleInThatWouldLeaveTooFewReplicasFails) {
  Job job = MakeJob();
  job.policy.allowed = {S::kScaleIn};
  job.policy.min_replicas = 16;
  const Decision d = DecideFor(job, {DeviceFault("worker01", 0, SEPARATE)});
  EXPECT_EQ(d.strategy, S::kFail);
  EXPECT_THAT(AllReasons(d), HasSubstr("SCALE_IN would leave 15 replica(s)"));
}

// ---- Misc --------------------------------------------------------------------

TEST(Decide, StepTimeoutComesFromThePolicy) {
  Job job = MakeJob();
  job.policy.step_timeouts[S::kProcessRestart] = 42s;
  EXPECT_EQ(DecideFor(job, {DeviceFault("worker01", 0, RESTART_BUSINESS)}).step_timeout, 42s);
}

TEST(Decide, IsPure) {
  Job job = MakeJob();
  job.policy.hold_down = 10s;
  const std::vector<FaultView> faults = {DeviceFault("worker01", 0, SEPARATE, "A", kT0 - 20s),
                                         DeviceFault("worker02", 4, RESTART_NPU, "B", kT0 - 3s)};
  const Decision a = DecideFor(job, faults);
  const Decision b = DecideFor(job, faults);
  EXPECT_EQ(a.action, b.action);
  EXPECT_EQ(a.strategy, b.strategy);
  EXPECT_EQ(a.reasons, b.reasons);
  EXPECT_EQ(a.trigger_fault_ids, b.trigger_fault_ids);
  EXPECT_EQ(a.isolate_devices, b.isolate_devices);
  EXPECT_EQ(a.reset_devices, b.reset_devices);
}

}  // namespace
}  // namespace clusterd::recovery
