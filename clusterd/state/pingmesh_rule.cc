// PingmeshRule (state/pingmesh_rule.h).
#include "clusterd/state/pingmesh_rule.h"

#include <algorithm>
#include <set>

#include "clusterd/state/cluster_state.h"
#include "common/logging.h"

namespace clusterd {
namespace {

constexpr char kNodeId[] = "pingmesh/node";
constexpr char kLinkPrefix[] = "pingmesh/link/";
constexpr char kDomainPrefix[] = "pingmesh/domain/";

std::string Percent(double share) { return std::to_string(static_cast<int>(share * 100 + 0.5)) + "%"; }

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

Status ValidatePingmeshPolicy(const PingmeshPolicy& policy) {
  if (policy.window < std::chrono::seconds(1) || policy.window > std::chrono::hours(1)) {
    return InvalidArgument("pingmesh window must be 1s..1h");
  }
  if (policy.raise_after < 1 || policy.raise_after > 100 || policy.clear_after < 1 || policy.clear_after > 100) {
    return InvalidArgument("pingmesh raise_after and clear_after must be 1..100 windows");
  }
  if (policy.max_pairs < 1) return InvalidArgument("pingmesh max pairs per window must be at least 1");
  return pingmesh::ValidateRules(policy.rules);
}

PingmeshRule::PingmeshRule(const PingmeshPolicy& policy, DomainSource domains)
    : policy_(policy), domains_(std::move(domains)), tracker_(policy.raise_after, policy.clear_after) {}

void PingmeshRule::Record(const std::string& source, const std::vector<pingmesh::PairStats>& results) {
  for (const auto& r : results) {
    if (r.source != source || r.target == source || r.sent == 0) continue;
    auto key = std::make_pair(r.source, r.target);
    auto it = window_.find(key);
    if (it == window_.end()) {
      if (window_.size() >= policy_.max_pairs) {
        ++dropped_;
        continue;
      }
      it = window_.emplace(std::move(key), std::make_pair(0, 0)).first;
    }
    it->second.first += r.sent;
    it->second.second += std::min(r.lost, r.sent);
  }
}

TimePoint PingmeshRule::Advance(ClusterState& state, const WriterTick& tick) {
  if (window_end_ == TimePoint::min()) window_end_ = tick.now + policy_.window;
  if (tick.now < window_end_) return window_end_;
  window_end_ = tick.now + policy_.window;
  if (window_.empty()) return window_end_;  // no data is not health
  std::vector<pingmesh::PairStats> results;
  results.reserve(window_.size());
  for (const auto& [key, counts] : window_) {
    results.push_back({key.first, key.second, static_cast<uint32_t>(std::min<uint64_t>(counts.first, UINT32_MAX)),
                       static_cast<uint32_t>(std::min<uint64_t>(counts.second, UINT32_MAX))});
  }
  window_.clear();
  const auto domains = domains_ ? domains_(state) : std::vector<pingmesh::ProbeDomain>{};
  for (const auto& change : tracker_.Update(pingmesh::Attribute(results, domains, policy_.rules))) {
    if (change.raised) {
      Raise(state, change.finding, domains, tick.m);
    } else {
      Clear(state, change.finding, tick.m);
    }
  }
  return window_end_;
}

void PingmeshRule::Raise(ClusterState& state, const pingmesh::Finding& f,
                         const std::vector<pingmesh::ProbeDomain>& domains, Mutation* m) {
  auto& raised = raised_[f.Key()];
  auto report = [&](const std::string& node, const std::string& id, const char* code, v1::FaultLevel level,
                    const std::string& message) {
    v1::ReportRequest r;
    r.set_reporter(kPingmeshReporter);
    r.set_id(id);
    r.set_node(node);
    r.set_code(code);
    r.set_level(level);
    r.set_action(v1::TRANSITION_ACTION_RAISE);
    r.set_message(message);
    if (auto st = state.ApplyReport(r, m); !st.ok()) {
      GetLogger("state")->warn("pingmesh {} on node {}: {}", code, node, st.status().ToString());
      return;
    }
    raised.emplace_back(node, id);
  };
  switch (f.kind) {
    case pingmesh::FindingKind::kNode:
      report(f.subject, kNodeId, kPingmeshNodeCode, policy_.node_level,
             std::to_string(f.bad) + " of " + std::to_string(f.judged) +
                 " peers lost at least half of their probes to or from it (mean loss " + Percent(f.loss) + ")");
      break;
    case pingmesh::FindingKind::kLink: {
      const std::string message = "probes between " + f.subject + " and " + f.peer + " lost " + Percent(f.loss) +
                                  " while both reach their other peers";
      report(f.subject, kLinkPrefix + f.peer, kPingmeshLinkCode, policy_.link_level, message);
      report(f.peer, kLinkPrefix + f.subject, kPingmeshLinkCode, policy_.link_level, message);
      break;
    }
    case pingmesh::FindingKind::kDomain: {
      auto d = std::find_if(domains.begin(), domains.end(), [&](const auto& x) { return x.id == f.subject; });
      if (d == domains.end()) break;
      const std::string message = std::to_string(f.bad) + " of " + std::to_string(f.judged) + " judged members of " +
                                  f.subject + " unreachable by their peers: the domain's network";
      for (const auto& member : d->members) {
        report(member, kDomainPrefix + f.subject, kPingmeshDomainCode, policy_.domain_level, message);
      }
      break;
    }
  }
}

void PingmeshRule::Clear(ClusterState& state, const pingmesh::Finding& f, Mutation* m) {
  auto it = raised_.find(f.Key());
  if (it == raised_.end()) return;
  for (const auto& [node, id] : it->second) {
    v1::ReportRequest r;
    r.set_reporter(kPingmeshReporter);
    r.set_id(id);
    r.set_node(node);
    r.set_code(f.kind == pingmesh::FindingKind::kNode   ? kPingmeshNodeCode
               : f.kind == pingmesh::FindingKind::kLink ? kPingmeshLinkCode
                                                        : kPingmeshDomainCode);
    r.set_level(v1::FAULT_LEVEL_SUB_HEALTH);
    r.set_action(v1::TRANSITION_ACTION_CLEAR);
    r.set_message("the probes succeed again");
    if (auto st = state.ApplyReport(r, m); !st.ok()) {
      GetLogger("state")->warn("pingmesh clear on node {}: {}", node, st.status().ToString());
    }
  }
  raised_.erase(it);
}

void PingmeshRule::Loaded(ClusterState& state) {
  raised_.clear();
  std::map<std::string, pingmesh::Finding> active;
  for (const auto& [key, f] : state.fault_table().all()) {
    if (f.reporter() != kPingmeshReporter || f.state() != v1::FAULT_STATE_ACTIVE) continue;
    const std::string& id = f.external_id();
    pingmesh::Finding finding;
    if (id == kNodeId) {
      finding = {pingmesh::FindingKind::kNode, f.node(), "", 0, 0, 0};
    } else if (StartsWith(id, kLinkPrefix)) {
      const std::string other = id.substr(sizeof(kLinkPrefix) - 1);
      const auto ends = std::minmax(f.node(), other);
      finding = {pingmesh::FindingKind::kLink, ends.first, ends.second, 0, 0, 0};
    } else if (StartsWith(id, kDomainPrefix)) {
      finding = {pingmesh::FindingKind::kDomain, id.substr(sizeof(kDomainPrefix) - 1), "", 0, 0, 0};
    } else {
      continue;
    }
    raised_[finding.Key()].emplace_back(f.node(), id);
    active.emplace(finding.Key(), finding);
  }
  std::vector<pingmesh::Finding> findings;
  for (auto& [key, f] : active) findings.push_back(std::move(f));
  tracker_.Restore(findings);
}

}  // namespace clusterd
