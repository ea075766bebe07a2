// MindCluster's fault.Fault on an in-process ClusterD (port 0), through real
// gRPC stubs: Register's codes, SubscribeFaultMsgSignal driven by an agent's
// device faults, re-registration, cluster-wide subscribers, job deletion,
// GetFaultMsgSignal, the subscriber limit and the per-client (principal)
// limit on registrations. The send interval and the registration TTL are
// measured on a FakeClock the tests move (no test waits them out).
#include <condition_variable>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/server/server.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "common/grpc/credentials.h"
#include "common/executor.h"
#include "mindcluster/fault.grpc.pb.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/grpc/stream_reader.h"
#include "test/support/http_get.h"
#include "test/support/server/server_fixture.h"
#include "test/support/test_certs.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using testing::TestAgent;
using testing::WaitFor;

constexpr auto kDeadline = std::chrono::seconds(30);
constexpr char kRefusedPerPrincipal[] =
    "clusterd_mindcluster_fault_registrations_refused_total{reason=\"per_principal\"}";
constexpr char kRefusedTotal[] = "clusterd_mindcluster_fault_registrations_refused_total{reason=\"total\"}";

fault::ClientInfo Client(const std::string& job, const std::string& role) {
  fault::ClientInfo c;
  c.set_jobid(job);
  c.set_role(role);
  return c;
}

// A SubscribeFaultMsgSignal stream read on a thread of its own.
class Subscription : public testing::StreamReader<fault::FaultMsgSignal> {
 public:
  Subscription(fault::Fault::Stub* stub, const std::string& job, const std::string& role)
      : StreamReader([&](grpc::ClientContext* ctx) { return stub->SubscribeFaultMsgSignal(ctx, Client(job, role)); },
                     nullptr, kDeadline) {}
};

// The server's timed work on a ManualExecutor over a FakeClock
// (ClusterdServer::SetTimers): a subscriber's next message waits for the send
// interval (1 s) of that clock, a registration's TTL is measured on it.
class MindClusterFaultTest : public testing::ClusterdServerTest {
 protected:
  void SetUp() override {
    timers_ = &executor_;
    StartServer();
  }
  void OnServerStarted() override {
    fault_ = fault::Fault::NewStub(channel_);
    jobs_ = v1::JobService::NewStub(channel_);
  }

  // A TLS server that knows the test CA's tokens (test_certs.h): each token
  // is a principal of its own.
  void StartTlsServer(std::function<void(ClusterdConfig&)> tweak) {
    const auto& certs = testing::TestCerts::Get();
    ASSERT_TRUE(certs.ok()) << "test/security/make_certs.sh failed";
    tls_ = true;
    StartServer([&](ClusterdConfig& c) {
      c.insecure = false;
      c.tls.cert_file = certs.Path("server.crt");
      c.tls.key_file = certs.Path("server.key");
      c.auth.token_file = certs.Path("tokens.csv");
      tweak(c);
    });
  }

  // A fault.Fault client of that server presenting make_certs.sh's token
  // `who` ("viewer" is alice, "operator" bob).
  std::unique_ptr<fault::Fault::Stub> FaultAs(const std::string& who) {
    const auto& certs = testing::TestCerts::Get();
    ClientSecurity security;
    security.ca_file = certs.Path("ca.crt");
    security.token = certs.Token(who);
    auto channel = CreateClientChannel("127.0.0.1:" + std::to_string(server_->grpc_port()), security);
    EXPECT_TRUE(channel.ok()) << channel.status().ToString();
    return channel.ok() ? fault::Fault::NewStub(*channel) : nullptr;
  }

