// The writer's rules as clusterd runs them: the real rule set
// (MakeWriterRules from a configuration, then the recovery Coordinator, in
// the composition root's order) attached to a real ClusterState and run by a
// real Engine, stepped by hand on a FakeClock. Time passes only when the test
// moves the clock to the deadline the Engine reports: a separation due after
// its settle time, a public fault cleared after its minimum visibility, a
// chain drift fault, none of them waited for.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/engine/engine.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/engine/writer_rules.h"
#include "clusterd/recovery/coordinator/coordinator.h"
#include "clusterd/state/rules.h"
#include "clusterd/state/validation_rule.h"
#include "clusterd/storage/memory_store.h"
#include "common/metrics.h"
#include "common/time_proto.h"
#include "test/support/fakes/fake_actuator.h"
#include "test/support/state/state_fixtures.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;
using testing::MakeHello;
using testing::MakeTransition;

using testing::FakeActuator;

class WriterRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = storage::MemoryStore::Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    Open();
  }

  // Builds the rules, the state (loaded from store_), the coordinator and
  // the Engine: a ClusterD starting on the store as it is.
  void Open() {
    engine_.reset();
    coordinator_.reset();
    metrics_ = std::make_unique<MetricsRegistry>();
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
    coordinator_ = std::make_unique<Coordinator>(&agents_, &actuator_, &clock_, CoordinatorOptions{}, metrics_.get());
    EngineOptions options;
    options.node_grace = std::chrono::hours(24 * 365);  // no node is lost while the clock jumps
    options.commit_delay = 0ns;                         // time moves only when the test moves it
    Engine::Hooks hooks;
    hooks.rules = rules_.Ordered(coordinator_.get());
    engine_ = std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), &clock_, options, metrics_.get(),
                                       std::move(hooks));
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
  std::unique_ptr<MetricsRegistry> metrics_;  // new with each Open (a restart)
  std::unique_ptr<storage::Store> store_;
  WriterRules rules_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<WatchHub> hub_;
  JobAgentHub agents_;
  FakeActuator actuator_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(WriterRulesTest, TheEngineRunsThePoliciesThenTheCoordinatorInTheRootsOrder) {
  std::vector<std::string> names;
  for (WriterRule* r : rules_.Ordered(coordinator_.get())) names.emplace_back(r->name());
  EXPECT_EQ(names, (std::vector<std::string>{"auto-clear", "separation", "chain-drift", "repeat-offenders",
                                             "validation", "pingmesh", "incidents", "evidence", "recoveries"}));
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

// ---- Return to service, proven (state/validation_rule.h) ----

class ValidationTest : public WriterRulesTest {
 protected:
  void SetUp() override {
    config_.validation_enabled = true;
    config_.validation_max_per_node = 1;
    config_.validation_max_in_flight = 2;
    WriterRulesTest::SetUp();
    AttachOutbox();
  }
  void AttachOutbox() {
    rule()->set_outbox(&outbox_);
    for (const std::string node : {"worker01", "worker02", "worker03"}) {
      outbox_.Attach(node, Session(node), [this, node](const v1::ConnectResponse& msg) {
        ASSERT_TRUE(msg.has_validation());
        EXPECT_EQ(msg.validation().node(), node);
        requests_.push_back(msg.validation());
      });
    }
  }
  static uint64_t Session(const std::string& node) { return node == "worker01" ? 1 : node == "worker02" ? 2 : 3; }
  ValidationRule* rule() { return state_->Attached<ValidationRule>(); }

  void Hello(const std::string& node, uint64_t session) {
    Write([&](ClusterState& s, Mutation* m) { return s.ApplyHello(MakeHello(node, 1), session, m).status(); });
  }
  // A fault raised on the device, the device isolated by a recovery, the
  // fault cleared.
  void IsolateAndClear(const std::string& node, uint32_t device) {
    Write([&](ClusterState& s, Mutation* m) {
      return s.ApplyTransition(node, Session(node), MakeTransition(1, ++seq_[node], true, device, "80E01801"), m)
          .status();
    });
    Write([&](ClusterState& s, Mutation* m) { return s.SetIsolated(node, device, "recovery r1", m); });
    Write([&](ClusterState& s, Mutation* m) {
      return s.ApplyTransition(node, Session(node), MakeTransition(1, ++seq_[node], false, device, "80E01801"), m)
          .status();
    });
  }
  Status Result(const std::string& from, const std::string& id, bool passed, const std::string& evidence = "") {
    v1::ValidationResult r;
    r.set_validation_id(id);
    r.set_passed(passed);
    auto* c = r.add_checks();
    c->set_name("hccl-loopback");
    c->set_passed(passed);
    c->set_exit_code(passed ? 0 : 3);
    c->set_evidence(evidence);
    Status out = Status::Ok();
    EXPECT_TRUE(engine_->Submit([&](ClusterState& s, Mutation* m) -> Engine::Done {
      out = rule()->ApplyResult(s, from, r, m).status();
      return nullptr;
    }));
    Idle();
    return out;
  }
  v1::Validation Last() {
    return state_->Read([this](const StateView&) {
      v1::ListValidationsRequest req;
      auto list = rule()->List(req);
      EXPECT_TRUE(list.ok());
      return list.ok() && list->validations_size() > 0 ? list->validations(0) : v1::Validation();
    });
  }
  std::vector<v1::Validation> All() {
    return state_->Read([this](const StateView&) {
      auto list = rule()->List(v1::ListValidationsRequest());
      std::vector<v1::Validation> out;
      if (list.ok()) out.assign(list->validations().begin(), list->validations().end());
      return out;
    });
  }

  AgentOutbox outbox_;
  std::vector<v1::ValidationRequest> requests_;
  std::map<std::string, uint64_t> seq_;
};

TEST_F(ValidationTest, AClearedDeviceIsValidatedThenReturnsToService) {
  Hello("worker01", 1);
  IsolateAndClear("worker01", 3);
  // VALIDATING: still isolated, asked of the node's agent.
  v1::Device d = Device("worker01", 3);
  EXPECT_TRUE(d.isolated());
  EXPECT_EQ(d.service_phase(), v1::SERVICE_PHASE_VALIDATING);
  ASSERT_EQ(requests_.size(), 1u);
  const std::string id = requests_[0].validation_id();
  EXPECT_EQ(d.validation_id(), id);
  EXPECT_EQ(requests_[0].device_ids(0), 3u);
  EXPECT_EQ(Last().state(), v1::VALIDATION_STATE_RUNNING);
  EXPECT_EQ(Last().trigger(), "fault-cleared");
  // Pass: back in service, with the events; whoever follows the nodes by
  // revision (Volcano's cluster-info lists) sees the change.
  const uint64_t before = state_->Read([](const StateView& s) { return s.revision(); });
  ASSERT_TRUE(Result("worker01", id, true).ok());
  EXPECT_EQ(state_->Read([&](const StateView& s) { return s.NodesChangedAfter(before); }),
            std::set<std::string>{"worker01"});
  d = Device("worker01", 3);
  EXPECT_FALSE(d.isolated());
  EXPECT_EQ(d.service_phase(), v1::SERVICE_PHASE_UNSPECIFIED);
  EXPECT_TRUE(d.has_returned_time());
  EXPECT_EQ(Last().state(), v1::VALIDATION_STATE_PASSED);
  EXPECT_EQ(Events(v1::EVENT_TYPE_VALIDATION_STARTED).size(), 2u);  // queued, asked
  const auto finished = Events(v1::EVENT_TYPE_VALIDATION_FINISHED);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].validation().state(), v1::VALIDATION_STATE_PASSED);
  // A result sent again (after a reconnect) changes nothing.
  EXPECT_TRUE(Result("worker01", id, false).ok());
  EXPECT_EQ(Last().state(), v1::VALIDATION_STATE_PASSED);
}

