#include "clusterd/mindcluster/go_json.h"

#include <openssl/evp.h>

#include <array>

namespace clusterd::mindcluster {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void AppendU(std::string* out, uint32_t cp) {
  out->append("\\u");
  for (int shift = 12; shift >= 0; shift -= 4) out->push_back(kHex[(cp >> shift) & 0xf]);
}

// The length of the valid UTF-8 sequence at s[i], or 0 when it is not one
// (overlong forms, surrogates and code points above U+10FFFF included, as
// Go's utf8.DecodeRuneInString refuses them).
size_t Utf8Length(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = 0;
  uint32_t v = 0, min = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2, v = c & 0x1f, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, v = c & 0x0f, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return n;
}

}  // namespace

std::string GoJsonString(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out.append("\\\""); break;
        case '\\': out.append("\\\\"); break;
        case '\n': out.append("\\n"); break;
        case '\r': out.append("\\r"); break;
        case '\t': out.append("\\t"); break;
        case '<':
        case '>':
        case '&': AppendU(&out, c); break;
        default:
          if (c < 0x20) {
            AppendU(&out, c);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = Utf8Length(s, i, &cp);
    if (n == 0) {
      out.append("\\ufffd");
      ++i;
    } else if (cp == 0x2028 || cp == 0x2029) {
      AppendU(&out, cp);
      i += n;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  out.push_back('"');
  return out;
}

std::string GoJsonStringMap(const std::map<std::string, std::string>& m) {
  std::string out = "{";
  for (const auto& [k, v] : m) {
    if (out.size() > 1) out.push_back(',');
    out += GoJsonString(k) + ":" + GoJsonString(v);
  }
  return out + "}";
}

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr);
  std::string out;
  out.reserve(size_t{2} * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 0xf]);
  }
  return out;
}

}  // namespace clusterd::mindcluster
