#include "clusterd/mindcluster/cluster_info.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/go_json.h"
#include "common/config_util.h"           // SplitCommaList, JoinCommaList
#include "clusterd/mindcluster/signal.h"  // LevelName

namespace clusterd::mindcluster {
namespace {

using json = nlohmann::json;

std::set<uint32_t> Ids(const std::string& type, const std::vector<std::string>& names) {
  std::set<uint32_t> out;
  for (const auto& n : names) {
    if (auto id = ChipId(type, n)) out.insert(*id);
  }
  return out;
}

std::vector<std::string> Names(const std::string& type, const std::set<uint32_t>& ids) {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (uint32_t id : ids) out.push_back(ChipName(type, id));
  return out;
}

// Adds `add` into `into` (same chip and kind): codes united, the more
// serious level kept.
void MergeFault(DeviceFault* into, const DeviceFault& add) {
  std::vector<std::string> codes = SplitCommaList(into->fault_code);
  for (const auto& c : SplitCommaList(add.fault_code)) {
    if (std::find(codes.begin(), codes.end(), c) == codes.end()) codes.push_back(c);
  }
  std::sort(codes.begin(), codes.end());
  into->fault_code = JoinCommaList(codes);
  if (LevelRank(add.fault_level) > LevelRank(into->fault_level)) {
    into->fault_level = add.fault_level;
    into->fault_handling = add.fault_handling;
    into->large_model_fault_level = add.large_model_fault_level;
  }
  for (const auto& [code, tl] : add.fault_time_and_level) into->fault_time_and_level.emplace(code, tl);
}

constexpr std::string_view kDeviceInfoCmPrefix = "mindx-dl-deviceinfo-";

}  // namespace

NodeDeviceInfo MergeForVolcano(const NodeDeviceInfo* plugin, const NodeState& ours) {
  NodeDeviceInfo out;
  if (plugin) {
    out = *plugin;
  } else {
    out.device_type = ours.device_type.empty() ? "Ascend910" : ours.device_type;
    for (uint32_t chip : ours.chips) out.available.push_back(ChipName(out.device_type, chip));
  }
  const std::string& type = out.device_type;
  std::set<uint32_t> available = Ids(type, out.available), unhealthy = Ids(type, out.unhealthy);
  std::set<uint32_t> all = available;
  for (const auto* list : {&out.unhealthy, &out.network_unhealthy, &out.recovering}) {
    for (uint32_t id : Ids(type, *list)) all.insert(id);
  }
  for (uint32_t chip : ours.chips) all.insert(chip);
  for (const auto& [chip, state] : ours.chip_state) all.insert(chip);

  // One entry per (chip, kind), the plugin's first.
  std::map<std::pair<uint32_t, std::string>, DeviceFault> faults;
  for (const DeviceFault& f : out.faults) {
    auto id = ChipId(type, f.npu_name);
    if (!id) continue;
    auto [it, fresh] = faults.try_emplace({*id, f.fault_type}, f);
    if (!fresh) MergeFault(&it->second, f);
  }
  static const ChipState kNone;
  for (uint32_t chip : all) {
    auto found = ours.chip_state.find(chip);
    const ChipState& cs = found == ours.chip_state.end() ? kNone : found->second;
    const bool isolated = ours.isolated || cs.isolated;
    const bool removes = isolated || cs.separated || cs.level >= v1::FAULT_LEVEL_RESTART_REQUEST;
    const bool pre_separate = !removes && cs.level == v1::FAULT_LEVEL_PRE_SEPARATE;
    if (!removes && !pre_separate) continue;
    available.erase(chip);
    if (removes || !cs.in_use) unhealthy.insert(chip);
    DeviceFault f;
    f.fault_type = cs.public_fault ? "PublicFault" : "CardUnhealthy";
    f.npu_name = ChipName(type, chip);
    const v1::FaultLevel level = isolated && cs.level < v1::FAULT_LEVEL_SEPARATE ? v1::FAULT_LEVEL_SEPARATE : cs.level;
    f.fault_level = f.fault_handling = f.large_model_fault_level =
        cs.separated ? std::string(kManuallySeparateNPU) : std::string(LevelName(level));
    std::vector<std::string> codes = cs.codes;
    std::sort(codes.begin(), codes.end());
    codes.erase(std::unique(codes.begin(), codes.end()), codes.end());
    f.fault_code = JoinCommaList(codes);
    auto [it, fresh] = faults.try_emplace({chip, f.fault_type}, f);
    if (!fresh) MergeFault(&it->second, f);
  }
  out.available = Names(type, available);
  out.unhealthy = Names(type, unhealthy);
  out.network_unhealthy = Names(type, Ids(type, out.network_unhealthy));
  out.recovering = Names(type, Ids(type, out.recovering));
  out.faults.clear();
  for (auto& [key, f] : faults) out.faults.push_back(std::move(f));
  return out;
}

std::string ClusterInfoEntryJson(const std::string& node, const NodeDeviceInfo& entry) {
  return "{\"DeviceList\":" + GoJsonStringMap(DeviceListOf(entry)) +
         ",\"UpdateTime\":" + std::to_string(entry.update_time) +
         ",\"CmName\":" + GoJsonString(std::string(kDeviceInfoCmPrefix) + node) +
         ",\"SuperPodID\":" + std::to_string(entry.super_pod_id) +
         ",\"RackID\":" + std::to_string(entry.rack_id.value_or(0)) +
         ",\"ServerIndex\":" + std::to_string(entry.server_index) + "}";
}

template <typename Traits>
ChunkedPublisher<Traits>::ChunkedPublisher(size_t max_bytes) : max_bytes_(max_bytes) {}

template <typename Traits>
std::string ChunkedPublisher<Traits>::NameOf(size_t index) {
  return std::string(Traits::kConfigMapPrefix) + std::to_string(index);
}

template <typename Traits>
size_t ChunkedPublisher<Traits>::EntryBytes(const std::string& node, const std::string& entry_json) {
  // "key":value plus the comma that separates it from its neighbour.
  return GoJsonString(std::string(Traits::kKeyPrefix) + node).size() + 1 + entry_json.size() + 1;
}

template <typename Traits>
size_t ChunkedPublisher<Traits>::Place(const std::string& node, size_t bytes, std::optional<size_t> prefer) {
  // A node stays in its ConfigMap up to the limit, but one that comes or
  // moves fills a ConfigMap only to 7/8 of it: the room left lets entries
  // grow (chips failing add -Fault entries) without moving nodes, since a
  // move costs two writes, the first of them urgent.
  auto fits = [&](const Chunk& c, size_t limit) { return c.bytes + bytes <= limit; };
  std::optional<size_t> chosen;
  if (prefer) {
    auto it = chunks_.find(*prefer);
    if (it == chunks_.end() || fits(it->second, max_bytes_)) chosen = *prefer;
  }
  for (auto it = chunks_.begin(); !chosen && it != chunks_.end(); ++it) {
    if (fits(it->second, max_bytes_ - max_bytes_ / 8)) chosen = it->first;
  }
  if (!chosen) {
    size_t index = 0;
    while (chunks_.count(index)) ++index;
    chosen = index;
  }
  to_blank_.erase(*chosen);
  blank_.erase(*chosen);
  Chunk& c = chunks_[*chosen];
  c.nodes.insert(node);
  c.bytes += bytes;
  Touch(c);
  if (prefer != chosen) c.gained = true;
  return *chosen;
}

template <typename Traits>
void ChunkedPublisher<Traits>::Touch(Chunk& c) {
  if (!c.dirty || c.refresh_only) c.dirty_seq = ++dirty_seq_;
  c.dirty = true;
  c.refresh_only = false;
}

template <typename Traits>
void ChunkedPublisher<Traits>::Leave(const std::string& node, const Node& n) {
  auto it = chunks_.find(n.chunk);
  if (it == chunks_.end()) return;
  Chunk& c = it->second;
  c.nodes.erase(node);
  c.bytes -= EntryBytes(node, n.json);
  Touch(c);
  if (c.nodes.empty()) {
    chunks_.erase(it);
    to_blank_.insert(n.chunk);
  }
}

template <typename Traits>
Status ChunkedPublisher<Traits>::Set(const std::string& node, Entry entry, int64_t now_s) {
  auto it = nodes_.find(node);
  int64_t update_time = std::max(entry.update_time, now_s);
  if (it != nodes_.end()) {
    Entry same = entry;
    same.update_time = it->second.entry.update_time;
    if (same == it->second.entry) return Status::Ok();  // nothing Volcano reads changed
    update_time = std::max(update_time, it->second.entry.update_time + 1);
  }
  entry.update_time = update_time;
  std::string entry_json = Traits::Json(node, entry);
  const size_t bytes = EntryBytes(node, entry_json);
  if (bytes + 2 > max_bytes_) {
    return InvalidArgument(std::string(Traits::kConfigMapPrefix) + " entry of node " + node + " is " +
                           std::to_string(bytes) + " bytes, more than a ConfigMap holds (" +
                           std::to_string(max_bytes_) + ")");
  }
  const bool urgent = it != nodes_.end() && Traits::Urgent(it->second.entry, entry);
  const bool quiet = it == nodes_.end() || now_s - it->second.changed_s >= kQuietSeconds;
  std::optional<size_t> prefer;
  if (it != nodes_.end()) {
    prefer = it->second.chunk;
    Leave(node, it->second);
  }
  const size_t chunk = Place(node, bytes, prefer);
  if (urgent) {
    Chunk& c = chunks_.at(chunk);
    c.urgent = true;
    if (quiet && !c.quiet_urgent) {
      c.quiet_urgent = true;
      c.quiet_seq = ++dirty_seq_;
    }
  }
  nodes_[node] = Node{std::move(entry), std::move(entry_json), chunk, now_s};
  return Status::Ok();
}

template <typename Traits>
void ChunkedPublisher<Traits>::Refresh(int64_t now_s) {
  std::vector<std::string> overflowing;
  for (auto& [node, n] : nodes_) {
    n.entry.update_time = std::max(now_s, n.entry.update_time + 1);
    std::string json = Traits::Json(node, n.entry);
    Chunk& c = chunks_.at(n.chunk);
    c.bytes = c.bytes - EntryBytes(node, n.json) + EntryBytes(node, json);
    n.json = std::move(json);
    if (c.bytes > max_bytes_) overflowing.push_back(node);
  }
  // Written after every ConfigMap whose content changed for a cause (Pending),
  // so a refresh never holds a fault back behind the write budget.
  for (auto& [index, c] : chunks_) {
    if (!c.dirty) {
      c.dirty = c.refresh_only = true;
      c.dirty_seq = ++dirty_seq_;
    }
  }
  // A longer UpdateTime can take a full ConfigMap past the limit.
  Fit(overflowing);
}

template <typename Traits>
void ChunkedPublisher<Traits>::Fit() {
  std::vector<std::string> overflowing;
  for (const auto& [index, c] : chunks_) {
    if (c.bytes > max_bytes_) overflowing.insert(overflowing.end(), c.nodes.rbegin(), c.nodes.rend());
  }
  Fit(overflowing);
}

template <typename Traits>
void ChunkedPublisher<Traits>::Fit(const std::vector<std::string>& candidates) {
  // An over-full chunk's nodes move, one at a time, until it fits again.
  for (const std::string& node : candidates) {
    Node& n = nodes_.at(node);
    auto it = chunks_.find(n.chunk);
    if (it == chunks_.end() || it->second.bytes <= max_bytes_) continue;
    Leave(node, n);
    n.chunk = Place(node, EntryBytes(node, n.json), std::nullopt);
  }
}

template <typename Traits>
void ChunkedPublisher<Traits>::Remove(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  Leave(node, it->second);
  nodes_.erase(it);
}

template <typename Traits>
std::string ChunkedPublisher<Traits>::ValueOf(const Chunk& c) const {
  // A Go map: keys in byte order, which is the set's (the prefix is common).
  std::string out = "{";
  for (const std::string& node : c.nodes) {
    if (out.size() > 1) out.push_back(',');
    out += GoJsonString(std::string(Traits::kKeyPrefix) + node) + ":" + nodes_.at(node).json;
  }
  return out + "}";
}

template <typename Traits>
typename ChunkedPublisher<Traits>::Plan ChunkedPublisher<Traits>::Pending(bool all, size_t max_writes) const {
  Plan plan;
  // Gaining a node first (so Volcano never misses it), then changed for a
  // cause, then rewritten only for a refresh.
  // A chip taken out before other changes; within each, the ConfigMap
  // waiting longest first, so that under a write budget none starves.
  // An urgent change of a quiet node before those of nodes that keep
  // changing (kQuietSeconds).
  auto rank = [](const Chunk& c) { return c.gained ? 0 : c.quiet_urgent ? 1 : c.urgent ? 2 : c.refresh_only ? 4 : 3; };
  std::vector<std::tuple<int, uint64_t, size_t>> order;
  for (const auto& [index, c] : chunks_) {
    const uint64_t seq = !c.dirty ? 0 : c.quiet_urgent && !c.gained ? c.quiet_seq : c.dirty_seq;
    if (all || c.dirty) order.emplace_back(rank(c), seq, index);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [r, seq, index] : order) {
    if (plan.writes.size() >= max_writes) {
      plan.more = true;
      break;
    }
    const Chunk& c = chunks_.at(index);
    plan.writes.push_back(Write{NameOf(index), ValueOf(c), c.dirty && c.refresh_only, c.gained || c.urgent});
  }
  // After every write that moved their nodes elsewhere.
  for (size_t index : to_blank_) {
    if (plan.writes.size() >= max_writes) {
      plan.more = true;
      break;
    }
    plan.writes.push_back(Write{NameOf(index), "", false, false});
  }
  return plan;
}

template <typename Traits>
void ChunkedPublisher<Traits>::Written(const Plan& plan) {
  for (const Write& w : plan.writes) {
    const size_t index = std::stoul(w.name.substr(Traits::kConfigMapPrefix.size()));
    if (auto it = chunks_.find(index); it != chunks_.end()) {
      Chunk& c = it->second;
      c.dirty = c.gained = c.refresh_only = c.urgent = c.quiet_urgent = false;
    } else if (w.value.empty() && to_blank_.erase(index) > 0) {
      blank_.insert(index);
    }
  }
}

template <typename Traits>
Status ChunkedPublisher<Traits>::Adopt(const std::string& name, std::string_view value) {
  const std::string_view prefix = Traits::kConfigMapPrefix;
  if (name.rfind(prefix, 0) != 0) return InvalidArgument(name + " is not a " + std::string(prefix) + "<i> name");
  const std::string digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return InvalidArgument(name + " is not a " + std::string(prefix) + "<i> name");
  }
  const size_t index = std::stoul(digits);
  if (chunks_.count(index)) return InvalidArgument(name + " was adopted already");
  if (value.empty()) {  // a surplus ConfigMap (the reference's or ours): kept, reused first
    blank_.insert(index);
    return Status::Ok();
  }
  json doc = json::parse(value, nullptr, false);
  if (!doc.is_object()) return InvalidArgument(name + ": the value is not a JSON object");
  std::vector<std::pair<std::string, Entry>> adopted;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key().rfind(Traits::kKeyPrefix, 0) != 0 || !it->is_object()) {
      return InvalidArgument(name + ": \"" + it.key().substr(0, 64) + "\" is not a node's entry");
    }
    auto entry = Traits::Parse(*it);
    if (!entry.ok()) return InvalidArgument(name + ": " + it.key() + ": " + entry.status().message());
    adopted.emplace_back(it.key().substr(Traits::kKeyPrefix.size()), std::move(*entry));
  }
  blank_.erase(index);
  Chunk& c = chunks_[index];
  for (auto& [node, entry] : adopted) {
    if (nodes_.count(node)) {  // in two ConfigMaps: kept in the first, this one rewritten
      Touch(c);
      continue;
    }
    std::string entry_json = Traits::Json(node, entry);
    c.bytes += EntryBytes(node, entry_json);
    c.nodes.insert(node);
    nodes_[node] = Node{std::move(entry), std::move(entry_json), index};
  }
  if (c.nodes.empty()) {  // every node in an earlier one: this one is written ""
    chunks_.erase(index);
    to_blank_.insert(index);
  }
  return Status::Ok();
}

