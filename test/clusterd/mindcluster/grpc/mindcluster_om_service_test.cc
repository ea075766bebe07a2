// The Recover service's NIC switch and stress test (docs/mindcluster.md, "NIC
// switch and stress test") on an in-process ClusterD (port 0), through real
// gRPC stubs of the reference's proto, with an operator and a TaskD played
// step by step: the switch paused, carried out and continued; TaskD never
// answering (the wait runs out, the job's ranks get a process fault and the
// job is recovered); refused requests changing nothing; a stress test's fault
// taking the chip out; a restart of ClusterD in the middle; hostile callers.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/mindcluster/om.h"
#include "clusterd/mindcluster/taskd.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "clusterd/v1/mindcluster.grpc.pb.h"
#include "mindcluster/recover.grpc.pb.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/grpc/stream_reader.h"
#include "test/support/http_get.h"
#include "test/support/running_timers.h"
#include "test/support/server/server_fixture.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;
using testing::TestAgent;
using testing::WaitFor;

constexpr auto kOmServiceDeadline = std::chrono::seconds(30);
constexpr char kJob[] = "7f3e-ascendjob-uid";

::ClientInfo Taskd(const std::string& job) {
  ::ClientInfo c;
  c.set_jobid(job);
  c.set_role("taskd");
  return c;
}

template <typename Message>
class Reader : public testing::StreamReader<Message> {
 public:
  using testing::StreamReader<Message>::StreamReader;
  // The n-th message (0-based) once it came; an empty one on timeout.
  Message Wait(size_t n) {
    auto got = this->WaitMessages(n + 1);
    return got.size() > n ? got[n] : Message();
  }
};

class MindClusterOmTest : public testing::ClusterdServerTest {
 protected:
  void OnServerStarted() override {
    recover_ = ::Recover::NewStub(channel_);
    jobs_ = v1::JobService::NewStub(channel_);
    cluster_ = v1::ClusterService::NewStub(channel_);
    view_ = v1::MindClusterService::NewStub(channel_);
  }

  // The job's MindCluster view (clusterctl's and the status page's read).
  v1::GetMindClusterJobResponse View(grpc::Status* status = nullptr) {
    v1::GetMindClusterJobRequest req;
    req.set_job_id(kJob);
    grpc::ClientContext ctx;
    v1::GetMindClusterJobResponse resp;
    grpc::Status st = view_->GetMindClusterJob(&ctx, req, &resp);
    if (status != nullptr) *status = st;
    EXPECT_TRUE(status != nullptr || st.ok()) << st.error_message();
    return resp;
  }

