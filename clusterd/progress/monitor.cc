#include "clusterd/progress/monitor.h"

#include <algorithm>

#include <google/protobuf/util/time_util.h>

#include "common/logging.h"
#include "common/validation.h"

namespace clusterd {
namespace {

using google::protobuf::util::TimeUtil;

constexpr std::string_view kStateNames[] = {"", "advancing", "stalled", "hung", "checkpointing", ""};

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3fs", s);
  return buf;
}

v1::FaultLevel HangLevel(v1::HangAction action, bool unattributed) {
  switch (action) {
    case v1::HANG_ACTION_NOTIFY: return v1::FAULT_LEVEL_NOT_HANDLE;
    case v1::HANG_ACTION_RESCHEDULE:
      // No rank to blame: no chip is moved off, the processes restart.
      return unattributed ? v1::FAULT_LEVEL_RESTART_BUSINESS : v1::FAULT_LEVEL_SEPARATE;
    default: return v1::FAULT_LEVEL_RESTART_BUSINESS;
  }
}

// What the tracker's verdict asks the state to hold for one job: fault id ->
// the report that raises it.
using Wanted = std::map<std::string, v1::ReportRequest>;

v1::ReportRequest FaultAt(const v1::RankPlacement& p, std::string id, std::string code, v1::FaultLevel level,
                          std::string message) {
  v1::ReportRequest r;
  r.set_reporter(std::string(ProgressMonitor::kReporter));
  r.set_id(std::move(id));
  r.set_node(p.node());
  if (p.has_device_id()) r.set_device_id(p.device_id());
  r.set_code(std::move(code));
  r.set_level(level);
  r.set_action(v1::TRANSITION_ACTION_RAISE);
  r.set_message(std::move(message));
  return r;
}

v1::ReportRequest ClearOf(const v1::ReportRequest& raised) {
  v1::ReportRequest r = raised;
  r.set_action(v1::TRANSITION_ACTION_CLEAR);
  r.clear_message();
  return r;
}

// The job's id part of one of our fault ids ("<job>/hang/<rank>",
// "<job>/slow/<rank>"); "" for another (SLOW_NODE's "node/...").
std::string JobOfFault(const std::string& id) {
  for (std::string_view kind : {"/hang/", "/slow/"}) {
    if (const size_t at = id.rfind(kind); at != std::string::npos && at > 0) return id.substr(0, at);
  }
  return "";
}

bool Running(const v1::Job& job) {
  return job.state() == v1::JOB_STATE_RUNNING || job.state() == v1::JOB_STATE_RECOVERING ||
         job.state() == v1::JOB_STATE_PENDING || job.state() == v1::JOB_STATE_UNSPECIFIED;
}

// Why a stalled job stalls, from the state: a recovery of it, or another
// fault that hits it at RESTART_REQUEST or worse.
progress::Context ContextOf(const StateView& view, const v1::Job& job) {
  progress::Context ctx;
  for (const v1::Recovery* r : view.RecoveriesOfJob(job.id())) {
    if (r->state() != v1::RECOVERY_STATE_RUNNING && r->state() != v1::RECOVERY_STATE_WAITING) continue;
    ctx.recovering = true;
    for (const auto& id : r->trigger_fault_ids()) {
      const v1::Fault* f = view.FindFault(id);
      if (f != nullptr && f->reporter() != ProgressMonitor::kReporter) {
        ctx.cause = f->code();
        break;
      }
    }
  }
  if (ctx.recovering) return ctx;
  std::map<std::string, std::set<uint32_t>> nodes;  // node -> devices the job uses
  for (const auto& p : job.placement()) {
    auto& d = nodes[p.node()];
    if (p.has_device_id()) d.insert(p.device_id());
  }
  for (const v1::Fault* f : view.FaultsOnNodes(nodes)) {
    if (f->state() != v1::FAULT_STATE_ACTIVE || f->reporter() == ProgressMonitor::kReporter) continue;
    if (f->level() < v1::FAULT_LEVEL_RESTART_REQUEST) continue;
    if (f->has_device_id() && !nodes.at(f->node()).contains(f->device_id())) continue;
    ctx.faulted = true;
    ctx.cause = f->code();
    break;
  }
  return ctx;
}

}  // namespace

