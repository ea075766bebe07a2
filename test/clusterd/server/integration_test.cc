// Extension points: an integration driven through its command facade (the
// fake, then a real server's), and the authentication seam's default.
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/engine/integration.h"
#include "clusterd/edge/auth.h"
#include "clusterd/server/registries.h"
#include "clusterd/server/server.h"
#include "clusterd/v1/admin.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "test/support/fakes/fake_cluster_commands.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/server/server_fixture.h"
#include "test/support/temp_dir.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

// What a job-discovery integration does, in miniature: it finds a job on a
// node, reports an external fault there and cordons the node. Work() runs on
// the caller's thread (a real integration would use its own); Stop() clears
// the fault, which needs the writer still running.
class ToyIntegration final : public Integration {
 public:
  explicit ToyIntegration(std::string node) : node_(std::move(node)) {}

  std::string_view name() const override { return "toy"; }

  Status Start(const IntegrationEnv& env) override {
    env_ = env;
    ++starts;
    // Reads work from the start.
    auto jobs = env.commands->ListJobs(v1::ListJobsRequest());
    jobs_at_start = jobs.ok() ? jobs->jobs_size() : -1;
    return Status::Ok();
  }

  void Stop() override {
    ++stops;
    if (!env_.commands || !clear_on_stop) return;
    auto cleared = AwaitReply<v1::ReportResponse>(
        [&](auto reply) { env_.commands->ReportFault(Report(v1::TRANSITION_ACTION_CLEAR), reply); });
    clear_at_stop = cleared.status();
  }

  Status Work() {
    v1::Job job;
    job.set_id("toy-job");
    job.set_kind(v1::JOB_KIND_TRAINING);
    for (uint32_t r = 0; r < 2; ++r) {
      auto* p = job.add_placement();
      p->set_rank(r);
      p->set_node(node_);
      p->set_device_id(r);
    }
    auto created = AwaitReply<v1::Job>([&](auto reply) { env_.commands->CreateJob(job, reply); });
    if (!created.ok()) return created.status();
    job_revision = created->revision();
    auto reported = AwaitReply<v1::ReportResponse>(
        [&](auto reply) { env_.commands->ReportFault(Report(v1::TRANSITION_ACTION_RAISE), reply); });
    if (!reported.ok()) return reported.status();
    fault_revision = reported->revision();
    auto cordoned = AwaitReply<v1::Node>(
        [&](auto reply) { env_.commands->SetCordon(node_, true, "toy found a bad switch port", reply); });
    return cordoned.status();
  }

  ClusterCommands* commands() const { return env_.commands; }

  int starts = 0;
  int stops = 0;
  int jobs_at_start = -2;
  bool clear_on_stop = false;
  Status clear_at_stop = Internal("not stopped");
  uint64_t job_revision = 0;
  uint64_t fault_revision = 0;

 private:
  v1::ReportRequest Report(v1::TransitionAction action) const {
    v1::ReportRequest r;
    r.set_reporter("toy");
    r.set_id("port-7");
    r.set_node(node_);
    r.set_code("NODE_NETWORK_DOWN");
    r.set_level(v1::FAULT_LEVEL_SEPARATE);
    r.set_action(action);
    r.set_message("switch port 7 down");
    return r;
  }

  std::string node_;
  IntegrationEnv env_;
};

TEST(IntegrationTest, ToyIntegrationAgainstTheFakeFacade) {
  Principal principal;
  principal.kind = Principal::Kind::kInternal;
  principal.name = "toy";
  testing::FakeClusterCommands fake(principal);
  ToyIntegration toy("worker01");
  ASSERT_TRUE(toy.Start(IntegrationEnv{&fake, nullptr, nullptr}).ok());
  EXPECT_EQ(toy.jobs_at_start, 0);
  ASSERT_TRUE(toy.Work().ok());
  ASSERT_EQ(fake.jobs.count("toy-job"), 1u);
  ASSERT_EQ(fake.reports.size(), 1u);
  EXPECT_EQ(fake.reports[0].reporter(), "toy");
  EXPECT_EQ(fake.cordons["worker01"].actor, "toy");
  EXPECT_TRUE(fake.cordons["worker01"].cordoned);
  EXPECT_EQ(fake.ListFaults({})->faults_size(), 1);
  toy.clear_on_stop = true;
  toy.Stop();
  EXPECT_TRUE(toy.clear_at_stop.ok());
  EXPECT_EQ(fake.ListFaults({})->faults_size(), 0);

  // A refused write is replied to with the refusal.
  fake.refusal = Unavailable("writes refused: disk full");
  auto refused = AwaitReply<uint64_t>([&](auto reply) { fake.DeleteJob("toy-job", reply); });
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
}