  // A training job of two ranks on worker01's chips 0 and 1, opted in.
  void CreateJob() {
    v1::CreateJobRequest req;
    v1::Job* job = req.mutable_job();
    job->set_id(kJob);
    job->set_kind(v1::JOB_KIND_TRAINING);
    job->mutable_policy()->mutable_hold_down()->set_seconds(0);
    for (uint32_t d = 0; d < 2; ++d) {
      auto* p = job->add_placement();
      p->set_rank(d);
      p->set_node("worker01");
      p->set_device_id(d);
    }
    (*job->mutable_labels())[std::string(mc::kLabelProcessRecoverEnable)] = "on";
    (*job->mutable_labels())[std::string(mc::kLabelRecoverStrategy)] = "retry,recover-in-place,recover";
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    grpc::Status st = jobs_->CreateJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  template <typename Call, typename Request>
  ::Status Unary(Call call, const Request& req, grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    ::Status resp;
    grpc::Status st = ((*recover_).*call)(&ctx, req, &resp);
    if (status != nullptr) {
      *status = st;
    } else {
      EXPECT_TRUE(st.ok()) << st.error_message();
    }
    return resp;
  }
  // TaskD's Init and Register, and its process signal stream (keep-alives
  // left out), attached as the job's agent.
  std::unique_ptr<Reader<::ProcessManageSignal>> StartTaskd() {
    if (Unary(&::Recover::Stub::Init, Taskd(kJob)).code() != mc::kRecoverOk) return nullptr;
    if (Unary(&::Recover::Stub::Register, Taskd(kJob)).code() != mc::kRecoverOk) return nullptr;
    auto reader = std::make_unique<Reader<::ProcessManageSignal>>(
        [&](grpc::ClientContext* ctx) { return recover_->SubscribeProcessManageSignal(ctx, Taskd(kJob)); },
        [](const ::ProcessManageSignal& s) { return s.signaltype() != "keep-alive"; }, kOmServiceDeadline);
    if (!WaitFor([&] { return Metric("clusterd_job_agents") == 1; }, kOmServiceDeadline)) return nullptr;
    return reader;
  }
  std::unique_ptr<Reader<::SwitchRankList>> NotifySwitch() {
    return std::make_unique<Reader<::SwitchRankList>>(
        [&](grpc::ClientContext* ctx) { return recover_->SubscribeNotifySwitch(ctx, Taskd(kJob)); }, nullptr,
        kOmServiceDeadline);
  }
  std::unique_ptr<Reader<::SwitchNicResponse>> SwitchResults() {
    ::SwitchNicRequest req;
    req.set_jobid(kJob);
    return std::make_unique<Reader<::SwitchNicResponse>>(
        [this, req](grpc::ClientContext* ctx) { return recover_->SubscribeSwitchNicSignal(ctx, req); }, nullptr,
        kOmServiceDeadline);
  }
  double Metric(const std::string& name) {
    auto res = testing::HttpGet(server_->http_port(), "/metrics");
    return res.status == 200 ? testing::MetricValue(res.body, name) : -1;
  }

  static ::SwitchNics Nics(const std::string& node, const std::string& dev) {
    ::SwitchNics n;
    n.set_jobid(kJob);
    auto& l = (*n.mutable_nicops())[node];
    l.add_dev(dev);
    l.add_op(true);
    return n;
  }
  int32_t SwitchNic(const ::SwitchNics& req) { return Unary(&::Recover::Stub::SwitchNicTrack, req).code(); }
  int32_t StopComplete() {
    ::StopCompleteRequest req;
    req.set_jobid(kJob);
    return Unary(&::Recover::Stub::ReportStopComplete, req).code();
  }
  int32_t Continued(int32_t code = 0) {
    ::RecoverStatusRequest req;
    req.set_jobid(kJob);
    req.set_strategy("continue");
    if (code != 0) req.mutable_status()->set_code(code);
    return Unary(&::Recover::Stub::ReportRecoverStatus, req).code();
  }
  int32_t Switched(bool ok) {
    ::SwitchResult req;
    req.set_jobid(kJob);
    req.set_result(ok);
    return Unary(&::Recover::Stub::ReplySwitchNicResult, req).code();
  }
  std::vector<v1::Fault> Faults(const std::string& reporter) {
    v1::ListFaultsRequest req;
    req.set_page_size(100);
    grpc::ClientContext ctx;
    v1::ListFaultsResponse resp;
    EXPECT_TRUE(cluster_->ListFaults(&ctx, req, &resp).ok());
    std::vector<v1::Fault> out;
    for (const auto& f : resp.faults()) {
      if (f.reporter() == reporter) out.push_back(f);
    }
    return out;
  }
  size_t RecoveryCount() {
    v1::ListRecoveriesRequest req;
    req.set_job(kJob);
    grpc::ClientContext ctx;
    v1::ListRecoveriesResponse resp;
    EXPECT_TRUE(cluster_->ListRecoveries(&ctx, req, &resp).ok());
    return static_cast<size_t>(resp.recoveries_size());
  }

  std::unique_ptr<::Recover::Stub> recover_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
  std::unique_ptr<v1::MindClusterService::Stub> view_;
};

TEST_F(MindClusterOmTest, ANicSwitchPausesSwitchesAndContinuesTraining) {
  StartServer();
  CreateJob();
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  auto notify = NotifySwitch();

  ASSERT_EQ(SwitchNic(Nics("worker01", "1")), mc::kRecoverOk);
  auto results = SwitchResults();
  const ::ProcessManageSignal pause = taskd->Wait(0);
  ASSERT_EQ(pause.signaltype(), "stopTrain");
  EXPECT_EQ(std::vector<std::string>(pause.actions().begin(), pause.actions().end()),
            (std::vector<std::string>{"pause_train"}));
  EXPECT_EQ(pause.uuid(), std::string(kJob) + "/nic-switch/1/pause");
  // One at a time.
  EXPECT_EQ(SwitchNic(Nics("worker01", "0")), mc::kOmIsRunning);

  EXPECT_EQ(StopComplete(), mc::kRecoverOk);
  const ::SwitchRankList ranks = notify->Wait(0);
  ASSERT_EQ(ranks.rankid_size(), 1);
  EXPECT_EQ(ranks.rankid(0), "1");
  EXPECT_TRUE(ranks.op(0));
  EXPECT_EQ(ranks.jobid(), kJob);

  EXPECT_EQ(Switched(true), mc::kRecoverOk);
  const ::ProcessManageSignal cont = taskd->Wait(1);
  ASSERT_EQ(cont.signaltype(), "changeStrategy");
  EXPECT_EQ(cont.changestrategy(), "continue");
  EXPECT_EQ(Continued(), mc::kRecoverOk);

  EXPECT_EQ(results->Wait(0).msg(), "switch nic finish");
  EXPECT_TRUE(results->WaitEnd().ok());
  EXPECT_EQ(taskd->Messages().size(), 2u);  // nothing else was sent
  EXPECT_EQ(RecoveryCount(), 0u);           // no recovery: the job trained on
  // An operator who asks afterwards still gets the outcome.
  auto late = SwitchResults();
  EXPECT_EQ(late->Wait(0).msg(), "switch nic finish");
  EXPECT_TRUE(late->WaitEnd().ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        auto res = testing::HttpGet(server_->http_port(), "/metrics");
        return res.body.find("clusterd_mindcluster_recover_om_operations_total{result=\"succeeded\"} 1") !=
               std::string::npos;
      },
      kOmServiceDeadline));
  // The job's view shows the switch: what was asked, each step, the outcome.
  {
    const v1::GetMindClusterJobResponse v = View();
    EXPECT_FALSE(v.has_current_operation());
    ASSERT_EQ(v.history_size(), 1);
    const v1::MindClusterOperation& op = v.history(0);
    EXPECT_EQ(op.id(), std::string(kJob) + "/nic-switch/1");
    EXPECT_EQ(op.kind(), "nic-switch");
    EXPECT_EQ(op.stage(), "succeeded");
    EXPECT_EQ(std::vector<std::string>(op.ranks().begin(), op.ranks().end()), std::vector<std::string>{"1"});
    EXPECT_EQ(std::vector<std::string>(op.planes().begin(), op.planes().end()), std::vector<std::string>{"backup"});
    ASSERT_GE(op.messages_size(), 1);
    EXPECT_EQ(op.messages(op.messages_size() - 1), "switch nic finish");
    EXPECT_TRUE(op.has_finished());
    // And the job's summary as job.Job tells it, with its one server.
    ASSERT_TRUE(v.has_summary());
    EXPECT_EQ(v.summary().job_status(), "running");
    ASSERT_EQ(v.servers_size(), 1);
    EXPECT_EQ(v.servers(0).server_name(), "worker01");
    EXPECT_EQ(v.servers(0).devices_size(), 2);
  }
  // The next one may start.
  EXPECT_EQ(SwitchNic(Nics("worker01", "1")), mc::kRecoverOk);
  EXPECT_EQ(taskd->Wait(2).uuid(), std::string(kJob) + "/nic-switch/2/pause");
  // In flight: the view's current operation, awaiting TaskD's pause.
  const v1::GetMindClusterJobResponse v = View();
  ASSERT_TRUE(v.has_current_operation());
  EXPECT_EQ(v.current_operation().stage(), "await-pause");
  EXPECT_TRUE(v.current_operation().has_deadline());
  EXPECT_EQ(v.history_size(), 1);
}

