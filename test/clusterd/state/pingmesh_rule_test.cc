// The pingmesh on the writer's schedule (state/pingmesh_rule.h) against a real
// ClusterState on a MemoryStore, run by hand on a FakeClock: results over a
// window raise the node, the link or the domain as faults after raise_after
// windows, clear them after clear_after healthy ones, survive a restart, and
// a NodeD cannot speak for another node's probes.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "clusterd/state/cluster_state.h"
#include "clusterd/state/pingmesh_rule.h"
#include "clusterd/state/validation.h"
#include "common/validation.h"
#include "clusterd/storage/memory_store.h"
#include "test/support/state/state_fixtures.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> Members(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("n" + std::to_string(i));
  std::sort(out.begin(), out.end());
  return out;
}

class PingmeshRuleTest : public ::testing::Test {
 protected:
  void Open() {
    state_.reset();
    rule_ = std::make_unique<PingmeshRule>(policy_, [this](const ClusterState&) { return domains_; });
    auto store = storage::MemoryStore::Open(disk_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    state_->Attach(rule_.get());
    ASSERT_TRUE(state_->Load().ok());
    // The agents (re)connect with a probe address, and the writer runs its
    // rules from its first turn: the first window starts.
    for (size_t i = 0; i < members_.size(); ++i) {
      rule_->AgentUp(members_[i], 1, "10.0.0." + std::to_string(i + 1), 11255);
    }
    Tick();
  }
  void Tick() {
    Commit([&](Mutation* m) { return rule_->Advance(*state_, WriterTick{clock_.Now(), m}); });
  }

  template <typename Fn>
  auto Commit(Fn&& fn) -> decltype(fn(static_cast<Mutation*>(nullptr))) {
    Mutation m;
    auto result = fn(&m);
    state_->FlushDirty(&m);
    EXPECT_TRUE(store_->Write(m.changes).ok());
    state_->set_durable_revision(state_->revision());
    return result;
  }

  void SetUp() override {
    policy_.window = 10s;
    policy_.raise_after = 2;
    policy_.clear_after = 2;
    ASSERT_TRUE(ValidatePingmeshPolicy(policy_).ok());
    Open();
    for (const auto& n : members_) {
      ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyHello(testing::MakeHello(n, 1, 0), 1, m); }).ok());
    }
  }

  // One window: every member reports a probe of every other member of the
  // domain, `lost(source, target)` of 10 lost; then the window ends.
  template <typename LossFn>
  void Window(LossFn lost) {
    for (const auto& s : members_) {
      std::vector<pingmesh::PairStats> results;
      for (const auto& t : members_) {
        if (s != t) results.push_back({s, t, 10, lost(s, t)});
      }
      rule_->Record(s, results);
    }
    clock_.Advance(policy_.window);
    Tick();
  }
  void Healthy() {
    Window([](const std::string&, const std::string&) { return 0u; });
  }

  // Active pingmesh faults: "<node> <code> <external id>".
  std::vector<std::string> Active() {
    std::vector<std::string> out;
    for (const auto& [key, f] : state_->fault_table().all()) {
      if (f.reporter() == kPingmeshReporter && f.state() == v1::FAULT_STATE_ACTIVE) {
        out.push_back(f.node() + " " + f.code() + " " + f.external_id());
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  PingmeshPolicy policy_;
  std::vector<std::string> members_ = Members(8);
  std::vector<pingmesh::ProbeDomain> domains_ = {{"rack=1", Members(8)}};
  std::shared_ptr<storage::MemoryDisk> disk_ = std::make_shared<storage::MemoryDisk>();
  Catalog catalog_ = Catalog::Default();
  FakeClock clock_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<PingmeshRule> rule_;
  std::unique_ptr<ClusterState> state_;
};

TEST_F(PingmeshRuleTest, ANodeNothingReachesIsRaisedAfterTwoWindowsAndSurvivesARestart) {
  auto blocked = [](const std::string&, const std::string& t) { return t == "n3" ? 10u : 0u; };
  Window(blocked);
  EXPECT_TRUE(Active().empty()) << "one window is not enough";
  Window(blocked);
  EXPECT_EQ(Active(), std::vector<std::string>{"n3 NODE_PINGMESH_UNREACHABLE pingmesh/node"});

  Open();  // a restart: the finding comes back from the stored fault
  ASSERT_EQ(rule_->Active().size(), 1u);
  EXPECT_EQ(rule_->Active()[0].Key(), "node/n3");
  Window(blocked);
  EXPECT_EQ(Active(), std::vector<std::string>{"n3 NODE_PINGMESH_UNREACHABLE pingmesh/node"});
  Healthy();
  EXPECT_EQ(Active().size(), 1u) << "one healthy window is not enough";
  Healthy();
  EXPECT_TRUE(Active().empty());
}

TEST_F(PingmeshRuleTest, OneBadPairIsALinkOnBothEnds) {
  auto cable = [](const std::string& s, const std::string& t) {
    return (s == "n1" && t == "n5") || (s == "n5" && t == "n1") ? 10u : 0u;
  };
  Window(cable);
  Window(cable);
  EXPECT_EQ(Active(), (std::vector<std::string>{"n1 LINK_PINGMESH_LOSS pingmesh/link/n5",
                                                "n5 LINK_PINGMESH_LOSS pingmesh/link/n1"}));
  Open();
  Healthy();
  Healthy();
  EXPECT_TRUE(Active().empty()) << "both ends cleared after the restart too";
}

TEST_F(PingmeshRuleTest, ListLinksShowsTheLastWindowsMatrixFilteredAndPaged) {
  {
    auto before = rule_->ListLinks({});
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    EXPECT_EQ(before->links_size(), 0) << "no judged window yet";
    EXPECT_FALSE(before->has_window_end());
    v1::ListLinksRequest bad;
    bad.set_domain("rack");
    EXPECT_EQ(rule_->ListLinks(bad).status().code(), StatusCode::kInvalidArgument) << "refused before any window too";
  }
  auto cable = [](const std::string& s, const std::string& t) {
    return (s == "n1" && t == "n5") || (s == "n5" && t == "n1") ? 10u : 0u;
  };
  Window(cable);
  Window(cable);
  v1::ListLinksRequest req;
  auto all = rule_->ListLinks(req);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->total_size(), 56);
  EXPECT_EQ(all->links_size(), 56);
  EXPECT_TRUE(all->has_window_end());
  ASSERT_EQ(all->findings_size(), 1);
  EXPECT_EQ(all->findings(0).kind(), "link");
  EXPECT_EQ(all->findings(0).subject(), "n1");
  EXPECT_EQ(all->findings(0).peer(), "n5");
  EXPECT_TRUE(all->findings(0).active());

  req.set_lossy_only(true);
  auto lossy = rule_->ListLinks(req);
  ASSERT_TRUE(lossy.ok());
  ASSERT_EQ(lossy->links_size(), 2);
  EXPECT_EQ(lossy->links(0).source(), "n1");
  EXPECT_EQ(lossy->links(0).target(), "n5");
  EXPECT_EQ(lossy->links(0).lost(), 10u);
  EXPECT_DOUBLE_EQ(lossy->links(0).loss(), 1.0);
  EXPECT_EQ(lossy->links(0).finding(), "link");
  EXPECT_FALSE(lossy->links(0).has_rtt_mean()) << "no reply, no round trip";

  req.set_lossy_only(false);
  req.set_node("n3");
  auto node = rule_->ListLinks(req);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->total_size(), 14);
  for (const auto& l : node->links()) EXPECT_TRUE(l.source() == "n3" || l.target() == "n3");

  // Pages of 10 walk all 56 directions once, in order.
  req.clear_node();
  req.set_domain("rack=1");
  req.set_page_size(10);
  std::vector<std::string> seen;
  for (int pages = 0; pages < 20; ++pages) {
    auto page = rule_->ListLinks(req);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const auto& l : page->links()) seen.push_back(l.source() + ">" + l.target());
    if (page->next_page_token().empty()) break;
    req.set_page_token(page->next_page_token());
  }
  EXPECT_EQ(seen.size(), 56u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 56u);

  // Bad filters are refused.
  v1::ListLinksRequest bad;
  bad.set_domain("rack=2");
  EXPECT_EQ(rule_->ListLinks(bad).status().code(), StatusCode::kNotFound);
  bad.set_domain("rack");
  EXPECT_EQ(rule_->ListLinks(bad).status().code(), StatusCode::kInvalidArgument);
  bad.clear_domain();
  bad.set_page_token("zz");
  EXPECT_EQ(rule_->ListLinks(bad).status().code(), StatusCode::kInvalidArgument);

  // Through the state: the attached rule answers; a state without one says so.
  EXPECT_TRUE(ListLinksWith(*state_, {}).ok());
  auto disk = std::make_shared<storage::MemoryDisk>();
  auto store = storage::MemoryStore::Open(disk);
  ASSERT_TRUE(store.ok());
  ClusterState bare(store->get(), &catalog_, &clock_);
  ASSERT_TRUE(bare.Load().ok());
  EXPECT_EQ(ListLinksWith(bare, {}).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(PingmeshRuleTest, AWholeDomainIsRaisedOnEveryMember) {
  auto down = [](const std::string&, const std::string&) { return 10u; };
  Window(down);
  Window(down);
  const auto active = Active();
  ASSERT_EQ(active.size(), members_.size());
  for (const auto& a : active) EXPECT_NE(a.find("DOMAIN_PINGMESH_LOSS pingmesh/domain/rack=1"), std::string::npos) << a;
  Healthy();
  Healthy();
  EXPECT_TRUE(Active().empty());
}

TEST_F(PingmeshRuleTest, NoDataIsNotHealthAndANodeSpeaksOnlyForItsOwnProbes) {
  auto blocked = [](const std::string&, const std::string& t) { return t == "n3" ? 10u : 0u; };
  Window(blocked);
  Window(blocked);
  ASSERT_EQ(Active().size(), 1u);
  // Windows without any result judge nothing: the finding stays.
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(policy_.window);
    Tick();
  }
  EXPECT_EQ(Active().size(), 1u);
  // n0 claims that n1 and n2 lost everything to n4: ignored (not its probes).
  for (int i = 0; i < 3; ++i) {
    rule_->Record("n0", {{"n1", "n4", 10, 10}, {"n2", "n4", 10, 10}, {"n0", "n0", 10, 10}});
    Healthy();
  }
  EXPECT_TRUE(Active().empty());
}

