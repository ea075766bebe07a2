// Disk full, without filling a disk: a fake free-space source drives the
// DiskMonitor, and the engine refuses client writes below the reserve, holds
// what it has applied (not acknowledged, not published) and commits it by
// itself once space returns. The real thing (a small tmpfs) is in
// disk_full_process_test.cc.
#include <atomic>
#include <shared_mutex>

#include <gtest/gtest.h>

#include "clusterd/engine/disk_monitor.h"
#include "clusterd/engine/engine.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/storage/rocksdb_store.h"
#include "test/support/state/state_fixtures.h"
#include "test/support/temp_dir.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kReserve = 256ull << 20;
constexpr auto kRetry = std::chrono::milliseconds(10);  // EngineOptions::store_retry_interval

struct FakeDisk {
  std::atomic<uint64_t> free_bytes{10ull << 30};
  std::atomic<uint64_t> free_inodes{5000};
  std::atomic<bool> fail{false};
};

class FakeSource final : public FreeSpaceSource {
 public:
  explicit FakeSource(FakeDisk* disk) : disk_(disk) {}
  StatusOr<DiskSpace> Query() override {
    if (disk_->fail) return Unavailable("statvfs: injected failure");
    DiskSpace d;
    d.free_bytes = disk_->free_bytes;
    d.free_inodes = disk_->free_inodes;
    return d;
  }

 private:
  FakeDisk* disk_;
};

using testing::MakeHello;

TEST(DiskMonitorTest, ReasonNamesTheDirTheFreeSpaceAndTheReserve) {
  FakeDisk disk;
  MetricsRegistry metrics;
  DiskMonitor monitor(std::make_unique<FakeSource>(&disk), {"/data", kReserve, 1024}, &metrics);
  EXPECT_FALSE(monitor.low());
  EXPECT_FALSE(monitor.LowSpaceReason().has_value());

  disk.free_bytes = 1000;
  EXPECT_FALSE(monitor.Refresh());
  ASSERT_TRUE(monitor.LowSpaceReason().has_value());
  EXPECT_EQ(*monitor.LowSpaceReason(),
            "data dir /data has 1000 bytes free, below the min_free_bytes reserve 268435456; writes resume when "
            "space returns");
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("clusterd_data_dir_free_bytes 1000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("clusterd_data_dir_free_inodes 5000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("clusterd_data_dir_min_free_bytes 268435456\n"), std::string::npos) << text;

  disk.free_bytes = kReserve;  // exactly the reserve is enough
  disk.free_inodes = 10;
  EXPECT_FALSE(monitor.Refresh());
  EXPECT_NE(monitor.LowSpaceReason()->find("has 10 inodes free, below the min_free_inodes reserve 1024"),
            std::string::npos);

  disk.free_inodes = 1024;
  EXPECT_TRUE(monitor.Refresh());
  EXPECT_FALSE(monitor.LowSpaceReason().has_value());

  // A failed query keeps the last answer and is counted.
  disk.fail = true;
  EXPECT_TRUE(monitor.Refresh());
  EXPECT_NE(metrics.Render().find("clusterd_data_dir_statvfs_errors_total 1\n"), std::string::npos);
}

class DiskFullEngineTest : public ::testing::Test {
 protected:
  void OpenStore(bool read_only) {
    storage::StoreOptions so;
    so.read_only = read_only;
    auto store = storage::RocksDbStore::Open(dir_.path(), so);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }
  void Start(bool read_only = false) {
    ASSERT_NO_FATAL_FAILURE(OpenStore(read_only));
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    ASSERT_TRUE(state_->Load().ok());
    hub_ = std::make_unique<WatchHub>(store_.get(), 1024);
    hub_->Init(state_->revision());
    if (!monitor_) {
      monitor_ = std::make_unique<DiskMonitor>(std::make_unique<FakeSource>(&disk_),
                                               DiskMonitorOptions{dir_.path(), kReserve, 1024}, &metrics_);
    }
    monitor_->Refresh();
    // The engine's metrics once per registry (a restart gets none).
    MetricsRegistry* metrics = engine_metrics_ ? nullptr : &metrics_;
    engine_metrics_ = true;
    EngineOptions eo;
    eo.store_retry_interval = kRetry;
    eo.liveness_interval = 10ms;
    eo.commit_delay = 0ns;  // every Step commits what it applied (group commit is engine_watch_test's)
    Engine::Hooks hooks;
    hooks.disk_monitor = monitor_.get();
    engine_ = std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), &clock_, eo, metrics, std::move(hooks));
  }
  // The writer is stepped by hand on the FakeClock (no thread, no waiting).
  // Steps until the queue is empty; true when nothing is held either.
  bool Drain() {
    for (;;) {
      const Engine::StepResult r = engine_->Step();
      if (r.held) return false;
      if (r.gathering) {
        clock_.Set(r.next);
      } else if (engine_->queue_depth() == 0) {
        return true;
      }
    }
  }
  void Stop() {
    engine_.reset();
    hub_.reset();
    state_.reset();
    store_.reset();
  }
  // A client's write (the path every gRPC write takes).
  Status Hello(const std::string& node, uint64_t session, std::atomic<int>* done) {
    return engine_->SubmitWrite([node, session, done](ClusterState& s, Mutation* m) -> Engine::Done {
      EXPECT_TRUE(s.ApplyHello(MakeHello(node), session, m).ok());
      return [done] { (*done)++; };
    });
  }
  std::string Metrics() { return metrics_.Render(); }
  v1::Health NodeHealth(const std::string& node) {
    v1::GetNodeRequest req;
    req.set_name(node);
    auto resp = state_->Read([&](const StateView& s) { return s.GetNode(req); });
    EXPECT_TRUE(resp.ok()) << resp.status().ToString();
    return resp.ok() ? resp->node().health() : v1::HEALTH_UNSPECIFIED;
  }

  testing::TempDir dir_;
  Catalog catalog_ = Catalog::Default();
  FakeClock clock_;
  FakeDisk disk_;
  MetricsRegistry metrics_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<WatchHub> hub_;
  std::unique_ptr<DiskMonitor> monitor_;
  std::unique_ptr<Engine> engine_;
  bool engine_metrics_ = false;
};

