// Incidents (docs/domains.md): faults that land within a window on several
// nodes or chips of one fault domain (state/domains.h) become one stored,
// watched incident that names the domain, the members hit, a bounded
// timeline and the most likely root (a switch-level fault, a shared link,
// or the domain itself). An incident closes when its members have no active
// fault at SUB_HEALTH or worse any more. When more than isolate_percent of
// the domain's nodes are hit, the domain is isolated as a whole (every
// member node Node.isolated), subject to the blast-radius gates: at most
// max_isolated_domains domains isolated at once, and the recovery gate
// max_isolated_node_percent over the whole cluster; in dry-run mode the
// decision is recorded and nothing is isolated. An open incident that did not
// isolate its domain keeps placement out of it (decision "avoid-domain",
// Incident.avoid: AvoidedDomains, AvoidedNodes), lifted when it closes
// (decision "avoid-domain-lifted").
//
// A WriterRule attached to the state (writer_rule.h): it sees each fault
// raised or cleared in the writer's turn, and writes the incidents it
// changed once per group in Advance (records under the meta prefix
// "incidents/", storage/schema.h; INCIDENT_* events). Load rebuilds it from
// the records.
//
// Thread contract: FaultChanged, Loaded, Advance and RecordRecovery on the
// writer thread with the state locked exclusively; the readers (Get, List,
// OpenIncidentOf, OpenDomains, IncidentOf) with the state's lock held (a
// ClusterState::Read), which the writer's changes exclude.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "clusterd/state/domains.h"
#include "clusterd/state/writer_rule.h"
#include "clusterd/v1/domain.pb.h"
#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd {

class Counter;
class Gauge;

struct IncidentPolicy {
  // Off: no incident forms (domains still show).
  bool enabled = true;
  // Faults count together when they land within this window.
  std::chrono::nanoseconds window = std::chrono::seconds(10);
  // An incident opens when the faults within the window hit at least this
  // many distinct nodes, or this many distinct chips, of one domain.
  uint32_t min_nodes = 3;
  uint32_t min_devices = 4;
  // The domain is isolated as a whole when more than this percentage of its
  // nodes is hit; 0: never.
  uint32_t isolate_percent = 50;
  // Blast radius: at most this many domains isolated by incidents at once,
  // and (the recovery gate) at most max_isolated_node_percent of all nodes
  // isolated after it.
  uint32_t max_isolated_domains = 1;
  uint32_t max_isolated_node_percent = 10;
  // Closed incidents kept (the oldest go).
  uint32_t keep_closed = 1000;
};

// InvalidArgument naming the key for a policy out of bounds.
Status ValidateIncidentPolicy(const IncidentPolicy& policy);

class IncidentRule final : public WriterRule, public IncidentLookup {
 public:
  // Bounds on one incident's record (its members, timeline, decisions), so
  // that a record and an answer stay well under 4 MiB.
  static constexpr size_t kMaxMembers = 1024;
  static constexpr size_t kMaxTimeline = 128;
  static constexpr size_t kTimelineHead = 16;
  static constexpr size_t kMaxDecisions = 256;
  // Hits kept per domain while no incident is open (the window's).
  static constexpr size_t kMaxRecentHits = 4096;

  IncidentRule(DomainModel model, IncidentPolicy policy) : model_(std::move(model)), policy_(policy) {}

  // Metrics (optional, before the Engine starts): incidents opened, and per
  // level the open incidents and isolated domains.
  void SetMetrics(Counter* opened, std::map<std::string, Gauge*> open_by_level,
                  std::map<std::string, Gauge*> isolated_by_level);

  std::string_view name() const override { return "incidents"; }
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override;
  void Loaded(ClusterState& state) override;
  void FaultChanged(ClusterState& state, const v1::Fault& fault, bool raised, bool new_occurrence) override;

  const DomainModel& model() const { return model_; }
  const IncidentPolicy& policy() const { return policy_; }

  // ---- readers (state lock held) ----
  StatusOr<v1::Incident> Get(const std::string& id) const;
  StatusOr<v1::ListIncidentsResponse> List(const v1::ListIncidentsRequest& req) const;
  std::string OpenIncidentOf(const std::string& domain_key, bool* isolated) const override;
  // The domain's open incident keeps placement out of it and did not
  // isolate it.
  bool Avoided(const std::string& domain_key) const override;
  // DomainKey -> incident id of every avoided domain.
  std::map<std::string, std::string> AvoidedDomains() const;
  // Node -> incident id: the nodes of the avoided domains that are not
  // isolated (what the Kubernetes integration taints PreferNoSchedule).
  // One walk over the nodes when a domain is avoided; none otherwise.
  std::map<std::string, std::string> AvoidedNodes(const StateView& state) const;
  // The DomainKeys of the domains with an open incident.
  std::set<std::string> OpenDomains() const;
  // DomainKey -> the id of its open incident.
  const std::map<std::string, std::string>& open_by_domain() const { return open_by_domain_; }
  // The incident (open or closed), or null.
  const v1::Incident* Find(const std::string& id) const {
    auto it = incidents_.find(id);
    return it == incidents_.end() ? nullptr : &it->second;
  }
  // The open incident whose members include the fault's member (its node, or
  // its chip), or null.
  const v1::Incident* IncidentOf(const StateView& state, const v1::Fault& fault) const;
  // Whether one of `recovery`'s trigger faults is on a member of `incident`
  // and it started after the incident's first fault (the job's one recovery
  // for the incident).
  bool Answers(const v1::Incident& incident, const v1::Recovery& recovery) const;

