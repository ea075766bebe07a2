#include "clusterd/k8s/api_input.h"

#include <algorithm>
#include <charconv>

#include "common/levels.h"

namespace clusterd::k8s {
namespace input {

std::string Printable(std::string_view s, size_t max) {
  std::string out;
  out.reserve(std::min(s.size(), max));
  for (char c : s.substr(0, max)) out.push_back(c >= ' ' && c <= '~' ? c : '?');
  return out;
}

std::string Quoted(std::string_view s) { return "\"" + Printable(s, 64) + (s.size() > 64 ? "...\"" : "\""); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> SplitComma(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.push_back(Trim(s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::optional<uint64_t> ParseUnsigned(std::string_view s, uint64_t max) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

std::string Upper(std::string_view s) {
  std::string out = AsciiUpper(s);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

}  // namespace input

uint64_t DeviceQuantity(const nlohmann::json& q) {
  if (q.is_number_unsigned()) return q.get<uint64_t>();
  if (q.is_number_integer()) {
    const int64_t v = q.get<int64_t>();
    return v < 0 ? UINT64_MAX : static_cast<uint64_t>(v);
  }
  if (q.is_string()) return input::ParseUnsigned(q.get_ref<const std::string&>(), UINT64_MAX).value_or(UINT64_MAX);
  return UINT64_MAX;
}

}  // namespace clusterd::k8s