ProgressMonitor::ProgressMonitor(ClusterState* state, Engine::SubmitFn submit, const Clock* clock,
                                 ProgressOptions options, MetricsRegistry* metrics)
    : state_(state), submit_(std::move(submit)), clock_(clock), options_(options) {
  reports_ = &metrics->AddCounter("clusterd_progress_reports_total", "Progress reports taken from job agents.");
  const char* refused = "Progress reports refused, by reason.";
  refused_invalid_ = &metrics->AddCounter("clusterd_progress_refused_total", refused, {{"reason", "invalid"}});
  refused_rate_ = &metrics->AddCounter("clusterd_progress_refused_total", refused, {{"reason", "rate"}});
  refused_jobs_ = &metrics->AddCounter("clusterd_progress_refused_total", refused, {{"reason", "max_jobs"}});
  hangs_ = &metrics->AddCounter("clusterd_progress_hangs_total", "Job hangs detected (JOB_HANG raised).");
  slow_found_ =
      &metrics->AddCounter("clusterd_progress_slow_ranks_found_total", "Ranks found slow (SLOW_RANK raised).");
  for (size_t i = 0; i < std::size(jobs_gauge_); ++i) jobs_gauge_[i] = nullptr;
  for (int s : {v1::PROGRESS_STATE_ADVANCING, v1::PROGRESS_STATE_STALLED, v1::PROGRESS_STATE_HUNG,
                v1::PROGRESS_STATE_CHECKPOINTING}) {
    jobs_gauge_[s] = &metrics->AddGauge("clusterd_progress_jobs", "Jobs reporting progress, by progress state.",
                                        {{"state", std::string(kStateNames[s])}});
  }
  ranks_gauge_ = &metrics->AddGauge("clusterd_progress_ranks", "Ranks whose progress is tracked.");
  slow_gauge_ = &metrics->AddGauge("clusterd_progress_slow_ranks", "Ranks named slow now.");
  ettr_gauge_ = &metrics->AddGauge(
      "clusterd_progress_ettr_ratio",
      "Effective training time of the tracked jobs together: productive / (productive + lost) time.");
  lost_seconds_ = &metrics->AddGauge("clusterd_progress_lost_seconds",
                                     "Time the tracked jobs lost to interruptions, summed (seconds).");
  // One series per tracked job, listed at the scrape: a job's series go when
  // the monitor stops tracking it.
  auto per_job = [this](double Exported::*field) {
    return [this, field](const MetricsRegistry::EmitSeries& emit) {
      std::lock_guard lock(exported_mu_);
      for (const auto& e : exported_) emit({e.job}, e.*field);
    };
  };
  metrics->AddGaugeFamily("clusterd_job_ettr_ratio",
                          "A tracked job's effective training time: productive / (productive + lost) time.", {"job"},
                          per_job(&Exported::ettr));
  metrics->AddGaugeFamily("clusterd_job_lost_seconds",
                          "Time a tracked job lost to interruptions (hangs, recoveries), seconds.", {"job"},
                          per_job(&Exported::lost_seconds));
  metrics->AddGaugeFamily("clusterd_job_step", "The step every rank of a tracked job has reached.", {"job"},
                          per_job(&Exported::step));
  metrics->AddGaugeFamily("clusterd_job_slow_ranks", "Ranks of a tracked job named slow now.", {"job"},
                          per_job(&Exported::slow_ranks));
  metrics->AddGaugeFamily("clusterd_job_progress_state",
                          "1 for a tracked job's progress state (advancing, stalled, hung, checkpointing).",
                          {"job", "state"}, [this](const MetricsRegistry::EmitSeries& emit) {
                            std::lock_guard lock(exported_mu_);
                            for (const auto& e : exported_) {
                              const std::string_view name = kStateNames[std::min<int>(e.state, 5)];
                              if (!name.empty()) emit({e.job, std::string(name)}, 1);
                            }
                          });
}

ProgressMonitor::~ProgressMonitor() { Stop(); }

