#include "clusterd/engine/engine.h"

#include <cstdlib>
#include <optional>
#include <shared_mutex>

#include "clusterd/engine/disk_monitor.h"
#include "common/logging.h"

namespace clusterd {

Engine::Engine(ClusterState* state, storage::Store* store, WatchHub* hub, const Clock* clock, EngineOptions options,
               MetricsRegistry* metrics, Hooks hooks)
    : state_(state),
      store_(store),
      hub_(hub),
      clock_(clock),
      options_(options),
      hooks_(std::move(hooks)),
      submit_([this](Apply apply) { return Submit(std::move(apply)); }) {
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
      return static_cast<double>(state_->Read([](const StateView& s) { return s.recovery_count(); }));
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
    metrics->AddCallbackGauge(
        "clusterd_nodes_awaiting_reattach",
        "After a restart or a takeover: nodes whose agent has not come back yet (counted every node_grace / 4 "
        "until all are back or the rest are declared lost).",
        [this] { return static_cast<double>(awaiting_reattach_.load(std::memory_order_relaxed)); });
    reattached_late_ = &metrics->AddCounter(
        "clusterd_nodes_reattached_late_total",
        "Nodes whose agent came back after node_grace from a restart or takeover, held (not declared lost) while "
        "the reattach was still under way (--reattach-grace).");
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

Engine::Engine(ClusterState* state, storage::Store* store, WatchHub* hub, const Clock* clock, EngineOptions options,
               MetricsRegistry* metrics)
    : Engine(state, store, hub, clock, options, metrics, Hooks{}) {}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  // The driver thread becomes the writer (the first to Step).
  thread_ = std::thread([this] { Run(); });
}

void Engine::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    return;
  }
  // Stepped by hand (or never started): drain here what is left.
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (queue_.empty() && !held_) return;
    }
    if (Step().drained) return;
  }
}

void Engine::Serve() {
  {
    std::lock_guard lock(mu_);
    serving_ = true;
  }
  cv_.notify_all();
}

void Engine::Run() {
  auto log = GetLogger("ingest");
  for (;;) {
    const StepResult r = Step();
    if (r.drained) break;
    // Sleep until there is work for the writer or its next deadline (at
    // most a liveness interval: the clock is checked again then).
    const auto wait = std::clamp<std::chrono::nanoseconds>(r.next - clock_->Now(), std::chrono::nanoseconds(0),
                                                           options_.liveness_interval);
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, wait, [&] {
      if (stopping_) return true;
      if (r.held) return false;                         // a held group is retried at its deadline
      if (serving_ && !liveness_started_) return true;  // the nodes' grace starts now
      if (r.gathering) return queue_.size() >= delay_wanted_;
      return !queue_.empty();
    });
  }
  log->info("writer stopped at revision {}", state_->revision());
}

bool Engine::Submit(Apply apply) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(apply));
    // A small group that gathers waits for enough changes or its deadline:
    // waking the writer for each one would cost what the wait saves.
    wake = queue_.size() >= delay_wanted_;
  }
  if (wake) cv_.notify_one();
  return true;
}

Status Engine::SubmitWrite(Apply apply) {
  Status refusal = WriteRefusal();
  if (!refusal.ok()) {
    Counter* c = hooks_.disk_monitor && hooks_.disk_monitor->low() ? refused_low_space_ : refused_store_;
    if (c) c->Inc();
    return refusal;
  }
  if (!Submit(std::move(apply))) return Unavailable("clusterd is shutting down");
  return Status::Ok();
}

