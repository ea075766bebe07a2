#include "clusterd/recovery/coordinator/coordinator.h"

#include <algorithm>

#include "clusterd/recovery/convert.h"
#include "clusterd/recovery/decide.h"
#include "clusterd/recovery/plan.h"
#include "clusterd/state/incidents.h"
#include "common/levels.h"
#include "common/logging.h"
#include "common/time_proto.h"

namespace clusterd {

namespace rc = recovery;

namespace {

// The job or node a recovery changes may be gone by the time it does (a job
// deleted while its recovery ends, a node never registered): that is not an
// error here, anything else is worth a line in the log.
void WarnUnlessGone(const Status& st) {
  if (!st.ok() && st.code() != StatusCode::kNotFound) GetLogger("recovery")->warn("{}", st.ToString());
}

bool Ended(v1::RecoveryState s) {
  return s == v1::RECOVERY_STATE_SUCCEEDED || s == v1::RECOVERY_STATE_FAILED || s == v1::RECOVERY_STATE_CANCELLED ||
         s == v1::RECOVERY_STATE_DRY_RUN;
}

std::string StrategyText(v1::RecoveryStrategy s) { return std::string(rc::StrategyName(rc::FromProto(s))); }

std::string JobCommandText(v1::JobCommand c) {
  std::string name = v1::JobCommand_Name(c);
  return name.substr(std::string_view("JOB_COMMAND_").size());
}

std::string StepText(const v1::RecoveryStep& s) {
  if (s.command() != v1::JOB_COMMAND_UNSPECIFIED) return "agent " + JobCommandText(s.command());
  std::string out = "actuator " + std::string(ActionName(s.action()));
  if (!s.node().empty()) out += " " + s.node();
  if (s.has_device_id()) out += " device " + std::to_string(s.device_id());
  return out;
}

// The recovery id and step index of an idempotency key "<id>/<index>".
bool SplitKey(const std::string& key, std::string* id, uint32_t* index) {
  const size_t slash = key.rfind('/');
  if (slash == std::string::npos || slash + 1 >= key.size() || key.size() - slash > 10) return false;
  uint32_t n = 0;
  for (size_t i = slash + 1; i < key.size(); ++i) {
    if (key[i] < '0' || key[i] > '9') return false;
    n = n * 10 + static_cast<uint32_t>(key[i] - '0');
  }
  *id = key.substr(0, slash);
  *index = n;
  return true;
}

v1::Command CommandFor(const v1::Recovery& r, const v1::RecoveryStep& step) {
  v1::Command cmd;
  cmd.set_id(step.idempotency_key());
  cmd.set_recovery_id(r.id());
  cmd.set_kind(step.command());
  *cmd.mutable_ranks() = step.ranks();
  cmd.set_strategy(step.strategy());
  *cmd.mutable_deadline() = step.deadline();
  cmd.set_reason(r.reasons().empty() ? "" : r.reasons(0));
  *cmd.mutable_hit_ranks() = r.hit_ranks();
  return cmd;
}

}  // namespace

Coordinator::Coordinator(JobAgentHub* agents, Actuator* actuator, const Clock* clock, CoordinatorOptions options,
                         MetricsRegistry* metrics)
    : agents_(agents), actuator_(actuator), clock_(clock), options_(options) {
  if (!metrics) return;
  started_total_ = &metrics->AddCounter("clusterd_recoveries_started_total", "Recoveries started (not dry-run).");
  succeeded_total_ = &metrics->AddCounter("clusterd_recoveries_succeeded_total", "Recoveries that succeeded.");
  failed_total_ = &metrics->AddCounter("clusterd_recoveries_failed_total",
                                       "Recoveries that reached FAIL (the job was marked failed).");
  cancelled_total_ = &metrics->AddCounter("clusterd_recoveries_cancelled_total",
                                          "Recoveries cancelled (job deleted or finished, faults gone).");
  escalations_total_ = &metrics->AddCounter("clusterd_recovery_escalations_total",
                                            "Recovery rungs that failed or timed out and escalated.");
  steps_failed_total_ =
      &metrics->AddCounter("clusterd_recovery_steps_failed_total", "Recovery steps that failed or timed out.");
  agent_steps_skipped_total_ = &metrics->AddCounter(
      "clusterd_recovery_agent_steps_skipped_total",
      "Agent commands of recoveries skipped because the job had no agent attached after the attach grace.");
  decision_seconds_ = &metrics->AddHistogram(
      "clusterd_recovery_decision_seconds",
      "From the moment a recovery could be decided (fault active and hold-down over) to the stored decision.",
      ExponentialBuckets(0.0005, 2, 16));
  metrics->AddCallbackGauge("clusterd_recoveries_running", "Recoveries running now.",
                            [this] { return static_cast<double>(running()); });
  metrics->AddCallbackGauge("clusterd_recoveries_waiting", "Recoveries held back by a safety gate now.",
                            [this] { return static_cast<double>(waiting()); });
}

// ------------------------------------------------------------------- tick ---

TimePoint Coordinator::Tick(ClusterState& state, TimePoint now, Mutation* m, std::vector<Engine::Done>* after,
                            const Engine::SubmitFn& submit) {
  CLUSTERD_DCHECK_ON_THREAD(writer_);
  avoid_ = KeptOutDomains(state);
  if (!started_) {
    started_ = true;
    Resume(state, now, m, after, submit);
  }
  std::set<std::string> dirty;
  bool all = all_dirty_;
  all_dirty_ = false;
  for (const v1::Event& ev : m->events) {
    switch (ev.type()) {
      case v1::EVENT_TYPE_FAULT_RAISED:
      case v1::EVENT_TYPE_FAULT_UPDATED:
      case v1::EVENT_TYPE_FAULT_CLEARED:
      case v1::EVENT_TYPE_JOB_CREATED: dirty.insert(ev.job_ids().begin(), ev.job_ids().end()); break;
      case v1::EVENT_TYPE_JOB_DELETED:
        dirty.insert(ev.job_ids().begin(), ev.job_ids().end());
        for (const auto& job : ev.job_ids()) agents_->Forget(job);
        break;
      case v1::EVENT_TYPE_JOB_UPDATED:
        if (ev.actor() != "clusterd") dirty.insert(ev.job_ids().begin(), ev.job_ids().end());
        break;
      case v1::EVENT_TYPE_NODE_CORDONED:
      case v1::EVENT_TYPE_NODE_UNCORDONED:
      case v1::EVENT_TYPE_RECOVERY_MODE_CHANGED: all = true; break;
      default: break;
    }
  }
  for (auto it = wake_.begin(); it != wake_.end();) {
    if (it->second <= now) {
      dirty.insert(it->first);
      it = wake_.erase(it);
    } else {
      ++it;
    }
  }
  // Jobs with a waiting recovery are looked at whenever anything could have
  // opened their gate: a pause lifted, a slot freed, a node returned.
  for (int pass = 0; pass < 2; ++pass) {
    if (all) {
      for (const auto& [id, job] : state.jobs()) dirty.insert(id);
      for (const auto& id : active_) dirty.insert(state.recoveries().at(id).job_id());
    }
    // The cordoned and isolated nodes are walked once for the pass's
    // decisions (deciding changes neither), not once per job: a cascade
    // decides many jobs, each walk is over every node.
    node_sets_.reset();
    for (const auto& job : dirty) DecideJob(state, job, now, m);
    node_sets_.reset();
    dirty.clear();
    bool ended = false;
    for (auto ids = active_; const auto& id : ids) {
      if (Advance(state, id, now, m, after, submit)) ended = true;
    }
    if (!ended) break;
    all = true;
  }
  if (views_.size() > state.jobs().size()) {
    std::erase_if(views_, [&state](const auto& entry) { return !state.jobs().contains(entry.first); });
  }
  CountActive(state);
  return NextWake(state);
}

TimePoint Coordinator::NextWake(const StateView& state) const {
  TimePoint next = TimePoint::max();
  for (const auto& [job, at] : wake_) next = std::min(next, at);
  for (const auto& id : active_) {
    const v1::Recovery& r = state.recoveries().at(id);
    if (r.state() != v1::RECOVERY_STATE_RUNNING) continue;
    for (const auto& step : r.steps()) {
      if (step.state() == v1::STEP_STATE_RUNNING) next = std::min(next, FromTimestamp(step.deadline()));
    }
  }
  return next;
}

void Coordinator::CountActive(const StateView& state) {
  int running = 0, waiting = 0;
  for (const auto& id : active_) {
    const auto s = state.recoveries().at(id).state();
    running += s == v1::RECOVERY_STATE_RUNNING;
    waiting += s == v1::RECOVERY_STATE_WAITING;
  }
  running_ = running;
  waiting_ = waiting;
}

void Coordinator::Resume(ClusterState& state, TimePoint now, Mutation* m, std::vector<Engine::Done>* after,
                         const Engine::SubmitFn& submit) {
  auto log = GetLogger("recovery");
  for (const auto& [id, r] : state.recoveries()) {
    if (Ended(r.state())) continue;
    active_.insert(id);
  }
  for (const auto& id : active_) {
    v1::Recovery r = state.recoveries().at(id);
    if (r.state() != v1::RECOVERY_STATE_RUNNING) continue;
    for (auto& step : *r.mutable_steps()) {
      if (step.state() != v1::STEP_STATE_RUNNING) continue;
      // Whatever was in flight is asked for again, with the same key.
      const TimePoint floor = now + options_.resume_grace;
      if (FromTimestamp(step.deadline()) < floor) *step.mutable_deadline() = ToTimestamp(floor);
      log->info("recovery {}: resuming step {} ({}) after restart", id, step.index(), StepText(step));
      const v1::Recovery& stored = state.PutRecovery(r, v1::EVENT_TYPE_RECOVERY_UPDATED, m);
      Dispatch(stored, stored.steps(static_cast<int>(step.index())), after, submit);
      break;
    }
  }
}

// ----------------------------------------------------------------- decide ---

bool Coordinator::Handled(const StateView& state, const std::vector<const v1::Recovery*>& job_recoveries,
                          const v1::Fault& f) const {
  for (const v1::Recovery* rp : job_recoveries) {
    const v1::Recovery& r = *rp;
    if (r.state() == v1::RECOVERY_STATE_CANCELLED || r.state() == v1::RECOVERY_STATE_WAITING) continue;
    if (r.state() == v1::RECOVERY_STATE_DRY_RUN && !state.admin_state().dry_run()) continue;
    if (FromTimestamp(r.create_time()) < FromTimestamp(f.activated_time())) continue;
    if (std::find(r.trigger_fault_ids().begin(), r.trigger_fault_ids().end(), f.id()) != r.trigger_fault_ids().end()) {
      return true;
    }
  }
  return false;
}

bool Coordinator::AnsweredByIncident(const ClusterState& state, const std::vector<const v1::Recovery*>& job_recoveries,
                                     const v1::Fault& f) const {
  const IncidentRule* incidents = IncidentsOf(state);
  if (incidents == nullptr) return false;
  const v1::Incident* incident = incidents->IncidentOf(state, f);
  if (incident == nullptr) return false;
  for (const v1::Recovery* r : job_recoveries) {
    if (r->state() == v1::RECOVERY_STATE_CANCELLED || r->state() == v1::RECOVERY_STATE_WAITING) continue;
    if (r->state() == v1::RECOVERY_STATE_DRY_RUN && !state.admin_state().dry_run()) continue;
    if (incidents->Answers(*incident, *r)) return true;
  }
  return false;
}

void Coordinator::NoteIncidents(ClusterState& state, const v1::Recovery& r, Mutation* m) {
  if (auto* incidents = state.Attached<IncidentRule>()) incidents->RecordRecovery(state, r, m);
}

std::vector<std::string> Coordinator::KeptOutDomains(const ClusterState& state) {
  std::vector<std::string> out;
  const IncidentRule* incidents = IncidentsOf(state);
  if (incidents == nullptr) return out;
  for (const auto& [key, id] : incidents->open_by_domain()) {
    bool isolated = false;
    (void)incidents->OpenIncidentOf(key, &isolated);
    if (!isolated && !incidents->Avoided(key)) continue;
    auto ref = ParseDomainRef(key);
    if (!ref.ok()) continue;
    auto term = incidents->model().SelectorOf(*ref);
    if (term.ok()) out.push_back(*term);
    if (out.size() == kMaxAvoid) break;
  }
  return out;
}

std::string Coordinator::MoveAsUnit(const ClusterState& state, const v1::Job& job, const rc::Job& view,
                                    const std::vector<rc::FaultView>& faults, rc::Decision* d) const {
  if (d->action == rc::Action::kNone || d->strategy != rc::Strategy::kPodReschedule) return "";
  const IncidentRule* incidents = IncidentsOf(state);
  if (incidents == nullptr || incidents->open_by_domain().empty()) return "";
  const std::optional<std::string> affinity = DomainAffinityOf(job);
  if (!affinity) return "";
  const v1::Incident* incident = nullptr;
  for (const std::string& fid : d->trigger_fault_ids) {
    const v1::Fault* f = state.FindFault(fid);
    if (f != nullptr && (incident = incidents->IncidentOf(state, *f)) != nullptr) break;
  }
  if (incident == nullptr) return "";
  const std::string domain = DomainKey(incident->domain());
  if (!view.policy.Allows(rc::Strategy::kJobReschedule)) {
    d->reasons.push_back("the job's placement requires its domain (" + *affinity +
                         ") but its policy does not allow "
                         "JOB_RESCHEDULE: its hit ranks move one by one out of " +
                         domain);
    return "";
  }
  std::vector<rc::FaultView> triggers;
  for (const rc::FaultView& f : faults) {
    if (std::find(d->trigger_fault_ids.begin(), d->trigger_fault_ids.end(), f.id) != d->trigger_fault_ids.end()) {
      triggers.push_back(f);
    }
  }
  d->strategy = rc::Strategy::kJobReschedule;
  rc::ActionsFor(view, triggers, rc::Strategy::kJobReschedule, d);
  d->reasons.push_back("the job's placement requires its domain (" + *affinity + "): moved as a unit out of " + domain +
                       " (incident " + incident->id() + "), not rank by rank");
  return incident->id();
}

void Coordinator::NoteMove(ClusterState& state, const std::string& incident_id, const std::string& job_id,
                           const std::string& recovery_id, bool dry_run, TimePoint now) {
  if (incident_id.empty()) return;
  auto* incidents = state.Attached<IncidentRule>();
  if (incidents == nullptr) return;
  v1::IncidentDecision d;
  d.set_action("move-job");
  d.set_job_id(job_id);
  d.set_recovery_id(recovery_id);
  d.set_dry_run(dry_run);
  d.set_detail("the job's placement requires the domain: rescheduled as a whole (JOB_RESCHEDULE), not rank by rank");
  incidents->RecordDecision(incident_id, std::move(d), now);
}

rc::History Coordinator::HistoryOf(const std::vector<const v1::Recovery*>& job_recoveries, const std::string& skip,
                                   TimePoint now) const {
  rc::History h;
  for (const v1::Recovery* rp : job_recoveries) {
    const v1::Recovery& r = *rp;
    if (r.id() == skip) continue;
    const auto s = r.state();
    if (s == v1::RECOVERY_STATE_CANCELLED || s == v1::RECOVERY_STATE_WAITING || s == v1::RECOVERY_STATE_DRY_RUN) {
      continue;
    }
    if (now - FromTimestamp(r.create_time()) <= options_.budget_window) {
      ++h.job_retries_used;
      std::set<std::string> nodes;
      for (const auto& fid : r.trigger_fault_ids()) nodes.insert(fid.substr(0, fid.find('/')));
      for (const auto& n : nodes) ++h.node_retries_used[n];
    }
    if (s == v1::RECOVERY_STATE_SUCCEEDED || s == v1::RECOVERY_STATE_FAILED) {
      rc::PastRecovery past;
      past.strategy = rc::FromProto(r.strategy());
      past.outcome = s == v1::RECOVERY_STATE_SUCCEEDED ? rc::RecoveryOutcome::kSucceeded : rc::RecoveryOutcome::kFailed;
      past.ended = FromTimestamp(r.end_time());
      h.recent.push_back(past);
    }
  }
  return h;
}

const rc::Job& Coordinator::ViewOf(const v1::Job& job) {
  CachedView& cached = views_[job.id()];
  if (cached.revision != job.revision() || cached.view.id != job.id()) {
    cached.view = rc::FromProto(job);
    cached.view.status = rc::JobStatus::kRunning;
    cached.revision = job.revision();
  }
  return cached.view;
}

void Coordinator::DecideJob(ClusterState& state, const std::string& job_id, TimePoint now, Mutation* m) {
  // The job's recovery in progress, if any.
  const v1::Recovery* current = nullptr;
  for (const auto& id : active_) {
    const v1::Recovery& r = state.recoveries().at(id);
    if (r.job_id() == job_id) current = &r;
  }
  auto jit = state.jobs().find(job_id);
  if (jit == state.jobs().end()) {
    wake_.erase(job_id);
    if (current) Finish(state, *current, v1::RECOVERY_STATE_CANCELLED, "the job was deleted", now, m);
    return;
  }
  const v1::Job& job = jit->second;
  if (job.state() != v1::JOB_STATE_RUNNING && job.state() != v1::JOB_STATE_RECOVERING) {
    wake_.erase(job_id);
    if (current) {
      Finish(state, *current, v1::RECOVERY_STATE_CANCELLED,
             "the job is " + v1::JobState_Name(job.state()) + ": nothing to recover", now, m);
    }
    return;
  }

  const rc::Job& view = ViewOf(job);
  std::vector<rc::FaultView> faults;
  const TimePoint job_created = FromTimestamp(job.create_time());
  const std::vector<const v1::Recovery*> job_recoveries = state.RecoveriesOfJob(job_id);
  for (const v1::Fault* f : state.FaultsOnNodes(view.by_node)) {
    if (f->state() == v1::FAULT_STATE_ACTIVE) {
      if (Handled(state, job_recoveries, *f)) continue;
      if (AnsweredByIncident(state, job_recoveries, *f)) continue;
    } else {
      // Cleared faults only explain flaps: recent ones of this job's lifetime.
      const TimePoint cleared = FromTimestamp(f->cleared_time());
      if (cleared < job_created || now - cleared > std::chrono::minutes(5)) continue;
    }
    faults.push_back(rc::FromProto(*f));
  }
  // Nothing left to decide (every fault answered, by its recovery or by the
  // job's recovery for an incident): what follows would decide nothing, and
  // its cluster view walks every node (a cascade decides per fault).
  if (faults.empty() && (current == nullptr || current->state() == v1::RECOVERY_STATE_RUNNING)) {
    if (current == nullptr) wake_.erase(job_id);
    return;
  }
  rc::ClusterView cluster;
  if (!node_sets_) node_sets_ = NodeSets{state.CordonedNodes(), state.IsolatedNodes()};
  cluster.cordoned_nodes = node_sets_->cordoned;
  cluster.isolated_nodes = node_sets_->isolated;
  cluster.total_nodes = static_cast<int>(state.node_count());
  for (const auto& id : active_) {
    const v1::Recovery& r = state.recoveries().at(id);
    if (r.job_id() != job_id && r.state() == v1::RECOVERY_STATE_RUNNING) ++cluster.recoveries_running;
  }
  cluster.paused = state.admin_state().recovery_paused();
  cluster.dry_run = state.admin_state().dry_run();
  if (current && current->state() == v1::RECOVERY_STATE_RUNNING) {
    // Advance owns the running plan; only a worse fault changes it.
    FoldInto(state, *current, job, view, faults, cluster, now, m);
    return;
  }
  const rc::History history = HistoryOf(job_recoveries, current ? current->id() : "", now);
  rc::Decision d = rc::Decide(view, faults, cluster, options_.limits, history, now);
  const std::string moved_for = MoveAsUnit(state, job, view, faults, &d);

  if (d.action == rc::Action::kNone) {
    wake_.erase(job_id);
    if (current) {
      Finish(state, *current, v1::RECOVERY_STATE_CANCELLED,
             "no fault needs a recovery any more" + (d.reasons.empty() ? std::string() : ": " + d.reasons.back()), now,
             m);
    }
    return;
  }
  if (d.action == rc::Action::kWait && d.gate == rc::Gate::kHoldDown) {
    if (d.wait_until) wake_[job_id] = *d.wait_until;
    return;
  }
  wake_.erase(job_id);

  v1::Recovery r;
  if (current) {
    r = *current;
    r.clear_steps();
  } else {
    r.set_id(state.NextRecoveryId(job_id));
    r.set_job_id(job_id);
  }
  r.set_level(d.level);
  r.clear_trigger_fault_ids();
  for (const auto& id : d.trigger_fault_ids) r.add_trigger_fault_ids(id);
  r.clear_hit_ranks();
  for (int rank : d.hit_ranks) r.add_hit_ranks(static_cast<uint32_t>(rank));
  r.clear_reasons();
  for (const auto& reason : d.reasons) r.add_reasons(reason);
  r.set_graceful(d.graceful);
  rc::SetActions(d, &r);
  const rc::Strategy strategy = d.strategy.value_or(rc::Strategy::kFail);
  r.set_strategy(rc::ToProto(strategy));
  r.set_initial_strategy(rc::ToProto(strategy));
  auto log = GetLogger("recovery");

  if (d.action == rc::Action::kWait) {
    const std::string why = d.reasons.empty() ? std::string(rc::GateName(d.gate)) : d.reasons.back();
    if (current && current->wait_reason() == why &&
        std::equal(current->trigger_fault_ids().begin(), current->trigger_fault_ids().end(),
                   r.trigger_fault_ids().begin(), r.trigger_fault_ids().end())) {
      return;  // nothing new to record
    }
    r.set_state(v1::RECOVERY_STATE_WAITING);
    r.set_wait_reason(why);
    rc::PlanSteps(job, strategy, &r);
    const v1::Recovery& stored =
        state.PutRecovery(std::move(r), current ? v1::EVENT_TYPE_RECOVERY_UPDATED : v1::EVENT_TYPE_RECOVERY_STARTED, m);
    active_.insert(stored.id());
    return;
  }

  // RECOVER. How long the decision took once it could be taken.
  if (decision_seconds_) {
    TimePoint ready{};
    for (const auto& f : faults) {
      if (std::find(d.trigger_fault_ids.begin(), d.trigger_fault_ids.end(), f.id) != d.trigger_fault_ids.end()) {
        ready = std::max(ready, f.first_seen + view.policy.hold_down);
      }
    }
    decision_seconds_->Observe(std::max(0.0, std::chrono::duration<double>(now - ready).count()));
  }
  r.clear_wait_reason();
  rc::PlanSteps(job, strategy, &r);
  const v1::EventType type = current ? v1::EVENT_TYPE_RECOVERY_UPDATED : v1::EVENT_TYPE_RECOVERY_STARTED;
  if (d.dry_run) {
    for (auto& s : *r.mutable_steps()) {
      s.set_state(v1::STEP_STATE_SKIPPED);
      s.set_message("dry-run: not acted on");
    }
    r.set_dry_run(true);
    r.set_state(v1::RECOVERY_STATE_DRY_RUN);
    *r.mutable_end_time() = ToTimestamp(now);
    r.set_message("dry-run: would " + StrategyText(r.strategy()));
    log->info("recovery {} of job {}: dry-run, would {}", r.id(), job_id, StrategyText(r.strategy()));
    const std::string id = r.id();
    NoteMove(state, moved_for, job_id, id, true, now);
    NoteIncidents(state, state.PutRecovery(std::move(r), type, m), m);
    active_.erase(id);
    return;
  }
  if (strategy == rc::Strategy::kFail) {
    r.set_state(v1::RECOVERY_STATE_RUNNING);
    const v1::Recovery& stored = state.PutRecovery(std::move(r), type, m);
    Finish(state, stored, v1::RECOVERY_STATE_FAILED, d.reasons.empty() ? "FAIL" : d.reasons.back(), now, m);
    return;
  }
  r.set_state(v1::RECOVERY_STATE_RUNNING);
  if (started_total_) started_total_->Inc();
  log->info("recovery {} of job {}: {} for ranks [{}] ({})", r.id(), job_id, StrategyText(r.strategy()),
            fmt::join(r.hit_ranks(), ","), d.reasons.empty() ? "" : d.reasons.back());
  NoteMove(state, moved_for, job_id, r.id(), false, now);
  const v1::Recovery& stored = state.PutRecovery(std::move(r), type, m);
  active_.insert(stored.id());
  NoteIncidents(state, stored, m);
  WarnUnlessGone(state.SetJobState(job_id, v1::JOB_STATE_RECOVERING, "recovery " + stored.id() + " started", m));
}

// ---------------------------------------------------------------- advance ---

bool Coordinator::Advance(ClusterState& state, const std::string& id, TimePoint now, Mutation* m,
                          std::vector<Engine::Done>* after, const Engine::SubmitFn& submit) {
  auto rit = state.recoveries().find(id);
  if (rit == state.recoveries().end() || Ended(rit->second.state())) {
    active_.erase(id);
    return true;
  }
  if (rit->second.state() != v1::RECOVERY_STATE_RUNNING) return false;
  v1::Recovery r = rit->second;
  auto jit = state.jobs().find(r.job_id());
  if (jit == state.jobs().end()) {
    Finish(state, r, v1::RECOVERY_STATE_CANCELLED, "the job was deleted", now, m);
    return true;
  }
  const v1::Job& job = jit->second;
  if (job.state() == v1::JOB_STATE_SUCCEEDED || job.state() == v1::JOB_STATE_FAILED ||
      job.state() == v1::JOB_STATE_PENDING) {
    Finish(state, r, v1::RECOVERY_STATE_CANCELLED, "the job was set to " + v1::JobState_Name(job.state()), now, m);
    return true;
  }
  const bool without_agent = WithoutAgent(job);
  for (auto& step : *r.mutable_steps()) {
    const bool agent_step = step.command() != v1::JOB_COMMAND_UNSPECIFIED;
    if (step.state() == v1::STEP_STATE_RUNNING) {
      const TimePoint deadline = FromTimestamp(step.deadline());
      if (deadline > now) return false;  // still waiting for its answer
      if (agent_step && without_agent) {
        // The attach grace is over and no agent came.
        SkipAgentStep(state, std::move(r), job, step.index(), now, m);
        return Advance(state, id, now, m, after, submit);
      }
      const TimePoint full = FromTimestamp(step.start_time()) + StepTimeout(job, step);
      if (agent_step && deadline < full) {
        // The step started with only the attach grace and an agent has
        // attached since: it gets the whole timeout.
        *step.mutable_deadline() = ToTimestamp(full);
        step.clear_message();
        state.PutRecovery(std::move(r), v1::EVENT_TYPE_RECOVERY_UPDATED, m);
        return false;
      }
      step.set_state(v1::STEP_STATE_TIMED_OUT);
      *step.mutable_end_time() = ToTimestamp(now);
      step.set_message("no answer before the deadline");
      if (steps_failed_total_) steps_failed_total_->Inc();
      const std::string why = "step " + std::to_string(step.index()) + " (" + StepText(step) + ") timed out";
      Escalate(state, std::move(r), job, why, now, m);
      return Advance(state, id, now, m, after, submit);  // start the next rung at once
    }
    if (step.state() != v1::STEP_STATE_PENDING) continue;
    if (state.admin_state().recovery_paused()) return false;  // no new step while paused
    const TimePoint attach_by = agent_step && without_agent ? AttachDeadline(r, job, now) : TimePoint::max();
    if (attach_by <= now) {
      SkipAgentStep(state, std::move(r), job, step.index(), now, m);
      return Advance(state, id, now, m, after, submit);
    }
    step.set_state(v1::STEP_STATE_RUNNING);
    *step.mutable_start_time() = ToTimestamp(now);
    *step.mutable_deadline() = ToTimestamp(std::min(now + StepTimeout(job, step), attach_by));
    if (attach_by != TimePoint::max()) {
      step.set_message("waiting up to " +
                       std::to_string(std::chrono::ceil<std::chrono::seconds>(attach_by - now).count()) +
                       " s for the job's agent to attach (none attached)");
    }
    const uint32_t index = step.index();
    const v1::Recovery& stored = state.PutRecovery(std::move(r), v1::EVENT_TYPE_RECOVERY_UPDATED, m);
    Dispatch(stored, stored.steps(static_cast<int>(index)), after, submit);
    return false;
  }
  // Every step succeeded.
  Finish(state, r, v1::RECOVERY_STATE_SUCCEEDED, StrategyText(r.strategy()) + " completed", now, m);
  return true;
}

bool Coordinator::WithoutAgent(const v1::Job& job) const {
  return !job.policy().require_agent() && !agents_->IsAttached(job.id()) && !agents_->Seen(job.id());
}

Duration Coordinator::StepTimeout(const v1::Job& job, const v1::RecoveryStep& step) const {
  return rc::FromProto(job.policy()).TimeoutFor(rc::FromProto(step.strategy()));
}

Duration Coordinator::AttachGrace(const v1::Job& job) const {
  const Duration own = std::chrono::duration_cast<Duration>(std::chrono::nanoseconds(
      google::protobuf::util::TimeUtil::DurationToNanoseconds(job.policy().agent_attach_grace())));
  return own > Duration::zero() ? own : options_.agent_attach_grace;
}

TimePoint Coordinator::AttachDeadline(const v1::Recovery& r, const v1::Job& job, TimePoint now) const {
  // From the first step the recovery started: that is when it first needed
  // an agent, whichever rung it is on now.
  TimePoint since = now;
  for (const auto& s : r.steps()) {
    if (s.has_start_time()) since = std::min(since, FromTimestamp(s.start_time()));
  }
  return since + AttachGrace(job);
}

bool Coordinator::SkipAgentStep(ClusterState& state, v1::Recovery r, const v1::Job& job, uint32_t index, TimePoint now,
                                Mutation* m) {
  v1::RecoveryStep& step = *r.mutable_steps(static_cast<int>(index));
  const rc::Strategy rung = rc::FromProto(step.strategy());
  // Retrying a step, restarting processes and scaling in are the agent's
  // work: without one the rung cannot be carried out. Pause, checkpoint,
  // stop and resume only accompany the cluster actions of the others.
  const bool needs_agent =
      rung == rc::Strategy::kStepRetry || rung == rc::Strategy::kProcessRestart || rung == rc::Strategy::kScaleIn;
  const std::string why = "job " + job.id() + " has no agent attached (none since ClusterD started, attach grace " +
                          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(AttachGrace(job)).count()) +
                          " s)";
  if (!step.has_start_time()) *step.mutable_start_time() = ToTimestamp(now);
  step.set_state(v1::STEP_STATE_SKIPPED);
  *step.mutable_end_time() = ToTimestamp(now);
  if (agent_steps_skipped_total_) agent_steps_skipped_total_->Inc();
  if (needs_agent) {
    step.set_message("skipped: " + why + ": " + std::string(rc::StrategyName(rung)) + " needs one");
    Escalate(state, std::move(r), job, "step " + std::to_string(index) + " (" + StepText(step) + ") skipped: " + why,
             now, m);
    return true;
  }
  step.set_message("skipped: " + why + "; the cluster actions go on");
  GetLogger("recovery")
      ->info("recovery {} of job {}: step {} ({}) skipped: {}", r.id(), r.job_id(), index, StepText(step), why);
  state.PutRecovery(std::move(r), v1::EVENT_TYPE_RECOVERY_UPDATED, m);
  return false;
}

