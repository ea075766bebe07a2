#include <gtest/gtest.h>

#include "fixtures.h"

namespace clusterd::recovery {
namespace {

using namespace testing;

TEST(Types, StrategyNamesRoundTripInLadderOrder) {
  int previous = -1;
  for (Strategy s : kLadder) {
    EXPECT_EQ(ParseStrategy(StrategyName(s)), s);
    EXPECT_GT(static_cast<int>(s), previous);
    previous = static_cast<int>(s);
  }
  EXPECT_EQ(ParseStrategy("pod_reschedule"), Strategy::kPodReschedule);
  EXPECT_FALSE(ParseStrategy("REBOOT").has_value());
}

TEST(Types, CodeMatches) {
  EXPECT_TRUE(CodeMatches("80E01801", "80E01801"));
  EXPECT_TRUE(CodeMatches("80e01801", "80E01801"));
  EXPECT_FALSE(CodeMatches("80E0180", "80E01801"));
  EXPECT_TRUE(CodeMatches("80E0*", "80E01801"));
  EXPECT_TRUE(CodeMatches("*", "NODE_DISK_FULL"));
  EXPECT_TRUE(CodeMatches("NODE_*_FULL", "NODE_DISK_FULL"));
  EXPECT_TRUE(CodeMatches("80E0180?", "80E01809"));
  EXPECT_FALSE(CodeMatches("80E0180?", "80E018"));
  EXPECT_TRUE(CodeMatches("*1*1*", "80E01801"));
  EXPECT_FALSE(CodeMatches("*X*", "80E01801"));
  EXPECT_FALSE(CodeMatches("", "A"));
}

TEST(Types, PolicyAllowsFailAlwaysAndKnowsTimeouts) {
  JobPolicy p;
  p.allowed = {};
  EXPECT_TRUE(p.Allows(Strategy::kFail));
  EXPECT_FALSE(p.Allows(Strategy::kStepRetry));
  p.step_timeouts[Strategy::kPodReschedule] = 30s;
  EXPECT_EQ(p.TimeoutFor(Strategy::kPodReschedule), 30s);
  EXPECT_EQ(p.TimeoutFor(Strategy::kJobReschedule), DefaultStepTimeout(Strategy::kJobReschedule));
}

TEST(Types, ReplicasGroupConsecutiveRanks) {
  Job job = MakeJob(JobKind::kInference, 2, 8);
  EXPECT_EQ(job.ReplicaCount(), 16);
  job.ranks_per_replica = 4;
  EXPECT_EQ(job.ReplicaCount(), 4);
  EXPECT_EQ(job.ReplicaOf(7), 1);
}

TEST(Validate, AcceptsDefaultsAndNamesTheBadField) {
  EXPECT_TRUE(ValidateJob(MakeJob()).ok());
  EXPECT_TRUE(ValidateLimits(Limits{}).ok());

  auto message = [](const Job& job) { return ValidateJob(job).message(); };
  Job job = MakeJob();
  job.id = "";
  EXPECT_NE(message(job).find("id"), std::string::npos);
  job = MakeJob();
  job.placement.clear();
  EXPECT_NE(message(job).find("placement"), std::string::npos);
  job = MakeJob();
  job.placement[99] = RankPlacement{"worker01", 0u};  // device 0 already used by rank 0
  EXPECT_NE(message(job).find("already used"), std::string::npos);
  job.ranks_per_device = 2;  // two ranks may share it now, three may not
  EXPECT_TRUE(ValidateJob(job).ok()) << message(job);
  job.placement[100] = RankPlacement{"worker01", 0u};
  EXPECT_NE(message(job).find("already used by 2 ranks"), std::string::npos) << message(job);
  job = MakeJob();
  job.ranks_per_device = 0;
  EXPECT_NE(message(job).find("ranks_per_device"), std::string::npos);
  job = MakeJob();
  job.placement[3].node = "bad node!";
  EXPECT_NE(message(job).find("placement[3].node"), std::string::npos);
  job = MakeJob();
  job.policy.min_replicas = 0;
  EXPECT_NE(message(job).find("policy.min_replicas"), std::string::npos);
  job = MakeJob();
  job.policy.min_replicas = 17;
  EXPECT_NE(message(job).find("larger than the job's 16 replicas"), std::string::npos);
  job = MakeJob();
  job.policy.silences = {SilenceWindow{"80E0 1801", std::nullopt}};
  EXPECT_NE(message(job).find("silences[0].code"), std::string::npos);
  job = MakeJob();
  job.policy.step_timeouts[Strategy::kStepRetry] = 0s;
  EXPECT_NE(message(job).find("step_timeouts[STEP_RETRY]"), std::string::npos);
  job = MakeJob();
  job.policy.max_retries_per_node = -1;
  EXPECT_FALSE(ValidateJob(job).ok());

  Limits limits;
  limits.max_isolated_node_percent = 101;
  EXPECT_FALSE(ValidateLimits(limits).ok());
  limits = Limits{};
  limits.max_concurrent_recoveries = -1;
  EXPECT_FALSE(ValidateLimits(limits).ok());
}

}  // namespace
}  // namespace clusterd::recovery
