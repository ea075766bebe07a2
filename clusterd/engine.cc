#include "clusterd/engine.h"

#include <cstdlib>
#include <optional>
#include <shared_mutex>

#include "clusterd/disk_monitor.h"
#include "common/logging.h"

namespace clusterd {

Engine::Engine(ClusterState* state, storage::Store* store, WatchHub* hub, const Clock* clock, EngineOptions options,
               MetricsRegistry* metrics)
    : state_(state), store_(store), hub_(hub), clock_(clock), options_(options) {
  if (options_.liveness_interval.count() <= 0) {
    options_.liveness_interval = std::clamp<std::chrono::nanoseconds>(
        options_.node_grace / 20, std::chrono::milliseconds(10), std::chrono::milliseconds(500));
  }
  if (metrics) {
    commits_ = &metrics->AddCounter("clusterd_store_commits_total", "Synced RocksDB writes (group commits).");
    changes_ = &metrics->AddCounter("clusterd_ingest_changes_total", "Messages and requests applied by the writer.");
    events_ = &metrics->AddCounter("clusterd_events_total", "Events appended to the event log.");
    commit_seconds_ = &metrics->AddHistogram("clusterd_store_commit_duration_seconds",
                                             "Latency of one synced group commit.", ExponentialBuckets(0.0001, 2, 16));
    group_size_ = &metrics->AddHistogram("clusterd_store_commit_group_size", "Changes per group commit.",
                                         ExponentialBuckets(1, 2, 14));
    recoveries_pruned_ =
        &metrics->AddCounter("clusterd_recoveries_pruned_total", "Finished recovery records removed by retention.");
    metrics->AddCallbackGauge("clusterd_recoveries_stored", "Recovery records stored (any state).", [this] {
      std::shared_lock lock(state_->mutex());
      return static_cast<double>(state_->recovery_count());
    });
    delayed_ = &metrics->AddCounter("clusterd_store_commits_delayed_total",
                                    "Group commits held back (at most --commit-delay) to gather more changes.");
    metrics->AddCallbackGauge("clusterd_ingest_queue_depth", "Changes waiting for the writer.",
                              [this] { return static_cast<double>(queue_depth()); });
    refused_low_space_ = &metrics->AddCounter(
        "clusterd_writes_refused_total", "Client writes refused with UNAVAILABLE because the store cannot take them.",
        {{"reason", "low_space"}});
    refused_store_ = &metrics->AddCounter("clusterd_writes_refused_total",
                                          "Client writes refused with UNAVAILABLE because the store cannot take them.",
                                          {{"reason", "store_unavailable"}});
    write_failures_ = &metrics->AddCounter("clusterd_store_write_failures_total",
                                           "Group commits that failed (held and retried, never acknowledged).");
    metrics->AddCallbackGauge("clusterd_store_writable",
                              "1 while client writes are accepted; 0 while they are refused (disk below its reserve, "
                              "store read-only or failing).",
                              [this] { return writable() ? 1.0 : 0.0; });
    metrics->AddCallbackGauge("clusterd_store_held_changes",
                              "Changes applied in memory but held (not acknowledged, not published) until the store "
                              "can commit them.",
                              [this] { return static_cast<double>(held_changes_.load(std::memory_order_relaxed)); });
  }
  if (store_->read_only()) {
    store_unavailable_ = true;
    store_error_ = "the store at " + store_->path() +
                   " was opened read-only (too little free space to open it for "
                   "writing)";
  }
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Engine::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Engine::Submit(Apply apply) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(apply));
    // A commit held back waits for enough changes or its deadline: waking
    // the writer for each one would cost what the wait saves.
    wake = queue_.size() >= delay_wanted_;
  }
  if (wake) cv_.notify_one();
  return true;
}

Status Engine::SubmitWrite(Apply apply) {
  Status refusal = WriteRefusal();
  if (!refusal.ok()) {
    Counter* c = monitor_ && monitor_->low() ? refused_low_space_ : refused_store_;
    if (c) c->Inc();
    return refusal;
  }
  if (!Submit(std::move(apply))) return Unavailable("clusterd is shutting down");
  return Status::Ok();
}