void Coordinator::Escalate(ClusterState& state, v1::Recovery r, const v1::Job& job, const std::string& why,
                           TimePoint now, Mutation* m) {
  auto log = GetLogger("recovery");
  if (escalations_total_) escalations_total_->Inc();
  for (auto& s : *r.mutable_steps()) {
    if (s.state() == v1::STEP_STATE_PENDING) {
      s.set_state(v1::STEP_STATE_SKIPPED);
      s.set_message("skipped: " + why);
    }
  }
  const rc::Job& view = ViewOf(job);
  const rc::Strategy from = rc::FromProto(r.strategy());
  const std::vector<rc::FaultView> triggers = TriggerViews(state, r);
  rc::Strategy next = rc::Escalate(from, view.policy, view.kind);
  std::string note = why + ": " + std::string(rc::StrategyName(from)) + " failed";
  rc::Decision plan;
  const std::set<std::string> isolated = state.IsolatedNodes();
  for (;;) {
    if (next == rc::Strategy::kScaleIn) {
      std::set<int> replicas;
      for (uint32_t rank : r.hit_ranks()) replicas.insert(view.ReplicaOf(static_cast<int>(rank)));
      if (view.ReplicaCount() - static_cast<int>(replicas.size()) < view.policy.min_replicas) {
        note += "; SCALE_IN would leave too few replicas";
        next = rc::Escalate(next, view.policy, view.kind);
        continue;
      }
    }
    rc::ActionsFor(view, triggers, next, &plan);
    // The blast-radius limit holds for escalations too: a rung that would
    // isolate too many nodes is skipped.
    size_t fresh = 0;
    for (const auto& n : plan.isolate_nodes) fresh += !isolated.contains(n);
    if (fresh > 0 && next != rc::Strategy::kFail) {
      const int total = std::max<int>(static_cast<int>(state.node_count()), static_cast<int>(isolated.size() + fresh));
      const int pct = options_.limits.max_isolated_node_percent;
      const int allowed = pct == 0 ? 0 : std::max(1, total * pct / 100);
      if (static_cast<int>(isolated.size() + fresh) > allowed) {
        note += "; " + std::string(rc::StrategyName(next)) + " would isolate nodes over the " + std::to_string(pct) +
                "% limit";
        next = rc::Escalate(next, view.policy, view.kind);
        continue;
      }
    }
    break;
  }
  note += "; escalating to " + std::string(rc::StrategyName(next));
  log->warn("recovery {} of job {}: {}", r.id(), r.job_id(), note);
  Replan(state, std::move(r), job, next, plan, note, now, m);
}

