#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>

#include <gtest/gtest.h>

#include "clusterd/engine/engine.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/storage/rocksdb_store.h"
#include "test/support/state/state_fixtures.h"
#include "test/support/temp_dir.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;

using testing::MakeHello;

// The writer stepped by hand on a FakeClock: no thread, no waiting. Time
// passes only when a test advances the clock.
class EngineTest : public ::testing::Test {
 protected:
  // The engine reads `clock` (default: the test's FakeClock).
  void Start(EngineOptions options, size_t cache = 1024, const Clock* clock = nullptr, size_t cache_bytes = SIZE_MAX) {
    auto store = storage::RocksDbStore::Open(dir_.path());
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    ASSERT_TRUE(state_->Load().ok());
    hub_ = std::make_unique<WatchHub>(store_.get(), cache, cache_bytes);
    hub_->Init(state_->revision());
    // A registry of the engine's own: a test may start one again on the same store.
    if (engine_metrics_used_) engine_metrics_ = std::make_unique<MetricsRegistry>();
    engine_metrics_used_ = true;
    MetricsRegistry* metrics = engine_metrics_ ? engine_metrics_.get() : &metrics_;
    engine_ =
        std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), clock ? clock : &clock_, options, metrics);
  }
  void Stop() {
    engine_.reset();
    hub_.reset();
    state_.reset();
    store_.reset();
  }
  // Steps until everything submitted is durable; a small group that gathers
  // (commit_delay) goes out when the clock reaches its deadline.
  void Drain() {
    for (;;) {
      const Engine::StepResult r = engine_->Step();
      ASSERT_FALSE(r.held);
      if (r.gathering) {
        clock_.Set(r.next);
      } else if (engine_->queue_depth() == 0) {
        return;
      }
    }
  }
  void SubmitHello(const std::string& node, uint64_t session, std::atomic<int>* done) {
    ASSERT_TRUE(engine_->Submit([node, session, done](ClusterState& s, Mutation* m) -> Engine::Done {
      EXPECT_TRUE(s.ApplyHello(MakeHello(node), session, m).ok());
      return [done] { (*done)++; };
    }));
  }
  void Register(int n) {
    std::atomic<int> done{0};
    for (int i = 0; i < n; ++i) SubmitHello("node" + std::to_string(i), i + 1, &done);
    Drain();
    ASSERT_EQ(done.load(), n);
  }
  void Nudge() {
    ASSERT_TRUE(engine_->Submit([](ClusterState&, Mutation*) -> Engine::Done { return nullptr; }));
    Drain();
  }

  testing::TempDir dir_;
  Catalog catalog_ = Catalog::Default();
  FakeClock clock_;
  MetricsRegistry metrics_;                          // the first Start's engine's
  std::unique_ptr<MetricsRegistry> engine_metrics_;  // a later Start's
  bool engine_metrics_used_ = false;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<WatchHub> hub_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, CompletionsRunAfterDurableCommitAndEventsArePublished) {
  Start({});
  std::vector<uint64_t> heads;
  std::mutex mu;
  hub_->Subscribe([&](uint64_t head) {
    std::lock_guard lock(mu);
    heads.push_back(head);
  });
  // Completions run only after the commit that holds their change.
  std::atomic<int> first{0};
  SubmitHello("first", 1000, &first);
  EXPECT_EQ(first.load(), 0);
  EXPECT_EQ(state_->durable_revision(), 0u);
  Register(200);
  EXPECT_EQ(first.load(), 1);
  EXPECT_EQ(state_->durable_revision(), 201u);
  EXPECT_EQ(hub_->head(), 201u);
  {
    std::lock_guard lock(mu);
    ASSERT_FALSE(heads.empty());
    EXPECT_EQ(heads.back(), 201u);
    EXPECT_TRUE(std::is_sorted(heads.begin(), heads.end()));
  }
  // Everything acknowledged is on disk after a restart.
  Stop();
  auto store = storage::RocksDbStore::Open(dir_.path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->revision_at_open(), 201u);
  EXPECT_EQ((*store)->ReadEvents(0, 1000)->size(), 201u);
}

