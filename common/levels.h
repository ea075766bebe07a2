// Fault levels and health: names, ordering and the collapse from the worst
// active fault level to a health value (see docs/faults.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "clusterd/v1/types.pb.h"

namespace clusterd {

using v1::FaultLevel;
using v1::Health;

std::string AsciiUpper(std::string_view s);

// "SEPARATE" or "FAULT_LEVEL_SEPARATE" (case-insensitive) -> level.
std::optional<FaultLevel> ParseFaultLevel(std::string_view name);
// FAULT_LEVEL_SEPARATE -> "SEPARATE".
std::string ShortLevelName(FaultLevel level);

// Health for a worst active level (UNSPECIFIED means no active fault).
Health HealthForLevel(FaultLevel worst);

std::optional<v1::FaultSource> ParseFaultSource(std::string_view name);
std::string ShortSourceName(v1::FaultSource source);

}  // namespace clusterd
