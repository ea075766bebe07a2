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
// The device plane (docs/pingmesh.md, "The device plane"): agents that
// announce NPU ports get, with each planned peer, the peer's ports of the
// same device ids; their results are judged by the same rules over the ports
// ("<node>#<device>"), each node's ports also forming a domain "<node>#" (all
// its ports bad: the node, not a port). Findings there raise
// NPU_PINGMESH_UNREACHABLE on the port's device, NPU_LINK_PINGMESH_LOSS on
// both ports' devices, NODE_PINGMESH_NPU_UNREACHABLE on the node, and
// DOMAIN_PINGMESH_NPU_LOSS on a domain's members.
//
// Suspects: a direction that loses at least bad_loss of a round's probes
// (on either plane) is probed again in the following rounds, both ways, with
// suspect_probes more peers probing its target and probed by its source, so
// that every window judges it until the finding is raised (bounded:
// max_suspects directions, each kept for the rounds that raise_after
// windows take after its last bad round).
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
#include "clusterd/v1/fault.pb.h"
#include "clusterd/v1/pingmesh.pb.h"
#include "common/status.h"

namespace clusterd {

inline constexpr char kPingmeshReporter[] = "clusterd-pingmesh";
inline constexpr char kPingmeshNodeCode[] = "NODE_PINGMESH_UNREACHABLE";
inline constexpr char kPingmeshLinkCode[] = "LINK_PINGMESH_LOSS";
inline constexpr char kPingmeshDomainCode[] = "DOMAIN_PINGMESH_LOSS";
inline constexpr char kPingmeshNpuCode[] = "NPU_PINGMESH_UNREACHABLE";
inline constexpr char kPingmeshNpuLinkCode[] = "NPU_LINK_PINGMESH_LOSS";
inline constexpr char kPingmeshNpuNodeCode[] = "NODE_PINGMESH_NPU_UNREACHABLE";
inline constexpr char kPingmeshNpuDomainCode[] = "DOMAIN_PINGMESH_NPU_LOSS";

// A device-plane port's name: "<node>#<device>" (node names carry no '#').
std::string PingmeshPortName(const std::string& node, uint32_t device);
// The node of a port's name, or the name itself when it is a node.
std::string PingmeshPortNode(const std::string& name);

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
  v1::FaultLevel npu_level = v1::FAULT_LEVEL_PRE_SEPARATE;
  v1::FaultLevel npu_link_level = v1::FAULT_LEVEL_SUB_HEALTH;
  v1::FaultLevel npu_node_level = v1::FAULT_LEVEL_PRE_SEPARATE;
  v1::FaultLevel npu_domain_level = v1::FAULT_LEVEL_PRE_SEPARATE;
  // Suspect re-probing: more peers per suspect direction's ends (0..16; 0:
  // off), and suspect directions kept at most (0..100,000).
  uint32_t suspect_probes = 3;
  size_t max_suspects = 1000;
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
  // `devices`: its NPU ports (device id, IPv4), the device plane.
  void AgentUp(const std::string& node, uint64_t session, const std::string& ip, uint16_t port,
               std::vector<std::pair<uint32_t, std::string>> devices = {});
  void AgentDown(const std::string& node, uint64_t session);
  // One NodeD's results for a round: `source` is its node (the stream's,
  // never the report's word). Directions from another node are ignored.
  void Record(const std::string& source, const std::vector<pingmesh::PairStats>& results);
  // The device plane's results of one round: sources and targets are ports
  // ("<node>#<device>"); ports of another node than `source` are ignored.
  // `unprobed`: the agent said it could not probe that plane (no tool).
  void RecordDevices(const std::string& source, const std::vector<pingmesh::PairStats>& results, bool unprobed);
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
  uint64_t device_results() const { return stats_.device_results.load(); }
  uint64_t device_unprobed() const { return stats_.device_unprobed.load(); }
  // Suspect directions now, those refused past max_suspects, and the extra
  // probes the last round planned for them.
  uint64_t suspects() const { return stats_.suspects.load(); }
  uint64_t suspects_dropped() const { return stats_.suspects_dropped.load(); }
  uint64_t suspect_probes() const { return stats_.suspect_probes.load(); }
  // The last round's plan, for the docs' figures and tests.
  const pingmesh::Plan& last_plan() const { return last_plan_; }
  std::vector<pingmesh::Finding> Active() const { return tracker_.Active(); }
  std::vector<pingmesh::Finding> ActiveDevice() const { return device_tracker_.Active(); }
  // ClusterService.ListLinks, under the state's lock (shared): the last
  // judged window's loss matrix and the findings.
  StatusOr<v1::ListLinksResponse> ListLinks(const v1::ListLinksRequest& req) const;

