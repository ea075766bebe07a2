// Transport security, identities and roles against a real TLS server
// (docs/security.md). Certificates and tokens come from a test CA made with
// openssl at test time (test/security/make_certs.sh).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/k8s/token_reviewer.h"
#include "clusterd/edge/auth.h"
#include "clusterd/edge/authz.h"
#include "clusterd/server/registries.h"
#include "clusterd/server/server.h"
#include "clusterd/server/status_page.h"
#include "clusterd/v1/admin.grpc.pb.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/fault.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "mindcluster/profiling.grpc.pb.h"
#include "mindcluster/recover.grpc.pb.h"
#include "common/grpc/credentials.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mindcluster/pubfault.grpc.pb.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/http_get.h"
#include "test/support/server/server_fixture.h"
#include "test/support/temp_dir.h"
#include "test/support/test_certs.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using testing::TempDir;
using testing::WaitFor;

// The test CA, made once for the whole suite.
using Certs = testing::TestCerts;

// A client with the named certificate (or none), optionally a bearer token.
std::shared_ptr<grpc::Channel> Client(int port, const std::string& cert, const std::string& token = "",
                                      const std::string& ca = "ca.crt") {
  const Certs& c = Certs::Get();
  ClientSecurity s;
  s.ca_file = c.Path(ca);
  if (!cert.empty()) {
    s.cert_file = c.Path(cert + ".crt");
    s.key_file = c.Path(cert + ".key");
  }
  s.token = token;
  grpc::ChannelArguments args;
  // A connection of its own, so a refused handshake is not hidden by
  // another channel's connection.
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  auto ch = CreateClientChannel("127.0.0.1:" + std::to_string(port), s, args);
  EXPECT_TRUE(ch.ok()) << ch.status().ToString();
  return ch.ok() ? *ch : nullptr;
}

grpc::StatusCode Summary(const std::shared_ptr<grpc::Channel>& ch) {
  auto stub = v1::ClusterService::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetSummaryResponse resp;
  return stub->GetSummary(&ctx, v1::GetSummaryRequest(), &resp).error_code();
}

class SecurityTest : public testing::ClusterdServerTest {
 protected:
  void SetUp() override { ASSERT_TRUE(Certs::Get().ok()) << "test/security/make_certs.sh failed"; }

  // A TLS server: the test CA's server certificate, client certificates
  // verified against the CA ("request": token-only clients may connect too),
  // the generated token file.
  void Start(const std::string& client_auth = "request", std::function<void(ClusterdConfig&)> tweak = nullptr) {
    const Certs& c = Certs::Get();
    // Copies, so that a test can rotate them.
    std::filesystem::copy_file(c.Path("server.crt"), dir_.Sub("tls.crt"),
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::copy_file(c.Path("server.key"), dir_.Sub("tls.key"),
                               std::filesystem::copy_options::overwrite_existing);
    StartServer([&](ClusterdConfig& cfg) {
      cfg.insecure = false;
      cfg.tls.cert_file = dir_.Sub("tls.crt");
      cfg.tls.key_file = dir_.Sub("tls.key");
      cfg.tls.client_ca_file = c.Path("ca.crt");
      cfg.tls.client_auth = client_auth;
      cfg.tls.reload_interval = std::chrono::seconds(1);
      cfg.auth.token_file = c.Path("tokens.csv");
      if (tweak) tweak(cfg);
    });
  }
  void OnServerStarted() override { port_ = server_->grpc_port(); }

  std::shared_ptr<grpc::Channel> As(const std::string& cert) { return Client(port_, cert); }
  // GET on the HTTP port over TLS (the test CA), presenting `cert` ("" none).
  testing::HttpResult Https(const std::string& target, const std::string& authorization = "",
                            const std::string& cert = "", const std::string& ca = "ca.crt") {
    const Certs& c = Certs::Get();
    testing::HttpTls tls{c.Path(ca), cert.empty() ? "" : c.Path(cert + ".crt"),
                         cert.empty() ? "" : c.Path(cert + ".key")};
    return testing::HttpsGet(server_->http_port(), target, tls, authorization);
  }
  std::string Bearer(const std::string& who) { return "Bearer " + Certs::Get().Token(who); }
  // clusterd_auth_requests_total{result=...} (metrics_auth off).
  double AuthCount(const std::string& result) {
    auto m = Https("/metrics");
    return testing::MetricValue(m.body, "clusterd_auth_requests_total{result=\"" + result + "\"}");
  }
  std::shared_ptr<grpc::Channel> WithToken(const std::string& who) {
    return Client(port_, "", Certs::Get().Token(who));
  }

  int port_ = 0;
};

TEST(SecurityConfigTest, PlaintextOnlyWhenAskedFor) {
  TempDir dir;
  ClusterdConfig cfg = testing::LoopbackConfig(dir.Sub("data"));
  cfg.insecure = false;
  ClusterdServer server(cfg);
  Status st = server.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--insecure"), std::string::npos) << st.message();

  bool help = false;
  auto parsed = ParseClusterdFlags({"--insecure", "--tls-cert-file", "x.crt"}, &help);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("insecure"), std::string::npos) << parsed.status().message();
  parsed = ParseClusterdFlags({"--tls-cert-file", "x.crt", "--tls-key-file", "x.key"}, &help);
  ASSERT_FALSE(parsed.ok());  // TLS with no way to authenticate anyone
  EXPECT_NE(parsed.status().message().find("authenticate"), std::string::npos) << parsed.status().message();
  parsed = ParseClusterdFlags({"--insecure"}, &help);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->insecure);
  parsed = ParseClusterdFlags({"--auth-bindings", "viewer=group:system:authenticated,operator=user:bob", "--insecure",
                               "false", "--tls-cert-file", "a", "--tls-key-file", "b", "--auth-token-file", "t"},
                              &help);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->auth.bindings.size(), 2u);
  parsed = ParseClusterdFlags({"--insecure", "--auth-bindings", "agent=user:x"}, &help);
  EXPECT_FALSE(parsed.ok());  // agents come from their node-scoped names only
}

