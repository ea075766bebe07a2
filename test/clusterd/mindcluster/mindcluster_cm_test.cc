// MindCluster's ConfigMap contracts, pure: the device plugin's DeviceInfoCfg
// (parsing, CheckCode, the faults it reports) and the cluster-info-device
// ConfigMaps Volcano reads (the merge with ClusterD's state, chunks,
// UpdateTime). Fixtures in testdata/mindcluster were written by Go.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/cluster_info.h"
#include "clusterd/mindcluster/device_info.h"
#include "clusterd/mindcluster/go_json.h"
#include "clusterd/mindcluster/node_info.h"

namespace clusterd::mindcluster {
namespace {

using nlohmann::json;

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(MINDCLUSTER_TESTDATA_DIR) + "/" + name);
  EXPECT_TRUE(in) << name;
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

NodeDeviceInfo Parsed(const std::string& fixture) {
  auto info = ParseDeviceInfoCfg(Fixture(fixture));
  EXPECT_TRUE(info.ok()) << fixture << ": " << info.status().message();
  return info.ok() ? *info : NodeDeviceInfo{};
}

TEST(GoJson, WritesWhatGoWrites) {
  // Go escapes <, > and &, U+2028/2029 and control bytes, and replaces a
  // byte that is not UTF-8; 0x7f and non-ASCII letters stay as they are.
  EXPECT_EQ(GoJsonStringMap({{"a<b>&c", "x\u2028y\u2029z\x01\x7f\xff\"\\\n\t \u00e9"}}), Fixture("go-escapes.json"));
  EXPECT_EQ(GoJsonString(""), "\"\"");
  EXPECT_EQ(GoJsonString("\xe0\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // overlong: three bad bytes
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DeviceInfo, ParsesThePluginsConfigMaps) {
  NodeDeviceInfo faulty = Parsed("deviceinfo-910-faulty.json");
  EXPECT_EQ(faulty.device_type, "Ascend910");
  EXPECT_EQ(faulty.available.size(), 6u);
  EXPECT_EQ(faulty.unhealthy, std::vector<std::string>{"Ascend910-3"});
  EXPECT_EQ(faulty.network_unhealthy, std::vector<std::string>{"Ascend910-7"});
  EXPECT_TRUE(faulty.recovering.empty());
  ASSERT_EQ(faulty.faults.size(), 2u);
  EXPECT_EQ(faulty.faults[0].fault_code, "80E01801,80C98009");
  EXPECT_EQ(faulty.faults[0].fault_time_and_level.at("80C98009").fault_level, "RestartBusiness");
  EXPECT_EQ(faulty.update_time, 1764806401);
  EXPECT_EQ(faulty.super_pod_id, -1);
  EXPECT_EQ(faulty.server_index, 0);

  EXPECT_EQ(Parsed("deviceinfo-910-healthy.json").available.size(), 8u);
  NodeDeviceInfo p310 = Parsed("deviceinfo-310p.json");  // no -NetworkUnhealthy or -Recovering key
  EXPECT_EQ(p310.device_type, "Ascend310P");
  EXPECT_EQ(p310.unhealthy, std::vector<std::string>{"Ascend310P-2"});
  NodeDeviceInfo npu = Parsed("deviceinfo-npu.json");
  EXPECT_EQ(npu.device_type, "npu");
  EXPECT_EQ(npu.recovering, std::vector<std::string>{"npu-1"});
}

TEST(DeviceInfo, OurBytesAreGosBytes) {
  // Written back, the parsed ConfigMap is the plugin's to the byte (its
  // CheckCode included): the hash covers exactly what Go marshals.
  EXPECT_EQ(DeviceInfoCfgJson(Parsed("deviceinfo-910-faulty.json")), Fixture("deviceinfo-910-faulty.json"));
}

TEST(DeviceInfo, ABadCheckCodeOrShapeIsRefused) {
  const std::string good = Fixture("deviceinfo-910-healthy.json");
  std::string tampered = good;
  tampered.replace(tampered.find("Ascend910-7"), 11, "Ascend910-9");
  EXPECT_EQ(ParseDeviceInfoCfg(tampered).status().code(), StatusCode::kFailedPrecondition);
  json no_code = json::parse(good);
  no_code.erase("CheckCode");
  EXPECT_EQ(ParseDeviceInfoCfg(no_code.dump()).status().code(), StatusCode::kFailedPrecondition);
  no_code["CheckCode"] = "";
  EXPECT_EQ(ParseDeviceInfoCfg(no_code.dump()).status().code(), StatusCode::kFailedPrecondition);

  EXPECT_EQ(ParseDeviceInfoCfg("not json").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceInfoCfg("[]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceInfoCfg(R"({"DeviceInfo":{"DeviceList":{},"UpdateTime":"x"}})").status().code(),
            StatusCode::kInvalidArgument);

  // Well hashed but not the plugin's shape: refused all the same.
  NodeDeviceInfo info = Parsed("deviceinfo-910-healthy.json");
  NodeDeviceInfo bad_chip = info;
  bad_chip.available.push_back("Ascend910-x");
  EXPECT_EQ(ParseDeviceInfoCfg(DeviceInfoCfgJson(bad_chip)).status().code(), StatusCode::kInvalidArgument);
  NodeDeviceInfo other_type = info;
  other_type.unhealthy.push_back("Ascend310P-1");
  EXPECT_EQ(ParseDeviceInfoCfg(DeviceInfoCfgJson(other_type)).status().code(), StatusCode::kInvalidArgument);
  NodeDeviceInfo huge = info;
  for (uint32_t i = 0; i <= kMaxChipsPerList; ++i) huge.available.push_back(ChipName("Ascend910", i));
  auto refused = ParseDeviceInfoCfg(DeviceInfoCfgJson(huge));
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("more than 1024 chips"), std::string::npos);
  NodeDeviceInfo bad_fault = info;
  DeviceFault other_chip;
  other_chip.fault_type = "CardUnhealthy";
  other_chip.npu_name = "Ascend310-1";
  bad_fault.faults.push_back(other_chip);
  EXPECT_EQ(ParseDeviceInfoCfg(DeviceInfoCfgJson(bad_fault)).status().code(), StatusCode::kInvalidArgument);
}

TEST(DeviceInfo, ChipNames) {
  EXPECT_EQ(ChipId("Ascend910", "Ascend910-3"), 3u);
  EXPECT_EQ(ChipId("Ascend910", "Ascend910-15"), 15u);
  EXPECT_EQ(ChipId("npu", "npu-2"), 2u);
  EXPECT_EQ(ChipId("npu", "Ascend950-2"), 2u);  // newer cards name chips after the model
  EXPECT_EQ(ChipId("Ascend310", "Ascend310P-1"), std::nullopt);
  EXPECT_EQ(ChipId("Ascend910", "Ascend910-"), std::nullopt);
  EXPECT_EQ(ChipId("Ascend910", "Ascend910-03"), std::nullopt);
  EXPECT_EQ(ChipId("Ascend910", "Ascend910-65536"), std::nullopt);
  EXPECT_EQ(ChipId("Ascend910", "-3"), std::nullopt);
}

TEST(DeviceInfo, FaultsPerChipAndCode) {
  // Each code at its own level (the time-and-level map), the list's entry
  // level otherwise.
  EXPECT_EQ(
      FaultsOf(Parsed("deviceinfo-910-faulty.json")),
      (std::vector<ChipFault>{
          {3, "80C98009", v1::FAULT_LEVEL_RESTART_BUSINESS, "device plugin: CardUnhealthy (SeparateNPU)"},
          {3, "80E01801", v1::FAULT_LEVEL_SEPARATE, "device plugin: CardUnhealthy (SeparateNPU)"},
          {7, "81078603", v1::FAULT_LEVEL_RESTART_BUSINESS, "device plugin: CardNetworkUnhealthy (RestartBusiness)"}}));
  // A chip in a list without an entry of that kind is a fault named after it.
  EXPECT_EQ(
      FaultsOf(Parsed("deviceinfo-npu.json")),
      (std::vector<ChipFault>{{1, "Recovering", v1::FAULT_LEVEL_RESTART_NPU, "device plugin: listed Recovering"}}));
  EXPECT_EQ(FaultsOf(Parsed("deviceinfo-310p.json")),
            (std::vector<ChipFault>{
                {2, "8C084E00", v1::FAULT_LEVEL_RESTART_NPU, "device plugin: CardUnhealthy (RestartNPU)"}}));
  EXPECT_TRUE(FaultsOf(Parsed("deviceinfo-910-healthy.json")).empty());
}

TEST(DeviceInfo, DiffRaisesChangedAndClearsGone) {
  const std::vector<ChipFault> before = {{1, "A", v1::FAULT_LEVEL_SEPARATE, ""},
                                         {2, "B", v1::FAULT_LEVEL_RESTART_NPU, ""}};
  const std::vector<ChipFault> after = {{2, "B", v1::FAULT_LEVEL_SEPARATE, ""},
                                        {3, "C", v1::FAULT_LEVEL_SUB_HEALTH, ""}};
  FaultDiff d = DiffFaults(before, after);
  EXPECT_EQ(d.raise, after);  // B at another level, C new
  EXPECT_EQ(d.clear, (std::vector<ChipFault>{before[0]}));
  EXPECT_TRUE(DiffFaults(after, after).raise.empty());
  EXPECT_TRUE(DiffFaults(after, after).clear.empty());
}

ChipState Faulty(v1::FaultLevel level, std::vector<std::string> codes = {}) {
  ChipState s;
  s.level = level;
  s.codes = std::move(codes);
  return s;
}

TEST(ClusterInfo, ClusterdsFaultsAndIsolationLeaveTheAvailableList) {
  const NodeDeviceInfo plugin = Parsed("deviceinfo-910-healthy.json");
  NodeState ours;
  ours.chip_state[2] = Faulty(v1::FAULT_LEVEL_SEPARATE, {"80E01801"});
  ours.chip_state[4] = Faulty(v1::FAULT_LEVEL_PRE_SEPARATE);
  ours.chip_state[4].in_use = true;
  ours.chip_state[5] = Faulty(v1::FAULT_LEVEL_PRE_SEPARATE);
  ours.chip_state[6] = Faulty(v1::FAULT_LEVEL_SUB_HEALTH, {"X"});
  ours.chip_state[1].isolated = true;
  ours.chip_state[0] = Faulty(v1::FAULT_LEVEL_RESTART_BUSINESS, {"010001002"});
  ours.chip_state[0].public_fault = true;
  NodeDeviceInfo e = MergeForVolcano(&plugin, ours);
  EXPECT_EQ(e.available, (std::vector<std::string>{"Ascend910-3", "Ascend910-6", "Ascend910-7"}));
  // Chip 4 is pre-separated and used: out of the available list, not unhealthy.
  EXPECT_EQ(e.unhealthy, (std::vector<std::string>{"Ascend910-0", "Ascend910-1", "Ascend910-2", "Ascend910-5"}));
  ASSERT_EQ(e.faults.size(), 5u);
  EXPECT_EQ(e.faults[0].fault_type, "PublicFault");
  EXPECT_EQ(e.faults[0].fault_level, "RestartBusiness");
  EXPECT_EQ(e.faults[1].npu_name, "Ascend910-1");
  EXPECT_EQ(e.faults[1].fault_level, "SeparateNPU");  // isolated by a recovery
  EXPECT_EQ(e.faults[1].fault_code, "");
  EXPECT_EQ(e.faults[2].fault_code, "80E01801");
  EXPECT_EQ(e.faults[3].npu_name, "Ascend910-4");
  EXPECT_EQ(e.faults[3].fault_level, "PreSeparateNPU");
  EXPECT_EQ(e.update_time, plugin.update_time);

  // An isolated node: every chip out.
  NodeState node_out;
  node_out.isolated = true;
  NodeDeviceInfo all_out = MergeForVolcano(&plugin, node_out);
  EXPECT_TRUE(all_out.available.empty());
  EXPECT_EQ(all_out.unhealthy.size(), 8u);

  // Nothing of ClusterD's: the plugin's view as it is.
  EXPECT_EQ(MergeForVolcano(&plugin, NodeState{}), plugin);
}

TEST(ClusterInfo, OneEntryPerChipAndKind) {
  const NodeDeviceInfo plugin = Parsed("deviceinfo-910-faulty.json");
  NodeState ours;
  ours.chip_state[3] = Faulty(v1::FAULT_LEVEL_RESTART_NPU, {"8C1F860B", "80E01801"});
  NodeDeviceInfo e = MergeForVolcano(&plugin, ours);
  ASSERT_EQ(e.faults.size(), 2u);
  EXPECT_EQ(e.faults[0].npu_name, "Ascend910-3");
  EXPECT_EQ(e.faults[0].fault_code, "80C98009,80E01801,8C1F860B");
  EXPECT_EQ(e.faults[0].fault_level, "SeparateNPU");  // the plugin's, more serious
  EXPECT_EQ(e.faults[1].fault_type, "CardNetworkUnhealthy");
}

// A chip ClusterD's separation policy separated: out, as MindCluster's manual
// separation lists it (level ManuallySeparateNPU), with or without a fault.
TEST(ClusterInfo, ASeparatedChipIsManuallySeparated) {
  const NodeDeviceInfo plugin = Parsed("deviceinfo-910-faulty.json");
  NodeState ours;
  ours.chip_state[6].separated = true;
  ours.chip_state[7] = Faulty(v1::FAULT_LEVEL_SUB_HEALTH, {"80818C06"});
  ours.chip_state[7].separated = true;
  NodeDeviceInfo e = MergeForVolcano(&plugin, ours);
  for (const char* chip : {"Ascend910-6", "Ascend910-7"}) {
    EXPECT_EQ(std::count(e.available.begin(), e.available.end(), chip), 0) << chip;
    EXPECT_EQ(std::count(e.unhealthy.begin(), e.unhealthy.end(), chip), 1) << chip;
  }
  std::map<std::string, DeviceFault> by_chip;
  for (const DeviceFault& f : e.faults) {
    if (f.fault_type == "CardUnhealthy") by_chip[f.npu_name] = f;
  }
  ASSERT_TRUE(by_chip.count("Ascend910-6"));
  EXPECT_EQ(by_chip["Ascend910-6"].fault_level, "ManuallySeparateNPU");
  EXPECT_EQ(by_chip["Ascend910-6"].fault_code, "");
  EXPECT_EQ(by_chip["Ascend910-7"].fault_level, "ManuallySeparateNPU");
  EXPECT_EQ(by_chip["Ascend910-7"].fault_code, "80818C06");
}

TEST(ClusterInfo, NodeWithoutPluginIsBuiltFromTheInventory) {
  NodeState ours;
  ours.device_type = "Ascend910";
  ours.chips = {0, 1, 2, 3};
  ours.chip_state[3] = Faulty(v1::FAULT_LEVEL_SEPARATE, {"80E01801"});
  NodeDeviceInfo e = MergeForVolcano(nullptr, ours);
  EXPECT_EQ(e.available, (std::vector<std::string>{"Ascend910-0", "Ascend910-1", "Ascend910-2"}));
  EXPECT_EQ(e.unhealthy, std::vector<std::string>{"Ascend910-3"});
  // All five keys, as Volcano needs them.
  json entry = json::parse(ClusterInfoEntryJson("worker01", e));
  EXPECT_EQ(entry["DeviceList"].size(), 5u);
  for (const char* key :
       {"huawei.com/Ascend910", "huawei.com/Ascend910-Unhealthy", "huawei.com/Ascend910-NetworkUnhealthy",
        "huawei.com/Ascend910-Recovering", "huawei.com/Ascend910-Fault"}) {
    EXPECT_TRUE(entry["DeviceList"].contains(key)) << key;
  }
  EXPECT_EQ(entry["CmName"], "mindx-dl-deviceinfo-worker01");
}

NodeDeviceInfo Entry(uint32_t chips, int64_t update_time) {
  NodeDeviceInfo e;
  e.device_type = "Ascend910";
  for (uint32_t i = 0; i < chips; ++i) e.available.push_back(ChipName("Ascend910", i));
  e.update_time = update_time;
  return e;
}

TEST(ClusterInfo, UpdateTimeGrowsWheneverTheListsChange) {
  ClusterInfoPublisher pub;
  ASSERT_TRUE(pub.Set("n1", Entry(8, 100), 50).ok());
  EXPECT_EQ(pub.UpdateTimeOf("n1"), 100);
  pub.Written(pub.Pending());
  // The same lists: nothing to write, the time stays.
  ASSERT_TRUE(pub.Set("n1", Entry(8, 100), 60).ok());
  EXPECT_TRUE(pub.Pending().empty());
  EXPECT_EQ(pub.UpdateTimeOf("n1"), 100);
  // A change ClusterD made (the plugin's time did not move, the clock is
  // behind): still later than what Volcano saw.
  NodeDeviceInfo changed = Entry(8, 100);
  changed.available.pop_back();
  changed.unhealthy = {"Ascend910-7"};
  ASSERT_TRUE(pub.Set("n1", changed, 60).ok());
  EXPECT_EQ(pub.UpdateTimeOf("n1"), 101);
  ASSERT_TRUE(pub.Set("n1", Entry(8, 100), 200).ok());  // back, with the clock ahead
  EXPECT_EQ(pub.UpdateTimeOf("n1"), 200);
  auto plan = pub.Pending();
  ASSERT_EQ(plan.writes.size(), 1u);
  EXPECT_EQ(plan.writes[0].name, "cluster-info-device-0");
  EXPECT_EQ(json::parse(plan.writes[0].value)["mindx-dl-deviceinfo-n1"]["UpdateTime"], 200);
}

TEST(ClusterInfo, RefreshGrowsEveryUpdateTimeAndYieldsToChanges) {
  ClusterInfoPublisher pub(1000);  // two or three entries per ConfigMap
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(pub.Set("n" + std::to_string(i), Entry(8, 100), 100).ok());
  ASSERT_GE(pub.chunks(), 3u);
  pub.Written(pub.Pending());
  pub.Refresh(150);
  EXPECT_EQ(pub.UpdateTimeOf("n0"), 150);
  EXPECT_EQ(pub.Pending().writes.size(), pub.chunks());
  // A fault on a node of the last ConfigMap: that one is written first.
  NodeDeviceInfo faulty = Entry(8, 100);
  faulty.available.pop_back();
  faulty.unhealthy = {"Ascend910-7"};
  ASSERT_TRUE(pub.Set("n5", faulty, 150).ok());
  EXPECT_EQ(pub.UpdateTimeOf("n5"), 151);
  auto plan = pub.Pending();
  ASSERT_EQ(plan.writes.size(), pub.chunks());
  EXPECT_EQ(plan.writes[0].name, "cluster-info-device-" + std::to_string(*pub.ChunkOf("n5")));
  pub.Written(plan);
  EXPECT_TRUE(pub.Pending().empty());
  pub.Refresh(150);  // a second refresh in the same second still grows
  EXPECT_EQ(pub.UpdateTimeOf("n0"), 151);
}

TEST(ClusterInfo, AQuietNodesFaultGoesBeforeNodesThatKeepChanging) {
  ClusterInfoPublisher pub(1000);  // two or three entries per ConfigMap
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(pub.Set("n" + std::to_string(i), Entry(8, 100), 100).ok());
  ASSERT_GE(pub.chunks(), 3u);
  pub.Written(pub.Pending());
  // A chip out, another each time: every change is urgent.
  auto down = [](int64_t t) {
    NodeDeviceInfo e = Entry(8, t);
    const uint32_t chip = static_cast<uint32_t>(t % 7) + 1;
    e.available.erase(e.available.begin() + chip);
    e.unhealthy = {ChipName("Ascend910", chip)};
    return e;
  };
  const std::string flapping = "cluster-info-device-" + std::to_string(*pub.ChunkOf("n0"));
  const std::string quiet = "cluster-info-device-" + std::to_string(*pub.ChunkOf("n8"));
  ASSERT_NE(flapping, quiet);
  auto names = [](const ClusterInfoPublisher::Plan& plan) {
    std::vector<std::string> out;
    for (const auto& w : plan.writes) out.push_back(w.name);
    return out;
  };
  // n0 (its plugin rewrites its ConfigMap every second) changes, is
  // written, and goes on changing.
  for (int64_t t = 111; t <= 115; ++t) ASSERT_TRUE(pub.Set("n0", down(t), t).ok());
  EXPECT_EQ(names(pub.Pending()), std::vector<std::string>{flapping});
  pub.Written(pub.Pending());
  for (int64_t t = 116; t <= 118; ++t) ASSERT_TRUE(pub.Set("n0", down(t), t).ok());
  // n8, unchanged for 19 s, loses a chip: its ConfigMap goes first although
  // n0's has waited longer.
  ASSERT_TRUE(pub.Set("n8", down(119), 119).ok());
  auto plan = pub.Pending();
  EXPECT_EQ(names(plan), (std::vector<std::string>{quiet, flapping}));
  ASSERT_EQ(plan.writes.size(), 2u);
  EXPECT_TRUE(plan.writes[0].urgent && plan.writes[1].urgent);
  pub.Written(plan);
  // n8 changing again 2 s later is not quiet: the longest waiting first.
  ASSERT_TRUE(pub.Set("n0", down(120), 120).ok());
  ASSERT_TRUE(pub.Set("n8", down(121), 121).ok());
  EXPECT_EQ(names(pub.Pending()), (std::vector<std::string>{flapping, quiet}));
  pub.Written(pub.Pending());
  // kQuietSeconds after its last change, it is quiet again.
  ASSERT_TRUE(pub.Set("n0", down(122), 122).ok());
  const int64_t later = 121 + ClusterInfoPublisher::kQuietSeconds;
  ASSERT_TRUE(pub.Set("n8", down(later), later).ok());
  EXPECT_EQ(names(pub.Pending()), (std::vector<std::string>{quiet, flapping}));
}

TEST(ClusterInfo, ChunksStayUnderTheLimitAndNodesStayPut) {
  const size_t limit = 4000;
  ClusterInfoPublisher pub(limit);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(pub.Set("node" + std::to_string(100 + i), Entry(8, 1), 1).ok());
  auto plan = pub.Pending();
  ASSERT_GT(plan.writes.size(), 3u);
  size_t listed = 0;
  for (const auto& w : plan.writes) {
    // Filled to 7/8 of the limit: the rest is room for entries to grow in.
    EXPECT_LE(w.value.size(), limit - limit / 8) << w.name;
    json value = json::parse(w.value);
    listed += value.size();
    for (auto it = value.begin(); it != value.end(); ++it) {
      EXPECT_EQ(pub.ChunkOf(it.key().substr(std::string("mindx-dl-deviceinfo-").size())),
                std::stoul(w.name.substr(std::string("cluster-info-device-").size())));
    }
  }
  EXPECT_EQ(listed, 30u);
  pub.Written(plan);

  // One node changes a little: it keeps its ConfigMap, the only one written.
  const size_t home = *pub.ChunkOf("node105");
  NodeDeviceInfo one_down = Entry(8, 1);
  one_down.available.pop_back();
  one_down.unhealthy = {"Ascend910-7"};
  DeviceFault grows;  // a -Fault entry too: the entry grows into the room left
  grows.fault_type = "CardUnhealthy";
  grows.npu_name = "Ascend910-7";
  grows.fault_level = grows.large_model_fault_level = grows.fault_handling = "SeparateNPU";
  grows.fault_code = "80E01801";
  one_down.faults.push_back(grows);
  ASSERT_TRUE(pub.Set("node105", one_down, 2).ok());
  EXPECT_EQ(pub.ChunkOf("node105"), home);
  plan = pub.Pending();
  ASSERT_EQ(plan.writes.size(), 1u);
  EXPECT_EQ(plan.writes[0].name, "cluster-info-device-" + std::to_string(home));
  pub.Written(plan);

  // One grows past its ConfigMap's room: it moves, and the ConfigMap that
  // gains it is written before the one that loses it.
  NodeDeviceInfo big = Entry(64, 3);
  ASSERT_TRUE(pub.Set("node105", big, 3).ok());
  const size_t moved_to = *pub.ChunkOf("node105");
  EXPECT_NE(moved_to, home);
  plan = pub.Pending();
  ASSERT_EQ(plan.writes.size(), 2u);
  EXPECT_EQ(plan.writes[0].name, "cluster-info-device-" + std::to_string(moved_to));
  EXPECT_EQ(plan.writes[1].name, "cluster-info-device-" + std::to_string(home));
  pub.Written(plan);

  // A ConfigMap whose nodes are all gone is rewritten with "" (never
  // deleted), once; the next node that needs a new ConfigMap reuses it.
  for (int i = 0; i < 30; ++i) {
    const std::string n = "node" + std::to_string(100 + i);
    if (pub.ChunkOf(n) == moved_to) pub.Remove(n);
  }
  plan = pub.Pending();
  ASSERT_EQ(plan.writes.size(), 1u);
  EXPECT_EQ(plan.writes[0].name, "cluster-info-device-" + std::to_string(moved_to));
  EXPECT_EQ(plan.writes[0].value, "");
  pub.Written(plan);
  EXPECT_TRUE(pub.Pending().empty());

  // An entry no ConfigMap can hold is refused.
  ClusterInfoPublisher tiny(300);
  EXPECT_EQ(tiny.Set("n", Entry(64, 1), 1).code(), StatusCode::kInvalidArgument);
}

TEST(ClusterInfo, RestartAdoptsWhatItWrote) {
  ClusterInfoPublisher first(4000);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(first.Set("node" + std::to_string(i), Entry(8, 7), 7).ok());
  auto all = first.Pending(true);

  ClusterInfoPublisher second(4000);
  for (const auto& w : all.writes) ASSERT_TRUE(second.Adopt(w.name, w.value).ok()) << w.name;
  ASSERT_TRUE(second.Adopt("cluster-info-device-9", "").ok());  // the reference's leftover
  for (int i = 0; i < 20; ++i) {
    const std::string n = "node" + std::to_string(i);
    EXPECT_EQ(second.ChunkOf(n), first.ChunkOf(n));
    EXPECT_EQ(second.UpdateTimeOf(n), 7);
    ASSERT_TRUE(second.Set(n, Entry(8, 7), 8).ok());  // unchanged: nothing to write
  }
  auto plan = second.Pending();
  EXPECT_TRUE(plan.empty()) << "the reference's \"\" leftover stays as it is";

  EXPECT_EQ(second.Adopt("cluster-info-device-0", "{}").code(), StatusCode::kInvalidArgument);  // taken
  EXPECT_EQ(second.Adopt("other", "{}").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(second.Adopt("cluster-info-device-5", R"({"x":1})").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(second.Adopt("cluster-info-device-5", "[").code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(second.ChunkOf("x").has_value());
}

// Volcano's Ascend plugin keeps one cache of node entries over every
// cluster-info-device-<i>: an Add or Update sets the entries the ConfigMap
// lists ("" lists none), a Delete drops every node its last version listed
// (ascend-for-volcano common/k8s/cmmgr.go, dealClusterDeviceInfo). Played
// against every sequence of writes: nodes leaving a ConfigMap, a restart
// that adopts a ConfigMap whose nodes are all in an earlier one (the writer
// died between two chunk writes), the reference's "" leftovers. No node
// ClusterD publishes ever leaves Volcano's cache, and what it caches for each
// is what ClusterD publishes.
class VolcanoCache {
 public:
  void Apply(const std::string& name, const std::string& value) {
    json doc = value.empty() ? json::object() : json::parse(value);
    for (auto it = doc.begin(); it != doc.end(); ++it) nodes_[it.key()] = it->dump();
    last_[name] = value;
  }
  void Delete(const std::string& name) {
    if (!last_.count(name)) return;
    json doc = last_[name].empty() ? json::object() : json::parse(last_[name]);
    for (auto it = doc.begin(); it != doc.end(); ++it) nodes_.erase(it.key());
    last_.erase(name);
  }
  bool Has(const std::string& node) const { return nodes_.count("mindx-dl-deviceinfo-" + node) > 0; }
  int64_t UpdateTime(const std::string& node) const {
    return json::parse(nodes_.at("mindx-dl-deviceinfo-" + node))["UpdateTime"].get<int64_t>();
  }

 private:
  std::map<std::string, std::string> nodes_;
  std::map<std::string, std::string> last_;  // each ConfigMap's last version
};

TEST(ClusterInfo, VolcanosCacheNeverLosesANodeToAConfigMapThatEmpties) {
  ClusterInfoPublisher pub(4000);
  VolcanoCache volcano;
  auto flush = [&](ClusterInfoPublisher& p) {
    for (int i = 0; i < 100; ++i) {
      auto plan = p.Pending(false, 1);  // one write at a time, as under a write budget
      if (plan.empty()) return;
      for (const auto& w : plan.writes) volcano.Apply(w.name, w.value);
      p.Written(plan);
    }
    FAIL() << "writes never end";
  };
  std::set<std::string> live;
  auto check = [&](int64_t now) {
    for (const auto& n : live) {
      ASSERT_TRUE(volcano.Has(n)) << n << " left Volcano's cache";
      EXPECT_EQ(volcano.UpdateTime(n), *pub.UpdateTimeOf(n)) << n;
    }
    (void)now;
  };
  for (int i = 0; i < 24; ++i) {
    const std::string n = "node" + std::to_string(i);
    ASSERT_TRUE(pub.Set(n, Entry(8, 1), 1).ok());
    live.insert(n);
  }
  flush(pub);
  check(1);
  ASSERT_GE(pub.chunks(), 3u);
  // Every node of the last ConfigMap goes or grows out of it.
  const size_t last = *pub.ChunkOf("node23");
  int64_t now = 2;
  for (int i = 0; i < 24; ++i) {
    const std::string n = "node" + std::to_string(i);
    if (pub.ChunkOf(n) != last) continue;
    if (i % 2 == 0) {
      pub.Remove(n);
      live.erase(n);
    } else {
      ASSERT_TRUE(pub.Set(n, Entry(9, now), now).ok());
    }
    flush(pub);
    check(now++);
  }
  // A restart that finds a ConfigMap whose nodes are all in an earlier one,
  // and the reference's "" leftover.
  auto all = pub.Pending(true);
  ClusterInfoPublisher second(4000);
  const std::string dup = "cluster-info-device-7";
  std::string dup_value;
  for (const auto& w : all.writes) {
    if (!w.value.empty() && dup_value.empty()) dup_value = w.value;  // the first one's nodes again
    ASSERT_TRUE(second.Adopt(w.name, w.value).ok()) << w.name;
  }
  ASSERT_FALSE(dup_value.empty());
  volcano.Apply(dup, dup_value);
  ASSERT_TRUE(second.Adopt(dup, dup_value).ok());
  volcano.Apply("cluster-info-device-8", "");
  ASSERT_TRUE(second.Adopt("cluster-info-device-8", "").ok());
  auto plan = second.Pending();
  ASSERT_EQ(plan.writes.size(), 1u);
  EXPECT_EQ(plan.writes[0].name, dup);
  EXPECT_EQ(plan.writes[0].value, "");
  for (const auto& w : plan.writes) volcano.Apply(w.name, w.value);
  second.Written(plan);
  EXPECT_TRUE(second.Pending().empty());
  // Whatever Volcano sees deleted now (an operator, a namespace clean-up):
  // the emptied ones cost it no node.
  volcano.Delete(dup);
  volcano.Delete("cluster-info-device-8");
  for (const auto& n : live) EXPECT_TRUE(volcano.Has(n)) << n;
}

TEST(ClusterInfo, ConfigMapsWrittenLargerAreSplitAfterAdoption) {
  // Written with 4000-byte ConfigMaps (or by the reference, at 800 KiB),
  // taken over by a publisher with a quarter of that.
  ClusterInfoPublisher first(4000);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(first.Set("node" + std::to_string(i), Entry(8, 7), 7).ok());
  auto all = first.Pending(true);
  ClusterInfoPublisher second(1000);
  for (const auto& w : all.writes) ASSERT_TRUE(second.Adopt(w.name, w.value).ok()) << w.name;
  ASSERT_EQ(second.chunks(), first.chunks());
  second.Fit();
  EXPECT_GT(second.chunks(), first.chunks());
  EXPECT_EQ(second.node_count(), 20u);
  auto plan = second.Pending();
  // What Volcano reads once the plan is written: the adopted values, those
  // written replacing theirs.
  std::map<std::string, std::string> after;
  for (const auto& w : all.writes) after[w.name] = w.value;
  bool gaining = true;  // those that gain nodes come first
  for (const auto& w : plan.writes) {
    EXPECT_LE(w.value.size(), 1000u) << w.name;
    const bool adopted = after.count(w.name) > 0;
    if (adopted) gaining = false;
    EXPECT_TRUE(!gaining || !adopted) << w.name;
    after[w.name] = w.value;
  }
  EXPECT_FALSE(gaining);  // the over-full ones were rewritten
  std::set<std::string> listed;
  for (const auto& [name, value] : after) {
    EXPECT_LE(value.size(), 1000u) << name;
    json doc = json::parse(value);
    for (auto it = doc.begin(); it != doc.end(); ++it) EXPECT_TRUE(listed.insert(it.key()).second) << it.key();
  }
  EXPECT_EQ(listed.size(), 20u);  // each node once, none lost
  for (int i = 0; i < 20; ++i) EXPECT_EQ(second.UpdateTimeOf("node" + std::to_string(i)), 7);
  second.Written(plan);
  EXPECT_TRUE(second.Pending().empty());
}

TEST(NodeInfo, ParsesMindClusterNodeDsConfigMap) {
  auto faulty = ParseNodeInfoCm(Fixture("nodeinfo-faulty.json"));
  ASSERT_TRUE(faulty.ok()) << faulty.status().message();
  EXPECT_EQ(faulty->node_status, "UnHealthy");
  ASSERT_EQ(faulty->faults.size(), 2u);
  EXPECT_EQ(faulty->faults[0].fault_codes, (std::vector<std::string>{"00000011", "0000000D"}));
  EXPECT_EQ(faulty->faults[1].device_id, -1);
  // Written back: Go's bytes, CheckCode included.
  EXPECT_EQ(NodeInfoCmJson(*faulty), Fixture("nodeinfo-faulty.json"));
  auto healthy = ParseNodeInfoCm(Fixture("nodeinfo-healthy.json"));
  ASSERT_TRUE(healthy.ok()) << healthy.status().message();
  EXPECT_TRUE(healthy->faults.empty());
  EXPECT_EQ(NodeInfoCmJson(*healthy), Fixture("nodeinfo-healthy.json"));

  std::string tampered = Fixture("nodeinfo-faulty.json");
  tampered.replace(tampered.find("\"UnHealthy\""), 11, "\"Healthy\"");  // the status, not the code
  EXPECT_EQ(ParseNodeInfoCm(tampered).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ParseNodeInfoCm(R"({"NodeInfo":{"FaultDevList":{}}})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNodeInfoCm("null").status().code(), StatusCode::kInvalidArgument);
}

TEST(NodeInfo, ClusterdsNodeFaultsDecideTheStatusVolcanoReads) {
  NodeInfo info = NodeInfoFromFaults({{"Memory", -1, "00000100", v1::FAULT_LEVEL_SUB_HEALTH},
                                      {"CPU", 0, "0000000D", v1::FAULT_LEVEL_SEPARATE},
                                      {"CPU", 0, "00000011", v1::FAULT_LEVEL_RESTART_BUSINESS},
                                      {"Disk", 1, "X", v1::FAULT_LEVEL_NOT_HANDLE}});
  EXPECT_EQ(info.node_status, "UnHealthy");
  ASSERT_EQ(info.faults.size(), 2u);  // NOT_HANDLE left out
  EXPECT_EQ(info.faults[0].device_type, "CPU");
  EXPECT_EQ(info.faults[0].fault_codes, (std::vector<std::string>{"0000000D", "00000011"}));
  EXPECT_EQ(info.faults[0].fault_level, "SeparateNPU");
  EXPECT_EQ(NodeInfoFromFaults({{"Memory", -1, "1", v1::FAULT_LEVEL_PRE_SEPARATE}}).node_status, "PreSeparate");
  EXPECT_EQ(NodeInfoFromFaults({{"Memory", -1, "1", v1::FAULT_LEVEL_SUB_HEALTH}}).node_status, "SubHealthy");
  EXPECT_EQ(NodeInfoFromFaults({}).node_status, "Healthy");

  auto none = ClusterInfoNodeValue({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  auto value = ClusterInfoNodeValue({{"worker01", {info, 1764806400123}}, {"worker02", {NodeInfoFromFaults({}), 5}}});
  ASSERT_TRUE(value.ok());
  json v = json::parse(*value);
  EXPECT_EQ(v["mindx-dl-nodeinfo-worker01"]["NodeStatus"], "UnHealthy");
  EXPECT_EQ(v["mindx-dl-nodeinfo-worker01"]["CmName"], "mindx-dl-nodeinfo-worker01");
  EXPECT_EQ(v["mindx-dl-nodeinfo-worker01"]["UpdateTime"], 1764806400123);
  EXPECT_TRUE(v["mindx-dl-nodeinfo-worker02"]["FaultDevList"].is_null());
  EXPECT_EQ(ClusterInfoNodeValue({{"w", {info, 1}}}, 50).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace clusterd::mindcluster
