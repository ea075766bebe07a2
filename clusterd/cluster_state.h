// The in-memory model of nodes, devices and faults, and every rule that
// changes it. Each Apply* call is one logical change: it validates first and
// changes nothing on error; on success it mutates memory and appends the
// records, the revision bump and the events to the caller's Mutation, which
// the Engine commits as one synced Store write.
//
// Thread contract: Apply*, CheckLiveness and Load are called only by the
// Engine's writer thread holding the state's lock exclusively (the Engine is
// the one writer); the query methods may be called from any thread through
// Read, which holds the lock shared. Nothing here touches the disk except
// Load.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <ranges>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "clusterd/catalog.h"
#include "clusterd/pubfault.h"
#include "clusterd/storage/change_set.h"
#include "clusterd/storage/key_codec.h"
#include "clusterd/storage/store.h"
#include "clusterd/storage/v1/storage.pb.h"
#include "clusterd/v1/admin.pb.h"
#include "clusterd/v1/agent.pb.h"
#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/fault.pb.h"
#include "clusterd/v1/job.pb.h"
#include "common/clock.h"
#include "common/status.h"

namespace clusterd {

// The stored effect of one or more logical changes, committed together
// (after ClusterState::FlushDirty has added the records written once per
// commit): the change set the Store applies, and the events to publish to
// watchers once it is durable.
struct Mutation {
  storage::ChangeSet changes;
  std::vector<v1::Event> events;
  bool empty() const { return changes.empty(); }
};

class Counter;

// Limits on what one node or job may hold, so that every answer and every
// computation over them stays bounded (see response_limits.h for the byte
// budgets). The counters are optional; each is incremented when its limit
// is hit.
struct StateLimits {
  // Ranks per job: CreateJob/UpdateJob beyond it are INVALID_ARGUMENT.
  uint32_t max_job_ranks = 262'144;
  // Active faults per node, counted apart for the node's agent and for
  // external reporters (so external reports can never crowd out the agent's
  // own faults): a raise of a new fault beyond it is RESOURCE_EXHAUSTED.
  uint32_t max_faults_per_node = 4096;
  // Impacts listed per job in an answer (Job.impacts_truncated beyond it).
  uint32_t max_job_impacts = 1024;
  Counter* faults_refused_agent = nullptr;
  Counter* faults_refused_external = nullptr;
  Counter* jobs_refused = nullptr;
  Counter* job_impacts_truncated = nullptr;
  Counter* node_faults_truncated = nullptr;
};

struct TransitionResult {
  bool duplicate = false;  // id already stored: acknowledged again, changed nothing
};

class Engine;

class ClusterState {
 public:
  // How many agent epochs per node keep their applied sequence.
  static constexpr size_t kEpochsKept = 8;

  ClusterState(storage::Store* store, const Catalog* catalog, const Clock* clock);

  // Reads every node, device and fault record. Nodes start disconnected with
  // their grace period counted from now.
  Status Load();

  // The one way to read from any thread: fn(const ClusterState&) runs under
  // the shared lock (many readers at once, never while the writer applies)
  // and its result is returned by value, so nothing it points into escapes
  // the lock.
  template <typename Fn>
  auto Read(Fn&& fn) const {
    std::shared_lock lock(mu_);
    return std::forward<Fn>(fn)(*this);
  }

  // Before Load; the defaults otherwise.
  void set_limits(const StateLimits& limits) { limits_ = limits; }
  const StateLimits& limits() const { return limits_; }

