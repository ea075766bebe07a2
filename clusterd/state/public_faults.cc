// ClusterState: public faults (public_faults.h), planned from MindCluster's
// PubFault. A public fault is an external fault per influenced node and device, under reporter
// "pubfault/<resource>" and the sender's faultId, with the level of the
// public-fault code table. "recover" keeps an occurrence visible for at
// least min_visible; "once" clears itself after it. Those delayed clears are
// stored on the fault (auto_clear_time), so a restart does not lose them.
#include "clusterd/state/cluster_state.h"
#include "clusterd/state/rules.h"
#include "common/time_proto.h"

namespace clusterd {
namespace {

// What a node's inventory holds, for a refusal: "its devices are 0-7".
std::string DevicesOf(const NodeState& n) {
  if (n.devices.empty()) return "it lists no device";
  const uint32_t first = n.devices.begin()->first;
  const uint32_t last = n.devices.rbegin()->first;
  if (last - first + 1 == n.devices.size()) {
    return "its devices are " + std::to_string(first) + (first == last ? "" : "-" + std::to_string(last));
  }
  std::string out = "its devices are";
  size_t listed = 0;
  for (const auto& [id, d] : n.devices) {
    if (++listed > 16) return out + ", ...";
    out += (listed == 1 ? " " : ", ") + std::to_string(id);
  }
  return out;
}

}  // namespace

StatusOr<ClusterState::PubFaultResult> ClusterState::ApplyPublicFaults(const PubFaultPlan& plan,
                                                                       const PubFaultOptions& options, Mutation* m) {
  PubFaultResult result;
  const TimePoint now = clock_->Now();
  // Serials are resolved through the nodes' "product-serial-number" label,
  // as MindCluster resolves them through the node annotation.
  std::map<std::string, std::string> by_serial;
  for (const auto& p : plan.faults) {
    if (!p.node_sn.empty()) {
      by_serial = nodes_.ByLabel("product-serial-number");
      break;
    }
  }
  // Room: raises of faults not active yet, counted before anything changes
  // so that a request is applied whole or refused whole.
  uint32_t new_raises = 0;
  for (const auto& p : plan.faults) {
    if (p.assertion == PlannedPubFault::Assertion::kRecover) continue;
    std::string node = p.node;
    if (node.empty()) {
      auto sn = by_serial.find(p.node_sn);
      if (sn == by_serial.end()) continue;  // dropped below
      node = sn->second;
    }
    const NodeState* n = nodes_.Find(node);
    if (!n || !n->devices.count(p.device)) continue;  // dropped below
    if (!faults_.IsActive(
            storage::FaultKey(node, p.device, v1::FAULT_SOURCE_EXTERNAL, plan.reporter + "/" + p.fault_id))) {
      ++new_raises;
    }
  }
  if (faults_.active_public() + new_raises > options.max_faults) {
    return ResourceExhausted("public faults: " + std::to_string(faults_.active_public()) + " active, " +
                             std::to_string(new_raises) + " more would pass max " + std::to_string(options.max_faults));
  }
  for (const auto& p : plan.faults) {
    std::string node = p.node;
    if (node.empty()) {
      auto sn = by_serial.find(p.node_sn);
      if (sn == by_serial.end()) {
        result.dropped.push_back("faultId " + p.fault_id + ": no node has serial " + p.node_sn);
        continue;
      }
      node = sn->second;
    }
    NodeState* n = nodes_.Find(node);
    if (!n) {
      result.dropped.push_back("faultId " + p.fault_id + ": node " + node + " is not registered");
      continue;
    }
    // A public fault names a device of the node's inventory: one it does not
    // have would appear as a device of its own and turn the node unhealthy.
    // (A recover may still clear one raised before this was checked.)
    if (p.assertion != PlannedPubFault::Assertion::kRecover && !n->devices.count(p.device)) {
      result.dropped.push_back("faultId " + p.fault_id + ": node " + node + " has no device " +
                               std::to_string(p.device) + " (" + DevicesOf(*n) + ")");
      continue;
    }
    const std::string key =
        storage::FaultKey(node, p.device, v1::FAULT_SOURCE_EXTERNAL, plan.reporter + "/" + p.fault_id);
    const v1::Fault* existing = faults_.Find(key);
    const bool active = existing && existing->state() == v1::FAULT_STATE_ACTIVE;
    if (p.assertion == PlannedPubFault::Assertion::kRecover) {
      if (!active) {
        ++result.applied;  // already gone: nothing to do
        continue;
      }
      const TimePoint visible_until = FromTimestamp(existing->activated_time()) + options.min_visible;
      if (now >= visible_until) {
        Clear(*n, key, "recovered by " + plan.reporter, m);
      } else {
        faults_.SetAutoClear(key, visible_until, m);
      }
      ++result.applied;
      continue;
    }
    if (!active) {
      Status room = CheckFaultRoom(node, key, /*external=*/true);
      if (!room.ok()) {
        result.dropped.push_back("faultId " + p.fault_id + " on " + node + ": " + room.message());
        continue;
      }
    }
    v1::Fault proposed;
    proposed.set_node(node);
    proposed.set_device_id(p.device);
    proposed.set_source(v1::FAULT_SOURCE_EXTERNAL);
    proposed.set_code(p.code);
    SetReportedLevel(p.code, p.level, /*reporter_decides=*/true, &proposed);  // public faults name their level
    proposed.set_message(p.message);
    proposed.set_reporter(plan.reporter);
    proposed.set_external_id(p.fault_id);
    if (existing && existing->code() != p.code) {
      result.dropped.push_back("faultId " + p.fault_id + " on " + node + ": was reported with code " +
                               existing->code());
      continue;
    }
    const v1::Fault& f = Raise(*n, key, proposed, m);
    if (p.assertion == PlannedPubFault::Assertion::kOnce) {
      faults_.SetAutoClear(key, FromTimestamp(f.activated_time()) + options.min_visible, m);
    } else {
      faults_.SetAutoClear(key, std::nullopt, m);  // occurring again: a pending recover no longer applies
    }
    ++result.applied;
  }
  return result;
}

TimePoint AutoClearRule::Advance(ClusterState& state, const WriterTick& tick) {
  while (auto key = state.DueAutoClear(tick.now)) {
    const v1::Fault& f = *state.fault_table().Find(*key);
    state.ClearFault(*key, "cleared by " + f.reporter() + " after its minimum visibility", tick.m);
  }
  return state.NextAutoClear();
}

}  // namespace clusterd
