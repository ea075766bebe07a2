// The kubernetes integration's loop (clusterd/k8s/integration.h) on the
// in-memory API server (fake_k8s_client.h) and ClusterD's commands faked
// (fake_cluster_commands.h): stepped by hand on a FakeClock, after the
// informers have seen every change (FakeK8sClient::WaitCaughtUp), so each
// Step sees exactly the cluster the test made.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include <gtest/gtest.h>

#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/dra.h"
#include "clusterd/k8s/integration.h"
#include "clusterd/k8s/requests.h"
#include "test/support/fakes/fake_cluster_commands.h"
#include "k8s_objects.h"

namespace clusterd {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::kJobUid;
using testing::NodeObject;
using testing::NodePathOf;
using testing::PodObject;
using testing::PodPathOf;
using testing::RulePathOf;
using testing::RulesPath;

class K8sIntegrationTest : public ::testing::Test {
 protected:
  void TearDown() override { StopIntegration(); }

  void StartIntegration() {
    ctx_ = KubernetesContext::Create(world_.settings, world_.api);
    integration_ = std::make_unique<KubernetesIntegration>(ctx_, KubernetesIntegration::Driver::kManual);
    env_ = IntegrationEnv{&commands_, &world_.clock, nullptr};
    ASSERT_TRUE(integration_->Start(env_).ok());
    world_.Watching();
  }
  void StopIntegration() {
    if (integration_) integration_->Stop();
    integration_.reset();
    ctx_.reset();
  }
  // After the test changed the cluster: let the informers see it, then step.
  KubernetesIntegration::StepResult Step() {
    world_.Settle();
    return integration_->Step();
  }
  // The next node pass.
  KubernetesIntegration::StepResult Pass() {
    world_.clock.Advance(world_.settings.condition_interval);
    return Step();
  }

  // Ranks as "rank:node:device".
  static std::vector<std::string> Placement(const v1::Job& job) {
    std::vector<std::string> out;
    for (const auto& p : job.placement()) {
      out.push_back(std::to_string(p.rank()) + ":" + p.node() + ":" + std::to_string(p.device_id()));
    }
    return out;
  }

  // worker01 in ClusterD: device 0 isolated, device 3 returned to service
  // (UncordonNode).
  void Device0IsolatedDevice3Released() {
    v1::Node n;
    n.set_name("worker01");
    commands_.nodes["worker01"] = n;
    v1::Device d0;
    d0.set_id(0);
    d0.set_isolated(true);
    v1::Device d3;
    d3.set_id(3);
    commands_.devices["worker01"] = {d0, d3};
  }

  void SetReady(const std::string& node, const std::string& ready) {
    world_.api->Set(NodePathOf(node), NodeObject(node, ready));
  }

