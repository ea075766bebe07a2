// Job progress through JobService.Attach on an in-process ClusterD (real
// gRPC on loopback): an agent reporting eight ranks' steps, one of them 40 %
// slow -> SLOW_RANK on its chip and in GetJob; every rank stopping ->
// JOB_HANG, the policy's recovery (RESTART_PROCESSES) commanded on the same
// stream, the fault cleared once the job advances again and the hang's
// loss in its ETTR; hostile reports refused with the stream left open.
#include <google/protobuf/util/time_util.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/executor.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/http_get.h"
#include "test/support/server/server_fixture.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using google::protobuf::util::TimeUtil;
using testing::TestAgent;
using testing::WaitFor;

constexpr uint32_t kRanks = 8;

class ProgressServiceTest : public testing::ClusterdServerTest {
 protected:
  void SetUp() override {
    StartServer([](ClusterdConfig& c) { c.node_grace = std::chrono::hours(1); });
    agent_ = std::make_unique<TestAgent>(channel_, "worker01", 1);
    ASSERT_TRUE(agent_->Connect());
  }
  void OnServerStarted() override {
    jobs_ = v1::JobService::NewStub(channel_);
    cluster_ = v1::ClusterService::NewStub(channel_);
  }

  // `ranks` ranks on worker01's chips (8 at most), or without chips, 1,024
  // on each of worker01..worker04.
  void CreateJob(const v1::ProgressPolicy& progress, uint32_t ranks = kRanks) {
    v1::CreateJobRequest req;
    v1::Job* job = req.mutable_job();
    job->set_id("train");
    job->set_kind(v1::JOB_KIND_TRAINING);
    job->mutable_policy()->mutable_hold_down()->set_seconds(0);
    *job->mutable_policy()->mutable_progress() = progress;
    for (uint32_t r = 0; r < ranks; ++r) {
      auto* p = job->add_placement();
      p->set_rank(r);
      if (ranks <= kRanks) {
        p->set_node("worker01");
        p->set_device_id(r);
      } else {
        p->set_node("worker0" + std::to_string(1 + r / 1024));
      }
    }
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    ASSERT_TRUE(jobs_->CreateJob(&ctx, req, &resp).ok());
  }

  void Attach() {
    stream_ = jobs_->Attach(&attach_ctx_);
    v1::AttachRequest hello;
    hello.mutable_hello()->set_job_id("train");
    hello.mutable_hello()->set_agent("progress-test");
    ASSERT_TRUE(stream_->Write(hello));
    v1::AttachResponse resp;
    ASSERT_TRUE(stream_->Read(&resp));
    ASSERT_TRUE(resp.has_attached());
  }

  // Sends one report and returns its ack; commands read meanwhile are kept.
  v1::ProgressAck Report(const v1::ProgressReport& report) {
    v1::AttachRequest req;
    *req.mutable_progress() = report;
    EXPECT_TRUE(stream_->Write(req));
    v1::AttachResponse resp;
    while (stream_->Read(&resp)) {
      if (resp.has_progress_ack()) return resp.progress_ack();
      if (resp.has_command()) commands_.push_back(resp.command());
    }
    ADD_FAILURE() << "the stream ended";
    return {};
  }
  // Every rank at `step` (taking `time(rank)` seconds a step).
  template <typename TimeOf>
  v1::ProgressAck Steps(uint64_t step, TimeOf time) {
    v1::ProgressReport r;
    for (uint32_t k = 0; k < kRanks; ++k) {
      auto* p = r.add_ranks();
      p->set_rank(k);
      p->set_step(step);
      *p->mutable_step_time() = TimeUtil::MillisecondsToDuration(time(k));
    }
    return Report(r);
  }

  std::vector<v1::Fault> ProgressFaults(const std::string& code) {
    v1::ListFaultsRequest req;
    req.set_active_only(true);
    grpc::ClientContext ctx;
    v1::ListFaultsResponse resp;
    EXPECT_TRUE(cluster_->ListFaults(&ctx, req, &resp).ok());
    std::vector<v1::Fault> out;
    for (const auto& f : resp.faults()) {
      if (f.reporter() == "progress" && f.code() == code) out.push_back(f);
    }
    return out;
  }
  v1::Job GetJob() {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id("train");
    v1::GetJobResponse resp;
    EXPECT_TRUE(jobs_->GetJob(&ctx, req, &resp).ok());
    return resp.job();
  }