std::vector<rc::FaultView> Coordinator::TriggerViews(const StateView& state, const v1::Recovery& r) const {
  std::vector<rc::FaultView> out;
  for (const auto& fid : r.trigger_fault_ids()) {
    if (const v1::Fault* f = state.FindFault(fid)) out.push_back(rc::FromProto(*f));
  }
  return out;
}

void Coordinator::Replan(ClusterState& state, v1::Recovery r, const v1::Job& job, rc::Strategy to,
                         const rc::Decision& plan, const std::string& why, TimePoint now, Mutation* m) {
  r.add_reasons(why);
  r.set_strategy(rc::ToProto(to));
  rc::SetActions(plan, &r);
  if (to == rc::Strategy::kFail) {
    Finish(state, std::move(r), v1::RECOVERY_STATE_FAILED, why, now, m);
    return;
  }
  rc::PlanSteps(job, to, &r);
  state.PutRecovery(std::move(r), v1::EVENT_TYPE_RECOVERY_UPDATED, m);
}

void Coordinator::FoldInto(ClusterState& state, const v1::Recovery& current, const v1::Job& job, const rc::Job& view,
                           const std::vector<rc::FaultView>& faults, rc::ClusterView cluster, TimePoint now,
                           Mutation* m) {
  // The faults the running recovery does not answer yet (its triggers are
  // handled, so not among `faults`), decided as if alone: hold-down, cordon,
  // silences and record-only levels apply; budgets and concurrency do not
  // (this is the same recovery), nor pause (it already runs).
  cluster.paused = false;
  cluster.dry_run = false;
  cluster.recoveries_running = 0;
  const rc::Decision d = rc::Decide(view, faults, cluster, options_.limits, rc::History{}, now);
  if (d.action == rc::Action::kWait && d.gate == rc::Gate::kHoldDown) {
    if (d.wait_until) wake_[job.id()] = *d.wait_until;
    return;
  }
  const rc::Strategy from = rc::FromProto(current.strategy());
  if (d.action != rc::Action::kRecover || !d.strategy || *d.strategy <= from) return;  // the running rung covers it
  const rc::Strategy to = *d.strategy;
  v1::Recovery r = current;
  std::string ids;
  for (const auto& id : d.trigger_fault_ids) ids += (ids.empty() ? "" : ", ") + id;
  const std::string why = "fault(s) " + ids + " (" + std::string(ShortLevelName(d.level)) + ") arrived during " +
                          std::string(rc::StrategyName(from)) + ": moving to " + std::string(rc::StrategyName(to));
  GetLogger("recovery")->warn("recovery {} of job {}: {}", r.id(), r.job_id(), why);
  if (escalations_total_) escalations_total_->Inc();
  for (auto& s : *r.mutable_steps()) {
    if (s.state() == v1::STEP_STATE_PENDING || s.state() == v1::STEP_STATE_RUNNING) {
      s.set_state(v1::STEP_STATE_SKIPPED);
      s.set_message("superseded: " + why);
    }
  }
  std::set<std::string> trigger_ids(r.trigger_fault_ids().begin(), r.trigger_fault_ids().end());
  for (const auto& id : d.trigger_fault_ids) {
    if (trigger_ids.insert(id).second) r.add_trigger_fault_ids(id);
  }
  std::set<uint32_t> ranks(r.hit_ranks().begin(), r.hit_ranks().end());
  for (int rank : d.hit_ranks) ranks.insert(static_cast<uint32_t>(rank));
  r.clear_hit_ranks();
  for (uint32_t rank : ranks) r.add_hit_ranks(rank);
  r.set_level(std::max(r.level(), d.level));
  r.set_graceful(false);
  rc::Decision plan;
  rc::ActionsFor(view, TriggerViews(state, r), to, &plan);
  Replan(state, std::move(r), job, to, plan, why, now, m);
}