  testing::K8sWorld world_;
  testing::FakeClusterCommands commands_;
  std::shared_ptr<KubernetesContext> ctx_;
  std::unique_ptr<KubernetesIntegration> integration_;
  IntegrationEnv env_;
};

TEST_F(K8sIntegrationTest, JobFollowsItsPods) {
  StartIntegration();
  EXPECT_TRUE(Step().jobs);
  ASSERT_EQ(commands_.jobs.size(), 1u);
  const v1::Job& job = commands_.jobs.at(kJobUid);
  EXPECT_EQ(job.source(), "kubernetes");
  EXPECT_EQ(job.kind(), v1::JOB_KIND_TRAINING);
  EXPECT_EQ(Placement(job), (std::vector<std::string>{"0:worker01:0", "1:worker01:1", "2:worker02:0", "3:worker02:1"}));
  EXPECT_EQ(job.labels().at("k8s.namespace"), "train");
  EXPECT_EQ(job.labels().at("k8s.name"), "llm");
  EXPECT_EQ(job.labels().at("k8s.podgroup"), "llm");

  // Nothing changed: nothing written.
  const uint64_t revision = commands_.revision;
  Step();
  Pass();
  EXPECT_EQ(commands_.revision, revision);

  // The controller replaced llm-worker-1 on worker03: ranks 2 and 3 move.
  world_.api->Remove(PodPathOf("llm-worker-1"));
  world_.api->Set(PodPathOf("llm-worker-1"), PodObject("llm-worker-1", "pod-uid-1b", "worker03", 1));
  Step();
  EXPECT_EQ(Placement(commands_.jobs.at(kJobUid)),
            (std::vector<std::string>{"0:worker01:0", "1:worker01:1", "2:worker03:0", "3:worker03:1"}));

  // Its pods are gone: so is the job.
  world_.api->Remove(PodPathOf("llm-worker-0"));
  world_.api->Remove(PodPathOf("llm-worker-1"));
  Step();
  EXPECT_TRUE(commands_.jobs.empty());
}

// GPU pods that do not name their devices are placed on the devices their
// node's kubelet gave them once NodeD reports them (Inventory.pod_devices):
// the job is written again at the next node pass, and a restarted integration
// reads them before it writes anything.
TEST_F(K8sIntegrationTest, KubeletDevicesNodeDReportsPlaceGpuPods) {
  for (const char* name : {"llm-worker-0", "llm-worker-1"}) {
    json pod = *world_.api->Object(PodPathOf(name));
    pod["metadata"]["annotations"].erase("huawei.com/AscendReal");
    pod["spec"]["containers"][0]["resources"] = json{{"limits", {{"nvidia.com/gpu", "2"}}}};
    world_.api->Set(PodPathOf(name), pod);
  }
  auto report = [&](const std::string& node, const std::string& pod, std::vector<uint32_t> ids) {
    v1::Node& n = commands_.nodes[node];
    n.set_name(node);
    n.mutable_inventory()->clear_pod_devices();
    auto* pd = n.mutable_inventory()->add_pod_devices();
    pd->set_namespace_("train");
    pd->set_name(pod);
    for (uint32_t id : ids) pd->add_device_ids(id);
  };
  auto placed = [&] {
    std::vector<std::string> out;
    for (const auto& p : commands_.jobs.at(kJobUid).placement()) {
      out.push_back(std::to_string(p.rank()) + ":" + p.node() + ":" +
                    (p.has_device_id() ? std::to_string(p.device_id())
                     : p.any_device()  ? "any"
                                       : "-"));
    }
    return out;
  };
  StartIntegration();
  Step();
  EXPECT_EQ(placed(),
            (std::vector<std::string>{"0:worker01:any", "1:worker01:any", "2:worker02:any", "3:worker02:any"}));
  report("worker01", "llm-worker-0", {5, 6});
  report("worker02", "llm-worker-1", {0, 3});
  Pass();
  EXPECT_EQ(placed(), (std::vector<std::string>{"0:worker01:5", "1:worker01:6", "2:worker02:0", "3:worker02:3"}));
  // The kubelet's view of worker02 changes (NodeD's next report).
  report("worker02", "llm-worker-1", {1, 2});
  Pass();
  EXPECT_EQ(placed(), (std::vector<std::string>{"0:worker01:5", "1:worker01:6", "2:worker02:1", "3:worker02:2"}));
  // Restarted: the first pass already places them; nothing is written again.
  StopIntegration();
  const uint64_t revision = commands_.jobs.at(kJobUid).revision();
  StartIntegration();
  Step();
  Pass();
  EXPECT_EQ(commands_.jobs.at(kJobUid).revision(), revision);
}

TEST_F(K8sIntegrationTest, AJobWhosePodsAllTerminateKeepsItsPlacement) {
  StartIntegration();
  Step();
  ASSERT_EQ(commands_.jobs.count(kJobUid), 1u);
  const uint64_t revision = commands_.revision;
  for (const char* name : {"llm-worker-0", "llm-worker-1"}) {
    json pod = *world_.api->Object(PodPathOf(name));
    pod["metadata"]["deletionTimestamp"] = "2026-11-30T01:02:03Z";
    world_.api->Set(PodPathOf(name), pod);
  }
  Step();
  ASSERT_EQ(commands_.jobs.count(kJobUid), 1u);  // an empty placement would be refused; deleting cancels recoveries
  EXPECT_EQ(commands_.jobs.at(kJobUid).placement_size(), 4);
  EXPECT_EQ(commands_.revision, revision);
}

TEST_F(K8sIntegrationTest, StartsFromWhatClusterdHoldsAndRewritesNothingAfterARestart) {
  v1::Job gone;  // discovered before, its pods deleted while ClusterD was down
  gone.set_id("gone-job");
  gone.set_source("kubernetes");
  commands_.jobs["gone-job"] = gone;
  v1::Job api;  // registered through the API: not discovery's
  api.set_id("api-job");
  commands_.jobs["api-job"] = api;
  StartIntegration();
  Step();
  EXPECT_EQ(commands_.jobs.count("gone-job"), 0u);
  EXPECT_EQ(commands_.jobs.count("api-job"), 1u);
  EXPECT_EQ(commands_.jobs.count(kJobUid), 1u);

  // A restart: a new integration over a new context finds the job as it
  // would write it, and writes nothing.
  StopIntegration();
  const uint64_t revision = commands_.jobs.at(kJobUid).revision();
  StartIntegration();
  Step();
  EXPECT_EQ(commands_.jobs.at(kJobUid).revision(), revision);
}

TEST_F(K8sIntegrationTest, AJobWriteRefusedIsTriedAgainAtTheNextPass) {
  StartIntegration();
  commands_.refusal = Status(StatusCode::kUnavailable, "writes are refused: the disk is full");
  Step();
  EXPECT_TRUE(commands_.jobs.empty());
  commands_.refusal = Status::Ok();
  // No pod changes again: the next pass writes the job all the same.
  Pass();
  ASSERT_EQ(commands_.jobs.count(kJobUid), 1u);
  EXPECT_EQ(commands_.jobs.at(kJobUid).placement_size(), 4);

  // A job refused for what it is waits for its pods to change.
  world_.api->Set(PodPathOf("llm-worker-2"), PodObject("llm-worker-2", "pod-uid-2", "worker03", 2));
  commands_.refusal = Status(StatusCode::kFailedPrecondition, "job is not discovery's");
  Step();
  commands_.refusal = Status::Ok();
  Pass();
  EXPECT_EQ(commands_.jobs.at(kJobUid).placement_size(), 4);
  world_.api->Set(PodPathOf("llm-worker-2"), PodObject("llm-worker-2", "pod-uid-2", "worker04", 2));
  Step();
  EXPECT_EQ(commands_.jobs.at(kJobUid).placement_size(), 6);
}

TEST_F(K8sIntegrationTest, NodeReadinessRaisesAndClearsAFault) {
  StartIntegration();
  Step();
  // At start every Ready node is cleared once (a fault raised before a
  // restart goes away).
  ASSERT_EQ(commands_.reports.size(), 2u);
  for (const auto& r : commands_.reports) EXPECT_EQ(r.action(), v1::TRANSITION_ACTION_CLEAR);
  commands_.reports.clear();

  SetReady("worker02", "False");
  Step();
  ASSERT_EQ(commands_.reports.size(), 1u);
  const v1::ReportRequest& raised = commands_.reports[0];
  EXPECT_EQ(raised.action(), v1::TRANSITION_ACTION_RAISE);
  EXPECT_EQ(raised.reporter(), "kubernetes");
  EXPECT_EQ(raised.id(), "node-ready.worker02");
  EXPECT_EQ(raised.node(), "worker02");
  EXPECT_EQ(raised.code(), "NODE_NOT_READY");
  EXPECT_EQ(raised.level(), v1::FAULT_LEVEL_PRE_SEPARATE);
  EXPECT_EQ(raised.message(), "Kubernetes Node Ready=NotReady (KubeletNotReady): test");

  // Reported once per change, not at every pass.
  Pass();
  EXPECT_EQ(commands_.reports.size(), 1u);

  SetReady("worker02", "True");
  Step();
  ASSERT_EQ(commands_.reports.size(), 2u);
  EXPECT_EQ(commands_.reports[1].action(), v1::TRANSITION_ACTION_CLEAR);
  EXPECT_EQ(commands_.reports[1].id(), "node-ready.worker02");
}

TEST_F(K8sIntegrationTest, AReadinessReportRefusedIsSentAgainAtTheNextPass) {
  world_.settings.node_not_ready_level = v1::FAULT_LEVEL_SEPARATE;
  SetReady("worker02", "Unknown");
  StartIntegration();
  commands_.refusal = Status(StatusCode::kUnavailable, "writes are refused");
  Step();
  EXPECT_TRUE(commands_.reports.empty());
  commands_.refusal = Status::Ok();
  Step();  // no change, no pass due: nothing
  EXPECT_TRUE(commands_.reports.empty());
  EXPECT_TRUE(Pass().nodes);
  ASSERT_EQ(commands_.reports.size(), 2u);
  bool raised = false;
  for (const auto& r : commands_.reports) {
    if (r.node() != "worker02") continue;
    raised = true;
    EXPECT_EQ(r.action(), v1::TRANSITION_ACTION_RAISE);
    EXPECT_EQ(r.level(), v1::FAULT_LEVEL_SEPARATE);
  }
  EXPECT_TRUE(raised);
}

TEST_F(K8sIntegrationTest, TheNodeConditionAndDeviceMarkFollowClusterdsState) {
  v1::Node n;
  n.set_name("worker01");
  n.set_health(v1::HEALTH_UNHEALTHY);
  n.set_worst_level(v1::FAULT_LEVEL_SEPARATE);
  n.set_active_faults(1);
  commands_.nodes["worker01"] = n;
  commands_.node_faults["worker01"] = {testing::ChipFault("worker01", "4C4BA00C", 0)};
  v1::Device d;
  d.set_id(0);
  d.set_isolated(true);
  commands_.devices["worker01"] = {d};
  StartIntegration();
  EXPECT_TRUE(Step().nodes);

  auto condition = [&]() -> json {
    json node = *world_.api->Object(NodePathOf("worker01"));
    for (const auto& c : node["status"]["conditions"]) {
      if (c["type"] == "AcceleratorHealthy") return c;
    }
    return nullptr;
  };
  json c = condition();
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["status"], "False");
  EXPECT_EQ(c["reason"], "AcceleratorFaulty");
  EXPECT_EQ(c["message"], "worst level SEPARATE; 1 active fault: 4C4BA00C (device 0, SEPARATE); isolated devices: 0");
  EXPECT_EQ(c["lastTransitionTime"], k8s::Rfc3339(world_.clock.Now(), false));
  EXPECT_EQ(world_.api->CallsTo("PATCH", "/api/v1/nodes/worker01/status").at(0).content_type,
            "application/strategic-merge-patch+json");
  EXPECT_EQ(k8s::Annotation(*world_.api->Object(NodePathOf("worker01")), "clusterd.io/isolated-devices"), "0");
  // The Ready condition is the kubelet's: untouched.
  EXPECT_EQ(world_.api->Object(NodePathOf("worker01"))->at("status").at("conditions").at(0).at("type"), "Ready");

