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
// Thread contract: Apply*, CheckLiveness and Load are called only by the
// Engine's writer thread holding the state's lock exclusively (the Engine is
// the one writer); readers on any thread go through Read, which holds the
// lock shared and hands them the read view (StateView) only. Nothing here
// touches the disk except Load.
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

#include "clusterd/recovery/separation.h"
#include "clusterd/state/catalog.h"
#include "clusterd/state/mutation.h"
#include "clusterd/state/public_faults.h"
#include "clusterd/state/state_view.h"
#include "clusterd/state/validation.h"
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

class Engine;

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
  // The separation policy (recovery/separation.h): before Load; MindCluster's
  // defaults otherwise (3 faults in 24 h, released after 48 h fault-free).
  void set_separation_policy(const recovery::SeparationPolicy& policy) { separations_.emplace(policy); }
  // External reporters whose levels are their own (Catalog::ResolveFor): a
  // level they give wins over the built-in catalog's, not over the
  // operator's catalog file. Public faults always are (ApplyPublicFaults).
  void set_reporter_levels(std::set<std::string> reporters) { reporter_levels_ = std::move(reporters); }
  bool ReporterDecidesLevel(const std::string& reporter) const { return reporter_levels_.count(reporter) > 0; }
  // The separation policy from now on, after Load, on the writer thread
  // (the "mindcluster" integration's clusterd-config-cm): counts and
  // separations are kept, the next tick applies the new window and release
  // time. InvalidArgument (nothing changed) for a policy out of bounds.
  Status ChangeSeparationPolicy(const recovery::SeparationPolicy& policy);
  const recovery::SeparationPolicy& separation_policy() const { return separations_->policy(); }
  // The node label that names a node's pool for the software chain's drift
  // (chain_drift.h); "" (the default): the model of the node's first device.
  void set_chain_pool_label(std::string label) { chain_pool_label_ = std::move(label); }
  // The level of CHAIN_VERSION_DRIFT per pool (unlisted pools, and a job's
  // nodes: SUB_HEALTH; a catalog entry for the code wins over both).
  void set_chain_drift_levels(std::map<std::string, v1::FaultLevel> levels) {
    chain_drift_levels_ = std::move(levels);
    chain_dirty_ = true;
  }
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
  // Clears the faults whose auto_clear_time has come; returns when the next
  // one is due (TimePoint::max() when none). Called by the writer's tick.
  TimePoint ExpireAutoClears(TimePoint now, Mutation* m);
  // AdminService. Each validates, is idempotent, and records actor and reason
  // in its event.
  StatusOr<v1::Node> ApplyCordon(const std::string& node, bool cordon, const std::string& actor,
                                 const std::string& reason, Mutation* m);
  StatusOr<v1::Fault> ApplyClearFault(const std::string& fault_id, const std::string& actor, const std::string& reason,
                                      Mutation* m);
  StatusOr<v1::AdminState> ApplySetRecoveryMode(const v1::SetRecoveryModeRequest& req, Mutation* m);
  // Returns a separated device to service (DEVICE_RELEASED event); a device
  // that is not separated is answered unchanged, without an event. NotFound
  // for a node or device ClusterD does not know.
  StatusOr<v1::Device> ApplyReleaseDevice(const std::string& node, uint32_t device, const std::string& actor,
                                          const std::string& reason, Mutation* m);
  // The separation policy's clock: settles the fault occurrences that waited
  // long enough, separates the devices at the threshold and releases those
  // fault-free long enough (DEVICE_SEPARATED / DEVICE_RELEASED events).
  // Returns when it next has something to do. Called by the writer's tick.
  TimePoint AdvanceSeparations(TimePoint now, Mutation* m);
  // The software chain's version drift (chain_drift.h): after hellos changed
  // a chain (and once after Load), at most once a second, CHAIN_VERSION_DRIFT
  // faults of the reporter clusterd-chain are raised on the nodes whose
  // driver or CANN version differs from their pool's majority and cleared
  // where it no longer does. Returns when it next has work (max: none).
  TimePoint AdvanceChainDrift(TimePoint now, Mutation* m);
  // Repeat offenders (docs/recovery.md, "Repeat offenders"): a node whose
  // faults started more than `max_recoveries` recoveries within `window`
  // (counted from its last cordon or uncordon) is cordoned, actor clusterd,
  // with a reason naming them. 0: off (the default). Before Load.
  void set_repeat_offender_policy(uint32_t max_recoveries, std::chrono::nanoseconds window) {
    repeat_offender_max_ = max_recoveries;
    repeat_offender_window_ = window;
  }
  // At most every 10 s; returns when it next has work (max: off).
  TimePoint AdvanceRepeatOffenders(TimePoint now, Mutation* m);

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
  // stays silent (TimePoint::max() if none can be).
  TimePoint CheckLiveness(std::chrono::nanoseconds grace, Mutation* m);
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

 private:
  // The proposed fault's level from the reporter's and the catalog's, and,
  // where both had a say and differ, both (Fault.reported_level ...).
  void SetReportedLevel(const std::string& code, v1::FaultLevel reported, bool reporter_decides,
                        v1::Fault* proposed) const;
  friend class Engine;  // the writer takes the lock exclusively
  // The lock itself: only the Engine (the writer) takes it, exclusively;
  // readers go through Read.
  std::shared_mutex& mutex() const { return mu_; }

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
  // The separation policy's view of a device's faults: a new occurrence
  // counted (Raise), a fault of a separated device raised or cleared.
  void ObserveForSeparation(NodeState& n, const v1::Fault& f, bool raised);
  // Writes the policy's record of the device into its record (counted
  // faults, separation); the event's revision when `revision` is set.
  v1::Device& SyncSeparation(NodeState& n, uint32_t device, std::optional<uint64_t> revision = std::nullopt);
  void EmitSeparation(NodeState& n, const v1::Device& d, bool separated, const std::string& actor,
                      const std::string& reason, Mutation* m);

  storage::Store* store_;
  const Catalog* catalog_;
  std::optional<recovery::SeparationTracker> separations_;
  // When AdvanceSeparations next has work, unless a fault changes it first.
  TimePoint separation_due_ = TimePoint::min();
  std::string chain_pool_label_;
  std::set<std::string> reporter_levels_;
  std::map<std::string, v1::FaultLevel> chain_drift_levels_;
  ReleaseChainCheck release_chain_check_ = ReleaseChainCheck::kAutomatic;
  bool chain_dirty_ = true;  // a chain changed since the last drift pass (and at start)
  uint32_t repeat_offender_max_ = 0;
  TimePoint repeat_offender_due_ = TimePoint::min();
  TimePoint chain_due_ = TimePoint::min();
  mutable std::shared_mutex mu_;
};

}  // namespace clusterd