void Coordinator::Finish(ClusterState& state, v1::Recovery r, v1::RecoveryState final_state, const std::string& message,
                         TimePoint now, Mutation* m) {
  for (auto& s : *r.mutable_steps()) {
    if (s.state() == v1::STEP_STATE_PENDING || s.state() == v1::STEP_STATE_RUNNING) {
      s.set_state(v1::STEP_STATE_SKIPPED);
      s.set_message("skipped: recovery " + v1::RecoveryState_Name(final_state));
    }
  }
  const bool was_running = r.state() == v1::RECOVERY_STATE_RUNNING;
  r.set_state(final_state);
  r.clear_wait_reason();
  r.set_message(message);
  *r.mutable_end_time() = ToTimestamp(now);
  const std::string id = r.id(), job = r.job_id();
  GetLogger("recovery")->info("recovery {} of job {}: {} ({})", id, job, v1::RecoveryState_Name(final_state), message);
  state.PutRecovery(std::move(r), v1::EVENT_TYPE_RECOVERY_FINISHED, m);
  active_.erase(id);
  all_dirty_ = true;
  switch (final_state) {
    case v1::RECOVERY_STATE_SUCCEEDED:
      if (succeeded_total_) succeeded_total_->Inc();
      WarnUnlessGone(state.SetJobState(job, v1::JOB_STATE_RUNNING, "recovery " + id + " succeeded", m));
      break;
    case v1::RECOVERY_STATE_FAILED:
      if (failed_total_) failed_total_->Inc();
      WarnUnlessGone(state.SetJobState(job, v1::JOB_STATE_FAILED, "recovery " + id + " failed: " + message, m));
      break;
    default:
      if (cancelled_total_) cancelled_total_->Inc();
      if (was_running) {
        auto it = state.jobs().find(job);
        if (it != state.jobs().end() && it->second.state() == v1::JOB_STATE_RECOVERING) {
          WarnUnlessGone(state.SetJobState(job, v1::JOB_STATE_RUNNING, "recovery " + id + " cancelled", m));
        }
      }
      break;
  }
}