TEST(IntegrationTest, RegistryCreatesByNameAndRejectsUnknownNames) {
  IntegrationRegistry registry;
  ASSERT_TRUE(registry
                  .Register("toy",
                            [](const ClusterdConfig&) -> StatusOr<std::unique_ptr<Integration>> {
                              return std::unique_ptr<Integration>(std::make_unique<ToyIntegration>("worker01"));
                            })
                  .ok());
  EXPECT_FALSE(
      registry
          .Register("toy",
                    [](const ClusterdConfig&) -> StatusOr<std::unique_ptr<Integration>> { return Internal("unused"); })
          .ok());
  EXPECT_FALSE(
      registry
          .Register("",
                    [](const ClusterdConfig&) -> StatusOr<std::unique_ptr<Integration>> { return Internal("unused"); })
          .ok());
  EXPECT_FALSE(registry.Register("empty", nullptr).ok());
  EXPECT_EQ(registry.Names(), std::vector<std::string>{"toy"});
  auto made = registry.Create("toy", ClusterdConfig());
  ASSERT_TRUE(made.ok());
  EXPECT_EQ((*made)->name(), "toy");
  auto unknown = registry.Create("kubernetes", ClusterdConfig());
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("kubernetes"), std::string::npos);
  // The shipped ones.
  EXPECT_EQ(BuiltinIntegrations().Names(), (std::vector<std::string>{"kubernetes", "mindcluster", "mindcluster-jobs"}));
}

class ServerIntegrationTest : public ::testing::Test {
 protected:
  ClusterdConfig Config() {
    ClusterdConfig cfg = testing::LoopbackConfig(dir_.Sub("data"));
    return cfg;
  }
  testing::TempDir dir_;
};

// The toy, given a real server's facade, creates a job, reports a fault and
// cordons a node: the state has them (through gRPC and through the facade),
// the cordon records the integration as its actor, and all of it survives a
// restart. The integration starts after the writer and stops before it (its
// Stop still gets a durable write).
TEST_F(ServerIntegrationTest, WritesThroughTheFacadeAreDurable) {
  uint64_t cordon_revision = 0;
  {
    auto owned = std::make_unique<ToyIntegration>("worker01");
    ToyIntegration* toy = owned.get();
    toy->clear_on_stop = true;
    ClusterdServer server(Config());
    server.AddIntegration(std::move(owned));
    ASSERT_TRUE(server.Start().ok());
    EXPECT_EQ(toy->starts, 1);
    EXPECT_EQ(toy->jobs_at_start, 0);

    auto channel = testing::Dial(server.grpc_port());
    testing::TestAgent agent(channel, "worker01", 1);
    ASSERT_TRUE(agent.Connect());
    Status worked = toy->Work();
    ASSERT_TRUE(worked.ok()) << worked.ToString();
    EXPECT_GT(toy->fault_revision, toy->job_revision);

    // Seen through gRPC, like any other write.
    auto jobs = v1::JobService::NewStub(channel);
    {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_id("toy-job");
      v1::GetJobResponse resp;
      ASSERT_TRUE(jobs->GetJob(&ctx, req, &resp).ok());
      // The fault hits both of the job's ranks on the node.
      EXPECT_EQ(resp.job().impacts_size(), 1);
    }
    auto cluster = v1::ClusterService::NewStub(channel);
    {
      grpc::ClientContext ctx;
      v1::ListFaultsRequest req;
      req.set_active_only(true);
      v1::ListFaultsResponse resp;
      ASSERT_TRUE(cluster->ListFaults(&ctx, req, &resp).ok());
      ASSERT_EQ(resp.faults_size(), 1);
      EXPECT_EQ(resp.faults(0).reporter(), "toy");
      EXPECT_EQ(resp.faults(0).external_id(), "port-7");
    }
    // The cordon event names the integration as its actor.
    {
      grpc::ClientContext ctx;
      v1::WatchRequest req;
      req.set_from_revision(0);
      auto stream = cluster->Watch(&ctx, req);
      v1::WatchResponse resp;
      bool found = false;
      while (!found && stream->Read(&resp)) {
        for (const auto& e : resp.events()) {
          if (e.type() != v1::EVENT_TYPE_NODE_CORDONED) continue;
          EXPECT_EQ(e.actor(), "toy");
          cordon_revision = e.revision();
          found = true;
        }
      }
      ctx.TryCancel();
      (void)stream->Finish();  // cancelled by us
      ASSERT_TRUE(found);
    }
    server.Shutdown();
    EXPECT_EQ(toy->stops, 1);
    EXPECT_TRUE(toy->clear_at_stop.ok()) << toy->clear_at_stop.ToString();
  }

  // After a restart, the facade of a new integration reads what the first
  // one wrote, including the clear made in its Stop.
  auto owned = std::make_unique<ToyIntegration>("worker01");
  ToyIntegration* toy = owned.get();
  ClusterdServer server(Config());
  server.AddIntegration(std::move(owned));
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(toy->jobs_at_start, 1);
  auto job = toy->commands()->GetJob("toy-job");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  v1::ListFaultsRequest all;
  all.set_node("worker01");
  auto faults = toy->commands()->ListFaults(all);
  ASSERT_TRUE(faults.ok());
  int toys = 0;
  for (const auto& f : faults->faults()) {
    if (f.reporter() != "toy") continue;
    ++toys;
    EXPECT_EQ(f.state(), v1::FAULT_STATE_CLEARED);
  }
  EXPECT_EQ(toys, 1);
  v1::GetNodeRequest get;
  get.set_name("worker01");
  auto node = toy->commands()->GetNode(get);
  ASSERT_TRUE(node.ok());
  EXPECT_TRUE(node->node().cordoned());
  EXPECT_GE(node->node().revision(), cordon_revision);
  // A write that the state refuses is replied to with its error.
  auto missing = AwaitReply<uint64_t>([&](auto reply) { toy->commands()->DeleteJob("no-such-job", reply); });
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  v1::ReportRequest bad;
  bad.set_reporter("toy/x");
  auto invalid = AwaitReply<v1::ReportResponse>([&](auto reply) { toy->commands()->ReportFault(bad, reply); });
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
}

