// TaskD's Recover protocol over ClusterD's commands (mindcluster/taskd.h),
// pure: the exact signals, in order, for each path of the reference's state
// machine that ClusterD's rungs take, and the acks they end in.
#include "clusterd/mindcluster/taskd.h"

#include <gtest/gtest.h>

#include "clusterd/k8s/discovery.h"

namespace clusterd::mindcluster {
namespace {

v1::Job TrainingJob(std::map<std::string, std::string> labels) {
  v1::Job job;
  job.set_id("4f6c1b7e-uid");
  job.set_kind(v1::JOB_KIND_TRAINING);
  // Two pods of 4 chips: pod rank 0 on worker01 (ranks 0-3), 1 on worker02 (4-7).
  for (uint32_t r = 0; r < 8; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    p->set_node(r < 4 ? "worker01" : "worker02");
    p->set_device_id(r % 4);
  }
  for (auto& [k, v] : labels) (*job.mutable_labels())[k] = v;
  return job;
}

v1::Job OptedIn(const std::string& strategies) {
  return TrainingJob(
      {{std::string(kLabelProcessRecoverEnable), "on"}, {std::string(kLabelRecoverStrategy), strategies}});
}

v1::Command Cmd(const std::string& id, v1::JobCommand kind, std::vector<uint32_t> ranks,
                std::vector<uint32_t> hit = {}) {
  v1::Command c;
  c.set_id(id);
  c.set_recovery_id(id.substr(0, id.find('/')));
  c.set_kind(kind);
  for (uint32_t r : ranks) c.add_ranks(r);
  for (uint32_t r : hit) c.add_hit_ranks(r);
  return c;
}

::StopCompleteRequest StopDone(int32_t code = kRecoverOk) {
  ::StopCompleteRequest r;
  r.set_jobid("4f6c1b7e-uid");
  r.mutable_status()->set_code(code);
  return r;
}

::RecoverStrategyRequest Offer(std::vector<std::string> strategies) {
  ::RecoverStrategyRequest r;
  r.set_jobid("4f6c1b7e-uid");
  for (auto& s : strategies) r.add_strategies(s);
  return r;
}

::RecoverStatusRequest Result(int32_t code, const std::string& strategy) {
  ::RecoverStatusRequest r;
  r.set_jobid("4f6c1b7e-uid");
  r.mutable_status()->set_code(code);
  r.set_strategy(strategy);
  return r;
}

std::vector<std::string> Actions(const ::ProcessManageSignal& s) { return {s.actions().begin(), s.actions().end()}; }

std::vector<std::string> Ranks(const ::ProcessManageSignal& s) {
  std::vector<std::string> out;
  for (const auto& f : s.faultranks()) out.push_back(f.rankid() + ":" + f.faulttype());
  return out;
}

// The one signal of an output that also acks.
::ProcessManageSignal OnlySignalOf(const TaskdOutput& out) {
  EXPECT_EQ(out.signals.size(), 1u);
  return out.signals.empty() ? ::ProcessManageSignal() : out.signals.front();
}

// The one signal of an output (and no ack).
::ProcessManageSignal OnlySignal(const TaskdOutput& out) {
  EXPECT_EQ(out.signals.size(), 1u);
  EXPECT_FALSE(out.ack.has_value());
  return out.signals.empty() ? ::ProcessManageSignal() : out.signals.front();
}

v1::Command On(v1::Command c, v1::RecoveryStrategy rung) {
  c.set_strategy(rung);
  return c;
}

// The preExitProcess a non-retry command starts with, answered as TaskD
// answers it (ReportProcessFault of the ranks it names): what follows.
TaskdOutput AnswerPreExit(TaskdJob& t, const TaskdOutput& first) {
  const ::ProcessManageSignal pre = OnlySignal(first);
  EXPECT_EQ(pre.signaltype(), "preExitProcess");
  EXPECT_EQ(Actions(pre), (std::vector<std::string>{"pre exit process"}));
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kAwaitPreExit);
  ::ProcessFaultRequest report;
  report.set_jobid(pre.jobid());
  *report.mutable_faultranks() = pre.faultranks();
  return t.OnProcessFault(report);
}

void AddFaultRank(google::protobuf::RepeatedPtrField<::FaultRank>* ranks, const std::string& id,
                  const std::string& type) {
  auto* f = ranks->Add();
  f->set_rankid(id);
  f->set_faulttype(type);
}

TEST(TaskdStrategies, OptInAndTheReferenceOrder) {
  EXPECT_EQ(JobRecoverStrategies(TrainingJob({})).code, kRecoverNotEnabled);
  EXPECT_EQ(JobRecoverStrategies(TrainingJob({{std::string(kLabelProcessRecoverEnable), "off"}})).code,
            kRecoverNotEnabled);
  auto opt = JobRecoverStrategies(OptedIn(" recover , retry,unknown,dump"));
  EXPECT_EQ(opt.code, kRecoverOk);
  EXPECT_EQ(opt.strategies, (std::vector<std::string>{"retry", "recover", "dump", "exit"}));
  auto all = JobRecoverStrategies(TrainingJob({{std::string(kLabelProcessRecoverEnable), "pause"},
                                               {std::string(kLabelRecoverStrategy), "exit,recover-in-place"},
                                               {std::string(kLabelFaultScheduling), "grace"},
                                               {std::string(kLabelPodRescheduling), "on"}}));
  EXPECT_EQ(all.code, kRecoverOk);
  EXPECT_EQ(all.strategies,
            (std::vector<std::string>{"recover-in-place", "exit", "job-rescheduling", "pod-rescheduling"}));
}

TEST(TaskdStrategies, DiscoveryCopiesThePodGroupKeysUnderTheLabelsTaskdReads) {
  const std::string prefix(k8s::kMindClusterLabelPrefix);
  EXPECT_EQ(prefix + std::string(k8s::kMindClusterRecoveryKeys[0]), kLabelRecoverStrategy);
  EXPECT_EQ(prefix + std::string(k8s::kMindClusterRecoveryKeys[1]), kLabelFaultScheduling);
  EXPECT_EQ(prefix + std::string(k8s::kMindClusterRecoveryKeys[2]), kLabelPodRescheduling);
  EXPECT_EQ(prefix + std::string(k8s::kMindClusterRecoveryKeys[3]), kLabelProcessRecoverEnable);
}

TEST(TaskdStrategies, TheJobsKubernetesObjectsFromDiscoverysLabels) {
  v1::Job job = OptedIn("retry");
  EXPECT_FALSE(TaskdJobRefOf(job).kubernetes());
  (*job.mutable_labels())[std::string(k8s::kLabelNamespace)] = "team-a";
  (*job.mutable_labels())[std::string(k8s::kLabelName)] = "pretrain";
  (*job.mutable_labels())[std::string(k8s::kLabelPodGroup)] = "pretrain-4f6c1b7e";
  const TaskdJobRef ref = TaskdJobRefOf(job);
  EXPECT_TRUE(ref.kubernetes());
  EXPECT_EQ(ref.id, job.id());
  EXPECT_EQ(ref.ns, "team-a");
  EXPECT_EQ(ref.name, "pretrain");
  EXPECT_EQ(ref.podgroup, "pretrain-4f6c1b7e");
}

TEST(TaskdStrategies, ResetConfigKeepsTheCountersAndSaysEachStage) {
  const std::string current =
      R"({"RankList":[],"UpdateTime":1,"RetryTime":3,"FaultFlushing":false,"GracefulExit":1,"RestartFaultProcess":true})";
  EXPECT_EQ(ResetConfigJson(current, ResetOp::kFlushing, {}, 1700000000),
            R"({"RankList":[],"UpdateTime":1700000000,"RetryTime":3,"FaultFlushing":true,"GracefulExit":1,)"
            R"("RestartFaultProcess":true})");
  // The fault ranks with their worst level and codes (TaskD's own codes are
  // not hexadecimal: left out of ErrorCode).
  EXPECT_EQ(ResetConfigJson(current, ResetOp::kFaults,
                            {{5, 1, "SeparateNPU", {"80E18402", "TASKD_PROCESS_FAULT", "4C4BA00C"}}, {6, 2, "", {}}},
                            1700000001),
            R"({"RankList":[{"RankId":5,"LogicId":1,"Status":"fault","Policy":"SeparateNPU",)"
            R"("InitialPolicy":"SeparateNPU","ErrorCode":[2162263042,1280024588],"ErrorCodeHex":"80E18402,4C4BA00C"},)"
            R"({"RankId":6,"LogicId":2,"Status":"fault","Policy":"","InitialPolicy":"",)"
            R"("ErrorCode":[],"ErrorCodeHex":""}],"UpdateTime":1700000001,"RetryTime":3,"FaultFlushing":false,)"
            R"("GracefulExit":1,"RestartFaultProcess":false})");
  // Restarted in place (the reference's RestartFaultProcess).
  EXPECT_EQ(ResetConfigJson(current, ResetOp::kFaultsInPlace, {{6, 2, "", {}}}, 9),
            R"({"RankList":[{"RankId":6,"LogicId":2,"Status":"fault","Policy":"","InitialPolicy":"",)"
            R"("ErrorCode":[],"ErrorCodeHex":""}],"UpdateTime":9,"RetryTime":3,"FaultFlushing":false,)"
            R"("GracefulExit":1,"RestartFaultProcess":true})");
  // Restart-all: the whole job restarts (RetryTime + 1).
  EXPECT_EQ(ResetConfigJson(current, ResetOp::kRestartAll, {{5, 1, "", {}}}, 8),
            R"({"RankList":[],"UpdateTime":8,"RetryTime":4,"FaultFlushing":false,"GracefulExit":1,)"
            R"("RestartFaultProcess":true})");
  // What does not parse counts as empty.
  EXPECT_EQ(ResetConfigJson("{not json", ResetOp::kClear, {{5, 1, "", {}}}, 7),
            R"({"RankList":[],"UpdateTime":7,"RetryTime":0,"FaultFlushing":false,"GracefulExit":0,)"
            R"("RestartFaultProcess":false})");
}

TEST(TaskdStrategies, ProcessFaultsBecomeFaultsOfTheRanksChips) {
  const v1::Job job = OptedIn("retry");
  google::protobuf::RepeatedPtrField<::FaultRank> ranks;
  auto add = [&](const std::string& id, const std::string& type) { AddFaultRank(&ranks, id, type); };
  add("5", "1");
  add("2", "0");
  add("5", "1");  // again: once
  add("99", "1");
  add("x", "2");
  add("6", "2");
  std::string info;
  auto reports = ProcessFaultReports(job, ranks, &info);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[0].id(), job.id() + "/rank/2");
  EXPECT_EQ(reports[0].code(), "TASKD_UCE");
  EXPECT_EQ(reports[0].level(), v1::FAULT_LEVEL_RESTART_REQUEST);
  EXPECT_EQ(reports[0].node(), "worker01");
  EXPECT_EQ(reports[0].device_id(), 2u);
  EXPECT_EQ(reports[1].code(), "TASKD_PROCESS_FAULT");
  EXPECT_EQ(reports[1].level(), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_EQ(reports[1].node(), "worker02");
  EXPECT_EQ(reports[1].device_id(), 1u);
  EXPECT_EQ(reports[2].code(), "TASKD_HCCL");
  for (const auto& r : reports) {
    EXPECT_EQ(r.reporter(), "taskd");
    EXPECT_EQ(r.action(), v1::TRANSITION_ACTION_RAISE);
  }
  EXPECT_EQ(info, "3 rank(s) reported; not ranks of the job: 99,x");
  // Bounded per report.
  google::protobuf::RepeatedPtrField<::FaultRank> many;
  v1::Job big = job;
  big.clear_placement();
  for (uint32_t r = 0; r < 2000; ++r) {
    auto* p = big.add_placement();
    p->set_rank(r);
    p->set_node("n" + std::to_string(r / 8));
    p->set_device_id(r % 8);
    auto* f = many.Add();
    f->set_rankid(std::to_string(r));
    f->set_faulttype("1");
  }
  EXPECT_EQ(ProcessFaultReports(big, many, &info).size(), kMaxProcessFaultRanks);
  EXPECT_NE(info.find("976 past the 1024 per report"), std::string::npos) << info;
}

TEST(TaskdStrategies, PodsAreLabelledWithTheKindOfFaultPerNode) {
  const v1::Job job = OptedIn("retry");
  google::protobuf::RepeatedPtrField<::FaultRank> ranks;
  auto add = [&](const std::string& id, const std::string& type) { AddFaultRank(&ranks, id, type); };
  add("1", "0");   // worker01: a UCE
  add("2", "2");   // worker01: an HCCL error
  add("5", "0");   // worker02: a UCE ...
  add("6", "1");   // ... and a process fault: software wins
  add("99", "1");  // not the job's
  add("x", "1");
  EXPECT_EQ(PodFaultTypes(job, ranks),
            (std::map<std::string, std::string>{{"worker01", "retry-fault"}, {"worker02", "software"}}));
}

TEST(TaskdStrategies, NodeRanksArePodRanks) {
  const v1::Job job = OptedIn("retry");
  EXPECT_EQ(NodeRanksOf(job, {5}), (std::vector<std::string>{"1"}));
  EXPECT_EQ(NodeRanksOf(job, {7, 1, 2, 99}), (std::vector<std::string>{"0", "1"}));
  EXPECT_TRUE(NodeRanksOf(job, {}).empty());
}

TEST(TaskdJobTest, StepRetrySucceeds) {
  const v1::Job job = OptedIn("retry,recover");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);

