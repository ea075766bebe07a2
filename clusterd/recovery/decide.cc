#include "clusterd/recovery/decide.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <optional>
#include <span>
#include <sstream>

#include "common/levels.h"

namespace clusterd::recovery {
namespace {

using v1::FAULT_LEVEL_FREE_RESTART_NPU;
using v1::FAULT_LEVEL_PRE_SEPARATE;
using v1::FAULT_LEVEL_RESTART_NPU;
using v1::FAULT_LEVEL_SEPARATE;
using v1::FAULT_LEVEL_UNSPECIFIED;

std::string FormatTime(TimePoint t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms % 1000));
  return out;
}

std::string FormatDuration(Duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  std::ostringstream out;
  if (ms % 1000 == 0) {
    out << ms / 1000 << "s";
  } else {
    out << static_cast<double>(ms) / 1000.0 << "s";
  }
  return out.str();
}

std::string Join(const std::vector<int>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

std::string Lvl(FaultLevel level) { return ShortLevelName(level); }
std::string Name(Strategy s) { return std::string(StrategyName(s)); }
std::string Kind(JobKind k) { return k == JobKind::kTraining ? "training" : "inference"; }

const SilenceWindow* FindSilence(const JobPolicy& policy, const std::string& code, TimePoint now) {
  for (const SilenceWindow& w : policy.silences) {
    if (w.OpenAt(now) && CodeMatches(w.code, code)) return &w;
  }
  return nullptr;
}

bool MovesRanks(Strategy s) { return s == Strategy::kPodReschedule || s == Strategy::kJobReschedule; }

struct Candidate {
  const FaultView* fault;
  std::span<const int> ranks;  // into the job's index
};

// The job, indexed: itself when it is (FromProto's jobs are), else an
// indexed copy in *scratch (a job built by hand).
const Job& Indexed(const Job& job, std::optional<Job>* scratch) {
  if (job.indexed()) return job;
  scratch->emplace(job);
  (*scratch)->Index();
  return **scratch;
}

// Isolation and chip resets implied by the triggers of a decision.
void ComputeActions(const std::vector<Candidate>& triggers, Strategy strategy, bool isolate_nodes, Decision* d) {
  d->isolate_nodes.clear();
  d->isolate_devices.clear();
  d->reset_devices.clear();
  if (strategy == Strategy::kFail) return;
  const bool isolates = MovesRanks(strategy) || strategy == Strategy::kScaleIn;
  std::set<std::string> nodes;
  std::set<DeviceRef> devices, resets;
  for (const Candidate& c : triggers) {
    const FaultView& f = *c.fault;
    const bool wants_isolation = f.level == FAULT_LEVEL_SEPARATE || f.level == FAULT_LEVEL_PRE_SEPARATE;
    if (isolates && wants_isolation) {
      if (!f.device) {
        if (isolate_nodes) nodes.insert(f.node);
      } else {
        devices.insert(DeviceRef{f.node, *f.device});
      }
    }
    if (f.device && (f.level == FAULT_LEVEL_RESTART_NPU || f.level == FAULT_LEVEL_FREE_RESTART_NPU)) {
      resets.insert(DeviceRef{f.node, *f.device});
    }
  }
  d->isolate_nodes.assign(nodes.begin(), nodes.end());
  for (const DeviceRef& dev : devices) {
    if (!nodes.contains(dev.node)) d->isolate_devices.push_back(dev);
  }
  for (const DeviceRef& dev : resets) {
    if (!nodes.contains(dev.node) && !devices.contains(dev)) d->reset_devices.push_back(dev);
  }
}

void Fail(Decision* d, Gate gate, std::string reason) {
  d->action = Action::kRecover;
  d->strategy = Strategy::kFail;
  d->gate = gate;
  d->isolate_nodes.clear();
  d->isolate_devices.clear();
  d->reset_devices.clear();
  d->graceful = false;
  d->reasons.push_back(std::move(reason));
}

void Wait(Decision* d, Gate gate, std::string reason, std::optional<TimePoint> until = std::nullopt) {
  d->action = Action::kWait;
  d->gate = gate;
  d->wait_until = until;
  d->reasons.push_back(std::move(reason));
}

}  // namespace

