// MindCluster's NIC switch and stress test (mindcluster/om.h), pure: the
// reference's checks of an operator's request and their codes, each flow's
// signals in order with TaskD's answers, the stage's wait running out, a
// recovery taking over, the resend after a restart, and the faults a stress
// test's per-chip codes become.
#include <gtest/gtest.h>

#include "clusterd/mindcluster/om.h"
#include "clusterd/mindcluster/taskd.h"

namespace clusterd::mindcluster {
namespace {

constexpr int64_t kWait = 1000;
constexpr int64_t kNow = 1'700'000'000'000;

// Four ranks: 0, 1 on worker01's chips 0, 1; 2, 3 on worker02's chips 0, 1.
v1::Job Job(v1::JobState state = v1::JOB_STATE_RUNNING) {
  v1::Job j;
  j.set_id("job-uid");
  j.set_state(state);
  for (uint32_t r = 0; r < 4; ++r) {
    auto* p = j.add_placement();
    p->set_rank(r);
    p->set_node(r < 2 ? "worker01" : "worker02");
    p->set_device_id(r % 2);
  }
  return j;
}

::SwitchNics Nics(const std::string& node, std::vector<std::string> devs, std::vector<bool> ops) {
  ::SwitchNics n;
  n.set_jobid("job-uid");
  auto& l = (*n.mutable_nicops())[node];
  for (auto& d : devs) l.add_dev(d);
  for (bool o : ops) l.add_op(o);
  return n;
}

TEST(OmCheckTest, SwitchNicsIsCheckedAsTheReferenceChecksIt) {
  const v1::Job job = Job();
  EXPECT_EQ(CheckSwitchNics(Nics("worker01", {"1"}, {true}), nullptr, true).code, kOmParamInvalid);
  EXPECT_EQ(CheckSwitchNics(Nics("worker01", {"1"}, {true}), &job, false).code, kOmParamInvalid);
  const v1::Job recovering = Job(v1::JOB_STATE_RECOVERING);
  EXPECT_EQ(CheckSwitchNics(Nics("worker01", {"1"}, {true}), &recovering, true).code, kOmIsRunning);
  const v1::Job pending = Job(v1::JOB_STATE_PENDING);
  EXPECT_EQ(CheckSwitchNics(Nics("worker01", {"1"}, {true}), &pending, true).code, kOmParamInvalid);
  EXPECT_EQ(CheckSwitchNics(Nics("worker09", {"1"}, {true}), &job, true).info,
            "node:worker09 not exist in job:job-uid");
  EXPECT_EQ(CheckSwitchNics(Nics("worker01", {"1", "0"}, {true}), &job, true).info, "dev and op length is not equal");
  EXPECT_EQ(CheckSwitchNics(Nics("worker01", {}, {}), &job, true).info, "dev or op is empty");
  EXPECT_EQ(CheckSwitchNics(Nics("worker01", {"7"}, {true}), &job, true).info, "device:7 not exist in node:worker01");
  EXPECT_EQ(CheckSwitchNics(Nics("worker01", {"01x"}, {true}), &job, true).code, kOmParamInvalid);
  ::SwitchNics empty;
  empty.set_jobid("job-uid");
  EXPECT_EQ(CheckSwitchNics(empty, &job, true).code, kOmParamInvalid);
  // Hostile text is cut and never echoed raw.
  OmCheck hostile = CheckSwitchNics(Nics(std::string(1000, 'x') + "\n", {"1"}, {true}), &job, true);
  EXPECT_EQ(hostile.code, kOmParamInvalid);
  EXPECT_LT(hostile.info.size(), 120u);

  ::SwitchNics two = Nics("worker02", {"1", "0"}, {true, false});
  auto& w1 = (*two.mutable_nicops())["worker01"];
  w1.add_dev("0");
  w1.add_op(true);
  OmCheck ok = CheckSwitchNics(two, &job, true);
  ASSERT_EQ(ok.code, kRecoverOk) << ok.info;
  // Node by node, in name order: worker01's chip 0 (rank 0), then worker02's 1 and 0.
  EXPECT_EQ(std::vector<std::string>(ok.op.ranks().begin(), ok.op.ranks().end()),
            (std::vector<std::string>{"0", "3", "2"}));
  EXPECT_EQ(std::vector<bool>(ok.op.ops().begin(), ok.op.ops().end()), (std::vector<bool>{true, true, false}));
}

TEST(OmCheckTest, StressTestIsCheckedAsTheReferenceChecksIt) {
  const v1::Job job = Job();
  ::StressTestParam p;
  p.set_jobid("job-uid");
  EXPECT_EQ(CheckStressTest(p, &job, true).info, "stress test node is nil");
  (*p.mutable_stressparam())["worker01"];
  EXPECT_EQ(CheckStressTest(p, &job, true).info, "node:worker01 stress test ops is 0");
  (*p.mutable_stressparam())["worker01"].add_ops(2);
  EXPECT_EQ(CheckStressTest(p, &job, true).info, "op:2 not exist in support operation:[0 1]");
  (*p.mutable_stressparam())["worker01"].set_ops(0, 1);
  (*p.mutable_stressparam())["worker01"].add_ops(1);
  EXPECT_EQ(CheckStressTest(p, &job, true).info, "node:worker01 stress test ops should not repeat");
  (*p.mutable_stressparam())["worker01"].set_ops(1, 0);
  OmCheck ok = CheckStressTest(p, &job, true);
  ASSERT_EQ(ok.code, kRecoverOk) << ok.info;
  EXPECT_EQ(ok.op.stress().size(), 2u);  // worker01's ranks 0 and 1
  EXPECT_EQ(ok.op.stress().at("1").ops_size(), 2);
  (*p.mutable_stressparam())["worker09"].add_ops(0);
  EXPECT_EQ(CheckStressTest(p, &job, true).info, "node:worker09 not exist in job:job-uid");

  ::StressTestParam all;
  all.set_jobid("job-uid");
  all.add_allnodesops(0);
  OmCheck every = CheckStressTest(all, &job, true);
  ASSERT_EQ(every.code, kRecoverOk);
  EXPECT_EQ(every.op.stress().size(), 4u);
  all.add_allnodesops(0);
  EXPECT_EQ(CheckStressTest(all, &job, true).code, kOmParamInvalid);
}

::StopCompleteRequest Stopped(int32_t code = 0) {
  ::StopCompleteRequest r;
  r.set_jobid("job-uid");
  r.mutable_status()->set_code(code);
  return r;
}
::RecoverStatusRequest Status(int32_t code) {
  ::RecoverStatusRequest r;
  r.set_jobid("job-uid");
  r.mutable_status()->set_code(code);
  r.set_strategy("continue");
  return r;
}

TEST(OmFlowTest, ANicSwitchPausesSwitchesAndContinues) {
  const v1::Job job = Job();
  OmFlow flow({}, kWait);
  OmOutput out = flow.Start(CheckSwitchNics(Nics("worker01", {"1"}, {true}), &job, true).op, "ops", kNow);
  EXPECT_TRUE(out.changed);
  ASSERT_EQ(out.signals.size(), 1u);
  EXPECT_EQ(out.signals[0].signaltype(), "stopTrain");
  EXPECT_EQ(out.signals[0].actions(0), "pause_train");
  EXPECT_EQ(out.signals[0].uuid(), "job-uid/nic-switch/1/pause");
  EXPECT_EQ(out.signals[0].timeout(), 0);
  EXPECT_EQ(out.expire_after_ms, kWait);
  EXPECT_TRUE(flow.busy());
  EXPECT_TRUE(flow.TakesStopComplete());
  EXPECT_EQ(flow.record().current().actor(), "ops");
  // One at a time.
  EXPECT_EQ(flow.Start(CheckSwitchNics(Nics("worker01", {"1"}, {true}), &job, true).op, "ops", kNow).code,
            kOmIsRunning);

  out = flow.OnStopComplete(Stopped(), job, kNow + 1);
  EXPECT_TRUE(out.signals.empty());
  ASSERT_TRUE(out.switch_ranks);
  EXPECT_EQ(out.switch_ranks->rankid(0), "1");
  EXPECT_TRUE(out.switch_ranks->op(0));
  EXPECT_EQ(flow.ResendNotify().switch_ranks->rankid(0), "1");

  ::SwitchResult done;
  done.set_jobid("job-uid");
  done.set_result(true);
  out = flow.OnSwitchResult(done, job, kNow + 2);
  ASSERT_EQ(out.signals.size(), 1u);
  EXPECT_EQ(out.signals[0].signaltype(), "changeStrategy");
  EXPECT_EQ(out.signals[0].changestrategy(), "continue");
  EXPECT_TRUE(flow.TakesRecoverStatus());

  out = flow.OnRecoverStatus(Status(0), job, kNow + 3);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.messages, (std::vector<std::string>{"switch nic finish"}));
  EXPECT_TRUE(out.faults.empty());
  EXPECT_FALSE(flow.busy());
  ASSERT_EQ(flow.record().history_size(), 1);
  EXPECT_EQ(flow.record().history(0).stage(), "succeeded");
  // The next one gets the next number.
  out = flow.Start(CheckSwitchNics(Nics("worker01", {"1"}, {false}), &job, true).op, "ops", kNow + 4);
  EXPECT_EQ(out.signals[0].uuid(), "job-uid/nic-switch/2/pause");
}

TEST(OmFlowTest, AFailedSwitchLeavesTheRanksAProcessFault) {
  const v1::Job job = Job();
  OmFlow flow({}, kWait);
  flow.Start(CheckSwitchNics(Nics("worker02", {"0", "1"}, {true, true}), &job, true).op, "ops", kNow);
  flow.OnStopComplete(Stopped(), job, kNow);
  ::SwitchResult failed;
  failed.set_jobid("job-uid");
  OmOutput out = flow.OnSwitchResult(failed, job, kNow);
  EXPECT_TRUE(out.finished);
  EXPECT_TRUE(out.signals.empty());  // no continue
  ASSERT_EQ(out.faults.size(), 2u);
  EXPECT_EQ(out.faults[0].reporter(), "taskd");
  EXPECT_EQ(out.faults[0].id(), "job-uid/rank/2");
  EXPECT_EQ(out.faults[0].code(), "TASKD_OM_FAILED");
  EXPECT_EQ(out.faults[0].level(), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_EQ(out.faults[1].device_id(), 1u);
  // A late answer for it is refused, changing nothing.
  EXPECT_EQ(flow.OnSwitchResult(failed, job, kNow).code, kRecoverClientError);
}

TEST(OmFlowTest, TaskdNeverAnsweringEndsTheStageAtItsDeadline) {
  const v1::Job job = Job();
  OmFlow flow({}, kWait);
  OmOutput out = flow.Start(CheckSwitchNics(Nics("worker01", {"0"}, {true}), &job, true).op, "ops", kNow);
  const std::string token = out.expire_token;
  EXPECT_TRUE(flow.Expire("stale", job, kNow + kWait).messages.empty());
  out = flow.Expire(token, job, kNow + kWait);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.messages.back(), "switch nic failed, pause train timeout");
  ASSERT_EQ(out.faults.size(), 1u);
  EXPECT_FALSE(flow.busy());
  EXPECT_TRUE(flow.Expire(token, job, kNow + kWait).messages.empty());  // once
}

TEST(OmFlowTest, ARecoveryTakesOverWithoutRaisingAnything) {
  const v1::Job job = Job();
  OmFlow flow({}, kWait);
  flow.Start(CheckSwitchNics(Nics("worker01", {"0"}, {true}), &job, true).op, "ops", kNow);
  OmOutput out = flow.Abandon("a recovery of the job took over", kNow);
  EXPECT_TRUE(out.finished);
  EXPECT_TRUE(out.faults.empty());
  EXPECT_EQ(flow.record().history(0).stage(), "failed");
}

TEST(OmFlowTest, ARestartedClusterdSendsTheAwaitedSignalAgainUntilTheStoredDeadline) {
  const v1::Job job = Job();
  OmFlow before({}, kWait);
  before.Start(CheckSwitchNics(Nics("worker01", {"0"}, {true}), &job, true).op, "ops", kNow);
  OmFlow after(before.record(), kWait);  // as loaded
  OmOutput out = after.Resend(kNow + 400);
  ASSERT_EQ(out.signals.size(), 1u);
  EXPECT_EQ(out.signals[0].uuid(), "job-uid/nic-switch/1/pause");
  EXPECT_EQ(out.expire_after_ms, kWait - 400);
  EXPECT_FALSE(out.changed);
  EXPECT_TRUE(after.TakesStopComplete());
}

TEST(OmFlowTest, AStressTestsFaultsTakeTheChipsOut) {
  const v1::Job job = Job();
  ::StressTestParam p;
  p.set_jobid("job-uid");
  p.add_allnodesops(0);
  p.add_allnodesops(1);
  OmFlow flow({}, kWait);
  OmOutput out = flow.Start(CheckStressTest(p, &job, true).op, "ops", kNow);
  EXPECT_EQ(out.signals[0].timeout(), kStressTestPauseTimeoutS);
  out = flow.OnStopComplete(Stopped(), job, kNow);
  ASSERT_EQ(out.signals.size(), 1u);
  EXPECT_EQ(out.signals[0].signaltype(), "pauseStartAgent");
  ASSERT_TRUE(out.stress_ranks);
  EXPECT_EQ(out.stress_ranks->stressparam().size(), 4u);
  // MindIO reports an error meanwhile: the operator hears of it, the test goes on.
  out = flow.OnRecoverStatus(Status(kRecoverRetryUnrecoverable), job, kNow);
  EXPECT_EQ(out.messages, (std::vector<std::string>{"recv fault, when stressing test"}));

  ::StressTestResult res;
  res.set_jobid("job-uid");
  auto op = [&](const std::string& rank, const std::string& o, const std::string& code) {
    auto& r = (*(*res.mutable_stressresult())[rank].mutable_rankresult())[o];
    r.set_code(code);
    r.set_result("r" + code);
  };
  op("0", "0", "0");
  op("1", "0", "2");  // a fault found: SEPARATE
  op("1", "1", "3");
  op("2", "1", "4");   // voltage: RESTART_NPU
  op("3", "0", "1");   // could not run: nothing
  op("99", "0", "2");  // not a rank of the job
  out = flow.OnStressResult(res, job, kNow);
  ASSERT_GE(out.signals.size(), 1u);
  EXPECT_EQ(out.signals[0].signaltype(), "continueStartAgent");
  EXPECT_TRUE(out.finished);
  ASSERT_EQ(out.faults.size(), 2u);
  EXPECT_EQ(out.faults[0].reporter(), "stresstest");
  EXPECT_EQ(out.faults[0].id(), "worker01/1");
  EXPECT_EQ(out.faults[0].code(), "STRESS_TEST_FAULT");
  EXPECT_EQ(out.faults[0].level(), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(out.faults[1].id(), "worker02/0");
  EXPECT_EQ(out.faults[1].level(), v1::FAULT_LEVEL_RESTART_NPU);
  EXPECT_NE(out.messages.back().find("stress test find fault"), std::string::npos) << out.messages.back();
  EXPECT_NE(out.messages.back().find(R"("worker01":{"0":{"rankResult":{"0":{"code":"0")"), std::string::npos)
      << out.messages.back();
}

TEST(OmFlowTest, AStressTestThatPassesContinuesTraining) {
  const v1::Job job = Job();
  ::StressTestParam p;
  p.set_jobid("job-uid");
  (*p.mutable_stressparam())["worker02"].add_ops(1);
  OmFlow flow({}, kWait);
  flow.Start(CheckStressTest(p, &job, true).op, "ops", kNow);
  flow.OnStopComplete(Stopped(), job, kNow);
  ::StressTestResult res;
  res.set_jobid("job-uid");
  (*(*res.mutable_stressresult())["2"].mutable_rankresult())["1"].set_code("0");
  OmOutput out = flow.OnStressResult(res, job, kNow);
  ASSERT_EQ(out.signals.size(), 2u);
  EXPECT_EQ(out.signals[1].changestrategy(), "continue");
  EXPECT_FALSE(out.finished);
  out = flow.OnRecoverStatus(Status(0), job, kNow);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.messages.back(), "stress test finish");
  EXPECT_EQ(flow.record().history(0).messages_size(), 2);  // the result, then the end
}

TEST(OmFlowTest, AContinueThatFailsLeavesTheRanksAProcessFault) {
  const v1::Job job = Job();
  OmFlow flow({}, kWait);
  flow.Start(CheckSwitchNics(Nics("worker01", {"0"}, {false}), &job, true).op, "ops", kNow);
  flow.OnStopComplete(Stopped(), job, kNow);
  ::SwitchResult done;
  done.set_jobid("job-uid");
  done.set_result(true);
  flow.OnSwitchResult(done, job, kNow);
  OmOutput out = flow.OnRecoverStatus(Status(kRecoverClientError), job, kNow);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.messages.back(), "switch nic failed, continue train failed (code 499)");
  ASSERT_EQ(out.faults.size(), 1u);
  EXPECT_EQ(out.faults[0].id(), "job-uid/rank/0");
}

