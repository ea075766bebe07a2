// MindCluster's job.Job and config.Config services on an in-process ClusterD
// (port 0), through real gRPC stubs of the reference's protos, as
// faultdiag-online (Register, SubscribeJobSummarySignalList) and MindIE
// (config.Config) use them: every job's summary at subscription then each
// change in order (created, placed, failed, deleted), no history on the
// single-signal stream, rank tables sent again when the placement changes,
// and hostile clients: unknown roles and unregistered ids refused with
// nothing changed, a flood refused at the per-client rate, a subscriber that
// never reads let go, a deleted job's rank-table stream ended.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterd/v1/job.grpc.pb.h"
#include "mindcluster/config.grpc.pb.h"
#include "mindcluster/job.grpc.pb.h"
#include "common/executor.h"
#include "test/support/grpc/stream_reader.h"
#include "test/support/http_get.h"
#include "test/support/server/server_fixture.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using nlohmann::json;
using testing::StreamReader;
using testing::WaitFor;

class MindClusterJobsTest : public testing::ClusterdServerTest {
 protected:
  void SetUp() override { StartServer(); }
  void OnServerStarted() override {
    job_ = job::Job::NewStub(channel_);
    config_ = config::Config::NewStub(channel_);
    jobs_ = v1::JobService::NewStub(channel_);
  }