TEST_F(DiskFullEngineTest, BelowTheReserveClientWritesAreRefusedAndHeldChangesCommitWhenSpaceReturns) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::atomic<int> done{0};
  ASSERT_TRUE(Hello("node0", 1, &done).ok());
  ASSERT_TRUE(Drain());
  ASSERT_EQ(done.load(), 1);
  const uint64_t durable = state_->durable_revision();
  ASSERT_GT(durable, 0u);
  EXPECT_NE(Metrics().find("clusterd_store_writable 1\n"), std::string::npos);

  disk_.free_bytes = 1 << 20;
  monitor_->Refresh();
  Status refused = Hello("node1", 2, &done);
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("has 1048576 bytes free, below the min_free_bytes reserve 268435456; writes "
                                   "resume when space returns"),
            std::string::npos)
      << refused.message();
  EXPECT_NE(Metrics().find("clusterd_writes_refused_total{reason=\"low_space\"} 1\n"), std::string::npos);
  EXPECT_NE(Metrics().find("clusterd_store_writable 0\n"), std::string::npos);

  // An internal change (e.g. an agent's disconnect) is applied but held:
  // nothing durable, nothing published, its completion not run.
  std::atomic<bool> internal_done{false};
  ASSERT_TRUE(engine_->Submit([&internal_done](ClusterState& s, Mutation* m) -> Engine::Done {
    EXPECT_TRUE(s.ApplyHello(MakeHello("node2"), 3, m).ok());
    return [&internal_done] { internal_done = true; };
  }));
  const Engine::StepResult held = engine_->Step();
  EXPECT_TRUE(held.held);
  EXPECT_EQ(held.applied, 1u);
  EXPECT_EQ(held.next, clock_.Now() + kRetry);
  EXPECT_GT(state_->Read([](const StateView& s) { return s.revision(); }), durable);
  EXPECT_NE(Metrics().find("clusterd_store_held_changes 1\n"), std::string::npos);
  EXPECT_FALSE(internal_done.load());
  EXPECT_EQ(state_->durable_revision(), durable);
  EXPECT_EQ(hub_->head(), durable);
  auto on_disk = store_->ReadEvents(durable, 100);
  ASSERT_TRUE(on_disk.ok());
  EXPECT_TRUE(on_disk->empty());
  // Reads keep working.
  EXPECT_EQ(NodeHealth("node0"), v1::HEALTH_HEALTHY);
  // Retried at its deadline, still held while the disk is full.
  clock_.Advance(kRetry);
  EXPECT_TRUE(engine_->Step().held);
  EXPECT_FALSE(internal_done.load());

  // Space returns: the held change is committed at its next retry, then published.
  disk_.free_bytes = 10ull << 30;
  EXPECT_TRUE(engine_->Step().held);  // not before its retry is due
  EXPECT_FALSE(internal_done.load());
  clock_.Advance(kRetry);
  const Engine::StepResult committed = engine_->Step();
  EXPECT_FALSE(committed.held);
  EXPECT_TRUE(internal_done.load());
  EXPECT_EQ(state_->durable_revision(), state_->revision());
  EXPECT_EQ(hub_->head(), state_->revision());
  EXPECT_NE(Metrics().find("clusterd_store_held_changes 0\n"), std::string::npos);
  EXPECT_TRUE(engine_->writable());
  ASSERT_TRUE(Hello("node3", 4, &done).ok());
  ASSERT_TRUE(Drain());
  EXPECT_EQ(done.load(), 2);

  // Everything acknowledged is on disk.
  const uint64_t final_revision = state_->durable_revision();
  Stop();
  ASSERT_NO_FATAL_FAILURE(OpenStore(false));
  EXPECT_EQ(store_->revision_at_open(), final_revision);
  ClusterState reloaded(store_.get(), &catalog_, &clock_);
  ASSERT_TRUE(reloaded.Load().ok());
  EXPECT_EQ(reloaded.node_count(), 3u);  // node0, node2 (held, then committed), node3; node1 was refused
}

