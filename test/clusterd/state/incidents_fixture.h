// The incident tests' fixture (state/incidents.h, state/evidence.h,
// docs/domains.md): the real rule set (MakeWriterRules) and the recovery
// Coordinator on a real ClusterState and Engine over a MemoryStore, stepped
// by hand on a FakeClock; synthetic SuperPoD fleets, chip and switch faults,
// a cascade. Shared by incidents_test.cc, incidents_avoid_test.cc and
// evidence_test.cc.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/engine/engine.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/engine/writer_rules.h"
#include "clusterd/recovery/coordinator/coordinator.h"
#include "clusterd/state/domains.h"
#include "clusterd/state/incidents.h"
#include "clusterd/storage/memory_store.h"
#include "common/metrics.h"
#include "test/support/fakes/fake_actuator.h"
#include "test/support/state/state_fixtures.h"

namespace clusterd::testing {

using namespace std::chrono_literals;

constexpr const char* kSuperPodLabel = "huawei.com/topotree.superpodid";

inline std::string NodeName(int pod, int i) { return "sp" + std::to_string(pod) + "-n" + std::to_string(i); }

class IncidentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.max_isolated_node_percent = 100;  // the cluster-wide gate lets a whole domain go
    auto store = storage::MemoryStore::Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    Start();
  }
  void TearDown() override { engine_.reset(); }

  // The composition root's order: rules from the configuration, attached
  // before the load, then the Engine with the Coordinator last.
  void Start() {
    engine_.reset();
    coordinator_.reset();
    auto rules = MakeWriterRules(config_);
    ASSERT_TRUE(rules.ok()) << rules.status().ToString();
    rules_ = std::move(*rules);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    rules_.AttachTo(state_.get());
    // A MemoryStore reports the revision it was opened at: a restart over it
    // loads at the revision the last process reached.
    ASSERT_TRUE(state_->Load(revision_, 0).ok());
    hub_ = std::make_unique<WatchHub>(store_.get(), 100'000);
    hub_->Init(state_->revision());
    metrics_ = std::make_unique<MetricsRegistry>();
    coordinator_ = std::make_unique<Coordinator>(&agents_, &actuator_, &clock_, CoordinatorOptions{}, metrics_.get());
    EngineOptions options;
    options.node_grace = std::chrono::hours(24 * 365);
    options.commit_delay = 0ns;
    Engine::Hooks hooks;
    hooks.rules = rules_.Ordered(coordinator_.get());
    engine_ = std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), &clock_, options, metrics_.get(),
                                       std::move(hooks));
  }
  // ClusterD restarts over the same store.
  void Restart() {
    revision_ = state_->revision();
    engine_.reset();
    coordinator_.reset();
    state_.reset();
    rules_ = WriterRules();
    Start();
  }

  template <typename Fn>
  void Write(Fn fn) {
    EXPECT_TRUE(engine_->Submit([fn](ClusterState& s, Mutation* m) -> Engine::Done {
      EXPECT_TRUE(fn(s, m).ok());
      return nullptr;
    }));
    Idle();
  }
  TimePoint Idle() {
    for (;;) {
      const Engine::StepResult r = engine_->Step();
      if (r.gathering) {
        clock_.Set(r.next);
      } else if (engine_->queue_depth() == 0) {
        return r.next;
      }
    }
  }
  // Runs everything due up to `t` (the Coordinator's hold-downs), then sets
  // the clock to t.
  void AdvanceTo(TimePoint t) {
    for (int i = 0; i < 1000; ++i) {
      const TimePoint next = Idle();
      if (next > t) break;
      clock_.Set(std::max(next, clock_.Now()));
    }
    clock_.Set(t);
    Idle();
  }

  // `pods` SuperPoDs of `per_pod` nodes, 8 chips each, and one job per half
  // of SuperPoD 1 (ranks on chips 0-1 of each node).
  void Fleet(int pods, int per_pod) {
    for (int p = 1; p <= pods; ++p) {
      for (int i = 0; i < per_pod; ++i) {
        v1::Hello h = MakeHello(NodeName(p, i), 1);
        (*h.mutable_labels())[kSuperPodLabel] = std::to_string(p);
        Write([h](ClusterState& s, Mutation* m) { return s.ApplyHello(h, 1, m).status(); });
      }
    }
    for (int half = 0; half < 2; ++half) {
      v1::Job job;
      job.set_id(half == 0 ? "train-a" : "train-b");
      job.set_kind(v1::JOB_KIND_TRAINING);
      uint32_t rank = 0;
      for (int i = half * per_pod / 2; i < (half + 1) * per_pod / 2; ++i) {
        for (uint32_t d = 0; d < 2; ++d) {
          auto* pl = job.add_placement();
          pl->set_rank(rank++);
          pl->set_node(NodeName(1, i));
          pl->set_device_id(d);
        }
      }
      job.mutable_policy()->mutable_hold_down()->set_seconds(1);
      Write([job](ClusterState& s, Mutation* m) { return s.ApplyCreateJob(job, m).status(); });
    }
  }

  // A chip fault (80E01801, RESTART_BUSINESS) on chip 0 of the node.
  void ChipFault(const std::string& node, bool raise, uint32_t device = 0) {
    const uint64_t seq = ++seq_[node];
    Write([=](ClusterState& s, Mutation* m) {
      return s.ApplyTransition(node, 1, MakeTransition(1, seq, raise, device, "80E01801"), m).status();
    });
  }
  // The switch above the SuperPoD, as the node's agent reports it.
  void SwitchFault(const std::string& node, bool raise) {
    const uint64_t seq = ++seq_[node];
    Write([=](ClusterState& s, Mutation* m) {
      v1::FaultTransition t = MakeTransition(1, seq, raise, std::nullopt, "SWITCH_PORT_DOWN", v1::FAULT_SOURCE_NETWORK);
      t.mutable_fault()->set_subject("switch:leaf-7");
      t.mutable_fault()->set_level(v1::FAULT_LEVEL_SUB_HEALTH);
      return s.ApplyTransition(node, 1, t, m).status();
    });
  }

  // The cascade of issue 56: 8 nodes within 0.5 s (the switch fault first),
  // then every other node of SuperPoD 1 within 7 s.
  void Cascade(int per_pod) {
    const TimePoint t0 = clock_.Now();
    AdvanceTo(t0);
    SwitchFault(NodeName(1, 0), true);
    for (int i = 0; i < per_pod; ++i) {
      const auto at = i < 8 ? t0 + i * 60ms : t0 + 500ms + (i - 8) * (6500ms / (per_pod - 8));
      AdvanceTo(at);
      ChipFault(NodeName(1, i), true);
    }
    AdvanceTo(clock_.Now() + 5s);  // the last hold-downs pass
  }

  // Dry-run mode on or off (AdminService.SetRecoveryMode).
  void SetDryRun(bool on) {
    Write([on](ClusterState& s, Mutation* m) {
      v1::SetRecoveryModeRequest req;
      req.set_dry_run(on);
      req.set_actor("test");
      req.set_reason("dry run");
      return s.ApplySetRecoveryMode(req, m).status();
    });
  }

  v1::ListIncidentsResponse Incidents() {
    return state_->Read([&](const StateView&) {
      auto r = ListIncidentsWith(IncidentsOf(*state_), v1::ListIncidentsRequest());
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      return r.ok() ? *r : v1::ListIncidentsResponse();
    });
  }
  v1::Incident Incident(const std::string& id) {
    return state_->Read([&](const StateView&) {
      auto r = GetIncidentWith(IncidentsOf(*state_), id);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      return r.ok() ? *r : v1::Incident();
    });
  }
  std::map<std::string, int> RecoveriesByJob() {
    return state_->Read([](const StateView& v) {
      std::map<std::string, int> out;
      for (const auto& [id, r] : v.recoveries()) ++out[r.job_id()];
      return out;
    });
  }
  int IsolatedIn(int pod, int per_pod) {
    return state_->Read([&](const StateView& v) {
      int n = 0;
      for (int i = 0; i < per_pod; ++i) n += v.FindNode(NodeName(pod, i))->isolated() ? 1 : 0;
      return n;
    });
  }
  std::vector<v1::Event> Events(v1::EventType type) { return testing::StoredEventsOfType(*store_, type); }

  ClusterdConfig config_;
  FakeClock clock_;
  Catalog catalog_ = Catalog::Default();
  std::unique_ptr<MetricsRegistry> metrics_;
  uint64_t revision_ = 0;
  std::unique_ptr<storage::Store> store_;
  WriterRules rules_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<WatchHub> hub_;
  JobAgentHub agents_;
  FakeActuator actuator_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Engine> engine_;
  std::map<std::string, uint64_t> seq_;
};

}  // namespace clusterd::testing
