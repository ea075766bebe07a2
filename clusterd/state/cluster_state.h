// The writer's side of the state: every rule that changes it, over the
// aggregates (state/: nodes, faults, jobs, recoveries, admin) that own the
// records. Each Apply* call is one logical change: it changes nothing on
// error; on success the aggregates change in memory and append their
// records, the revision bump and the events to the caller's Mutation, which
// the Engine commits as one synced Store write. The rules that span
// aggregates live here: a fault's event names the jobs it hits, a fault
// change recomputes its node's and device's health, a hello reconciles the
// agent's faults, a lost heartbeat raises one.
//
// The timed policies (separation, chain drift, repeat offenders, auto-clear)
// are not here: each is a WriterRule (state/rules.h) that the Engine runs
// after every group and that changes the state through the writer's
// primitives below.
//
// Thread contract: Apply*, the writer's primitives, CheckLiveness and Load
// are called only by the Engine's writer thread holding the state's lock
// exclusively (the Engine is the one writer, the only holder of a WriterKey);
// readers on any thread go through Read, which holds the lock shared and
// hands them the read view (StateView) only. Nothing here touches the disk
// except Load.
//
// Validation: a message that arrives as Validated<T> (state/validation.h)
// was checked at the edge and is not checked again; a plain one is checked
// here, once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "clusterd/state/catalog.h"
#include "clusterd/state/mutation.h"
#include "clusterd/state/public_faults.h"
#include "clusterd/state/state_view.h"
#include "clusterd/state/validation.h"
#include "clusterd/state/writer_rule.h"
#include "clusterd/storage/store.h"
#include "clusterd/v1/admin.pb.h"
#include "clusterd/v1/agent.pb.h"
#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/job.pb.h"
#include "common/clock.h"
#include "common/status.h"

namespace clusterd {

struct TransitionResult {
  bool duplicate = false;  // id already stored: acknowledged again, changed nothing
};

class ClusterState : public StateView {
 public:
  // How many agent epochs per node keep their applied sequence.
  static constexpr size_t kEpochsKept = NodeTable::kEpochsKept;
  static constexpr const char* kApiSource = JobTable::kApiSource;
  using RecoveryRetention = RecoveryTable::Retention;

  ClusterState(storage::Store* store, const Catalog* catalog, const Clock* clock);

  // Reads every record. Nodes start disconnected with their grace period
  // counted from now.
  Status Load();
  // The same, with the revision and compaction floor given: a store that a
  // standby has written since it opened (standby_server.h). Quiet: a standby
  // loads often.
  Status Load(uint64_t revision, uint64_t compacted);

  // The one way to read from any thread: fn(const StateView&) runs under the
  // shared lock (many readers at once, never while the writer applies) and
  // its result is returned by value, so nothing it points into escapes the
  // lock.
  template <typename Fn>
  auto Read(Fn&& fn) const {
    std::shared_lock lock(mu_);
    return std::forward<Fn>(fn)(static_cast<const StateView&>(*this));
  }

  // Before Load; the defaults otherwise.
  void set_limits(const StateLimits& limits) { limits_ = limits; }
  // Before Load: `rule` is told of Load and of every fault raised or cleared
  // from now on (WriterRule::Loaded, FaultChanged), in the order attached;
  // not owned, outlives the state. The Engine runs it as well when the
  // composition root lists it.
  void Attach(WriterRule* rule) { attached_.push_back(rule); }
  // The attached rule of type R (the first), or null: how a change submitted
  // to the writer reaches a rule's own operations (an operator's device
  // release, a new separation policy).
  template <typename R>
  R* Attached() const {
    for (WriterRule* r : attached_) {
      if (auto* found = dynamic_cast<R*>(r)) return found;
    }
    return nullptr;
  }
  // External reporters whose levels are their own (Catalog::ResolveFor): a
  // level they give wins over the built-in catalog's, not over the
  // operator's catalog file. Public faults always are (ApplyPublicFaults).
  void set_reporter_levels(std::set<std::string> reporters) { reporter_levels_ = std::move(reporters); }
  bool ReporterDecidesLevel(const std::string& reporter) const { return reporter_levels_.count(reporter) > 0; }
  // The window of GetNode's recoveries_caused (the repeat-offender window,
  // RepeatOffenderRule): before Load; 24 h otherwise.
  void set_recoveries_caused_window(std::chrono::nanoseconds window) { recoveries_caused_window_ = window; }
  // The Pending pods the scheduler cannot place for want of an accelerator
  // (GetSummary's scheduling_findings; the kubernetes integration's, replaced
  // whole, at most kMaxSchedulingFindings kept).
  static constexpr size_t kMaxSchedulingFindings = 100;
  void set_scheduling_findings(std::vector<v1::SchedulingFinding> findings) {
    if (findings.size() > kMaxSchedulingFindings) findings.resize(kMaxSchedulingFindings);
    scheduling_findings_ = std::move(findings);
  }
  // When a node's software chain must be healthy before it goes back into
  // service (config release_chain_check).
  enum class ReleaseChainCheck { kNever, kAutomatic, kAlways };
  void set_release_chain_check(ReleaseChainCheck mode) { release_chain_check_ = mode; }
  // OK, or FAILED_PRECONDITION naming the node's broken links and their
  // fixes, when the mode asks for the check: an automatic release, or
  // (kAlways) an operator's.
  Status ChainAllowsRelease(const std::string& node, bool automatic) const;