  // ---- writer thread ----
  // The Coordinator started `recovery`: it is recorded (once) as a decision
  // of every open incident one of its trigger faults belongs to, stored now
  // with an INCIDENT_UPDATED event.
  void RecordRecovery(ClusterState& state, const v1::Recovery& recovery, Mutation* m);
  // A decision the Coordinator took because of the open incident `id` (a
  // job moved as a unit), recorded once per (action, recovery); stored with
  // the next RecordRecovery or Advance. False when `id` is not open.
  bool RecordDecision(const std::string& id, v1::IncidentDecision d, TimePoint now);

 private:
  struct Hit {
    TimePoint time;
    std::string node;
    std::optional<uint32_t> device;
    std::string fault_id;
    std::string code;
  };
  // What an open incident keeps besides its record.
  struct Work {
    std::map<std::string, int> member_pos;  // MemberKey -> index in members
    std::set<std::string> nodes;
    std::set<std::string> devices;  // MemberKey of chip members
    // Fault subjects (links, ports) -> distinct members that reported them.
    std::map<std::string, std::set<std::string>> subjects;
    bool recount = false;
  };
  enum class Change { kNone, kOpened, kUpdated, kClosed };

  void AddMember(ClusterState& state, v1::Incident& inc, Work& w, const Hit& hit, TimePoint now);
  void Open(ClusterState& state, const v1::DomainRef& domain, const std::vector<Hit>& hits, TimePoint now);
  void UpdateRoot(ClusterState& state, v1::Incident& inc, Work& w, const v1::Fault* added, TimePoint now);
  // Recounts the members' active faults; true when none is left.
  bool Recount(const ClusterState& state, v1::Incident& inc);
  void MaybeIsolate(ClusterState& state, v1::Incident& inc, TimePoint now, Mutation* m);
  void MaybeAvoid(ClusterState& state, v1::Incident& inc, TimePoint now);
  void Note(v1::Incident& inc, TimePoint now, std::string what);
  void Decide(v1::Incident& inc, TimePoint now, v1::IncidentDecision d);
  void Store(ClusterState& state, v1::Incident& inc, v1::EventType type, TimePoint now, Mutation* m);
  void DropOldClosed(Mutation* m);
  size_t DomainSize(ClusterState& state, const std::string& key);
  void UpdateGauges();

  const DomainModel model_;
  const IncidentPolicy policy_;
  std::map<std::string, v1::Incident> incidents_;      // by id
  std::map<std::string, std::string> open_by_domain_;  // DomainKey -> id
  std::map<std::string, Work> work_;                   // open incidents' ids
  std::map<std::string, std::deque<Hit>> recent_;      // DomainKey -> hits within the window
  std::map<std::string, Change> dirty_;                // ids changed since the last Advance
  std::set<std::string> isolated_domains_;             // DomainKeys isolated by open incidents
  std::set<std::string> avoid_domains_;                // DomainKeys whose open incident has Incident.avoid
  uint64_t next_seq_ = 1;
  // The domains' sizes, rebuilt when the nodes' labels change.
  DomainIndex index_;
  std::optional<uint64_t> index_generation_;
  Counter* opened_total_ = nullptr;
  std::map<std::string, Gauge*> open_gauges_, isolated_gauges_;
};

// Why `job`'s placement requires its fault domain (it runs within one
// SuperPoD, one NVLink domain), or nullopt when it does not: the label
// clusterd.io/domain-affinity (any value: the level, for jobs made through
// the API); MindCluster's SuperPoD affinity as its Volcano plugin reads it
// off the PodGroup (IsSuperPodJob), which Kubernetes discovery copies onto
// the job as mindcluster/<key> labels: the schedule policy
// huawei.com/schedule_policy decides when present (one of the -sp
// policies), else an sp-block. Such a job moves as a unit (docs/domains.md).
std::optional<std::string> DomainAffinityOf(const v1::Job& job);
inline constexpr std::string_view kDomainAffinityLabel = "clusterd.io/domain-affinity";

// The state's attached IncidentRule, or null.
const IncidentRule* IncidentsOf(const ClusterState& state);

// ClusterService's domain-aware queries, under the state's lock, over the
// state's attached rule (`rule`; null where none is attached, as on a
// standby: nodes show no domains, the domain and incident queries are
// UNAVAILABLE there).
// GetNode with Node.domains filled in.
StatusOr<v1::GetNodeResponse> GetNodeWithDomains(const StateView& view, const IncidentRule* rule,
                                                 const v1::GetNodeRequest& req);
// ListNodes with Node.domains, and the `domain` filter ("level=name": the
// level's label selector term added to label_selector).
StatusOr<v1::ListNodesResponse> ListNodesWithDomains(const StateView& view, const IncidentRule* rule,
                                                     const v1::ListNodesRequest& req);
StatusOr<v1::ListDomainsResponse> ListDomainsWith(const StateView& view, const IncidentRule* rule,
                                                  const v1::ListDomainsRequest& req);
StatusOr<v1::Incident> GetIncidentWith(const IncidentRule* rule, const std::string& id);
StatusOr<v1::ListIncidentsResponse> ListIncidentsWith(const IncidentRule* rule, const v1::ListIncidentsRequest& req);

}  // namespace clusterd