  auto first = t.OnCommand(Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {5}, {5}), job);
  EXPECT_EQ(first.reset, ResetOp::kFlushing);
  const auto stop = OnlySignal(first);
  EXPECT_EQ(stop.signaltype(), "stopTrain");
  EXPECT_EQ(stop.jobid(), job.id());
  EXPECT_EQ(stop.uuid(), "r.1/0/stop");
  EXPECT_EQ(Actions(stop), (std::vector<std::string>{"stop_train"}));
  EXPECT_EQ(Ranks(stop), (std::vector<std::string>{"5:0"}));  // a UCE: type "0"
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kAwaitStop);

  auto stopped = t.OnStopComplete(StopDone());
  EXPECT_EQ(stopped.reset, ResetOp::kFaults);  // reset-config lists the fault ranks
  ASSERT_EQ(stopped.reset_ranks.size(), 1u);
  EXPECT_EQ(stopped.reset_ranks[0].rank, 5u);
  EXPECT_EQ(stopped.reset_ranks[0].logic_id, 1u);
  const auto global = OnlySignal(stopped);
  EXPECT_EQ(global.signaltype(), "globalFault");
  EXPECT_EQ(Actions(global), (std::vector<std::string>{"on_global_rank"}));
  EXPECT_EQ(std::vector<std::string>(global.noderankids().begin(), global.noderankids().end()),
            (std::vector<std::string>{"1"}));

  const auto change = OnlySignal(t.OnRecoverStrategy(Offer({"retry", "recover", "dump"})));
  EXPECT_EQ(change.signaltype(), "changeStrategy");
  EXPECT_EQ(change.changestrategy(), "retry");
  EXPECT_EQ(Actions(change), (std::vector<std::string>{"change_strategy"}));
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kAwaitStatus);

  auto done = t.OnRecoverStatus(Result(kRecoverOk, "retry"));
  ASSERT_TRUE(done.ack.has_value());
  EXPECT_EQ(done.ack->command_id, "r.1/0");
  EXPECT_TRUE(done.ack->success) << done.ack->message;
  EXPECT_EQ(done.process_recover_status, "retry-success");
  EXPECT_EQ(done.reset, ResetOp::kClear);
  EXPECT_TRUE(done.signals.empty());
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kIdle);
  EXPECT_FALSE(t.current().has_value());
}

