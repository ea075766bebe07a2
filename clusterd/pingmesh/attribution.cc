#include "clusterd/pingmesh/attribution.h"

#include <algorithm>
#include <set>
#include <utility>

namespace clusterd::pingmesh {
namespace {

struct Direction {
  uint32_t judged = 0;
  uint32_t bad = 0;
  double loss_sum = 0;
  double MeanLoss() const { return judged == 0 ? 0 : loss_sum / judged; }
};

struct NodeTally {
  Direction in;   // peers probing it
  Direction out;  // peers it probes
};

bool Majority(const Direction& d, const AttributionRules& rules) {
  return d.judged >= rules.min_peers && d.bad > rules.node_majority * d.judged;
}

bool InRange01(double v) { return v >= 0 && v <= 1; }

}  // namespace

Status ValidateRules(const AttributionRules& rules) {
  if (rules.min_sent < 1) return InvalidArgument("pingmesh min probes per pair must be at least 1");
  if (rules.min_peers < 1) return InvalidArgument("pingmesh min peers must be at least 1");
  if (!InRange01(rules.bad_loss) || rules.bad_loss == 0) {
    return InvalidArgument("pingmesh bad loss must be in (0, 1]");
  }
  if (!InRange01(rules.node_majority) || !InRange01(rules.domain_share)) {
    return InvalidArgument("pingmesh node majority and domain share must be in [0, 1]");
  }
  return Status::Ok();
}

std::string Finding::KeyOf(FindingKind kind, const std::string& subject, const std::string& peer) {
  switch (kind) {
    case FindingKind::kNode: return "node/" + subject;
    case FindingKind::kLink: return "link/" + subject + "/" + peer;
    case FindingKind::kDomain: return "domain/" + subject;
  }
  return subject;
}

std::vector<Finding> Attribute(const std::vector<PairStats>& window, const std::vector<ProbeDomain>& domains,
                               const AttributionRules& rules, std::set<std::string>* judged) {
  // One entry per direction, the window's samples summed.
  std::map<std::pair<std::string, std::string>, std::pair<uint64_t, uint64_t>> pairs;
  for (const auto& p : window) {
    if (p.source == p.target) continue;
    auto& [sent, lost] = pairs[{p.source, p.target}];
    sent += p.sent;
    lost += std::min(p.lost, p.sent);
  }
  std::map<std::string, NodeTally> nodes;
  std::map<std::pair<std::string, std::string>, double> bad_pairs;  // direction -> loss
  for (const auto& [key, counts] : pairs) {
    const auto [sent, lost] = counts;
    if (sent < rules.min_sent) continue;
    if (judged != nullptr) {
      const auto ends = std::minmax(key.first, key.second);
      judged->insert(Finding::KeyOf(FindingKind::kLink, ends.first, ends.second));
    }
    const double loss = static_cast<double>(lost) / static_cast<double>(sent);
    const bool bad = loss >= rules.bad_loss;
    for (Direction* d : {&nodes[key.first].out, &nodes[key.second].in}) {
      ++d->judged;
      d->loss_sum += loss;
      if (bad) ++d->bad;
    }
    if (bad) bad_pairs.emplace(key, loss);
  }

  std::set<std::string> faulty;
  for (const auto& [name, tally] : nodes) {
    if (judged != nullptr && (tally.in.judged >= rules.min_peers || tally.out.judged >= rules.min_peers)) {
      judged->insert(Finding::KeyOf(FindingKind::kNode, name));
    }
    if (Majority(tally.in, rules) || Majority(tally.out, rules)) faulty.insert(name);
  }

  std::vector<Finding> findings;
  std::set<std::string> covered;  // members of a faulty domain
  for (const auto& d : domains) {
    uint32_t members_judged = 0;
    uint32_t hit = 0;
    for (const auto& m : d.members) {
      auto it = nodes.find(m);
      if (it == nodes.end()) continue;
      if (it->second.in.judged < rules.min_peers && it->second.out.judged < rules.min_peers) continue;
      ++members_judged;
      if (faulty.count(m)) ++hit;
    }
    if (members_judged >= rules.min_peers && judged != nullptr) {
      judged->insert(Finding::KeyOf(FindingKind::kDomain, d.id));
    }
    if (members_judged < rules.min_peers || hit <= rules.domain_share * members_judged) continue;
    findings.push_back(
        {FindingKind::kDomain, d.id, "", hit, members_judged, static_cast<double>(hit) / members_judged});
    covered.insert(d.members.begin(), d.members.end());
  }
  for (const auto& name : faulty) {
    if (covered.count(name)) continue;
    const NodeTally& t = nodes[name];
    // The worse direction: the larger share of bad peers.
    const Direction& worse =
        (Majority(t.in, rules) && (!Majority(t.out, rules) || t.in.bad * t.out.judged >= t.out.bad * t.in.judged))
            ? t.in
            : t.out;
    findings.push_back({FindingKind::kNode, name, "", worse.bad, worse.judged, worse.MeanLoss()});
  }
  std::map<std::pair<std::string, std::string>, double> links;
  for (const auto& [key, loss] : bad_pairs) {
    const auto& [source, target] = key;
    if (faulty.count(source) || faulty.count(target) || covered.count(source) || covered.count(target)) continue;
    auto ends = std::minmax(source, target);
    double& worst = links[{ends.first, ends.second}];
    worst = std::max(worst, loss);
  }
  for (const auto& [ends, loss] : links) {
    findings.push_back({FindingKind::kLink, ends.first, ends.second, 1, 1, loss});
  }
  std::sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) { return a.Key() < b.Key(); });
  return findings;
}