  // Unchanged: not written again.
  world_.api->ClearCalls();
  Pass();
  EXPECT_TRUE(world_.api->Writes().empty());

  // Healthy again: the device mark goes at once, the better condition only
  // after it held for two passes.
  n.set_health(v1::HEALTH_HEALTHY);
  n.set_worst_level(v1::FAULT_LEVEL_UNSPECIFIED);
  n.set_active_faults(0);
  commands_.nodes["worker01"] = n;
  commands_.node_faults.clear();
  commands_.devices.clear();
  Pass();
  EXPECT_EQ(condition()["status"], "False");
  EXPECT_EQ(k8s::Annotation(*world_.api->Object(NodePathOf("worker01")), "clusterd.io/isolated-devices"), "");
  Pass();
  EXPECT_EQ(condition()["status"], "True");
  EXPECT_EQ(condition()["reason"], "AcceleratorHealthy");
}

// worker01 as isolate_node left it at `at`.
json IsolatedNode(const std::string& at, bool cordoned_by_us) {
  json node = NodeObject("worker01");
  node["spec"]["unschedulable"] = true;
  node["spec"]["taints"] = json::array({{{"key", "clusterd.io/fault"}, {"value", "SEPARATE"}, {"effect", "NoSchedule"}},
                                        {{"key", "other"}, {"effect", "NoSchedule"}}});
  node["metadata"]["annotations"] = {{"clusterd.io/isolated-at", at}};
  if (cordoned_by_us) node["metadata"]["annotations"]["clusterd.io/cordoned"] = "true";
  return node;
}

