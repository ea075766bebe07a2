#include "clusterd/engine/watch_hub.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/state/chain_drift.h"
#include "clusterd/state/rules.h"
#include "common/levels.h"
#include "clusterd/state/validation.h"

#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "clusterd/storage/key_codec.h"
#include "clusterd/storage/rocksdb_store.h"
#include "common/time_proto.h"
#include "test/support/state/state_fixtures.h"
#include "test/support/temp_dir.h"

namespace clusterd {
namespace {

using testing::MakeHello;
using testing::MakeTransition;

using namespace std::chrono_literals;

class ClusterStateTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    state_.reset();
    store_.reset();
    auto store = storage::RocksDbStore::Open(dir_.path(), storage::StoreOptions{.sync = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    // The timed policies at their defaults (a restart starts them afresh;
    // the separation policy rebuilds its counts from the records).
    separation_ = std::make_unique<SeparationRule>();
    drift_ = std::make_unique<ChainDriftRule>();
    offenders_ = std::make_unique<RepeatOffenderRule>(0, std::chrono::hours(24));
    state_->Attach(separation_.get());
    ASSERT_TRUE(state_->Load().ok());
  }

  // Applies fn as one commit, like the Engine does.
  template <typename Fn>
  auto Commit(Fn&& fn) {
    Mutation m;
    auto result = fn(&m);
    state_->FlushDirty(&m);
    EXPECT_TRUE(store_->Write(m.changes).ok());
    state_->set_durable_revision(state_->revision());
    events_.insert(events_.end(), m.events.begin(), m.events.end());
    return result;
  }

  // One run of a rule at the clock's time, as the writer runs it.
  TimePoint Run(WriterRule& rule) {
    return Commit([&](Mutation* m) { return rule.Advance(*state_, WriterTick{clock_.Now(), m}); });
  }
  void SetRepeatOffenderPolicy(uint32_t max, std::chrono::nanoseconds window) {
    offenders_ = std::make_unique<RepeatOffenderRule>(max, window);
    state_->set_recoveries_caused_window(window);
  }

  v1::Welcome Hello(const v1::Hello& h, uint64_t session = 1) {
    auto w = Commit([&](Mutation* m) { return state_->ApplyHello(h, session, m); });
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? *w : v1::Welcome();
  }

  StatusOr<TransitionResult> Transition(const std::string& node, const v1::FaultTransition& t, uint64_t session = 1) {
    return Commit([&](Mutation* m) { return state_->ApplyTransition(node, session, t, m); });
  }

  v1::GetNodeResponse Node(const std::string& name) {
    v1::GetNodeRequest req;
    req.set_name(name);
    auto r = state_->GetNode(req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : v1::GetNodeResponse();
  }

  testing::TempDir dir_;
  Catalog catalog_ = Catalog::Default();
  FakeClock clock_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<SeparationRule> separation_;
  std::unique_ptr<ChainDriftRule> drift_;
  std::unique_ptr<RepeatOffenderRule> offenders_;
  std::unique_ptr<ClusterState> state_;
  std::vector<v1::Event> events_;
};

TEST_F(ClusterStateTest, HelloRegistersNodeAndDevices) {
  v1::Welcome w = Hello(MakeHello("worker01", 1));
  EXPECT_EQ(w.applied_seq(), 0u);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].type(), v1::EVENT_TYPE_NODE_REGISTERED);
  EXPECT_EQ(events_[0].revision(), 1u);
  auto node = Node("worker01");
  EXPECT_EQ(node.node().health(), v1::HEALTH_HEALTHY);
  EXPECT_EQ(node.devices_size(), 8);
  EXPECT_TRUE(node.node().connected());
  EXPECT_EQ(node.node().labels().at("rack"), "r1");
  // The same hello again changes nothing.
  Hello(MakeHello("worker01", 1), 2);
  EXPECT_EQ(events_.size(), 1u);
  EXPECT_EQ(state_->revision(), 1u);
}

TEST_F(ClusterStateTest, TheSoftwareChainIsKeptAsTheLatestHelloSaysIt) {
  v1::Hello h = MakeHello("worker01", 1);
  auto* link = h.mutable_inventory()->add_chain();
  link->set_name("device_files");
  link->set_state(v1::CHAIN_LINK_STATE_BROKEN);
  link->set_evidence("no /dev/davinci_manager (8 /dev/davinci<N>): the driver is not loaded");
  link->set_code("NODE_CHAIN_DRIVER_NOT_LOADED");
  Hello(h);
  auto node = Node("worker01");
  ASSERT_EQ(node.node().inventory().chain_size(), 1);
  EXPECT_EQ(node.node().inventory().chain(0).state(), v1::CHAIN_LINK_STATE_BROKEN);
  // The driver loaded; the agent's next hello (a reconnect) says so.
  link->set_state(v1::CHAIN_LINK_STATE_OK);
  link->set_evidence("/dev/davinci_manager and 8 /dev/davinci<N>");
  link->clear_code();
  Hello(h, 2);
  node = Node("worker01");
  ASSERT_EQ(node.node().inventory().chain_size(), 1);
  EXPECT_EQ(node.node().inventory().chain(0).state(), v1::CHAIN_LINK_STATE_OK);
}

// A hello whose chain has the driver at `version`, on chips of `model`.
v1::Hello HelloWithDriver(const std::string& node, const std::string& version, const std::string& model) {
  v1::Hello h = MakeHello(node, 1, 2);
  for (auto& d : *h.mutable_inventory()->mutable_devices()) d.set_model(model);
  auto* l = h.mutable_inventory()->add_chain();
  l->set_name("driver");
  l->set_state(v1::CHAIN_LINK_STATE_OK);
  l->set_version(version);
  return h;
}

// The active CHAIN_VERSION_DRIFT faults on `nodes`: "<node or external id>: <message>".
std::vector<std::string> ActiveDrift(const ClusterState& state, const std::vector<std::string>& nodes, bool ids) {
  std::vector<std::string> out;
  for (const auto& node : nodes) {
    v1::ListFaultsRequest req;
    req.set_node(node);
    auto r = state.ListFaults(req);
    EXPECT_TRUE(r.ok());
    for (const auto& f : r->faults()) {
      if (f.code() == kChainDriftCode && f.state() == v1::FAULT_STATE_ACTIVE) {
        // A tie inside a job is the job's finding (NOT_HANDLE: the node
        // stays HEALTHY); every other drift marks the node.
        const bool tie = f.message().find("no majority") != std::string::npos;
        EXPECT_EQ(f.level(), tie ? v1::FAULT_LEVEL_NOT_HANDLE : v1::FAULT_LEVEL_SUB_HEALTH) << f.message();
        out.push_back((ids ? f.external_id() : f.node()) + ": " + f.message());
      }
    }
  }
  return out;
}

// A connected agent's chain that changed (ChainUpdate) replaces the stored
// one without a reconnect, and the drift is compared again; the same chain
// again changes nothing; a stale session or bad links are refused.
TEST_F(ClusterStateTest, AChainUpdateReplacesTheChainWhileConnected) {
  Hello(HelloWithDriver("n1", "24.1.rc3", "910B3"));
  Hello(HelloWithDriver("n2", "24.1.rc3", "910B3"));
  Hello(HelloWithDriver("n3", "24.1.rc3", "910B3"));
  auto advance = [&] {
    clock_.Advance(std::chrono::seconds(2));
    Run(*drift_);
  };
  advance();
  EXPECT_TRUE(ActiveDrift(*state_, {"n3"}, false).empty());
  v1::ChainUpdate update;
  *update.mutable_links() = HelloWithDriver("n3", "24.1.rc2", "910B3").inventory().chain();
  const uint64_t before = state_->revision();
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyChainUpdate("n3", 1, update, m); }).ok());
  EXPECT_GT(state_->revision(), before);  // stored: the node record changed
  EXPECT_EQ(Node("n3").node().inventory().chain(0).version(), "24.1.rc2");
  advance();
  EXPECT_EQ(ActiveDrift(*state_, {"n3"}, false),
            std::vector<std::string>{"n3: driver 24.1.rc2 where 2 of 3 nodes of pool 910B3 run 24.1.rc3"});
  const uint64_t after = state_->revision();
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyChainUpdate("n3", 1, update, m); }).ok());
  EXPECT_EQ(state_->revision(), after) << "the same chain again is no change";
  EXPECT_FALSE(Commit([&](Mutation* m) { return state_->ApplyChainUpdate("n3", 99, update, m); }).ok());
  update.mutable_links(0)->set_evidence("two\nlines");
  EXPECT_EQ(Commit([&](Mutation* m) { return state_->ApplyChainUpdate("n3", 1, update, m); }).code(),
            StatusCode::kInvalidArgument);
}

// Which devices the kubelet gave the node's pods: in the hello's inventory,
// then replaced by a PodDevicesUpdate while connected (stored once per
// change); a stale session or an update that does not validate is refused.
TEST_F(ClusterStateTest, PodDevicesComeWithTheHelloAndUpdatesReplaceThem) {
  v1::Hello h = MakeHello("n1", 1, 8);
  auto* pd = h.mutable_inventory()->add_pod_devices();
  pd->set_namespace_("train");
  pd->set_name("llm-0");
  pd->add_device_ids(0);
  pd->add_device_ids(1);
  Hello(h);
  ASSERT_EQ(Node("n1").node().inventory().pod_devices_size(), 1);
  v1::PodDevicesUpdate update;
  auto* a = update.add_pods();
  a->set_namespace_("infer");
  a->set_name("svc-0");
  a->add_device_ids(5);
  *update.add_pods() = *pd;
  const uint64_t before = state_->revision();
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyPodDevices("n1", 1, update, m); }).ok());
  EXPECT_GT(state_->revision(), before);
  auto stored = Node("n1").node().inventory().pod_devices();
  ASSERT_EQ(stored.size(), 2);
  EXPECT_EQ(stored[0].name(), "svc-0");
  EXPECT_EQ(stored[1].device_ids_size(), 2);
  const uint64_t after = state_->revision();
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyPodDevices("n1", 1, update, m); }).ok());
  EXPECT_EQ(state_->revision(), after) << "the same pods again are no change";
  EXPECT_FALSE(Commit([&](Mutation* m) { return state_->ApplyPodDevices("n1", 7, update, m); }).ok());
  // Refused, and nothing changes: unsorted pods, a pod twice, unsorted or
  // repeated ids, an id above 65535, a bad name, too many pods.
  auto refused = [&](const std::function<void(v1::PodDevicesUpdate*)>& spoil) {
    v1::PodDevicesUpdate bad = update;
    spoil(&bad);
    Status st = Commit([&](Mutation* m) { return state_->ApplyPodDevices("n1", 1, bad, m); });
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    return st.message();
  };
  EXPECT_NE(refused([](auto* u) { u->mutable_pods()->SwapElements(0, 1); }).find("sorted"), std::string::npos);
  refused([](auto* u) { *u->add_pods() = u->pods(1); });
  refused([](auto* u) { u->mutable_pods(1)->add_device_ids(0); });
  refused([](auto* u) { u->mutable_pods(1)->add_device_ids(1); });
  refused([](auto* u) { u->mutable_pods(1)->add_device_ids(70000); });
  refused([](auto* u) { u->mutable_pods(0)->set_name("bad name"); });
  refused([](auto* u) { u->mutable_pods(0)->set_namespace_(std::string(64, 'n')); });
  refused([](auto* u) {
    u->clear_pods();
    for (int i = 0; i < 513; ++i) {
      auto* p = u->add_pods();
      p->set_namespace_("ns");
      p->set_name("p" + std::to_string(1000 + i));
    }
  });
  EXPECT_EQ(state_->revision(), after);
  EXPECT_EQ(Node("n1").node().inventory().pod_devices_size(), 2);
  // A hello with bad pod devices is refused as a whole.
  pd->add_device_ids(1);
  EXPECT_FALSE(Commit([&](Mutation* m) { return state_->ApplyHello(h, 2, m); }).ok());
}

