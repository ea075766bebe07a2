// TaskD's Recover protocol (docs/mindcluster.md, "TaskD's Recover service")
// over ClusterD's own recovery model. TaskD, MindCluster's agent inside the
// training containers, asks ClusterD for process-level recovery: ClusterD
// sends it signals (stopTrain, globalFault, changeStrategy), TaskD reports
// back (ReportStopComplete, ReportRecoverStrategy, ReportRecoverStatus).
//
// ClusterD's coordinator decides and stores the recovery (which rung, which
// ranks, each step stored before it runs, escalation on failure or timeout);
// for a job whose agent is TaskD, each agent command of a step becomes the
// exchange below, and its outcome is the step's ack. One recovery model
// serves both kinds of agent (JobService.Attach and TaskD).
//
//   command (rung)              TaskD exchange (the reference's     ack
//                               signals, names and actions)
//   RETRY_STEP (STEP_RETRY)     stopTrain -> globalFault            TaskD's status
//                               [on_global_rank] -> changeStrategy  for "retry"
//                               "retry"
//   RESTART_PROCESSES           ... globalFault [on_global_rank,    TaskD's status
//     (PROCESS_RESTART)         fault_nodes_exit] (no pod) ->       for "recover"
//                               changeStrategy "recover", extra
//                               "recover-in-place", actions
//                               [change_strategy,
//                               fault_nodes_restart], the pods
//   PAUSE (POD_RESCHEDULE)      stopTrain -> globalFault            TaskD offered
//                               [on_global_rank, fault_nodes_exit]  "recover"
//                               (the hit pods) -> TaskD's offer
//   RESUME (POD_RESCHEDULE)     changeStrategy "recover" (sent     TaskD's status
//                               early if the pods take longer than
//                               strategy_wait: MindIO's wait bounds
//                               it)
//   SCALE_IN                    ... changeStrategy "downgrade",     TaskD's status 0
//                               extra {"scale-in-strategy": "DP"};  (201 first: the
//                               status 201 -> faultNodesExit        ranks to isolate)
//                               [fault_nodes_exit] (their pods)
//   STOP (PROCESS_RESTART       as PAUSE, with no pod to move:      TaskD offered
//     with a chip reset)        the chips reset while MindIO waits  "recover"
//   STOP of JOB_RESCHEDULE      stopTrain -> globalFault ->         sent (the job
//                               [changeStrategy "dump" ->           restarts)
//                               status] -> changeStrategy
//                               "exit" (dump_exit after a dump)
//   CHECKPOINT                  none: TaskD has no checkpoint-and-continue (fails)
//
// What MindIO accepts after a failed strategy decides the next rung's
// exchange: after a retry's 405 it waits for a new globalFault (a new
// uuid) and offers again; after 406 or 499, or any other failure, it
// accepts only dump (not after 499) or exit, so every rung but the job's
// restart fails at once and the ladder goes on.
//
// Before the first signal of any command but RETRY_STEP, for ranks TaskD
// has not itself reported, ClusterD sends preExitProcess and waits for
// TaskD's ReportProcessFault (the reference's rule for new non-retry
// faults: TaskD stops the fault ranks' workers first). A job whose
// recover-strategy lists dump but no recovery (no retry, recover-in-place,
// recover or elastic-training) gets saveAndExit instead of the exchange. A
// PAUSE of POD_RESCHEDULE for a job that does not list recover fails at
// once, before pods move: the ladder goes on to the job's restart (exit).
// When TaskD exits, reset-config's RetryTime goes up by one (restart-all),
// the PodGroup's process-recover-enable becomes "pause" until the new
// TaskD registers (the reference's FaultRetry), and the process faults
// TaskD reported are cleared.
//
// A stage already done is not repeated: after a PAUSE (or a STOP before a
// chip reset) left TaskD choosing, the next command sends only its
// changeStrategy. A strategy the job's recover-strategy does not list, or
// that TaskD did not offer, fails the command at once: the coordinator
// escalates to the next rung, as the reference falls back. A signal sent
// again with the same uuid (ClusterD restarted, TaskD subscribed again)
// that stays unanswered for MindIO's wait fails its command (TaskD drops a
// repeated uuid, and a report it could not deliver is never sent again).
//
// Pure: no gRPC, no clock, no threads; the adapter (grpc/recover_service.h)
// serializes calls and delivers what they return.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/v1/fault.pb.h"
#include "clusterd/v1/job.pb.h"
#include "clusterd/v1/types.pb.h"
#include "mindcluster/recover.pb.h"

