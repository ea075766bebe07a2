// MindCluster's FaultMsgSignal built from ClusterState (mindcluster/signal.h):
// every shaping rule on a small cluster held in a MemoryStore.
#include "clusterd/mindcluster/signal.h"

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test/support/state/state_fixtures.h"
#include "test/support/state/state_on_store.h"
#include "test/support/state/store_backends.h"

namespace clusterd {
namespace {

using testing::MakeHello;
using testing::MakeTransition;

class MindClusterSignalTest : public ::testing::Test, public testing::StateOnStore<testing::MemoryBackend> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(catalog_
                    .MergeJson(R"({"codes": [
                        {"code": "T_SEPARATE", "level": "SEPARATE"},
                        {"code": "T_RESTART_NPU", "level": "RESTART_NPU"},
                        {"code": "T_FREE_RESTART", "level": "FREE_RESTART_NPU"},
                        {"code": "T_RESTART_BUSINESS", "level": "RESTART_BUSINESS"},
                        {"code": "T_RESTART_REQUEST", "level": "RESTART_REQUEST"},
                        {"code": "T_PRE_SEPARATE", "level": "PRE_SEPARATE"},
                        {"code": "T_SUB_HEALTH", "level": "SUB_HEALTH"},
                        {"code": "T_NOT_HANDLE", "level": "NOT_HANDLE"}]})",
                               "test")
                    .ok());
    Open();
  }

  // A node with 8 devices; labels as given (besides rack=r1).
  void AddNode(const std::string& name, std::map<std::string, std::string> labels = {}) {
    v1::Hello h = MakeHello(name, 1);
    for (auto& [k, v] : labels) (*h.mutable_labels())[k] = v;
    ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyHello(h, 1, m); }).ok());
  }

  // Raises (or clears) a fault through the node's agent; nullopt device: node-level.
  void Fault(const std::string& node, std::optional<uint32_t> device, const std::string& code, bool raise = true,
             v1::FaultSource source = v1::FAULT_SOURCE_ACCELERATOR) {
    const uint64_t seq = ++seq_[node];
    auto t = MakeTransition(1, seq, raise, device, code, source);
    auto r = Commit([&](Mutation* m) { return state_->ApplyTransition(node, 1, t, m); });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  // A job with one rank per (node, device) given, in order.
  void AddJob(const std::string& id, const std::vector<std::pair<std::string, std::optional<uint32_t>>>& ranks) {
    v1::Job job;
    job.set_id(id);
    job.set_kind(v1::JOB_KIND_TRAINING);
    uint32_t rank = 0;
    for (const auto& [node, device] : ranks) {
      auto* p = job.add_placement();
      p->set_rank(rank++);
      p->set_node(node);
      if (device) p->set_device_id(*device);
    }
    auto r = Commit([&](Mutation* m) { return state_->ApplyCreateJob(job, m); });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  fault::FaultMsgSignal Job(const std::string& id, const mindcluster::SignalLimits& limits = {},
                            bool* truncated = nullptr) {
    return state_->Read(
        [&](const StateView& s) { return mindcluster::JobSignal(s, s.jobs().at(id), limits, truncated); });
  }
  fault::FaultMsgSignal Cluster() {
    return state_->Read([](const StateView& s) { return mindcluster::ClusterSignal(s); });
  }

  static std::vector<std::string> Strings(const google::protobuf::RepeatedPtrField<std::string>& r) {
    return {r.begin(), r.end()};
  }

  std::map<std::string, uint64_t> seq_;
};

TEST(MindClusterLevelTest, LevelNamesAndHealth) {
  using mindcluster::HealthName;
  using mindcluster::LevelName;
  EXPECT_EQ(LevelName(v1::FAULT_LEVEL_RESTART_REQUEST), "RestartRequest");
  EXPECT_EQ(LevelName(v1::FAULT_LEVEL_RESTART_BUSINESS), "RestartBusiness");
  EXPECT_EQ(LevelName(v1::FAULT_LEVEL_FREE_RESTART_NPU), "FreeRestartNPU");
  EXPECT_EQ(LevelName(v1::FAULT_LEVEL_RESTART_NPU), "RestartNPU");
  EXPECT_EQ(LevelName(v1::FAULT_LEVEL_SEPARATE), "SeparateNPU");
  EXPECT_EQ(LevelName(v1::FAULT_LEVEL_PRE_SEPARATE), "PreSeparateNPU");
  EXPECT_EQ(LevelName(v1::FAULT_LEVEL_SUB_HEALTH), "SubHealthFault");
  EXPECT_EQ(LevelName(v1::FAULT_LEVEL_NOT_HANDLE), "NotHandleFault");
  EXPECT_EQ(LevelName(v1::FAULT_LEVEL_UNSPECIFIED), "");

  EXPECT_EQ(HealthName(v1::FAULT_LEVEL_UNSPECIFIED), "Healthy");
  EXPECT_EQ(HealthName(v1::FAULT_LEVEL_NOT_HANDLE), "Healthy");
  EXPECT_EQ(HealthName(v1::FAULT_LEVEL_SUB_HEALTH), "SubHealthy");
  EXPECT_EQ(HealthName(v1::FAULT_LEVEL_PRE_SEPARATE), "SubHealthy");
  for (auto level : {v1::FAULT_LEVEL_RESTART_REQUEST, v1::FAULT_LEVEL_RESTART_BUSINESS,
                     v1::FAULT_LEVEL_FREE_RESTART_NPU, v1::FAULT_LEVEL_RESTART_NPU, v1::FAULT_LEVEL_SEPARATE}) {
    EXPECT_EQ(HealthName(level), "UnHealthy") << v1::FaultLevel_Name(level);
  }
}

TEST(MindClusterLevelTest, DeviceTypeAndListed) {
  v1::Fault f;
  f.set_state(v1::FAULT_STATE_ACTIVE);
  f.set_level(v1::FAULT_LEVEL_SUB_HEALTH);
  f.set_source(v1::FAULT_SOURCE_NETWORK);
  EXPECT_EQ(mindcluster::DeviceType(f), "Network");
  f.set_source(v1::FAULT_SOURCE_DISK);
  EXPECT_EQ(mindcluster::DeviceType(f), "Storage");
  for (auto s : {v1::FAULT_SOURCE_CPU, v1::FAULT_SOURCE_MEMORY, v1::FAULT_SOURCE_KERNEL, v1::FAULT_SOURCE_HEARTBEAT,
                 v1::FAULT_SOURCE_EXTERNAL, v1::FAULT_SOURCE_ACCELERATOR}) {
    f.set_source(s);
    EXPECT_EQ(mindcluster::DeviceType(f), "Node") << v1::FaultSource_Name(s);
  }
  f.set_device_id(3);
  f.set_source(v1::FAULT_SOURCE_NETWORK);  // a chip's link: still the chip
  EXPECT_EQ(mindcluster::DeviceType(f), "NPU");

  EXPECT_TRUE(mindcluster::Listed(f));
  f.set_level(v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_FALSE(mindcluster::Listed(f));
  f.set_level(v1::FAULT_LEVEL_UNSPECIFIED);
  EXPECT_FALSE(mindcluster::Listed(f));
  f.set_level(v1::FAULT_LEVEL_SEPARATE);
  f.set_state(v1::FAULT_STATE_CLEARED);
  EXPECT_FALSE(mindcluster::Listed(f));
}

TEST_F(MindClusterSignalTest, NoFaultsIsNormal) {
  AddNode("worker01");
  AddJob("job-aaaa-0001", {{"worker01", 0}, {"worker01", 1}});
  auto s = Job("job-aaaa-0001");
  EXPECT_EQ(s.jobid(), "job-aaaa-0001");
  EXPECT_EQ(s.signaltype(), "normal");
  EXPECT_EQ(s.nodefaultinfo_size(), 0);
  EXPECT_TRUE(s.uuid().empty());
}

// Only the job's devices and its nodes' node-level faults; NOT_HANDLE and
// cleared faults never.
TEST_F(MindClusterSignalTest, JobSeesFaultsOnItsDevicesAndNodesOnly) {
  AddNode("worker01");
  AddNode("worker02");
  AddJob("job-aaaa-0001", {{"worker01", 2}, {"worker01", 3}});
  Fault("worker01", 3, "T_RESTART_BUSINESS");
  Fault("worker01", 5, "T_SEPARATE");                                              // a device the job does not use
  Fault("worker01", 2, "T_NOT_HANDLE");                                            // never listed
  Fault("worker01", std::nullopt, "T_SUB_HEALTH", true, v1::FAULT_SOURCE_KERNEL);  // node-level
  Fault("worker02", 0, "T_SEPARATE");                                              // another node
  Fault("worker01", 2, "T_RESTART_NPU");
  Fault("worker01", 2, "T_RESTART_NPU", false);  // cleared again

  auto s = Job("job-aaaa-0001");
  EXPECT_EQ(s.signaltype(), "fault");
  ASSERT_EQ(s.nodefaultinfo_size(), 1) << s.DebugString();
  const auto& n = s.nodefaultinfo(0);
  EXPECT_EQ(n.nodename(), "worker01");
  EXPECT_EQ(n.nodeip(), "worker01");  // no node-ip label: the name
  EXPECT_EQ(n.nodesn(), "");
  EXPECT_EQ(n.faultlevel(), "UnHealthy");
  ASSERT_EQ(n.faultdevice_size(), 2) << s.DebugString();
  // The node-level group first.
  EXPECT_EQ(n.faultdevice(0).deviceid(), "-1");
  EXPECT_EQ(n.faultdevice(0).devicetype(), "Node");
  EXPECT_EQ(Strings(n.faultdevice(0).faultcodes()), std::vector<std::string>{"T_SUB_HEALTH"});
  EXPECT_EQ(Strings(n.faultdevice(0).faultlevels()), std::vector<std::string>{"SubHealthFault"});
  EXPECT_EQ(n.faultdevice(0).faultlevel(), "SubHealthy");
  EXPECT_EQ(n.faultdevice(1).deviceid(), "3");
  EXPECT_EQ(n.faultdevice(1).devicetype(), "NPU");
  EXPECT_EQ(Strings(n.faultdevice(1).faultcodes()), std::vector<std::string>{"T_RESTART_BUSINESS"});
  EXPECT_EQ(Strings(n.faultdevice(1).faultlevels()), std::vector<std::string>{"RestartBusiness"});
  EXPECT_EQ(n.faultdevice(1).faultlevel(), "UnHealthy");
}

// A rank without a device: the node's node-level faults hit it, no chip's do.
TEST_F(MindClusterSignalTest, RankWithoutDeviceSeesNodeLevelFaultsOnly) {
  AddNode("worker01");
  AddJob("job-aaaa-0002", {{"worker01", std::nullopt}});
  Fault("worker01", 0, "T_SEPARATE");
  EXPECT_EQ(Job("job-aaaa-0002").signaltype(), "normal");
  Fault("worker01", std::nullopt, "T_PRE_SEPARATE", true, v1::FAULT_SOURCE_MEMORY);
  auto s = Job("job-aaaa-0002");
  ASSERT_EQ(s.nodefaultinfo_size(), 1);
  ASSERT_EQ(s.nodefaultinfo(0).faultdevice_size(), 1);
  EXPECT_EQ(s.nodefaultinfo(0).faultdevice(0).deviceid(), "-1");
  EXPECT_EQ(s.nodefaultinfo(0).faultlevel(), "SubHealthy");
}

// Codes sorted and unique, with their raw level names in parallel; every
// level's name; the worst collapses to the device's and the node's health.
TEST_F(MindClusterSignalTest, CodesSortedUniqueWithParallelLevels) {
  AddNode("worker01");
  AddJob("job-aaaa-0003", {{"worker01", 0}, {"worker01", 1}});
  Fault("worker01", 0, "T_SUB_HEALTH");
  Fault("worker01", 0, "T_PRE_SEPARATE");
  Fault("worker01", 1, "T_SEPARATE");
  Fault("worker01", 1, "T_RESTART_NPU");
  Fault("worker01", 1, "T_FREE_RESTART");
  Fault("worker01", 1, "T_RESTART_BUSINESS");
  Fault("worker01", 1, "T_RESTART_REQUEST");
  // The same code twice (two subjects of a node-level code): listed once.
  v1::FaultTransition t =
      MakeTransition(1, ++seq_["worker01"], true, std::nullopt, "T_SUB_HEALTH", v1::FAULT_SOURCE_NETWORK);
  t.mutable_fault()->set_subject("eth0");
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyTransition("worker01", 1, t, m); }).ok());
  t = MakeTransition(1, ++seq_["worker01"], true, std::nullopt, "T_SUB_HEALTH", v1::FAULT_SOURCE_NETWORK);
  t.mutable_fault()->set_subject("eth1");
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyTransition("worker01", 1, t, m); }).ok());
  // A node-level fault of another kind: a group of its own.
  Fault("worker01", std::nullopt, "T_SUB_HEALTH", true, v1::FAULT_SOURCE_DISK);

  auto s = Job("job-aaaa-0003");
  ASSERT_EQ(s.nodefaultinfo_size(), 1);
  const auto& n = s.nodefaultinfo(0);
  EXPECT_EQ(n.faultlevel(), "UnHealthy");
  ASSERT_EQ(n.faultdevice_size(), 4) << s.DebugString();
  EXPECT_EQ(n.faultdevice(0).deviceid(), "-1");
  EXPECT_EQ(n.faultdevice(0).devicetype(), "Network");
  EXPECT_EQ(Strings(n.faultdevice(0).faultcodes()), std::vector<std::string>{"T_SUB_HEALTH"});
  EXPECT_EQ(n.faultdevice(1).deviceid(), "-1");
  EXPECT_EQ(n.faultdevice(1).devicetype(), "Storage");
  EXPECT_EQ(n.faultdevice(2).deviceid(), "0");
  EXPECT_EQ(Strings(n.faultdevice(2).faultcodes()), (std::vector<std::string>{"T_PRE_SEPARATE", "T_SUB_HEALTH"}));
  EXPECT_EQ(Strings(n.faultdevice(2).faultlevels()), (std::vector<std::string>{"PreSeparateNPU", "SubHealthFault"}));
  EXPECT_EQ(n.faultdevice(2).faultlevel(), "SubHealthy");
  EXPECT_EQ(n.faultdevice(3).deviceid(), "1");
  EXPECT_EQ(Strings(n.faultdevice(3).faultcodes()),
            (std::vector<std::string>{"T_FREE_RESTART", "T_RESTART_BUSINESS", "T_RESTART_NPU", "T_RESTART_REQUEST",
                                      "T_SEPARATE"}));
  EXPECT_EQ(
      Strings(n.faultdevice(3).faultlevels()),
      (std::vector<std::string>{"FreeRestartNPU", "RestartBusiness", "RestartNPU", "RestartRequest", "SeparateNPU"}));
  EXPECT_EQ(n.faultdevice(3).faultlevel(), "UnHealthy");
  // Nothing else is made up.
  for (const auto& d : n.faultdevice()) {
    EXPECT_EQ(d.faulttype_size(), 0);
    EXPECT_EQ(d.faultreason_size(), 0);
    EXPECT_EQ(d.switchfaultinfos_size(), 0);
  }
}