  // ---- writer thread, mutex held exclusively ----
  StatusOr<v1::Welcome> ApplyHello(const v1::Hello& hello, uint64_t session, Mutation* m);
  Status ApplyHeartbeat(const std::string& node, uint64_t session, Mutation* m);
  // The common heartbeat without the writer: with the mutex held SHARED, a
  // heartbeat of the node's current session on a node that is not lost only
  // refreshes its last-seen time. False: submit ApplyHeartbeat instead.
  bool TryHeartbeat(const std::string& node, uint64_t session) const;
  Status ApplyMetrics(const std::string& node, uint64_t session, const v1::MetricSnapshot& snapshot);
  StatusOr<TransitionResult> ApplyTransition(const std::string& node, uint64_t session, const v1::FaultTransition& t,
                                             Mutation* m);
  void ApplyDisconnect(const std::string& node, uint64_t session);
  StatusOr<v1::ReportResponse> ApplyReport(const v1::ReportRequest& req, Mutation* m);
  // MindCluster public faults (pubfault.h, pubfaults.cc): raises or clears
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
  uint32_t active_public_faults() const { return active_pubfaults_; }
  // AdminService. Each validates, is idempotent, and records actor and reason
  // in its event.
  StatusOr<v1::Node> ApplyCordon(const std::string& node, bool cordon, const std::string& actor,
                                 const std::string& reason, Mutation* m);
  StatusOr<v1::Fault> ApplyClearFault(const std::string& fault_id, const std::string& actor, const std::string& reason,
                                      Mutation* m);
  StatusOr<v1::AdminState> ApplySetRecoveryMode(const v1::SetRecoveryModeRequest& req, Mutation* m);
  const v1::AdminState& admin_state() const { return admin_; }

  // `source` is who writes: "api" (JobService) or an integration's name. It
  // is stored on the job; a job is changed or deleted only by its own source,
  // except that the API may delete any job (FailedPrecondition otherwise).
  StatusOr<v1::Job> ApplyCreateJob(const v1::Job& job, Mutation* m, const std::string& source = kApiSource);
  StatusOr<v1::Job> ApplyUpdateJob(const v1::Job& job, Mutation* m, const std::string& source = kApiSource);
  StatusOr<uint64_t> ApplyDeleteJob(const std::string& id, Mutation* m, const std::string& source = kApiSource);
  static constexpr const char* kApiSource = "api";
  // ---- recoveries: called by the Coordinator on the writer thread ----
  // Stores `r` with a new revision (and update_time) and emits one event of
  // `type` carrying it and its job id. Returns the stored record.
  const v1::Recovery& PutRecovery(v1::Recovery r, v1::EventType type, Mutation* m);
  // The next recovery id for a job: "<job>.<n>".
  std::string NextRecoveryId(const std::string& job_id);
  // Sets a job's state (JOB_UPDATED event with `reason`); no-op if unchanged.
  Status SetJobState(const std::string& id, v1::JobState state, const std::string& reason, Mutation* m);
  // Marks a node (device absent) or a device isolated; NODE_UPDATED event.
  // Idempotent. UncordonNode clears both.
  Status SetIsolated(const std::string& node, std::optional<uint32_t> device, const std::string& reason, Mutation* m);
  const std::map<std::string, v1::Recovery>& recoveries() const { return recoveries_; }
  // The job's recoveries (any state), oldest first.
  std::vector<const v1::Recovery*> RecoveriesOfJob(const std::string& job_id) const;
  const std::map<std::string, v1::Job>& jobs() const { return jobs_; }
  // Every fault record (active or cleared) by storage key: one node's faults
  // are the range [storage::NodePrefix(node), storage::NodePrefixEnd(node)).
  const std::map<std::string, v1::Fault>& faults() const { return faults_; }
  // The node as stored (labels, inventory, health), or null.
  const v1::Node* FindNode(const std::string& name) const {
    auto it = nodes_.find(name);
    return it == nodes_.end() ? nullptr : &it->second.record.node();
  }
  // Every fault record (active or cleared) on the nodes the job uses.
  std::vector<const v1::Fault*> FaultsOnJobNodes(const v1::Job& job) const;
  // The fault with this id (Fault.id), or null.
  const v1::Fault* FindFault(const std::string& fault_id) const;
  std::set<std::string> CordonedNodes() const;
  std::set<std::string> IsolatedNodes() const;

  // Raises HEARTBEAT_LOST on every node silent for longer than grace.
  // Returns when the next node would be silent for longer than grace if it
  // stays silent (TimePoint::max() if none can be).
  TimePoint CheckLiveness(std::chrono::nanoseconds grace, Mutation* m);
  // Adds deletion of events (compacted, to] to m and records the new floor.
  void ApplyCompaction(uint64_t to, Mutation* m);

