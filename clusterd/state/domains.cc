#include "clusterd/state/domains.h"

#include <algorithm>
#include <utility>

#include "clusterd/state/response_limits.h"
#include "clusterd/state/state_view.h"
#include "clusterd/state/validation.h"
#include "clusterd/storage/key_codec.h"
#include "common/validation.h"

namespace clusterd {

StatusOr<DomainLevel> ParseDomainLevel(std::string_view entry) {
  const size_t eq = entry.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == entry.size()) {
    return InvalidArgument("domain level \"" + std::string(entry) + "\" is not level=label-key");
  }
  DomainLevel level{std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1))};
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("domain level name", level.name));
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("domain level key", level.key));
  return level;
}

std::vector<std::string> DefaultDomainLevels() {
  return {"superpod=huawei.com/topotree.superpodid", "rack=huawei.com/topotree.rackid", "nvlink=nvidia.com/gpu.clique"};
}

std::string DomainKey(const v1::DomainRef& ref) { return ref.level() + "=" + ref.name(); }

StatusOr<v1::DomainRef> ParseDomainRef(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size()) {
    return InvalidArgument("domain \"" + std::string(text) + "\" is not level=name");
  }
  v1::DomainRef ref;
  ref.set_level(std::string(text.substr(0, eq)));
  ref.set_name(std::string(text.substr(eq + 1)));
  return ref;
}

StatusOr<DomainModel> DomainModel::Make(const std::vector<std::string>& entries) {
  if (entries.size() > kMaxLevels) {
    return InvalidArgument("domain_levels: more than " + std::to_string(kMaxLevels) + " levels");
  }
  DomainModel model;
  for (const std::string& e : entries) {
    auto level = ParseDomainLevel(e);
    if (!level.ok()) return level.status();
    if (model.LevelIndex(level->name) >= 0) return InvalidArgument("domain_levels: level " + level->name + " twice");
    model.levels_.push_back(std::move(*level));
  }
  return model;
}

int DomainModel::LevelIndex(std::string_view level) const {
  for (size_t i = 0; i < levels_.size(); ++i) {
    if (levels_[i].name == level) return static_cast<int>(i);
  }
  return -1;
}

std::vector<v1::DomainRef> DomainModel::Of(const google::protobuf::Map<std::string, std::string>& labels) const {
  std::vector<v1::DomainRef> out;
  for (const DomainLevel& level : levels_) {
    auto it = labels.find(level.key);
    if (it == labels.end() || it->second.empty()) continue;
    v1::DomainRef& ref = out.emplace_back();
    ref.set_level(level.name);
    ref.set_name(it->second);
  }
  return out;
}

void DomainModel::Describe(v1::Node* node) const {
  node->clear_domains();
  for (v1::DomainRef& ref : Of(node->labels())) *node->add_domains() = std::move(ref);
}

StatusOr<std::string> DomainModel::SelectorOf(const v1::DomainRef& ref) const {
  const int i = LevelIndex(ref.level());
  if (i < 0) return InvalidArgument("domain: level \"" + ref.level() + "\" is not configured (domain_levels)");
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("domain name", ref.name()));
  return levels_[static_cast<size_t>(i)].key + "=" + ref.name();
}

DomainIndex DomainIndex::Build(const StateView& view, const DomainModel& model) {
  DomainIndex index;
  if (model.empty()) return index;
  for (const auto& [name, n] : view.node_states()) {
    for (const v1::DomainRef& ref : model.Of(n.record.node())) index.members[DomainKey(ref)].push_back(name);
  }
  return index;  // the nodes are walked in name order: members come sorted
}

namespace {

// ListDomains' order and page key: the level's index, then the name.
std::string DomainSortKey(int level, const std::string& name) {
  return std::string(1, static_cast<char>('A' + level)) + name;
}

}  // namespace

StatusOr<v1::ListDomainsResponse> ListDomains(const StateView& view, const DomainModel& model,
                                              const IncidentLookup* incidents, const v1::ListDomainsRequest& req) {
  auto page = ParsePage(req.page_size(), req.page_token());
  if (!page.ok()) return page.status();
  if (!req.level().empty() && model.LevelIndex(req.level()) < 0) {
    return InvalidArgument("level: \"" + req.level() + "\" is not configured (domain_levels)");
  }
  std::map<std::string, v1::Domain> domains;  // by DomainSortKey
  for (const auto& [name, n] : view.node_states()) {
    const v1::Node& node = n.record.node();
    for (const v1::DomainRef& ref : model.Of(node)) {
      if (!req.level().empty() && ref.level() != req.level()) continue;
      v1::Domain& d = domains[DomainSortKey(model.LevelIndex(ref.level()), ref.name())];
      if (!d.has_ref()) *d.mutable_ref() = ref;
      d.set_nodes(d.nodes() + 1);
      d.set_devices(d.devices() + static_cast<uint32_t>(n.devices.size()));
      if (node.worst_level() >= v1::FAULT_LEVEL_SUB_HEALTH || node.health() == v1::HEALTH_UNKNOWN) {
        d.set_nodes_faulted(d.nodes_faulted() + 1);
      }
      for (const auto& [id, dev] : n.devices) {
        if (dev.worst_level() >= v1::FAULT_LEVEL_SUB_HEALTH) d.set_devices_faulted(d.devices_faulted() + 1);
      }
    }
  }
  v1::ListDomainsResponse out;
  int32_t total = 0;
  PageBudget budget(page->size);
  std::string last;
  for (auto& [key, d] : domains) {
    if (incidents != nullptr) {
      bool isolated = false;
      d.set_open_incident(incidents->OpenIncidentOf(DomainKey(d.ref()), &isolated));
      d.set_isolated(isolated);
      d.set_avoided(incidents->Avoided(DomainKey(d.ref())));
    }
    if (req.degraded_only() && d.nodes_faulted() == 0 && d.devices_faulted() == 0 && d.open_incident().empty()) {
      continue;
    }
    ++total;
    if (!page->start.empty() && key <= page->start) continue;
    if (!budget.closed() && budget.Take(d.ByteSizeLong())) {
      last = key;
      *out.add_domains() = std::move(d);
      continue;
    }
    if (out.next_page_token().empty() && !last.empty()) out.set_next_page_token(storage::HexEncode(last));
  }
  out.set_total_size(total);
  return out;
}

std::map<std::string, uint32_t> DegradedDomainsByLevel(const StateView& view, const DomainModel& model,
                                                       const IncidentLookup* incidents) {
  std::map<std::string, uint32_t> out;
  for (const DomainLevel& level : model.levels()) out[level.name] = 0;
  std::map<std::string, bool> degraded;  // DomainKey -> degraded
  std::map<std::string, std::string> level_of;
  for (const auto& [name, n] : view.node_states()) {
    const v1::Node& node = n.record.node();
    bool faulted = node.worst_level() >= v1::FAULT_LEVEL_SUB_HEALTH || node.health() == v1::HEALTH_UNKNOWN;
    for (const auto& [id, dev] : n.devices) faulted = faulted || dev.worst_level() >= v1::FAULT_LEVEL_SUB_HEALTH;
    for (const v1::DomainRef& ref : model.Of(node)) {
      const std::string key = DomainKey(ref);
      bool& d = degraded[key];
      d = d || faulted;
      level_of.try_emplace(key, ref.level());
    }
  }
  for (const auto& [key, d] : degraded) {
    bool isolated = false;
    if (d || (incidents != nullptr && !incidents->OpenIncidentOf(key, &isolated).empty())) ++out[level_of[key]];
  }
  return out;
}

}  // namespace clusterd
