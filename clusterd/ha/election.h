// Leader election on a lease (high availability, docs/ha.md).
//
// Each replica holds a lease, renewed every quarter of its TTL by a thread
// of its own, and campaigns for one key: a transaction that creates the key
// only while nobody holds it, attached to the lease. The winner leads for as
// long as its lease lives; the key's create revision is its fencing token
// (the log refuses appends fenced by an older one). A lease counts as alive
// until the TTL etcd last granted has passed since that request was SENT
// (not answered), on a clock that never steps: a leader never believes in a
// lease that etcd may already have ended.
//
// Resign revokes the lease: the key goes with it and another replica wins
// at its next campaign instead of after the TTL.
//
// Thread contract: GrantLease, Campaign, ReadLeader and Resign on the
// owner's thread (the replica's); StartKeepAlive and StopKeepAlive there as
// well; the rest from any thread. KeepAlive is what the keep-alive thread
// runs (a test without that thread calls it by hand).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "clusterd/ha/lease_kv.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/monotonic_clock.h"
#include "common/status.h"

namespace clusterd::ha {

class Election {
 public:
  struct Options {
    std::string key;        // the leader key ("<prefix>leader")
    std::string candidate;  // this replica's id: the key's value while it leads
    // The lease asked for (whole seconds, at least 1: etcd's unit).
    std::chrono::nanoseconds ttl = std::chrono::seconds(2);
    Counter* campaigns = nullptr;  // counts Campaign calls, when given
  };
  // `kv` and `clock` are borrowed and must outlive this. Lease validity is
  // decided on `clock`.
  Election(LeaseKv* kv, Options options, const Clock* clock = &MonotonicClock::Instance());
  ~Election();  // stops the keep-alive thread
  Election(const Election&) = delete;
  Election& operator=(const Election&) = delete;

  // One request for a new lease, in place of the current one. OK: granted.
  Status GrantLease();
  // Renews the lease every quarter TTL (at least every 100 ms), on a thread
  // of its own, until StopKeepAlive. A lease found lost stays lost until
  // GrantLease: renewals keep going for the lease id now held.
  void StartKeepAlive();
  void StopKeepAlive();
  // One renewal. OK when answered (the lease may have expired: LeaseLost).
  Status KeepAlive();

  // Alive as far as this replica can know: granted or renewed less than the
  // TTL ago (counted from the request's send time).
  bool LeaseValid() const;
  // Etcd said the lease expired, or no renewal was answered within the TTL.
  bool LeaseLost() const { return lease_lost_.load(); }
  // Valid and not lost: what a leader must hold to write.
  bool LeaseHeld() const { return LeaseValid() && !LeaseLost(); }
  int64_t lease_id() const { return lease_id_.load(); }
  int64_t ttl_seconds() const { return ttl_seconds_; }

  // One campaign: true when this replica now holds the key (it leads from
  // now on, while its lease lives). A key this replica's id holds on another
  // lease is from its previous process: that lease is revoked at once, and
  // the next campaign may win.
  bool Campaign();
  // Won a campaign and still holds the lease.
  bool Leads() const { return fence_revision_.load() != 0 && LeaseHeld(); }
  // The key's create revision since this replica won (0 before).
  int64_t fence_revision() const { return fence_revision_.load(); }
  const std::string& key() const { return options_.key; }
  const std::string& candidate() const { return options_.candidate; }

  // Reads who holds the key now (for leader()); keeps what it knew when the
  // read fails.
  void ReadLeader();
  // Who leads as last seen (a campaign or ReadLeader); "" for nobody.
  std::string leader() const;
  // The leader seen last before this replica won ("" if none).
  std::string replaced() const;

  // Revokes the lease (the key goes with it). Logged, not returned: a lease
  // that cannot be revoked ends with its TTL all the same.
  void Resign();

 private:
  void KeepAliveLoop();
  // Records the leader a read or a lost campaign saw ("" for nobody); leader_mu_ held.
  void Saw(const std::string& leader);
  TimePoint::rep Nanos() const { return clock_->Now().time_since_epoch().count(); }

  LeaseKv* const kv_;
  const Options options_;
  const Clock* const clock_;
  const int64_t ttl_seconds_;
  std::shared_ptr<spdlog::logger> log_;

  std::atomic<int64_t> lease_id_{0};
  std::atomic<TimePoint::rep> valid_until_{0};  // clock_ nanoseconds
  std::atomic<bool> lease_lost_{false};
  std::atomic<int64_t> fence_revision_{0};

  mutable std::mutex leader_mu_;
  std::string leader_seen_;  // leader_mu_
  // The last leader other than this replica seen (a ReadLeader between the
  // old leader's key going and this replica's win reads nobody).
  std::string last_other_;  // leader_mu_
  std::string replaced_;    // leader_mu_

  std::mutex keepalive_mu_;
  std::condition_variable keepalive_cv_;
  bool stop_keepalive_ = false;  // keepalive_mu_
  std::thread keepalive_;
};

}  // namespace clusterd::ha
