#include "clusterd/mindcluster/device_info.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/go_json.h"
#include "common/config_util.h"             // SplitCommaList, JoinCommaList
#include "clusterd/mindcluster/pubfault.h"  // ParseMindClusterLevel

namespace clusterd::mindcluster {
namespace {

using json = nlohmann::json;

constexpr std::string_view kResourcePrefix = "huawei.com/";
constexpr std::string_view kUnhealthy = "-Unhealthy";
constexpr std::string_view kNetworkUnhealthy = "-NetworkUnhealthy";
constexpr std::string_view kRecovering = "-Recovering";
constexpr std::string_view kFault = "-Fault";

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "huawei.com/Ascend910-Unhealthy" -> {"Ascend910", "-Unhealthy"}.
std::pair<std::string, std::string> SplitResource(std::string_view key) {
  std::string_view rest = key.substr(kResourcePrefix.size());
  for (std::string_view suffix : {kNetworkUnhealthy, kUnhealthy, kRecovering, kFault}) {
    if (EndsWith(rest, suffix)) {
      return {std::string(rest.substr(0, rest.size() - suffix.size())), std::string(suffix)};
    }
  }
  return {std::string(rest), ""};
}

StatusOr<std::vector<std::string>> ChipList(const std::string& type, const std::string& key, const std::string& v) {
  std::vector<std::string> out;
  for (std::string& chip : SplitCommaList(v)) {
    if (!ChipId(type, chip))
      return InvalidArgument(key + ": \"" + chip.substr(0, 64) + "\" is not a " + type + " chip");
    if (out.size() == kMaxChipsPerList) {
      return InvalidArgument(key + ": more than " + std::to_string(kMaxChipsPerList) + " chips");
    }
    out.push_back(std::move(chip));
  }
  return out;
}

StatusOr<std::string> StringField(const json& obj, const char* name, const std::string& where) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) return InvalidArgument(where + "." + name + " is not a string");
  return it->get<std::string>();
}

StatusOr<std::vector<DeviceFault>> FaultList(const std::string& type, const std::string& key, const std::string& v) {
  std::vector<DeviceFault> out;
  if (v.empty()) return out;
  json arr = json::parse(v, nullptr, false);
  if (arr.is_null()) return out;  // the plugin writes "null" for no entries
  if (!arr.is_array()) return InvalidArgument(key + " is not a JSON list");
  if (arr.size() > kMaxFaultEntries) {
    return InvalidArgument(key + ": more than " + std::to_string(kMaxFaultEntries) + " entries");
  }
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& e = arr[i];
    const std::string where = key + "[" + std::to_string(i) + "]";
    if (!e.is_object()) return InvalidArgument(where + " is not an object");
    DeviceFault f;
    std::string* fields[] = {&f.fault_type,  &f.npu_name,       &f.large_model_fault_level,
                             &f.fault_level, &f.fault_handling, &f.fault_code};
    const char* names[] = {"fault_type",  "npu_name",       "large_model_fault_level",
                           "fault_level", "fault_handling", "fault_code"};
    for (size_t k = 0; k < std::size(fields); ++k) {
      auto s = StringField(e, names[k], where);
      if (!s.ok()) return s.status();
      *fields[k] = std::move(*s);
    }
    if (!ChipId(type, f.npu_name)) return InvalidArgument(where + ".npu_name is not a " + type + " chip");
    if (std::count(f.fault_code.begin(), f.fault_code.end(), ',') >= static_cast<long>(kMaxCodesPerEntry)) {
      return InvalidArgument(where + ".fault_code: more than " + std::to_string(kMaxCodesPerEntry) + " codes");
    }
    if (auto m = e.find("fault_time_and_level_map"); m != e.end() && !m->is_null()) {
      if (!m->is_object() || m->size() > kMaxCodesPerEntry) {
        return InvalidArgument(where + ".fault_time_and_level_map is not an object of at most " +
                               std::to_string(kMaxCodesPerEntry) + " codes");
      }
      for (auto it = m->begin(); it != m->end(); ++it) {
        if (!it->is_object())
          return InvalidArgument(where + ".fault_time_and_level_map." + it.key() + " is not an object");
        FaultTimeAndLevel tl;
        if (auto t = it->find("fault_time"); t != it->end() && t->is_number_integer())
          tl.fault_time_ms = t->get<int64_t>();
        auto level = StringField(*it, "fault_level", where + ".fault_time_and_level_map." + it.key());
        if (!level.ok()) return level.status();
        tl.fault_level = std::move(*level);
        f.fault_time_and_level.emplace(it.key(), std::move(tl));
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

StatusOr<int32_t> Int32Field(const json& obj, const char* name, int32_t dflt) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_number_integer() || it->get<int64_t>() < INT32_MIN || it->get<int64_t>() > INT32_MAX) {
    return InvalidArgument(std::string(name) + " is not a 32-bit integer");
  }
  return static_cast<int32_t>(it->get<int64_t>());
}

// The bytes the plugin hashes: {"DeviceList":{...},"UpdateTime":N}.
std::string HashedPayload(const std::map<std::string, std::string>& list, int64_t update_time) {
  return "{\"DeviceList\":" + GoJsonStringMap(list) + ",\"UpdateTime\":" + std::to_string(update_time) + "}";
}

v1::FaultLevel LevelOf(std::string_view name) { return ParseMindClusterLevel(name).value_or(v1::FAULT_LEVEL_SEPARATE); }

}  // namespace

