// What the kubernetes integration and actuator send to the API server
// (clusterd/k8s/requests.h), without one: each patch is applied to a Node as
// kube-apiserver would apply it (RFC 6902, with its resourceVersion test),
// and the result is what docs/kubernetes.md promises.
#include <gtest/gtest.h>

#include "clusterd/config/config.h"
#include "clusterd/k8s/api/client.h"
#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/context.h"
#include "clusterd/k8s/requests.h"
#include "k8s_objects.h"

namespace clusterd {
namespace {

using nlohmann::json;
using testing::NodeObject;

const KubernetesMarks kMarks = MarksFor(ClusterdConfig::Kubernetes{});

json Stored(json object, const std::string& rv = "7") {
  object["metadata"]["resourceVersion"] = rv;
  return object;
}

TEST(K8sRequests, MarksLiveInTheTaintKeysDomain) {
  ClusterdConfig::Kubernetes k;
  k.taint_key = "example.com/broken";
  auto m = MarksFor(k);
  EXPECT_EQ(m.taint_key, "example.com/broken");
  EXPECT_EQ(m.cordoned_annotation, "example.com/cordoned");
  EXPECT_EQ(m.isolated_annotation, "example.com/isolated-at");
  EXPECT_EQ(m.devices_annotation, "example.com/isolated-devices");
  EXPECT_EQ(m.device_taint_prefix, "example.com/isolated-device-");
  EXPECT_EQ(k8s::DeviceTaintKey(m, 3), "example.com/isolated-device-3");
  k.taint_key = "broken";  // no domain: ClusterD's
  EXPECT_EQ(MarksFor(k).cordoned_annotation, "clusterd.io/cordoned");
}

TEST(K8sRequests, IsolateNodeCordonsTaintsAndSaysItCordoned) {
  json node = Stored(NodeObject("worker01"));
  node["spec"]["taints"] = json::array({{{"key", "other"}, {"effect", "NoSchedule"}}});
  auto patch = k8s::IsolateNodePatch(node, kMarks, "SEPARATE", "NoSchedule", "2026-11-30T01:02:03Z");
  ASSERT_TRUE(patch.has_value());
  json after = node.patch(*patch);
  EXPECT_TRUE(k8s::Unschedulable(after));
  ASSERT_EQ(after["spec"]["taints"].size(), 2u);
  EXPECT_EQ(after["spec"]["taints"][0]["key"], "other");  // kept
  EXPECT_EQ(after["spec"]["taints"][1], json({{"key", "clusterd.io/fault"},
                                              {"value", "SEPARATE"},
                                              {"effect", "NoSchedule"},
                                              {"timeAdded", "2026-11-30T01:02:03Z"}}));
  EXPECT_EQ(k8s::Annotation(after, "clusterd.io/cordoned"), "true");
  EXPECT_EQ(k8s::Annotation(after, "clusterd.io/isolated-at"), "2026-11-30T01:02:03Z");
  EXPECT_EQ(k8s::Annotation(after, "workerselector"), "");  // labels are not annotations
}

TEST(K8sRequests, IsolateNodeLeavesAnAdministratorsCordonTheirs) {
  json node = Stored(NodeObject("worker01"));
  node["spec"]["unschedulable"] = true;
  node["metadata"]["annotations"] = {{"team", "infra"}};
  auto patch = k8s::IsolateNodePatch(node, kMarks, "SEPARATE", "NoExecute", "t");
  ASSERT_TRUE(patch.has_value());
  json after = node.patch(*patch);
  EXPECT_TRUE(k8s::HasTaint(after, "clusterd.io/fault"));
  EXPECT_EQ(after["spec"]["taints"][0]["effect"], "NoExecute");
  EXPECT_EQ(k8s::Annotation(after, "clusterd.io/cordoned"), "");  // not ours to undo later
  EXPECT_EQ(k8s::Annotation(after, "team"), "infra");
}

TEST(K8sRequests, IsolateNodeIsNothingWhenTaintedAndCordoned) {
  json node = Stored(NodeObject("worker01"));
  node["spec"]["unschedulable"] = true;
  node["spec"]["taints"] = json::array({{{"key", "clusterd.io/fault"}, {"value", "SEPARATE"}}});
  EXPECT_FALSE(k8s::IsolateNodePatch(node, kMarks, "SEPARATE", "NoSchedule", "t").has_value());
  // Tainted but uncordoned since: cordoned again, the taint not doubled.
  node["spec"]["unschedulable"] = false;
  auto patch = k8s::IsolateNodePatch(node, kMarks, "SEPARATE", "NoSchedule", "t");
  ASSERT_TRUE(patch.has_value());
  json after = node.patch(*patch);
  EXPECT_EQ(after["spec"]["taints"].size(), 1u);
  EXPECT_TRUE(k8s::Unschedulable(after));
}

TEST(K8sRequests, NodePatchesFailWhenTheNodeChangedSinceItWasRead) {
  json read = Stored(NodeObject("worker01"), "7");
  json now = Stored(NodeObject("worker01"), "8");
  auto isolate = k8s::IsolateNodePatch(read, kMarks, "SEPARATE", "NoSchedule", "t");
  ASSERT_TRUE(isolate.has_value());
  EXPECT_THROW(now.patch(*isolate), json::exception);
  auto device = k8s::IsolateDevicePatch(read, kMarks, 1);
  ASSERT_TRUE(device.has_value());
  EXPECT_THROW(now.patch(*device), json::exception);
  EXPECT_THROW(now.patch(k8s::UnisolatePatch(read, kMarks)), json::exception);
}

TEST(K8sRequests, IsolateDeviceKeepsTheListSortedAndOnce) {
  json node = Stored(NodeObject("worker01"));
  node["metadata"]["annotations"] = {{"clusterd.io/isolated-devices", "3,x,1234567,0"}};
  EXPECT_EQ(k8s::MarkedDevices(node, kMarks), (std::set<uint32_t>{0, 3}));  // garbage skipped
  EXPECT_FALSE(k8s::IsolateDevicePatch(node, kMarks, 3).has_value());
  auto patch = k8s::IsolateDevicePatch(node, kMarks, 1);
  ASSERT_TRUE(patch.has_value());
  EXPECT_EQ(k8s::Annotation(node.patch(*patch), "clusterd.io/isolated-devices"), "0,1,3");
}

// Where a device's isolation reaches the job's scheduler, best first; none
// of them: the fallback taint is needed.
TEST(K8sRequests, IsolationViewIsTheFirstThatCoversTheDevice) {
  using k8s::IsolationView;
  k8s::IsolationViewInputs in;
  in.isolated_on_node = 1;
  EXPECT_EQ(k8s::DecideIsolationView(in), IsolationView::kNone);  // no device plugin resource
  in.has_resource = true;
  in.capacity = 8;
  in.allocatable = 8;
  EXPECT_EQ(k8s::DecideIsolationView(in), IsolationView::kNone);  // the plugin saw nothing
  in.allocatable = 7;
  EXPECT_EQ(k8s::DecideIsolationView(in), IsolationView::kAllocatable);
  in.isolated_on_node = 2;  // two isolated, one left out: the other may still be handed out
  EXPECT_EQ(k8s::DecideIsolationView(in), IsolationView::kNone);
  in.capacity = 7;  // a plugin that lowers the capacity too: not told apart
  in.allocatable = 7;
  in.isolated_on_node = 1;
  EXPECT_EQ(k8s::DecideIsolationView(in), IsolationView::kNone);
  in.allocatable = 9;  // more allocatable than capacity (garbage): none
  EXPECT_EQ(k8s::DecideIsolationView(in), IsolationView::kNone);
  in.dra = true;
  EXPECT_EQ(k8s::DecideIsolationView(in), IsolationView::kDra);
  in.volcano = true;
  EXPECT_EQ(k8s::DecideIsolationView(in), IsolationView::kVolcano);
  EXPECT_EQ(k8s::IsolationViewName(IsolationView::kVolcano), "volcano");
  EXPECT_EQ(k8s::IsolationViewName(IsolationView::kDra), "dra");
  EXPECT_EQ(k8s::IsolationViewName(IsolationView::kAllocatable), "allocatable");
  EXPECT_EQ(k8s::IsolationViewName(IsolationView::kNone), "none");
}

TEST(K8sRequests, FallbackTaintsAreAddedOnceAndLiftedAlone) {
  json node = Stored(NodeObject("worker01"));
  node["spec"]["taints"] = json::array({{{"key", "other"}, {"effect", "NoSchedule"}}});
  auto patch = k8s::DeviceFallbackTaintPatch(node, kMarks, 3, "SEPARATE", "2026-12-07T02:00:00Z");
  ASSERT_TRUE(patch.has_value());
  json tainted = Stored(node.patch(*patch), "8");
  EXPECT_TRUE(k8s::HasTaint(tainted, "other"));
  EXPECT_FALSE(k8s::DeviceFallbackTaintPatch(tainted, kMarks, 3, "SEPARATE", "t").has_value());
  tainted = Stored(tainted.patch(*k8s::DeviceFallbackTaintPatch(tainted, kMarks, 5, "PRE_SEPARATE", "bad")), "9");
  EXPECT_EQ(k8s::DeviceFallbackTaints(tainted, kMarks),
            (std::map<uint32_t, int64_t>{{3, k8s::ParseRfc3339("2026-12-07T02:00:00Z")}, {5, -1}}));
  json lifted = tainted.patch(k8s::RemoveDeviceTaintsPatch(tainted, kMarks, {3}));
  EXPECT_EQ(k8s::DeviceFallbackTaints(lifted, kMarks), (std::map<uint32_t, int64_t>{{5, -1}}));
  EXPECT_TRUE(k8s::HasTaint(lifted, "other"));
  // Keys under the prefix that name no device are not ours.
  tainted["spec"]["taints"].push_back({{"key", "clusterd.io/isolated-device-x"}, {"effect", "NoSchedule"}});
  EXPECT_EQ(k8s::DeviceFallbackTaints(tainted, kMarks).size(), 2u);
  // Guarded by the resourceVersion, as every Node patch.
  EXPECT_EQ(k8s::RemoveDeviceTaintsPatch(tainted, kMarks, {5})[0]["value"], "9");
}

// The avoid-domain taint (docs/domains.md): PreferNoSchedule, its value the
// incident; set once, moved to a new incident, removed alone.
TEST(K8sRequests, TheAvoidDomainTaintIsSetOnceAndRemovedAlone) {
  json node = Stored(NodeObject("worker01"));
  node["spec"]["taints"] = json::array({{{"key", "other"}, {"effect", "NoSchedule"}}});
  EXPECT_FALSE(k8s::AvoidTaint(node, kMarks).has_value());
  EXPECT_FALSE(k8s::RemoveAvoidTaintPatch(node, kMarks).has_value());  // nothing to remove
  auto patch = k8s::AvoidTaintPatch(node, kMarks, "inc-3", "2026-12-07T02:00:00Z");
  ASSERT_TRUE(patch.has_value());
  EXPECT_EQ((*patch)[0]["value"], "7");  // guarded by the resourceVersion
  json avoided = Stored(node.patch(*patch), "8");
  EXPECT_EQ(k8s::AvoidTaint(avoided, kMarks), std::optional<std::string>("inc-3"));
  EXPECT_TRUE(k8s::HasTaint(avoided, "other"));
  bool prefer = false;
  for (const auto& t : avoided["spec"]["taints"]) {
    prefer = prefer || (t["key"] == "clusterd.io/avoid-domain" && t["effect"] == "PreferNoSchedule");
  }
  EXPECT_TRUE(prefer);
  EXPECT_FALSE(k8s::AvoidTaintPatch(avoided, kMarks, "inc-3", "t").has_value());  // there already
  json moved = Stored(avoided.patch(*k8s::AvoidTaintPatch(avoided, kMarks, "inc-4", "t")), "9");
  EXPECT_EQ(k8s::AvoidTaint(moved, kMarks), std::optional<std::string>("inc-4"));
  EXPECT_EQ(moved["spec"]["taints"].size(), 2u);  // replaced, not added
  json lifted = moved.patch(*k8s::RemoveAvoidTaintPatch(moved, kMarks));
  EXPECT_FALSE(k8s::AvoidTaint(lifted, kMarks).has_value());
  EXPECT_TRUE(k8s::HasTaint(lifted, "other"));
}

TEST(K8sRequests, APlacementOnIsolatedHardwareIsNamed) {
  json node = Stored(NodeObject("worker01"));
  EXPECT_EQ(k8s::IsolatedPlacement("worker01", node, {0, 1}, kMarks), "");
  EXPECT_EQ(k8s::IsolatedPlacement("worker09", std::nullopt, {0, 1}, kMarks), "");  // not cached: unknown
  node["metadata"]["annotations"] = {{"clusterd.io/isolated-devices", "1,3"}};
  EXPECT_EQ(k8s::IsolatedPlacement("worker01", node, {0, 2}, kMarks), "");  // other chips of the node
  EXPECT_EQ(k8s::IsolatedPlacement("worker01", node, {}, kMarks), "");      // devices unknown: by the node only
  EXPECT_EQ(k8s::IsolatedPlacement("worker01", node, {0, 1}, kMarks),
            "device 1 of node worker01 isolated (clusterd.io/isolated-devices)");
  EXPECT_EQ(k8s::IsolatedPlacement("worker01", node, {1, 3}, kMarks),
            "devices 1,3 of node worker01 isolated (clusterd.io/isolated-devices)");
  node["spec"]["taints"] = json::array({{{"key", "clusterd.io/fault"}, {"effect", "NoSchedule"}}});
  EXPECT_EQ(k8s::IsolatedPlacement("worker01", node, {}, kMarks),
            "node worker01 is isolated (taint clusterd.io/fault)");
}

TEST(K8sRequests, UnisolateUndoesExactlyWhatIsolateDid) {
  json node = Stored(NodeObject("worker01"));
  node["metadata"]["annotations"] = {{"team", "infra"}};
  node["spec"]["taints"] = json::array({{{"key", "other"}, {"effect", "NoSchedule"}}});
  json isolated = Stored(node.patch(*k8s::IsolateNodePatch(node, kMarks, "SEPARATE", "NoSchedule", "t")), "8");
  ASSERT_TRUE(k8s::CordonedByClusterd(isolated, kMarks));
  json back = isolated.patch(k8s::UnisolatePatch(isolated, kMarks));
  EXPECT_FALSE(k8s::Unschedulable(back));
  EXPECT_FALSE(k8s::HasTaint(back, "clusterd.io/fault"));
  EXPECT_TRUE(k8s::HasTaint(back, "other"));
  EXPECT_EQ(k8s::Annotations(back), json({{"team", "infra"}}));

  // An administrator's cordon outlives the un-isolation.
  node["spec"]["unschedulable"] = true;
  isolated = Stored(node.patch(*k8s::IsolateNodePatch(node, kMarks, "SEPARATE", "NoSchedule", "t")), "9");
  ASSERT_FALSE(k8s::CordonedByClusterd(isolated, kMarks));
  back = isolated.patch(k8s::UnisolatePatch(isolated, kMarks));
  EXPECT_TRUE(k8s::Unschedulable(back));
  EXPECT_FALSE(k8s::HasTaint(back, "clusterd.io/fault"));
}

TEST(K8sRequests, ConditionCarriesTheIsolatedDevicesAndKeepsItsTransitionTime) {
  v1::Node n;
  n.set_name("worker01");
  n.set_health(v1::HEALTH_UNHEALTHY);
  n.set_worst_level(v1::FAULT_LEVEL_SEPARATE);
  std::vector<v1::Fault> faults = {testing::ChipFault("worker01", "4C4BA00C", 0)};
  json cond = k8s::NodeCondition(n, "AcceleratorHealthy", faults, {0, 3});
  EXPECT_EQ(cond["status"], "False");
  EXPECT_EQ(cond["message"],
            "worst level SEPARATE; 1 active fault: 4C4BA00C (device 0, SEPARATE); isolated devices: 0,3");
  json node = NodeObject("worker01");
  json first = k8s::ConditionPatch(node, cond, "2026-11-30T01:00:00Z");
  EXPECT_EQ(first["status"]["conditions"][0]["lastTransitionTime"], "2026-11-30T01:00:00Z");
  node["status"]["conditions"].push_back(first["status"]["conditions"][0]);
  json again = k8s::ConditionPatch(node, cond, "2026-11-30T02:00:00Z");
  EXPECT_EQ(again["status"]["conditions"][0]["lastTransitionTime"], "2026-11-30T01:00:00Z");
  EXPECT_EQ(again["status"]["conditions"][0]["lastHeartbeatTime"], "2026-11-30T02:00:00Z");
}

TEST(K8sRequests, DevicesAnnotationIsSetOrRemoved) {
  json node = NodeObject("worker01");
  node.merge_patch(k8s::DevicesAnnotationPatch(kMarks, k8s::DeviceList({0, 3})));
  EXPECT_EQ(k8s::Annotation(node, "clusterd.io/isolated-devices"), "0,3");
  node.merge_patch(k8s::DevicesAnnotationPatch(kMarks, ""));
  EXPECT_EQ(k8s::Annotations(node), json::object());
}

TEST(K8sRequests, PodRemovalsCarryAUidPrecondition) {
  json ev = k8s::EvictionBody("train", "llm-worker-1", "uid-1");
  EXPECT_EQ(ev["kind"], "Eviction");
  EXPECT_EQ(ev["metadata"], json({{"name", "llm-worker-1"}, {"namespace", "train"}}));
  EXPECT_EQ(ev["deleteOptions"]["preconditions"]["uid"], "uid-1");
  EXPECT_EQ(k8s::DeleteOptionsBody("uid-1")["preconditions"]["uid"], "uid-1");
  EXPECT_EQ(k8s::PodPath("a b", "c/d"), "/api/v1/namespaces/a%20b/pods/c%2Fd");
}

TEST(K8sRequests, RecordNamesAreStableValidAndDistinct) {
  const std::string a = k8s::RecordName("Train-1.1/2");
  EXPECT_EQ(a, k8s::RecordName("Train-1.1/2"));
  EXPECT_EQ(a.rfind("clusterd-train-1.1-2-", 0), 0u) << a;
  EXPECT_NE(a, k8s::RecordName("train-1.1/2"));  // the hash keeps keys apart that clean alike
  const std::string long_name = k8s::RecordName(std::string(1000, 'x'));
  EXPECT_LE(long_name.size(), 253u);
  for (char c : long_name) EXPECT_TRUE(std::islower(c) || std::isdigit(c) || c == '-' || c == '.');
}

TEST(K8sRequests, EventsRegardTheirObjectAndRecordTheChosenPods) {
  k8s::EventSpec spec;
  spec.name = k8s::RecordName("r.1/0/Evict");
  spec.regarding_kind = "Pod";
  spec.regarding_name = "llm-worker-1";
  spec.regarding_namespace = "train";
  spec.regarding_uid = "uid-1";
  spec.action = "Evict";
  spec.note = std::string(2000, 'n');
  spec.reporting_instance = std::string(300, 'h');
  spec.event_time = "2026-11-30T01:02:03.000000Z";
  json ev = k8s::EventBody(spec);
  EXPECT_EQ(ev["metadata"]["namespace"], "train");
  EXPECT_EQ(
      ev["regarding"],
      json(
          {{"kind", "Pod"}, {"name", "llm-worker-1"}, {"namespace", "train"}, {"uid", "uid-1"}, {"apiVersion", "v1"}}));
  EXPECT_EQ(ev["reason"], "ClusterdRecovery");
  EXPECT_EQ(ev["type"], "Warning");
  EXPECT_EQ(ev["note"].get<std::string>().size(), 1000u);
  EXPECT_EQ(ev["reportingInstance"].get<std::string>().size(), 128u);

  json record = k8s::RemovalRecordBody(spec, "r.1/0", {"uid-1", "uid-2"});
  EXPECT_EQ(record["metadata"]["name"], k8s::RecordName("r.1/0"));
  EXPECT_EQ(k8s::Annotation(record, "clusterd.io/idempotency-key"), "r.1/0");
  EXPECT_EQ(k8s::RecordedPodUids(record), (std::set<std::string>{"uid-1", "uid-2"}));
  EXPECT_TRUE(k8s::RecordedPodUids(NodeObject("x")).empty());

  spec.regarding_kind = "Node";
  spec.regarding_namespace.clear();
  EXPECT_EQ(k8s::EventNamespace(spec), "default");
  EXPECT_FALSE(k8s::EventBody(spec)["regarding"].contains("namespace"));
}

TEST(K8sRequests, TimesAndRetryAfter) {
  const TimePoint t = TimePoint(std::chrono::seconds(1'764'464'523)) + std::chrono::microseconds(42);
  EXPECT_EQ(k8s::Rfc3339(t, false), "2025-11-30T01:02:03Z");
  EXPECT_EQ(k8s::Rfc3339(t, true), "2025-11-30T01:02:03.000042Z");
  EXPECT_EQ(k8s::ParseRfc3339("2025-11-30T01:02:03Z"), 1'764'464'523);
  EXPECT_EQ(k8s::ParseRfc3339("yesterday"), -1);
  EXPECT_EQ(k8s::ParseRetryAfter("3"), std::chrono::seconds(3));
  EXPECT_EQ(k8s::ParseRetryAfter(" 0 "), std::chrono::seconds(0));
  EXPECT_FALSE(k8s::ParseRetryAfter("").has_value());
  EXPECT_FALSE(k8s::ParseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT").has_value());
  EXPECT_FALSE(k8s::ParseRetryAfter("-1").has_value());
  EXPECT_FALSE(k8s::ParseRetryAfter("99999").has_value());  // over a day
  EXPECT_EQ(k8s::JsonPointerToken("a/b~c"), "a~1b~0c");
}

}  // namespace
}  // namespace clusterd