  static v1::Job MakeJob(const std::string& id, int ranks, v1::JobState state = v1::JOB_STATE_RUNNING,
                         const std::string& node_prefix = "worker") {
    v1::Job job;
    job.set_id(id);
    job.set_kind(v1::JOB_KIND_TRAINING);
    job.set_state(state);
    for (int r = 0; r < ranks; ++r) {
      auto* p = job.add_placement();
      p->set_rank(static_cast<uint32_t>(r));
      p->set_node(node_prefix + std::to_string(r / 8));
      p->set_device_id(static_cast<uint32_t>(r % 8));
    }
    (*job.mutable_labels())["k8s.namespace"] = "default";
    (*job.mutable_labels())["k8s.name"] = "train-" + id;
    return job;
  }
  void Create(const v1::Job& job) {
    v1::CreateJobRequest req;
    *req.mutable_job() = job;
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    grpc::Status st = jobs_->CreateJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  void Update(const v1::Job& job) {
    v1::UpdateJobRequest req;
    *req.mutable_job() = job;
    grpc::ClientContext ctx;
    v1::UpdateJobResponse resp;
    grpc::Status st = jobs_->UpdateJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  void Delete(const std::string& id) {
    v1::DeleteJobRequest req;
    req.set_id(id);
    grpc::ClientContext ctx;
    v1::DeleteJobResponse resp;
    grpc::Status st = jobs_->DeleteJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  // Register, retried while the per-client rate refuses it (a test makes
  // more calls than one second's burst).
  grpc::Status Register(const std::string& role, job::Status* out) {
    grpc::Status st;
    WaitFor([&] {
      job::ClientInfo req;
      req.set_role(role);
      req.set_clientid("chosen-by-the-client");
      grpc::ClientContext ctx;
      st = job_->Register(&ctx, req, out);
      if (st.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) return true;
      OnRateLimited();
      return false;
    });
    return st;
  }
  // A call was refused by a rate: MindClusterJobsClockTest moves the clock a
  // second; here real time passes while the caller waits.
  virtual void OnRateLimited() {}
  std::string RegisterOk(const std::string& role = "FdAgent") {
    job::Status s;
    grpc::Status st = Register(role, &s);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(s.code(), 0) << s.info();
    EXPECT_FALSE(s.clientid().empty());
    EXPECT_NE(s.clientid(), "chosen-by-the-client");
    return s.clientid();
  }
  double Metric(const std::string& name) {
    auto res = testing::HttpGet(server_->http_port(), "/metrics");
    return res.status == 200 ? testing::MetricValue(res.body, name) : -1;
  }
  std::unique_ptr<StreamReader<job::JobSummarySignalList>> SubscribeList(const std::string& id,
                                                                         const std::string& role = "FdAgent") {
    return std::make_unique<StreamReader<job::JobSummarySignalList>>([&](grpc::ClientContext* ctx) {
      job::ClientInfo info;
      info.set_role(role);
      info.set_clientid(id);
      return job_->SubscribeJobSummarySignalList(ctx, info);
    });
  }
  std::unique_ptr<StreamReader<config::RankTableStream>> SubscribeRankTable(const std::string& job) {
    return std::make_unique<StreamReader<config::RankTableStream>>([&](grpc::ClientContext* ctx) {
      config::ClientInfo info;
      info.set_jobid(job);
      info.set_role("mindie-controller");
      return config_->SubscribeRankTable(ctx, info);
    });
  }
  grpc::Status RegisterConfig(const std::string& job, config::Status* out = nullptr) {
    config::ClientInfo req;
    req.set_jobid(job);
    req.set_role("mindie-controller");
    grpc::ClientContext ctx;
    config::Status ignored;
    return config_->Register(&ctx, req, out ? out : &ignored);
  }

  std::unique_ptr<job::Job::Stub> job_;
  std::unique_ptr<config::Config::Stub> config_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

// The summaries of a list stream's messages, flattened, from message `from`.
std::vector<job::JobSummarySignal> Summaries(const std::vector<job::JobSummarySignalList>& msgs, size_t from = 0) {
  std::vector<job::JobSummarySignal> out;
  for (size_t i = from; i < msgs.size(); ++i) {
    for (const auto& s : msgs[i].jobsummarysignals()) out.push_back(s);
  }
  return out;
}

TEST_F(MindClusterJobsTest, TheListGivesEveryJobAtOnceThenEachChangeInOrder) {
  Create(MakeJob("job-a-0001", 16));
  Create(MakeJob("job-p-0001", 1, v1::JOB_STATE_PENDING));
  ASSERT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_summaries") == 2; }));
  const std::string id = RegisterOk();
  EXPECT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_clients") == 1; }));
  auto sub = SubscribeList(id);
  auto msgs = sub->WaitMessages(1);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].jobtotalnum(), 2);
  EXPECT_FALSE(msgs[0].reporttime().empty());
  auto history = Summaries(msgs);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].jobid(), "job-a-0001");
  EXPECT_EQ(history[0].jobstatus(), "running");
  EXPECT_EQ(history[0].operator_(), "add");
  EXPECT_EQ(history[0].jobname(), "train-job-a-0001");
  EXPECT_EQ(history[0].namespace_(), "default");
  auto hccl = json::parse(history[0].hccljson());
  EXPECT_EQ(hccl["status"], "complete");
  ASSERT_EQ(hccl["server_list"].size(), 2u);
  EXPECT_EQ(hccl["server_list"][1]["server_name"], "worker1");
  EXPECT_EQ(hccl["server_list"][1]["device"][7]["rank_id"], "15");
  EXPECT_EQ(history[1].jobid(), "job-p-0001");
  EXPECT_EQ(history[1].jobstatus(), "pending");
  EXPECT_EQ(history[1].hccljson(), R"({"status":"initializing"})");
  EXPECT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_subscribers") == 1; }));