bool IsDeviceType(std::string_view type) {
  return type == "Ascend910" || type == "Ascend310P" || type == "Ascend310" || type == "npu";
}

std::optional<uint32_t> ChipId(std::string_view type, std::string_view chip) {
  const size_t dash = chip.rfind('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == chip.size() || dash + 6 < chip.size()) {
    return std::nullopt;
  }
  const std::string_view prefix = chip.substr(0, dash), digits = chip.substr(dash + 1);
  // The npu resource (newer cards) names its chips after the card model.
  if (prefix != type && !(type == "npu" && std::all_of(prefix.begin(), prefix.end(), [](char c) {
                            return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                          }))) {
    return std::nullopt;
  }
  uint32_t id = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + static_cast<uint32_t>(c - '0');
  }
  if (id > kMaxChipId || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  return id;
}

std::string ChipName(std::string_view type, uint32_t id) { return std::string(type) + "-" + std::to_string(id); }

StatusOr<NodeDeviceInfo> ParseDeviceList(const std::map<std::string, std::string>& raw) {
  NodeDeviceInfo info;
  for (const auto& [key, value] : raw) {
    if (key.rfind(kResourcePrefix, 0) != 0) continue;  // not a resource: the plugin's own
    auto [type, suffix] = SplitResource(key);
    if (!IsDeviceType(type)) continue;
    if (!info.device_type.empty() && info.device_type != type) {
      return InvalidArgument("DeviceList names two device types, " + info.device_type + " and " + type);
    }
    info.device_type = type;
    if (suffix == kFault) {
      auto faults = FaultList(type, key, value);
      if (!faults.ok()) return faults.status();
      info.faults = std::move(*faults);
      continue;
    }
    auto chips = ChipList(type, key, value);
    if (!chips.ok()) return chips.status();
    std::vector<std::string>* list = suffix.empty()                ? &info.available
                                     : suffix == kUnhealthy        ? &info.unhealthy
                                     : suffix == kNetworkUnhealthy ? &info.network_unhealthy
                                                                   : &info.recovering;
    *list = std::move(*chips);
  }
  if (info.device_type.empty()) return InvalidArgument("DeviceList names no huawei.com/ device type");
  return info;
}

