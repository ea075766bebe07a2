// Scenarios 5 (decisions), 6 (watch fan-out), 8 (NodeD footprint), 9
// (query load) and 12 (the largest jobs) of the benchmark. Each adds its figures to the JSON
// object and its rows to the table, and returns "" or a real error (clusterd
// or a client failed); a missed target is a figure, never an error.
#pragma once

#include <string>
#include <vector>

#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "common.h"

namespace clusterd::bench {

// The current revision, or 0 and *err.
uint64_t CurrentRevision(v1::ClusterService::Stub* cluster, std::string* err);
// A training job with a rank on every device (kDevices) of `nodes`;
// hold-down set to 0 s explicitly (unset means the 10 s default). "" or the
// error.
std::string CreateJob(v1::JobService::Stub* jobs, const std::string& id, const std::vector<std::string>& nodes);

// Flags for the clusterd of scenarios 5, 6 and 8: no gate holds a decision back.
std::vector<std::string> RecoveryClusterdArgs();

// Scenario 5: fault -> recovery decision latency, one fault at a time, then
// a storm of storm_nodes x 8 device faults within one second.
std::string RunDecisions(const Options& o, const ClusterdProcess& cd, json* out, std::vector<Row>* rows);

// Scenario 6: W watchers get every event at fanout_rate with a p99 delivery
// latency; then ingest ack p99 without and with one stalled watcher.
std::string RunFanout(const Options& o, const ClusterdProcess& cd, json* out, std::vector<Row>* rows);

// Scenario 8: RSS and CPU of a NodeD (sim, 8 devices, default settings)
// connected to cd.
std::string RunNodedFootprint(const Options& o, const TempDir& tmp, const ClusterdProcess& cd, json* out,
                              std::vector<Row>* rows);

// Scenario 9: ListNodes / GetSummary QPS with query_nodes stored (its own
// clusterd), next to a raw gRPC unary call, all measured with ghz. Skipped
// with a note when there is no ghz.
std::string RunQueries(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

// Scenario 12: node-level Reports on a node that holds 1,024 ranks of each of
// two jobs of the largest allowed size, against the same Reports on a node
// without jobs (its own clusterd): what a fault costs the writer must not
// grow with the ranks it hits times the faults already there.
std::string RunLargestJobs(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