  // ---- writer thread, mutex held exclusively ----
  StatusOr<v1::Welcome> ApplyHello(const Validated<v1::Hello>& hello, uint64_t session, Mutation* m);
  StatusOr<v1::Welcome> ApplyHello(const v1::Hello& hello, uint64_t session, Mutation* m);
  Status ApplyHeartbeat(const std::string& node, uint64_t session, Mutation* m);
  // A node known from an integration (`source`), not from an agent: created
  // when ClusterD has none of that name (Node.registered_by = source, no
  // heartbeat expected), its devices set from `inventory` while no agent has
  // said hello there. A node an agent registered is answered unchanged (its
  // agent's inventory wins).
  StatusOr<v1::Node> ApplyRegisterNode(const std::string& node, const v1::Inventory& inventory,
                                       const std::string& source, Mutation* m);
  Status ApplyMetrics(const std::string& node, uint64_t session, const Validated<v1::MetricSnapshot>& snapshot);
  Status ApplyMetrics(const std::string& node, uint64_t session, const v1::MetricSnapshot& snapshot);
  // The connected agent's software chain changed: replaces the node's
  // Inventory.chain (stored, NODE_UPDATED) when it differs; the drift is
  // compared again. InvalidArgument for links that do not validate.
  Status ApplyChainUpdate(const std::string& node, uint64_t session, const v1::ChainUpdate& update, Mutation* m);
  Status ApplyChainUpdate(const std::string& node, uint64_t session, const Validated<v1::ChainUpdate>& update,
                          Mutation* m);
  // The connected agent's pods holding devices changed (the kubelet's
  // pod-resources API): replaces the node's Inventory.pod_devices (stored,
  // NODE_UPDATED) when it differs. InvalidArgument when it does not validate.
  Status ApplyPodDevices(const std::string& node, uint64_t session, const v1::PodDevicesUpdate& update, Mutation* m);
  Status ApplyPodDevices(const std::string& node, uint64_t session, const Validated<v1::PodDevicesUpdate>& update,
                         Mutation* m);
  StatusOr<TransitionResult> ApplyTransition(const std::string& node, uint64_t session,
                                             const Validated<v1::FaultTransition>& t, Mutation* m);
  StatusOr<TransitionResult> ApplyTransition(const std::string& node, uint64_t session, const v1::FaultTransition& t,
                                             Mutation* m);
  void ApplyDisconnect(const std::string& node, uint64_t session);
  StatusOr<v1::ReportResponse> ApplyReport(const Validated<v1::ReportRequest>& req, Mutation* m);
  StatusOr<v1::ReportResponse> ApplyReport(const v1::ReportRequest& req, Mutation* m);
  // Public faults (state/public_faults.h; MindCluster's PubFault plans them): raises or clears
  // each planned fault under plan.reporter. A fault on a node that is not
  // registered (or a serial no node carries) is dropped and named in
  // `dropped`; RESOURCE_EXHAUSTED when options.max_faults would be passed.
  struct PubFaultResult {
    uint32_t applied = 0;
    std::vector<std::string> dropped;
  };
  StatusOr<PubFaultResult> ApplyPublicFaults(const PubFaultPlan& plan, const PubFaultOptions& options, Mutation* m);
  // AdminService. Each validates, is idempotent, and records actor and reason
  // in its event.
  StatusOr<v1::Node> ApplyCordon(const std::string& node, bool cordon, const std::string& actor,
                                 const std::string& reason, Mutation* m);
  StatusOr<v1::Fault> ApplyClearFault(const std::string& fault_id, const std::string& actor, const std::string& reason,
                                      Mutation* m);
  StatusOr<v1::AdminState> ApplySetRecoveryMode(const v1::SetRecoveryModeRequest& req, Mutation* m);
  // ---- the writer's primitives, for the rules (state/rules.h) ----
  // The state's clock (what Apply* stamps records with).
  TimePoint Now() const { return clock_->Now(); }
  // The tables, read-only.
  const NodeTable& node_table() const { return nodes_; }
  const FaultTable& fault_table() const { return faults_; }
  const Catalog& catalog() const { return *catalog_; }
  // The store, read-only: what an attached rule keeps in records of its own
  // it reads back at WriterRule::Loaded (the incidents, the validations).
  const storage::Store& store() const { return *store_; }
  // Counts the changes that may change the software chain's drift: a node's
  // chain or pool (hello, chain update), a job's placement.
  uint64_t chain_generation() const { return chain_generation_; }
  // The fault stored under `key` clears with `reason` (its event, the
  // health it implies); false when it is not active. A fault whose node
  // ClusterD does not know only loses its auto-clear time.
  bool ClearFault(const std::string& key, const std::string& reason, Mutation* m);
  // The next fault whose auto_clear_time has come by `now` (taken off the
  // schedule), and when the next one is due (max: none).
  std::optional<std::string> DueAutoClear(TimePoint now) { return faults_.DueAutoClear(now); }
  TimePoint NextAutoClear() const { return faults_.NextAutoClear(); }
  // A device's record, created (HEALTHY) when the node has none of that id;
  // null when the node is not registered. Call DeviceChanged after changing
  // it: the record is written with the group.
  v1::Device* MutableDevice(const std::string& node, uint32_t device);
  void DeviceChanged(const v1::Device& d) { nodes_.Changed(d); }
  // A node's record (null when not registered). Call NodeChanged after
  // changing it: the record is written with the group.
  v1::Node* MutableNode(const std::string& node) {
    NodeState* n = nodes_.Find(node);
    return n ? n->record.mutable_node() : nullptr;
  }
  void NodeChanged(const std::string& node) {
    if (const NodeState* n = nodes_.Find(node)) nodes_.Changed(*n);
  }
  // The revision of the next event, and the event appended to m.
  uint64_t NextRevision() { return journal_.Next(); }
  void Emit(Mutation* m, v1::Event event) { journal_.Emit(m, std::move(event)); }
  // The jobs whose ranks a fault hits.
  std::vector<std::string> JobsHitBy(const v1::Fault& f) const { return jobs_.HitBy(f); }

