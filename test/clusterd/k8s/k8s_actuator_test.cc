// The kubernetes actuator (clusterd/k8s/actuator.h) on the in-memory API
// server (fake_k8s_client.h): each action run to its end on the test's
// thread, on a FakeClock whose waits advance it instead of sleeping; what it
// did is read back from the API server's objects and its call log.
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/k8s/actuator.h"
#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/dra.h"
#include "clusterd/k8s/requests.h"
#include "k8s_objects.h"

namespace clusterd {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::EventsPathOf;
using testing::kJobUid;
using testing::NodePathOf;
using testing::PodObject;
using testing::PodPathOf;
using testing::ResourceSliceObject;
using testing::RulePathOf;
using testing::RulesPath;
using testing::SlicePathOf;

class K8sActuatorTest : public ::testing::Test {
 protected:
  // Actions over a context of their own (a new one after a "restart").
  std::unique_ptr<KubernetesActions> Actions() {
    contexts_.push_back(world_.Context());
    KubernetesActionsEnv env;
    env.clock = &world_.clock;
    env.sleep = [this](Duration d) {
      sleeps_.push_back(d);
      if (on_sleep_) on_sleep_();
      world_.clock.Advance(d);
    };
    env.host = "clusterd-0";
    env.volcano_cluster_info = volcano_cluster_info_;
    return std::make_unique<KubernetesActions>(contexts_.back(), env);
  }

  ActionRequest Request(v1::ClusterAction action, const std::string& node = "") const {
    ActionRequest req;
    req.idempotency_key = std::string(kJobUid) + ".1/2";
    req.recovery_id = std::string(kJobUid) + ".1";
    req.job_id = kJobUid;
    req.action = action;
    req.node = node;
    req.level = v1::FAULT_LEVEL_SEPARATE;
    req.deadline = world_.clock.Now() + 10min;
    return req;
  }

  std::vector<json> Events(const std::string& ns) const { return world_.api->Objects(EventsPathOf(ns)); }

  testing::K8sWorld world_;
  std::vector<std::shared_ptr<KubernetesContext>> contexts_;
  std::vector<Duration> sleeps_;
  std::function<void()> on_sleep_;  // what happens in the cluster while an action waits
  bool volcano_cluster_info_ = false;
};

TEST_F(K8sActuatorTest, IsolateNodeTwiceCordonsAndTaintsOnce) {
  auto actions = Actions();
  const ActionRequest req = Request(v1::CLUSTER_ACTION_ISOLATE_NODE, "worker01");
  ActionResult first = actions->Run(req);
  ASSERT_TRUE(first.ok) << first.message;
  EXPECT_EQ(first.message, "cordoned and tainted clusterd.io/fault=SEPARATE:NoSchedule");
  json node = *world_.api->Object(NodePathOf("worker01"));
  EXPECT_TRUE(k8s::Unschedulable(node));
  ASSERT_TRUE(k8s::HasTaint(node, "clusterd.io/fault"));
  const std::string now = k8s::Rfc3339(world_.clock.Now(), false);
  EXPECT_EQ(node["spec"]["taints"][0]["timeAdded"], now);
  EXPECT_EQ(k8s::Annotation(node, "clusterd.io/cordoned"), "true");
  EXPECT_EQ(k8s::Annotation(node, "clusterd.io/isolated-at"), now);

  // Repeated (the same idempotency key after a restart): a no-op, and the
  // Event is not doubled.
  ActionResult again = Actions()->Run(req);
  ASSERT_TRUE(again.ok) << again.message;
  EXPECT_EQ(again.message, "node worker01 already cordoned and tainted");
  EXPECT_EQ(world_.api->CallsTo("PATCH", NodePathOf("worker01")).size(), 1u);
  auto events = Events("default");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["metadata"]["name"], k8s::RecordName(req.idempotency_key + "/Isolate"));
  EXPECT_EQ(events[0]["regarding"]["kind"], "Node");
  EXPECT_EQ(events[0]["regarding"]["name"], "worker01");
  EXPECT_EQ(events[0]["regarding"]["uid"], node["metadata"]["uid"]);
  EXPECT_EQ(events[0]["action"], "Isolate");
  EXPECT_EQ(events[0]["reportingInstance"], "clusterd-0");
  EXPECT_EQ(events[0]["note"],
            "recovery " + req.recovery_id + ": cordoned node worker01, taint clusterd.io/fault=SEPARATE:NoSchedule");
}