template <typename Traits>
std::vector<std::string> ChunkedPublisher<Traits>::Nodes() const {
  std::vector<std::string> out;
  out.reserve(nodes_.size());
  for (const auto& [node, n] : nodes_) out.push_back(node);
  return out;
}

template <typename Traits>
std::optional<size_t> ChunkedPublisher<Traits>::ChunkOf(const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.chunk;
}

template <typename Traits>
std::optional<int64_t> ChunkedPublisher<Traits>::UpdateTimeOf(const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.entry.update_time;
}

// A chip that leaves the available list is what Volcano must see first.
bool DeviceEntryTraits::Urgent(const Entry& before, const Entry& after) {
  for (const auto& chip : before.available) {
    if (std::find(after.available.begin(), after.available.end(), chip) == after.available.end()) return true;
  }
  return false;
}

StatusOr<NodeDeviceInfo> DeviceEntryTraits::Parse(const json& e) {
  auto list = e.find("DeviceList");
  auto ut = e.find("UpdateTime");
  if (!e.is_object() || list == e.end() || !list->is_object() || ut == e.end() || !ut->is_number_integer()) {
    return InvalidArgument("no DeviceList or UpdateTime");
  }
  std::map<std::string, std::string> raw;
  for (auto k = list->begin(); k != list->end(); ++k) {
    if (!k->is_string()) return InvalidArgument("DeviceList." + k.key() + " is not a string");
    raw.emplace(k.key(), k->get<std::string>());
  }
  auto entry = ParseDeviceList(raw);
  if (!entry.ok()) return entry.status();
  entry->update_time = ut->get<int64_t>();
  auto int_of = [&](const char* key, int32_t dflt) {
    auto f = e.find(key);
    return f != e.end() && f->is_number_integer() ? static_cast<int32_t>(f->get<int64_t>()) : dflt;
  };
  entry->super_pod_id = int_of("SuperPodID", -1);
  entry->server_index = int_of("ServerIndex", -1);
  if (int32_t rack = int_of("RackID", 0); rack != 0) entry->rack_id = rack;
  return entry;
}