// --------------------------------------------------------------- dispatch ---

void Coordinator::Dispatch(const v1::Recovery& r, const v1::RecoveryStep& step, std::vector<Engine::Done>* after,
                           const Engine::SubmitFn& submit) {
  if (step.command() != v1::JOB_COMMAND_UNSPECIFIED) {
    v1::Command cmd = CommandFor(r, step);
    std::string job = r.job_id();
    after->push_back([agents = agents_, job = std::move(job), cmd = std::move(cmd)] {
      if (!agents->Send(job, cmd)) {
        GetLogger("recovery")->info("command {} waits for job {}'s agent to attach", cmd.id(), job);
      }
    });
    return;
  }
  ActionRequest req;
  req.idempotency_key = step.idempotency_key();
  req.recovery_id = r.id();
  req.job_id = r.job_id();
  req.action = step.action();
  req.strategy = step.strategy();
  req.node = step.node();
  if (step.has_device_id()) req.device = step.device_id();
  req.ranks.assign(step.ranks().begin(), step.ranks().end());
  req.level = r.level();
  req.deadline = FromTimestamp(step.deadline());
  if (req.action == v1::CLUSTER_ACTION_RESCHEDULE_PODS || req.action == v1::CLUSTER_ACTION_RESTART_JOB) {
    req.avoid = avoid_;
  }
  after->push_back([this, submit, req = std::move(req)]() mutable {
    const std::string key = req.idempotency_key;
    actuator_->Execute(std::move(req), [this, submit, key](const ActionResult& result) {
      if (!submit) return;
      submit([this, key, result](ClusterState& state, Mutation* m) -> Engine::Done {
        ApplyResult(state, key, result.ok, result.message, m);
        return nullptr;
      });
    });
  });
}

