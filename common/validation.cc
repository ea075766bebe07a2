#include "common/validation.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

namespace clusterd {
namespace {

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

Status Bad(std::string_view field, const std::string& why) { return InvalidArgument(std::string(field) + ": " + why); }

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

bool IsAddressText(std::string_view text) {
  return !text.empty() && text.size() <= 45 &&
         text.find_first_not_of("0123456789abcdefABCDEF.:") == std::string_view::npos;
}

bool IsProbeAddressText(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || text.size() > 64) return false;
  const std::string_view port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) return false;
  if (const int p = std::stoi(std::string(port)); p < 1 || p > 65535) return false;
  std::string_view host = text.substr(0, colon);
  if (host.empty()) return true;
  const bool bracketed = host.front() == '[';
  if (bracketed) {
    if (host.size() < 3 || host.back() != ']') return false;
    host = host.substr(1, host.size() - 2);
  }
  const std::string h(host);
  unsigned char buf[sizeof(in6_addr)];
  return bracketed ? inet_pton(AF_INET6, h.c_str(), buf) == 1 : inet_pton(AF_INET, h.c_str(), buf) == 1;
}

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
  // A request that was not UTF-8 reaches here with NUL in place of each bad
  // byte (proto/wire_parse.h).
  if (text.find('\0') != std::string_view::npos) return Bad(field, "contains a NUL byte or invalid UTF-8");
  if (!ValidUtf8(text)) return Bad(field, "is not valid UTF-8");
  return Status::Ok();
}

Status ValidateLine(std::string_view field, std::string_view text, size_t max_len) {
  CLUSTERD_RETURN_IF_ERROR(ValidateText(field, text, max_len));
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c1 = c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9F;
    if (c < 0x20 || c == 0x7F || c1) {
      return Bad(field, "contains a control character at byte " + std::to_string(i));
    }
  }
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

bool SanitizeUtf8(std::string* s) {
  auto cont = [](unsigned char c) { return (c & 0xC0) == 0x80; };
  std::string out;
  bool changed = false;
  const auto* p = reinterpret_cast<const unsigned char*>(s->data());
  const size_t n = s->size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    size_t len = 0;
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = (i + 1 < n && cont(p[i + 1])) ? 2 : 0;
    } else if (c >= 0xE0 && c <= 0xEF) {
      const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      len = (i + 2 < n && p[i + 1] >= lo && p[i + 1] <= hi && cont(p[i + 2])) ? 3 : 0;
    } else if (c >= 0xF0 && c <= 0xF4) {
      const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      len = (i + 3 < n && p[i + 1] >= lo && p[i + 1] <= hi && cont(p[i + 2]) && cont(p[i + 3])) ? 4 : 0;
    }
    if (len == 0) {
      if (!changed) out.assign(s->data(), i);
      changed = true;
      out.append("\xEF\xBF\xBD");
      ++i;
      continue;
    }
    if (changed) out.append(s->data() + i, len);
    i += len;
  }
  if (changed) *s = std::move(out);
  return changed;
}

bool SanitizeLine(std::string* s) {
  const bool fixed_utf8 = SanitizeUtf8(s);
  std::string out;
  out.reserve(s->size());
  bool replaced = false;
  for (size_t i = 0; i < s->size(); ++i) {
    const auto c = static_cast<unsigned char>((*s)[i]);
    const bool c1 = c == 0xC2 && i + 1 < s->size() && static_cast<unsigned char>((*s)[i + 1]) <= 0x9F;
    if (c < 0x20 || c == 0x7F || c1) {
      out.append("\xEF\xBF\xBD");
      if (c1) ++i;
      replaced = true;
      continue;
    }
    out.push_back(static_cast<char>(c));
  }
  if (replaced) *s = std::move(out);
  return fixed_utf8 || replaced;
}

}  // namespace clusterd
