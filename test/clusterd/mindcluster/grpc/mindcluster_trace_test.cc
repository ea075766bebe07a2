// MindCluster's TrainingDataTrace service on an in-process ClusterD (port 0),
// through real gRPC stubs of the reference's proto, as faultdiag-online
// (Modify) and TaskD's manager (Subscribe) use it: Modify then Get,
// Subscribe sees the current switch and each change, bad input gets a clear
// error and changes nothing, the limits refuse with their errors, and the
// switches survive a restart of ClusterD.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/v1/job.grpc.pb.h"
#include "mindcluster/profiling.grpc.pb.h"
#include "test/support/grpc/stream_reader.h"
#include "test/support/http_get.h"
#include "test/support/server/server_fixture.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using testing::WaitFor;

constexpr char kJobId[] = "7f3e0c1a-ascendjob-uid";
constexpr char kJobNsName[] = "default/test-pytorch";

::ProfilingSwitch Switch(const std::string& comm, const std::string& rest) {
  ::ProfilingSwitch s;
  s.set_communicationoperator(comm);
  s.set_step(rest);
  s.set_savecheckpoint(rest);
  s.set_fp(rest);
  s.set_dataloader(rest);
  return s;
}

bool Same(const ::ProfilingSwitch& a, const ::ProfilingSwitch& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

// TaskD's manager: SubscribeDataTraceSwitch for its job.
class SwitchReader : public testing::StreamReader<::DataStatusRes> {
 public:
  SwitchReader(::TrainingDataTrace::Stub* stub, const std::string& job)
      : StreamReader([&](grpc::ClientContext* ctx) {
          ::ProfilingClientInfo info;
          info.set_jobid(job);
          info.set_role("taskd");
          return stub->SubscribeDataTraceSwitch(ctx, info);
        }) {}
};

class MindClusterTraceTest : public testing::ClusterdServerTest {
 protected:
  void SetUp() override {
    StartServer();
    CreateJob(kJobId, "default", "test-pytorch");
  }
  void OnServerStarted() override {
    trace_ = ::TrainingDataTrace::NewStub(channel_);
    jobs_ = v1::JobService::NewStub(channel_);
  }

  // A job as discovery makes one of an AscendJob: its namespace and name in
  // the labels k8s.namespace and k8s.name.
  void CreateJob(const std::string& id, const std::string& ns, const std::string& name) {
    v1::CreateJobRequest req;
    v1::Job* job = req.mutable_job();
    job->set_id(id);
    job->set_kind(v1::JOB_KIND_TRAINING);
    auto* p = job->add_placement();
    p->set_rank(0);
    p->set_node("worker01");
    p->set_device_id(0);
    (*job->mutable_labels())["k8s.namespace"] = ns;
    (*job->mutable_labels())["k8s.name"] = name;
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    grpc::Status st = jobs_->CreateJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  grpc::Status Modify(const std::string& job, const ::ProfilingSwitch* s, ::DataTypeRes* resp = nullptr) {
    ::DataTypeReq req;
    req.set_jobnsname(job);
    if (s != nullptr) *req.mutable_profilingswitch() = *s;
    grpc::ClientContext ctx;
    ::DataTypeRes ignored;
    return trace_->ModifyTrainingDataTraceSwitch(&ctx, req, resp != nullptr ? resp : &ignored);
  }
  ::DataStatusRes Get(const std::string& job) {
    ::DataStatusReq req;
    req.set_jobnsname(job);
    grpc::ClientContext ctx;
    ::DataStatusRes resp;
    grpc::Status st = trace_->GetTrainingDataTraceSwitch(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }
  double Subscribers() {
    auto res = testing::HttpGet(server_->http_port(), "/metrics");
    return res.status == 200 ? testing::MetricValue(res.body, "clusterd_mindcluster_datatrace_subscribers") : -1;
  }

  std::unique_ptr<::TrainingDataTrace::Stub> trace_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(MindClusterTraceTest, ModifyThenGetAndASubscriberSeesEachChange) {
  SwitchReader taskd(trace_.get(), kJobId);
  ASSERT_TRUE(WaitFor([&] { return Subscribers() == 1; }));
  EXPECT_EQ(Get(kJobNsName).code(), 404);  // nothing set yet

  const ::ProfilingSwitch all_on = Switch("on", "on");
  ::DataTypeRes resp;
  grpc::Status st = Modify(kJobNsName, &all_on, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.code(), 200);
  ::DataStatusRes got = Get(kJobNsName);
  EXPECT_EQ(got.code(), 200) << got.message();
  EXPECT_TRUE(Same(got.profilingswitch(), all_on));

  auto first = taskd.WaitMessages(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].code(), 200);
  EXPECT_TRUE(Same(first[0].profilingswitch(), all_on));

  // faultdiag-online's StopHeavyProfiling: the communication operators off.
  const ::ProfilingSwitch light = Switch("off", "on");
  ASSERT_TRUE(Modify(kJobNsName, &light).ok());
  auto second = taskd.WaitMessages(2);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_TRUE(Same(second[1].profilingswitch(), light));

  // A TaskD that subscribes now is told the current switch at once.
  SwitchReader late(trace_.get(), kJobId);
  auto now = late.WaitMessages(1);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_TRUE(Same(now[0].profilingswitch(), light));
}

TEST_F(MindClusterTraceTest, BadInputGetsAClearErrorAndChangesNothing) {
  const ::ProfilingSwitch all_on = Switch("on", "on");
  ASSERT_TRUE(Modify(kJobNsName, &all_on).ok());
  SwitchReader taskd(trace_.get(), kJobId);
  ASSERT_EQ(taskd.WaitMessages(1).size(), 1u);

  grpc::Status st = Modify("test-pytorch", &all_on);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("jobNsName"), std::string::npos) << st.error_message();
  ::ProfilingSwitch bad = Switch("off", "on");
  bad.set_step("enable");
  st = Modify(kJobNsName, &bad);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("profilingSwitch.Step"), std::string::npos) << st.error_message();
  st = Modify(kJobNsName, nullptr);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  st = Modify("default/no-such-job", &all_on);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("default/no-such-job"), std::string::npos) << st.error_message();
  st = Modify(std::string("default/") + std::string(300, 'x'), &all_on);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Nothing changed, nobody was told.
  ::DataStatusRes got = Get(kJobNsName);
  EXPECT_EQ(got.code(), 200);
  EXPECT_TRUE(Same(got.profilingswitch(), all_on));
  EXPECT_EQ(Get("no-slash").code(), 300);
  EXPECT_EQ(Get("default/no-such-job").code(), 404);
  // A change after the refusals is the subscriber's second message: none came between.
  const ::ProfilingSwitch off = Switch("off", "off");
  ASSERT_TRUE(Modify(kJobNsName, &off).ok());
  auto msgs = taskd.WaitMessages(2);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_TRUE(Same(msgs[1].profilingswitch(), off));

  // An unknown job's subscription ends at once, saying so.
  SwitchReader stranger(trace_.get(), "no-such-uid");
  grpc::Status end = stranger.WaitEnd();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(end.error_message().find("no-such-uid"), std::string::npos) << end.error_message();
}

