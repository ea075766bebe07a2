// Building blocks shared by the daemons' config parsers: value setters whose
// errors name the key, and the split of argv into --config and --key value
// pairs. Each daemon keeps its own table of keys (clusterd/config/config.cc,
// noded/server/config.cc) built with common/config_table.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace clusterd {

Status SetU64(const std::string& key, const std::string& value, uint64_t min, uint64_t max, uint64_t* out);
Status SetU32(const std::string& key, const std::string& value, uint32_t min, uint32_t max, uint32_t* out);
Status SetDuration(const std::string& key, const std::string& value, std::chrono::nanoseconds min,
                   std::chrono::nanoseconds* out);
// host:port with a numeric port 0-65535.
Status SetAddress(const std::string& key, const std::string& value, std::string* out);
// "true"/"false" (also 1/0).
Status SetBool(const std::string& key, const std::string& value, bool* out);
Status SetLogLevel(const std::string& key, const std::string& value, std::string* out);
StatusOr<std::string> ReadFileToString(const std::string& path);
// "a, b, c", the last separator `last` ("a, b or c"): for messages that list
// the allowed names.
std::string JoinNames(const std::vector<std::string>& names, std::string_view last = ", ");
// A comma-separated list ("a,,b" -> {"a", "b"}: empty items are dropped), and
// back ("a,b"). List settings, and the lists of MindCluster's ConfigMaps.
std::vector<std::string> SplitCommaList(std::string_view text);
std::string JoinCommaList(const std::vector<std::string>& items);

struct FlagArgs {
  std::string config_path;
  std::vector<std::pair<std::string, std::string>> flags;  // key (with '_'), value
  bool help = false;
};
// Splits --key value / --key=value pairs; `known` says whether a key exists.
// A key for which `is_switch` is true may also be given alone ("--insecure",
// followed by another flag or nothing), meaning "true".
StatusOr<FlagArgs> SplitFlags(const std::vector<std::string>& args,
                              const std::function<bool(const std::string&)>& known,
                              const std::function<bool(const std::string&)>& is_switch = nullptr);

// Applies a JSON object through the setters: strings and non-negative
// integers as their text, booleans as "true"/"false", lists of strings
// joined with commas (as the matching flag would take them).
Status ApplyJsonObject(std::string_view json_text, std::string_view origin,
                       const std::function<bool(const std::string&)>& known,
                       const std::function<Status(const std::string& key, const std::string& value)>& set);

}  // namespace clusterd