TEST(TaskdJobTest, AfterARetrys405TaskdGetsANewGlobalFaultAndRecoversInPlace) {
  const v1::Job job = OptedIn("retry,recover-in-place,recover");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  t.OnCommand(Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {2}, {2}), job);
  t.OnStopComplete(StopDone());
  t.OnRecoverStrategy(Offer({"dump", "retry", "recover", "exit"}));
  auto failed = t.OnRecoverStatus(Result(kRecoverRetryRecoverable, "retry"));
  ASSERT_TRUE(failed.ack.has_value());
  EXPECT_FALSE(failed.ack->success);
  EXPECT_NE(failed.ack->message.find("405"), std::string::npos) << failed.ack->message;
  EXPECT_EQ(failed.process_recover_status, "retry-failed");
  // MindIO waits for a new globalFault (on_global_rank) and offers again.
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kStopped);

  // The coordinator escalates to PROCESS_RESTART: a new globalFault (a new
  // uuid), the pods stay (fault_nodes_exit names none) ...
  auto again = t.OnCommand(Cmd("r.1/1", v1::JOB_COMMAND_RESTART_PROCESSES, {2}, {2}), job);
  const auto global = OnlySignal(again);
  EXPECT_EQ(global.signaltype(), "globalFault");
  EXPECT_EQ(global.uuid(), "r.1/1/global-fault");
  EXPECT_EQ(Actions(global), (std::vector<std::string>{"on_global_rank", "fault_nodes_exit"}));
  EXPECT_TRUE(global.noderankids().empty());
  EXPECT_EQ(again.reset, ResetOp::kFaultsInPlace);
  // ... and recover in place is MindIO's "recover" with the reference's
  // extraParams, the pods' workers restarted (fault_nodes_restart).
  const auto change = OnlySignal(t.OnRecoverStrategy(Offer({"dump", "recover", "exit"})));
  EXPECT_EQ(change.signaltype(), "changeStrategy");
  EXPECT_EQ(change.changestrategy(), "recover");
  EXPECT_EQ(change.extraparams(), "recover-in-place");
  EXPECT_EQ(Actions(change), (std::vector<std::string>{"change_strategy", "fault_nodes_restart"}));
  EXPECT_EQ(std::vector<std::string>(change.noderankids().begin(), change.noderankids().end()),
            (std::vector<std::string>{"0"}));
  EXPECT_EQ(Ranks(change), (std::vector<std::string>{"2:1"}));
  auto done = t.OnRecoverStatus(Result(kRecoverOk, "recover"));
  ASSERT_TRUE(done.ack.has_value());
  EXPECT_EQ(done.ack->command_id, "r.1/1");
  EXPECT_TRUE(done.ack->success);
  EXPECT_EQ(done.process_recover_status, "recover-in-place-success");
}

TEST(TaskdJobTest, After406Or499OnlyDumpOrExitGoOut) {
  for (const int32_t code : {kRecoverRetryUnrecoverable, kRecoverClientError}) {
    SCOPED_TRACE(code);
    const v1::Job job = OptedIn("retry,recover-in-place,recover,elastic-training,dump");
    TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
    t.OnCommand(Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {2}, {2}), job);
    t.OnStopComplete(StopDone());
    t.OnRecoverStrategy(Offer({"dump", "retry", "recover", "exit"}));
    auto failed = t.OnRecoverStatus(Result(code, "retry"));
    ASSERT_TRUE(failed.ack.has_value());
    EXPECT_EQ(t.phase(), TaskdJob::Phase::kChoosing);
    // Every rung but the job's restart fails at once, nothing sent.
    for (const auto& c :
         {Cmd("r.1/1", v1::JOB_COMMAND_RESTART_PROCESSES, {2}, {2}),
          On(Cmd("r.1/2", v1::JOB_COMMAND_PAUSE, {0, 1, 2, 3, 4, 5, 6, 7}, {2}), v1::RECOVERY_STRATEGY_POD_RESCHEDULE),
          Cmd("r.1/3", v1::JOB_COMMAND_SCALE_IN, {4, 5, 6, 7}, {5})}) {
      auto refused = t.OnCommand(c, job);
      EXPECT_TRUE(refused.signals.empty());
      ASSERT_TRUE(refused.ack.has_value());
      EXPECT_FALSE(refused.ack->success);
      EXPECT_NE(refused.ack->message.find("accepts only"), std::string::npos) << refused.ack->message;
    }
    // The job restarts: a dump first after 406, never after 499.
    const auto stop =
        On(Cmd("r.1/4", v1::JOB_COMMAND_STOP, {0, 1, 2, 3, 4, 5, 6, 7}, {2}), v1::RECOVERY_STRATEGY_JOB_RESCHEDULE);
    auto last = t.OnCommand(stop, job);
    ASSERT_EQ(last.signals.size(), 1u);
    EXPECT_EQ(last.signals[0].changestrategy(), code == kRecoverClientError ? "exit" : "dump");
    EXPECT_EQ(last.ack.has_value(), code == kRecoverClientError);
  }
}

TEST(TaskdJobTest, AStrategyTheJobOrTaskdDoesNotOfferFailsAtOnce) {
  const v1::Job job = OptedIn("recover");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  auto refused = t.OnCommand(Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {0}, {0}), job);
  EXPECT_TRUE(refused.signals.empty());
  ASSERT_TRUE(refused.ack.has_value());
  EXPECT_FALSE(refused.ack->success);
  EXPECT_NE(refused.ack->message.find("does not list retry"), std::string::npos) << refused.ack->message;
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kIdle);

  // The job lists recover, TaskD does not offer it.
  AnswerPreExit(t, t.OnCommand(Cmd("r.2/0", v1::JOB_COMMAND_RESUME, {0}, {0}), job));
  t.OnStopComplete(StopDone());
  auto not_offered = t.OnRecoverStrategy(Offer({"dump"}));
  EXPECT_TRUE(not_offered.signals.empty());
  ASSERT_TRUE(not_offered.ack.has_value());
  EXPECT_FALSE(not_offered.ack->success);
  EXPECT_NE(not_offered.ack->message.find("TaskD offered dump, not recover"), std::string::npos);

  auto checkpoint = t.OnCommand(Cmd("r.3/0", v1::JOB_COMMAND_CHECKPOINT, {0, 1}), job);
  ASSERT_TRUE(checkpoint.ack.has_value());
  EXPECT_FALSE(checkpoint.ack->success);
}

