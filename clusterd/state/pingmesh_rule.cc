// PingmeshRule (state/pingmesh_rule.h).
#include "clusterd/state/pingmesh_rule.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <charconv>
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
constexpr char kPingmeshNpuPrefix[] = "pingmesh/npu/";
constexpr char kPingmeshNpuLinkPrefix[] = "pingmesh/npu-link/";
constexpr char kPingmeshNpuNodeId[] = "pingmesh/npu-node";
constexpr char kPingmeshNpuDomainPrefix[] = "pingmesh/npu-domain/";
constexpr char kPingmeshDevicePlane[] = "device:";
// A node's target list at most (NodeD refuses larger plans).
constexpr size_t kPingmeshMaxTargets = 256;

std::string PingmeshPercent(double share) { return std::to_string(std::lround(share * 100)) + "%"; }

bool PingmeshHasPrefix(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

google::protobuf::Duration PingmeshDuration(std::chrono::nanoseconds d) {
  return google::protobuf::util::TimeUtil::NanosecondsToDuration(d.count());
}

// The device ids of a port name ("n1#3" -> 3); nullopt for a node's name.
std::optional<uint32_t> PingmeshPortDevice(const std::string& name) {
  const size_t hash = name.find('#');
  if (hash == std::string::npos) return std::nullopt;
  uint32_t device = 0;
  const char* end = name.data() + name.size();
  auto [p, ec] = std::from_chars(name.data() + hash + 1, end, device);
  if (ec != std::errc() || p != end || hash + 1 == name.size()) return std::nullopt;
  return device;
}

}  // namespace

std::string PingmeshPortName(const std::string& node, uint32_t device) { return node + "#" + std::to_string(device); }

