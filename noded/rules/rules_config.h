// Rule set: the built-in defaults and the JSON rules file that overrides them.
//
// File format (every key optional):
//   {
//     "rules": [
//       {"name": "disk_full", "raise": 97, "clear": 92},          // override fields of a default
//       {"name": "nic_errors", "enabled": false},                  // switch a default off
//       {"name": "scratch_full", "metric": "disk.used_percent",    // a new rule: metric, code,
//        "op": "above", "raise": 80, "clear": 70, "for": "1m",     // raise and level required
//        "code": "NODE_SCRATCH_FULL", "level": "SUB_HEALTH"}
//     ],
//     "kernel_patterns": [
//       {"code": "KERNEL_NVME_TIMEOUT", "regex": "nvme.*timeout", "ignore_case": true}
//     ]
//   }
// Rule fields: name, metric, op ("above"|"below"), raise, clear (default: raise),
// for, clear_for (durations like "30s"; default "0s"), window (counter metrics only;
// default "1m"), code, level (a level name), enabled. A kernel pattern with the code
// of an existing one replaces it. Unknown fields are refused so typos do not pass
// silently; every error names the rule and the field.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "noded/collectors/kmsg.h"
#include "noded/rules/rule.h"

namespace clusterd::noded {

struct RulesConfig {
  std::vector<Rule> rules;
  std::vector<KernelPattern> kernel_patterns;
};

std::vector<Rule> DefaultRules();
RulesConfig DefaultRulesConfig();  // DefaultRules() + DefaultKernelPatterns()

// Checks one rule on its own (metric known, thresholds on the right sides, ...).
Status ValidateRule(const Rule& rule);
// Every rule, unique names, unique codes among enabled rules, and every enabled
// "kernel.<CODE>" rule backed by a kernel pattern with that code.
Status ValidateRulesConfig(const RulesConfig& config);

// Applies a parsed rules document on top of `base` and validates the result.
StatusOr<RulesConfig> ApplyRulesJson(RulesConfig base, const nlohmann::json& doc);
// Reads and applies a rules file; parse errors name the file.
StatusOr<RulesConfig> LoadRulesFile(const std::string& path, RulesConfig base = DefaultRulesConfig());

}  // namespace clusterd::noded
