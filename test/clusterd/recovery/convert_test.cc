#include "clusterd/recovery/convert.h"

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include "clusterd/recovery/decide.h"

namespace clusterd::recovery {
namespace {

using google::protobuf::util::TimeUtil;

TEST(Convert, StrategiesRoundTrip) {
  for (Strategy s : kLadder) EXPECT_EQ(FromProto(ToProto(s)), s);
  EXPECT_EQ(FromProto(v1::RECOVERY_STRATEGY_UNSPECIFIED), Strategy::kFail);
}

TEST(Convert, JobAndPolicyDefaultsAndOverrides) {
  v1::Job job;
  job.set_id("llm");
  job.set_kind(v1::JOB_KIND_INFERENCE);
  auto* p = job.add_placement();
  p->set_rank(4);
  p->set_node("worker01");
  p->set_device_id(3);
  auto* q = job.add_placement();
  q->set_rank(5);
  q->set_node("worker02");
  Job unset = FromProto(job);
  EXPECT_EQ(unset.kind, JobKind::kInference);
  EXPECT_EQ(unset.placement.at(4).device, 3u);
  EXPECT_FALSE(unset.placement.at(5).device.has_value());
  EXPECT_EQ(unset.policy.max_retries_per_job, JobPolicy().max_retries_per_job);
  EXPECT_EQ(unset.policy.hold_down, JobPolicy().hold_down);
  EXPECT_EQ(unset.policy.allowed, JobPolicy().allowed);

  auto* policy = job.mutable_policy();
  policy->add_allowed_strategies(v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  policy->set_max_retries_per_job(2);
  *policy->mutable_hold_down() = TimeUtil::SecondsToDuration(0);  // explicitly none
  policy->set_ranks_per_replica(2);
  auto* silence = policy->add_silences();
  silence->set_code("80E0*");
  Job set = FromProto(job);
  EXPECT_EQ(set.policy.allowed, (std::set<Strategy>{Strategy::kPodReschedule}));
  EXPECT_EQ(set.policy.max_retries_per_job, 2);
  EXPECT_EQ(set.policy.hold_down, Duration(0));
  EXPECT_EQ(set.ranks_per_replica, 2);
  ASSERT_EQ(set.policy.silences.size(), 1u);
  EXPECT_FALSE(set.policy.silences[0].until.has_value());
}

TEST(Convert, FaultUsesTheCurrentActivationForHoldDown) {
  v1::Fault f;
  f.set_id("worker01/3/accelerator/80E01801");
  f.set_node("worker01");
  f.set_device_id(3);
  f.set_code("80E01801");
  f.set_level(v1::FAULT_LEVEL_SEPARATE);
  f.set_state(v1::FAULT_STATE_ACTIVE);
  *f.mutable_first_seen() = TimeUtil::SecondsToTimestamp(100);
  *f.mutable_activated_time() = TimeUtil::SecondsToTimestamp(500);
  FaultView v = FromProto(f);
  EXPECT_TRUE(v.active);
  EXPECT_EQ(v.device, 3u);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(v.first_seen.time_since_epoch()).count(), 500);
  f.clear_activated_time();
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(FromProto(f).first_seen.time_since_epoch()).count(), 100);
}

TEST(Convert, ConvertedJobAndFaultDriveADecision) {
  v1::Job job;
  job.set_id("llm");
  job.set_kind(v1::JOB_KIND_TRAINING);
  auto* p = job.add_placement();
  p->set_rank(0);
  p->set_node("worker01");
  p->set_device_id(3);
  v1::Fault f;
  f.set_id("worker01/3/accelerator/80E01801");
  f.set_node("worker01");
  f.set_device_id(3);
  f.set_code("80E01801");
  f.set_level(v1::FAULT_LEVEL_RESTART_BUSINESS);
  f.set_state(v1::FAULT_STATE_ACTIVE);
  *f.mutable_activated_time() = TimeUtil::SecondsToTimestamp(1000);
  ClusterView cluster;
  cluster.total_nodes = 10;
  const TimePoint later = TimePoint(std::chrono::seconds(2000));
  Decision d = Decide(FromProto(job), {FromProto(f)}, cluster, Limits{}, History{}, later);
  EXPECT_EQ(d.action, Action::kRecover);
  ASSERT_TRUE(d.strategy.has_value());
  EXPECT_EQ(ToProto(*d.strategy), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
}

}  // namespace
}  // namespace clusterd::recovery
