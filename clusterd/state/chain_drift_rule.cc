// ChainDriftRule (state/rules.h): the software chain's version drift
// (chain_drift.h finds it) raised and cleared as faults of the reporter
// clusterd-chain.
#include <map>
#include <set>
#include <utility>

#include "clusterd/state/chain_drift.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/state/rules.h"
#include "common/logging.h"

namespace clusterd {

TimePoint ChainDriftRule::Advance(ClusterState& state, const WriterTick& tick) {
  const TimePoint now = tick.now;
  Mutation* m = tick.m;
  if (compared_ == state.chain_generation()) return TimePoint::max();
  if (now < due_) return due_;
  compared_ = state.chain_generation();
  due_ = now + std::chrono::seconds(1);
  // The versions each node's agent reported (OK links only).
  std::vector<NodeVersions> nodes;
  for (const auto& [name, n] : state.node_table().all()) {
    const v1::Node& node = n.record.node();
    NodeVersions v;
    v.node = name;
    if (!pool_label_.empty()) {
      auto it = node.labels().find(pool_label_);
      if (it != node.labels().end()) v.pool = it->second;
    } else if (node.inventory().devices_size() > 0) {
      v.pool = node.inventory().devices(0).model();
    }
    for (const auto& l : node.inventory().chain()) {
      if ((l.name() == "driver" || l.name() == "firmware" || l.name() == "cann") &&
          l.state() == v1::CHAIN_LINK_STATE_OK && !l.version().empty()) {
        v.versions[l.name()] = l.version();
      }
    }
    if (!v.versions.empty()) nodes.push_back(std::move(v));
  }
  // What ClusterD wants raised, by (node, external id).
  struct Wanted {
    const char* code;
    v1::FaultLevel level;
    std::string message;
  };
  std::map<std::pair<std::string, std::string>, Wanted> want;
  {
    std::vector<NodeVersions> pooled;
    for (const NodeVersions& v : nodes) {
      if (!v.pool.empty()) pooled.push_back(v);
    }
    for (DriftFinding& f : FindChainDrift(pooled)) {
      auto lit = levels_.find(f.pool);
      const v1::FaultLevel level = lit == levels_.end() ? v1::FAULT_LEVEL_SUB_HEALTH : lit->second;
      want.emplace(std::make_pair(f.node, f.node + "/" + f.link), Wanted{kChainDriftCode, level, f.Message()});
    }
  }
  // The nodes of one job that run different versions from each other
  // (external id "<node>/<link>@<job>").
  std::map<std::string, const NodeVersions*> by_name;
  for (const NodeVersions& v : nodes) by_name.emplace(v.node, &v);
  for (const auto& [id, job] : state.jobs()) {
    std::set<std::string> seen;
    std::vector<const NodeVersions*> of_job;
    for (const auto& p : job.placement()) {
      if (!seen.insert(p.node()).second) continue;
      if (auto it = by_name.find(p.node()); it != by_name.end()) of_job.push_back(it->second);
    }
    if (of_job.size() < 2) continue;
    for (DriftFinding& f : FindJobChainDrift(id, of_job)) {
      // Drift found only inside a tie (two nodes, two versions) is the
      // job's finding, not a node's fault: which side is wrong is not known,
      // and one node's agent must not mark the other node SubHealthy by
      // reporting a version of its own. Recorded at NOT_HANDLE (shown, the
      // nodes stay HEALTHY, nothing is put in Volcano's lists).
      const v1::FaultLevel level = f.tie ? v1::FAULT_LEVEL_NOT_HANDLE : v1::FAULT_LEVEL_SUB_HEALTH;
      want.emplace(std::make_pair(f.node, f.node + "/" + f.link + "@" + id),
                   Wanted{kChainDriftCode, level, f.Message()});
    }
  }
  // A driver and firmware the catalog's pair table says do not go together
  // (external id "<node>/firmware-pair"); a driver the table does not know is
  // not judged.
  for (const NodeVersions& v : nodes) {
    auto driver = v.versions.find("driver");
    auto firmware = v.versions.find("firmware");
    if (driver == v.versions.end() || firmware == v.versions.end()) continue;
    if (auto message = FirmwareMismatch(state.catalog(), driver->second, firmware->second)) {
      want.emplace(std::make_pair(v.node, v.node + "/firmware-pair"),
                   Wanted{kChainFirmwareCode, v1::FAULT_LEVEL_PRE_SEPARATE, std::move(*message)});
    }
  }
  auto report = [&](const std::string& node, const std::string& id, const char* code, v1::FaultLevel level,
                    v1::TransitionAction action, const std::string& message) {
    v1::ReportRequest r;
    r.set_reporter(kChainDriftReporter);
    r.set_id(id);
    r.set_node(node);
    r.set_code(code);
    r.set_level(level);
    r.set_action(action);
    r.set_message(message);
    if (auto st = state.ApplyReport(r, m); !st.ok()) {
      GetLogger("state")->warn("software chain {} on node {}: {}", code, node, st.status().ToString());
    }
  };
  // What is active and no longer wanted (or wanted at another level: a
  // pool's level changed) clears; what is wanted and not active is raised.
  std::map<std::pair<std::string, std::string>, v1::FaultLevel> active;
  std::vector<std::pair<std::pair<std::string, std::string>, std::string>> gone;  // key, code
  for (const auto& [node, count] : state.fault_table().nodes()) {
    for (const auto& [key, f] : state.fault_table().OfNode(node)) {
      if (f.reporter() != kChainDriftReporter || f.state() != v1::FAULT_STATE_ACTIVE) continue;
      auto k = std::make_pair(f.node(), f.external_id());
      active.emplace(k, f.level());
      auto w = want.find(k);
      if (w == want.end() || state.catalog().Resolve(w->second.code, w->second.level) != f.level()) {
        gone.emplace_back(k, f.code());
      }
    }
  }
  for (const auto& [k, code] : gone) {
    report(k.first, k.second, code.c_str(), v1::FAULT_LEVEL_SUB_HEALTH, v1::TRANSITION_ACTION_CLEAR,
           want.count(k) ? "its level changed" : "the versions agree again");
    active.erase(k);
  }
  for (const auto& [k, w] : want) {
    if (!active.count(k)) report(k.first, k.second, w.code, w.level, v1::TRANSITION_ACTION_RAISE, w.message);
  }
  return TimePoint::max();
}

}  // namespace clusterd