TEST_F(SecurityTest, BadKeyOrMissingFileIsAClearStartError) {
  TempDir dir;
  ClusterdConfig cfg = testing::LoopbackConfig(dir.Sub("data"));
  cfg.insecure = false;
  cfg.tls.cert_file = Certs::Get().Path("server.crt");
  cfg.tls.key_file = Certs::Get().Path("server2.key");  // another certificate's key
  cfg.tls.client_ca_file = Certs::Get().Path("ca.crt");
  ClusterdServer server(cfg);
  Status st = server.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("is not the key of"), std::string::npos) << st.message();
  cfg.tls.key_file = dir.Sub("missing.key");
  ClusterdServer again(cfg);
  st = again.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tls_key_file"), std::string::npos) << st.message();
}

TEST_F(SecurityTest, HandshakeRefusesPlaintextWrongCaExpiredAndAnUntrustedServer) {
  Start("require");
  EXPECT_EQ(Summary(As("viewer")), grpc::StatusCode::OK);
  // /readyz's own check gets through mutual TLS (server.crt allows client auth).
  EXPECT_EQ(Https("/readyz", "", "viewer").status, 200);
  // A plaintext client on the TLS port.
  EXPECT_EQ(Summary(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials())),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Summary(As("wrongca")), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Summary(As("expired")), grpc::StatusCode::UNAVAILABLE);
  // mutual TLS: no client certificate, no connection.
  EXPECT_EQ(Summary(As("")), grpc::StatusCode::UNAVAILABLE);
  // The client verifies the server too.
  EXPECT_EQ(Summary(Client(port_, "viewer", "", "other-ca.crt")), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, NoIdentityIsUnauthenticatedButProbesAnswer) {
  Start("request");
  auto anon = As("");
  EXPECT_EQ(Summary(anon), grpc::StatusCode::UNAUTHENTICATED);
  auto health = grpc::health::v1::Health::NewStub(anon);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckResponse resp;
  EXPECT_TRUE(health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok());
  EXPECT_EQ(Summary(Client(port_, "", "not-a-token")), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Summary(WithToken("viewer")), grpc::StatusCode::OK);
}

