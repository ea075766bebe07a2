// The pingmesh on the writer's schedule (docs/pingmesh.md). Every interval it
// plans a round (clusterd/pingmesh/plan.h) over the probe domains, among the
// agents connected with a probe address, and hands each agent its peers
// through the AgentOutbox once the writer's group is durable. The NodeDs'
// probe results are gathered over a window, judged at its end by majority
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

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "clusterd/pingmesh/attribution.h"
#include "clusterd/pingmesh/plan.h"
#include "clusterd/state/agent_outbox.h"
#include "clusterd/state/domains.h"
#include "clusterd/state/writer_rule.h"
#include "clusterd/v1/pingmesh.pb.h"
#include "common/status.h"

namespace clusterd {

inline constexpr char kPingmeshReporter[] = "clusterd-pingmesh";
inline constexpr char kPingmeshNodeCode[] = "NODE_PINGMESH_UNREACHABLE";
inline constexpr char kPingmeshLinkCode[] = "LINK_PINGMESH_LOSS";
inline constexpr char kPingmeshDomainCode[] = "DOMAIN_PINGMESH_LOSS";

struct PingmeshPolicy {
  // A round is planned every interval (1 s..1 h); each agent probes its
  // peers `attempts` times (1..10) with `timeout` each (10 ms..10 s).
  std::chrono::nanoseconds interval = std::chrono::seconds(10);
  uint32_t attempts = 3;
  std::chrono::nanoseconds timeout = std::chrono::seconds(1);
  pingmesh::PlanLimits limits;
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

// The probe domains are the fault domains (state/domains.h, docs/domains.md):
// every domain of the model with its member nodes ("superpod=7", "rack=r12"),
// walked again only when a node's labels changed.
std::function<std::vector<pingmesh::ProbeDomain>(const ClusterState&)> ModelDomains(DomainModel model);

class PingmeshRule final : public WriterRule {
 public:
  // The probe domains as they are now (docs/domains.md).
  using DomainSource = std::function<std::vector<pingmesh::ProbeDomain>(const ClusterState&)>;
  PingmeshRule(const PingmeshPolicy& policy, DomainSource domains);

  std::string_view name() const override { return "pingmesh"; }
  // Before the Engine starts: where the plans go (null: none are sent).
  void set_outbox(AgentOutbox* outbox) { outbox_ = outbox; }
  // Writer thread: the node's agent of `session` is probed at ip:port from
  // now on (its hello named a probe address); AgentDown: no more (that
  // session's stream ended).
  void AgentUp(const std::string& node, uint64_t session, const std::string& ip, uint16_t port);
  void AgentDown(const std::string& node, uint64_t session);
  // One NodeD's results for a round: `source` is its node (the stream's,
  // never the report's word). Directions from another node are ignored.
  void Record(const std::string& source, const std::vector<pingmesh::PairStats>& results);
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override;
  void Loaded(ClusterState& state) override;

  // Any thread (metrics): results dropped past max_pairs, rounds planned,
  // agents that can be probed, probes in the last round, findings active.
  uint64_t dropped() const { return stats_.dropped.load(); }
  uint64_t results() const { return stats_.results.load(); }
  uint64_t rounds() const { return stats_.rounds.load(); }
  uint64_t agents() const { return stats_.agents.load(); }
  uint64_t planned_probes() const { return stats_.probes.load(); }
  uint64_t active_findings() const { return stats_.findings.load(); }
  // The last round's plan, for the docs' figures and tests.
  const pingmesh::Plan& last_plan() const { return last_plan_; }
  std::vector<pingmesh::Finding> Active() const { return tracker_.Active(); }
  // ClusterService.ListLinks, under the state's lock (shared): the last
  // judged window's loss matrix and the findings.
  StatusOr<v1::ListLinksResponse> ListLinks(const v1::ListLinksRequest& req) const;

 private:
  void PlanRound(ClusterState& state, const WriterTick& tick);
  void Raise(ClusterState& state, const pingmesh::Finding& f, const std::vector<pingmesh::ProbeDomain>& domains,
             Mutation* m);
  void Clear(ClusterState& state, const pingmesh::Finding& f, Mutation* m);
  void KeepJudgedWindow(std::vector<pingmesh::PairStats> results, std::vector<pingmesh::Finding> findings,
                        std::vector<pingmesh::ProbeDomain> domains);

  PingmeshPolicy policy_;
  DomainSource domains_;
  pingmesh::FindingTracker tracker_;
  // (source, target) -> what its probes gave, this window.
  struct Counts {
    uint64_t sent = 0, lost = 0, rtt_sum_us = 0;
    uint32_t rtt_max_us = 0;
  };
  std::map<std::pair<std::string, std::string>, Counts> window_;
  // The last judged window, for ListLinks: its directions (sorted by
  // source, target), its findings and the domains it was judged over (what
  // accounts for each direction is worked out per page).
  struct JudgedWindow {
    google::protobuf::Timestamp end;
    std::vector<pingmesh::PairStats> directions;
    std::vector<pingmesh::Finding> findings;
    std::vector<pingmesh::ProbeDomain> domains;
  };
  std::optional<JudgedWindow> last_window_;
  TimePoint window_end_ = TimePoint::min();
  TimePoint next_plan_ = TimePoint::min();
  uint64_t round_ = 0;
  pingmesh::Plan last_plan_;
  AgentOutbox* outbox_ = nullptr;
  struct Agent {
    uint64_t session = 0;
    std::string ip;
    uint16_t port = 0;
  };
  std::map<std::string, Agent> agents_;
  struct Stats {
    std::atomic<uint64_t> dropped{0}, rounds{0}, agents{0}, probes{0}, findings{0}, results{0};
  };
  Stats stats_;
  // Finding key -> the faults raised for it: (node, external id).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> raised_;
};

// ClusterService.ListLinks over the state's attached PingmeshRule, under the
// state's lock (shared); FAILED_PRECONDITION where none is attached (the
// pingmesh is off, or a standby: ask the leader).
StatusOr<v1::ListLinksResponse> ListLinksWith(const ClusterState& state, const v1::ListLinksRequest& req);

}  // namespace clusterd