TEST_F(K8sActuatorTest, IsolateNodeRetriesAConflict) {
  auto actions = Actions();
  world_.api->Script("PATCH", NodePathOf("worker01"), 409, "Conflict");
  ActionResult r = actions->Run(Request(v1::CLUSTER_ACTION_ISOLATE_NODE, "worker01"));
  ASSERT_TRUE(r.ok) << r.message;
  auto patches = world_.api->CallsTo("PATCH", NodePathOf("worker01"));
  ASSERT_EQ(patches.size(), 2u);
  EXPECT_EQ(patches[0].status, 409);
  EXPECT_EQ(patches[1].status, 200);
  EXPECT_EQ(world_.api->CallsTo("GET", NodePathOf("worker01")).size(), 2u);  // read again before the retry
  EXPECT_TRUE(k8s::HasTaint(*world_.api->Object(NodePathOf("worker01")), "clusterd.io/fault"));
}

TEST_F(K8sActuatorTest, IsolateNodeNeverOverwritesAChangeMadeSinceItsRead) {
  auto actions = Actions();
  // Someone else labels the Node between the actuator's read and its patch.
  world_.api->Before("PATCH", NodePathOf("worker01"), [&] {
    json node = *world_.api->Object(NodePathOf("worker01"));
    node["metadata"]["annotations"]["team"] = "infra";
    world_.api->Set(NodePathOf("worker01"), node);
  });
  ActionResult r = actions->Run(Request(v1::CLUSTER_ACTION_ISOLATE_NODE, "worker01"));
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(world_.api->CallsTo("PATCH", NodePathOf("worker01")).at(0).status, 422);  // the resourceVersion test
  json node = *world_.api->Object(NodePathOf("worker01"));
  EXPECT_EQ(k8s::Annotation(node, "team"), "infra");
  EXPECT_EQ(k8s::Annotation(node, "clusterd.io/cordoned"), "true");
}

TEST_F(K8sActuatorTest, IsolateNodeFailsWhenTheConflictsGoOnOrTheNodeIsMissing) {
  auto actions = Actions();
  world_.api->Script("PATCH", NodePathOf("worker01"), 409, "Conflict", "", 5);
  ActionResult r = actions->Run(Request(v1::CLUSTER_ACTION_ISOLATE_NODE, "worker01"));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "patch node worker01: kept conflicting");
  EXPECT_TRUE(Events("default").empty());

  r = actions->Run(Request(v1::CLUSTER_ACTION_ISOLATE_NODE, "bare-metal-7"));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message.rfind("get node bare-metal-7: HTTP 404", 0), 0u) << r.message;

  world_.api->Script("PATCH", NodePathOf("worker02"), 403, "Forbidden");
  r = actions->Run(Request(v1::CLUSTER_ACTION_ISOLATE_NODE, "worker02"));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(world_.api->CallsTo("PATCH", NodePathOf("worker02")).size(), 1u);  // not a conflict: no retry
}

TEST_F(K8sActuatorTest, IsolateDeviceMarksEachDeviceOnce) {
  world_.settings.device_fallback_taint = false;  // the Node's annotation only (the fallback: below)
  auto actions = Actions();
  ActionRequest req = Request(v1::CLUSTER_ACTION_ISOLATE_DEVICE, "worker02");
  req.device = 3;
  ASSERT_TRUE(actions->Run(req).ok);
  req.device = 0;
  ASSERT_TRUE(actions->Run(req).ok);
  ActionResult again = actions->Run(req);
  ASSERT_TRUE(again.ok);
  EXPECT_EQ(again.message.rfind("device already marked isolated on node worker02; no scheduler", 0), 0u)
      << again.message;
  EXPECT_EQ(k8s::Annotation(*world_.api->Object(NodePathOf("worker02")), "clusterd.io/isolated-devices"), "0,3");
  EXPECT_EQ(world_.api->CallsTo("PATCH", NodePathOf("worker02")).size(), 2u);
  req.device.reset();
  EXPECT_FALSE(actions->Run(req).ok);
}