// The server's timers on a ManualExecutor whose due tasks a thread runs
// (test/support/running_timers.h): the operation's wait (om_wait) comes when
// the test moves the clock.
class MindClusterOmClockTest : public MindClusterOmTest {
 protected:
  void SetUp() override { timers_ = &running_.executor(); }
  void TearDown() override {
    MindClusterOmTest::TearDown();
    timers_ = nullptr;
  }
  void StopServer() override {
    running_.Pause();
    MindClusterOmTest::StopServer();
    running_.Resume();
  }

  testing::RunningTimers running_;
};

TEST_F(MindClusterOmClockTest, TaskdNeverAnsweringFailsTheSwitchAndTheJobIsRecovered) {
  StartServer([](ClusterdConfig& c) {
    c.mindcluster_om_wait = std::chrono::seconds(1);
    c.actuator = "exec";
    c.actuator_command = "/bin/true";
  });
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  CreateJob();
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  ASSERT_EQ(SwitchNic(Nics("worker01", "1")), mc::kRecoverOk);
  auto results = SwitchResults();
  ASSERT_EQ(taskd->Wait(0).signaltype(), "stopTrain");
  // TaskD never answers: the wait runs out.
  ASSERT_TRUE(running_.AdvanceToTaskIn(std::chrono::seconds(1), kDeadline));
  EXPECT_EQ(results->Wait(0).msg(), "switch nic failed, pause train timeout");
  EXPECT_TRUE(results->WaitEnd().ok());
  // The paused job's switched rank gets a process fault, and ClusterD recovers the job through TaskD.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto fs = Faults("taskd");
        return fs.size() == 1 && fs[0].code() == mc::kCodeOmFailed && fs[0].device_id() == 1;
      },
      kOmServiceDeadline));
  ASSERT_TRUE(WaitFor([&] { return RecoveryCount() >= 1; }, kOmServiceDeadline));
  // Its late answer is not the operation's any more.
  EXPECT_EQ(Switched(true), mc::kRecoverClientError);
}