Status Engine::WriteRefusal() const {
  if (monitor_) {
    if (auto reason = monitor_->LowSpaceReason()) return Unavailable(*reason);
  }
  if (store_unavailable_.load(std::memory_order_acquire)) {
    std::lock_guard lock(mu_);
    return Unavailable(store_error_ + "; writes resume when the store can be written again");
  }
  return Status::Ok();
}

void Engine::SetStoreError(const Status& st) {
  {
    std::lock_guard lock(mu_);
    store_error_ = "the store at " + store_->path() + " cannot be written (" + st.ToString() + ")";
  }
  store_unavailable_.store(true, std::memory_order_release);
}

bool Engine::CanCommit() {
  if (monitor_ && !monitor_->Refresh()) return false;
  if (!store_unavailable_.load(std::memory_order_acquire)) return true;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_reopen_) return false;
  next_reopen_ = now + options_.store_retry_interval;
  // A fresh instance: no background error from the failed write, a new WAL.
  Status st = store_->Reopen(/*read_only=*/false);
  if (!st.ok()) {
    GetLogger("store")->error("store still not writable: {}", st.ToString());
    SetStoreError(st);
    return false;
  }
  store_unavailable_.store(false, std::memory_order_release);
  GetLogger("store")->info("store at {} is writable again", store_->path());
  return true;
}