TEST(TaskdJobTest, PodRescheduleSendsGlobalFaultAfterTheStopAndRecoversOnceThePodsMoved) {
  const v1::Job job = OptedIn("recover");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  // PAUSE of every rank, about the hit rank 6: TaskD stops its workers
  // first (preExitProcess, answered by ReportProcessFault), then training.
  const v1::Command pause =
      On(Cmd("r.1/0", v1::JOB_COMMAND_PAUSE, {0, 1, 2, 3, 4, 5, 6, 7}, {6}), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  const auto pre = t.OnCommand(pause, job);
  ASSERT_EQ(pre.signals.size(), 1u);
  EXPECT_EQ(Ranks(pre.signals[0]), (std::vector<std::string>{"6:1"}));
  EXPECT_EQ(std::vector<std::string>(pre.signals[0].noderankids().begin(), pre.signals[0].noderankids().end()),
            (std::vector<std::string>{"1"}));
  EXPECT_EQ(pre.signals[0].uuid(), "r.1/0/pre-exit");
  EXPECT_EQ(t.Stage(), "taskd: await-process-fault");
  const auto stop = OnlySignal(AnswerPreExit(t, pre));
  EXPECT_EQ(stop.signaltype(), "stopTrain");
  EXPECT_EQ(Ranks(stop), (std::vector<std::string>{"6:1"}));
  // The reference's order: globalFault (the hit pods exit) right after the
  // stop; the pods move while MindIO waits for the strategy.
  const auto global = OnlySignal(t.OnStopComplete(StopDone()));
  EXPECT_EQ(global.signaltype(), "globalFault");
  EXPECT_EQ(Actions(global), (std::vector<std::string>{"on_global_rank", "fault_nodes_exit"}));
  EXPECT_EQ(std::vector<std::string>(global.noderankids().begin(), global.noderankids().end()),
            (std::vector<std::string>{"1"}));
  auto paused = t.OnRecoverStrategy(Offer({"recover", "dump", "exit"}));
  EXPECT_TRUE(paused.signals.empty());
  ASSERT_TRUE(paused.ack.has_value());
  EXPECT_TRUE(paused.ack->success);
  EXPECT_EQ(paused.ack->command_id, "r.1/0");
  EXPECT_EQ(paused.ack->message, "taskd: choosing-strategy; offered recover,dump,exit");
  // ClusterD's own bound inside MindIO's wait (30 s less the margin).
  EXPECT_EQ(paused.expire_after_ms, (kMindioWaitS - kMindioWaitMarginS) * 1000);
  EXPECT_EQ(paused.expire_token, "strategy:r.1/0");
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kChoosing);

  // (isolation and the pods' rescheduling are the actuator's steps)
  const v1::Command resume = On(Cmd("r.1/3", v1::JOB_COMMAND_RESUME, {6}, {6}), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  const auto change = OnlySignal(t.OnCommand(resume, job));
  EXPECT_EQ(change.changestrategy(), "recover");
  EXPECT_EQ(change.extraparams(), "");
  EXPECT_EQ(std::vector<std::string>(change.noderankids().begin(), change.noderankids().end()),
            (std::vector<std::string>{"1"}));
  // The bound ran out after the RESUME came: nothing more.
  EXPECT_TRUE(t.Expire(paused.expire_token).signals.empty());
  auto done = t.OnRecoverStatus(Result(kRecoverOk, "recover"));
  ASSERT_TRUE(done.ack.has_value());
  EXPECT_TRUE(done.ack->success);
  EXPECT_EQ(done.ack->command_id, "r.1/3");
  EXPECT_EQ(done.process_recover_status, "recover-success");
}

TEST(TaskdJobTest, PodsSlowerThanMindiosWaitGetTheirStrategyEarly) {
  const v1::Job job = OptedIn("recover");
  for (const bool status_first : {true, false}) {
    SCOPED_TRACE(status_first);
    TaskdJob t(job.id(), JobRecoverStrategies(job).strategies, TaskdWaits::For(12));
    const v1::Command pause =
        On(Cmd("r.1/0", v1::JOB_COMMAND_PAUSE, {0, 1, 2, 3, 4, 5, 6, 7}, {6}), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
    AnswerPreExit(t, t.OnCommand(pause, job));
    t.OnStopComplete(StopDone());
    auto paused = t.OnRecoverStrategy(Offer({"recover", "exit"}));
    EXPECT_EQ(paused.expire_after_ms, 6000);                  // at least half of a short wait
    EXPECT_TRUE(t.Expire("strategy:r.0/0").signals.empty());  // stale
    // The pods still move when the bound runs out: recover goes out now.
    const auto early = OnlySignal(t.Expire(paused.expire_token));
    EXPECT_EQ(early.changestrategy(), "recover");
    EXPECT_EQ(early.uuid(), "r.1/0/change-strategy/recover");
    EXPECT_EQ(t.phase(), TaskdJob::Phase::kAwaitStatus);
    EXPECT_TRUE(t.Expire(paused.expire_token).signals.empty());  // once
    const v1::Command resume = On(Cmd("r.1/3", v1::JOB_COMMAND_RESUME, {6}, {6}), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
    TaskdOutput done;
    if (status_first) {
      auto status = t.OnRecoverStatus(Result(kRecoverOk, "recover"));
      EXPECT_FALSE(status.ack.has_value());  // the RESUME has not come
      EXPECT_EQ(status.process_recover_status, "recover-success");
      done = t.OnCommand(resume, job);
    } else {
      auto waiting = t.OnCommand(resume, job);
      EXPECT_TRUE(waiting.signals.empty());  // sent already
      EXPECT_FALSE(waiting.ack.has_value());
      done = t.OnRecoverStatus(Result(kRecoverOk, "recover"));
    }
    EXPECT_TRUE(done.signals.empty());
    ASSERT_TRUE(done.ack.has_value());
    EXPECT_EQ(done.ack->command_id, "r.1/3");
    EXPECT_TRUE(done.ack->success) << done.ack->message;
  }
}

TEST(TaskdJobTest, ASignalSentAgainAndUnansweredFailsItsCommandAfterMindiosWait) {
  const v1::Job job = OptedIn("retry");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  const v1::Command c = Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {3}, {3});
  const auto stop = OnlySignal(t.OnCommand(c, job));
  // ClusterD restarted; TaskD subscribed again, the stop is sent again.
  TaskdJob after(job.id(), JobRecoverStrategies(job).strategies);
  auto resent = after.Resume(c, job, "taskd: await-stop-complete");
  EXPECT_EQ(OnlySignal(resent).uuid(), stop.uuid());
  ASSERT_EQ(resent.expire_token, "resent:" + stop.uuid());
  EXPECT_FALSE(after.Expire("resent:r.1/0/other").ack.has_value());  // not what is awaited
  auto lost = after.Expire(resent.expire_token);
  ASSERT_TRUE(lost.ack.has_value());
  EXPECT_EQ(lost.ack->command_id, "r.1/0");
  EXPECT_FALSE(lost.ack->success);
  EXPECT_NE(lost.ack->message.find("within 30 s"), std::string::npos) << lost.ack->message;
  EXPECT_EQ(after.phase(), TaskdJob::Phase::kIdle);
  // Answered in time: the wait changes nothing.
  TaskdJob answered(job.id(), JobRecoverStrategies(job).strategies);
  auto again = answered.Resume(c, job, "taskd: await-stop-complete");
  answered.OnStopComplete(StopDone());
  EXPECT_FALSE(answered.Expire(again.expire_token).ack.has_value());
  EXPECT_EQ(answered.phase(), TaskdJob::Phase::kAwaitStrategy);
}

TEST(TaskdJobTest, InPlaceRestartIsRecoverWithTheReferencesExtraParams) {
  const v1::Job job = OptedIn("recover-in-place");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  AnswerPreExit(t, t.OnCommand(Cmd("r.1/0", v1::JOB_COMMAND_RESTART_PROCESSES, {1, 5}, {1, 5}), job));
  // No worker restarts before MindIO chose (no fault_nodes_restart here).
  auto stopped = t.OnStopComplete(StopDone());
  const auto global = OnlySignal(stopped);
  EXPECT_EQ(Actions(global), (std::vector<std::string>{"on_global_rank", "fault_nodes_exit"}));
  EXPECT_TRUE(global.noderankids().empty());
  EXPECT_EQ(stopped.reset, ResetOp::kFaultsInPlace);
  const auto change = OnlySignal(t.OnRecoverStrategy(Offer({"dump", "recover", "downgrade", "upgrade", "exit"})));
  EXPECT_EQ(change.changestrategy(), "recover");
  EXPECT_EQ(change.extraparams(), "recover-in-place");
  EXPECT_EQ(Actions(change), (std::vector<std::string>{"change_strategy", "fault_nodes_restart"}));
  EXPECT_EQ(std::vector<std::string>(change.noderankids().begin(), change.noderankids().end()),
            (std::vector<std::string>{"0", "1"}));
  // MindIO never offers "recover-in-place": without its "recover" the rung fails.
  TaskdJob no_arf(job.id(), JobRecoverStrategies(job).strategies);
  AnswerPreExit(no_arf, no_arf.OnCommand(Cmd("r.2/0", v1::JOB_COMMAND_RESTART_PROCESSES, {1}, {1}), job));
  no_arf.OnStopComplete(StopDone());
  auto refused = no_arf.OnRecoverStrategy(Offer({"recover-in-place", "dump", "exit"}));
  EXPECT_TRUE(refused.signals.empty());
  ASSERT_TRUE(refused.ack.has_value());
  EXPECT_FALSE(refused.ack->success);
  EXPECT_NE(refused.ack->message.find("not recover (recover-in-place)"), std::string::npos) << refused.ack->message;
}

TEST(TaskdJobTest, ScaleInIsMindiosDowngradeAnd201IsAStepOfIt) {
  const v1::Job job = OptedIn("elastic-training");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  AnswerPreExit(t, t.OnCommand(Cmd("r.1/1", v1::JOB_COMMAND_SCALE_IN, {4, 5, 6, 7}, {5}), job));
  t.OnStopComplete(StopDone());
  // MindIO offers recover, downgrade and upgrade with its zit switch on.
  const auto change = OnlySignal(t.OnRecoverStrategy(Offer({"dump", "recover", "downgrade", "upgrade", "exit"})));
  EXPECT_EQ(change.changestrategy(), "downgrade");
  EXPECT_EQ(change.extraparams(), R"({"scale-in-strategy": "DP"})");
  // 201: the ranks to isolate, whose pods are told to exit; not the end.
  ::RecoverStatusRequest chosen = Result(kRecoverChooseScaleInRanks, "downgrade");
  chosen.add_isolaterankids("5");
  chosen.add_isolaterankids("6");
  chosen.add_isolaterankids("99");  // not the job's: ignored
  chosen.add_isolaterankids("x");
  auto isolate = t.OnRecoverStatus(chosen);
  EXPECT_FALSE(isolate.ack.has_value());
  EXPECT_TRUE(isolate.process_recover_status.empty());
  const auto exit = OnlySignal(isolate);
  EXPECT_EQ(exit.signaltype(), "faultNodesExit");
  EXPECT_EQ(Actions(exit), (std::vector<std::string>{"fault_nodes_exit"}));
  EXPECT_EQ(std::vector<std::string>(exit.noderankids().begin(), exit.noderankids().end()),
            (std::vector<std::string>{"1"}));
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kAwaitStatus);
  auto done = t.OnRecoverStatus(Result(kRecoverOk, "downgrade"));
  ASSERT_TRUE(done.ack.has_value());
  EXPECT_TRUE(done.ack->success);
  EXPECT_EQ(done.process_recover_status, "downgrade-success");
  ASSERT_TRUE(t.scaled_in().has_value());
  EXPECT_EQ(*t.scaled_in(), (std::vector<uint32_t>{5, 6}));  // the ranks MindIO isolated
  // Their chips are back: MindIO's upgrade, as the reference sends it.
  const auto up = OnlySignal(t.ScaleOut());
  EXPECT_EQ(up.changestrategy(), "upgrade");
  EXPECT_EQ(up.extraparams(), R"({"scale-out-strategy": "DP"})");
  EXPECT_EQ(Ranks(up), (std::vector<std::string>{"5:1", "6:1"}));
  EXPECT_EQ(std::vector<std::string>(up.noderankids().begin(), up.noderankids().end()),
            (std::vector<std::string>{"1"}));
  EXPECT_TRUE(t.ScaleOut().signals.empty());  // one at a time
  auto back = t.OnRecoverStatus(Result(kRecoverOk, "upgrade"));
  EXPECT_FALSE(back.ack.has_value());  // no command waits for it
  EXPECT_EQ(back.process_recover_status, "upgrade-success");
  EXPECT_FALSE(t.scaled_in().has_value());
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kIdle);
  EXPECT_TRUE(t.ScaleOut().signals.empty());

  // Pod rank 0 cannot be dropped (MindIO answers 406): the rung fails at once.
  TaskdJob zero(job.id(), JobRecoverStrategies(job).strategies);
  auto refused = zero.OnCommand(Cmd("r.2/1", v1::JOB_COMMAND_SCALE_IN, {0, 1, 2, 3}, {1}), job);
  EXPECT_TRUE(refused.signals.empty());
  ASSERT_TRUE(refused.ack.has_value());
  EXPECT_FALSE(refused.ack->success);
  EXPECT_NE(refused.ack->message.find("pod rank 0"), std::string::npos);
  // Its 406 otherwise fails it, and MindIO then takes only dump or exit.
  TaskdJob failing(job.id(), JobRecoverStrategies(job).strategies);
  AnswerPreExit(failing, failing.OnCommand(Cmd("r.3/1", v1::JOB_COMMAND_SCALE_IN, {4, 5, 6, 7}, {5}), job));
  failing.OnStopComplete(StopDone());
  failing.OnRecoverStrategy(Offer({"downgrade", "upgrade", "exit"}));
  auto no = failing.OnRecoverStatus(Result(kRecoverRetryUnrecoverable, "downgrade"));
  ASSERT_TRUE(no.ack.has_value());
  EXPECT_FALSE(no.ack->success);
  EXPECT_EQ(failing.offered(), (std::vector<std::string>{"exit"}));
}