namespace clusterd::mindcluster {

// Status codes of the reference server (Status.code; the gRPC status stays
// OK).
inline constexpr int32_t kRecoverOk = 0;
inline constexpr int32_t kRecoverNotRegistered = 400;
inline constexpr int32_t kRecoverUnknownJob = 402;
inline constexpr int32_t kRecoverNotEnabled = 403;
inline constexpr int32_t kRecoverProcessNotReady = 404;     // TaskD -> ClusterD
inline constexpr int32_t kRecoverRetryRecoverable = 405;    // TaskD -> ClusterD
inline constexpr int32_t kRecoverRetryUnrecoverable = 406;  // TaskD -> ClusterD
inline constexpr int32_t kRecoverInitFirst = 408;
inline constexpr int32_t kRecoverClientError = 499;  // also: not supported here
inline constexpr int32_t kRecoverTooManyJobs = 500;
inline constexpr int32_t kRecoverInternal = 599;

// What discovery copies from a job's PodGroup (labels, else annotations; the
// PodGroup carries the AscendJob's) into the ClusterD job's labels. A job
// made through JobService.CreateJob opts in with the same labels.
inline constexpr std::string_view kLabelRecoverStrategy = "mindcluster/recover-strategy";
inline constexpr std::string_view kLabelFaultScheduling = "mindcluster/fault-scheduling";
inline constexpr std::string_view kLabelPodRescheduling = "mindcluster/pod-rescheduling";
inline constexpr std::string_view kLabelProcessRecoverEnable = "mindcluster/process-recover-enable";
// The PodGroup/AscendJob keys they come from.
inline constexpr std::string_view kKeyRecoverStrategy = "recover-strategy";
inline constexpr std::string_view kKeyFaultScheduling = "fault-scheduling";
inline constexpr std::string_view kKeyPodRescheduling = "pod-rescheduling";
inline constexpr std::string_view kKeyProcessRecoverEnable = "process-recover-enable";

// The strategy names of the protocol.
inline constexpr std::string_view kStrategyRetry = "retry";
inline constexpr std::string_view kStrategyRecoverInPlace = "recover-in-place";
inline constexpr std::string_view kStrategyRecover = "recover";
inline constexpr std::string_view kStrategyElastic = "elastic-training";
inline constexpr std::string_view kStrategyDump = "dump";
inline constexpr std::string_view kStrategyExit = "exit";
// The names on the wire where they differ from the job's: recover in place
// is changeStrategy "recover" with this extraParams (TaskD's recover plugin
// then restarts the workers of nodeRankIds instead of exiting them);
// elastic training is MindIO's downgrade (scale-in), and upgrade its way
// back.
inline constexpr std::string_view kStrategyDowngrade = "downgrade";
inline constexpr std::string_view kStrategyUpgrade = "upgrade";
inline constexpr std::string_view kExtraScaleIn = R"({"scale-in-strategy": "DP"})";
inline constexpr std::string_view kExtraScaleOut = R"({"scale-out-strategy": "DP"})";
// MindIO's answer to an accepted downgrade before its result: the ranks to
// isolate (RecoverStatusRequest.isolateRankIds), whose pods ClusterD tells
// to exit with this signal.
inline constexpr int32_t kRecoverChooseScaleInRanks = 201;
inline constexpr std::string_view kSignalFaultNodesExit = "faultNodesExit";
inline constexpr std::string_view kActionFaultNodesExit = "fault_nodes_exit";
inline constexpr std::string_view kActionFaultNodesRestart = "fault_nodes_restart";
// MindIO's MINDIO_WAIT_MINDX_TIME default: how long it waits for ClusterD's
// next signal (the globalFault after its stop, the changeStrategy after its
// offer) before it gives up and the training processes exit; ClusterD's own
// waits inside those end this much earlier (the reference's margin).
inline constexpr int64_t kMindioWaitS = 30;
inline constexpr int64_t kMindioWaitMarginS = 10;

// Signal types and actions beyond stopTrain/globalFault/changeStrategy.
inline constexpr std::string_view kSignalPreExit = "preExitProcess";
inline constexpr std::string_view kActionPreExit = "pre exit process";
inline constexpr std::string_view kSignalSaveAndExit = "saveAndExit";
inline constexpr std::string_view kActionSaveAndExit = "save_and_exit";
inline constexpr std::string_view kExtraDumpExit = "dump_exit";

// Init's verdict for a job: code kRecoverOk with the job's strategies in the
// reference's order (the recover-strategy entries among retry,
// recover-in-place, recover, elastic-training, dump, exit; then
// job-rescheduling when fault-scheduling is grace or force; pod-rescheduling
// when pod-rescheduling is on; exit always, once), or kRecoverNotEnabled when
// process-recover-enable is neither on nor pause (ascend-operator sets it on
// for a job with recover-strategy).
struct RecoverOptIn {
  int32_t code = kRecoverOk;
  std::string info;
  std::vector<std::string> strategies;
};
RecoverOptIn JobRecoverStrategies(const v1::Job& job);

// The pod ranks ("node ranks") of a job's nodes that hold any of `ranks`, as
// TaskD names pods: a node's pod rank is its lowest device rank divided by
// the ranks it holds (the device plugin numbers a pod's chips pod rank x n +
// i). Sorted, unique.
std::vector<std::string> NodeRanksOf(const v1::Job& job, const std::vector<uint32_t>& ranks);

// The job's Kubernetes objects, from the labels discovery sets (k8s.namespace,
// k8s.name: the AscendJob's name, k8s.podgroup); empty for a job made through
// the API, which has none.
struct TaskdJobRef {
  std::string id, ns, name, podgroup;
  bool kubernetes() const { return !ns.empty() && !name.empty(); }
};
TaskdJobRef TaskdJobRefOf(const v1::Job& job);

// What reset-config-<job>'s reset.json is told at each stage (the
// reference's operations): training stopping (FaultFlushing), the fault
// ranks (at globalFault), clear (the job recovered), restart-all (TaskD
// exits and the whole job restarts: RetryTime + 1).
// kFaultsInPlace: the fault ranks, whose processes restart in place
// (RestartFaultProcess true; kFaults writes it false, the others keep it).
enum class ResetOp { kNone, kFlushing, kFaults, kFaultsInPlace, kClear, kRestartAll };
struct ResetRank {
  uint32_t rank = 0;
  uint32_t logic_id = 0;  // the chip's device id on its node
  // The reference's level name of the rank's worst fault (Policy and
  // InitialPolicy: "RestartRequest", "SeparateNPU", ...), and the codes of
  // its faults (ErrorCode: those that are hexadecimal, as integers;
  // ErrorCodeHex: the same, comma-separated).
  std::string policy;
  std::vector<std::string> codes;
};

// What the faults behind a command say of each rank they hit: their codes,
// the worst level, and whether one is a communication (HCCL) error that a
// step retry handles as the reference's type "2" (TaskD's TASKD_HCCL, or a
// fault of the network source).
struct RankFault {
  std::vector<std::string> codes;
  v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
  bool hccl = false;
};
using RankFaults = std::map<uint32_t, RankFault>;
// The faults' ranks in `job` (a fault on a chip: the rank placed there; a
// fault of the node: every rank on it).
RankFaults RankFaultsOf(const v1::Job& job, const std::vector<v1::Fault>& faults);

// The reference's HCCL step retry: globalFault carries this timeout (s),
// and its changeStrategy retry goes out this long after TaskD's strategies
// (the network's routes converge first).
inline constexpr int64_t kHcclRetryTimeoutS = 33;
inline constexpr int64_t kHcclRouteWaitMs = 3000;
// reset.json for `op`, over the ConfigMap's `current` one (RetryTime,
// GracefulExit and RestartFaultProcess are kept; what does not parse counts
// as empty): the reference's struct in Go's JSON, field order as declared:
// {"RankList":[{"RankId","LogicId","Status":"fault","Policy","InitialPolicy",
// "ErrorCode","ErrorCodeHex"}],"UpdateTime","RetryTime","FaultFlushing",
// "GracefulExit","RestartFaultProcess"}. Its checkCode is Sha256Hex of it.
std::string ResetConfigJson(std::string_view current, ResetOp op, const std::vector<ResetRank>& ranks, int64_t now_s);

// Where the protocol's marks on the job's Kubernetes objects go (the
// PodGroup's process-recover-enable label and ProcessRecoverStatus
// annotation, reset-config-<job>): mindcluster/k8s/taskd_objects.h on
// Kubernetes. Calls never block (they queue).
class TaskdObjects {
 public:
  virtual ~TaskdObjects() = default;
  // process-recover-enable: "on" (Register), "pause" (TaskD exits).
  virtual void RecoverEnable(const TaskdJobRef& job, std::string_view value) = 0;
  // The label fault-type on the job's pods on each node (node -> value;
  // PodFaultTypes).
  virtual void PodFaultTypes(const TaskdJobRef& job, std::map<std::string, std::string> by_node) = 0;
  virtual void RecoverStatus(const TaskdJobRef& job, const std::string& status) = 0;
  virtual void ResetConfig(const TaskdJobRef& job, ResetOp op, std::vector<ResetRank> ranks) = 0;
};

// TaskD's ReportProcessFault as ClusterD faults of the reporter "taskd"
// (FaultService's external faults), so that the coordinator decides a
// recovery for them as for any fault: one per rank the job places (its
// node and chip), id "<job>/rank/<rank>", code TASKD_UCE (type "0") or
// TASKD_HCCL ("2") at RESTART_REQUEST (a step retry), else
// TASKD_PROCESS_FAULT at RESTART_BUSINESS (the processes restarted). At
// most kMaxProcessFaultRanks ranks of one report; ranks the job does not
// place, and those past the limit, are named in *info. Cleared when the
// job's recovery through TaskD succeeds.
inline constexpr std::string_view kTaskdReporter = "taskd";
inline constexpr size_t kMaxProcessFaultRanks = 1024;
std::vector<v1::ReportRequest> ProcessFaultReports(const v1::Job& job,
                                                   const google::protobuf::RepeatedPtrField<::FaultRank>& ranks,
                                                   std::string* info);

// The stage to resume step `index` of `recovery` from: the stage stored in
// it; with none, when the nearest agent step before it is a PAUSE, or a
// STOP that is not TaskD's exit, that succeeded (the RESUME of a pod
// rescheduling, the restart after a chip reset: TaskD is not told to stop
// again), the stage that step ended in (its message: "taskd:
// choosing-strategy; offered recover,exit"), or "taskd: stopped"; else "".
std::string ResumeStage(const v1::Recovery& recovery, uint32_t index);

// The pod label fault-type of a ReportProcessFault, per node of the job
// holding a reported rank, as the reference labels them: "retry-fault" when
// every rank reported there is a retry type ("0" UCE, "2" HCCL), else
// "software" (a fault task for Volcano).
inline constexpr std::string_view kPodLabelFaultType = "fault-type";
std::map<std::string, std::string> PodFaultTypes(const v1::Job& job,
                                                 const google::protobuf::RepeatedPtrField<::FaultRank>& ranks);

// The coordinator's answer for one command.
struct TaskdAck {
  std::string command_id;
  bool success = false;
  std::string message;
};

// What one input produces: signals for TaskD (in order), at most one ack for
// the coordinator, the reply to a report, and the PodGroup's
// ProcessRecoverStatus when it changes ("retry-success", "recover-failed", ...).
struct TaskdOutput {
  std::vector<::ProcessManageSignal> signals;
  std::optional<TaskdAck> ack;
  int32_t code = kRecoverOk;
  std::string info;
  std::string process_recover_status;
  // reset-config-<job>: what to tell it now, with the fault ranks for kFaults.
  ResetOp reset = ResetOp::kNone;
  std::vector<ResetRank> reset_ranks;
  // The PodGroup's process-recover-enable now ("pause": TaskD exits).
  std::string recover_enable;
  // The process faults TaskD reported for the job are moot (it exits).
  bool clear_process_faults = false;
  // Send the signals this much later (an HCCL retry's route wait).
  int64_t delay_ms = 0;
  // Call TaskdJob::Expire(token) after this long: a wait of ClusterD's that
  // MindIO bounds (kExpireStrategy...) or an answer to a re-sent signal
  // (kExpireResent...). 0: none.
  int64_t expire_after_ms = 0;
  std::string expire_token;
};

// The waits MindIO bounds, as ClusterD keeps them (the adapter's options).
struct TaskdWaits {
  // MindIO's MINDIO_WAIT_MINDX_TIME: a signal sent again (same uuid) and
  // unanswered this long fails its command.
  int64_t mindio_wait_ms = kMindioWaitS * 1000;
  // After TaskD's offer, the changeStrategy goes out at the latest this
  // long after it, even while the pods still move (MindIO gives up at its
  // wait): its wait less the reference's margin.
  int64_t strategy_wait_ms = (kMindioWaitS - kMindioWaitMarginS) * 1000;
  static TaskdWaits For(int64_t mindio_wait_s) {
    TaskdWaits w;
    w.mindio_wait_ms = mindio_wait_s * 1000;
    w.strategy_wait_ms = std::max<int64_t>(mindio_wait_s - kMindioWaitMarginS, mindio_wait_s / 2) * 1000;
    return w;
  }
};

// One job's side of the protocol. Not thread-safe: the adapter serializes.
class TaskdJob {
 public:
  enum class Phase {
    kIdle,           // nothing asked of TaskD
    kAwaitPreExit,   // preExitProcess sent, waiting for ReportProcessFault
    kAwaitStop,      // stopTrain sent, waiting for ReportStopComplete
    kStopped,        // training stopped, nothing more asked yet
    kAwaitStrategy,  // globalFault sent, waiting for ReportRecoverStrategy
    kChoosing,       // TaskD offered its strategies, waiting for a changeStrategy
    kAwaitStatus,    // changeStrategy sent, waiting for ReportRecoverStatus
  };

