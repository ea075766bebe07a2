#include "clusterd/config.h"

#include <charconv>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/duration.h"
#include "common/levels.h"

namespace clusterd {
namespace {

using Setter = std::function<Status(const std::string& value, ClusterdConfig* cfg)>;

Status SetU64(const std::string& key, const std::string& value, uint64_t min, uint64_t max, uint64_t* out) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size()) {
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

// One table of keys: the JSON file uses the key, flags use --key with '_' -> '-'.
const std::map<std::string, Setter>& Setters() {
  static const std::map<std::string, Setter> table = {
      {"listen", [](const std::string& v, ClusterdConfig* c) { return SetAddress("listen", v, &c->listen); }},
      {"http_listen",
       [](const std::string& v, ClusterdConfig* c) { return SetAddress("http_listen", v, &c->http_listen); }},
      {"data_dir",
       [](const std::string& v, ClusterdConfig* c) {
         if (v.empty()) return InvalidArgument("data_dir: must not be empty");
         c->data_dir = v;
         return Status::Ok();
       }},
      {"node_grace",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("node_grace", v, std::chrono::milliseconds(100), &c->node_grace);
       }},
      {"heartbeat_interval",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("heartbeat_interval", v, std::chrono::milliseconds(10), &c->heartbeat_interval);
       }},
      {"catalog_file",
       [](const std::string& v, ClusterdConfig* c) {
         c->catalog_file = v;
         return Status::Ok();
       }},
      {"default_level",
       [](const std::string& v, ClusterdConfig* c) {
         auto level = ParseFaultLevel(v);
         if (!level) return InvalidArgument("default_level: \"" + v + "\" is not a fault level name");
         c->default_level = *level;
         return Status::Ok();
       }},
      {"retention_events",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU64("retention_events", v, 1000, UINT64_MAX, &c->retention_events);
       }},
      {"retention_age",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("retention_age", v, std::chrono::minutes(1), &c->retention_age);
       }},
      {"retention_interval",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("retention_interval", v, std::chrono::milliseconds(100), &c->retention_interval);
       }},
      {"watch_cache_events",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("watch_cache_events", v, 16, 16'000'000, &c->watch_cache_events);
       }},
      {"watch_max_lag_events",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("watch_max_lag_events", v, 16, 16'000'000, &c->watch_max_lag_events);
       }},
      {"max_message_bytes",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_message_bytes", v, 4096, 64u << 20, &c->max_message_bytes);
       }},
      {"max_streams",
       [](const std::string& v, ClusterdConfig* c) { return SetU32("max_streams", v, 1, 1'000'000, &c->max_streams); }},
      {"max_inflight_per_stream",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_inflight_per_stream", v, 1, 65'536, &c->max_inflight_per_stream);
       }},
      {"log_level",
       [](const std::string& v, ClusterdConfig* c) {
         static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
         for (const char* l : kLevels) {
           if (v == l) {
             c->log_level = v;
             return Status::Ok();
           }
         }
         return InvalidArgument("log_level: \"" + v + "\" is not one of trace, debug, info, warn, error, critical, off");
       }},
  };
  return table;
}

}  // namespace

Status ApplyClusterdConfigJson(std::string_view json_text, std::string_view origin, ClusterdConfig* cfg) {
  const std::string where(origin);
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, false);
  if (doc.is_discarded()) return InvalidArgument(where + ": not valid JSON");
  if (!doc.is_object()) return InvalidArgument(where + ": top level must be an object");
  ClusterdConfig next = *cfg;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    auto setter = Setters().find(it.key());
    if (setter == Setters().end()) return InvalidArgument(where + ": unknown key \"" + it.key() + "\"");
    std::string value;
    if (it->is_string()) value = it->get<std::string>();
    else if (it->is_number_unsigned()) value = std::to_string(it->get<uint64_t>());
    else return InvalidArgument(where + ": " + it.key() + ": must be a string or a non-negative integer");
    Status st = setter->second(value, &next);
    if (!st.ok()) return InvalidArgument(where + ": " + st.message());
  }
  *cfg = next;
  return Status::Ok();
}

StatusOr<ClusterdConfig> ParseClusterdConfig(const std::vector<std::string>& args, bool* help) {
  *help = false;
  std::vector<std::pair<std::string, std::string>> flags;
  std::string config_path;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      return ClusterdConfig{};
    }
    if (arg.rfind("--", 0) != 0) return InvalidArgument("unexpected argument \"" + arg + "\"");
    std::string name = arg.substr(2), value;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= args.size()) return InvalidArgument("--" + name + ": missing value");
      value = args[++i];
    }
    if (name == "config") {
      config_path = value;
      continue;
    }
    std::string key = name;
    std::replace(key.begin(), key.end(), '-', '_');
    if (key == "catalog") key = "catalog_file";
    if (!Setters().count(key)) return InvalidArgument("unknown flag --" + name + " (see --help)");
    flags.emplace_back(key, value);
  }
  ClusterdConfig cfg;
  if (!config_path.empty()) {
    std::ifstream in(config_path);
    if (!in) return InvalidArgument("--config: cannot read " + config_path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    CLUSTERD_RETURN_IF_ERROR(ApplyClusterdConfigJson(buffer.str(), "config file " + config_path, &cfg));
  }
  for (const auto& [key, value] : flags) {
    Status st = Setters().at(key)(value, &cfg);
    if (!st.ok()) {
      std::string flag = key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      return InvalidArgument("--" + flag + ": " + st.message());
    }
  }
  return cfg;
}

std::string ClusterdUsage() {
  return R"(usage: clusterd [--config FILE] [--flag value ...]

Flags (the JSON config file takes the same keys with '_'):
  --listen ADDR               gRPC address (default 0.0.0.0:8899)
  --http-listen ADDR          HTTP /healthz /readyz /metrics (default 0.0.0.0:11253)
  --data-dir DIR              RocksDB directory (default ./clusterd-data)
  --node-grace DUR            heartbeat silence before a node is lost (default 10s)
  --heartbeat-interval DUR    heartbeat interval advertised to agents (default 2s)
  --catalog FILE              fault-code catalog merged over the built-in one
  --default-level LEVEL       level of codes no catalog knows (default SUB_HEALTH)
  --retention-events N        keep at most N events in the history (default 1000000)
  --retention-age DUR         keep no event older than this (default 7d)
  --retention-interval DUR    how often retention runs (default 60s)
  --watch-cache-events N      recent events kept in memory for watchers (default 65536)
  --watch-max-lag-events N    a live watcher further behind is ended (default 10000)
  --max-message-bytes N       largest accepted gRPC message (default 4194304)
  --max-streams N             most concurrent agent streams (default 20000)
  --max-inflight-per-stream N agent messages in flight before reading pauses (default 256)
  --log-level LEVEL           trace, debug, info, warn, error (default info)
Durations take a unit: 500ms, 10s, 2m, 1h, 7d.
)";
}

}  // namespace clusterd