// The kubelet offers fewer NPUs than NodeD sees usable (the device plugin
// down, or seeing a fault ClusterD does not): a fault naming both numbers
// once it held for a minute, cleared when the numbers agree again.
TEST_F(K8sIntegrationTest, AllocatableBelowTheUsableChipsIsAFaultAfterAMinute) {
  v1::Node n;
  n.set_name("worker01");
  n.set_health(v1::HEALTH_HEALTHY);
  for (uint32_t i = 0; i < 8; ++i) {
    auto* d = n.mutable_inventory()->add_devices();
    d->set_id(i);
    d->set_vendor("huawei");
  }
  commands_.nodes["worker01"] = n;
  auto set_allocatable = [&](const std::string& alloc) {
    json obj = NodeObject("worker01");
    obj["status"]["capacity"] = {{"cpu", "192"}, {"huawei.com/Ascend910", "8"}};
    obj["status"]["allocatable"] = {{"cpu", "190"}, {"huawei.com/Ascend910", alloc}};
    world_.api->Set(NodePathOf("worker01"), obj);
  };
  auto mismatch_reports = [&] {
    std::vector<v1::ReportRequest> out;
    for (const auto& r : commands_.reports) {
      if (r.code() == "NODE_ALLOCATABLE_MISMATCH") out.push_back(r);
    }
    return out;
  };
  set_allocatable("8");
  StartIntegration();
  Step();
  Pass();
  EXPECT_TRUE(mismatch_reports().empty());

  set_allocatable("6");
  Pass();
  EXPECT_TRUE(mismatch_reports().empty());  // not yet: a plugin restarting looks the same for a moment
  for (int i = 0; i < 20 && mismatch_reports().empty(); ++i) Pass();
  auto reports = mismatch_reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].action(), v1::TRANSITION_ACTION_RAISE);
  EXPECT_EQ(reports[0].reporter(), "kubernetes");
  EXPECT_EQ(reports[0].id(), "allocatable.worker01");
  EXPECT_EQ(reports[0].level(), v1::FAULT_LEVEL_SUB_HEALTH);
  EXPECT_EQ(reports[0].message(),
            "NodeD sees 8 usable NPU(s) (8 in all) while the kubelet offers 6 huawei.com/Ascend910 (capacity 8): the "
            "device plugin is down or sees faults ClusterD does not");

  // ClusterD holds it now; two chips become unusable in ClusterD too (one
  // isolated, one unhealthy): 6 usable, 6 offered, cleared.
  v1::Fault held;
  held.set_node("worker01");
  held.set_reporter("kubernetes");
  held.set_code("NODE_ALLOCATABLE_MISMATCH");
  held.set_state(v1::FAULT_STATE_ACTIVE);
  commands_.node_faults["worker01"] = {held};
  commands_.nodes["worker01"].set_active_faults(1);
  Pass();
  EXPECT_EQ(mismatch_reports().size(), 1u);  // still short: not raised twice
  v1::Device isolated, unhealthy;
  isolated.set_id(2);
  isolated.set_isolated(true);
  unhealthy.set_id(5);
  unhealthy.set_health(v1::HEALTH_UNHEALTHY);
  commands_.devices["worker01"] = {isolated, unhealthy};
  ++commands_.revision;
  Pass();
  reports = mismatch_reports();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].action(), v1::TRANSITION_ACTION_CLEAR);
  EXPECT_EQ(reports[1].id(), "allocatable.worker01");

  // A Node without any Ascend resource in its capacity is not judged.
  commands_.node_faults.erase("worker01");
  commands_.devices.erase("worker01");
  commands_.nodes["worker01"].set_active_faults(0);
  world_.api->Set(NodePathOf("worker01"), NodeObject("worker01"));
  for (int i = 0; i < 10; ++i) Pass();
  EXPECT_EQ(mismatch_reports().size(), 2u);
}

