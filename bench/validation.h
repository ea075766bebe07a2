// Scenario 17: return to service at fleet scale (docs/validation.md).
// clusterd with validation on and --validation-nodes simulated NodeDs of 16
// chips each (multiplexed, as scenario 3); --validation-chips chips, on as
// many nodes, enter validation at once (AdminService.StartValidation, as a
// fleet-wide fault clear does); each agent answers a validation
// --validation-ms after it was asked (the validation's own duration, the
// baseline). Measured:
//   - the most validations running at once, as the agents saw them, against
//     the bound (validation_max_in_flight, default 64);
//   - the time from the first start to the last chip back in service
//     (clusterd_validations_finished_total{outcome="passed"} = chips), and
//     its ratio to one validation's duration; the bound makes it about
//     ceil(chips / 64) waves.
// See docs/performance.md.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

std::string RunReturnToService(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