std::vector<int> RanksHit(const Job& job, const FaultView& fault) {
  std::optional<Job> scratch;
  const std::span<const int> ranks = Indexed(job, &scratch).Hits(fault.node, fault.device);
  return {ranks.begin(), ranks.end()};
}

std::vector<FaultImpact> MapImpact(const Job& job, const std::vector<FaultView>& faults) {
  std::optional<Job> scratch;
  const Job& indexed = Indexed(job, &scratch);
  std::vector<FaultImpact> out;
  for (const FaultView& f : faults) {
    if (!f.active) continue;
    const std::span<const int> ranks = indexed.Hits(f.node, f.device);
    if (!ranks.empty()) out.push_back(FaultImpact{f.id, {ranks.begin(), ranks.end()}});
  }
  return out;
}

std::optional<Strategy> StartingStrategy(FaultLevel level, JobKind kind) {
  switch (level) {
    case v1::FAULT_LEVEL_PRE_SEPARATE:
      // Training: a multi-week run is not interrupted for a warning; the device
      // is drained when the job next moves. Inference: replicas are
      // independent, so moving one early (gracefully) is cheap.
      if (kind == JobKind::kInference) return Strategy::kPodReschedule;
      return std::nullopt;
    case v1::FAULT_LEVEL_RESTART_REQUEST:
      // Inference has no steps; its request retry happens inside the server.
      return kind == JobKind::kTraining ? Strategy::kStepRetry : Strategy::kProcessRestart;
    case v1::FAULT_LEVEL_RESTART_BUSINESS:
    case v1::FAULT_LEVEL_FREE_RESTART_NPU:
    case v1::FAULT_LEVEL_RESTART_NPU: return Strategy::kProcessRestart;
    case v1::FAULT_LEVEL_SEPARATE: return Strategy::kPodReschedule;
    default:  // UNSPECIFIED, NOT_HANDLE, SUB_HEALTH
      return std::nullopt;
  }
}

Strategy FirstAllowed(Strategy from, const JobPolicy& policy, JobKind kind) {
  for (Strategy s : kLadder) {
    if (s < from) continue;
    if (s == Strategy::kStepRetry && kind == JobKind::kInference) continue;
    if (policy.Allows(s)) return s;
  }
  return Strategy::kFail;
}

Strategy Escalate(Strategy current, const JobPolicy& policy, JobKind kind) {
  if (current == Strategy::kFail) return Strategy::kFail;
  return FirstAllowed(static_cast<Strategy>(static_cast<int>(current) + 1), policy, kind);
}

void ActionsFor(const Job& job, const std::vector<FaultView>& triggers, Strategy strategy, Decision* d) {
  std::optional<Job> scratch;
  const Job& indexed = Indexed(job, &scratch);
  std::vector<Candidate> candidates;
  for (const FaultView& f : triggers) {
    const std::span<const int> ranks = indexed.Hits(f.node, f.device);
    if (!ranks.empty()) candidates.push_back(Candidate{&f, ranks});
  }
  ComputeActions(candidates, strategy, /*isolate_nodes=*/strategy != Strategy::kScaleIn, d);
}