StatusOr<NodeDeviceInfo> ParseDeviceInfoCfg(std::string_view text) {
  json doc = json::parse(text, nullptr, false);
  if (!doc.is_object()) return InvalidArgument("DeviceInfoCfg is not a JSON object");
  auto di = doc.find("DeviceInfo");
  if (di == doc.end() || !di->is_object()) return InvalidArgument("DeviceInfoCfg has no DeviceInfo object");
  auto dl = di->find("DeviceList");
  if (dl == di->end() || !dl->is_object()) return InvalidArgument("DeviceInfo has no DeviceList object");
  auto ut = di->find("UpdateTime");
  if (ut == di->end() || !ut->is_number_integer()) return InvalidArgument("DeviceInfo.UpdateTime is not an integer");

  NodeDeviceInfo info;
  info.update_time = ut->get<int64_t>();
  std::map<std::string, std::string> raw;
  for (auto it = dl->begin(); it != dl->end(); ++it) {
    if (!it->is_string()) return InvalidArgument("DeviceList." + it.key() + " is not a string");
    raw.emplace(it.key(), it->get<std::string>());
  }
  // The check first: a payload that does not hash to its code is not read.
  auto code = doc.find("CheckCode");
  if (code == doc.end() || !code->is_string() || code->get<std::string>().empty()) {
    return FailedPrecondition("DeviceInfoCfg has no CheckCode");
  }
  if (code->get<std::string>() != Sha256Hex(HashedPayload(raw, info.update_time))) {
    return FailedPrecondition("DeviceInfoCfg's CheckCode is not the SHA-256 of its DeviceInfo");
  }
  auto lists = ParseDeviceList(raw);
  if (!lists.ok()) return lists.status();
  lists->update_time = info.update_time;
  info = std::move(*lists);
  auto super_pod = Int32Field(doc, "SuperPodID", -1);
  auto server = Int32Field(doc, "ServerIndex", -1);
  if (!super_pod.ok()) return super_pod.status();
  if (!server.ok()) return server.status();
  info.super_pod_id = *super_pod;
  info.server_index = *server;
  if (doc.contains("RackID") && !doc["RackID"].is_null()) {
    auto rack = Int32Field(doc, "RackID", 0);
    if (!rack.ok()) return rack.status();
    info.rack_id = *rack;
  }
  return info;
}

std::string FaultListJson(const std::vector<DeviceFault>& faults) {
  std::string out = "[";
  for (const DeviceFault& f : faults) {
    if (out.size() > 1) out.push_back(',');
    out += "{\"fault_type\":" + GoJsonString(f.fault_type) + ",\"npu_name\":" + GoJsonString(f.npu_name) +
           ",\"large_model_fault_level\":" + GoJsonString(f.large_model_fault_level) +
           ",\"fault_level\":" + GoJsonString(f.fault_level) + ",\"fault_handling\":" + GoJsonString(f.fault_handling) +
           ",\"fault_code\":" + GoJsonString(f.fault_code) + ",\"fault_time_and_level_map\":{";
    bool first = true;
    for (const auto& [code, tl] : f.fault_time_and_level) {
      if (!first) out.push_back(',');
      first = false;
      out += GoJsonString(code) + ":{\"fault_time\":" + std::to_string(tl.fault_time_ms) +
             ",\"fault_level\":" + GoJsonString(tl.fault_level) + "}";
    }
    out += "}}";
  }
  return out + "]";
}

std::map<std::string, std::string> DeviceListOf(const NodeDeviceInfo& info) {
  const std::string base = std::string(kResourcePrefix) + info.device_type;
  return {{base, JoinCommaList(info.available)},
          {base + std::string(kUnhealthy), JoinCommaList(info.unhealthy)},
          {base + std::string(kNetworkUnhealthy), JoinCommaList(info.network_unhealthy)},
          {base + std::string(kRecovering), JoinCommaList(info.recovering)},
          {base + std::string(kFault), FaultListJson(info.faults)}};
}