// The separation policy an integration sets (the mindcluster integration's
// clusterd-config-cm) is the writer's from then on, and a device it releases
// (an operator's deletion in clusterd-manual-info-cm) is released as
// AdminService.ReleaseDevice does, the actor the facade's principal and who
// asked it.
TEST_F(ServerIntegrationTest, SeparationPolicyAndReleaseThroughTheFacade) {
  auto owned = std::make_unique<ToyIntegration>("worker01");
  ToyIntegration* toy = owned.get();
  ClusterdServer server(Config());
  server.AddIntegration(std::move(owned));
  ASSERT_TRUE(server.Start().ok());
  auto channel = testing::Dial(server.grpc_port());
  testing::TestAgent agent(channel, "worker01", 1);
  ASSERT_TRUE(agent.Connect());

  SeparationPolicy bad;
  bad.threshold = 99;
  auto refused = AwaitReply<bool>([&](auto reply) { toy->commands()->SetSeparationPolicy(bad, reply); });
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  SeparationPolicy one;
  one.threshold = 1;
  one.settle = std::chrono::seconds(0);
  auto set = AwaitReply<bool>([&](auto reply) { toy->commands()->SetSeparationPolicy(one, reply); });
  ASSERT_TRUE(set.ok()) << set.status().ToString();

  // One fault separates now.
  v1::ReportRequest r;
  r.set_reporter("toy");
  r.set_id("chip-3");
  r.set_node("worker01");
  r.set_device_id(3);
  r.set_code("80E01801");
  r.set_level(v1::FAULT_LEVEL_SEPARATE);
  r.set_action(v1::TRANSITION_ACTION_RAISE);
  ASSERT_TRUE(AwaitReply<v1::ReportResponse>([&](auto reply) { toy->commands()->ReportFault(r, reply); }).ok());
  v1::GetNodeRequest get;
  get.set_name("worker01");
  auto separated = [&] {
    auto node = toy->commands()->GetNode(get);
    if (!node.ok()) return false;
    for (const auto& d : node->devices()) {
      if (d.id() == 3) return d.separated();
    }
    return false;
  };
  ASSERT_TRUE(testing::WaitFor(separated));

  auto released = AwaitReply<v1::Device>([&](auto reply) {
    toy->commands()->ReleaseDevice("worker01", 3, "kubectl-edit", "deleted from cluster-system/clusterd-manual-info-cm",
                                   reply);
  });
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_FALSE(released->separated());
  auto cluster = v1::ClusterService::NewStub(channel);
  grpc::ClientContext ctx;
  v1::WatchRequest req;
  req.add_types(v1::EVENT_TYPE_DEVICE_RELEASED);
  auto stream = cluster->Watch(&ctx, req);
  v1::WatchResponse resp;
  bool found = false;
  while (!found && stream->Read(&resp)) {
    for (const auto& e : resp.events()) {
      if (e.type() != v1::EVENT_TYPE_DEVICE_RELEASED) continue;
      EXPECT_EQ(e.actor(), "toy/kubectl-edit");
      EXPECT_EQ(e.reason(), "deleted from cluster-system/clusterd-manual-info-cm");
      found = true;
    }
  }
  ctx.TryCancel();
  (void)stream->Finish();
  EXPECT_TRUE(found);
  // A device that is not there: the state's refusal.
  auto missing = AwaitReply<v1::Device>(
      [&](auto reply) { toy->commands()->ReleaseDevice("worker01", 77, "", "no such chip", reply); });
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  server.Shutdown();
}

