// DRA device taints without an API server (clusterd/k8s/dra.h): which
// ResourceSlice device is ClusterD's device id, the DeviceTaintRule written
// for it and how it is read back, the effect per level, and the k8s_dra_*
// settings.
#include <gtest/gtest.h>

#include "clusterd/config/config.h"
#include "clusterd/k8s/context.h"
#include "clusterd/k8s/dra.h"
#include "k8s_objects.h"

namespace clusterd {
namespace {

using nlohmann::json;
using testing::ResourceSliceObject;

std::vector<std::string> Names(const std::vector<k8s::DraDevice>& devices) {
  std::vector<std::string> out;
  for (const auto& d : devices) out.push_back(d.driver + "/" + d.pool + "/" + d.name);
  return out;
}

std::vector<std::string> Match(const json& slices, uint32_t id, const k8s::DraMatch& match = {}) {
  return Names(k8s::MatchDraDevices(slices, "worker01", id, match));
}

TEST(K8sDra, TheIndexAttributeWinsOverTheName) {
  // NVIDIA's driver: gpu-<minor>, with index and minor; here index 3 is
  // the device named gpu-5.
  json slice = ResourceSliceObject("worker01", "gpu.nvidia.com", "gpu", 8, true);
  slice["spec"]["devices"][5]["attributes"]["index"]["int"] = 3;
  slice["spec"]["devices"][3]["attributes"]["index"]["int"] = 5;
  EXPECT_EQ(Match(json::array({slice}), 3), std::vector<std::string>{"gpu.nvidia.com/worker01/gpu-5"});
  // Qualified with the driver's domain, as a driver may publish it.
  json qualified = ResourceSliceObject("worker01", "gpu.nvidia.com", "gpu", 2, false);
  qualified["spec"]["devices"][1]["attributes"] = {{"gpu.nvidia.com/index", {{"int", 0}}}};
  qualified["spec"]["devices"][0]["attributes"] = {{"gpu.nvidia.com/index", {{"int", 1}}}};
  EXPECT_EQ(Match(json::array({qualified}), 0), std::vector<std::string>{"gpu.nvidia.com/worker01/gpu-1"});
  // An attribute of another type is no id, and the name is not tried.
  json text = ResourceSliceObject("worker01", "gpu.nvidia.com", "gpu", 1, false);
  text["spec"]["devices"][0]["attributes"] = {{"index", {{"string", "0"}}}};
  EXPECT_TRUE(Match(json::array({text}), 0).empty());
}

TEST(K8sDra, ADeviceWithoutTheAttributeMatchesByName) {
  const json npu = ResourceSliceObject("worker01", "npu.huawei.com", "npu", 8, false);
  EXPECT_EQ(Match(json::array({npu}), 3), std::vector<std::string>{"npu.huawei.com/worker01/npu-3"});
  EXPECT_TRUE(Match(json::array({npu}), 8).empty());
  // MIG devices are not a device id's name.
  json mig = ResourceSliceObject("worker01", "gpu.nvidia.com", "gpu", 0, false);
  mig["spec"]["devices"] = json::array({{{"name", "gpu-3-mig-9-4-1"}}});
  EXPECT_TRUE(Match(json::array({mig}), 3).empty());
  // A template of one's own; none at all turns names off.
  k8s::DraMatch m;
  m.names = {"davinci{id}"};
  json own = ResourceSliceObject("worker01", "npu.huawei.com", "npu", 0, false);
  own["spec"]["devices"] = json::array({{{"name", "davinci3"}}, {{"name", "npu-3"}}});
  EXPECT_EQ(Match(json::array({own}), 3, m), std::vector<std::string>{"npu.huawei.com/worker01/davinci3"});
  m.names.clear();
  EXPECT_TRUE(Match(json::array({own}), 3, m).empty());
  // v1beta1 keeps the attributes under "basic".
  json beta = ResourceSliceObject("worker01", "gpu.nvidia.com", "gpu", 2, false);
  beta["spec"]["devices"][1]["basic"] = {{"attributes", {{"index", {{"int", 0}}}}}};
  beta["spec"]["devices"][0]["basic"] = {{"attributes", {{"index", {{"int", 1}}}}}};
  EXPECT_EQ(Match(json::array({beta}), 0), std::vector<std::string>{"gpu.nvidia.com/worker01/gpu-1"});
}

TEST(K8sDra, OnlyTheNodesSlicesAndTheDriversNamedCount) {
  const json slices = json::array({ResourceSliceObject("worker02", "npu.huawei.com", "npu", 8, false),
                                   ResourceSliceObject("worker01", "npu.huawei.com", "npu", 8, false),
                                   ResourceSliceObject("worker01", "nic.example.com", "nic", 4, true)});
  // Two drivers publish a device 3 (the NIC by its index): ambiguous.
  EXPECT_EQ(Match(slices, 3),
            (std::vector<std::string>{"nic.example.com/worker01/nic-3", "npu.huawei.com/worker01/npu-3"}));
  k8s::DraMatch m;
  m.drivers = {"npu.huawei.com"};
  EXPECT_EQ(Match(slices, 3, m), std::vector<std::string>{"npu.huawei.com/worker01/npu-3"});
  // Malformed input is skipped, never a crash.
  const json junk = json::array({nullptr,
                                 3,
                                 json::object(),
                                 {{"spec", {{"nodeName", "worker01"}, {"devices", 7}}}},
                                 {{"spec", {{"nodeName", "worker01"}, {"driver", "d"}, {"devices", {1, "x"}}}}}});
  EXPECT_TRUE(Match(junk, 3).empty());
  EXPECT_TRUE(Match(json::object(), 3).empty());
  EXPECT_TRUE(Names(k8s::MatchDraDevices(slices, "", 3, {})).empty());
}

TEST(K8sDra, SeparateEvictsAndMilderLevelsOnlyKeepNewClaimsAway) {
  EXPECT_EQ(k8s::DeviceTaintEffect(v1::FAULT_LEVEL_SEPARATE), "NoExecute");
  EXPECT_EQ(k8s::DeviceTaintEffect(v1::FAULT_LEVEL_PRE_SEPARATE), "NoSchedule");
  EXPECT_EQ(k8s::DeviceTaintEffect(v1::FAULT_LEVEL_RESTART_NPU), "NoSchedule");
}

TEST(K8sDra, Paths) {
  EXPECT_EQ(k8s::DraPath("v1", "devicetaintrules", "a b"), "/apis/resource.k8s.io/v1/devicetaintrules/a%20b");
  EXPECT_EQ(k8s::NodeSlicesPath("v1", "worker01"),
            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dworker01");
  EXPECT_EQ(k8s::ManagedRulesPath("v1alpha3"),
            "/apis/resource.k8s.io/v1alpha3/devicetaintrules?labelSelector=clusterd.io%2Fmanaged%3Dtrue");
}

k8s::DeviceTaintSpec Spec(const std::string& effect = "NoExecute") {
  k8s::DeviceTaintSpec s;
  s.version = "v1";
  s.node = "worker01";
  s.device = 3;
  s.target = {"npu.huawei.com", "worker01", "npu-3"};
  s.key = "clusterd.io/fault";
  s.value = effect == "NoExecute" ? "SEPARATE" : "PRE_SEPARATE";
  s.effect = effect;
  s.now = "2026-12-01T00:00:00Z";
  return s;
}

TEST(K8sDra, TheRuleNamesItsDeviceAndIsReadBack) {
  const json rule = k8s::DeviceTaintRuleBody(Spec());
  EXPECT_EQ(rule["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(rule["kind"], "DeviceTaintRule");
  EXPECT_EQ(rule["metadata"]["name"], k8s::DeviceTaintRuleName("worker01", 3));
  EXPECT_EQ(rule["metadata"]["name"].get<std::string>().rfind("clusterd-dra-worker01-3-", 0), 0u);
  EXPECT_NE(k8s::DeviceTaintRuleName("worker01", 3), k8s::DeviceTaintRuleName("worker01", 4));
  EXPECT_EQ(rule["metadata"]["labels"], json({{"clusterd.io/managed", "true"}}));
  EXPECT_EQ(rule["spec"], json::parse(R"({"deviceSelector": {"driver": "npu.huawei.com", "pool": "worker01",
    "device": "npu-3"}, "taint": {"key": "clusterd.io/fault", "value": "SEPARATE", "effect": "NoExecute"}})"));
  auto back = k8s::ParseManagedRule(rule);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->name, rule["metadata"]["name"]);
  EXPECT_EQ(back->node, "worker01");
  EXPECT_EQ(back->device, 3u);
  EXPECT_EQ(back->isolated_at, k8s::ParseRfc3339("2026-12-01T00:00:00Z"));
  // Someone else's rule, or ours with its annotations broken: not ours to delete.
  json other = rule;
  other["metadata"].erase("labels");
  EXPECT_FALSE(k8s::ParseManagedRule(other).has_value());
  for (const char* bad : {"", "x", "123456", "-1"}) {
    json broken = rule;
    broken["metadata"]["annotations"]["clusterd.io/device"] = bad;
    EXPECT_FALSE(k8s::ParseManagedRule(broken).has_value()) << bad;
  }
}

TEST(K8sDra, AnExistingRuleIsOnlyEverStrengthened) {
  json have = k8s::DeviceTaintRuleBody(Spec("NoSchedule"));
  have["metadata"]["resourceVersion"] = "41";
  have["spec"]["taint"]["timeAdded"] = "2026-12-01T00:00:00Z";  // the server's
  EXPECT_FALSE(k8s::DeviceTaintRulePatch(have, k8s::DeviceTaintRuleBody(Spec("NoSchedule"))).has_value());
  auto stronger = k8s::DeviceTaintRulePatch(have, k8s::DeviceTaintRuleBody(Spec("NoExecute")));
  ASSERT_TRUE(stronger.has_value());
  EXPECT_EQ(*stronger, json::parse(R"({"metadata": {"resourceVersion": "41"}, "spec": {"taint":
    {"key": "clusterd.io/fault", "value": "SEPARATE", "effect": "NoExecute"}}})"));
  have.merge_patch(*stronger);
  EXPECT_FALSE(k8s::DeviceTaintRulePatch(have, k8s::DeviceTaintRuleBody(Spec("NoSchedule"))).has_value());
  // The driver renamed the device: the selector follows.
  k8s::DeviceTaintSpec moved = Spec();
  moved.target.name = "npu-3a";
  auto selector = k8s::DeviceTaintRulePatch(have, k8s::DeviceTaintRuleBody(moved));
  ASSERT_TRUE(selector.has_value());
  EXPECT_EQ((*selector)["spec"]["deviceSelector"]["device"], "npu-3a");
  EXPECT_FALSE((*selector)["spec"].contains("taint"));
}

const ConfigKey* Key(const std::string& name) {
  for (const ConfigKey& k : ClusterdConfigKeys()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

TEST(K8sDra, TheSettingsAreTheMatch) {
  ClusterdConfig c;
  const k8s::DraMatch d = DraMatchFrom(c.k8s);
  EXPECT_TRUE(d.drivers.empty());
  EXPECT_EQ(d.attribute, "index");
  EXPECT_EQ(d.names, (std::vector<std::string>{"npu-{id}", "gpu-{id}"}));
  const ConfigKey* names = Key("k8s_dra_device_names");
  ASSERT_NE(names, nullptr);
  EXPECT_TRUE(names->set("npu-{id},davinci{id}", &c).ok());
  EXPECT_EQ(c.k8s.dra_device_names, (std::vector<std::string>{"npu-{id}", "davinci{id}"}));
  EXPECT_FALSE(names->set("npu-3", &c).ok());
  EXPECT_TRUE(names->set("", &c).ok());
  EXPECT_TRUE(c.k8s.dra_device_names.empty());
  ASSERT_TRUE(Key("k8s_dra_drivers")->set("gpu.nvidia.com,npu.huawei.com", &c).ok());
  ASSERT_TRUE(Key("k8s_dra_device_attribute")->set("minor", &c).ok());
  EXPECT_EQ(DraMatchFrom(c.k8s).drivers, (std::vector<std::string>{"gpu.nvidia.com", "npu.huawei.com"}));
  EXPECT_EQ(DraMatchFrom(c.k8s).attribute, "minor");
}

}  // namespace
}  // namespace clusterd
