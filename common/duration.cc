#include "common/duration.h"

#include <charconv>
#include <cstdint>

namespace clusterd {

StatusOr<std::chrono::nanoseconds> ParseDuration(std::string_view text) {
  uint64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin) {
    return InvalidArgument("invalid duration \"" + std::string(text) + "\": expected e.g. 10s, 500ms, 2m");
  }
  std::string_view unit(ptr, static_cast<size_t>(end - ptr));
  uint64_t ns_per_unit = 0;
  if (unit == "ns")
    ns_per_unit = 1;
  else if (unit == "us")
    ns_per_unit = 1'000;
  else if (unit == "ms")
    ns_per_unit = 1'000'000;
  else if (unit == "s")
    ns_per_unit = 1'000'000'000ULL;
  else if (unit == "m")
    ns_per_unit = 60'000'000'000ULL;
  else if (unit == "h")
    ns_per_unit = 3'600'000'000'000ULL;
  else if (unit == "d")
    ns_per_unit = 86'400'000'000'000ULL;
  else {
    return InvalidArgument("invalid duration \"" + std::string(text) +
                           "\": unit must be one of ns, us, ms, s, m, h, d");
  }
  if (value > static_cast<uint64_t>(INT64_MAX) / ns_per_unit) {
    return InvalidArgument("duration \"" + std::string(text) + "\" is too large");
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(value * ns_per_unit));
}

std::string FormatDuration(std::chrono::nanoseconds d) {
  int64_t ns = d.count();
  struct Unit {
    int64_t ns;
    const char* name;
  };
  static constexpr Unit kUnits[] = {{86'400'000'000'000LL, "d"}, {3'600'000'000'000LL, "h"}, {60'000'000'000LL, "m"},
                                    {1'000'000'000LL, "s"},      {1'000'000LL, "ms"},        {1'000LL, "us"}};
  if (ns != 0) {
    for (const auto& u : kUnits) {
      if (ns % u.ns == 0) return std::to_string(ns / u.ns) + u.name;
    }
  }
  return std::to_string(ns) + "ns";
}

}  // namespace clusterd