// What a rendered counter says; -1 when absent.
double CounterIn(const std::string& text, const std::string& name) {
  auto at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

TEST_F(EngineTest, LightSteadyLoadSharesOneCommitAndAQuietSpellDoesNot) {
  EngineOptions options;
  options.commit_delay = 1h;  // only the group size can end the wait here
  options.commit_group = 2;
  Start(options);
  auto commits = [&] { return CounterIn(metrics_.Render(), "clusterd_store_commits_total"); };
  // The first change after a quiet spell (here: the start) is committed at once.
  std::atomic<int> a{0}, b{0}, c{0};
  SubmitHello("node0", 1, &a);
  EXPECT_EQ(engine_->Step().applied, 1u);
  EXPECT_EQ(a.load(), 1);
  EXPECT_EQ(commits(), 1);
  // Right after that commit a single change is held back until a second one
  // arrives: one commit for both.
  SubmitHello("node1", 2, &b);
  const Engine::StepResult gathering = engine_->Step();
  EXPECT_TRUE(gathering.gathering);
  EXPECT_EQ(gathering.applied, 0u);
  EXPECT_EQ(gathering.next, clock_.Now() + 1h);
  EXPECT_EQ(b.load(), 0);
  SubmitHello("node2", 3, &c);
  EXPECT_EQ(engine_->Step().applied, 2u);
  EXPECT_EQ(b.load(), 1);
  EXPECT_EQ(c.load(), 1);
  EXPECT_EQ(commits(), 2);
  EXPECT_EQ(CounterIn(metrics_.Render(), "clusterd_store_commits_delayed_total"), 1);
  EXPECT_EQ(state_->durable_revision(), state_->revision());
  // A quiet spell (more than twice the delay since the last commit): at once.
  std::atomic<int> d{0};
  clock_.Advance(3h);
  SubmitHello("node3", 4, &d);
  EXPECT_EQ(engine_->Step().applied, 1u);
  EXPECT_EQ(d.load(), 1);
  EXPECT_EQ(commits(), 3);
}

TEST_F(EngineTest, HeldCommitGoesOutAtItsDeadlineAndOnStop) {
  EngineOptions options;
  options.commit_delay = 1ms;
  options.commit_group = 1000;
  Start(options);
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) {
    SubmitHello("node" + std::to_string(i), i + 1, &done);
    Engine::StepResult r = engine_->Step();
    if (i > 0) {
      // One at a time: every change after the first waits for its deadline.
      ASSERT_TRUE(r.gathering);
      EXPECT_EQ(done.load(), i);
      clock_.Advance(500us);
      ASSERT_TRUE(engine_->Step().gathering);
      clock_.Advance(500us);
      r = engine_->Step();
    }
    EXPECT_EQ(r.applied, 1u);
    ASSERT_EQ(done.load(), i + 1);
  }
  // Stop commits what a gathering group has.
  std::atomic<int> last{0};
  SubmitHello("node-last", 99, &last);
  ASSERT_TRUE(engine_->Step().gathering);
  engine_.reset();
  EXPECT_EQ(last.load(), 1);
}

