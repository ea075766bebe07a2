// The probe plan of the pingmesh (docs/pingmesh.md): which peers each NodeD
// probes in one round. Pure: no state, no I/O, no clock. ClusterD asks it once
// per round with the domains as they are then (docs/domains.md); every NodeD
// gets its own line of the answer on its stream.
//
// Inside a domain of n members, member i probes in round r the members at
// distances ((r' * F + j) mod (n - 1)) + 1, j < F, where F is the fan-out and
// r' the round counted in strides (below). Every ordered pair of the domain is
// therefore probed once within rounds_to_cover rounds, and the plan's size
// grows with the domains, not with the cluster: each node probes at most F
// peers per domain it belongs to, whatever the cluster's size.
//
// The cluster-wide bound: when the domains' members times F exceed
// max_probes_per_round, F drops (to 1 at the least) and, if that is still too
// many, each member probes only every stride-th round (members take turns
// by their index), so no round plans more than the bound; coverage then takes
// stride times as many rounds, and rounds_to_cover says so.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace clusterd::pingmesh {

struct ProbeDomain {
  // The domain's name as docs/domains.md spells it ("superpod/7", "rack/r12").
  std::string id;
  // Node names, sorted and unique. A domain of one member plans nothing.
  std::vector<std::string> members;
};

struct PlanLimits {
  // Peers a node probes per round in each domain it belongs to (1..64).
  uint32_t peers_per_node = 4;
  // Probes planned per round over the whole cluster (>= 1).
  uint64_t max_probes_per_round = 200'000;
};

struct Plan {
  // Node -> the peers it probes this round: sorted, unique, never itself.
  // Nodes with nothing to probe this round are absent.
  std::map<std::string, std::vector<std::string>> peers;
  // Probes planned this round (the sum of the peers' sizes).
  uint64_t probes = 0;
  // The fan-out used, after the cluster-wide bound (<= peers_per_node).
  uint32_t fanout = 0;
  // Each member probes every stride-th round (1: every round).
  uint64_t stride = 1;
  // Rounds until every ordered pair inside every domain has been probed at
  // least once (0: no domain with two members).
  uint64_t rounds_to_cover = 0;
};

// Checks the limits' bounds and the domains (members sorted, unique and
// non-empty names; ids unique and non-empty). INVALID_ARGUMENT names the first
// offence.
Status ValidatePlanInput(const std::vector<ProbeDomain>& domains, const PlanLimits& limits);

// The plan of round `round` (counted from 0, one per probe interval). The
// input must pass ValidatePlanInput.
Plan PlanRound(const std::vector<ProbeDomain>& domains, uint64_t round, const PlanLimits& limits);

}  // namespace clusterd::pingmesh
