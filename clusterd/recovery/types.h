// Recovery decision types: jobs, their recovery policy, the strategy ladder,
// the views of faults and of the cluster that a decision reads, and the
// decision itself. Plain values, no I/O; see docs/recovery.md.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/v1/types.pb.h"
#include "common/clock.h"
#include "common/status.h"

namespace clusterd::recovery {

using v1::FaultLevel;

enum class JobKind { kTraining, kInference };

// The ladder, least disruptive first. The numeric order IS the ladder order:
// "down the ladder" means a larger value.
enum class Strategy : int {
  kStepRetry = 0,       // redo the current step in place
  kProcessRestart = 1,  // restart the job's processes where they are
  kPodReschedule = 2,   // replace only the hit pods elsewhere
  kJobReschedule = 3,   // restart the whole job
  kScaleIn = 4,         // continue elastically without the hit replicas
  kFail = 5,            // give up: the job fails, a human takes over
};
inline constexpr std::array<Strategy, 6> kLadder = {Strategy::kStepRetry,     Strategy::kProcessRestart,
                                                    Strategy::kPodReschedule, Strategy::kJobReschedule,
                                                    Strategy::kScaleIn,       Strategy::kFail};

// "STEP_RETRY", "PROCESS_RESTART", ... ; Parse accepts any case.
std::string_view StrategyName(Strategy s);
std::optional<Strategy> ParseStrategy(std::string_view name);

enum class JobStatus { kPending, kRunning, kRecovering, kSucceeded, kFailed };
std::string_view JobStatusName(JobStatus s);

// A silencing window: faults whose code matches `code` start no recovery for
// this job while the window is open. `code` is an exact code or a glob with
// `*` and `?`, compared case-insensitively (like the catalog). `until` absent
// means open until removed.
struct SilenceWindow {
  std::string code;
  std::optional<TimePoint> until;

  // A window that closes `length` after `now` (the "duration" form).
  static SilenceWindow For(std::string code, TimePoint now, Duration length) {
    return SilenceWindow{std::move(code), now + length};
  }
  bool OpenAt(TimePoint now) const { return !until || now < *until; }
};

// Case-insensitive glob match (`*` any run, `?` one character).
bool CodeMatches(std::string_view pattern, std::string_view code);

struct JobPolicy {
  // Strategies the job allows. FAIL is always available, whether listed or not.
  std::set<Strategy> allowed = {Strategy::kStepRetry, Strategy::kProcessRestart, Strategy::kPodReschedule,
                                Strategy::kJobReschedule, Strategy::kScaleIn};
  // How long each rung may take before the coordinator escalates; missing
  // entries use DefaultStepTimeout.
  std::map<Strategy, Duration> step_timeouts;
  // Retry budgets: recoveries started for this job, and recoveries started
  // because of faults on one node, within the caller's budget window.
  // Absent = unlimited.
  std::optional<int> max_retries_per_job = 10;
  std::optional<int> max_retries_per_node = 3;
  std::vector<SilenceWindow> silences;
  // Flap suppression: a fault must stay active this long before it can start a
  // recovery.
  Duration hold_down = std::chrono::seconds(10);
  // A failed recovery that ended within this window belongs to the same
  // incident: the next decision starts below its rung.
  Duration escalation_window = std::chrono::minutes(30);
  // SCALE_IN only if at least this many replicas remain.
  int min_replicas = 1;

  bool Allows(Strategy s) const { return s == Strategy::kFail || allowed.contains(s); }
  Duration TimeoutFor(Strategy s) const;
};

Duration DefaultStepTimeout(Strategy s);

struct RankPlacement {
  std::string node;
  std::optional<uint32_t> device;  // absent: the rank uses no accelerator (unless any_device)
  // No device known, but the rank holds some of its node's (RankPlacement.any_device).
  bool any_device = false;
};

// THE rule of which ranks a fault hits, for a rank on the fault's node: a
// node-level fault hits every rank there, a device fault only the ranks on
// that device (a rank without a device uses no accelerator), or any device
// when the rank holds devices of the node that are not known (any_device).
// Every mapping of faults to ranks (decisions, job impacts, event job ids,
// the placement index) applies this.
inline bool FaultHitsRank(std::optional<uint32_t> fault_device, std::optional<uint32_t> rank_device,
                          bool any_device = false) {
  return !fault_device || (rank_device ? *rank_device == *fault_device : any_device);
}

struct Job {
  std::string id;
  JobKind kind = JobKind::kTraining;
  std::map<int, RankPlacement> placement;  // rank -> where it runs
  // Ranks r with the same r / ranks_per_replica form one replica (the unit
  // that SCALE_IN drops and that an inference service serves with).
  int ranks_per_replica = 1;
  JobPolicy policy;
  JobStatus status = JobStatus::kRunning;