std::string PingmeshPortNode(const std::string& name) { return name.substr(0, name.find('#')); }

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
  if (policy.suspect_probes > 16) return InvalidArgument("pingmesh suspect probes must be 0..16");
  if (policy.max_suspects > 100'000) return InvalidArgument("pingmesh max suspects must be 0..100000");
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
    : policy_(policy),
      domains_(std::move(domains)),
      tracker_(policy.raise_after, policy.clear_after),
      device_tracker_(policy.raise_after, policy.clear_after) {}

void PingmeshRule::MarkSuspect(const std::string& source, const std::string& target) {
  if (policy_.suspect_probes == 0) return;
  // Kept for the rounds raise_after windows take, and one more.
  const auto per_window = static_cast<uint32_t>(
      std::max<int64_t>(1, (policy_.window + policy_.interval - std::chrono::nanoseconds(1)) / policy_.interval));
  const uint32_t rounds = per_window * policy_.raise_after + 1;
  auto key = std::make_pair(source, target);
  if (auto it = suspects_.find(key); it != suspects_.end()) {
    it->second = rounds;
    return;
  }
  if (suspects_.size() >= policy_.max_suspects) {
    ++stats_.suspects_dropped;
    return;
  }
  suspects_.emplace(std::move(key), rounds);
  stats_.suspects = suspects_.size();
}

bool PingmeshRule::AddResult(std::map<std::pair<std::string, std::string>, Counts>* window,
                             const pingmesh::PairStats& r) {
  auto key = std::make_pair(r.source, r.target);
  auto it = window->find(key);
  if (it == window->end()) {
    if (window->size() >= policy_.max_pairs) {
      ++stats_.dropped;
      return false;
    }
    it = window->emplace(std::move(key), Counts{}).first;
  }
  Counts& c = it->second;
  c.sent += r.sent;
  c.lost += std::min(r.lost, r.sent);
  c.rtt_sum_us += r.rtt_sum_us;
  c.rtt_max_us = std::max(c.rtt_max_us, r.rtt_max_us);
  return true;
}

bool PingmeshRule::LostARound(const pingmesh::PairStats& r) const {
  return static_cast<double>(std::min(r.lost, r.sent)) >= policy_.rules.bad_loss * r.sent;
}

void PingmeshRule::Record(const std::string& source, const std::vector<pingmesh::PairStats>& results) {
  for (const auto& r : results) {
    if (r.source != source || r.target == source || r.sent == 0 || !AddResult(&window_, r)) continue;
    ++stats_.results;
    if (LostARound(r)) MarkSuspect(r.source, r.target);
  }
}

void PingmeshRule::RecordDevices(const std::string& source, const std::vector<pingmesh::PairStats>& results,
                                 bool unprobed) {
  if (unprobed) ++stats_.device_unprobed;
  for (const auto& r : results) {
    const std::string from = PingmeshPortNode(r.source), to = PingmeshPortNode(r.target);
    if (from != source || to == source || r.sent == 0 || from == r.source || to == r.target) continue;
    if (!AddResult(&device_window_, r)) continue;
    ++stats_.device_results;
    if (LostARound(r)) MarkSuspect(from, to);
  }
}

void PingmeshRule::AgentUp(const std::string& node, uint64_t session, const std::string& ip, uint16_t port,
                           std::vector<std::pair<uint32_t, std::string>> devices) {
  std::sort(devices.begin(), devices.end());
  agents_[node] = Agent{session, ip, port, std::move(devices)};
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
  AddSuspectProbes(domains);
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
    const Agent& self = agents_.at(node);
    for (const auto& peer : peers) {
      const Agent& a = agents_.at(peer);
      v1::ProbeTarget* t = plan->add_targets();
      t->set_node(peer);
      t->set_address(a.ip);
      t->set_port(a.port);
      // The device plane: the peer's ports this node has a port of the same id for.
      if (self.devices.empty()) continue;
      for (const auto& [id, address] : a.devices) {
        if (!std::binary_search(self.devices.begin(), self.devices.end(), std::make_pair(id, std::string()),
                                [](const auto& x, const auto& y) { return x.first < y.first; })) {
          continue;
        }
        v1::DeviceAddress* d = t->add_devices();
        d->set_device_id(id);
        d->set_address(address);
      }
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
  if (window_.empty() && device_window_.empty()) return std::min(window_end_, next_plan_);  // no data is not health
  auto domains = domains_ ? domains_(state) : std::vector<pingmesh::ProbeDomain>{};
  std::vector<pingmesh::PairStats> results;
  std::vector<pingmesh::Finding> findings;
  if (!window_.empty()) {
    results = TakeWindow(&window_);
    // What the window judged: in a large domain a pair is probed only every
    // few rounds, and a window without it is no word on it.
    std::set<std::string> judged;
    findings = pingmesh::Attribute(results, domains, policy_.rules, &judged);
    for (const auto& change : tracker_.Update(findings, &judged)) {
      if (change.raised) {
        Raise(state, change.finding, domains, tick.m);
      } else {
        Clear(state, change.finding.Key(), tick.m);
      }
    }
  }
  JudgeDevices(state, domains, tick.m);
  stats_.findings = tracker_.Active().size() + device_tracker_.Active().size();
  KeepJudgedWindow(std::move(results), std::move(findings), std::move(domains));
  return std::min(window_end_, next_plan_);
}

std::vector<pingmesh::PairStats> PingmeshRule::TakeWindow(
    std::map<std::pair<std::string, std::string>, Counts>* window) {
  std::vector<pingmesh::PairStats> results;
  results.reserve(window->size());
  for (const auto& [key, c] : *window) {
    results.push_back({key.first, key.second, static_cast<uint32_t>(std::min<uint64_t>(c.sent, UINT32_MAX)),
                       static_cast<uint32_t>(std::min<uint64_t>(c.lost, UINT32_MAX)), c.rtt_sum_us, c.rtt_max_us});
  }
  window->clear();
  return results;
}

void PingmeshRule::JudgeDevices(ClusterState& state, const std::vector<pingmesh::ProbeDomain>& domains, Mutation* m) {
  pending_device_directions_.clear();
  pending_device_findings_.clear();
  pending_device_domains_.clear();
  if (device_window_.empty()) return;  // no data is not health
  auto results = TakeWindow(&device_window_);
  // The ports the window saw, per node: the probe domains over ports, and
  // each node's ports a domain of their own ("<node>#": the node, not a port).
  std::map<std::string, std::set<std::string>> ports;
  for (const auto& r : results) {
    ports[PingmeshPortNode(r.source)].insert(r.source);
    ports[PingmeshPortNode(r.target)].insert(r.target);
  }
  std::vector<pingmesh::ProbeDomain> device_domains;
  for (const auto& d : domains) {
    pingmesh::ProbeDomain pd{d.id, {}};
    for (const auto& member : d.members) {
      if (auto it = ports.find(member); it != ports.end()) {
        pd.members.insert(pd.members.end(), it->second.begin(), it->second.end());
      }
    }
    std::sort(pd.members.begin(), pd.members.end());
    if (pd.members.size() >= 2) device_domains.push_back(std::move(pd));
  }
  for (const auto& [node, set] : ports) device_domains.push_back({node + "#", {set.begin(), set.end()}});
  std::set<std::string> judged;
  auto findings = pingmesh::Attribute(results, device_domains, policy_.rules, &judged);
  for (const auto& change : device_tracker_.Update(findings, &judged)) {
    if (change.raised) {
      RaiseDevice(state, change.finding, device_domains, m);
    } else {
      Clear(state, kPingmeshDevicePlane + change.finding.Key(), m);
    }
  }
  pending_device_directions_ = std::move(results);
  pending_device_findings_ = std::move(findings);
  pending_device_domains_ = std::move(device_domains);
}

void PingmeshRule::AddSuspectProbes(const std::vector<pingmesh::ProbeDomain>& domains) {
  stats_.suspect_probes = 0;
  if (suspects_.empty()) return;
  // A node's first probe domain: where its extra peers come from.
  std::map<std::string, const pingmesh::ProbeDomain*> home;
  for (const auto& d : domains) {
    for (const auto& member : d.members) home.emplace(member, &d);
  }
  uint64_t extra = 0;
  auto add = [&](const std::string& from, const std::string& to) {
    if (from == to || !agents_.contains(from) || !agents_.contains(to)) return;
    auto& peers = last_plan_.peers[from];
    auto it = std::lower_bound(peers.begin(), peers.end(), to);
    if ((it != peers.end() && *it == to) || peers.size() >= kPingmeshMaxTargets) return;
    peers.insert(it, to);
    ++extra;
  };
  // Up to suspect_probes members of node's domain other than node and skip,
  // a different few each round.
  auto others = [&](const std::string& node, const std::string& skip, const auto& f) {
    auto h = home.find(node);
    if (h == home.end()) return;
    const auto& members = h->second->members;
    uint32_t picked = 0;
    for (size_t i = 0; i < members.size() && picked < policy_.suspect_probes; ++i) {
      const std::string& member = members[(round_ * policy_.suspect_probes + i) % members.size()];
      if (member == node || member == skip) continue;
      f(member);
      ++picked;
    }
  };
  for (auto it = suspects_.begin(); it != suspects_.end();) {
    const std::string& source = it->first.first;  // named: lambdas below take them
    const std::string& target = it->first.second;
    // The pair both ways (a link), more peers probing the target (is it the
    // node nothing reaches?) and probed by the source (does it reach nothing?).
    add(source, target);
    add(target, source);
    others(target, source, [&](const std::string& m) { add(m, target); });
    others(source, target, [&](const std::string& m) { add(source, m); });
    if (--it->second == 0) {
      it = suspects_.erase(it);
    } else {
      ++it;
    }
  }
  last_plan_.probes += extra;
  stats_.suspect_probes = extra;
  stats_.suspects = suspects_.size();
}

v1::ReportRequest PingmeshRule::RequestFor(const RaisedFault& f, v1::FaultLevel level, v1::TransitionAction action,
                                           const std::string& message) {
  v1::ReportRequest r;
  r.set_reporter(kPingmeshReporter);
  r.set_id(f.id);
  r.set_node(f.node);
  if (f.device) r.set_device_id(*f.device);
  r.set_code(f.code);
  r.set_level(level);
  r.set_action(action);
  r.set_message(message);
  return r;
}

void PingmeshRule::ReportRaise(ClusterState& state, std::vector<RaisedFault>* raised, RaisedFault f,
                               v1::FaultLevel level, const std::string& message, Mutation* m) {
  if (auto st = state.ApplyReport(RequestFor(f, level, v1::TRANSITION_ACTION_RAISE, message), m); !st.ok()) {
    GetLogger("state")->warn("pingmesh {} on node {}: {}", f.code, f.node, st.status().ToString());
    return;
  }
  raised->push_back(std::move(f));
}

void PingmeshRule::RaiseDevice(ClusterState& state, const pingmesh::Finding& f,
                               const std::vector<pingmesh::ProbeDomain>& domains, Mutation* m) {
  auto* raised = &raised_[kPingmeshDevicePlane + f.Key()];
  switch (f.kind) {
    case pingmesh::FindingKind::kNode: {
      const auto device = PingmeshPortDevice(f.subject);
      if (!device) break;
      ReportRaise(state, raised,
                  {PingmeshPortNode(f.subject), kPingmeshNpuPrefix + std::to_string(*device), device, kPingmeshNpuCode},
                  policy_.npu_level,
                  "NPU port " + f.subject + ": " + std::to_string(f.bad) + " of " + std::to_string(f.judged) +
                      " peer ports lost at least half of their probes to or from it (mean loss " +
                      PingmeshPercent(f.loss) + ")",
                  m);
      break;
    }
    case pingmesh::FindingKind::kLink: {
      const auto a = PingmeshPortDevice(f.subject), b = PingmeshPortDevice(f.peer);
      if (!a || !b) break;
      const std::string message = "probes between NPU ports " + f.subject + " and " + f.peer + " lost " +
                                  PingmeshPercent(f.loss) + " while both reach their other peers";
      ReportRaise(state, raised,
                  {PingmeshPortNode(f.subject), kPingmeshNpuLinkPrefix + std::to_string(*a) + "/" + f.peer, a,
                   kPingmeshNpuLinkCode},
                  policy_.npu_link_level, message, m);
      ReportRaise(state, raised,
                  {PingmeshPortNode(f.peer), kPingmeshNpuLinkPrefix + std::to_string(*b) + "/" + f.subject, b,
                   kPingmeshNpuLinkCode},
                  policy_.npu_link_level, message, m);
      break;
    }
    case pingmesh::FindingKind::kDomain: {
      if (!f.subject.empty() && f.subject.back() == '#') {
        const std::string node = f.subject.substr(0, f.subject.size() - 1);
        ReportRaise(state, raised, {node, kPingmeshNpuNodeId, std::nullopt, kPingmeshNpuNodeCode},
                    policy_.npu_node_level,
                    std::to_string(f.bad) + " of " + std::to_string(f.judged) +
                        " judged NPU ports unreachable by their peers: the node's accelerator network",
                    m);
        break;
      }
      auto d = std::find_if(domains.begin(), domains.end(), [&](const auto& x) { return x.id == f.subject; });
      if (d == domains.end()) break;
      std::set<std::string> nodes;
      for (const auto& port : d->members) nodes.insert(PingmeshPortNode(port));
      const std::string message = std::to_string(f.bad) + " of " + std::to_string(f.judged) + " judged NPU ports of " +
                                  f.subject + " unreachable by their peers: the domain's accelerator network";
      for (const auto& node : nodes) {
        ReportRaise(state, raised, {node, kPingmeshNpuDomainPrefix + f.subject, std::nullopt, kPingmeshNpuDomainCode},
                    policy_.npu_domain_level, message, m);
      }
      break;
    }
  }
}

void PingmeshRule::Raise(ClusterState& state, const pingmesh::Finding& f,
                         const std::vector<pingmesh::ProbeDomain>& domains, Mutation* m) {
  auto* raised = &raised_[f.Key()];
  switch (f.kind) {
    case pingmesh::FindingKind::kNode:
      ReportRaise(state, raised, {f.subject, kPingmeshNodeId, std::nullopt, kPingmeshNodeCode}, policy_.node_level,
                  std::to_string(f.bad) + " of " + std::to_string(f.judged) +
                      " peers lost at least half of their probes to or from it (mean loss " + PingmeshPercent(f.loss) +
                      ")",
                  m);
      break;
    case pingmesh::FindingKind::kLink: {
      const std::string message = "probes between " + f.subject + " and " + f.peer + " lost " +
                                  PingmeshPercent(f.loss) + " while both reach their other peers";
      ReportRaise(state, raised, {f.subject, kPingmeshLinkPrefix + f.peer, std::nullopt, kPingmeshLinkCode},
                  policy_.link_level, message, m);
      ReportRaise(state, raised, {f.peer, kPingmeshLinkPrefix + f.subject, std::nullopt, kPingmeshLinkCode},
                  policy_.link_level, message, m);
      break;
    }
    case pingmesh::FindingKind::kDomain: {
      auto d = std::find_if(domains.begin(), domains.end(), [&](const auto& x) { return x.id == f.subject; });
      if (d == domains.end()) break;
      const std::string message = std::to_string(f.bad) + " of " + std::to_string(f.judged) + " judged members of " +
                                  f.subject + " unreachable by their peers: the domain's network";
      for (const auto& member : d->members) {
        ReportRaise(state, raised, {member, kPingmeshDomainPrefix + f.subject, std::nullopt, kPingmeshDomainCode},
                    policy_.domain_level, message, m);
      }
      break;
    }
  }
}

void PingmeshRule::Clear(ClusterState& state, const std::string& key, Mutation* m) {
  auto it = raised_.find(key);
  if (it == raised_.end()) return;
  for (const auto& f : it->second) {
    const auto r = RequestFor(f, v1::FAULT_LEVEL_SUB_HEALTH, v1::TRANSITION_ACTION_CLEAR, "the probes succeed again");
    if (auto st = state.ApplyReport(r, m); !st.ok()) {
      GetLogger("state")->warn("pingmesh clear on node {}: {}", f.node, st.status().ToString());
    }
  }
  raised_.erase(it);
}

void PingmeshRule::Loaded(ClusterState& state) {
  raised_.clear();
  std::map<std::string, pingmesh::Finding> active, device_active;
  for (const auto& [key, f] : state.fault_table().all()) {
    if (f.reporter() != kPingmeshReporter || f.state() != v1::FAULT_STATE_ACTIVE) continue;
    const std::string& id = f.external_id();
    pingmesh::Finding finding;
    bool device_plane = false;
    if (id == kPingmeshNodeId) {
      finding = {pingmesh::FindingKind::kNode, f.node(), "", 0, 0, 0};
    } else if (PingmeshHasPrefix(id, kPingmeshLinkPrefix)) {
      const std::string other = id.substr(sizeof(kPingmeshLinkPrefix) - 1);
      const auto ends = std::minmax(f.node(), other);
      finding = {pingmesh::FindingKind::kLink, ends.first, ends.second, 0, 0, 0};
    } else if (PingmeshHasPrefix(id, kPingmeshDomainPrefix)) {
      finding = {pingmesh::FindingKind::kDomain, id.substr(sizeof(kPingmeshDomainPrefix) - 1), "", 0, 0, 0};
    } else if (PingmeshHasPrefix(id, kPingmeshNpuPrefix) && f.has_device_id()) {
      device_plane = true;
      finding = {pingmesh::FindingKind::kNode, PingmeshPortName(f.node(), f.device_id()), "", 0, 0, 0};
    } else if (PingmeshHasPrefix(id, kPingmeshNpuLinkPrefix) && f.has_device_id()) {
      // "pingmesh/npu-link/<this port's device>/<the other port>"
      const std::string rest = id.substr(sizeof(kPingmeshNpuLinkPrefix) - 1);
      const size_t slash = rest.find('/');
      if (slash == std::string::npos) continue;
      device_plane = true;
      const std::string mine = PingmeshPortName(f.node(), f.device_id()), other = rest.substr(slash + 1);
      const auto ends = std::minmax(mine, other);  // references: both named above
      finding = {pingmesh::FindingKind::kLink, ends.first, ends.second, 0, 0, 0};
    } else if (id == kPingmeshNpuNodeId) {
      device_plane = true;
      finding = {pingmesh::FindingKind::kDomain, f.node() + "#", "", 0, 0, 0};
    } else if (PingmeshHasPrefix(id, kPingmeshNpuDomainPrefix)) {
      device_plane = true;
      finding = {pingmesh::FindingKind::kDomain, id.substr(sizeof(kPingmeshNpuDomainPrefix) - 1), "", 0, 0, 0};
    } else {
      continue;
    }
    const std::string raised_key = (device_plane ? std::string(kPingmeshDevicePlane) : std::string()) + finding.Key();
    raised_[raised_key].push_back(
        {f.node(), id, f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt, f.code()});
    (device_plane ? device_active : active).emplace(finding.Key(), finding);
  }
  auto restore = [](pingmesh::FindingTracker& tracker, std::map<std::string, pingmesh::Finding>& from) {
    std::vector<pingmesh::Finding> findings;
    findings.reserve(from.size());
    for (auto& [key, f] : from) findings.push_back(std::move(f));
    tracker.Restore(findings);
    return findings.size();
  };
  stats_.findings = restore(tracker_, active) + restore(device_tracker_, device_active);
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
  w.device_directions = std::move(pending_device_directions_);
  w.device_findings = std::move(pending_device_findings_);
  w.device_domains = std::move(pending_device_domains_);
  pending_device_directions_.clear();
  pending_device_findings_.clear();
  pending_device_domains_.clear();
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
  // The findings: those raised now, then the last window's not raised;
  // the TCP plane's, then the device plane's.
  std::set<std::string> listed;
  auto add_finding = [&](const pingmesh::Finding& f, bool active, const char* plane) {
    if (out.findings_size() >= static_cast<int>(kMaxListedFindings) ||
        !listed.insert(std::string(plane) + ":" + f.Key()).second) {
      return;
    }
    v1::PingmeshFinding* pf = out.add_findings();
    pf->set_kind(PingmeshKindName(f.kind));
    pf->set_subject(f.subject);
    pf->set_peer(f.peer);
    pf->set_bad(f.bad);
    pf->set_judged(f.judged);
    pf->set_loss(f.loss);
    pf->set_active(active);
    pf->set_plane(plane);
  };
  // The tracker keeps the counts of when a finding was raised; the last
  // window's are newer where it has them.
  auto list_plane = [&](const pingmesh::FindingTracker& tracker, const std::vector<pingmesh::Finding>* last,
                        const char* plane) {
    std::map<std::string, const pingmesh::Finding*> latest;
    if (last != nullptr) {
      for (const auto& f : *last) latest.emplace(f.Key(), &f);
    }
    for (const auto& f : tracker.Active()) {
      auto it = latest.find(f.Key());
      add_finding(it == latest.end() ? f : *it->second, true, plane);
    }
    if (last != nullptr) {
      for (const auto& f : *last) add_finding(f, false, plane);
    }
  };
  list_plane(tracker_, last_window_ ? &last_window_->findings : nullptr, "tcp");
  list_plane(device_tracker_, last_window_ ? &last_window_->device_findings : nullptr, "device");
  if (!last_window_) return out;

  const JudgedWindow& w = *last_window_;
  *out.mutable_window_end() = w.end;
  *out.mutable_window() = PingmeshDuration(policy_.window);
  if (!domain_key.empty()) {
    auto it = std::find_if(w.domains.begin(), w.domains.end(), [&](const auto& d) { return d.id == domain_key; });
    if (it == w.domains.end()) return NotFound("domain " + domain_key + " was not probed in the last window");
    domain = &*it;
  }
  auto member = [domain](const std::string& name) {
    return std::binary_search(domain->members.begin(), domain->members.end(), PingmeshPortNode(name));
  };
  // What accounts for each listed direction, worked out for the page only,
  // each plane by its own findings.
  const pingmesh::Explainer explain(w.findings, w.domains, policy_.rules);
  const pingmesh::Explainer explain_device(w.device_findings, w.device_domains, policy_.rules);
  // Both planes in one order (by source, target: a port "n1#0" sorts after
  // its node "n1", before "n1-a" or "n10").
  std::vector<const pingmesh::PairStats*> directions;
  directions.reserve(w.directions.size() + w.device_directions.size());
  for (const auto& d : w.directions) directions.push_back(&d);
  for (const auto& d : w.device_directions) directions.push_back(&d);
  std::sort(directions.begin(), directions.end(), [](const auto* a, const auto* b) {
    return std::tie(a->source, a->target) < std::tie(b->source, b->target);
  });
  PageBudget budget(page->size);
  int32_t total = 0;
  bool full = false;
  std::string last;
  for (const pingmesh::PairStats* dp : directions) {
    const pingmesh::PairStats& d = *dp;
    const bool device_plane = d.source.find('#') != std::string::npos;
    if (!req.node().empty() && PingmeshPortNode(d.source) != req.node() && PingmeshPortNode(d.target) != req.node()) {
      continue;
    }
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
    link.set_finding(device_plane ? explain_device.Of(d) : explain.Of(d));
    link.set_plane(device_plane ? "device" : "tcp");
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