TEST_F(MindClusterOmTest, ARefusedRequestChangesNothing) {
  StartServer();
  ::SwitchNics unknown = Nics("worker01", "1");
  unknown.set_jobid("no-such-job");
  EXPECT_EQ(SwitchNic(unknown), mc::kOmParamInvalid);
  CreateJob();
  EXPECT_EQ(SwitchNic(Nics("worker01", "1")), mc::kOmParamInvalid);  // TaskD not registered
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  ::Status resp = Unary(&::Recover::Stub::SwitchNicTrack, Nics("worker09", "1"));
  EXPECT_EQ(resp.code(), mc::kOmParamInvalid);
  EXPECT_EQ(resp.info(), "node:worker09 not exist in job:" + std::string(kJob));
  EXPECT_EQ(SwitchNic(Nics("worker01", "5")), mc::kOmParamInvalid);
  EXPECT_EQ(SwitchNic(Nics("worker01\n\x01", "1")), mc::kOmParamInvalid);
  ::SwitchNics bad_len = Nics("worker01", "1");
  (*bad_len.mutable_nicops())["worker01"].add_op(false);
  EXPECT_EQ(SwitchNic(bad_len), mc::kOmParamInvalid);
  ::StressTestParam stress;
  stress.set_jobid(kJob);
  stress.add_allnodesops(7);
  EXPECT_EQ(Unary(&::Recover::Stub::StressTest, stress).code(), mc::kOmParamInvalid);
  ::SwitchNics no_job;
  EXPECT_EQ(SwitchNic(no_job), mc::kOmParamInvalid);
  // Nothing stored, nothing sent: the operator's stream has nothing to show.
  auto results = SwitchResults();
  EXPECT_EQ(results->WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // TaskD's answers out of turn change nothing either.
  EXPECT_EQ(Switched(true), mc::kRecoverClientError);
  // The first accepted one is the job's first.
  ASSERT_EQ(SwitchNic(Nics("worker01", "0")), mc::kRecoverOk);
  const ::ProcessManageSignal first = taskd->Wait(0);
  EXPECT_EQ(first.uuid(), std::string(kJob) + "/nic-switch/1/pause");
  EXPECT_EQ(taskd->Messages().size(), 1u);
  EXPECT_EQ(RecoveryCount(), 0u);
}

TEST_F(MindClusterOmTest, AStressTestsFaultTakesTheChipOut) {
  StartServer([](ClusterdConfig& c) {
    c.actuator = "exec";
    c.actuator_command = "/bin/true";
  });
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  CreateJob();
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  Reader<::StressTestRankParams> notify(
      [&](grpc::ClientContext* ctx) { return recover_->SubscribeNotifyExecStressTest(ctx, Taskd(kJob)); }, nullptr,
      kOmServiceDeadline);
  ::StressTestParam param;
  param.set_jobid(kJob);
  param.add_allnodesops(mc::kStressOpAic);
  ASSERT_EQ(Unary(&::Recover::Stub::StressTest, param).code(), mc::kRecoverOk);
  ::StressTestRequest watch;
  watch.set_jobid(kJob);
  Reader<::StressTestResponse> results(
      [&](grpc::ClientContext* ctx) { return recover_->SubscribeStressTestResponse(ctx, watch); }, nullptr,
      kOmServiceDeadline);

  const ::ProcessManageSignal pause = taskd->Wait(0);
  ASSERT_EQ(pause.signaltype(), "stopTrain");
  EXPECT_EQ(pause.timeout(), mc::kStressTestPauseTimeoutS);
  EXPECT_EQ(StopComplete(), mc::kRecoverOk);
  EXPECT_EQ(taskd->Wait(1).signaltype(), "pauseStartAgent");
  const ::StressTestRankParams params = notify.Wait(0);
  ASSERT_EQ(params.stressparam().size(), 2u);
  EXPECT_EQ(params.stressparam().at("0").ops(0), mc::kStressOpAic);

  ::StressTestResult result;
  result.set_jobid(kJob);
  auto set = [&](const std::string& rank, const std::string& code) {
    auto& r = (*(*result.mutable_stressresult())[rank].mutable_rankresult())["0"];
    r.set_code(code);
    r.set_result(code == "0" ? "pass" : "aic error");
  };
  set("0", "0");
  set("1", "2");  // the test found a fault on chip 1
  EXPECT_EQ(Unary(&::Recover::Stub::ReplyStressTestResult, result).code(), mc::kRecoverOk);
  EXPECT_EQ(taskd->Wait(2).signaltype(), "continueStartAgent");
  const std::string msg = results.Wait(0).msg();
  EXPECT_NE(msg.find("stress test find fault, chips worker01/1 SEPARATE"), std::string::npos) << msg;
  EXPECT_TRUE(results.WaitEnd().ok());
  // The chip is a SEPARATE fault of the reporter "stresstest": the coordinator takes it out.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto fs = Faults("stresstest");
        return fs.size() == 1 && fs[0].device_id() == 1 && fs[0].level() == v1::FAULT_LEVEL_SEPARATE &&
               fs[0].code() == mc::kCodeStressTestFault && fs[0].state() == v1::FAULT_STATE_ACTIVE;
      },
      kOmServiceDeadline));
  ASSERT_TRUE(WaitFor([&] { return RecoveryCount() >= 1; }, kOmServiceDeadline));
  // The view's per-chip results, through gRPC and the HTTP API alike.
  const v1::GetMindClusterJobResponse v = View();
  ASSERT_EQ(v.history_size(), 1);
  const v1::MindClusterOperation& op = v.history(0);
  EXPECT_EQ(op.kind(), "stress-test");
  EXPECT_EQ(op.stage(), "failed");
  EXPECT_EQ(op.stress_ops().at("0"), "AIC");
  EXPECT_EQ(op.stress_ops().at("1"), "AIC");
  ASSERT_EQ(op.chip_results_size(), 2);
  EXPECT_EQ(op.chip_results(1).node(), "worker01");
  EXPECT_EQ(op.chip_results(1).device(), "1");
  EXPECT_EQ(op.chip_results(1).code(), "2");
  EXPECT_EQ(op.chip_results(1).result(), "aic error");
  auto http = testing::HttpGet(server_->http_port(), std::string("/api/v1/mindcluster/jobs/") + kJob);
  ASSERT_EQ(http.status, 200) << http.body;
  EXPECT_NE(http.body.find(R"("result":"aic error")"), std::string::npos) << http.body;
  EXPECT_NE(http.body.find(R"("serverName":"worker01")"), std::string::npos) << http.body;
  EXPECT_EQ(testing::HttpGet(server_->http_port(), "/api/v1/mindcluster/jobs/no-such-job").status, 404);
  EXPECT_EQ(
      testing::HttpGet(server_->http_port(), std::string("/api/v1/mindcluster/jobs/") + kJob + "?page_token=x").status,
      400);
}

