// A standby replica's read-only gRPC server (high availability, docs/ha.md).
//
// The standby writes every log entry into its own store (clusterd/ha); this
// serves that store on the gRPC port a leader would use:
// - ClusterService's queries, from a ClusterState loaded from the store and
//   loaded again as the store moves on (Refresh, more often while clients
//   query): every answer carries the revision it was read at, at most a
//   refresh behind the store;
// - ClusterService.Watch, live: each log entry's events are published to a
//   WatchHub as the entry is applied (Applied), with the same revisions as on
//   the leader, so a watcher resumes on any replica from the revision it saw;
// - grpc.health.v1.Health (ClusterService SERVING, the writers and the
//   overall server NOT_SERVING) and server reflection;
// - every other method (agents, reporters, jobs, admin, MindCluster) is
//   refused with UNAVAILABLE, "standby ...: the leader is ...", so that a
//   client given every replica's address (ipv4:a,b,c) moves on to the next.
//
// Thread contract: Start, Applied, Refresh and Shutdown are called by the
// follower (the one thread that writes the store); the gRPC threads read.
// Shutdown ends every stream at once: the replica that wins an election
// stops this before its leader's server listens on the same port.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "clusterd/config/config.h"
#include "clusterd/storage/change_set.h"
#include "clusterd/storage/store.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

class StandbyServer {
 public:
  struct Options {
    // What refusals say: this replica, and who leads now (any thread, quick;
    // "" when nobody does).
    std::string replica_id;
    std::function<std::string()> leader;
    // The query state is loaded again at most this often while clients
    // query it (within the last 10 s), at most every idle_refresh_interval
    // otherwise, and never for more than a tenth of the time (a load at
    // 10,000 nodes takes a while).
    std::chrono::nanoseconds min_refresh_interval = std::chrono::milliseconds(100);
    std::chrono::nanoseconds idle_refresh_interval = std::chrono::seconds(2);
  };

  // `store` is the standby's store at its current revision; it must outlive
  // this (Shutdown before it closes).
  StandbyServer(const ClusterdConfig& config, storage::Store* store, Options options,
                const Clock* clock = &SystemClock::Instance());
  ~StandbyServer();
  StandbyServer(const StandbyServer&) = delete;
  StandbyServer& operator=(const StandbyServer&) = delete;

  // Loads the state and listens on config.listen.
  Status Start();
  // A log entry's change set, just written to the store: its events go to
  // watchers, and the query state is due for a refresh.
  void Applied(const storage::ChangeSet& changes);
  // Loads the query state again when the store moved on and a load is due.
  void Refresh();
  // Ends every call and stream at once and closes the port. Idempotent.
  void Shutdown();

  int grpc_port() const;
  // The revision queries are answered at.
  uint64_t state_revision() const;
  // This server's metrics (watchers, refusals, loads), for the replica's
  // /metrics.
  std::string RenderMetrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clusterd