TEST_F(ValidationTest, AFailedValidationKeepsTheDeviceOutWithItsEvidenceAndCountsAFlap) {
  Hello("worker01", 1);
  IsolateAndClear("worker01", 3);
  ASSERT_EQ(requests_.size(), 1u);
  ASSERT_TRUE(Result("worker01", requests_[0].validation_id(), false, std::string(20000, 'x') + "link down").ok());
  const v1::Device d = Device("worker01", 3);
  EXPECT_TRUE(d.isolated());
  EXPECT_EQ(d.service_phase(), v1::SERVICE_PHASE_UNSPECIFIED);
  EXPECT_EQ(d.flap_times_size(), 1);
  const v1::Validation v = Last();
  EXPECT_EQ(v.state(), v1::VALIDATION_STATE_FAILED);
  EXPECT_EQ(v.message(), "hccl-loopback");
  ASSERT_EQ(v.checks_size(), 1);
  // Evidence is kept bounded: its tail.
  EXPECT_EQ(v.checks(0).evidence().size(), ValidationRule::kMaxEvidenceBytes);
  EXPECT_TRUE(v.checks(0).evidence().ends_with("link down"));
}

TEST_F(ValidationTest, ADeviceThatFailsNTimesIsHeldUntilReleasedWithForce) {
  Hello("worker01", 1);
  IsolateAndClear("worker01", 3);
  for (uint32_t i = 0; i < config_.validation_flap_limit; ++i) {
    if (i > 0) {
      Write([&](ClusterState& s, Mutation* m) {
        return rule()->Start(s, "worker01", 3u, "operator", "alice", "try again", m).status();
      });
    }
    ASSERT_EQ(requests_.size(), i + 1);
    ASSERT_TRUE(Result("worker01", requests_.back().validation_id(), false).ok());
  }
  v1::Device d = Device("worker01", 3);
  EXPECT_EQ(d.service_phase(), v1::SERVICE_PHASE_HELD);
  EXPECT_TRUE(d.isolated());
  EXPECT_NE(d.hold_reason().find("3 flaps within 1d"), std::string::npos) << d.hold_reason();
  // Held: no validation starts; only a release with force returns it.
  EXPECT_TRUE(engine_->Submit([&](ClusterState& s, Mutation* m) -> Engine::Done {
    EXPECT_EQ(rule()->Start(s, "worker01", 3u, "operator", "alice", "again", m).status().code(),
              StatusCode::kFailedPrecondition);
    return nullptr;
  }));
  Idle();
  Write([&](ClusterState& s, Mutation* m) {
    return rule()->Skip(s, "worker01", 3u, "alice", "replaced the module", m).status();
  });
  d = Device("worker01", 3);
  EXPECT_FALSE(d.isolated());
  EXPECT_EQ(d.service_phase(), v1::SERVICE_PHASE_UNSPECIFIED);
  EXPECT_EQ(d.flap_times_size(), 0);
  EXPECT_EQ(Last().state(), v1::VALIDATION_STATE_SKIPPED);
  EXPECT_EQ(Last().actor(), "alice");
}

