#include "clusterd/ha/log_follower.h"

#include "clusterd/ha/replication/log_entry.h"
#include "clusterd/ha/replication/replicated_store.h"

namespace clusterd::ha {
namespace {

Status Cancelled() { return Status(StatusCode::kCancelled, "the follower is stopping"); }

}  // namespace

LogFollower::LogFollower(replication::LogReader* log, Restorer* restorer, MetricsRegistry* metrics, const Clock* clock,
                         Options options)
    : log_(log), restorer_(restorer), clock_(clock), options_(options), logger_(GetLogger("ha")) {
  if (metrics) {
    metrics->AddCallbackGauge("clusterd_ha_log_index", "The last log entry applied to this replica's store.",
                              [this] { return static_cast<double>(applied_.load()); });
    errors_ = &metrics->AddCounter("clusterd_ha_follow_errors_total",
                                   "Failed reads or applies while following the log (retried).");
    restores_ = &metrics->AddCounter("clusterd_ha_checkpoint_restores_total",
                                     "Times this replica replaced its store by a peer's checkpoint.");
    restore_failures_ = &metrics->AddCounter("clusterd_ha_checkpoint_restore_failures_total",
                                             "Attempts to fetch a peer's checkpoint that failed (retried).");
  }
}

Status LogFollower::Start(std::unique_ptr<storage::Store> store) {
  store_ = std::move(store);
  return Position();
}

Status LogFollower::Position() {
  auto index = replication::ReadLogIndex(*store_);
  if (!index.ok()) return index.status();
  applied_ = *index;
  revision_ = store_->revision_at_open();
  return Status::Ok();
}

Status LogFollower::CatchUp(bool linearizable) {
  for (;;) {
    if (stopped()) return Cancelled();
    uint64_t applied = applied_.load();
    auto read = log_->ReadAfter(applied, options_.batch, linearizable);
    if (!read.ok()) return read.status();
    for (const std::string& bytes : read->entries) {
      Status st = replication::ApplyLogEntry(store_.get(), bytes, &applied, &revision_, &written_);
      // Both need a peer's checkpoint (Follow); the codes stay apart.
      if (st.code() == StatusCode::kOutOfRange) {
        return OutOfRange(st.message() +
                          ": the log was trimmed past this replica (it was away, or its data dir is new); it needs a "
                          "checkpoint of a peer's store");
      }
      if (st.code() == StatusCode::kFailedPrecondition) {
        return FailedPrecondition(st.message() + "; it needs a checkpoint of a peer's store");
      }
      if (!st.ok()) return st;
      applied_.store(applied);
      if (on_applied_) on_applied_(written_);
    }
    if (!read->more) return Status::Ok();
  }
}

Status LogFollower::Follow() {
  Status st = CatchUp(/*linearizable=*/false);
  if (stopped()) return st;  // not a failure to follow: nothing recorded
  // Trimmed past this store, or it holds other history: only a peer's
  // checkpoint helps.
  const bool behind = NeedsCheckpoint(st);
  if (behind && clock_->Now() >= next_restore_) {
    Status restored = restorer_->Restore(&store_, /*keep_old=*/st.code() == StatusCode::kFailedPrecondition,
                                         [this] { return stopped(); });
    next_restore_ = clock_->Now() + options_.restore_interval;
    if (stopped()) return Cancelled();
    if (!store_) return restored;  // nothing to follow into: the caller gives up
    if (restored.ok()) restored = Position();
    if (restored.ok()) {
      if (restores_) restores_->Inc();
      st = CatchUp(/*linearizable=*/false);
    } else {
      if (restore_failures_) restore_failures_->Inc();
      st = Status(st.code(), st.message() + "; rebuilding: " + restored.message());
    }
  }
  Record(st, behind);
  return st;
}

void LogFollower::Record(const Status& st, bool behind) {
  const std::string now = st.ok() ? "" : st.message();
  bool changed;
  {
    std::lock_guard lock(error_mu_);
    changed = error_ != now;
    error_ = now;
  }
  behind_log_ = behind && !st.ok();
  if (!st.ok()) {
    if (errors_) errors_->Inc();
    // Retried every step: logged when it changes, counted every time.
    if (changed) logger_->warn("following the log: {}", st.ToString());
  } else if (changed) {
    logger_->info("following the log again at index {}", applied_.load());
  }
}

std::string LogFollower::error() const {
  std::lock_guard lock(error_mu_);
  return error_;
}

}  // namespace clusterd::ha