// Where a DRA driver publishes the node's chips (Ascend's: npu-<id>),
// isolate_device also taints the chip with a DeviceTaintRule, once.
TEST_F(K8sActuatorTest, IsolateDeviceTaintsTheDraDeviceOnce) {
  world_.api->Set(SlicePathOf("worker02-npu"), ResourceSliceObject("worker02", "npu.huawei.com", "npu", 8, false));
  world_.api->Set(SlicePathOf("worker01-npu"), ResourceSliceObject("worker01", "npu.huawei.com", "npu", 8, false));
  auto actions = Actions();
  ActionRequest req = Request(v1::CLUSTER_ACTION_ISOLATE_DEVICE, "worker02");
  req.device = 3;
  ActionResult r = actions->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  const std::string name = k8s::DeviceTaintRuleName("worker02", 3);
  const std::string taint =
      "DeviceTaintRule " + name + " on npu.huawei.com/worker02/npu-3 (clusterd.io/fault=SEPARATE:NoExecute)";
  EXPECT_EQ(r.message, "device 3 marked isolated in clusterd.io/isolated-devices; " + taint);
  auto rule = world_.api->Object(RulePathOf(name));
  ASSERT_TRUE(rule.has_value());
  EXPECT_EQ((*rule)["spec"]["deviceSelector"],
            json({{"driver", "npu.huawei.com"}, {"pool", "worker02"}, {"device", "npu-3"}}));
  EXPECT_EQ((*rule)["spec"]["taint"],
            json({{"key", "clusterd.io/fault"}, {"value", "SEPARATE"}, {"effect", "NoExecute"}}));
  EXPECT_EQ(k8s::Annotation(*rule, "clusterd.io/node"), "worker02");
  EXPECT_EQ(k8s::Annotation(*rule, "clusterd.io/device"), "3");
  EXPECT_EQ(k8s::Annotation(*rule, "clusterd.io/isolated-at"), k8s::Rfc3339(world_.clock.Now(), false));
  // Only the node's own slices were asked for.
  auto lists = world_.api->CallsTo("GET", "/apis/resource.k8s.io/v1/resourceslices");
  ASSERT_FALSE(lists.empty());
  EXPECT_EQ(lists.back().query, "fieldSelector=spec.nodeName%3Dworker02");
  auto events = Events("default");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["note"], "recovery " + req.recovery_id +
                                   ": device 3 of node worker02 isolated (clusterd.io/isolated-devices); " + taint);

  // Repeated (after a restart): nothing new, no second Event.
  ActionResult again = Actions()->Run(req);
  ASSERT_TRUE(again.ok) << again.message;
  EXPECT_EQ(again.message,
            "device already marked isolated on node worker02; DeviceTaintRule " + name + " already there");
  EXPECT_EQ(world_.api->Objects(RulesPath()).size(), 1u);
  EXPECT_TRUE(world_.api->CallsTo("PATCH", RulePathOf(name)).empty());
  EXPECT_EQ(Events("default").size(), 1u);
  // The DeviceTaintRule is what the scheduler sees: no fallback taint.
  EXPECT_TRUE(k8s::Taints(*world_.api->Object(NodePathOf("worker02"))).empty());

  // PRE_SEPARATE keeps new claims away only; a later SEPARATE on that chip
  // makes the taint evict.
  req.device = 5;
  req.level = v1::FAULT_LEVEL_PRE_SEPARATE;
  ASSERT_TRUE(actions->Run(req).ok);
  const std::string five = k8s::DeviceTaintRuleName("worker02", 5);
  EXPECT_EQ((*world_.api->Object(RulePathOf(five)))["spec"]["taint"]["effect"], "NoSchedule");
  req.level = v1::FAULT_LEVEL_SEPARATE;
  req.idempotency_key += "-next";
  r = actions->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_NE(r.message.find("updated DeviceTaintRule " + five), std::string::npos) << r.message;
  EXPECT_EQ((*world_.api->Object(RulePathOf(five)))["spec"]["taint"]["effect"], "NoExecute");
  EXPECT_EQ((*world_.api->Object(RulePathOf(five)))["spec"]["taint"]["value"], "SEPARATE");
  // ... and a milder one never weakens it.
  req.level = v1::FAULT_LEVEL_PRE_SEPARATE;
  ASSERT_TRUE(actions->Run(req).ok);
  EXPECT_EQ((*world_.api->Object(RulePathOf(five)))["spec"]["taint"]["effect"], "NoExecute");
}

// DRA is optional: no slice for the device, resource.k8s.io not served, or
// not permitted, and isolate_device marks the Node as before.
TEST_F(K8sActuatorTest, IsolateDeviceWithoutDraOnlyMarksTheNode) {
  world_.settings.device_fallback_taint = false;  // the Node's annotation only (the fallback: below)
  ActionRequest req = Request(v1::CLUSTER_ACTION_ISOLATE_DEVICE, "worker02");
  req.device = 3;
  // Slices, but of another node.
  world_.api->Set(SlicePathOf("worker01-npu"), ResourceSliceObject("worker01", "npu.huawei.com", "npu", 8, false));
  ActionResult r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  const std::string unseen =
      "; no scheduler of the job sees the isolation (no Volcano cluster-info, no DRA device, no accelerator "
      "resource); fallback taint off (k8s_device_fallback_taint)";
  EXPECT_EQ(r.message, "device 3 marked isolated in clusterd.io/isolated-devices" + unseen);
  // Not served in any version (a cluster without DRA).
  for (std::string_view v : k8s::kDraVersions) {
    world_.api->Script("GET", k8s::DraPath(v, "resourceslices"), 404, "NotFound");
  }
  req.device = 4;
  r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message, "device 4 marked isolated in clusterd.io/isolated-devices" + unseen);
  // Not permitted (the role lacks the DRA rules).
  world_.api->Set(SlicePathOf("worker02-npu"), ResourceSliceObject("worker02", "npu.huawei.com", "npu", 8, false));
  world_.api->Script("GET", "/apis/resource.k8s.io/v1/resourceslices", 403, "Forbidden");
  req.device = 5;
  r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_TRUE(world_.api->Objects(RulesPath()).empty());
  EXPECT_TRUE(world_.api->CallsTo("POST", RulesPath()).empty());
  // Two drivers name a device 6 (a NIC by its index): ambiguous, so none.
  world_.api->Set(SlicePathOf("worker02-nic"), ResourceSliceObject("worker02", "nic.example.com", "nic", 8, true));
  req.device = 6;
  r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_TRUE(world_.api->Objects(RulesPath()).empty());
  EXPECT_EQ(k8s::Annotation(*world_.api->Object(NodePathOf("worker02")), "clusterd.io/isolated-devices"), "3,4,5,6");
  EXPECT_TRUE(k8s::Taints(*world_.api->Object(NodePathOf("worker02"))).empty());
}