// NodesChangedSince on a real server: every node at first, then only those
// whose record, faults or jobs' ranks changed, with what a follower needs.
TEST_F(ServerIntegrationTest, NodesChangedSinceFollowsRecordsFaultsAndJobs) {
  auto owned = std::make_unique<ToyIntegration>("worker01");
  ToyIntegration* toy = owned.get();
  ClusterdServer server(Config());
  server.AddIntegration(std::move(owned));
  ASSERT_TRUE(server.Start().ok());
  auto channel = testing::Dial(server.grpc_port());
  testing::TestAgent w1(channel, "worker01", 1, 2), w2(channel, "worker02", 1, 2);
  ASSERT_TRUE(w1.Connect());
  ASSERT_TRUE(w2.Connect());
  ClusterCommands* commands = toy->commands();

  auto all = commands->NodesChangedSince(0);
  ASSERT_EQ(all.nodes.size(), 2u);
  EXPECT_EQ(all.nodes[0].node.name(), "worker01");
  EXPECT_EQ(all.nodes[0].devices.size(), 2u);
  EXPECT_TRUE(all.nodes[0].devices_in_use.empty());
  EXPECT_TRUE(commands->NodesChangedSince(all.revision).nodes.empty());

  // A job on worker01 (devices 0 and 1), a fault there, a cordon: worker01 only.
  ASSERT_TRUE(toy->Work().ok());
  auto changed = commands->NodesChangedSince(all.revision);
  ASSERT_EQ(changed.nodes.size(), 1u);
  const auto& v = changed.nodes[0];
  EXPECT_EQ(v.node.name(), "worker01");
  EXPECT_TRUE(v.node.cordoned());
  ASSERT_EQ(v.active_faults.size(), 1u);
  EXPECT_EQ(v.active_faults[0].reporter(), "toy");
  EXPECT_EQ(v.devices_in_use, (std::vector<uint32_t>{0, 1}));

  // The job deleted: worker01 again, its devices free.
  auto deleted = AwaitReply<uint64_t>([&](auto reply) { commands->DeleteJob("toy-job", reply); });
  ASSERT_TRUE(deleted.ok());
  auto after = commands->NodesChangedSince(changed.revision);
  ASSERT_EQ(after.nodes.size(), 1u);
  EXPECT_EQ(after.nodes[0].node.name(), "worker01");
  EXPECT_TRUE(after.nodes[0].devices_in_use.empty());
  server.Shutdown();
}

