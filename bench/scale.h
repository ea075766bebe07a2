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

}  // namespace clusterd::bench
