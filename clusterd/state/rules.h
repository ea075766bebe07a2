// The writer's timed policies (state/writer_rule.h), each its own object
// owning its settings and what it keeps between runs. The composition root
// (clusterd/server/server.cc, MakeWriterRules) builds them from the config
// and hands the Engine the ordered list; docs/architecture.md lists it.
//
// Thread contract: settings before the Engine starts (or, where a method
// says so, on the writer thread); Advance and the observations on the
// writer thread with the state locked exclusively (writer_rule.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "clusterd/state/separation.h"
#include "clusterd/state/writer_rule.h"
#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd {

// Public faults due to clear themselves (state/public_faults.h: a fault
// asserted once stays visible for its minimum time, then clears, reason
// "cleared by <reporter> after its minimum visibility"). Keeps nothing: the
// due times are the fault records' own.
class AutoClearRule final : public WriterRule {
 public:
  std::string_view name() const override { return "auto-clear"; }
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override;
};

// The separation policy (state/separation.h, docs/recovery.md): counts each
// new fault above SUB_HEALTH on a chip, separates chips at the threshold and
// releases those fault-free long enough (DEVICE_SEPARATED / DEVICE_RELEASED
// events, actor clusterd). Attached to the state (ClusterState::Attach): it
// sees every fault change, rebuilds its counts from the device records at
// Load and keeps them in the device records (Device.separation_fault_times,
// separated, separated_time).
class SeparationRule final : public WriterRule {
 public:
  // MindCluster's defaults: 3 faults in 24 h, released after 48 h fault-free.
  SeparationRule() : SeparationRule(SeparationPolicy{}) {}
  explicit SeparationRule(const SeparationPolicy& policy) : tracker_(policy) {}

  std::string_view name() const override { return "separation"; }
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override;
  void Loaded(ClusterState& state) override;
  void FaultChanged(ClusterState& state, const v1::Fault& fault, bool raised, bool new_occurrence) override;

  // The policy from now on, on the writer thread (the "mindcluster"
  // integration's clusterd-config-cm): counts and separations are kept, the
  // next run applies the new window and release time. InvalidArgument
  // (nothing changed) for a policy out of bounds.
  Status ChangePolicy(const SeparationPolicy& policy);
  const SeparationPolicy& policy() const { return tracker_.policy(); }

  // Writer thread. An operator returns a separated device to service
  // (DEVICE_RELEASED event); a device that is not separated is answered
  // unchanged, without an event. NotFound for a node or device ClusterD does
  // not know; InvalidArgument for a request that does not validate.
  StatusOr<v1::Device> ReleaseDevice(ClusterState& state, const std::string& node, uint32_t device,
                                     const std::string& actor, const std::string& reason, Mutation* m);

 private:
  // Writes the tracker's record of the device into the device record
  // (counted faults, separation); the event's revision when `revision` is
  // set.
  v1::Device& Sync(ClusterState& state, const std::string& node, uint32_t device,
                   std::optional<uint64_t> revision = std::nullopt);
  void Emit(ClusterState& state, const v1::Device& d, bool separated, const std::string& actor,
            const std::string& reason, Mutation* m);

  SeparationTracker tracker_;
  // When Advance next has work, unless a fault changes it first.
  TimePoint due_ = TimePoint::min();
};

// An operator's device release (AdminService.ReleaseDevice, the
// integrations' ReleaseDevice), on the writer thread: the attached
// SeparationRule's ReleaseDevice; FailedPrecondition when none is attached.
StatusOr<v1::Device> ReleaseSeparatedDevice(ClusterState& state, const std::string& node, uint32_t device,
                                            const std::string& actor, const std::string& reason, Mutation* m);

// The software chain's version drift (state/chain_drift.h, docs/faults.md):
// after hellos changed a chain or a job changed (and once at start), at most
// once a second, CHAIN_VERSION_DRIFT (and CHAIN_FIRMWARE_MISMATCH) faults of
// the reporter clusterd-chain are raised on the nodes whose versions differ
// from their pool's majority (or their job's) and cleared where they no
// longer do.
class ChainDriftRule final : public WriterRule {
 public:
  // `pool_label`: the node label that names a node's pool; "": the model of
  // the node's first device. `levels`: CHAIN_VERSION_DRIFT's level per pool
  // (unlisted pools, and a job's nodes: SUB_HEALTH; a catalog entry for the
  // code wins over both).
  ChainDriftRule(std::string pool_label, std::map<std::string, v1::FaultLevel> levels)
      : pool_label_(std::move(pool_label)), levels_(std::move(levels)) {}
  ChainDriftRule() : ChainDriftRule("", {}) {}

  std::string_view name() const override { return "chain-drift"; }
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override;

 private:
  const std::string pool_label_;
  const std::map<std::string, v1::FaultLevel> levels_;
  // ClusterState::chain_generation when the drift was last compared; unset
  // at start (the first run compares).
  std::optional<uint64_t> compared_;
  TimePoint due_ = TimePoint::min();
};

// Repeat offenders (docs/recovery.md, "Repeat offenders"): a node whose
// faults started more than `max_recoveries` recoveries within `window`
// (counted from its last cordon or uncordon) is cordoned, actor clusterd,
// with a reason naming them. At most every 10 s. 0: off. The same window
// sets what GetNode reports as recoveries_caused (StateView).
class RepeatOffenderRule final : public WriterRule {
 public:
  RepeatOffenderRule(uint32_t max_recoveries, std::chrono::nanoseconds window)
      : max_(max_recoveries), window_(window) {}

  std::string_view name() const override { return "repeat-offenders"; }
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override;

 private:
  const uint32_t max_;
  const std::chrono::nanoseconds window_;
  TimePoint due_ = TimePoint::min();
};

}  // namespace clusterd