  std::unique_ptr<TestAgent> agent_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
  grpc::ClientContext attach_ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AttachRequest, v1::AttachResponse>> stream_;
  std::vector<v1::Command> commands_;
};

// The monitor's passes on a ManualExecutor over a FakeClock
// (ClusterdServer::SetTimers): a pass runs when the test moves the clock, and
// a 2 s hang timeout passes then, not in real seconds; the rest of ClusterD
// runs as usual.
class ProgressClockTest : public ProgressServiceTest {
 protected:
  void SetUp() override {
    timers_ = &executor_;
    ProgressServiceTest::SetUp();
  }

  FakeClock clock_;
  ManualExecutor executor_{&clock_};
};

TEST_F(ProgressClockTest, ASlowRankIsNamedOnItsChipAndInGetJob) {
  CreateJob({});
  Attach();
  uint64_t step = 0;
  for (int i = 0; i < 12; ++i) {
    step += 10;
    ASSERT_TRUE(Steps(step, [](uint32_t k) { return k == 5 ? 1400 : 1000; }).accepted());
  }
  executor_.Advance(std::chrono::seconds(1));  // the monitor's next pass
  ASSERT_TRUE(WaitFor([&] { return ProgressFaults("SLOW_RANK").size() == 1; }));
  const v1::Fault f = ProgressFaults("SLOW_RANK")[0];
  EXPECT_EQ(f.node(), "worker01");
  EXPECT_EQ(f.device_id(), 5u);
  EXPECT_EQ(f.level(), v1::FAULT_LEVEL_SUB_HEALTH);
  EXPECT_NE(f.message().find("rank 5 takes 1.400s per step, the job's median is 1.000s"), std::string::npos)
      << f.message();
  const v1::Job job = GetJob();
  ASSERT_EQ(job.progress().slow_ranks_size(), 1);
  EXPECT_EQ(job.progress().slow_ranks(0).rank(), 5u);
  EXPECT_EQ(job.progress().ranks_reporting(), kRanks);
  EXPECT_EQ(job.progress().step(), step);
  EXPECT_EQ(job.progress().state(), v1::PROGRESS_STATE_ADVANCING);
  EXPECT_TRUE(commands_.empty()) << "a slow rank starts no recovery";
  // The job's own series on /metrics (listed at the scrape, one per job).
  auto scraped = [&](const std::string& line) {
    return WaitFor([&] {
      const testing::HttpResult r = testing::HttpGet(server_->http_port(), "/metrics");
      return r.status == 200 && r.body.find("\n" + line + "\n") != std::string::npos;
    });
  };
  EXPECT_TRUE(scraped("clusterd_job_slow_ranks{job=\"train\"} 1"));
  EXPECT_TRUE(scraped("clusterd_job_step{job=\"train\"} " + std::to_string(step)));
  EXPECT_TRUE(scraped("clusterd_job_progress_state{job=\"train\",state=\"advancing\"} 1"));
  EXPECT_TRUE(scraped("clusterd_job_ettr_ratio{job=\"train\"} 1"));
  // Back in step: the fault clears.
  for (int i = 0; i < 6; ++i) {
    step += 10;
    ASSERT_TRUE(Steps(step, [](uint32_t) { return 1000; }).accepted());
  }
  executor_.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(WaitFor([&] { return ProgressFaults("SLOW_RANK").empty(); }));
}

