// The single writer. Every change to ClusterState runs on the writer: it
// drains the queue, applies each closure to the state (under the state's
// exclusive lock), commits everything the group produced with ONE synced
// Store write (group commit: one ChangeSet), then publishes the events to
// watchers and runs each closure's completion. So many agents' messages share
// one fsync, and no store call ever runs on a gRPC thread.
//
// The writer is a steppable commit pipeline (Step: one group, never waits)
// plus a thin thread driver (Start/Stop: steps whenever there is work or a
// deadline, and sleeps in between). Every decision (liveness, retention, the
// group-commit delay, retry spacing) reads the injected Clock, so tests step
// the pipeline on a FakeClock without a thread and without waiting.
//
// Disk full (docs/operate.md): with a DiskMonitor hooked in, client writes are
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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "clusterd/engine/watch_hub.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/state/writer_rule.h"
#include "clusterd/storage/store.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/thread_checker.h"

namespace clusterd {

struct EngineOptions {
  std::chrono::nanoseconds node_grace = std::chrono::seconds(10);
  // Liveness is checked when the next node could cross node_grace, and
  // this often while no node is watched; the default follows node_grace.
  std::chrono::nanoseconds liveness_interval = std::chrono::milliseconds(0);
  // Set (the server): no node is declared lost before Serve() says agents
  // can reach this ClusterD, and every node's grace runs from then, however
  // long the store's load and the services' start took: a restarted or newly
  // elected ClusterD gives every agent a whole node_grace to come back.
  // Unset (tests that step by hand): liveness starts with the first Step.
  bool liveness_waits_for_serve = false;
  // The reattach storm after a restart or a takeover. Once the nodes' grace
  // starts, the agents still to come back (ClusterState::AwaitingReattach)
  // are counted every node_grace / 4. Past node_grace, while that count fell
  // within the last node_grace / 4 (agents are still coming back: the server,
  // not they, sets the pace), those still to come back are not declared lost,
  // for at most reattach_grace more; once the count stops falling (or it is
  // reached) they are, at once. A fleet too large to reattach within one
  // node_grace (100,000 agents on 2 vCPUs: over a minute) is then not called
  // lost in part by its own reattach, and a node whose agent is really gone
  // is declared lost at most node_grace / 4 after the others are back.
  // 0: off (every node is lost one grace after Serve).
  std::chrono::nanoseconds reattach_grace{0};
  uint64_t retention_events = 1'000'000;
  std::chrono::nanoseconds retention_age = std::chrono::hours(24 * 7);
  std::chrono::nanoseconds retention_interval = std::chrono::seconds(60);
  // Finished recovery records, pruned on the same schedule as the event log.
  ClusterState::RecoveryRetention recovery_retention;
  size_t max_group = 4096;
  // A group stops taking closures once its change set holds this many bytes
  // (the rest wait for the next group); 0: no limit. High availability sets
  // it, since one etcd transaction carries a group's change set.
  size_t max_group_bytes = 0;
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
  using Done = WriterDone;
  // Runs on the writer thread with the state locked; records its change in
  // the Mutation and returns what to do once it is durable (may be empty).
  using Apply = WriterApply;
  // Engine::Submit as a value: what rules hand their asynchronous work so
  // that its results come back onto the writer.
  using SubmitFn = WriterSubmit;

  // What the writer calls besides the submitted closures; fixed at
  // construction. Each may be empty.
  struct Hooks {
    // The writer's rules (state/writer_rule.h), run in this order after
    // every group (and at least every liveness interval), with the state
    // locked, before the commit: each may add changes to the group and Dones
    // to run once they are durable, and says when it is next due (the writer
    // wakes up then). Not owned; they outlive the Engine. The composition
    // root lists them (clusterd/server/server.cc: auto-clear, separation,
    // chain drift, repeat offenders, then the recovery Coordinator).
    std::vector<WriterRule*> rules;
    // Free space of the data dir (not owned; outlives the Engine); null: no
    // reserve. The writer refreshes it before every commit and at least
    // every liveness interval.
    DiskMonitor* disk_monitor = nullptr;
  };

  // All pointers are borrowed and must outlive the Engine.
  Engine(ClusterState* state, storage::Store* store, WatchHub* hub, const Clock* clock, EngineOptions options,
         MetricsRegistry* metrics, Hooks hooks);
  // No hooks.
  Engine(ClusterState* state, storage::Store* store, WatchHub* hub, const Clock* clock, EngineOptions options,
         MetricsRegistry* metrics);
  ~Engine();

  // Any thread, once gRPC listens (EngineOptions::liveness_waits_for_serve):
  // at its next Step the writer sees every node that is not lost now (its
  // grace starts) and checks liveness from one grace later.
  void Serve();