void Coordinator::ApplyResult(ClusterState& state, const std::string& key, bool ok, const std::string& message,
                              Mutation* m, const std::string& job) {
  CLUSTERD_DCHECK_ON_THREAD(writer_);
  std::string id;
  uint32_t index = 0;
  if (!SplitKey(key, &id, &index)) return;
  auto rit = state.recoveries().find(id);
  if (rit == state.recoveries().end() || rit->second.state() != v1::RECOVERY_STATE_RUNNING) return;
  if (!job.empty() && rit->second.job_id() != job) return;
  if (index >= static_cast<uint32_t>(rit->second.steps_size())) return;
  if (rit->second.steps(static_cast<int>(index)).state() != v1::STEP_STATE_RUNNING) return;  // late or repeated
  v1::Recovery r = rit->second;
  v1::RecoveryStep& step = *r.mutable_steps(static_cast<int>(index));
  const TimePoint now = clock_->Now();
  step.set_state(ok ? v1::STEP_STATE_SUCCEEDED : v1::STEP_STATE_FAILED);
  *step.mutable_end_time() = ToTimestamp(now);
  step.set_message(message.substr(0, 1024));
  if (ok && (step.action() == v1::CLUSTER_ACTION_ISOLATE_NODE || step.action() == v1::CLUSTER_ACTION_ISOLATE_DEVICE)) {
    std::optional<uint32_t> device;
    if (step.has_device_id()) device = step.device_id();
    WarnUnlessGone(state.SetIsolated(step.node(), device, "recovery " + id, m));
  }
  if (ok) {
    state.PutRecovery(std::move(r), v1::EVENT_TYPE_RECOVERY_UPDATED, m);
  } else {
    if (steps_failed_total_) steps_failed_total_->Inc();
    const std::string why = "step " + std::to_string(index) + " (" + StepText(step) + ") failed: " + message;
    auto jit = state.jobs().find(r.job_id());
    if (jit == state.jobs().end()) {
      Finish(state, std::move(r), v1::RECOVERY_STATE_CANCELLED, "the job was deleted", now, m);
      return;
    }
    Escalate(state, std::move(r), jit->second, why, now, m);
  }
}

