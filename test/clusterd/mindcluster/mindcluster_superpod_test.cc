// MindCluster NodeD's pingmesh with ClusterD (docs/mindcluster.md, "SuperPoD
// ConfigMaps for MindCluster NodeD's pingmesh"): the super-pod-<id> values
// built from the device plugin's Node annotations (mindcluster/superpod.h),
// byte for byte as the reference's ClusterD writes them, bad annotations
// skipped with a reason, the reference's bounds; and the findings MindCluster
// NodeD's pingmesh reports (public faults of the resource "pingmesh") taken
// as ClusterD faults of the right node and chip.
//
// What the stand-ins encode, checked against the reference (Ascend/mind-cluster):
//   - ConfigMap name super-pod-<id>, namespace cluster-system, label
//     app=pingmesh, key superPodDevice, the rack map left out:
//     component/clusterd/pkg/application/pingmesh/publisher.go
//     (updateSuperPodDeviceCM), component/ascend-common/api/consts.go (ClusterNS);
//   - the JSON shape (Version, SuperPodID, NodeDeviceMap of NodeName,
//     ServerID, DeviceMap; ServerType left out):
//     component/ascend-common/api/superpoddevice.go;
//   - the Node annotations superPodID, serverIndex, serverType and
//     baseDeviceInfos, "Ascend910-<phy id>" -> SuperDeviceID, at most 128
//     chips: component/clusterd/pkg/domain/node/node_storage.go
//     (GetNodeDeviceAndSuperPodID, getNodeDevice);
//   - Version from the node's server type, the SuperPoD bounds:
//     component/clusterd/pkg/domain/superpod/superpod_storage.go;
//   - a natural-number SuperPoD id only:
//     component/clusterd/pkg/application/pingmesh/collector.go (NodeCollector);
//   - the findings as public faults of the resource "pingmesh":
//     component/noded/pkg/pingmesh/resulthandler/cmreporter/fault_analyze.go,
//     component/clusterd/build/publicFaultConfiguration.json.
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/pubfault.h"
#include "clusterd/mindcluster/superpod.h"