 private:
  void PlanRound(ClusterState& state, const WriterTick& tick);
  void AddSuspectProbes(const std::vector<pingmesh::ProbeDomain>& domains);
  void MarkSuspect(const std::string& source, const std::string& target);
  void Raise(ClusterState& state, const pingmesh::Finding& f, const std::vector<pingmesh::ProbeDomain>& domains,
             Mutation* m);
  void RaiseDevice(ClusterState& state, const pingmesh::Finding& f, const std::vector<pingmesh::ProbeDomain>& domains,
                   Mutation* m);
  void Clear(ClusterState& state, const std::string& key, Mutation* m);
  struct RaisedFault;
  void ReportRaise(ClusterState& state, std::vector<RaisedFault>* raised, RaisedFault f, v1::FaultLevel level,
                   const std::string& message, Mutation* m);
  static v1::ReportRequest RequestFor(const RaisedFault& f, v1::FaultLevel level, v1::TransitionAction action,
                                      const std::string& message);
  struct Counts;
  static std::vector<pingmesh::PairStats> TakeWindow(std::map<std::pair<std::string, std::string>, Counts>* window);
  // Adds one result to a window (false: the window is full, counted).
  bool AddResult(std::map<std::pair<std::string, std::string>, Counts>* window, const pingmesh::PairStats& r);
  // The result lost at least bad_loss of its probes: its direction is a suspect.
  bool LostARound(const pingmesh::PairStats& r) const;
  void JudgeDevices(ClusterState& state, const std::vector<pingmesh::ProbeDomain>& domains, Mutation* m);
  void KeepJudgedWindow(std::vector<pingmesh::PairStats> results, std::vector<pingmesh::Finding> findings,
                        std::vector<pingmesh::ProbeDomain> domains);

  PingmeshPolicy policy_;
  DomainSource domains_;
  pingmesh::FindingTracker tracker_;
  pingmesh::FindingTracker device_tracker_;
  // (source, target) -> what its probes gave, this window; the device
  // plane's by port.
  struct Counts {
    uint64_t sent = 0, lost = 0, rtt_sum_us = 0;
    uint32_t rtt_max_us = 0;
  };
  std::map<std::pair<std::string, std::string>, Counts> window_;
  std::map<std::pair<std::string, std::string>, Counts> device_window_;
  // Suspect directions (node names) -> rounds left.
  std::map<std::pair<std::string, std::string>, uint32_t> suspects_;
  // The last judged window, for ListLinks: its directions (sorted by
  // source, target), its findings and the domains it was judged over (what
  // accounts for each direction is worked out per page).
  struct JudgedWindow {
    google::protobuf::Timestamp end;
    std::vector<pingmesh::PairStats> directions;
    std::vector<pingmesh::Finding> findings;
    std::vector<pingmesh::ProbeDomain> domains;
    // The device plane's, judged over its own domains (ports).
    std::vector<pingmesh::PairStats> device_directions;
    std::vector<pingmesh::Finding> device_findings;
    std::vector<pingmesh::ProbeDomain> device_domains;
  };
  std::optional<JudgedWindow> last_window_;
  // The device plane's last judged window until KeepJudgedWindow takes it.
  std::vector<pingmesh::PairStats> pending_device_directions_;
  std::vector<pingmesh::Finding> pending_device_findings_;
  std::vector<pingmesh::ProbeDomain> pending_device_domains_;
  TimePoint window_end_ = TimePoint::min();
  TimePoint next_plan_ = TimePoint::min();
  uint64_t round_ = 0;
  pingmesh::Plan last_plan_;
  AgentOutbox* outbox_ = nullptr;
  struct Agent {
    uint64_t session = 0;
    std::string ip;
    uint16_t port = 0;
    std::vector<std::pair<uint32_t, std::string>> devices;  // sorted by id
  };
  std::map<std::string, Agent> agents_;
  struct Stats {
    std::atomic<uint64_t> dropped{0}, rounds{0}, agents{0}, probes{0}, findings{0}, results{0};
    std::atomic<uint64_t> device_results{0}, device_unprobed{0};
    std::atomic<uint64_t> suspects{0}, suspects_dropped{0}, suspect_probes{0};
  };
  Stats stats_;
  // Finding key (a device-plane finding's prefixed "device:") -> the faults
  // raised for it.
  struct RaisedFault {
    std::string node;
    std::string id;  // external id
    std::optional<uint32_t> device;
    std::string code;
  };
  std::map<std::string, std::vector<RaisedFault>> raised_;
};

// ClusterService.ListLinks over the state's attached PingmeshRule, under the
// state's lock (shared); FAILED_PRECONDITION where none is attached (the
// pingmesh is off, or a standby: ask the leader).
StatusOr<v1::ListLinksResponse> ListLinksWith(const ClusterState& state, const v1::ListLinksRequest& req);

}  // namespace clusterd
