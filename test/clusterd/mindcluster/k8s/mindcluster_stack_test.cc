// The "mindcluster" integration (clusterd/mindcluster/k8s/stack.h) over an
// in-memory API server (fake_k8s_client.h) and ClusterD's commands
// (fake_cluster_commands.h), stepped by hand on a FakeClock: the device
// plugin's ConfigMaps in (faults raised and cleared once), Volcano's
// cluster-info ConfigMaps out (merged with ClusterD's faults and isolations,
// UpdateTime growing, adopted across a restart, guarded, rate-limited).
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/device_info.h"
#include "clusterd/mindcluster/k8s/stack.h"
#include "clusterd/mindcluster/node_info.h"
#include "clusterd/mindcluster/switch_info.h"
#include "common/clock.h"
#include "test/support/fakes/fake_cluster_commands.h"
#include "test/support/fakes/fake_k8s_client.h"

namespace clusterd {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
namespace mc = mindcluster;

const std::string kPlugin = "/api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-";
const std::string kInfo = "/api/v1/namespaces/mindx-dl/configmaps/";

mc::NodeDeviceInfo Healthy(int chips) {
  mc::NodeDeviceInfo info;
  info.device_type = "Ascend910";
  for (int i = 0; i < chips; ++i) info.available.push_back("Ascend910-" + std::to_string(i));
  info.update_time = 1'700'000'000;
  return info;
}

// Chip `chip` taken out by the plugin: -Unhealthy with a -Fault entry of `code`.
mc::NodeDeviceInfo WithFault(mc::NodeDeviceInfo info, int chip, const std::string& code) {
  const std::string name = "Ascend910-" + std::to_string(chip);
  std::erase(info.available, name);
  info.unhealthy.push_back(name);
  mc::DeviceFault f;
  f.fault_type = "CardUnhealthy";
  f.npu_name = name;
  f.fault_level = f.fault_handling = f.large_model_fault_level = "SeparateNPU";
  f.fault_code = code;
  f.fault_time_and_level[code] = {1'700'000'000'000, "SeparateNPU"};
  info.faults.push_back(f);
  return info;
}

json PluginCm(const std::string& node, const std::string& value) {
  return {{"metadata",
           {{"name", "mindx-dl-deviceinfo-" + node},
            {"namespace", "kube-system"},
            {"labels", {{"mx-consumer-cim", "true"}}}}},
          {"data", {{"DeviceInfoCfg", value}}}};
}

v1::Device Chip(const std::string& node, uint32_t id, bool isolated = false) {
  v1::Device d;
  d.set_node(node);
  d.set_id(id);
  d.set_vendor("huawei");
  d.set_model("Ascend910B3");
  d.set_isolated(isolated);
  return d;
}

v1::Fault ChipFault(const std::string& node, uint32_t chip, const std::string& code, v1::FaultLevel level) {
  v1::Fault f;
  f.set_node(node);
  f.set_device_id(chip);
  f.set_code(code);
  f.set_level(level);
  f.set_source(v1::FAULT_SOURCE_ACCELERATOR);
  f.set_state(v1::FAULT_STATE_ACTIVE);
  return f;
}

class MindClusterStackTest : public ::testing::Test {
 protected:
  void TearDown() override { Stop(); }

  void Start(MindClusterStackOptions options = {}) {
    stack_ = std::make_unique<MindClusterStack>(api_, options, MindClusterStack::Driver::kManual);
    env_ = IntegrationEnv{&commands_, &clock_, metrics_};
    ASSERT_TRUE(stack_->Start(env_).ok());
    // The plugin's and MindCluster NodeD's ConfigMaps, and one per public-fault namespace.
    watches_ += 2 + options.public_fault_namespaces.size();
    if (options.separation_policy_cm || options.manual_info_cm) ++watches_;  // the system namespace's
    if (options.super_pod_cms) watches_ += 2;                                // the Nodes and the super-pod ConfigMaps
    Settle();
  }
  void Stop() {
    if (stack_) stack_->Stop();
    stack_.reset();
  }
  void Settle() { ASSERT_TRUE(api_->WaitCaughtUp(watches_)); }
  // Lets the informer see what the test changed, then steps once.
  MindClusterStack::StepResult Step() {
    Settle();
    return stack_->Step();
  }
  void SetPlugin(const std::string& node, const mc::NodeDeviceInfo& info) {
    api_->Set(kPlugin + node, PluginCm(node, mc::DeviceInfoCfgJson(info)));
  }
  // ClusterD's view of a node: its chips and active faults.
  void SetOurs(const std::string& node, std::vector<v1::Device> devices, std::vector<v1::Fault> faults = {},
               bool cordoned = false) {
    v1::Node n;
    n.set_name(node);
    n.set_cordoned(cordoned);
    commands_.nodes[node] = n;
    commands_.devices[node] = std::move(devices);
    commands_.node_faults[node] = std::move(faults);
    ++commands_.revision;
  }

  // The entry Volcano reads for `node` from cluster-info-device-<chunk>.
  json Entry(const std::string& node, int chunk = 0) const {
    auto cm = api_->Object(kInfo + "cluster-info-device-" + std::to_string(chunk));
    if (!cm) return nullptr;
    const std::string name = "cluster-info-device-" + std::to_string(chunk);
    json value = json::parse((*cm)["data"].value(name, std::string("{}")), nullptr, false);
    return value.is_object() && value.contains("mindx-dl-deviceinfo-" + node) ? value["mindx-dl-deviceinfo-" + node]
                                                                              : json(nullptr);
  }
  static std::string List(const json& entry, const std::string& suffix) {
    return entry["DeviceList"].value("huawei.com/Ascend910" + suffix, std::string("<absent>"));
  }

  FakeClock clock_;
  std::shared_ptr<testing::FakeK8sClient> api_ = std::make_shared<testing::FakeK8sClient>();
  testing::FakeClusterCommands commands_;
  std::unique_ptr<MindClusterStack> stack_;
  IntegrationEnv env_;
  MetricsRegistry* metrics_ = nullptr;  // set before Start to count
  size_t watches_ = 0;
};

TEST_F(MindClusterStackTest, PublishesEveryPluginNodeAndRaisesItsFaults) {
  SetPlugin("a", Healthy(8));
  SetPlugin("b", WithFault(Healthy(8), 3, "80E01801"));
  Start();
  const auto r = Step();
  EXPECT_TRUE(r.adopted);
  EXPECT_TRUE(r.synced);

  auto cm = api_->Object(kInfo + "cluster-info-device-0");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["metadata"]["labels"], json({{"mx-consumer-volcano", "true"}}));
  ASSERT_EQ((*cm)["data"].size(), 1u);
  EXPECT_TRUE((*cm)["data"].contains("cluster-info-device-0"));
  json a = Entry("a"), b = Entry("b");
  ASSERT_FALSE(a.is_null());
  ASSERT_FALSE(b.is_null());
  EXPECT_EQ(List(a, ""),
            "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3,Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7");
  EXPECT_EQ(List(b, "-Unhealthy"), "Ascend910-3");
  for (const char* key : {"", "-Unhealthy", "-NetworkUnhealthy", "-Recovering", "-Fault"}) {
    EXPECT_NE(List(a, key), "<absent>") << key;  // all five keys, always
  }
  EXPECT_EQ(b["CmName"], "mindx-dl-deviceinfo-b");
  // cluster-info-node-cm is written too ("" while no node has anything to say).
  auto node_cm = api_->Object(kInfo + "cluster-info-node-cm");
  ASSERT_TRUE(node_cm.has_value());
  EXPECT_EQ((*node_cm)["data"]["cluster-info-node-cm"], "");