TEST_F(K8sActuatorTest, IsolateDeviceFailsWhenTheTaintCannotBeWritten) {
  world_.api->Set(SlicePathOf("worker02-npu"), ResourceSliceObject("worker02", "npu.huawei.com", "npu", 8, false));
  auto actions = Actions();
  ActionRequest req = Request(v1::CLUSTER_ACTION_ISOLATE_DEVICE, "worker02");
  req.device = 3;
  world_.api->Script("POST", RulesPath(), 500, "InternalError");
  ActionResult r = actions->Run(req);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("device taint: create DeviceTaintRule"), std::string::npos) << r.message;
  // The API server cannot be reached for the probe: a failure too, and the
  // next try probes again.
  auto fresh = Actions();
  world_.api->Script("GET", "/apis/resource.k8s.io/v1/resourceslices", 0);
  EXPECT_FALSE(fresh->Run(req).ok);
  r = fresh->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_TRUE(world_.api->Object(RulePathOf(k8s::DeviceTaintRuleName("worker02", 3))).has_value());
}

// No scheduler of the job sees the isolation (no Volcano, no DRA, the
// allocatable not lowered): the Node gets the fallback taint naming the
// device, once, and the step and its Event say so.
TEST_F(K8sActuatorTest, IsolateDeviceNoSchedulerSeesTaintsTheNodeForTheDevice) {
  json node = *world_.api->Object(NodePathOf("worker02"));
  node["status"]["capacity"] = {{"huawei.com/Ascend910", "8"}};
  node["status"]["allocatable"] = {{"huawei.com/Ascend910", "8"}};
  world_.api->Set(NodePathOf("worker02"), node);
  auto actions = Actions();
  ActionRequest req = Request(v1::CLUSTER_ACTION_ISOLATE_DEVICE, "worker02");
  req.device = 3;
  ActionResult r = actions->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  const std::string unseen =
      "no scheduler of the job sees the isolation (no Volcano cluster-info, no DRA device, huawei.com/Ascend910 "
      "allocatable 8 of 8)";
  EXPECT_EQ(r.message, "device 3 marked isolated in clusterd.io/isolated-devices; " + unseen +
                           ": tainted node worker02 clusterd.io/isolated-device-3=SEPARATE:NoSchedule");
  json taints = k8s::Taints(*world_.api->Object(NodePathOf("worker02")));
  ASSERT_EQ(taints.size(), 1u);
  EXPECT_EQ(taints[0], json({{"key", "clusterd.io/isolated-device-3"},
                             {"value", "SEPARATE"},
                             {"effect", "NoSchedule"},
                             {"timeAdded", k8s::Rfc3339(world_.clock.Now(), false)}}));
  auto events = Events("default");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0]["note"].get<std::string>().find(": tainted node worker02 clusterd.io/isolated-device-3"),
            std::string::npos)
      << events[0]["note"];

  // Repeated (after a restart): nothing new.
  ActionResult again = Actions()->Run(req);
  ASSERT_TRUE(again.ok) << again.message;
  EXPECT_EQ(again.message, "device already marked isolated on node worker02; " + unseen +
                               ": node already tainted clusterd.io/isolated-device-3");
  EXPECT_EQ(k8s::Taints(*world_.api->Object(NodePathOf("worker02"))).size(), 1u);
  EXPECT_EQ(Events("default").size(), 1u);

  // A second device: its own taint.
  req.device = 5;
  ASSERT_TRUE(actions->Run(req).ok);
  EXPECT_EQ(k8s::DeviceFallbackTaints(*world_.api->Object(NodePathOf("worker02")), contexts_.back()->marks()).size(),
            2u);
}