TEST_F(EngineTest, HubServesFromCacheThenFromStore) {
  Start({}, /*cache=*/16);
  Register(50);
  auto recent = hub_->Fetch(45, 100);
  ASSERT_TRUE(recent.ok());
  ASSERT_EQ(recent->size(), 5u);
  EXPECT_EQ(recent->front()->revision(), 46u);
  auto old = hub_->Fetch(0, 10);  // older than the cache: read from the store
  ASSERT_TRUE(old.ok());
  ASSERT_EQ(old->size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ((*old)[i]->revision(), i + 1);
  EXPECT_TRUE(hub_->Fetch(50, 10)->empty());
}

// Large events fill the cache by bytes long before by count
// (watch_cache_bytes): it keeps what fits, newest first, and the store serves
// the rest; nothing is skipped.
TEST_F(EngineTest, HubCacheIsBoundedByBytesAsWellAsByCount) {
  Start({}, /*cache=*/1024, nullptr, /*cache_bytes=*/1024);
  Register(50);
  EXPECT_LE(hub_->cached_bytes(), 1024u);
  EXPECT_GT(hub_->cached_events(), 0u);
  EXPECT_LT(hub_->cached_events(), 50u);
  auto all = hub_->Fetch(0, 100);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 50u);
  for (size_t i = 0; i < all->size(); ++i) EXPECT_EQ((*all)[i]->revision(), i + 1);
  auto recent = hub_->Fetch(49, 10);
  ASSERT_TRUE(recent.ok());
  ASSERT_EQ(recent->size(), 1u);
  EXPECT_EQ(recent->front()->revision(), 50u);
}

TEST_F(EngineTest, RetentionCompactsByCountAndRecordsTheFloor) {
  EngineOptions options;
  options.retention_events = 30;
  options.retention_interval = 1ms;
  options.node_grace = 1000h;
  Start(options);
  Register(100);
  EXPECT_EQ(state_->compacted_revision(), 0u);  // retention ran before the group
  // Retention runs on the writer's next turn once its interval has passed.
  clock_.Advance(1s);
  Nudge();
  EXPECT_EQ(state_->compacted_revision(), 70u);
  auto events = store_->ReadEvents(0, 1000);  // the deletion is durable
  ASSERT_EQ(events->size(), 30u);
  EXPECT_EQ(events->front().revision(), 71u);
  Stop();
  auto store = storage::RocksDbStore::Open(dir_.path());
  EXPECT_EQ((*store)->compacted_at_open(), 70u);
}

TEST_F(EngineTest, RetentionCompactsByAge) {
  EngineOptions options;
  options.retention_age = 1h;
  options.retention_interval = 1ms;
  options.node_grace = 1000h;  // no node is lost while the clock jumps
  Start(options);
  Register(10);
  clock_.Advance(2h);
  std::atomic<int> done{0};
  SubmitHello("late", 99, &done);
  Drain();
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(state_->compacted_revision(), 10u);
  EXPECT_EQ(store_->ReadEvents(0, 100)->size(), 1u);
}

TEST_F(EngineTest, LivenessRunsOnTheWriter) {
  EngineOptions options;
  options.node_grace = 10s;
  options.liveness_interval = 1ms;
  Start(options);
  Register(1);
  auto unknown = [&] { return state_->Read([](const StateView& s) { return s.GetSummary().nodes().unknown(); }); };
  // The writer asks to run again by the grace's end even with nothing submitted.
  const Engine::StepResult idle = engine_->Step();
  EXPECT_LE(idle.next, clock_.Now() + 10s);
  EXPECT_EQ(unknown(), 0u);
  clock_.Advance(11s);
  engine_->Step();
  EXPECT_EQ(unknown(), 1u);
}