TEST(OmFlowTest, APauseThatFailsLeavesTheRanksAProcessFault) {
  const v1::Job job = Job();
  OmFlow flow({}, kWait);
  flow.Start(CheckSwitchNics(Nics("worker01", {"0"}, {true}), &job, true).op, "ops", kNow);
  OmOutput out = flow.OnStopComplete(Stopped(kRecoverClientError), job, kNow);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.messages.back(), "om failed, pause train failed");
  EXPECT_EQ(out.faults.size(), 1u);
  EXPECT_FALSE(out.switch_ranks);
}

// MindIO's error while the chips are under load fails the test even if
// every chip passes; reset-config is marked while the chips are under test.
TEST(OmFlowTest, TaskdsErrorDuringAStressTestFailsIt) {
  const v1::Job job = Job();
  ::StressTestParam p;
  p.set_jobid("job-uid");
  (*p.mutable_stressparam())["worker01"].add_ops(0);
  OmFlow flow({}, kWait);
  flow.Start(CheckStressTest(p, &job, true).op, "ops", kNow);
  EXPECT_EQ(flow.OnStopComplete(Stopped(), job, kNow).reset, ResetOp::kFlushing);
  EXPECT_EQ(flow.OnRecoverStatus(Status(kRecoverRetryUnrecoverable), job, kNow).messages.size(), 1u);
  EXPECT_TRUE(flow.OnRecoverStatus(Status(kRecoverRetryUnrecoverable), job, kNow).messages.empty());  // once
  ::StressTestResult res;
  res.set_jobid("job-uid");
  (*(*res.mutable_stressresult())["0"].mutable_rankresult())["0"].set_code("0");
  OmOutput out = flow.OnStressResult(res, job, kNow);
  EXPECT_EQ(out.reset, ResetOp::kClear);
  EXPECT_TRUE(out.finished);
  EXPECT_NE(out.messages.back().find("TaskD reported a fault while it ran"), std::string::npos);
  EXPECT_EQ(out.faults.size(), 2u);  // the tested ranks 0 and 1: TASKD_OM_FAILED
  EXPECT_EQ(out.faults[0].code(), "TASKD_OM_FAILED");
}

TEST(OmFlowTest, AStressTestWithoutItsResultClearsItsMark) {
  const v1::Job job = Job();
  ::StressTestParam p;
  p.set_jobid("job-uid");
  p.add_allnodesops(1);
  OmFlow flow({}, kWait);
  flow.Start(CheckStressTest(p, &job, true).op, "ops", kNow);
  flow.OnStopComplete(Stopped(), job, kNow);
  OmOutput out = flow.Expire(flow.Token(), job, kNow + kWait);
  EXPECT_EQ(out.messages.back(), "stress test failed, report stress test result timeout");
  EXPECT_EQ(out.reset, ResetOp::kClear);
}

TEST(OmFlowTest, HistoryIsBounded) {
  const v1::Job job = Job();
  OmFlow flow({}, kWait);
  for (int i = 0; i < kOmHistory + 5; ++i) {
    flow.Start(CheckSwitchNics(Nics("worker01", {"0"}, {true}), &job, true).op, "ops", kNow);
    flow.Abandon("test", kNow);
  }
  EXPECT_EQ(flow.record().history_size(), kOmHistory);
  EXPECT_EQ(flow.record().next_seq(), static_cast<uint64_t>(kOmHistory + 5));
}

}  // namespace
}  // namespace clusterd::mindcluster