Decision Decide(const Job& job, const std::vector<FaultView>& faults, const ClusterView& cluster, const Limits& limits,
                const History& history, TimePoint now) {
  Decision d;
  d.dry_run = cluster.dry_run;
  const JobPolicy& policy = job.policy;
  auto reason = [&d](std::string r) { d.reasons.push_back(std::move(r)); };

  if (job.status != JobStatus::kRunning && job.status != JobStatus::kRecovering) {
    d.gate = Gate::kJobNotRunning;
    reason("job is " + std::string(JobStatusName(job.status)) + ": no recovery");
    return d;
  }

  // 1. Which faults hit the job, and which of those may act.
  std::vector<Candidate> actionable, deferred;
  bool any_hit = false;
  // Candidates point into the index, so `scratch` lives as long as they do.
  std::optional<Job> scratch;
  const Job& indexed = Indexed(job, &scratch);
  for (const FaultView& f : faults) {
    const std::span<const int> ranks = indexed.Hits(f.node, f.device);
    if (ranks.empty()) continue;
    if (!f.active) {
      if (f.cleared_at && *f.cleared_at - f.first_seen < policy.hold_down) {
        reason("fault " + f.id + " flapped: cleared " + FormatDuration(*f.cleared_at - f.first_seen) +
               " after it was raised, within the " + FormatDuration(policy.hold_down) + " hold-down; ignored");
      }
      continue;
    }
    any_hit = true;
    if (cluster.cordoned_nodes.contains(f.node)) {
      reason("fault " + f.id + " ignored: node " + f.node + " is cordoned or in maintenance");
      continue;
    }
    if (const SilenceWindow* w = FindSilence(policy, f.code, now)) {
      reason("fault " + f.id + " silenced: code " + f.code + " matches '" + w->code + "'" +
             (w->until ? " until " + FormatTime(*w->until) : std::string(" (no end)")));
      continue;
    }
    std::optional<Strategy> start = StartingStrategy(f.level, job.kind);
    if (f.level == FAULT_LEVEL_PRE_SEPARATE && (!start || !policy.Allows(*start))) {
      reason("fault " + f.id + " (PRE_SEPARATE) recorded: " +
             (start ? std::string("the policy does not allow a proactive POD_RESCHEDULE; ") : std::string()) +
             "its ranks are drained at the job's next reschedule");
      deferred.push_back(Candidate{&f, ranks});
      continue;
    }
    if (!start) {
      reason("fault " + f.id + " (" + Lvl(f.level) + ") recorded only: this level starts no recovery");
      continue;
    }
    actionable.push_back(Candidate{&f, ranks});
  }
  if (!any_hit) reason("no active fault hits the job");
  if (actionable.empty()) return d;

  // 2. One group per job: every actionable fault is a trigger.
  std::sort(actionable.begin(), actionable.end(), [](const Candidate& a, const Candidate& b) {
    return a.fault->first_seen != b.fault->first_seen ? a.fault->first_seen < b.fault->first_seen
                                                      : a.fault->id < b.fault->id;
  });
  auto fill_group = [&](const std::vector<Candidate>& group) {
    std::set<int> ranks, replicas;
    d.trigger_fault_ids.clear();
    d.level = FAULT_LEVEL_UNSPECIFIED;
    for (const Candidate& c : group) {
      d.trigger_fault_ids.push_back(c.fault->id);
      d.level = std::max(d.level, c.fault->level);
      for (int r : c.ranks) {
        ranks.insert(r);
        replicas.insert(job.ReplicaOf(r));
      }
    }
    d.hit_ranks.assign(ranks.begin(), ranks.end());
    d.hit_replicas.assign(replicas.begin(), replicas.end());
  };
  fill_group(actionable);

  // 3. Flap suppression: only faults active for the whole hold-down may act;
  //    a younger fault that is worse than every settled one is waited for, so
  //    that one recovery covers both.
  auto settled = [&](const Candidate& c) { return now - c.fault->first_seen >= policy.hold_down; };
  FaultLevel settled_worst = FAULT_LEVEL_UNSPECIFIED;
  for (const Candidate& c : actionable) {
    if (settled(c)) settled_worst = std::max(settled_worst, c.fault->level);
  }
  std::optional<TimePoint> settle_at;
  const Candidate* waited_for = nullptr;
  for (const Candidate& c : actionable) {
    if (!settled(c) && c.fault->level > settled_worst) {
      TimePoint at = c.fault->first_seen + policy.hold_down;
      if (!settle_at || at < *settle_at) {
        settle_at = at;
        waited_for = &c;
      }
    }
  }
  if (settled_worst == FAULT_LEVEL_UNSPECIFIED) {
    Wait(&d, Gate::kHoldDown,
         "hold-down: " + std::to_string(actionable.size()) + " fault(s) active for less than " +
             FormatDuration(policy.hold_down) + "; the first may start a recovery at " + FormatTime(*settle_at),
         settle_at);
    return d;
  }
  if (waited_for) {
    Wait(&d, Gate::kHoldDown,
         "hold-down: fault " + waited_for->fault->id + " (" + Lvl(waited_for->fault->level) +
             ") is worse than the settled faults and still in its " + FormatDuration(policy.hold_down) +
             " hold-down; deciding at " + FormatTime(*settle_at) + " so that one recovery covers all",
         settle_at);
    return d;
  }

  // 4. Where on the ladder: the worst level, the job kind, the policy, and the
  //    rungs that already failed for this incident.
  const Candidate& worst = *std::max_element(actionable.begin(), actionable.end(), [](const auto& a, const auto& b) {
    return a.fault->level < b.fault->level;
  });
  const Strategy start = *StartingStrategy(d.level, job.kind);
  const bool proactive = d.level == FAULT_LEVEL_PRE_SEPARATE;
  reason(std::to_string(actionable.size()) + " fault(s) hit ranks " + Join(d.hit_ranks) + "; worst " + Lvl(d.level) +
         " (" + worst.fault->id + ") starts a " + Kind(job.kind) + " job at " + Name(start));
  Strategy strategy = FirstAllowed(start, policy, job.kind);
  if (strategy != start) {
    reason(strategy == Strategy::kFail ? "the policy allows no strategy from " + Name(start) + " on: FAIL"
                                       : "the policy does not allow " + Name(start) + ": taking " + Name(strategy));
  }
  if (proactive) {
    d.graceful = true;
    reason("proactive move: start the replacement before stopping the hit replica");
  } else if (strategy != Strategy::kFail) {
    std::vector<PastRecovery> recent = history.recent;
    std::sort(recent.begin(), recent.end(),
              [](const PastRecovery& a, const PastRecovery& b) { return a.ended > b.ended; });
    std::optional<Strategy> failed;
    const PastRecovery* last_failed = nullptr;
    for (const PastRecovery& r : recent) {
      if (now - r.ended > policy.escalation_window || r.outcome == RecoveryOutcome::kSucceeded) break;
      if (!failed || r.strategy > *failed) {
        failed = r.strategy;
        last_failed = &r;
      }
    }
    if (failed) {
      const Strategy floor = Escalate(*failed, policy, job.kind);
      if (floor > strategy) {
        reason("previous " + Name(*failed) +
               (last_failed->outcome == RecoveryOutcome::kTimedOut ? " timed out" : " failed") + " at " +
               FormatTime(last_failed->ended) + ", within the " + FormatDuration(policy.escalation_window) +
               " escalation window: escalating to " + Name(floor));
        strategy = floor;
      }
    }
  }
  if (strategy == Strategy::kScaleIn) {
    const int remaining = job.ReplicaCount() - static_cast<int>(d.hit_replicas.size());
    if (remaining < policy.min_replicas) {
      reason("SCALE_IN would leave " + std::to_string(remaining) + " replica(s); the policy needs at least " +
             std::to_string(policy.min_replicas) + ": FAIL");
      strategy = Strategy::kFail;
    }
  }

  // 5. A reschedule is the scheduling point at which PRE_SEPARATE devices the
  //    job uses are drained: they join the group.
  std::vector<Candidate> triggers = actionable;
  if (MovesRanks(strategy) && !deferred.empty()) {
    for (const Candidate& c : deferred) {
      reason("fault " + c.fault->id + " (PRE_SEPARATE) joins the " + Name(strategy) + ": its ranks move now");
      triggers.push_back(c);
    }
    fill_group(triggers);
  }
  d.action = Action::kRecover;
  d.strategy = strategy;
  // SCALE_IN leaves the hit nodes: the job needs none of them isolated.
  ComputeActions(triggers, strategy, /*isolate_nodes=*/strategy != Strategy::kScaleIn, &d);
  if (strategy == Strategy::kFail) d.graceful = false;

  // 6. Safety gates, in order. Nothing automatic happens, not even FAIL, while
  //    the job is already recovering or recovery is paused.
  if (job.status == JobStatus::kRecovering) {
    Wait(&d, Gate::kRecoveryRunning,
         "a recovery of this job is already running: the coordinator folds these faults into it");
    return d;
  }
  if (cluster.paused) {
    Wait(&d, Gate::kPaused, "paused: automatic recovery is paused cluster-wide (would " + Name(strategy) + ")");
    return d;
  }
  if (strategy == Strategy::kFail) return d;
  if (policy.max_retries_per_job && history.job_retries_used >= *policy.max_retries_per_job) {
    Fail(&d, Gate::kJobBudget,
         "job retry budget exhausted: " + std::to_string(history.job_retries_used) + " of " +
             std::to_string(*policy.max_retries_per_job) + " used: FAIL");
    return d;
  }
  if (policy.max_retries_per_node) {
    std::set<std::string> nodes;
    for (const Candidate& c : triggers) nodes.insert(c.fault->node);
    for (const std::string& node : nodes) {
      auto it = history.node_retries_used.find(node);
      const int used = it == history.node_retries_used.end() ? 0 : it->second;
      if (used >= *policy.max_retries_per_node) {
        Fail(&d, Gate::kNodeBudget,
             "node retry budget exhausted on " + node + ": " + std::to_string(used) + " of " +
                 std::to_string(*policy.max_retries_per_node) + " used: FAIL");
        return d;
      }
    }
  }
  if (cluster.recoveries_running >= limits.max_concurrent_recoveries) {
    Wait(&d, Gate::kMaxConcurrent,
         "blast radius: " + std::to_string(cluster.recoveries_running) + " recoveries already running, the limit is " +
             std::to_string(limits.max_concurrent_recoveries) + " (max_concurrent_recoveries)");
    return d;
  }
  std::vector<std::string> new_nodes;
  for (const std::string& n : d.isolate_nodes) {
    if (!cluster.isolated_nodes.contains(n)) new_nodes.push_back(n);
  }
  if (!new_nodes.empty()) {
    const int after = static_cast<int>(cluster.isolated_nodes.size() + new_nodes.size());
    const int total = std::max(cluster.total_nodes, after);
    const int allowed =
        limits.max_isolated_node_percent == 0 ? 0 : std::max(1, total * limits.max_isolated_node_percent / 100);
    if (after > allowed) {
      const std::string why = "blast radius: isolating " + std::to_string(new_nodes.size()) +
                              " more node(s) would make " + std::to_string(after) + " of " + std::to_string(total) +
                              " nodes isolated, over the " + std::to_string(limits.max_isolated_node_percent) +
                              "% limit (max_isolated_node_percent allows " + std::to_string(allowed) + ")";
      // SCALE_IN is no scheduling point: joined PRE_SEPARATE faults stay recorded.
      std::set<int> replicas;
      for (const Candidate& c : actionable) {
        for (int r : c.ranks) replicas.insert(job.ReplicaOf(r));
      }
      const int remaining = job.ReplicaCount() - static_cast<int>(replicas.size());
      if (!proactive && policy.Allows(Strategy::kScaleIn) && remaining >= policy.min_replicas) {
        d.strategy = strategy = Strategy::kScaleIn;
        d.gate = Gate::kMaxIsolated;
        if (triggers.size() != actionable.size()) {
          triggers = actionable;
          fill_group(triggers);
        }
        ComputeActions(triggers, strategy, /*isolate_nodes=*/false, &d);
        reason(why + ": scaling in without the hit replicas instead" +
               (deferred.empty() ? std::string() : std::string(" (PRE_SEPARATE faults stay recorded)")));
      } else {
        Wait(&d, Gate::kMaxIsolated, why);
        return d;
      }
    }
  }
  d.step_timeout = policy.TimeoutFor(strategy);
  return d;
}

}  // namespace clusterd::recovery