  // `source` is who writes: "api" (JobService) or an integration's name. It
  // is stored on the job; a job is changed or deleted only by its own source,
  // except that the API may delete any job (FailedPrecondition otherwise).
  // The job is answered with its impacts.
  StatusOr<v1::Job> ApplyCreateJob(const v1::Job& job, Mutation* m, const std::string& source = kApiSource);
  StatusOr<v1::Job> ApplyUpdateJob(const v1::Job& job, Mutation* m, const std::string& source = kApiSource);
  StatusOr<uint64_t> ApplyDeleteJob(const std::string& id, Mutation* m, const std::string& source = kApiSource);

  // ---- recoveries: called by the Coordinator on the writer thread ----
  // Stores `r` with a new revision (and update_time) and emits one event of
  // `type` carrying it and its job id. Returns the stored record.
  const v1::Recovery& PutRecovery(v1::Recovery r, v1::EventType type, Mutation* m) {
    return recoveries_.Put(std::move(r), type, m);
  }
  // The next recovery id for a job: "<job>.<n>".
  std::string NextRecoveryId(const std::string& job_id) { return recoveries_.NextId(job_id); }
  // Sets a job's state (JOB_UPDATED event with `reason`); no-op if unchanged.
  Status SetJobState(const std::string& id, v1::JobState state, const std::string& reason, Mutation* m) {
    return jobs_.SetState(id, state, reason, m);
  }
  // The progress monitor's Job.progress (a JOB_PROGRESS event with `reason`).
  Status SetJobProgress(const std::string& id, const v1::JobProgress& progress, const std::string& reason,
                        Mutation* m) {
    return jobs_.SetProgress(id, progress, reason, m);
  }
  // Marks a node (device absent) or a device isolated; NODE_UPDATED event.
  // Idempotent. UncordonNode clears both.
  Status SetIsolated(const std::string& node, std::optional<uint32_t> device, const std::string& reason, Mutation* m) {
    return nodes_.SetIsolated(node, device, reason, m);
  }