Status ProgressMonitor::Report(const v1::Job& job, const v1::ProgressReport& report, const ProgressSender& sender) {
  const TimePoint now = clock_->Now();
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job.id());
  if (it == jobs_.end()) {
    if (jobs_.size() >= options_.max_jobs) {
      refused_jobs_->Inc();
      return ResourceExhausted("progress: " + std::to_string(jobs_.size()) + " jobs are tracked already (at most " +
                               std::to_string(options_.max_jobs) + ")");
    }
    it = jobs_.emplace(job.id(), Tracked{}).first;
    it->second.job_revision = 0;
  }
  Tracked& t = it->second;
  if (t.job_revision != job.revision() || t.ranks.empty()) {
    t.ranks.clear();
    for (const auto& p : job.placement()) t.ranks.insert(p.rank());
    t.tracker.set_settings(progress::SettingsOf(job.policy().progress()));
    t.job_revision = job.revision();
  }
  Status st = Running(job) ? progress::ValidateReport(report, [&](uint32_t r) { return t.ranks.contains(r); })
                           : InvalidArgument("progress: job " + job.id() + " is not running");
  if (!st.ok()) {
    refused_invalid_->Inc();
    if (!t.tracker.reported() && t.raised.empty()) jobs_.erase(it);  // nothing of it kept
    return st;
  }
  // Each sender spends its own budget: a node flooding its stream is
  // refused, another node's reports of the same job are not.
  auto bt = t.budgets.find(sender.id);
  if (bt == t.budgets.end()) {
    if (t.budgets.size() >= 64) {
      std::erase_if(t.budgets, [&](const auto& b) { return now - b.second.window >= std::chrono::seconds(1); });
    }
    bt = t.budgets.emplace(sender.id, Tracked::Budget{}).first;
  }
  Tracked::Budget& budget = bt->second;
  if (now - budget.window >= std::chrono::seconds(1)) {
    budget.window = now;
    budget.used = 0;
  }
  const size_t allowed = std::max(2 * sender.ranks, options_.min_rank_rate);
  if (budget.used + static_cast<size_t>(report.ranks_size()) > allowed) {
    refused_rate_->Inc();
    return ResourceExhausted("progress: " + sender.id + " reported more than " + std::to_string(allowed) +
                             " rank entries this second for job " + job.id() +
                             "; report each rank at most once per interval");
  }
  budget.used += static_cast<size_t>(report.ranks_size());
  t.tracker.Ingest(report, now, sender.id);
  reports_->Inc();
  return Status::Ok();
}

Status ProgressMonitor::ReportFromNode(const std::string& node, const v1::JobProgressReport& report) {
  if (Status st = ValidateNodeName("progress.job_id", report.job_id()); !st.ok()) return st;
  return state_->Read([&](const StateView& view) -> Status {
    auto it = view.jobs().find(report.job_id());
    if (it == view.jobs().end()) return NotFound("progress: job " + report.job_id() + " does not exist");
    std::set<uint32_t> here;
    for (const auto& placed : it->second.placement()) {
      if (placed.node() == node) here.insert(placed.rank());
    }
    for (const auto& r : report.report().ranks()) {
      if (!here.contains(r.rank())) {
        return InvalidArgument("progress: rank " + std::to_string(r.rank()) + " of job " + report.job_id() +
                               " is not placed on node " + node);
      }
    }
    // Its own budget, and its word moves its own ranks only
    // (ProgressSender): a node cannot spend another's.
    return Report(it->second, report.report(), ProgressSender{"node/" + node, here.size()});
  });
}

Status ProgressMonitor::ReportFromJobAgent(const std::string& job_id, const v1::ProgressReport& report) {
  return state_->Read([&](const StateView& view) -> Status {
    auto it = view.jobs().find(job_id);
    if (it == view.jobs().end()) return NotFound("progress: job " + job_id + " does not exist");
    // The job's own agent speaks for every rank.
    return Report(it->second, report, ProgressSender{"job-agent", static_cast<size_t>(it->second.placement_size())});
  });
}

std::optional<v1::JobProgress> ProgressMonitor::Live(const std::string& job_id) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second.tracker.reported()) return std::nullopt;
  v1::JobProgress p = it->second.tracker.Snapshot(clock_->Now());
  return p;
}