bool Engine::Commit(Mutation* m, size_t changes) {
  auto log = GetLogger("ingest");
  bool held = false;
  for (;;) {
    if (CanCommit()) {
      const auto start = std::chrono::steady_clock::now();
      Status st = store_->Write(m->changes);
      if (st.ok()) {
        if (held) {
          log->info("held group of {} changes committed: writes resume", changes);
          held_changes_.store(0, std::memory_order_relaxed);
        }
        if (commit_seconds_) {
          commit_seconds_->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        return true;
      }
      // Memory is ahead of the disk: nothing of this group is acknowledged
      // or published until the same batch is written.
      if (write_failures_) write_failures_->Inc();
      log->error("group commit failed, holding it and refusing writes: {}", st.ToString());
      SetStoreError(st);
    } else if (!held) {
      log->warn("holding a group commit of {} changes until the store can take it", changes);
    }
    held = true;
    held_changes_.store(std::max<size_t>(changes, 1), std::memory_order_relaxed);
    std::unique_lock lock(mu_);
    if (stopping_) return false;
    cv_.wait_for(lock, options_.store_retry_interval, [&] { return stopping_; });
    if (stopping_) {
      lock.unlock();
      // One last try, then give up: the group stays unacknowledged.
      if (CanCommit() && store_->Write(m->changes).ok()) return true;
      return false;
    }
  }
}

size_t Engine::queue_depth() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void Engine::MaybeRetain(TimePoint now, Mutation* m) {
  const uint64_t compacted = state_->compacted_revision();
  const uint64_t durable = state_->durable_revision();
  uint64_t to = durable > options_.retention_events ? durable - options_.retention_events : 0;
  const int64_t cutoff =
      std::chrono::duration_cast<std::chrono::seconds>((now - options_.retention_age).time_since_epoch()).count();
  auto by_age = store_->LastRevisionBefore(std::max(compacted, to), cutoff, 100'000);
  if (by_age.ok()) {
    to = std::max(to, *by_age);
  } else {
    GetLogger("store")->warn("retention scan: {}", by_age.status().ToString());
  }
  to = std::min(to, durable);
  if (to > compacted) {
    std::unique_lock lock(state_->mutex());
    state_->ApplyCompaction(to, m);
    GetLogger("store")->info("event log compacted to revision {}", to);
  }
  std::unique_lock lock(state_->mutex());
  if (size_t pruned = state_->ApplyRecoveryRetention(options_.recovery_retention, now, m)) {
    if (recoveries_pruned_) recoveries_pruned_->Inc(pruned);
    GetLogger("store")->info("recovery retention removed {} finished recovery record(s)", pruned);
  }
}

void Engine::Run() {
  auto log = GetLogger("ingest");
  TimePoint next_liveness = clock_->Now() + options_.node_grace;  // one grace period after start
  TimePoint next_retention = clock_->Now();
  std::vector<Apply> items;
  std::vector<Done> dones;
  TimePoint tick_at = TimePoint::max();  // when the tick asked to run again
  // When the last group commit ended (real time: this is about the disk).
  std::optional<std::chrono::steady_clock::time_point> last_commit;
  auto take = [&] {
    while (!queue_.empty() && items.size() < options_.max_group) {
      items.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  };
  for (;;) {
    items.clear();
    dones.clear();
    bool stop = false;
    {
      // Sleep until the next liveness check or the tick's next deadline.
      const TimePoint wake = std::min(next_liveness, tick_at);
      const auto wait = std::clamp<std::chrono::nanoseconds>(wake - clock_->Now(), std::chrono::nanoseconds(0),
                                                             options_.liveness_interval);
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, wait, [&] { return stopping_ || !queue_.empty(); });
      take();
      const auto delay = options_.commit_delay;
      if (!items.empty() && items.size() < options_.commit_group && delay.count() > 0 && !stopping_ && last_commit &&
          std::chrono::steady_clock::now() - *last_commit < 2 * delay) {
        delay_wanted_ = options_.commit_group - items.size();
        cv_.wait_for(lock, delay, [&] { return stopping_ || queue_.size() >= delay_wanted_; });
        delay_wanted_ = 0;
        take();
        if (delayed_) delayed_->Inc();
      }
      stop = stopping_ && queue_.empty();
    }
    Mutation m;
    const TimePoint now = clock_->Now();
    // Refresh the free space (and leave read-only mode when there is room):
    // while writes are refused, nothing that only the writer starts
    // (retention, liveness) adds to what would be held.
    const bool can_write = CanCommit();
    if (!can_write) next_liveness = std::max(next_liveness, now + options_.node_grace);
    if (can_write && now >= next_retention) {
      MaybeRetain(now, &m);
      next_retention = now + options_.retention_interval;
    }
    {
      std::unique_lock lock(state_->mutex());
      for (auto& apply : items) dones.push_back(apply(*state_, &m));
      if (can_write && now >= next_liveness) {
        // Check again when the next node could cross the grace (a moment
        // after, so that it has), and at least every liveness interval.
        const TimePoint expiry = state_->CheckLiveness(options_.node_grace, &m);
        next_liveness = now + options_.liveness_interval;
        if (expiry != TimePoint::max()) next_liveness = std::min(next_liveness, expiry + std::chrono::milliseconds(1));
      }
      // After the group: what it changed carries times up to now.
      if (tick_) tick_at = tick_(*state_, clock_->Now(), &m, &dones);
      state_->FlushDirty(&m);
    }
    if (!m.empty()) {
      if (!Commit(&m, items.size())) {
        // Stopped while the disk is still full. The group's changes are not
        // durable and must not be acknowledged, but its callers' calls can
        // only finish by being acknowledged: end the process (the restart
        // reloads what is durable, read-only until space returns).
        log->critical(
            "stopping with a group of {} changes that could not be committed (not acknowledged); "
            "exiting",
            items.size());
        std::_Exit(EXIT_FAILURE);
      }
      last_commit = std::chrono::steady_clock::now();
      if (commits_) {
        commits_->Inc();
        group_size_->Observe(static_cast<double>(items.size()));
        events_->Inc(m.events.size());
      }
    }
    if (changes_) changes_->Inc(items.size());
    state_->set_durable_revision(state_->revision());
    hub_->Publish(std::move(m.events));
    for (auto& done : dones) {
      if (done) done();
    }
    if (stop) break;
  }
  log->info("writer stopped at revision {}", state_->revision());
}

}  // namespace clusterd
