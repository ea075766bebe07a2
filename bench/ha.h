// Scenario 11: high availability on etcd (docs/ha.md, docs/performance.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

// Three etcd members on loopback with the settings docs/ha.md asks for
// (fsync on), data dirs and logs under tmp/<prefix>-e<i>. Stopped when
// destroyed.
struct EtcdCluster {
  struct Member {
    std::string name;
    int client = 0, peer = 0;
    ChildProcess proc;
  };
  std::vector<std::unique_ptr<Member>> members;
  std::string endpoints;  // a,b,c for --etcd-endpoints
  void Stop() {
    for (auto& m : members) m->proc.Stop();
  }
};
// Starts them and waits until each is healthy (30 s); "" or why not.
std::string StartEtcdCluster(const Options& o, const TempDir& tmp, const std::string& prefix, EtcdCluster* out);

// Ingest and ack latency with three replicas on a 3-member etcd against a
// single-node clusterd in the same run; takeover from kill -9 of the leader
// to the first acknowledged write and to every agent reattached. Skipped with
// a note without an etcd binary.
std::string RunHa(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
