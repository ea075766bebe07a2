// The recovery coordinator: turns the pure decisions of clusterd/recovery
// into stored recoveries and carries them out, step by step, through the
// job's recovery agent (JobAgentHub) and the cluster actuator.
//
// Everything runs on the Engine's writer thread with the state locked (it is
// the last of the writer's rules, state/writer_rule.h: the Engine advances it
// after each group of changes and at least every liveness interval). The
// rule that makes kill -9 safe: a step is stored as RUNNING before it is
// dispatched (dispatch happens in a Done, i.e. after the commit is durable),
// and its result is stored before the next step starts. After a restart,
// RUNNING steps are dispatched again with the same idempotency key; steps
// stored as SUCCEEDED are never run again.
// docs/recovery.md describes the steps of each strategy.
#pragma once

#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "clusterd/engine/engine.h"
#include "clusterd/recovery/actuators/actuator.h"
#include "clusterd/recovery/coordinator/job_agent_hub.h"
#include "clusterd/recovery/types.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/state/writer_rule.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/thread_checker.h"

namespace clusterd {

struct CoordinatorOptions {
  recovery::Limits limits;
  // Retry budgets count the recoveries started within this window.
  Duration budget_window = std::chrono::hours(24);
  // After a restart, a step that was RUNNING gets at least this long (the
  // agent has to reattach) before it times out.
  Duration resume_grace = std::chrono::seconds(30);
  // A job with no agent attached, and none since the start, gets this long
  // from a recovery's start to attach one before its agent commands are
  // skipped (unless its policy says require_agent; the policy's own
  // agent_attach_grace wins).
  Duration agent_attach_grace = std::chrono::seconds(30);
};

class Coordinator final : public WriterRule {
 public:
  Coordinator(JobAgentHub* agents, Actuator* actuator, const Clock* clock, CoordinatorOptions options,
              MetricsRegistry* metrics);

  // The writer's rule (Engine::Hooks::rules): Tick with the tick's time,
  // Mutation, completions and Submit.
  std::string_view name() const override { return "recoveries"; }
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override {
    return Tick(state, tick.now, tick.m, tick.after, *tick.submit);
  }

  // Writer thread, state locked: reacts
  // to the events already in m, to due timers and step deadlines; decides,
  // starts, advances and escalates recoveries; appends the dispatches to run
  // once durable. The actuator's answers to those dispatches come back
  // through `submit` (the Engine's; empty: answers are dropped, as in tests
  // that answer by hand). Returns the next time it has something to do
  // without new input (a hold-down expiring, a step deadline), or
  // TimePoint::max().
  TimePoint Tick(ClusterState& state, TimePoint now, Mutation* m, std::vector<Engine::Done>* after,
                 const Engine::SubmitFn& submit = {});

  // Writer thread: the agent or the actuator answered the step with this
  // idempotency key. Late or repeated answers change nothing.
  // The next step starts at the Tick that follows in the same group.
  // `job`, when not empty, must be the recovery's job (an agent answers only
  // its own job's commands).
  void ApplyResult(ClusterState& state, const std::string& key, bool ok, const std::string& message, Mutation* m,
                   const std::string& job = "");

  // Writer thread: the agent's progress within the RUNNING step with this
  // key (e.g. which of TaskD's exchanges were answered), stored as the step's
  // message so that it survives a restart and shows in GetRecovery; the step
  // stays RUNNING. False (nothing stored) when the step is not RUNNING or not
  // `job`'s.
  bool NoteProgress(ClusterState& state, const std::string& key, const std::string& note, Mutation* m,
                    const std::string& job);

  // Writer thread: the commands a newly attached agent of `job` must get now
  // (the RUNNING agent step of its running recovery, if any).
  std::vector<v1::Command> PendingCommands(const StateView& state, const std::string& job) const;

  int running() const { return running_.load(); }
  int waiting() const { return waiting_.load(); }

  // The label selector terms of the domains an open incident avoids or
  // isolates (ActionRequest::avoid), at most kMaxAvoid.
  static constexpr size_t kMaxAvoid = 64;
  static std::vector<std::string> KeptOutDomains(const ClusterState& state);

