// The writer's rules as clusterd runs them: the real rule set
// (MakeWriterRules from a configuration, then the recovery Coordinator, in
// the composition root's order) attached to a real ClusterState and run by a
// real Engine, stepped by hand on a FakeClock. Time passes only when the test
// moves the clock to the deadline the Engine reports: a separation due after
// its settle time, a public fault cleared after its minimum visibility, a
// chain drift fault, none of them waited for.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/engine/engine.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/engine/writer_rules.h"
#include "clusterd/recovery/coordinator/coordinator.h"
#include "clusterd/state/rules.h"
#include "clusterd/storage/memory_store.h"
#include "common/metrics.h"
#include "state_fixtures.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;
using testing::MakeHello;
using testing::MakeTransition;

class NoActuator final : public Actuator {
 public:
  void Execute(ActionRequest req, Done) override { requests.push_back(std::move(req)); }
  void Stop() override {}
  std::string_view kind() const override { return "test"; }
  std::vector<ActionRequest> requests;
};

class WriterRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = storage::MemoryStore::Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    // As the composition root does (clusterd/server/server.cc): the rules
    // from the configuration, attached before the load.
    auto rules = MakeWriterRules(config_);
    ASSERT_TRUE(rules.ok()) << rules.status().ToString();
    rules_ = std::move(*rules);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    rules_.AttachTo(state_.get());
    ASSERT_TRUE(state_->Load().ok());
    hub_ = std::make_unique<WatchHub>(store_.get(), 1024);
    hub_->Init(state_->revision());
    coordinator_ = std::make_unique<Coordinator>(&agents_, &actuator_, &clock_, CoordinatorOptions{}, &metrics_);
    EngineOptions options;
    options.node_grace = std::chrono::hours(24 * 365);  // no node is lost while the clock jumps
    options.commit_delay = 0ns;                         // time moves only when the test moves it
    Engine::Hooks hooks;
    hooks.rules = rules_.Ordered(coordinator_.get());
    engine_ =
        std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), &clock_, options, &metrics_, std::move(hooks));
  }

  void TearDown() override { engine_.reset(); }

  // One change through the writer, stepped until durable; returns the
  // writer's next deadline once it is idle.
  template <typename Fn>
  TimePoint Write(Fn fn) {
    EXPECT_TRUE(engine_->Submit([fn](ClusterState& s, Mutation* m) -> Engine::Done {
      EXPECT_TRUE(fn(s, m).ok());
      return nullptr;
    }));
    return Idle();
  }
  // Steps until nothing is queued or gathering; the deadline it then reports.
  TimePoint Idle() {
    for (;;) {
      const Engine::StepResult r = engine_->Step();
      EXPECT_FALSE(r.held);
      if (r.gathering) {
        clock_.Set(r.next);
      } else if (engine_->queue_depth() == 0) {
        return r.next;
      }
    }
  }
  // Moves the clock to `t` and lets the writer run what is due.
  TimePoint RunAt(TimePoint t) {
    clock_.Set(t);
    return Idle();
  }

  v1::Device Device(const std::string& node, uint32_t id) {
    return state_->Read([&](const StateView& v) {
      v1::Node n;
      std::vector<v1::Device> devices;
      EXPECT_TRUE(v.DescribeNode(node, &n, &devices));
      for (const auto& d : devices) {
        if (d.id() == id) return d;
      }
      ADD_FAILURE() << node << " has no device " << id;
      return v1::Device();
    });
  }
  // The faults on `node`: "<code> <state> <clear reason>".
  std::vector<std::string> Faults(const std::string& node, const std::string& code) {
    return state_->Read([&](const StateView& v) {
      std::vector<std::string> out;
      for (const auto& [key, f] : v.faults()) {
        if (f.node() != node || f.code() != code) continue;
        out.push_back(f.code() + (f.state() == v1::FAULT_STATE_ACTIVE ? " active" : " cleared") +
                      (f.clear_reason().empty() ? "" : " " + f.clear_reason()));
      }
      return out;
    });
  }
  std::vector<v1::Event> Events(v1::EventType type) { return testing::StoredEventsOfType(*store_, type); }

  ClusterdConfig config_;
  FakeClock clock_;
  Catalog catalog_ = Catalog::Default();
  MetricsRegistry metrics_;
  std::unique_ptr<storage::Store> store_;
  WriterRules rules_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<WatchHub> hub_;
  JobAgentHub agents_;
  NoActuator actuator_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(WriterRulesTest, TheEngineRunsThePoliciesThenTheCoordinatorInTheRootsOrder) {
  std::vector<std::string> names;
  for (WriterRule* r : rules_.Ordered(coordinator_.get())) names.emplace_back(r->name());
  EXPECT_EQ(names, (std::vector<std::string>{"auto-clear", "separation", "chain-drift", "repeat-offenders", "incidents",
                                             "recoveries"}));
  EXPECT_NE(state_->Attached<SeparationRule>(), nullptr);
  EXPECT_EQ(state_->Attached<SeparationRule>()->policy().threshold, config_.separation_threshold);
}