  // How many ranks may share one device of a node (Job.ranks_per_device; 1:
  // each device runs one rank).
  int ranks_per_device = 1;

  int ReplicaOf(int rank) const { return rank / ranks_per_replica; }
  int ReplicaCount() const;

  // The placement by node, for RanksHit: what a fault hits is a lookup, not a
  // walk over every rank of the job. Built by Index() (FromProto calls it);
  // a job whose index does not cover its placement (built by hand) is
  // indexed again, as a copy, by each call that needs it.
  struct NodeRanks {
    std::vector<int> all;                            // sorted
    std::map<uint32_t, std::vector<int>> by_device;  // each sorted, the any_device ranks included
    std::vector<int> any_device;                     // sorted: hit by a fault on any device
  };
  std::map<std::string, NodeRanks> by_node;
  size_t indexed_ranks = 0;
  void Index();
  bool indexed() const { return indexed_ranks == placement.size(); }
  // The ranks a fault on `node` (`device`; none: the whole node) hits,
  // sorted, from the index: FaultHitsRank without a walk. Requires indexed().
  std::span<const int> Hits(const std::string& node, std::optional<uint32_t> device) const;
};

// What a decision needs to know about one fault (a projection of v1::Fault).
struct FaultView {
  std::string id;
  std::string node;
  std::optional<uint32_t> device;  // absent: node-level fault
  std::string code;
  FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
  v1::FaultSource source = v1::FAULT_SOURCE_UNSPECIFIED;
  bool active = true;
  // Start of the CURRENT activation (for a fault raised again after a clear,
  // the time of that raise), so that every re-raise restarts the hold-down.
  TimePoint first_seen;
  std::optional<TimePoint> cleared_at;
};

struct ClusterView {
  std::set<std::string> cordoned_nodes;  // cordoned or in maintenance
  std::set<std::string> isolated_nodes;  // nodes currently isolated
  int total_nodes = 0;
  int recoveries_running = 0;  // recoveries of OTHER jobs in progress
  bool paused = false;
  bool dry_run = false;
};

struct Limits {
  // At most this percentage of nodes isolated (rounded down, but at least 1).
  int max_isolated_node_percent = 10;
  // At most this many recoveries running at once.
  int max_concurrent_recoveries = 4;
};

enum class RecoveryOutcome { kSucceeded, kFailed, kTimedOut };

struct PastRecovery {
  Strategy strategy = Strategy::kFail;
  RecoveryOutcome outcome = RecoveryOutcome::kSucceeded;
  TimePoint ended;
};

struct History {
  int job_retries_used = 0;
  std::map<std::string, int> node_retries_used;
  std::vector<PastRecovery> recent;  // this job's recent recoveries, any order
};

struct DeviceRef {
  std::string node;
  uint32_t device = 0;
  auto operator<=>(const DeviceRef&) const = default;
};

enum class Action { kNone, kWait, kRecover };
std::string_view ActionName(Action a);

// The rule that shaped the decision, for machines (reasons are for humans).
enum class Gate {
  kNone,             // the level/policy/history mapping alone decided
  kJobNotRunning,    // job pending or finished: no recovery
  kHoldDown,         // kWait: flap suppression
  kRecoveryRunning,  // kWait: this job is already recovering
  kPaused,           // kWait: global pause
  kJobBudget,        // FAIL: job retry budget exhausted
  kNodeBudget,       // FAIL: node retry budget exhausted
  kMaxConcurrent,    // kWait: M recoveries already running
  kMaxIsolated,      // kWait, or SCALE_IN instead: N% of nodes isolated
};
std::string_view GateName(Gate g);

struct Decision {
  Action action = Action::kNone;
  // Set for kRecover, and for kWait once the strategy it waits to apply is known.
  std::optional<Strategy> strategy;
  Gate gate = Gate::kNone;
  FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;  // worst trigger level
  std::vector<int> hit_ranks;                      // sorted
  std::vector<int> hit_replicas;                   // sorted
  std::vector<std::string> trigger_fault_ids;      // by first_seen, then id
  std::vector<std::string> reasons;
  std::optional<TimePoint> wait_until;
  std::vector<std::string> isolate_nodes;  // sorted
  std::vector<DeviceRef> isolate_devices;  // sorted, none on an isolated node
  std::vector<DeviceRef> reset_devices;    // chips to reset once free, sorted
  bool graceful = false;                   // proactive move: start the replacement before stopping
  bool dry_run = false;                    // record, do not act
  Duration step_timeout{0};
};

// Validation for the future JobService (and for tests building policies).
Status ValidatePolicy(const JobPolicy& policy);
Status ValidateJob(const Job& job);
Status ValidateLimits(const Limits& limits);

}  // namespace clusterd::recovery