  // What one Step did and when the writer has something to do next.
  struct StepResult {
    size_t applied = 0;  // submitted closures applied (and committed unless held)
    // A group is applied but not durable (the store cannot take it yet): it
    // is retried at `next`, and nothing new is applied until it is durable.
    bool held = false;
    // A small group is left on the queue to gather more (commit_delay): it
    // goes out at `next` or once commit_group changes are queued.
    bool gathering = false;
    // Stop was called, the queue is empty and nothing is held: the driver ends.
    bool drained = false;
    // When to step again even if nothing is submitted (Clock time).
    TimePoint next = TimePoint::max();
  };

  // Writer only (checked in debug builds): the first caller becomes the
  // writer; with Start, that is the driver thread. Runs one turn of the
  // pipeline without waiting: retries a held group when its retry is due;
  // otherwise takes up to max_group queued closures (unless a small group is
  // gathering), runs retention, the closures, liveness and the tick hook,
  // commits, publishes and runs the completions.
  StepResult Step();

  // The thread driver: a thread that Steps whenever there is work or a
  // deadline is due. Not with a caller that Steps by hand.
  void Start();
  // Applies and commits everything already submitted, then stops the
  // driver. Without a driver, the calling thread drains the queue (it must be
  // the thread that Stepped, if any did).
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
  // Thread-safe. `fn` runs on the writer thread after every commit that
  // changed the state, until the Engine is destroyed: it must be quick (set a
  // flag, notify) and what it captures must live that long (a shared_ptr).
  void AddCommitListener(std::function<void()> fn);

 private:
  // One group: what its closures and the hooks changed, and their completions.
  struct Group {
    Mutation m;
    size_t items = 0;
    std::vector<Done> dones;
  };

  void Run();
  void MaybeRetain(TimePoint now, Mutation* m);
  // Writer, state locked. Whether the nodes still to reattach are held now
  // (EngineOptions::reattach_grace); ends the reattach when they are not.
  bool HoldForReattach(TimePoint now);
  // Writer. Whether a commit may be tried now: refreshes the monitor and,
  // when there is room and the store is read-only or failed, reopens it for
  // writing (at most every store_retry_interval).
  bool CanCommit(TimePoint now);
  // Writer. One attempt to make g durable; on failure the store's error is
  // recorded and client writes are refused.
  bool TryCommit(const Group& g, TimePoint now, bool already_held);
  // Writer. After g is durable: counts, publishes, runs the completions.
  void Finish(Group* g, TimePoint now);
  void SetStoreError(const Status& st);

  ClusterState* state_;
  storage::Store* store_;
  WatchHub* hub_;
  const Clock* clock_;
  EngineOptions options_;
  const Hooks hooks_;
  const SubmitFn submit_;  // this->Submit, handed to the rules
  const WriterKey key_;    // the state's lock is the writer's
  // The store cannot be written (read-only open, failed commit); the reason under mu_.
  std::atomic<bool> store_unavailable_{false};
  std::atomic<size_t> held_changes_{0};  // changes applied in memory, waiting for a commit the store can take
  std::string store_error_;

  // The writer's own state: only Step and what it calls touch it.
  ThreadChecker writer_;
  std::optional<TimePoint> next_liveness_;  // unset until the first Step
  bool liveness_started_ = false;           // the nodes' grace runs (Serve, or the first Step)
  // From the nodes' grace start until every agent is back or the hold ends.
  struct Reattach {
    TimePoint grace_end;    // the grace started at Serve runs out
    TimePoint until;        // held no longer than this
    TimePoint progress_at;  // the count last fell
    size_t awaiting = 0;    // agents still to come back, at the last count
    size_t at_grace = 0;    // ... when the grace ran out
    bool past_grace = false;
  };
  std::optional<Reattach> reattach_;
  std::atomic<size_t> awaiting_reattach_{0};  // the gauge's
  TimePoint next_retention_{};
  TimePoint rules_at_ = TimePoint::max();  // when the rules asked to run again
  TimePoint next_reopen_{};                // reopen attempts are spaced
  std::optional<TimePoint> last_commit_;   // when the last group commit ended
  std::optional<TimePoint> gather_until_;  // a small group waits on the queue until then
  std::optional<Group> held_;              // applied, not yet durable
  TimePoint retry_at_{};                   // when held_ is tried again

  std::mutex listeners_mu_;
  std::vector<std::function<void()>> listeners_;  // AddCommitListener's

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Apply> queue_;
  bool stopping_ = false;
  bool serving_ = false;     // Serve was called
  size_t delay_wanted_ = 0;  // while a small group gathers: the queue length that ends the wait
  std::thread thread_;

  Counter* recoveries_pruned_ = nullptr;
  Counter* reattached_late_ = nullptr;
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