// The separation policy at its defaults (3 faults within 24 h, each counted
// after a 30 s settle time): the third occurrence separates the chip when
// its settle time is over, and the Engine's next deadline is exactly then.
TEST_F(WriterRulesTest, ASeparationIsDueWhenItsSettleTimeIsOver) {
  Write([](ClusterState& s, Mutation* m) { return s.ApplyHello(MakeHello("worker01", 1), 1, m).status(); });
  uint64_t seq = 0;
  auto occurrence = [&] {
    Write([&](ClusterState& s, Mutation* m) {
      return s.ApplyTransition("worker01", 1, MakeTransition(1, ++seq, true, 5, "80E01801"), m).status();
    });
    return Write([&](ClusterState& s, Mutation* m) {
      return s.ApplyTransition("worker01", 1, MakeTransition(1, ++seq, false, 5, "80E01801"), m).status();
    });
  };
  for (int i = 0; i < 2; ++i) {
    const TimePoint due = occurrence();
    EXPECT_EQ(due, clock_.Now() + config_.separation_settle);
    RunAt(due);
  }
  EXPECT_EQ(Device("worker01", 5).separation_fault_times_size(), 2);
  const TimePoint raised_at = clock_.Now();
  const TimePoint due = occurrence();
  ASSERT_EQ(due, raised_at + config_.separation_settle);
  RunAt(due - 1ms);  // not yet: nothing is due before
  EXPECT_FALSE(Device("worker01", 5).separated());
  EXPECT_TRUE(Events(v1::EVENT_TYPE_DEVICE_SEPARATED).empty());
  RunAt(due);
  const v1::Device d = Device("worker01", 5);
  EXPECT_TRUE(d.separated());
  EXPECT_EQ(d.separation_reason(), "3 faults within 24h");
  const auto separated = Events(v1::EVENT_TYPE_DEVICE_SEPARATED);
  ASSERT_EQ(separated.size(), 1u);
  EXPECT_EQ(separated[0].actor(), "clusterd");
  EXPECT_EQ(separated[0].device_id(), 5u);
  // Released once fault-free for 48 h (since the last fault), at a
  // deadline the writer reports (counts leaving the window come first).
  for (int i = 0; i < 10 && Device("worker01", 5).separated(); ++i) {
    const TimePoint next = Idle();
    ASSERT_NE(next, TimePoint::max());
    RunAt(next);
  }
  EXPECT_FALSE(Device("worker01", 5).separated());
  EXPECT_EQ(clock_.Now(), raised_at + std::chrono::hours(48));
  EXPECT_EQ(Events(v1::EVENT_TYPE_DEVICE_RELEASED).size(), 1u);
}