// The liveness check walks every node, so it runs when the next node could
// cross the grace, not every liveness interval: none can cross it sooner (a
// node's last message only gets later), and the one that stops is still
// lost a moment after its grace.
TEST_F(EngineTest, LivenessWaitsUntilANodeCouldCrossTheGrace) {
  EngineOptions options;
  options.node_grace = 10s;
  options.liveness_interval = 1ms;
  options.commit_delay = 0ms;
  Start(options);
  const TimePoint t0 = clock_.Now();
  Register(2);  // the first Step: every node's grace runs from t0
  auto unknown = [&] { return state_->Read([](const StateView& s) { return s.GetSummary().nodes().unknown(); }); };
  clock_.Advance(4s);
  std::atomic<int> done{0};
  SubmitHello("node0", 1, &done);  // node0 heard from at t0 + 4 s, node1 at t0
  Drain();
  Engine::StepResult idle = engine_->Step();
  EXPECT_EQ(idle.next, t0 + 10s);
  clock_.Set(idle.next);
  idle = engine_->Step();
  EXPECT_EQ(unknown(), 0u);
  EXPECT_EQ(idle.next, t0 + 10s + 1ms);  // node1 just past its grace
  clock_.Set(idle.next);
  idle = engine_->Step();
  EXPECT_EQ(unknown(), 1u);
  EXPECT_EQ(idle.next, t0 + 14s + 1ms);  // node0's, not the 1 ms interval: nobody can cross it sooner
  clock_.Set(idle.next - 2ms);
  EXPECT_EQ(engine_->Step().next, t0 + 14s + 1ms);
  EXPECT_EQ(unknown(), 1u);
  clock_.Set(t0 + 14s + 1ms);
  engine_->Step();
  EXPECT_EQ(unknown(), 2u);
}

// #51 item 9: a takeover (or a restart) must not make a node lost. The
// nodes' last messages went to the old leader, long ago; the new one loads
// them, takes its time to start serving, and still gives every agent a
// whole grace from when it can be reached.
TEST_F(EngineTest, TakeoverGivesEveryNodeAWholeGraceFromServing) {
  EngineOptions options;
  options.node_grace = 10s;
  options.liveness_interval = 1ms;
  Start(options);
  Register(3);
  Stop();  // the old leader dies; its agents' last heartbeats were now
  clock_.Advance(30s);
  options.liveness_waits_for_serve = true;
  Start(options);  // the new leader loads the nodes
  auto unknown = [&] { return state_->Read([](const StateView& s) { return s.GetSummary().nodes().unknown(); }); };
  auto lost_faults = [&] {
    return state_->Read([](const StateView& s) {
      size_t n = 0;
      for (const auto& [key, f] : s.faults()) n += f.code() == "HEARTBEAT_LOST" ? 1 : 0;
      return n;
    });
  };
  // Its start (gRPC, services) takes longer than a grace: nobody can reach
  // it yet, nobody is lost.
  engine_->Step();
  clock_.Advance(15s);
  engine_->Step();
  EXPECT_EQ(unknown(), 0u);
  // Serving: a whole grace from here, one more check just before its end.
  engine_->Serve();
  engine_->Step();
  clock_.Advance(10s);
  engine_->Step();
  EXPECT_EQ(unknown(), 0u);
  EXPECT_EQ(lost_faults(), 0u);
  // An agent that does not come back within it is lost, as always.
  clock_.Advance(2ms);
  engine_->Step();
  EXPECT_EQ(unknown(), 3u);
  EXPECT_EQ(lost_faults(), 3u);
}

