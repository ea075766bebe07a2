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

std::string Finding::Key() const {
  switch (kind) {
    case FindingKind::kNode: return "node/" + subject;
    case FindingKind::kLink: return "link/" + subject + "/" + peer;
    case FindingKind::kDomain: return "domain/" + subject;
  }
  return subject;
}

std::vector<Finding> Attribute(const std::vector<PairStats>& window, const std::vector<ProbeDomain>& domains,
                               const AttributionRules& rules) {
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
    if (Majority(tally.in, rules) || Majority(tally.out, rules)) faulty.insert(name);
  }

  std::vector<Finding> findings;
  std::set<std::string> covered;  // members of a faulty domain
  for (const auto& d : domains) {
    uint32_t judged = 0;
    uint32_t hit = 0;
    for (const auto& m : d.members) {
      auto it = nodes.find(m);
      if (it == nodes.end()) continue;
      if (it->second.in.judged < rules.min_peers && it->second.out.judged < rules.min_peers) continue;
      ++judged;
      if (faulty.count(m)) ++hit;
    }
    if (judged < rules.min_peers || hit <= rules.domain_share * judged) continue;
    findings.push_back({FindingKind::kDomain, d.id, "", hit, judged, static_cast<double>(hit) / judged});
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

FindingTracker::FindingTracker(uint32_t raise_after, uint32_t clear_after)
    : raise_after_(std::max<uint32_t>(1, raise_after)), clear_after_(std::max<uint32_t>(1, clear_after)) {}

std::vector<FindingTracker::Change> FindingTracker::Update(const std::vector<Finding>& findings) {
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
    if (seen.count(it->first)) {
      ++it;
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
