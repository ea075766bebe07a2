// Integrations: components that run alongside ClusterD and feed it or act on
// what it decides (Kubernetes job discovery; the MindCluster adapter). An integration never touches ClusterState, the
// Engine or gRPC: it gets a ClusterCommands facade with the few writes and reads it may make, each going through the
// same submission path as the matching gRPC call (validated, applied on the writer thread, answered once durable).
//
// The server creates the integrations its config lists (by name, from
// BuiltinIntegrations(), server/registries.h) plus any added with ClusterdServer::AddIntegration,
// starts them after the Engine, and stops them before it. Each gets its own
// facade, whose writes record the integration's name as their actor.
//
// Ownership and threads: the server owns each integration and its facade;
// the facade and everything in IntegrationEnv outlive Stop(). Start and Stop
// are called once each, from the thread that starts and shuts down the
// server. A facade is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "clusterd/auth/principal.h"
#include "clusterd/config/config.h"
#include "clusterd/state/public_faults.h"
#include "clusterd/state/separation.h"
#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/fault.pb.h"
#include "clusterd/v1/job.pb.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

class ClusterCommands {
 public:
  template <typename T>
  using Reply = std::function<void(StatusOr<T>)>;

  virtual ~ClusterCommands() = default;

  // ---- writes ----
  // Each runs exactly `reply` once: with the result once the change is
  // durable, on the Engine's writer thread (so be quick: hand the result
  // over, never block, never wait there for another write); or with the
  // error, possibly before the call returns, when the write is refused
  // (invalid, UNAVAILABLE while writes are refused or after shutdown).

  // FaultService.Report: raises or clears (report.action) an external fault;
  // idempotent by (reporter, id).
  virtual void ReportFault(v1::ReportRequest report, Reply<v1::ReportResponse> reply) = 0;
  // JobService.CreateJob / UpdateJob / DeleteJob (the revision of the delete).
  virtual void CreateJob(v1::Job job, Reply<v1::Job> reply) = 0;
  virtual void UpdateJob(v1::Job job, Reply<v1::Job> reply) = 0;
  virtual void DeleteJob(std::string id, Reply<uint64_t> reply) = 0;
  // PubFault.SendPublicFault's write: a plan of public faults
  // (mindcluster/pubfault.h plans it from a request and checks it) applied
  // as the service applies it. `dropped`: faults the state refused (unknown
  // node, ...), besides the plan's own.
  struct PublicFaultsApplied {
    uint32_t applied = 0;
    std::vector<std::string> dropped;
  };
  virtual void ApplyPublicFaults(PubFaultPlan plan, PubFaultOptions options, Reply<PublicFaultsApplied> reply) = 0;
  // AdminService.CordonNode (cordon) or UncordonNode, with this facade's
  // principal as the recorded actor.
  virtual void SetCordon(std::string node, bool cordon, std::string reason, Reply<v1::Node> reply) = 0;
  // A node this integration knows of while no agent of ClusterD runs there
  // (ClusterState::ApplyRegisterNode): created with Node.registered_by = this
  // facade's principal, no heartbeat expected; its devices from `inventory`
  // until an agent says hello. A node an agent registered is answered
  // unchanged.
  virtual void RegisterNode(std::string node, v1::Inventory inventory, Reply<v1::Node> reply) = 0;
  // The Pending pods the scheduler cannot place for want of an accelerator,
  // replacing the last list (GetSummary, the doctor). Not stored: an
  // integration says it again after a restart.
  virtual void SetSchedulingFindings(std::vector<v1::SchedulingFinding> findings) { (void)findings; }
  // AdminService.ReleaseDevice: returns a device the separation policy
  // separated to service (DEVICE_RELEASED with `reason`). The recorded actor
  // is this facade's principal, followed by "/" and `on_behalf_of` when
  // that is given (who asked the integration: a Kubernetes field manager).
  virtual void ReleaseDevice(std::string node, uint32_t device, std::string on_behalf_of, std::string reason,
                             Reply<v1::Device> reply) {
    (void)node, (void)device, (void)on_behalf_of, (void)reason;
    reply(FailedPrecondition("ReleaseDevice is not offered to integrations here"));
  }
  // The separation policy from now on (SeparationRule::ChangePolicy, state/
  // rules.h; counts and separations kept). Not stored: an integration that sets it
  // says it again after a restart or a leader change. Replies with the
  // policy's refusal, or OK once the writer runs with it.
  virtual void SetSeparationPolicy(SeparationPolicy policy, Reply<bool> reply) {
    (void)policy;
    reply(FailedPrecondition("SetSeparationPolicy is not offered to integrations here"));
  }