Status Engine::WriteRefusal() const {
  if (hooks_.disk_monitor) {
    if (auto reason = hooks_.disk_monitor->LowSpaceReason()) return Unavailable(*reason);
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

bool Engine::CanCommit(TimePoint now) {
  CLUSTERD_DCHECK_ON_THREAD(writer_);
  if (hooks_.disk_monitor && !hooks_.disk_monitor->Refresh()) return false;
  if (!store_unavailable_.load(std::memory_order_acquire)) return true;
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

bool Engine::TryCommit(const Group& g, TimePoint now, bool already_held) {
  CLUSTERD_DCHECK_ON_THREAD(writer_);
  auto log = GetLogger("ingest");
  if (!CanCommit(now)) {
    if (!already_held) log->warn("holding a group commit of {} changes until the store can take it", g.items);
    return false;
  }
  // The commit latency is a measurement of the disk, not a decision: real time.
  const auto start = std::chrono::steady_clock::now();
  Status st = store_->Write(g.m.changes);
  if (st.ok()) {
    if (already_held) {
      log->info("held group of {} changes committed: writes resume", g.items);
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
  return false;
}

size_t Engine::queue_depth() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void Engine::MaybeRetain(TimePoint now, Mutation* m) {
  CLUSTERD_DCHECK_ON_THREAD(writer_);
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
    std::unique_lock lock(state_->mutex(key_));
    state_->ApplyCompaction(to, m);
    GetLogger("store")->info("event log compacted to revision {}", to);
  }
  std::unique_lock lock(state_->mutex(key_));
  if (size_t pruned = state_->ApplyRecoveryRetention(options_.recovery_retention, now, m)) {
    if (recoveries_pruned_) recoveries_pruned_->Inc(pruned);
    GetLogger("store")->info("recovery retention removed {} finished recovery record(s)", pruned);
  }
}

bool Engine::HoldForReattach(TimePoint now) {
  Reattach& r = *reattach_;
  const size_t awaiting = state_->AwaitingReattach();
  awaiting_reattach_.store(awaiting, std::memory_order_relaxed);
  if (awaiting < r.awaiting) {
    r.awaiting = awaiting;
    r.progress_at = now;
  }
  auto log = GetLogger("liveness");
  const auto ms = [](std::chrono::nanoseconds d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  if (now >= r.grace_end && !r.past_grace && awaiting > 0) {
    r.past_grace = true;
    r.at_grace = awaiting;
  }
  const bool coming = now - r.progress_at < options_.node_grace / 4;
  if (awaiting > 0 && (now < r.grace_end || (coming && now < r.until))) {
    if (r.past_grace && r.progress_at == now) {
      log->info(
          "reattach under way {} ms past the grace: {} agent(s) still to come back, not declared lost while "
          "others keep coming (at most {} ms more)",
          ms(now - r.grace_end), awaiting, ms(r.until - now));
    }
    return true;
  }
  if (r.past_grace) {
    const size_t late = r.at_grace - awaiting;
    if (reattached_late_) reattached_late_->Inc(late);
    log->warn(
        "reattach ended {} ms past the grace: {} agent(s) came back late and were held; {} still away are "
        "declared lost now ({})",
        ms(now - r.grace_end), late, awaiting,
        awaiting == 0 ? "none"
                      : (now >= r.until ? "reattach_grace reached" : "no agent came back for a quarter grace"));
  }
  reattach_.reset();
  awaiting_reattach_.store(0, std::memory_order_relaxed);
  return false;
}

Engine::StepResult Engine::Step() {
  CLUSTERD_DCHECK_ON_THREAD(writer_);
  const TimePoint now = clock_->Now();
  if (!next_liveness_) {
    next_liveness_ = TimePoint::max();  // until the nodes' grace starts
    next_retention_ = now;
  }
  StepResult result;
  bool stopping;
  bool serving;
  {
    std::lock_guard lock(mu_);
    stopping = stopping_;
    serving = serving_ || !options_.liveness_waits_for_serve;
  }

  if (held_) {
    // Nothing new is applied until the held group is durable.
    result.held = true;
    if (!stopping && now < retry_at_) {
      result.next = retry_at_;
      return result;
    }
    if (!TryCommit(*held_, now, /*already_held=*/true)) {
      if (stopping) {
        // Stopped while the disk is still full. The group's changes are not
        // durable and must not be acknowledged, but its callers' calls can
        // only finish by being acknowledged: end the process (the restart
        // reloads what is durable, read-only until space returns).
        GetLogger("ingest")->critical(
            "stopping with a group of {} changes that could not be committed (not acknowledged); "
            "exiting",
            held_->items);
        std::_Exit(EXIT_FAILURE);
      }
      retry_at_ = now + options_.store_retry_interval;
      result.next = retry_at_;
      return result;
    }
    Group g = std::move(*held_);
    held_.reset();
    Finish(&g, now);
    result.held = false;
    result.next = now;  // what was submitted meanwhile is due
    return result;
  }

  std::vector<Apply> items;
  {
    std::lock_guard lock(mu_);
    // Group commit under a steady light load (EngineOptions::commit_delay):
    // right after a commit, a small group waits on the queue for more.
    const size_t queued = queue_.size();
    const auto delay = options_.commit_delay;
    if (!stopping_ && queued > 0 && queued < options_.commit_group && delay.count() > 0 && last_commit_ &&
        now - *last_commit_ < 2 * delay) {
      if (!gather_until_) {
        gather_until_ = now + delay;
        if (delayed_) delayed_->Inc();
      }
      if (now < *gather_until_) {
        delay_wanted_ = options_.commit_group;
        result.gathering = true;
        result.next = *gather_until_;
        return result;
      }
    }
    gather_until_.reset();
    delay_wanted_ = 0;
    while (!queue_.empty() && items.size() < options_.max_group) {
      items.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    result.drained = stopping_ && queue_.empty();
  }

  Group g;
  bool split = false;  // the group filled up (max_group_bytes): the rest is due at once
  g.items = items.size();
  result.applied = items.size();
  // Refresh the free space (and leave read-only mode when there is room):
  // while writes are refused, nothing that only the writer starts
  // (retention, liveness) adds to what would be held.
  const bool can_write = CanCommit(now);
  if (!can_write) next_liveness_ = std::max(*next_liveness_, now + options_.node_grace);
  if (can_write && now >= next_retention_) {
    MaybeRetain(now, &g.m);
    next_retention_ = now + options_.retention_interval;
  }
  {
    std::unique_lock lock(state_->mutex(key_));
    for (size_t i = 0; i < items.size(); ++i) {
      g.dones.push_back(items[i](*state_, &g.m));
      if (options_.max_group_bytes > 0 && g.m.changes.byte_size() >= options_.max_group_bytes && i + 1 < items.size()) {
        // The group is full: the rest go first in the next one, in order.
        std::lock_guard qlock(mu_);
        for (size_t j = items.size(); j > i + 1; --j) queue_.push_front(std::move(items[j - 1]));
        g.items = result.applied = i + 1;
        result.drained = false;
        split = true;
        break;
      }
    }
    if (!liveness_started_ && serving) {
      // Agents can reach this ClusterD from now: none of them is declared
      // lost before a whole grace from here (after a restart or a takeover
      // the loaded nodes' last messages went to another process).
      state_->RestartGrace(now);
      next_liveness_ = now + options_.node_grace;
      liveness_started_ = true;
      const size_t awaiting = options_.reattach_grace.count() > 0 ? state_->AwaitingReattach() : 0;
      if (awaiting > 0) {
        awaiting_reattach_.store(awaiting, std::memory_order_relaxed);
        const TimePoint grace_end = now + options_.node_grace;
        reattach_ = Reattach{grace_end, grace_end + options_.reattach_grace, now, awaiting};
        next_liveness_ = now + options_.node_grace / 4;
      }
    }
    if (can_write && now >= *next_liveness_) {
      const bool hold = reattach_ && HoldForReattach(now);
      // Check again when the next node could cross the grace (a moment
      // after, so that it has). No node can cross it sooner: a node's last
      // message only gets later, and one that is watched from now on (new,
      // back from lost) crosses it a whole grace from now, after every node
      // seen by now. The check walks every node (4-7 % of clusterd's CPU at
      // 100,000 nodes every 500 ms); it runs about every grace less one
      // heartbeat interval now. With no node to watch: every liveness
      // interval; and at least once a grace (a step of the wall clock).
      const TimePoint expiry = state_->CheckLiveness(options_.node_grace, &g.m, hold);
      next_liveness_ = expiry == TimePoint::max()
                           ? now + options_.liveness_interval
                           : std::min(expiry + std::chrono::milliseconds(1), now + options_.node_grace);
      // While agents reattach, they are counted again a quarter grace on.
      if (reattach_) next_liveness_ = std::min(*next_liveness_, now + options_.node_grace / 4);
    }
    // After the group: what it changed carries times up to now.
    if (!hooks_.rules.empty()) {
      const WriterTick tick{clock_->Now(), &g.m, &g.dones, &submit_};
      rules_at_ = TimePoint::max();
      for (WriterRule* rule : hooks_.rules) rules_at_ = std::min(rules_at_, rule->Advance(*state_, tick));
    }
    state_->FlushDirty(&g.m);
  }
  if (!g.m.empty() && !TryCommit(g, now, /*already_held=*/false)) {
    held_changes_.store(std::max<size_t>(g.items, 1), std::memory_order_relaxed);
    held_ = std::move(g);
    retry_at_ = now + options_.store_retry_interval;
    result.held = true;
    result.drained = false;
    result.next = retry_at_;
    return result;
  }
  Finish(&g, now);
  result.next = split ? now : std::min(*next_liveness_, rules_at_);
  return result;
}

void Engine::AddCommitListener(std::function<void()> fn) {
  std::lock_guard lock(listeners_mu_);
  listeners_.push_back(std::move(fn));
}

void Engine::Finish(Group* g, TimePoint now) {
  CLUSTERD_DCHECK_ON_THREAD(writer_);
  const bool changed = !g->m.empty();
  if (changed) {
    last_commit_ = now;
    if (commits_) {
      commits_->Inc();
      group_size_->Observe(static_cast<double>(g->items));
      events_->Inc(g->m.events.size());
    }
  }
  if (changes_) changes_->Inc(g->items);
  state_->set_durable_revision(state_->revision());
  hub_->Publish(std::move(g->m.events));
  for (auto& done : g->dones) {
    if (done) done();
  }
  if (changed) {
    std::lock_guard lock(listeners_mu_);
    for (const auto& fn : listeners_) fn();
  }
}

}  // namespace clusterd