// A reattach storm after a restart (#59): a large fleet's agents come back
// over longer than one grace, at the pace the server sets. Those still to
// come back are not declared lost while others keep coming (EngineOptions::
// reattach_grace); a node whose agent is really gone is declared lost once
// they stop coming, and one that came back late never was.
class ReattachTest : public EngineTest {
 protected:
  // Registers `nodes`, kills the writer and starts it again long after, with
  // `options`; Serve is at t0_.
  void Restart(int nodes, EngineOptions options) {
    Start(options);
    Register(nodes);
    Stop();
    clock_.Advance(1h);
    options.liveness_waits_for_serve = true;
    Start(options);
    engine_->Step();
    engine_->Serve();
    t0_ = clock_.Now();
    engine_->Step();
  }
  // Steps the writer every 100 ms up to t0_ + `until`; node i says Hello
  // again (a new session) at t0_ + back[i], if it has one, and heartbeats
  // every step from then on unless it is in silent_. Records when each node
  // was first declared lost.
  void RunUntil(std::chrono::milliseconds until, const std::map<int, std::chrono::milliseconds>& back) {
    while (clock_.Now() < t0_ + until) {
      clock_.Advance(100ms);
      std::atomic<int> done{0};
      int submitted = 0;
      for (const auto& [i, at] : back) {
        const std::string node = "node" + std::to_string(i);
        const uint64_t session = 1000 + i;
        if (t0_ + at > clock_.Now() - 100ms && t0_ + at <= clock_.Now()) {
          SubmitHello(node, session, &done);
          ++submitted;
        } else if (t0_ + at <= clock_.Now() && !silent_.count(i)) {
          ASSERT_TRUE(engine_->Submit([node, session, &done](ClusterState& s, Mutation* m) -> Engine::Done {
            EXPECT_TRUE(s.ApplyHeartbeat(node, session, m).ok());
            return [&done] { done++; };
          }));
          ++submitted;
        }
      }
      Drain();
      ASSERT_EQ(done.load(), submitted);
      engine_->Step();
      state_->Read([&](const StateView& s) {
        for (const auto& [key, f] : s.faults()) {
          if (f.code() == "HEARTBEAT_LOST") lost_at_.emplace(f.node(), clock_.Now() - t0_);
        }
        return 0;
      });
    }
  }
  // An 8 s grace (counted every 2 s) and the liveness check at every step.
  static EngineOptions Options(std::chrono::nanoseconds reattach_grace) {
    EngineOptions options;
    options.node_grace = 8s;
    options.liveness_interval = 1ms;
    options.reattach_grace = reattach_grace;
    return options;
  }
  // Nodes 0..n-1 back one every 1.5 s from t0_ + 1.5 s.
  static std::map<int, std::chrono::milliseconds> OneEvery1500ms(int n) {
    std::map<int, std::chrono::milliseconds> back;
    for (int i = 0; i < n; ++i) back[i] = std::chrono::milliseconds(1500 * (i + 1));
    return back;
  }
  double Late() { return CounterIn(engine_metrics_->Render(), "clusterd_nodes_reattached_late_total"); }
  double Awaiting() { return CounterIn(engine_metrics_->Render(), "clusterd_nodes_awaiting_reattach"); }

  TimePoint t0_;
  std::set<int> silent_;                                     // nodes that send no heartbeat once back
  std::map<std::string, std::chrono::nanoseconds> lost_at_;  // node -> first seen lost, from t0_
};

TEST_F(ReattachTest, AgentsStillComingBackAreNotLostAndTheOneThatIsGoneIsLostOnceTheyStop) {
  Restart(8, Options(60s));
  EXPECT_EQ(Awaiting(), 8);
  // One agent back every 1.5 s: node5 and node6 after the grace; node7 never.
  const auto back = OneEvery1500ms(7);
  RunUntil(12100ms, back);  // the count at 12 s saw node6 back
  EXPECT_TRUE(lost_at_.empty()) << lost_at_.begin()->first;
  EXPECT_EQ(Awaiting(), 1);
  RunUntil(30s, back);
  // Only node7, within two counts of the last return; node5 and node6 never.
  ASSERT_EQ(lost_at_.size(), 1u);
  ASSERT_TRUE(lost_at_.count("node7"));
  EXPECT_GT(lost_at_["node7"], 10500ms);
  EXPECT_LE(lost_at_["node7"], 10500ms + 2 * 2s + 100ms);
  EXPECT_EQ(Late(), 2);  // node5 and node6 came back past the grace and were held
  EXPECT_EQ(Awaiting(), 0);
}

TEST_F(ReattachTest, WithoutItTheAgentsStillToComeBackAreLostAtTheGrace) {
  Restart(8, Options(0s));
  RunUntil(30s, OneEvery1500ms(7));
  EXPECT_EQ(lost_at_.size(), 3u);  // node5, node6 and node7, at the grace
  for (const auto& [node, at] : lost_at_) EXPECT_LE(at, 8s + 100ms) << node;
  EXPECT_EQ(Late(), 0);
}