// Where the job's scheduler sees the isolation, the fallback taint is not
// used: Volcano's cluster-info for a job whose pods Volcano schedules, a DRA
// ResourceSlice publishing the device (its DeviceTaintRule), or the device
// plugin's lowered allocatable.
TEST_F(K8sActuatorTest, IsolateDeviceSeenByTheSchedulerIsNotTainted) {
  auto no_fallback = [&](const std::string& node_name, uint32_t device) {
    json node = *world_.api->Object(NodePathOf(node_name));
    EXPECT_TRUE(k8s::DeviceFallbackTaints(node, contexts_.back()->marks()).empty()) << node.dump();
    EXPECT_TRUE(k8s::MarkedDevices(node, contexts_.back()->marks()).count(device));
  };
  // Volcano: the job's pods name schedulerName volcano, and the mindcluster
  // integration writes cluster-info.
  for (const char* name : {"llm-worker-0", "llm-worker-1"}) {
    json pod = *world_.api->Object(PodPathOf(name));
    pod["spec"]["schedulerName"] = "volcano";
    world_.api->Set(PodPathOf(name), pod);
  }
  world_.Settle();
  volcano_cluster_info_ = true;
  ActionRequest req = Request(v1::CLUSTER_ACTION_ISOLATE_DEVICE, "worker02");
  req.device = 1;
  ActionResult r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message,
            "device 1 marked isolated in clusterd.io/isolated-devices; Volcano sees it (cluster-info ConfigMaps)");
  no_fallback("worker02", 1);
  // ... but without the cluster-info writer Volcano's pods see nothing.
  volcano_cluster_info_ = false;
  req.device = 2;
  r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_NE(r.message.find(": tainted node worker02 clusterd.io/isolated-device-2"), std::string::npos) << r.message;

  // DRA: a driver publishes worker01's chips.
  world_.api->Set(SlicePathOf("worker01-npu"), ResourceSliceObject("worker01", "npu.huawei.com", "npu", 8, false));
  req = Request(v1::CLUSTER_ACTION_ISOLATE_DEVICE, "worker01");
  req.device = 4;
  r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_TRUE(world_.api->Object(RulePathOf(k8s::DeviceTaintRuleName("worker01", 4))).has_value());
  no_fallback("worker01", 4);

  // The allocatable: the device plugin left out as many chips as are isolated.
  json node = NodeObject("worker04");
  node["status"]["capacity"] = {{"huawei.com/Ascend910", "8"}};
  node["status"]["allocatable"] = {{"huawei.com/Ascend910", "7"}};
  world_.api->Set(NodePathOf("worker04"), node);
  req = Request(v1::CLUSTER_ACTION_ISOLATE_DEVICE, "worker04");
  req.device = 6;
  r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message,
            "device 6 marked isolated in clusterd.io/isolated-devices; the device plugin left it out "
            "(huawei.com/Ascend910 allocatable 7 of 8)");
  no_fallback("worker04", 6);
  // A second chip isolated there, the allocatable still 7: not covered.
  req.device = 7;
  r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_NE(r.message.find(": tainted node worker04 clusterd.io/isolated-device-7"), std::string::npos) << r.message;
}

// A recovery succeeds only off the bad hardware: a replacement scheduled back
// onto an isolated device (or node) fails the step, and the ladder escalates.
TEST_F(K8sActuatorTest, AReplacementBackOnIsolatedHardwareFailsTheStep) {
  json node = *world_.api->Object(NodePathOf("worker02"));
  node["metadata"]["annotations"]["clusterd.io/isolated-devices"] = "1";
  world_.api->Set(NodePathOf("worker02"), node);
  world_.replacement_node = "worker02";  // the scheduler puts it back (it saw nothing)
  auto actions = Actions();
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.ranks = {2};
  ActionResult r = actions->Run(req);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message,
            "evicted llm-worker-1; replaced: llm-worker-1-r on worker02 Running; but llm-worker-1-r on device 1 of "
            "node worker02 isolated (clusterd.io/isolated-devices): back on isolated hardware (no scheduler of the "
            "job saw the isolation)");

  // On an isolated node (its taint), whatever the devices.
  node = NodeObject("worker01");
  node["spec"]["taints"] =
      json::array({{{"key", "clusterd.io/fault"}, {"value", "SEPARATE"}, {"effect", "NoSchedule"}}});
  world_.api->Set(NodePathOf("worker01"), node);
  world_.replacement_node = "worker01";
  req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.idempotency_key += "-node";
  req.ranks = {0};
  r = Actions()->Run(req);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("llm-worker-0-r on node worker01 is isolated (taint clusterd.io/fault)"), std::string::npos)
      << r.message;
}

