// Scenario 15: the software chain's doctor at fleet scale. clusterd with
// --doctor-nodes simulated NodeDs, each reporting its chain in its Hello
// (driver, CANN, device plugin; a fifth of them on an older driver than the
// rest of their pool, so CHAIN_VERSION_DRIFT on each):
//   - the time from the last agent attached to the doctor naming every
//     drifted node;
//   - GET /api/v1/doctor (the cluster's findings, at most 3,000) p50 / p99
//     and its size;
//   - the CPU of the drift comparison per change: clusterd's CPU while new
//     nodes attach one at a time (each waited for in the doctor's answer),
//     less its idle CPU over the same time, per node.
// See docs/performance.md.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

std::string RunDoctor(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
