#include "clusterd/state/catalog.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/levels.h"
#include "common/validation.h"

namespace clusterd {

extern const char kDefaultCatalogJson[];

Catalog Catalog::Default(v1::FaultLevel default_level) {
  Catalog catalog;
  Status st = catalog.MergeJson(kDefaultCatalogJson, "built-in catalog");
  if (!st.ok()) std::abort();  // the compiled-in data is tested; broken means a broken build
  catalog.levels_["HEARTBEAT_LOST"] = v1::FAULT_LEVEL_SEPARATE;
  catalog.default_level_ = default_level;
  return catalog;
}

Status Catalog::MergeJson(std::string_view json_text, std::string_view origin) {
  const std::string where(origin);
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(where + ": not valid JSON");
  if (!doc.is_object()) return InvalidArgument(where + ": top level must be an object");
  std::unordered_map<std::string, v1::FaultLevel> merged = levels_;
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
    }
  }
  levels_ = std::move(merged);
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

bool Catalog::Contains(std::string_view code) const { return levels_.count(AsciiUpper(code)) > 0; }

}  // namespace clusterd
