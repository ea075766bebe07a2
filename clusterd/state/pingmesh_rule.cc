// PingmeshRule (state/pingmesh_rule.h).
#include "clusterd/state/pingmesh_rule.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <tuple>

#include "clusterd/state/cluster_state.h"
#include "clusterd/state/response_limits.h"
#include "clusterd/state/validation.h"
#include "clusterd/storage/key_codec.h"
#include "common/logging.h"
#include "common/validation.h"

namespace clusterd {
namespace {

constexpr char kPingmeshNodeId[] = "pingmesh/node";
constexpr char kPingmeshLinkPrefix[] = "pingmesh/link/";
constexpr char kPingmeshDomainPrefix[] = "pingmesh/domain/";

std::string PingmeshPercent(double share) { return std::to_string(std::lround(share * 100)) + "%"; }

bool PingmeshHasPrefix(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

google::protobuf::Duration PingmeshDuration(std::chrono::nanoseconds d) {
  return google::protobuf::util::TimeUtil::NanosecondsToDuration(d.count());
}

}  // namespace

Status ValidatePingmeshPolicy(const PingmeshPolicy& policy) {
  if (policy.interval < std::chrono::seconds(1) || policy.interval > std::chrono::hours(1)) {
    return InvalidArgument("pingmesh interval must be 1s..1h");
  }
  if (policy.attempts < 1 || policy.attempts > 10) return InvalidArgument("pingmesh attempts must be 1..10");
  if (policy.timeout < std::chrono::milliseconds(10) || policy.timeout > std::chrono::seconds(10)) {
    return InvalidArgument("pingmesh probe timeout must be 10ms..10s");
  }
  if (policy.timeout * policy.attempts >= policy.interval) {
    return InvalidArgument("pingmesh: attempts x probe timeout must be shorter than the interval");
  }
  CLUSTERD_RETURN_IF_ERROR(pingmesh::ValidatePlanInput({}, policy.limits));
  if (policy.window < std::chrono::seconds(1) || policy.window > std::chrono::hours(1)) {
    return InvalidArgument("pingmesh window must be 1s..1h");
  }
  if (policy.raise_after < 1 || policy.raise_after > 100 || policy.clear_after < 1 || policy.clear_after > 100) {
    return InvalidArgument("pingmesh raise_after and clear_after must be 1..100 windows");
  }
  if (policy.max_pairs < 1) return InvalidArgument("pingmesh max pairs per window must be at least 1");
  return pingmesh::ValidateRules(policy.rules);
}

std::function<std::vector<pingmesh::ProbeDomain>(const ClusterState&)> ModelDomains(DomainModel model) {
  struct Cache {
    uint64_t generation = UINT64_MAX;
    std::vector<pingmesh::ProbeDomain> domains;
  };
  return [model = std::move(model), cache = std::make_shared<Cache>()](const ClusterState& state) {
    const uint64_t generation = state.node_table().labels_generation();
    if (generation != cache->generation) {
      cache->generation = generation;
      cache->domains.clear();
      for (auto& [key, members] : DomainIndex::Build(state, model).members) {
        cache->domains.push_back({key, std::move(members)});
      }
    }
    return cache->domains;
  };
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
        ++stats_.dropped;
        continue;
      }
      it = window_.emplace(std::move(key), Counts{}).first;
    }
    ++stats_.results;
    Counts& c = it->second;
    c.sent += r.sent;
    c.lost += std::min(r.lost, r.sent);
    c.rtt_sum_us += r.rtt_sum_us;
    c.rtt_max_us = std::max(c.rtt_max_us, r.rtt_max_us);
  }
}

void PingmeshRule::AgentUp(const std::string& node, uint64_t session, const std::string& ip, uint16_t port) {
  agents_[node] = Agent{session, ip, port};
  stats_.agents = agents_.size();
}

void PingmeshRule::AgentDown(const std::string& node, uint64_t session) {
  auto it = agents_.find(node);
  if (it != agents_.end() && it->second.session == session) agents_.erase(it);
  stats_.agents = agents_.size();
}