TEST_F(K8sIntegrationTest, ANodeReturnedToServiceIsUntaintedAfterTheGrace) {
  world_.api->Set(NodePathOf("worker01"), IsolatedNode(k8s::Rfc3339(world_.clock.Now(), false), true));
  v1::Node n;
  n.set_name("worker01");
  n.set_health(v1::HEALTH_HEALTHY);
  commands_.nodes["worker01"] = n;  // not isolated in ClusterD (uncordoned, or the result not stored yet)
  StartIntegration();
  Step();
  // Within the grace (3 passes): the result of isolate_node may not be stored yet.
  EXPECT_TRUE(world_.api->CallsTo("PATCH", "/api/v1/nodes/worker01").empty());
  world_.clock.Advance(3 * world_.settings.condition_interval);
  Step();
  json node = *world_.api->Object(NodePathOf("worker01"));
  EXPECT_FALSE(k8s::HasTaint(node, "clusterd.io/fault"));
  EXPECT_TRUE(k8s::HasTaint(node, "other"));
  EXPECT_FALSE(k8s::Unschedulable(node));
  EXPECT_EQ(k8s::Annotation(node, "clusterd.io/isolated-at"), "");
  EXPECT_EQ(k8s::Annotation(node, "clusterd.io/cordoned"), "");
}

TEST_F(K8sIntegrationTest, AnIsolatedNodeKeepsItsTaintAndAnAdministratorsCordonStays) {
  world_.api->Set(NodePathOf("worker01"), IsolatedNode("2020-01-01T00:00:00Z", false));
  world_.api->Set(NodePathOf("worker02"), IsolatedNode("2020-01-01T00:00:00Z", true));
  v1::Node n1;
  n1.set_name("worker01");
  commands_.nodes["worker01"] = n1;
  v1::Node n2;
  n2.set_name("worker02");
  n2.set_isolated(true);  // still isolated in ClusterD
  commands_.nodes["worker02"] = n2;
  StartIntegration();
  Step();
  json w1 = *world_.api->Object(NodePathOf("worker01"));
  EXPECT_FALSE(k8s::HasTaint(w1, "clusterd.io/fault"));
  EXPECT_TRUE(k8s::Unschedulable(w1));  // an administrator cordoned it, not ClusterD
  EXPECT_TRUE(k8s::HasTaint(*world_.api->Object(NodePathOf("worker02")), "clusterd.io/fault"));
  EXPECT_TRUE(world_.api->CallsTo("PATCH", "/api/v1/nodes/worker02").empty());
}