  // A job with one rank per device of `node`.
  void CreateJob(const std::string& id, const std::string& node, std::vector<uint32_t> devices) {
    v1::CreateJobRequest req;
    req.mutable_job()->set_id(id);
    req.mutable_job()->set_kind(v1::JOB_KIND_INFERENCE);
    uint32_t rank = 0;
    for (uint32_t d : devices) {
      auto* p = req.mutable_job()->add_placement();
      p->set_rank(rank++);
      p->set_node(node);
      p->set_device_id(d);
    }
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    grpc::Status st = jobs_->CreateJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  void DeleteJob(const std::string& id) {
    v1::DeleteJobRequest req;
    req.set_id(id);
    grpc::ClientContext ctx;
    v1::DeleteJobResponse resp;
    grpc::Status st = jobs_->DeleteJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  fault::Status Register(const std::string& job, const std::string& role, grpc::Status* status = nullptr) {
    return RegisterWith(fault_.get(), job, role, status);
  }
  fault::Status RegisterWith(fault::Fault::Stub* stub, const std::string& job, const std::string& role,
                             grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    fault::Status resp;
    grpc::Status st = stub->Register(&ctx, Client(job, role), &resp);
    if (status) {
      *status = st;
    } else {
      EXPECT_TRUE(st.ok()) << st.error_message();
    }
    return resp;
  }

  fault::FaultQueryResult Get(const std::string& job) {
    grpc::ClientContext ctx;
    fault::FaultQueryResult resp;
    grpc::Status st = fault_->GetFaultMsgSignal(&ctx, Client(job, "query"), &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  double Metric(const std::string& name) {
    // The HTTP port speaks TLS when the gRPC port does.
    auto res = tls_ ? testing::HttpsGet(server_->http_port(), "/metrics",
                                        testing::HttpTls{testing::TestCerts::Get().Path("ca.crt"), "", ""})
                    : testing::HttpGet(server_->http_port(), "/metrics");
    return res.status == 200 ? testing::MetricValue(res.body, name) : -1;
  }
  // Subscriptions that took their baseline: what happens from now on is told.
  bool WaitLive(double n) {
    return WaitFor([&] { return Metric("clusterd_mindcluster_fault_subscribers") == n; }, kDeadline);
  }

  // The first `n` messages of `sub` (fewer at the deadline): the clock moves
  // 100 ms at each look, so that a flush waiting out the send interval goes.
  std::vector<fault::FaultMsgSignal> AwaitMessages(Subscription& sub, size_t n) {
    WaitFor(
        [&] {
          if (sub.Messages().size() >= n) return true;
          executor_.Advance(std::chrono::milliseconds(100));
          return false;
        },
        kDeadline);
    return sub.Messages();
  }

  FakeClock clock_;
  ManualExecutor executor_{&clock_};
  std::unique_ptr<fault::Fault::Stub> fault_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  bool tls_ = false;  // StartTlsServer: the HTTP port is TLS
};

std::vector<std::string> Codes(const fault::DeviceFaultInfo& d) {
  return {d.faultcodes().begin(), d.faultcodes().end()};
}

TEST_F(MindClusterFaultTest, RegisterCodes) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  CreateJob("mindie-job-0001", "worker01", {0, 1});
  auto r = Register("mindie-job-0001", "");
  EXPECT_NE(r.code(), 0);
  EXPECT_NE(r.info().find("role"), std::string::npos) << r.info();
  r = Register("no-such-job-000", "controller");
  EXPECT_EQ(r.code(), 402);
  EXPECT_NE(r.info().find("no-such-job-000"), std::string::npos) << r.info();
  // A huge jobId is refused as invalid, not echoed back.
  r = Register(std::string(5000, 'j'), "controller");
  EXPECT_EQ(r.code(), 409);
  EXPECT_LT(r.info().size(), 200u) << r.info().size();
  r = Register("mindie-job-0001", "controller");
  EXPECT_EQ(r.code(), 0) << r.info();
  r = Register("", "platform");
  EXPECT_EQ(r.code(), 0) << r.info();
  r = Register("mindie-job-0001", "controller");  // again: fine
  EXPECT_EQ(r.code(), 0) << r.info();
}

TEST_F(MindClusterFaultTest, SubscribeNeedsARegistration) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  CreateJob("mindie-job-0001", "worker01", {0});
  {
    Subscription sub(fault_.get(), "mindie-job-0001", "controller");
    grpc::Status st = sub.WaitEnd();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find("Register"), std::string::npos) << st.error_message();
  }
  {
    Subscription sub(fault_.get(), "mindie-job-0001", "");
    EXPECT_EQ(sub.WaitEnd().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Registered for the job, not for the whole cluster.
  ASSERT_EQ(Register("mindie-job-0001", "controller").code(), 0);
  Subscription sub(fault_.get(), "", "controller");
  EXPECT_EQ(sub.WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// "fault" after a fault on the job's device, "normal" once after it cleared;
// faults the job does not see, and NotHandle faults, never count.
TEST_F(MindClusterFaultTest, FaultThenNormalOnce) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  CreateJob("mindie-job-0001", "worker01", {2, 3});
  ASSERT_EQ(Register("mindie-job-0001", "controller").code(), 0);
  Subscription sub(fault_.get(), "mindie-job-0001", "controller");
  ASSERT_TRUE(WaitLive(1));

  ASSERT_TRUE(agent.Transition(1, true, 3, "80E01801"));  // RESTART_BUSINESS on the job's device
  auto msgs = AwaitMessages(sub, 1);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].jobid(), "mindie-job-0001");
  EXPECT_EQ(msgs[0].signaltype(), "fault");
  EXPECT_FALSE(msgs[0].uuid().empty());
  ASSERT_EQ(msgs[0].nodefaultinfo_size(), 1);
  const auto& node = msgs[0].nodefaultinfo(0);
  EXPECT_EQ(node.nodename(), "worker01");
  EXPECT_EQ(node.faultlevel(), "UnHealthy");
  ASSERT_EQ(node.faultdevice_size(), 1);
  EXPECT_EQ(node.faultdevice(0).deviceid(), "3");
  EXPECT_EQ(node.faultdevice(0).devicetype(), "NPU");
  EXPECT_EQ(Codes(node.faultdevice(0)), std::vector<std::string>{"80E01801"});
  EXPECT_EQ(node.faultdevice(0).faultlevels(0), "RestartBusiness");

  // A device the job does not use, then the clear: the next message is the
  // "normal".
  ASSERT_TRUE(agent.Transition(2, true, 5, "80E01801"));
  ASSERT_TRUE(agent.Transition(3, false, 3, "80E01801"));
  msgs = AwaitMessages(sub, 2);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[1].signaltype(), "normal");
  EXPECT_EQ(msgs[1].jobid(), "mindie-job-0001");
  EXPECT_EQ(msgs[1].nodefaultinfo_size(), 0);
  EXPECT_NE(msgs[1].uuid(), msgs[0].uuid());

  // A NotHandle fault on the job's device is not told, and no second
  // "normal" comes: the next message is the new fault alone.
  ASSERT_TRUE(agent.Transition(4, true, 2, "80818200"));
  ASSERT_TRUE(agent.Transition(5, true, 3, "80E01801"));
  msgs = AwaitMessages(sub, 3);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[2].signaltype(), "fault");
  ASSERT_EQ(msgs[2].nodefaultinfo_size(), 1);
  ASSERT_EQ(msgs[2].nodefaultinfo(0).faultdevice_size(), 1);
  EXPECT_EQ(msgs[2].nodefaultinfo(0).faultdevice(0).deviceid(), "3");
  EXPECT_TRUE(WaitFor([&] { return Metric("clusterd_mindcluster_fault_messages_total") >= 3; }, kDeadline));
}

