// The agent's round on a fixture tree with the simulator and a real Outbox:
// what becomes a transition, and what survives a restart.
#include "noded/agent.h"
#include "noded/accel/sim_backend.h"

#include <fstream>

#include <gtest/gtest.h>

#include "test_util.h"

namespace clusterd::noded {
namespace {

using namespace std::chrono_literals;

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }

  void Start() {
    agent_.reset();
    outbox_.reset();
    auto outbox = Outbox::Open(dir_.path() + "/state");
    ASSERT_TRUE(outbox.ok()) << outbox.status().ToString();
    outbox_ = std::move(*outbox);
    sim_ = std::make_unique<SimBackend>(8);
    AgentOptions options;
    options.node_name = "worker01";
    options.labels = {{"pool", "train"}};
    options.root = testing::FixtureDir("full");
    options.kmsg_path = "";
    options.mounts_file = "/proc/mounts";  // the fixture has no /proc/1
    agent_ = std::make_unique<Agent>(options, outbox_.get(), sim_.get(), &clock_);
    ASSERT_TRUE(agent_->Init().ok());
  }

  std::vector<v1::FaultTransition> Pending() {
    std::vector<v1::FaultTransition> out;
    for (const auto& p : outbox_->Take().pending) out.push_back(p.transition);
    return out;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Outbox> outbox_;
  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(AgentTest, HelloCarriesIdentityAndInventory) {
  v1::Hello h = agent_->MakeHello();
  EXPECT_EQ(h.node_name(), "worker01");
  EXPECT_EQ(h.labels().at("pool"), "train");
  ASSERT_EQ(h.inventory().devices_size(), 8);
  EXPECT_EQ(h.inventory().devices(3).model(), "SIM-910B");
  EXPECT_GT(h.inventory().memory_bytes(), 0u);  // from the fixture's meminfo
}

TEST_F(AgentTest, InjectedDeviceFaultBecomesOneRaiseThenOneClear) {
  agent_->PollOnce();
  const size_t baseline = Pending().size();
  ASSERT_TRUE(sim_->Inject(3, "80E01801", InjectAction::kRaise).ok());
  EXPECT_EQ(agent_->PollOnce(), 1);
  auto pending = Pending();
  ASSERT_EQ(pending.size(), baseline + 1);
  const auto& t = pending.back();
  EXPECT_EQ(t.action(), v1::TRANSITION_ACTION_RAISE);
  EXPECT_EQ(t.fault().device_id(), 3u);
  EXPECT_EQ(t.fault().source(), v1::FAULT_SOURCE_ACCELERATOR);
  EXPECT_EQ(t.fault().code(), "80E01801");
  EXPECT_EQ(t.fault().level(), v1::FAULT_LEVEL_UNSPECIFIED);  // ClusterD's catalog decides
  EXPECT_EQ(t.id().epoch(), outbox_->epoch());
  // Still active: nothing new.
  EXPECT_EQ(agent_->PollOnce(), 0);
  ASSERT_TRUE(sim_->Inject(3, "80E01801", InjectAction::kClear).ok());
  EXPECT_EQ(agent_->PollOnce(), 1);
  EXPECT_EQ(Pending().back().action(), v1::TRANSITION_ACTION_CLEAR);
}

TEST_F(AgentTest, NodeLevelInjectedFaultsGetASourceFromTheirCode) {
  ASSERT_TRUE(sim_->Inject(std::nullopt, "NODE_DISK_FULL", InjectAction::kRaise).ok());
  ASSERT_TRUE(sim_->Inject(std::nullopt, "NODE_LINK_DOWN", InjectAction::kRaise).ok());
  agent_->PollOnce();
  std::map<std::string, v1::FaultSource> sources;
  for (const auto& r : outbox_->Active()) {
    EXPECT_FALSE(r.has_device_id());
    sources[r.code()] = r.source();
  }
  EXPECT_EQ(sources.at("NODE_DISK_FULL"), v1::FAULT_SOURCE_DISK);
  EXPECT_EQ(sources.at("NODE_LINK_DOWN"), v1::FAULT_SOURCE_NETWORK);
  EXPECT_EQ(SourceForNodeCode("SOMETHING_ELSE"), v1::FAULT_SOURCE_ACCELERATOR);
}

TEST_F(AgentTest, TransitionsSurviveARestartWithTheirIds) {
  ASSERT_TRUE(sim_->Inject(5, "80E01801", InjectAction::kRaise).ok());
  agent_->PollOnce();
  const auto before = Pending();
  ASSERT_FALSE(before.empty());
  const uint64_t epoch = outbox_->epoch();
  Start();  // the process dies and starts again; the simulator forgets its faults
  EXPECT_EQ(outbox_->epoch(), epoch + 1);
  auto after = Pending();
  ASSERT_GE(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].id().epoch(), before[i].id().epoch());
    EXPECT_EQ(after[i].id().seq(), before[i].id().seq());
  }
  // The hardware (simulator) no longer reports it: the next round clears it
  // under the new epoch.
  EXPECT_EQ(agent_->PollOnce(), 1);
  const auto pending = Pending();
  const auto& clear = pending.back();
  EXPECT_EQ(clear.action(), v1::TRANSITION_ACTION_CLEAR);
  EXPECT_EQ(clear.fault().device_id(), 5u);
  EXPECT_EQ(clear.id().epoch(), epoch + 1);
}