TEST(TaskdJobTest, AResentCommandRepeatsTheAwaitedSignalAndARestartStartsOver) {
  const v1::Job job = OptedIn("retry");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  const v1::Command c = Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {3}, {3});
  const ::ProcessManageSignal first = OnlySignal(t.OnCommand(c, job));
  const auto again = OnlySignal(t.OnCommand(c, job));
  EXPECT_EQ(again.uuid(), first.uuid());
  EXPECT_EQ(again.signaltype(), "stopTrain");
  t.OnStopComplete(StopDone());
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kAwaitStrategy);
  EXPECT_EQ(OnlySignal(t.OnCommand(c, job)).signaltype(), "globalFault");

  // TaskD subscribed again: its machine starts over, so does the command.
  const auto restarted = OnlySignal(t.Restart());
  EXPECT_EQ(restarted.signaltype(), "stopTrain");
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kAwaitStop);
}

TEST(TaskdJobTest, AFreshMachineResumesFromTheStoredStage) {
  const v1::Job job = OptedIn("retry,recover");
  const auto strategies = JobRecoverStrategies(job).strategies;
  const v1::Command c = Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {5}, {5});
  TaskdJob before(job.id(), strategies);
  EXPECT_EQ(before.Stage(), "taskd: idle");
  before.OnCommand(c, job);
  EXPECT_EQ(before.Stage(), "taskd: await-stop-complete");
  const auto global = OnlySignal(before.OnStopComplete(StopDone()));
  EXPECT_EQ(before.Stage(), "taskd: await-recover-strategy");

  // Sent, not answered: the same signal again, answered within MindIO's
  // wait or the command fails (TaskD drops a uuid it has seen).
  TaskdJob after(job.id(), strategies);
  const auto resent = after.Resume(c, job, before.Stage());
  const auto again = OnlySignal(resent);
  EXPECT_EQ(again.signaltype(), "globalFault");
  EXPECT_EQ(again.uuid(), global.uuid());
  EXPECT_EQ(after.phase(), TaskdJob::Phase::kAwaitStrategy);
  EXPECT_EQ(resent.expire_after_ms, kMindioWaitS * 1000);
  EXPECT_EQ(resent.expire_token, "resent:" + global.uuid());

  // Answered: on from there (the offer kept).
  before.OnRecoverStrategy(Offer({"retry", "recover"}));
  EXPECT_EQ(before.Stage(), "taskd: await-recover-status; offered retry,recover");
  before.OnRecoverStatus(Result(kRecoverRetryRecoverable, "retry"));
  EXPECT_EQ(before.Stage(), "taskd: stopped");  // MindIO waits for a new globalFault
  TaskdJob third(job.id(), strategies);
  const auto change = OnlySignal(third.Resume(Cmd("r.1/1", v1::JOB_COMMAND_RESUME, {5}, {5}), job,
                                              "taskd: choosing-strategy; offered retry,recover"));
  EXPECT_EQ(change.signaltype(), "changeStrategy");
  EXPECT_EQ(change.changestrategy(), "recover");
  EXPECT_EQ(third.offered(), (std::vector<std::string>{"retry", "recover"}));

  TaskdJob stopped(job.id(), strategies);
  EXPECT_EQ(OnlySignal(stopped.Resume(c, job, "taskd: stopped")).signaltype(), "globalFault");
  // Nothing stored, or not a stage: from the start.
  TaskdJob fresh(job.id(), strategies);
  EXPECT_EQ(OnlySignal(fresh.Resume(c, job, "")).signaltype(), "stopTrain");
  TaskdJob garbage(job.id(), strategies);
  EXPECT_EQ(OnlySignal(garbage.Resume(c, job, "taskd: sideways")).signaltype(), "stopTrain");
}