void PingmeshRule::PlanRound(ClusterState& state, const WriterTick& tick) {
  // The domains among the agents that can be probed now.
  std::vector<pingmesh::ProbeDomain> domains;
  for (auto& d : domains_ ? domains_(state) : std::vector<pingmesh::ProbeDomain>{}) {
    std::erase_if(d.members, [this](const std::string& m) { return !agents_.contains(m); });
    if (d.members.size() >= 2) domains.push_back(std::move(d));
  }
  last_plan_ = pingmesh::PlanRound(domains, round_, policy_.limits);
  const uint64_t round = round_++;
  stats_.rounds = round_;
  stats_.probes = last_plan_.probes;
  if (outbox_ == nullptr || tick.after == nullptr) return;
  const auto timeout = PingmeshDuration(policy_.timeout);
  std::vector<std::tuple<std::string, uint64_t, v1::ConnectResponse>> sends;
  for (const auto& [node, peers] : last_plan_.peers) {
    v1::ConnectResponse msg;
    v1::ProbePlan* plan = msg.mutable_probe_plan();
    plan->set_round(round);
    *plan->mutable_timeout() = timeout;
    plan->set_attempts(policy_.attempts);
    for (const auto& peer : peers) {
      const Agent& a = agents_.at(peer);
      v1::ProbeTarget* t = plan->add_targets();
      t->set_node(peer);
      t->set_address(a.ip);
      t->set_port(a.port);
    }
    sends.emplace_back(node, agents_.at(node).session, std::move(msg));
  }
  // Once the group is durable, without the state's lock: the streams take
  // their own locks to write.
  tick.after->push_back([outbox = outbox_, sends = std::move(sends)] {
    for (const auto& [node, session, msg] : sends) outbox->Send(node, session, msg);
  });
}

