#include "clusterd/state/chain_drift.h"

#include <algorithm>
#include <tuple>

#include "common/levels.h"

namespace clusterd {

std::string DriftFinding::Message() const {
  if (tie) {
    return link + " " + version + " while other nodes of " + pool + " run " + expected + " (no majority among " +
           std::to_string(known) + ": the job's finding, not this node's)";
  }
  return link + " " + version + " where " + std::to_string(agree) + " of " + std::to_string(known) + " nodes of " +
         (pool.rfind("job ", 0) == 0 ? "" : "pool ") + pool + " run " + expected;
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

std::vector<DriftFinding> FindJobChainDrift(const std::string& job, const std::vector<const NodeVersions*>& nodes) {
  const std::string pool = "job " + job;
  std::map<std::string, std::map<std::string, std::vector<const NodeVersions*>>> by_link;  // link -> version -> nodes
  for (const NodeVersions* n : nodes) {
    for (const auto& [link, version] : n->versions) {
      if (!version.empty()) by_link[link][version].push_back(n);
    }
  }
  std::vector<DriftFinding> out;
  for (const auto& [link, by_version] : by_link) {
    if (by_version.size() < 2) continue;  // one version: no drift
    size_t known = 0, most = 0;
    const std::string* expected = nullptr;
    for (const auto& [version, holders] : by_version) {
      known += holders.size();
      if (holders.size() > most) {
        most = holders.size();
        expected = &version;
      }
    }
    const bool tie = 2 * most <= known;
    for (const auto& [version, holders] : by_version) {
      if (!tie && &version == expected) continue;
      std::string others;
      for (const auto& [v, h] : by_version) {
        if (v != version) others += (others.empty() ? "" : ", ") + v;
      }
      for (const NodeVersions* n : holders) {
        if (out.size() >= kChainJobDriftMax) break;
        out.push_back(DriftFinding{n->node, pool, link, version, tie ? others : *expected, tie ? 0 : most, known, tie});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const DriftFinding& a, const DriftFinding& b) {
    return std::tie(a.node, a.link) < std::tie(b.node, b.link);
  });
  return out;
}

std::optional<std::string> FirmwareMismatch(const Catalog& catalog, const std::string& driver,
                                            const std::string& firmware) {
  const std::vector<std::string>* known = catalog.FirmwareFor(driver);
  if (known == nullptr) return std::nullopt;
  std::string list;
  for (const std::string& v : *known) {
    if (AsciiUpper(v) == AsciiUpper(firmware)) return std::nullopt;
    if (list.size() < 200) list += (list.empty() ? "" : ", ") + v;
  }
  return "firmware " + firmware + " is not a known pair of driver " + driver + " (the catalog pairs it with " + list +
         ")";
}

}  // namespace clusterd