TEST_F(ClusterStateTest, ChainDriftIsRaisedOnTheOddNodeAndClearedWhenItCatchesUp) {
  auto with_driver = [](const std::string& node, const std::string& version, const std::string& model = "910B3") {
    return HelloWithDriver(node, version, model);
  };
  auto drift = [&] { return ActiveDrift(*state_, {"n1", "n2", "n3", "n4", "m1"}, /*ids=*/false); };
  auto advance = [&] {
    clock_.Advance(std::chrono::seconds(2));
    Run(*drift_);
  };
  Hello(with_driver("n1", "24.1.rc3"));
  Hello(with_driver("n2", "24.1.rc3"));
  Hello(with_driver("n3", "24.1.rc3"));
  Hello(with_driver("n4", "24.1.rc2"));
  Hello(with_driver("m1", "23.0.0", "310P3"));  // alone in its pool: not judged
  advance();
  EXPECT_EQ(drift(), std::vector<std::string>{"n4: driver 24.1.rc2 where 3 of 4 nodes of pool 910B3 run 24.1.rc3"});
  advance();  // nothing changed: nothing raised twice
  EXPECT_EQ(drift().size(), 1u);
  // n4 is upgraded: its next hello clears the drift at the next pass.
  Hello(with_driver("n4", "24.1.rc3"), 2);
  advance();
  EXPECT_TRUE(drift().empty());
}

// The active faults of reporter clusterd-chain on `node`: "<external id>
// <code> <level>: <message>".
std::vector<std::string> ChainFaults(const ClusterState& state, const std::string& node) {
  std::vector<std::string> out;
  v1::ListFaultsRequest req;
  req.set_node(node);
  auto r = state.ListFaults(req);
  EXPECT_TRUE(r.ok());
  for (const auto& f : r->faults()) {
    if (f.reporter() == kChainDriftReporter && f.state() == v1::FAULT_STATE_ACTIVE) {
      out.push_back(f.external_id() + " " + f.code() + " " + ShortLevelName(f.level()) + ": " + f.message());
    }
  }
  return out;
}

// A driver and firmware the catalog's pair table says do not go together:
// CHAIN_FIRMWARE_MISMATCH (PRE_SEPARATE) on the node, cleared once the
// firmware fits; a driver the table does not know is not judged. The
// firmware's version drifts like the driver's.
TEST_F(ClusterStateTest, FirmwareThatDoesNotGoWithTheDriverIsAFault) {
  ASSERT_TRUE(
      catalog_.MergeJson(R"({"firmware_driver_pairs": [{"driver": "24.1.rc3", "firmware": ["7.5.0.3.220"]}]})", "pairs")
          .ok());
  auto hello = [](const std::string& node, const std::string& driver, const std::string& firmware) {
    v1::Hello h = HelloWithDriver(node, driver, "910B3");
    auto* l = h.mutable_inventory()->add_chain();
    l->set_name("firmware");
    l->set_state(v1::CHAIN_LINK_STATE_OK);
    l->set_version(firmware);
    return h;
  };
  auto advance = [&] {
    clock_.Advance(std::chrono::seconds(2));
    Run(*drift_);
  };
  Hello(hello("n1", "24.1.rc3", "7.5.0.3.220"));
  Hello(hello("n2", "24.1.rc3", "7.5.0.3.220"));
  Hello(hello("n3", "24.1.rc3", "7.3.0.1.231"));
  Hello(hello("n4", "25.0.rc1", "7.3.0.1.231"));  // a driver the table does not know
  advance();
  EXPECT_TRUE(ChainFaults(*state_, "n1").empty());
  EXPECT_EQ(
      ChainFaults(*state_, "n3"),
      (std::vector<std::string>{
          "n3/firmware-pair CHAIN_FIRMWARE_MISMATCH PRE_SEPARATE: firmware 7.3.0.1.231 is not a known pair of driver "
          "24.1.rc3 (the catalog pairs it with 7.5.0.3.220)"}))
      << "no firmware drift: 2 of 4 is no majority";
  EXPECT_EQ(ChainFaults(*state_, "n4"),
            (std::vector<std::string>{"n4/driver CHAIN_VERSION_DRIFT SUB_HEALTH: driver 25.0.rc1 where 3 of 4 nodes "
                                      "of pool 910B3 run 24.1.rc3"}));
  // One more node on the pool's firmware: now n3 and n4 drift on it too.
  Hello(hello("n5", "24.1.rc3", "7.5.0.3.220"));
  advance();
  EXPECT_EQ(ChainFaults(*state_, "n4").size(), 2u);
  EXPECT_EQ(ChainFaults(*state_, "n3").size(), 2u) << "the mismatch and the firmware's drift, apart";
  // A health effect: PRE_SEPARATE keeps new work off the node.
  EXPECT_NE(Node("n3").node().health(), v1::HEALTH_HEALTHY);
  // Not released onto a firmware that does not go with its driver.
  Status release = state_->ChainAllowsRelease("n3", /*automatic=*/true);
  EXPECT_EQ(release.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(release.message().find("link firmware MISMATCH"), std::string::npos) << release.message();
  Hello(hello("n3", "24.1.rc3", "7.5.0.3.220"), 2);
  advance();
  EXPECT_TRUE(ChainFaults(*state_, "n3").empty());
}

// chain_drift_levels: a pool's drift at its own level; a change of level
// re-raises the fault at the new one.
TEST_F(ClusterStateTest, ChainDriftLevelPerPool) {
  drift_ = std::make_unique<ChainDriftRule>(
      "", std::map<std::string, v1::FaultLevel>{{"910B3", v1::FAULT_LEVEL_PRE_SEPARATE}});
  for (const char* n : {"n1", "n2", "n3"}) Hello(HelloWithDriver(n, "24.1.rc3", "910B3"));
  Hello(HelloWithDriver("n4", "24.1.rc2", "910B3"));
  for (const char* n : {"m1", "m2", "m3"}) Hello(HelloWithDriver(n, "23.0.0", "310P3"));
  Hello(HelloWithDriver("m4", "23.0.1", "310P3"));
  auto advance = [&] {
    clock_.Advance(std::chrono::seconds(2));
    Run(*drift_);
  };
  advance();
  EXPECT_EQ(ChainFaults(*state_, "n4"),
            std::vector<std::string>{
                "n4/driver CHAIN_VERSION_DRIFT PRE_SEPARATE: driver 24.1.rc2 where 3 of 4 nodes of pool 910B3 run "
                "24.1.rc3"});
  EXPECT_EQ(ChainFaults(*state_, "m4"),
            std::vector<std::string>{
                "m4/driver CHAIN_VERSION_DRIFT SUB_HEALTH: driver 23.0.1 where 3 of 4 nodes of pool 310P3 run 23.0.0"});
  drift_ = std::make_unique<ChainDriftRule>();
  advance();
  EXPECT_EQ(ChainFaults(*state_, "n4"),
            std::vector<std::string>{
                "n4/driver CHAIN_VERSION_DRIFT SUB_HEALTH: driver 24.1.rc2 where 3 of 4 nodes of pool 910B3 run "
                "24.1.rc3"});
}

TEST_F(ClusterStateTest, FaultLevelFromCatalogDrivesDeviceAndNodeHealth) {
  Hello(MakeHello("worker01", 1));
  events_.clear();
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 3, "80E01801")).ok());
  // FAULT_RAISED, DEVICE_HEALTH_CHANGED, NODE_HEALTH_CHANGED in one change.
  ASSERT_EQ(events_.size(), 3u);
  EXPECT_EQ(events_[0].type(), v1::EVENT_TYPE_FAULT_RAISED);
  EXPECT_EQ(events_[0].fault().level(), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_EQ(events_[0].fault().id(), "worker01/3/accelerator/80E01801");
  EXPECT_EQ(events_[1].type(), v1::EVENT_TYPE_DEVICE_HEALTH_CHANGED);
  EXPECT_EQ(events_[1].device_id(), 3u);
  EXPECT_EQ(events_[1].health(), v1::HEALTH_UNHEALTHY);
  EXPECT_EQ(events_[2].type(), v1::EVENT_TYPE_NODE_HEALTH_CHANGED);
  EXPECT_EQ(events_[2].previous_health(), v1::HEALTH_HEALTHY);
  EXPECT_EQ(events_[0].revision() + 1, events_[1].revision());
  auto node = Node("worker01");
  EXPECT_EQ(node.node().health(), v1::HEALTH_UNHEALTHY);
  EXPECT_EQ(node.devices(3).health(), v1::HEALTH_UNHEALTHY);
  EXPECT_EQ(node.devices(2).health(), v1::HEALTH_HEALTHY);
  ASSERT_EQ(node.active_faults_size(), 1);

  // A SUB_HEALTH fault on another device: sub-healthy device, node stays unhealthy.
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 2, true, 5, "80818C06")).ok());
  EXPECT_EQ(Node("worker01").devices(5).health(), v1::HEALTH_SUB_HEALTHY);
  // Clear the bad one: node collapses to SUB_HEALTHY.
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 3, false, 3, "80E01801")).ok());
  node = Node("worker01");
  EXPECT_EQ(node.node().health(), v1::HEALTH_SUB_HEALTHY);
  EXPECT_EQ(node.devices(3).health(), v1::HEALTH_HEALTHY);
  // NOT_HANDLE keeps the device healthy.
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 4, true, 1, "80818200")).ok());
  EXPECT_EQ(Node("worker01").devices(1).health(), v1::HEALTH_HEALTHY);
}

