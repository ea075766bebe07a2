// MindCluster's fault.Fault service (clusterd/mindcluster/grpc/fault_service.h)
// alone on a real gRPC server, its timers on a ManualExecutor
// (common/executor.h) over a FakeClock: a subscriber's second message waits
// for min_send_interval (1 s) of the clock, not of real time, and a
// registration without a stream expires when the clock passes its TTL.
#include <memory>
#include <string>

#include <boost/asio/thread_pool.hpp>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/edge/auth.h"
#include "clusterd/mindcluster/grpc/fault_service.h"
#include "common/executor.h"
#include "mindcluster/fault.grpc.pb.h"
#include "test/support/state/state_fixtures.h"
#include "test/support/grpc/loopback_server.h"
#include "test/support/wait.h"
#include "test/support/state/writer_on_memory.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;

constexpr char kFaultTimersJob[] = "mindie-job-0001";

fault::ClientInfo FaultTimersClient(const std::string& job, const std::string& role) {
  fault::ClientInfo c;
  c.set_jobid(job);
  c.set_role(role);
  return c;
}

class FaultTimersTest : public ::testing::Test {
 protected:
  void Start(MindClusterFaultOptions options) {
    writer_.Open(&SystemClock::Instance(), EngineOptions(), &metrics_);
    writer_.engine()->Start();
    writer_.Write(
        [](ClusterState& s, Mutation* m) { return s.ApplyHello(testing::MakeHello("worker01", 1), 1, m).status(); });
    v1::Job job;
    job.set_id(kFaultTimersJob);
    job.set_kind(v1::JOB_KIND_INFERENCE);
    for (uint32_t d : {2u, 3u}) {
      auto* p = job.add_placement();
      p->set_rank(d - 2);
      p->set_node("worker01");
      p->set_device_id(d);
    }
    writer_.Write([job](ClusterState& s, Mutation* m) { return s.ApplyCreateJob(job, m).status(); });
    ASSERT_TRUE(testing::WaitFor([&] {
      return writer_.state()->Read([](const StateView& v) { return v.jobs().count(kFaultTimersJob) == 1; });
    }));
    auth_ = MakeClaimedActorAuthenticator();
    options.timers = &executor_;
    service_ = std::make_unique<MindClusterFaultService>(writer_.state(), writer_.hub(), &pool_, options, &metrics_,
                                                         auth_.get());
    auto loopback = testing::StartLoopbackServer({service_.get()});
    server_ = std::move(loopback.server);
    ASSERT_TRUE(server_ != nullptr);
    stub_ = fault::Fault::NewStub(loopback.channel);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 5s);
    service_.reset();
    pool_.join();
  }

  grpc::Status Register(const std::string& job, const std::string& role) {
    grpc::ClientContext ctx;
    fault::Status resp;
    return stub_->Register(&ctx, FaultTimersClient(job, role), &resp);
  }
  void Transition(uint64_t seq, bool raise, uint32_t device) {
    writer_.Write([=](ClusterState& s, Mutation* m) {
      return s.ApplyTransition("worker01", 1, testing::MakeTransition(1, seq, raise, device, "80E01801"), m).status();
    });
  }
  bool Rendered(const std::string& line) { return metrics_.Render().find(line + "\n") != std::string::npos; }

  FakeClock clock_;
  ManualExecutor executor_{&clock_};
  MetricsRegistry metrics_;
  testing::WriterOnMemory writer_;
  boost::asio::thread_pool pool_{2};
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<MindClusterFaultService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<fault::Fault::Stub> stub_;
};

TEST_F(FaultTimersTest, TheNextMessageWaitsForTheIntervalOnTheClock) {
  Start(MindClusterFaultOptions{});
  ASSERT_TRUE(Register(kFaultTimersJob, "controller").ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto stream = stub_->SubscribeFaultMsgSignal(&ctx, FaultTimersClient(kFaultTimersJob, "controller"));
  ASSERT_TRUE(testing::WaitFor([&] { return Rendered("clusterd_mindcluster_fault_subscribers 1"); }));
  // The first change after a quiet spell goes out at once.
  const TimePoint first = clock_.Now();
  Transition(1, true, 3);
  fault::FaultMsgSignal msg;
  ASSERT_TRUE(stream->Read(&msg));
  EXPECT_EQ(msg.signaltype(), "fault");
  // The clear comes within the interval: its flush waits for the clock.
  Transition(2, false, 3);
  ASSERT_TRUE(testing::WaitFor([&] { return executor_.pending() == 1; }));
  EXPECT_EQ(executor_.NextDue(), first + 1s) << "min_send_interval after the last flush";
  EXPECT_EQ(executor_.Advance(999ms), 0u);
  EXPECT_EQ(executor_.Advance(1ms), 1u);
  ASSERT_TRUE(stream->Read(&msg));
  EXPECT_EQ(msg.signaltype(), "normal");
  EXPECT_EQ(msg.jobid(), kFaultTimersJob);
  ctx.TryCancel();
}

TEST_F(FaultTimersTest, ARegistrationWithoutAStreamExpiresAtItsTtlOnTheClock) {
  MindClusterFaultOptions options;
  options.max_subscribers = 1;
  Start(options);
  ASSERT_TRUE(Register("", "gone").ok());
  const grpc::Status full = Register("", "next");
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();
  executor_.Advance(299s);
  EXPECT_EQ(Register("", "next").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << "1 s before the 300 s TTL";
  executor_.Advance(1s);
  EXPECT_TRUE(Register("", "next").ok());
  EXPECT_TRUE(Rendered("clusterd_mindcluster_fault_registrations_expired_total 1"));
  EXPECT_EQ(service_->registration_count(), 1u);
}

}  // namespace
}  // namespace clusterd
