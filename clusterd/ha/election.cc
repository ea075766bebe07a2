#include "clusterd/ha/election.h"

#include <algorithm>

namespace clusterd::ha {

namespace {

// Rounded up to whole seconds (etcd's unit), at least 1.
int64_t WholeSeconds(std::chrono::nanoseconds ttl) {
  return std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(ttl + std::chrono::milliseconds(999)).count());
}

TimePoint::rep SecondsAsNanos(int64_t seconds) {
  return std::chrono::duration_cast<TimePoint::duration>(std::chrono::seconds(seconds)).count();
}

}  // namespace

Election::Election(LeaseKv* kv, Options options, const Clock* clock)
    : kv_(kv),
      options_(std::move(options)),
      clock_(clock),
      ttl_seconds_(WholeSeconds(options_.ttl)),
      log_(GetLogger("ha")) {}

Election::~Election() { StopKeepAlive(); }

Status Election::GrantLease() {
  const auto sent = Nanos();
  auto granted = kv_->LeaseGrant(ttl_seconds_);
  if (!granted.ok()) return granted.status();
  lease_id_ = granted->id;
  valid_until_ = sent + SecondsAsNanos(granted->ttl_seconds);
  lease_lost_ = false;
  log_->info("lease {:x} granted, TTL {}s", granted->id, granted->ttl_seconds);
  return Status::Ok();
}

bool Election::LeaseValid() const { return Nanos() < valid_until_.load(); }

Status Election::KeepAlive() {
  const int64_t id = lease_id_.load();
  const auto sent = Nanos();
  auto ttl = kv_->LeaseKeepAlive(id);
  if (ttl.ok() && *ttl > 0) {
    valid_until_ = sent + SecondsAsNanos(*ttl);
  } else if (ttl.ok()) {
    if (!lease_lost_.exchange(true)) log_->error("lease {:x} expired", id);
  } else {
    log_->warn("lease keep-alive: {}", ttl.status().ToString());
  }
  if (!LeaseValid() && !lease_lost_.exchange(true)) {
    log_->error("lease {:x}: no keep-alive answered within its TTL", id);
  }
  return ttl.status();
}

void Election::StartKeepAlive() {
  StopKeepAlive();
  {
    std::lock_guard lock(keepalive_mu_);
    stop_keepalive_ = false;
  }
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
}

void Election::StopKeepAlive() {
  {
    std::lock_guard lock(keepalive_mu_);
    stop_keepalive_ = true;
  }
  keepalive_cv_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
}

void Election::KeepAliveLoop() {
  const auto period =
      std::max<std::chrono::nanoseconds>(std::chrono::seconds(ttl_seconds_) / 4, std::chrono::milliseconds(100));
  std::unique_lock lock(keepalive_mu_);
  while (!stop_keepalive_) {
    lock.unlock();
    const bool answered = KeepAlive().ok();
    lock.lock();
    // Not an answer: try again soon, within the TTL.
    keepalive_cv_.wait_for(lock, answered ? period : std::chrono::milliseconds(100),
                           [this] { return stop_keepalive_; });
  }
}

bool Election::Campaign() {
  if (options_.campaigns) options_.campaigns->Inc();
  const int64_t lease = lease_id_.load();
  auto claim = kv_->CreateIfAbsent(options_.key, options_.candidate, lease);
  if (!claim.ok()) {
    log_->warn("campaign: {}", claim.status().ToString());
    return false;
  }
  if (claim->won) {
    fence_revision_ = claim->holder ? claim->holder->create_revision : 0;
    std::lock_guard lock(leader_mu_);
    replaced_ = last_other_;
    leader_seen_ = options_.candidate;
    return true;
  }
  if (claim->holder) {
    const LeaseKv::KeyValue& holder = *claim->holder;
    if (holder.value == options_.candidate && holder.lease != lease) {
      // This replica's own key from before it restarted: that process is
      // gone, so its lease may go at once instead of after its TTL.
      log_->info("revoking lease {:x} of this replica's previous process", holder.lease);
      (void)kv_->LeaseRevoke(holder.lease);
    }
    std::lock_guard lock(leader_mu_);
    Saw(holder.value);
  }
  return false;
}

void Election::Saw(const std::string& leader) {
  leader_seen_ = leader;
  if (!leader.empty() && leader != options_.candidate) last_other_ = leader;
}

void Election::ReadLeader() {
  auto holder = kv_->Get(options_.key);
  if (!holder.ok()) return;
  std::lock_guard lock(leader_mu_);
  Saw(*holder ? (*holder)->value : "");
}

std::string Election::leader() const {
  std::lock_guard lock(leader_mu_);
  return leader_seen_;
}

std::string Election::replaced() const {
  std::lock_guard lock(leader_mu_);
  return replaced_;
}

void Election::Resign() {
  const int64_t id = lease_id_.load();
  if (Status st = kv_->LeaseRevoke(id); !st.ok()) {
    log_->warn("resign: {}", st.ToString());
    return;
  }
  lease_lost_ = true;
  log_->info("resigned: lease {:x} revoked", id);
}

}  // namespace clusterd::ha