TEST_F(MindClusterFaultTest, RegisteringAgainEndsTheOlderStream) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  CreateJob("mindie-job-0001", "worker01", {0});
  ASSERT_EQ(Register("mindie-job-0001", "controller").code(), 0);
  auto first = std::make_unique<Subscription>(fault_.get(), "mindie-job-0001", "controller");
  ASSERT_TRUE(WaitLive(1));
  ASSERT_EQ(Register("mindie-job-0001", "controller").code(), 0);
  grpc::Status st = first->WaitEnd();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED) << st.error_message();
  EXPECT_TRUE(WaitLive(0));

  // Another role is another subscription; a second stream of the same
  // registration replaces the first.
  ASSERT_EQ(Register("mindie-job-0001", "other").code(), 0);
  Subscription other(fault_.get(), "mindie-job-0001", "other");
  Subscription second(fault_.get(), "mindie-job-0001", "controller");
  ASSERT_TRUE(WaitLive(2));
  Subscription third(fault_.get(), "mindie-job-0001", "controller");
  EXPECT_EQ(second.WaitEnd().error_code(), grpc::StatusCode::ABORTED);
  ASSERT_TRUE(agent.Transition(1, true, 0, "80E01801"));
  EXPECT_EQ(AwaitMessages(other, 1).size(), 1u);
  // Whether the third stream's baseline saw the fault or not, the clear
  // changes what it was told.
  ASSERT_TRUE(agent.Transition(2, false, 0, "80E01801"));
  EXPECT_EQ(AwaitMessages(other, 2).size(), 2u);
  auto msgs = AwaitMessages(third, 1);
  ASSERT_GE(msgs.size(), 1u);
  EXPECT_EQ(msgs.back().jobid(), "mindie-job-0001");
}