  TaskdJob(std::string job_id, std::vector<std::string> strategies, TaskdWaits waits = {});

  // A command of the coordinator for this job, with the job as stored. The
  // same command again (a resend: the agent reattached, ClusterD restarted)
  // repeats the signal it waits on, with the same uuid.
  TaskdOutput OnCommand(const v1::Command& command, const v1::Job& job, const RankFaults& faults = {});
  TaskdOutput OnStopComplete(const ::StopCompleteRequest& req);
  TaskdOutput OnRecoverStrategy(const ::RecoverStrategyRequest& req);
  TaskdOutput OnRecoverStatus(const ::RecoverStatusRequest& req);
  // TaskD's ReportProcessFault (the ranks it names): the answer a
  // preExitProcess waits for; ranks it reports need no preExitProcess.
  TaskdOutput OnProcessFault(const ::ProcessFaultRequest& req);
  // TaskD subscribed again (or its stream ended): its own state machine
  // starts over, as the reference's does. The command in flight, if any,
  // starts over from its first signal.
  TaskdOutput Restart();
  // Forgets the command in flight and what TaskD offered (a new subscription
  // resumes from the stored stage instead).
  void Reset() {
    phase_ = Phase::kIdle;
    offered_.clear();
    current_.reset();
    pre_exited_ = false;
    pending_.reset();
    early_result_.reset();
    // What MindIO accepts (only_dump_exit_) outlives TaskD's stream.
  }
  // The job trains without the ranks a downgrade isolated (their ranks),
  // until an upgrade brings them back.
  const std::optional<std::vector<uint32_t>>& scaled_in() const { return scaled_in_; }
  // The isolated ranks' chips are back (the adapter checks): MindIO's
  // upgrade, changeStrategy "upgrade" with the reference's extraParams
  // {"scale-out-strategy": "DP"}; its status ends the scale-in (0) or leaves
  // MindIO accepting only dump or exit. Nothing while a command is in
  // flight or TaskD awaits an answer.
  TaskdOutput ScaleOut();
  // A wait an output asked for (expire_after_ms) ran out: an unanswered
  // re-sent signal fails its command; the changeStrategy a PAUSE (or the
  // STOP before a chip reset) left for the next command goes out now.
  // Stale tokens change nothing.
  TaskdOutput Expire(std::string_view token);