std::string ClusterInfoSwitchEntryJson(const std::string& node, const SwitchEntry& e) {
  std::string codes = "[";
  for (const std::string& c : e.fault_codes) {
    if (codes.size() > 1) codes.push_back(',');
    codes += GoJsonString(c);
  }
  codes.push_back(']');
  return "{\"FaultCode\":" + codes + ",\"FaultLevel\":" + GoJsonString(e.fault_level) +
         ",\"UpdateTime\":" + std::to_string(e.update_time) + ",\"NodeStatus\":" + GoJsonString(e.node_status) +
         ",\"FaultTimeAndLevelMap\":" + (e.levels_json.empty() ? std::string("{}") : e.levels_json) +
         ",\"CmName\":" + GoJsonString(std::string(SwitchEntryTraits::kKeyPrefix) + node) + "}";
}

StatusOr<SwitchEntry> SwitchEntryTraits::Parse(const json& e) {
  auto ut = e.find("UpdateTime");
  if (!e.is_object() || ut == e.end() || !ut->is_number_integer()) return InvalidArgument("no UpdateTime");
  SwitchEntry out;
  out.update_time = ut->get<int64_t>();
  const json codes = e.value("FaultCode", json::array());
  for (const json& c : codes.is_array() ? codes : json::array()) {
    if (!c.is_string()) return InvalidArgument("FaultCode holds a value that is not a string");
    out.fault_codes.push_back(c.get<std::string>());
  }
  const json level = e.value("FaultLevel", json());
  out.fault_level = level.is_string() ? level.get<std::string>() : "";
  const json status = e.value("NodeStatus", json());
  out.node_status = status.is_string() ? status.get<std::string>() : "";
  const json levels = e.value("FaultTimeAndLevelMap", json::object());
  out.levels_json = levels.is_object() ? levels.dump() : "{}";
  return out;
}

template class ChunkedPublisher<DeviceEntryTraits>;
template class ChunkedPublisher<SwitchEntryTraits>;

}  // namespace clusterd::mindcluster
