// A job's placement indexed by node and device. Built once per query (O(ranks
// log ranks)) so that finding the ranks a fault hits costs a lookup instead
// of a walk over every rank: matching F faults against a job of R ranks is
// O(R log R + F log R), never O(F x R).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "clusterd/v1/types.pb.h"

namespace clusterd {

class PlacementIndex {
 public:
  explicit PlacementIndex(const v1::Job& job) {
    for (const auto& p : job.placement()) {
      NodeRanks& n = nodes_[p.node()];
      n.all.push_back(p.rank());
      if (p.has_device_id()) {
        n.by_device[p.device_id()].push_back(p.rank());
      } else if (p.any_device()) {
        n.any_device.push_back(p.rank());
      }
    }
    for (auto& [name, n] : nodes_) {
      std::sort(n.all.begin(), n.all.end());
      std::sort(n.any_device.begin(), n.any_device.end());
      for (auto& [device, ranks] : n.by_device) {
        ranks.insert(ranks.end(), n.any_device.begin(), n.any_device.end());  // may hold it
        std::sort(ranks.begin(), ranks.end());
      }
    }
  }

  // The ranks the fault hits, sorted, or null when it hits none: every rank
  // on the fault's node for a node-level fault, the ranks on its device for
  // a device fault (recovery::FaultHitsRank, precomputed per device).
  const std::vector<uint32_t>* RanksHit(const v1::Fault& f) const {
    auto it = nodes_.find(f.node());
    if (it == nodes_.end()) return nullptr;
    if (!f.has_device_id()) return &it->second.all;
    auto dit = it->second.by_device.find(f.device_id());
    if (dit != it->second.by_device.end()) return &dit->second;
    return it->second.any_device.empty() ? nullptr : &it->second.any_device;
  }

  // The job's nodes, in name order.
  std::vector<std::string> Nodes() const {
    std::vector<std::string> out;
    out.reserve(nodes_.size());
    for (const auto& [name, n] : nodes_) out.push_back(name);
    return out;
  }

 private:
  struct NodeRanks {
    std::vector<uint32_t> all;
    std::map<uint32_t, std::vector<uint32_t>> by_device;  // with the any_device ranks
    std::vector<uint32_t> any_device;                     // hit by a fault on any device
  };
  std::map<std::string, NodeRanks> nodes_;
};

}  // namespace clusterd