TimePoint PingmeshRule::Advance(ClusterState& state, const WriterTick& tick) {
  // Nothing to plan and nothing to judge (no agent with a probe address, no
  // result waiting): the rule sleeps until an agent comes (its hello is a
  // change, after which the writer runs the rules again) instead of waking
  // the writer every interval. Active findings stay: no data is not health.
  if (agents_.empty() && window_.empty()) {
    next_plan_ = TimePoint::min();
    window_end_ = TimePoint::min();
    return TimePoint::max();
  }
  if (next_plan_ == TimePoint::min() || tick.now >= next_plan_) {
    if (next_plan_ != TimePoint::min()) PlanRound(state, tick);
    next_plan_ = tick.now + policy_.interval;
  }
  if (window_end_ == TimePoint::min()) window_end_ = tick.now + policy_.window;
  if (tick.now < window_end_) return std::min(window_end_, next_plan_);
  window_end_ = tick.now + policy_.window;
  if (window_.empty()) return std::min(window_end_, next_plan_);  // no data is not health
  std::vector<pingmesh::PairStats> results;
  results.reserve(window_.size());
  for (const auto& [key, c] : window_) {
    results.push_back({key.first, key.second, static_cast<uint32_t>(std::min<uint64_t>(c.sent, UINT32_MAX)),
                       static_cast<uint32_t>(std::min<uint64_t>(c.lost, UINT32_MAX)), c.rtt_sum_us, c.rtt_max_us});
  }
  window_.clear();
  auto domains = domains_ ? domains_(state) : std::vector<pingmesh::ProbeDomain>{};
  // What the window judged: in a large domain a pair is probed only every
  // few rounds, and a window without it is no word on it.
  std::set<std::string> judged;
  auto findings = pingmesh::Attribute(results, domains, policy_.rules, &judged);
  for (const auto& change : tracker_.Update(findings, &judged)) {
    if (change.raised) {
      Raise(state, change.finding, domains, tick.m);
    } else {
      Clear(state, change.finding, tick.m);
    }
  }
  stats_.findings = tracker_.Active().size();
  KeepJudgedWindow(std::move(results), std::move(findings), std::move(domains));
  return std::min(window_end_, next_plan_);
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
      report(f.subject, kPingmeshNodeId, kPingmeshNodeCode, policy_.node_level,
             std::to_string(f.bad) + " of " + std::to_string(f.judged) +
                 " peers lost at least half of their probes to or from it (mean loss " + PingmeshPercent(f.loss) + ")");
      break;
    case pingmesh::FindingKind::kLink: {
      const std::string message = "probes between " + f.subject + " and " + f.peer + " lost " +
                                  PingmeshPercent(f.loss) + " while both reach their other peers";
      report(f.subject, kPingmeshLinkPrefix + f.peer, kPingmeshLinkCode, policy_.link_level, message);
      report(f.peer, kPingmeshLinkPrefix + f.subject, kPingmeshLinkCode, policy_.link_level, message);
      break;
    }
    case pingmesh::FindingKind::kDomain: {
      auto d = std::find_if(domains.begin(), domains.end(), [&](const auto& x) { return x.id == f.subject; });
      if (d == domains.end()) break;
      const std::string message = std::to_string(f.bad) + " of " + std::to_string(f.judged) + " judged members of " +
                                  f.subject + " unreachable by their peers: the domain's network";
      for (const auto& member : d->members) {
        report(member, kPingmeshDomainPrefix + f.subject, kPingmeshDomainCode, policy_.domain_level, message);
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
    if (id == kPingmeshNodeId) {
      finding = {pingmesh::FindingKind::kNode, f.node(), "", 0, 0, 0};
    } else if (PingmeshHasPrefix(id, kPingmeshLinkPrefix)) {
      const std::string other = id.substr(sizeof(kPingmeshLinkPrefix) - 1);
      const auto ends = std::minmax(f.node(), other);
      finding = {pingmesh::FindingKind::kLink, ends.first, ends.second, 0, 0, 0};
    } else if (PingmeshHasPrefix(id, kPingmeshDomainPrefix)) {
      finding = {pingmesh::FindingKind::kDomain, id.substr(sizeof(kPingmeshDomainPrefix) - 1), "", 0, 0, 0};
    } else {
      continue;
    }
    raised_[finding.Key()].emplace_back(f.node(), id);
    active.emplace(finding.Key(), finding);
  }
  std::vector<pingmesh::Finding> findings;
  findings.reserve(active.size());
  for (auto& [key, f] : active) findings.push_back(std::move(f));
  tracker_.Restore(findings);
  stats_.findings = findings.size();
}

}  // namespace clusterd