// A cluster subscriber gets one message per job the change hits, each with
// its jobId and only that job's devices.
TEST_F(MindClusterFaultTest, ClusterSubscriberGetsPerJobMessages) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  CreateJob("mindie-job-000a", "worker01", {0, 1});
  CreateJob("mindie-job-000b", "worker01", {2, 3});
  ASSERT_EQ(Register("", "platform").code(), 0);
  Subscription sub(fault_.get(), "", "platform");
  ASSERT_TRUE(WaitLive(1));
  ASSERT_TRUE(agent.Transition(1, true, 1, "80E01801"));
  ASSERT_TRUE(agent.Transition(2, true, 2, "80E01801"));
  ASSERT_TRUE(agent.Transition(3, true, 6, "80E01801"));  // no job's device
  // The latest message per job says both its faults were seen.
  std::map<std::string, fault::FaultMsgSignal> latest;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& m : sub.Messages()) latest[m.jobid()] = m;
        if (latest.size() == 2) return true;
        executor_.Advance(std::chrono::milliseconds(100));  // a change within the send interval waits for it
        return false;
      },
      kDeadline));
  EXPECT_EQ(latest.count(""), 0u);
  ASSERT_EQ(latest["mindie-job-000a"].nodefaultinfo_size(), 1);
  ASSERT_EQ(latest["mindie-job-000a"].nodefaultinfo(0).faultdevice_size(), 1);
  EXPECT_EQ(latest["mindie-job-000a"].nodefaultinfo(0).faultdevice(0).deviceid(), "1");
  ASSERT_EQ(latest["mindie-job-000b"].nodefaultinfo_size(), 1);
  ASSERT_EQ(latest["mindie-job-000b"].nodefaultinfo(0).faultdevice_size(), 1);
  EXPECT_EQ(latest["mindie-job-000b"].nodefaultinfo(0).faultdevice(0).deviceid(), "2");

  // Clearing job a's fault: a "normal" for job a only.
  const size_t before = sub.Messages().size();
  ASSERT_TRUE(agent.Transition(4, false, 1, "80E01801"));
  auto msgs = AwaitMessages(sub, before + 1);
  ASSERT_EQ(msgs.size(), before + 1);
  EXPECT_EQ(msgs.back().jobid(), "mindie-job-000a");
  EXPECT_EQ(msgs.back().signaltype(), "normal");
}

// A deleted job's subscription says "normal" (it had faults) and ends; its
// registration is gone.
TEST_F(MindClusterFaultTest, DeletedJobEndsItsSubscription) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  CreateJob("mindie-job-0001", "worker01", {0});
  ASSERT_EQ(Register("mindie-job-0001", "controller").code(), 0);
  Subscription sub(fault_.get(), "mindie-job-0001", "controller");
  ASSERT_TRUE(WaitLive(1));
  ASSERT_TRUE(agent.Transition(1, true, 0, "80E01801"));
  ASSERT_EQ(AwaitMessages(sub, 1).size(), 1u);
  DeleteJob("mindie-job-0001");
  AwaitMessages(sub, 2);  // the last "normal" waits for the send interval
  grpc::Status st = sub.WaitEnd();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  auto msgs = sub.Messages();
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[1].signaltype(), "normal");
  Subscription again(fault_.get(), "mindie-job-0001", "controller");
  EXPECT_EQ(again.WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Register("mindie-job-0001", "controller").code(), 402);
}

