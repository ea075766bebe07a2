// A standby's LogFollower (clusterd/ha/log_follower.h) on the replicated log
// in memory (fake_log.h), written by a real ReplicatedStore (the leader) on a
// MemoryStore; the follower's store is a MemoryStore too, on a disk that
// survives a "restart". Checkpoints come from a fake Restorer that hands out
// a copy of the leader's store as it was at some index. Time is a FakeClock.
#include "clusterd/ha/log_follower.h"

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/ha/replication/log_entry.h"
#include "clusterd/ha/replication/replicated_store.h"
#include "clusterd/storage/memory_store.h"
#include "common/clock.h"
#include "test/support/fakes/fake_log.h"
#include "test/support/wait.h"

namespace clusterd::ha {
namespace {

using storage::Cf;
using storage::ChangeSet;
using storage::MemoryDisk;
using storage::MemoryStore;

std::map<std::string, std::string> Nodes(const storage::Store& store) {
  std::map<std::string, std::string> out;
  Status st = store.ForEach(Cf::kNodes, [&](std::string_view k, std::string_view v) { out.emplace(k, v); });
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

uint64_t LogIndexOf(const storage::Store& store) {
  auto index = replication::ReadLogIndex(store);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  return index.ok() ? *index : ~uint64_t{0};
}

std::unique_ptr<storage::Store> OpenOn(std::shared_ptr<MemoryDisk> disk) {
  auto store = MemoryStore::Open(std::move(disk));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::unique_ptr<storage::Store>(std::move(*store)) : nullptr;
}

std::shared_ptr<MemoryDisk> CopyOf(const MemoryDisk& disk) {
  auto copy = std::make_shared<MemoryDisk>();
  std::shared_lock lock(disk.mu);
  copy->tables = disk.tables;
  return copy;
}

// A peer's checkpoint: a copy of a disk, or a failure. Records each call.
class FakeRestorer final : public LogFollower::Restorer {
 public:
  Status Restore(std::unique_ptr<storage::Store>* store, bool keep_old,
                 const std::function<bool()>& cancelled) override {
    keep_old_calls.push_back(keep_old);
    entered.set_value_once();
    if (wait_for_cancel) {
      // A transfer that goes on until the follower gives up on it.
      if (!testing::WaitFor(cancelled)) return Unavailable("never cancelled");
      return Unavailable("checkpoint transfer cancelled");
    }
    if (!result.ok()) return result;
    if (!checkpoint) return Unavailable("no live peer serves a checkpoint");
    store->reset();
    *store = OpenOn(CopyOf(*checkpoint));
    return Status::Ok();
  }

  struct Once {
    std::promise<void> promise;
    bool set = false;
    void set_value_once() {
      if (!set) promise.set_value();
      set = true;
    }
  };

  std::shared_ptr<MemoryDisk> checkpoint;  // what a peer's store holds
  Status result;                           // not OK: every restore fails so
  bool wait_for_cancel = false;
  std::vector<bool> keep_old_calls;
  Once entered;
};

class LogFollowerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto inner = MemoryStore::Open(leader_disk_);
    ASSERT_TRUE(inner.ok()) << inner.status().ToString();
    leader_ = std::make_unique<replication::ReplicatedStore>(std::move(*inner), &log_, 0, "leader", nullptr, nullptr);
  }

