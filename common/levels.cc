#include "common/levels.h"

#include <algorithm>
#include <cctype>

namespace clusterd {
std::string AsciiUpper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
  return out;
}

std::optional<FaultLevel> ParseFaultLevel(std::string_view name) {
  std::string upper = AsciiUpper(name);
  if (upper.rfind("FAULT_LEVEL_", 0) != 0) upper = "FAULT_LEVEL_" + upper;
  FaultLevel level;
  if (!v1::FaultLevel_Parse(upper, &level) || level == v1::FAULT_LEVEL_UNSPECIFIED) return std::nullopt;
  return level;
}

std::string ShortLevelName(FaultLevel level) {
  const std::string& full = v1::FaultLevel_Name(level);
  return full.size() > 12 ? full.substr(12) : full;
}

Health HealthForLevel(FaultLevel worst) {
  switch (worst) {
    case v1::FAULT_LEVEL_UNSPECIFIED:
    case v1::FAULT_LEVEL_NOT_HANDLE: return v1::HEALTH_HEALTHY;
    case v1::FAULT_LEVEL_SUB_HEALTH:
    case v1::FAULT_LEVEL_PRE_SEPARATE: return v1::HEALTH_SUB_HEALTHY;
    default: return v1::HEALTH_UNHEALTHY;
  }
}

std::optional<v1::FaultSource> ParseFaultSource(std::string_view name) {
  std::string upper = AsciiUpper(name);
  if (upper.rfind("FAULT_SOURCE_", 0) != 0) upper = "FAULT_SOURCE_" + upper;
  v1::FaultSource source;
  if (!v1::FaultSource_Parse(upper, &source) || source == v1::FAULT_SOURCE_UNSPECIFIED) return std::nullopt;
  return source;
}

std::string ShortSourceName(v1::FaultSource source) {
  std::string full = v1::FaultSource_Name(source);
  if (full.size() > 13) full = full.substr(13);
  std::transform(full.begin(), full.end(), full.begin(), [](unsigned char c) { return std::tolower(c); });
  return full;
}

}  // namespace clusterd