  // Then each change, one summary a message.
  v1::Job b = MakeJob("job-b-0001", 1, v1::JOB_STATE_PENDING);
  Create(b);
  b = MakeJob("job-b-0001", 8);
  Update(b);
  b.set_state(v1::JOB_STATE_FAILED);
  Update(b);
  Delete("job-b-0001");
  Delete("job-p-0001");
  msgs = sub->WaitMessages(6);
  ASSERT_EQ(msgs.size(), 6u);
  auto live = Summaries(msgs, 1);
  ASSERT_EQ(live.size(), 5u);
  for (const auto& m : std::vector<job::JobSummarySignalList>(msgs.begin() + 1, msgs.end())) {
    EXPECT_EQ(m.jobtotalnum(), 1);
  }
  EXPECT_EQ(live[0].jobid() + " " + live[0].jobstatus() + " " + live[0].operator_(), "job-b-0001 pending add");
  EXPECT_EQ(live[1].jobid() + " " + live[1].jobstatus() + " " + live[1].operator_(), "job-b-0001 running add");
  EXPECT_EQ(json::parse(live[1].hccljson())["server_list"][0]["device"].size(), 8u);
  EXPECT_EQ(live[2].jobid() + " " + live[2].jobstatus() + " " + live[2].operator_(), "job-b-0001 failed add");
  EXPECT_FALSE(live[2].deletetime().empty());
  EXPECT_EQ(live[3].jobid() + " " + live[3].jobstatus() + " " + live[3].operator_(), "job-b-0001 failed delete");
  EXPECT_EQ(live[4].jobid() + " " + live[4].jobstatus() + " " + live[4].operator_(), "job-p-0001 failed delete");
  std::set<std::string> uuids;
  for (const auto& s : live) uuids.insert(s.uuid());
  EXPECT_EQ(uuids.size(), live.size());

  // A new client's history: the live job, and the deleted ones as last told.
  const std::string id2 = RegisterOk();
  auto sub2 = SubscribeList(id2);
  auto again = Summaries(sub2->WaitMessages(1));
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[0].jobid(), "job-a-0001");
  EXPECT_EQ(again[1].operator_(), "delete");
  EXPECT_EQ(again[2].operator_(), "delete");
}

TEST_F(MindClusterJobsTest, TheSingleSignalStreamHasNoHistory) {
  Create(MakeJob("job-a-0002", 2));
  // The feed has taken the job (else its summary could reach the stream
  // below as a change).
  ASSERT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_summaries") == 1; }));
  const std::string id = RegisterOk("CCAgent");
  StreamReader<job::JobSummarySignal> sub([&](grpc::ClientContext* ctx) {
    job::ClientInfo info;
    info.set_role("CCAgent");
    info.set_clientid(id);
    return job_->SubscribeJobSummarySignal(ctx, info);
  });
  ASSERT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_subscribers") == 1; }));
  Create(MakeJob("job-c-0002", 1));
  auto msgs = sub.WaitMessages(1);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].jobid(), "job-c-0002");
  EXPECT_EQ(msgs[0].jobstatus(), "running");
}