TEST_F(MindClusterOmTest, AfterARestartTheSwitchGoesOn) {
  StartServer();
  CreateJob();
  std::string pause_uuid;
  {
    auto taskd = StartTaskd();
    ASSERT_TRUE(taskd);
    auto notify = NotifySwitch();
    ASSERT_EQ(SwitchNic(Nics("worker01", "1")), mc::kRecoverOk);
    pause_uuid = taskd->Wait(0).uuid();
    ASSERT_EQ(StopComplete(), mc::kRecoverOk);
    ASSERT_EQ(notify->Wait(0).rankid_size(), 1);
  }
  StartServer();  // the same data dir
  // TaskD's result may come before it registered again: it is taken.
  EXPECT_EQ(Switched(true), mc::kRecoverOk);
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  EXPECT_EQ(SwitchNic(Nics("worker01", "0")), mc::kOmIsRunning);
  const ::ProcessManageSignal cont = taskd->Wait(0);
  EXPECT_EQ(cont.changestrategy(), "continue");
  EXPECT_NE(cont.uuid(), pause_uuid);
  EXPECT_EQ(Continued(), mc::kRecoverOk);
  auto results = SwitchResults();
  EXPECT_EQ(results->Wait(0).msg(), "switch nic finish");
  EXPECT_TRUE(results->WaitEnd().ok());
}