  // The plugin's fault, once, as its own reporter's, on the chip it names.
  ASSERT_EQ(commands_.reports.size(), 1u);
  const auto& rep = commands_.reports[0];
  EXPECT_EQ(rep.reporter(), "ascend-device-plugin");
  EXPECT_EQ(rep.node(), "b");
  EXPECT_EQ(rep.device_id(), 3u);
  EXPECT_EQ(rep.code(), "80E01801");
  EXPECT_EQ(rep.level(), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(rep.action(), v1::TRANSITION_ACTION_RAISE);

  // Nothing changed: nothing is reported or written again.
  api_->ClearCalls();
  clock_.Advance(1s);
  const auto again = Step();
  EXPECT_EQ(again.reports, 0u);
  EXPECT_EQ(again.writes, 0u);
  EXPECT_TRUE(api_->Writes().empty());

  // The plugin clears the chip: the fault clears, the chip is back.
  SetPlugin("b", Healthy(8));
  Step();
  ASSERT_EQ(commands_.reports.size(), 2u);
  EXPECT_EQ(commands_.reports[1].action(), v1::TRANSITION_ACTION_CLEAR);
  EXPECT_EQ(List(Entry("b"), "-Unhealthy"), "");
}

TEST_F(MindClusterStackTest, ClusterDsFaultTakesTheChipOutAndUpdateTimeGrows) {
  SetPlugin("a", Healthy(8));
  SetOurs("a", {Chip("a", 0), Chip("a", 5)});
  Start();
  Step();
  const int64_t t0 = Entry("a")["UpdateTime"];
  EXPECT_EQ(List(Entry("a"), "-Unhealthy"), "");

  // A NodeD fault on chip 5 at RESTART_NPU: out of the available list.
  SetOurs("a", {Chip("a", 0), Chip("a", 5)}, {ChipFault("a", 5, "80C98000", v1::FAULT_LEVEL_RESTART_NPU)});
  Step();
  json a = Entry("a");
  EXPECT_EQ(List(a, "-Unhealthy"), "Ascend910-5");
  EXPECT_EQ(List(a, "").find("Ascend910-5"), std::string::npos);
  const int64_t t1 = a["UpdateTime"];
  EXPECT_GT(t1, t0);  // in the same second too: Volcano ignores an update that did not grow

  // Cleared: back, UpdateTime grows again.
  SetOurs("a", {Chip("a", 0), Chip("a", 5)});
  Step();
  a = Entry("a");
  EXPECT_EQ(List(a, "-Unhealthy"), "");
  EXPECT_NE(List(a, "").find("Ascend910-5"), std::string::npos);
  EXPECT_GT(static_cast<int64_t>(a["UpdateTime"]), t1);

  // A SUB_HEALTH fault leaves the chip schedulable.
  SetOurs("a", {Chip("a", 0), Chip("a", 5)}, {ChipFault("a", 5, "80C98001", v1::FAULT_LEVEL_SUB_HEALTH)});
  Step();
  EXPECT_EQ(List(Entry("a"), "-Unhealthy"), "");
}

TEST_F(MindClusterStackTest, IsolationsAndCordonsReachVolcano) {
  SetPlugin("a", Healthy(4));
  SetPlugin("b", Healthy(4));
  SetOurs("a", {Chip("a", 0), Chip("a", 1, /*isolated=*/true), Chip("a", 2), Chip("a", 3)});
  SetOurs("b", {Chip("b", 0), Chip("b", 1), Chip("b", 2), Chip("b", 3)}, {}, /*cordoned=*/true);
  Start();
  Step();
  json a = Entry("a"), b = Entry("b");
  EXPECT_EQ(List(a, "-Unhealthy"), "Ascend910-1");
  EXPECT_NE(List(a, "-Fault").find("SeparateNPU"), std::string::npos);
  EXPECT_EQ(List(b, ""), "");
  EXPECT_EQ(List(b, "-Unhealthy"), "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3");
}

// MindCluster's pre-separate rule: a PreSeparate chip leaves the available
// list, and is listed unhealthy only while no pod holds it.
TEST_F(MindClusterStackTest, APreSeparateChipInUseIsNotListedUnhealthy) {
  SetPlugin("a", Healthy(4));
  commands_.in_use["a"] = {1};
  SetOurs("a", {Chip("a", 0), Chip("a", 1), Chip("a", 2), Chip("a", 3)},
          {ChipFault("a", 1, "80C98002", v1::FAULT_LEVEL_PRE_SEPARATE),
           ChipFault("a", 2, "80C98002", v1::FAULT_LEVEL_PRE_SEPARATE)});
  Start();
  Step();
  json a = Entry("a");
  EXPECT_EQ(List(a, ""), "Ascend910-0,Ascend910-3");
  EXPECT_EQ(List(a, "-Unhealthy"), "Ascend910-2");  // chip 1 is held by a pod
  // The job goes: chip 1 is listed unhealthy too.
  commands_.in_use.erase("a");
  ++commands_.revision;
  Step();
  EXPECT_EQ(List(Entry("a"), "-Unhealthy"), "Ascend910-1,Ascend910-2");
}

TEST_F(MindClusterStackTest, NodesWithoutThePluginComeFromNodeDsInventory) {
  SetOurs("n", {Chip("n", 0), Chip("n", 1)});
  v1::Device cpu;  // not an NPU: not listed
  cpu.set_node("c");
  cpu.set_vendor("intel");
  cpu.set_model("Xeon");
  SetOurs("c", {cpu});
  Start();
  Step();
  EXPECT_EQ(List(Entry("n"), ""), "Ascend910-0,Ascend910-1");
  EXPECT_TRUE(Entry("c").is_null());
}

TEST_F(MindClusterStackTest, NodeLevelFaultsGoToTheNodeConfigMap) {
  SetPlugin("a", Healthy(2));
  v1::Fault lost;
  lost.set_node("a");
  lost.set_code("HEARTBEAT_LOST");
  lost.set_level(v1::FAULT_LEVEL_SEPARATE);
  lost.set_source(v1::FAULT_SOURCE_HEARTBEAT);
  lost.set_state(v1::FAULT_STATE_ACTIVE);
  SetOurs("a", {Chip("a", 0), Chip("a", 1)}, {lost});
  Start();
  Step();
  auto cm = api_->Object(kInfo + "cluster-info-node-cm");
  ASSERT_TRUE(cm.has_value());
  json value = json::parse((*cm)["data"]["cluster-info-node-cm"].get<std::string>());
  ASSERT_TRUE(value.contains("mindx-dl-nodeinfo-a"));
  EXPECT_EQ(value["mindx-dl-nodeinfo-a"]["NodeStatus"], "UnHealthy");
  EXPECT_EQ(value["mindx-dl-nodeinfo-a"]["CmName"], "mindx-dl-nodeinfo-a");

  SetOurs("a", {Chip("a", 0), Chip("a", 1)});
  Step();
  EXPECT_EQ(api_->Object(kInfo + "cluster-info-node-cm")->at("data")["cluster-info-node-cm"], "");
}

TEST_F(MindClusterStackTest, ABadConfigMapChangesNothing) {
  SetPlugin("b", WithFault(Healthy(8), 3, "80E01801"));
  Start();
  Step();
  ASSERT_EQ(commands_.reports.size(), 1u);
  const json before = Entry("b");

  // A wrong CheckCode (the content changed after it was computed).
  json cfg = json::parse(mc::DeviceInfoCfgJson(Healthy(8)));
  cfg["CheckCode"] = std::string(64, '0');
  api_->Set(kPlugin + "b", PluginCm("b", cfg.dump()));
  api_->ClearCalls();
  Step();
  // Not JSON at all; and no DeviceInfoCfg key.
  api_->Set(kPlugin + "b", PluginCm("b", "{not json"));
  Step();
  json no_key = PluginCm("b", "");
  no_key["data"] = {{"Other", "x"}};
  api_->Set(kPlugin + "b", no_key);
  Step();
  EXPECT_EQ(commands_.reports.size(), 1u);  // nothing cleared
  EXPECT_TRUE(api_->Writes().empty());
  EXPECT_EQ(Entry("b"), before);

  // A ConfigMap with the name but without the label is not the plugin's.
  json unlabelled = PluginCm("x", mc::DeviceInfoCfgJson(WithFault(Healthy(2), 0, "80E01801")));
  unlabelled["metadata"].erase("labels");
  api_->Set(kPlugin + "x", unlabelled);
  Step();
  EXPECT_TRUE(Entry("x").is_null());
  EXPECT_EQ(commands_.reports.size(), 1u);
}

TEST_F(MindClusterStackTest, ARestartAdoptsWhatIsWrittenAndRepeatsNothing) {
  SetPlugin("a", Healthy(8));
  SetPlugin("b", WithFault(Healthy(8), 3, "80E01801"));
  SetOurs("a", {Chip("a", 0)}, {ChipFault("a", 0, "80C98000", v1::FAULT_LEVEL_RESTART_NPU)});
  Start();
  Step();
  const json a = Entry("a"), b = Entry("b");
  ASSERT_EQ(commands_.reports.size(), 1u);
  Stop();

  // While ClusterD was away the plugin's fault on b went, one on a came.
  SetPlugin("b", Healthy(8));
  SetPlugin("a", WithFault(Healthy(8), 6, "80E18402"));
  api_->ClearCalls();
  Start();
  Step();
  ASSERT_EQ(commands_.reports.size(), 3u);
  EXPECT_EQ(commands_.reports[1].node(), "a");  // raised
  EXPECT_EQ(commands_.reports[1].action(), v1::TRANSITION_ACTION_RAISE);
  EXPECT_EQ(commands_.reports[2].node(), "b");  // cleared
  EXPECT_EQ(commands_.reports[2].action(), v1::TRANSITION_ACTION_CLEAR);
  // Same ConfigMap, updated in place (never created again, never emptied),
  // UpdateTime still growing for the nodes that changed.
  for (const auto& w : api_->Writes()) EXPECT_NE(w.method, "POST") << w.path;
  EXPECT_GT(static_cast<int64_t>(Entry("a")["UpdateTime"]), static_cast<int64_t>(a["UpdateTime"]));
  EXPECT_GT(static_cast<int64_t>(Entry("b")["UpdateTime"]), static_cast<int64_t>(b["UpdateTime"]));
  EXPECT_EQ(List(Entry("a"), "-Unhealthy"), "Ascend910-0,Ascend910-6");

  // A third start with nothing changed writes nothing at all.
  Stop();
  api_->ClearCalls();
  const size_t reports = commands_.reports.size();
  Start();
  Step();
  EXPECT_EQ(commands_.reports.size(), reports);
  EXPECT_TRUE(api_->Writes().empty());
}

TEST_F(MindClusterStackTest, ARefusedConfigMapAtStartKeepsWhatWasPublished) {
  SetPlugin("n", WithFault(Healthy(8), 2, "80E01801"));
  Start();
  Step();
  const json before = Entry("n");
  ASSERT_FALSE(before.is_null());
  Stop();
  // Broken while ClusterD was away: the restarted one has never seen a good
  // version, and keeps the node's entry as it was (never drops a node).
  api_->Set(kPlugin + "n", PluginCm("n", "{broken"));
  api_->ClearCalls();
  Start();
  Step();
  EXPECT_EQ(Entry("n"), before);
  EXPECT_TRUE(api_->Writes().empty());
  EXPECT_EQ(commands_.reports.size(), 1u);  // and its fault stays raised
}

TEST_F(MindClusterStackTest, PluginConfigMapDeletedClearsItsFaults) {
  SetPlugin("b", WithFault(Healthy(8), 3, "80E01801"));
  Start();
  Step();
  ASSERT_TRUE(api_->Remove(kPlugin + "b"));
  Step();
  ASSERT_EQ(commands_.reports.size(), 2u);
  EXPECT_EQ(commands_.reports[1].action(), v1::TRANSITION_ACTION_CLEAR);
  // No NPU left that ClusterD knows of: the node leaves, and its ConfigMap
  // is emptied (""), never deleted (Volcano would drop the nodes it listed).
  auto cm = api_->Object(kInfo + "cluster-info-device-0");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["data"]["cluster-info-device-0"], "");
  for (const auto& w : api_->Writes()) EXPECT_NE(w.method, "DELETE") << w.path;
}