TEST_F(ClusterStateTest, TransitionIdsAreStoredOnce) {
  Hello(MakeHello("worker01", 7));
  ASSERT_FALSE(Transition("worker01", MakeTransition(7, 1, true, 3, "80E01801"))->duplicate);
  const uint64_t rev = state_->revision();
  auto again = Transition("worker01", MakeTransition(7, 1, true, 3, "80E01801"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(state_->revision(), rev);
  // Even a resend after a restart of ClusterD is recognised.
  Open();
  Hello(MakeHello("worker01", 7));
  EXPECT_TRUE(Transition("worker01", MakeTransition(7, 1, true, 3, "80E01801"))->duplicate);
  auto w = Hello(MakeHello("worker01", 7), 5);
  EXPECT_EQ(w.applied_seq(), 1u);
  v1::ListFaultsRequest req;
  EXPECT_EQ(state_->ListFaults(req)->faults(0).count(), 1u);
}

// A hello with an epoch older than every epoch kept used to abort ClusterD
// (a map lookup of the epoch it had just evicted): eight restarts of an agent,
// then its state dir wiped (epoch 1 again), crash-looped the server.
TEST_F(ClusterStateTest, HelloWithEvictedEpochDoesNotAbortAndItsFaultsAreStored) {
  for (uint64_t epoch = 100; epoch < 100 + ClusterState::kEpochsKept; ++epoch) {
    Hello(MakeHello("worker01", epoch), epoch);
    ASSERT_FALSE(Transition("worker01", MakeTransition(epoch, 1, epoch % 2 == 0, 3, "80E01801"), epoch)->duplicate);
  }
  // An older agent (no instance id) whose state dir was wiped: epoch 1.
  v1::Welcome w = Hello(MakeHello("worker01", 1), 500);
  EXPECT_EQ(w.applied_seq(), 0u);
  // Its first raise is new, not "applied long ago": the node turns unhealthy.
  auto r = Transition("worker01", MakeTransition(1, 1, true, 5, "80E01801"), 500);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->duplicate);
  EXPECT_EQ(Node("worker01").devices(5).health(), v1::HEALTH_UNHEALTHY);
}

// The same with agents that send their incarnation: a wiped state dir is a new
// instance, so its ids are all new, even where the epochs are still kept.
TEST_F(ClusterStateTest, NewAgentInstanceStartsItsTransitionIdsOver) {
  v1::Hello h = MakeHello("worker01", 3);
  h.set_instance_id("0123456789abcdef0123456789abcdef");
  Hello(h, 1);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    ASSERT_FALSE(Transition("worker01", MakeTransition(3, seq, seq != 2, 3, "80E01801"), 1)->duplicate);
  }
  ASSERT_EQ(Node("worker01").devices(3).health(), v1::HEALTH_UNHEALTHY);

  // Same instance after a ClusterD restart and an agent restart: what was
  // applied stays applied (a resend is a duplicate).
  Open();
  h.set_epoch(4);
  Hello(h, 2);
  EXPECT_TRUE(Transition("worker01", MakeTransition(3, 3, true, 3, "80E01801"), 2)->duplicate);

  // The state dir is wiped: new instance, epoch 3 again (kept, seq 3 applied
  // for the old instance). Its transitions (3,1) and (3,2) are new.
  Open();
  v1::Hello wiped = MakeHello("worker01", 3);
  wiped.set_instance_id("fedcba9876543210fedcba9876543210");
  EXPECT_EQ(Hello(wiped, 3).applied_seq(), 0u);
  const uint64_t before = state_->revision();
  auto clear = Transition("worker01", MakeTransition(3, 1, false, 3, "80E01801"), 3);
  ASSERT_TRUE(clear.ok());
  EXPECT_FALSE(clear->duplicate);
  auto raise = Transition("worker01", MakeTransition(3, 2, true, 6, "80E01801"), 3);
  ASSERT_TRUE(raise.ok());
  EXPECT_FALSE(raise->duplicate);
  EXPECT_GT(state_->revision(), before);
  auto node = Node("worker01");
  EXPECT_EQ(node.devices(3).health(), v1::HEALTH_HEALTHY);
  EXPECT_EQ(node.devices(6).health(), v1::HEALTH_UNHEALTHY);
  // And the new instance's progress survives a ClusterD restart.
  Open();
  EXPECT_EQ(Hello(wiped, 4).applied_seq(), 2u);
}

// Same instance, an epoch older than every one kept (not a sane agent, but
// not a reason to crash or to drop what it raises in that epoch).
TEST_F(ClusterStateTest, SameInstanceOlderEpochKeepsItsTransitions) {
  v1::Hello h = MakeHello("worker01", 1);
  h.set_instance_id("0123456789abcdef0123456789abcdef");
  for (uint64_t epoch = 50; epoch < 50 + ClusterState::kEpochsKept + 2; ++epoch) {
    h.set_epoch(epoch);
    Hello(h, epoch);
  }
  h.set_epoch(1);
  EXPECT_EQ(Hello(h, 99).applied_seq(), 0u);
  auto r = Transition("worker01", MakeTransition(1, 1, true, 2, "80E01801"), 99);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->duplicate);
  EXPECT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 2, "80E01801"), 99)->duplicate);
}

TEST_F(ClusterStateTest, TransitionFromAnEpochAfterTheHellosIsRefused) {
  Hello(MakeHello("worker01", 5));
  const uint64_t before = state_->revision();
  auto r = Transition("worker01", MakeTransition(6, 1, true, 2, "80E01801"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("newer than the hello's epoch"), std::string::npos);
  EXPECT_EQ(state_->revision(), before);
}

TEST_F(ClusterStateTest, HelloInstanceIdIsValidated) {
  v1::Hello h = MakeHello("worker01", 1);
  h.set_instance_id(std::string(65, 'a'));
  Mutation m;
  EXPECT_EQ(state_->ApplyHello(h, 1, &m).status().code(), StatusCode::kInvalidArgument);
  h.set_instance_id("has space");
  EXPECT_EQ(state_->ApplyHello(h, 1, &m).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state_->revision(), 0u);
}

TEST_F(ClusterStateTest, BadInputChangesNothing) {
  Hello(MakeHello("worker01", 1));
  const uint64_t rev = state_->revision();
  Mutation m;
  EXPECT_EQ(state_->ApplyTransition("worker01", 1, MakeTransition(1, 1, true, 3, ""), &m).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(state_->ApplyTransition("worker01", 1, MakeTransition(1, 1, true, 3, "X", v1::FAULT_SOURCE_HEARTBEAT), &m)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  auto t = MakeTransition(1, 1, true, 3, "80E01801");
  t.mutable_fault()->set_message(std::string(5000, 'x'));
  EXPECT_FALSE(state_->ApplyTransition("worker01", 1, t, &m).ok());
  t = MakeTransition(1, 1, true, 3, "80E01801");
  t.set_action(static_cast<v1::TransitionAction>(42));
  EXPECT_FALSE(state_->ApplyTransition("worker01", 1, t, &m).ok());
  EXPECT_EQ(state_->ApplyTransition("worker01", 99, MakeTransition(1, 1, true, 3, "A"), &m).status().code(),
            StatusCode::kFailedPrecondition);  // not the node's current stream
  auto bad = MakeHello("bad name!", 1);
  EXPECT_FALSE(state_->ApplyHello(bad, 1, &m).ok());
  bad = MakeHello(std::string(300, 'a'), 1);
  EXPECT_FALSE(state_->ApplyHello(bad, 1, &m).ok());
  bad = MakeHello("ok", 0);
  EXPECT_FALSE(state_->ApplyHello(bad, 1, &m).ok());
  bad = MakeHello("ok", 1);
  bad.mutable_inventory()->add_devices()->set_id(0);  // duplicate id
  EXPECT_FALSE(state_->ApplyHello(bad, 1, &m).ok());
  // The software chain: bounded links, one-line texts, known states.
  auto chained = [](const std::function<void(v1::ChainLink*)>& edit, int links = 1) {
    v1::Hello h = MakeHello("ok", 1);
    for (int i = 0; i < links; ++i) {
      auto* l = h.mutable_inventory()->add_chain();
      l->set_name("driver");
      l->set_state(v1::CHAIN_LINK_STATE_OK);
      edit(l);
    }
    return h;
  };
  EXPECT_TRUE(ValidateHello(chained([](v1::ChainLink*) {}, 16)).ok());
  EXPECT_FALSE(ValidateHello(chained([](v1::ChainLink*) {}, 17)).ok());
  EXPECT_FALSE(ValidateHello(chained([](v1::ChainLink* l) { l->set_name(""); })).ok());
  EXPECT_FALSE(ValidateHello(chained([](v1::ChainLink* l) { l->set_evidence("a\nforged log line"); })).ok());
  EXPECT_FALSE(ValidateHello(chained([](v1::ChainLink* l) { l->set_evidence(std::string(513, 'e')); })).ok());
  EXPECT_FALSE(ValidateHello(chained([](v1::ChainLink* l) { l->set_state(static_cast<v1::ChainLinkState>(9)); })).ok());
  bad = chained([](v1::ChainLink* l) { l->set_version(std::string(300, 'v')); });
  EXPECT_FALSE(state_->ApplyHello(bad, 1, &m).ok());
  v1::ReportRequest report;
  report.set_reporter("a/b");
  report.set_id("c");
  report.set_node("worker01");
  report.set_code("X");
  report.set_action(v1::TRANSITION_ACTION_RAISE);
  EXPECT_EQ(state_->ApplyReport(report, &m).status().code(), StatusCode::kInvalidArgument);
  v1::MetricSnapshot metrics;
  (*metrics.mutable_gauges())["cpu"] = std::nan("");
  EXPECT_EQ(state_->ApplyMetrics("worker01", 1, metrics).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.empty());
  EXPECT_TRUE(m.events.empty());
  EXPECT_EQ(state_->revision(), rev);
  EXPECT_EQ(state_->node_count(), 1u);
}

TEST_F(ClusterStateTest, SubjectsAreSeparateFaults) {
  Hello(MakeHello("worker01", 1));
  auto root = MakeTransition(1, 1, true, std::nullopt, "NODE_DISK_FULL", v1::FAULT_SOURCE_DISK);
  root.mutable_fault()->set_subject("/");
  auto data = MakeTransition(1, 2, true, std::nullopt, "NODE_DISK_FULL", v1::FAULT_SOURCE_DISK);
  data.mutable_fault()->set_subject("/data");
  ASSERT_TRUE(Transition("worker01", root).ok());
  ASSERT_TRUE(Transition("worker01", data).ok());
  auto node = Node("worker01");
  ASSERT_EQ(node.active_faults_size(), 2);
  EXPECT_EQ(node.active_faults(0).id(), "worker01/-/disk/NODE_DISK_FULL@/");
  EXPECT_EQ(node.active_faults(1).subject(), "/data");
  auto clear = MakeTransition(1, 3, false, std::nullopt, "NODE_DISK_FULL", v1::FAULT_SOURCE_DISK);
  clear.mutable_fault()->set_subject("/data");
  ASSERT_TRUE(Transition("worker01", clear).ok());
  ASSERT_EQ(Node("worker01").active_faults_size(), 1);
  EXPECT_EQ(Node("worker01").active_faults(0).subject(), "/");
}

TEST_F(ClusterStateTest, ReconnectReconcilesActiveFaults) {
  auto h = MakeHello("worker01", 1);
  Hello(h);
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 3, "80E01801")).ok());
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 2, true, 4, "80E01801")).ok());
  // The agent comes back: device 3's fault cleared while away, a disk fault appeared.
  h.set_epoch(2);
  auto* keep = h.add_active_faults();
  keep->set_device_id(4);
  keep->set_source(v1::FAULT_SOURCE_ACCELERATOR);
  keep->set_code("80E01801");
  auto* added = h.add_active_faults();
  added->set_source(v1::FAULT_SOURCE_DISK);
  added->set_code("NODE_DISK_FULL");
  added->set_level(v1::FAULT_LEVEL_PRE_SEPARATE);
  Hello(h, 2);
  v1::ListFaultsRequest req;
  req.set_active_only(true);
  auto faults = state_->ListFaults(req);
  ASSERT_EQ(faults->faults_size(), 2);
  EXPECT_EQ(faults->faults(0).code(), "NODE_DISK_FULL");  // node-level first
  EXPECT_EQ(faults->faults(0).level(), v1::FAULT_LEVEL_PRE_SEPARATE);
  EXPECT_EQ(faults->faults(1).device_id(), 4u);
  EXPECT_EQ(faults->faults(1).count(), 1u);  // not duplicated
  req.set_active_only(false);
  auto all = state_->ListFaults(req);
  ASSERT_EQ(all->faults_size(), 3);
  EXPECT_EQ(all->faults(1).state(), v1::FAULT_STATE_CLEARED);
  EXPECT_EQ(all->faults(1).clear_reason(), "not active on the agent at reconnect");
}