std::string DeviceInfoCfgJson(const NodeDeviceInfo& info) {
  const auto list = DeviceListOf(info);
  const std::string payload = HashedPayload(list, info.update_time);
  std::string out = "{\"DeviceInfo\":" + payload + ",\"SuperPodID\":" + std::to_string(info.super_pod_id) +
                    ",\"ServerIndex\":" + std::to_string(info.server_index);
  if (info.rack_id) out += ",\"RackID\":" + std::to_string(*info.rack_id);
  return out + ",\"CheckCode\":" + GoJsonString(Sha256Hex(payload)) + "}";
}

std::vector<ChipFault> FaultsOf(const NodeDeviceInfo& info) {
  std::map<std::pair<uint32_t, std::string>, ChipFault> by_key;
  auto add = [&](uint32_t device, const std::string& code, v1::FaultLevel level, std::string message) {
    auto [it, fresh] = by_key.try_emplace({device, code}, ChipFault{device, code, level, std::move(message)});
    if (!fresh && level > it->second.level) it->second.level = level;
  };
  std::set<std::pair<uint32_t, std::string>> kinds;  // (chip, fault_type) with an entry
  for (const DeviceFault& f : info.faults) {
    const uint32_t device = *ChipId(info.device_type, f.npu_name);  // checked when parsed
    kinds.emplace(device, f.fault_type);
    const std::string message = "device plugin: " + f.fault_type + " (" + f.fault_level + ")";
    const std::vector<std::string> codes = SplitCommaList(f.fault_code);
    for (const std::string& code : codes) {
      auto tl = f.fault_time_and_level.find(code);
      const std::string& level = tl != f.fault_time_and_level.end() && !tl->second.fault_level.empty()
                                     ? tl->second.fault_level
                                     : f.fault_level;
      add(device, code, LevelOf(level), message);
    }
    // An entry without codes (a manual separation): the fault type is the code.
    if (codes.empty() && !f.fault_type.empty()) add(device, f.fault_type, LevelOf(f.fault_level), message);
  }
  const std::tuple<const std::vector<std::string>*, const char*, v1::FaultLevel> lists[] = {
      {&info.unhealthy, "CardUnhealthy", v1::FAULT_LEVEL_SEPARATE},
      {&info.network_unhealthy, "CardNetworkUnhealthy", v1::FAULT_LEVEL_RESTART_BUSINESS},
      {&info.recovering, "Recovering", v1::FAULT_LEVEL_RESTART_NPU}};
  for (const auto& [chips, kind, level] : lists) {
    for (const std::string& chip : *chips) {
      const uint32_t device = *ChipId(info.device_type, chip);
      if (kinds.count({device, kind})) continue;
      add(device, kind, level, std::string("device plugin: listed ") + kind);
    }
  }
  std::vector<ChipFault> out;
  out.reserve(by_key.size());
  for (auto& [key, fault] : by_key) out.push_back(std::move(fault));
  return out;
}

FaultDiff DiffFaults(const std::vector<ChipFault>& before, const std::vector<ChipFault>& after) {
  std::map<std::pair<uint32_t, std::string>, const ChipFault*> old;
  for (const ChipFault& f : before) old.emplace(std::make_pair(f.device, f.code), &f);
  FaultDiff d;
  for (const ChipFault& f : after) {
    auto it = old.find({f.device, f.code});
    if (it == old.end() || it->second->level != f.level) d.raise.push_back(f);
    if (it != old.end()) old.erase(it);
  }
  for (const auto& [key, f] : old) d.clear.push_back(*f);
  return d;
}

int LevelRank(std::string_view name) {
  static const std::string_view kOrder[] = {"NotHandleFault",  "SubHealthFault", "RestartRequest",
                                            "RestartBusiness", "FreeRestartNPU", "RestartNPU",
                                            "PreSeparateNPU",  "SeparateNPU",    "ManuallySeparateNPU"};
  for (size_t i = 0; i < std::size(kOrder); ++i) {
    if (kOrder[i] == name) return static_cast<int>(i) + 1;
  }
  return 0;
}

}  // namespace clusterd::mindcluster