TEST_F(MindClusterStackTest, AConflictIsReadAgainAndWrittenNextPass) {
  SetPlugin("a", Healthy(8));
  SetOurs("a", {Chip("a", 0)});
  Start();
  Step();
  // Someone else writes the ConfigMap: our guarded update conflicts.
  auto theirs = *api_->Object(kInfo + "cluster-info-device-0");
  theirs["data"]["cluster-info-device-0"] = "{}";
  api_->Set(kInfo + "cluster-info-device-0", theirs);
  SetOurs("a", {Chip("a", 0)}, {ChipFault("a", 0, "80C98000", v1::FAULT_LEVEL_RESTART_NPU)});
  auto r = Step();
  EXPECT_TRUE(r.pending);
  EXPECT_TRUE(Entry("a").is_null());  // theirs, for now
  clock_.Advance(1s);
  r = Step();
  EXPECT_FALSE(r.pending);
  EXPECT_EQ(List(Entry("a"), "-Unhealthy"), "Ascend910-0");
}

TEST_F(MindClusterStackTest, WritesAreRateLimitedAndChunked) {
  for (int i = 0; i < 6; ++i) SetPlugin("node" + std::to_string(i), Healthy(8));
  MindClusterStackOptions options;
  options.writes_per_second = 2;
  options.max_cluster_info_bytes = 1500;  // about two entries per ConfigMap
  Start(options);
  // At most two writes a second, until everything is written.
  size_t steps = 0, writes = 0;
  for (bool pending = true; pending; ++steps) {
    ASSERT_LT(steps, 10u);
    const auto r = Step();
    EXPECT_LE(r.writes, 2u);
    writes += r.writes;
    pending = r.pending;
    clock_.Advance(1s);
  }
  EXPECT_GE(steps, 2u);
  EXPECT_GE(stack_->publisher().chunks(), 2u);
  EXPECT_EQ(writes, stack_->publisher().chunks() + 1);  // and cluster-info-node-cm
  for (int i = 0; i < 6; ++i) {
    const std::string node = "node" + std::to_string(i);
    auto chunk = stack_->publisher().ChunkOf(node);
    ASSERT_TRUE(chunk.has_value());
    EXPECT_FALSE(Entry(node, static_cast<int>(*chunk)).is_null()) << node;
  }
}

TEST_F(MindClusterStackTest, AChipTakenOutIsWrittenWithTheReserveWhileEveryChunkIsDirty) {
  // Six nodes, two per ConfigMap; chip 0 of the first four out at the start.
  for (int i = 0; i < 6; ++i) {
    SetPlugin("node" + std::to_string(i), i < 4 ? WithFault(Healthy(8), 0, "80E01801") : Healthy(8));
  }
  MindClusterStackOptions options;
  options.writes_per_second = 3;
  options.max_cluster_info_bytes = 1500;
  Start(options);
  for (int steps = 0; Step().pending; ++steps) {
    ASSERT_LT(steps, 10);
    clock_.Advance(1s);
  }
  clock_.Advance(1s);  // a full budget
  auto chunk_of = [&](const std::string& node) { return static_cast<int>(*stack_->publisher().ChunkOf(node)); };
  ASSERT_NE(chunk_of("node0"), chunk_of("node5"));
  ASSERT_NE(chunk_of("node2"), chunk_of("node5"));
  // Routine changes everywhere (chips back), and one chip taken out.
  for (int i = 0; i < 4; ++i) SetPlugin("node" + std::to_string(i), Healthy(8));
  SetPlugin("node5", WithFault(Healthy(8), 6, "80E01801"));
  auto r = Step();
  // The chip taken out first, then one routine rewrite for the pass.
  EXPECT_EQ(r.writes, 2u);
  EXPECT_TRUE(r.pending);
  EXPECT_EQ(List(Entry("node5", chunk_of("node5")), "-Unhealthy"), "Ascend910-6");
  // Routine writes leave the last token for what is urgent.
  EXPECT_EQ(Step().writes, 0u);
  SetPlugin("node4", WithFault(Healthy(8), 2, "80E01801"));
  r = Step();
  EXPECT_EQ(r.writes, 1u);
  EXPECT_EQ(List(Entry("node4", chunk_of("node4")), "-Unhealthy"), "Ascend910-2");
  // Then the rest, as the budget refills.
  for (int steps = 0; r.pending; ++steps) {
    ASSERT_LT(steps, 10);
    clock_.Advance(1s);
    r = Step();
  }
  for (int i = 0; i < 4; ++i) {
    const std::string node = "node" + std::to_string(i);
    EXPECT_EQ(List(Entry(node, chunk_of(node)), "-Unhealthy"), "") << node;
  }
}

