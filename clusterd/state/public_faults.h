// Public faults as the state knows them: the plan of external faults one
// request raises or clears, and the limits that apply to them. Made by the
// MindCluster room from a PubFault request (mindcluster pubfault.h:
// PlanPublicFaults), applied by the writer (ClusterState::ApplyPublicFaults,
// public_faults.cc). Any other source of external faults can plan the same.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "clusterd/state/fault_table.h"  // kPubFaultReporterPrefix
#include "clusterd/v1/types.pb.h"

namespace clusterd {

struct PubFaultOptions {
  std::vector<std::string> resources = {"CCAE", "fd-online", "pingmesh", "Netmind", "dpcStorage", "dtfsStorage"};
  // Per resource: sustained requests per second and burst.
  double rate_per_second = 1.0;
  uint32_t burst = 100;
  // A recovered fault stays visible at least this long after it occurred; a
  // "once" fault is cleared this long after it occurred.
  std::chrono::nanoseconds min_visible = std::chrono::seconds(5);
  // Public faults active at once, in all; also the most (fault, node,
  // device) entries one request may name (CheckPubFaultRequest).
  uint32_t max_faults = 50'000;
  // Requests accepted by the cheap checks and waiting for the planning
  // worker (mindcluster/grpc/pubfault_service.h), at most; beyond, 410 "busy".
  uint32_t max_queued = 16;
};

// One external fault to raise or clear.
struct PlannedPubFault {
  std::string node;     // "" with node_sn set: resolved by the writer
  std::string node_sn;  // the node's "product-serial-number" label
  uint32_t device = 0;
  std::string fault_id;
  std::string code;
  v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
  enum class Assertion { kOccur, kRecover, kOnce } assertion = Assertion::kOccur;
  std::string message;
};

struct PubFaultPlan {
  std::string reporter;  // "pubfault/<resource>"
  std::vector<PlannedPubFault> faults;
  // Why each dropped fault was dropped ("faultId x: ..."), for the reply.
  std::vector<std::string> dropped;
};

}  // namespace clusterd
