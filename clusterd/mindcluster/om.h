// MindCluster's operations on a running job through TaskD (docs/mindcluster.md,
// "NIC switch and stress test"): the Recover service's NIC switch (an
// operator moves ranks' traffic to the backup NIC plane: SwitchNicTrack) and
// online stress test (AIC and P2P load on a job's chips: StressTest). The
// reference calls them "OM" (operation and maintenance) and runs each as one
// exchange with TaskD, one at a time per job and never during a recovery:
//
//   operator          ClusterD                          TaskD (MindIO)
//   SwitchNicTrack -> checks (413, 411), stored
//                     stopTrain [pause_train]       ->  pauses training
//                                                   <-  ReportStopComplete
//                     SwitchRankList (notify stream)->  switches the NICs
//                                                   <-  ReplySwitchNicResult
//                     changeStrategy "continue"     ->  trains on
//                                                   <-  ReportRecoverStatus 0
//   (its stream)   <- "switch nic finish"
//
// The stress test is the same with StressTestRankParams (rank -> ops) on
// its notify stream, pauseStartAgent before it and continueStartAgent after
// TaskD's ReplyStressTestResult, whose per-chip codes decide: "2" (the test
// found a fault) makes the chip a SEPARATE fault of the reporter
// "stresstest" (the coordinator takes it out: the pods move, the chip is
// isolated; the reference marks the whole node unhealthy), "3" (the test
// timed out) and "4" (the voltage did not recover) a RESTART_NPU fault (a
// chip reset and the job's processes restart there; the reference restarts
// the rank), "1" (the test could not run) none. Any of them ends the
// operation without the continue: the recovery the faults start stops the
// job instead, as the reference's stopTrain does.
//
// A step that fails (TaskD's pause fails, the switch fails, TaskD reports an
// unrecoverable error, its continue fails) or whose wait runs out (the
// reference's 15 minutes) ends the operation failed: the job is left paused
// with its links in an unknown state, so the operation's ranks get a process
// fault of the reporter "taskd" (RESTART_BUSINESS, TASKD_OM_FAILED), which
// the coordinator recovers through TaskD like any process fault and clears
// when that succeeds (the reference stops the job and recovers it, or kills
// it when the pause fails).
//
// Each change is stored (OmJobRecord, the meta column family) before the
// signals it sends go out, so a restarted ClusterD knows the operation and
// goes on: the signal awaited is sent again with its uuid when TaskD
// subscribes again, and its wait ends at the stored deadline.
//
// Pure: no gRPC, no clock, no threads; the adapter (grpc/recover_service.cc)
// serializes calls, stores records and delivers what they return.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/mindcluster/taskd.h"
#include "clusterd/storage/v1/storage.pb.h"
#include "clusterd/v1/fault.pb.h"
#include "clusterd/v1/job.pb.h"
#include "mindcluster/recover.pb.h"

namespace clusterd::mindcluster {

// The reference's codes for an operator's request.
inline constexpr int32_t kOmIsRunning = 411;     // another operation or a recovery is under way
inline constexpr int32_t kOmParamInvalid = 413;  // the request does not fit the job

inline constexpr std::string_view kOmNicSwitch = "nic-switch";
inline constexpr std::string_view kOmStressTest = "stress-test";
// Stages (OmOperation.stage).
inline constexpr std::string_view kOmAwaitPause = "await-pause";
inline constexpr std::string_view kOmAwaitResult = "await-result";
inline constexpr std::string_view kOmAwaitContinue = "await-continue";
inline constexpr std::string_view kOmSucceeded = "succeeded";
inline constexpr std::string_view kOmFailed = "failed";

// The reference's signals and actions of these flows.
inline constexpr std::string_view kActionPauseTrain = "pause_train";
inline constexpr std::string_view kSignalPauseStartAgent = "pauseStartAgent";
inline constexpr std::string_view kActionPauseStartAgent = "pause_start_agent";
inline constexpr std::string_view kSignalContinueStartAgent = "continueStartAgent";
inline constexpr std::string_view kActionContinueStartAgent = "continue_start_agent";
inline constexpr std::string_view kStrategyContinue = "continue";
// The pause before a stress test carries this timeout (s): MindIO waits
// that long for what follows instead of its usual wait.
inline constexpr int64_t kStressTestPauseTimeoutS = 15 * 60;
// The reference's wait for each of TaskD's answers.
inline constexpr int64_t kOmWaitS = 15 * 60;

// The stress test's operations (StressOpList.ops) and per-chip codes
// (StressTestOpResult.code).
inline constexpr int64_t kStressOpAic = 0;
inline constexpr int64_t kStressOpP2p = 1;
inline constexpr std::string_view kStressOk = "0";
inline constexpr std::string_view kStressExecFailed = "1";
inline constexpr std::string_view kStressFoundFault = "2";
inline constexpr std::string_view kStressTimedOut = "3";
inline constexpr std::string_view kStressVoltageNotRecovered = "4";
// The faults a stress test raises (reporter "stresstest", id
// "<node>/<device>": one per chip, the worst of its results).
inline constexpr std::string_view kStressTestReporter = "stresstest";
inline constexpr std::string_view kCodeStressTestFault = "STRESS_TEST_FAULT";      // SEPARATE
inline constexpr std::string_view kCodeStressTestTimeout = "STRESS_TEST_TIMEOUT";  // RESTART_NPU
inline constexpr std::string_view kCodeStressTestVoltage = "STRESS_TEST_VOLTAGE";  // RESTART_NPU
inline constexpr std::string_view kCodeOmFailed = "TASKD_OM_FAILED";               // RESTART_BUSINESS

// Operations finished kept per job (OmJobRecord.history).
inline constexpr int kOmHistory = 16;
// Bounds on what a request or reply may name (beyond: 413 / 499).
inline constexpr size_t kOmMaxEntries = 131072;

// An operator's request checked against the job as ClusterD knows it, as
// the reference checks it: code kRecoverOk and the operation (id, stage and
// times left to OmFlow::Start), or kOmParamInvalid / kOmIsRunning / 499 and
// why. `job` nullptr: no such job; `registered`: TaskD registered for it.
struct OmCheck {
  int32_t code = 0;
  std::string info;
  storage::v1::OmOperation op;
};
// SwitchNicTrack: each node of nicOps holds ranks of the job, dev and op
// lists of equal, non-zero length, each dev a chip of the job on that node;
// the ranks of those chips, in order, with their ops.
OmCheck CheckSwitchNics(const ::SwitchNics& req, const v1::Job* job, bool registered);
// StressTest: allNodesOps (every rank of the job) or stressParam (every rank
// of each node named); ops 0 (AIC) or 1 (P2P), none repeated.
OmCheck CheckStressTest(const ::StressTestParam& req, const v1::Job* job, bool registered);

// What one input produces.
struct OmOutput {
  // On TaskD's SubscribeProcessManageSignal stream, in order.
  std::vector<::ProcessManageSignal> signals;
  // On TaskD's notify stream of the operation's kind.
  std::optional<::SwitchRankList> switch_ranks;
  std::optional<::StressTestRankParams> stress_ranks;
  // New messages for the operator's stream (also in the record); `finished`:
  // the operation ended with the last of them.
  std::vector<std::string> messages;
  bool finished = false;
  // Faults to raise (stress-test chips; the ranks of a failed operation).
  std::vector<v1::ReportRequest> faults;
  // reset-config-<job>: FaultFlushing while the chips are under test,
  // cleared with the result (the reference's marks).
  ResetOp reset = ResetOp::kNone;
  // The record changed: store it before anything above goes out.
  bool changed = false;
  // The reply to TaskD's report.
  int32_t code = 0;
  std::string info;
  // Call Expire(token) after this long (the stage's wait); 0: none.
  int64_t expire_after_ms = 0;
  std::string expire_token;
};

// One job's operations. Not thread-safe: the adapter serializes.
class OmFlow {
 public:
  // `record` as stored (empty for a job with none); `wait_ms`: how long each
  // of TaskD's answers is waited for.
  OmFlow(storage::v1::OmJobRecord record, int64_t wait_ms);