TEST_F(ClusterStateTest, LivenessRaisesAndClearsHeartbeatLost) {
  Hello(MakeHello("worker01", 1));
  Hello(MakeHello("worker02", 1), 2);
  clock_.Advance(6s);
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyHeartbeat("worker02", 2, m); }).ok());
  clock_.Advance(5s);
  Commit([&](Mutation* m) {
    state_->CheckLiveness(10s, m);
    return 0;
  });
  EXPECT_EQ(Node("worker01").node().health(), v1::HEALTH_UNKNOWN);
  EXPECT_EQ(Node("worker02").node().health(), v1::HEALTH_HEALTHY);
  auto lost = Node("worker01").active_faults();
  ASSERT_EQ(lost.size(), 1);
  EXPECT_EQ(lost[0].code(), "HEARTBEAT_LOST");
  EXPECT_EQ(lost[0].level(), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(lost[0].source(), v1::FAULT_SOURCE_HEARTBEAT);
  // Checking again raises nothing new.
  const uint64_t rev = state_->revision();
  Commit([&](Mutation* m) {
    state_->CheckLiveness(10s, m);
    return 0;
  });
  EXPECT_EQ(state_->revision(), rev);
  // The node returns.
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyHeartbeat("worker01", 1, m); }).ok());
  EXPECT_EQ(Node("worker01").node().health(), v1::HEALTH_HEALTHY);
  EXPECT_EQ(Node("worker01").active_faults_size(), 0);
}

TEST_F(ClusterStateTest, RestartGivesNodesOneGracePeriod) {
  Hello(MakeHello("worker01", 1));
  clock_.Advance(60s);
  Open();  // ClusterD restarts long after the last heartbeat
  auto node = Node("worker01");
  EXPECT_FALSE(node.node().connected());
  Commit([&](Mutation* m) {
    state_->CheckLiveness(10s, m);
    return 0;
  });
  EXPECT_EQ(Node("worker01").node().health(), v1::HEALTH_HEALTHY);
  clock_.Advance(11s);
  Commit([&](Mutation* m) {
    state_->CheckLiveness(10s, m);
    return 0;
  });
  EXPECT_EQ(Node("worker01").node().health(), v1::HEALTH_UNKNOWN);
}

TEST_F(ClusterStateTest, ReopenServesSameStateAndRevision) {
  Hello(MakeHello("worker01", 1));
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 3, "80E01801")).ok());
  const uint64_t rev = state_->revision();
  const auto before = Node("worker01");
  Open();
  EXPECT_EQ(state_->revision(), rev);
  const auto after = Node("worker01");
  EXPECT_EQ(after.node().health(), before.node().health());
  EXPECT_EQ(after.devices(3).health(), v1::HEALTH_UNHEALTHY);
  ASSERT_EQ(after.active_faults_size(), 1);
  EXPECT_EQ(after.active_faults(0).SerializeAsString(), before.active_faults(0).SerializeAsString());
  auto events = store_->ReadEvents(0, 100);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), rev);
  for (size_t i = 0; i < events->size(); ++i) EXPECT_EQ((*events)[i].revision(), i + 1);
}

TEST_F(ClusterStateTest, ExternalReportsAreIdempotent) {
  Hello(MakeHello("worker01", 1));
  v1::ReportRequest req;
  req.set_reporter("netprobe");
  req.set_id("roce-3");
  req.set_node("worker01");
  req.set_device_id(3);
  req.set_code("ROCE_LINK_DOWN");
  req.set_level(v1::FAULT_LEVEL_RESTART_REQUEST);
  req.set_action(v1::TRANSITION_ACTION_RAISE);
  auto r1 = Commit([&](Mutation* m) { return state_->ApplyReport(req, m); });
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_FALSE(r1->unchanged());
  EXPECT_EQ(r1->fault().level(), v1::FAULT_LEVEL_RESTART_REQUEST);
  EXPECT_EQ(r1->fault().source(), v1::FAULT_SOURCE_EXTERNAL);
  auto r2 = Commit([&](Mutation* m) { return state_->ApplyReport(req, m); });
  EXPECT_TRUE(r2->unchanged());
  EXPECT_EQ(r2->fault().count(), 1u);
  // An agent reconnect does not clear faults it did not raise.
  Hello(MakeHello("worker01", 2), 2);
  EXPECT_EQ(Node("worker01").active_faults_size(), 1);
  req.set_action(v1::TRANSITION_ACTION_CLEAR);
  auto r3 = Commit([&](Mutation* m) { return state_->ApplyReport(req, m); });
  EXPECT_FALSE(r3->unchanged());
  EXPECT_EQ(r3->fault().state(), v1::FAULT_STATE_CLEARED);
  EXPECT_TRUE(Commit([&](Mutation* m) { return state_->ApplyReport(req, m); })->unchanged());
  req.set_node("nobody");
  EXPECT_EQ(Commit([&](Mutation* m) { return state_->ApplyReport(req, m); }).status().code(), StatusCode::kNotFound);
}

TEST_F(ClusterStateTest, ListNodesFiltersAndPages) {
  for (int i = 0; i < 5; ++i) {
    auto h = MakeHello("node" + std::to_string(i), 1, 1);
    if (i % 2) (*h.mutable_labels())["pool"] = "a";
    Hello(h, i + 1);
  }
  ASSERT_TRUE(Transition("node3", MakeTransition(1, 1, true, 0, "80E01801"), 4).ok());
  v1::ListNodesRequest req;
  req.set_page_size(2);
  std::vector<std::string> names;
  for (;;) {
    auto page = state_->ListNodes(req);
    ASSERT_TRUE(page.ok());
    EXPECT_EQ(page->total_size(), 5);
    for (const auto& n : page->nodes()) names.push_back(n.name());
    if (page->next_page_token().empty()) break;
    req.set_page_token(page->next_page_token());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"node0", "node1", "node2", "node3", "node4"}));
  v1::ListNodesRequest filtered;
  filtered.set_label_selector("pool=a,rack=r1");
  EXPECT_EQ(state_->ListNodes(filtered)->nodes_size(), 2);
  filtered.set_health(v1::HEALTH_UNHEALTHY);
  ASSERT_EQ(state_->ListNodes(filtered)->nodes_size(), 1);
  EXPECT_EQ(state_->ListNodes(filtered)->nodes(0).name(), "node3");
  // != (as in Kubernetes selectors): nodes without the key match too.
  v1::ListNodesRequest unequal;
  unequal.set_label_selector("pool!=a");
  auto others = state_->ListNodes(unequal);
  ASSERT_TRUE(others.ok()) << others.status().ToString();
  ASSERT_EQ(others->nodes_size(), 3);
  EXPECT_EQ(others->nodes(0).name(), "node0");
  unequal.set_label_selector("pool==a,rack!=r2");
  EXPECT_EQ(state_->ListNodes(unequal)->nodes_size(), 2);
  v1::ListNodesRequest bad;
  for (const char* selector : {"novalue", "=a", "!=a", "pool!a", "a=b,,c=d", "pool in (a)", "k\x1b=v"}) {
    bad.set_label_selector(selector);
    EXPECT_EQ(state_->ListNodes(bad).status().code(), StatusCode::kInvalidArgument) << selector;
  }
  bad = v1::ListNodesRequest();
  bad.set_page_size(-1);
  EXPECT_EQ(state_->ListNodes(bad).status().code(), StatusCode::kInvalidArgument);
  bad = v1::ListNodesRequest();
  bad.set_page_token("zz");
  EXPECT_EQ(state_->ListNodes(bad).status().code(), StatusCode::kInvalidArgument);
}

// Without a filter a page starts at its token instead of walking the table
// from the first node; it answers what a filter matching every node does.
TEST_F(ClusterStateTest, ListNodesUnfilteredPagesMatchAFilterThatMatchesAll) {
  for (int i = 0; i < 7; ++i) Hello(MakeHello("n" + std::to_string(i), 1, 1), i + 1);
  auto walk = [&](const std::string& selector, int32_t size) {
    v1::ListNodesRequest req;
    req.set_page_size(size);
    req.set_label_selector(selector);
    std::vector<std::vector<std::string>> pages;
    for (;;) {
      auto page = state_->ListNodes(req);
      EXPECT_TRUE(page.ok()) << page.status().ToString();
      if (!page.ok()) break;
      EXPECT_EQ(page->total_size(), 7);
      pages.emplace_back();
      for (const auto& n : page->nodes()) pages.back().push_back(n.name());
      if (page->next_page_token().empty()) break;
      req.set_page_token(page->next_page_token());
    }
    return pages;
  };
  for (int32_t size : {1, 3, 7, 8}) {
    auto plain = walk("", size);
    EXPECT_EQ(plain, walk("pool!=none", size)) << size;
    size_t listed = 0;
    for (const auto& p : plain) listed += p.size();
    EXPECT_EQ(listed, 7u) << size;
    EXPECT_EQ(plain.size(), static_cast<size_t>((7 + size - 1) / size)) << size;  // no empty last page
  }
  // A token past the last node: an empty page, no token.
  v1::ListNodesRequest past;
  past.set_page_token(storage::HexEncode("zzz"));
  auto empty = state_->ListNodes(past);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->nodes_size(), 0);
  EXPECT_TRUE(empty->next_page_token().empty());
  EXPECT_EQ(empty->total_size(), 7);
}

TEST_F(ClusterStateTest, ListFaultsFilters) {
  Hello(MakeHello("worker01", 1));
  Hello(MakeHello("worker02", 1), 2);
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 3, "80E01801")).ok());  // RESTART_BUSINESS
  const uint64_t mid = state_->revision();
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 2, true, 4, "80818C06")).ok());      // SUB_HEALTH
  ASSERT_TRUE(Transition("worker02", MakeTransition(1, 1, true, 1, "020001002"), 2).ok());  // SEPARATE
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 3, false, 4, "80818C06")).ok());
  auto list = [&](auto setup) {
    v1::ListFaultsRequest req;
    setup(req);
    auto r = state_->ListFaults(req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<std::string> ids;
    for (const auto& f : r->faults()) ids.push_back(f.id());
    return ids;
  };
  EXPECT_EQ(list([](auto&) {}).size(), 3u);
  EXPECT_EQ(list([](auto& r) { r.set_node("worker02"); }),
            std::vector<std::string>{"worker02/1/accelerator/020001002"});
  EXPECT_EQ(list([](auto& r) {
              r.set_node("worker01");
              r.set_device_id(3);
            }),
            std::vector<std::string>{"worker01/3/accelerator/80E01801"});
  EXPECT_EQ(list([](auto& r) { r.set_min_level(v1::FAULT_LEVEL_RESTART_NPU); }).size(), 1u);
  EXPECT_EQ(list([](auto& r) { r.set_active_only(true); }).size(), 2u);
  EXPECT_EQ(list([&](auto& r) { r.set_since_revision(mid); }).size(), 2u);
  v1::ListFaultsRequest bad;
  bad.set_device_id(1);
  EXPECT_EQ(state_->ListFaults(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClusterStateTest, SummaryCountsHealthAndLevels) {
  Hello(MakeHello("worker01", 1));
  Hello(MakeHello("worker02", 1), 2);
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 3, "80E01801")).ok());
  auto s = state_->GetSummary();
  EXPECT_EQ(s.nodes().total(), 2u);
  EXPECT_EQ(s.nodes().unhealthy(), 1u);
  EXPECT_EQ(s.devices().total(), 16u);
  EXPECT_EQ(s.devices().unhealthy(), 1u);
  EXPECT_EQ(s.devices().healthy(), 15u);
  EXPECT_EQ(s.active_faults(), 1u);
  EXPECT_EQ(s.active_faults_by_level().at("FAULT_LEVEL_RESTART_BUSINESS"), 1u);
  EXPECT_EQ(s.revision(), state_->revision());
  EXPECT_EQ(s.connected_agents(), 2u);
}

}  // namespace
}  // namespace clusterd

