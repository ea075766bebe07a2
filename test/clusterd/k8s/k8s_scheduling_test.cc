// The scheduler's link of the software chain (clusterd/k8s/scheduling.h),
// pure: Pending pods the scheduler gave up on, against the Nodes' allocatable
// resources and taints.
#include "clusterd/k8s/scheduling.h"

#include <gtest/gtest.h>

namespace clusterd::k8s {
namespace {

using nlohmann::json;

json PendingPod(const std::string& name, json limits, json tolerations = json::array(),
                const std::string& reason = "Unschedulable") {
  return {{"metadata", {{"namespace", "train"}, {"name", name}, {"uid", "uid-" + name}}},
          {"spec",
           {{"containers", json::array({{{"name", "main"}, {"resources", {{"limits", std::move(limits)}}}}})},
            {"tolerations", std::move(tolerations)}}},
          {"status",
           {{"phase", "Pending"},
            {"conditions", json::array({{{"type", "PodScheduled"}, {"status", "False"}, {"reason", reason}}})}}}};
}

json NodeOffering(const std::string& name, json allocatable, json taints = json::array()) {
  return {{"metadata", {{"name", name}}},
          {"spec", {{"taints", std::move(taints)}}},
          {"status", {{"allocatable", std::move(allocatable)}}}};
}

std::vector<std::string> Said(const std::vector<PendingFinding>& found) {
  std::vector<std::string> out;
  for (const auto& f : found) {
    out.push_back(f.pod + " " + std::to_string(f.count) + " " + f.resource + " " + f.reason + ": " + f.evidence);
  }
  return out;
}

TEST(PendingPods, ANameNoNodeOffersTooFewAndTaintsAreNamed) {
  const json maintenance = json::array({{{"key", "maintenance"}, {"value", "true"}, {"effect", "NoSchedule"}}});
  const std::vector<json> nodes = {
      NodeOffering("npu1", {{"cpu", "190"}, {"huawei.com/Ascend910B", "8"}}, maintenance),
      NodeOffering("npu2", {{"huawei.com/Ascend910B", "8"}}, maintenance),
      NodeOffering("npu3", {{"huawei.com/Ascend910B", "4"}}),
  };
  const std::vector<json> pods = {
      PendingPod("wrong-name", {{"cpu", "8"}, {"huawei.com/Ascend910", "8"}}),
      PendingPod("too-many", {{"huawei.com/Ascend910B", "16"}}),
      PendingPod("tainted", {{"huawei.com/Ascend910B", "8"}}),
      // Tolerates the taint: something else keeps it Pending, not named.
      PendingPod("tolerating", {{"huawei.com/Ascend910B", "8"}},
                 json::array({{{"key", "maintenance"}, {"operator", "Exists"}}})),
      // Fits the untainted npu3: not named.
      PendingPod("small", {{"huawei.com/Ascend910B", "4"}}),
      // Not given up on by the scheduler (yet): not named.
      PendingPod("just-made", {{"huawei.com/Ascend910", "8"}}, json::array(), "SchedulerError"),
  };
  EXPECT_EQ(Said(DiagnosePending(pods, nodes, 100)),
            (std::vector<std::string>{
                "tainted 8 huawei.com/Ascend910B taints: the 2 node(s) with 8 huawei.com/Ascend910B all carry a taint "
                "the pod does not tolerate: maintenance=true:NoSchedule (2 nodes)",
                "too-many 16 huawei.com/Ascend910B too-few: no node offers 16 huawei.com/Ascend910B: at most 8 (npu1)",
                "wrong-name 8 huawei.com/Ascend910 no-node-offers: no node offers huawei.com/Ascend910; nodes offer "
                "huawei.com/Ascend910B (3 nodes)"}));
}

TEST(PendingPods, ACordonIsATaintAndOtherVendorsAreSaidSo) {
  const std::vector<json> nodes = {{{"metadata", {{"name", "npu1"}}},
                                    {"spec", {{"unschedulable", true}}},
                                    {"status", {{"allocatable", {{"huawei.com/Ascend910", "8"}}}}}}};
  auto found = DiagnosePending({PendingPod("p", {{"huawei.com/Ascend910", "8"}})}, nodes, 100);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].reason, "taints");
  EXPECT_NE(found[0].evidence.find("node.kubernetes.io/unschedulable:NoSchedule"), std::string::npos);
  found = DiagnosePending({PendingPod("gpu", {{"nvidia.com/gpu", "1"}})}, nodes, 100);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].evidence, "no node offers nvidia.com/gpu; no node offers any nvidia.com resource");
}

TEST(PendingPods, HostileAndBoundedInput) {
  std::vector<json> pods;
  for (int i = 0; i < 500; ++i) pods.push_back(PendingPod("p" + std::to_string(i), {{"huawei.com/Ascend910", "8"}}));
  pods.push_back(json("not an object"));
  pods.push_back(PendingPod("huge", {{"huawei.com/Ascend910", "99999999999"}}));  // not a count: ignored
  pods.push_back(PendingPod("cpu-only", {{"cpu", "8"}, {"memory", "1Gi"}, {"hugepages-2Mi", "2"}}));
  const std::vector<json> nodes = {json::array(), NodeOffering("", {}), NodeOffering("npu1", {{"x.io/y", "z"}})};
  const auto found = DiagnosePending(pods, nodes, 100);
  EXPECT_EQ(found.size(), 100u);
  for (const auto& f : found) EXPECT_LE(f.evidence.size(), 512u);
  EXPECT_TRUE(DiagnosePending({}, {}, 100).empty());
}

}  // namespace
}  // namespace clusterd::k8s