TEST_F(AgentTest, RuleFaultsRememberedAcrossRestartAreReconciledAfterWarmup) {
  // A disk fault raised by the rules before a restart.
  v1::FaultTransition t;
  t.set_action(v1::TRANSITION_ACTION_RAISE);
  t.mutable_fault()->set_source(v1::FAULT_SOURCE_DISK);
  t.mutable_fault()->set_code("NODE_DISK_FULL");
  t.mutable_fault()->set_subject("/nonexistent-mount");
  ASSERT_TRUE(outbox_->Record(t).ok());
  auto remembered = [&] {
    for (const auto& r : outbox_->Active()) {
      if (r.code() == "NODE_DISK_FULL" && r.subject() == "/nonexistent-mount") return true;
    }
    return false;
  };
  agent_->PollOnce();
  EXPECT_TRUE(remembered());  // kept while the rules warm up
  clock_.Advance(10min);
  agent_->PollOnce();
  EXPECT_FALSE(remembered());  // the rules no longer hold it: cleared
}

// The software chain on a tree of its own: what the hello carries, the
// faults of its broken links raised and cleared as the tree changes, and
// the sim backend's node faults leave them alone.
TEST(AgentChain, BrokenLinksAreNodeFaultsRaisedAndClearedAndTheHelloCarriesTheChain) {
  testing::TempDir dir;
  const std::string root = dir.Sub("root");
  dir.Write("root/usr/local/Ascend/driver/version.info", "Version=24.1.rc3\n");
  dir.Write("root/dev/null", "");  // a real /dev without davinci_manager: the driver is not loaded
  auto outbox = Outbox::Open(dir.Sub("state"));
  ASSERT_TRUE(outbox.ok());
  SimBackend sim(8);
  FakeClock clock;
  AgentOptions options;
  options.node_name = "worker01";
  options.root = root;
  options.kmsg_path = "";
  options.mounts_file = "/proc/mounts";
  options.chain_interval = std::chrono::seconds(30);
  Agent agent(options, outbox->get(), &sim, &clock);
  ASSERT_TRUE(agent.Init().ok());

  v1::Hello hello = agent.MakeHello();
  ASSERT_EQ(hello.inventory().chain_size(), 8);
  EXPECT_EQ(hello.inventory().chain(0).name(), "driver");
  EXPECT_EQ(hello.inventory().chain(0).version(), "24.1.rc3");
  EXPECT_EQ(hello.inventory().chain(2).state(), v1::CHAIN_LINK_STATE_BROKEN);
  EXPECT_EQ(hello.inventory().chain(2).code(), kChainDriverNotLoaded);

  auto chain_faults = [&] {
    std::vector<std::string> out;
    for (const auto& r : (*outbox)->Active()) {
      if (r.code().rfind("NODE_CHAIN_", 0) == 0) out.push_back(r.code());
    }
    return out;
  };
  agent.PollOnce();
  EXPECT_EQ(chain_faults(), std::vector<std::string>{kChainDriverNotLoaded});
  for (const auto& r : (*outbox)->Active()) {
    if (r.code() == kChainDriverNotLoaded) {
      EXPECT_EQ(r.level(), v1::FAULT_LEVEL_SEPARATE);
      EXPECT_FALSE(r.has_device_id());
      EXPECT_NE(r.message().find("davinci_manager"), std::string::npos) << r.message();
    }
  }
  // A simulated node fault and its clear leave the chain's fault alone.
  ASSERT_TRUE(sim.Inject(std::nullopt, "NODE_DISK_FULL", InjectAction::kRaise).ok());
  agent.PollOnce();
  ASSERT_TRUE(sim.Inject(std::nullopt, "NODE_DISK_FULL", InjectAction::kClear).ok());
  agent.PollOnce();
  EXPECT_EQ(chain_faults(), std::vector<std::string>{kChainDriverNotLoaded});

  // The driver loads (its device files appear): cleared at the next read
  // of the chain, not before; the next hello says so.
  dir.Write("root/dev/davinci_manager", "");
  for (int i = 0; i < 8; ++i) dir.Write("root/dev/davinci" + std::to_string(i), "");
  agent.PollOnce();
  EXPECT_EQ(chain_faults(), std::vector<std::string>{kChainDriverNotLoaded});
  clock.Advance(std::chrono::seconds(31));
  agent.PollOnce();
  EXPECT_TRUE(chain_faults().empty());
  EXPECT_EQ(agent.MakeHello().inventory().chain(2).state(), v1::CHAIN_LINK_STATE_OK);
}

