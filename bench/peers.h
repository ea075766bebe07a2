// Scenario 10: the same fault stream through the stores users would
// otherwise keep fault state in, measured in the same run as ClusterD's
// scenarios 1, 2 and 6 and printed as ratios against them:
//   - etcd 3.6 (one member, fsync on): a fenced transaction per transition,
//     one key per fault, the same concurrency, and Watch fan-out to the same
//     number of watchers (etcd_peer.cc, C++ over etcd's gRPC API);
//   - the Kubernetes API server (MindCluster's transport): per-node ConfigMap
//     updates followed by client-go informers and watches (the Go program in
//     bench/kube-peer, run as a child; peers.cc reads its JSON).
// A peer whose binaries are missing is skipped with a printed note, as ghz is
// for scenario 9. See docs/performance.md.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

// "" or a real error. Reads ClusterD's figures of scenarios 1, 2 and 6 from
// *out when they were run.
std::string RunPeers(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

// etcd alone (etcd_peer.cc): fills out["scenario10_peers"]["etcd"].
std::string RunEtcdPeer(const Options& o, const TempDir& tmp, json* result);

}  // namespace clusterd::bench
