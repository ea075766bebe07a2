// Job progress (docs/recovery.md, "Progress"): what one job's ranks report
// about their steps, and what follows from it: a hang (no rank advanced for
// the hang timeout), slow ranks (a rank's step time, less its collective
// waits, persistently above the job's median) and the effective training
// time (the share of wall time in which the job advanced, and the time lost
// per cause).
//
// Pure: every call takes ClusterD's clock as `now`; the agents' own clocks
// are only ever compared with themselves (one rank's reports), so nodes'
// clocks need not agree. Not thread-safe: the ProgressMonitor serializes.
#pragma once

#include <array>
#include <deque>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "clusterd/v1/job.pb.h"
#include "clusterd/v1/types.pb.h"
#include "common/clock.h"
#include "common/status.h"

namespace clusterd::progress {

// A job's ProgressPolicy with the defaults filled in.
struct Settings {
  // 0: derived (HangTimeout).
  Duration hang_timeout{0};
  v1::HangAction hang_action = v1::HANG_ACTION_RESTART_PROCESSES;
  double slow_threshold = 0.30;
  size_t window = 5;
  size_t warmup_reports = 2;
  bool disabled = false;
};
// The most samples of a window (state/validation.cc checks policies against it).
inline constexpr size_t kMaxWindow = 16;
inline constexpr size_t kMaxRanksPerReport = 4096;
// The highest step a rank may report: 2^53 - 1, exact in a double and in
// every JSON reader (Job.progress is read as JSON too). A million steps a
// second would take 285 years to get there; a higher one is refused.
inline constexpr uint64_t kMaxStep = (uint64_t{1} << 53) - 1;
// At most this many slow and hung ranks are named in a JobProgress.
inline constexpr size_t kMaxNamedRanks = 64;
inline constexpr size_t kMaxCauses = 32;
inline constexpr size_t kMaxInterruptions = 16;
inline constexpr Duration kMinHangTimeout = std::chrono::seconds(60);
// After a recovery of the job ends, it has this many hang timeouts to
// advance again before a hang is declared.
inline constexpr int kRestartGraceTimeouts = 3;

Settings SettingsOf(const v1::ProgressPolicy& policy);

// OK, or InvalidArgument naming the first bad rank: more than
// kMaxRanksPerReport ranks, a rank twice, a rank `placed` does not know, a
// step above kMaxStep, a negative or over-a-day duration, a collective time
// above its step time.
// A refused report changes nothing.
Status ValidateReport(const v1::ProgressReport& report, const std::function<bool(uint32_t)>& placed);

// Why the job is not advancing, from the rest of ClusterD's state (the
// monitor fills it in for a job that stalled).
struct Context {
  // A recovery of the job runs (or waits): the stall is its, not a hang.
  bool recovering = false;
  // Another fault hits the job (its device or node is unhealthy): a hang is
  // not declared; the lost time goes to that fault's code.
  bool faulted = false;
  // The code the lost time is charged to (the recovery's trigger or the
  // fault's); empty: JOB_HANG when hung, else "stalled".
  std::string cause;
};

struct SlowRankFinding {
  uint32_t rank = 0;
  double step_time = 0;   // seconds, the rank's median over its window
  double job_median = 0;  // seconds
  size_t window = 0;
};

struct Verdict {
  v1::ProgressState state = v1::PROGRESS_STATE_UNSPECIFIED;
  // Set while the job is HUNG: the ranks that stopped first (sorted, all of
  // them: the monitor names at most kMaxNamedRanks).
  std::vector<uint32_t> hung_ranks;
  // True when every rank stopped at the same step and none lags: there is
  // no rank to blame.
  bool hang_unattributed = false;
  std::vector<SlowRankFinding> slow_ranks;  // by rank
};

class JobTracker {
 public:
  JobTracker() = default;
  explicit JobTracker(Settings settings) : settings_(settings) {}

  void set_settings(const Settings& s) { settings_ = s; }
  const Settings& settings() const { return settings_; }

  // A report received at `now`, validated (ValidateReport), from `sender`:
  // who sent it ("node/<name>" for a NodeD, "job-agent" for the job's own
  // agent; the monitor's adapters say). A sender's claims move its own ranks
  // only: FirstStopped never blames the ranks of one sender on the word of a
  // single other one.
  void Ingest(const v1::ProgressReport& report, TimePoint now, std::string_view sender = "");
  // The verdict at `now`; `ctx` only matters once the job stalled.
  // Charges an interruption's lost time to the cause it saw last.
  Verdict Evaluate(TimePoint now, const Context& ctx);
  // Stalled: no rank advanced for longer than expected (the monitor fills a
  // Context in only then).
  bool Stalled(TimePoint now) const;