TEST(TaskdJobTest, ReportsOutOfTurnChangeNothing) {
  const v1::Job job = OptedIn("retry");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  for (auto out : {t.OnStopComplete(StopDone()), t.OnRecoverStrategy(Offer({"retry"})),
                   t.OnRecoverStatus(Result(kRecoverOk, "retry"))}) {
    EXPECT_TRUE(out.signals.empty());
    EXPECT_FALSE(out.ack.has_value());
    EXPECT_EQ(out.code, kRecoverOk);
    EXPECT_NE(out.info.find("ignored"), std::string::npos);
  }
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kIdle);
}

TEST(TaskdJobTest, TaskdThatCannotStopFailsTheCommand) {
  const v1::Job job = OptedIn("retry");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  t.OnCommand(Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {3}, {3}), job);
  auto out = t.OnStopComplete(StopDone(kRecoverProcessNotReady));
  ASSERT_TRUE(out.ack.has_value());
  EXPECT_FALSE(out.ack->success);
  EXPECT_NE(out.ack->message.find("404"), std::string::npos);
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kIdle);
}

TEST(TaskdJobTest, AStatusForACommandGivenUpOnMovesTheNewCommandOn) {
  const v1::Job job = OptedIn("retry,recover-in-place");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  t.OnCommand(Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {3}, {3}), job);
  t.OnStopComplete(StopDone());
  t.OnRecoverStrategy(Offer({"retry", "recover"}));
  // The retry step timed out in the coordinator; the next rung's command
  // comes while TaskD still works on the retry.
  auto waiting = t.OnCommand(Cmd("r.1/1", v1::JOB_COMMAND_RESTART_PROCESSES, {3}, {3}), job);
  EXPECT_TRUE(waiting.signals.empty());
  EXPECT_FALSE(waiting.ack.has_value());
  // A late 405: no ack for the command given up on, a new globalFault for
  // the new one.
  auto late = t.OnRecoverStatus(Result(kRecoverRetryRecoverable, "retry"));
  EXPECT_FALSE(late.ack.has_value());
  ASSERT_EQ(late.signals.size(), 1u);
  EXPECT_EQ(late.signals[0].signaltype(), "globalFault");
  EXPECT_EQ(late.process_recover_status, "retry-failed");
  EXPECT_EQ(OnlySignal(t.OnRecoverStrategy(Offer({"recover", "exit"}))).extraparams(), "recover-in-place");
  auto done = t.OnRecoverStatus(Result(kRecoverOk, "recover"));
  ASSERT_TRUE(done.ack.has_value());
  EXPECT_EQ(done.ack->command_id, "r.1/1");
  EXPECT_TRUE(done.ack->success);

  // A late 406 instead: the new command fails at once (only dump or exit).
  TaskdJob u(job.id(), JobRecoverStrategies(job).strategies);
  u.OnCommand(Cmd("r.2/0", v1::JOB_COMMAND_RETRY_STEP, {3}, {3}), job);
  u.OnStopComplete(StopDone());
  u.OnRecoverStrategy(Offer({"retry", "recover"}));
  u.OnCommand(Cmd("r.2/1", v1::JOB_COMMAND_RESTART_PROCESSES, {3}, {3}), job);
  auto refused = u.OnRecoverStatus(Result(kRecoverRetryUnrecoverable, "retry"));
  EXPECT_TRUE(refused.signals.empty());
  ASSERT_TRUE(refused.ack.has_value());
  EXPECT_EQ(refused.ack->command_id, "r.2/1");
  EXPECT_FALSE(refused.ack->success);
}

TEST(TaskdJobTest, PreExitIsResentUnansweredAndSkippedForRanksTaskdReported) {
  const v1::Job job = OptedIn("recover-in-place");
  const auto strategies = JobRecoverStrategies(job).strategies;
  TaskdJob t(job.id(), strategies);
  const v1::Command c = Cmd("r.1/0", v1::JOB_COMMAND_RESTART_PROCESSES, {2}, {2});
  const auto pre = OnlySignal(t.OnCommand(c, job));
  EXPECT_EQ(pre.signaltype(), "preExitProcess");
  // Resent: the same preExitProcess, never a stopTrain before the answer.
  EXPECT_EQ(OnlySignal(t.OnCommand(c, job)).uuid(), pre.uuid());
  // A stop or strategy out of turn changes nothing.
  EXPECT_TRUE(t.OnStopComplete(StopDone()).signals.empty());
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kAwaitPreExit);
  // After a restart, from the stored stage: the same signal again.
  TaskdJob after(job.id(), strategies);
  EXPECT_EQ(OnlySignal(after.Resume(c, job, "taskd: await-process-fault")).uuid(), pre.uuid());
  // Past it (stopping), a resume never sends it again.
  TaskdJob later(job.id(), strategies);
  EXPECT_EQ(OnlySignal(later.Resume(c, job, "taskd: await-stop-complete")).signaltype(), "stopTrain");

  // Ranks TaskD reported itself have stopped: no preExitProcess for them.
  TaskdJob reported(job.id(), strategies);
  ::ProcessFaultRequest report;
  report.set_jobid(job.id());
  AddFaultRank(report.mutable_faultranks(), "2", "1");
  EXPECT_TRUE(reported.OnProcessFault(report).signals.empty());  // nothing awaited it
  EXPECT_EQ(OnlySignal(reported.OnCommand(Cmd("r.2/0", v1::JOB_COMMAND_RESTART_PROCESSES, {2}, {2}), job)).signaltype(),
            "stopTrain");
  // A step retry never pre-exits.
  TaskdJob retry(job.id(), JobRecoverStrategies(OptedIn("retry")).strategies);
  EXPECT_EQ(OnlySignal(retry.OnCommand(Cmd("r.3/0", v1::JOB_COMMAND_RETRY_STEP, {1}, {1}), job)).signaltype(),
            "stopTrain");
}