// A fault ClusterD recovers while a switch runs: the recovery takes over
// through the same TaskD, the switch ends failed and raises nothing.
TEST_F(MindClusterOmTest, ARecoveryOfTheJobTakesOver) {
  StartServer([](ClusterdConfig& c) {
    c.actuator = "exec";
    c.actuator_command = "/bin/true";
  });
  TestAgent agent(channel_, "worker01", 2);
  ASSERT_TRUE(agent.Connect());
  CreateJob();
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  ASSERT_EQ(SwitchNic(Nics("worker01", "1")), mc::kRecoverOk);
  auto results = SwitchResults();
  ASSERT_EQ(taskd->Wait(0).uuid(), std::string(kJob) + "/nic-switch/1/pause");
  ASSERT_TRUE(agent.Transition(1, true, 1, "80BB8000"));  // RESTART_REQUEST: a step retry
  const std::string msg = results->Wait(0).msg();
  EXPECT_NE(msg.find("switch nic failed, a recovery of the job took over"), std::string::npos) << msg;
  EXPECT_TRUE(results->WaitEnd().ok());
  const ::ProcessManageSignal stop = taskd->Wait(1);
  EXPECT_EQ(stop.signaltype(), "stopTrain");
  EXPECT_EQ(stop.uuid().find("nic-switch"), std::string::npos) << stop.uuid();
  EXPECT_EQ(RecoveryCount(), 1u);
  EXPECT_TRUE(Faults("taskd").empty());
  // The pause's answer now belongs to the recovery: its globalFault follows.
  EXPECT_EQ(StopComplete(), mc::kRecoverOk);
  EXPECT_EQ(taskd->Wait(2).signaltype(), "globalFault");
}

