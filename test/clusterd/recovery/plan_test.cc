// The steps a strategy becomes (clusterd/recovery/plan.h), in order, with
// their ranks, targets and idempotency keys.
#include "clusterd/recovery/plan.h"

#include <gtest/gtest.h>

namespace clusterd::recovery {
namespace {

// A job of `ranks` ranks, two per node (worker00, worker01, ...).
v1::Job PlanJob(uint32_t ranks, uint32_t per_replica = 0) {
  v1::Job job;
  job.set_id("train");
  for (uint32_t r = 0; r < ranks; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    p->set_node("worker0" + std::to_string(r / 2));
    p->set_device_id(r % 2);
  }
  if (per_replica > 0) job.mutable_policy()->set_ranks_per_replica(per_replica);
  return job;
}

v1::Recovery PlanRecovery(std::initializer_list<uint32_t> hit) {
  v1::Recovery r;
  r.set_id("rec-7");
  for (uint32_t rank : hit) r.add_hit_ranks(rank);
  return r;
}

// One line per step: "agent CMD [ranks]" or "act ACTION node/device".
std::vector<std::string> Lines(const v1::Recovery& r) {
  std::vector<std::string> out;
  for (const auto& s : r.steps()) {
    std::string line;
    if (s.command() != v1::JOB_COMMAND_UNSPECIFIED) {
      line = "agent " + v1::JobCommand_Name(s.command()) + " [";
      for (int i = 0; i < s.ranks_size(); ++i) line += (i ? "," : "") + std::to_string(s.ranks(i));
      line += "]";
    } else {
      line = "act " + v1::ClusterAction_Name(s.action());
      if (!s.node().empty()) line += " " + s.node();
      if (s.has_device_id()) line += "/" + std::to_string(s.device_id());
      if (s.ranks_size() > 0) line += " [" + std::to_string(s.ranks_size()) + " ranks]";
    }
    out.push_back(line);
  }
  return out;
}

TEST(PlanSteps, AStepRetryIsOneCommandToTheHitRanks) {
  v1::Recovery r = PlanRecovery({3, 1});
  PlanSteps(PlanJob(4), Strategy::kStepRetry, &r);
  EXPECT_EQ(Lines(r), std::vector<std::string>{"agent JOB_COMMAND_RETRY_STEP [3,1]"});
  ASSERT_EQ(r.steps_size(), 1);
  EXPECT_EQ(r.steps(0).index(), 0u);
  EXPECT_EQ(r.steps(0).idempotency_key(), "rec-7/0");
  EXPECT_EQ(r.steps(0).state(), v1::STEP_STATE_PENDING);
  EXPECT_EQ(r.steps(0).strategy(), v1::RECOVERY_STRATEGY_STEP_RETRY);
}

TEST(PlanSteps, AProcessRestartStopsFirstOnlyWhenChipsAreReset) {
  v1::Recovery plain = PlanRecovery({2});
  PlanSteps(PlanJob(4), Strategy::kProcessRestart, &plain);
  EXPECT_EQ(Lines(plain), std::vector<std::string>{"agent JOB_COMMAND_RESTART_PROCESSES [2]"});

  v1::Recovery reset = PlanRecovery({2});
  auto* d = reset.add_reset_devices();
  d->set_node("worker01");
  d->set_device_id(0);
  PlanSteps(PlanJob(4), Strategy::kProcessRestart, &reset);
  EXPECT_EQ(Lines(reset),
            (std::vector<std::string>{"agent JOB_COMMAND_STOP [2]", "act CLUSTER_ACTION_RESET_DEVICE worker01/0",
                                      "agent JOB_COMMAND_RESTART_PROCESSES [2]"}));
}

TEST(PlanSteps, APodRescheduleCheckpointsWhenGracefulPausesIsolatesMovesAndResumes) {
  v1::Recovery r = PlanRecovery({1});
  r.set_graceful(true);
  r.add_isolate_nodes("worker02");
  auto* d = r.add_isolate_devices();
  d->set_node("worker00");
  d->set_device_id(1);
  PlanSteps(PlanJob(4), Strategy::kPodReschedule, &r);
  EXPECT_EQ(Lines(r), (std::vector<std::string>{
                          "agent JOB_COMMAND_CHECKPOINT [0,1,2,3]", "agent JOB_COMMAND_PAUSE [0,1,2,3]",
                          "act CLUSTER_ACTION_ISOLATE_NODE worker02", "act CLUSTER_ACTION_ISOLATE_DEVICE worker00/1",
                          "act CLUSTER_ACTION_RESCHEDULE_PODS [1 ranks]", "agent JOB_COMMAND_RESUME [1]"}));
  for (int i = 0; i < r.steps_size(); ++i) {
    EXPECT_EQ(r.steps(i).index(), static_cast<uint32_t>(i));
    EXPECT_EQ(r.steps(i).idempotency_key(), "rec-7/" + std::to_string(i));
  }

  v1::Recovery hard = PlanRecovery({1});
  PlanSteps(PlanJob(4), Strategy::kPodReschedule, &hard);
  EXPECT_EQ(Lines(hard).front(), "agent JOB_COMMAND_PAUSE [0,1,2,3]") << "no checkpoint unless graceful";
}

TEST(PlanSteps, AJobRescheduleStopsEveryRankAndRestartsTheJob) {
  v1::Recovery r = PlanRecovery({0});
  r.add_isolate_nodes("worker00");
  PlanSteps(PlanJob(3), Strategy::kJobReschedule, &r);
  EXPECT_EQ(Lines(r),
            (std::vector<std::string>{"agent JOB_COMMAND_STOP [0,1,2]", "act CLUSTER_ACTION_ISOLATE_NODE worker00",
                                      "act CLUSTER_ACTION_RESTART_JOB [3 ranks]"}));
}

TEST(PlanSteps, AScaleInDropsEveryRankOfEachHitReplica) {
  v1::Recovery r = PlanRecovery({3, 4});
  PlanSteps(PlanJob(8, 2), Strategy::kScaleIn, &r);  // replicas {0,1} {2,3} {4,5} {6,7}
  EXPECT_EQ(Lines(r), std::vector<std::string>{"agent JOB_COMMAND_SCALE_IN [2,3,4,5]"});
  v1::Recovery unset = PlanRecovery({3});
  PlanSteps(PlanJob(4), Strategy::kScaleIn, &unset);  // no replica size: one rank each
  EXPECT_EQ(Lines(unset), std::vector<std::string>{"agent JOB_COMMAND_SCALE_IN [3]"});
}

TEST(PlanSteps, AnEscalationNumbersOnFromTheStepsThereAndFailAddsNone) {
  v1::Recovery r = PlanRecovery({1});
  PlanSteps(PlanJob(2), Strategy::kStepRetry, &r);
  PlanSteps(PlanJob(2), Strategy::kJobReschedule, &r);
  ASSERT_EQ(r.steps_size(), 3);
  EXPECT_EQ(r.steps(1).index(), 1u);
  EXPECT_EQ(r.steps(2).idempotency_key(), "rec-7/2");
  EXPECT_EQ(r.steps(2).strategy(), v1::RECOVERY_STRATEGY_JOB_RESCHEDULE);
  PlanSteps(PlanJob(2), Strategy::kFail, &r);
  EXPECT_EQ(r.steps_size(), 3);
}

TEST(SetActions, ReplacesTheListsWithTheDecisions) {
  v1::Recovery r;
  r.add_isolate_nodes("old");
  r.add_reset_devices()->set_node("old");
  Decision d;
  d.isolate_nodes = {"worker03"};
  d.isolate_devices = {DeviceRef{"worker01", 2}};
  SetActions(d, &r);
  ASSERT_EQ(r.isolate_nodes_size(), 1);
  EXPECT_EQ(r.isolate_nodes(0), "worker03");
  ASSERT_EQ(r.isolate_devices_size(), 1);
  EXPECT_EQ(r.isolate_devices(0).node(), "worker01");
  EXPECT_EQ(r.isolate_devices(0).device_id(), 2u);
  EXPECT_EQ(r.reset_devices_size(), 0);
}

}  // namespace
}  // namespace clusterd::recovery