  // The live view (Job.progress): the last verdict, the ETTR counted to `now`.
  v1::JobProgress Snapshot(TimePoint now) const;
  // The stored snapshot after a restart: the accounts go on from it; the
  // hang timer starts again at `now` (ClusterD's own downtime is not the
  // job's: it is neither lost nor productive).
  void Restore(const v1::JobProgress& stored, TimePoint now);

  // When the job becomes HUNG if no rank advances before then (nullopt:
  // hung already, detection off, or nothing reported), so that the monitor
  // looks at once, not up to a pass later.
  std::optional<TimePoint> HangDue() const;
  // The hang timeout in force: the policy's (at least 2 report intervals),
  // or 10 x the median step time, at least kMinHangTimeout and at least 3
  // report intervals.
  Duration HangTimeout() const;
  size_t rank_count() const { return ranks_.size(); }
  bool reported() const { return since_.has_value(); }

 private:
  struct Rank {
    uint64_t step = 0;
    std::optional<TimePoint> agent_end;  // the agent's step_end_time of `step`
    TimePoint last_report{};
    std::array<float, kMaxWindow> window{};
    uint8_t filled = 0;  // samples in window
    uint8_t next = 0;
    uint16_t reports = 0;  // since the rank's (re)start, saturating
    uint32_t sender = 0;   // index into senders_: who reported it last
    bool has_step = false;
    bool checkpointing = false;
    void Push(float v, size_t size);
    float Median(size_t size) const;
  };
  // Sets normal-gap accounting for an advance at `now`.
  void OnAdvance(TimePoint now);
  Duration NormalGap() const;
  Duration StallAfter() const;
  void Charge(Duration lost, const std::string& cause);
  std::vector<uint32_t> FirstStopped(bool* unattributed) const;
  // The ranks `behind` says are behind whose blame holds (FirstStopped).
  template <typename Behind, typename Ahead>
  std::vector<uint32_t> Blame(const Behind& behind, const Ahead& ahead) const;
  uint32_t SenderIndex(std::string_view sender);
  // A rank's step moves from `from` (nullopt: it had none) to `to`.
  void MoveStep(std::optional<uint64_t> from, uint64_t to);
  std::vector<SlowRankFinding> FindSlow();

  Settings settings_;
  std::unordered_map<uint32_t, Rank> ranks_;
  // Ranks whose last report says checkpointing (kept by Ingest: a pass
  // does not walk every rank).
  ptrdiff_t checkpointing_ranks_ = 0;
  std::optional<TimePoint> since_;         // first report
  std::optional<TimePoint> last_advance_;  // ClusterD's clock
  std::array<Duration, 8> gaps_{};         // recent gaps between advances
  size_t gap_count_ = 0;
  // How many ranks are at each step now: the lowest and the highest step
  // of the job (a restart from a checkpoint moves both back).
  std::map<uint64_t, uint32_t> steps_;
  // The step of the stored snapshot (Restore), shown until ranks report.
  uint64_t restored_step_ = 0;
  // Who reported (Ingest's sender), interned: ranks keep an index. Bounded
  // by the monitor's adapters (a node with ranks of the job, the job agent).
  std::vector<std::string> senders_;
  std::unordered_map<std::string, uint32_t> sender_index_;
  uint64_t samples_ = 0, tokens_ = 0;
  Duration productive_{0}, lost_{0};
  struct Lost {
    Duration lost{0};
    uint32_t count = 0;
  };
  std::map<std::string, Lost> lost_by_cause_;
  struct Gap {
    TimePoint start;
    Duration lost;
    std::string cause;
  };
  std::deque<Gap> interruptions_;  // the last kMaxInterruptions closed ones
  std::string open_cause_;         // what the stall in progress is charged to
  // The last pass that saw a recovery of the job running.
  std::optional<TimePoint> recovering_seen_;
  bool samples_changed_ = false;
  double median_step_ = 0;  // seconds, from the last slow-rank pass
  Verdict last_;
};

}  // namespace clusterd::progress
