// Repeat offenders: the recoveries each node's faults caused (GetNode's
// recoveries_caused and mean time between them), and the policy that
// cordons a node that caused too many (RepeatOffenderRule, state/rules.h;
// docs/recovery.md, "Repeat offenders").
#include <algorithm>

#include "clusterd/state/cluster_state.h"
#include "clusterd/state/rules.h"
#include "common/time_proto.h"

namespace clusterd {

std::map<std::string, StateView::Caused> StateView::RecoveriesByNode(
    TimePoint now, Duration window, const std::function<TimePoint(const std::string&)>& since) const {
  std::map<std::string, Caused> out;
  const TimePoint from = now - window;
  // Oldest first: ids are "<job>.<n>", so order by creation time.
  std::vector<std::pair<TimePoint, const v1::Recovery*>> recent;
  for (const auto& [id, r] : recoveries_.all()) {
    if (r.state() == v1::RECOVERY_STATE_DRY_RUN || !r.has_create_time()) continue;
    const TimePoint created = FromTimestamp(r.create_time());
    if (created >= from && created <= now) recent.emplace_back(created, &r);
  }
  std::sort(recent.begin(), recent.end(), [](const auto& a, const auto& b) {
    return a.first < b.first || (a.first == b.first && a.second->id() < b.second->id());
  });
  for (const auto& [created, r] : recent) {
    std::set<std::string> nodes;  // a recovery counts once per node
    for (const auto& fid : r->trigger_fault_ids()) {
      const v1::Fault* f = faults_.FindById(fid);
      // A job's own findings (its hang, its TaskD's process faults) are not
      // its node's: a job that hangs again and again must not get a node
      // cordoned for every other job on it.
      if (f != nullptr && !IsJobReporter(f->reporter())) nodes.insert(f->node());
    }
    for (const auto& node : nodes) {
      if (since && created <= since(node)) continue;
      Caused& c = out[node];
      c.ids.push_back(r->id());
      c.times.push_back(created);
    }
  }
  return out;
}

TimePoint RepeatOffenderRule::Advance(ClusterState& state, const WriterTick& tick) {
  const TimePoint now = tick.now;
  if (max_ == 0) return TimePoint::max();
  if (now < due_) return due_;
  due_ = now + std::chrono::seconds(10);
  // Counted from the node's last cordon or uncordon: an operator who
  // returns a node to service after inspecting it starts its count again.
  auto since = [&state](const std::string& node) {
    const v1::Node* n = state.FindNode(node);
    if (!n || !n->has_cordon_changed_time()) return TimePoint::min();
    return FromTimestamp(n->cordon_changed_time());
  };
  for (const auto& [node, caused] : state.RecoveriesByNode(now, window_, since)) {
    if (caused.ids.size() <= max_) continue;
    const v1::Node* n = state.FindNode(node);
    if (!n || n->cordoned()) continue;
    std::string ids;
    for (size_t i = 0; i < caused.ids.size() && i < 8; ++i) ids += (i ? ", " : "") + caused.ids[i];
    if (caused.ids.size() > 8) ids += ", ...";
    const auto hours = std::chrono::duration_cast<std::chrono::minutes>(window_).count() / 60.0;
    char window[32];
    std::snprintf(window, sizeof window, "%g h", hours);
    const std::string reason = "repeat offender: its faults started " + std::to_string(caused.ids.size()) +
                               " recoveries in the last " + window + " (more than " + std::to_string(max_) +
                               "): " + ids + "; inspect the node, then uncordon it";
    if (auto st = state.ApplyCordon(node, true, "clusterd", reason, tick.m); !st.ok()) continue;
  }
  return due_;
}

}  // namespace clusterd