  // `n` group commits on the leader: one node record and a new revision each.
  void Commit(int n) {
    for (int i = 0; i < n; ++i) {
      ChangeSet c;
      const int node = ++nodes_;
      c.Put(Cf::kNodes, "node-" + std::to_string(100 + node), "record " + std::to_string(node));
      storage::PutRevision(&c, ++revision_);
      Status st = leader_->Write(c);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
  }

  std::unique_ptr<LogFollower> NewFollower(std::shared_ptr<MemoryDisk> disk) {
    LogFollower::Options options;
    options.batch = 16;
    options.restore_interval = std::chrono::seconds(2);
    // Each follower its own metrics, as each process has (Has reads the last).
    metrics_.push_back(std::make_unique<MetricsRegistry>());
    auto follower = std::make_unique<LogFollower>(&log_, &restorer_, metrics_.back().get(), &clock_, options);
    follower->set_on_applied([this](const ChangeSet& written) {
      for (const auto& change : written) {
        if (change.table == Cf::kNodes) applied_nodes_.push_back(change.key);
      }
    });
    Status st = follower->Start(OpenOn(std::move(disk)));
    EXPECT_TRUE(st.ok()) << st.ToString();
    return follower;
  }

  bool Has(const std::string& metric) const {
    return !metrics_.empty() && metrics_.back()->Render().find(metric) != std::string::npos;
  }

  testing::FakeLog log_;
  std::shared_ptr<MemoryDisk> leader_disk_ = std::make_shared<MemoryDisk>();
  std::unique_ptr<replication::ReplicatedStore> leader_;
  int nodes_ = 0;
  uint64_t revision_ = 0;
  FakeRestorer restorer_;
  FakeClock clock_;
  std::vector<std::unique_ptr<MetricsRegistry>> metrics_;
  std::vector<std::string> applied_nodes_;  // what on_applied saw, in order
};

TEST_F(LogFollowerTest, AppliesEveryEntryInOrder) {
  Commit(40);
  auto follower = NewFollower(nullptr);
  EXPECT_EQ(follower->applied(), 0u);
  ASSERT_TRUE(follower->Follow().ok());

  EXPECT_EQ(follower->applied(), 40u);
  EXPECT_EQ(LogIndexOf(*follower->store()), 40u);
  EXPECT_EQ(Nodes(*follower->store()), Nodes(*leader_));
  ASSERT_EQ(applied_nodes_.size(), 40u);
  for (size_t i = 0; i < applied_nodes_.size(); ++i) EXPECT_EQ(applied_nodes_[i], "node-" + std::to_string(101 + i));
  // Batches of 16, each read starting after the last entry applied; a
  // standby's reads may be served by any member.
  using Read = std::pair<uint64_t, bool>;
  EXPECT_EQ(log_.reads(), (std::vector<Read>{{0, false}, {16, false}, {32, false}}));
  EXPECT_EQ(follower->error(), "");
  EXPECT_FALSE(follower->behind_log());
  EXPECT_TRUE(Has("clusterd_ha_log_index 40"));
}

TEST_F(LogFollowerTest, ANewLeadersCatchUpReadsEveryCommittedEntry) {
  auto follower = NewFollower(nullptr);
  Commit(3);
  ASSERT_TRUE(follower->CatchUp(/*linearizable=*/true).ok());
  EXPECT_EQ(follower->applied(), 3u);
  for (const auto& [after, linearizable] : log_.reads()) EXPECT_TRUE(linearizable) << "read after " << after;
}

TEST_F(LogFollowerTest, ResumesAfterARestartFromTheIndexItsStoreHolds) {
  auto disk = std::make_shared<MemoryDisk>();
  {
    auto follower = NewFollower(disk);
    Commit(20);
    ASSERT_TRUE(follower->Follow().ok());
    ASSERT_EQ(follower->applied(), 20u);
  }
  Commit(10);
  applied_nodes_.clear();
  const size_t reads_before = log_.reads().size();

  auto follower = NewFollower(disk);  // the standby's process started again
  EXPECT_EQ(follower->applied(), 20u);
  ASSERT_TRUE(follower->Follow().ok());
  EXPECT_EQ(follower->applied(), 30u);
  EXPECT_EQ(Nodes(*follower->store()), Nodes(*leader_));
  // Read from where it stood; nothing applied twice.
  EXPECT_EQ(log_.reads().at(reads_before).first, 20u);
  EXPECT_EQ(applied_nodes_.size(), 10u);
  EXPECT_EQ(applied_nodes_.front(), "node-121");
}

TEST_F(LogFollowerTest, ALogTrimmedPastTheStoreIsReplacedByACheckpoint) {
  auto follower = NewFollower(nullptr);
  Commit(5);
  ASSERT_TRUE(follower->Follow().ok());
  Commit(20);
  restorer_.checkpoint = CopyOf(*leader_disk_);  // a peer at index 25
  Commit(5);
  log_.TrimThrough(20);  // the standby was away: entries 6..20 are gone

  ASSERT_TRUE(follower->Follow().ok());
  EXPECT_EQ(restorer_.keep_old_calls, std::vector<bool>{false});  // trimmed, not diverged
  EXPECT_EQ(follower->applied(), 30u);
  EXPECT_EQ(LogIndexOf(*follower->store()), 30u);
  EXPECT_EQ(Nodes(*follower->store()), Nodes(*leader_));
  EXPECT_EQ(follower->error(), "");
  EXPECT_FALSE(follower->behind_log());
  EXPECT_TRUE(Has("clusterd_ha_checkpoint_restores_total 1"));
}

TEST_F(LogFollowerTest, AStoreWithOtherHistoryIsReplacedAndKeptAside) {
  // A single-node store moved to HA: revision 7 of its own, no log index.
  auto disk = std::make_shared<MemoryDisk>();
  {
    auto own = OpenOn(disk);
    ChangeSet c;
    c.Put(Cf::kNodes, "node-own", "from before HA");
    storage::PutRevision(&c, 7);
    ASSERT_TRUE(own->Write(c).ok());
  }
  Commit(3);
  restorer_.checkpoint = CopyOf(*leader_disk_);
  auto follower = NewFollower(disk);

  ASSERT_TRUE(follower->Follow().ok());
  EXPECT_EQ(restorer_.keep_old_calls, std::vector<bool>{true});
  EXPECT_EQ(follower->applied(), 3u);
  EXPECT_EQ(Nodes(*follower->store()), Nodes(*leader_));
}

TEST_F(LogFollowerTest, WithoutACheckpointItSaysWhyAndAsksAgainOnlyAfterTheInterval) {
  auto follower = NewFollower(nullptr);
  Commit(10);
  log_.TrimThrough(4);
  restorer_.result = Unavailable("no live peer serves a checkpoint");

  Status st = follower->Follow();
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
  EXPECT_NE(st.message().find("trimmed past this replica"), std::string::npos) << st.message();
  EXPECT_NE(follower->error().find("rebuilding: no live peer"), std::string::npos) << follower->error();
  EXPECT_TRUE(follower->behind_log());
  EXPECT_EQ(follower->applied(), 0u);  // nothing applied over the gap
  EXPECT_EQ(LogIndexOf(*follower->store()), 0u);
  EXPECT_EQ(restorer_.keep_old_calls.size(), 1u);

  clock_.Advance(std::chrono::milliseconds(1999));
  EXPECT_FALSE(follower->Follow().ok());
  EXPECT_EQ(restorer_.keep_old_calls.size(), 1u);  // not yet
  EXPECT_TRUE(follower->behind_log());
  EXPECT_TRUE(Has("clusterd_ha_follow_errors_total 2"));
  EXPECT_TRUE(Has("clusterd_ha_checkpoint_restore_failures_total 1"));

  clock_.Advance(std::chrono::milliseconds(1));
  restorer_.result = Status::Ok();
  restorer_.checkpoint = CopyOf(*leader_disk_);
  ASSERT_TRUE(follower->Follow().ok());
  EXPECT_EQ(restorer_.keep_old_calls.size(), 2u);
  EXPECT_EQ(follower->applied(), 10u);
  EXPECT_EQ(follower->error(), "");
  EXPECT_FALSE(follower->behind_log());
}

TEST_F(LogFollowerTest, AFailedReadIsReportedAndRetriedWithoutACheckpoint) {
  auto follower = NewFollower(nullptr);
  Commit(4);
  log_.FailReads(Unavailable("etcd range: deadline exceeded"));
  Status st = follower->Follow();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(follower->error(), "etcd range: deadline exceeded");
  EXPECT_FALSE(follower->behind_log());
  EXPECT_TRUE(restorer_.keep_old_calls.empty());

  log_.FailReads(Status::Ok());
  ASSERT_TRUE(follower->Follow().ok());
  EXPECT_EQ(follower->applied(), 4u);
  EXPECT_EQ(follower->error(), "");
}

TEST_F(LogFollowerTest, StoppedWhileReadingItAppliesWhatItReadAndReadsNoMore) {
  Commit(40);
  auto follower = NewFollower(nullptr);
  log_.OnRead([&](uint64_t) { follower->Stop(); });  // e.g. a signal meanwhile
  Status st = follower->Follow();
  EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.ToString();
  // The batch read is applied, entry by entry, each with its index.
  EXPECT_EQ(follower->applied(), 16u);
  EXPECT_EQ(LogIndexOf(*follower->store()), 16u);
  EXPECT_EQ(log_.reads().size(), 1u);
  EXPECT_EQ(follower->Follow().code(), StatusCode::kCancelled);
  EXPECT_EQ(log_.reads().size(), 1u);
  EXPECT_TRUE(restorer_.keep_old_calls.empty());
}

TEST_F(LogFollowerTest, StoppedWhileFetchingACheckpointItKeepsItsStore) {
  auto follower = NewFollower(nullptr);
  Commit(3);
  ASSERT_TRUE(follower->Follow().ok());
  Commit(7);
  log_.TrimThrough(6);
  restorer_.wait_for_cancel = true;
  const storage::Store* before = follower->store();

  auto entered = restorer_.entered.promise.get_future();
  auto following = std::async(std::launch::async, [&] { return follower->Follow(); });
  ASSERT_EQ(entered.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  follower->Stop();
  ASSERT_EQ(following.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(following.get().code(), StatusCode::kCancelled);

  EXPECT_EQ(follower->store(), before);
  EXPECT_EQ(follower->applied(), 3u);
  EXPECT_EQ(LogIndexOf(*follower->store()), 3u);
  EXPECT_TRUE(Has("clusterd_ha_checkpoint_restore_failures_total 0"));
  EXPECT_TRUE(Has("clusterd_ha_checkpoint_restores_total 0"));
}

TEST_F(LogFollowerTest, ARestoreThatCannotReopenTheStoreEndsFollowing) {
  // The swap failed and the old store did not open again: nothing to follow
  // into; the replica gives up (its process restarts).
  class LosesTheStore final : public LogFollower::Restorer {
   public:
    Status Restore(std::unique_ptr<storage::Store>* store, bool, const std::function<bool()>&) override {
      store->reset();
      return Internal("cannot open the store");
    }
  } restorer;
  LogFollower::Options options;
  LogFollower follower(&log_, &restorer, nullptr, &clock_, options);
  ASSERT_TRUE(follower.Start(OpenOn(nullptr)).ok());
  Commit(5);
  log_.TrimThrough(2);
  Status st = follower.Follow();
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_EQ(follower.store(), nullptr);
}

}  // namespace
}  // namespace clusterd::ha
