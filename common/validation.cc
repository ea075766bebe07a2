#include "common/validation.h"

#include <string>

namespace clusterd {
namespace {

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

Status Bad(std::string_view field, const std::string& why) {
  return InvalidArgument(std::string(field) + ": " + why);
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

Status ValidateNodeName(std::string_view field, std::string_view name) {
  if (name.empty()) return Bad(field, "must not be empty");
  if (name.size() > kMaxNameLength) return Bad(field, "longer than 253 characters");
  if (!IsAlnum(name.front())) return Bad(field, "must start with a letter or digit");
  for (char c : name) {
    if (!IsAlnum(c) && c != '.' && c != '-' && c != '_') {
      return Bad(field, "may only contain letters, digits, '.', '-' and '_'");
    }
  }
  return Status::Ok();
}

Status ValidateCode(std::string_view field, std::string_view code) {
  if (code.empty()) return Bad(field, "must not be empty");
  if (code.size() > kMaxCodeLength) return Bad(field, "longer than 64 characters");
  for (char c : code) {
    if (!IsAlnum(c) && c != '_' && c != '.' && c != '-') {
      return Bad(field, "may only contain letters, digits, '_', '.' and '-'");
    }
  }
  return Status::Ok();
}

Status ValidateText(std::string_view field, std::string_view text, size_t max_len) {
  if (text.size() > max_len) return Bad(field, "longer than " + std::to_string(max_len) + " bytes");
  if (text.find('\0') != std::string_view::npos) return Bad(field, "contains a NUL byte");
  if (!ValidUtf8(text)) return Bad(field, "is not valid UTF-8");
  return Status::Ok();
}

Status ValidateToken(std::string_view field, std::string_view token, bool allow_empty) {
  if (token.empty()) return allow_empty ? Status::Ok() : Bad(field, "must not be empty");
  if (token.size() > kMaxLabelLength) return Bad(field, "longer than 256 characters");
  for (char c : token) {
    if (c <= ' ' || c > '~') return Bad(field, "may only contain printable ASCII without spaces");
  }
  return Status::Ok();
}

}  // namespace clusterd
