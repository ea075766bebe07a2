// Kubernetes Nodes, as pure mappings: a Node's Ready condition and its
// accelerator resource in, and ClusterD's node health back out as the Node
// condition the integration keeps in step. Like discovery.h: no network, no
// threads, no clock, deterministic; every input untrusted (a missing or
// mistyped field is a Status, never an exception).
//
// Thread contract: free functions without shared state; call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd::k8s {

// A Node's Ready condition. A node without one counts as kUnknown (as the
// node lifecycle controller treats it).
struct NodeReadiness {
  enum class State { kReady, kNotReady, kUnknown };
  std::string name;
  State state = State::kUnknown;
  // The Ready condition's fields ("" when absent), bounded to 1 KiB each.
  std::string reason, message, last_transition_time;
  bool unschedulable = false;  // spec.unschedulable (cordoned)
};
std::string_view ReadinessName(NodeReadiness::State state);  // "Ready", "NotReady", "Unknown"
// InvalidArgument for a non-object or a missing/invalid metadata.name.
StatusOr<NodeReadiness> ParseNodeReadiness(const nlohmann::json& node);

// The accelerator resource a device plugin registered on a Node: the first
// of huawei.com/Ascend910, huawei.com/Ascend310P, huawei.com/Ascend310,
// huawei.com/npu and nvidia.com/gpu in status.capacity, with its allocatable
// count (0 when the Node has the capacity but no allocatable entry). nullopt:
// none of them in capacity (no device plugin of ours ever registered there),
// or a count that is not a plain non-negative integer below 2^20.
// (DeviceQuantity, api_input.h, reads the counts.)

struct AcceleratorAllocatable {
  std::string resource;
  uint32_t capacity = 0;
  uint32_t allocatable = 0;
};
std::optional<AcceleratorAllocatable> ParseAcceleratorAllocatable(const nlohmann::json& node);

// The Node condition ClusterD keeps in step with a node's health:
//   {"type": <type>, "status": "True" | "False" | "Unknown",
//    "reason": ..., "message": ...}
// status/reason by node.health(): HEALTHY -> True/AcceleratorHealthy,
// SUB_HEALTHY -> True/AcceleratorSubHealthy (usable), UNHEALTHY ->
// False/AcceleratorFaulty, UNKNOWN -> Unknown/NodeAgentLost (heartbeats
// stopped), UNSPECIFIED -> Unknown/HealthUnknown. The message names the worst
// level and at most `max_codes` of the active faults above NOT_HANDLE that
// are on this node (state ACTIVE; others in the span are skipped), worst
// first, then code, then device, each (code, device) once, and is cut to
// 1 KiB. Only code, device and level enter it (never counts or times), so
// the condition changes only when the health picture does: no flapping.
// No timestamps: see StampCondition.
nlohmann::json AcceleratorCondition(const v1::Node& node, std::string_view type,
                                    std::span<const v1::Fault> active_faults, size_t max_codes = 8);

// Whether node_object (a Node as read from the API) already has a condition
// of condition["type"] with equal status, reason and message: the writer
// skips the patch then.
bool ConditionMatches(const nlohmann::json& node_object, const nlohmann::json& condition);

// The condition with lastHeartbeatTime = now and lastTransitionTime = the
// existing condition's when its status is unchanged, else now (RFC 3339
// strings, e.g. "2026-11-30T01:02:03Z"), ready for a nodes/status patch.
nlohmann::json StampCondition(const nlohmann::json& node_object, nlohmann::json condition, std::string_view now);

}  // namespace clusterd::k8s