TEST(AgentMapping, LevelsAndSources) {
  EXPECT_EQ(ToProtoLevel(Level::kSeparate), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(ToProtoLevel(Level::kNotHandle), v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_EQ(ToProtoSource(Source::kDisk), v1::FAULT_SOURCE_DISK);
  EXPECT_EQ(ToProtoSource(Source::kKernel), v1::FAULT_SOURCE_KERNEL);
}

}  // namespace
}  // namespace clusterd::noded

namespace clusterd::noded {
namespace {

// A GPU backend's side of the agent: its driver and CUDA versions fill the
// chain's links the files could not decide, and the kernel log's Xid lines
// reach it.
class VersionedBackend final : public AcceleratorBackend {
 public:
  Status Init() override { return Status::Ok(); }
  StatusOr<std::vector<DeviceInfo>> Devices() override { return std::vector<DeviceInfo>{}; }
  StatusOr<std::vector<DeviceStatus>> Poll() override { return std::vector<DeviceStatus>{}; }
  std::string name() const override { return "nvml"; }
  std::vector<std::pair<std::string, std::string>> ChainVersions() const override {
    return {{"driver", "550.54.15"}, {"cuda", "12.4"}};
  }
  void KernelLine(std::string_view message) override { lines.emplace_back(message); }
  std::vector<std::string> lines;
};

TEST(AgentGpu, BackendVersionsFillTheChainAndXidLinesReachTheBackend) {
  testing::TempDir dir;
  dir.Write("root/dev/null", "");
  dir.Write("kmsg", "");
  auto outbox = Outbox::Open(dir.Sub("state"));
  ASSERT_TRUE(outbox.ok());
  VersionedBackend backend;
  FakeClock clock;
  AgentOptions options;
  options.node_name = "gpu01";
  options.root = dir.Sub("root");
  options.kmsg_path = dir.Sub("kmsg");
  options.mounts_file = "/proc/mounts";
  Agent agent(options, outbox->get(), &backend, &clock);
  ASSERT_TRUE(agent.Init().ok());
  v1::Hello hello = agent.MakeHello();
  std::map<std::string, v1::ChainLink> links;
  for (const auto& l : hello.inventory().chain()) links[l.name()] = l;
  ASSERT_TRUE(links.count("driver") && links.count("cuda"));
  EXPECT_EQ(links["driver"].state(), v1::CHAIN_LINK_STATE_OK);
  EXPECT_EQ(links["driver"].version(), "550.54.15");
  EXPECT_EQ(links["driver"].evidence(), "nvml backend: 550.54.15");
  EXPECT_EQ(links["cuda"].version(), "12.4");
  EXPECT_EQ(links["device_files"].state(), v1::CHAIN_LINK_STATE_UNKNOWN) << "not an Ascend node: no davinci fault";
  agent.PollOnce();  // the kernel log is followed from its end
  // A kmsg record with an Xid, and one without.
  std::ofstream(dir.Sub("kmsg"), std::ios::app)
      << "3,100,5000,-;NVRM: Xid (PCI:0000:1b:00): 79, pid=1, GPU has fallen off the bus.\n"
      << "6,101,5001,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n";
  agent.PollOnce();
  EXPECT_EQ(backend.lines,
            std::vector<std::string>{"NVRM: Xid (PCI:0000:1b:00): 79, pid=1, GPU has fallen off the bus."});
}

}  // namespace
}  // namespace clusterd::noded