TEST_F(K8sIntegrationTest, AnUnisolationThatConflictsIsRetriedAtTheNextPass) {
  world_.api->Set(NodePathOf("worker01"), IsolatedNode("2020-01-01T00:00:00Z", true));
  v1::Node n;
  n.set_name("worker01");
  commands_.nodes["worker01"] = n;
  // The Node changes between the cache's copy and the patch: its
  // resourceVersion test fails.
  world_.api->Before("PATCH", "/api/v1/nodes/worker01", [&] {
    json node = *world_.api->Object(NodePathOf("worker01"));
    node["metadata"]["labels"]["zone"] = "b";
    world_.api->Set(NodePathOf("worker01"), node);
  });
  StartIntegration();
  Step();
  auto patches = world_.api->CallsTo("PATCH", "/api/v1/nodes/worker01");
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].status, 422);
  EXPECT_TRUE(k8s::HasTaint(*world_.api->Object(NodePathOf("worker01")), "clusterd.io/fault"));
  Pass();
  json node = *world_.api->Object(NodePathOf("worker01"));
  EXPECT_FALSE(k8s::HasTaint(node, "clusterd.io/fault"));
  EXPECT_EQ(node["metadata"]["labels"]["zone"], "b");  // the other writer's change survives
}

// A DeviceTaintRule as isolate_device wrote it at `at`.
json RuleObject(uint32_t device, const std::string& at) {
  k8s::DeviceTaintSpec s;
  s.version = "v1";
  s.node = "worker01";
  s.device = device;
  s.target = {"npu.huawei.com", "worker01", "npu-" + std::to_string(device)};
  s.key = "clusterd.io/fault";
  s.value = "SEPARATE";
  s.effect = "NoExecute";
  s.now = at;
  return k8s::DeviceTaintRuleBody(s);
}

// UncordonNode returns a node's devices to service: their DeviceTaintRules
// go, after the grace that covers an isolate_device whose result is not
// stored yet; a device still isolated and a rule not ClusterD's stay.
TEST_F(K8sIntegrationTest, ADeviceReturnedToServiceLosesItsDeviceTaintAfterTheGrace) {
  const std::string released = k8s::DeviceTaintRuleName("worker01", 3);
  const std::string kept = k8s::DeviceTaintRuleName("worker01", 0);
  world_.api->Set(RulePathOf(released), RuleObject(3, k8s::Rfc3339(world_.clock.Now(), false)));
  world_.api->Set(RulePathOf(kept), RuleObject(0, "2020-01-01T00:00:00Z"));
  json theirs = RuleObject(3, "2020-01-01T00:00:00Z");
  theirs["metadata"].erase("labels");
  world_.api->Set(RulePathOf("theirs"), theirs);
  Device0IsolatedDevice3Released();
  StartIntegration();
  Step();
  EXPECT_TRUE(world_.api->Object(RulePathOf(released)).has_value());  // within the grace
  auto lists = world_.api->CallsTo("GET", RulesPath());
  ASSERT_FALSE(lists.empty());
  EXPECT_EQ(lists.back().query, "labelSelector=clusterd.io%2Fmanaged%3Dtrue");
  world_.clock.Advance(3 * world_.settings.condition_interval);
  Step();
  EXPECT_FALSE(world_.api->Object(RulePathOf(released)).has_value());
  EXPECT_TRUE(world_.api->Object(RulePathOf(kept)).has_value());
  EXPECT_TRUE(world_.api->Object(RulePathOf("theirs")).has_value());
  // Gone already when deleted (someone was faster): done all the same.
  world_.api->Set(RulePathOf(released), RuleObject(3, "2020-01-01T00:00:00Z"));
  world_.api->Script("DELETE", RulePathOf(released), 404, "NotFound");
  Pass();
  EXPECT_EQ(world_.api->CallsTo("DELETE", RulePathOf(released)).back().status, 404);
  // The whole node back in service: the last rule goes too.
  commands_.devices.clear();
  Pass();
  EXPECT_FALSE(world_.api->Object(RulePathOf(kept)).has_value());
}

