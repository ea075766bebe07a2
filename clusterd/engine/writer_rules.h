// The writer's rule list (docs/architecture.md, "The writer's rules"): the
// timed policies of state/rules.h made from the configuration, in the order
// the Engine runs them. The composition root (clusterd/server/server.cc)
// makes them before the state loads, attaches them to the state and hands
// the Engine Ordered(coordinator); tests build the same list.
//
// The order: auto-clear (public faults due to clear themselves), separation
// (chips separated and released), chain drift, repeat offenders (nodes
// cordoned), incidents (state/incidents.h: faults of one fault domain as one
// incident, the domain isolated past its share), then the recovery
// Coordinator, which sees what the policies changed in the same turn.
//
// A new timed policy: a WriterRule in state/ (or in its room, if it needs
// more than the state), one line in MakeWriterRules; nothing else changes.
#pragma once

#include <memory>
#include <vector>

#include "clusterd/config/config.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/state/writer_rule.h"
#include "common/status.h"

namespace clusterd {

struct WriterRules {
  // The policies, in the order they run; owned here, borrowed by the state
  // and the Engine (keep this alive until both are gone).
  std::vector<std::unique_ptr<WriterRule>> policies;

  // Before ClusterState::Load: every policy sees Load and each fault change.
  void AttachTo(ClusterState* state) const;
  // The Engine's list (Engine::Hooks::rules): the policies, then
  // `recoveries` (the Coordinator; null: none).
  std::vector<WriterRule*> Ordered(WriterRule* recoveries) const;
};

// InvalidArgument (naming the key) for a separation policy out of bounds or
// a chain_drift_levels entry that does not parse.
StatusOr<WriterRules> MakeWriterRules(const ClusterdConfig& cfg);

}  // namespace clusterd