  // Finished recovery records kept (recoveries.cc). Never removed: a recovery
  // still waiting or running, the newest recovery of a job that exists, and
  // any recovery created or ended within `protect` (retry budgets and
  // escalation count those). Of the rest, the oldest (by end time) go while
  // more than max_count records are stored, and any that ended before
  // now - max_age.
  struct RecoveryRetention {
    size_t max_count = 10'000;
    std::chrono::nanoseconds max_age = std::chrono::hours(24 * 30);
    std::chrono::nanoseconds protect = std::chrono::hours(24);
  };
  // Deletes what retention allows (no event: like the event-log compaction,
  // it removes history, not state). Returns how many records it removed.
  size_t ApplyRecoveryRetention(const RecoveryRetention& retention, TimePoint now, Mutation* m);
  size_t recovery_count() const { return recoveries_.size(); }

  // Writes what changed since the last flush and is written once per commit
  // however often it changed (the revision counter, node and device records)
  // into m. The Engine calls it once per group, before the commit; anything
  // that commits a Mutation must.
  void FlushDirty(Mutation* m);

  uint64_t revision() const { return revision_; }
  uint64_t compacted_revision() const { return compacted_.load(); }
  // Set by the Engine once a commit is durable.
  void set_durable_revision(uint64_t r) { durable_revision_.store(r); }
  uint64_t durable_revision() const { return durable_revision_.load(); }