TEST_F(DiskFullEngineTest, LivenessIsSuspendedWhileWritesAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::atomic<int> done{0};
  ASSERT_TRUE(Hello("node0", 1, &done).ok());
  ASSERT_TRUE(Drain());
  ASSERT_EQ(done.load(), 1);
  disk_.free_bytes = 0;
  monitor_->Refresh();
  // Far past the grace: a node lost now could not be recorded (and agents
  // whose writes are refused reconnect), so none is declared lost.
  clock_.Advance(std::chrono::minutes(5));
  std::atomic<int> loops{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(engine_->Submit([&loops](ClusterState&, Mutation*) -> Engine::Done { return [&loops] { loops++; }; }));
  }
  ASSERT_TRUE(Drain());
  EXPECT_EQ(loops.load(), 3);
  EXPECT_EQ(NodeHealth("node0"), v1::HEALTH_HEALTHY);

  // When writes resume the node gets a whole grace period again...
  disk_.free_bytes = 10ull << 30;
  engine_->Step();
  EXPECT_TRUE(engine_->writable());
  EXPECT_EQ(NodeHealth("node0"), v1::HEALTH_HEALTHY);
  // ...and is lost after it.
  clock_.Advance(std::chrono::minutes(1));
  engine_->Step();
  EXPECT_EQ(NodeHealth("node0"), v1::HEALTH_UNKNOWN);
}

TEST_F(DiskFullEngineTest, ReadOnlyStoreServesReadsAndBecomesWritableWhenSpaceReturns) {
  // A store with one node in it.
  ASSERT_NO_FATAL_FAILURE(Start());
  std::atomic<int> done{0};
  ASSERT_TRUE(Hello("node0", 1, &done).ok());
  ASSERT_TRUE(Drain());
  ASSERT_EQ(done.load(), 1);
  const uint64_t revision = state_->durable_revision();
  Stop();

  // Restarted on a full disk: opened read-only, nothing written.
  disk_.free_bytes = 0;
  ASSERT_NO_FATAL_FAILURE(Start(/*read_only=*/true));
  EXPECT_TRUE(store_->read_only());
  EXPECT_EQ(state_->revision(), revision);
  EXPECT_EQ(NodeHealth("node0"), v1::HEALTH_HEALTHY);
  auto events = store_->ReadEvents(0, 100);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), revision);
  Status refused = Hello("node1", 2, &done);
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("min_free_bytes"), std::string::npos) << refused.message();
  engine_->Step();
  EXPECT_FALSE(engine_->writable());
  EXPECT_TRUE(store_->read_only());

  // Space returns: the engine reopens the store for writing by itself.
  disk_.free_bytes = 10ull << 30;
  engine_->Step();
  EXPECT_TRUE(engine_->writable());
  EXPECT_FALSE(store_->read_only());
  ASSERT_TRUE(Hello("node1", 2, &done).ok());
  ASSERT_TRUE(Drain());
  EXPECT_EQ(done.load(), 2);
  EXPECT_GT(state_->durable_revision(), revision);
}

TEST(StoreReadOnlyTest, ReadOnlyStoreRefusesWritesAndReopensForWriting) {
  testing::TempDir dir;
  {
    auto store = storage::RocksDbStore::Open(dir.path());
    ASSERT_TRUE(store.ok());
  }
  storage::StoreOptions so;
  so.read_only = true;
  auto store = storage::RocksDbStore::Open(dir.path(), so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  storage::ChangeSet batch;
  batch.Put(storage::Cf::kMeta, "k", "v");
  Status st = (*store)->Write(batch);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("read-only"), std::string::npos);
  ASSERT_TRUE((*store)->Reopen(false).ok());
  EXPECT_FALSE((*store)->read_only());
  EXPECT_TRUE((*store)->Write(batch).ok());
  // Written twice: batches are idempotent (a held batch may be written again).
  EXPECT_TRUE((*store)->Write(batch).ok());

  // A store that does not exist cannot be created read-only.
  testing::TempDir empty;
  EXPECT_FALSE(storage::RocksDbStore::Open(empty.Sub("none"), so).ok());
}

}  // namespace
}  // namespace clusterd