// The fallback taint of an isolated device (isolate_device, no scheduler saw
// the isolation) is lifted once ClusterD returned the device to service,
// after the grace; a device still isolated and taints not ClusterD's stay.
TEST_F(K8sIntegrationTest, ADeviceReturnedToServiceLosesItsFallbackTaintAfterTheGrace) {
  json node = NodeObject("worker01");
  node["metadata"]["annotations"] = {{"clusterd.io/isolated-devices", "0,3"}};
  node["spec"]["taints"] = json::array({{{"key", "clusterd.io/isolated-device-3"},
                                         {"value", "SEPARATE"},
                                         {"effect", "NoSchedule"},
                                         {"timeAdded", k8s::Rfc3339(world_.clock.Now(), false)}},
                                        {{"key", "clusterd.io/isolated-device-0"},
                                         {"value", "SEPARATE"},
                                         {"effect", "NoSchedule"},
                                         {"timeAdded", "2020-01-01T00:00:00Z"}},
                                        {{"key", "other"}, {"effect", "NoSchedule"}}});
  world_.api->Set(NodePathOf("worker01"), node);
  Device0IsolatedDevice3Released();
  StartIntegration();
  Step();
  auto taints = [&] {
    std::vector<std::string> keys;
    for (const auto& t : k8s::Taints(*world_.api->Object(NodePathOf("worker01")))) keys.push_back(t["key"]);
    return keys;
  };
  // Within the grace: the step that added it may not be stored yet.
  EXPECT_EQ(taints(),
            (std::vector<std::string>{"clusterd.io/isolated-device-3", "clusterd.io/isolated-device-0", "other"}));
  EXPECT_EQ(k8s::Annotation(*world_.api->Object(NodePathOf("worker01")), "clusterd.io/isolated-devices"), "0");
  world_.clock.Advance(3 * world_.settings.condition_interval);
  Step();
  EXPECT_EQ(taints(), (std::vector<std::string>{"clusterd.io/isolated-device-0", "other"}));
  // The whole node back in service: the last one goes too.
  commands_.devices.clear();
  Pass();
  EXPECT_EQ(taints(), (std::vector<std::string>{"other"}));
}

// The nodes of a fault domain whose open incident keeps placement out
// (ClusterCommands::AvoidedNodes) carry the PreferNoSchedule avoid-domain
// taint, moved to a newer incident, and lose it when the incident is over;
// no other taint is touched and nothing is written while nothing changes.
TEST_F(K8sIntegrationTest, TheNodesOfAnAvoidedDomainCarryAPreferNoScheduleTaintUntilItIsLifted) {
  for (const char* name : {"worker01", "worker02"}) {
    json node = NodeObject(name);
    node["spec"]["taints"] = json::array({{{"key", "other"}, {"effect", "NoSchedule"}}});
    world_.api->Set(NodePathOf(name), node);
    v1::Node n;
    n.set_name(name);
    n.set_health(v1::HEALTH_HEALTHY);
    commands_.nodes[name] = n;
  }
  commands_.avoided = {{"worker01", "inc-3"}};
  StartIntegration();
  Step();
  auto avoid = [&](const char* name) { return k8s::AvoidTaint(*world_.api->Object(NodePathOf(name)), ctx_->marks()); };
  EXPECT_EQ(avoid("worker01"), std::optional<std::string>("inc-3"));
  EXPECT_FALSE(avoid("worker02").has_value());
  const json w1 = *world_.api->Object(NodePathOf("worker01"));
  EXPECT_TRUE(k8s::HasTaint(w1, "other"));
  bool prefer = false;
  for (const auto& t : k8s::Taints(w1))
    prefer = prefer || (t["key"] == "clusterd.io/avoid-domain" && t["effect"] == "PreferNoSchedule");
  EXPECT_TRUE(prefer);
  const size_t patches = world_.api->CallsTo("PATCH", "/api/v1/nodes/worker01").size();
  Pass();
  EXPECT_EQ(world_.api->CallsTo("PATCH", "/api/v1/nodes/worker01").size(), patches);  // nothing changed
  commands_.avoided = {{"worker01", "inc-4"}, {"worker02", "inc-4"}};
  Pass();
  EXPECT_EQ(avoid("worker01"), std::optional<std::string>("inc-4"));
  EXPECT_EQ(avoid("worker02"), std::optional<std::string>("inc-4"));
  commands_.avoided.clear();
  Pass();
  EXPECT_FALSE(avoid("worker01").has_value());
  EXPECT_FALSE(avoid("worker02").has_value());
  EXPECT_TRUE(k8s::HasTaint(*world_.api->Object(NodePathOf("worker01")), "other"));
  EXPECT_TRUE(k8s::HasTaint(*world_.api->Object(NodePathOf("worker02")), "other"));
}

