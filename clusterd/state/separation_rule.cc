// SeparationRule (state/rules.h): the separation policy on the writer's
// schedule; the tracker (state/separation.h) decides, this keeps its record
// in the device records and emits the events.
#include <algorithm>
#include <set>

#include <google/protobuf/util/message_differencer.h>

#include "clusterd/state/cluster_state.h"
#include "clusterd/state/rules.h"
#include "clusterd/state/validation_rule.h"
#include "common/logging.h"
#include "common/time_proto.h"

namespace clusterd {

void SeparationRule::Loaded(ClusterState& state) {
  // The policy's state, as the device records keep it.
  for (const auto& [name, n] : state.node_table().all()) {
    for (const auto& [id, d] : n.devices) {
      if (!d.separated() && d.separation_fault_times().empty()) continue;
      SeparationTracker::ChipRecord r;
      for (const auto& t : d.separation_fault_times()) r.counted.push_back(FromTimestamp(t));
      if (d.separated()) {
        r.separated_since = FromTimestamp(d.separated_time());
        r.last_fault = FromTimestamp(d.last_fault_time());
      }
      tracker_.Restore({name, id}, r);
    }
  }
  due_ = TimePoint::min();
}

void SeparationRule::FaultChanged(ClusterState& state, const v1::Fault& f, bool raised, bool new_occurrence) {
  // Cleared, or raised as a new occurrence: what the policy sees of a
  // device's faults (a refresh of an active fault is not).
  if (raised && !new_occurrence) return;
  if (!f.has_device_id() || !BlamesHardware(f)) return;  // a job's restart-only fault: not the chip's
  const ChipRef chip{f.node(), f.device_id()};
  const TimePoint now = state.Now();
  if (tracker_.Separated(chip)) {
    // Raised or cleared: the fault-free time starts again from now.
    tracker_.StillFaulty(chip, now);
    Sync(state, f.node(), f.device_id());
    return;
  }
  // A new occurrence above SUB_HEALTH counts (after its settle time).
  if (!raised || f.level() <= v1::FAULT_LEVEL_SUB_HEALTH || !tracker_.policy().enabled) return;
  const std::vector<std::string> jobs = state.JobsHitBy(f);
  tracker_.Observe(chip, f.code(), jobs.empty() ? "" : jobs.front(), now);
  due_ = std::min(due_, now + tracker_.policy().settle);
}

v1::Device& SeparationRule::Sync(ClusterState& state, const std::string& node, uint32_t device,
                                 std::optional<uint64_t> revision) {
  const SeparationTracker::ChipRecord r = tracker_.RecordOf({node, device});
  v1::Device& d = *state.MutableDevice(node, device);  // callers checked the node
  const v1::Device before = d;
  d.clear_separation_fault_times();
  for (TimePoint t : r.counted) *d.add_separation_fault_times() = ToTimestamp(t);
  d.set_separated(r.separated_since.has_value());
  if (r.separated_since) {
    *d.mutable_separated_time() = ToTimestamp(*r.separated_since);
    *d.mutable_last_fault_time() = ToTimestamp(r.last_fault);
  } else {
    d.clear_separated_time();
    d.clear_last_fault_time();
    d.clear_separation_reason();
  }
  if (revision) d.set_revision(*revision);
  if (!google::protobuf::util::MessageDifferencer::Equals(before, d)) state.DeviceChanged(d);
  return d;
}

void SeparationRule::Emit(ClusterState& state, const v1::Device& d, bool separated, const std::string& actor,
                          const std::string& reason, Mutation* m) {
  v1::Event ev;
  ev.set_type(separated ? v1::EVENT_TYPE_DEVICE_SEPARATED : v1::EVENT_TYPE_DEVICE_RELEASED);
  ev.set_revision(d.revision());
  ev.set_node(d.node());
  ev.set_device_id(d.id());
  ev.set_actor(actor);
  ev.set_reason(reason);
  ev.set_message("device " + std::to_string(d.id()) + (separated ? " separated: " : " released: ") + reason);
  *ev.mutable_device_info() = d;
  state.Emit(m, std::move(ev));
}

Status SeparationRule::ChangePolicy(const SeparationPolicy& policy) {
  CLUSTERD_RETURN_IF_ERROR(ValidateSeparationPolicy(policy));
  tracker_.SetPolicy(policy);
  due_ = TimePoint::min();  // the next run applies it
  return Status::Ok();
}

TimePoint SeparationRule::Advance(ClusterState& state, const WriterTick& tick) {
  const TimePoint now = tick.now;
  if (now < due_) return due_;
  // A separated device with an active fault is not fault-free yet.
  for (const ChipRef& chip : tracker_.SeparatedChips()) {
    const NodeState* n = state.node_table().Find(chip.node);
    if (!n) continue;
    auto dit = n->devices.find(chip.device);
    if (dit != n->devices.end() && dit->second.active_faults() > 0) tracker_.StillFaulty(chip, now);
  }
  std::set<ChipRef> recounted;
  // The release waits for a healthy software chain (release_chain_check).
  // With validation on (state/validation_rule.h), a due release becomes a
  // validation whose pass releases the device.
  ValidationRule* validation = state.Attached<ValidationRule>();
  auto may_release = [&state, &tick, validation](const ChipRef& chip) {
    if (!state.ChainAllowsRelease(chip.node, true).ok()) return false;
    return validation == nullptr ||
           validation->SeparationReleaseAllowed(state, chip.node, chip.device, tick.now, tick.m);
  };
  const std::vector<SeparationTracker::Change> changes = tracker_.Advance(now, &recounted, may_release);
  for (const auto& change : changes) {
    if (change.deferred) {
      const Status chain = state.ChainAllowsRelease(change.chip.node, true);
      GetLogger("state")->warn("node {} device {}: release ({}) waits: {}", change.chip.node, change.chip.device,
                               change.reason, chain.ok() ? "for its validation (docs/validation.md)" : chain.message());
      continue;
    }
    recounted.erase(change.chip);
    if (!state.node_table().Find(change.chip.node)) continue;
    v1::Device& d = Sync(state, change.chip.node, change.chip.device, state.NextRevision());
    if (change.separated) d.set_separation_reason(change.reason);
    GetLogger("state")->warn("node {} device {} {}: {}", change.chip.node, d.id(),
                             change.separated ? "separated" : "released", change.reason);
    Emit(state, d, change.separated, "clusterd", change.reason, tick.m);
  }
  for (const ChipRef& chip : recounted) {
    if (state.node_table().Find(chip.node)) Sync(state, chip.node, chip.device);
  }
  due_ = tracker_.NextDue();
  return due_;
}

StatusOr<v1::Device> SeparationRule::ReleaseDevice(ClusterState& state, const std::string& node, uint32_t device,
                                                   const std::string& actor, const std::string& reason, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateReleaseDevice(node, actor, reason));
  const NodeState* n = state.node_table().Find(node);
  if (!n) return NotFound("node " + node + " is not registered");
  auto dit = n->devices.find(device);
  if (dit == n->devices.end()) return NotFound("node " + node + " has no device " + std::to_string(device));
  if (!tracker_.Separated({node, device})) return dit->second;
  CLUSTERD_RETURN_IF_ERROR(tracker_.Release({node, device}));
  v1::Device& d = Sync(state, node, device, state.NextRevision());
  GetLogger("state")->info("node {} device {} released by {}: {}", node, device, actor, reason);
  Emit(state, d, false, actor, reason, m);
  due_ = TimePoint::min();
  return d;
}

StatusOr<v1::Device> ReleaseSeparatedDevice(ClusterState& state, const std::string& node, uint32_t device,
                                            const std::string& actor, const std::string& reason, Mutation* m) {
  SeparationRule* rule = state.Attached<SeparationRule>();
  if (rule == nullptr) return FailedPrecondition("no separation policy runs in this ClusterD");
  return rule->ReleaseDevice(state, node, device, actor, reason, m);
}

}  // namespace clusterd
