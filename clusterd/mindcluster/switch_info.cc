#include "clusterd/mindcluster/switch_info.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/pubfault.h"

namespace clusterd::mindcluster {

namespace {

using nlohmann::json;

// An id written as a number or a string.
std::string IdOf(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return "";
  if (it->is_string()) return it->get<std::string>().substr(0, 64);
  if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  return "";
}

v1::FaultLevel LevelOf(const json& name) {
  if (!name.is_string()) return v1::FAULT_LEVEL_SEPARATE;
  return ParseMindClusterLevel(name.get<std::string>()).value_or(v1::FAULT_LEVEL_SEPARATE);
}

}  // namespace

StatusOr<SwitchInfo> ParseSwitchInfoCfg(std::string_view text) {
  const json doc = json::parse(text, nullptr, false);
  if (!doc.is_object()) return InvalidArgument("SwitchInfoCfg is not a JSON object");
  SwitchInfo info;
  info.present = true;
  if (auto s = doc.find("NodeStatus"); s != doc.end()) {
    if (!s->is_string()) return InvalidArgument("SwitchInfoCfg.NodeStatus is not a string");
    info.node_status = s->get<std::string>();
  }
  const json levels = doc.value("FaultTimeAndLevelMap", json::object());
  const json whole = doc.value("FaultLevel", json());
  const json codes = doc.value("FaultCode", json());
  if (levels.is_object()) info.levels_json = levels.dump();
  if (whole.is_string()) info.fault_level = whole.get<std::string>();
  if (codes.is_null()) return info;
  if (!codes.is_array()) return InvalidArgument("SwitchInfoCfg.FaultCode is not a list");
  if (codes.size() > kMaxSwitchFaults) {
    return InvalidArgument("SwitchInfoCfg.FaultCode has more than " + std::to_string(kMaxSwitchFaults) + " faults");
  }
  std::map<std::tuple<std::string, std::string, std::string>, SwitchFault> by_place;
  for (size_t i = 0; i < codes.size(); ++i) {
    const std::string where = "SwitchInfoCfg.FaultCode[" + std::to_string(i) + "]";
    if (!codes[i].is_string()) return InvalidArgument(where + " is not a string");
    info.fault_codes.push_back(codes[i].get<std::string>());
    const json f = json::parse(codes[i].get<std::string>(), nullptr, false);
    if (!f.is_object()) return InvalidArgument(where + " is not the JSON of a switch fault");
    SwitchFault sf;
    auto code = f.find("AssembledFaultCode");
    if (code == f.end() || !code->is_string() || code->get<std::string>().empty() ||
        code->get<std::string>().size() > 64) {
      return InvalidArgument(where + " has no AssembledFaultCode of 1 to 64 characters");
    }
    sf.code = code->get<std::string>();
    sf.switch_chip = IdOf(f, "SwitchChipId");
    sf.switch_port = IdOf(f, "SwitchPortId");
    const json* entry = levels.is_object() && levels.contains(sf.code) ? &levels[sf.code] : nullptr;
    sf.level = entry != nullptr && entry->is_object() && entry->contains("fault_level")
                   ? LevelOf((*entry)["fault_level"])
                   : LevelOf(whole);
    sf.message = "switch chip " + (sf.switch_chip.empty() ? "?" : sf.switch_chip) + " port " +
                 (sf.switch_port.empty() ? "?" : sf.switch_port) + ": " + sf.code;
    auto [it, fresh] = by_place.try_emplace({sf.switch_chip, sf.switch_port, sf.code}, sf);
    if (!fresh) it->second.level = std::max(it->second.level, sf.level);
  }
  for (auto& [key, sf] : by_place) info.faults.push_back(std::move(sf));
  return info;
}

}  // namespace clusterd::mindcluster
