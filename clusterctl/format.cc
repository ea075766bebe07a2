#include "clusterctl/format.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "common/duration.h"
#include "common/levels.h"

namespace clusterctl {
namespace {

std::string Upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

std::string StripPrefix(const std::string& full, const std::string& prefix) {
  return full.rfind(prefix, 0) == 0 ? full.substr(prefix.size()) : full;
}

// Display width: counts UTF-8 code points, not bytes, so names with
// non-ASCII characters still line up (close enough for a terminal table).
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;
  }
  return n;
}

}  // namespace

Table::Table(std::vector<std::string> headers) { rows_.push_back(std::move(headers)); }

void Table::AddRow(std::vector<std::string> cells) {
  for (auto& c : cells) c = Sanitize(c);
  cells.resize(rows_[0].size());
  rows_.push_back(std::move(cells));
}

void Table::Print(std::ostream& out) const {
  const size_t cols = rows_[0].size();
  std::vector<size_t> width(cols, 0);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < cols; ++i) width[i] = std::max(width[i], Width(row[i]));
  }
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < cols; ++i) {
      line += row[i];
      if (i + 1 < cols) line += std::string(width[i] - Width(row[i]) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

std::string Sanitize(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) c = '?';
  }
  return out;
}

std::string ToJson(const google::protobuf::Message& m, bool pretty) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  opts.add_whitespace = pretty;
  std::string out;
  auto st = google::protobuf::util::MessageToJsonString(m, &out, opts);
  if (!st.ok()) return "{\"error\": \"cannot encode response as JSON\"}";
  if (pretty && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string FormatTime(const google::protobuf::Timestamp& t, bool millis) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  std::time_t secs = static_cast<std::time_t>(t.seconds());
  std::tm tm{};
  if (!gmtime_r(&secs, &tm)) return "-";
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = buf;
  if (millis) {
    char frac[8];
    std::snprintf(frac, sizeof frac, ".%03d", t.nanos() / 1'000'000);
    out += frac;
  }
  return out + "Z";
}

std::string ShortHealth(v1::Health h) {
  if (h == v1::HEALTH_UNSPECIFIED) return "-";
  return StripPrefix(v1::Health_Name(h), "HEALTH_");
}

std::string ShortLevel(v1::FaultLevel l) {
  if (l == v1::FAULT_LEVEL_UNSPECIFIED) return "-";
  return clusterd::ShortLevelName(l);
}

std::string ShortState(v1::FaultState s) {
  if (s == v1::FAULT_STATE_UNSPECIFIED) return "-";
  return StripPrefix(v1::FaultState_Name(s), "FAULT_STATE_");
}

std::string ShortEventType(v1::EventType t) { return StripPrefix(v1::EventType_Name(t), "EVENT_TYPE_"); }

std::string ShortSource(v1::FaultSource s) {
  if (s == v1::FAULT_SOURCE_UNSPECIFIED) return "-";
  return clusterd::ShortSourceName(s);
}

std::string DeviceText(const std::optional<uint32_t>& device) { return device ? std::to_string(*device) : "-"; }

std::string Bytes(uint64_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  }
  return buf;
}

std::string ShortJobKind(v1::JobKind k) {
  if (k == v1::JOB_KIND_UNSPECIFIED) return "-";
  return StripPrefix(v1::JobKind_Name(k), "JOB_KIND_");
}

std::string ShortJobState(v1::JobState s) {
  if (s == v1::JOB_STATE_UNSPECIFIED) return "-";
  return StripPrefix(v1::JobState_Name(s), "JOB_STATE_");
}

std::string ShortStrategy(v1::RecoveryStrategy s) {
  if (s == v1::RECOVERY_STRATEGY_UNSPECIFIED) return "-";
  const std::string name = v1::RecoveryStrategy_Name(s);
  return name.empty() ? std::to_string(static_cast<int>(s)) : StripPrefix(name, "RECOVERY_STRATEGY_");
}

std::string ShortRecoveryState(v1::RecoveryState s) {
  if (s == v1::RECOVERY_STATE_UNSPECIFIED) return "-";
  const std::string name = v1::RecoveryState_Name(s);
  return name.empty() ? std::to_string(static_cast<int>(s)) : StripPrefix(name, "RECOVERY_STATE_");
}

std::string ShortStepState(v1::StepState s) {
  if (s == v1::STEP_STATE_UNSPECIFIED) return "-";
  const std::string name = v1::StepState_Name(s);
  return name.empty() ? std::to_string(static_cast<int>(s)) : StripPrefix(name, "STEP_STATE_");
}

std::string ShortJobCommand(v1::JobCommand c) {
  if (c == v1::JOB_COMMAND_UNSPECIFIED) return "-";
  const std::string name = v1::JobCommand_Name(c);
  return name.empty() ? std::to_string(static_cast<int>(c)) : StripPrefix(name, "JOB_COMMAND_");
}

