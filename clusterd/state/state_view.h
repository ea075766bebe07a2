// The read view of the state: every query, over the aggregates (nodes,
// faults, jobs, recoveries, admin) and the journal. Readers get it through
// ClusterState::Read, under the shared lock, and can reach nothing that
// writes; ClusterState (the writer's side) derives from it.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/state/fault_table.h"
#include "clusterd/state/job_table.h"
#include "clusterd/state/journal.h"
#include "clusterd/state/mutation.h"
#include "clusterd/state/node_table.h"
#include "clusterd/state/recovery_table.h"
#include "clusterd/v1/admin.pb.h"
#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/job.pb.h"
#include "common/clock.h"

namespace clusterd {

class StateView {
 public:
  StateView(const StateView&) = delete;
  StateView& operator=(const StateView&) = delete;

  // ---- the API's queries ----
  v1::GetSummaryResponse GetSummary() const;
  // GetSummary's scheduling_findings alone (the doctor's scheduler link).
  const std::vector<v1::SchedulingFinding>& scheduling_findings() const { return scheduling_findings_; }
  StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& req) const { return nodes_.List(req); }
  StatusOr<v1::GetNodeResponse> GetNode(const v1::GetNodeRequest& req) const;
  // The node as GetNode describes it and its devices by id, without the
  // metrics and faults GetNode copies too (integrations mirroring nodes);
  // false when the node is not registered.
  bool DescribeNode(const std::string& name, v1::Node* node, std::vector<v1::Device>* devices) const;
  StatusOr<v1::ListFaultsResponse> ListFaults(const v1::ListFaultsRequest& req) const;
  StatusOr<v1::Job> GetJob(const std::string& id) const;
  StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& req) const;
  StatusOr<v1::ListRecoveriesResponse> ListRecoveries(const v1::ListRecoveriesRequest& req) const {
    return recoveries_.List(req);
  }
  StatusOr<v1::Recovery> GetRecovery(const std::string& id) const { return recoveries_.Get(id); }
  const v1::AdminState& admin_state() const { return admin_; }

  size_t node_count() const { return nodes_.size(); }
  // Every node as held (record, devices), by name: for walks over the fleet
  // such as the fault domains' membership (state/domains.h).
  const NodeTable::Map& node_states() const { return nodes_.all(); }
  size_t job_count() const { return jobs_.size(); }
  size_t recovery_count() const { return recoveries_.size(); }
  uint32_t active_public_faults() const { return faults_.active_public(); }

  uint64_t revision() const { return journal_.revision(); }
  uint64_t compacted_revision() const { return journal_.compacted(); }
  uint64_t durable_revision() const { return journal_.durable(); }
  const StateLimits& limits() const { return limits_; }

  // ---- records, for the Coordinator and the adapters ----
  const std::map<std::string, v1::Recovery>& recoveries() const { return recoveries_.all(); }
  // The job's recoveries (any state), oldest first.
  std::vector<const v1::Recovery*> RecoveriesOfJob(const std::string& job_id) const {
    return recoveries_.OfJob(job_id);
  }
  const std::map<std::string, v1::Job>& jobs() const { return jobs_.all(); }
  // Every fault record (active or cleared) by storage key: one node's faults
  // are the range [storage::NodePrefix(node), storage::NodePrefixEnd(node)).
  const std::map<std::string, v1::Fault>& faults() const { return faults_.all(); }
  // The node as stored (labels, inventory, health), or null.
  const v1::Node* FindNode(const std::string& name) const {
    const NodeState* n = nodes_.Find(name);
    return n ? &n->record.node() : nullptr;
  }
  // Every fault record (active or cleared) on the nodes keyed in `nodes` (a
  // map keyed by node name, such as a job's nodes by name), in key order.
  // Walks whichever is smaller, those nodes or the nodes with faults: a job
  // on thousands of nodes costs what its faults cost, not its size.
  template <typename NodeMap>
  std::vector<const v1::Fault*> FaultsOnNodes(const NodeMap& nodes) const {
    std::vector<const v1::Fault*> out;
    const auto& faulty = faults_.nodes();
    if (faulty.size() < nodes.size()) {
      for (const auto& [node, records] : faulty) {
        if (nodes.contains(node)) AppendFaultsOnNode(node, &out);
      }
    } else {
      for (const auto& [node, value] : nodes) {
        if (faulty.contains(node)) AppendFaultsOnNode(node, &out);
      }
    }
    return out;
  }
  // Appends every fault record (active or cleared) on the node to *out.
  void AppendFaultsOnNode(const std::string& node, std::vector<const v1::Fault*>* out) const;
  // The fault with this id (Fault.id), or null.
  const v1::Fault* FindFault(const std::string& fault_id) const { return faults_.FindById(fault_id); }
  std::set<std::string> CordonedNodes() const { return nodes_.Cordoned(); }
  // The nodes whose record, one of its devices, one of its faults (raised,
  // updated or cleared) or the jobs' ranks placed there changed after
  // `revision`: every node for 0. Walks the nodes, their devices, the fault
  // records and the placement index (no copies).
  std::set<std::string> NodesChangedAfter(uint64_t revision) const;
  // The devices the jobs' ranks use on the node.
  std::set<uint32_t> DevicesInUse(const std::string& node) const { return jobs_.DevicesInUse(node); }
  std::set<std::string> IsolatedNodes() const { return nodes_.Isolated(); }

  // Recoveries whose trigger faults were on each node, created within
  // `window` before `now` and after `since(node)` (null: any time): node ->
  // their ids and creation times, oldest first.
  struct Caused {
    std::vector<std::string> ids;
    std::vector<TimePoint> times;
  };
  std::map<std::string, Caused> RecoveriesByNode(TimePoint now, Duration window,
                                                 const std::function<TimePoint(const std::string&)>& since) const;

  // The common heartbeat without the writer (the lock held shared): a
  // heartbeat of the node's current session on a node that is not lost only
  // refreshes its last-seen time. False: submit ApplyHeartbeat instead.
  bool TryHeartbeat(const std::string& node, uint64_t session) const {
    return nodes_.TryHeartbeat(node, session, clock_->Now());
  }

 protected:
  explicit StateView(const Clock* clock)
      : clock_(clock),
        journal_(clock),
        nodes_(&journal_),
        faults_(&journal_),
        jobs_(&journal_, &limits_),
        recoveries_(&journal_) {}
  ~StateView() = default;

  // The job with its current impacts filled in (bounded: max_job_impacts,
  // kImpactBytes).
  v1::Job WithImpacts(const v1::Job& job) const;

  const Clock* clock_;
  StateLimits limits_;
  Journal journal_;
  NodeTable nodes_;
  FaultTable faults_;
  JobTable jobs_;
  RecoveryTable recoveries_;
  v1::AdminState admin_;
  // The window of GetNode's recoveries_caused (the repeat-offender window,
  // RepeatOffenderRule in state/rules.h; ClusterState sets it).
  Duration recoveries_caused_window_ = std::chrono::hours(24);
  // The kubernetes integration's diagnosis of Pending pods (not stored, not
  // journaled: replaced whole by the writer; ClusterState sets it).
  std::vector<v1::SchedulingFinding> scheduling_findings_;

 private:
  // GetSummary's last answer and what it depended on.
  using SummaryKey = std::array<uint64_t, 4>;
  mutable std::mutex summary_mu_;
  mutable SummaryKey summary_key_{UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
  mutable v1::GetSummaryResponse summary_cache_;
};

}  // namespace clusterd
