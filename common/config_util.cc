#include "common/config_util.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/duration.h"

namespace clusterd {

Status SetU64(const std::string& key, const std::string& value, uint64_t min, uint64_t max, uint64_t* out) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty()) {
    return InvalidArgument(key + ": \"" + value + "\" is not a non-negative integer");
  }
  if (v < min || v > max) {
    return InvalidArgument(key + ": " + value + " is out of range [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
  }
  *out = v;
  return Status::Ok();
}

Status SetU32(const std::string& key, const std::string& value, uint32_t min, uint32_t max, uint32_t* out) {
  uint64_t v = 0;
  CLUSTERD_RETURN_IF_ERROR(SetU64(key, value, min, max, &v));
  *out = static_cast<uint32_t>(v);
  return Status::Ok();
}

Status SetDuration(const std::string& key, const std::string& value, std::chrono::nanoseconds min,
                   std::chrono::nanoseconds* out) {
  auto d = ParseDuration(value);
  if (!d.ok()) return InvalidArgument(key + ": " + d.status().message());
  if (*d < min) return InvalidArgument(key + ": " + value + " is shorter than the minimum " + FormatDuration(min));
  *out = *d;
  return Status::Ok();
}

Status SetAddress(const std::string& key, const std::string& value, std::string* out) {
  auto colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size()) {
    return InvalidArgument(key + ": \"" + value + "\" must be host:port");
  }
  uint32_t port = 0;
  CLUSTERD_RETURN_IF_ERROR(SetU32(key + " port", value.substr(colon + 1), 0, 65535, &port));
  *out = value;
  return Status::Ok();
}

Status SetLogLevel(const std::string& key, const std::string& value, std::string* out) {
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  for (const char* l : kLevels) {
    if (value == l) {
      *out = value;
      return Status::Ok();
    }
  }
  return InvalidArgument(key + ": \"" + value + "\" is not one of trace, debug, info, warn, error, critical, off");
}

std::string JoinNames(const std::vector<std::string>& names, std::string_view last) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size()) ? std::string(last) : std::string(", ");
    out += names[i];
  }
  return out;
}

std::vector<std::string> SplitCommaList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.emplace_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string JoinCommaList(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot read " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

namespace {
std::string DashesToUnderscores(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}
}  // namespace

StatusOr<FlagArgs> SplitFlags(const std::vector<std::string>& args,
                              const std::function<bool(const std::string&)>& known,
                              const std::function<bool(const std::string&)>& is_switch) {
  FlagArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      out.help = true;
      return out;
    }
    if (arg.rfind("--", 0) != 0) return InvalidArgument("unexpected argument \"" + arg + "\"");
    std::string name = arg.substr(2), value;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (is_switch && is_switch(DashesToUnderscores(name)) &&
               (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)) {
      value = "true";  // a switch given alone ("--insecure")
    } else {
      if (i + 1 >= args.size()) return InvalidArgument("--" + name + ": missing value");
      value = args[++i];
    }
    if (name == "config") {
      out.config_path = value;
      continue;
    }
    std::string key = name;
    std::replace(key.begin(), key.end(), '-', '_');
    if (!known(key)) return InvalidArgument("unknown flag --" + name + " (see --help)");
    out.flags.emplace_back(key, value);
  }
  return out;
}

Status SetBool(const std::string& key, const std::string& value, bool* out) {
  if (value == "true" || value == "1") {
    *out = true;
  } else if (value == "false" || value == "0") {
    *out = false;
  } else {
    return InvalidArgument(key + ": \"" + value + "\" is not true or false");
  }
  return Status::Ok();
}

Status ApplyJsonObject(std::string_view json_text, std::string_view origin,
                       const std::function<bool(const std::string&)>& known,
                       const std::function<Status(const std::string& key, const std::string& value)>& set) {
  const std::string where(origin);
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, false);
  if (doc.is_discarded()) return InvalidArgument(where + ": not valid JSON");
  if (!doc.is_object()) return InvalidArgument(where + ": top level must be an object");
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!known(it.key())) return InvalidArgument(where + ": unknown key \"" + it.key() + "\"");
    std::string value;
    if (it->is_string())
      value = it->get<std::string>();
    else if (it->is_number_unsigned())
      value = std::to_string(it->get<uint64_t>());
    else if (it->is_boolean())
      value = it->get<bool>() ? "true" : "false";
    else if (it->is_array()) {
      // A list of strings: the same comma-separated text the flag takes.
      for (const auto& item : *it) {
        if (!item.is_string() || item.get_ref<const std::string&>().find(',') != std::string::npos) {
          return InvalidArgument(where + ": " + it.key() + ": a list must hold strings without commas");
        }
        if (!value.empty()) value += ",";
        value += item.get<std::string>();
      }
    } else
      return InvalidArgument(where + ": " + it.key() +
                             ": must be a string, a non-negative integer, a boolean or a list of strings");
    Status st = set(it.key(), value);
    if (!st.ok()) return InvalidArgument(where + ": " + st.message());
  }
  return Status::Ok();
}

}  // namespace clusterd