TEST_F(ValidationTest, AReturnThatFaultsAgainIsAFlap) {
  Hello("worker01", 1);
  IsolateAndClear("worker01", 3);
  ASSERT_TRUE(Result("worker01", requests_[0].validation_id(), true).ok());
  Write([&](ClusterState& s, Mutation* m) {
    return s.ApplyTransition("worker01", 1, MakeTransition(1, ++seq_["worker01"], true, 3u, "80E01801"), m).status();
  });
  EXPECT_EQ(Device("worker01", 3).flap_times_size(), 1);
  EXPECT_FALSE(Device("worker01", 3).has_returned_time());
}

TEST_F(ValidationTest, ValidationsAreBoundedPerNodeAndInAllAndTheRestQueueInOrder) {
  Hello("worker01", 1);
  Hello("worker02", 2);
  Hello("worker03", 3);
  IsolateAndClear("worker01", 1);
  IsolateAndClear("worker01", 2);  // one per node: queued
  IsolateAndClear("worker02", 1);
  IsolateAndClear("worker03", 1);  // two in all: queued
  ASSERT_EQ(requests_.size(), 2u);
  EXPECT_EQ(requests_[0].node(), "worker01");
  EXPECT_EQ(requests_[1].node(), "worker02");
  size_t queued = 0;
  for (const auto& v : All()) queued += v.state() == v1::VALIDATION_STATE_QUEUED ? 1 : 0;
  EXPECT_EQ(queued, 2u);
  // A slot frees: the oldest queued one starts (worker01's second device).
  ASSERT_TRUE(Result("worker01", requests_[0].validation_id(), true).ok());
  ASSERT_EQ(requests_.size(), 3u);
  EXPECT_EQ(requests_[2].node(), "worker01");
  EXPECT_EQ(requests_[2].device_ids(0), 2u);
}

