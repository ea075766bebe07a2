// Reading the untrusted text of API objects (job discovery, Node status):
// bounded printable copies for messages, blanks trimmed, comma lists, plain
// numbers, resource quantities. No I/O, no state: call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace clusterd::k8s {

// A resource quantity for a device count: "8" or 8; UINT64_MAX when it is
// not a whole non-negative number ("8k", "1.5", -1).
uint64_t DeviceQuantity(const nlohmann::json& quantity);

namespace input {

inline constexpr size_t kMaxFieldBytes = 1024;  // NodeReadiness strings, condition message

// A one-line, bounded copy of API text for a message: non-printable or
// non-ASCII bytes become '?'.
std::string Printable(std::string_view s, size_t max = kMaxFieldBytes);
// Printable(s, 64) in quotes, "..." marking a cut.
std::string Quoted(std::string_view s);
// Without leading and trailing spaces and tabs.
std::string_view Trim(std::string_view s);
// "a, b,,c" -> {"a", "b", "", "c"}: each item trimmed, empty ones kept.
std::vector<std::string_view> SplitComma(std::string_view s);
// Plain decimal digits (no sign, no spaces) up to `max`.
std::optional<uint64_t> ParseUnsigned(std::string_view s, uint64_t max);
// Upper case with '-' written '_': an enum value's name.
std::string Upper(std::string_view s);

}  // namespace input
}  // namespace clusterd::k8s