TEST_F(ReattachTest, TheHoldEndsAtReattachGraceEvenWhileAgentsKeepComing) {
  Restart(40, Options(4s));
  std::map<int, std::chrono::milliseconds> back;  // one a second, for 40 s
  for (int i = 0; i < 40; ++i) back[i] = std::chrono::milliseconds(500 + 1000 * i);
  RunUntil(40s, back);
  // Held until the grace plus reattach_grace (12 s) and not longer: those
  // still away then (node12 and on) are lost then.
  EXPECT_FALSE(lost_at_.count("node10"));
  ASSERT_TRUE(lost_at_.count("node13"));
  ASSERT_TRUE(lost_at_.count("node39"));
  EXPECT_GE(lost_at_["node39"], 12s);
  EXPECT_LE(lost_at_["node39"], 12s + 2s + 100ms);
  EXPECT_EQ(lost_at_["node39"], lost_at_["node13"]);
}

// A restart where every agent is back within the grace ends the reattach at
// once: a node that leaves later is lost one grace after its last message.
TEST_F(ReattachTest, EveryAgentBackEndsItAndLaterSilenceIsAnOrdinaryGrace) {
  Restart(2, Options(60s));
  silent_ = {0, 1};
  RunUntil(20s, {{0, 1000ms}, {1, 1000ms}});
  EXPECT_EQ(Awaiting(), 0);
  // Both are silent since t0 + 1 s (no heartbeats here): lost at 9 s.
  ASSERT_EQ(lost_at_.size(), 2u);
  for (const auto& [node, at] : lost_at_) {
    EXPECT_GT(at, 9s) << node;
    EXPECT_LE(at, 9s + 100ms) << node;
  }
  EXPECT_EQ(Late(), 0);
}

// Without Serve (a writer stepped by hand) the grace starts with the first
// Step, not with the load: a slow load costs no agent its grace.
TEST_F(EngineTest, GraceStartsAtTheFirstStepNotAtTheLoad) {
  EngineOptions options;
  options.node_grace = 10s;
  options.liveness_interval = 1ms;
  Start(options);
  Register(2);
  Stop();
  clock_.Advance(1h);
  Start(options);      // loaded now
  clock_.Advance(5s);  // the load and the writer's start took this long
  engine_->Step();
  clock_.Advance(10s);
  engine_->Step();
  EXPECT_EQ(state_->Read([](const StateView& s) { return s.GetSummary().nodes().unknown(); }), 0u);
  clock_.Advance(2ms);
  engine_->Step();
  EXPECT_EQ(state_->Read([](const StateView& s) { return s.GetSummary().nodes().unknown(); }), 2u);
}

TEST_F(EngineTest, StopDrainsWhatIsQueuedAndRefusesMore) {
  Start({});
  std::atomic<int> done{0};
  for (int i = 0; i < 5; ++i) SubmitHello("node" + std::to_string(i), i + 1, &done);
  engine_->Stop();
  EXPECT_EQ(done.load(), 5);
  EXPECT_EQ(state_->durable_revision(), 5u);
  EXPECT_FALSE(engine_->Submit([](ClusterState&, Mutation*) -> Engine::Done { return nullptr; }));
  EXPECT_EQ(engine_->SubmitWrite([](ClusterState&, Mutation*) -> Engine::Done { return nullptr; }).code(),
            StatusCode::kUnavailable);
}

// A writer rule runs after every group with the group's changes, on the
// writer, and gets the Engine's Submit for answers that arrive later.
class RecordingRule final : public WriterRule {
 public:
  std::string_view name() const override { return "recording"; }
  TimePoint Advance(ClusterState&, const WriterTick& tick) override {
    events_seen.push_back(tick.m->events.size());
    later = *tick.submit;
    return tick.now + 5s;
  }
  std::vector<size_t> events_seen;
  Engine::SubmitFn later;
};

