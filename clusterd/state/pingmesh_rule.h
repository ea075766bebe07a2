// The pingmesh's attribution on the writer's schedule (docs/pingmesh.md): the
// NodeDs' probe results gathered over a window, judged at its end by majority
// (clusterd/pingmesh/attribution.h), and the findings that last raised and
// cleared as faults of the reporter clusterd-pingmesh:
//   - a node nothing reaches (or that reaches nothing):
//     NODE_PINGMESH_UNREACHABLE on the node, external id "pingmesh/node";
//   - a link between two healthy nodes: LINK_PINGMESH_LOSS on both ends,
//     external id "pingmesh/link/<the other end>";
//   - a whole domain: DOMAIN_PINGMESH_LOSS on each member, external id
//     "pingmesh/domain/<domain id>".
// A window without any result judges nothing (no data is not health). After a
// restart the active faults are the findings again (Loaded), so nothing that
// matters is lost with the window.
//
// Thread contract: as every WriterRule (writer_rule.h); Record too.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "clusterd/pingmesh/attribution.h"
#include "clusterd/state/writer_rule.h"
#include "common/status.h"

namespace clusterd {

inline constexpr char kPingmeshReporter[] = "clusterd-pingmesh";
inline constexpr char kPingmeshNodeCode[] = "NODE_PINGMESH_UNREACHABLE";
inline constexpr char kPingmeshLinkCode[] = "LINK_PINGMESH_LOSS";
inline constexpr char kPingmeshDomainCode[] = "DOMAIN_PINGMESH_LOSS";

struct PingmeshPolicy {
  // Results are summed over this long, then judged (1 s..1 h).
  std::chrono::nanoseconds window = std::chrono::seconds(60);
  pingmesh::AttributionRules rules;
  // Windows in a row that raise a finding, and that clear it (1..100).
  uint32_t raise_after = 2;
  uint32_t clear_after = 3;
  // The levels used when the catalog does not know the codes.
  v1::FaultLevel node_level = v1::FAULT_LEVEL_PRE_SEPARATE;
  v1::FaultLevel link_level = v1::FAULT_LEVEL_SUB_HEALTH;
  v1::FaultLevel domain_level = v1::FAULT_LEVEL_PRE_SEPARATE;
  // Directions kept per window; results beyond are dropped and counted.
  size_t max_pairs = 1'000'000;
};

Status ValidatePingmeshPolicy(const PingmeshPolicy& policy);

class PingmeshRule final : public WriterRule {
 public:
  // The probe domains as they are now (docs/domains.md).
  using DomainSource = std::function<std::vector<pingmesh::ProbeDomain>(const ClusterState&)>;
  PingmeshRule(const PingmeshPolicy& policy, DomainSource domains);

  std::string_view name() const override { return "pingmesh"; }
  // One NodeD's results for a round: `source` is its node (the stream's,
  // never the report's word). Directions from another node are ignored.
  void Record(const std::string& source, const std::vector<pingmesh::PairStats>& results);
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override;
  void Loaded(ClusterState& state) override;

  uint64_t dropped() const { return dropped_; }
  std::vector<pingmesh::Finding> Active() const { return tracker_.Active(); }

 private:
  void Raise(ClusterState& state, const pingmesh::Finding& f, const std::vector<pingmesh::ProbeDomain>& domains,
             Mutation* m);
  void Clear(ClusterState& state, const pingmesh::Finding& f, Mutation* m);

  PingmeshPolicy policy_;
  DomainSource domains_;
  pingmesh::FindingTracker tracker_;
  // (source, target) -> (sent, lost), this window.
  std::map<std::pair<std::string, std::string>, std::pair<uint64_t, uint64_t>> window_;
  TimePoint window_end_ = TimePoint::min();
  uint64_t dropped_ = 0;
  // Finding key -> the faults raised for it: (node, external id).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> raised_;
};

}  // namespace clusterd