namespace clusterd::mindcluster {
namespace {

using nlohmann::json;

// baseDeviceInfos as the A3 device plugin writes it (json.Marshal of
// map[string]*NpuBaseInfo: "Ascend910-<phy id>" -> {IP, SuperDeviceID}).
std::string BaseDeviceInfos(int chips, uint32_t first_sdid) {
  json infos = json::object();
  for (int i = 0; i < chips; ++i) {
    infos["Ascend910-" + std::to_string(i)] = {{"IP", "29.1." + std::to_string(i) + ".10"},
                                               {"SuperDeviceID", first_sdid + static_cast<uint32_t>(i)}};
  }
  return infos.dump();
}

json A3Annotations(const std::string& super_pod, const std::string& server_index, int chips, uint32_t first_sdid) {
  return {{"superPodID", super_pod},
          {"serverIndex", server_index},
          {"serverType", "A3"},
          {"baseDeviceInfos", BaseDeviceInfos(chips, first_sdid)},
          {"node.alpha.kubernetes.io/ttl", "0"}};
}

TEST(SuperPodMember, FromTheA3DevicePluginsAnnotations) {
  const SuperPodVerdict v = SuperPodMemberOf(A3Annotations("3", "5", 16, 100));
  ASSERT_TRUE(v.member) << v.why;
  EXPECT_FALSE(v.skip);
  EXPECT_EQ(v.member->super_pod, 3u);
  EXPECT_EQ(v.member->server_id, "5");
  ASSERT_EQ(v.member->devices.size(), 16u);
  EXPECT_EQ(v.member->devices.at(0), 100u);
  EXPECT_EQ(v.member->devices.at(15), 115u);
  // Spaces around the values are trimmed, as the reference trims them.
  json spaced = A3Annotations(" 3 ", " 5", 1, 7);
  spaced["serverType"] = " A3 ";
  const SuperPodVerdict t = SuperPodMemberOf(spaced);
  ASSERT_TRUE(t.member) << t.why;
  EXPECT_EQ(t.member->super_pod, 3u);
  EXPECT_EQ(t.member->server_id, "5");
}

TEST(SuperPodMember, ANodeOutsideAnySuperPodIsNeitherMemberNorSkipped) {
  for (const json& annotations : {json::object(), json(nullptr), json{{"superPodID", "  "}},
                                  json{{"serverType", "A3"}, {"baseDeviceInfos", BaseDeviceInfos(8, 0)}}}) {
    const SuperPodVerdict v = SuperPodMemberOf(annotations);
    EXPECT_FALSE(v.member) << annotations.dump();
    EXPECT_FALSE(v.skip) << annotations.dump();
  }
}

TEST(SuperPodMember, BadAnnotationsAreSkippedWithTheirReason) {
  struct Case {
    std::string what;
    json annotations;
    SuperPodSkip reason;
  };
  auto with = [](const std::string& key, const json& value) {
    json a = A3Annotations("3", "5", 8, 100);
    if (value.is_null()) {
      a.erase(key);
    } else {
      a[key] = value;
    }
    return a;
  };
  json too_many = json::object();
  for (int i = 0; i < 129; ++i) too_many["Ascend910-" + std::to_string(i)] = {{"SuperDeviceID", i}};
  const std::vector<Case> cases = {
      {"not a number", with("superPodID", "abc"), SuperPodSkip::kSuperPodId},
      {"negative", with("superPodID", "-1"), SuperPodSkip::kSuperPodId},
      {"leading zero", with("superPodID", "007"), SuperPodSkip::kSuperPodId},
      {"sign", with("superPodID", "+7"), SuperPodSkip::kSuperPodId},
      {"past an int", with("superPodID", "2147483648"), SuperPodSkip::kSuperPodId},
      {"A5 (npu)", with("serverType", "npu"), SuperPodSkip::kServerType},
      {"no server type", with("serverType", nullptr), SuperPodSkip::kServerType},
      {"long server index", with("serverIndex", std::string(65, '1')), SuperPodSkip::kServerIndex},
      {"control character", with("serverIndex", "1\n2"), SuperPodSkip::kServerIndex},
      {"no devices", with("baseDeviceInfos", nullptr), SuperPodSkip::kDevices},
      {"not JSON", with("baseDeviceInfos", "{not json"), SuperPodSkip::kDevices},
      {"a list", with("baseDeviceInfos", "[]"), SuperPodSkip::kDevices},
      {"no chip", with("baseDeviceInfos", "{}"), SuperPodSkip::kDevices},
      {"129 chips", with("baseDeviceInfos", too_many.dump()), SuperPodSkip::kDevices},
      // The reference's own test value: a name that is not Ascend910-<n>.
      {"device1", with("baseDeviceInfos", R"({"device1":{"IP":"192.168.1.1","SuperDeviceID":1}})"),
       SuperPodSkip::kDevices},
      {"another chip", with("baseDeviceInfos", R"({"Ascend310-0":{"SuperDeviceID":1}})"), SuperPodSkip::kDevices},
      {"leading zero chip", with("baseDeviceInfos", R"({"Ascend910-01":{"SuperDeviceID":1}})"), SuperPodSkip::kDevices},
      {"negative id", with("baseDeviceInfos", R"({"Ascend910-0":{"SuperDeviceID":-1}})"), SuperPodSkip::kDevices},
      {"fraction", with("baseDeviceInfos", R"({"Ascend910-0":{"SuperDeviceID":1.5}})"), SuperPodSkip::kDevices},
      {"string id", with("baseDeviceInfos", R"({"Ascend910-0":{"SuperDeviceID":"5"}})"), SuperPodSkip::kDevices},
      {"past 32 bits", with("baseDeviceInfos", R"({"Ascend910-0":{"SuperDeviceID":4294967296}})"),
       SuperPodSkip::kDevices},
      {"null entry", with("baseDeviceInfos", R"({"Ascend910-0":null})"), SuperPodSkip::kDevices},
      {"no id", with("baseDeviceInfos", R"({"Ascend910-0":{"IP":"1.2.3.4"}})"), SuperPodSkip::kDevices},
      {"huge", with("baseDeviceInfos", std::string(65 * 1024, ' ')), SuperPodSkip::kDevices},
  };
  for (const Case& c : cases) {
    const SuperPodVerdict v = SuperPodMemberOf(c.annotations);
    EXPECT_FALSE(v.member) << c.what;
    ASSERT_TRUE(v.skip) << c.what;
    EXPECT_EQ(*v.skip, c.reason) << c.what << ": " << v.why;
    EXPECT_FALSE(v.why.empty()) << c.what;
  }
  // Go matches a field name without regard to case; 128 chips are the most.
  EXPECT_TRUE(SuperPodMemberOf(with("baseDeviceInfos", R"({"Ascend910-0":{"superdeviceid":9}})")).member);
  too_many.erase("Ascend910-128");
  EXPECT_TRUE(SuperPodMemberOf(with("baseDeviceInfos", too_many.dump())).member);
}

TEST(SuperPodIndex, ValueIsTheReferencesGoJson) {
  SuperPodIndex index;
  std::set<uint64_t> changed;
  json b = A3Annotations("7", "1", 0, 0);
  b["baseDeviceInfos"] = R"({"Ascend910-2":{"IP":"","SuperDeviceID":202},"Ascend910-10":{"SuperDeviceID":210}})";
  index.Set("node-b", SuperPodMemberOf(b), &changed);
  index.Set("node-a", SuperPodMemberOf(A3Annotations("7", "0", 2, 100)), &changed);
  EXPECT_EQ(changed, std::set<uint64_t>{7});
  // json.Marshal of api.SuperPodDevice: maps sorted by key as strings, no
  // spaces, ServerType left out (json:"-"), empty RackMap/AcceleratorType
  // omitted.
  EXPECT_EQ(index.Value(7).value_or("<none>"),
            R"({"Version":"A3","SuperPodID":"7","NodeDeviceMap":{)"
            R"("node-a":{"NodeName":"node-a","ServerID":"0","DeviceMap":{"0":"100","1":"101"}},)"
            R"("node-b":{"NodeName":"node-b","ServerID":"1","DeviceMap":{"10":"210","2":"202"}}}})");
  // What MindCluster NodeD's parseSuperDeviceIDs reads from it.
  const json parsed = json::parse(*index.Value(7));
  EXPECT_EQ(parsed["SuperPodID"], "7");
  EXPECT_EQ(parsed["NodeDeviceMap"]["node-b"]["DeviceMap"]["10"], "210");
  EXPECT_EQ(SuperPodCmName(7), "super-pod-7");
  EXPECT_EQ(SuperPodIdOfCmName("super-pod-7"), 7u);
  EXPECT_FALSE(SuperPodIdOfCmName("super-pod-07"));
  EXPECT_FALSE(SuperPodIdOfCmName("pingmesh-config"));
}

TEST(SuperPodIndex, ANodeThatMovesChangesBothAndTheLastOneGoneEmptiesIt) {
  SuperPodIndex index;
  std::set<uint64_t> changed;
  index.Set("n1", SuperPodMemberOf(A3Annotations("1", "0", 8, 0)), &changed);
  index.Set("n2", SuperPodMemberOf(A3Annotations("1", "1", 8, 8)), &changed);
  changed.clear();
  // The same annotations again (a status update of the Node): nothing changes.
  index.Set("n1", SuperPodMemberOf(A3Annotations("1", "0", 8, 0)), &changed);
  EXPECT_TRUE(changed.empty());
  index.Set("n2", SuperPodMemberOf(A3Annotations("2", "0", 8, 8)), &changed);
  EXPECT_EQ(changed, (std::set<uint64_t>{1, 2}));
  EXPECT_EQ(index.SuperPods(), (std::set<uint64_t>{1, 2}));
  EXPECT_EQ(json::parse(*index.Value(1))["NodeDeviceMap"].size(), 1u);
  changed.clear();
  // Bad annotations take it out of its SuperPoD; counted as skipped.
  index.Set("n2", SuperPodMemberOf(A3Annotations("x", "0", 8, 8)), &changed);
  EXPECT_EQ(changed, std::set<uint64_t>{2});
  EXPECT_FALSE(index.Value(2));
  EXPECT_EQ(index.skipped()[static_cast<size_t>(SuperPodSkip::kSuperPodId)], 1u);
  index.Set("n1", std::nullopt, &changed);  // deleted
  EXPECT_FALSE(index.Value(1));
  EXPECT_TRUE(index.SuperPods().empty());
  index.Set("n2", std::nullopt, &changed);
  EXPECT_EQ(index.skipped()[static_cast<size_t>(SuperPodSkip::kSuperPodId)], 0u);
  EXPECT_EQ(index.listed(), 0u);
}

TEST(SuperPodIndex, TheReferencesBoundsOnNodesAndSuperPods) {
  SuperPodIndex index;
  std::set<uint64_t> changed;
  char name[16];
  for (int i = 0; i < 257; ++i) {
    std::snprintf(name, sizeof name, "n%03d", i);
    index.Set(name, SuperPodMemberOf(A3Annotations("1", std::to_string(i), 1, i)), &changed);
  }
  EXPECT_EQ(json::parse(*index.Value(1))["NodeDeviceMap"].size(), kMaxSuperPodNodes);
  EXPECT_FALSE(json::parse(*index.Value(1))["NodeDeviceMap"].contains("n256"));
  EXPECT_EQ(index.listed(), 256u);
  EXPECT_EQ(index.skipped()[static_cast<size_t>(SuperPodSkip::kFull)], 1u);
  // 1024 SuperPoDs are kept (the lowest ids); the 1025th has no ConfigMap
  // until one goes.
  for (uint64_t id = 2; id <= kMaxSuperPods + 1; ++id) {
    index.Set("p" + std::to_string(id), SuperPodMemberOf(A3Annotations(std::to_string(id), "0", 1, 0)), &changed);
  }
  EXPECT_TRUE(index.Value(kMaxSuperPods));
  EXPECT_FALSE(index.Value(kMaxSuperPods + 1));
  EXPECT_EQ(index.SuperPods().size(), kMaxSuperPods);
  EXPECT_EQ(index.skipped()[static_cast<size_t>(SuperPodSkip::kFull)], 2u);
  changed.clear();
  index.Set("p5", std::nullopt, &changed);
  EXPECT_TRUE(changed.count(kMaxSuperPods + 1)) << "the SuperPoD that comes in is written";
  EXPECT_TRUE(index.Value(kMaxSuperPods + 1));
  changed.clear();
  index.Set("p5", SuperPodMemberOf(A3Annotations("5", "0", 1, 0)), &changed);
  EXPECT_TRUE(changed.count(kMaxSuperPods + 1)) << "the SuperPoD pushed out is deleted";
  EXPECT_FALSE(index.Value(kMaxSuperPods + 1));
}

// What MindCluster NodeD's pingmesh reports (resulthandler/cmreporter,
// v7.0.RC1: the ConfigMap cluster-system/pingmesh-fault-<node>, label
// mc-consumer-publicfault=true, key PublicFault): one fault per chip whose
// every probe failed, code 220001001, faultId the SHA-256 of "<node>/<chip>",
// an occurrence kept with "recover" once the chip's probes succeed again.
TEST(PingMeshPublicFaults, MindClusterNodeDsFindingsLandOnTheirNodeAndChip) {
  const std::string payload = R"({"id":"0e6f6c3a-4b1b-11f0-9d6b-0242ac110002","timestamp":1750000000123,
    "version":"1.0","resource":"pingmesh","faults":[
    {"faultId":"3f1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809","faultType":"NPU",
     "faultCode":"220001001","faultTime":1750000000123,"assertion":"occur","faultLocation":{},
     "influence":[{"nodeName":"a3-node-07","nodeSN":"","deviceIds":[5]}],"description":"hccsping-mesh fault"},
    {"faultId":"9a8b7c6d5e4f30211f2e3d4c5b6a79881a2b3c4d5e6f708192a3b4c5d6e7f801","faultType":"NPU",
     "faultCode":"220001001","faultTime":1749999990000,"assertion":"recover","faultLocation":{},
     "influence":[{"nodeName":"a3-node-07","nodeSN":"","deviceIds":[2]}],"description":"hccsping-mesh fault"}]})";
  auto req = ParsePublicFaultCm(payload);
  ASSERT_TRUE(req.ok()) << req.status().message();
  PubFaultPlan plan;
  // The default resources accept "pingmesh"; the default code table has its code.
  const PubFaultVerdict verdict = PlanPublicFaults(*req, PubFaultCodeTable::Default(), PubFaultOptions{}, &plan);
  ASSERT_EQ(verdict.code, kPubFaultOk) << verdict.info;
  EXPECT_TRUE(plan.dropped.empty());
  EXPECT_EQ(plan.reporter, "pubfault/pingmesh");
  ASSERT_EQ(plan.faults.size(), 2u);
  const PlannedPubFault& occur = plan.faults[0];
  EXPECT_EQ(occur.node, "a3-node-07");
  EXPECT_EQ(occur.device, 5u);
  EXPECT_EQ(occur.code, "220001001");
  EXPECT_EQ(occur.level, v1::FAULT_LEVEL_SEPARATE);  // SeparateNPU in MindCluster's table
  EXPECT_EQ(occur.assertion, PlannedPubFault::Assertion::kOccur);
  EXPECT_EQ(occur.fault_id, "3f1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809");
  EXPECT_EQ(plan.faults[1].device, 2u);
  EXPECT_EQ(plan.faults[1].assertion, PlannedPubFault::Assertion::kRecover);
}

}  // namespace
}  // namespace clusterd::mindcluster
