// MindCluster's Recover service on an in-process ClusterD (port 0), through
// real gRPC stubs of the reference's proto, as an independent TaskD would use
// it: the status codes of Init/Register/HealthCheck/Subscribe, then a chip
// fault that ClusterD decides to retry, carried out as stopTrain ->
// globalFault -> changeStrategy with TaskD's reports as the step's answer,
// and the recovery SUCCEEDED in ClusterD's own API.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/mindcluster/om.h"
#include "clusterd/mindcluster/taskd.h"
#include "clusterd/v1/admin.grpc.pb.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "common/executor.h"
#include "mindcluster/recover.grpc.pb.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/grpc/stream_reader.h"
#include "test/support/http_get.h"
#include "test/support/running_timers.h"
#include "test/support/server/server_fixture.h"
#include "test/support/wait.h"
#include "mindio_standin.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;
using testing::TestAgent;
using testing::WaitFor;

constexpr auto kTaskdDeadline = std::chrono::seconds(30);
constexpr char kTaskdJob[] = "5d2c9a10-ascendjob-uid";
constexpr char kRestartRequest[] = "80BB8000";  // RESTART_REQUEST in the catalog: a step retry
constexpr char kSeparate[] = "4C4BA00C";        // SEPARATE: the chip must not be used again

// Isolation, pod moves and job restarts succeed (the exec actuator running true).
void ActuatorThatSucceeds(ClusterdConfig& c) {
  c.actuator = "exec";
  c.actuator_command = "/bin/true";
}

::ClientInfo TaskdClient(const std::string& job) {
  ::ClientInfo c;
  c.set_jobid(job);
  c.set_role("taskd");
  return c;
}

// TaskD's SubscribeProcessManageSignal stream, keep-alives left out.
class SignalReader : public testing::StreamReader<::ProcessManageSignal> {
 public:
  SignalReader(::Recover::Stub* stub, const std::string& job)
      : StreamReader(
            [&](grpc::ClientContext* ctx) { return stub->SubscribeProcessManageSignal(ctx, TaskdClient(job)); },
            [](const ::ProcessManageSignal& s) { return s.signaltype() != "keep-alive"; }, kTaskdDeadline) {}
  // The n-th signal (0-based) once it came; an empty one on timeout.
  ::ProcessManageSignal Wait(size_t n) {
    auto got = WaitMessages(n + 1);
    return got.size() > n ? got[n] : ::ProcessManageSignal();
  }
  size_t count() { return Messages().size(); }
};

class MindClusterRecoverTest : public testing::ClusterdServerTest {
 protected:
  void SetUp() override { StartServer(); }
  void OnServerStarted() override {
    recover_ = ::Recover::NewStub(channel_);
    jobs_ = v1::JobService::NewStub(channel_);
    cluster_ = v1::ClusterService::NewStub(channel_);
  }

