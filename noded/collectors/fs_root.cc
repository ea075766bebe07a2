#include "noded/collectors/fs_root.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace clusterd::noded {

FsRoot::FsRoot(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

std::string FsRoot::Path(std::string_view abs) const {
  std::string out = root_;
  if (abs.empty() || abs.front() != '/') out.push_back('/');
  out.append(abs);
  return out;
}

StatusOr<std::string> FsRoot::Read(std::string_view abs, size_t max_bytes) const {
  const std::string path = Path(abs);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) return NotFound(path + ": not found");
    return Unavailable(path + ": " + std::strerror(err));
  }
  // /proc files report size 0, so read in chunks until EOF instead of sizing first.
  std::string data;
  char buf[16384];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    data.append(buf, static_cast<size_t>(in.gcount()));
    if (data.size() > max_bytes) {
      return ResourceExhausted(path + ": larger than " + std::to_string(max_bytes) + " bytes, not read");
    }
  }
  if (in.bad()) return Unavailable(path + ": read failed");
  return data;
}

std::optional<std::string> FsRoot::ReadLine(std::string_view abs) const {
  auto data = Read(abs);
  if (!data.ok()) return std::nullopt;
  std::string_view v = *data;
  v = v.substr(0, v.find('\n'));
  return std::string(Trim(v));
}

std::optional<uint64_t> FsRoot::ReadUint(std::string_view abs) const {
  auto line = ReadLine(abs);
  if (!line) return std::nullopt;
  return ParseUint(*line);
}

std::vector<std::string> FsRoot::List(std::string_view abs) const {
  std::vector<std::string> names;
  std::error_code ec;
  std::filesystem::directory_iterator it(Path(abs), ec);
  if (ec) return names;
  for (const auto& entry : it) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool FsRoot::Exists(std::string_view abs) const {
  std::error_code ec;
  return std::filesystem::exists(Path(abs), ec);
}

std::vector<std::string_view> SplitWhitespace(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t start = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<uint64_t> ParseUint(std::string_view s) {
  s = Trim(s);
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> ParseDouble(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  // from_chars for double is available in g++ 12; strtod would depend on the locale.
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string UnescapeOctal(std::string_view s) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace clusterd::noded