TEST_F(MindClusterTraceTest, SubscriptionsPerJobAreLimited) {
  std::vector<std::unique_ptr<SwitchReader>> readers;
  for (int i = 0; i < 8; ++i) readers.push_back(std::make_unique<SwitchReader>(trace_.get(), kJobId));
  ASSERT_TRUE(WaitFor([&] { return Subscribers() == 8; }));
  SwitchReader ninth(trace_.get(), kJobId);
  grpc::Status end = ninth.WaitEnd();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(end.error_message().find("datatrace_max_subscribers_per_job"), std::string::npos) << end.error_message();
  auto res = testing::HttpGet(server_->http_port(), "/metrics");
  EXPECT_NE(res.body.find("clusterd_mindcluster_datatrace_refused_total{limit=\"max_subscribers_per_job\"} 1"),
            std::string::npos);
  // A subscriber that goes gives its slot back.
  readers.pop_back();
  ASSERT_TRUE(WaitFor([&] { return Subscribers() == 7; }));
  SwitchReader again(trace_.get(), kJobId);
  ASSERT_TRUE(WaitFor([&] { return Subscribers() == 8; }));
}

TEST_F(MindClusterTraceTest, MaxJobsRefusesANewJobsSwitchAndChangesNothing) {
  StartServer([](ClusterdConfig& c) { c.datatrace_max_jobs = 1; });
  CreateJob("second-uid", "team-1", "second");
  const ::ProfilingSwitch all_on = Switch("on", "on");
  ASSERT_TRUE(Modify(kJobNsName, &all_on).ok());
  grpc::Status st = Modify("team-1/second", &all_on);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("datatrace_max_jobs"), std::string::npos) << st.error_message();
  EXPECT_EQ(Get("team-1/second").code(), 404);
  // The job already kept may still change.
  const ::ProfilingSwitch off = Switch("off", "off");
  ASSERT_TRUE(Modify(kJobNsName, &off).ok());
  EXPECT_TRUE(Same(Get(kJobNsName).profilingswitch(), off));
}

TEST_F(MindClusterTraceTest, TheSwitchSurvivesARestart) {
  const ::ProfilingSwitch light = Switch("off", "on");
  ASSERT_TRUE(Modify(kJobNsName, &light).ok());
  StartServer();  // the same data directory
  ::DataStatusRes got = Get(kJobNsName);
  EXPECT_EQ(got.code(), 200) << got.message();
  EXPECT_TRUE(Same(got.profilingswitch(), light));
  SwitchReader taskd(trace_.get(), kJobId);
  auto msgs = taskd.WaitMessages(1);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_TRUE(Same(msgs[0].profilingswitch(), light));
}

}  // namespace
}  // namespace clusterd