TEST_F(MindClusterFaultTest, GetFaultMsgSignalCodes) {
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  CreateJob("mindie-job-0001", "worker01", {0, 1});
  EXPECT_EQ(Get("short").code(), 409);
  EXPECT_EQ(Get(std::string(129, 'x')).code(), 409);
  EXPECT_EQ(Get("no-such-job-000").code(), 402);

  auto r = Get("mindie-job-0001");
  EXPECT_EQ(r.code(), 200) << r.info();
  EXPECT_EQ(r.faultsignal().jobid(), "mindie-job-0001");
  EXPECT_EQ(r.faultsignal().signaltype(), "normal");
  EXPECT_FALSE(r.faultsignal().uuid().empty());

  ASSERT_TRUE(agent.Transition(1, true, 1, "80E01801"));
  ASSERT_TRUE(agent.Transition(2, true, 7, "80E01801"));  // no job's device
  r = Get("mindie-job-0001");
  EXPECT_EQ(r.code(), 200);
  EXPECT_EQ(r.faultsignal().signaltype(), "fault");
  ASSERT_EQ(r.faultsignal().nodefaultinfo_size(), 1);
  ASSERT_EQ(r.faultsignal().nodefaultinfo(0).faultdevice_size(), 1);
  EXPECT_EQ(r.faultsignal().nodefaultinfo(0).faultdevice(0).deviceid(), "1");

  r = Get("");
  EXPECT_EQ(r.code(), 200);
  EXPECT_EQ(r.faultsignal().jobid(), "");
  EXPECT_EQ(r.faultsignal().signaltype(), "fault");
  ASSERT_EQ(r.faultsignal().nodefaultinfo_size(), 1);
  ASSERT_EQ(r.faultsignal().nodefaultinfo(0).faultdevice_size(), 2);
  EXPECT_EQ(r.faultsignal().nodefaultinfo(0).faultdevice(1).deviceid(), "7");
}

TEST_F(MindClusterFaultTest, SubscriberLimit) {
  StartServer([](ClusterdConfig& c) {
    c.mindcluster_max_subscribers = 1;
    c.mindcluster_max_registrations_per_principal = 1;
  });
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  CreateJob("mindie-job-0001", "worker01", {0});
  ASSERT_EQ(Register("mindie-job-0001", "controller").code(), 0);
  grpc::Status st;
  Register("mindie-job-0001", "second", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("mindcluster_max_subscribers=1"), std::string::npos) << st.error_message();
  EXPECT_EQ(Metric(kRefusedTotal), 1);
  EXPECT_EQ(Metric(kRefusedPerPrincipal), 0);
  // The one registered may register again and subscribe.
  EXPECT_EQ(Register("mindie-job-0001", "controller").code(), 0);
  Subscription sub(fault_.get(), "mindie-job-0001", "controller");
  EXPECT_TRUE(WaitLive(1));
}

// A client that registers and goes away holds no slot for good: a
// registration without a stream expires after the TTL, one with a stream open
// never does.
TEST_F(MindClusterFaultTest, RegistrationsWithoutAStreamExpire) {
  StartServer([](ClusterdConfig& c) {
    c.mindcluster_max_subscribers = 2;
    c.mindcluster_max_registrations_per_principal = 2;
    c.mindcluster_registration_ttl = std::chrono::seconds(1);
  });
  ASSERT_EQ(Register("", "controller").code(), 0);
  auto streaming = std::make_unique<Subscription>(fault_.get(), "", "controller");
  ASSERT_TRUE(WaitLive(1));
  ASSERT_EQ(Register("", "gone").code(), 0);
  EXPECT_EQ(Metric("clusterd_mindcluster_fault_registrations"), 2);
  // Full: a third registration gets a slot once "gone" has been without a
  // stream for the TTL (refused until then, saying so).
  grpc::Status st;
  Register("", "third", &st);
  if (!st.ok()) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(st.error_message().find("expires after 1 s"), std::string::npos) << st.error_message();
  }
  executor_.Advance(std::chrono::seconds(1));  // the TTL, on the clock
  Register("", "third", &st);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(Metric("clusterd_mindcluster_fault_registrations"), 2);
  EXPECT_GE(Metric("clusterd_mindcluster_fault_registrations_expired_total"), 1);
  // "gone" is no longer registered: its stream is refused.
  Subscription late(fault_.get(), "", "gone");
  EXPECT_EQ(late.WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // "controller" is older than the TTL too, but its stream kept it: a new
  // stream of it replaces the open one.
  Subscription again(fault_.get(), "", "controller");
  EXPECT_EQ(streaming->WaitEnd().error_code(), grpc::StatusCode::ABORTED);
  EXPECT_TRUE(WaitLive(1));
}