ProgressMonitor::Found ProgressMonitor::FindOurs(const StateView& view) {
  Found out;
  for (const auto& [key, f] : view.faults()) {
    if (f.reporter() != kReporter || f.state() != v1::FAULT_STATE_ACTIVE) continue;
    v1::ReportRequest& r = out.faults.emplace_back();
    r.set_reporter(f.reporter());
    r.set_id(f.external_id());
    r.set_node(f.node());
    if (f.has_device_id()) r.set_device_id(f.device_id());
    r.set_code(f.code());
  }
  for (const auto& [id, job] : view.jobs()) {
    if (job.has_progress() && job.progress().has_since())
      out.stored.emplace_back(id, job.policy().progress(), job.progress());
  }
  return out;
}

void ProgressMonitor::Adopt(Found found, TimePoint now) {
  for (auto& r : found.faults) {
    const std::string job = JobOfFault(r.id());
    std::string id = r.id();
    if (job.empty()) {
      slow_nodes_.emplace(std::move(id), std::move(r));
    } else {
      jobs_[job].raised.emplace(std::move(id), std::move(r));
    }
  }
  for (const auto& [id, policy, progress] : found.stored) {
    Tracked& t = jobs_[id];
    if (t.tracker.reported()) continue;
    t.tracker.set_settings(progress::SettingsOf(policy));
    t.tracker.Restore(progress, now);
    t.stored_state = progress.state();
    t.stored_at = now;
  }
}

struct ProgressMonitor::Writes {
  std::vector<v1::ReportRequest> reports;
  std::vector<std::pair<std::string, v1::JobProgress>> snapshots;
  std::vector<std::string> reasons;
};

