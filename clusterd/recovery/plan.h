// From a decision to the stored recovery's steps: which agent commands and
// cluster actions carry out a strategy, in order. Pure (the coordinator
// stores and dispatches what these write), so the step lists are tested on
// their own (test/clusterd/recovery/plan_test.cc).
#pragma once

#include "clusterd/recovery/types.h"
#include "clusterd/v1/types.pb.h"

namespace clusterd::recovery {

// Appends the steps that carry out `strategy` for r (whose id, hit ranks and
// isolation/reset lists are set), numbered from r's current step count;
// each step PENDING with the idempotency key "<r.id>/<index>". kFail adds
// none.
void PlanSteps(const v1::Job& job, Strategy strategy, v1::Recovery* r);

// Replaces r's isolation and reset lists with the decision's.
void SetActions(const Decision& d, v1::Recovery* r);

}  // namespace clusterd::recovery