namespace clusterd {
namespace {

using testing::MakeHello;
using testing::MakeTransition;

v1::Job MakeJob(const std::string& id, const std::vector<std::pair<std::string, int>>& ranks) {
  v1::Job job;
  job.set_id(id);
  job.set_kind(v1::JOB_KIND_TRAINING);
  uint32_t rank = 0;
  for (const auto& [node, device] : ranks) {
    auto* p = job.add_placement();
    p->set_rank(rank++);
    p->set_node(node);
    if (device >= 0) p->set_device_id(static_cast<uint32_t>(device));
  }
  return job;
}

TEST_F(ClusterStateTest, JobsAreStoredWithEventsAndSurviveRestart) {
  Hello(MakeHello("worker01", 1));
  auto created = Commit([&](Mutation* m) {
    return state_->ApplyCreateJob(MakeJob("llm", {{"worker01", 0}, {"worker01", 3}}), m);
  });
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(events_.back().type(), v1::EVENT_TYPE_JOB_CREATED);
  EXPECT_EQ(events_.back().job_ids(0), "llm");
  EXPECT_EQ(created->revision(), events_.back().revision());
  EXPECT_EQ(Commit([&](Mutation* m) {
              return state_->ApplyCreateJob(MakeJob("llm", {{"worker01", 0}}), m);
            })
                .status()
                .code(),
            StatusCode::kAlreadyExists);
  auto updated = MakeJob("llm", {{"worker01", 1}});
  updated.set_kind(v1::JOB_KIND_UNSPECIFIED);  // keep
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyUpdateJob(updated, m); }).ok());
  EXPECT_EQ(events_.back().type(), v1::EVENT_TYPE_JOB_UPDATED);
  Open();
  auto job = state_->GetJob("llm");
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(job->placement_size(), 1);
  EXPECT_EQ(job->placement(0).device_id(), 1u);
  EXPECT_EQ(job->kind(), v1::JOB_KIND_TRAINING);
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyDeleteJob("llm", m); }).ok());
  EXPECT_EQ(events_.back().type(), v1::EVENT_TYPE_JOB_DELETED);
  EXPECT_EQ(state_->GetJob("llm").status().code(), StatusCode::kNotFound);
  Open();
  EXPECT_EQ(state_->job_count(), 0u);
}

// Finished recovery records are pruned by age and count; a running one, a
// job's newest and anything within the protected window always stay.
TEST_F(ClusterStateTest, RecoveryRetentionKeepsRunningNewestAndRecent) {
  Hello(MakeHello("worker01", 1));
  for (const char* id : {"a", "b"}) {
    ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyCreateJob(MakeJob(id, {{"worker01", 0}}), m); }).ok());
  }
  auto put = [&](const std::string& job, v1::RecoveryState st) {
    v1::Recovery r;
    r.set_id(state_->NextRecoveryId(job));
    r.set_job_id(job);
    r.set_state(st);
    if (st != v1::RECOVERY_STATE_RUNNING) *r.mutable_end_time() = ToTimestamp(clock_.Now());
    Commit([&](Mutation* m) { return &state_->PutRecovery(r, v1::EVENT_TYPE_RECOVERY_FINISHED, m); });
    clock_.Advance(std::chrono::hours(1));
    return r.id();
  };
  // Job a: four finished, then one still running (the newest); job b: one
  // finished (its newest), then the job is deleted; then one more of job a
  // ... all at least a day ago, except the last one.
  put("a", v1::RECOVERY_STATE_SUCCEEDED);                            // a.1
  put("a", v1::RECOVERY_STATE_FAILED);                               // a.2
  put("b", v1::RECOVERY_STATE_SUCCEEDED);                            // b.1 (job b's newest)
  put("a", v1::RECOVERY_STATE_CANCELLED);                            // a.3
  const std::string running = put("a", v1::RECOVERY_STATE_RUNNING);  // a.4
  clock_.Advance(std::chrono::hours(48));
  put("a", v1::RECOVERY_STATE_DRY_RUN);  // a.5, newest of a, recent
  ASSERT_EQ(state_->recovery_count(), 6u);

  ClusterState::RecoveryRetention keep_all{
      .max_count = 100, .max_age = std::chrono::hours(24 * 30), .protect = std::chrono::hours(24)};
  const uint64_t rev = state_->revision();
  EXPECT_EQ(Commit([&](Mutation* m) { return state_->ApplyRecoveryRetention(keep_all, clock_.Now(), m); }), 0u);

  // Count: at most 4 -> the two oldest finished ones go (a.1, a.2); b.1 is
  // job b's newest and stays while b exists.
  ClusterState::RecoveryRetention by_count = keep_all;
  by_count.max_count = 4;
  EXPECT_EQ(Commit([&](Mutation* m) { return state_->ApplyRecoveryRetention(by_count, clock_.Now(), m); }), 2u);
  EXPECT_EQ(state_->GetRecovery("a.1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state_->GetRecovery("a.2").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(state_->GetRecovery("b.1").ok());
  EXPECT_EQ(state_->revision(), rev);  // history removed, no state changed

  // Job b deleted: its last recovery may go now. Age: 1 day -> everything
  // finished that ended more than a day ago goes, except the running a.4
  // and the recent a.5.
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyDeleteJob("b", m); }).ok());
  ClusterState::RecoveryRetention by_age = keep_all;
  by_age.max_age = std::chrono::hours(24);
  EXPECT_EQ(Commit([&](Mutation* m) { return state_->ApplyRecoveryRetention(by_age, clock_.Now(), m); }), 2u);
  // Even a count of 1 cannot take the running one or a's newest.
  by_age.max_count = 1;
  EXPECT_EQ(Commit([&](Mutation* m) { return state_->ApplyRecoveryRetention(by_age, clock_.Now(), m); }), 0u);
  EXPECT_EQ(state_->recovery_count(), 2u);
  EXPECT_TRUE(state_->GetRecovery(running).ok());
  EXPECT_TRUE(state_->GetRecovery("a.5").ok());

  // Durable: a restart loads the same two, and ids are not given twice.
  Open();
  EXPECT_EQ(state_->recovery_count(), 2u);
  EXPECT_EQ(state_->GetRecovery("a.1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state_->NextRecoveryId("a"), "a.6");
}

TEST_F(ClusterStateTest, BadJobsAreRefused) {
  const uint64_t rev = state_->revision();
  Mutation m;
  EXPECT_FALSE(state_->ApplyCreateJob(MakeJob("bad id!", {{"w", 0}}), &m).ok());
  EXPECT_FALSE(state_->ApplyCreateJob(MakeJob("j", {}), &m).ok());
  auto dup = MakeJob("j", {{"w", 0}, {"w", 1}});
  dup.mutable_placement(1)->set_rank(0);
  EXPECT_FALSE(state_->ApplyCreateJob(dup, &m).ok());
  auto kind = MakeJob("j", {{"w", 0}});
  kind.set_kind(v1::JOB_KIND_UNSPECIFIED);
  EXPECT_FALSE(state_->ApplyCreateJob(kind, &m).ok());
  auto strategy = MakeJob("j", {{"w", 0}});
  strategy.mutable_policy()->add_allowed_strategies(static_cast<v1::RecoveryStrategy>(77));
  EXPECT_FALSE(state_->ApplyCreateJob(strategy, &m).ok());
  auto silence = MakeJob("j", {{"w", 0}});
  silence.mutable_policy()->add_silences()->set_code("bad code");
  EXPECT_FALSE(state_->ApplyCreateJob(silence, &m).ok());
  EXPECT_EQ(state_->ApplyUpdateJob(MakeJob("ghost", {{"w", 0}}), &m).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(state_->revision(), rev);
}

TEST_F(ClusterStateTest, FaultImpactOnJobs) {
  Hello(MakeHello("worker01", 1));
  Hello(MakeHello("worker02", 1), 2);
  ASSERT_TRUE(Commit([&](Mutation* m) {
                return state_->ApplyCreateJob(MakeJob("llm", {{"worker01", 3}, {"worker01", 4}, {"worker02", 0}}), m);
              }).ok());
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyCreateJob(MakeJob("other", {{"worker02", 5}}), m); }).ok());
  events_.clear();
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 3, "80E01801")).ok());  // hits llm rank 0
  ASSERT_EQ(events_[0].job_ids_size(), 1);
  EXPECT_EQ(events_[0].job_ids(0), "llm");
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 2, true, 7, "80E01801")).ok());  // no rank there
  auto job = state_->GetJob("llm");
  ASSERT_EQ(job->impacts_size(), 1);
  EXPECT_EQ(job->impacts(0).fault_id(), "worker01/3/accelerator/80E01801");
  EXPECT_EQ(job->impacts(0).ranks(0), 0u);
  EXPECT_EQ(job->impacts(0).level(), v1::FAULT_LEVEL_RESTART_BUSINESS);
  // A node-level fault hits every rank on the node.
  auto disk = MakeTransition(1, 3, true, std::nullopt, "NODE_DISK_FULL", v1::FAULT_SOURCE_DISK);
  ASSERT_TRUE(Transition("worker01", disk).ok());
  job = state_->GetJob("llm");
  ASSERT_EQ(job->impacts_size(), 2);
  EXPECT_EQ(job->impacts(0).ranks_size(), 2);
  v1::ListFaultsRequest req;
  req.set_job("llm");
  EXPECT_EQ(state_->ListFaults(req)->faults_size(), 2);
  req.set_job("other");
  EXPECT_EQ(state_->ListFaults(req)->faults_size(), 0);
  req.set_job("ghost");
  EXPECT_EQ(state_->ListFaults(req).status().code(), StatusCode::kNotFound);
  // Watch by job: the filter uses the job ids stored in each event.
  v1::WatchRequest watch;
  watch.add_jobs("llm");
  auto filter = WatchFilter::FromRequest(watch);
  ASSERT_TRUE(filter.ok());
  int matched = 0;
  for (const auto& e : events_) matched += filter->Matches(e) ? 1 : 0;
  EXPECT_EQ(matched, 2);  // the two fault raises that hit llm
}

}  // namespace
}  // namespace clusterd