// Without resource.k8s.io the pass goes on as before, and the API server is
// asked again only minutes later.
TEST_F(K8sIntegrationTest, WithoutDraThePassProbesRarely) {
  for (std::string_view v : k8s::kDraVersions) {
    world_.api->Script("GET", k8s::DraPath(v, "devicetaintrules"), 404, "NotFound");
  }
  v1::Node n;
  n.set_name("worker01");
  commands_.nodes["worker01"] = n;
  StartIntegration();
  EXPECT_TRUE(Step().nodes);
  EXPECT_TRUE(Pass().nodes);
  size_t probes = 0;
  for (const auto& c : world_.api->Calls()) probes += c.path.find("/devicetaintrules") != std::string::npos;
  EXPECT_EQ(probes, k8s::kDraVersions.size());
  for (const auto& w : world_.api->Writes()) EXPECT_EQ(w.path.find("resource.k8s.io"), std::string::npos) << w.path;
  // Five minutes on: probed again (v1 is served now) and listed.
  world_.clock.Advance(std::chrono::minutes(5));
  Step();
  EXPECT_EQ(world_.api->CallsTo("GET", RulesPath()).size(), 3u);
}

// ClusterD's commands from the loop's thread and the test's: the fake under a
// lock, and a condition to wait on.
class LockedCommands final : public ClusterCommands {
 public:
  template <typename Pred>
  bool WaitUntil(Pred pred) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 20s, [&] { return pred(inner_); });
  }
  void ReportFault(v1::ReportRequest r, Reply<v1::ReportResponse> reply) override {
    Locked([&] { inner_.ReportFault(std::move(r), reply); });
  }
  void CreateJob(v1::Job job, Reply<v1::Job> reply) override {
    Locked([&] { inner_.CreateJob(std::move(job), reply); });
  }
  void UpdateJob(v1::Job job, Reply<v1::Job> reply) override {
    Locked([&] { inner_.UpdateJob(std::move(job), reply); });
  }
  void DeleteJob(std::string id, Reply<uint64_t> reply) override {
    Locked([&] { inner_.DeleteJob(std::move(id), reply); });
  }
  void ApplyPublicFaults(PubFaultPlan plan, PubFaultOptions options, Reply<PublicFaultsApplied> reply) override {
    Locked([&] { inner_.ApplyPublicFaults(std::move(plan), std::move(options), reply); });
  }
  void SetCordon(std::string node, bool cordon, std::string reason, Reply<v1::Node> reply) override {
    Locked([&] { inner_.SetCordon(std::move(node), cordon, std::move(reason), reply); });
  }
  void RegisterNode(std::string node, v1::Inventory inventory, Reply<v1::Node> reply) override {
    Locked([&] { inner_.RegisterNode(std::move(node), std::move(inventory), reply); });
  }
  StatusOr<v1::Job> GetJob(const std::string& id) const override {
    std::lock_guard lock(mu_);
    return inner_.GetJob(id);
  }
  StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& req) const override {
    std::lock_guard lock(mu_);
    return inner_.ListJobs(req);
  }
  StatusOr<v1::GetNodeResponse> GetNode(const v1::GetNodeRequest& req) const override {
    std::lock_guard lock(mu_);
    return inner_.GetNode(req);
  }
  StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& req) const override {
    std::lock_guard lock(mu_);
    return inner_.ListNodes(req);
  }
  StatusOr<v1::ListFaultsResponse> ListFaults(const v1::ListFaultsRequest& req) const override {
    std::lock_guard lock(mu_);
    return inner_.ListFaults(req);
  }
  NodeChanges NodesChangedSince(uint64_t since) const override {
    std::lock_guard lock(mu_);
    return inner_.NodesChangedSince(since);
  }

 private:
  template <typename F>
  void Locked(F f) {
    {
      std::lock_guard lock(mu_);
      f();  // the fake replies before it returns: never under the caller's wait
    }
    cv_.notify_all();
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  testing::FakeClusterCommands inner_;
};

TEST(K8sIntegrationThread, TheDriverThreadFollowsChangesAndStops) {
  testing::K8sWorld world;
  LockedCommands commands;
  KubernetesIntegration integration(KubernetesContext::Create(world.settings, world.api));
  ASSERT_TRUE(integration.Start(IntegrationEnv{&commands, &world.clock, nullptr}).ok());
  EXPECT_TRUE(commands.WaitUntil([](const testing::FakeClusterCommands& c) { return c.jobs.count(kJobUid) == 1; }));
  // A change wakes the loop: no clock needs to move.
  world.api->Remove(PodPathOf("llm-worker-0"));
  world.api->Remove(PodPathOf("llm-worker-1"));
  EXPECT_TRUE(commands.WaitUntil([](const testing::FakeClusterCommands& c) { return c.jobs.empty(); }));
  integration.Stop();
}

}  // namespace
}  // namespace clusterd
