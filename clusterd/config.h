// ClusterD configuration: defaults, a JSON file (--config) and flags, parsed
// in one place. A flag overrides the file; every error names the key.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd {

struct ClusterdConfig {
  std::string listen = "0.0.0.0:8899";
  std::string http_listen = "0.0.0.0:11253";
  std::string data_dir = "./clusterd-data";
  std::chrono::nanoseconds node_grace = std::chrono::seconds(10);
  // Advertised to agents in the Welcome.
  std::chrono::nanoseconds heartbeat_interval = std::chrono::seconds(2);
  std::string catalog_file;  // optional override, merged over the built-in catalog
  v1::FaultLevel default_level = v1::FAULT_LEVEL_SUB_HEALTH;
  // Event-log retention: keep at most this many events, none older than this.
  uint64_t retention_events = 1'000'000;
  std::chrono::nanoseconds retention_age = std::chrono::hours(24 * 7);
  std::chrono::nanoseconds retention_interval = std::chrono::seconds(60);
  // Under a steady light load a group commit may wait this long for more
  // changes (EngineOptions::commit_delay); 0 never waits.
  std::chrono::nanoseconds commit_delay = std::chrono::milliseconds(2);
  // Watchers: recent events kept in memory, and how far a live watcher may
  // fall behind before it is ended with RESOURCE_EXHAUSTED.
  uint32_t watch_cache_events = 65'536;
  uint32_t watch_max_lag_events = 10'000;
  uint32_t max_message_bytes = 4 << 20;
  uint32_t max_streams = 20'000;
  // Messages of one agent stream accepted but not yet durable before reading pauses.
  uint32_t max_inflight_per_stream = 256;
  std::string log_level = "info";
  // Recovery: how cluster actions are carried out ("none", "exec", "webhook").
  std::string actuator = "none";
  std::string actuator_command;  // exec: run with /bin/sh -c, the action as JSON on stdin
  std::string actuator_url;      // webhook: http://host:port/path
  // Blast radius: at most this many recoveries running at once, and at most
  // this percentage of nodes isolated.
  uint32_t max_concurrent_recoveries = 4;
  uint32_t max_isolated_node_percent = 10;
  // Retry budgets count recoveries started within this window.
  std::chrono::nanoseconds recovery_budget_window = std::chrono::hours(24);
  // After a restart, steps in flight get at least this long to be answered.
  std::chrono::nanoseconds recovery_resume_grace = std::chrono::seconds(30);
};

// Parses flags (argv[1..]) and the --config file they name, if any. Returns
// InvalidArgument naming the flag or key on any bad value. `help` is set when
// --help was given.
StatusOr<ClusterdConfig> ParseClusterdConfig(const std::vector<std::string>& args, bool* help);

// Applies a JSON object over cfg. `origin` prefixes error messages.
Status ApplyClusterdConfigJson(std::string_view json_text, std::string_view origin, ClusterdConfig* cfg);

std::string ClusterdUsage();

}  // namespace clusterd