namespace clusterd {
namespace {

using testing::MakeHello;
using testing::MakeTransition;

TEST_F(ClusterStateTest, CordonIsIdempotentAndRecordedWithActor) {
  Hello(MakeHello("worker01", 1));
  events_.clear();
  auto node = Commit([&](Mutation* m) { return state_->ApplyCordon("worker01", true, "alice", "swap NIC", m); });
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_TRUE(node->cordoned());
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].type(), v1::EVENT_TYPE_NODE_CORDONED);
  EXPECT_EQ(events_[0].actor(), "alice");
  EXPECT_EQ(events_[0].reason(), "swap NIC");
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyCordon("worker01", true, "alice", "again", m); }).ok());
  EXPECT_EQ(events_.size(), 1u);  // already cordoned: no change
  Open();
  EXPECT_TRUE(Node("worker01").node().cordoned());
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyCordon("worker01", false, "bob", "", m); }).ok());
  EXPECT_EQ(events_.back().type(), v1::EVENT_TYPE_NODE_UNCORDONED);
  EXPECT_FALSE(Node("worker01").node().cordoned());
  Mutation m;
  EXPECT_EQ(state_->ApplyCordon("ghost", true, "alice", "x", &m).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state_->ApplyCordon("worker01", true, "", "x", &m).status().code(), StatusCode::kInvalidArgument);
  // Cordoning needs a reason (as a manual clear does); a reason is one line.
  auto no_reason = state_->ApplyCordon("worker01", true, "alice", "", &m);
  EXPECT_EQ(no_reason.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_reason.status().message().find("reason"), std::string::npos);
  EXPECT_EQ(state_->ApplyCordon("worker01", true, "alice", "swap\x1b[2J", &m).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.empty());
  EXPECT_FALSE(Node("worker01").node().cordoned());
}

TEST_F(ClusterStateTest, ManualClearNamesWhoAndWhy) {
  Hello(MakeHello("worker01", 1));
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 3, "80E01801")).ok());
  Mutation bad;
  EXPECT_EQ(state_->ApplyClearFault("worker01/3/accelerator/80E01801", "alice", "", &bad).status().code(),
            StatusCode::kInvalidArgument);  // a reason is required
  EXPECT_EQ(state_->ApplyClearFault("worker01/9/accelerator/80E01801", "alice", "x", &bad).status().code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(bad.empty());
  events_.clear();
  auto f = Commit([&](Mutation* m) {
    return state_->ApplyClearFault("worker01/3/accelerator/80E01801", "alice", "chip replaced", m);
  });
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->state(), v1::FAULT_STATE_CLEARED);
  EXPECT_EQ(f->clear_reason(), "cleared by alice: chip replaced");
  EXPECT_EQ(events_[0].type(), v1::EVENT_TYPE_FAULT_CLEARED);
  EXPECT_EQ(events_[0].actor(), "alice");
  EXPECT_EQ(Node("worker01").node().health(), v1::HEALTH_HEALTHY);
  EXPECT_EQ(Commit([&](Mutation* m) {
              return state_->ApplyClearFault("worker01/3/accelerator/80E01801", "alice", "again", m);
            })
                .status()
                .code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(ClusterStateTest, RecoveryModeIsPersistedAndEvented) {
  v1::SetRecoveryModeRequest req;
  req.set_actor("alice");
  req.set_reason("fabric upgrade");
  req.set_recovery_paused(true);
  auto st = Commit([&](Mutation* m) { return state_->ApplySetRecoveryMode(req, m); });
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->recovery_paused());
  EXPECT_FALSE(st->dry_run());
  EXPECT_EQ(events_.back().type(), v1::EVENT_TYPE_RECOVERY_MODE_CHANGED);
  EXPECT_EQ(events_.back().message(), "recovery_paused=true dry_run=false");
  const size_t n = events_.size();
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplySetRecoveryMode(req, m); }).ok());
  EXPECT_EQ(events_.size(), n);  // no change, no event
  Open();
  EXPECT_TRUE(state_->admin_state().recovery_paused());
  EXPECT_EQ(state_->admin_state().actor(), "alice");
  v1::SetRecoveryModeRequest empty;
  empty.set_actor("alice");
  Mutation m;
  EXPECT_EQ(state_->ApplySetRecoveryMode(empty, &m).status().code(), StatusCode::kInvalidArgument);
  // Turning dry-run on needs a reason; resuming does not.
  v1::SetRecoveryModeRequest dry;
  dry.set_actor("alice");
  dry.set_dry_run(true);
  auto refused = state_->ApplySetRecoveryMode(dry, &m);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("reason"), std::string::npos);
  EXPECT_TRUE(m.empty());
  EXPECT_FALSE(state_->admin_state().dry_run());
  v1::SetRecoveryModeRequest resume;
  resume.set_actor("alice");
  resume.set_recovery_paused(false);
  auto resumed = Commit([&](Mutation* m) { return state_->ApplySetRecoveryMode(resume, m); });
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_FALSE(resumed->recovery_paused());
}

TEST_F(ClusterStateTest, ControlCharactersInNamesAreRefused) {
  v1::Hello h = MakeHello("worker01", 1);
  h.mutable_inventory()->mutable_devices(0)->set_serial("SN\r\nforged log line");
  Mutation m;
  auto refused = state_->ApplyHello(h, 1, &m);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(".serial"), std::string::npos) << refused.status().message();
  h = MakeHello("worker01", 1);
  h.set_boot_id(
      "\xc2\x9b"
      "31m");  // C1 CSI
  EXPECT_EQ(state_->ApplyHello(h, 1, &m).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(state_->revision(), 0u);

  Hello(MakeHello("worker01", 1));
  const uint64_t before = state_->revision();
  auto t = MakeTransition(1, 1, true, 3, "80E01801");
  t.mutable_fault()->set_subject("/mnt/\x1b]0;owned\x07");
  auto r = Transition("worker01", t);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("subject"), std::string::npos);
  // A fault message is free text: tabs and newlines are fine there.
  t.mutable_fault()->set_subject("");
  t.mutable_fault()->set_message("line 1\n\tline 2");
  EXPECT_EQ(state_->revision(), before);
  ASSERT_TRUE(Transition("worker01", t).ok());
}

// Repeat offenders: a node whose faults started more than N recoveries in
// the window is cordoned (actor clusterd, the recoveries named); an operator's
// uncordon starts its count again; GetNode tells the recoveries it caused and
// the mean time between them; off by default.
TEST_F(ClusterStateTest, ARepeatOffenderIsCordonedAndAnUncordonStartsItsCountAgain) {
  SetRepeatOffenderPolicy(2, std::chrono::hours(24));
  Hello(MakeHello("worker01", 1));
  Hello(MakeHello("worker02", 1), 2);
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 3, "80E01801")).ok());
  ASSERT_TRUE(Transition("worker02", MakeTransition(1, 1, true, 0, "80E01801"), 2).ok());
  const std::string on1 = "worker01/3/accelerator/80E01801", on2 = "worker02/0/accelerator/80E01801";
  int n = 0;
  auto recovery = [&](const std::string& fault) {
    v1::Recovery r;
    r.set_id("train." + std::to_string(++n));
    r.set_job_id("train");
    r.set_state(v1::RECOVERY_STATE_SUCCEEDED);
    r.add_trigger_fault_ids(fault);
    *r.mutable_create_time() = ToTimestamp(clock_.Now());
    Commit([&](Mutation* m) { return state_->PutRecovery(r, v1::EVENT_TYPE_RECOVERY_FINISHED, m).id(); });
    clock_.Advance(std::chrono::minutes(30));
  };
  auto advance = [&] {
    clock_.Advance(std::chrono::seconds(11));
    return Run(*offenders_);
  };
  recovery(on1);
  recovery(on1);
  recovery(on2);
  advance();
  EXPECT_FALSE(Node("worker01").node().cordoned()) << "2 recoveries: not more than 2";
  recovery(on1);
  advance();
  const v1::Node w1 = Node("worker01").node();
  ASSERT_TRUE(w1.cordoned());
  EXPECT_NE(w1.cordon_reason().find("repeat offender: its faults started 3 recoveries in the last 24 h (more than 2): "
                                    "train.1, train.2, train.4"),
            std::string::npos)
      << w1.cordon_reason();
  EXPECT_FALSE(Node("worker02").node().cordoned());
  EXPECT_EQ(w1.recoveries_caused(), 3u);
  // train.1, .2 and .4 were created 0, 30 and 90 minutes in: 45 minutes apart on average.
  EXPECT_EQ(w1.mean_time_between_recoveries().seconds(), 45 * 60 + 5);
  EXPECT_EQ(Node("worker02").node().recoveries_caused(), 1u);
  EXPECT_FALSE(Node("worker02").node().has_mean_time_between_recoveries());
  EXPECT_EQ(events_.back().type(), v1::EVENT_TYPE_NODE_CORDONED);
  EXPECT_EQ(events_.back().actor(), "clusterd");

  // Inspected and returned to service: counted again from the uncordon.
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyCordon("worker01", false, "alice", "", m); }).ok());
  advance();
  EXPECT_FALSE(Node("worker01").node().cordoned());
  recovery(on1);
  recovery(on1);
  advance();
  EXPECT_FALSE(Node("worker01").node().cordoned()) << "2 since the uncordon";
  recovery(on1);
  advance();
  EXPECT_TRUE(Node("worker01").node().cordoned());

  // Off: nothing is cordoned, whatever the count.
  SetRepeatOffenderPolicy(0, std::chrono::hours(24));
  EXPECT_EQ(Run(*offenders_), TimePoint::max());
}

// A job's own findings are the job's, not its node's: recoveries started by
// JOB_HANG (reporter "progress") or a TaskD process fault (reporter "taskd")
// never count toward the node's repeat-offender tally, however many; a
// node's own fault in the same recoveries still does.
TEST_F(ClusterStateTest, AJobsOwnHangsAndProcessFaultsNeverMakeItsNodeARepeatOffender) {
  SetRepeatOffenderPolicy(2, std::chrono::hours(24));
  Hello(MakeHello("worker01", 1));
  auto raise = [&](const std::string& reporter, const std::string& id, const std::string& code) {
    v1::ReportRequest r;
    r.set_reporter(reporter);
    r.set_id(id);
    r.set_node("worker01");
    r.set_device_id(0);
    r.set_code(code);
    r.set_level(v1::FAULT_LEVEL_RESTART_BUSINESS);
    r.set_action(v1::TRANSITION_ACTION_RAISE);
    std::string fid;
    EXPECT_TRUE(Commit([&](Mutation* m) -> Status {
                  auto resp = state_->ApplyReport(r, m);
                  if (!resp.ok()) return resp.status();
                  fid = resp->fault().id();
                  return Status::Ok();
                }).ok());
    return fid;
  };
  const std::string hang = raise("progress", "train/hang/0", "JOB_HANG");
  const std::string process = raise("taskd", "train/rank/0", "TASKD_PROCESS_FAULT");
  ASSERT_FALSE(hang.empty());
  ASSERT_FALSE(process.empty());
  int n = 0;
  auto recovery = [&](const std::string& fault) {
    v1::Recovery r;
    r.set_id("train." + std::to_string(++n));
    r.set_job_id("train");
    r.set_state(v1::RECOVERY_STATE_SUCCEEDED);
    r.add_trigger_fault_ids(fault);
    *r.mutable_create_time() = ToTimestamp(clock_.Now());
    Commit([&](Mutation* m) { return state_->PutRecovery(r, v1::EVENT_TYPE_RECOVERY_FINISHED, m).id(); });
    clock_.Advance(std::chrono::minutes(10));
  };
  for (int i = 0; i < 4; ++i) {
    recovery(hang);
    recovery(process);
  }
  clock_.Advance(std::chrono::seconds(11));
  Run(*offenders_);
  EXPECT_FALSE(Node("worker01").node().cordoned()) << Node("worker01").node().cordon_reason();
  EXPECT_EQ(Node("worker01").node().recoveries_caused(), 0u);
  // The node's own fault counts as before.
  ASSERT_TRUE(Transition("worker01", MakeTransition(1, 1, true, 3, "80E01801")).ok());
  for (int i = 0; i < 3; ++i) recovery("worker01/3/accelerator/80E01801");
  clock_.Advance(std::chrono::seconds(11));
  Run(*offenders_);
  EXPECT_TRUE(Node("worker01").node().cordoned());
  EXPECT_EQ(Node("worker01").node().recoveries_caused(), 3u);
}

