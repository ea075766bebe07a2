// The separation policy moved to the state (clusterd/state/separation.h): it
// is one of the writer's rules (state/rules.h). These names keep the callers
// that still spell it recovery:: compiling; new code includes the state's
// header and drops the prefix.
#pragma once

#include "clusterd/state/separation.h"

namespace clusterd::recovery {

using clusterd::ChipRef;
using clusterd::SeparationPolicy;
using clusterd::SeparationTracker;
using clusterd::ValidateSeparationPolicy;

}  // namespace clusterd::recovery
