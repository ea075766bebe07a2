#include "clusterd/pingmesh/plan.h"

#include <algorithm>
#include <set>

namespace clusterd::pingmesh {
namespace {

constexpr uint32_t kMaxPeersPerNode = 64;

uint32_t DomainFanout(size_t members, uint32_t fanout) {
  return members < 2 ? 0 : static_cast<uint32_t>(std::min<size_t>(fanout, members - 1));
}

// Probes one round plans at this fan-out when every member takes part.
uint64_t ProbesAt(const std::vector<ProbeDomain>& domains, uint32_t fanout) {
  uint64_t total = 0;
  for (const auto& d : domains) total += d.members.size() * DomainFanout(d.members.size(), fanout);
  return total;
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace

Status ValidatePlanInput(const std::vector<ProbeDomain>& domains, const PlanLimits& limits) {
  if (limits.peers_per_node < 1 || limits.peers_per_node > kMaxPeersPerNode) {
    return InvalidArgument("pingmesh peers per node must be 1.." + std::to_string(kMaxPeersPerNode) + ", not " +
                           std::to_string(limits.peers_per_node));
  }
  if (limits.max_probes_per_round < 1) return InvalidArgument("pingmesh probes per round must be at least 1");
  std::set<std::string> ids;
  for (const auto& d : domains) {
    if (d.id.empty()) return InvalidArgument("pingmesh domain without an id");
    if (!ids.insert(d.id).second) return InvalidArgument("pingmesh domain " + d.id + " listed twice");
    for (size_t i = 0; i < d.members.size(); ++i) {
      if (d.members[i].empty()) return InvalidArgument("pingmesh domain " + d.id + " has a member without a name");
      if (i > 0 && d.members[i - 1] >= d.members[i]) {
        return InvalidArgument("pingmesh domain " + d.id + ": members not sorted and unique at " + d.members[i]);
      }
    }
  }
  return Status::Ok();
}

Plan PlanRound(const std::vector<ProbeDomain>& domains, uint64_t round, const PlanLimits& limits) {
  Plan plan;
  // The widest fan-out within the cluster-wide bound, else 1 and turns.
  uint32_t fanout = limits.peers_per_node;
  while (fanout > 1 && ProbesAt(domains, fanout) > limits.max_probes_per_round) --fanout;
  plan.fanout = fanout;
  const uint64_t planned = ProbesAt(domains, fanout);
  plan.stride = planned > limits.max_probes_per_round ? CeilDiv(planned, limits.max_probes_per_round) : 1;
  const uint64_t base = round / plan.stride;

  std::map<std::string, std::set<std::string>> peers;
  uint64_t member_index = 0;  // over all domains, for the turns
  for (const auto& d : domains) {
    const size_t n = d.members.size();
    const uint32_t f = DomainFanout(n, fanout);
    if (f == 0) continue;
    const uint64_t distances = n - 1;
    plan.rounds_to_cover = std::max(plan.rounds_to_cover, CeilDiv(distances, f) * plan.stride);
    const uint64_t first = (base % distances) * f % distances;
    for (size_t i = 0; i < n; ++i, ++member_index) {
      if ((member_index + round) % plan.stride != 0) continue;
      auto& mine = peers[d.members[i]];
      for (uint32_t j = 0; j < f; ++j) {
        const uint64_t distance = (first + j) % distances + 1;
        mine.insert(d.members[(i + distance) % n]);
      }
    }
  }
  for (auto& [node, set] : peers) {
    plan.probes += set.size();
    plan.peers.emplace(node, std::vector<std::string>(set.begin(), set.end()));
  }
  return plan;
}

}  // namespace clusterd::pingmesh