TEST_F(MindClusterStackTest, AFaultARetryThroughTaskdHoldsStaysAwayFromVolcano) {
  Start();
  v1::Fault fault = ChipFault("a", 5, "80BB8000", v1::FAULT_LEVEL_RESTART_REQUEST);
  fault.set_id("fault-held");
  SetOurs("a", {Chip("a", 0), Chip("a", 5)}, {fault});
  commands_.held_faults["a"] = {"fault-held"};
  Step();
  EXPECT_EQ(List(Entry("a"), "-Unhealthy"), "");
  EXPECT_EQ(List(Entry("a"), ""), "Ascend910-0,Ascend910-5");
  // The retry moved on (failed, escalated to a reschedule): the chip goes out.
  commands_.held_faults.clear();
  ++commands_.revision;
  Step();
  EXPECT_EQ(List(Entry("a"), "-Unhealthy"), "Ascend910-5");
}

TEST_F(MindClusterStackTest, TaskdsProcessFaultsAreNotTheChipsForVolcano) {
  Start();
  v1::Fault process = ChipFault("a", 5, "TASKD_PROCESS_FAULT", v1::FAULT_LEVEL_RESTART_BUSINESS);
  process.set_reporter("taskd");
  v1::Fault chip = ChipFault("a", 0, "80E18402", v1::FAULT_LEVEL_SEPARATE);
  SetOurs("a", {Chip("a", 0), Chip("a", 5)}, {process, chip});
  Step();
  EXPECT_EQ(List(Entry("a"), "-Unhealthy"), "Ascend910-0");
  EXPECT_EQ(List(Entry("a"), ""), "Ascend910-5");
}

TEST_F(MindClusterStackTest, RefreshRewritesWithAFreshUpdateTime) {
  SetPlugin("a", Healthy(8));
  MindClusterStackOptions options;
  options.refresh_interval = 45s;
  Start(options);
  Step();
  const int64_t t0 = Entry("a")["UpdateTime"];
  clock_.Advance(30s);
  EXPECT_EQ(Step().writes, 0u);
  clock_.Advance(16s);
  EXPECT_GE(Step().writes, 1u);
  EXPECT_GE(static_cast<int64_t>(Entry("a")["UpdateTime"]), t0 + 46);
}

json NodeInfoCm(const std::string& node, const std::string& value) {
  return {
      {"metadata",
       {{"name", "mindx-dl-nodeinfo-" + node}, {"namespace", "mindx-dl"}, {"labels", {{"mx-consumer-cim", "true"}}}}},
      {"data", {{"NodeInfo", value}}}};
}

TEST_F(MindClusterStackTest, MindClusterNodeDsConfigMapsAreNodeFaults) {
  const std::string path = kInfo + "mindx-dl-nodeinfo-a";
  mc::NodeInfo info;
  info.node_status = "UnHealthy";
  info.faults.push_back({"CPU", 0, {"CPU01", "CPU02"}, "SeparateNPU"});
  api_->Set(path, NodeInfoCm("a", mc::NodeInfoCmJson(info)));
  Start();
  Step();
  ASSERT_EQ(commands_.reports.size(), 2u);
  for (const auto& r : commands_.reports) {
    EXPECT_EQ(r.reporter(), "mindcluster-noded");
    EXPECT_EQ(r.node(), "a");
    EXPECT_FALSE(r.has_device_id());  // a node's fault
    EXPECT_EQ(r.level(), v1::FAULT_LEVEL_SEPARATE);
    EXPECT_EQ(r.action(), v1::TRANSITION_ACTION_RAISE);
  }
  // One code goes: cleared; a wrong CheckCode: nothing; deleted: the rest cleared.
  info.faults[0].fault_codes = {"CPU02"};
  api_->Set(path, NodeInfoCm("a", mc::NodeInfoCmJson(info)));
  Step();
  ASSERT_EQ(commands_.reports.size(), 3u);
  EXPECT_EQ(commands_.reports[2].action(), v1::TRANSITION_ACTION_CLEAR);
  EXPECT_EQ(commands_.reports[2].code(), "CPU01");
  json bad = json::parse(mc::NodeInfoCmJson(mc::NodeInfo{{}, "Healthy"}));
  bad["CheckCode"] = "0";
  api_->Set(path, NodeInfoCm("a", bad.dump()));
  Step();
  EXPECT_EQ(commands_.reports.size(), 3u);
  ASSERT_TRUE(api_->Remove(path));
  Step();
  ASSERT_EQ(commands_.reports.size(), 4u);
  EXPECT_EQ(commands_.reports[3].action(), v1::TRANSITION_ACTION_CLEAR);
  EXPECT_EQ(commands_.reports[3].code(), "CPU02");
  // A restart raises nothing again.
  Stop();
  Start();
  Step();
  EXPECT_EQ(commands_.reports.size(), 4u);
}

TEST_F(MindClusterStackTest, PublicFaultConfigMapsAreAppliedAsPubFaultRequests) {
  const std::string request = R"({"id":"req-00000001","timestamp":1700000000000,"version":"1.0",
      "resource":"pingmesh","faults":[{"faultId":"fault-0001","faultType":"Network",
      "faultCode":"010001001","faultTime":1700000000000,"assertion":"occur",
      "influence":[{"nodeName":"worker01","deviceIds":[0,3]}],"description":"link down"}]})";
  auto cm = [](const std::string& ns, const std::string& name, const std::string& value) {
    return json{{"metadata", {{"name", name}, {"namespace", ns}, {"labels", {{"mc-consumer-publicfault", "true"}}}}},
                {"data", {{"PublicFault", value}}}};
  };
  api_->Set("/api/v1/namespaces/ops/configmaps/pf", cm("ops", "pf", request));
  api_->Set("/api/v1/namespaces/other/configmaps/pf", cm("other", "pf", request));  // not a namespace read
  api_->Set("/api/v1/namespaces/ops/configmaps/bad", cm("ops", "bad", "{not json"));
  MindClusterStackOptions options;
  options.public_fault_namespaces = {"ops"};
  Start(options);
  Step();
  ASSERT_EQ(commands_.public_faults.size(), 1u);
  EXPECT_EQ(commands_.public_faults[0].reporter, "pubfault/pingmesh");
  EXPECT_EQ(commands_.public_faults[0].faults.size(), 2u);  // two devices
  // The same version is applied once; a deletion changes nothing.
  Step();
  ASSERT_TRUE(api_->Remove("/api/v1/namespaces/ops/configmaps/pf"));
  Step();
  EXPECT_EQ(commands_.public_faults.size(), 1u);
}

// SwitchInfoCfg as an A3 device plugin writes it: each FaultCode element is
// itself the JSON of a switch fault.
std::string SwitchInfoCfg(const std::vector<std::string>& codes) {
  json list = json::array();
  for (const auto& code : codes) {
    list.push_back(json{{"EventType", 1},
                        {"AssembledFaultCode", code},
                        {"PeerPortDevice", 0},
                        {"PeerPortId", 0},
                        {"SwitchChipId", 1},
                        {"SwitchPortId", 7},
                        {"Severity", 2},
                        {"Assertion", 1},
                        {"AlarmRaisedTime", 1700000000000}}
                       .dump());
  }
  return json{{"FaultCode", list},
              {"FaultLevel", "RestartBusiness"},
              {"UpdateTime", 1700000000},
              {"NodeStatus", codes.empty() ? "Healthy" : "UnHealthy"},
              {"FaultTimeAndLevelMap", json::object()}}
      .dump();
}