std::string ShortClusterAction(v1::ClusterAction a) {
  if (a == v1::CLUSTER_ACTION_UNSPECIFIED) return "-";
  const std::string name = v1::ClusterAction_Name(a);
  if (name.empty()) return std::to_string(static_cast<int>(a));
  std::string out = StripPrefix(name, "CLUSTER_ACTION_");
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string RankRanges(std::vector<uint32_t> ranks) {
  if (ranks.empty()) return "-";
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  size_t i = 0;
  while (i < ranks.size()) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string Truncate(const std::string& s, size_t max_chars) {
  size_t chars = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (chars == max_chars) return s.substr(0, i) + "...";
      ++chars;
    }
  }
  return s;
}

std::string Indent(const std::string& text, const std::string& prefix) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out += prefix + line + "\n";
  return out;
}

std::string TableText(const Table& t) {
  std::ostringstream s;
  t.Print(s);
  return s.str();
}

std::string LabelsText(const google::protobuf::Map<std::string, std::string>& labels) {
  std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  std::string out;
  for (const auto& [k, v] : sorted) {
    if (!out.empty()) out += ",";
    out += k + "=" + v;
  }
  return out.empty() ? "-" : out;
}

std::string DurationText(const google::protobuf::Duration& d) {
  if (d.seconds() == 0 && d.nanos() == 0) return "-";
  return clusterd::FormatDuration(std::chrono::seconds(d.seconds()) + std::chrono::nanoseconds(d.nanos()));
}

std::string JoinText(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out.empty() ? "-" : out;
}

void PrintKeyValues(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& kv,
                    const std::string& prefix) {
  size_t key_width = 0;
  for (const auto& [k, v] : kv) key_width = std::max(key_width, k.size());
  for (const auto& [k, v] : kv) {
    out << prefix << k << ":" << std::string(key_width - k.size() + 2, ' ') << Sanitize(v) << "\n";
  }
}

std::string FaultCode(const v1::Fault& f) { return f.subject().empty() ? f.code() : f.code() + "@" + f.subject(); }

std::optional<uint32_t> FaultDevice(const v1::Fault& f) {
  return f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt;
}

std::string RecoveryStrategyText(const v1::Recovery& r) {
  std::string now = ShortStrategy(r.strategy());
  if (r.initial_strategy() == v1::RECOVERY_STRATEGY_UNSPECIFIED || r.initial_strategy() == r.strategy()) return now;
  return ShortStrategy(r.initial_strategy()) + "->" + now;
}

namespace {

bool StepEnded(const v1::RecoveryStep& s) {
  switch (s.state()) {
    case v1::STEP_STATE_SUCCEEDED:
    case v1::STEP_STATE_FAILED:
    case v1::STEP_STATE_TIMED_OUT:
    case v1::STEP_STATE_SKIPPED: return true;
    default: return false;
  }
}

}  // namespace

std::string StepsText(const v1::Recovery& r) {
  const auto done = std::count_if(r.steps().begin(), r.steps().end(), StepEnded);
  return std::to_string(done) + "/" + std::to_string(r.steps_size());
}

std::optional<v1::Health> ParseHealth(const std::string& name) {
  std::string upper = Upper(name);
  if (upper.rfind("HEALTH_", 0) != 0) upper = "HEALTH_" + upper;
  v1::Health h;
  if (!v1::Health_Parse(upper, &h) || h == v1::HEALTH_UNSPECIFIED) return std::nullopt;
  return h;
}

std::optional<v1::EventType> ParseEventType(const std::string& name) {
  std::string upper = Upper(name);
  if (upper.rfind("EVENT_TYPE_", 0) != 0) upper = "EVENT_TYPE_" + upper;
  v1::EventType t;
  if (!v1::EventType_Parse(upper, &t) || t == v1::EVENT_TYPE_UNSPECIFIED) return std::nullopt;
  return t;
}

std::optional<v1::JobState> ParseJobState(const std::string& name) {
  std::string upper = Upper(name);
  if (upper.rfind("JOB_STATE_", 0) != 0) upper = "JOB_STATE_" + upper;
  v1::JobState s;
  if (!v1::JobState_Parse(upper, &s) || s == v1::JOB_STATE_UNSPECIFIED) return std::nullopt;
  return s;
}

std::optional<v1::JobKind> ParseJobKind(const std::string& name) {
  std::string upper = Upper(name);
  if (upper.rfind("JOB_KIND_", 0) != 0) upper = "JOB_KIND_" + upper;
  v1::JobKind k;
  if (!v1::JobKind_Parse(upper, &k) || k == v1::JOB_KIND_UNSPECIFIED) return std::nullopt;
  return k;
}

std::optional<v1::RecoveryState> ParseRecoveryState(const std::string& name) {
  std::string upper = Upper(name);
  std::replace(upper.begin(), upper.end(), '-', '_');
  if (upper.rfind("RECOVERY_STATE_", 0) != 0) upper = "RECOVERY_STATE_" + upper;
  v1::RecoveryState s;
  if (!v1::RecoveryState_Parse(upper, &s) || s == v1::RECOVERY_STATE_UNSPECIFIED) return std::nullopt;
  return s;
}

}  // namespace clusterctl