// Nodes by nodeIP: the node-ip label, else the name; nodeSN from the
// product-serial-number label.
TEST_F(MindClusterSignalTest, NodesSortedByAddress) {
  AddNode("worker01", {{"node-ip", "10.0.0.9"}, {"product-serial-number", "SN-01"}});
  AddNode("worker02", {{"node-ip", "10.0.0.10"}});
  AddNode("worker03", {{"node-ip", "10.0.0.10"}});  // the same address: by name
  AddNode("0-first-by-name");
  AddJob("job-aaaa-0004", {{"worker01", 0}, {"worker02", 0}, {"worker03", 0}, {"0-first-by-name", 0}});
  for (const char* node : {"worker01", "worker02", "worker03", "0-first-by-name"}) Fault(node, 0, "T_SEPARATE");
  auto s = Job("job-aaaa-0004");
  ASSERT_EQ(s.nodefaultinfo_size(), 4);
  EXPECT_EQ(s.nodefaultinfo(0).nodename(), "0-first-by-name");
  EXPECT_EQ(s.nodefaultinfo(0).nodeip(), "0-first-by-name");
  EXPECT_EQ(s.nodefaultinfo(1).nodename(), "worker02");
  EXPECT_EQ(s.nodefaultinfo(1).nodeip(), "10.0.0.10");
  EXPECT_EQ(s.nodefaultinfo(2).nodename(), "worker03");
  EXPECT_EQ(s.nodefaultinfo(3).nodename(), "worker01");
  EXPECT_EQ(s.nodefaultinfo(3).nodeip(), "10.0.0.9");
  EXPECT_EQ(s.nodefaultinfo(3).nodesn(), "SN-01");
}