TEST(TaskdJobTest, ARecoverThatFailsDumpsThenExitsAndTheJobRestarts) {
  const v1::Job job = OptedIn("retry,recover,dump");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  // POD_RESCHEDULE: pre-exit, stop, globalFault, (pods move), recover fails.
  AnswerPreExit(t, t.OnCommand(On(Cmd("r.1/0", v1::JOB_COMMAND_PAUSE, {0, 1, 2, 3, 4, 5, 6, 7}, {6}),
                                  v1::RECOVERY_STRATEGY_POD_RESCHEDULE),
                               job));
  EXPECT_EQ(OnlySignal(t.OnStopComplete(StopDone())).signaltype(), "globalFault");
  ASSERT_TRUE(t.OnRecoverStrategy(Offer({"recover", "dump", "exit"})).ack.has_value());
  EXPECT_EQ(
      OnlySignal(
          t.OnCommand(On(Cmd("r.1/3", v1::JOB_COMMAND_RESUME, {6}, {6}), v1::RECOVERY_STRATEGY_POD_RESCHEDULE), job))
          .changestrategy(),
      "recover");
  auto failed = t.OnRecoverStatus(Result(kRecoverRetryUnrecoverable, "recover"));
  ASSERT_TRUE(failed.ack.has_value());
  EXPECT_FALSE(failed.ack->success);
  EXPECT_EQ(failed.process_recover_status, "recover-failed");

  // JOB_RESCHEDULE: its STOP is TaskD's exit, after a dump.
  const v1::Command stop =
      On(Cmd("r.1/4", v1::JOB_COMMAND_STOP, {0, 1, 2, 3, 4, 5, 6, 7}, {6}), v1::RECOVERY_STRATEGY_JOB_RESCHEDULE);
  const auto dump = OnlySignal(t.OnCommand(stop, job));
  EXPECT_EQ(dump.signaltype(), "changeStrategy");
  EXPECT_EQ(dump.changestrategy(), "dump");
  EXPECT_EQ(t.Stage(), "taskd: await-recover-status; offered dump,exit");
  // A restart while the dump runs asks for the dump again, not the exit.
  TaskdJob after(job.id(), JobRecoverStrategies(job).strategies);
  EXPECT_EQ(OnlySignal(after.Resume(stop, job, t.Stage())).uuid(), dump.uuid());

  auto exit = t.OnRecoverStatus(Result(kRecoverOk, "dump"));
  ASSERT_EQ(exit.signals.size(), 1u);
  EXPECT_EQ(exit.signals[0].signaltype(), "changeStrategy");
  EXPECT_EQ(exit.signals[0].changestrategy(), "exit");
  EXPECT_EQ(exit.signals[0].extraparams(), "dump_exit");
  ASSERT_TRUE(exit.ack.has_value());
  EXPECT_EQ(exit.ack->command_id, "r.1/4");
  EXPECT_TRUE(exit.ack->success) << exit.ack->message;
  EXPECT_EQ(exit.process_recover_status, "dump-success");
  EXPECT_EQ(exit.reset, ResetOp::kRestartAll);
  EXPECT_EQ(exit.recover_enable, "pause");
  EXPECT_TRUE(exit.clear_process_faults);
  EXPECT_EQ(t.phase(), TaskdJob::Phase::kIdle);
  EXPECT_FALSE(t.current().has_value());
}

TEST(TaskdJobTest, WithoutADumpTaskdExitsAtOnce) {
  const v1::Job job = OptedIn("recover");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  AnswerPreExit(
      t, t.OnCommand(On(Cmd("r.1/3", v1::JOB_COMMAND_RESUME, {6}, {6}), v1::RECOVERY_STRATEGY_POD_RESCHEDULE), job));
  t.OnStopComplete(StopDone());
  t.OnRecoverStrategy(Offer({"recover", "dump", "exit"}));
  t.OnRecoverStatus(Result(kRecoverRetryUnrecoverable, "recover"));
  // TaskD offers dump, the job does not list it: straight to exit.
  auto exit = t.OnCommand(On(Cmd("r.1/4", v1::JOB_COMMAND_STOP, {6}, {6}), v1::RECOVERY_STRATEGY_JOB_RESCHEDULE), job);
  const auto s = OnlySignalOf(exit);
  EXPECT_EQ(s.changestrategy(), "exit");
  EXPECT_EQ(s.extraparams(), "");
  ASSERT_TRUE(exit.ack.has_value());
  EXPECT_TRUE(exit.ack->success);
  EXPECT_EQ(exit.process_recover_status, "exit-completed");
  EXPECT_EQ(exit.reset, ResetOp::kRestartAll);
  EXPECT_EQ(exit.recover_enable, "pause");
}

TEST(TaskdJobTest, AJobThatCannotRecoverIsNotRescheduledPodByPodButRestarted) {
  const v1::Job job = OptedIn("retry");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  auto pause = t.OnCommand(
      On(Cmd("r.1/0", v1::JOB_COMMAND_PAUSE, {0, 1, 2, 3, 4, 5, 6, 7}, {6}), v1::RECOVERY_STRATEGY_POD_RESCHEDULE),
      job);
  EXPECT_TRUE(pause.signals.empty());
  ASSERT_TRUE(pause.ack.has_value());
  EXPECT_FALSE(pause.ack->success);
  EXPECT_NE(pause.ack->message.find("does not list recover"), std::string::npos) << pause.ack->message;
  // The ladder's next rung: the job restarts, TaskD exits through the exchange.
  const auto stop =
      OnlySignal(AnswerPreExit(t, t.OnCommand(On(Cmd("r.1/1", v1::JOB_COMMAND_STOP, {0, 1, 2, 3, 4, 5, 6, 7}, {6}),
                                                 v1::RECOVERY_STRATEGY_JOB_RESCHEDULE),
                                              job)));
  EXPECT_EQ(stop.signaltype(), "stopTrain");
  const auto global = OnlySignal(t.OnStopComplete(StopDone()));
  EXPECT_EQ(Actions(global), (std::vector<std::string>{"on_global_rank", "fault_nodes_exit"}));
  auto exit = t.OnRecoverStrategy(Offer({"retry", "exit"}));
  EXPECT_EQ(OnlySignalOf(exit).changestrategy(), "exit");
  ASSERT_TRUE(exit.ack.has_value());
  EXPECT_TRUE(exit.ack->success);
  // The STOP before a chip reset (PROCESS_RESTART) sends the globalFault
  // right after the stop: MindIO offers while the chips reset.
  TaskdJob reset(job.id(), JobRecoverStrategies(OptedIn("recover-in-place")).strategies);
  AnswerPreExit(
      reset,
      reset.OnCommand(On(Cmd("r.2/0", v1::JOB_COMMAND_STOP, {3}, {3}), v1::RECOVERY_STRATEGY_PROCESS_RESTART), job));
  auto stopped = reset.OnStopComplete(StopDone());
  const auto reset_global = OnlySignal(stopped);
  EXPECT_EQ(Actions(reset_global), (std::vector<std::string>{"on_global_rank", "fault_nodes_exit"}));
  EXPECT_TRUE(reset_global.noderankids().empty());
  EXPECT_EQ(stopped.reset, ResetOp::kFaultsInPlace);
  auto offered = reset.OnRecoverStrategy(Offer({"recover", "exit"}));
  EXPECT_TRUE(offered.signals.empty());
  ASSERT_TRUE(offered.ack.has_value());
  EXPECT_TRUE(offered.ack->success);
  EXPECT_EQ(offered.ack->message, "taskd: choosing-strategy; offered recover,exit");
  EXPECT_TRUE(offered.recover_enable.empty());
  // The chips reset; the restart sends only its changeStrategy.
  const auto change = OnlySignal(reset.OnCommand(
      On(Cmd("r.2/2", v1::JOB_COMMAND_RESTART_PROCESSES, {3}, {3}), v1::RECOVERY_STRATEGY_PROCESS_RESTART), job));
  EXPECT_EQ(change.changestrategy(), "recover");
  EXPECT_EQ(change.extraparams(), "recover-in-place");
}

