#include "clusterd/state/chain_drift.h"

#include <algorithm>
#include <tuple>

namespace clusterd {

std::string DriftFinding::Message() const {
  return link + " " + version + " where " + std::to_string(agree) + " of " + std::to_string(known) + " nodes of pool " +
         pool + " run " + expected;
}

std::vector<DriftFinding> FindChainDrift(const std::vector<NodeVersions>& nodes) {
  // (pool, link) -> version -> nodes running it
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::vector<const NodeVersions*>>> groups;
  for (const NodeVersions& n : nodes) {
    for (const auto& [link, version] : n.versions) {
      if (!version.empty()) groups[{n.pool, link}][version].push_back(&n);
    }
  }
  std::vector<DriftFinding> out;
  for (const auto& [key, by_version] : groups) {
    size_t known = 0;
    const std::string* expected = nullptr;
    size_t most = 0;
    for (const auto& [version, holders] : by_version) {
      known += holders.size();
      if (holders.size() > most) {
        most = holders.size();
        expected = &version;
      }
    }
    if (known < kChainDriftMinNodes || 2 * most <= known) continue;
    for (const auto& [version, holders] : by_version) {
      if (&version == expected) continue;
      for (const NodeVersions* n : holders) {
        out.push_back(DriftFinding{n->node, key.first, key.second, version, *expected, most, known});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const DriftFinding& a, const DriftFinding& b) {
    return std::tie(a.node, a.link) < std::tie(b.node, b.link);
  });
  return out;
}

}  // namespace clusterd