TEST_F(MindClusterOmTest, AfterARestartTheNoticeIsSentAgain) {
  StartServer();
  CreateJob();
  {
    auto taskd = StartTaskd();
    ASSERT_TRUE(taskd);
    ASSERT_EQ(SwitchNic(Nics("worker01", "1")), mc::kRecoverOk);
    ASSERT_EQ(taskd->Wait(0).signaltype(), "stopTrain");
    ASSERT_EQ(StopComplete(), mc::kRecoverOk);  // no notify stream: the notice waits
  }
  StartServer();  // the same data dir
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  auto notify = NotifySwitch();
  EXPECT_EQ(notify->Wait(0).rankid(0), "1");
  EXPECT_EQ(Switched(true), mc::kRecoverOk);
  EXPECT_EQ(taskd->Wait(0).changestrategy(), "continue");
  EXPECT_EQ(Continued(), mc::kRecoverOk);
  auto results = SwitchResults();
  EXPECT_EQ(results->Wait(0).msg(), "switch nic finish");
}

TEST_F(MindClusterOmTest, HostileCallersGetClearErrors) {
  StartServer();
  CreateJob();
  // TaskD's streams before Init/Register, and without a job.
  {
    auto early = NotifySwitch();
    EXPECT_EQ(early->WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    Reader<::StressTestRankParams> anonymous(
        [&](grpc::ClientContext* ctx) { return recover_->SubscribeNotifyExecStressTest(ctx, Taskd("")); }, nullptr,
        kOmServiceDeadline);
    EXPECT_EQ(anonymous.WaitEnd().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  auto taskd = StartTaskd();
  ASSERT_TRUE(taskd);
  // An oversized or malformed result: 499, nothing changes.
  ::StressTestResult big;
  big.set_jobid(kJob);
  auto& ops = *(*big.mutable_stressresult())["0"].mutable_rankresult();
  for (int i = 0; i < 20; ++i) ops[std::to_string(i)].set_code("0");
  EXPECT_EQ(Unary(&::Recover::Stub::ReplyStressTestResult, big).code(), mc::kRecoverClientError);
  ::StressTestResult bad;
  bad.set_jobid(kJob);
  (*(*bad.mutable_stressresult())["0"].mutable_rankresult())["0"].set_code("\x01\x02");
  EXPECT_EQ(Unary(&::Recover::Stub::ReplyStressTestResult, bad).code(), mc::kRecoverClientError);
  // A result for a job nobody registered.
  ::SwitchResult stray;
  stray.set_jobid("not-registered");
  EXPECT_EQ(Unary(&::Recover::Stub::ReplySwitchNicResult, stray).code(), mc::kRecoverNotRegistered);
  // A flood of requests for one job: its own bucket runs dry, naming the job.
  int refused = 0;
  std::string message;
  for (int i = 0; i < 400; ++i) {
    grpc::Status st;
    Unary(&::Recover::Stub::SwitchNicTrack, Nics("worker09", "1"), &st);
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      message = st.error_message();
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_NE(message.find("for job " + std::string(kJob)), std::string::npos) << message;
  EXPECT_TRUE(taskd->Messages().empty());
}

}  // namespace
}  // namespace clusterd