// A step retry through TaskD holds its trigger fault (NodeView::held_fault_ids):
// the "mindcluster" integration keeps it from Volcano meanwhile.
TEST_F(ServerIntegrationTest, NodesChangedSinceNamesTheFaultsARetryThroughTaskdHolds) {
  auto owned = std::make_unique<ToyIntegration>("worker01");
  ToyIntegration* toy = owned.get();
  ClusterdServer server(Config());
  server.AddIntegration(std::move(owned));
  ASSERT_TRUE(server.Start().ok());
  auto channel = testing::Dial(server.grpc_port());
  testing::TestAgent w1(channel, "worker01", 1, 2);
  ASSERT_TRUE(w1.Connect());
  ClusterCommands* commands = toy->commands();
  auto create = [&](const std::string& id, uint32_t device, bool taskd) {
    v1::Job job;
    job.set_id(id);
    job.set_kind(v1::JOB_KIND_TRAINING);
    job.mutable_policy()->mutable_hold_down()->set_seconds(0);
    auto* p = job.add_placement();
    p->set_rank(0);
    p->set_node("worker01");
    p->set_device_id(device);
    if (taskd) (*job.mutable_labels())["mindcluster/process-recover-enable"] = "on";
    return AwaitReply<v1::Job>([&](auto reply) { commands->CreateJob(job, reply); }).ok();
  };
  ASSERT_TRUE(create("with-taskd", 0, true));
  ASSERT_TRUE(create("without", 1, false));
  const uint64_t before = commands->NodesChangedSince(0).revision;
  // RESTART_REQUEST on both chips: a STEP_RETRY each, RUNNING (no agent yet).
  ASSERT_TRUE(w1.Transition(1, true, 0, "80BB8000"));
  ASSERT_TRUE(w1.Transition(2, true, 1, "80BB8000"));
  ClusterCommands::NodeChanges changes;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        changes = commands->NodesChangedSince(before);
        return changes.nodes.size() == 1 && !changes.nodes[0].held_fault_ids.empty();
      },
      std::chrono::seconds(30)));
  const auto& v = changes.nodes[0];
  ASSERT_EQ(v.held_fault_ids.size(), 1u);  // the job without TaskD holds nothing
  std::string held_device;
  for (const auto& f : v.active_faults) {
    if (f.id() == v.held_fault_ids[0]) held_device = std::to_string(f.device_id());
  }
  EXPECT_EQ(held_device, "0");
  server.Shutdown();
}

TEST_F(ServerIntegrationTest, AFailingStartFailsTheServerAndStillStops) {
  class Failing final : public Integration {
   public:
    explicit Failing(int* stops) : stops_(stops) {}
    std::string_view name() const override { return "failing"; }
    Status Start(const IntegrationEnv&) override { return Unavailable("no API server"); }
    void Stop() override { ++*stops_; }

   private:
    int* stops_;
  };
  int stops = 0;
  {
    ClusterdServer server(Config());
    server.AddIntegration(std::make_unique<Failing>(&stops));
    Status st = server.Start();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.message(), "integration failing: no API server");
  }
  EXPECT_EQ(stops, 1);
  // A configured name that is not registered fails the start too.
  ClusterdConfig cfg = Config();
  cfg.integrations = {"kubernetes"};
  ClusterdServer server(cfg);
  EXPECT_FALSE(server.Start().ok());
}

// The default authenticator trusts the client-written actor (kClaimed) and
// otherwise makes the caller anonymous, recording no actor; the writes that
// need one keep refusing an empty actor, as before.
TEST(AuthTest, ClaimedActorAuthenticator) {
  auto auth = MakeClaimedActorAuthenticator();
  grpc::ServerContext ctx;
  auto alice = auth->Authenticate(ctx, "alice");
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->kind, Principal::Kind::kClaimed);
  EXPECT_EQ(alice->actor(), "alice");
  auto nobody = auth->Authenticate(ctx, "");
  ASSERT_TRUE(nobody.ok());
  EXPECT_EQ(nobody->kind, Principal::Kind::kAnonymous);
  EXPECT_EQ(nobody->actor(), "");
  EXPECT_STREQ(PrincipalKindName(nobody->kind), "anonymous");
}

TEST_F(ServerIntegrationTest, AdminWritesRecordTheClaimedActorAndRefuseNone) {
  ClusterdServer server(Config());
  ASSERT_TRUE(server.Start().ok());
  auto channel = testing::Dial(server.grpc_port());
  testing::TestAgent agent(channel, "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  auto admin = v1::AdminService::NewStub(channel);
  {
    grpc::ClientContext ctx;
    v1::SetRecoveryModeRequest req;
    req.set_recovery_paused(true);
    req.set_reason("maintenance");
    v1::SetRecoveryModeResponse resp;
    grpc::Status st = admin->SetRecoveryMode(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("actor"), std::string::npos) << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    v1::SetRecoveryModeRequest req;
    req.set_recovery_paused(true);
    req.set_reason("maintenance");
    req.set_actor("alice");
    v1::SetRecoveryModeResponse resp;
    ASSERT_TRUE(admin->SetRecoveryMode(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.state().actor(), "alice");
  }
  {
    grpc::ClientContext ctx;
    v1::CordonNodeRequest req;
    req.set_node("worker01");
    req.set_reason("disk swap");
    v1::CordonNodeResponse resp;
    EXPECT_EQ(admin->CordonNode(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
}

}  // namespace
}  // namespace clusterd