// worker02's certificate cannot say hello as worker01: the real agent's
// stream stays and its faults stay active.
TEST_F(SecurityTest, AnAgentSpeaksOnlyForItsOwnNode) {
  Start();
  testing::TestAgent real(As("worker01"), "worker01", 1);
  ASSERT_TRUE(real.Connect()) << real.status().error_message();
  ASSERT_TRUE(real.Transition(1, true, 0, "80E01801"));

  testing::TestAgent impostor(As("worker02"), "worker01", 2);
  EXPECT_FALSE(impostor.Connect());
  EXPECT_EQ(impostor.status().error_code(), grpc::StatusCode::PERMISSION_DENIED) << impostor.status().error_message();
  // A viewer may not open an agent stream at all.
  testing::TestAgent viewer(As("viewer"), "worker01", 3);
  EXPECT_FALSE(viewer.Connect());
  EXPECT_EQ(viewer.status().error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // The real stream is untouched: it still gets acks, its fault is active.
  ASSERT_TRUE(real.Transition(2, true, 1, "80E01801"));
  auto q = v1::ClusterService::NewStub(As("viewer"));
  grpc::ClientContext ctx;
  v1::ListFaultsRequest req;
  req.set_node("worker01");
  v1::ListFaultsResponse resp;
  ASSERT_TRUE(q->ListFaults(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.faults_size(), 2);
  for (const auto& f : resp.faults()) EXPECT_EQ(f.state(), v1::FAULT_STATE_ACTIVE);

  // An agent may only be an agent.
  EXPECT_EQ(Summary(As("worker01")), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SecurityTest, ViewerCannotCordonAndTheActorIsThePrincipal) {
  Start();
  testing::TestAgent agent(As("worker01"), "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  v1::CordonNodeRequest req;
  req.set_node("worker01");
  req.set_actor("mallory");
  req.set_reason("test");
  {
    auto admin = v1::AdminService::NewStub(As("viewer"));
    grpc::ClientContext ctx;
    v1::CordonNodeResponse resp;
    auto st = admin->CordonNode(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
    EXPECT_NE(st.error_message().find("alice"), std::string::npos) << st.error_message();
  }
  {
    auto q = v1::ClusterService::NewStub(As("viewer"));
    grpc::ClientContext ctx;
    v1::GetNodeRequest get;
    get.set_name("worker01");
    v1::GetNodeResponse node;
    ASSERT_TRUE(q->GetNode(&ctx, get, &node).ok());
    EXPECT_FALSE(node.node().cordoned());
  }
  uint64_t revision = 0;
  {
    auto admin = v1::AdminService::NewStub(As("operator"));
    grpc::ClientContext ctx;
    v1::CordonNodeResponse resp;
    auto st = admin->CordonNode(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(resp.node().cordoned());
    revision = resp.node().revision();
  }
  // The stored event names bob (the certificate), not the claimed mallory.
  auto q = v1::ClusterService::NewStub(As("viewer"));
  grpc::ClientContext ctx;
  v1::WatchRequest watch;
  watch.add_types(v1::EVENT_TYPE_NODE_CORDONED);
  auto stream = q->Watch(&ctx, watch);
  v1::WatchResponse batch;
  bool seen = false;
  while (!seen && stream->Read(&batch)) {
    for (const auto& e : batch.events()) {
      if (e.type() != v1::EVENT_TYPE_NODE_CORDONED) continue;
      EXPECT_EQ(e.actor(), "bob");
      EXPECT_LE(e.revision(), revision);
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
  ctx.TryCancel();

  // Pause is for admins; the token's user is the recorded actor.
  v1::SetRecoveryModeRequest pause;
  pause.set_recovery_paused(true);
  pause.set_actor("mallory");
  pause.set_reason("maintenance");
  {
    auto admin = v1::AdminService::NewStub(As("operator"));
    grpc::ClientContext c;
    v1::SetRecoveryModeResponse resp;
    EXPECT_EQ(admin->SetRecoveryMode(&c, pause, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    auto admin = v1::AdminService::NewStub(WithToken("admin"));
    grpc::ClientContext c;
    v1::SetRecoveryModeResponse resp;
    auto st = admin->SetRecoveryMode(&c, pause, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(resp.state().recovery_paused());
    EXPECT_EQ(resp.state().actor(), "root-op");
  }
}

v1::ReportRequest Report(const std::string& reporter, const std::string& id, bool raise) {
  v1::ReportRequest r;
  r.set_reporter(reporter);
  r.set_id(id);
  r.set_node("worker01");
  r.set_code("NODE_NETWORK_DOWN");
  r.set_level(v1::FAULT_LEVEL_SUB_HEALTH);
  r.set_action(raise ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
  return r;
}

TEST_F(SecurityTest, AReporterReportsAndClearsOnlyUnderItsOwnName) {
  Start();
  testing::TestAgent agent(As("worker01"), "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  auto netprobe = v1::FaultService::NewStub(As("reporter"));
  auto diskwatch = v1::FaultService::NewStub(As("reporter2"));
  std::string fault_id;
  {
    grpc::ClientContext ctx;
    v1::ReportResponse resp;
    auto st = netprobe->Report(&ctx, Report("netprobe", "link-1", true), &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    fault_id = resp.fault().id();
  }
  {
    // Raising under another reporter's name.
    grpc::ClientContext ctx;
    v1::ReportResponse resp;
    EXPECT_EQ(netprobe->Report(&ctx, Report("diskwatch", "x", true), &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    // Clearing netprobe's fault as diskwatch, through Report ...
    grpc::ClientContext ctx;
    v1::ReportResponse resp;
    auto st = diskwatch->Report(&ctx, Report("netprobe", "link-1", false), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  }
  {
    // ... or through AdminService.
    auto admin = v1::AdminService::NewStub(As("reporter2"));
    grpc::ClientContext ctx;
    v1::ClearFaultRequest clear;
    clear.set_fault_id(fault_id);
    clear.set_reason("x");
    v1::ClearFaultResponse resp;
    EXPECT_EQ(admin->ClearFault(&ctx, clear, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  auto q = v1::ClusterService::NewStub(As("viewer"));
  grpc::ClientContext ctx;
  v1::ListFaultsRequest req;
  req.set_node("worker01");
  v1::ListFaultsResponse resp;
  ASSERT_TRUE(q->ListFaults(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.faults_size(), 1);
  EXPECT_EQ(resp.faults(0).state(), v1::FAULT_STATE_ACTIVE);
}

// MindCluster public faults: a reporter sends under its own resource name.
TEST_F(SecurityTest, APublicFaultSourceSendsOnlyAsItsOwnResource) {
  Start("request", [](ClusterdConfig& cfg) { cfg.pubfault.resources = {"netprobe", "pingmesh"}; });
  testing::TestAgent agent(As("worker01"), "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  auto send = [&](const std::string& cert, const std::string& resource, ::RespStatus* resp) {
    ::PublicFaultRequest r;
    r.set_id("req-00000001");
    r.set_timestamp(1'700'000'000'000);
    r.set_version("1.0");
    r.set_resource(resource);
    auto* f = r.add_faults();
    f->set_faultid("fault-0001");
    f->set_faulttype("Network");
    f->set_faultcode("220001001");
    f->set_assertion("occur");
    auto* in = f->add_influence();
    in->set_nodename("worker01");
    in->add_deviceids(0);
    auto stub = ::PubFault::NewStub(As(cert));
    grpc::ClientContext ctx;
    return stub->SendPublicFault(&ctx, r, resp);
  };
  ::RespStatus resp;
  auto st = send("reporter", "netprobe", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.code(), 0) << resp.info();
  st = send("reporter", "pingmesh", &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  st = send("viewer", "netprobe", &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  st = send("admin", "pingmesh", &resp);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(resp.code(), 0) << resp.info();
}

grpc::Status Attach(const std::shared_ptr<grpc::Channel>& ch, const std::string& job) {
  auto stub = v1::JobService::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub->Attach(&ctx);
  v1::AttachRequest hello;
  hello.mutable_hello()->set_job_id(job);
  stream->Write(hello);
  v1::AttachResponse resp;
  if (stream->Read(&resp) && resp.has_attached()) {
    ctx.TryCancel();
    stream->Finish().ok();
    return grpc::Status::OK;
  }
  stream->WritesDone();
  return stream->Finish();
}

TEST_F(SecurityTest, AJobAgentAttachesOnlyToItsOwnJob) {
  Start();
  testing::TestAgent agent(As("worker01"), "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  auto jobs = v1::JobService::NewStub(As("operator"));
  for (const char* id : {"train-1", "train-2"}) {
    v1::CreateJobRequest create;
    create.mutable_job()->set_id(id);
    create.mutable_job()->set_kind(v1::JOB_KIND_TRAINING);
    auto* p = create.mutable_job()->add_placement();
    p->set_rank(0);
    p->set_node("worker01");
    p->set_device_id(0);
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    ASSERT_TRUE(jobs->CreateJob(&ctx, create, &resp).ok());
  }
  EXPECT_TRUE(Attach(As("jobagent"), "train-1").ok());
  auto st = Attach(As("jobagent"), "train-2");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_EQ(Attach(As("viewer"), "train-1").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // A job agent reads nothing else.
  EXPECT_EQ(Summary(As("jobagent")), grpc::StatusCode::PERMISSION_DENIED);
  // TaskD's Recover service: the same scope.
  auto recover = ::Recover::NewStub(As("jobagent"));
  auto init = [&](const std::string& job) {
    ::ClientInfo req;
    req.set_jobid(job);
    grpc::ClientContext ctx;
    ::Status resp;
    grpc::Status st = recover->Init(&ctx, req, &resp);
    return st.ok() ? grpc::StatusCode::OK : st.error_code();
  };
  EXPECT_EQ(init("train-1"), grpc::StatusCode::OK);  // (code 403: not opted in)
  EXPECT_EQ(init("train-2"), grpc::StatusCode::PERMISSION_DENIED);
}

// The Recover service's NIC switch and stress test: an operator asks, a
// viewer may follow the result, a job's TaskD carries out its own job's only.
TEST_F(SecurityTest, NicSwitchesAreAskedByOperatorsAndCarriedByTheirJobsTaskd) {
  Start();
  auto switch_nic = [&](const std::string& who, const std::string& job) {
    ::SwitchNics req;
    req.set_jobid(job);
    grpc::ClientContext ctx;
    ::Status resp;
    grpc::Status st = ::Recover::NewStub(As(who))->SwitchNicTrack(&ctx, req, &resp);
    return st.ok() ? grpc::StatusCode::OK : st.error_code();
  };
  EXPECT_EQ(switch_nic("operator", "train-1"), grpc::StatusCode::OK);  // (code 413: no such job)
  EXPECT_EQ(switch_nic("jobagent", "train-1"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(switch_nic("viewer", "train-1"), grpc::StatusCode::PERMISSION_DENIED);
  auto reply = [&](const std::string& who, const std::string& job) {
    ::SwitchResult req;
    req.set_jobid(job);
    grpc::ClientContext ctx;
    ::Status resp;
    grpc::Status st = ::Recover::NewStub(As(who))->ReplySwitchNicResult(&ctx, req, &resp);
    return st.ok() ? grpc::StatusCode::OK : st.error_code();
  };
  EXPECT_EQ(reply("jobagent", "train-1"), grpc::StatusCode::OK);  // (code 400: not registered)
  EXPECT_EQ(reply("jobagent", "train-2"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(reply("operator", "train-1"), grpc::StatusCode::PERMISSION_DENIED);
  // A viewer follows a job's result (none yet: FAILED_PRECONDITION, not a refusal).
  ::StressTestRequest watch;
  watch.set_jobid("train-1");
  grpc::ClientContext ctx;
  auto results = ::Recover::NewStub(As("viewer"))->SubscribeStressTestResponse(&ctx, watch);
  ::StressTestResponse msg;
  EXPECT_FALSE(results->Read(&msg));
  EXPECT_EQ(results->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// MindCluster's TrainingDataTrace: an operator sets a job's profiling
// switch; a job's agent (TaskD) reads and follows its own job's only.
TEST_F(SecurityTest, ProfilingSwitchesAreSetByOperatorsAndReadByTheirJobsAgent) {
  Start();
  auto jobs = v1::JobService::NewStub(As("operator"));
  for (const char* id : {"train-1", "train-2"}) {
    v1::CreateJobRequest create;
    create.mutable_job()->set_id(id);
    create.mutable_job()->set_kind(v1::JOB_KIND_TRAINING);
    (*create.mutable_job()->mutable_labels())["k8s.namespace"] = "default";
    (*create.mutable_job()->mutable_labels())["k8s.name"] = id;
    auto* p = create.mutable_job()->add_placement();
    p->set_rank(0);
    p->set_node("worker01");
    p->set_device_id(0);
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    ASSERT_TRUE(jobs->CreateJob(&ctx, create, &resp).ok());
  }
  auto modify = [&](const std::string& who, const std::string& job) {
    ::DataTypeReq req;
    req.set_jobnsname(job);
    for (auto* f :
         {req.mutable_profilingswitch()->mutable_communicationoperator(), req.mutable_profilingswitch()->mutable_step(),
          req.mutable_profilingswitch()->mutable_savecheckpoint(), req.mutable_profilingswitch()->mutable_fp(),
          req.mutable_profilingswitch()->mutable_dataloader()}) {
      *f = "on";
    }
    grpc::ClientContext ctx;
    ::DataTypeRes resp;
    return ::TrainingDataTrace::NewStub(As(who))->ModifyTrainingDataTraceSwitch(&ctx, req, &resp).error_code();
  };
  auto get = [&](const std::string& who, const std::string& job) {
    ::DataStatusReq req;
    req.set_jobnsname(job);
    grpc::ClientContext ctx;
    ::DataStatusRes resp;
    grpc::Status st = ::TrainingDataTrace::NewStub(As(who))->GetTrainingDataTraceSwitch(&ctx, req, &resp);
    return st.ok() ? resp.code() : -static_cast<int>(st.error_code());
  };
  EXPECT_EQ(modify("jobagent", "default/train-1"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(modify("viewer", "default/train-1"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(modify("operator", "default/train-1"), grpc::StatusCode::OK);
  EXPECT_EQ(modify("operator", "default/train-2"), grpc::StatusCode::OK);
  EXPECT_EQ(get("viewer", "default/train-2"), 200);
  EXPECT_EQ(get("jobagent", "default/train-1"), 200);
  EXPECT_EQ(get("jobagent", "default/train-2"), -static_cast<int>(grpc::StatusCode::PERMISSION_DENIED));
  EXPECT_EQ(get("reporter", "default/train-1"), -static_cast<int>(grpc::StatusCode::PERMISSION_DENIED));
  // Subscribe: the own job's stream says its switch; another job's is refused.
  auto stub = ::TrainingDataTrace::NewStub(As("jobagent"));
  ::ProfilingClientInfo own, other;
  own.set_jobid("train-1");
  other.set_jobid("train-2");
  grpc::ClientContext own_ctx, other_ctx;
  auto own_stream = stub->SubscribeDataTraceSwitch(&own_ctx, own);
  ::DataStatusRes msg;
  ASSERT_TRUE(own_stream->Read(&msg));
  EXPECT_EQ(msg.profilingswitch().fp(), "on");
  own_ctx.TryCancel();
  own_stream->Finish().ok();
  auto other_stream = stub->SubscribeDataTraceSwitch(&other_ctx, other);
  EXPECT_FALSE(other_stream->Read(&msg));
  EXPECT_EQ(other_stream->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

// A renewed server certificate is served to new connections; an agent
// stream opened before keeps working.
TEST_F(SecurityTest, CertificateRotationKeepsStreams) {
  Start();
  testing::TestAgent agent(As("worker01"), "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  ASSERT_TRUE(agent.Transition(1, true, 0, "80E01801"));

  auto served = [this]() -> std::string {
    auto ch = As("viewer");
    auto stub = v1::ClusterService::NewStub(ch);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetSummaryResponse resp;
    if (!stub->GetSummary(&ctx, v1::GetSummaryRequest(), &resp).ok()) return "";
    auto pems = ctx.auth_context()->FindPropertyValues("x509_pem_cert");
    return pems.empty() ? "" : std::string(pems.front().data(), pems.front().size());
  };
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string first = read(Certs::Get().Path("server.crt"));
  const std::string second = read(Certs::Get().Path("server2.crt"));
  ASSERT_NE(first, second);
  EXPECT_EQ(served(), first);
  // Replace key and certificate the way a Secret update does (rename).
  std::filesystem::copy_file(Certs::Get().Path("server2.key"), dir_.Sub("tls.key.new"));
  std::filesystem::copy_file(Certs::Get().Path("server2.crt"), dir_.Sub("tls.crt.new"));
  std::filesystem::rename(dir_.Sub("tls.key.new"), dir_.Sub("tls.key"));
  std::filesystem::rename(dir_.Sub("tls.crt.new"), dir_.Sub("tls.crt"));
  EXPECT_TRUE(WaitFor([&] { return served() == second; }, std::chrono::seconds(30)));
  // The stream from before the rotation is still acknowledged.
  EXPECT_TRUE(agent.Transition(2, true, 1, "80E01801"));
}

TEST_F(SecurityTest, MetricsNeedAViewersTokenWhenAsked) {
  Start("request", [](ClusterdConfig& cfg) { cfg.auth.metrics_auth = true; });
  EXPECT_EQ(Https("/metrics").status, 401);
  EXPECT_EQ(Https("/metrics", "Bearer wrong").status, 401);
  EXPECT_EQ(Https("/metrics", Bearer("reporter")).status, 403);
  auto ok = Https("/metrics", Bearer("viewer"));
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("clusterd_auth_requests_total"), std::string::npos);
  // The scheme is case-insensitive (RFC 7235), as on the gRPC port; another scheme is refused.
  EXPECT_EQ(Https("/metrics", "bearer " + Certs::Get().Token("viewer")).status, 200);
  EXPECT_EQ(Https("/metrics", "BEARER " + Certs::Get().Token("viewer")).status, 200);
  EXPECT_EQ(Https("/metrics", "Basic " + Certs::Get().Token("viewer")).status, 401);
  EXPECT_EQ(Https("/metrics", "Bearer").status, 401);
  // A client certificate does as well as a token.
  EXPECT_EQ(Https("/metrics", "", "viewer").status, 200);
  EXPECT_EQ(Https("/metrics", "", "reporter").status, 403);
  // Probes stay open.
  EXPECT_EQ(Https("/healthz").status, 200);
  EXPECT_EQ(Https("/readyz").status, 200);
}

// metrics_role: /metrics for operators (and admins) only.
TEST_F(SecurityTest, MetricsRoleIsConfigurable) {
  Start("request", [](ClusterdConfig& cfg) {
    cfg.auth.metrics_auth = true;
    cfg.auth.metrics_role = "operator";
  });
  EXPECT_EQ(Https("/metrics", Bearer("viewer")).status, 403);
  EXPECT_EQ(Https("/metrics", Bearer("operator")).status, 200);
  EXPECT_EQ(Https("/metrics", "", "admin").status, 200);
  bool help = false;
  auto parsed = ParseClusterdFlags({"--metrics-role", "reporter", "--insecure"}, &help);
  EXPECT_FALSE(parsed.ok());
  parsed = ParseClusterdFlags({"--metrics-role", "admin", "--insecure"}, &help);
  EXPECT_FALSE(parsed.ok());  // insecure takes no auth setting
}

// The HTTP port speaks TLS with the gRPC port's certificate and client CA:
// no plaintext, no client certificate from another CA or expired, and the
// right code for a missing or wrong token; every refusal audited and
// counted.
TEST_F(SecurityTest, HttpPortIsTlsAndRefusesWhatGrpcRefuses) {
  Start("request");
  const int http = server_->http_port();
  // Plaintext: the handshake fails, nothing is answered.
  EXPECT_EQ(testing::HttpGet(http, "/readyz").status, 0);
  EXPECT_EQ(testing::HttpGet(http, "/api/v1/summary", Bearer("viewer")).status, 0);
  // A client that does not trust the server's CA refuses it.
  auto untrusted = Https("/readyz", "", "", "other-ca.crt");
  EXPECT_EQ(untrusted.status, 0);
  EXPECT_FALSE(untrusted.tls_error.empty());
  // Client certificates from another CA, or expired: refused in the handshake.
  EXPECT_EQ(Https("/api/v1/summary", "", "wrongca").status, 0);
  EXPECT_EQ(Https("/api/v1/summary", "", "expired").status, 0);
  EXPECT_EQ(Https("/api/v1/summary", Bearer("viewer"), "expired").status, 0);
  // Tokens and certificates: 401 without or with a wrong one, 403 without the role.
  const double unauthenticated_before = AuthCount("unauthenticated");
  const double denied_before = AuthCount("denied");
  EXPECT_EQ(Https("/api/v1/summary").status, 401);
  EXPECT_EQ(Https("/api/v1/summary", "Bearer not-a-token").status, 401);
  EXPECT_EQ(Https("/api/v1/summary", Bearer("reporter")).status, 403);
  EXPECT_EQ(Https("/api/v1/summary", "", "norole").status, 403);
  EXPECT_EQ(AuthCount("unauthenticated"), unauthenticated_before + 2);
  EXPECT_EQ(AuthCount("denied"), denied_before + 2);
  EXPECT_EQ(Https("/api/v1/summary", Bearer("viewer")).status, 200);
  EXPECT_EQ(Https("/api/v1/summary", "", "viewer").status, 200);
  EXPECT_EQ(Https("/api/v1/summary", "", "operator").status, 200);
  // The bad handshakes are counted.
  auto metrics = Https("/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_GE(testing::MetricValue(metrics.body, "clusterd_http_tls_handshake_failures_total"), 5);
}

// Under tls_client_auth "require" the HTTP port needs a client certificate
// too; the probe-only port (probe_listen) answers the kubelet in plaintext,
// /healthz and /readyz only.
TEST_F(SecurityTest, ProbePortServesProbesOnly) {
  Start("require", [](ClusterdConfig& cfg) { cfg.probe_listen = "127.0.0.1:0"; });
  EXPECT_EQ(Https("/readyz").status, 0);
  EXPECT_EQ(Https("/readyz", "", "viewer").status, 200);
  const int probe = server_->probe_port();
  ASSERT_GT(probe, 0);
  EXPECT_EQ(testing::HttpGet(probe, "/healthz").status, 200);
  EXPECT_EQ(testing::HttpGet(probe, "/readyz").status, 200);
  EXPECT_EQ(testing::HttpGet(probe, "/readyz/writes").status, 200);
  for (const char* path : {"/metrics", "/api/v1/summary", "/", "/index.html"}) {
    EXPECT_EQ(testing::HttpGet(probe, path, Bearer("viewer")).status, 404) << path;
  }
}

// The HTTP certificate is rotated without a restart: new connections get
// the new one within tls_reload_interval.
TEST_F(SecurityTest, HttpCertificateRotationWithoutRestart) {
  Start("request");
  const Certs& c = Certs::Get();
  const std::string first = testing::ReadWholeFile(c.Path("server.crt"));
  const std::string second = testing::ReadWholeFile(c.Path("server2.crt"));
  ASSERT_NE(first, second);
  auto served = [&] { return Https("/healthz").server_certificate_pem; };
  EXPECT_EQ(served(), first);
  // Both files replaced atomically, as a Secret volume does.
  std::filesystem::copy_file(c.Path("server2.crt"), dir_.Sub("tls.crt.new"));
  std::filesystem::copy_file(c.Path("server2.key"), dir_.Sub("tls.key.new"));
  std::filesystem::rename(dir_.Sub("tls.key.new"), dir_.Sub("tls.key"));
  std::filesystem::rename(dir_.Sub("tls.crt.new"), dir_.Sub("tls.crt"));
  EXPECT_TRUE(WaitFor([&] { return served() == second; }, std::chrono::seconds(30)));
  EXPECT_EQ(Https("/api/v1/summary", Bearer("viewer")).status, 200);
}

class FakeReviewer final : public TokenReviewer {
 public:
  StatusOr<TokenReviewResult> Review(const std::string& token) override {
    ++calls;
    TokenReviewResult r;
    if (token == "noded-token") {
      r.authenticated = true;
      r.user = "system:serviceaccount:cluster-system:noded";
      r.groups = {"system:serviceaccounts", "system:authenticated"};
      r.node_name = "worker07";
    } else if (token == "netprobe-token") {
      r.authenticated = true;
      r.user = "system:serviceaccount:monitoring:netprobe";
      r.groups = {"system:serviceaccounts:monitoring"};
    } else if (token == "down") {
      return Unavailable("connection refused");
    }
    return r;
  }
  int calls = 0;
};

// TokenReview: a pod-bound token of NodeD's service account is the agent of
// the node it is bound to; other accounts get roles from bindings; answers
// are cached; an unreachable API is UNAVAILABLE, not a silent refusal.
TEST(TokenReviewAuthTest, AgentsAndBindings) {
  FakeReviewer reviewer;
  AuthOptions o;
  o.reviewer = &reviewer;
  o.agent_service_accounts = {"cluster-system/noded"};
  auto b = ParseRoleBinding("reporter=group:system:serviceaccounts:monitoring");
  ASSERT_TRUE(b.ok());
  o.bindings.push_back(*b);
  auto auth = MakeAuthenticator(o, nullptr);
  auto agent = auth->AuthenticateToken("noded-token", "peer");
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  EXPECT_EQ(agent->method, "token-review");
  EXPECT_TRUE(MayActForNode(*agent, "worker07"));
  EXPECT_FALSE(MayActForNode(*agent, "worker08"));
  EXPECT_EQ(agent->roles, RoleBit(Role::kAgent));
  auto probe = auth->AuthenticateToken("netprobe-token", "peer");
  ASSERT_TRUE(probe.ok());
  EXPECT_TRUE(MayReportAs(*probe, "netprobe"));
  EXPECT_FALSE(MayReportAs(*probe, "diskwatch"));
  EXPECT_FALSE(MayActForNode(*probe, "worker07"));  // not an agent account, no node
  EXPECT_EQ(auth->AuthenticateToken("bogus", "peer").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(auth->AuthenticateToken("down", "peer").status().code(), StatusCode::kUnavailable);
  const int calls = reviewer.calls;
  ASSERT_TRUE(auth->AuthenticateToken("noded-token", "peer").ok());
  EXPECT_EQ(reviewer.calls, calls);  // cached
}

// A reviewer that holds every call until released.
class BlockingReviewer final : public TokenReviewer {
 public:
  StatusOr<TokenReviewResult> Review(const std::string&) override {
    std::unique_lock lock(mu);
    ++waiting;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
    return TokenReviewResult{};
  }
  std::mutex mu;
  std::condition_variable cv;
  int waiting = 0;
  bool released = false;
};

// Reviews in flight are bounded: past the bound a caller is told to retry
// at once rather than holding one more gRPC thread on a slow API server.
TEST(TokenReviewAuthTest, ReviewsInFlightAreBounded) {
  BlockingReviewer reviewer;
  AuthOptions o;
  o.reviewer = &reviewer;
  MetricsRegistry metrics;
  auto auth = MakeAuthenticator(o, &metrics);
  std::vector<std::thread> held;
  for (int i = 0; i < 16; ++i) {
    held.emplace_back([&, i] { (void)auth->AuthenticateToken("token-" + std::to_string(i), "peer"); });
  }
  {
    std::unique_lock lock(reviewer.mu);
    ASSERT_TRUE(reviewer.cv.wait_for(lock, std::chrono::seconds(30), [&] { return reviewer.waiting == 16; }));
  }
  auto busy = auth->AuthenticateToken("one-more", "peer");
  EXPECT_EQ(busy.status().code(), StatusCode::kUnavailable) << busy.status().ToString();
  EXPECT_NE(metrics.Render().find("clusterd_auth_token_review_busy_total 1"), std::string::npos);
  {
    std::lock_guard lock(reviewer.mu);
    reviewer.released = true;
  }
  reviewer.cv.notify_all();
  for (auto& t : held) t.join();
}

TEST(TokenReviewAuthTest, ParsesTheApiAnswer) {
  auto r = ParseTokenReview(R"({"kind":"TokenReview","status":{"authenticated":true,"user":{"username":
      "system:serviceaccount:ns:noded","groups":["system:serviceaccounts"],"extra":{
      "authentication.kubernetes.io/node-name":["worker01"],"authentication.kubernetes.io/pod-name":["noded-x"]}},
      "audiences":["clusterd"]}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->authenticated);
  EXPECT_EQ(r->user, "system:serviceaccount:ns:noded");
  EXPECT_EQ(r->node_name, "worker01");
  auto no = ParseTokenReview(R"({"status":{"authenticated":false,"error":"token expired"}})");
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(no->authenticated);
  EXPECT_EQ(no->error, "token expired");
  EXPECT_FALSE(ParseTokenReview("not json").ok());
  EXPECT_FALSE(ParseTokenReview(R"({"status":{"authenticated":true,"user":{}}})").ok());
  EXPECT_NE(TokenReviewRequestBody("t", "clusterd").find("\"audiences\":[\"clusterd\"]"), std::string::npos);
}

// The JSON API on the HTTP port is read-only and needs a viewer's token
// unless ClusterD runs --insecure.
TEST_F(SecurityTest, TheJsonApiNeedsAViewersToken) {
  Start();
  EXPECT_EQ(Https("/api/v1/summary").status, 401);
  EXPECT_EQ(Https("/api/v1/nodes", "Bearer nope").status, 401);
  EXPECT_EQ(Https("/api/v1/events", Bearer("reporter")).status, 403);
  EXPECT_EQ(Https("/api/v1/summary", Bearer("viewer")).status, 200);
  EXPECT_EQ(Https("/api/v1/nodes/x", Bearer("operator")).status, 404);
}

// The status page holds no data (it reads the API with the viewer's token),
// so it is served to anyone.
TEST_F(SecurityTest, TheStatusPageNeedsNoToken) {
  Start();
  for (const char* path : {"/", "/index.html"}) {
    auto page = Https(path);
    EXPECT_EQ(page.status, 200) << path;
    EXPECT_EQ(page.content_type, "text/html; charset=utf-8") << path;
    EXPECT_EQ(page.body, StatusPageHtml()) << path;
  }
  EXPECT_EQ(StatusPageHtml().substr(0, 15), "<!DOCTYPE html>");
  EXPECT_NE(StatusPageHtml().find("window.clusterdStatus"), std::string_view::npos);
}

// Every method of every service in proto/ (read from the source tree, so a
// new file or method is seen) has an entry in the one table, and the table
// names no method that does not exist.
std::vector<std::string> DeclaredMethods() {
  std::vector<std::string> files;
  for (const char* dir : {"clusterd/v1", "grpc/health/v1", "mindcluster"}) {
    for (const auto& e : std::filesystem::directory_iterator(std::string(CLUSTERD_PROTO_DIR "/") + dir)) {
      if (e.path().extension() == ".proto") files.push_back(std::string(dir) + "/" + e.path().filename().string());
    }
  }
  std::vector<std::string> methods;
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const auto& f : files) {
    const auto* file = pool->FindFileByName(f);
    EXPECT_NE(file, nullptr) << f << " is not linked into the server";
    if (file == nullptr) continue;
    for (int s = 0; s < file->service_count(); ++s) {
      const auto* svc = file->service(s);
      for (int m = 0; m < svc->method_count(); ++m)
        methods.push_back("/" + svc->full_name() + "/" + svc->method(m)->name());
    }
  }
  return methods;
}

TEST(AuthzTableTest, EveryDeclaredMethodHasARule) {
  auto methods = DeclaredMethods();
  EXPECT_GE(methods.size(), 20u);
  std::set<std::string> declared(methods.begin(), methods.end());
  for (const auto& m : methods) EXPECT_NE(FindMethodRule(m), nullptr) << m << " has no entry in edge/authz.cc";
  for (const auto& r : MethodRules()) {
    if (r.method.rfind("/grpc.reflection.", 0) == 0) continue;  // gRPC's own service
    EXPECT_TRUE(declared.count(std::string(r.method))) << r.method << " is in the table but declared nowhere";
  }
}

// Each principal calls every method with an empty request: the answer is an
// authorization refusal exactly when the table says so. This catches a
// handler that forgets to ask, or asks under another method's name.
TEST_F(SecurityTest, EveryMethodEnforcesItsRule) {
  // All principals' calls are open at once (below), from one address.
  Start("request", [](ClusterdConfig& cfg) {
    cfg.max_streams_per_peer = 100'000;
    cfg.max_watch_streams_per_peer = 100'000;
  });
  struct Who {
    std::string cert;
    RoleMask roles;
  };
  const std::vector<Who> principals = {
      {"viewer", RoleBit(Role::kViewer)},
      {"operator", RoleBit(Role::kOperator)},
      {"admin", RoleBit(Role::kAdmin)},
      {"reporter", RoleBit(Role::kReporter)},
      {"jobagent", RoleBit(Role::kJobAgent)},
      {"worker01", RoleBit(Role::kAgent)},
      {"norole", 0},
      {"", 0},
  };
  const auto methods = DeclaredMethods();
  // One thread per principal: an allowed stream stays open until its
  // deadline, so one principal after the other would wait that out each time.
  auto check = [&](const Who& who) {
    auto ch = As(who.cert);
    grpc::GenericStub generic(ch);
    {
      // The TLS handshake first, so that a slow one (a sanitizer build, a
      // loaded machine) is not taken for an open stream below.
      auto health = grpc::health::v1::Health::NewStub(ch);
      grpc::ClientContext warm;
      warm.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      grpc::health::v1::HealthCheckResponse resp;
      ASSERT_TRUE(health->Check(&warm, grpc::health::v1::HealthCheckRequest(), &resp).ok());
    }
    // Every method of this principal at once, too.
    struct Call {
      std::string method;
      bool allowed = false;
      grpc::ClientContext ctx;
      grpc::ByteBuffer request, response;
      grpc::Status status;
      bool done = false;
    };
    std::vector<std::unique_ptr<Call>> calls;
    std::mutex mu;
    std::condition_variable cv;
    for (const auto& m : methods) {
      const MethodRule* rule = FindMethodRule(m);
      ASSERT_NE(rule, nullptr);
      std::string full_name = m.substr(1);
      std::replace(full_name.begin(), full_name.end(), '/', '.');
      const auto* md = google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full_name);
      ASSERT_NE(md, nullptr) << m;
      const bool stream = md->client_streaming() || md->server_streaming();
      auto call = std::make_unique<Call>();
      call->method = m;
      call->allowed = rule->anyone || (who.roles & (rule->roles | RoleBit(Role::kAdmin))) != 0;
      // Streams that are allowed stay open: the deadline ends them (a refusal
      // comes at once). A unary call always answers.
      call->ctx.set_deadline(std::chrono::system_clock::now() +
                             (stream ? std::chrono::milliseconds(5000) : std::chrono::milliseconds(30'000)));
      grpc::Slice empty("");  // an empty message
      call->request = grpc::ByteBuffer(&empty, 1);
      calls.push_back(std::move(call));
    }
    for (auto& c : calls) {
      Call* call = c.get();
      generic.UnaryCall(&call->ctx, call->method, grpc::StubOptions(), &call->request, &call->response,
                        [&, call](grpc::Status st) {
                          std::lock_guard lock(mu);
                          call->status = std::move(st);
                          call->done = true;
                          cv.notify_all();
                        });
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return std::all_of(calls.begin(), calls.end(), [](const auto& c) { return c->done; }); });
    for (const auto& call : calls) {
      const auto code = call->status.error_code();
      const bool refused = code == grpc::StatusCode::PERMISSION_DENIED || code == grpc::StatusCode::UNAUTHENTICATED;
      EXPECT_EQ(refused, !call->allowed) << (who.cert.empty() ? "anonymous" : who.cert) << " " << call->method << ": "
                                         << code << " " << call->status.error_message();
      if (who.cert.empty() && !call->allowed) {
        EXPECT_EQ(code, grpc::StatusCode::UNAUTHENTICATED) << call->method;
      }
    }
  };
  std::vector<std::thread> threads;
  for (const auto& who : principals) threads.emplace_back(check, std::cref(who));
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace clusterd
