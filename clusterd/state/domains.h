// Fault domains (docs/domains.md): the topology model. Levels are configured
// in order, broadest first, the way Kueue's Topology levels are (for example
// superpod, rack): each names a node label key, and a node belongs to the
// domain "<level>=<value of that label>" of every level whose label it
// carries. The built-in levels are what the stacks publish: MindCluster's
// device plugin labels huawei.com/topotree.superpodid and
// huawei.com/topotree.rackid, GPU feature discovery's nvidia.com/gpu.clique.
//
// Pure: nothing here holds state. The membership of every domain is one walk
// over the nodes (DomainIndex::Build); a caller that plans per domain (the
// incident rule, a probe planner) builds it once and keeps it until the
// nodes' labels change (NodeTable::labels_generation).
//
// Thread contract: a DomainModel is immutable after construction; the
// functions taking a StateView run under the state's lock (ClusterState::Read
// or the writer).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/domain.pb.h"
#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd {

class StateView;

struct DomainLevel {
  std::string name;  // "superpod"
  std::string key;   // the node label, "huawei.com/topotree.superpodid"
  bool operator==(const DomainLevel&) const = default;
};

// "level=key" -> DomainLevel; InvalidArgument naming the entry otherwise.
StatusOr<DomainLevel> ParseDomainLevel(std::string_view entry);

// The default levels (config domain_levels): MindCluster's SuperPoD and
// rack labels, then NVIDIA's NVLink clique.
std::vector<std::string> DefaultDomainLevels();

// "superpod=7" for {superpod, 7}; the inverse is ParseDomainRef.
std::string DomainKey(const v1::DomainRef& ref);
StatusOr<v1::DomainRef> ParseDomainRef(std::string_view text);

class DomainModel {
 public:
  DomainModel() = default;
  // InvalidArgument for an entry that does not parse, a level named twice, or
  // more than kMaxLevels.
  static StatusOr<DomainModel> Make(const std::vector<std::string>& entries);
  static constexpr size_t kMaxLevels = 8;

  const std::vector<DomainLevel>& levels() const { return levels_; }
  bool empty() const { return levels_.empty(); }
  // The level's index, or -1.
  int LevelIndex(std::string_view level) const;
  // The node's domains, in level order (a level whose label the node lacks,
  // or carries empty, is left out).
  std::vector<v1::DomainRef> Of(const google::protobuf::Map<std::string, std::string>& labels) const;
  std::vector<v1::DomainRef> Of(const v1::Node& node) const { return Of(node.labels()); }
  // Node.domains filled in from its labels.
  void Describe(v1::Node* node) const;
  // The label selector term that selects a domain's members
  // ("huawei.com/topotree.superpodid=7"); InvalidArgument for a level not
  // configured.
  StatusOr<std::string> SelectorOf(const v1::DomainRef& ref) const;

 private:
  std::vector<DomainLevel> levels_;
};

// Every domain's members, from one walk over the nodes. Keys are DomainKey
// strings; members are node names, sorted.
struct DomainIndex {
  std::map<std::string, std::vector<std::string>> members;
  static DomainIndex Build(const StateView& view, const DomainModel& model);
  size_t SizeOf(const std::string& key) const {
    auto it = members.find(key);
    return it == members.end() ? 0 : it->second.size();
  }
};

// What ListDomains needs of the incidents (IncidentRule implements it).
class IncidentLookup {
 public:
  virtual ~IncidentLookup() = default;
  // The domain's open incident ("" none) and whether it isolated the domain.
  virtual std::string OpenIncidentOf(const std::string& domain_key, bool* isolated) const = 0;
  // Whether the domain's open incident keeps placement out of it without
  // isolating it (Domain.avoided).
  virtual bool Avoided(const std::string& domain_key) const {
    (void)domain_key;
    return false;
  }
};

// ClusterService.ListDomains over the state (under its lock): by level in
// configured order, then name; pages bounded like every List (PageBudget).
// `incidents` may be null.
StatusOr<v1::ListDomainsResponse> ListDomains(const StateView& view, const DomainModel& model,
                                              const IncidentLookup* incidents, const v1::ListDomainsRequest& req);

// Per configured level (each present, 0 when none), the domains that are
// degraded: a member node or chip with an active fault at SUB_HEALTH or
// worse (or a node UNKNOWN), or an open incident, as ListDomains'
// degraded_only counts them (the metric clusterd_domains_degraded{level}).
// One walk over the nodes, under the state's lock. `incidents` may be null.
std::map<std::string, uint32_t> DegradedDomainsByLevel(const StateView& view, const DomainModel& model,
                                                       const IncidentLookup* incidents);

}  // namespace clusterd