TEST_F(MindClusterStackTest, SwitchFaultsAreTheNodesFaults) {
  json cm = PluginCm("a", mc::DeviceInfoCfgJson(Healthy(8)));
  cm["data"]["SwitchInfoCfg"] = SwitchInfoCfg({"[0x00f1ff09,155913,L2,na]"});
  api_->Set(kPlugin + "a", cm);
  Start();
  Step();
  ASSERT_EQ(commands_.reports.size(), 1u);
  const auto& r = commands_.reports[0];
  EXPECT_EQ(r.reporter(), "ascend-device-plugin");
  EXPECT_FALSE(r.has_device_id());
  EXPECT_EQ(r.code(), "[0x00f1ff09,155913,L2,na]");
  EXPECT_EQ(r.level(), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_EQ(r.id(), "a/switch/1/7/[0x00f1ff09,155913,L2,na]");

  // A malformed one keeps the last good view; a restart raises nothing again.
  cm["data"]["SwitchInfoCfg"] = "{\"FaultCode\": \"x\"}";
  api_->Set(kPlugin + "a", cm);
  Step();
  EXPECT_EQ(commands_.reports.size(), 1u);
  Stop();
  Start();
  Step();
  EXPECT_EQ(commands_.reports.size(), 1u);
  // The key gone: the switch is fine again.
  cm["data"].erase("SwitchInfoCfg");
  api_->Set(kPlugin + "a", cm);
  Step();
  ASSERT_EQ(commands_.reports.size(), 2u);
  EXPECT_EQ(commands_.reports[1].action(), v1::TRANSITION_ACTION_CLEAR);
}

// Volcano's cluster-info-switch-<i>: the plugin's SwitchInfoCfg of each A3
// node, UpdateTime growing with every change, adopted after a restart,
// gone with the key.
TEST_F(MindClusterStackTest, SwitchInfoReachesVolcanosSwitchConfigMaps) {
  const std::string name = "cluster-info-switch-0";
  auto entry = [&](const std::string& node) -> json {
    auto cm = api_->Object(kInfo + name);
    if (!cm) return nullptr;
    EXPECT_EQ((*cm)["metadata"]["labels"], json({{"mx-consumer-volcano", "true"}}));
    json value = json::parse((*cm)["data"].value(name, std::string("{}")), nullptr, false);
    return value.is_object() && value.contains("mindx-dl-switchinfo-" + node) ? value["mindx-dl-switchinfo-" + node]
                                                                              : json(nullptr);
  };
  json cm = PluginCm("a", mc::DeviceInfoCfgJson(Healthy(8)));
  cm["data"]["SwitchInfoCfg"] = SwitchInfoCfg({"CODE1"});
  api_->Set(kPlugin + "a", cm);
  SetPlugin("b", Healthy(8));  // no switch: no entry
  Start();
  Step();
  json a = entry("a");
  ASSERT_TRUE(a.is_object()) << api_->Object(kInfo + name).value_or(json()).dump();
  EXPECT_EQ(a["NodeStatus"], "UnHealthy");
  EXPECT_EQ(a["FaultLevel"], "RestartBusiness");
  EXPECT_EQ(a["CmName"], "mindx-dl-switchinfo-a");
  ASSERT_EQ(a["FaultCode"].size(), 1u);
  EXPECT_EQ(json::parse(a["FaultCode"][0].get<std::string>())["AssembledFaultCode"], "CODE1");
  EXPECT_TRUE(entry("b").is_null());
  const int64_t t0 = a["UpdateTime"];

  // Healthy again: the entry says so, with a larger UpdateTime.
  cm["data"]["SwitchInfoCfg"] = SwitchInfoCfg({});
  api_->Set(kPlugin + "a", cm);
  Step();
  a = entry("a");
  EXPECT_EQ(a["NodeStatus"], "Healthy");
  EXPECT_TRUE(a["FaultCode"].empty());
  EXPECT_GT(static_cast<int64_t>(a["UpdateTime"]), t0);

  // A restart adopts it: nothing unchanged is written again.
  Stop();
  api_->ClearCalls();
  Start();
  Step();
  for (const auto& w : api_->Writes()) EXPECT_EQ(w.path.find(name), std::string::npos) << w.method << " " << w.path;

  // The key gone: the entry goes, and the ConfigMap that held the last
  // entry is emptied ("").
  cm["data"].erase("SwitchInfoCfg");
  api_->Set(kPlugin + "a", cm);
  Step();
  auto info = api_->Object(kInfo + name);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ((*info)["data"][name], "");
}

TEST(SwitchInfo, ParsesWhatTheA3PluginWrites) {
  auto info = mc::ParseSwitchInfoCfg(SwitchInfoCfg({"CODE1", "CODE2", "CODE1"}));
  ASSERT_TRUE(info.ok()) << info.status().message();
  ASSERT_EQ(info->faults.size(), 2u);  // one per place and code
  EXPECT_EQ(info->faults[0].code, "CODE1");
  EXPECT_EQ(info->faults[0].switch_chip, "1");
  EXPECT_EQ(info->faults[0].switch_port, "7");
  EXPECT_EQ(info->node_status, "UnHealthy");
  EXPECT_TRUE(info->present);
  EXPECT_EQ(info->fault_codes.size(), 3u);  // as written, for Volcano
  EXPECT_EQ(info->fault_level, "RestartBusiness");
  json levelled = json::parse(SwitchInfoCfg({"CODE1"}));
  levelled["FaultTimeAndLevelMap"]["CODE1"] = {{"fault_time", 1}, {"fault_level", "SeparateNPU"}};
  EXPECT_EQ(mc::ParseSwitchInfoCfg(levelled.dump())->faults[0].level, v1::FAULT_LEVEL_SEPARATE);
  EXPECT_TRUE(mc::ParseSwitchInfoCfg(SwitchInfoCfg({}))->faults.empty());
  for (const char* bad : {"[]", "{\"FaultCode\": 3}", "{\"FaultCode\": [3]}", "{\"FaultCode\": [\"{}\"]}",
                          "{\"FaultCode\": [\"not json\"]}", "{\"NodeStatus\": 1}"}) {
    EXPECT_EQ(mc::ParseSwitchInfoCfg(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// ---- MindCluster's operators' ConfigMaps (docs/mindcluster.md, "Separation through ConfigMaps") ----

const std::string kSystem = "/api/v1/namespaces/cluster-system/configmaps/";

json PolicyCm(const std::string& yaml) {
  return {{"metadata", {{"name", "clusterd-config-cm"}, {"namespace", "cluster-system"}}},
          {"data", {{"manually_separate_policy.conf", yaml}}}};
}

std::string PolicyYaml(int window, int threshold, int free) {
  return "enabled: true\nseparate:\n  fault_window_hours: " + std::to_string(window) +
         "\n  fault_threshold: " + std::to_string(threshold) +
         "\nrelease:\n  fault_free_hours: " + std::to_string(free) + "\n";
}

MindClusterStackOptions OperatorOptions() {
  MindClusterStackOptions o;
  o.separation_policy_cm = true;
  o.manual_info_cm = true;
  o.separation_default.threshold = 4;
  o.separation_default.window = std::chrono::hours(12);
  o.separation_default.settle = 5s;
  return o;
}

v1::Device Separated(const std::string& node, uint32_t id, int64_t since_s) {
  v1::Device d = Chip(node, id);
  d.set_separated(true);
  d.mutable_separated_time()->set_seconds(since_s);
  return d;
}

TEST_F(MindClusterStackTest, SeparationPolicyFromTheConfigMapOverClusterDsOwn) {
  MetricsRegistry metrics;
  metrics_ = &metrics;
  auto has = [&](const std::string& line) { return metrics.Render().find(line + "\n") != std::string::npos; };
  Start(OperatorOptions());
  Step();
  // No ConfigMap: ClusterD's own settings.
  ASSERT_EQ(commands_.policies.size(), 1u);
  EXPECT_EQ(commands_.policies[0].threshold, 4u);
  EXPECT_FALSE(stack_->separation_policy_from_cm());

  // An operator's policy: honoured, with ClusterD's settle time.
  api_->Set(kSystem + "clusterd-config-cm", PolicyCm(PolicyYaml(48, 2, -1)));
  Step();
  ASSERT_EQ(commands_.policies.size(), 2u);
  EXPECT_EQ(commands_.policies[1].threshold, 2u);
  EXPECT_EQ(commands_.policies[1].window, std::chrono::hours(48));
  EXPECT_EQ(commands_.policies[1].release_after, std::nullopt);
  EXPECT_EQ(commands_.policies[1].settle, 5s);
  EXPECT_TRUE(stack_->separation_policy_from_cm());

  // Rewritten in a loop with the same content: nothing applied again.
  for (int i = 0; i < 5; ++i) {
    api_->Set(kSystem + "clusterd-config-cm", PolicyCm(PolicyYaml(48, 2, -1)));
    Step();
  }
  EXPECT_EQ(commands_.policies.size(), 2u);
  EXPECT_TRUE(has("clusterd_mindcluster_separation_policy_cm_total{result=\"applied\"} 1"));
  EXPECT_TRUE(has("clusterd_mindcluster_separation_policy_cm_total{result=\"unchanged\"} 5"));
  EXPECT_TRUE(has("clusterd_mindcluster_separation_policy_window_hours 48"));
  EXPECT_TRUE(has("clusterd_mindcluster_separation_policy_release_hours -1"));

  // Malformed, out of range, huge, without the key: each changes nothing;
  // the last good policy stays.
  for (const json& bad : {PolicyCm("enabled: [\n"), PolicyCm(PolicyYaml(721, 2, 48)), PolicyCm(PolicyYaml(24, 0, 48)),
                          PolicyCm(PolicyYaml(24, 3, 0)), PolicyCm(std::string(100'000, '#')),
                          json{{"data", {{"other", "x"}}}}, json{{"data", {{"manually_separate_policy.conf", 5}}}}}) {
    api_->Set(kSystem + "clusterd-config-cm", bad);
    Step();
    EXPECT_EQ(commands_.policies.size(), 2u) << bad.dump().substr(0, 200);
    ASSERT_TRUE(stack_->separation_policy().has_value());
    EXPECT_EQ(stack_->separation_policy()->threshold, 2u);
  }
  EXPECT_TRUE(has("clusterd_mindcluster_separation_policy_cm_total{result=\"refused\"} 7"));  // counted, each once
  EXPECT_TRUE(has("clusterd_mindcluster_separation_policy_threshold 2"));

  // A good one again, then the ConfigMap deleted: back to ClusterD's own.
  api_->Set(kSystem + "clusterd-config-cm", PolicyCm(PolicyYaml(24, 3, 48)));
  Step();
  ASSERT_EQ(commands_.policies.size(), 3u);
  EXPECT_EQ(commands_.policies[2].threshold, 3u);
  api_->Remove(kSystem + "clusterd-config-cm");
  Step();
  ASSERT_EQ(commands_.policies.size(), 4u);
  EXPECT_EQ(commands_.policies[3].threshold, 4u);
  EXPECT_FALSE(stack_->separation_policy_from_cm());
  EXPECT_TRUE(has("clusterd_mindcluster_separation_policy_from_configmap 0"));
  Stop();  // before the registry goes
}

TEST_F(MindClusterStackTest, ManualInfoListsSeparationsAndAnOperatorsDeletionReleases) {
  MetricsRegistry metrics;
  metrics_ = &metrics;
  auto has = [&](const std::string& line) { return metrics.Render().find(line + "\n") != std::string::npos; };
  SetPlugin("a", Healthy(8));
  v1::Fault fault = ChipFault("a", 3, "80E01801", v1::FAULT_LEVEL_SEPARATE);
  fault.set_device_id(3);
  SetOurs("a", {Chip("a", 0), Separated("a", 3, 1'700'000'000), Separated("a", 5, 1'700'000'100)}, {fault});
  Start(OperatorOptions());
  Step();
  auto cm = api_->Object(kSystem + "clusterd-manual-info-cm");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["data"]["a"],
            R"({"Total":["Ascend910-3","Ascend910-5"],"Detail":{"Ascend910-3":[{"FaultCode":"80E01801","FaultLevel":)"
            R"("ManuallySeparateNPU","LastSeparateTime":1700000000000}],"Ascend910-5":[{"FaultCode":"",)"
            R"("FaultLevel":"ManuallySeparateNPU","LastSeparateTime":1700000100000}]}})");
  EXPECT_EQ((*cm)["metadata"]["annotations"]["clusterd.io/manual-info-listed"],
            R"({"a":["Ascend910-3","Ascend910-5"]})");
  EXPECT_NE(List(Entry("a"), "-Unhealthy").find("Ascend910-5"), std::string::npos);

  // Nothing changes: nothing written again, however often it is looked at.
  api_->ClearCalls();
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(20s);
    Step();
  }
  EXPECT_TRUE(api_->CallsTo("PUT", kSystem + "clusterd-manual-info-cm").empty());
  // Rewritten in a loop by someone else with what it holds: nothing released, nothing written.
  for (int i = 0; i < 5; ++i) {
    api_->Set(kSystem + "clusterd-manual-info-cm", *api_->Object(kSystem + "clusterd-manual-info-cm"));
    clock_.Advance(20s);
    Step();
  }
  EXPECT_TRUE(commands_.releases.empty());
  EXPECT_TRUE(api_->CallsTo("PUT", kSystem + "clusterd-manual-info-cm").empty());
  EXPECT_TRUE(has("clusterd_mindcluster_manual_info_writes_total 1"));
  cm = api_->Object(kSystem + "clusterd-manual-info-cm");

  // An operator deletes chip 5 (kubectl edit): released as clusterctl
  // release does, with who and why.
  json edited = *cm;
  edited["data"]["a"] =
      R"({"Total":["Ascend910-3"],"Detail":{"Ascend910-3":[{"FaultCode":"80E01801","FaultLevel":"ManuallySeparateNPU","LastSeparateTime":1700000000000}]}})";
  edited["metadata"]["managedFields"] =
      json::array({{{"manager", "clusterd"}, {"operation", "Update"}, {"time", "2026-12-06T10:00:00Z"}},
                   {{"manager", "kubectl-edit"}, {"operation", "Update"}, {"time", "2026-12-06T11:00:00Z"}}});
  api_->Set(kSystem + "clusterd-manual-info-cm", edited);
  Step();
  ASSERT_EQ(commands_.releases.size(), 1u);
  EXPECT_EQ(commands_.releases[0].node, "a");
  EXPECT_EQ(commands_.releases[0].device, 5u);
  EXPECT_EQ(commands_.releases[0].actor, "/kubectl-edit");  // the fake's principal is ""
  EXPECT_NE(commands_.releases[0].reason.find("deleted from cluster-system/clusterd-manual-info-cm by field manager "
                                              "kubectl-edit"),
            std::string::npos)
      << commands_.releases[0].reason;
  // The chip is back in Volcano's lists, and the ConfigMap says what is left.
  clock_.Advance(20s);
  Step();
  EXPECT_EQ(List(Entry("a"), "-Unhealthy").find("Ascend910-5"), std::string::npos);
  EXPECT_NE(List(Entry("a"), "").find("Ascend910-5"), std::string::npos);
  cm = api_->Object(kSystem + "clusterd-manual-info-cm");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["metadata"]["annotations"]["clusterd.io/manual-info-listed"], R"({"a":["Ascend910-3"]})");
  EXPECT_EQ(commands_.releases.size(), 1u);

  // An operator writes something that does not parse: nothing released, and
  // ClusterD's list is written again.
  json garbage = *cm;
  garbage["data"]["a"] = "not json";
  api_->Set(kSystem + "clusterd-manual-info-cm", garbage);
  clock_.Advance(20s);
  Step();
  EXPECT_EQ(commands_.releases.size(), 1u);
  cm = api_->Object(kSystem + "clusterd-manual-info-cm");
  EXPECT_EQ((*cm)["data"]["a"].get<std::string>().rfind(R"({"Total":["Ascend910-3"])", 0), 0u);
  EXPECT_TRUE(has("clusterd_mindcluster_manual_info_refused_total 1"));
  EXPECT_TRUE(has("clusterd_mindcluster_manual_info_released_total 1"));

  // The whole ConfigMap deleted: every chip it listed is released (as the
  // reference takes it), and with nothing separated none is written.
  api_->Remove(kSystem + "clusterd-manual-info-cm");
  clock_.Advance(20s);
  Step();
  ASSERT_EQ(commands_.releases.size(), 2u);
  EXPECT_EQ(commands_.releases[1].device, 3u);
  EXPECT_NE(commands_.releases[1].reason.find("the ConfigMap was deleted"), std::string::npos);
  clock_.Advance(20s);
  Step();
  EXPECT_FALSE(api_->Object(kSystem + "clusterd-manual-info-cm").has_value());
  EXPECT_TRUE(has("clusterd_mindcluster_manual_info_released_total 2"));
  Stop();  // before the registry goes
}

TEST_F(MindClusterStackTest, ManualInfoEntryDeletedWhileClusterDWasAwayIsReleasedAtStart) {
  SetPlugin("a", Healthy(8));
  SetOurs("a", {Separated("a", 2, 1'700'000'000), Separated("a", 6, 1'700'000'000)});
  Start(OperatorOptions());
  Step();
  ASSERT_TRUE(api_->Object(kSystem + "clusterd-manual-info-cm").has_value());
  Stop();
  // While ClusterD is away an operator deletes chip 6 (the annotation stays).
  json cm = *api_->Object(kSystem + "clusterd-manual-info-cm");
  cm["data"]["a"] =
      R"({"Total":["Ascend910-2"],"Detail":{"Ascend910-2":[{"FaultCode":"","FaultLevel":"ManuallySeparateNPU","LastSeparateTime":1700000000000}]}})";
  api_->Set(kSystem + "clusterd-manual-info-cm", cm);
  Start(OperatorOptions());
  Step();
  ASSERT_EQ(commands_.releases.size(), 1u);
  EXPECT_EQ(commands_.releases[0].device, 6u);
}

TEST_F(MindClusterStackTest, ObservabilityConfigMapsInTheReferencesShapeWhenTheyChange) {
  MindClusterStackOptions o;
  o.statistics_cms = true;
  o.scheduling_exception_cm = true;
  o.statistics_interval = 10s;
  SetPlugin("a", Healthy(8));
  v1::Fault pf = ChipFault("a", 2, "220001001", v1::FAULT_LEVEL_SEPARATE);
  pf.set_reporter("pubfault/CCAE");
  pf.set_external_id("fault-0001");
  pf.mutable_first_seen()->set_seconds(1'700'000'000);
  v1::Fault pf3 = pf;
  pf3.set_device_id(3);
  SetOurs("a", {Chip("a", 2), Chip("a", 3)}, {pf, pf3});
  v1::Job job;
  job.set_id("uid-1");
  for (uint32_t d : {2u, 3u}) {
    auto* r = job.add_placement();
    r->set_node("a");
    r->set_device_id(d);
  }
  commands_.jobs["uid-1"] = job;
  v1::SchedulingFinding finding;
  finding.set_pod_namespace("ml");
  finding.set_pod("train-0");
  finding.set_reason("too-few");
  finding.set_evidence("no node offers 16 huawei.com/Ascend910 (at most 8)");
  commands_.findings = {finding};
  Start(o);
  Step();
  auto stat = api_->Object(kSystem + "statistic-fault-info");
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ((*stat)["metadata"]["labels"], json({{"mc-statistic-fault", "true"}}));
  EXPECT_EQ((*stat)["data"]["PublicFaults"],
            R"({"a":[{"resource":"CCAE","devIds":[2,3],"faultId":"fault-0001","faultCode":"220001001",)"
            R"("level":"SeparateNPU","faultTime":1700000000000}]})");
  EXPECT_EQ((*stat)["data"]["FaultNum"], R"({"publicFaultNum":1})");
  auto jobs = api_->Object(kInfo + "current-job-statistic");
  ASSERT_TRUE(jobs.has_value());
  EXPECT_EQ((*jobs)["data"]["data"], R"([{"id":"uid-1","cardNum":2}])");
  EXPECT_EQ((*jobs)["data"]["totalJob"], "1");
  EXPECT_FALSE((*jobs)["metadata"].contains("labels"));  // not one of Volcano's
  auto report = api_->Object(kSystem + "scheduling-exception-report");
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ((*report)["data"]["train-0.ml/train-0"],
            R"x({"jobName":"train-0","jobType":"Pod","nameSpace":"ml","conditions":{"status":"PodGroupInqueue",)x"
            R"x("reason":"NotEnoughResources","message":"no node offers 16 huawei.com/Ascend910 (at most 8)"}})x");

  // Unchanged: never written again; changed: at most once per interval.
  api_->ClearCalls();
  clock_.Advance(30s);
  Step();
  EXPECT_TRUE(api_->Writes().empty());
  commands_.findings.clear();
  clock_.Advance(1s);
  Step();
  EXPECT_TRUE(api_->Writes().empty());  // within the interval of the last turn
  clock_.Advance(10s);
  Step();
  ASSERT_EQ(api_->Writes().size(), 1u);
  EXPECT_TRUE((*api_->Object(kSystem + "scheduling-exception-report"))["data"].empty());

  // Someone else rewrote one: its version is read again and ours written over it.
  json other = *api_->Object(kSystem + "statistic-fault-info");
  other["data"]["FaultNum"] = R"({"publicFaultNum":99})";
  api_->Set(kSystem + "statistic-fault-info", other);
  ++commands_.revision;  // a change of ours too
  commands_.node_faults["a"] = {pf};
  clock_.Advance(11s);
  Step();  // a conflict: retried
  clock_.Advance(11s);
  Step();
  EXPECT_EQ((*api_->Object(kSystem + "statistic-fault-info"))["data"]["PublicFaults"],
            R"({"a":[{"resource":"CCAE","devIds":[2],"faultId":"fault-0001","faultCode":"220001001",)"
            R"("level":"SeparateNPU","faultTime":1700000000000}]})");
}

// ---- super-pod-<id> ConfigMaps for MindCluster NodeD's pingmesh ----

const std::string kNodes = "/api/v1/nodes/";
const std::string kSuperPod = "/api/v1/namespaces/cluster-system/configmaps/super-pod-";

// A Node of an A3 SuperPoD as the device plugin annotates it, with the
// status a kubelet writes (which the super-pod ConfigMaps do not depend on).
json A3Node(const std::string& name, const std::string& super_pod, const std::string& server_index,
            const std::string& heartbeat = "2026-01-01T00:00:00Z") {
  json infos = json::object();
  for (int i = 0; i < 2; ++i) infos["Ascend910-" + std::to_string(i)] = {{"IP", ""}, {"SuperDeviceID", 10 + i}};
  return {{"metadata",
           {{"name", name},
            {"labels", {{"kubernetes.io/hostname", name}}},
            {"annotations",
             {{"superPodID", super_pod},
              {"serverIndex", server_index},
              {"serverType", "A3"},
              {"baseDeviceInfos", infos.dump()}}}}},
          {"status", {{"conditions", json::array({{{"type", "Ready"}, {"lastHeartbeatTime", heartbeat}}})}}}};
}

// The superPodDevice of super-pod-<id>: nullptr when the ConfigMap is absent.
json SuperPodDevice(const testing::FakeK8sClient& api, const std::string& id) {
  auto cm = api.Object(kSuperPod + id);
  if (!cm) return nullptr;
  EXPECT_EQ((*cm)["metadata"]["labels"]["app"], "pingmesh");
  return json::parse((*cm)["data"].value("superPodDevice", std::string("null")));
}

std::set<std::string> NodesOf(const json& device) {
  std::set<std::string> out;
  for (auto it = device["NodeDeviceMap"].begin(); it != device["NodeDeviceMap"].end(); ++it) out.insert(it.key());
  return out;
}

TEST_F(MindClusterStackTest, SuperPodConfigMapsFollowTheNodesAnnotations) {
  MetricsRegistry metrics;
  metrics_ = &metrics;
  auto has = [&](const std::string& line) { return metrics.Render().find(line + "\n") != std::string::npos; };
  api_->Set(kNodes + "a1", A3Node("a1", "1", "0"));
  api_->Set(kNodes + "a2", A3Node("a2", "1", "1"));
  api_->Set(kNodes + "b1", A3Node("b1", "2", "0"));
  api_->Set(kNodes + "cpu", {{"metadata", {{"name", "cpu"}}}});  // in no SuperPoD
  api_->Set(kNodes + "bad", A3Node("bad", "07", "0"));
  MindClusterStackOptions options;
  options.super_pod_cms = true;
  Start(options);
  Step();
  EXPECT_EQ(SuperPodDevice(*api_, "1"), json::parse(R"({"Version":"A3","SuperPodID":"1","NodeDeviceMap":{
              "a1":{"NodeName":"a1","ServerID":"0","DeviceMap":{"0":"10","1":"11"}},
              "a2":{"NodeName":"a2","ServerID":"1","DeviceMap":{"0":"10","1":"11"}}}})"));
  EXPECT_EQ(NodesOf(SuperPodDevice(*api_, "2")), std::set<std::string>{"b1"});
  EXPECT_TRUE(has("clusterd_mindcluster_super_pod_nodes_skipped{reason=\"super_pod_id\"} 1"));
  EXPECT_TRUE(has("clusterd_mindcluster_super_pod_configmaps 2"));
  EXPECT_TRUE(has("clusterd_mindcluster_super_pod_writes_total 2"));

  // A Node's status changing writes nothing; a node moving rewrites both.
  api_->ClearCalls();
  clock_.Advance(1s);
  api_->Set(kNodes + "a1", A3Node("a1", "1", "0", "2026-01-01T00:00:10Z"));
  Step();
  EXPECT_TRUE(api_->Writes().empty());
  api_->Set(kNodes + "a2", A3Node("a2", "2", "1"));
  Step();
  EXPECT_EQ(NodesOf(SuperPodDevice(*api_, "1")), std::set<std::string>{"a1"});
  EXPECT_EQ(NodesOf(SuperPodDevice(*api_, "2")), (std::set<std::string>{"a2", "b1"}));
  EXPECT_EQ(api_->Writes().size(), 2u);
  for (const auto& w : api_->Writes()) EXPECT_EQ(w.method, "PUT") << w.path;

  // The last node of SuperPoD 1 goes: so does its ConfigMap.
  clock_.Advance(1s);
  ASSERT_TRUE(api_->Remove(kNodes + "a1"));
  Step();
  EXPECT_FALSE(api_->Object(kSuperPod + "1"));
  // Someone else's edit, or a deletion, is written back.
  json edited = *api_->Object(kSuperPod + "2");
  edited["data"]["superPodDevice"] = "{}";
  api_->Set(kSuperPod + "2", edited);
  clock_.Advance(1s);
  Step();
  EXPECT_EQ(NodesOf(SuperPodDevice(*api_, "2")), (std::set<std::string>{"a2", "b1"}));
  ASSERT_TRUE(api_->Remove(kSuperPod + "2"));
  clock_.Advance(1s);
  Step();
  EXPECT_EQ(NodesOf(SuperPodDevice(*api_, "2")), (std::set<std::string>{"a2", "b1"}));

  // A restart adopts them: nothing is written again; a node that came
  // meanwhile is written, once.
  Stop();
  metrics_ = nullptr;
  api_->Set(kNodes + "c1", A3Node("c1", "3", "0"));
  api_->ClearCalls();
  clock_.Advance(1s);
  Start(options);
  Step();
  ASSERT_EQ(api_->Writes().size(), 1u);
  EXPECT_EQ(api_->Writes()[0].method, "POST");
  EXPECT_EQ(NodesOf(SuperPodDevice(*api_, "3")), std::set<std::string>{"c1"});
  clock_.Advance(1s);
  Step();
  EXPECT_EQ(api_->Writes().size(), 1u);
}

// MindCluster NodeD's pingmesh findings (v7.0.RC1's cmreporter): the public-fault
// ConfigMap cluster-system/pingmesh-fault-<node>, read where
// public_fault_namespaces lists cluster-system.
TEST_F(MindClusterStackTest, MindClusterPingMeshFaultConfigMapsAreIngested) {
  const std::string request = R"({"id":"0e6f6c3a-4b1b-11f0-9d6b-0242ac110002","timestamp":1750000000123,
    "version":"1.0","resource":"pingmesh","faults":[
    {"faultId":"3f1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809","faultType":"NPU",
     "faultCode":"220001001","faultTime":1750000000123,"assertion":"occur","faultLocation":{},
     "influence":[{"nodeName":"a3-node-07","nodeSN":"","deviceIds":[5]}],"description":"hccsping-mesh fault"}]})";
  api_->Set("/api/v1/namespaces/cluster-system/configmaps/pingmesh-fault-a3-node-07",
            {{"metadata",
              {{"name", "pingmesh-fault-a3-node-07"},
               {"namespace", "cluster-system"},
               {"labels", {{"mc-consumer-publicfault", "true"}}}}},
             {"data", {{"PublicFault", request}}}});
  MindClusterStackOptions options;
  options.public_fault_namespaces = {"cluster-system"};
  Start(options);
  Step();
  ASSERT_EQ(commands_.public_faults.size(), 1u);
  EXPECT_EQ(commands_.public_faults[0].reporter, "pubfault/pingmesh");
  ASSERT_EQ(commands_.public_faults[0].faults.size(), 1u);
  EXPECT_EQ(commands_.public_faults[0].faults[0].node, "a3-node-07");
  EXPECT_EQ(commands_.public_faults[0].faults[0].device, 5u);
  EXPECT_EQ(commands_.public_faults[0].faults[0].level, v1::FAULT_LEVEL_SEPARATE);
}

// InformerOptions::transform (used for the Nodes above): the cache and the
// handlers hold the cut object, listed or watched, and a change that the cut
// object shows is still a change.
TEST(InformerTransform, TheCacheAndTheHandlersHoldTheCutObject) {
  auto api = std::make_shared<testing::FakeK8sClient>();
  api->Set(kNodes + "n1", A3Node("n1", "1", "0"));
  k8s::InformerOptions opts;
  opts.name = "nodes";
  opts.path = "/api/v1/nodes";
  opts.transform = [](json node) {
    return json{{"metadata",
                 {{"name", node["metadata"]["name"]},
                  {"resourceVersion", node["metadata"]["resourceVersion"]},
                  {"sp", node["metadata"]["annotations"].value("superPodID", "")}}}};
  };
  std::vector<json> seen;  // what the handlers were given
  k8s::Informer::Handlers h;
  h.on_upsert = [&seen](const json& o) { seen.push_back(o); };
  h.on_delete = [&seen](const json& o) { seen.push_back(o); };
  k8s::Informer informer(api.get(), opts, h, nullptr);
  informer.Start();
  ASSERT_TRUE(api->WaitCaughtUp(1));
  api->Set(kNodes + "n1", A3Node("n1", "2", "0"));
  ASSERT_TRUE(api->Remove(kNodes + "n1"));
  ASSERT_TRUE(api->WaitCaughtUp(1));
  informer.Stop();
  ASSERT_EQ(seen.size(), 3u);
  for (const json& o : seen) {
    EXPECT_FALSE(o.contains("status")) << o.dump();
    EXPECT_FALSE(o["metadata"].contains("annotations")) << o.dump();
  }
  EXPECT_EQ(seen[0]["metadata"]["sp"], "1");
  EXPECT_EQ(seen[1]["metadata"]["sp"], "2");
  EXPECT_EQ(seen[2]["metadata"]["name"], "n1");
}

TEST(AscendDeviceType, FromVendorAndModel) {
  EXPECT_EQ(AscendDeviceType("huawei", "Ascend910B3"), "Ascend910");
  EXPECT_EQ(AscendDeviceType("huawei", "Ascend310P3"), "Ascend310P");
  EXPECT_EQ(AscendDeviceType("huawei", "Ascend310"), "Ascend310");
  EXPECT_EQ(AscendDeviceType("huawei", "Ascend950"), "npu");
  EXPECT_EQ(AscendDeviceType("sim", "SIM-910B"), "Ascend910");
  EXPECT_EQ(AscendDeviceType("nvidia", "H200"), "");
}

}  // namespace
}  // namespace clusterd