// A public fault asserted once is cleared after its minimum visibility by
// the auto-clear rule, at the deadline the Engine reports.
TEST_F(WriterRulesTest, APublicFaultAssertedOnceClearsAfterItsMinimumVisibility) {
  Write([](ClusterState& s, Mutation* m) { return s.ApplyHello(MakeHello("worker01", 1), 1, m).status(); });
  PubFaultPlan plan;
  plan.reporter = "pubfault/pingmesh";
  PlannedPubFault f;
  f.node = "worker01";
  f.device = 2;
  f.fault_id = "ping-1";
  f.code = "81078603";
  f.level = v1::FAULT_LEVEL_SUB_HEALTH;
  f.assertion = PlannedPubFault::Assertion::kOnce;
  plan.faults.push_back(f);
  PubFaultOptions options;
  options.min_visible = 5s;
  const TimePoint raised_at = clock_.Now();
  const TimePoint due =
      Write([&](ClusterState& s, Mutation* m) { return s.ApplyPublicFaults(plan, options, m).status(); });
  EXPECT_EQ(due, raised_at + 5s);
  EXPECT_EQ(Faults("worker01", "81078603"), std::vector<std::string>{"81078603 active"});
  RunAt(due);
  EXPECT_EQ(Faults("worker01", "81078603"),
            std::vector<std::string>{"81078603 cleared cleared by pubfault/pingmesh after its minimum visibility"});
}

// Chain drift: three nodes of a pool run one driver and a fourth another;
// the writer raises CHAIN_VERSION_DRIFT on the fourth (reporter
// clusterd-chain), and clears it once its driver agrees again.
TEST_F(WriterRulesTest, ADriverOffThePoolsMajorityIsAChainDriftFault) {
  auto hello = [](const std::string& node, const std::string& driver, uint64_t epoch) {
    v1::Hello h = MakeHello(node, epoch, 2);
    auto* l = h.mutable_inventory()->add_chain();
    l->set_name("driver");
    l->set_state(v1::CHAIN_LINK_STATE_OK);
    l->set_version(driver);
    return h;
  };
  uint64_t session = 0;
  for (const char* n : {"n1", "n2", "n3"}) {
    ++session;
    Write([&](ClusterState& s, Mutation* m) { return s.ApplyHello(hello(n, "24.1.rc3", 1), session, m).status(); });
  }
  ++session;
  Write([&](ClusterState& s, Mutation* m) { return s.ApplyHello(hello("n4", "24.1.rc2", 1), session, m).status(); });
  // At most once a second: the next run is due a second after the last.
  RunAt(clock_.Now() + 1s);
  EXPECT_EQ(Faults("n4", "CHAIN_VERSION_DRIFT"), std::vector<std::string>{"CHAIN_VERSION_DRIFT active"});
  EXPECT_TRUE(Faults("n1", "CHAIN_VERSION_DRIFT").empty());
  const auto raised = Events(v1::EVENT_TYPE_FAULT_RAISED);
  ASSERT_FALSE(raised.empty());
  EXPECT_EQ(raised.back().fault().reporter(), "clusterd-chain");
  // n4's agent comes back with the pool's driver.
  ++session;
  Write([&](ClusterState& s, Mutation* m) { return s.ApplyHello(hello("n4", "24.1.rc3", 2), session, m).status(); });
  RunAt(clock_.Now() + 1s);
  EXPECT_EQ(Faults("n4", "CHAIN_VERSION_DRIFT"),
            std::vector<std::string>{"CHAIN_VERSION_DRIFT cleared cleared by clusterd-chain"});
}

// A policy out of bounds in the configuration is refused before anything
// runs, naming the setting.
TEST(WriterRulesConfigTest, ABadSeparationPolicyOrDriftLevelIsRefused) {
  ClusterdConfig cfg;
  cfg.separation_threshold = 0;
  EXPECT_EQ(MakeWriterRules(cfg).status().code(), StatusCode::kInvalidArgument);
  cfg = ClusterdConfig{};
  cfg.chain_drift_levels = {"910B3=LOUD"};
  EXPECT_EQ(MakeWriterRules(cfg).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace clusterd