TEST_F(K8sActuatorTest, RescheduleEvictsThePodsOfTheRanksAndRecordsThem) {
  auto actions = Actions();
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.ranks = {2};  // llm-worker-1's first chip
  ActionResult r = actions->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  // Done once the controller's replacement runs the ranks again.
  EXPECT_EQ(r.message, "evicted llm-worker-1; replaced: llm-worker-1-r on worker03 Running");
  EXPECT_FALSE(world_.api->Object(PodPathOf("llm-worker-1")).has_value());
  EXPECT_TRUE(world_.api->Object(PodPathOf("llm-worker-0")).has_value());
  auto evictions = world_.api->CallsTo("POST", PodPathOf("llm-worker-1") + "/eviction");
  ASSERT_EQ(evictions.size(), 1u);
  EXPECT_EQ(evictions[0].body["deleteOptions"]["preconditions"]["uid"], "pod-uid-1");

  // The record, before the eviction: the chosen pods' UIDs under the key.
  auto writes = world_.api->Writes();
  ASSERT_GE(writes.size(), 2u);
  EXPECT_EQ(writes[0].path, EventsPathOf("train"));
  auto events = Events("train");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["metadata"]["name"], k8s::RecordName(req.idempotency_key));
  EXPECT_EQ(k8s::RecordedPodUids(events[0]), (std::set<std::string>{"pod-uid-1"}));
  EXPECT_EQ(k8s::Annotation(events[0], "clusterd.io/idempotency-key"), req.idempotency_key);
  EXPECT_EQ(events[0]["action"], "Evict");
  EXPECT_EQ(events[0]["regarding"]["name"], "llm-worker-1");
  EXPECT_EQ(events[0]["note"], "recovery " + req.recovery_id + ": evicting pods llm-worker-1");
}

TEST_F(K8sActuatorTest, ANodeWithoutRanksEvictsTheJobsPodsThere) {
  auto actions = Actions();
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS, "worker01");
  ActionResult r = actions->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message, "evicted llm-worker-0; replaced: llm-worker-0-r on worker03 Running");
}

TEST_F(K8sActuatorTest, AReplacementThatNeverRunsFailsTheStepAtItsDeadline) {
  world_.replace_pods = false;  // the controller does nothing (or the scheduler finds no node)
  auto actions = Actions();
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.ranks = {2};
  req.deadline = world_.clock.Now() + 2s;
  ActionResult r = actions->Run(req);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message,
            "evicted llm-worker-1; no replacement runs the ranks [2, 3] by the step's deadline (the workload's "
            "controller, the scheduler or the kubelet did not bring them back)");
  EXPECT_EQ(sleeps_, (std::vector<Duration>{500ms, 500ms, 500ms, 500ms}));  // looked at every 500 ms
}

TEST_F(K8sActuatorTest, ATooManyRequestsIsRetriedAfterItsRetryAfter) {
  auto actions = Actions();
  const std::string eviction = PodPathOf("llm-worker-1") + "/eviction";
  world_.api->Script("POST", eviction, 429, "TooManyRequests", "7");
  world_.api->Script("POST", eviction, 429, "TooManyRequests");  // no hint: 2 s
  world_.api->Script("POST", eviction, 503, "ServiceUnavailable", "1");
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.ranks = {3};
  ActionResult r = actions->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(sleeps_, (std::vector<Duration>{7s, 2s, 1s}));
  EXPECT_EQ(world_.api->CallsTo("POST", eviction).size(), 4u);
  EXPECT_FALSE(world_.api->Object(PodPathOf("llm-worker-1")).has_value());
}

TEST_F(K8sActuatorTest, AnEvictionRefusedUntilTheTimeoutFailsOrFallsBackToADelete) {
  world_.settings.eviction_timeout = 5s;
  auto actions = Actions();
  const std::string eviction = PodPathOf("llm-worker-1") + "/eviction";
  world_.api->Script("POST", eviction, 429, "TooManyRequests", "", 1000);  // a PodDisruptionBudget
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.ranks = {2};
  ActionResult r = actions->Run(req);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message.rfind("evict train/llm-worker-1: eviction refused until the deadline", 0), 0u) << r.message;
  // 2 s, 2 s, then the last second: the last try is at the timeout.
  EXPECT_EQ(sleeps_, (std::vector<Duration>{2s, 2s, 1s}));
  EXPECT_TRUE(world_.api->Object(PodPathOf("llm-worker-1")).has_value());

  // The step's deadline comes first.
  sleeps_.clear();
  req.idempotency_key += "-b";
  req.deadline = world_.clock.Now() + 3s;
  EXPECT_FALSE(actions->Run(req).ok);
  EXPECT_EQ(sleeps_, (std::vector<Duration>{2s, 1s}));

  world_.settings.delete_fallback = true;
  req.idempotency_key += "-c";
  req.deadline = world_.clock.Now() + 10min;
  r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  // The override of the budget is said, with the refusal.
  EXPECT_EQ(r.message.rfind("deleted llm-worker-1 after its eviction was refused for 5s (k8s_delete_fallback): ", 0),
            0u)
      << r.message;
  auto deletes = world_.api->CallsTo("DELETE", PodPathOf("llm-worker-1"));
  ASSERT_EQ(deletes.size(), 1u);
  EXPECT_EQ(deletes[0].body["preconditions"]["uid"], "pod-uid-1");
  EXPECT_FALSE(world_.api->Object(PodPathOf("llm-worker-1")).has_value());
}

