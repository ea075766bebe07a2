// Scenario 19: the pingmesh at fleet scale (docs/pingmesh.md).
// --pingmesh-nodes simulated NodeDs in SuperPoDs of 48 (a node label, the
// probe domains), each announcing a probe address and answering every probe
// plan at once with its results (every probe answered, 80 us; a cut pair
// loses every probe):
//   - the baseline: clusterd with the pingmesh off, the same agents
//     heartbeating every 2 s: its CPU;
//   - clusterd with the pingmesh at its defaults (a round every 10 s, 4 peers
//     per node per domain): its CPU against the baseline's, probe results
//     taken per second, plans answered per second;
//   - the time from a path cut between two nodes of one SuperPoD to its
//     LINK_PINGMESH_LOSS, with rounds every 2 s and a 12 s window (at the
//     defaults it is minutes: a pair of a 48-node SuperPoD is probed every
//     12 rounds; --short: rounds every 1 s, a 4 s window), against the bound
//     the plan and the hysteresis set: each judged window needs a probe of
//     the pair, at worst one per coverage period (Plan.rounds_to_cover
//     rounds), so raise_after coverage periods, the window that judges the
//     last, and a round; measured without suspect re-probing
//     (--pingmesh-suspect-probes=0) and at its default, whose bound is one
//     coverage period (the first probe of the pair), raise_after windows
//     (each holds the pair's re-probes) and a round.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

std::string RunPingmesh(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
