// A standby following the replicated log (high availability, docs/ha.md).
//
// It reads the entries after the last one its store holds (the store's log
// index) and applies each in one write, the index included, so the store
// knows where it stands after any crash and a new follower on it resumes
// there. Each entry names the revision the leader's store had before it; an
// entry over another revision is refused (FAILED_PRECONDITION), and an entry
// further on than the next one means the log was trimmed past this store
// (OUT_OF_RANGE). Either way only a peer's checkpoint helps: Follow asks the
// Restorer for one, at most every restore_interval, and follows on from the
// checkpoint's index.
//
// Thread contract: Start, CatchUp, Follow and Close on one thread, the
// standby's (the only one that writes the store; on_applied runs there);
// applied, error, behind_log, Stop and stopped on any.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "clusterd/ha/replication/log.h"
#include "clusterd/storage/change_set.h"
#include "clusterd/storage/store.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd::ha {

class LogFollower {
 public:
  // Puts a peer's checkpoint in place of a store the log no longer reaches.
  class Restorer {
   public:
    virtual ~Restorer() = default;
    // Replaces *store. `keep_old`: the store holds other history (it is kept
    // aside, not deleted). `cancelled` is polled while the files come: true
    // means give up. OK: *store is the checkpoint, open. An error: *store is
    // the old store (reopened if it was closed), or null when it could not
    // be reopened; then the follower cannot go on.
    virtual Status Restore(std::unique_ptr<storage::Store>* store, bool keep_old,
                           const std::function<bool()>& cancelled) = 0;
  };

  struct Options {
    // Entries per read: an entry holds at most ha_max_entry_bytes (plus one
    // closure), so this bounds an answer to a few tens of MiB.
    size_t batch = 16;
    // A store the log no longer reaches asks for a checkpoint this often.
    std::chrono::nanoseconds restore_interval = std::chrono::seconds(2);
  };

  // `log`, `restorer`, `metrics` (may be null) and `clock` are borrowed and
  // must outlive this. Metrics: clusterd_ha_log_index,
  // clusterd_ha_follow_errors_total, clusterd_ha_checkpoint_restores_total,
  // clusterd_ha_checkpoint_restore_failures_total.
  // (Production passes MonotonicClock::Instance().)
  LogFollower(replication::LogReader* log, Restorer* restorer, MetricsRegistry* metrics, const Clock* clock,
              Options options);

  // Follows into `store` from the last entry it holds and its revision.
  Status Start(std::unique_ptr<storage::Store> store);
  // The store followed into; null before Start, after Close, and after a
  // restore that could not reopen it.
  storage::Store* store() const { return store_.get(); }
  // Closes the store (before a leader opens it).
  void Close() { store_.reset(); }
  // Runs with each entry's changes once they are written (the standby's
  // watchers see them).
  void set_on_applied(std::function<void(const storage::ChangeSet&)> on_applied) {
    on_applied_ = std::move(on_applied);
  }

  // Reads and applies entries until the log has none left. `linearizable`:
  // every committed entry is seen (a new leader's read). OUT_OF_RANGE or
  // FAILED_PRECONDITION: the log no longer reaches this store (it needs a
  // checkpoint); CANCELLED: stopped (entries read already are applied);
  // anything else: the read or a write failed, call again.
  Status CatchUp(bool linearizable);
  // A standby's step: CatchUp, and when the log no longer reaches the store,
  // a checkpoint in its place (at most every restore_interval) and CatchUp
  // from there. OK: caught up. error() and behind_log() tell the outcome to
  // other threads; a failure is counted each time and logged when it
  // changes.
  Status Follow();

  // Any thread: CatchUp returns CANCELLED before its next read, a restore
  // gives up, and nothing more is read or written.
  void Stop() { stopped_ = true; }
  bool stopped() const { return stopped_.load(); }

  // The last entry in the store.
  uint64_t applied() const { return applied_.load(); }
  // Why the last Follow did not catch up; "" when it did.
  std::string error() const;
  // The last Follow found that the log no longer reaches this store, and
  // did not catch up after all (the leader then stops keeping the log for
  // it).
  bool behind_log() const { return behind_log_.load(); }

  static bool NeedsCheckpoint(const Status& st) {
    return st.code() == StatusCode::kOutOfRange || st.code() == StatusCode::kFailedPrecondition;
  }

 private:
  // Where the store stands: its log index and revision counter.
  Status Position();
  void Record(const Status& st, bool behind);

  replication::LogReader* const log_;
  Restorer* const restorer_;
  const Clock* const clock_;
  const Options options_;
  std::shared_ptr<spdlog::logger> logger_;
  Counter* errors_ = nullptr;
  Counter* restores_ = nullptr;
  Counter* restore_failures_ = nullptr;

  std::unique_ptr<storage::Store> store_;
  std::function<void(const storage::ChangeSet&)> on_applied_;
  std::atomic<uint64_t> applied_{0};
  uint64_t revision_ = 0;       // the store's revision counter
  storage::ChangeSet written_;  // the entry applied last
  TimePoint next_restore_{};
  std::atomic<bool> stopped_{false};
  std::atomic<bool> behind_log_{false};
  mutable std::mutex error_mu_;
  std::string error_;  // error_mu_
};

}  // namespace clusterd::ha