TEST_F(K8sActuatorTest, AnEvictionThatFailsOtherwiseIsNotRetried) {
  auto actions = Actions();
  const std::string eviction = PodPathOf("llm-worker-1") + "/eviction";
  world_.api->Script("POST", eviction, 403, "Forbidden");
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.ranks = {2};
  ActionResult r = actions->Run(req);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(world_.api->CallsTo("POST", eviction).size(), 1u);
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(K8sActuatorTest, ARestartAfterTheEvictionFindsItDone) {
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.ranks = {2, 3};
  ASSERT_TRUE(Actions()->Run(req).ok);
  // ClusterD dies before it stores the result; meanwhile the controller
  // replaces the pod under the same name, and it is scheduled.
  world_.api->Set(PodPathOf("llm-worker-1"), PodObject("llm-worker-1", "pod-uid-1b", "worker02", 1));
  world_.api->ClearCalls();
  contexts_.clear();

  // The step again, same key, from a new actuator over a new cache.
  ActionResult r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message, std::string("no pod of job ") + kJobUid + " left to evict");
  EXPECT_TRUE(world_.api->CallsTo("POST", PodPathOf("llm-worker-1") + "/eviction").empty());
  EXPECT_EQ((*world_.api->Object(PodPathOf("llm-worker-1")))["metadata"]["uid"], "pod-uid-1b");
  EXPECT_EQ(Events("train").size(), 1u);
}

// A NoExecute device taint makes Kubernetes evict the pod on the chip
// itself, between isolate_device and reschedule_pods: the pod already on its
// way out is the move under way, not a job without pods.
TEST_F(K8sActuatorTest, APodAlreadyTerminatingIsNotEvictedAgain) {
  json going = PodObject("llm-worker-1", "pod-uid-1", "worker02", 1);
  going["metadata"]["deletionTimestamp"] = k8s::Rfc3339(world_.clock.Now(), false);
  world_.api->Set(PodPathOf("llm-worker-1"), going);
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.ranks = {2};
  // While the step waits, the controller's replacement comes up.
  on_sleep_ = [this] {
    world_.api->Set(PodPathOf("llm-worker-1b"), PodObject("llm-worker-1b", "pod-uid-1b", "worker03", 1));
    world_.Settle();
  };
  ActionResult r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message,
            std::string("no pod of job ") + kJobUid + " left to evict; replaced: llm-worker-1b on worker03 Running");
  EXPECT_EQ(sleeps_.size(), 1u);
  EXPECT_TRUE(world_.api->CallsTo("POST", PodPathOf("llm-worker-1") + "/eviction").empty());
  EXPECT_TRUE(world_.api->Object(PodPathOf("llm-worker-0")).has_value());
}

TEST_F(K8sActuatorTest, ARestartBeforeTheEvictionEvictsThePodsChosenThen) {
  // The record of a first try that chose llm-worker-1 and died before it
  // evicted anything.
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  k8s::EventSpec spec;
  spec.regarding_kind = "Pod";
  spec.regarding_name = "llm-worker-1";
  spec.regarding_namespace = "train";
  world_.api->Set(EventsPathOf("train") + "/" + k8s::RecordName(req.idempotency_key),
                  k8s::RemovalRecordBody(spec, req.idempotency_key, {"pod-uid-1"}));
  // The repeat asks for ranks of both pods (say the placement moved): only
  // the recorded one goes.
  req.ranks = {0, 2};
  ActionResult r = Actions()->Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message, "evicted llm-worker-1; replaced: llm-worker-1-r on worker03 Running");
  EXPECT_TRUE(world_.api->Object(PodPathOf("llm-worker-0")).has_value());
  EXPECT_FALSE(world_.api->Object(PodPathOf("llm-worker-1")).has_value());
}

