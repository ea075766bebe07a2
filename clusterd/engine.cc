#include "clusterd/engine.h"

#include <cstdlib>
#include <optional>

#include "common/logging.h"

namespace clusterd {

Engine::Engine(ClusterState* state, storage::Store* store, WatchHub* hub, const Clock* clock, EngineOptions options,
               MetricsRegistry* metrics)
    : state_(state), store_(store), hub_(hub), clock_(clock), options_(options) {
  if (options_.liveness_interval.count() <= 0) {
    options_.liveness_interval =
        std::clamp<std::chrono::nanoseconds>(options_.node_grace / 20, std::chrono::milliseconds(10),
                                             std::chrono::milliseconds(500));
  }
  if (metrics) {
    commits_ = &metrics->AddCounter("clusterd_store_commits_total", "Synced RocksDB writes (group commits).");
    changes_ = &metrics->AddCounter("clusterd_ingest_changes_total", "Messages and requests applied by the writer.");
    events_ = &metrics->AddCounter("clusterd_events_total", "Events appended to the event log.");
    commit_seconds_ = &metrics->AddHistogram("clusterd_store_commit_duration_seconds",
                                             "Latency of one synced group commit.",
                                             ExponentialBuckets(0.0001, 2, 16));
    group_size_ = &metrics->AddHistogram("clusterd_store_commit_group_size", "Changes per group commit.",
                                         ExponentialBuckets(1, 2, 14));
    delayed_ = &metrics->AddCounter("clusterd_store_commits_delayed_total",
                                    "Group commits held back (at most --commit-delay) to gather more changes.");
    metrics->AddCallbackGauge("clusterd_ingest_queue_depth", "Changes waiting for the writer.",
                              [this] { return static_cast<double>(queue_depth()); });
  }
}

Engine::~Engine() { Stop(); }

void Engine::Start() { thread_ = std::thread([this] { Run(); }); }

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
    if (now >= next_retention) {
      MaybeRetain(now, &m);
      next_retention = now + options_.retention_interval;
    }
    {
      std::unique_lock lock(state_->mutex());
      for (auto& apply : items) dones.push_back(apply(*state_, &m));
      if (now >= next_liveness) {
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
      const auto start = std::chrono::steady_clock::now();
      Status st = store_->Write(&m.batch);
      if (!st.ok()) {
        // Memory is ahead of the disk and the WAL state is unknown: the only
        // safe continuation is a restart that reloads what is durable.
        log->critical("group commit failed, exiting: {}", st.ToString());
        std::abort();
      }
      last_commit = std::chrono::steady_clock::now();
      if (commit_seconds_) {
        commit_seconds_->Observe(std::chrono::duration<double>(*last_commit - start).count());
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
