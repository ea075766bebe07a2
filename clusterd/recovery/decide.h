// The recovery decision engine: pure functions of (job, faults, cluster view,
// limits, history, now). No clock, no I/O, no state; docs/recovery.md.
#pragma once

#include <optional>
#include <vector>

#include "clusterd/recovery/types.h"

namespace clusterd::recovery {

// Ranks of `job` hit by one fault: a device fault hits the ranks on that
// device, a node-level fault every rank on that node. Ignores `active`.
std::vector<int> RanksHit(const Job& job, const FaultView& fault);

struct FaultImpact {
  std::string fault_id;
  std::vector<int> ranks;  // sorted, never empty
};
// Every ACTIVE fault that hits at least one rank of `job`, in input order.
std::vector<FaultImpact> MapImpact(const Job& job, const std::vector<FaultView>& faults);

// Where a fault level enters the ladder for a job kind, before the policy is
// applied; nullopt = record only, no recovery.
std::optional<Strategy> StartingStrategy(FaultLevel level, JobKind kind);

// The first strategy at or below `from` on the ladder that the policy allows
// and the job kind can use (inference has no steps to retry). FAIL if none.
Strategy FirstAllowed(Strategy from, const JobPolicy& policy, JobKind kind = JobKind::kTraining);

// The next allowed rung strictly below `current`; FAIL after the last one.
Strategy Escalate(Strategy current, const JobPolicy& policy, JobKind kind = JobKind::kTraining);

// Isolation and chip resets that `strategy` implies for these trigger faults
// (what Decide fills in), for a coordinator that escalates a running recovery
// to `strategy`. Fills d->isolate_nodes, isolate_devices, reset_devices.
void ActionsFor(const Job& job, const std::vector<FaultView>& triggers, Strategy strategy, Decision* d);

// The decision for one job. Pure: equal inputs give equal decisions.
Decision Decide(const Job& job, const std::vector<FaultView>& faults, const ClusterView& cluster, const Limits& limits,
                const History& history, TimePoint now);

}  // namespace clusterd::recovery