TEST_F(K8sActuatorTest, ADeleteOfAPodAlreadyGoneOrReplacedIsDone) {
  auto actions = Actions();
  // Between the cache and the delete: llm-worker-0 is gone, llm-worker-1 replaced.
  world_.api->Before("DELETE", PodPathOf("llm-worker-0"), [&] {
    world_.api->Remove(PodPathOf("llm-worker-0"));
    world_.api->Set(PodPathOf("llm-worker-0b"), PodObject("llm-worker-0b", "pod-uid-0b", "worker03", 0));
    world_.api->Set(PodPathOf("llm-worker-1"), PodObject("llm-worker-1", "pod-uid-1b", "worker02", 1));
    world_.Settle();
  });
  ActionResult r = actions->Run(Request(v1::CLUSTER_ACTION_RESTART_JOB));
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(
      r.message,
      "deleted llm-worker-0, llm-worker-1; replaced: llm-worker-0b on worker03, llm-worker-1 on worker02 Running");
  EXPECT_EQ(world_.api->CallsTo("DELETE", PodPathOf("llm-worker-0")).at(0).status, 404);
  EXPECT_EQ(world_.api->CallsTo("DELETE", PodPathOf("llm-worker-1")).at(0).status, 409);
  EXPECT_EQ((*world_.api->Object(PodPathOf("llm-worker-1")))["metadata"]["uid"],
            "pod-uid-1b");  // the replacement stays
  auto events = Events("train");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["action"], "Delete");
  EXPECT_EQ(k8s::RecordedPodUids(events[0]), (std::set<std::string>{"pod-uid-0", "pod-uid-1"}));
}

TEST_F(K8sActuatorTest, AJobWithoutPodsFailsAndAChipCannotBeReset) {
  auto actions = Actions();
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESTART_JOB);
  req.job_id = "registered-through-the-api";
  ActionResult r = actions->Run(req);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("no pod of job registered-through-the-api in the Kubernetes pod cache"), std::string::npos);
  EXPECT_TRUE(world_.api->Writes().empty());
  r = actions->Run(Request(v1::CLUSTER_ACTION_RESET_DEVICE, "worker01"));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "reset_device: Kubernetes cannot reset a chip; the recovery escalates");
}

TEST_F(K8sActuatorTest, PodActionsWaitForThePodCacheUntilTheirDeadline) {
  // The API server cannot be reached: the cache is never listed.
  world_.api->Script("GET", "/api/v1/pods", 0, "", "", 1'000'000);
  auto ctx = KubernetesContext::Create(world_.settings, world_.api);
  KubernetesActionsEnv env;
  env.clock = &world_.clock;
  env.sleep = [this](Duration d) {
    sleeps_.push_back(d);
    world_.clock.Advance(d);
  };
  KubernetesActions actions(ctx, env);
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESTART_JOB);
  req.deadline = world_.clock.Now() + 1s;
  ActionResult r = actions.Run(req);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "the pod cache is not synced yet");
  EXPECT_EQ(sleeps_.size(), 10u);  // every 100 ms until the deadline
}

TEST_F(K8sActuatorTest, WithTheIntegrationAnActionLeavesTheWatchesToIt) {
  // A step resumed after a restart runs before the integration starts: it
  // must not start the shared watches itself, or they would export no
  // metrics. It waits for the integration's instead.
  MetricsRegistry metrics;  // outlives the context's informers, which count into it
  auto ctx = KubernetesContext::Create(world_.settings, world_.api);
  KubernetesActionsEnv env;
  env.clock = &world_.clock;
  env.start_watches = false;
  std::atomic<int> waits{0};
  env.sleep = [&](Duration d) {
    // The integration starts, with its metrics, while the action waits.
    if (++waits == 3) {
      ctx->StartWatches(&metrics);
      world_.Watching();
    }
    world_.clock.Advance(d);
  };
  KubernetesActions actions(ctx, env);
  ActionRequest req = Request(v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  req.ranks = {2};
  ActionResult r = actions.Run(req);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message, "evicted llm-worker-1; replaced: llm-worker-1-r on worker03 Running");
  EXPECT_GE(waits.load(), 3);
  EXPECT_NE(metrics.Render().find("clusterd_k8s_lists_total{resource=\"pods\"} 1"), std::string::npos)
      << metrics.Render();
}

TEST_F(K8sActuatorTest, TheActuatorRunsActionsOnItsWorkers) {
  auto actuator = MakeKubernetesActuator(world_.Context(), KubernetesActionsEnv{&world_.clock, nullptr, "c"});
  EXPECT_EQ(actuator->kind(), "kubernetes");
  std::promise<ActionResult> done;
  actuator->Execute(Request(v1::CLUSTER_ACTION_ISOLATE_NODE, "worker02"),
                    [&done](ActionResult r) { done.set_value(std::move(r)); });
  auto result = done.get_future();
  ASSERT_EQ(result.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(result.get().ok);
  actuator->Stop();
  EXPECT_TRUE(k8s::Unschedulable(*world_.api->Object(NodePathOf("worker02"))));
}

}  // namespace
}  // namespace clusterd