  // ---- queries, mutex held shared ----
  v1::GetSummaryResponse GetSummary() const;
  StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& req) const;
  StatusOr<v1::GetNodeResponse> GetNode(const v1::GetNodeRequest& req) const;
  StatusOr<v1::ListFaultsResponse> ListFaults(const v1::ListFaultsRequest& req) const;
  size_t node_count() const { return nodes_.size(); }
  StatusOr<v1::Job> GetJob(const std::string& id) const;
  StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& req) const;
  size_t job_count() const { return jobs_.size(); }
  StatusOr<v1::ListRecoveriesResponse> ListRecoveries(const v1::ListRecoveriesRequest& req) const;
  StatusOr<v1::Recovery> GetRecovery(const std::string& id) const;

 private:
  friend class Engine;  // the writer takes the lock exclusively
  // The lock itself: only the Engine (the writer) takes it, exclusively;
  // readers go through Read.
  std::shared_mutex& mutex() const { return mu_; }
  // A time written without the exclusive lock (heartbeats under the shared
  // lock), copyable so that NodeState stays a value.
  struct AtomicTime {
    std::atomic<int64_t> ns{0};
    AtomicTime() = default;
    AtomicTime(const AtomicTime& o) : ns(o.ns.load()) {}
    AtomicTime& operator=(const AtomicTime& o) {
      ns = o.ns.load();
      return *this;
    }
  };
  struct NodeState {
    storage::v1::NodeRecord record;
    std::map<uint32_t, v1::Device> devices;
    TimePoint last_seen;       // last message applied by the writer
    mutable AtomicTime heard;  // last heartbeat taken by TryHeartbeat
    TimePoint LastSeen() const {
      return std::max(last_seen, TimePoint(TimePoint::duration(heard.ns.load(std::memory_order_relaxed))));
    }
    bool connected = false;
    bool lost = false;  // HEARTBEAT_LOST active
    uint64_t session = 0;
    uint64_t hello_epoch = 0;  // the epoch the current session said hello with
    v1::MetricSnapshot metrics;
  };

  StatusOr<NodeState*> SessionNode(const std::string& node, uint64_t session);
  // OK when raising the fault stored under `key` on `node` stays within
  // max_faults_per_node (a raise of a fault already active always does);
  // RESOURCE_EXHAUSTED, counted, otherwise. `external`: the raise comes from
  // FaultService, else from the node's agent.
  Status CheckFaultRoom(const std::string& node, const std::string& key, bool external) const;
  // The applied sequence of `epoch` in the node's record (0 when new). Keeps
  // the kEpochsKept most recent epochs, never evicting `epoch` or the current
  // session's hello epoch.
  uint64_t& TrackEpoch(NodeState& n, uint64_t epoch);
  // Every fault record of one node (active or cleared), in key order.
  // (A plain iterator pair, not std::ranges::subrange: clang 14, which builds
  // the fuzzers, cannot instantiate libstdc++ 12's subrange.)
  struct FaultRange {
    std::map<std::string, v1::Fault>::const_iterator first, last;
    auto begin() const { return first; }
    auto end() const { return last; }
  };
  FaultRange FaultsOfNode(const std::string& node) const {
    return {faults_.lower_bound(storage::NodePrefix(node)), faults_.lower_bound(storage::NodePrefixEnd(node))};
  }
  uint64_t NextRevision(Mutation* m);
  void Emit(Mutation* m, v1::Event event);
  void PutNode(NodeState& n, Mutation* m);
  void PutDevice(const v1::Device& d, Mutation* m);
  void PutFault(const std::string& key, const v1::Fault& f, Mutation* m);
  // Raise or refresh; returns the stored record.
  const v1::Fault& Raise(NodeState& n, const std::string& key, const v1::Fault& proposed, Mutation* m);
  bool Clear(NodeState& n, const std::string& key, const std::string& reason, Mutation* m,
             const std::string& actor = "");
  void RecomputeHealth(NodeState& n, std::optional<uint32_t> device, Mutation* m);
  v1::Fault FaultFromReport(const std::string& node, const v1::FaultReport& r) const;
  // Jobs whose ranks a fault hits, sorted.
  std::vector<std::string> JobsHitBy(const v1::Fault& f) const;
  // The job with its current impacts filled in.
  v1::Job WithImpacts(const v1::Job& job) const;
  void IndexJob(const v1::Job& job, bool add);
  void LoadRecovery(v1::Recovery r);
  void ClearIsolation(NodeState& n, Mutation* m);

  storage::Store* store_;
  const Catalog* catalog_;
  const Clock* clock_;
  StateLimits limits_;
  mutable std::shared_mutex mu_;
  std::map<std::string, NodeState> nodes_;
  std::map<std::string, v1::Fault> faults_;  // storage fault key -> record
  // Active faults with an auto_clear_time, by that time; and how many
  // public faults are active.
  std::set<std::pair<TimePoint, std::string>> auto_clears_;
  uint32_t active_pubfaults_ = 0;
  void CountPubFault(const v1::Fault& f, int delta);
  v1::AdminState admin_;
  std::map<std::string, v1::Job> jobs_;  // id -> job as stored (no impacts)
  std::map<std::string, std::set<std::string>> jobs_by_node_;
  std::map<std::string, v1::Recovery> recoveries_;  // id -> record
  std::map<std::string, uint64_t> recovery_seq_;    // job id -> last n used
  std::map<std::string, std::set<std::string>> recoveries_by_job_;
  uint64_t revision_ = 0;
  bool revision_dirty_ = false;
  uint64_t connections_changed_ = 0;  // agents connecting or disconnecting
  // GetSummary's last answer and what it depended on.
  using SummaryKey = std::array<uint64_t, 4>;
  mutable std::mutex summary_mu_;
  mutable SummaryKey summary_key_{UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
  mutable v1::GetSummaryResponse summary_cache_;
  std::set<std::string> dirty_nodes_;
  std::set<std::pair<std::string, uint32_t>> dirty_devices_;
  std::atomic<uint64_t> compacted_{0};
  std::atomic<uint64_t> durable_revision_{0};
};

// Validation shared with the adapters (they reject before enqueueing).
Status ValidateHello(const v1::Hello& hello);
Status ValidateTransition(const v1::FaultTransition& t);
Status ValidateReport(const v1::ReportRequest& req);
Status ValidateMetrics(const v1::MetricSnapshot& snapshot);
// max_ranks: StateLimits::max_job_ranks. A job must also serialize to at most
// kMaxJobBytes (response_limits.h).
Status ValidateJob(const v1::Job& job, size_t max_ranks = StateLimits().max_job_ranks);
// Ranks of the job on the fault's node and device (all of the node's ranks
// for a node-level fault), sorted.
std::vector<uint32_t> RanksHit(const v1::Job& job, const v1::Fault& fault);

}  // namespace clusterd