  // Where the command in flight stands ("taskd: stopped; offered retry,recover"):
  // stored with the step (Coordinator::NoteProgress) before the signals of
  // a change go out, so that a restart or a new subscription goes on from the
  // last answered exchange (Resume) instead of starting over.
  static constexpr std::string_view kStagePrefix = "taskd: ";
  std::string Stage() const;
  // The command again after a restart or a new subscription, with the stage
  // stored for it: a signal sent and not answered is sent again (same uuid),
  // an answered one never; nothing stored (or not a stage): from the start.
  TaskdOutput Resume(const v1::Command& command, const v1::Job& job, std::string_view stage,
                     const RankFaults& faults = {});

  Phase phase() const { return phase_; }
  static std::string_view PhaseName(Phase p);
  const std::string& job_id() const { return job_id_; }
  const std::vector<std::string>& strategies() const { return strategies_; }
  // The strategies TaskD offered last (ReportRecoverStrategy).
  const std::vector<std::string>& offered() const { return offered_; }
  // The command being carried out, if any.
  const std::optional<v1::Command>& current() const { return current_; }

 private:
  // The strategy a command asks TaskD for; empty for PAUSE/STOP (stop
  // only), exit for the STOP of JOB_RESCHEDULE.
  static std::string_view TargetOf(const v1::Command& command);
  // Only dump (and exit) listed: saveAndExit instead of the exchange.
  bool DumpOnly() const;
  // Whether the current command starts with preExitProcess.
  bool NeedsPreExit() const;
  // TaskD exits (after a dump when `dumped`): the last signal of a STOP of
  // JOB_RESCHEDULE, acked at once.
  TaskdOutput Exit(bool dumped);
  bool Allows(std::string_view strategy) const;
  // Moves the current command on from the phase it is in.
  TaskdOutput Advance();
  // The signal whose answer `awaiting` waits for, for the current command.
  ::ProcessManageSignal BuildSignal(Phase awaiting) const;
  // Makes `command` the current one (its ranks and chips in `job`).
  void Take(const v1::Command& command, const v1::Job& job, const RankFaults& faults);
  // Any of the current command's ranks has an HCCL fault (a retry's).
  bool Hccl() const;
  ::ProcessManageSignal Signal(std::string_view type, std::string_view stage) const;
  void AddFaultRanks(::ProcessManageSignal* s) const;
  TaskdAck Done(bool success, std::string message);

