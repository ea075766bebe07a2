// ClusterState: MindCluster public faults (pubfault.h). A public fault is an
// external fault per influenced node and device, under reporter
// "pubfault/<resource>" and the sender's faultId, with the level of the
// public-fault code table. "recover" keeps an occurrence visible for at
// least min_visible; "once" clears itself after it. Those delayed clears are
// stored on the fault (auto_clear_time), so a restart does not lose them.
#include "clusterd/cluster_state.h"
#include "common/time_proto.h"

namespace clusterd {

void ClusterState::CountPubFault(const v1::Fault& f, int delta) {
  if (f.source() != v1::FAULT_SOURCE_EXTERNAL || f.reporter().rfind(kPubFaultReporterPrefix, 0) != 0) return;
  if (delta > 0) {
    ++active_pubfaults_;
  } else if (active_pubfaults_ > 0) {
    --active_pubfaults_;
  }
}

StatusOr<ClusterState::PubFaultResult> ClusterState::ApplyPublicFaults(const PubFaultPlan& plan,
                                                                       const PubFaultOptions& options, Mutation* m) {
  PubFaultResult result;
  const TimePoint now = clock_->Now();
  // Serials are resolved through the nodes' "product-serial-number" label,
  // as MindCluster resolves them through the node annotation.
  std::map<std::string, std::string> by_serial;
  for (const auto& p : plan.faults) {
    if (!p.node_sn.empty()) {
      for (const auto& [name, n] : nodes_) {
        auto it = n.record.node().labels().find("product-serial-number");
        if (it != n.record.node().labels().end()) by_serial.emplace(it->second, name);
      }
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
    auto it =
        faults_.find(storage::FaultKey(node, p.device, v1::FAULT_SOURCE_EXTERNAL, plan.reporter + "/" + p.fault_id));
    if (it == faults_.end() || it->second.state() != v1::FAULT_STATE_ACTIVE) ++new_raises;
  }
  if (active_pubfaults_ + new_raises > options.max_faults) {
    return ResourceExhausted("public faults: " + std::to_string(active_pubfaults_) + " active, " +
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
    auto nit = nodes_.find(node);
    if (nit == nodes_.end()) {
      result.dropped.push_back("faultId " + p.fault_id + ": node " + node + " is not registered");
      continue;
    }
    NodeState& n = nit->second;
    const std::string key =
        storage::FaultKey(node, p.device, v1::FAULT_SOURCE_EXTERNAL, plan.reporter + "/" + p.fault_id);
    auto existing = faults_.find(key);
    const bool active = existing != faults_.end() && existing->second.state() == v1::FAULT_STATE_ACTIVE;
    auto set_auto_clear = [&](std::optional<TimePoint> when) {
      v1::Fault& f = faults_.at(key);
      if (f.has_auto_clear_time()) auto_clears_.erase({FromTimestamp(f.auto_clear_time()), key});
      if (when) {
        *f.mutable_auto_clear_time() = ToTimestamp(*when);
        auto_clears_.emplace(*when, key);
      } else if (!f.has_auto_clear_time()) {
        return;
      } else {
        f.clear_auto_clear_time();
      }
      PutFault(key, f, m);
    };
    if (p.assertion == PlannedPubFault::Assertion::kRecover) {
      if (!active) {
        ++result.applied;  // already gone: nothing to do
        continue;
      }
      const TimePoint visible_until = FromTimestamp(existing->second.activated_time()) + options.min_visible;
      if (now >= visible_until) {
        Clear(n, key, "recovered by " + plan.reporter, m);
      } else {
        set_auto_clear(visible_until);
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
    proposed.set_level(p.level);
    proposed.set_message(p.message);
    proposed.set_reporter(plan.reporter);
    proposed.set_external_id(p.fault_id);
    if (existing != faults_.end() && existing->second.code() != p.code) {
      result.dropped.push_back("faultId " + p.fault_id + " on " + node + ": was reported with code " +
                               existing->second.code());
      continue;
    }
    const v1::Fault& f = Raise(n, key, proposed, m);
    if (p.assertion == PlannedPubFault::Assertion::kOnce) {
      set_auto_clear(FromTimestamp(f.activated_time()) + options.min_visible);
    } else {
      set_auto_clear(std::nullopt);  // occurring again: a pending recover no longer applies
    }
    ++result.applied;
  }
  return result;
}

TimePoint ClusterState::ExpireAutoClears(TimePoint now, Mutation* m) {
  while (!auto_clears_.empty() && auto_clears_.begin()->first <= now) {
    const std::string key = auto_clears_.begin()->second;
    auto it = faults_.find(key);
    if (it == faults_.end() || it->second.state() != v1::FAULT_STATE_ACTIVE) {
      auto_clears_.erase(auto_clears_.begin());
      continue;
    }
    auto nit = nodes_.find(it->second.node());
    if (nit == nodes_.end()) {
      auto_clears_.erase(auto_clears_.begin());
      continue;
    }
    const std::string reason = "cleared by " + it->second.reporter() + " after its minimum visibility";
    Clear(nit->second, key, reason, m);  // erases the entry
  }
  return auto_clears_.empty() ? TimePoint::max() : auto_clears_.begin()->first;
}

}  // namespace clusterd
