// The single writer. Every change to ClusterState runs on the Engine's thread:
// it drains the queue, applies each closure to the state (under the state's
// exclusive lock), commits everything the group produced with ONE synced
// Store write (group commit: one ChangeSet), then publishes the events to
// watchers and runs each closure's completion. So many agents' messages share
// one fsync, and no store call ever runs on a gRPC thread.
//
// Disk full (docs/operate.md): with a DiskMonitor set, client writes are
// refused (SubmitWrite: UNAVAILABLE with the reason) while the data dir is
// below its free-space reserve or the store cannot be written, and the
// writer commits nothing then: a group it has applied is HELD (not
// acknowledged, not published to watchers) and committed once space returns,
// by writing the same change set again (idempotent: puts and deletes). A failed
// commit is held the same way instead of ending the process; the writer
// reopens the store (Store::Reopen: a fresh RocksDB instance) before it retries. Nothing is
// acknowledged before it is durable, so nothing acknowledged is lost. Node
// liveness is suspended while writes are refused (a lost node could not be
// recorded, and agents whose writes are refused reconnect): nodes get a
// whole grace period again when writes resume.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "clusterd/cluster_state.h"
#include "clusterd/storage/store.h"
#include "clusterd/watch_hub.h"
#include "common/clock.h"
#include "common/metrics.h"

namespace clusterd {

struct EngineOptions {
  std::chrono::nanoseconds node_grace = std::chrono::seconds(10);
  // How often liveness is checked; the default follows node_grace.
  std::chrono::nanoseconds liveness_interval = std::chrono::milliseconds(0);
  uint64_t retention_events = 1'000'000;
  std::chrono::nanoseconds retention_age = std::chrono::hours(24 * 7);
  std::chrono::nanoseconds retention_interval = std::chrono::seconds(60);
  // Finished recovery records, pruned on the same schedule as the event log.
  ClusterState::RecoveryRetention recovery_retention;
  size_t max_group = 4096;
  // Group commit under a steady light load. When the writer has fewer than
  // commit_group changes and committed last less than 2 x commit_delay
  // ago, it waits up to commit_delay (or until commit_group changes are
  // there) before it commits: one fdatasync for several changes instead of
  // one each (~100 us of CPU apiece on a VM). Under a heavy load groups are
  // larger than commit_group and nothing waits; the first change after a
  // quiet spell does not wait either. 0: never wait.
  std::chrono::nanoseconds commit_delay = std::chrono::milliseconds(2);
  size_t commit_group = 4;
  // While commits are held (disk below its reserve, store not writable): how
  // often the writer checks again and retries.
  std::chrono::nanoseconds store_retry_interval = std::chrono::seconds(1);
};

class DiskMonitor;

class Engine {
 public:
  // Runs after the commit that holds the change is durable, on the writer
  // thread; must be quick (hand results to a reactor, never block).
  using Done = std::function<void()>;
  // Runs on the writer thread with the state locked; records its change in
  // the Mutation and returns what to do once it is durable (may be empty).
  using Apply = std::function<Done(ClusterState& state, Mutation* m)>;

  Engine(ClusterState* state, storage::Store* store, WatchHub* hub, const Clock* clock, EngineOptions options,
         MetricsRegistry* metrics);
  ~Engine();

  // Runs on the writer thread after every group (and at least every liveness
  // interval), with the state locked, before the commit: it may add changes
  // to m and Dones to run once they are durable. Returns when it wants to
  // run again even if nothing is submitted (TimePoint::max(): no need); the
  // writer wakes up then. Set before Start.
  using Tick = std::function<TimePoint(ClusterState& state, TimePoint now, Mutation* m, std::vector<Done>* after)>;
  void set_tick(Tick tick) { tick_ = std::move(tick); }
  // Free space of the data dir; set before Start; may stay null (no reserve).
  // The writer refreshes it before every commit and at least every liveness
  // interval.
  void set_disk_monitor(DiskMonitor* monitor) { monitor_ = monitor; }

  void Start();
  // Applies and commits everything already submitted, then stops the thread.
  void Stop();

  // Thread-safe. Returns false (and drops the closure) after Stop. Not
  // refused on a full disk: for internal changes (disconnects, recovery
  // results), which the writer holds until they can be committed.
  bool Submit(Apply apply);
  // Thread-safe. A client's write: refused with UNAVAILABLE (and the reason)
  // while writes are refused (WriteRefusal), or after Stop.
  Status SubmitWrite(Apply apply);
  // Thread-safe. Why a client's write would be refused now; OK when it would
  // not. Counts nothing (SubmitWrite counts refusals).
  Status WriteRefusal() const;
  bool writable() const { return WriteRefusal().ok(); }
  size_t queue_depth() const;

 private:
  void Run();
  void MaybeRetain(TimePoint now, Mutation* m);
  // Writer thread. Whether a commit may be tried now: refreshes the monitor
  // and, when there is room and the store is read-only or failed, reopens
  // it for writing.
  bool CanCommit();
  // Writer thread. Commits m, holding it (retrying every
  // store_retry_interval) until it is durable. Returns false when stopped
  // with m still not durable.
  bool Commit(Mutation* m, size_t changes);
  void SetStoreError(const Status& st);

  ClusterState* state_;
  storage::Store* store_;
  WatchHub* hub_;
  const Clock* clock_;
  EngineOptions options_;
  Tick tick_;
  DiskMonitor* monitor_ = nullptr;
  // The store cannot be written (read-only open, failed commit); the reason under mu_.
  std::atomic<bool> store_unavailable_{false};
  std::atomic<size_t> held_changes_{0};  // changes applied in memory, waiting for a commit the store can take
  std::string store_error_;
  std::chrono::steady_clock::time_point next_reopen_{};  // writer thread: reopen attempts are spaced

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Apply> queue_;
  bool stopping_ = false;
  size_t delay_wanted_ = 0;  // while the writer holds a commit back: queued changes that end the wait
  std::thread thread_;

  Counter* recoveries_pruned_ = nullptr;
  Counter* commits_ = nullptr;
  Counter* changes_ = nullptr;
  Counter* events_ = nullptr;
  Histogram* commit_seconds_ = nullptr;
  Histogram* group_size_ = nullptr;
  Counter* delayed_ = nullptr;
  Counter* refused_low_space_ = nullptr;
  Counter* refused_store_ = nullptr;
  Counter* write_failures_ = nullptr;
};

}  // namespace clusterd