  // Raises HEARTBEAT_LOST on every node silent for longer than grace.
  // Returns when the next node would be silent for longer than grace if it
  // stays silent (TimePoint::max() if none can be). hold_unattached: a node
  // whose agent has not said Hello to this process yet (AwaitingReattach)
  // is not declared lost, however long it has been silent: the writer holds
  // them while a restart's reattach is still under way.
  TimePoint CheckLiveness(std::chrono::nanoseconds grace, Mutation* m, bool hold_unattached = false);
  // Nodes whose agent is expected (not lost, not registered by an API
  // client) and has not said Hello to this process since it loaded the
  // state: after a restart or a takeover, the agents still to come back.
  size_t AwaitingReattach() const;
  // Every node that is not lost counts as seen at `now` (if seen before):
  // its grace starts again. The writer calls it when agents can first reach
  // this process (Engine::Serve), so that neither the time the load took nor
  // a takeover makes a node lost. Changes nothing stored.
  void RestartGrace(TimePoint now);
  // Adds deletion of events (compacted, to] to m and records the new floor.
  void ApplyCompaction(uint64_t to, Mutation* m) { journal_.Compact(to, m); }
  // Finished recovery records kept (RecoveryTable::Retention).
  size_t ApplyRecoveryRetention(const RecoveryRetention& retention, TimePoint now, Mutation* m);

  // Writes what changed since the last flush and is written once per commit
  // however often it changed (the revision counter, node and device records)
  // into m. The Engine calls it once per group, before the commit; anything
  // that commits a Mutation must.
  void FlushDirty(Mutation* m) {
    journal_.Flush(m);
    nodes_.Flush(m);
  }
  // Set by the Engine once a commit is durable.
  void set_durable_revision(uint64_t r) { journal_.set_durable(r); }
  // The lock itself: only the Engine (the writer, the only maker of a
  // WriterKey) takes it, exclusively; readers go through Read.
  std::shared_mutex& mutex(const WriterKey& /*writer*/) const { return mu_; }

 private:
  // The proposed fault's level from the reporter's and the catalog's, and,
  // where both had a say and differ, both (Fault.reported_level ...).
  void SetReportedLevel(const std::string& code, v1::FaultLevel reported, bool reporter_decides,
                        v1::Fault* proposed) const;

  // OK when raising the fault stored under `key` on `node` stays within
  // max_faults_per_node (a raise of a fault already active always does);
  // RESOURCE_EXHAUSTED, counted, otherwise. `external`: the raise comes from
  // FaultService, else from the node's agent.
  Status CheckFaultRoom(const std::string& node, const std::string& key, bool external) const;
  // Raise or refresh, with its event and the health it implies; returns the
  // stored record.
  const v1::Fault& Raise(NodeState& n, const std::string& key, const v1::Fault& proposed, Mutation* m);
  bool Clear(NodeState& n, const std::string& key, const std::string& reason, Mutation* m,
             const std::string& actor = "");
  // The FAULT_* event of a changed record, naming the jobs it hits.
  void EmitFault(const v1::Fault& f, v1::EventType type, const std::string& actor, Mutation* m);
  void RecomputeHealth(NodeState& n, std::optional<uint32_t> device, Mutation* m);
  v1::Fault FaultFromReport(const std::string& node, const v1::FaultReport& r) const;
  // The inventory's devices into the node's device records (identity; health
  // and the rest kept).
  void SetDevices(NodeState& n, const v1::Inventory& inventory);
  // The node's record becomes `updated`, with its NODE_REGISTERED (created)
  // or NODE_UPDATED event; nothing when unchanged.
  // Applies `set` to a copy of the connected agent's inventory and stores the
  // node when that changed it (*changed = true then).
  Status ReplaceInventory(const std::string& node, uint64_t session, const std::function<void(v1::Inventory*)>& set,
                          Mutation* m, bool* changed);
  void UpdateNodeRecord(NodeState& n, const v1::Node& updated, bool created, const std::string& actor, Mutation* m);

  storage::Store* store_;
  const Catalog* catalog_;
  std::vector<WriterRule*> attached_;  // Attach's, told of Load and every fault change
  std::set<std::string> reporter_levels_;
  ReleaseChainCheck release_chain_check_ = ReleaseChainCheck::kAutomatic;
  uint64_t chain_generation_ = 0;  // chain_generation()
  mutable std::shared_mutex mu_;
};

}  // namespace clusterd
