// The progress monitor: the jobs' progress reports in (JobService.Attach),
// their trackers (tracker.h), and what follows in ClusterD's state (docs/recovery.md, "Progress"):
//
// - JOB_HANG, a fault of the reporter "progress" on each rank that stopped
//   first (at most kMaxHangFaults; id "<job>/hang/<rank>"), at the level the
//   job's hang_action asks (NOT_HANDLE: notify; RESTART_BUSINESS: restart
//   the processes; SEPARATE: move the pods). The coordinator decides a
//   recovery for it like for any fault. Cleared once a rank advances.
// - SLOW_RANK on each slow rank's chip (SUB_HEALTH, "<job>/slow/<rank>",
//   the evidence in the message); SLOW_NODE on a node where ranks of two or
//   more jobs are slow ("node/<node>/slow").
// - Job.progress stored (a JOB_PROGRESS event, reason "progress: ...") when its state
//   or named ranks change and at most every snapshot_interval otherwise;
//   GetJob answers the live values (Live).
//
// Threads: Report runs on gRPC threads (the caller holds the state's shared
// lock and hands the job); RunOnce on an executor (common/executor.h: its
// own thread with Start(), a test's ManualExecutor with Start(executor)) or
// a test's thread; both take the monitor's mutex, never the state's
// exclusive lock: the writes go through the Engine.
#pragma once

#include <atomic>
#include <tuple>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "clusterd/engine/engine.h"
#include "clusterd/progress/tracker.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/v1/agent.pb.h"
#include "common/executor.h"
#include "common/metrics.h"

namespace clusterd {

// Who sent a progress report, for its budget and for hang attribution
// (tracker.h, JobTracker::Ingest).
struct ProgressSender {
  // "node/<name>" for a NodeD's stream (its own ranks only: the adapter
  // checks), "job-agent" for the job's own agent (JobService.Attach).
  std::string id;
  // The ranks of the job it may report (its node's; the job's for the job
  // agent): its budget is max(2 x these, min_rank_rate) rank entries a
  // second, its own, so that one node's flood never refuses another's.
  size_t ranks = 0;
};

struct ProgressOptions {
  std::chrono::nanoseconds snapshot_interval = std::chrono::minutes(5);
  std::chrono::nanoseconds interval = std::chrono::seconds(1);  // RunOnce by the thread
  // Jobs tracked at once; a report of one more is refused.
  size_t max_jobs = 10'000;
  // Rank entries one sender may report per second for a job: max(2 x the
  // ranks it may report, this).
  size_t min_rank_rate = 4096;
};

class ProgressMonitor {
 public:
  inline static constexpr std::string_view kReporter = "progress";
  static constexpr size_t kMaxHangFaults = 8;

  ProgressMonitor(ClusterState* state, Engine::SubmitFn submit, const Clock* clock, ProgressOptions options,
                  MetricsRegistry* metrics);
  ~ProgressMonitor();

  // A report for `job` (as stored, read under the state's shared lock) from
  // `sender`: InvalidArgument (ValidateReport, a job that is not running),
  // ResourceExhausted (the sender's rate for the job, max_jobs); nothing of a
  // refused report is taken.
  Status Report(const v1::Job& job, const v1::ProgressReport& report, const ProgressSender& sender);
  // Where the adapters hand a report in (they check nothing of it
  // themselves); each reads the job under the state's shared lock and calls
  // Report. Any thread, no lock held.
  //
  // A NodeD's report of the ranks on its own node (NodeAgentService.Connect):
  // InvalidArgument for a malformed job id or a rank the job does not place
  // on `node`, NotFound for a job ClusterD does not know; the node's budget
  // is its own (ProgressSender "node/<node>").
  Status ReportFromNode(const std::string& node, const v1::JobProgressReport& report);
  // The job's own agent (JobService.Attach): it speaks for every rank.
  Status ReportFromJobAgent(const std::string& job_id, const v1::ProgressReport& report);
  // The job's live progress (for GetJob); nullopt when it never reported
  // since ClusterD started.
  std::optional<v1::JobProgress> Live(const std::string& job_id) const;

  // One pass: evaluates every tracked job, submits the faults to raise and
  // clear and the snapshots due. The first pass adopts the faults of the
  // reporter "progress" already in the state and the stored snapshots.
  // Returns when the next pass is due: after `interval`, or sooner when a
  // job's hang timeout runs out before.
  TimePoint RunOnce();

  // RunOnce whenever the last pass says, on a thread of the monitor's own.
  void Start();
  // The same on `executor` (on the monitor's clock; a test's
  // ManualExecutor): its owner stops it, or runs nothing more of it, before
  // destroying the monitor.
  void Start(Executor* executor);
  // No pass after it returns (with Start(): the thread is joined).
  void Stop();

 private:
  struct Tracked {
    progress::JobTracker tracker;
    uint64_t job_revision = 0;
    std::set<uint32_t> ranks;  // the job's ranks at job_revision
    // Rate, per sender: rank entries taken in its current second. At most
    // one entry per node of the job and one for its agent (the adapters
    // check who may report which rank); expired ones go when it grows.
    struct Budget {
      TimePoint window{};
      size_t used = 0;
    };
    std::map<std::string, Budget> budgets;
    // What the state has of ours (fault ids) and what was stored last.
    std::map<std::string, v1::ReportRequest> raised;  // fault id -> its raise
    v1::ProgressState stored_state = v1::PROGRESS_STATE_UNSPECIFIED;
    std::string stored_named;
    TimePoint stored_at{};
    bool snapshot_pending = false;
  };
  struct Writes;
  // What the first pass takes over: the active faults of the reporter
  // "progress" and the jobs' stored snapshots (with their policies).
  struct Found {
    std::vector<v1::ReportRequest> faults;
    std::vector<std::tuple<std::string, v1::ProgressPolicy, v1::JobProgress>> stored;
  };
  static Found FindOurs(const StateView& view);
  void Adopt(Found found, TimePoint now);

  ClusterState* state_;
  Engine::SubmitFn submit_;
  const Clock* clock_;
  ProgressOptions options_;

  mutable std::mutex mu_;
  std::map<std::string, Tracked> jobs_;
  std::map<std::string, v1::ReportRequest> slow_nodes_;  // SLOW_NODE raised: fault id -> its raise
  std::atomic<bool> adopted_{false};

  Counter* reports_;
  Counter* refused_invalid_;
  Counter* refused_rate_;
  Counter* refused_jobs_;
  Counter* hangs_;
  Counter* slow_found_;
  Gauge* jobs_gauge_[6];
  Gauge* ranks_gauge_;
  Gauge* slow_gauge_;
  Gauge* ettr_gauge_;
  Gauge* lost_seconds_;
  // Per job, as of the last pass: what the clusterd_job_* families list at a
  // scrape (as many series as jobs tracked, at most progress_max_jobs).
  struct Exported {
    std::string job;
    v1::ProgressState state = v1::PROGRESS_STATE_UNSPECIFIED;
    double ettr = 1.0;
    double lost_seconds = 0;
    double step = 0;
    double slow_ranks = 0;
  };
  mutable std::mutex exported_mu_;
  std::vector<Exported> exported_;

  std::unique_ptr<ThreadExecutor> own_executor_;  // Start()
  TaskHandle passes_;
};

}  // namespace clusterd