// A job reporter's restart-only fault (an unattributed JOB_HANG sits on the
// first rank's chip only so that the coordinator finds the job) is listed on
// the node but blames neither its chip nor its node: both stay healthy, and
// however often it comes back the chip is never separated. SLOW_RANK's
// SUB_HEALTH and a hang at SEPARATE (hang_action RESCHEDULE) still count.
TEST_F(ClusterStateTest, AJobsRestartOnlyFaultsBlameNeitherTheChipNorTheNode) {
  Hello(MakeHello("worker01", 1));
  auto report = [&](const std::string& reporter, const std::string& id, const std::string& code, uint32_t device,
                    v1::FaultLevel level, v1::TransitionAction action) {
    v1::ReportRequest r;
    r.set_reporter(reporter);
    r.set_id(id);
    r.set_node("worker01");
    r.set_device_id(device);
    r.set_code(code);
    r.set_level(level);
    r.set_action(action);
    ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyReport(r, m).status(); }).ok()) << id;
  };
  auto advance = [&] { return Run(*separation_); };
  for (int i = 0; i < 4; ++i) {
    report("progress", "train/hang/0", "JOB_HANG", 0, v1::FAULT_LEVEL_RESTART_BUSINESS, v1::TRANSITION_ACTION_RAISE);
    report("taskd", "train/rank/8", "TASKD_PROCESS_FAULT", 1, v1::FAULT_LEVEL_RESTART_REQUEST,
           v1::TRANSITION_ACTION_RAISE);
    const v1::GetNodeResponse n = Node("worker01");
    EXPECT_EQ(n.node().active_faults(), 2u) << "listed on the node";
    EXPECT_EQ(n.node().health(), v1::HEALTH_HEALTHY);
    EXPECT_EQ(n.node().worst_level(), v1::FAULT_LEVEL_UNSPECIFIED);
    EXPECT_EQ(n.devices(0).health(), v1::HEALTH_HEALTHY);
    EXPECT_EQ(n.devices(0).active_faults(), 1u);
    EXPECT_EQ(n.devices(1).health(), v1::HEALTH_HEALTHY);
    clock_.Advance(1s);
    report("progress", "train/hang/0", "JOB_HANG", 0, v1::FAULT_LEVEL_RESTART_BUSINESS, v1::TRANSITION_ACTION_CLEAR);
    report("taskd", "train/rank/8", "TASKD_PROCESS_FAULT", 1, v1::FAULT_LEVEL_RESTART_REQUEST,
           v1::TRANSITION_ACTION_CLEAR);
    clock_.Advance(1h);
    advance();
  }
  for (uint32_t d : {0u, 1u}) {
    EXPECT_FALSE(Node("worker01").devices(d).separated()) << d;
    EXPECT_EQ(Node("worker01").devices(d).separation_fault_times_size(), 0) << d;
  }
  // The job's other findings speak about the chip.
  report("progress", "train/slow/2", "SLOW_RANK", 2, v1::FAULT_LEVEL_SUB_HEALTH, v1::TRANSITION_ACTION_RAISE);
  EXPECT_EQ(Node("worker01").devices(2).health(), v1::HEALTH_SUB_HEALTHY);
  report("progress", "train/hang/24", "JOB_HANG", 3, v1::FAULT_LEVEL_SEPARATE, v1::TRANSITION_ACTION_RAISE);
  EXPECT_EQ(Node("worker01").devices(3).health(), v1::HEALTH_UNHEALTHY);
  EXPECT_EQ(Node("worker01").node().worst_level(), v1::FAULT_LEVEL_SEPARATE);
  clock_.Advance(40s);
  advance();
  EXPECT_EQ(Node("worker01").devices(3).separation_fault_times_size(), 1);
}