// Where peers probe an agent: an IP literal and a port, or a port alone; a
// hello naming anything else is refused before anything changes.
TEST(PingmeshProbeAddress, OnlyLiteralsAndPortsAreTaken) {
  for (const char* ok : {"10.0.0.7:11255", ":11255", "[fd00::7]:1", "127.0.0.1:65535"}) {
    EXPECT_TRUE(IsProbeAddressText(ok)) << ok;
  }
  for (const char* bad : {"", "11255", "node-7:11255", "10.0.0.7:0", "10.0.0.7:65536", "10.0.0.7:", "fd00::7:1",
                          "[fd00::7]", "[10.0.0.7]:1", "10.0.0.7:12a", "10.0.0.300:1", ":-1"}) {
    EXPECT_FALSE(IsProbeAddressText(bad)) << bad;
  }
  v1::Hello hello = testing::MakeHello("n1", 1, 0);
  hello.set_probe_address("node-7.example:11255");
  const Status st = ValidateHello(hello);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("hello.probe_address"), std::string::npos) << st.message();
  hello.set_probe_address(":11255");
  EXPECT_TRUE(ValidateHello(hello).ok());
}

// Without an agent to probe and no result waiting, the rule asks the writer
// for nothing: no wake-up every interval in a cluster without the pingmesh.
TEST_F(PingmeshRuleTest, NoAgentNoWakeUp) {
  for (const auto& n : members_) rule_->AgentDown(n, 1);
  const TimePoint next = Commit([&](Mutation* m) { return rule_->Advance(*state_, WriterTick{clock_.Now(), m}); });
  EXPECT_EQ(next, TimePoint::max());
  rule_->AgentUp("n1", 2, "10.0.0.1", 11255);
  EXPECT_EQ(Commit([&](Mutation* m) {
              return rule_->Advance(*state_, WriterTick{clock_.Now(), m});
            }),
            clock_.Now() + policy_.interval);
}