  // ---- reads ----
  // What the state holds when called (applied changes, durable or about to
  // be), as the matching ClusterService/JobService query answers. Any thread;
  // from a reply too.
  virtual StatusOr<v1::Job> GetJob(const std::string& id) const = 0;
  virtual StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& req) const = 0;
  virtual StatusOr<v1::GetNodeResponse> GetNode(const v1::GetNodeRequest& req) const = 0;
  virtual StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& req) const = 0;
  virtual StatusOr<v1::ListFaultsResponse> ListFaults(const v1::ListFaultsRequest& req) const = 0;
  // ClusterService.ListValidations (newest first, paged); an empty answer
  // where no validation rule runs (validation_enabled off).
  virtual StatusOr<v1::ListValidationsResponse> ListValidations(const v1::ListValidationsRequest& req) const {
    (void)req;
    return v1::ListValidationsResponse{};
  }
  // The Pending pods the scheduler cannot place, as SetSchedulingFindings
  // last set them (GetSummary's scheduling_findings).
  virtual std::vector<v1::SchedulingFinding> SchedulingFindings() const { return {}; }
  // Node -> incident id: the nodes of the fault domains whose open incident
  // keeps placement out without isolating them (IncidentRule::AvoidedNodes,
  // docs/domains.md), isolated nodes left out; empty where none is avoided
  // or no incident rule runs.
  virtual std::map<std::string, std::string> AvoidedNodes() const { return {}; }

  // One node as an integration that follows the nodes sees it.
  struct NodeView {
    v1::Node node;
    std::vector<v1::Device> devices;       // by id
    std::vector<v1::Fault> active_faults;  // all of them, in key order
    std::vector<uint32_t> devices_in_use;  // devices the jobs' ranks use there
    // Active faults a process-level recovery handles: the triggers of the
    // newest recovery of a job whose recovery agent is MindCluster's TaskD
    // (job label mindcluster/process-recover-enable on or pause) while it is
    // RUNNING or SUCCEEDED at STEP_RETRY or PROCESS_RESTART, in the fault's
    // activation it answered. MindCluster keeps such faults from Volcano, so
    // that the pods a retry keeps are not deleted (the "mindcluster"
    // integration does the same); they are back once the recovery moves on
    // to rescheduling or fails.
    std::vector<std::string> held_fault_ids;
  };
  struct NodeChanges {
    uint64_t revision = 0;        // the state's revision the views are as of
    std::vector<NodeView> nodes;  // by name
  };
  // The nodes whose record, one of its devices, one of its faults, the jobs'
  // ranks on it, or a recovery whose trigger faults are on it changed after
  // `since` (every node for 0), as they are now, taken under one read
  // lock; ask again with the answer's revision to follow the changes (nodes
  // are never deleted). A walk of the nodes and fault records without copies,
  // then a copy of the changed nodes only.
  virtual NodeChanges NodesChangedSince(uint64_t since) const = 0;

  // `notify` runs after every commit that changed the state (on the writer
  // thread: set a flag, notify, nothing more), for as long as the server
  // runs: what it captures must outlive the integration (hold it by
  // shared_ptr). An integration that follows the state wakes on it instead
  // of waiting for its next poll. The default never calls it.
  virtual void OnCommit(std::function<void()> notify) { (void)notify; }
};

// Blocks until `call` (given a Reply<T>) has replied, and returns what it
// replied. For an integration's own threads; never on the writer thread (from
// a reply), which would wait for itself.
//   auto job = AwaitReply<v1::Job>([&](auto reply) { commands->CreateJob(job, reply); });
template <typename T, typename Call>
StatusOr<T> AwaitReply(Call call) {
  auto promise = std::make_shared<std::promise<StatusOr<T>>>();
  auto result = promise->get_future();
  call(ClusterCommands::Reply<T>([promise](StatusOr<T> r) { promise->set_value(std::move(r)); }));
  return result.get();
}

// What an integration is given at Start.
struct IntegrationEnv {
  ClusterCommands* commands = nullptr;
  const Clock* clock = nullptr;
  MetricsRegistry* metrics = nullptr;  // may be null (tests)
};

class Integration {
 public:
  virtual ~Integration() = default;
  // Its registered name; also the actor its writes record (printable ASCII,
  // no spaces).
  virtual std::string_view name() const = 0;
  // After the Engine has started. May start threads and return at once; an
  // error stops the server's start. `env` outlives Stop().
  virtual Status Start(const IntegrationEnv& env) = 0;
  // Before the Engine stops: ends the integration's threads and returns once
  // none of them calls the facade any more (replies to writes already made
  // still run). Called even when Start failed; must tolerate that.
  virtual void Stop() = 0;
};

// Integrations by the name a config lists them with.
class IntegrationRegistry {
 public:
  using Factory = std::function<StatusOr<std::unique_ptr<Integration>>(const ClusterdConfig& config)>;

  // InvalidArgument for an empty name, one already registered, or an empty
  // factory. Not thread-safe: register everything before use.
  Status Register(std::string name, Factory factory);
  bool Has(std::string_view name) const;
  // In registration order.
  const std::vector<std::string>& Names() const { return names_; }
  // InvalidArgument for an unknown name.
  StatusOr<std::unique_ptr<Integration>> Create(std::string_view name, const ClusterdConfig& config) const;

 private:
  std::vector<std::string> names_;
  std::vector<Factory> factories_;  // parallel to names_
};

class Engine;
class ClusterState;

// The facade over the Engine's submission path that the server gives each
// integration: writes go through Engine::SubmitWrite exactly like the gRPC
// adapters' (same validation, same refusal while writes are refused), reads
// take the state's shared lock. `principal` is recorded as the actor of
// writes that record one. engine and state must outlive it.
std::unique_ptr<ClusterCommands> MakeEngineCommands(Engine* engine, const ClusterState* state, Principal principal);

}  // namespace clusterd
