#include "clusterd/state/catalog.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/levels.h"
#include "common/validation.h"

namespace clusterd {

extern const char kDefaultCatalogJson[];
extern const char kNvidiaCatalogJson[];

namespace {

constexpr size_t kMaxFirmwarePairs = 4096;
constexpr size_t kMaxFirmwarePerDriver = 64;

// A version as NodeD reports it: one line, 1 to 64 characters.
Status ValidateVersion(const std::string& field, const std::string& v) {
  if (v.empty()) return InvalidArgument(field + ": required");
  return ValidateLine(field, v, 64);
}

}  // namespace

Catalog Catalog::Default(v1::FaultLevel default_level) {
  Catalog catalog;
  Status st = catalog.MergeJson(kDefaultCatalogJson, "built-in catalog");
  if (st.ok()) st = catalog.MergeJson(kNvidiaCatalogJson, "built-in NVIDIA catalog");
  if (!st.ok()) std::abort();  // the compiled-in data is tested; broken means a broken build
  catalog.levels_["HEARTBEAT_LOST"] = v1::FAULT_LEVEL_SEPARATE;
  catalog.overridden_.clear();  // what is merged from here on is the operator's
  catalog.default_level_ = default_level;
  return catalog;
}

Status Catalog::MergeJson(std::string_view json_text, std::string_view origin) {
  const std::string where(origin);
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(where + ": not valid JSON");
  if (!doc.is_object()) return InvalidArgument(where + ": top level must be an object");
  std::unordered_map<std::string, v1::FaultLevel> merged = levels_;
  std::unordered_set<std::string> overridden = overridden_;
  v1::FaultLevel default_level = default_level_;
  if (doc.contains("default_level")) {
    const auto& dl = doc["default_level"];
    auto level = dl.is_string() ? ParseFaultLevel(dl.get<std::string>()) : std::nullopt;
    if (!level) return InvalidArgument(where + ": default_level: not a fault level name");
    default_level = *level;
  }
  if (doc.contains("codes")) {
    const auto& codes = doc["codes"];
    if (!codes.is_array()) return InvalidArgument(where + ": codes: must be an array");
    for (size_t i = 0; i < codes.size(); ++i) {
      const auto& entry = codes[i];
      const std::string at = where + ": codes[" + std::to_string(i) + "]";
      if (!entry.is_object() || !entry.contains("code") || !entry["code"].is_string() || !entry.contains("level") ||
          !entry["level"].is_string()) {
        return InvalidArgument(at + ": must be {\"code\": string, \"level\": string}");
      }
      std::string code = entry["code"].get<std::string>();
      CLUSTERD_RETURN_IF_ERROR(ValidateCode(at + ".code", code));
      auto level = ParseFaultLevel(entry["level"].get<std::string>());
      if (!level) return InvalidArgument(at + ".level: unknown level \"" + entry["level"].get<std::string>() + "\"");
      merged[AsciiUpper(code)] = *level;
      overridden.insert(AsciiUpper(code));
    }
  }
  std::unordered_map<std::string, std::vector<std::string>> firmware = firmware_;
  if (doc.contains("firmware_driver_pairs")) {
    const auto& pairs = doc["firmware_driver_pairs"];
    if (!pairs.is_array()) return InvalidArgument(where + ": firmware_driver_pairs: must be an array");
    if (pairs.size() > kMaxFirmwarePairs) {
      return InvalidArgument(where + ": firmware_driver_pairs: more than " + std::to_string(kMaxFirmwarePairs));
    }
    for (size_t i = 0; i < pairs.size(); ++i) {
      const auto& entry = pairs[i];
      const std::string at = where + ": firmware_driver_pairs[" + std::to_string(i) + "]";
      if (!entry.is_object() || !entry.contains("driver") || !entry["driver"].is_string() ||
          !entry.contains("firmware") || !entry["firmware"].is_array()) {
        return InvalidArgument(at + ": must be {\"driver\": string, \"firmware\": [string]}");
      }
      const std::string driver = entry["driver"].get<std::string>();
      CLUSTERD_RETURN_IF_ERROR(ValidateVersion(at + ".driver", driver));
      const auto& list = entry["firmware"];
      if (list.size() > kMaxFirmwarePerDriver) {
        return InvalidArgument(at + ".firmware: more than " + std::to_string(kMaxFirmwarePerDriver) + " versions");
      }
      std::vector<std::string> versions;
      for (size_t j = 0; j < list.size(); ++j) {
        const std::string fat = at + ".firmware[" + std::to_string(j) + "]";
        if (!list[j].is_string()) return InvalidArgument(fat + ": must be a string");
        versions.push_back(list[j].get<std::string>());
        CLUSTERD_RETURN_IF_ERROR(ValidateVersion(fat, versions.back()));
      }
      if (versions.empty()) {
        firmware.erase(AsciiUpper(driver));
      } else {
        firmware[AsciiUpper(driver)] = std::move(versions);
      }
    }
  }
  levels_ = std::move(merged);
  overridden_ = std::move(overridden);
  firmware_ = std::move(firmware);
  default_level_ = default_level;
  return Status::Ok();
}

Status Catalog::MergeFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("catalog file " + path + ": cannot be read");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return MergeJson(buffer.str(), "catalog file " + path);
}

v1::FaultLevel Catalog::Resolve(std::string_view code, v1::FaultLevel reported) const {
  auto it = levels_.find(AsciiUpper(code));
  if (it != levels_.end()) return it->second;
  if (reported != v1::FAULT_LEVEL_UNSPECIFIED) return reported;
  return default_level_;
}

Catalog::Resolution Catalog::ResolveFor(std::string_view code, v1::FaultLevel reported, bool reporter_decides) const {
  Resolution r;
  const std::string key = AsciiUpper(code);
  auto it = levels_.find(key);
  if (it != levels_.end()) r.catalog = it->second;
  const bool overridden = it != levels_.end() && overridden_.count(key) > 0;
  if (it != levels_.end() && (overridden || !reporter_decides || reported == v1::FAULT_LEVEL_UNSPECIFIED)) {
    r.level = it->second;
    r.source = overridden ? "catalog override" : "catalog";
  } else if (reported != v1::FAULT_LEVEL_UNSPECIFIED) {
    r.level = reported;
    r.source = "reporter";
  } else {
    r.level = default_level_;
    r.source = "default";
  }
  return r;
}

bool Catalog::Overridden(std::string_view code) const { return overridden_.count(AsciiUpper(code)) > 0; }

const std::vector<std::string>* Catalog::FirmwareFor(std::string_view driver) const {
  auto it = firmware_.find(AsciiUpper(driver));
  return it == firmware_.end() ? nullptr : &it->second;
}

bool Catalog::Contains(std::string_view code) const { return levels_.count(AsciiUpper(code)) > 0; }

}  // namespace clusterd