// One principal cannot take every registration slot: beyond
// mindcluster_max_registrations_per_principal its Register is refused,
// naming the limit and the principal, while another principal still
// registers. A registration belongs to whoever registered its pair last.
TEST_F(MindClusterFaultTest, PerPrincipalLimitLeavesOtherPrincipalsTheirSlots) {
  StartTlsServer([](ClusterdConfig& c) { c.mindcluster_max_registrations_per_principal = 2; });
  auto alice = FaultAs("viewer");
  auto bob = FaultAs("operator");
  ASSERT_TRUE(alice && bob);
  ASSERT_EQ(RegisterWith(alice.get(), "", "a1").code(), 0);
  ASSERT_EQ(RegisterWith(alice.get(), "", "a2").code(), 0);
  grpc::Status st;
  RegisterWith(alice.get(), "", "a3", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("too many fault.Fault registrations held by principal \"alice\" "
                                    "(mindcluster_max_registrations_per_principal=2;"),
            std::string::npos)
      << st.error_message();
  // Registering a pair she holds again takes no second slot.
  EXPECT_EQ(RegisterWith(alice.get(), "", "a1").code(), 0);
  RegisterWith(alice.get(), "", "a3", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Another principal has slots of its own.
  EXPECT_EQ(RegisterWith(bob.get(), "", "b1").code(), 0);
  // Bob registers alice's pair: it is his now, and her slot is free.
  EXPECT_EQ(RegisterWith(bob.get(), "", "a1").code(), 0);
  EXPECT_EQ(RegisterWith(alice.get(), "", "a3").code(), 0);
  RegisterWith(bob.get(), "", "b2", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("held by principal \"bob\""), std::string::npos) << st.error_message();
  // Taking a pair over needs a free slot too.
  RegisterWith(alice.get(), "", "a1", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  EXPECT_EQ(Metric("clusterd_mindcluster_fault_registrations"), 4);  // a1 (bob's), a2, a3, b1
  EXPECT_EQ(Metric(kRefusedPerPrincipal), 4);
  EXPECT_EQ(Metric(kRefusedTotal), 0);
}

// Without authentication every caller is anonymous: a client is its IP
// address. The registrations of a deleted job give their owner its slots
// back.
TEST_F(MindClusterFaultTest, WithoutAuthenticationTheLimitIsPerClientAddress) {
  StartServer([](ClusterdConfig& c) { c.mindcluster_max_registrations_per_principal = 2; });
  TestAgent agent(channel_, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  CreateJob("mindie-job-0001", "worker01", {0});
  ASSERT_EQ(Register("mindie-job-0001", "controller").code(), 0);
  ASSERT_EQ(Register("mindie-job-0001", "second").code(), 0);
  EXPECT_EQ(Register("mindie-job-0001", "controller").code(), 0);
  grpc::Status st;
  Register("", "platform", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find(
                "held by client 127.0.0.1 (mindcluster_max_registrations_per_principal=2; one without a stream "
                "expires after 300 s)"),
            std::string::npos)
      << st.error_message();
  EXPECT_EQ(Metric(kRefusedPerPrincipal), 1);

  DeleteJob("mindie-job-0001");
  EXPECT_EQ(Register("", "platform").code(), 0);
  EXPECT_EQ(Register("", "other").code(), 0);
  Register("", "third", &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Metric("clusterd_mindcluster_fault_registrations"), 2);
  EXPECT_EQ(Metric(kRefusedPerPrincipal), 2);
}

// A registration that expired gives its owner its slot back.
TEST_F(MindClusterFaultTest, AnExpiredRegistrationFreesItsOwnersSlot) {
  StartServer([](ClusterdConfig& c) {
    c.mindcluster_max_registrations_per_principal = 1;
    c.mindcluster_registration_ttl = std::chrono::seconds(1);
  });
  ASSERT_EQ(Register("", "first").code(), 0);
  // Refused until "first" has been without a stream for the TTL.
  grpc::Status st;
  Register("", "second", &st);
  if (!st.ok()) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(st.error_message().find("held by client 127.0.0.1"), std::string::npos) << st.error_message();
  }
  executor_.Advance(std::chrono::seconds(1));  // the TTL, on the clock
  Register("", "second", &st);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(Metric("clusterd_mindcluster_fault_registrations"), 1);
  EXPECT_EQ(Metric("clusterd_mindcluster_fault_registrations_expired_total"), 1);
}

}  // namespace
}  // namespace clusterd
