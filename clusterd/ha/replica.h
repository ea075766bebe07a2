// One replica of a highly available ClusterD (docs/ha.md). With etcd
// endpoints configured, clusterd runs this instead of a plain server:
//
//  - It holds a lease in etcd and campaigns for the leader key (a
//    transaction that creates the key only if nobody holds it, attached to
//    its lease). The key's create revision is its fencing token.
//  - As a standby it follows the replicated log (etcd keys <prefix>log/<index>)
//    into its own RocksDB, reports how far it got (<prefix>progress/<id>, on
//    its lease), and serves /healthz, /metrics and a /readyz that says 503
//    "standby". On the gRPC port it serves ClusterService queries and Watch
//    read-only and refuses everything else, naming the leader
//    (ha/standby_server.h).
//  - Once elected it reads the rest of the log (a quorum read, so nothing
//    committed is missed), then starts the whole server on its store, wrapped
//    in a ReplicatedStore whose every group commit is a fenced etcd
//    transaction. It trims the log behind the slowest live replica.
//  - A leader that loses its lease, or whose append is fenced, stops writing
//    at once and restarts itself (exec) as a standby: nothing it had not
//    acknowledged is kept, and nothing it acknowledged is lost (it is in the
//    log). SIGTERM makes a leader shut down cleanly and resign (revoke its
//    lease), so a standby takes over without waiting for the TTL.
#pragma once

#include "clusterd/config/config.h"

namespace clusterd::ha {

// Blocks until SIGTERM/SIGINT (signals must be blocked already); returns the
// process's exit code. `argv` restarts the process as a standby.
int RunReplica(const ClusterdConfig& config, char** argv);

}  // namespace clusterd::ha