Explainer::Explainer(const std::vector<Finding>& findings, const std::vector<ProbeDomain>& domains,
                     const AttributionRules& rules)
    : rules_(rules) {
  for (const auto& f : findings) {
    switch (f.kind) {
      case FindingKind::kNode: faulty_nodes_.insert(f.subject); break;
      case FindingKind::kLink: links_.emplace(f.subject, f.peer); break;
      case FindingKind::kDomain:
        for (const auto& d : domains) {
          if (d.id == f.subject) faulty_domains_.push_back(&d);
        }
        break;
    }
  }
}

std::string Explainer::Of(const PairStats& p) const {
  const uint32_t lost = std::min(p.lost, p.sent);
  if (p.sent < rules_.min_sent || static_cast<double>(lost) < rules_.bad_loss * static_cast<double>(p.sent)) return "";
  auto member = [](const ProbeDomain& d, const std::string& node) {
    return std::binary_search(d.members.begin(), d.members.end(), node);
  };
  for (const ProbeDomain* d : faulty_domains_) {
    if (member(*d, p.source) && member(*d, p.target)) return "domain:" + d->id;
  }
  if (faulty_nodes_.contains(p.target)) return "node:" + p.target;
  if (faulty_nodes_.contains(p.source)) return "node:" + p.source;
  if (links_.contains(std::minmax(p.source, p.target))) return "link";
  return "bad";
}

std::vector<std::string> Explain(const std::vector<PairStats>& directions, const std::vector<Finding>& findings,
                                 const std::vector<ProbeDomain>& domains, const AttributionRules& rules) {
  const Explainer explain(findings, domains, rules);
  std::vector<std::string> out;
  out.reserve(directions.size());
  for (const auto& p : directions) out.push_back(explain.Of(p));
  return out;
}

FindingTracker::FindingTracker(uint32_t raise_after, uint32_t clear_after)
    : raise_after_(std::max<uint32_t>(1, raise_after)), clear_after_(std::max<uint32_t>(1, clear_after)) {}

std::vector<FindingTracker::Change> FindingTracker::Update(const std::vector<Finding>& findings,
                                                           const std::set<std::string>* judged) {
  std::vector<Change> changes;
  std::set<std::string> seen;
  for (const auto& f : findings) {
    const std::string key = f.Key();
    seen.insert(key);
    Entry& e = entries_[key];
    e.finding = f;
    e.missed = 0;
    if (e.seen < raise_after_) ++e.seen;
    if (!e.active && e.seen >= raise_after_) {
      e.active = true;
      changes.push_back({f, true});
    }
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (seen.count(it->first) || (judged != nullptr && !judged->contains(it->first))) {
      ++it;  // found again, or not judged this window: no data is not health
      continue;
    }
    e.seen = 0;
    ++e.missed;
    if (e.active && e.missed >= clear_after_) {
      changes.push_back({e.finding, false});
      it = entries_.erase(it);
    } else if (!e.active) {
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(changes.begin(), changes.end(),
            [](const Change& a, const Change& b) { return a.finding.Key() < b.finding.Key(); });
  return changes;
}

void FindingTracker::Restore(const std::vector<Finding>& active) {
  for (const auto& f : active) {
    Entry& e = entries_[f.Key()];
    e.finding = f;
    e.seen = raise_after_;
    e.missed = 0;
    e.active = true;
  }
}

std::vector<Finding> FindingTracker::Active() const {
  std::vector<Finding> out;
  for (const auto& [key, e] : entries_) {
    if (e.active) out.push_back(e.finding);
  }
  return out;
}

}  // namespace clusterd::pingmesh
