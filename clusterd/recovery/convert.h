// Translation between the API's job and fault messages and the decision
// engine's plain types. Absent optional fields take the engine's defaults
// (JobPolicy in types.h): unset budgets stay at 10 per job / 3 per node, an
// unset hold_down is 10 s, an unset escalation_window is 30 min.
#pragma once

#include <optional>

#include "clusterd/recovery/types.h"
#include "clusterd/v1/types.pb.h"

namespace clusterd::recovery {

Strategy FromProto(v1::RecoveryStrategy s);  // UNSPECIFIED maps to kFail
v1::RecoveryStrategy ToProto(Strategy s);

JobPolicy FromProto(const v1::RecoveryPolicy& policy);
Job FromProto(const v1::Job& job);
FaultView FromProto(const v1::Fault& fault);

}  // namespace clusterd::recovery
