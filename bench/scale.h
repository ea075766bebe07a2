// Scenarios 3 (10,000 agents: clusterd CPU/RSS vs the raw gRPC sink in its
// own process), 4 (detection under that load) and 7 (restart with a large
// stored state). Same conventions as scenarios.h: figures into the JSON and
// the table, "" or a real error; a missed target is a figure.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

// Scenario 3, and scenario 4 (when o.Runs(4)) while scenario 3's load is on.
std::string RunScale(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

// Scenario 7: kill -9 and restart with restart_nodes x 8 devices and
// restart_events history events stored; time to first answer and to every
// agent reattached, spurious node-lost decisions.
std::string RunRestart(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

// Scenario 20: each of --fleet-nodes nodes x --devices devices on one
// leader (agents multiplexed as in scenario 3, heartbeating every
// --fleet-heartbeat seconds): RSS per node, CPU in steady state, fault ->
// Watch, GetSummary and ListNodes page latency, kill -9 -> serving and every
// agent reattached; next to the raw gRPC sink holding the same agents. In
// --short its invariants (every agent attached, every fault on the Watch,
// every agent reattached, no node called lost) are errors when broken.
std::string RunFleet(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