// The cluster's signal lists every listed fault, used by a job or not.
TEST_F(MindClusterSignalTest, ClusterSignalListsEveryFault) {
  AddNode("worker01");
  AddNode("worker02");
  AddJob("job-aaaa-0005", {{"worker01", 0}});
  EXPECT_EQ(Cluster().signaltype(), "normal");
  Fault("worker01", 0, "T_SEPARATE");
  Fault("worker02", 7, "T_SUB_HEALTH");
  Fault("worker02", 6, "T_NOT_HANDLE");
  auto s = Cluster();
  EXPECT_EQ(s.jobid(), "");
  EXPECT_EQ(s.signaltype(), "fault");
  ASSERT_EQ(s.nodefaultinfo_size(), 2);
  EXPECT_EQ(s.nodefaultinfo(0).nodename(), "worker01");
  EXPECT_EQ(s.nodefaultinfo(1).nodename(), "worker02");
  ASSERT_EQ(s.nodefaultinfo(1).faultdevice_size(), 1);
  EXPECT_EQ(s.nodefaultinfo(1).faultdevice(0).deviceid(), "7");
  EXPECT_EQ(s.nodefaultinfo(1).faultlevel(), "SubHealthy");
}

// Whole nodes go in while the signal stays within the budget; the first
// always does.
TEST_F(MindClusterSignalTest, CutAtTheByteBudget) {
  AddNode("worker01");
  AddNode("worker02");
  AddJob("job-aaaa-0006", {{"worker01", 0}, {"worker02", 0}});
  Fault("worker01", 0, "T_SEPARATE");
  Fault("worker02", 0, "T_SEPARATE");
  bool truncated = true;
  EXPECT_EQ(Job("job-aaaa-0006", {}, &truncated).nodefaultinfo_size(), 2);
  EXPECT_FALSE(truncated);
  auto s = Job("job-aaaa-0006", mindcluster::SignalLimits{.max_bytes = 1}, &truncated);
  EXPECT_TRUE(truncated);
  ASSERT_EQ(s.nodefaultinfo_size(), 1);
  EXPECT_EQ(s.signaltype(), "fault");
}

