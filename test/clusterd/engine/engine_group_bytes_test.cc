// EngineOptions::max_group_bytes: a group stops taking closures once its
// change set holds that many bytes; the rest go in the next groups, in order.
// The writer is stepped by hand on a FakeClock over a MemoryStore.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/engine/engine.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/state/catalog.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/storage/memory_store.h"
#include "common/clock.h"
#include "common/metrics.h"

namespace clusterd {
namespace {

constexpr int kClosures = 10;
constexpr size_t kValueBytes = 1000;

class EngineGroupBytesTest : public ::testing::Test {
 protected:
  void Start(size_t max_group_bytes) {
    auto store = storage::MemoryStore::Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    ASSERT_TRUE(state_->Load().ok());
    hub_ = std::make_unique<WatchHub>(store_.get(), 1024);
    hub_->Init(state_->revision());
    EngineOptions options;
    options.max_group_bytes = max_group_bytes;
    options.commit_delay = std::chrono::nanoseconds(0);  // no gathering
    engine_ = std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), &clock_, options, &metrics_);
  }

  // How many of the test's keys ("k<i>") the store holds.
  int DurableKeys() const {
    int n = 0;
    Status st = store_->ForEach(storage::Cf::kMeta, [&n](std::string_view key, std::string_view) {
      if (key.size() > 1 && key[0] == 'k' && key.find_first_not_of("0123456789", 1) == std::string_view::npos) ++n;
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return n;
  }

  // Submits closures 0..kClosures-1, each adding a ~1000-byte put; records
  // the order they are applied in and, for each Done, how many of the keys
  // were durable when it ran.
  void SubmitAll() {
    done_saw_.assign(kClosures, -1);
    for (int i = 0; i < kClosures; ++i) {
      ASSERT_TRUE(engine_->Submit([this, i](ClusterState&, Mutation* m) -> Engine::Done {
        applied_order_.push_back(i);
        m->changes.Put(storage::Cf::kMeta, "k" + std::to_string(i), std::string(kValueBytes, 'x'));
        return [this, i] { done_saw_[i] = DurableKeys(); };
      }));
    }
    ASSERT_EQ(engine_->queue_depth(), static_cast<size_t>(kClosures));
  }

  Catalog catalog_ = Catalog::Default();
  FakeClock clock_;
  MetricsRegistry metrics_;
  std::unique_ptr<storage::MemoryStore> store_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<WatchHub> hub_;
  std::unique_ptr<Engine> engine_;
  std::vector<int> applied_order_;
  std::vector<int> done_saw_;
};

TEST_F(EngineGroupBytesTest, GroupStopsAtTheByteLimit) {
  Start(2500);  // 3 puts of ~1002 bytes reach it; 2 do not
  SubmitAll();

  std::vector<size_t> groups;
  while (engine_->queue_depth() > 0) {
    const Engine::StepResult r = engine_->Step();
    ASSERT_FALSE(r.held);
    ASSERT_FALSE(r.gathering);
    ASSERT_GT(r.applied, 0u);
    groups.push_back(r.applied);
    // Everything applied so far is durable, and every Done of it has run.
    size_t total = 0;
    for (size_t g : groups) total += g;
    EXPECT_EQ(DurableKeys(), static_cast<int>(total));
    for (size_t i = 0; i < total; ++i) EXPECT_NE(done_saw_[i], -1) << "closure " << i;
    for (size_t i = total; i < static_cast<size_t>(kClosures); ++i) EXPECT_EQ(done_saw_[i], -1) << "closure " << i;
    // The rest wait on the queue, first in line (the driver steps again at once).
    EXPECT_EQ(engine_->queue_depth(), static_cast<size_t>(kClosures) - total);
    if (total < static_cast<size_t>(kClosures)) {
      EXPECT_EQ(r.next, clock_.Now()) << "the rest is due at once";
    }
  }
  EXPECT_EQ(groups, (std::vector<size_t>{3, 3, 3, 1}));

  std::vector<int> want_order;
  for (int i = 0; i < kClosures; ++i) want_order.push_back(i);
  EXPECT_EQ(applied_order_, want_order);
  // Each Done ran once its whole group was committed, and before the next one.
  const std::vector<int> want_seen = {3, 3, 3, 6, 6, 6, 9, 9, 9, 10};
  EXPECT_EQ(done_saw_, want_seen);
}

TEST_F(EngineGroupBytesTest, NoLimitAppliesEverythingInOneStep) {
  Start(0);
  SubmitAll();
  const Engine::StepResult r = engine_->Step();
  EXPECT_FALSE(r.held);
  EXPECT_EQ(r.applied, static_cast<size_t>(kClosures));
  EXPECT_EQ(engine_->queue_depth(), 0u);
  std::vector<int> want_order;
  for (int i = 0; i < kClosures; ++i) want_order.push_back(i);
  EXPECT_EQ(applied_order_, want_order);
  EXPECT_EQ(done_saw_, std::vector<int>(kClosures, kClosures));
}

TEST_F(EngineGroupBytesTest, OneClosureOverTheLimitStillGoesAlone) {
  Start(500);  // every put alone is over the limit: one closure per group
  SubmitAll();
  std::vector<size_t> groups;
  while (engine_->queue_depth() > 0) {
    const Engine::StepResult r = engine_->Step();
    ASSERT_FALSE(r.held);
    groups.push_back(r.applied);
  }
  EXPECT_EQ(groups, std::vector<size_t>(kClosures, 1));
  for (int i = 0; i < kClosures; ++i) EXPECT_EQ(done_saw_[i], i + 1) << "closure " << i;
}

// Commit listeners (Engine::AddCommitListener, ClusterCommands::OnCommit)
// run once per commit that changed the state, after its Dones; a group that
// changed nothing calls none.
TEST_F(EngineGroupBytesTest, CommitListenersRunOncePerChangingCommit) {
  Start(2500);
  int calls = 0, durable_at_call = -1;
  engine_->AddCommitListener([&] {
    ++calls;
    durable_at_call = DurableKeys();
  });
  SubmitAll();
  int commits = 0;
  while (engine_->queue_depth() > 0) {
    ASSERT_GT(engine_->Step().applied, 0u);
    ++commits;
    EXPECT_EQ(calls, commits);
    EXPECT_EQ(durable_at_call, DurableKeys());
  }
  ASSERT_TRUE(engine_->Submit([](ClusterState&, Mutation*) -> Engine::Done { return nullptr; }));
  engine_->Step();
  EXPECT_EQ(calls, commits);
}

}  // namespace
}  // namespace clusterd
