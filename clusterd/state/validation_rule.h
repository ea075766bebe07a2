// Return to service, proven (docs/validation.md): a WriterRule (writer_rule.h)
// that validates an isolated or separated device or node before it returns.
//
//   isolated / separated --(faults cleared | separation due | operator)-->
//   VALIDATING (queued, then asked of the node's agent) --pass--> in service
//                                                       --fail--> isolated again, counted
//   counted flaps (failures, returns that faulted again) reach the limit
//   within the window --> HELD (out until an operator releases it with force)
//
// While VALIDATING or HELD the target keeps its isolation, separation and
// cordon, so every scheduler path keeps it out (Volcano's lists, the
// fallback taint, DRA, the cordon). A pass lifts them through the existing
// release paths (ClusterState::ApplyCordon for a node, the device's
// isolation and ReleaseSeparatedDevice for a device).
//
// Records: each validation under the meta key "validation/<id>" (schema.h),
// written with the group that decided it; the target's phase, flaps and
// hold in its Device / Node record. In flight and queued validations are
// rebuilt at Load and asked again with the same id (the agent runs an id
// once).
//
// Thread contract: as every WriterRule, on the writer thread with the
// state's lock held exclusively; List and History may run under the
// state's shared lock (ClusterState::Read) on any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "clusterd/state/agent_outbox.h"
#include "clusterd/state/writer_rule.h"
#include "clusterd/v1/agent.pb.h"
#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd {

class Counter;
class Gauge;
class Histogram;

struct ValidationOptions {
  bool enabled = false;
  uint32_t max_per_node = 1;
  uint32_t max_in_flight = 64;
  std::chrono::nanoseconds timeout = std::chrono::minutes(10);
  std::chrono::nanoseconds stable_window = std::chrono::minutes(1);
  bool commands = true;
  uint32_t flap_limit = 3;
  std::chrono::nanoseconds flap_window = std::chrono::hours(24);
  uint32_t retention = 1000;
};

// Bounds of options read from configuration; InvalidArgument naming the
// field otherwise.
Status ValidateValidationOptions(const ValidationOptions& o);

// The metrics the rule keeps (all optional).
struct ValidationMetrics {
  Counter* started = nullptr;
  Counter* passed = nullptr;
  Counter* failed = nullptr;
  Counter* skipped = nullptr;
  Counter* flaps = nullptr;
  Counter* held = nullptr;
  Counter* results_refused = nullptr;
  Gauge* in_flight = nullptr;
  Gauge* queued = nullptr;
  Gauge* held_now = nullptr;
  // Seconds from the trigger (fault clear, separation due, the operator's
  // release) to back in service.
  Histogram* return_seconds = nullptr;
};

class ValidationRule final : public WriterRule {
 public:
  // The meta key prefix of the records (docs/storage.md).
  static constexpr std::string_view kKeyPrefix = "validation/";
  // Per check of a result: evidence kept at most (its tail), checks kept.
  static constexpr size_t kMaxEvidenceBytes = size_t{16} * 1024;
  static constexpr size_t kMaxChecks = 8;

  explicit ValidationRule(ValidationOptions options, AgentOutbox* outbox = nullptr)
      : options_(options), outbox_(outbox) {}

  std::string_view name() const override { return "validation"; }
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override;
  void Loaded(ClusterState& state) override;
  void FaultChanged(ClusterState& state, const v1::Fault& fault, bool raised, bool new_occurrence) override;

  bool enabled() const { return options_.enabled; }
  const ValidationOptions& options() const { return options_; }
  // Before the Engine starts.
  void set_metrics(const ValidationMetrics& metrics) { metrics_ = metrics; }
  void set_outbox(AgentOutbox* outbox) { outbox_ = outbox; }

