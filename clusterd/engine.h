// The single writer. Every change to ClusterState runs on the Engine's thread:
// it drains the queue, applies each closure to the state (under the state's
// exclusive lock), commits everything the batch produced with ONE synced
// RocksDB write (group commit), then publishes the events to watchers and runs
// each closure's completion. So many agents' messages share one fsync, and no
// RocksDB call ever runs on a gRPC thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
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
};

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

  void Start();
  // Applies and commits everything already submitted, then stops the thread.
  void Stop();

  // Thread-safe. Returns false (and drops the closure) after Stop.
  bool Submit(Apply apply);
  size_t queue_depth() const;

 private:
  void Run();
  void MaybeRetain(TimePoint now, Mutation* m);

  ClusterState* state_;
  storage::Store* store_;
  WatchHub* hub_;
  const Clock* clock_;
  EngineOptions options_;
  Tick tick_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Apply> queue_;
  bool stopping_ = false;
  size_t delay_wanted_ = 0;  // while the writer holds a commit back: queued changes that end the wait
  std::thread thread_;

  Counter* commits_ = nullptr;
  Counter* changes_ = nullptr;
  Counter* events_ = nullptr;
  Histogram* commit_seconds_ = nullptr;
  Histogram* group_size_ = nullptr;
  Counter* delayed_ = nullptr;
};

}  // namespace clusterd
