#include "clusterd/mindcluster/superpod.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/device_info.h"  // kMaxChipId
#include "clusterd/mindcluster/go_json.h"

namespace clusterd::mindcluster {

namespace {

using nlohmann::json;

constexpr std::string_view kChipPrefix = "Ascend910-";

// Go's strings.Trim(s, " "): spaces only.
std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// A natural number written as Go's strconv.Itoa writes it (no sign, no
// leading zero), at most `max`.
std::optional<uint64_t> CanonicalNumber(std::string_view s, uint64_t max) {
  if (s.empty() || s.size() > 19 || (s.size() > 1 && s.front() == '0')) return std::nullopt;
  uint64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (n > max) return std::nullopt;
  return n;
}

// The annotation `key` as a string ("" when absent or not a string).
std::string_view Annotation(const json& annotations, std::string_view key) {
  if (!annotations.is_object()) return {};
  auto it = annotations.find(std::string(key));
  if (it == annotations.end() || !it->is_string()) return {};
  return it->get_ref<const std::string&>();
}

bool EqualsFolded(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// The SuperDeviceID of one chip's entry: Go matches the field name exactly,
// else without regard to case.
const json* SuperDeviceIdField(const json& entry) {
  constexpr std::string_view kField = "SuperDeviceID";
  if (auto it = entry.find(std::string(kField)); it != entry.end()) return &*it;
  const json* found = nullptr;
  for (auto it = entry.begin(); it != entry.end(); ++it) {
    if (!EqualsFolded(it.key(), kField)) continue;
    if (found != nullptr) return nullptr;  // two spellings: which one Go takes depends on their order
    found = &*it;
  }
  return found;
}

SuperPodVerdict Skip(SuperPodSkip reason, std::string why) {
  SuperPodVerdict v;
  v.skip = reason;
  v.why = std::move(why);
  return v;
}

}  // namespace

std::string_view SuperPodSkipName(SuperPodSkip reason) {
  switch (reason) {
    case SuperPodSkip::kSuperPodId: return "super_pod_id";
    case SuperPodSkip::kServerType: return "server_type";
    case SuperPodSkip::kDevices: return "devices";
    case SuperPodSkip::kServerIndex: return "server_index";
    case SuperPodSkip::kFull: return "full";
  }
  return "unknown";
}

SuperPodVerdict SuperPodMemberOf(const json& annotations) {
  const std::string_view raw_id = TrimSpaces(Annotation(annotations, kSuperPodIdAnnotation));
  if (raw_id.empty()) return {};  // not in a SuperPoD
  const auto id = CanonicalNumber(raw_id, kMaxSuperPodId);
  if (!id) {
    return Skip(SuperPodSkip::kSuperPodId, "superPodID " + GoJsonString(raw_id.substr(0, 32)) +
                                               " is not a natural number (0 to 2147483647, no sign or leading zero)");
  }
  const std::string_view type = TrimSpaces(Annotation(annotations, kServerTypeAnnotation));
  if (type != kSuperPodServerTypeA3) {
    return Skip(SuperPodSkip::kServerType,
                "serverType " + GoJsonString(type.substr(0, 32)) + " is not A3 (only A3 SuperPoDs are published)");
  }
  SuperPodMember member;
  member.super_pod = *id;
  const std::string_view index = TrimSpaces(Annotation(annotations, kServerIndexAnnotation));
  if (index.size() > kMaxServerIndexBytes) {
    return Skip(SuperPodSkip::kServerIndex, "serverIndex is longer than 64 bytes");
  }
  for (char c : index) {
    if (c < 0x20 || c > 0x7e) return Skip(SuperPodSkip::kServerIndex, "serverIndex is not printable ASCII");
  }
  member.server_id = std::string(index);

  const std::string_view infos = Annotation(annotations, kBaseDeviceInfosAnnotation);
  if (infos.empty()) return Skip(SuperPodSkip::kDevices, "no baseDeviceInfos annotation");
  if (infos.size() > kMaxBaseDeviceInfosBytes) {
    return Skip(SuperPodSkip::kDevices, "baseDeviceInfos is longer than 64 KiB");
  }
  const json parsed = json::parse(infos, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return Skip(SuperPodSkip::kDevices, "baseDeviceInfos is not a JSON object");
  if (parsed.empty() || parsed.size() > kMaxSuperPodNodeDevices) {
    return Skip(SuperPodSkip::kDevices,
                "baseDeviceInfos lists " + std::to_string(parsed.size()) + " chips (1 to 128 are published)");
  }
  for (auto it = parsed.begin(); it != parsed.end(); ++it) {
    const std::string& name = it.key();
    const std::string_view number =
        name.starts_with(kChipPrefix) ? std::string_view(name).substr(kChipPrefix.size()) : std::string_view();
    const auto phy = CanonicalNumber(number, kMaxChipId);
    if (!phy) {
      return Skip(
          SuperPodSkip::kDevices,
          "baseDeviceInfos names chip " + GoJsonString(std::string_view(name).substr(0, 32)) + " (not Ascend910-<n>)");
    }
    const json* sdid = it->is_object() ? SuperDeviceIdField(*it) : nullptr;
    if (sdid == nullptr || !sdid->is_number_unsigned() ||
        sdid->get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
      return Skip(SuperPodSkip::kDevices, "chip " + name + " has no SuperDeviceID (an unsigned 32-bit integer)");
    }
    member.devices[static_cast<uint32_t>(*phy)] = static_cast<uint32_t>(sdid->get<uint64_t>());
  }
  SuperPodVerdict v;
  v.member = std::move(member);
  return v;
}

void SuperPodIndex::Set(const std::string& node, std::optional<SuperPodVerdict> verdict, std::set<uint64_t>* changed) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() && !verdict) return;
  if (it != nodes_.end() && verdict && it->second == *verdict) return;
  bool reshaped = false;  // a SuperPoD made or emptied
  auto boundary = [&] {
    // ... moves the ones at the edge of the kMaxSuperPods kept across it.
    if (!reshaped || members_.size() + 1 < kMaxSuperPods) return;
    auto edge = members_.begin();
    std::advance(edge, std::min(members_.size(), kMaxSuperPods - 1));
    for (int i = 0; i < 2 && edge != members_.end(); ++i, ++edge) changed->insert(edge->first);
  };
  if (it != nodes_.end()) {
    const SuperPodVerdict& old = it->second;
    if (old.member) {
      auto group = members_.find(old.member->super_pod);
      changed->insert(old.member->super_pod);
      group->second.erase(node);
      if (group->second.empty()) {
        members_.erase(group);
        reshaped = true;
      }
    } else if (old.skip) {
      --skipped_[static_cast<size_t>(*old.skip)];
    }
    nodes_.erase(it);
  }
  if (verdict && (verdict->member || verdict->skip)) {
    if (verdict->member) {
      auto [group, made] = members_.try_emplace(verdict->member->super_pod);
      group->second.insert(node);
      reshaped = reshaped || made;
      changed->insert(verdict->member->super_pod);
    } else {
      ++skipped_[static_cast<size_t>(*verdict->skip)];
    }
    nodes_.emplace(node, std::move(*verdict));
  }
  boundary();
}

bool SuperPodIndex::Kept(uint64_t id) const {
  auto it = members_.find(id);
  if (it == members_.end()) return false;
  return members_.size() <= kMaxSuperPods || static_cast<size_t>(std::distance(members_.begin(), it)) < kMaxSuperPods;
}

std::optional<std::string> SuperPodIndex::Value(uint64_t id) const {
  if (!Kept(id)) return std::nullopt;
  const std::set<std::string>& names = members_.at(id);
  const std::string sp = std::to_string(id);
  std::string out = "{\"Version\":" + GoJsonString(kSuperPodServerTypeA3) + ",\"SuperPodID\":" + GoJsonString(sp) +
                    ",\"NodeDeviceMap\":{";
  size_t n = 0;
  for (const std::string& name : names) {
    if (n == kMaxSuperPodNodes) break;
    const SuperPodMember& m = *nodes_.at(name).member;
    std::map<std::string, std::string> devices;  // Go sorts the keys as strings: "10" before "2"
    for (const auto& [phy, sdid] : m.devices) devices[std::to_string(phy)] = std::to_string(sdid);
    if (n++ > 0) out += ',';
    out += GoJsonString(name) + ":{\"NodeName\":" + GoJsonString(name) + ",\"ServerID\":" + GoJsonString(m.server_id) +
           ",\"DeviceMap\":" + GoJsonStringMap(devices) + "}";
  }
  out += "}}";
  return out;
}

std::set<uint64_t> SuperPodIndex::SuperPods() const {
  std::set<uint64_t> out;
  for (const auto& [id, names] : members_) {
    if (out.size() == kMaxSuperPods) break;
    out.insert(id);
  }
  return out;
}

size_t SuperPodIndex::listed() const {
  size_t n = 0, pods = 0;
  for (const auto& [id, names] : members_) {
    if (pods++ == kMaxSuperPods) break;
    n += std::min(names.size(), kMaxSuperPodNodes);
  }
  return n;
}

std::array<size_t, kSuperPodSkipReasons> SuperPodIndex::skipped() const {
  std::array<size_t, kSuperPodSkipReasons> out = skipped_;
  size_t pods = 0;
  for (const auto& [id, names] : members_) {
    const size_t kept = pods++ < kMaxSuperPods ? std::min(names.size(), kMaxSuperPodNodes) : 0;
    out[static_cast<size_t>(SuperPodSkip::kFull)] += names.size() - kept;
  }
  return out;
}

std::string SuperPodCmName(uint64_t id) { return std::string(kSuperPodCmPrefix) + std::to_string(id); }

std::optional<uint64_t> SuperPodIdOfCmName(std::string_view name) {
  if (!name.starts_with(kSuperPodCmPrefix)) return std::nullopt;
  return CanonicalNumber(name.substr(kSuperPodCmPrefix.size()), kMaxSuperPodId);
}

}  // namespace clusterd::mindcluster