  // The changeStrategy for `target` (ClusterD's name), its uuid under
  // `uuid_base` (the command's id).
  ::ProcessManageSignal ChangeStrategy(std::string_view uuid_base, std::string_view target) const;
  // The current command's end with TaskD's status `code` for `target`.
  TaskdOutput Finish(std::string_view target, int32_t code, const std::string& info);
  // The strategy MindIO must have offered for `target` (recover for both
  // recoveries, downgrade for elastic training).
  static std::string_view WireOf(std::string_view target);
  // The rung after a stop that leaves TaskD choosing: the strategy its next
  // command will ask for (recover after a PAUSE of POD_RESCHEDULE or the
  // STOP before a chip reset), else "".
  static std::string_view FollowUpOf(const v1::Command& command);
  // Whether TaskD accepts `target` now (after 406/499 only dump or exit).
  bool Refused(std::string_view target, std::string* why) const;
  // The signal awaited, sent again with its uuid: the output waits at most
  // MindIO's wait for its answer.
  TaskdOutput Resend();

  std::string job_id_;
  std::vector<std::string> strategies_;
  TaskdWaits waits_;
  v1::Job job_;  // as of the current command (its placement names pods)
  // A PAUSE (or the STOP before a chip reset) left TaskD choosing: the
  // command whose follow-up is due, and the strategy for it.
  struct Pending {
    v1::Command command;
    std::string target;
    bool sent = false;  // the changeStrategy went out early
  };
  std::optional<Pending> pending_;
  // The status TaskD gave to an early changeStrategy before the command
  // that waits for it came: (code, info).
  std::optional<std::pair<int32_t, std::string>> early_result_;
  // MindIO accepts only dump or exit (after 406/499 or a failed recovery);
  // and no dump after 499.
  bool only_dump_exit_ = false;
  bool no_dump_ = false;
  std::optional<std::vector<uint32_t>> scaled_in_;
  std::vector<uint32_t> isolating_;  // the ranks MindIO's 201 named
  uint64_t scale_outs_ = 0;          // for the upgrade signals' uuids
  std::string refusal_;              // why (for the failure's message)
  // The uuid prefix of the signals whose answers are the current
  // command's: its id, or the PAUSE's whose changeStrategy went out early.
  std::string answer_base_;
  // The current command's kind and ranks (its hit ranks, else its ranks).
  v1::JobCommand kind_ = v1::JOB_COMMAND_UNSPECIFIED;
  std::vector<uint32_t> ranks_;
  std::vector<std::string> offered_;
  std::vector<std::string> node_ranks_;  // of the current command's hit ranks
  std::vector<ResetRank> fault_chips_;   // the hit ranks and their chips
  RankFaults faults_;                    // of the current command's ranks
  Phase phase_ = Phase::kIdle;
  bool pre_exited_ = false;      // the current command's preExitProcess answered
  std::set<uint32_t> reported_;  // ranks TaskD reported process faults for
  std::optional<v1::Command> current_;
  ::ProcessManageSignal last_;  // the signal an answer is awaited for
};

}  // namespace clusterd::mindcluster
