// Scenario 18: incidents at fleet scale (docs/domains.md). clusterd with
// --incident-nodes simulated NodeDs in SuperPoDs of 48 (each Hello carries
// MindCluster's SuperPoD label), one training job on each of 20 SuperPoDs,
// then a cascade of --incident-faults chip faults within one second spread
// over those 20 SuperPoDs. Per SuperPoD: the time from the fault that made it
// cross the incident threshold (its incident_min_nodes-th node hit, as sent)
// to its incident formed and its job decided (the later of the two events'
// arrival on a Watch), and how many recoveries each job got (the target:
// within 1 s, one each). See docs/performance.md.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

std::string RunIncidents(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
