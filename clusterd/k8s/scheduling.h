// The scheduler's link of the accelerator software chain
// (docs/troubleshooting.md): Pending pods the scheduler gave up on
// (PodScheduled False, reason Unschedulable) that ask for an accelerator
// (an extended resource such as huawei.com/Ascend910) no node can give them,
// and why, from the pods and Nodes the integration's informers hold. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clusterd::k8s {

struct PendingFinding {
  std::string ns, pod, uid;
  std::string resource;  // the extended resource asked for
  uint32_t count = 0;    // per pod (the containers' limits, else requests, added up)
  // "no-node-offers": no Node has the resource in its allocatable (a name
  // the device plugin does not register, e.g. Ascend910 vs Ascend910B);
  // "too-few": none has `count` of it; "taints": the Nodes that have enough
  // all carry a NoSchedule/NoExecute taint (or are cordoned) that the pod
  // does not tolerate.
  std::string reason;
  std::string evidence;  // one line, bounded
};

// At most `max` findings, by namespace and pod; a pod whose resources some
// untainted Node offers is not named (its trouble is elsewhere: CPU,
// affinity, ...). Objects that do not parse are skipped.
std::vector<PendingFinding> DiagnosePending(const std::vector<nlohmann::json>& pods,
                                            const std::vector<nlohmann::json>& nodes, size_t max);

}  // namespace clusterd::k8s