namespace clusterd {
namespace {

constexpr size_t kMaxListedFindings = 1000;

const char* PingmeshKindName(pingmesh::FindingKind kind) {
  switch (kind) {
    case pingmesh::FindingKind::kNode: return "node";
    case pingmesh::FindingKind::kLink: return "link";
    case pingmesh::FindingKind::kDomain: return "domain";
  }
  return "";
}

// The page key of a direction: its two ends, unambiguous (names carry no NUL).
std::string PingmeshLinkKey(const std::string& source, const std::string& target) {
  return source + std::string(1, '\0') + target;
}

}  // namespace

void PingmeshRule::KeepJudgedWindow(std::vector<pingmesh::PairStats> results, std::vector<pingmesh::Finding> findings,
                                    std::vector<pingmesh::ProbeDomain> domains) {
  JudgedWindow w;
  w.end = google::protobuf::util::TimeUtil::GetCurrentTime();
  w.directions = std::move(results);
  w.findings = std::move(findings);
  w.domains = std::move(domains);
  last_window_ = std::move(w);
}

StatusOr<v1::ListLinksResponse> ListLinksWith(const ClusterState& state, const v1::ListLinksRequest& req) {
  const PingmeshRule* rule = state.Attached<PingmeshRule>();
  if (rule == nullptr) {
    return FailedPrecondition("no pingmesh on this replica (pingmesh_enabled is off, or a standby: ask the leader)");
  }
  return rule->ListLinks(req);
}

StatusOr<v1::ListLinksResponse> PingmeshRule::ListLinks(const v1::ListLinksRequest& req) const {
  auto page = ParsePage(req.page_size(), req.page_token());
  if (!page.ok()) return page.status();
  if (!req.node().empty()) CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", req.node()));
  // Checked before anything is answered: a bad filter is refused even
  // before the first window is judged.
  std::string domain_key;
  if (!req.domain().empty()) {
    auto ref = ParseDomainRef(req.domain());
    if (!ref.ok()) return ref.status();
    domain_key = DomainKey(*ref);
  }
  const pingmesh::ProbeDomain* domain = nullptr;
  v1::ListLinksResponse out;
  out.set_rounds(stats_.rounds.load());
  out.set_round_probes(stats_.probes.load());
  // The findings: those raised now, then the last window's not raised.
  std::set<std::string> listed;
  auto add_finding = [&](const pingmesh::Finding& f, bool active) {
    if (out.findings_size() >= static_cast<int>(kMaxListedFindings) || !listed.insert(f.Key()).second) return;
    v1::PingmeshFinding* pf = out.add_findings();
    pf->set_kind(PingmeshKindName(f.kind));
    pf->set_subject(f.subject);
    pf->set_peer(f.peer);
    pf->set_bad(f.bad);
    pf->set_judged(f.judged);
    pf->set_loss(f.loss);
    pf->set_active(active);
  };
  // The tracker keeps the counts of when a finding was raised; the last
  // window's are newer where it has them.
  std::map<std::string, const pingmesh::Finding*> latest;
  if (last_window_) {
    for (const auto& f : last_window_->findings) latest.emplace(f.Key(), &f);
  }
  for (const auto& f : tracker_.Active()) {
    auto it = latest.find(f.Key());
    add_finding(it == latest.end() ? f : *it->second, true);
  }
  if (!last_window_) return out;
  for (const auto& f : last_window_->findings) add_finding(f, false);

  const JudgedWindow& w = *last_window_;
  *out.mutable_window_end() = w.end;
  *out.mutable_window() = PingmeshDuration(policy_.window);
  if (!domain_key.empty()) {
    auto it = std::find_if(w.domains.begin(), w.domains.end(), [&](const auto& d) { return d.id == domain_key; });
    if (it == w.domains.end()) return NotFound("domain " + domain_key + " was not probed in the last window");
    domain = &*it;
  }
  auto member = [domain](const std::string& node) {
    return std::binary_search(domain->members.begin(), domain->members.end(), node);
  };
  // What accounts for each listed direction, worked out for the page only.
  const pingmesh::Explainer explain(w.findings, w.domains, policy_.rules);
  PageBudget budget(page->size);
  int32_t total = 0;
  bool full = false;
  std::string last;
  for (const pingmesh::PairStats& d : w.directions) {
    if (!req.node().empty() && d.source != req.node() && d.target != req.node()) continue;
    if (domain != nullptr && !(member(d.source) && member(d.target))) continue;
    if (req.lossy_only() && d.lost == 0) continue;
    ++total;
    if (full) continue;
    const std::string key = PingmeshLinkKey(d.source, d.target);
    if (!page->start.empty() && key <= page->start) continue;
    v1::ProbeLink link;
    link.set_source(d.source);
    link.set_target(d.target);
    link.set_sent(d.sent);
    link.set_lost(d.lost);
    link.set_loss(d.sent == 0 ? 0 : static_cast<double>(d.lost) / d.sent);
    if (const uint32_t replies = d.sent - std::min(d.lost, d.sent); replies > 0) {
      *link.mutable_rtt_mean() = PingmeshDuration(std::chrono::microseconds(d.rtt_sum_us / replies));
      *link.mutable_rtt_max() = PingmeshDuration(std::chrono::microseconds(d.rtt_max_us));
    }
    link.set_finding(explain.Of(d));
    if (!budget.Take(link.ByteSizeLong())) {
      if (!last.empty()) out.set_next_page_token(storage::HexEncode(last));
      full = true;
      continue;
    }
    last = key;
    *out.add_links() = std::move(link);
  }
  out.set_total_size(total);
  return out;
}

}  // namespace clusterd