 private:
  void Resume(ClusterState& state, TimePoint now, Mutation* m, std::vector<Engine::Done>* after,
              const Engine::SubmitFn& submit);
  void DecideJob(ClusterState& state, const std::string& job_id, TimePoint now, Mutation* m);
  // Starts the next step, notices deadlines and completion. Returns true if
  // the recovery ended.
  bool Advance(ClusterState& state, const std::string& id, TimePoint now, Mutation* m, std::vector<Engine::Done>* after,
               const Engine::SubmitFn& submit);
  // The step failed or timed out: skip the rest of its rung and go down the
  // ladder (recording why), possibly to FAIL.
  // True when the job's agent commands cannot be carried out: no agent is
  // attached, none was since the start, and the policy does not require one.
  bool WithoutAgent(const v1::Job& job) const;
  Duration StepTimeout(const v1::Job& job, const v1::RecoveryStep& step) const;
  Duration AttachGrace(const v1::Job& job) const;
  // Until when recovery r waits for the job's agent to attach.
  TimePoint AttachDeadline(const v1::Recovery& r, const v1::Job& job, TimePoint now) const;
  // Marks step `index` of r SKIPPED for want of an agent and stores r; a
  // rung that is the agent's own work (STEP_RETRY, PROCESS_RESTART,
  // SCALE_IN) escalates instead, and true is returned.
  bool SkipAgentStep(ClusterState& state, v1::Recovery r, const v1::Job& job, uint32_t index, TimePoint now,
                     Mutation* m);
  void Escalate(ClusterState& state, v1::Recovery r, const v1::Job& job, const std::string& why, TimePoint now,
                Mutation* m);
  // A worse fault hit the job while its recovery runs: the running plan is
  // superseded by the rung the worse fault needs (same recovery, more triggers).
  void FoldInto(ClusterState& state, const v1::Recovery& current, const v1::Job& job, const recovery::Job& view,
                const std::vector<recovery::FaultView>& faults, recovery::ClusterView cluster, TimePoint now,
                Mutation* m);
  // The recovery's trigger faults as the decision engine sees them.
  std::vector<recovery::FaultView> TriggerViews(const StateView& state, const v1::Recovery& r) const;
  // Moves r to rung `to` with plan's isolation/reset targets, recording why:
  // the rung's steps are appended and stored, or for FAIL the recovery ends.
  void Replan(ClusterState& state, v1::Recovery r, const v1::Job& job, recovery::Strategy to,
              const recovery::Decision& plan, const std::string& why, TimePoint now, Mutation* m);
  void Finish(ClusterState& state, v1::Recovery r, v1::RecoveryState final_state, const std::string& message,
              TimePoint now, Mutation* m);
  void Dispatch(const v1::Recovery& r, const v1::RecoveryStep& step, std::vector<Engine::Done>* after,
                const Engine::SubmitFn& submit);
  // Whether one of the job's recoveries already answers this activation of f.
  bool Handled(const StateView& state, const std::vector<const v1::Recovery*>& job_recoveries,
               const v1::Fault& f) const;
  // Whether the job already has its one recovery for the open incident the
  // fault belongs to (docs/domains.md: one recovery per job per incident).
  bool AnsweredByIncident(const ClusterState& state, const std::vector<const v1::Recovery*>& job_recoveries,
                          const v1::Fault& f) const;
  // Records a started recovery with the incidents its trigger faults belong to.
  static void NoteIncidents(ClusterState& state, const v1::Recovery& r, Mutation* m);
  // A job whose placement requires its domain (DomainAffinityOf) is not
  // moved rank by rank out of a domain with an open incident (a replacement
  // could neither stay in the domain nor leave it): a POD_RESCHEDULE whose
  // trigger fault is a member of an open incident becomes JOB_RESCHEDULE,
  // the job's policy allowing. Returns that incident's id ("" unchanged).
  std::string MoveAsUnit(const ClusterState& state, const v1::Job& job, const recovery::Job& view,
                         const std::vector<recovery::FaultView>& faults, recovery::Decision* d) const;
  // Records the move with the incident (decision "move-job"); no-op for "".
  static void NoteMove(ClusterState& state, const std::string& incident_id, const std::string& job_id,
                       const std::string& recovery_id, bool dry_run, TimePoint now);
  recovery::History HistoryOf(const std::vector<const v1::Recovery*>& job_recoveries, const std::string& skip,
                              TimePoint now) const;
  // The decision engine's view of a job (status RUNNING), converted once per
  // revision of the job: the conversion walks every rank, a decision only
  // the ranks its faults hit. Views of deleted jobs are dropped by Tick.
  const recovery::Job& ViewOf(const v1::Job& job);
  void CountActive(const StateView& state);
  TimePoint NextWake(const StateView& state) const;

  JobAgentHub* agents_;
  Actuator* actuator_;
  const Clock* clock_;
  CoordinatorOptions options_;

  // Everything below is the writer's (Tick, ApplyResult, PendingCommands).
  ThreadChecker writer_;
  bool started_ = false;
  std::set<std::string> active_;           // RUNNING and WAITING recovery ids
  std::map<std::string, TimePoint> wake_;  // job -> decide again at (hold-down)
  bool all_dirty_ = true;
  struct CachedView {
    uint64_t revision = 0;
    recovery::Job view;
  };
  std::map<std::string, CachedView> views_;  // job id -> ViewOf
  // The cordoned and isolated nodes during one pass of DecideJob calls.
  struct NodeSets {
    std::set<std::string> cordoned, isolated;
  };
  std::optional<NodeSets> node_sets_;
  // KeptOutDomains as of the last Tick: what Dispatch hands the actuator.
  std::vector<std::string> avoid_;

  std::atomic<int> running_{0};
  std::atomic<int> waiting_{0};
  Counter* started_total_ = nullptr;
  Counter* succeeded_total_ = nullptr;
  Counter* failed_total_ = nullptr;
  Counter* cancelled_total_ = nullptr;
  Counter* escalations_total_ = nullptr;
  Counter* steps_failed_total_ = nullptr;
  Counter* agent_steps_skipped_total_ = nullptr;
  Histogram* decision_seconds_ = nullptr;
};

}  // namespace clusterd
