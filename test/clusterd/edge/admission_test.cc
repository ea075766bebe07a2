// Stream admission (issue 11, defects 6 and 8): agent streams that never say
// hello are ended and free their slot; per-peer limits on agent and Watch
// streams; a server-wide Watch limit. In-process ClusterD through real stubs.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/edge/peer_limiter.h"
#include "clusterd/server/server.h"
#include "common/clock.h"
#include "common/executor.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/http_get.h"
#include "test/support/server/server_fixture.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using testing::HttpGet;
using testing::MetricValue;
using testing::TestAgent;
using testing::WaitFor;

class AdmissionTest : public testing::ClusterdServerTest {
 protected:
  double Metric(const std::string& name) {
    auto res = HttpGet(server_->http_port(), "/metrics");
    EXPECT_EQ(res.status, 200);
    return MetricValue(res.body, name);
  }

  static std::chrono::system_clock::time_point FailureBound() {
    return std::chrono::system_clock::now() + std::chrono::seconds(60);
  }

  // The hello deadlines (and the server's other timed work) on a
  // ManualExecutor over a FakeClock: a test steps hello_timeout instead of
  // waiting it out. Before StartServer.
  void UseManualTimers() { timers_ = &executor_; }
  // Moves the timers' clock one hello_timeout (1 s) at a time until
  // clusterd_agent_hello_timeouts_total reaches `n`: a stream whose server
  // side began after a step has its deadline in the next one.
  bool StepUntilHelloTimeouts(double n) {
    return WaitFor([&] {
      executor_.Advance(std::chrono::seconds(1));
      return Metric("clusterd_agent_hello_timeouts_total") >= n;
    });
  }

  FakeClock clock_;
  ManualExecutor executor_{&clock_};
};

TEST(PeerLimiterTest, KeysOnTheAddressWithoutPort) {
  EXPECT_EQ(PeerLimiter::PeerKey("ipv4:10.0.0.7:51234"), "10.0.0.7");
  EXPECT_EQ(PeerLimiter::PeerKey("ipv6:[::1]:51234"), "::1");
  EXPECT_EQ(PeerLimiter::PeerKey("ipv6:%5B::1%5D:51234"), "::1");
  EXPECT_EQ(PeerLimiter::PeerKey("unix:/run/x.sock"), "unix:/run/x.sock");
  PeerLimiter limiter(2);
  EXPECT_TRUE(limiter.TryAcquire("a"));
  EXPECT_TRUE(limiter.TryAcquire("a"));
  EXPECT_FALSE(limiter.TryAcquire("a"));
  EXPECT_TRUE(limiter.TryAcquire("b"));
  limiter.Release("a");
  EXPECT_TRUE(limiter.TryAcquire("a"));
}