TEST_F(MindClusterJobsTest, BadInputIsRefusedAndChangesNothing) {
  job::Status s;
  grpc::Status st = Register("Mallory", &s);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("FdAgent"), std::string::npos) << st.error_message();
  st = Register(std::string(100000, 'x'), &s);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Metric("clusterd_mindcluster_job_clients"), 0);

  // Unregistered, empty, or another role's clientId.
  EXPECT_EQ(SubscribeList("no-such-client")->WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(SubscribeList("")->WaitEnd().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string id = RegisterOk();
  EXPECT_EQ(SubscribeList(id, "CCAgent")->WaitEnd().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(SubscribeList(id, "Mallory")->WaitEnd().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Metric("clusterd_mindcluster_job_subscribers"), 0);

  // A stream replaces the client's older one; once it ends the client is
  // gone (Register again, as the reference's clients do).
  auto first = SubscribeList(id);
  ASSERT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_subscribers") == 1; }));
  auto second = SubscribeList(id);
  EXPECT_EQ(first->WaitEnd().error_code(), grpc::StatusCode::ABORTED);
  second.reset();
  EXPECT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_clients") == 0; }));
  EXPECT_EQ(SubscribeList(id)->WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // config.Config: malformed and unregistered jobs.
  EXPECT_EQ(RegisterConfig("").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(RegisterConfig("job with spaces").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(RegisterConfig(std::string(129, 'j')).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Metric("clusterd_mindcluster_config_registrations"), 0);
  EXPECT_EQ(SubscribeRankTable("job-never-registered")->WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(MindClusterJobsTest, AFloodIsRefusedAtTheClientsRate) {
  int ok = 0, refused = 0;
  for (int i = 0; i < 40; ++i) {
    job::ClientInfo req;
    req.set_role("FdAgent");
    grpc::ClientContext ctx;
    job::Status resp;
    grpc::Status st = job_->Register(&ctx, req, &resp);
    if (st.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(Metric("clusterd_mindcluster_job_refused_total{limit=\"client_rate\"}"), 0);
  EXPECT_EQ(Metric("clusterd_mindcluster_job_clients"), ok);  // a refused call registered nothing
}

TEST_F(MindClusterJobsTest, ASubscriberThatNeverReadsIsLetGo) {
  const std::string id = RegisterOk();
  // Opened, never read: what the server writes fills the stream's window
  // (64 KiB: the client grows it no further), then its queue.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = job::Job::NewStub(channel);
  grpc::ClientContext ctx;
  job::ClientInfo info;
  info.set_role("FdAgent");
  info.set_clientid(id);
  auto reader = stub->SubscribeJobSummarySignalList(&ctx, info);
  ASSERT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_subscribers") == 1; }));
  // Jobs of 1,024 chips: about 60 KB of summary each.
  for (int i = 0; i < 40 && Metric("clusterd_mindcluster_job_subscribers") == 1; ++i) {
    Create(MakeJob("big-" + std::to_string(i), 1024, v1::JOB_STATE_RUNNING, "n" + std::to_string(i) + "-"));
  }
  EXPECT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_subscribers") == 0; }));
  EXPECT_EQ(Metric("clusterd_mindcluster_job_refused_total{limit=\"slow_reader\"}"), 1);
  ctx.TryCancel();
  job::JobSummarySignalList msg;
  while (reader->Read(&msg)) {
  }
  grpc::Status st = reader->Finish();
  EXPECT_FALSE(st.ok());
}

TEST_F(MindClusterJobsTest, RankTablesFollowThePlacementAndEndWithTheJob) {
  Create(MakeJob("job-r-0001", 1, v1::JOB_STATE_PENDING));
  config::Status s;
  grpc::Status st = RegisterConfig("job-r-0001", &s);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(s.code(), 0);
  auto sub = SubscribeRankTable("job-r-0001");
  ASSERT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_config_subscribers") == 1; }));
  EXPECT_TRUE(sub->Messages().empty());  // pending: no rank table yet

  Update(MakeJob("job-r-0001", 4));
  auto msgs = sub->WaitMessages(1);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].jobid(), "job-r-0001");
  auto table = json::parse(msgs[0].ranktable());
  EXPECT_EQ(table["server_list"][0]["device"].size(), 4u);

  v1::Job moved = MakeJob("job-r-0001", 4, v1::JOB_STATE_RUNNING, "spare");
  Update(moved);
  msgs = sub->WaitMessages(2);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(json::parse(msgs[1].ranktable())["server_list"][0]["server_name"], "spare0");
  moved.set_state(v1::JOB_STATE_RECOVERING);  // the same placement: nothing sent
  Update(moved);

  // A second subscriber of another registration gets the table at once.
  ASSERT_TRUE(RegisterConfig("job-r-0001").ok());  // replaces the first registration
  EXPECT_EQ(sub->WaitEnd().error_code(), grpc::StatusCode::ABORTED);
  auto sub2 = SubscribeRankTable("job-r-0001");
  ASSERT_EQ(sub2->WaitMessages(1).size(), 1u);
  EXPECT_EQ(sub2->Messages()[0].ranktable(), msgs[1].ranktable());

  Delete("job-r-0001");
  EXPECT_EQ(sub2->WaitEnd().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(sub2->Messages().size(), 1u);
  EXPECT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_config_registrations") == 0; }));
  // A job deleted before its subscription: ended at once.
  ASSERT_TRUE(RegisterConfig("job-r-0001").ok());
  EXPECT_EQ(SubscribeRankTable("job-r-0001")->WaitEnd().error_code(), grpc::StatusCode::NOT_FOUND);
}

// The server's timers (ClusterdServer::SetTimers) on a ManualExecutor over a
// FakeClock: the job.Job service's call rates read that clock, so a call a
// rate refused is let through a second later on it, not in real time.
class MindClusterJobsClockTest : public MindClusterJobsTest {
 protected:
  void SetUp() override {
    timers_ = &executor_;
    MindClusterJobsTest::SetUp();
  }
  void TearDown() override {
    MindClusterJobsTest::TearDown();
    timers_ = nullptr;
  }
  void OnRateLimited() override { clock_.Advance(std::chrono::seconds(1)); }

  FakeClock clock_;
  ManualExecutor executor_{&clock_};
};

TEST_F(MindClusterJobsClockTest, TwentyStreamsPerRole) {
  // More calls than the per-client rate's burst: each subscription is
  // opened again while the rate refuses it (its counter says so).
  const std::string kRate = "clusterd_mindcluster_job_refused_total{limit=\"client_rate\"}";
  const std::string kStreams = "clusterd_mindcluster_job_subscribers";
  auto subscribe = [&](const std::string& id, const std::string& role, double streams) {
    for (;;) {
      const double refused = Metric(kRate);
      auto sub = SubscribeList(id, role);
      EXPECT_TRUE(WaitFor([&] { return Metric(kStreams) == streams || Metric(kRate) > refused; }));
      if (Metric(kStreams) == streams || Metric(kRate) == refused) return sub;
      OnRateLimited();
    }
  };
  std::vector<std::unique_ptr<StreamReader<job::JobSummarySignalList>>> subs;
  for (int i = 0; i < 20; ++i) subs.push_back(subscribe(RegisterOk("DefaultUser1"), "DefaultUser1", i + 1));
  const std::string id = RegisterOk("DefaultUser1");
  grpc::Status st;
  WaitFor([&] {
    st = SubscribeList(id, "DefaultUser1")->WaitEnd();
    if (st.error_message().find("per second") == std::string::npos) return true;
    OnRateLimited();
    return false;
  });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("the most per role"), std::string::npos) << st.error_message();
  EXPECT_EQ(Metric("clusterd_mindcluster_job_refused_total{limit=\"per_role\"}"), 1);
  EXPECT_EQ(Metric(kStreams), 20);
  // Another role is not held back, and the refused client may subscribe
  // once a stream of its role ends.
  auto other = subscribe(RegisterOk("DefaultUser2"), "DefaultUser2", 21);
  EXPECT_EQ(Metric(kStreams), 21);
  subs.pop_back();
  ASSERT_TRUE(WaitFor([&] { return Metric(kStreams) == 20; }));
  auto late = subscribe(id, "DefaultUser1", 21);
  EXPECT_EQ(Metric(kStreams), 21);
}

TEST_F(MindClusterJobsTest, AfterARestartTheHistoryComesFromTheStoredJobs) {
  Create(MakeJob("job-s-0001", 3));
  Create(MakeJob("job-s-0002", 1));
  Delete("job-s-0002");
  StartServer();  // the same data directory
  const std::string id = RegisterOk();
  ASSERT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_summaries") == 1; }));
  auto history = Summaries(SubscribeList(id)->WaitMessages(1));
  ASSERT_EQ(history.size(), 1u);  // a job deleted before the restart is not told again
  EXPECT_EQ(history[0].jobid(), "job-s-0001");
  EXPECT_EQ(history[0].jobstatus(), "running");
  EXPECT_EQ(json::parse(history[0].hccljson())["server_list"][0]["device"].size(), 3u);
}

TEST_F(MindClusterJobsTest, AJobAboveFortyThousandChipsIsToldWithoutHcclJson) {
  Create(MakeJob("job-huge-01", 40001));
  ASSERT_TRUE(RegisterConfig("job-huge-01").ok());
  auto tables = SubscribeRankTable("job-huge-01");
  ASSERT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_job_summaries") == 1; }));
  auto history = Summaries(SubscribeList(RegisterOk())->WaitMessages(1));
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].jobstatus(), "running");
  EXPECT_EQ(history[0].hccljson(), "");
  // The rank table itself (about 2 MB) still goes to config.Config.
  auto msgs = tables->WaitMessages(1);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(json::parse(msgs[0].ranktable())["server_list"].size(), 5001u);
}

}  // namespace
}  // namespace clusterd