  // ---- writer thread ----
  // Queues a validation of a device (or the whole node, device unset):
  // VALIDATING from now on. A target already validating is answered with
  // its validation. NotFound for a target ClusterD does not know;
  // FailedPrecondition when held (release it with force) or off.
  StatusOr<v1::Validation> Start(ClusterState& state, const std::string& node, std::optional<uint32_t> device,
                                 const std::string& trigger, const std::string& actor, const std::string& reason,
                                 Mutation* m);
  // An operator returns the target without its validation (force): its
  // validation (one is recorded when none ran) ends SKIPPED, the hold and
  // flaps are cleared, isolation, separation and (a node) cordon lifted.
  StatusOr<v1::Validation> Skip(ClusterState& state, const std::string& node, std::optional<uint32_t> device,
                                const std::string& actor, const std::string& reason, Mutation* m);
  // An operator holds the target out (HELD, isolated).
  Status Hold(ClusterState& state, const std::string& node, std::optional<uint32_t> device, const std::string& actor,
              const std::string& reason, Mutation* m);
  // The answer of `node`'s agent. PermissionDenied (nothing changed,
  // counted) for a validation of another node; NotFound for an unknown id;
  // a result for a validation no longer running is answered unchanged.
  StatusOr<v1::Validation> ApplyResult(ClusterState& state, const std::string& node, const v1::ValidationResult& r,
                                       Mutation* m);
  // The separation policy's release is due (SeparationRule): false while
  // validation is on; a validation is queued instead (its pass releases the
  // device), unless one runs, the device is held, or it failed less than
  // flap_window / flap_limit ago.
  bool SeparationReleaseAllowed(ClusterState& state, const std::string& node, uint32_t device, TimePoint now,
                                Mutation* m);
  // An operator's release with force cleared the target (UncordonNode,
  // ReleaseDevice): its validation is cancelled, hold and phase cleared.
  void Forget(ClusterState& state, const std::string& node, std::optional<uint32_t> device, const std::string& actor,
              Mutation* m);

  // ---- any thread, the state's lock held shared ----
  StatusOr<v1::ListValidationsResponse> List(const v1::ListValidationsRequest& req) const;
  // The target's validations, newest first, at most `limit`.
  std::vector<v1::Validation> History(const std::string& node, std::optional<uint32_t> device, size_t limit) const;
  size_t size() const { return records_.size(); }

 private:
  struct Target {
    std::string node;
    std::optional<uint32_t> device;
    auto operator<=>(const Target&) const = default;
  };
  static Target TargetOf(const v1::Validation& v);
  // The phase fields of the target (the Device, or the Node record).
  bool SetPhase(ClusterState& state, const Target& t, v1::ServicePhase phase, const std::string& validation_id,
                const std::string& hold_reason = "");
  // Adds a flap at `now`; true when the target is held by it.
  bool CountFlap(ClusterState& state, const Target& t, TimePoint now, const std::string& why, Mutation* m);
  void Put(ClusterState& state, v1::Validation& v, Mutation* m, std::optional<v1::EventType> event);
  v1::Validation* Find(const std::string& id);
  void Finish(ClusterState& state, v1::Validation& v, v1::ValidationState outcome, const std::string& message,
              TimePoint now, Mutation* m);
  void ReturnToService(ClusterState& state, const v1::Validation& v, const std::string& actor,
                       const std::string& reason, Mutation* m);
  // A NODE_UPDATED event carrying the node as answered; the target's
  // record takes its revision.
  static void EmitTargetUpdated(ClusterState& state, const Target& t, const std::string& actor,
                                const std::string& reason, const std::string& message, Mutation* m);
  v1::ValidationRequest RequestOf(const v1::Validation& v) const;
  // Whether the target's hardware has a fault that keeps it out.
  static bool StillFaulty(ClusterState& state, const Target& t);
  static bool IsOut(ClusterState& state, const Target& t);
  void UpdateGauges();

  ValidationOptions options_;
  AgentOutbox* outbox_;
  ValidationMetrics metrics_;
  uint64_t next_seq_ = 1;
  std::map<uint64_t, v1::Validation> records_;    // by sequence (the id's number), oldest first
  std::map<std::string, uint64_t> by_id_;         // id -> sequence
  std::map<Target, uint64_t> open_;               // the target's queued or running validation
  std::map<std::string, uint64_t> sent_session_;  // running id -> the agent session it was sent to
  std::set<Target> candidates_;                   // a fault of the target cleared: check at the next run
  std::set<Target> refaulted_;                    // returned, then a new fault: a flap at the next run
  // Trigger time of each open validation (fault clear ...), for the
  // return-to-service histogram.
  std::map<std::string, TimePoint> triggered_;
  size_t running_ = 0;
  size_t held_count_ = 0;
  TimePoint due_ = TimePoint::min();
};

}  // namespace clusterd