TEST_F(MindClusterSignalTest, ContentIgnoresTheUuid) {
  AddNode("worker01");
  AddJob("job-aaaa-0007", {{"worker01", 0}});
  Fault("worker01", 0, "T_SEPARATE");
  auto a = Job("job-aaaa-0007");
  auto b = a;
  a.set_uuid("one");
  b.set_uuid("two");
  EXPECT_EQ(mindcluster::SignalContent(a), mindcluster::SignalContent(b));
  Fault("worker01", 0, "T_SUB_HEALTH");
  EXPECT_NE(mindcluster::SignalContent(Job("job-aaaa-0007")), mindcluster::SignalContent(b));
}

// Fault events name the jobs they hit, job events their job; nothing else
// touches a job's signal.
TEST_F(MindClusterSignalTest, JobsTouchedByEvents) {
  AddNode("worker01");
  AddJob("job-aaaa-0008", {{"worker01", 0}});
  AddJob("job-aaaa-0009", {{"worker01", 1}});
  events_.clear();
  Fault("worker01", 0, "T_SEPARATE");
  std::set<std::string> touched;
  for (const auto& e : events_) mindcluster::AddJobsTouchedBy(e, &touched);
  EXPECT_EQ(touched, std::set<std::string>{"job-aaaa-0008"});
  events_.clear();
  touched.clear();
  Fault("worker01", 0, "T_SEPARATE", false);
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyDeleteJob("job-aaaa-0009", m); }).ok());
  for (const auto& e : events_) mindcluster::AddJobsTouchedBy(e, &touched);
  EXPECT_EQ(touched, (std::set<std::string>{"job-aaaa-0008", "job-aaaa-0009"}));
  // Health and node events touch nothing.
  touched.clear();
  v1::Event health;
  health.set_type(v1::EVENT_TYPE_NODE_HEALTH_CHANGED);
  health.add_job_ids("job-aaaa-0008");
  mindcluster::AddJobsTouchedBy(health, &touched);
  EXPECT_TRUE(touched.empty());
}

}  // namespace
}  // namespace clusterd
