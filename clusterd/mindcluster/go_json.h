// Go's encoding/json, byte for byte, for the few shapes MindCluster hashes
// and Volcano reads: MindCluster's components check a ConfigMap's CheckCode
// against the SHA-256 of the Go-JSON of its payload, so the bytes must be
// the ones Go would write (docs/mindcluster.md).
//
// What differs from a plain JSON writer: object keys of a Go map are sorted
// (bytewise); no spaces; '<', '>' and '&' are written \u003c, \u003e, \u0026;
// U+2028 and U+2029 are escaped; control characters other than \n, \r and
// \t are \u00XX (lower-case hex); bytes that are not valid UTF-8 become
// \ufffd.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace clusterd::mindcluster {

// `s` as a Go-JSON string literal, quotes included.
std::string GoJsonString(std::string_view s);

// A Go map[string]string: keys sorted, no spaces.
std::string GoJsonStringMap(const std::map<std::string, std::string>& m);

// Lower-case hex SHA-256 of `data` (MindCluster's CheckCode).
std::string Sha256Hex(std::string_view data);

}  // namespace clusterd::mindcluster
