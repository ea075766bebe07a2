// What Kubernetes is told of a return to service (docs/validation.md,
// docs/kubernetes.md): the Node condition AcceleratorValidation and an Event
// for each validation's start and end and each hold. Pure: built from what
// ClusterD holds (ListValidations, GetNode), no I/O; the "kubernetes"
// integration (integration.h) writes them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/k8s/requests.h"
#include "clusterd/v1/cluster.pb.h"

namespace clusterd::k8s {

// The Node condition's type. Status True: nothing of the node waits for or
// failed its validation (reason Validated); False: a device or the node is
// validating (Validating), held (Held) or out after a failed validation
// (ValidationFailed); the message names the devices and the validation.
inline constexpr std::string_view kValidationConditionType = "AcceleratorValidation";

// The condition of the node `detail` describes, from its validations
// (`newest_first`: the node's, newest first). Null when the node has none.
nlohmann::json ValidationCondition(const v1::GetNodeResponse& detail,
                                   const std::vector<const v1::Validation*>& newest_first);

// The Events of `v` (regarding its Node) whose moment is at or after
// `since_s` (unix seconds): ValidationStarted once it was asked of NodeD;
// ValidationPassed, ValidationFailed (Warning, the failed checks' messages),
// ValidationSkipped or ValidationCancelled once it ended. Each is named by
// the validation's id and what happened, so that one posted twice (a restart)
// is refused as existing, not shown twice. reporting_instance and event_time
// are left to the caller.
std::vector<EventSpec> ValidationEvents(const v1::Validation& v, int64_t since_s);

// ValidationHeld (Warning) for each target of `detail` held since `since_s`
// (its last flap), named by the target and that moment.
std::vector<EventSpec> HeldEvents(const v1::GetNodeResponse& detail, int64_t since_s);

}  // namespace clusterd::k8s