TEST(TaskdJobTest, AJobWhoseBestStrategyIsDumpSavesAndExits) {
  const v1::Job job = OptedIn("dump");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  auto save = AnswerPreExit(t, t.OnCommand(On(Cmd("r.1/0", v1::JOB_COMMAND_STOP, {0, 1, 2, 3, 4, 5, 6, 7}, {5}),
                                              v1::RECOVERY_STRATEGY_JOB_RESCHEDULE),
                                           job));
  const auto s = OnlySignalOf(save);
  EXPECT_EQ(s.signaltype(), "saveAndExit");
  EXPECT_EQ(Actions(s), (std::vector<std::string>{"save_and_exit"}));
  EXPECT_EQ(Ranks(s), (std::vector<std::string>{"5:1"}));
  ASSERT_TRUE(save.ack.has_value());
  EXPECT_TRUE(save.ack->success);
  EXPECT_EQ(save.reset, ResetOp::kFaults);  // the fault list, as the reference writes
  ASSERT_EQ(save.reset_ranks.size(), 1u);
  EXPECT_EQ(save.reset_ranks[0].rank, 5u);
  EXPECT_EQ(save.recover_enable, "pause");
  EXPECT_TRUE(save.clear_process_faults);
}

TEST(TaskdJobTest, AStepWithNoStageAfterAnAnsweredStopResumesStopped) {
  v1::Recovery r;
  auto step = [&](v1::JobCommand command, v1::RecoveryStrategy rung, v1::StepState state, std::string message) {
    auto* s = r.add_steps();
    s->set_index(static_cast<uint32_t>(r.steps_size() - 1));
    s->set_command(command);
    if (command == v1::JOB_COMMAND_UNSPECIFIED) s->set_action(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
    s->set_strategy(rung);
    s->set_state(state);
    s->set_message(std::move(message));
  };
  const auto pod = v1::RECOVERY_STRATEGY_POD_RESCHEDULE;
  step(v1::JOB_COMMAND_PAUSE, pod, v1::STEP_STATE_SUCCEEDED, "TaskD stopped the training");  // 0
  step(v1::JOB_COMMAND_UNSPECIFIED, pod, v1::STEP_STATE_SUCCEEDED, "rescheduled");           // 1
  step(v1::JOB_COMMAND_RESUME, pod, v1::STEP_STATE_FAILED, "TaskD's recover failed");        // 2
  step(v1::JOB_COMMAND_STOP, v1::RECOVERY_STRATEGY_JOB_RESCHEDULE, v1::STEP_STATE_RUNNING,
       "taskd: await-recover-status; offered recover,dump");      // 3
  step(v1::JOB_COMMAND_RESUME, pod, v1::STEP_STATE_PENDING, "");  // 4
  EXPECT_EQ(ResumeStage(r, 0), "");
  // The RESUME after the answered PAUSE (an actuator's step between).
  EXPECT_EQ(ResumeStage(r, 2), "taskd: stopped");
  // Its own stage first.
  EXPECT_EQ(ResumeStage(r, 3), "taskd: await-recover-status; offered recover,dump");
  // After a step that failed, or TaskD's exit: from the start.
  r.mutable_steps(3)->set_message("TaskD exits; the job restarts");
  r.mutable_steps(3)->set_state(v1::STEP_STATE_SUCCEEDED);
  EXPECT_EQ(ResumeStage(r, 4), "");
  EXPECT_EQ(ResumeStage(r, 3), "");
  EXPECT_EQ(ResumeStage(r, 99), "");
  // A PAUSE that left TaskD choosing: the RESUME goes on from there.
  r.mutable_steps(0)->set_message("taskd: choosing-strategy; offered recover,exit");
  EXPECT_EQ(ResumeStage(r, 2), "taskd: choosing-strategy; offered recover,exit");
}

TEST(TaskdStrategies, TheFaultsBehindACommandByRank) {
  const v1::Job job = OptedIn("retry");
  v1::Fault chip;
  chip.set_node("worker02");
  chip.set_device_id(1);
  chip.set_code("80BB8000");
  chip.set_level(v1::FAULT_LEVEL_RESTART_REQUEST);
  v1::Fault link = chip;
  link.set_code("ROCE_LINK_DOWN");
  link.set_source(v1::FAULT_SOURCE_NETWORK);
  link.set_level(v1::FAULT_LEVEL_SEPARATE);
  v1::Fault node;  // no chip: every rank of the node
  node.set_node("worker01");
  node.set_code("HEARTBEAT_LOST");
  node.set_level(v1::FAULT_LEVEL_SEPARATE);
  const RankFaults by_rank = RankFaultsOf(job, {chip, link, node});
  ASSERT_EQ(by_rank.size(), 5u);
  EXPECT_EQ(by_rank.at(5).codes, (std::vector<std::string>{"80BB8000", "ROCE_LINK_DOWN"}));
  EXPECT_EQ(by_rank.at(5).level, v1::FAULT_LEVEL_SEPARATE);
  EXPECT_TRUE(by_rank.at(5).hccl);
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(by_rank.at(r).codes, (std::vector<std::string>{"HEARTBEAT_LOST"}));
    EXPECT_FALSE(by_rank.at(r).hccl);
  }
  // Ranks placed without their chips (any_device: pods holding chips with
  // no devices annotation) are hit by any chip fault of their node, as
  // FaultHitsRank says everywhere else.
  v1::Job any = job;
  for (auto& p : *any.mutable_placement()) {
    if (p.node() == "worker02") {
      p.clear_device_id();
      p.set_any_device(true);
    }
  }
  const RankFaults any_hit = RankFaultsOf(any, {chip});
  ASSERT_EQ(any_hit.size(), 4u);
  for (uint32_t r = 4; r < 8; ++r) EXPECT_EQ(any_hit.at(r).codes, (std::vector<std::string>{"80BB8000"}));
  // A rank with neither a chip nor any_device uses no accelerator.
  v1::Job none = any;
  for (auto& p : *none.mutable_placement()) p.set_any_device(false);
  EXPECT_TRUE(RankFaultsOf(none, {chip}).empty());
}

TEST(TaskdJobTest, AnHcclRetryWaitsForTheRoutesAndCarriesTheReferencesTimeout) {
  const v1::Job job = OptedIn("retry");
  TaskdJob t(job.id(), JobRecoverStrategies(job).strategies);
  RankFaults faults;
  faults[5] = RankFault{{"TASKD_HCCL"}, v1::FAULT_LEVEL_RESTART_REQUEST, true};
  faults[6] = RankFault{{"80E01801"}, v1::FAULT_LEVEL_RESTART_REQUEST, false};
  const auto stop = OnlySignal(t.OnCommand(Cmd("r.1/0", v1::JOB_COMMAND_RETRY_STEP, {5, 6}, {5, 6}), job, faults));
  EXPECT_EQ(Ranks(stop), (std::vector<std::string>{"5:2", "6:0"}));  // HCCL "2", UCE "0"
  auto stopped = t.OnStopComplete(StopDone());
  const auto global = OnlySignal(stopped);
  EXPECT_EQ(global.timeout(), kHcclRetryTimeoutS);
  ASSERT_EQ(stopped.reset_ranks.size(), 2u);
  EXPECT_EQ(stopped.reset_ranks[0].policy, "RestartRequest");
  EXPECT_EQ(stopped.reset_ranks[1].codes, (std::vector<std::string>{"80E01801"}));
  auto change = t.OnRecoverStrategy(Offer({"retry"}));
  EXPECT_EQ(OnlySignal(change).changestrategy(), "retry");
  EXPECT_EQ(change.delay_ms, kHcclRouteWaitMs);
  // A UCE-only retry: no timeout, no wait.
  TaskdJob uce(job.id(), JobRecoverStrategies(job).strategies);
  uce.OnCommand(Cmd("r.2/0", v1::JOB_COMMAND_RETRY_STEP, {6}, {6}), job, faults);
  EXPECT_EQ(OnlySignal(uce.OnStopComplete(StopDone())).timeout(), 0);
  EXPECT_EQ(uce.OnRecoverStrategy(Offer({"retry"})).delay_ms, 0);
}

}  // namespace
}  // namespace clusterd::mindcluster
