#include <atomic>

#include <gtest/gtest.h>

#include "clusterd/engine.h"
#include "clusterd/storage/rocksdb_store.h"
#include "clusterd/watch_hub.h"
#include "test_util.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;

v1::Hello MakeHello(const std::string& node) {
  v1::Hello h;
  h.set_node_name(node);
  h.set_epoch(1);
  return h;
}

class EngineTest : public ::testing::Test {
 protected:
  void Start(EngineOptions options, size_t cache = 1024) {
    auto store = storage::RocksDbStore::Open(dir_.path());
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    ASSERT_TRUE(state_->Load().ok());
    hub_ = std::make_unique<WatchHub>(store_.get(), cache);
    hub_->Init(state_->revision());
    engine_ = std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), &clock_, options, &metrics_);
    engine_->Start();
  }
  void Stop() {
    engine_.reset();
    hub_.reset();
    state_.reset();
    store_.reset();
  }
  void Register(int n) {
    std::atomic<int> done{0};
    for (int i = 0; i < n; ++i) {
      engine_->Submit([i, &done](ClusterState& s, Mutation* m) -> Engine::Done {
        EXPECT_TRUE(s.ApplyHello(MakeHello("node" + std::to_string(i)), i + 1, m).ok());
        return [&done] { done++; };
      });
    }
    ASSERT_TRUE(testing::WaitFor([&] { return done.load() == n; }));
  }

  testing::TempDir dir_;
  Catalog catalog_ = Catalog::Default();
  FakeClock clock_;
  MetricsRegistry metrics_;
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
  Register(200);
  EXPECT_EQ(state_->durable_revision(), 200u);
  EXPECT_EQ(hub_->head(), 200u);
  {
    std::lock_guard lock(mu);
    ASSERT_FALSE(heads.empty());
    EXPECT_EQ(heads.back(), 200u);
    EXPECT_TRUE(std::is_sorted(heads.begin(), heads.end()));
  }
  // Everything acknowledged is on disk after a restart.
  Stop();
  auto store = storage::RocksDbStore::Open(dir_.path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->revision_at_open(), 200u);
  EXPECT_EQ((*store)->ReadEvents(0, 1000)->size(), 200u);
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
  auto submit = [&](int i, std::atomic<int>* done) {
    engine_->Submit([i, done](ClusterState& s, Mutation* m) -> Engine::Done {
      EXPECT_TRUE(s.ApplyHello(MakeHello("node" + std::to_string(i)), i + 1, m).ok());
      return [done] { (*done)++; };
    });
  };
  auto commits = [&] { return CounterIn(metrics_.Render(), "clusterd_store_commits_total"); };
  // The first change after a quiet spell (here: the start) is committed at once.
  std::atomic<int> a{0}, b{0}, c{0};
  submit(0, &a);
  ASSERT_TRUE(testing::WaitFor([&] { return a.load() == 1; }));
  EXPECT_EQ(commits(), 1);
  // Right after that commit a single change is held back (the writer has
  // taken it off the queue) until a second one arrives: one commit for both.
  submit(1, &b);
  ASSERT_TRUE(testing::WaitFor([&] { return engine_->queue_depth() == 0; }));
  submit(2, &c);
  ASSERT_TRUE(testing::WaitFor([&] { return b.load() == 1 && c.load() == 1; }));
  EXPECT_EQ(commits(), 2);
  EXPECT_EQ(CounterIn(metrics_.Render(), "clusterd_store_commits_delayed_total"), 1);
  EXPECT_EQ(state_->durable_revision(), state_->revision());
}

TEST_F(EngineTest, HeldCommitGoesOutAtItsDeadlineAndOnStop) {
  EngineOptions options;
  options.commit_delay = 1ms;
  options.commit_group = 1000;
  Start(options);
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) {
    engine_->Submit([i, &done](ClusterState& s, Mutation* m) -> Engine::Done {
      EXPECT_TRUE(s.ApplyHello(MakeHello("node" + std::to_string(i)), i + 1, m).ok());
      return [&done] { done++; };
    });
    // One at a time: every change waits for its deadline, none is lost.
    ASSERT_TRUE(testing::WaitFor([&] { return done.load() == i + 1; }));
  }
  // Stop commits what a held group has.
  std::atomic<int> last{0};
  engine_->Submit([&last](ClusterState& s, Mutation* m) -> Engine::Done {
    EXPECT_TRUE(s.ApplyHello(MakeHello("node-last"), 99, m).ok());
    return [&last] { last++; };
  });
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

TEST_F(EngineTest, RetentionCompactsByCountAndRecordsTheFloor) {
  EngineOptions options;
  options.retention_events = 30;
  options.retention_interval = 1ms;
  options.node_grace = 1000h;
  Start(options);
  Register(100);
  // Retention runs on the writer's next turn; nudge it with an empty change.
  ASSERT_TRUE(testing::WaitFor([&] {
    clock_.Advance(1s);
    engine_->Submit([](ClusterState&, Mutation*) -> Engine::Done { return nullptr; });
    return store_->ReadEvents(0, 1000)->size() == 30u;  // the deletion is durable
  }));
  EXPECT_EQ(state_->compacted_revision(), 70u);
  auto events = store_->ReadEvents(0, 1000);
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
  engine_->Submit([&](ClusterState& s, Mutation* m) -> Engine::Done {
    EXPECT_TRUE(s.ApplyHello(MakeHello("late"), 99, m).ok());
    return [&] { done++; };
  });
  ASSERT_TRUE(testing::WaitFor([&] { return done.load() == 1; }));
  ASSERT_TRUE(testing::WaitFor([&] {
    engine_->Submit([](ClusterState&, Mutation*) -> Engine::Done { return nullptr; });
    return store_->ReadEvents(0, 100)->size() == 1u;
  }));
  EXPECT_EQ(state_->compacted_revision(), 10u);
}

TEST_F(EngineTest, LivenessRunsOnTheWriter) {
  EngineOptions options;
  options.node_grace = 10s;
  options.liveness_interval = 1ms;
  Start(options);
  Register(1);
  clock_.Advance(11s);
  ASSERT_TRUE(testing::WaitFor([&] {
    std::shared_lock lock(state_->mutex());
    return state_->GetSummary().nodes().unknown() == 1;
  }));
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