TEST_F(ProgressClockTest, AHangRestartsTheProcessesAndClearsOnceTheJobAdvances) {
  v1::ProgressPolicy policy;
  policy.mutable_hang_timeout()->set_seconds(2);
  CreateJob(policy);
  Attach();
  ASSERT_TRUE(Steps(10, [](uint32_t) { return 1000; }).accepted());
  ASSERT_TRUE(Steps(20, [](uint32_t) { return 1000; }).accepted());
  // Then nothing: every rank stops at step 20, and 3 s of the clock pass.
  executor_.Advance(std::chrono::seconds(3));
  ASSERT_TRUE(WaitFor([&] { return !ProgressFaults("JOB_HANG").empty(); }));
  const auto hangs = ProgressFaults("JOB_HANG");
  ASSERT_EQ(hangs.size(), 1u) << "no rank to blame: one fault names the job";
  EXPECT_EQ(hangs[0].level(), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_NE(hangs[0].message().find("no rank advanced past step 20"), std::string::npos) << hangs[0].message();
  // The policy's recovery reaches the agent on this stream.
  v1::AttachResponse resp;
  while (commands_.empty() && stream_->Read(&resp)) {
    if (resp.has_command()) commands_.push_back(resp.command());
  }
  ASSERT_FALSE(commands_.empty());
  EXPECT_EQ(commands_[0].kind(), v1::JOB_COMMAND_RESTART_PROCESSES);
  v1::AttachRequest ack;
  ack.mutable_ack()->set_command_id(commands_[0].id());
  ack.mutable_ack()->set_success(true);
  ASSERT_TRUE(stream_->Write(ack));
  // The restarted job advances (from its checkpoint): JOB_HANG clears and
  // the time it lost is the hang's.
  ASSERT_TRUE(Steps(10, [](uint32_t) { return 1000; }).accepted());
  ASSERT_TRUE(Steps(20, [](uint32_t) { return 1000; }).accepted());
  executor_.Advance(std::chrono::seconds(1));  // the monitor's next pass
  EXPECT_TRUE(WaitFor([&] { return ProgressFaults("JOB_HANG").empty(); }));
  const v1::Job job = GetJob();
  ASSERT_GE(job.progress().lost_by_cause_size(), 1);
  EXPECT_EQ(job.progress().lost_by_cause(0).cause(), "JOB_HANG");
  EXPECT_LT(job.progress().ettr(), 1.0);
  // The stored snapshot (ListJobs answers it) followed the hang.
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, {}, &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_TRUE(list.jobs(0).has_progress());
  // Watch replays each stored snapshot as a JOB_PROGRESS event: the progress
  // alone, the job named; the hang among them.
  grpc::ClientContext wctx;
  wctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::WatchRequest wreq;
  wreq.set_from_revision(1);
  wreq.add_types(v1::EVENT_TYPE_JOB_PROGRESS);
  auto watch = cluster_->Watch(&wctx, wreq);
  bool saw_hung = false;
  v1::WatchResponse wresp;
  while (!saw_hung && watch->Read(&wresp)) {
    for (const auto& ev : wresp.events()) {
      ASSERT_EQ(ev.type(), v1::EVENT_TYPE_JOB_PROGRESS);
      ASSERT_EQ(ev.job_ids_size(), 1);
      EXPECT_EQ(ev.job_ids(0), "train");
      EXPECT_FALSE(ev.has_job()) << "the progress alone, not the job";
      saw_hung = saw_hung || ev.progress().state() == v1::PROGRESS_STATE_HUNG;
    }
  }
  EXPECT_TRUE(saw_hung);
  wctx.TryCancel();
}

// Item 1 of the reliability probe, end to end: ranks 0-7 on worker01, 8-15
// on worker02, each node's agent reporting its own ranks on its stream. The
// job stops with worker02's ranks at step 20 while worker01's agent claims
// 21 for its own: one JOB_HANG that names the job, none on worker02 (before,
// JOB_HANG went to each of worker02's ranks as "stopped first").
TEST_F(ProgressClockTest, ANodeClaimingToBeAheadPutsNoHangOnTheOtherNode) {
  v1::CreateJobRequest req;
  v1::Job* job = req.mutable_job();
  job->set_id("train");
  job->set_kind(v1::JOB_KIND_TRAINING);
  job->mutable_policy()->mutable_progress()->mutable_hang_timeout()->set_seconds(2);
  for (uint32_t r = 0; r < 16; ++r) {
    auto* p = job->add_placement();
    p->set_rank(r);
    p->set_node(r < 8 ? "worker01" : "worker02");
    p->set_device_id(r % 8);
  }
  grpc::ClientContext ctx;
  v1::CreateJobResponse created;
  ASSERT_TRUE(jobs_->CreateJob(&ctx, req, &created).ok());
  TestAgent b(channel_, "worker02", 1);
  ASSERT_TRUE(b.Connect());
  auto report = [](TestAgent& agent, uint32_t from, uint64_t step) {
    v1::ConnectRequest m;
    m.mutable_progress()->set_job_id("train");
    for (uint32_t k = from; k < from + 8; ++k) {
      auto* p = m.mutable_progress()->mutable_report()->add_ranks();
      p->set_rank(k);
      p->set_step(step);
    }
    return agent.Send(m);
  };
  for (uint64_t step : {10, 20}) {
    ASSERT_TRUE(report(*agent_, 0, step));
    ASSERT_TRUE(report(b, 8, step));
  }
  ASSERT_TRUE(report(*agent_, 0, 21));  // worker01's word about its own ranks
  // The five reports (sent, not acknowledged, on two streams) taken: then 3 s
  // of the clock pass.
  ASSERT_TRUE(WaitFor([&] {
    const testing::HttpResult r = testing::HttpGet(server_->http_port(), "/metrics");
    return r.status == 200 && testing::MetricValue(r.body, "clusterd_progress_reports_total") == 5;
  }));
  executor_.Advance(std::chrono::seconds(3));
  ASSERT_TRUE(WaitFor([&] { return !ProgressFaults("JOB_HANG").empty(); }));
  const auto hangs = ProgressFaults("JOB_HANG");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_NE(hangs[0].node(), "worker02") << hangs[0].message();
  EXPECT_NE(hangs[0].message().find("no rank advanced past step 21"), std::string::npos) << hangs[0].message();
  EXPECT_EQ(hangs[0].level(), v1::FAULT_LEVEL_RESTART_BUSINESS);
}

// On the monitor's clock: the second a flood is refused for ends when the
// test moves the clock, not after a real second.
TEST_F(ProgressClockTest, HostileReportsAreRefusedAndTheStreamStaysOpen) {
  constexpr uint32_t kBig = 4096;
  CreateJob({}, kBig);
  Attach();
  v1::ProgressReport r;
  r.add_ranks()->set_rank(1'000'000'000);
  v1::ProgressAck ack = Report(r);
  EXPECT_FALSE(ack.accepted());
  EXPECT_NE(ack.error().find("not a rank of the job"), std::string::npos) << ack.error();
  r.Clear();
  for (uint32_t k = 0; k <= kBig; ++k) r.add_ranks()->set_rank(k);
  ack = Report(r);
  EXPECT_FALSE(ack.accepted());
  EXPECT_NE(ack.error().find("at most 4096"), std::string::npos) << ack.error();
  r.Clear();
  auto* twice = r.add_ranks();
  twice->set_rank(7);
  *r.add_ranks() = *twice;
  ack = Report(r);
  EXPECT_FALSE(ack.accepted());
  EXPECT_NE(ack.error().find("reported twice"), std::string::npos) << ack.error();
  EXPECT_FALSE(GetJob().has_progress()) << "nothing of a refused report is taken";
  // A flood: a job reports at most max(2 x its ranks, 4096) rank entries a
  // second (8,192 here: two reports of every rank); more is refused for the
  // rest of the second, not queued.
  r.Clear();
  for (uint32_t k = 0; k < kBig; ++k) r.add_ranks()->set_rank(k);
  bool refused = false;
  for (int i = 0; i < 1000 && !refused; ++i) {
    ack = Report(r);
    refused = !ack.accepted();
  }
  EXPECT_TRUE(refused);
  EXPECT_NE(ack.error().find("rank entries this second"), std::string::npos) << ack.error();
  // Still refused within the second; the next second, on the same stream,
  // a valid report is taken.
  EXPECT_FALSE(Report(r).accepted());
  executor_.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(Report(r).accepted());
  EXPECT_EQ(GetJob().progress().ranks_reporting(), kBig);
  EXPECT_TRUE(ProgressFaults("JOB_HANG").empty());
}

}  // namespace
}  // namespace clusterd