TEST_F(ValidationTest, AValidationWithNoResultTimesOutAndFails) {
  Hello("worker01", 1);
  IsolateAndClear("worker01", 3);
  const TimePoint deadline = FromTimestamp(Last().deadline());
  EXPECT_EQ(deadline, clock_.Now() + config_.validation_timeout);
  RunAt(deadline);
  EXPECT_EQ(Last().state(), v1::VALIDATION_STATE_FAILED);
  EXPECT_NE(Last().message().find("timed out"), std::string::npos);
  EXPECT_TRUE(Device("worker01", 3).isolated());
}

TEST_F(ValidationTest, AValidationWhoseAgentIsLostFails) {
  Hello("worker01", 1);
  IsolateAndClear("worker01", 3);
  ASSERT_EQ(Last().state(), v1::VALIDATION_STATE_RUNNING);
  // The agent falls silent past the node grace: HEARTBEAT_LOST, and the
  // validation it was running fails; the device stays out.
  clock_.Set(clock_.Now() + std::chrono::seconds(11));
  Write([](ClusterState& s, Mutation* m) {
    s.CheckLiveness(std::chrono::seconds(10), m);
    return Status::Ok();
  });
  EXPECT_EQ(Last().state(), v1::VALIDATION_STATE_FAILED);
  EXPECT_NE(Last().message().find("agent was lost"), std::string::npos) << Last().message();
  EXPECT_TRUE(Device("worker01", 3).isolated());
}

TEST_F(ValidationTest, AnotherNodesResultIsRefusedAndChangesNothing) {
  Hello("worker01", 1);
  Hello("worker02", 2);
  IsolateAndClear("worker01", 3);
  const std::string id = requests_[0].validation_id();
  const Status st = Result("worker02", id, true);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("worker01"), std::string::npos);
  EXPECT_EQ(Last().state(), v1::VALIDATION_STATE_RUNNING);
  EXPECT_TRUE(Device("worker01", 3).isolated());
}

TEST_F(ValidationTest, ARestartResumesAValidationInFlightWithTheSameId) {
  Hello("worker01", 1);
  IsolateAndClear("worker01", 3);
  ASSERT_EQ(requests_.size(), 1u);
  const std::string id = requests_[0].validation_id();
  // A new ClusterD on the same store: the validation is still RUNNING and
  // is asked again, same id, of the agent's next session.
  Open();
  AgentOutbox fresh;
  rule()->set_outbox(&fresh);
  std::vector<v1::ValidationRequest> again;
  fresh.Attach("worker01", 7, [&](const v1::ConnectResponse& msg) { again.push_back(msg.validation()); });
  EXPECT_EQ(Last().state(), v1::VALIDATION_STATE_RUNNING);
  EXPECT_EQ(Device("worker01", 3).service_phase(), v1::SERVICE_PHASE_VALIDATING);
  Hello("worker01", 7);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].validation_id(), id);
  EXPECT_EQ(All().size(), 1u);  // not a new one
  ASSERT_TRUE(Result("worker01", id, true).ok());
  EXPECT_FALSE(Device("worker01", 3).isolated());
}

TEST_F(ValidationTest, ASeparationDueIsValidatedBeforeTheRelease) {
  Hello("worker01", 1);
  // Separated by hand-made records: the policy's release is due later.
  for (int i = 0; i < 3; ++i) {
    Write([&](ClusterState& s, Mutation* m) {
      return s.ApplyTransition("worker01", 1, MakeTransition(1, ++seq_["worker01"], true, 5u, "80E01801"), m).status();
    });
    Write([&](ClusterState& s, Mutation* m) {
      return s.ApplyTransition("worker01", 1, MakeTransition(1, ++seq_["worker01"], false, 5u, "80E01801"), m).status();
    });
    RunAt(clock_.Now() + config_.separation_settle);
  }
  ASSERT_TRUE(Device("worker01", 5).separated());
  for (int i = 0; i < 10 && requests_.empty(); ++i) RunAt(Idle());
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_TRUE(Device("worker01", 5).separated());  // still out while validating
  EXPECT_EQ(Last().trigger(), "separation-due");
  ASSERT_TRUE(Result("worker01", requests_[0].validation_id(), true).ok());
  EXPECT_FALSE(Device("worker01", 5).separated());
  EXPECT_EQ(Events(v1::EVENT_TYPE_DEVICE_RELEASED).size(), 1u);
}

}  // namespace
}  // namespace clusterd
