// Scenario 11: high availability on etcd (docs/ha.md, docs/performance.md).
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

// Ingest and ack latency with three replicas on a 3-member etcd against a
// single-node clusterd in the same run; takeover from kill -9 of the leader
// to the first acknowledged write and to every agent reattached. Skipped with
// a note without an etcd binary.
std::string RunHa(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
