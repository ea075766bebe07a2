#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"

namespace clusterd {

// Parses "1500ms", "10s", "2m", "1h", "7d" (one number, one unit). A bare
// number is refused: a duration without a unit is a bug waiting to happen.
StatusOr<std::chrono::nanoseconds> ParseDuration(std::string_view text);

// "10s", "1500ms" ... the shortest exact form.
std::string FormatDuration(std::chrono::nanoseconds d);

}  // namespace clusterd
