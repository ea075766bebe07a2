// TaskD's Recover service (clusterd/mindcluster/grpc/recover_service.h) alone
// on a real gRPC server, its work on a ManualExecutor (common/executor.h)
// over a FakeClock: the keep-alive every 5 s and the sweep of a job idle past
// its TTL happen when the test moves the clock, not after real seconds.
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/edge/auth.h"
#include "clusterd/mindcluster/grpc/recover_service.h"
#include "clusterd/mindcluster/taskd.h"
#include "clusterd/recovery/actuators/actuator.h"
#include "common/executor.h"
#include "mindcluster/recover.grpc.pb.h"
#include "test/support/grpc/loopback_server.h"
#include "test/support/wait.h"
#include "test/support/state/writer_on_memory.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;
using namespace std::chrono_literals;

constexpr char kRecoverTimersJob[] = "uid-timers";

class RecoverTimersActuator final : public Actuator {
 public:
  void Execute(ActionRequest, Done) override {}
  void Stop() override {}
  std::string_view kind() const override { return "test"; }
};

::ClientInfo RecoverTimersClient() {
  ::ClientInfo c;
  c.set_jobid(kRecoverTimersJob);
  c.set_role("taskd");
  return c;
}

class RecoverTimersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    writer_.Open(&SystemClock::Instance(), EngineOptions(), &metrics_);
    writer_.engine()->Start();
    coordinator_ =
        std::make_unique<Coordinator>(&agents_, &actuator_, &SystemClock::Instance(), CoordinatorOptions{}, &metrics_);
    auth_ = MakeClaimedActorAuthenticator();
    // An opted-in training job of two ranks.
    v1::Job job;
    job.set_id(kRecoverTimersJob);
    job.set_kind(v1::JOB_KIND_TRAINING);
    (*job.mutable_labels())[std::string(mc::kLabelProcessRecoverEnable)] = "on";
    (*job.mutable_labels())[std::string(mc::kLabelRecoverStrategy)] = "retry,recover";
    for (uint32_t r = 0; r < 2; ++r) {
      auto* p = job.add_placement();
      p->set_rank(r);
      p->set_node("worker01");
      p->set_device_id(r);
    }
    writer_.Write([job](ClusterState& s, Mutation* m) { return s.ApplyCreateJob(job, m).status(); });
    ASSERT_TRUE(testing::WaitFor([&] {
      return writer_.state()->Read([](const StateView& v) { return v.jobs().count(kRecoverTimersJob) == 1; });
    }));
    RecoverServiceOptions options;
    options.executor = &executor_;  // keepalive_interval 5 s, idle_job_ttl 600 s: the defaults
    service_ = std::make_unique<RecoverServiceImpl>(writer_.state(), writer_.engine(), coordinator_.get(), &agents_,
                                                    auth_.get(), options, &metrics_);
    auto loopback = testing::StartLoopbackServer({service_.get()});
    server_ = std::move(loopback.server);
    ASSERT_TRUE(server_ != nullptr);
    stub_ = ::Recover::NewStub(loopback.channel);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 5s);
    service_.reset();
  }

  int32_t Call(grpc::Status (::Recover::Stub::*call)(grpc::ClientContext*, const ::ClientInfo&, ::Status*)) {
    grpc::ClientContext ctx;
    ::Status resp;
    const grpc::Status st = ((*stub_).*call)(&ctx, RecoverTimersClient(), &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.code();
  }

  FakeClock clock_;
  ManualExecutor executor_{&clock_};
  MetricsRegistry metrics_;
  testing::WriterOnMemory writer_;
  JobAgentHub agents_;
  RecoverTimersActuator actuator_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<RecoverServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<::Recover::Stub> stub_;
};

TEST_F(RecoverTimersTest, ASubscriberGetsAKeepAliveEveryIntervalOfTheClock) {
  ASSERT_EQ(Call(&::Recover::Stub::Init), mc::kRecoverOk);
  ASSERT_EQ(Call(&::Recover::Stub::Register), mc::kRecoverOk);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto stream = stub_->SubscribeProcessManageSignal(&ctx, RecoverTimersClient());
  // The subscription is taken on the executor: run what it posted.
  ASSERT_TRUE(testing::WaitFor([&] {
    executor_.RunReady();
    return service_->subscriber_count() == 1;
  }));
  for (int n = 1; n <= 2; ++n) {
    executor_.Advance(5s);
    ::ProcessManageSignal s;
    ASSERT_TRUE(stream->Read(&s));
    EXPECT_EQ(s.signaltype(), "keep-alive");
    EXPECT_EQ(s.jobid(), kRecoverTimersJob);
    EXPECT_EQ(s.uuid(), std::string(kRecoverTimersJob) + "/keep-alive/" + std::to_string(n));
  }
  ctx.TryCancel();
}

TEST_F(RecoverTimersTest, AJobWithoutASubscriptionIsForgottenOnceIdlePastItsTtl) {
  ASSERT_EQ(Call(&::Recover::Stub::Init), mc::kRecoverOk);
  ASSERT_EQ(service_->job_count(), 1u);
  executor_.Advance(595s);  // 119 sweeps, every one before the TTL
  EXPECT_EQ(service_->job_count(), 1u);
  executor_.Advance(5s);  // the sweep at 600 s
  EXPECT_EQ(service_->job_count(), 0u);
  EXPECT_NE(metrics_.Render().find("clusterd_mindcluster_recover_jobs_dropped_total 1\n"), std::string::npos);
}

}  // namespace
}  // namespace clusterd