bool Coordinator::NoteProgress(ClusterState& state, const std::string& key, const std::string& note, Mutation* m,
                               const std::string& job) {
  CLUSTERD_DCHECK_ON_THREAD(writer_);
  std::string id;
  uint32_t index = 0;
  if (!SplitKey(key, &id, &index)) return false;
  auto rit = state.recoveries().find(id);
  if (rit == state.recoveries().end() || rit->second.state() != v1::RECOVERY_STATE_RUNNING) return false;
  if (rit->second.job_id() != job || index >= static_cast<uint32_t>(rit->second.steps_size())) return false;
  if (rit->second.steps(static_cast<int>(index)).state() != v1::STEP_STATE_RUNNING) return false;
  if (rit->second.steps(static_cast<int>(index)).message() == note) return true;
  v1::Recovery r = rit->second;
  r.mutable_steps(static_cast<int>(index))->set_message(note.substr(0, 1024));
  state.PutRecovery(std::move(r), v1::EVENT_TYPE_RECOVERY_UPDATED, m);
  return true;
}

std::vector<v1::Command> Coordinator::PendingCommands(const StateView& state, const std::string& job) const {
  CLUSTERD_DCHECK_ON_THREAD(writer_);
  std::vector<v1::Command> out;
  for (const auto& id : active_) {
    const v1::Recovery& r = state.recoveries().at(id);
    if (r.job_id() != job || r.state() != v1::RECOVERY_STATE_RUNNING) continue;
    for (const auto& step : r.steps()) {
      if (step.state() != v1::STEP_STATE_RUNNING || step.command() == v1::JOB_COMMAND_UNSPECIFIED) continue;
      out.push_back(CommandFor(r, step));
    }
  }
  return out;
}

}  // namespace clusterd