// Before the fix a stream that sent nothing held its agent slot until the
// client gave up: with max_streams=1 no agent could ever connect again.
TEST_F(AdmissionTest, StreamWithoutHelloIsEndedAndFreesItsSlot) {
  UseManualTimers();
  StartServer([](ClusterdConfig& c) {
    c.hello_timeout = std::chrono::seconds(1);
    c.max_streams = 1;
  });
  auto stub = v1::NodeAgentService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(FailureBound());  // far beyond hello_timeout: only a failure bound
  auto silent = stub->Connect(&ctx);
  ASSERT_TRUE(StepUntilHelloTimeouts(1));
  v1::ConnectResponse resp;
  EXPECT_FALSE(silent->Read(&resp));  // returns once the server ends the stream
  grpc::Status st = silent->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("no valid hello within 1s (hello_timeout)"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(Metric("clusterd_agent_hello_timeouts_total"), 1);

  // The only slot is free again (the server's bookkeeping ends just after the
  // status reaches the client, hence the retry).
  std::unique_ptr<TestAgent> agent;
  ASSERT_TRUE(WaitFor([&] {
    agent = std::make_unique<TestAgent>(channel_, "worker01", 1);
    return agent->Connect();
  })) << agent->status().error_message();
  EXPECT_TRUE(agent->Transition(1, true, 3, "80E01801"));
}

TEST_F(AdmissionTest, HelloLessStreamsTimeOutWhileAgentsKeepConnecting) {
  UseManualTimers();
  StartServer([](ClusterdConfig& c) { c.hello_timeout = std::chrono::seconds(1); });
  // A welcomed agent is not subject to the deadline: it outlives the silent
  // streams opened after it.
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect()) << agent.status().error_message();
  auto stub = v1::NodeAgentService::NewStub(channel_);
  constexpr int kSilent = 20;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::ConnectRequest, v1::ConnectResponse>>> streams;
  for (int i = 0; i < kSilent; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(FailureBound());
    streams.push_back(stub->Connect(contexts.back().get()));
  }
  // Agents still connect meanwhile.
  TestAgent other(channel_, "worker02", 1);
  ASSERT_TRUE(other.Connect()) << other.status().error_message();
  // hello_timeout passes (as often as it takes): the silent streams end,
  // the welcomed agents stay.
  ASSERT_TRUE(StepUntilHelloTimeouts(kSilent));
  for (auto& s : streams) {
    v1::ConnectResponse resp;
    EXPECT_FALSE(s->Read(&resp));
    EXPECT_EQ(s->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  EXPECT_TRUE(agent.Transition(1, true, 3, "80E01801"));
  EXPECT_TRUE(other.Transition(1, true, 3, "80E01801"));
  EXPECT_EQ(Metric("clusterd_agent_hello_timeouts_total"), kSilent);
}

TEST_F(AdmissionTest, AgentStreamsPerPeerAreLimited) {
  StartServer([](ClusterdConfig& c) { c.max_streams_per_peer = 2; });
  TestAgent a(channel_, "worker01", 1);
  TestAgent b(channel_, "worker02", 1);
  ASSERT_TRUE(a.Connect());
  ASSERT_TRUE(b.Connect());
  TestAgent c(channel_, "worker03", 1);
  EXPECT_FALSE(c.Connect());
  EXPECT_EQ(c.status().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(c.status().error_message().find("too many agent streams from 127.0.0.1 (max_streams_per_peer=2)"),
            std::string::npos)
      << c.status().error_message();
  EXPECT_EQ(Metric("clusterd_agent_streams_rejected_per_peer_total"), 1);
  // The refused stream changed nothing.
  grpc::ClientContext ctx;
  v1::GetNodeRequest req;
  req.set_name("worker03");
  v1::GetNodeResponse resp;
  EXPECT_EQ(v1::ClusterService::NewStub(channel_)->GetNode(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  // A closed stream gives its slot back.
  a.Close();
  std::unique_ptr<TestAgent> d;
  ASSERT_TRUE(WaitFor([&] {
    d = std::make_unique<TestAgent>(channel_, "worker03", 1);
    return d->Connect();
  })) << d->status().error_message();
}

// Reads the first response of a Watch from revision 0; false if the stream
// ended instead (its status is then in *status).
bool WatchStarted(grpc::ClientReader<v1::WatchResponse>* reader, grpc::Status* status) {
  v1::WatchResponse resp;
  if (reader->Read(&resp)) return true;
  *status = reader->Finish();
  return false;
}

TEST_F(AdmissionTest, WatchStreamsAreLimitedInAllAndPerPeer) {
  StartServer([](ClusterdConfig& c) {
    c.max_watch_streams = 2;
    c.max_watch_streams_per_peer = 2;
  });
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());  // some history to replay
  auto stub = v1::ClusterService::NewStub(channel_);
  v1::WatchRequest req;
  grpc::ClientContext ca, cb, cc;
  for (auto* c : {&ca, &cb, &cc}) c->set_deadline(FailureBound());
  grpc::Status st;
  auto wa = stub->Watch(&ca, req);
  ASSERT_TRUE(WatchStarted(wa.get(), &st)) << st.error_message();
  auto wb = stub->Watch(&cb, req);
  ASSERT_TRUE(WatchStarted(wb.get(), &st)) << st.error_message();
  auto wc = stub->Watch(&cc, req);
  ASSERT_FALSE(WatchStarted(wc.get(), &st));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("too many Watch streams (max_watch_streams=2)"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(Metric("clusterd_watch_streams_rejected_total"), 1);
  // Ending one frees its place.
  ca.TryCancel();
  wa->Finish();
  grpc::ClientContext cd;
  cd.set_deadline(FailureBound());
  std::unique_ptr<grpc::ClientContext> retry_ctx;
  std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> wd;
  ASSERT_TRUE(WaitFor([&] {
    retry_ctx = std::make_unique<grpc::ClientContext>();
    retry_ctx->set_deadline(FailureBound());
    wd = stub->Watch(retry_ctx.get(), req);
    return WatchStarted(wd.get(), &st);
  })) << st.error_message();
  retry_ctx->TryCancel();
  wd->Finish();
  cb.TryCancel();
  wb->Finish();
}

TEST_F(AdmissionTest, WatchStreamsPerPeerAreLimited) {
  StartServer([](ClusterdConfig& c) { c.max_watch_streams_per_peer = 1; });
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  auto stub = v1::ClusterService::NewStub(channel_);
  v1::WatchRequest req;
  grpc::ClientContext ca, cb;
  for (auto* c : {&ca, &cb}) c->set_deadline(FailureBound());
  grpc::Status st;
  auto wa = stub->Watch(&ca, req);
  ASSERT_TRUE(WatchStarted(wa.get(), &st)) << st.error_message();
  auto wb = stub->Watch(&cb, req);
  ASSERT_FALSE(WatchStarted(wb.get(), &st));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("too many Watch streams from 127.0.0.1 (max_watch_streams_per_peer=1)"),
            std::string::npos)
      << st.error_message();
  EXPECT_EQ(Metric("clusterd_watch_streams_rejected_per_peer_total"), 1);
  ca.TryCancel();
  wa->Finish();
}

}  // namespace
}  // namespace clusterd