TEST(PingmeshPolicy, OutOfBoundsIsRefused) {
  PingmeshPolicy p;
  p.window = 100ms;
  EXPECT_FALSE(ValidatePingmeshPolicy(p).ok());
  p = PingmeshPolicy{};
  p.raise_after = 0;
  EXPECT_FALSE(ValidatePingmeshPolicy(p).ok());
  p = PingmeshPolicy{};
  p.attempts = 5;
  p.timeout = std::chrono::seconds(2);  // 5 x 2 s is not shorter than the 10 s interval
  EXPECT_FALSE(ValidatePingmeshPolicy(p).ok());
  p = PingmeshPolicy{};
  p.limits.peers_per_node = 0;
  EXPECT_FALSE(ValidatePingmeshPolicy(p).ok());
  p = PingmeshPolicy{};
  p.rules.bad_loss = 2;
  EXPECT_FALSE(ValidatePingmeshPolicy(p).ok());
  EXPECT_TRUE(ValidatePingmeshPolicy(PingmeshPolicy{}).ok());
}

// The device plane: each member has NPU ports 0..3 ("n<i>#<d>"), port d of
// a node probing port d of its peers; the same majority rules and
// hysteresis name a bad port, a bad node (all its ports), or a link between
// two ports, as faults on the ports' devices.
class PingmeshDeviceTest : public PingmeshRuleTest {
 protected:
  static constexpr uint32_t kPorts = 4;
  template <typename LossFn>
  void DeviceWindow(LossFn lost) {
    for (const auto& s : members_) {
      std::vector<pingmesh::PairStats> results;
      for (const auto& t : members_) {
        if (s == t) continue;
        for (uint32_t d = 0; d < kPorts; ++d) {
          const std::string a = PingmeshPortName(s, d), b = PingmeshPortName(t, d);
          results.push_back({a, b, 3, lost(a, b)});
        }
      }
      rule_->RecordDevices(s, results, false);
    }
    clock_.Advance(policy_.window);
    Tick();
  }
  // Active pingmesh faults with their device: "<node>[#<device>] <code> <external id>".
  std::vector<std::string> ActiveWithDevices() {
    std::vector<std::string> out;
    for (const auto& [key, f] : state_->fault_table().all()) {
      if (f.reporter() == kPingmeshReporter && f.state() == v1::FAULT_STATE_ACTIVE) {
        out.push_back(f.node() + (f.has_device_id() ? "#" + std::to_string(f.device_id()) : "") + " " + f.code() + " " +
                      f.external_id());
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

TEST_F(PingmeshDeviceTest, ABadPortIsRaisedOnItsDeviceAndSurvivesARestart) {
  auto port = [](const std::string&, const std::string& t) { return t == "n2#1" ? 3u : 0u; };
  DeviceWindow(port);
  EXPECT_TRUE(ActiveWithDevices().empty()) << "one window is not enough";
  DeviceWindow(port);
  EXPECT_EQ(ActiveWithDevices(), std::vector<std::string>{"n2#1 NPU_PINGMESH_UNREACHABLE pingmesh/npu/1"});
  Open();  // a restart: the device finding comes back from its stored fault
  ASSERT_EQ(rule_->ActiveDevice().size(), 1u);
  EXPECT_EQ(rule_->ActiveDevice()[0].Key(), "node/n2#1");
  EXPECT_TRUE(rule_->Active().empty()) << "the TCP plane has nothing";
  auto healthy = [](const std::string&, const std::string&) { return 0u; };
  DeviceWindow(healthy);
  EXPECT_EQ(ActiveWithDevices().size(), 1u);
  DeviceWindow(healthy);
  EXPECT_TRUE(ActiveWithDevices().empty());
}

TEST_F(PingmeshDeviceTest, AllPortsOfANodeAreTheNodeNotFourPorts) {
  auto node = [](const std::string&, const std::string& t) { return PingmeshPortNode(t) == "n5" ? 3u : 0u; };
  DeviceWindow(node);
  DeviceWindow(node);
  EXPECT_EQ(ActiveWithDevices(), std::vector<std::string>{"n5 NODE_PINGMESH_NPU_UNREACHABLE pingmesh/npu-node"});
  Open();
  ASSERT_EQ(rule_->ActiveDevice().size(), 1u);
  EXPECT_EQ(rule_->ActiveDevice()[0].Key(), "domain/n5#");
}

TEST_F(PingmeshDeviceTest, OneBadPortPairIsALinkOnBothPortsAndListedOnItsPlane) {
  auto cable = [](const std::string& s, const std::string& t) {
    return (s == "n1#2" && t == "n6#2") || (s == "n6#2" && t == "n1#2") ? 3u : 0u;
  };
  DeviceWindow(cable);
  DeviceWindow(cable);
  EXPECT_EQ(ActiveWithDevices(), (std::vector<std::string>{"n1#2 NPU_LINK_PINGMESH_LOSS pingmesh/npu-link/2/n6#2",
                                                           "n6#2 NPU_LINK_PINGMESH_LOSS pingmesh/npu-link/2/n1#2"}));
  v1::ListLinksRequest req;
  req.set_lossy_only(true);
  auto lossy = rule_->ListLinks(req);
  ASSERT_TRUE(lossy.ok()) << lossy.status().ToString();
  ASSERT_EQ(lossy->links_size(), 2);
  EXPECT_EQ(lossy->links(0).source(), "n1#2");
  EXPECT_EQ(lossy->links(0).target(), "n6#2");
  EXPECT_EQ(lossy->links(0).plane(), "device");
  EXPECT_EQ(lossy->links(0).finding(), "link");
  ASSERT_EQ(lossy->findings_size(), 1);
  EXPECT_EQ(lossy->findings(0).plane(), "device");
  EXPECT_EQ(lossy->findings(0).subject(), "n1#2");
  EXPECT_EQ(lossy->findings(0).peer(), "n6#2");
  req.set_lossy_only(false);
  req.set_node("n6");  // a node's filter takes its ports too
  auto node = rule_->ListLinks(req);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->total_size(), 2 * 7 * static_cast<int>(kPorts));

  Open();  // both ends come back as one link finding
  ASSERT_EQ(rule_->ActiveDevice().size(), 1u);
  EXPECT_EQ(rule_->ActiveDevice()[0].Key(), "link/n1#2/n6#2");
}

TEST_F(PingmeshDeviceTest, PortsOfAnotherNodeAndUnprobedReportsChangeNothing) {
  // n0 speaks for n1's ports, and for a node's name where a port belongs: ignored.
  for (int i = 0; i < 3; ++i) {
    rule_->RecordDevices("n0", {{"n1#0", "n4#0", 3, 3}, {"n0", "n4#0", 3, 3}, {"n0#0", "n0#1", 3, 3}}, true);
    clock_.Advance(policy_.window);
    Tick();
  }
  EXPECT_TRUE(ActiveWithDevices().empty());
  EXPECT_EQ(rule_->device_results(), 0u);
  EXPECT_EQ(rule_->device_unprobed(), 3u);
}

// The plan carries each peer's ports that the prober has a port of the same
// id for; a direction that lost a round's probes is probed again in the next
// rounds, both ways and with more peers at each end, within the bound.
TEST_F(PingmeshRuleTest, PlansCarryPeerPortsAndSuspectsGetExtraProbes) {
  // 16 members, fan-out 1: a pair is probed once in 15 rounds.
  members_ = Members(16);
  domains_ = {{"rack=1", Members(16)}};
  policy_.limits.peers_per_node = 1;
  policy_.suspect_probes = 2;
  ASSERT_TRUE(ValidatePingmeshPolicy(policy_).ok());
  Open();
  AgentOutbox outbox;
  rule_->set_outbox(&outbox);
  std::map<std::string, v1::ProbePlan> plans;
  for (size_t i = 0; i < members_.size(); ++i) {
    // Ports 0 and 1 everywhere, port 2 only on n1.
    std::vector<std::pair<uint32_t, std::string>> ports = {{0, "10.1." + std::to_string(i) + ".0"},
                                                           {1, "10.1." + std::to_string(i) + ".1"}};
    if (members_[i] == "n1") ports.emplace_back(2, "10.1.1.2");
    rule_->AgentUp(members_[i], 1, "10.0.0." + std::to_string(i + 1), 11255, ports);
    outbox.Attach(members_[i], 1,
                  [&plans, node = members_[i]](const v1::ConnectResponse& r) { plans[node] = r.probe_plan(); });
  }
  auto round = [&] {
    plans.clear();
    std::vector<WriterDone> after;
    clock_.Advance(policy_.interval);
    Commit([&](Mutation* m) {
      WriterTick tick{clock_.Now(), m, &after};
      return rule_->Advance(*state_, tick);
    });
    for (auto& fn : after) fn();
  };
  round();
  ASSERT_FALSE(plans.empty());
  for (const auto& [node, plan] : plans) {
    ASSERT_EQ(plan.targets_size(), 1) << node << ": fan-out 1, no suspect yet";
    const auto& t = plan.targets(0);
    ASSERT_EQ(t.devices_size(), 2) << node << " -> " << t.node() << ": ports 0 and 1 (2 is n1's alone)";
    EXPECT_EQ(t.devices(0).device_id(), 0u);
    EXPECT_EQ(t.devices(1).device_id(), 1u);
  }
  EXPECT_EQ(rule_->suspects(), 0u);
  // n3 -> n9 loses a round's probes: a suspect from the next round on.
  rule_->Record("n3", {{"n3", "n9", 3, 3}});
  EXPECT_EQ(rule_->suspects(), 1u);
  round();
  auto probes = [&](const std::string& from, const std::string& to) {
    for (const auto& t : plans[from].targets()) {
      if (t.node() == to) return true;
    }
    return false;
  };
  EXPECT_TRUE(probes("n3", "n9"));
  EXPECT_TRUE(probes("n9", "n3"));
  int extra_sources = 0;
  for (const auto& m : members_) {
    if (m != "n3" && m != "n9" && probes(m, "n9")) ++extra_sources;
  }
  EXPECT_GE(extra_sources, 2) << "more peers probe the suspect's target";
  EXPECT_GE(plans["n3"].targets_size(), 3) << "the suspect's source probes more peers";
  EXPECT_GT(rule_->suspect_probes(), 0u);
  // The suspect expires once no round is bad for the rounds raise_after windows take.
  for (int i = 0; i < 20; ++i) round();
  EXPECT_EQ(rule_->suspects(), 0u);
  EXPECT_EQ(rule_->suspect_probes(), 0u);

  // Bounded: past max_suspects a new suspect is counted, not kept.
  policy_.max_suspects = 1;
  rule_ = nullptr;
  Open();
  rule_->Record("n3", {{"n3", "n9", 3, 3}, {"n3", "n8", 3, 3}});
  EXPECT_EQ(rule_->suspects(), 1u);
  EXPECT_EQ(rule_->suspects_dropped(), 1u);
}

TEST(PingmeshDeviceHello, PortsAreBoundedUniqueAndIpv4) {
  v1::Hello hello = testing::MakeHello("n1", 1, 0);
  auto* d = hello.add_device_addresses();
  d->set_device_id(0);
  d->set_address("29.1.110.1");
  EXPECT_TRUE(ValidateHello(hello).ok());
  auto* twice = hello.add_device_addresses();
  twice->set_device_id(0);
  twice->set_address("29.1.110.2");
  EXPECT_EQ(ValidateHello(hello).code(), StatusCode::kInvalidArgument);
  twice->set_device_id(1);
  twice->set_address("fd00::1");
  EXPECT_EQ(ValidateHello(hello).code(), StatusCode::kInvalidArgument);
  twice->set_address("host.example");
  EXPECT_EQ(ValidateHello(hello).code(), StatusCode::kInvalidArgument);
  hello.clear_device_addresses();
  for (uint32_t i = 0; i < 65; ++i) {
    auto* p = hello.add_device_addresses();
    p->set_device_id(i);
    p->set_address("10.0.0.1");
  }
  EXPECT_EQ(ValidateHello(hello).code(), StatusCode::kInvalidArgument) << "at most 64 ports";
}

}  // namespace
}  // namespace clusterd
