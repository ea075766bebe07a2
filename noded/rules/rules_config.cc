#include "noded/rules/rules_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/duration.h"

namespace clusterd::noded {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;

Rule MakeRule(std::string name, std::string metric, Op op, double raise, double clear, nanoseconds for_d,
              nanoseconds window, std::string code, Level level) {
  Rule r;
  r.name = std::move(name);
  r.metric = std::move(metric);
  r.op = op;
  r.raise = raise;
  r.clear = clear;
  r.for_duration = for_d;
  r.window = window;
  r.code = std::move(code);
  r.level = level;
  return r;
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

Status FieldError(const std::string& rule, const std::string& field, const std::string& what) {
  return InvalidArgument("rule '" + rule + "': field '" + field + "' " + what);
}

StatusOr<nanoseconds> ParseDurationField(const std::string& rule, const std::string& field, const nlohmann::json& v) {
  if (!v.is_string()) return FieldError(rule, field, "must be a duration string such as \"30s\"");
  const std::string& s = v.get_ref<const std::string&>();
  if (!s.empty() && s.front() == '-') return FieldError(rule, field, "must not be negative (\"" + s + "\")");
  auto d = ParseDuration(s);
  if (!d.ok()) return FieldError(rule, field, d.status().message());
  return *d;
}

Status ApplyRuleFields(const nlohmann::json& j, bool is_new, Rule* r) {
  static const std::set<std::string> kFields = {"name",      "metric", "op",   "raise", "clear",  "for",
                                                "clear_for", "window", "code", "level", "enabled"};
  const std::string& name = r->name;
  for (const auto& [key, value] : j.items()) {
    if (!kFields.count(key)) return FieldError(name, key, "is not a rule field");
  }
  if (is_new) {
    for (const char* required : {"metric", "code", "raise", "level"}) {
      if (!j.contains(required)) return FieldError(name, required, "is required for a new rule");
    }
  }
  if (j.contains("metric")) {
    if (!j["metric"].is_string()) return FieldError(name, "metric", "must be a string");
    r->metric = j["metric"].get<std::string>();
  }
  if (j.contains("op")) {
    const auto& v = j["op"];
    if (v == "above")
      r->op = Op::kAbove;
    else if (v == "below")
      r->op = Op::kBelow;
    else
      return FieldError(name, "op", "must be \"above\" or \"below\", not " + v.dump());
  }
  for (auto [key, slot] : {std::pair<const char*, double*>{"raise", &r->raise}, {"clear", &r->clear}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number()) return FieldError(name, key, "must be a number, not " + j[key].dump());
    *slot = j[key].get<double>();
  }
  if (is_new && !j.contains("clear")) r->clear = r->raise;
  for (auto [key, slot] : {std::pair<const char*, nanoseconds*>{"for", &r->for_duration},
                           {"clear_for", &r->clear_for},
                           {"window", &r->window}}) {
    if (!j.contains(key)) continue;
    auto d = ParseDurationField(name, key, j[key]);
    if (!d.ok()) return d.status();
    *slot = *d;
  }
  if (j.contains("code")) {
    if (!j["code"].is_string()) return FieldError(name, "code", "must be a string");
    r->code = j["code"].get<std::string>();
  }
  if (j.contains("level")) {
    const auto& v = j["level"];
    auto level = v.is_string() ? ParseLevel(v.get<std::string>()) : std::nullopt;
    if (!level) return FieldError(name, "level", "is not a known level: " + v.dump() + " (NOT_HANDLE ... SEPARATE)");
    r->level = *level;
  }
  if (j.contains("enabled")) {
    if (!j["enabled"].is_boolean()) return FieldError(name, "enabled", "must be true or false");
    r->enabled = j["enabled"].get<bool>();
  }
  if (j.contains("window")) {
    auto info = FindMetric(r->metric);
    if (info && info->kind != MetricKind::kCounter) {
      return FieldError(name, "window", "applies only to counter metrics; '" + r->metric + "' is a gauge");
    }
  }
  return Status::Ok();
}

bool ValidName(const std::string& s, bool code) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              (!code && ((c >= 'a' && c <= 'z') || c == '-' || c == '.'));
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::vector<Rule> DefaultRules() {
  const nanoseconds zero{0};
  return {
      MakeRule("disk_full", "disk.used_percent", Op::kAbove, 95, 90, seconds(30), minutes(1), "NODE_DISK_FULL",
               Level::kSubHealth),
      MakeRule("inodes_full", "disk.inodes_used_percent", Op::kAbove, 95, 90, seconds(30), minutes(1),
               "NODE_INODES_FULL", Level::kSubHealth),
      MakeRule("disk_readonly", "disk.readonly", Op::kAbove, 0, 0, zero, minutes(1), "NODE_DISK_READONLY",
               Level::kPreSeparate),
      MakeRule("disk_io_errors", "disk.io_errors", Op::kAbove, 0, 0, zero, minutes(10), "NODE_DISK_IO_ERRORS",
               Level::kSubHealth),
      MakeRule("memory_low", "memory.available_percent", Op::kBelow, 5, 10, seconds(30), minutes(1), "NODE_MEMORY_LOW",
               Level::kSubHealth),
      MakeRule("memory_pressure", "memory.pressure_full_avg10", Op::kAbove, 20, 5, seconds(30), minutes(1),
               "NODE_MEMORY_PRESSURE", Level::kSubHealth),
      MakeRule("ecc_uncorrected", "memory.ecc_uncorrected", Op::kAbove, 0, 0, zero, hours(24),
               "NODE_MEMORY_ECC_UNCORRECTED", Level::kPreSeparate),
      MakeRule("ecc_corrected", "memory.ecc_corrected", Op::kAbove, 100, 10, zero, hours(1),
               "NODE_MEMORY_ECC_CORRECTED", Level::kSubHealth),
      MakeRule("cpu_throttled", "cpu.throttle_events", Op::kAbove, 100, 10, zero, minutes(5), "NODE_CPU_THROTTLED",
               Level::kSubHealth),
      MakeRule("link_down", "network.link_down", Op::kAbove, 0, 0, seconds(2), minutes(1), "NODE_LINK_DOWN",
               Level::kSubHealth),
      MakeRule("link_flapping", "network.carrier_changes", Op::kAbove, 10, 0, zero, minutes(10), "NODE_LINK_FLAPPING",
               Level::kSubHealth),
      MakeRule("nic_errors", "network.errors", Op::kAbove, 100, 0, zero, minutes(5), "NODE_NIC_ERRORS",
               Level::kSubHealth),
      MakeRule("kernel_oom_kill", "kernel.KERNEL_OOM_KILL", Op::kAbove, 0, 0, zero, minutes(10), "KERNEL_OOM_KILL",
               Level::kSubHealth),
      MakeRule("kernel_hung_task", "kernel.KERNEL_HUNG_TASK", Op::kAbove, 0, 0, zero, minutes(10), "KERNEL_HUNG_TASK",
               Level::kSubHealth),
      MakeRule("kernel_mce", "kernel.KERNEL_MCE", Op::kAbove, 0, 0, zero, hours(1), "KERNEL_MCE", Level::kSubHealth),
      MakeRule("kernel_fs_error", "kernel.KERNEL_FS_ERROR", Op::kAbove, 0, 0, zero, hours(1), "KERNEL_FS_ERROR",
               Level::kSubHealth),
      MakeRule("kernel_accel_driver_error", "kernel.KERNEL_ACCEL_DRIVER_ERROR", Op::kAbove, 0, 0, zero, minutes(10),
               "KERNEL_ACCEL_DRIVER_ERROR", Level::kSubHealth),
  };
}

RulesConfig DefaultRulesConfig() { return {DefaultRules(), DefaultKernelPatterns()}; }

Status ValidateRule(const Rule& r) {
  if (!ValidName(r.name, false)) {
    return InvalidArgument("rule '" + r.name + "': field 'name' must be non-empty [A-Za-z0-9_.-]");
  }
  auto info = FindMetric(r.metric);
  if (!info) return FieldError(r.name, "metric", "names an unknown metric '" + r.metric + "'");
  if (!std::isfinite(r.raise)) return FieldError(r.name, "raise", "must be a finite number");
  if (!std::isfinite(r.clear)) return FieldError(r.name, "clear", "must be a finite number");
  if (r.op == Op::kAbove && r.clear > r.raise) {
    return FieldError(r.name, "clear",
                      "(" + Num(r.clear) + ") must be <= 'raise' (" + Num(r.raise) +
                          ") for op 'above': a fault clears at or below it");
  }
  if (r.op == Op::kBelow && r.clear < r.raise) {
    return FieldError(r.name, "clear",
                      "(" + Num(r.clear) + ") must be >= 'raise' (" + Num(r.raise) +
                          ") for op 'below': a fault clears at or above it");
  }
  if (r.for_duration.count() < 0) return FieldError(r.name, "for", "must not be negative");
  if (r.clear_for.count() < 0) return FieldError(r.name, "clear_for", "must not be negative");
  if (info->kind == MetricKind::kCounter && r.window.count() <= 0) {
    return FieldError(r.name, "window", "must be positive for counter metric '" + r.metric + "'");
  }
  if (!ValidName(r.code, true)) return FieldError(r.name, "code", "must be non-empty [A-Z0-9_], not '" + r.code + "'");
  if (static_cast<int>(r.level) < 0 || static_cast<int>(r.level) > static_cast<int>(Level::kSeparate)) {
    return FieldError(r.name, "level", "is not a known level");
  }
  return Status::Ok();
}

Status ValidateRulesConfig(const RulesConfig& config) {
  std::set<std::string> pattern_codes;
  for (const auto& p : config.kernel_patterns) pattern_codes.insert(p.code);
  std::set<std::string> names;
  std::map<std::string, std::string> codes;  // code -> rule name
  for (const auto& r : config.rules) {
    CLUSTERD_RETURN_IF_ERROR(ValidateRule(r));
    if (!names.insert(r.name).second) return InvalidArgument("rule '" + r.name + "': duplicate name");
    if (!r.enabled) continue;
    auto [it, inserted] = codes.emplace(r.code, r.name);
    if (!inserted) {
      return FieldError(r.name, "code", "'" + r.code + "' is already used by rule '" + it->second + "'");
    }
    auto info = FindMetric(r.metric);
    if (info->source == Source::kKernel) {
      std::string code = r.metric.substr(std::string("kernel.").size());
      if (!pattern_codes.count(code)) {
        return FieldError(r.name, "metric", "'" + r.metric + "' has no kernel pattern with code '" + code + "'");
      }
    }
  }
  // Compiles every pattern, naming the bad one.
  auto matcher = KmsgMatcher::Create(config.kernel_patterns);
  return matcher.ok() ? Status::Ok() : matcher.status();
}

StatusOr<RulesConfig> ApplyRulesJson(RulesConfig base, const nlohmann::json& doc) {
  if (!doc.is_object()) return InvalidArgument("rules document must be a JSON object");
  for (const auto& [key, value] : doc.items()) {
    if (key != "rules" && key != "kernel_patterns") {
      return InvalidArgument("rules document: unknown key '" + key + "' (expected \"rules\", \"kernel_patterns\")");
    }
  }
  if (doc.contains("kernel_patterns")) {
    const auto& list = doc["kernel_patterns"];
    if (!list.is_array()) return InvalidArgument("'kernel_patterns' must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const auto& p = list[i];
      const std::string what = "kernel pattern " + std::to_string(i);
      if (!p.is_object()) return InvalidArgument(what + ": must be an object");
      for (const auto& [key, value] : p.items()) {
        if (key != "code" && key != "regex" && key != "ignore_case") {
          return InvalidArgument(what + ": field '" + key + "' is not a pattern field");
        }
      }
      if (!p.contains("code") || !p["code"].is_string() || !ValidName(p["code"].get<std::string>(), true)) {
        return InvalidArgument(what + ": field 'code' must be a string of [A-Z0-9_]");
      }
      if (!p.contains("regex") || !p["regex"].is_string()) {
        return InvalidArgument(what + ": field 'regex' must be a string");
      }
      if (p.contains("ignore_case") && !p["ignore_case"].is_boolean()) {
        return InvalidArgument(what + ": field 'ignore_case' must be true or false");
      }
      KernelPattern kp{p["code"].get<std::string>(), p["regex"].get<std::string>(), p.value("ignore_case", false)};
      auto it = std::find_if(base.kernel_patterns.begin(), base.kernel_patterns.end(),
                             [&](const KernelPattern& e) { return e.code == kp.code; });
      if (it != base.kernel_patterns.end())
        *it = std::move(kp);
      else
        base.kernel_patterns.push_back(std::move(kp));
    }
  }
  if (doc.contains("rules")) {
    const auto& list = doc["rules"];
    if (!list.is_array()) return InvalidArgument("'rules' must be an array");
    std::set<std::string> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      const auto& j = list[i];
      if (!j.is_object()) return InvalidArgument("rule " + std::to_string(i) + ": must be an object");
      if (!j.contains("name") || !j["name"].is_string()) {
        return InvalidArgument("rule " + std::to_string(i) + ": field 'name' is required and must be a string");
      }
      std::string name = j["name"].get<std::string>();
      if (!seen.insert(name).second) return InvalidArgument("rule '" + name + "': appears twice in the file");
      auto it = std::find_if(base.rules.begin(), base.rules.end(), [&](const Rule& r) { return r.name == name; });
      bool is_new = it == base.rules.end();
      Rule rule = is_new ? Rule{} : *it;
      rule.name = name;
      CLUSTERD_RETURN_IF_ERROR(ApplyRuleFields(j, is_new, &rule));
      CLUSTERD_RETURN_IF_ERROR(ValidateRule(rule));
      if (is_new)
        base.rules.push_back(std::move(rule));
      else
        *it = std::move(rule);
    }
  }
  CLUSTERD_RETURN_IF_ERROR(ValidateRulesConfig(base));
  return base;
}

StatusOr<RulesConfig> LoadRulesFile(const std::string& path, RulesConfig base) {
  std::ifstream in(path);
  if (!in) return NotFound("rules file " + path + ": cannot open");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument("rules file " + path + ": not valid JSON: " + e.what());
  }
  auto out = ApplyRulesJson(std::move(base), doc);
  if (!out.ok()) return InvalidArgument("rules file " + path + ": " + out.status().message());
  return out;
}

}  // namespace clusterd::noded
