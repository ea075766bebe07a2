// Checks for untrusted strings that reach storage keys and logs. Every check
// returns a Status naming the field, so callers can hand it straight back.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace clusterd {

inline constexpr size_t kMaxNameLength = 253;
inline constexpr size_t kMaxCodeLength = 64;
inline constexpr size_t kMaxMessageLength = 4096;
inline constexpr size_t kMaxLabelLength = 256;
inline constexpr size_t kMaxLabels = 64;

// Node names: 1-253 characters of [A-Za-z0-9._-], starting with a letter or digit.
Status ValidateNodeName(std::string_view field, std::string_view name);
// An IPv4 or IPv6 address as text: 1 to 45 hex digits, dots and colons (the
// characters and length such an address takes; not a full parse).
bool IsAddressText(std::string_view text);
// Where a peer probes an agent (docs/pingmesh.md): "ip:port" with an IPv4
// literal or a bracketed IPv6 literal, or ":port"; the port 1..65535.
bool IsProbeAddressText(std::string_view text);
// Fault codes: 1-64 characters of [A-Za-z0-9_.-].
Status ValidateCode(std::string_view field, std::string_view code);
// Free text: at most kMaxMessageLength bytes, valid UTF-8, no NUL.
Status ValidateText(std::string_view field, std::string_view text, size_t max_len = kMaxMessageLength);
// One-line text that names or identifies something (a fault's subject, an
// inventory field, a reason, an id): as ValidateText, and no control
// characters at all (C0, DEL, C1), so it cannot forge log lines or drive a
// terminal.
Status ValidateLine(std::string_view field, std::string_view text, size_t max_len);
// Label keys and values, reporter names and ids: printable ASCII without
// spaces, 1-256 characters (values may be empty when allow_empty).
Status ValidateToken(std::string_view field, std::string_view token, bool allow_empty = false);

// For agents, before they send what they read from the system: replace every
// invalid UTF-8 sequence (SanitizeUtf8), and also every control character
// (SanitizeLine), with U+FFFD. Return true when they changed *s.
bool SanitizeUtf8(std::string* s);
bool SanitizeLine(std::string* s);

}  // namespace clusterd