TEST_F(EngineTest, WriterRuleSeesEachGroupAndCanSubmitLater) {
  EngineOptions options;
  auto store = storage::RocksDbStore::Open(dir_.path());
  ASSERT_TRUE(store.ok());
  store_ = std::move(*store);
  state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
  ASSERT_TRUE(state_->Load().ok());
  hub_ = std::make_unique<WatchHub>(store_.get(), 16);
  hub_->Init(state_->revision());
  RecordingRule rule;
  std::vector<size_t>& events_seen = rule.events_seen;
  Engine::SubmitFn& later = rule.later;
  Engine::Hooks hooks;
  hooks.rules = {&rule};
  engine_ =
      std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), &clock_, options, &metrics_, std::move(hooks));
  Register(3);
  ASSERT_EQ(events_seen.size(), 1u);
  EXPECT_EQ(events_seen[0], 3u);
  // The rule's wish to run again is the writer's next deadline.
  const Engine::StepResult idle = engine_->Step();
  EXPECT_EQ(idle.next, clock_.Now() + 5s);
  ASSERT_TRUE(later);
  std::atomic<int> done{0};
  ASSERT_TRUE(later([&done](ClusterState& s, Mutation* m) -> Engine::Done {
    EXPECT_TRUE(s.ApplyHello(MakeHello("from-rule"), 77, m).ok());
    return [&done] { done++; };
  }));
  Drain();
  EXPECT_EQ(done.load(), 1);
  engine_.reset();  // before the rule goes
}

// The thread driver: Start steps on its own thread, Stop drains. Waits on
// the completions with a deadline (a failure bound, not a timing). On the
// system clock, as in clusterd: the driver sleeps until the clock reaches a
// deadline (a gathering group's), which a FakeClock would never do by itself.
TEST_F(EngineTest, DriverThreadCommitsSubmissionsFromManyThreads) {
  Start({}, 1024, &SystemClock::Instance());
  engine_->Start();
  constexpr int kThreads = 4, kEach = 50;
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string node = "n" + std::to_string(t) + "-" + std::to_string(i);
        engine_->Submit([&, node](ClusterState& s, Mutation* m) -> Engine::Done {
          EXPECT_TRUE(s.ApplyHello(MakeHello(node), 1, m).ok());
          return [&] {
            std::lock_guard lock(mu);
            ++done;
            cv.notify_all();
          };
        });
      }
    });
  }
  for (auto& th : threads) th.join();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return done == kThreads * kEach; }));
  }
  engine_->Stop();
  EXPECT_EQ(state_->durable_revision(), static_cast<uint64_t>(kThreads * kEach));
}

TEST(WatchFilter, MatchesNodesTypesAndLevels) {
  v1::WatchRequest req;
  req.add_nodes("worker01");
  req.add_types(v1::EVENT_TYPE_FAULT_RAISED);
  req.set_min_level(v1::FAULT_LEVEL_RESTART_REQUEST);
  auto f = WatchFilter::FromRequest(req);
  ASSERT_TRUE(f.ok());
  v1::Event e;
  e.set_node("worker01");
  e.set_type(v1::EVENT_TYPE_FAULT_RAISED);
  e.mutable_fault()->set_level(v1::FAULT_LEVEL_SEPARATE);
  EXPECT_TRUE(f->Matches(e));
  e.mutable_fault()->set_level(v1::FAULT_LEVEL_SUB_HEALTH);
  EXPECT_FALSE(f->Matches(e));
  e.mutable_fault()->set_level(v1::FAULT_LEVEL_SEPARATE);
  e.set_node("worker02");
  EXPECT_FALSE(f->Matches(e));
  e.set_node("worker01");
  e.set_type(v1::EVENT_TYPE_FAULT_CLEARED);
  EXPECT_FALSE(f->Matches(e));
  req.add_types(static_cast<v1::EventType>(99));
  EXPECT_FALSE(WatchFilter::FromRequest(req).ok());
}

}  // namespace
}  // namespace clusterd