TimePoint ProgressMonitor::RunOnce() {
  const TimePoint now = clock_->Now();
  Writes w;
  // The state's view of the tracked jobs, read under the shared lock; the
  // trackers are evaluated under the monitor's own mutex.
  struct JobInfo {
    bool exists = false;
    bool running = false;
    progress::Context ctx;
  };
  if (!adopted_.load()) {
    // The state first (never under the monitor's mutex: readers of the
    // state take it inside the state's lock).
    Found found = state_->Read([](const StateView& view) { return FindOurs(view); });
    std::lock_guard lock(mu_);
    Adopt(std::move(found), now);
    adopted_ = true;
  }
  // 1. Which jobs stalled (only those need their context from the state).
  std::unique_lock lock(mu_);
  std::vector<std::string> ids;
  std::set<std::string> stalled;
  for (auto& [id, t] : jobs_) {
    ids.push_back(id);
    if (t.tracker.Stalled(now)) stalled.insert(id);
  }
  lock.unlock();
  std::map<std::string, JobInfo> info = state_->Read([&](const StateView& view) {
    std::map<std::string, JobInfo> out;
    for (const auto& id : ids) {
      JobInfo& i = out[id];
      auto jt = view.jobs().find(id);
      if (jt == view.jobs().end()) continue;
      i.exists = true;
      i.running = Running(jt->second);
      if (stalled.contains(id)) i.ctx = ContextOf(view, jt->second);
    }
    return out;
  });
  // 2. The verdicts, and the ranks they name (whose placement the faults need).
  std::map<std::string, progress::Verdict> verdicts;
  std::map<std::string, std::set<uint32_t>> named;
  lock.lock();
  for (auto& [id, t] : jobs_) {
    auto in = info.find(id);
    if (in == info.end() || !in->second.exists || !in->second.running || !t.tracker.reported()) continue;
    progress::Verdict& v = verdicts[id] = t.tracker.Evaluate(now, in->second.ctx);
    for (size_t i = 0; i < v.hung_ranks.size() && i < kMaxHangFaults; ++i) named[id].insert(v.hung_ranks[i]);
    for (const auto& sr : v.slow_ranks) named[id].insert(sr.rank);
  }
  lock.unlock();
  using Placements = std::map<std::string, std::map<uint32_t, v1::RankPlacement>>;
  Placements placements = state_->Read([&](const StateView& view) {
    Placements out;
    for (const auto& [id, ranks] : named) {
      auto jt = view.jobs().find(id);
      if (jt == view.jobs().end()) continue;
      for (const auto& p : jt->second.placement()) {
        if (ranks.contains(p.rank())) out[id].emplace(p.rank(), p);
      }
    }
    return out;
  });
  // 3. The faults and snapshots they ask for.
  lock.lock();
  std::map<std::string, std::set<std::string>> slow_jobs_by_node;
  std::map<std::string, v1::RankPlacement> slow_node_place;
  size_t ranks = 0, slow = 0;
  size_t by_state[6] = {};
  std::vector<Exported> exported;
  Duration productive{0}, lost{0};
  const std::map<uint32_t, v1::RankPlacement> none;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const std::string& id = it->first;
    Tracked& t = it->second;
    auto in = info.find(id);
    if (in == info.end()) {  // reported since the read: next pass
      ++it;
      continue;
    }
    const bool gone = !in->second.exists;
    Wanted wanted;
    if (auto vt = verdicts.find(id); vt != verdicts.end()) {
      const progress::Verdict& v = vt->second;
      auto pt = placements.find(id);
      const auto& placed = pt == placements.end() ? none : pt->second;
      if (v.state == v1::PROGRESS_STATE_HUNG) {
        const v1::FaultLevel level = HangLevel(t.tracker.settings().hang_action, v.hang_unattributed);
        const v1::JobProgress snap = t.tracker.Snapshot(now);
        for (uint32_t r : v.hung_ranks) {
          if (wanted.size() >= kMaxHangFaults) break;
          auto p = placed.find(r);
          if (p == placed.end()) continue;
          std::string why = v.hang_unattributed ? "job " + id + ": no rank advanced past step " +
                                                      std::to_string(snap.step()) + " (every rank stopped there)"
                                                : "job " + id + ": rank " + std::to_string(r) + " stopped first";
          why +=
              " for more than the hang timeout " + Seconds(TimeUtil::DurationToNanoseconds(snap.hang_timeout()) / 1e9);
          wanted.emplace(id + "/hang/" + std::to_string(r),
                         FaultAt(p->second, id + "/hang/" + std::to_string(r), "JOB_HANG", level, why));
          if (v.hang_unattributed) break;  // one fault names the job
        }
      }
      for (const auto& sr : v.slow_ranks) {
        auto p = placed.find(sr.rank);
        if (p == placed.end()) continue;
        ++slow;
        slow_jobs_by_node[p->second.node()].insert(id);
        slow_node_place.emplace(p->second.node(), p->second);
        if (wanted.size() >= kMaxHangFaults + progress::kMaxNamedRanks) continue;
        const std::string fid = id + "/slow/" + std::to_string(sr.rank);
        wanted.emplace(
            fid, FaultAt(p->second, fid, "SLOW_RANK", v1::FAULT_LEVEL_SUB_HEALTH,
                         "job " + id + ": rank " + std::to_string(sr.rank) + " takes " + Seconds(sr.step_time) +
                             " per step, the job's median is " + Seconds(sr.job_median) + " (median of the last " +
                             std::to_string(sr.window) + " reports, less collective waits)"));
      }
    }
    // Raise what is wanted and not raised; clear what is raised and not wanted.
    for (const auto& [fid, r] : wanted) {
      if (t.raised.contains(fid)) continue;
      if (r.code() == "JOB_HANG") hangs_->Inc();
      if (r.code() == "SLOW_RANK") slow_found_->Inc();
      w.reports.push_back(r);
      t.raised.emplace(fid, r);
    }
    for (auto r = t.raised.begin(); r != t.raised.end();) {
      if (wanted.contains(r->first)) {
        ++r;
        continue;
      }
      w.reports.push_back(ClearOf(r->second));
      r = t.raised.erase(r);
    }
    if (gone || !t.tracker.reported()) {
      if (t.raised.empty()) {
        it = jobs_.erase(it);
        continue;
      }
      ++it;
      continue;
    }
    // The snapshot: on a change of state or of the named ranks, and at most
    // every snapshot_interval otherwise.
    v1::JobProgress snap = t.tracker.Snapshot(now);
    std::string named;
    for (uint32_t r : snap.hung_ranks()) named += "h" + std::to_string(r);
    for (const auto& s : snap.slow_ranks()) named += "s" + std::to_string(s.rank());
    const bool changed = snap.state() != t.stored_state || named != t.stored_named;
    if (changed || now - t.stored_at >= options_.snapshot_interval) {
      std::string reason = "progress: " + std::string(kStateNames[std::min<int>(snap.state(), 5)]);
      if (snap.hung_ranks_size() > 0) reason += ", hung";
      if (snap.slow_ranks_size() > 0) reason += ", " + std::to_string(snap.slow_ranks_size()) + " slow rank(s)";
      t.stored_state = snap.state();
      t.stored_named = named;
      t.stored_at = now;
      w.snapshots.emplace_back(id, snap);
      w.reasons.push_back(std::move(reason));
    }
    ranks += t.tracker.rank_count();
    if (snap.state() > 0 && snap.state() < 6) ++by_state[snap.state()];
    exported.push_back(
        Exported{id, snap.state(), snap.ettr(),
                 std::chrono::duration<double>(Duration(TimeUtil::DurationToNanoseconds(snap.lost()))).count(),
                 static_cast<double>(snap.step()), static_cast<double>(snap.slow_ranks_size())});
    productive += Duration(TimeUtil::DurationToNanoseconds(snap.productive()));
    lost += Duration(TimeUtil::DurationToNanoseconds(snap.lost()));
    ++it;
  }
  // SLOW_NODE: ranks of two or more jobs are slow on one node.
  std::set<std::string> slow_nodes;
  for (const auto& [node, jobs] : slow_jobs_by_node) {
    if (jobs.size() >= 2) slow_nodes.insert(node);
  }
  for (const auto& node : slow_nodes) {
    const std::string fid = "node/" + node + "/slow";
    if (slow_nodes_.contains(fid)) continue;
    v1::RankPlacement at = slow_node_place.at(node);
    at.clear_device_id();
    std::string jobs;
    for (const auto& j : slow_jobs_by_node.at(node)) jobs += (jobs.empty() ? "" : ", ") + j;
    v1::ReportRequest r = FaultAt(at, fid, "SLOW_NODE", v1::FAULT_LEVEL_SUB_HEALTH,
                                  "ranks of " + std::to_string(slow_jobs_by_node.at(node).size()) +
                                      " jobs are slow on this node: " + jobs.substr(0, 512));
    w.reports.push_back(r);
    slow_nodes_.emplace(fid, std::move(r));
  }
  for (auto n = slow_nodes_.begin(); n != slow_nodes_.end();) {
    if (slow_nodes.contains(n->second.node())) {
      ++n;
      continue;
    }
    w.reports.push_back(ClearOf(n->second));
    n = slow_nodes_.erase(n);
  }
  for (int s = 1; s < 5; ++s) {
    if (jobs_gauge_[s] != nullptr) jobs_gauge_[s]->Set(static_cast<double>(by_state[s]));
  }
  {
    std::lock_guard export_lock(exported_mu_);
    exported_.swap(exported);
  }
  ranks_gauge_->Set(static_cast<double>(ranks));
  slow_gauge_->Set(static_cast<double>(slow));
  const Duration total = productive + lost;
  ettr_gauge_->Set(total > Duration(0) ? std::chrono::duration<double>(productive) / total : 1.0);
  lost_seconds_->Set(std::chrono::duration<double>(lost).count());
  TimePoint next = now + options_.interval;
  for (const auto& [id, t] : jobs_) {
    // Only a due time still ahead: one passed already was looked at (a job
    // stalled by a recovery is not hung, and must not make this spin).
    if (auto due = t.tracker.HangDue(); due && *due > now && *due < next) next = *due;
  }
  lock.unlock();

  if (w.reports.empty() && w.snapshots.empty()) return next;
  submit_([w = std::move(w)](ClusterState& s, Mutation* m) -> Engine::Done {
    for (const auto& r : w.reports) {
      if (auto st = s.ApplyReport(r, m); !st.ok()) {
        GetLogger("progress")->warn("fault {} of reporter progress: {}", r.id(), st.status().ToString());
      }
    }
    for (size_t i = 0; i < w.snapshots.size(); ++i) {
      // A job deleted since is simply gone.
      (void)s.SetJobProgress(w.snapshots[i].first, w.snapshots[i].second, w.reasons[i], m);
    }
    return nullptr;
  });
  return next;
}

void ProgressMonitor::Start() {
  own_executor_ = std::make_unique<ThreadExecutor>(clock_, "progress");
  Start(own_executor_.get());
}

void ProgressMonitor::Start(Executor* executor) {
  passes_ = executor->Repeat(clock_->Now(), [this] { return RunOnce(); });
}

void ProgressMonitor::Stop() {
  passes_.Cancel();
  if (own_executor_) own_executor_->Stop();
}

}  // namespace clusterd