  const storage::v1::OmJobRecord& record() const { return record_; }
  // An operation is in flight.
  bool busy() const { return record_.has_current(); }
  // TaskD's ReportStopComplete / ReportRecoverStatus are this flow's (else
  // the recovery protocol's).
  bool TakesStopComplete() const { return busy() && record_.current().stage() == kOmAwaitPause; }
  bool TakesRecoverStatus() const {
    return busy() && (record_.current().stage() == kOmAwaitResult || record_.current().stage() == kOmAwaitContinue);
  }

  // Starts `op` (checked): its id, the pause. Only when not busy.
  OmOutput Start(storage::v1::OmOperation op, const std::string& actor, int64_t now_ms);
  OmOutput OnStopComplete(const ::StopCompleteRequest& req, const v1::Job& job, int64_t now_ms);
  OmOutput OnSwitchResult(const ::SwitchResult& req, const v1::Job& job, int64_t now_ms);
  OmOutput OnStressResult(const ::StressTestResult& req, const v1::Job& job, int64_t now_ms);
  OmOutput OnRecoverStatus(const ::RecoverStatusRequest& req, const v1::Job& job, int64_t now_ms);
  // The stage's wait ran out (a stale token changes nothing).
  OmOutput Expire(std::string_view token, const v1::Job& job, int64_t now_ms);
  // A recovery of the job took over (the coordinator sent TaskD a command):
  // the operation ends failed, raising nothing (the recovery handles it).
  OmOutput Abandon(const std::string& why, int64_t now_ms);
  // TaskD subscribed again (or ClusterD restarted): the signal the stage
  // waits for, again with its uuid, and the wait until the stored deadline.
  OmOutput Resend(int64_t now_ms) const;
  // The notify message of the stage awaiting TaskD's result, if any.
  OmOutput ResendNotify() const;

  // The stage's expiry token.
  std::string Token() const;

 private:
  storage::v1::OmOperation& op() { return *record_.mutable_current(); }
  const storage::v1::OmOperation& op() const { return record_.current(); }
  bool IsNic() const { return op().kind() == kOmNicSwitch; }
  ::ProcessManageSignal Signal(std::string_view type, std::string_view action, std::string_view stage) const;
  ::ProcessManageSignal PauseSignal() const;
  ::ProcessManageSignal ContinueSignal() const;
  void Notify(OmOutput* out) const;
  // Moves to `stage` with a fresh wait.
  void Enter(std::string_view stage, int64_t now_ms, OmOutput* out);
  void Say(std::string msg, OmOutput* out);
  // Ends the operation; `raise_ranks`: the job is left paused, its ranks get
  // TASKD_OM_FAILED.
  void Finish(bool ok, std::string msg, bool raise_ranks, const v1::Job* job, int64_t now_ms, OmOutput* out);
  std::vector<std::string> Ranks() const;

  storage::v1::OmJobRecord record_;
  int64_t wait_ms_;
};

}  // namespace clusterd::mindcluster