// The device plugin's level is the level (as the reference ClusterD takes
// it), and the fault shows both levels; another reporter's level gives way to
// the catalog's.
TEST_F(ClusterStateTest, AReportersOwnLevelWinsOnlyForReportersThatDecideLevels) {
  state_->set_reporter_levels({"ascend-device-plugin"});
  Hello(MakeHello("worker01", 1));
  auto raise = [&](const std::string& reporter, const std::string& id, v1::FaultLevel level) {
    v1::ReportRequest r;
    r.set_reporter(reporter);
    r.set_id(id);
    r.set_node("worker01");
    r.set_device_id(2);
    r.set_code("81078603");  // NOT_HANDLE in the built-in catalog
    r.set_level(level);
    r.set_action(v1::TRANSITION_ACTION_RAISE);
    v1::Fault f;
    EXPECT_TRUE(Commit([&](Mutation* m) -> Status {
                  auto resp = state_->ApplyReport(r, m);
                  if (!resp.ok()) return resp.status();
                  f = resp->fault();
                  return Status::Ok();
                }).ok());
    return f;
  };
  v1::Fault f = raise("ascend-device-plugin", "worker01/2/81078603", v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(f.level(), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(f.reported_level(), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(f.catalog_level(), v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_EQ(f.level_source(), "reporter");
  EXPECT_EQ(Node("worker01").devices(2).health(), v1::HEALTH_UNHEALTHY);
  // The plugin lowers it (its escalation undone): the record follows.
  f = raise("ascend-device-plugin", "worker01/2/81078603", v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_EQ(f.level(), v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_EQ(f.level_source(), "");  // both agree: nothing to show
  EXPECT_EQ(f.reported_level(), v1::FAULT_LEVEL_UNSPECIFIED);
  // Any other reporter: the catalog's level, and both shown.
  f = raise("npd", "disk", v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(f.level(), v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_EQ(f.reported_level(), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(f.level_source(), "catalog");
}

// The separation policy (MindCluster's defaults: 3 counted faults within 24 h,
// settle 30 s, released after 48 h fault-free): counted in the device
// record, separated with an event, kept across a restart, released by itself.
TEST_F(ClusterStateTest, SeparationPolicySeparatesKeepsAcrossRestartAndReleases) {
  Hello(MakeHello("worker01", 1));
  uint64_t seq = 0;
  auto advance = [&] { return Run(*separation_); };
  auto occurrence = [&](uint32_t device, const std::string& code) {
    ASSERT_TRUE(Transition("worker01", MakeTransition(1, ++seq, true, device, code)).ok());
    clock_.Advance(1s);
    ASSERT_TRUE(Transition("worker01", MakeTransition(1, ++seq, false, device, code)).ok());
  };
  // A SUB_HEALTH fault does not count; a RESTART_BUSINESS one does, after its settle time.
  occurrence(3, "80818C06");
  occurrence(3, "80E01801");
  const TimePoint settles = advance();
  EXPECT_EQ(settles, clock_.Now() - 1s + 30s);
  EXPECT_EQ(Node("worker01").devices(3).separation_fault_times_size(), 0);
  clock_.Advance(40s);
  advance();
  EXPECT_EQ(Node("worker01").devices(3).separation_fault_times_size(), 1);
  clock_.Advance(1h);
  occurrence(3, "80E01801");
  clock_.Advance(40s);
  advance();
  v1::Device d = Node("worker01").devices(3);
  EXPECT_EQ(d.separation_fault_times_size(), 2);
  EXPECT_FALSE(d.separated());
  events_.clear();
  clock_.Advance(1h);
  occurrence(3, "80E01801");
  clock_.Advance(40s);
  advance();
  d = Node("worker01").devices(3);
  ASSERT_TRUE(d.separated());
  EXPECT_EQ(d.separation_reason(), "3 faults within 24h");
  EXPECT_EQ(FromTimestamp(d.separated_time()), clock_.Now());
  const v1::Event* separated = nullptr;
  for (const auto& ev : events_) {
    if (ev.type() == v1::EVENT_TYPE_DEVICE_SEPARATED) separated = &ev;
  }
  ASSERT_NE(separated, nullptr);
  EXPECT_EQ(separated->device_id(), 3u);
  EXPECT_EQ(separated->actor(), "clusterd");
  EXPECT_TRUE(separated->device_info().separated());
  EXPECT_EQ(separated->device_info().revision(), separated->revision());
  EXPECT_FALSE(Node("worker01").devices(2).separated());

  // A restart keeps the separation and its clock.
  Open();
  d = Node("worker01").devices(3);
  ASSERT_TRUE(d.separated());
  EXPECT_EQ(d.separation_reason(), "3 faults within 24h");
  // 47 h later a fault comes back: the fault-free time starts again at its clear.
  clock_.Advance(47h);
  advance();
  Hello(MakeHello("worker01", 2), 2);
  seq = 0;
  ASSERT_TRUE(Commit([&](Mutation* m) {
                return state_->ApplyTransition("worker01", 2, MakeTransition(2, ++seq, true, 3, "80E01801"), m);
              }).ok());
  clock_.Advance(2h);
  EXPECT_TRUE(Node("worker01").devices(3).separated()) << "a fault still active is not fault-free";
  advance();
  ASSERT_TRUE(Commit([&](Mutation* m) {
                return state_->ApplyTransition("worker01", 2, MakeTransition(2, ++seq, false, 3, "80E01801"), m);
              }).ok());
  const TimePoint cleared = clock_.Now();
  EXPECT_EQ(FromTimestamp(Node("worker01").devices(3).last_fault_time()), cleared);
  Open();  // the last fault's time is kept too
  events_.clear();
  clock_.Advance(47h);
  EXPECT_EQ(advance(), cleared + 48h);
  EXPECT_TRUE(Node("worker01").devices(3).separated());
  clock_.Set(cleared + 48h);
  advance();
  d = Node("worker01").devices(3);
  EXPECT_FALSE(d.separated());
  EXPECT_EQ(d.separation_reason(), "");
  EXPECT_EQ(d.separation_fault_times_size(), 0);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].type(), v1::EVENT_TYPE_DEVICE_RELEASED);
  EXPECT_EQ(events_[0].reason(), "fault-free for 48h");
  EXPECT_EQ(advance(), TimePoint::max());
}

// The nodes of one job on different driver versions (each alone in its
// pool, so no pool drift): both named, as the job's; cleared with the job.
TEST_F(ClusterStateTest, ChainDriftBetweenTheNodesOfOneJob) {
  const auto& with_driver = HelloWithDriver;
  Hello(with_driver("g1", "24.1.rc3", "910B3"));
  Hello(with_driver("g2", "24.1.rc2", "910B4"));
  auto advance = [&] {
    clock_.Advance(std::chrono::seconds(2));
    Run(*drift_);
  };
  auto drift = [&] { return ActiveDrift(*state_, {"g1", "g2"}, /*ids=*/true); };
  advance();
  EXPECT_TRUE(drift().empty());
  ASSERT_TRUE(Commit([&](Mutation* m) {
                return state_->ApplyCreateJob(MakeJob("llm", {{"g1", 0}, {"g1", 1}, {"g2", 0}}), m);
              }).ok());
  advance();
  EXPECT_EQ(drift(),
            (std::vector<std::string>{
                "g1/driver@llm: driver 24.1.rc3 while other nodes of job llm run 24.1.rc2 (no majority among 2: the "
                "job's finding, not this node's)",
                "g2/driver@llm: driver 24.1.rc2 while other nodes of job llm run 24.1.rc3 (no majority among 2: the "
                "job's finding, not this node's)"}));
  // Neither node is marked for it: a tie names no culprit.
  EXPECT_EQ(Node("g1").node().health(), v1::HEALTH_HEALTHY);
  EXPECT_EQ(Node("g2").node().health(), v1::HEALTH_HEALTHY);
  // A third node on g1's version makes a majority: g2 alone is the odd one,
  // at SUB_HEALTH, and g1 is cleared.
  Hello(with_driver("g3", "24.1.rc3", "910B5"));
  ASSERT_TRUE(Commit([&](Mutation* m) {
                return state_->ApplyUpdateJob(MakeJob("llm", {{"g1", 0}, {"g2", 0}, {"g3", 0}}), m);
              }).ok());
  advance();
  EXPECT_EQ(drift(),
            (std::vector<std::string>{"g2/driver@llm: driver 24.1.rc2 where 2 of 3 nodes of job llm run 24.1.rc3"}));
  EXPECT_EQ(Node("g1").node().health(), v1::HEALTH_HEALTHY);
  EXPECT_EQ(Node("g2").node().health(), v1::HEALTH_SUB_HEALTHY);
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyDeleteJob("llm", m); }).ok());
  advance();
  EXPECT_TRUE(drift().empty());
}

// A node goes back into service only with a healthy software chain
// (release_chain_check): the automatic release of a separated chip waits
// while a link is BROKEN; an operator's UncordonNode is refused only with
// "always" (AdminService checks ChainAllowsRelease unless forced).
TEST_F(ClusterStateTest, AReleaseWaitsForAHealthySoftwareChain) {
  v1::Hello h = MakeHello("worker01", 1);
  auto* link = h.mutable_inventory()->add_chain();
  link->set_name("device_plugin");
  link->set_state(v1::CHAIN_LINK_STATE_BROKEN);
  link->set_evidence("no socket under /var/lib/kubelet/device-plugins");
  link->set_code("NODE_CHAIN_DEVICE_PLUGIN_NOT_REGISTERED");
  Hello(h);
  EXPECT_TRUE(state_->ChainAllowsRelease("worker01", false).ok()) << "automatic: an operator decides";
  Status st = state_->ChainAllowsRelease("worker01", true);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("link device_plugin BROKEN (no socket under /var/lib/kubelet/device-plugins)"),
            std::string::npos)
      << st.message();
  state_->set_release_chain_check(ClusterState::ReleaseChainCheck::kAlways);
  EXPECT_NE(state_->ChainAllowsRelease("worker01", false).message().find("force"), std::string::npos);
  state_->set_release_chain_check(ClusterState::ReleaseChainCheck::kNever);
  EXPECT_TRUE(state_->ChainAllowsRelease("worker01", true).ok());
  state_->set_release_chain_check(ClusterState::ReleaseChainCheck::kAutomatic);

  uint64_t seq = 0;
  auto advance = [&] { return Run(*separation_); };
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Transition("worker01", MakeTransition(1, ++seq, true, 0, "80E01801")).ok());
    ASSERT_TRUE(Transition("worker01", MakeTransition(1, ++seq, false, 0, "80E01801")).ok());
    clock_.Advance(31s);
    advance();
  }
  ASSERT_TRUE(Node("worker01").devices(0).separated());
  clock_.Advance(49h);
  EXPECT_EQ(advance(), clock_.Now() + 60s);  // asked again in a minute
  EXPECT_TRUE(Node("worker01").devices(0).separated()) << "released onto a broken chain";
  // The device plugin registered; the agent's next hello says so.
  link->set_state(v1::CHAIN_LINK_STATE_OK);
  link->clear_code();
  Hello(h, 2);
  clock_.Advance(60s);
  advance();
  EXPECT_FALSE(Node("worker01").devices(0).separated());
}

// An operator's policy (the mindcluster integration's clusterd-config-cm) from
// now on: counts and separations kept, the new threshold, window and release
// time at the next tick; one out of bounds changes nothing.
TEST_F(ClusterStateTest, ChangedSeparationPolicyAppliesAndKeepsWhatWasCounted) {
  Hello(MakeHello("worker01", 1));
  uint64_t seq = 0;
  auto advance = [&] { return Run(*separation_); };
  auto occurrence = [&](uint32_t device) {
    ASSERT_TRUE(Transition("worker01", MakeTransition(1, ++seq, true, device, "80E01801")).ok());
    clock_.Advance(1s);
    ASSERT_TRUE(Transition("worker01", MakeTransition(1, ++seq, false, device, "80E01801")).ok());
  };
  occurrence(3);
  clock_.Advance(40s);
  advance();
  ASSERT_EQ(Node("worker01").devices(3).separation_fault_times_size(), 1);

  SeparationPolicy bad;
  bad.threshold = 0;
  EXPECT_EQ(separation_->ChangePolicy(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(separation_->policy().threshold, 3u);

  SeparationPolicy p;
  p.threshold = 2;
  p.window = std::chrono::hours(48);
  p.release_after = std::chrono::hours(1);
  ASSERT_TRUE(separation_->ChangePolicy(p).ok());
  // The count made under the old policy is kept: one more separates.
  clock_.Advance(30h);  // past the old 24 h window, within the new 48 h
  occurrence(3);
  clock_.Advance(40s);
  advance();
  v1::Device d = Node("worker01").devices(3);
  ASSERT_TRUE(d.separated());
  EXPECT_EQ(d.separation_reason(), "2 faults within 48h");
  // The new release time: fault-free for an hour.
  clock_.Advance(61min);
  advance();
  EXPECT_FALSE(Node("worker01").devices(3).separated());
}

TEST_F(ClusterStateTest, OperatorReleasesASeparatedDevice) {
  Hello(MakeHello("worker01", 1));
  uint64_t seq = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Transition("worker01", MakeTransition(1, ++seq, true, 5, "80E01801")).ok());
    ASSERT_TRUE(Transition("worker01", MakeTransition(1, ++seq, false, 5, "80E01801")).ok());
    clock_.Advance(31s);
    Run(*separation_);
  }
  ASSERT_TRUE(Node("worker01").devices(5).separated());
  auto release = [&](const std::string& node, uint32_t device, const std::string& reason) {
    return Commit([&](Mutation* m) { return separation_->ReleaseDevice(*state_, node, device, "alice", reason, m); });
  };
  const uint64_t before = state_->revision();
  EXPECT_EQ(release("worker01", 5, "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(release("worker09", 5, "replaced").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(release("worker01", 99, "replaced").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(state_->revision(), before);
  events_.clear();
  auto d = release("worker01", 5, "card reseated");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->separated());
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].type(), v1::EVENT_TYPE_DEVICE_RELEASED);
  EXPECT_EQ(events_[0].actor(), "alice");
  EXPECT_EQ(events_[0].reason(), "card reseated");
  EXPECT_FALSE(events_[0].device_info().separated());
  // Released: idempotent, and the count starts again from zero.
  ASSERT_TRUE(release("worker01", 5, "again").ok());
  EXPECT_EQ(events_.size(), 1u);
  Open();
  EXPECT_FALSE(Node("worker01").devices(5).separated());
  EXPECT_EQ(Node("worker01").devices(5).separation_fault_times_size(), 0);
}

// A node an integration knows from the Ascend device plugin, where no agent
// runs: registered with its devices, never lost, and an agent's once one
// says hello; an agent's node is not taken over.
TEST_F(ClusterStateTest, IntegrationRegistersANodeWithoutAgent) {
  v1::Inventory inv;
  for (uint32_t id : {0u, 1u, 2u}) {
    auto* d = inv.add_devices();
    d->set_id(id);
    d->set_vendor("Huawei");
    d->set_model("Ascend910");
  }
  auto reg = [&](const std::string& node, const v1::Inventory& i) {
    return Commit([&](Mutation* m) { return state_->ApplyRegisterNode(node, i, "mindcluster", m); });
  };
  auto n = reg("npu07", inv);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->registered_by(), "mindcluster");
  EXPECT_FALSE(n->connected());
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].type(), v1::EVENT_TYPE_NODE_REGISTERED);
  EXPECT_EQ(events_[0].actor(), "mindcluster");
  EXPECT_EQ(Node("npu07").devices_size(), 3);
  // The same again writes nothing; a bad one changes nothing.
  const uint64_t before = state_->revision();
  ASSERT_TRUE(reg("npu07", inv).ok());
  EXPECT_EQ(state_->revision(), before);
  EXPECT_EQ(reg("bad name!", inv).status().code(), StatusCode::kInvalidArgument);
  v1::Inventory twice = inv;
  twice.add_devices()->set_id(1);
  EXPECT_EQ(reg("npu07", twice).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state_->revision(), before);
  // Its faults are raised like any node's (an external reporter's).
  v1::ReportRequest r;
  r.set_reporter("ascend-device-plugin");
  r.set_id("npu07/1/80E01801");
  r.set_node("npu07");
  r.set_device_id(1);
  r.set_code("80E01801");
  r.set_action(v1::TRANSITION_ACTION_RAISE);
  ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyReport(r, m); }).ok());
  EXPECT_EQ(Node("npu07").devices(1).health(), v1::HEALTH_UNHEALTHY);
  // No heartbeat is expected: never lost, across a restart too.
  clock_.Advance(1h);
  Commit([&](Mutation* m) { return state_->CheckLiveness(10s, m); });
  Open();
  clock_.Advance(1h);
  Commit([&](Mutation* m) { return state_->CheckLiveness(10s, m); });
  EXPECT_NE(Node("npu07").node().health(), v1::HEALTH_UNKNOWN);
  const v1::GetNodeResponse after = Node("npu07");
  for (const auto& f : after.active_faults()) EXPECT_NE(f.source(), v1::FAULT_SOURCE_HEARTBEAT);
  // An agent says hello: its node from then on, watched for heartbeats.
  Hello(MakeHello("npu07", 1));
  EXPECT_EQ(Node("npu07").node().registered_by(), "");
  EXPECT_EQ(Node("npu07").devices_size(), 8);
  auto kept = reg("npu07", inv);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->registered_by(), "");
  EXPECT_TRUE(kept->connected());
}

}  // namespace
}  // namespace clusterd