  // A training job of two ranks on worker01's chips 0 and 1.
  void CreateJob(const std::string& id, std::map<std::string, std::string> labels) {
    v1::CreateJobRequest req;
    v1::Job* job = req.mutable_job();
    job->set_id(id);
    job->set_kind(v1::JOB_KIND_TRAINING);
    job->mutable_policy()->mutable_hold_down()->set_seconds(0);
    for (uint32_t d = 0; d < 2; ++d) {
      auto* p = job->add_placement();
      p->set_rank(d);
      p->set_node("worker01");
      p->set_device_id(d);
    }
    for (auto& [k, v] : labels) (*job->mutable_labels())[k] = v;
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    grpc::Status st = jobs_->CreateJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  void CreateOptedInJob() {
    CreateJob(kTaskdJob, {{std::string(mc::kLabelProcessRecoverEnable), "on"},
                          {std::string(mc::kLabelRecoverStrategy), "retry,recover"}});
  }

  template <typename Call, typename Request>
  ::Status Unary(Call call, const Request& req) {
    grpc::ClientContext ctx;
    ::Status resp;
    grpc::Status st = ((*recover_).*call)(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }
  // TaskD's answers to the job's signals, as the reference's TaskD sends them.
  int32_t StopComplete() {
    ::StopCompleteRequest req;
    req.set_jobid(kTaskdJob);
    return Unary(&::Recover::Stub::ReportStopComplete, req).code();
  }
  int32_t OfferStrategies(const std::vector<std::string>& strategies) {
    ::RecoverStrategyRequest req;
    req.set_jobid(kTaskdJob);
    for (const auto& s : strategies) req.add_strategies(s);
    return Unary(&::Recover::Stub::ReportRecoverStrategy, req).code();
  }
  int32_t RecoverStatus(const std::string& strategy, int32_t code = 0) {
    ::RecoverStatusRequest req;
    req.set_jobid(kTaskdJob);
    req.set_strategy(strategy);
    if (code != 0) req.mutable_status()->set_code(code);
    return Unary(&::Recover::Stub::ReportRecoverStatus, req).code();
  }
  // The newest recovery (the one with this id, when given) has succeeded.
  bool WaitRecoverySucceeded(const std::string& id = "") {
    return WaitFor(
        [&] {
          auto rs = Recoveries();
          return !rs.empty() && (id.empty() || rs.front().id() == id) &&
                 rs.front().state() == v1::RECOVERY_STATE_SUCCEEDED;
        },
        kTaskdDeadline);
  }
  int32_t Init(const std::string& job) { return Unary(&::Recover::Stub::Init, TaskdClient(job)).code(); }
  int32_t Register(const std::string& job) { return Unary(&::Recover::Stub::Register, TaskdClient(job)).code(); }
  int32_t HealthCheck(const std::string& job) { return Unary(&::Recover::Stub::HealthCheck, TaskdClient(job)).code(); }

  // TaskD for kTaskdJob, as the reference's starts: Init, Register,
  // Subscribe; nullptr (and a failure) unless it became the job's agent.
  std::unique_ptr<SignalReader> StartTaskd() {
    if (Init(kTaskdJob) != mc::kRecoverOk || Register(kTaskdJob) != mc::kRecoverOk) return nullptr;
    auto reader = std::make_unique<SignalReader>(recover_.get(), kTaskdJob);
    if (!WaitAttached()) return nullptr;
    return reader;
  }
  // A job of two ranks on worker01 listing `strategies`, and TaskD + MindIO
  // for it as the stand-in plays them (Init, Register, Subscribe);
  // nullptr (and a failure) unless it became the job's agent.
  std::unique_ptr<testing::MindioStandIn> StartMindio(const std::string& strategies,
                                                      testing::MindioStandIn::Options options = {}) {
    CreateJob(kTaskdJob, {{std::string(mc::kLabelProcessRecoverEnable), "on"},
                          {std::string(mc::kLabelRecoverStrategy), strategies}});
    if (Init(kTaskdJob) != mc::kRecoverOk || Register(kTaskdJob) != mc::kRecoverOk) return nullptr;
    auto mindio = std::make_unique<testing::MindioStandIn>(recover_.get(), kTaskdJob, std::move(options));
    if (!WaitAttached()) return nullptr;
    return mindio;
  }
  // TaskD's answer to a preExitProcess: the ranks it stopped.
  int32_t AnswerPreExit(const ::ProcessManageSignal& pre) {
    EXPECT_EQ(pre.signaltype(), "preExitProcess");
    ::ProcessFaultRequest report;
    report.set_jobid(kTaskdJob);
    *report.mutable_faultranks() = pre.faultranks();
    return Unary(&::Recover::Stub::ReportProcessFault, report).code();
  }

  // Subscribed: TaskD is the job's recovery agent.
  bool WaitAttached() {
    return WaitFor(
        [&] {
          auto res = testing::HttpGet(server_->http_port(), "/metrics");
          return res.status == 200 && testing::MetricValue(res.body, "clusterd_job_agents") == 1;
        },
        kTaskdDeadline);
  }

  // The job's recoveries, newest first.
  std::vector<v1::Recovery> Recoveries() {
    v1::ListRecoveriesRequest req;
    req.set_job(kTaskdJob);
    grpc::ClientContext ctx;
    v1::ListRecoveriesResponse resp;
    grpc::Status st = cluster_->ListRecoveries(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return {resp.recoveries().begin(), resp.recoveries().end()};
  }

  std::unique_ptr<::Recover::Stub> recover_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
};

// The server's timers (ClusterdServer::SetTimers) on a ManualExecutor over a
// FakeClock that only the test moves: the Recover service's sweep every
// keep-alive interval (5 s) and an HCCL retry's route wait (3 s) come when
// the test moves the clock, not after real seconds. The executor's tasks
// (the service also takes subscriptions and reads jobs there) run on one
// thread of the fixture as soon as they are due, one at a time; that thread
// pauses while a server stops (a restart within a test too), so no task runs
// while the server goes.
class MindClusterRecoverClockTest : public MindClusterRecoverTest {
 protected:
  void SetUp() override {
    timers_ = &executor_;
    MindClusterRecoverTest::SetUp();
  }
  void TearDown() override {
    MindClusterRecoverTest::TearDown();
    timers_ = nullptr;
  }
  void StopServer() override {
    running_.Pause();
    MindClusterRecoverTest::StopServer();
    running_.Resume();
  }
  // Waits until a task is due `d` from now, then moves the clock there.
  void AdvanceToTaskIn(std::chrono::nanoseconds d) { ASSERT_TRUE(running_.AdvanceToTaskIn(d, kTaskdDeadline)); }

  testing::RunningTimers running_;
  FakeClock& clock_ = running_.clock();
  ManualExecutor& executor_ = running_.executor();
};

TEST_F(MindClusterRecoverTest, CodesBeforeAndAfterInitAndRegister) {
  EXPECT_EQ(Init("no-such-job"), mc::kRecoverUnknownJob);
  CreateJob("not-opted-in", {});
  EXPECT_EQ(Init("not-opted-in"), mc::kRecoverNotEnabled);
  CreateOptedInJob();
  EXPECT_EQ(Register(kTaskdJob), mc::kRecoverInitFirst);
  EXPECT_EQ(HealthCheck(kTaskdJob), mc::kRecoverNotRegistered);
  {
    SignalReader early(recover_.get(), kTaskdJob);
    EXPECT_EQ(early.WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  EXPECT_EQ(Init(kTaskdJob), mc::kRecoverOk);
  EXPECT_EQ(Init(kTaskdJob), mc::kRecoverOk);  // idempotent
  EXPECT_EQ(HealthCheck(kTaskdJob), mc::kRecoverNotRegistered);
  EXPECT_EQ(Register(kTaskdJob), mc::kRecoverOk);
  EXPECT_EQ(HealthCheck(kTaskdJob), mc::kRecoverOk);
  // A report for a job nobody registered.
  ::StopCompleteRequest stray;
  stray.set_jobid("not-opted-in");
  EXPECT_EQ(Unary(&::Recover::Stub::ReportStopComplete, stray).code(), mc::kRecoverNotRegistered);
  // Bad input: a clear code, nothing changes.
  EXPECT_EQ(Init(""), mc::kRecoverClientError);
  EXPECT_EQ(Init(std::string(300, 'x')), mc::kRecoverClientError);
  EXPECT_EQ(Init("has space"), mc::kRecoverClientError);
}

// The NIC switch and stress test (mindcluster_om_service_test.cc has their
// flows): the reference's checks come first, TaskD's streams need its job.
TEST_F(MindClusterRecoverTest, TheOperatorFlowsCheckTheirRequestsFirst) {
  CreateOptedInJob();
  ::StressTestParam stress;
  stress.set_jobid(kTaskdJob);
  stress.add_allnodesops(0);
  ::Status resp = Unary(&::Recover::Stub::StressTest, stress);
  EXPECT_EQ(resp.code(), mc::kOmParamInvalid);
  EXPECT_EQ(resp.info(), "job:" + std::string(kTaskdJob) + " is not registered");
  ::SwitchNics nics;
  nics.set_jobid(kTaskdJob);
  EXPECT_EQ(Unary(&::Recover::Stub::SwitchNicTrack, nics).code(), mc::kOmParamInvalid);
  // TaskD's notify stream before Init and Register.
  grpc::ClientContext ctx;
  auto reader = recover_->SubscribeNotifySwitch(&ctx, TaskdClient(kTaskdJob));
  ::SwitchRankList msg;
  EXPECT_FALSE(reader->Read(&msg));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // Without a jobId (no scope to check) the stream is refused.
  grpc::ClientContext anonymous;
  auto refused = recover_->SubscribeNotifySwitch(&anonymous, TaskdClient(""));
  EXPECT_FALSE(refused->Read(&msg));
  EXPECT_EQ(refused->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(MindClusterRecoverTest, AChipFaultIsRetriedThroughTaskd) {
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  CreateOptedInJob();
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);

  ASSERT_TRUE(agent.Transition(1, true, 1, kRestartRequest));
  const ::ProcessManageSignal stop = taskd->Wait(0);
  ASSERT_EQ(stop.signaltype(), "stopTrain");
  EXPECT_EQ(stop.jobid(), kTaskdJob);
  ASSERT_EQ(stop.faultranks_size(), 1);
  EXPECT_EQ(stop.faultranks(0).rankid(), "1");

  EXPECT_EQ(StopComplete(), mc::kRecoverOk);
  const ::ProcessManageSignal global = taskd->Wait(1);
  ASSERT_EQ(global.signaltype(), "globalFault");

  EXPECT_EQ(OfferStrategies({"retry", "recover"}), mc::kRecoverOk);
  const ::ProcessManageSignal change = taskd->Wait(2);
  ASSERT_EQ(change.signaltype(), "changeStrategy");
  EXPECT_EQ(change.changestrategy(), "retry");

  EXPECT_EQ(RecoverStatus("retry"), mc::kRecoverOk);
  ASSERT_TRUE(WaitRecoverySucceeded());
  const v1::Recovery r = Recoveries().front();
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_STEP_RETRY);
  ASSERT_GE(r.steps_size(), 1);
  EXPECT_NE(r.steps(0).message().find("TaskD recovered the job with retry"), std::string::npos) << r.steps(0).message();
  EXPECT_EQ(taskd->count(), 3u);  // nothing sent twice
}

// A process fault TaskD reports (RESTART_BUSINESS): PROCESS_RESTART, carried
// out as MindIO accepts it (the stand-in: it never offers
// "recover-in-place", and would refuse it): changeStrategy "recover" with
// extraParams "recover-in-place" and fault_nodes_restart, no worker
// restarted at globalFault; the process fault cleared after.
TEST_F(MindClusterRecoverTest, AProcessFaultTaskdReportsIsRecoveredInPlaceThenCleared) {
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  auto started = StartMindio("recover-in-place,recover");
  ASSERT_TRUE(started);
  testing::MindioStandIn& mindio = *started;
  auto taskd_faults = [&] {
    v1::ListFaultsRequest req;
    req.set_page_size(100);
    grpc::ClientContext ctx;
    v1::ListFaultsResponse resp;
    EXPECT_TRUE(cluster_->ListFaults(&ctx, req, &resp).ok());
    std::vector<v1::Fault> out;
    for (const auto& f : resp.faults()) {
      if (f.reporter() == "taskd") out.push_back(f);
    }
    return out;
  };

  ::ProcessFaultRequest report;
  report.set_jobid(kTaskdJob);
  auto* rank = report.add_faultranks();
  rank->set_rankid("0");
  rank->set_faulttype("1");
  ::Status st = Unary(&::Recover::Stub::ReportProcessFault, report);
  EXPECT_EQ(st.code(), mc::kRecoverOk);
  EXPECT_EQ(st.info(), "1 rank(s) reported");

  ASSERT_TRUE(WaitRecoverySucceeded());
  EXPECT_EQ(Recoveries().front().strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  EXPECT_TRUE(mindio.Violations().empty()) << mindio.Violations().front();
  EXPECT_EQ(mindio.Strategies(), (std::vector<std::string>{"recover/recover-in-place"}));
  for (const auto& s : mindio.Signals()) {
    if (s.signaltype() == "changeStrategy") {
      EXPECT_EQ(std::vector<std::string>(s.actions().begin(), s.actions().end()),
                (std::vector<std::string>{"change_strategy", "fault_nodes_restart"}));
      EXPECT_EQ(std::vector<std::string>(s.noderankids().begin(), s.noderankids().end()),
                (std::vector<std::string>{"0"}));
    }
    if (s.signaltype() == "globalFault") {
      EXPECT_EQ(std::vector<std::string>(s.actions().begin(), s.actions().end()),
                (std::vector<std::string>{"on_global_rank", "fault_nodes_exit"}));
      EXPECT_TRUE(s.noderankids().empty());  // no pod leaves
    }
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        auto fs = taskd_faults();
        return fs.size() == 1 && fs[0].state() == v1::FAULT_STATE_CLEARED;
      },
      kTaskdDeadline));
}

// A retry MindIO answers 405 (device clean failed): it waits for a new
// globalFault and offers again; the escalated rung (PROCESS_RESTART) sends
// one (a new uuid) and recovers in place.
TEST_F(MindClusterRecoverTest, AfterARetrys405ANewGlobalFaultThenRecoverInPlace) {
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  testing::MindioStandIn::Options o;
  o.results["retry"] = {mc::kRecoverRetryRecoverable};
  auto started = StartMindio("retry,recover-in-place,recover", o);
  ASSERT_TRUE(started);
  testing::MindioStandIn& mindio = *started;
  ASSERT_TRUE(agent.Transition(1, true, 1, kRestartRequest));
  ASSERT_TRUE(WaitRecoverySucceeded());
  const v1::Recovery r = Recoveries().front();
  EXPECT_EQ(r.initial_strategy(), v1::RECOVERY_STRATEGY_STEP_RETRY);
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  EXPECT_TRUE(mindio.Violations().empty()) << mindio.Violations().front();
  EXPECT_EQ(mindio.Strategies(), (std::vector<std::string>{"retry", "recover/recover-in-place"}));
  std::set<std::string> globals;
  for (const auto& s : mindio.Signals()) {
    if (s.signaltype() == "globalFault") globals.insert(s.uuid());
  }
  EXPECT_EQ(globals.size(), 2u);  // a new one after the 405
  EXPECT_EQ(mindio.Count("stopTrain"), 1u);
}

// A retry MindIO answers 406: it accepts only dump or exit from then on.
// Every rung but the job's restart fails at once, without a signal; the
// job restarts after TaskD's dump and exit.
TEST_F(MindClusterRecoverTest, AfterARetrys406OnlyDumpAndExitGoOut) {
  StartServer(ActuatorThatSucceeds);
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  testing::MindioStandIn::Options o;
  o.results["retry"] = {mc::kRecoverRetryUnrecoverable};
  auto started = StartMindio("retry,recover-in-place,recover,dump", o);
  ASSERT_TRUE(started);
  testing::MindioStandIn& mindio = *started;
  ASSERT_TRUE(agent.Transition(1, true, 1, kRestartRequest));
  ASSERT_TRUE(WaitRecoverySucceeded());
  const v1::Recovery r = Recoveries().front();
  EXPECT_EQ(r.initial_strategy(), v1::RECOVERY_STRATEGY_STEP_RETRY);
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_JOB_RESCHEDULE);
  EXPECT_TRUE(mindio.Violations().empty()) << mindio.Violations().front();
  EXPECT_EQ(mindio.Strategies(), (std::vector<std::string>{"retry", "dump", "exit/dump_exit"}));
  bool refused = false;
  for (const auto& s : r.steps()) {
    refused = refused || s.message().find("accepts only dump or exit") != std::string::npos;
  }
  EXPECT_TRUE(refused);
}

// Stored before acting: after a restart of ClusterD in the middle of a step
// retry, TaskD (subscribing again) gets the signal it had not answered, with
// the same uuid, and never the stopTrain it had.
TEST_F(MindClusterRecoverTest, AfterARestartTheStepGoesOnFromItsStoredStage) {
  auto agent = std::make_unique<TestAgent>(channel_, "worker01", 2);
  ASSERT_TRUE(agent->Connect());
  CreateOptedInJob();
  ASSERT_EQ(Init(kTaskdJob), mc::kRecoverOk);
  ASSERT_EQ(Register(kTaskdJob), mc::kRecoverOk);
  std::string global_uuid;
  {
    SignalReader taskd(recover_.get(), kTaskdJob);
    ASSERT_TRUE(WaitAttached());
    ASSERT_TRUE(agent->Transition(1, true, 1, kRestartRequest));
    ASSERT_EQ(taskd.Wait(0).signaltype(), "stopTrain");
    EXPECT_EQ(StopComplete(), mc::kRecoverOk);
    const ::ProcessManageSignal global = taskd.Wait(1);
    ASSERT_EQ(global.signaltype(), "globalFault");
    global_uuid = global.uuid();
  }
  // The stage is in the step, visible to anyone.
  auto stage = [&] {
    auto rs = Recoveries();
    return rs.empty() || rs.front().steps_size() == 0 ? std::string() : rs.front().steps(0).message();
  };
  ASSERT_TRUE(WaitFor([&] { return stage() == "taskd: await-recover-strategy"; }, kTaskdDeadline)) << stage();
  const std::string recovery = Recoveries().front().id();

  agent.reset();
  StartServer();  // the same data dir
  ASSERT_EQ(Init(kTaskdJob), mc::kRecoverOk);
  ASSERT_EQ(Register(kTaskdJob), mc::kRecoverOk);
  SignalReader taskd(recover_.get(), kTaskdJob);
  const ::ProcessManageSignal again = taskd.Wait(0);
  EXPECT_EQ(again.signaltype(), "globalFault");
  EXPECT_EQ(again.uuid(), global_uuid);
  OfferStrategies({"retry"});
  ASSERT_EQ(taskd.Wait(1).changestrategy(), "retry");
  RecoverStatus("retry");
  ASSERT_TRUE(WaitRecoverySucceeded(recovery));
  for (const auto& s : taskd.Messages()) EXPECT_NE(s.signaltype(), "stopTrain");
}

// A SEPARATE chip fault (not TaskD's own report): TaskD stops the fault
// rank's workers first (preExitProcess, answered by ReportProcessFault),
// then the pod rescheduling runs through it: stopTrain, (the pods move),
// globalFault, changeStrategy recover. The process fault TaskD reported is
// covered by that recovery and cleared with it.
TEST_F(MindClusterRecoverTest, ASeparateFaultPreExitsThenRecoversTheMovedPods) {
  StartServer(ActuatorThatSucceeds);
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  CreateOptedInJob();
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);

  ASSERT_TRUE(agent.Transition(1, true, 1, kSeparate));
  const ::ProcessManageSignal pre = taskd->Wait(0);
  ASSERT_EQ(pre.signaltype(), "preExitProcess");
  ASSERT_EQ(pre.faultranks_size(), 1);
  EXPECT_EQ(pre.faultranks(0).rankid(), "1");
  EXPECT_EQ(pre.faultranks(0).faulttype(), "1");
  EXPECT_EQ(AnswerPreExit(pre), mc::kRecoverOk);

  ASSERT_EQ(taskd->Wait(1).signaltype(), "stopTrain");
  EXPECT_EQ(StopComplete(), mc::kRecoverOk);
  // globalFault right after the stop (the pod exits; MindIO waits for the
  // strategy while the pods move), the PAUSE done once TaskD offered.
  const ::ProcessManageSignal global = taskd->Wait(2);
  ASSERT_EQ(global.signaltype(), "globalFault");
  EXPECT_EQ(std::vector<std::string>(global.actions().begin(), global.actions().end()),
            (std::vector<std::string>{"on_global_rank", "fault_nodes_exit"}));
  EXPECT_EQ(OfferStrategies({"exit", "dump", "recover"}), mc::kRecoverOk);
  ASSERT_EQ(taskd->Wait(3).changestrategy(), "recover");
  EXPECT_EQ(RecoverStatus("recover"), mc::kRecoverOk);
  ASSERT_TRUE(WaitRecoverySucceeded());
  EXPECT_EQ(Recoveries().front().strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  const v1::Recovery done = Recoveries().front();
  for (const auto& s : done.steps()) {
    if (s.command() == v1::JOB_COMMAND_PAUSE) {
      EXPECT_EQ(s.message(), "taskd: choosing-strategy; offered exit,dump,recover");
    }
  }
  EXPECT_EQ(taskd->count(), 4u);  // nothing sent twice, no second recovery
  ASSERT_TRUE(WaitFor(
      [&] {
        v1::ListFaultsRequest req;
        req.set_page_size(100);
        grpc::ClientContext ctx;
        v1::ListFaultsResponse resp;
        if (!cluster_->ListFaults(&ctx, req, &resp).ok()) return false;
        for (const auto& f : resp.faults()) {
          if (f.reporter() == "taskd" && f.state() != v1::FAULT_STATE_CLEARED) return false;
        }
        return true;
      },
      kTaskdDeadline));
  EXPECT_EQ(Recoveries().size(), 1u);
}

// A job that cannot recover (recover-strategy retry only): no pod moves; the
// ladder goes on to the job's restart, and TaskD exits through the exchange.
TEST_F(MindClusterRecoverTest, AJobThatCannotRecoverExitsAndRestarts) {
  StartServer(ActuatorThatSucceeds);
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  CreateJob(kTaskdJob,
            {{std::string(mc::kLabelProcessRecoverEnable), "on"}, {std::string(mc::kLabelRecoverStrategy), "retry"}});
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  ASSERT_TRUE(agent.Transition(1, true, 0, kSeparate));
  const ::ProcessManageSignal pre = taskd->Wait(0);
  ASSERT_EQ(pre.signaltype(), "preExitProcess");
  EXPECT_EQ(AnswerPreExit(pre), mc::kRecoverOk);
  ASSERT_EQ(taskd->Wait(1).signaltype(), "stopTrain");
  StopComplete();
  ASSERT_EQ(taskd->Wait(2).signaltype(), "globalFault");
  OfferStrategies({"retry", "dump", "exit"});
  const ::ProcessManageSignal exit = taskd->Wait(3);
  EXPECT_EQ(exit.signaltype(), "changeStrategy");
  EXPECT_EQ(exit.changestrategy(), "exit");
  ASSERT_TRUE(WaitRecoverySucceeded());
  const v1::Recovery r = Recoveries().front();
  EXPECT_EQ(r.initial_strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_JOB_RESCHEDULE);
  bool refused = false, exited = false;
  for (const auto& s : r.steps()) {
    if (s.command() == v1::JOB_COMMAND_PAUSE) refused = s.message().find("does not list recover") != std::string::npos;
    if (s.command() == v1::JOB_COMMAND_STOP) exited = s.message().find("TaskD exits") != std::string::npos;
    if (s.action() == v1::CLUSTER_ACTION_RESCHEDULE_PODS) {
      EXPECT_EQ(s.state(), v1::STEP_STATE_SKIPPED) << "no pod moves: " << s.ShortDebugString();
    }
  }
  EXPECT_TRUE(refused);
  EXPECT_TRUE(exited);
}

// An HCCL error TaskD reports (type "2"): a step retry as the reference's,
// type "2" in the signals, globalFault's timeout 33 s, and the
// changeStrategy after the routes' wait (its delay is the adapter's timer).
TEST_F(MindClusterRecoverClockTest, AnHcclErrorTaskdReportsIsRetriedAfterTheRouteWait) {
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  CreateOptedInJob();
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  ::ProcessFaultRequest report;
  report.set_jobid(kTaskdJob);
  auto* rank = report.add_faultranks();
  rank->set_rankid("1");
  rank->set_faulttype("2");
  EXPECT_EQ(Unary(&::Recover::Stub::ReportProcessFault, report).code(), mc::kRecoverOk);
  const ::ProcessManageSignal stop = taskd->Wait(0);
  ASSERT_EQ(stop.signaltype(), "stopTrain");  // a retry: no preExitProcess
  ASSERT_EQ(stop.faultranks_size(), 1);
  EXPECT_EQ(stop.faultranks(0).faulttype(), "2");
  StopComplete();
  const ::ProcessManageSignal global = taskd->Wait(1);
  ASSERT_EQ(global.signaltype(), "globalFault");
  EXPECT_EQ(global.timeout(), mc::kHcclRetryTimeoutS);
  OfferStrategies({"retry", "recover"});
  AdvanceToTaskIn(std::chrono::milliseconds(mc::kHcclRouteWaitMs));  // the routes' wait, then the change
  const ::ProcessManageSignal change = taskd->Wait(2);
  ASSERT_EQ(change.changestrategy(), "retry");
  RecoverStatus("retry");
  ASSERT_TRUE(WaitRecoverySucceeded());
  EXPECT_EQ(Recoveries().front().strategy(), v1::RECOVERY_STRATEGY_STEP_RETRY);
}

// Scale-in as MindIO does it: "downgrade" with the reference's extraParams,
// its 201 (the ranks to isolate) answered with faultNodesExit to their
// pods, then its 0. A job of two pods (ranks 0-1 on worker01, 2-3 on
// worker02) that allows only SCALE_IN; a chip of worker02 fails.
TEST_F(MindClusterRecoverClockTest, ScaleInIsMindiosDowngrade) {
  StartServer([](ClusterdConfig& c) {
    ActuatorThatSucceeds(c);
    c.node_grace = std::chrono::minutes(5);  // these agents send no heartbeats
  });
  TestAgent w1(channel_, "worker01", 2), w2(channel_, "worker02", 2);
  ASSERT_TRUE(w1.Connect());
  ASSERT_TRUE(w2.Connect());
  {
    v1::CreateJobRequest req;
    v1::Job* job = req.mutable_job();
    job->set_id(kTaskdJob);
    job->set_kind(v1::JOB_KIND_TRAINING);
    job->mutable_policy()->mutable_hold_down()->set_seconds(0);
    job->mutable_policy()->add_allowed_strategies(v1::RECOVERY_STRATEGY_SCALE_IN);
    job->mutable_policy()->set_ranks_per_replica(2);
    job->mutable_policy()->set_min_replicas(1);
    for (uint32_t r = 0; r < 4; ++r) {
      auto* p = job->add_placement();
      p->set_rank(r);
      p->set_node(r < 2 ? "worker01" : "worker02");
      p->set_device_id(r % 2);
    }
    (*job->mutable_labels())[std::string(mc::kLabelProcessRecoverEnable)] = "on";
    (*job->mutable_labels())[std::string(mc::kLabelRecoverStrategy)] = "elastic-training";
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    grpc::Status st = jobs_->CreateJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  ASSERT_EQ(Init(kTaskdJob), mc::kRecoverOk);
  ASSERT_EQ(Register(kTaskdJob), mc::kRecoverOk);
  testing::MindioStandIn::Options o;
  o.zit = true;
  testing::MindioStandIn mindio(recover_.get(), kTaskdJob, o);
  ASSERT_TRUE(WaitAttached());
  ASSERT_TRUE(w2.Transition(1, true, 1, kSeparate));
  ASSERT_TRUE(WaitRecoverySucceeded());
  EXPECT_EQ(Recoveries().front().strategy(), v1::RECOVERY_STRATEGY_SCALE_IN);
  EXPECT_TRUE(mindio.Violations().empty()) << mindio.Violations().front();
  EXPECT_EQ(mindio.Strategies(), (std::vector<std::string>{R"(downgrade/{"scale-in-strategy": "DP"})"}));
  ASSERT_EQ(mindio.Count("faultNodesExit"), 1u);
  for (const auto& s : mindio.Signals()) {
    if (s.signaltype() == "faultNodesExit") {
      EXPECT_EQ(std::vector<std::string>(s.noderankids().begin(), s.noderankids().end()),
                (std::vector<std::string>{"1"}));
    }
  }
  // The chip comes back (its fault clears, an operator uncordons the node,
  // which ends its isolations): MindIO's
  // upgrade brings the isolated ranks back.
  ASSERT_TRUE(w2.Transition(2, false, 1, kSeparate));
  {
    auto admin = v1::AdminService::NewStub(channel_);
    v1::UncordonNodeRequest req;  // ends the node's isolations
    req.set_node("worker02");
    req.set_actor("operator");
    req.set_reason("chip replaced");
    grpc::ClientContext ctx;
    v1::UncordonNodeResponse resp;
    grpc::Status st = admin->UncordonNode(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  clock_.Advance(std::chrono::seconds(5));  // the sweep sees the chips back
  ASSERT_TRUE(mindio.WaitFor([](const auto& signals) {
    return std::any_of(signals.begin(), signals.end(), [](const auto& s) { return s.changestrategy() == "upgrade"; });
  })) << "no upgrade";
  EXPECT_EQ(mindio.Strategies(), (std::vector<std::string>{R"(downgrade/{"scale-in-strategy": "DP"})",
                                                           R"(upgrade/{"scale-out-strategy": "DP"})"}));
  for (const auto& s : mindio.Signals()) {
    if (s.changestrategy() == "upgrade") {
      EXPECT_EQ(std::vector<std::string>(s.noderankids().begin(), s.noderankids().end()),
                (std::vector<std::string>{"1"}));
    }
  }
  EXPECT_TRUE(mindio.Violations().empty()) << mindio.Violations().front();
}

// ClusterD restarted while TaskD owed an answer; TaskD drops the signal
// sent again with the uuid it has seen (and had dropped its report after
// four tries). The step fails once MindIO's wait has passed (here 2 s,
// mindcluster_taskd_wait_seconds, stepped on the timers' clock) and the
// ladder goes on, instead of waiting for the rung's timeout.
TEST_F(MindClusterRecoverClockTest, ASignalSentAgainAndNeverAnsweredFailsAfterMindiosWait) {
  auto short_wait = [](ClusterdConfig& c) { c.mindcluster_taskd_wait = std::chrono::seconds(2); };
  StartServer(short_wait);
  auto agent = std::make_unique<TestAgent>(channel_, "worker01", 2);
  ASSERT_TRUE(agent->Connect());
  CreateOptedInJob();
  ASSERT_EQ(Init(kTaskdJob), mc::kRecoverOk);
  ASSERT_EQ(Register(kTaskdJob), mc::kRecoverOk);
  std::string stop_uuid;
  {
    SignalReader taskd(recover_.get(), kTaskdJob);
    ASSERT_TRUE(WaitAttached());
    ASSERT_TRUE(agent->Transition(1, true, 1, kRestartRequest));
    const ::ProcessManageSignal stop = taskd.Wait(0);
    ASSERT_EQ(stop.signaltype(), "stopTrain");
    stop_uuid = stop.uuid();
    // TaskD stops, its report never reaches this ClusterD.
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        auto rs = Recoveries();
        return !rs.empty() && rs.front().steps_size() > 0 &&
               rs.front().steps(0).message() == "taskd: await-stop-complete";
      },
      kTaskdDeadline));
  const std::string recovery = Recoveries().front().id();
  agent.reset();
  StartServer(short_wait);  // the same data dir
  ASSERT_EQ(Init(kTaskdJob), mc::kRecoverOk);
  ASSERT_EQ(Register(kTaskdJob), mc::kRecoverOk);
  SignalReader taskd(recover_.get(), kTaskdJob);
  EXPECT_EQ(taskd.Wait(0).uuid(), stop_uuid);  // sent again: TaskD drops it
  AdvanceToTaskIn(std::chrono::seconds(2));    // MindIO's wait for its answer
  auto first_step = [&]() -> v1::RecoveryStep {
    for (const auto& r : Recoveries()) {
      if (r.id() == recovery && r.steps_size() > 0) return r.steps(0);
    }
    return {};
  };
  ASSERT_TRUE(WaitFor([&] { return first_step().state() == v1::STEP_STATE_FAILED; }, kTaskdDeadline))
      << first_step().ShortDebugString();
  EXPECT_NE(first_step().message().find("sent again"), std::string::npos) << first_step().message();
  EXPECT_NE(first_step().message().find("within 2 s"), std::string::npos) << first_step().message();
}

}  // namespace
}  // namespace clusterd

namespace clusterd {
namespace {

// The Recover job table follows the job's life: a deleted job's HealthCheck
// is no longer ok and its entry (and subscription) goes at the next sweep,
// so 10,000 jobs created and deleted over a leader's life never fill it
// (issue #51, item 4).
TEST_F(MindClusterRecoverClockTest, ADeletedJobIsForgotten) {
  CreateOptedInJob();
  ASSERT_EQ(Init(kTaskdJob), mc::kRecoverOk);
  ASSERT_EQ(Register(kTaskdJob), mc::kRecoverOk);
  SignalReader taskd(recover_.get(), kTaskdJob);
  ASSERT_TRUE(WaitAttached());
  EXPECT_EQ(HealthCheck(kTaskdJob), mc::kRecoverOk);
  auto jobs_metric = [&] {
    auto res = testing::HttpGet(server_->http_port(), "/metrics");
    return testing::MetricValue(res.body, "clusterd_mindcluster_recover_jobs");
  };
  EXPECT_EQ(jobs_metric(), 1);
  {
    v1::DeleteJobRequest req;
    req.set_id(kTaskdJob);
    grpc::ClientContext ctx;
    v1::DeleteJobResponse resp;
    grpc::Status st = jobs_->DeleteJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  ASSERT_TRUE(WaitFor([&] { return HealthCheck(kTaskdJob) == mc::kRecoverNotRegistered; }, kTaskdDeadline));
  EXPECT_EQ(jobs_metric(), 1);  // until the sweep
  // The sweep (every keep-alive interval) drops it and ends its stream.
  clock_.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(WaitFor([&] { return jobs_metric() == 0; }, kTaskdDeadline));
  EXPECT_EQ(taskd.WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  auto res = testing::HttpGet(server_->http_port(), "/metrics");
  EXPECT_EQ(testing::MetricValue(res.body, "clusterd_mindcluster_recover_jobs_dropped_total"), 1);
  EXPECT_EQ(testing::MetricValue(res.body, "clusterd_mindcluster_recover_subscribers"), 0);
  EXPECT_EQ(Init(kTaskdJob), mc::kRecoverUnknownJob);
}

// One job's TaskD calling as fast as it can uses up its own bucket, never
// another job's share (issue #51, item 5).
TEST_F(MindClusterRecoverTest, OneJobsFloodLeavesAnotherJobItsCalls) {
  CreateOptedInJob();
  CreateJob("other-job",
            {{std::string(mc::kLabelProcessRecoverEnable), "on"}, {std::string(mc::kLabelRecoverStrategy), "retry"}});
  int refused = 0;
  std::string message;
  for (int i = 0; i < 400; ++i) {
    grpc::ClientContext ctx;
    ::Status resp;
    grpc::Status st = recover_->Init(&ctx, TaskdClient(kTaskdJob), &resp);
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      message = st.error_message();
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_NE(message.find("for job " + std::string(kTaskdJob)), std::string::npos) << message;
  // The other job's calls all pass: its bucket is its own, the shared one untouched by the refusals.
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Init("other-job"), mc::kRecoverOk) << i;
}

}  // namespace
}  // namespace clusterd
