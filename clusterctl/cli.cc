#include "clusterctl/cli.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <unistd.h>

#include <google/protobuf/util/json_util.h>

#include "clusterctl/client.h"
#include "clusterctl/format.h"
#include "common/duration.h"
#include "common/levels.h"

#ifndef CLUSTERCTL_VERSION
#define CLUSTERCTL_VERSION "dev"
#endif

namespace clusterctl {
namespace {

const char* SystemGetenv(const char* name) { return std::getenv(name); }

constexpr const char* kDefaultServer = "localhost:8899";
constexpr std::chrono::milliseconds kDefaultTimeout{10'000};
// RESOURCE_EXHAUSTED resumes in a row without any progress before giving up.
constexpr int kMaxResumesWithoutProgress = 10;

// ------------------------------------------------------------ arguments ---

struct FlagSpec {
  std::string name;   // long name without "--"
  char short_name;    // 0 if none
  bool takes_value;
  bool repeated;
};

const std::vector<FlagSpec> kGlobalFlags = {
    {"server", 0, true, false},
    {"output", 'o', true, false},
    {"timeout", 0, true, false},
    {"help", 'h', false, false},
};

struct Args {
  std::map<std::string, std::vector<std::string>> flags;
  std::vector<std::string> positional;

  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  // The last value given (a single-valued flag may be repeated; the last wins).
  std::string Get(const std::string& name, const std::string& def = "") const {
    auto it = flags.find(name);
    return it == flags.end() || it->second.empty() ? def : it->second.back();
  }
  const std::vector<std::string>& All(const std::string& name) const {
    static const std::vector<std::string> kEmpty;
    auto it = flags.find(name);
    return it == flags.end() ? kEmpty : it->second;
  }
};

bool LooksLikeFlag(const std::string& a) { return a.size() > 1 && a[0] == '-'; }

const FlagSpec* FindFlag(const std::vector<FlagSpec>& spec, const std::string& name, bool is_short) {
  for (const auto& f : spec) {
    if (is_short ? (f.short_name != 0 && name.size() == 1 && f.short_name == name[0]) : f.name == name) return &f;
  }
  return nullptr;
}

// Parses one flag at args[*i] (advancing *i past its value). Returns an
// error message, empty on success.
std::string ParseOneFlag(const std::vector<std::string>& args, size_t* i, const std::vector<FlagSpec>& spec,
                         Args* out) {
  const std::string& a = args[*i];
  std::string name;
  std::optional<std::string> value;
  const FlagSpec* flag = nullptr;
  if (a.rfind("--", 0) == 0) {
    name = a.substr(2);
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    flag = FindFlag(spec, name, false);
    if (!flag) return "unknown flag --" + name;
  } else {
    name = a.substr(1, 1);
    if (a.size() > 2) value = a.substr(a[2] == '=' ? 3 : 2);  // -ojson, -o=json
    flag = FindFlag(spec, name, true);
    if (!flag) return "unknown flag -" + name;
  }
  const std::string display = "--" + flag->name;
  if (!flag->takes_value) {
    if (value) return display + " takes no value";
    out->flags[flag->name].push_back("true");
    return "";
  }
  if (!value) {
    if (*i + 1 >= args.size()) return display + " needs a value";
    value = args[++*i];
  }
  auto& slot = out->flags[flag->name];
  if (!flag->repeated) slot.clear();
  slot.push_back(*value);
  return "";
}

// ---------------------------------------------------------------- verbs ---

enum class Output { kTable, kWide, kJson };

struct Context {
  Context(std::ostream& o, std::ostream& e) : out(o), err(e) {}
  std::ostream& out;
  std::ostream& err;
  Args args;
  std::string verb;
  std::string server;
  Output output = Output::kTable;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  GetEnvFn getenv = nullptr;
  std::unique_ptr<ClusterClient> client;

  ClusterClient& Client() {
    if (!client) client = std::make_unique<ClusterClient>(server, timeout);
    return *client;
  }
  bool json() const { return output == Output::kJson; }
  bool wide() const { return output == Output::kWide; }
};

int Usage(Context& c, const std::string& message) {
  c.err << "clusterctl: " << message << "\n"
        << "Run 'clusterctl help' for usage.\n";
  return kExitUsage;
}

int ExitFor(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::NOT_FOUND: return kExitNotFound;
    case grpc::StatusCode::OUT_OF_RANGE: return kExitOutOfRange;
    case grpc::StatusCode::UNIMPLEMENTED: return kExitUnsupported;
    default: return kExitRpcError;
  }
}

std::string TimeoutText(std::chrono::milliseconds t) {
  return clusterd::FormatDuration(std::chrono::duration_cast<std::chrono::nanoseconds>(t));
}

int RpcFailure(Context& c, const std::string& what, const grpc::Status& st) {
  const std::string detail = std::string(GrpcCodeName(st.error_code())) + ": " + Sanitize(st.error_message());
  switch (st.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      c.err << "clusterctl: cannot reach clusterd at " << c.server << " (" << detail << ")\n";
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      c.err << "clusterctl: no answer from clusterd at " << c.server << " within " << TimeoutText(c.timeout) << " ("
            << detail << ")\n";
      break;
    case grpc::StatusCode::UNIMPLEMENTED:
      c.err << "clusterctl: " << what << " is not supported by clusterd at " << c.server
            << " (an older server than this clusterctl?) (" << detail << ")\n";
      break;
    default:
      c.err << "clusterctl: " << what << " failed: " << detail << "\n";
      break;
  }
  return ExitFor(st.error_code());
}

// Checks that the command got between min and max positional arguments.
std::optional<int> CheckPositional(Context& c, size_t min, size_t max, const std::string& what) {
  const size_t n = c.args.positional.size();
  if (n < min) return Usage(c, c.verb + ": missing " + what);
  if (n > max) return Usage(c, c.verb + ": unexpected argument '" + c.args.positional[max] + "'");
  return std::nullopt;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Parses the optional numeric flag `name` into *out. Returns an exit code on error.
std::optional<int> U64Flag(Context& c, const std::string& name, std::optional<uint64_t>* out, uint64_t max = UINT64_MAX) {
  if (!c.args.Has(name)) return std::nullopt;
  uint64_t v = 0;
  const std::string text = c.args.Get(name);
  if (!ParseU64(text, &v) || v > max) {
    return Usage(c, "--" + name + ": '" + text + "' is not a number" +
                        (max != UINT64_MAX ? " between 0 and " + std::to_string(max) : std::string()));
  }
  *out = v;
  return std::nullopt;
}

std::string LevelNames() {
  std::string out;
  for (int l = v1::FAULT_LEVEL_NOT_HANDLE; l <= v1::FAULT_LEVEL_SEPARATE; ++l) {
    if (!out.empty()) out += ", ";
    out += clusterd::ShortLevelName(static_cast<v1::FaultLevel>(l));
  }
  return out;
}

std::optional<int> LevelFlag(Context& c, const std::string& name, v1::FaultLevel* out) {
  if (!c.args.Has(name)) return std::nullopt;
  auto level = clusterd::ParseFaultLevel(c.args.Get(name));
  if (!level) return Usage(c, "--" + name + ": unknown level '" + c.args.Get(name) + "' (one of " + LevelNames() + ")");
  *out = *level;
  return std::nullopt;
}

std::optional<int> RequireFlags(Context& c, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    if (c.args.Get(n).empty()) return Usage(c, c.verb + ": --" + n + " is required");
  }
  return std::nullopt;
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

std::string Indent(const std::string& text, const std::string& prefix = "  ") {
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

std::string FaultCode(const v1::Fault& f) { return f.subject().empty() ? f.code() : f.code() + "@" + f.subject(); }

std::optional<uint32_t> FaultDevice(const v1::Fault& f) {
  return f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt;
}

// A string the server accepts as an actor: printable ASCII, no spaces.
bool IsToken(const std::string& s) {
  if (s.empty() || s.size() > 256) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) { return ch > ' ' && ch <= '~'; });
}

// Who does an admin action: --actor, else $CLUSTERCTL_ACTOR, else the login
// name (getlogin_r, then $USER), else "clusterctl". Returns an exit code on error.
std::optional<int> ActorFlag(Context& c, std::string* actor) {
  if (c.args.Has("actor")) {
    *actor = c.args.Get("actor");
    if (actor->empty()) return Usage(c, c.verb + ": --actor must not be empty");
    return std::nullopt;
  }
  if (const char* env = c.getenv("CLUSTERCTL_ACTOR"); env && *env) {
    *actor = env;
    return std::nullopt;
  }
  char login[257] = {};
  if (getlogin_r(login, sizeof login) == 0 && IsToken(login)) {
    *actor = login;
    return std::nullopt;
  }
  if (const char* user = c.getenv("USER"); user && IsToken(user)) {
    *actor = user;
    return std::nullopt;
  }
  *actor = "clusterctl";
  return std::nullopt;
}

std::string DurationText(const google::protobuf::Duration& d) {
  if (d.seconds() == 0 && d.nanos() == 0) return "-";
  return clusterd::FormatDuration(std::chrono::seconds(d.seconds()) + std::chrono::nanoseconds(d.nanos()));
}

void PrintKeyValues(Context& c, const std::vector<std::pair<std::string, std::string>>& kv,
                    const std::string& prefix = "") {
  size_t key_width = 0;
  for (const auto& [k, v] : kv) key_width = std::max(key_width, k.size());
  for (const auto& [k, v] : kv) {
    c.out << prefix << k << ":" << std::string(key_width - k.size() + 2, ' ') << Sanitize(v) << "\n";
  }
}

// The current rung; "PROCESS_RESTART->POD_RESCHEDULE" once it escalated from where it started.
std::string RecoveryStrategyText(const v1::Recovery& r) {
  const std::string now = ShortStrategy(r.strategy());
  if (r.initial_strategy() == v1::RECOVERY_STRATEGY_UNSPECIFIED || r.initial_strategy() == r.strategy()) return now;
  return ShortStrategy(r.initial_strategy()) + "->" + now;
}

bool StepEnded(const v1::RecoveryStep& s) {
  switch (s.state()) {
    case v1::STEP_STATE_SUCCEEDED:
    case v1::STEP_STATE_FAILED:
    case v1::STEP_STATE_TIMED_OUT:
    case v1::STEP_STATE_SKIPPED:
      return true;
    default:
      return false;
  }
}

// Steps that ended (succeeded, failed, timed out or skipped) out of all planned so far.
std::string StepsText(const v1::Recovery& r) {
  const auto done = std::count_if(r.steps().begin(), r.steps().end(), StepEnded);
  return std::to_string(done) + "/" + std::to_string(r.steps_size());
}

// ---------------------------------------------------------- get summary ---

int GetSummary(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  v1::GetSummaryResponse s;
  if (auto st = c.Client().GetSummary(&s); !st.ok()) return RpcFailure(c, "GetSummary", st);
  if (c.json()) {
    c.out << ToJson(s, true) << "\n";
    return kExitOk;
  }
  Table head({"REVISION", "OLDEST-REVISION", "CONNECTED-AGENTS", "ACTIVE-FAULTS"});
  head.AddRow({std::to_string(s.revision()), std::to_string(s.compacted_revision() + 1),
               std::to_string(s.connected_agents()), std::to_string(s.active_faults())});
  head.Print(c.out);
  c.out << "\n";
  Table health({"", "TOTAL", "HEALTHY", "SUB_HEALTHY", "UNHEALTHY", "UNKNOWN"});
  for (const auto& [name, h] : {std::pair<const char*, const v1::HealthCounts*>{"NODES", &s.nodes()},
                                {"DEVICES", &s.devices()}}) {
    health.AddRow({name, std::to_string(h->total()), std::to_string(h->healthy()), std::to_string(h->sub_healthy()),
                   std::to_string(h->unhealthy()), std::to_string(h->unknown())});
  }
  health.Print(c.out);
  if (!s.active_faults_by_level().empty()) {
    c.out << "\n";
    Table levels({"LEVEL", "ACTIVE-FAULTS"});
    for (int l = v1::FAULT_LEVEL_SEPARATE; l >= v1::FAULT_LEVEL_UNSPECIFIED; --l) {
      auto level = static_cast<v1::FaultLevel>(l);
      auto it = s.active_faults_by_level().find(v1::FaultLevel_Name(level));
      if (it != s.active_faults_by_level().end()) levels.AddRow({ShortLevel(level), std::to_string(it->second)});
    }
    levels.Print(c.out);
  }
  return kExitOk;
}

// ------------------------------------------------------------ get nodes ---

void AddNodeRow(Context& c, Table* t, const v1::Node& n) {
  std::vector<std::string> row = {n.name(),
                                  ShortHealth(n.health()),
                                  ShortLevel(n.worst_level()),
                                  std::to_string(n.active_faults()),
                                  std::to_string(n.inventory().devices_size()),
                                  n.connected() ? "yes" : "no",
                                  n.cordoned() ? "yes" : "no",
                                  n.isolated() ? "yes" : "no",
                                  FormatTime(n.last_heartbeat_time())};
  if (c.wide()) {
    row.push_back(n.agent_version().empty() ? "-" : n.agent_version());
    row.push_back(n.boot_id().empty() ? "-" : n.boot_id());
    row.push_back(std::to_string(n.revision()));
    row.push_back(LabelsText(n.labels()));
  }
  t->AddRow(std::move(row));
}

Table NodeTable(Context& c) {
  std::vector<std::string> h = {"NAME",      "HEALTH",    "WORST-LEVEL", "FAULTS",        "DEVICES",
                                "CONNECTED", "CORDONED",  "ISOLATED",    "LAST-HEARTBEAT"};
  if (c.wide()) h.insert(h.end(), {"AGENT", "BOOT-ID", "REVISION", "LABELS"});
  return Table(std::move(h));
}

int GetNodes(Context& c) {
  if (auto e = CheckPositional(c, 0, 1, "")) return *e;
  if (c.args.positional.size() == 1) {  // get node NAME: one row
    if (c.args.Has("health") || c.args.Has("selector")) {
      return Usage(c, "get nodes NAME: --health and --selector filter lists, not one node");
    }
    v1::GetNodeResponse resp;
    if (auto st = c.Client().GetNode(c.args.positional[0], &resp); !st.ok()) return RpcFailure(c, "GetNode", st);
    if (c.json()) {
      c.out << ToJson(resp.node(), true) << "\n";
      return kExitOk;
    }
    Table t = NodeTable(c);
    AddNodeRow(c, &t, resp.node());
    t.Print(c.out);
    return kExitOk;
  }
  v1::ListNodesRequest req;
  if (c.args.Has("health")) {
    auto h = ParseHealth(c.args.Get("health"));
    if (!h) {
      return Usage(c, "--health: unknown health '" + c.args.Get("health") +
                          "' (one of HEALTHY, SUB_HEALTHY, UNHEALTHY, UNKNOWN)");
    }
    req.set_health(*h);
  }
  req.set_label_selector(c.args.Get("selector"));
  v1::ListNodesResponse resp;
  if (auto st = c.Client().ListAllNodes(req, &resp); !st.ok()) return RpcFailure(c, "ListNodes", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  if (resp.nodes().empty()) {
    c.err << "No nodes found.\n";
    return kExitOk;
  }
  Table t = NodeTable(c);
  for (const auto& n : resp.nodes()) AddNodeRow(c, &t, n);
  t.Print(c.out);
  return kExitOk;
}

// ----------------------------------------------------------- get faults ---

Table FaultTable(bool wide, bool with_node) {
  std::vector<std::string> h;
  if (with_node) h.push_back("NODE");
  h.insert(h.end(), {"DEVICE", "SOURCE", "CODE", "LEVEL", "STATE", "COUNT", "LAST-SEEN"});
  if (wide) h.insert(h.end(), {"FIRST-SEEN", "CLEARED", "REVISION", "REPORTER/ID", "FAULT-ID"});
  h.push_back("MESSAGE");
  return Table(std::move(h));
}

void AddFaultRow(Table* t, const v1::Fault& f, bool wide, bool with_node) {
  std::vector<std::string> row;
  if (with_node) row.push_back(f.node());
  row.insert(row.end(), {DeviceText(FaultDevice(f)), ShortSource(f.source()), FaultCode(f), ShortLevel(f.level()),
                         ShortState(f.state()), std::to_string(f.count()), FormatTime(f.last_seen())});
  if (wide) {
    row.push_back(FormatTime(f.first_seen()));
    std::string cleared = FormatTime(f.cleared_time());
    if (f.state() == v1::FAULT_STATE_CLEARED && !f.clear_reason().empty()) cleared += " (" + f.clear_reason() + ")";
    row.push_back(f.state() == v1::FAULT_STATE_CLEARED ? cleared : "-");
    row.push_back(std::to_string(f.revision()));
    row.push_back(f.reporter().empty() ? "-" : f.reporter() + "/" + f.external_id());
    row.push_back(f.id());
  }
  const std::string msg = f.message().empty() ? "-" : f.message();
  row.push_back(wide ? msg : Truncate(msg, 60));
  t->AddRow(std::move(row));
}

int GetFaults(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  v1::ListFaultsRequest req;
  req.set_node(c.args.Get("node"));
  std::optional<uint64_t> device, since;
  if (auto e = U64Flag(c, "device", &device, UINT32_MAX)) return *e;
  if (auto e = U64Flag(c, "since-revision", &since)) return *e;
  v1::FaultLevel min_level = v1::FAULT_LEVEL_UNSPECIFIED;
  if (auto e = LevelFlag(c, "min-level", &min_level)) return *e;
  if (device) req.set_device_id(static_cast<uint32_t>(*device));
  if (since) req.set_since_revision(*since);
  req.set_min_level(min_level);
  req.set_active_only(c.args.Has("active"));
  v1::ListFaultsResponse resp;
  if (auto st = c.Client().ListAllFaults(req, &resp); !st.ok()) return RpcFailure(c, "ListFaults", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  if (resp.faults().empty()) {
    c.err << "No faults found.\n";
    return kExitOk;
  }
  Table t = FaultTable(c.wide(), true);
  for (const auto& f : resp.faults()) AddFaultRow(&t, f, c.wide(), true);
  t.Print(c.out);
  return kExitOk;
}

// -------------------------------------------------------- describe node ---

int DescribeNode(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "node name")) return *e;
  v1::GetNodeResponse resp;
  if (auto st = c.Client().GetNode(c.args.positional[0], &resp); !st.ok()) return RpcFailure(c, "GetNode", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  const v1::Node& n = resp.node();
  const v1::Inventory& inv = n.inventory();
  std::vector<std::pair<std::string, std::string>> kv = {
      {"Name", n.name()},
      {"Health", ShortHealth(n.health())},
      {"Worst level", ShortLevel(n.worst_level())},
      {"Active faults", std::to_string(n.active_faults())},
      {"Connected", n.connected() ? "yes" : "no"},
      {"Cordoned", !n.cordoned() ? "no" : n.cordon_reason().empty() ? "yes" : "yes (" + n.cordon_reason() + ")"},
      {"Isolated", !n.isolated()                 ? "no"
                   : n.isolation_reason().empty() ? "yes"
                                                  : "yes (" + n.isolation_reason() + ")"},
      {"Last heartbeat", FormatTime(n.last_heartbeat_time())},
      {"Registered", FormatTime(n.registered_time())},
      {"Agent version", n.agent_version().empty() ? "-" : n.agent_version()},
      {"Boot id", n.boot_id().empty() ? "-" : n.boot_id()},
      {"Revision", std::to_string(n.revision())},
      {"Labels", LabelsText(n.labels())},
      {"CPU", inv.cpu_count() == 0 && inv.cpu_model().empty()
                  ? "-"
                  : std::to_string(inv.cpu_count()) + (inv.cpu_model().empty() ? "" : " x " + inv.cpu_model())},
      {"Memory", inv.memory_bytes() ? Bytes(inv.memory_bytes()) : "-"},
      {"Kernel", inv.kernel_version().empty() ? "-" : inv.kernel_version()},
      {"OS image", inv.os_image().empty() ? "-" : inv.os_image()},
  };
  size_t key_width = 0;
  for (const auto& [k, v] : kv) key_width = std::max(key_width, k.size());
  for (const auto& [k, v] : kv) c.out << k << ":" << std::string(key_width - k.size() + 2, ' ') << Sanitize(v) << "\n";

  if (!inv.disks().empty()) {
    c.out << "\nDisks:\n";
    Table t({"MOUNT", "DEVICE", "FS", "CAPACITY"});
    for (const auto& d : inv.disks()) t.AddRow({d.mount_point(), d.device(), d.fs_type(), Bytes(d.capacity_bytes())});
    c.out << Indent(TableText(t));
  }

  c.out << "\nDevices:\n";
  if (resp.devices().empty()) {
    c.out << "  <none>\n";
  } else {
    Table t({"ID", "VENDOR", "MODEL", "SERIAL", "HEALTH", "WORST-LEVEL", "FAULTS", "ISOLATED"});
    for (const auto& d : resp.devices()) {
      t.AddRow({std::to_string(d.id()), d.vendor().empty() ? "-" : d.vendor(), d.model().empty() ? "-" : d.model(),
                d.serial().empty() ? "-" : d.serial(), ShortHealth(d.health()), ShortLevel(d.worst_level()),
                std::to_string(d.active_faults()),
                !d.isolated()                 ? "no"
                : d.isolation_reason().empty() ? "yes"
                                               : "yes (" + d.isolation_reason() + ")"});
    }
    c.out << Indent(TableText(t));
  }

  c.out << "\nActive faults:\n";
  if (resp.active_faults().empty()) {
    c.out << "  <none>\n";
  } else {
    Table t = FaultTable(c.wide(), false);
    for (const auto& f : resp.active_faults()) AddFaultRow(&t, f, c.wide(), false);
    c.out << Indent(TableText(t));
    if (resp.active_faults_truncated()) {
      c.out << "  (" << resp.active_faults_size() << " of " << n.active_faults()
            << " shown; clusterctl get faults --node " << Sanitize(n.name()) << " --active lists them all)\n";
    }
  }

  if (resp.has_metrics() && !resp.metrics().gauges().empty()) {
    c.out << "\nMetrics (" << FormatTime(resp.metrics().time()) << "):\n";
    std::map<std::string, double> sorted(resp.metrics().gauges().begin(), resp.metrics().gauges().end());
    Table t({"NAME", "VALUE"});
    for (const auto& [k, v] : sorted) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", v);
      t.AddRow({k, buf});
    }
    c.out << Indent(TableText(t));
  } else {
    c.out << "\nMetrics:\n  <none>\n";
  }
  return kExitOk;
}

// ---------------------------------------------------------------- watch ---

// Fixed widths: a stream cannot be aligned after the fact.
std::string Col(const std::string& s, size_t width) {
  std::string out = Sanitize(s);
  if (out.size() < width) out += std::string(width - out.size(), ' ');
  return out + "  ";
}

std::string WatchHeader() {
  std::string line = Col("REVISION", 8) + Col("TIME", 24) + Col("TYPE", 21) + Col("NODE", 16) + Col("DEVICE", 6) +
                     Col("CODE", 16) + Col("LEVEL", 16) + "STATE";
  return line;
}

std::string WatchLine(const v1::Event& e) {
  std::optional<uint32_t> device = e.has_device_id() ? std::optional<uint32_t>(e.device_id()) : std::nullopt;
  std::string code = "-", level = "-", state = "-";
  switch (e.type()) {
    case v1::EVENT_TYPE_FAULT_RAISED:
    case v1::EVENT_TYPE_FAULT_UPDATED:
    case v1::EVENT_TYPE_FAULT_CLEARED:
      code = FaultCode(e.fault());
      level = ShortLevel(e.fault().level());
      state = ShortState(e.fault().state());
      if (!device) device = FaultDevice(e.fault());
      if (!e.job_ids().empty()) {
        std::string jobs;
        for (const auto& id : e.job_ids()) jobs += (jobs.empty() ? "" : ",") + id;
        state += " jobs=" + jobs;
      }
      if (!e.actor().empty()) state += " by " + e.actor();
      break;
    case v1::EVENT_TYPE_NODE_HEALTH_CHANGED:
    case v1::EVENT_TYPE_DEVICE_HEALTH_CHANGED:
      state = ShortHealth(e.previous_health()) + "->" + ShortHealth(e.health());
      break;
    case v1::EVENT_TYPE_NODE_REGISTERED:
    case v1::EVENT_TYPE_NODE_UPDATED:
      if (e.has_node_info()) state = ShortHealth(e.node_info().health());
      break;
    case v1::EVENT_TYPE_JOB_CREATED:
    case v1::EVENT_TYPE_JOB_UPDATED:
    case v1::EVENT_TYPE_JOB_DELETED: {
      const std::string id = e.has_job() ? e.job().id() : (e.job_ids().empty() ? "" : e.job_ids(0));
      state = "job " + (id.empty() ? std::string("-") : id);
      if (e.has_job() && e.type() != v1::EVENT_TYPE_JOB_DELETED) state += " " + ShortJobState(e.job().state());
      break;
    }
    case v1::EVENT_TYPE_NODE_CORDONED:
    case v1::EVENT_TYPE_NODE_UNCORDONED:
    case v1::EVENT_TYPE_RECOVERY_MODE_CHANGED:
      state = e.message().empty() ? "" : e.message() + " ";
      state += "by " + (e.actor().empty() ? std::string("-") : e.actor());
      if (!e.reason().empty()) state += ": " + e.reason();
      break;
    case v1::EVENT_TYPE_RECOVERY_STARTED:
    case v1::EVENT_TYPE_RECOVERY_UPDATED:
    case v1::EVENT_TYPE_RECOVERY_FINISHED:
      if (e.has_recovery()) {
        const v1::Recovery& r = e.recovery();
        level = ShortLevel(r.level());
        state = "recovery " + r.id() + " " + ShortRecoveryState(r.state()) + " " + RecoveryStrategyText(r) +
                " steps " + StepsText(r);
      }
      break;
    default:
      break;
  }
  std::string line = Col(std::to_string(e.revision()), 8) + Col(FormatTime(e.time(), true), 24) +
                     Col(ShortEventType(e.type()), 21) + Col(e.node().empty() ? "-" : e.node(), 16) +
                     Col(DeviceText(device), 6) + Col(code, 16) + Col(level, 16) + Sanitize(state);
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

// The cursor file holds one decimal revision. Missing file: nullopt.
// Unreadable or malformed: an error message in *error.
std::optional<uint64_t> ReadCursor(const std::string& path, std::string* error) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) {
    if (in.eof() && text.empty()) {
      *error = "cursor file " + path + " is empty";
    } else {
      *error = "cannot read cursor file " + path;
    }
    return std::nullopt;
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r' || text.back() == '\t')) text.pop_back();
  uint64_t v = 0;
  if (!ParseU64(text, &v)) {
    *error = "cursor file " + path + " does not hold a revision: '" + Sanitize(Truncate(text, 40)) + "'";
    return std::nullopt;
  }
  return v;
}

// Writes the revision to a temporary file and renames it over the cursor, so
// a crash leaves either the old or the new cursor, never a torn one.
bool WriteCursor(const std::string& path, uint64_t revision, std::string* error) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << revision << "\n";
    out.flush();
    if (!out) {
      *error = "cannot write cursor file " + tmp;
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    *error = "cannot replace cursor file " + path + ": " + ec.message();
    return false;
  }
  return true;
}

int Watch(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  std::optional<uint64_t> from_flag, max_events;
  if (auto e = U64Flag(c, "from-revision", &from_flag)) return *e;
  if (auto e = U64Flag(c, "max-events", &max_events)) return *e;
  v1::WatchRequest req;
  v1::FaultLevel min_level = v1::FAULT_LEVEL_UNSPECIFIED;
  if (auto e = LevelFlag(c, "min-level", &min_level)) return *e;
  req.set_min_level(min_level);
  for (const auto& n : c.args.All("node")) req.add_nodes(n);
  for (const auto& t : c.args.All("type")) {
    auto type = ParseEventType(t);
    if (!type) {
      std::string names;
      for (int i = v1::EVENT_TYPE_NODE_REGISTERED; i <= v1::EventType_MAX; ++i) {
        if (!v1::EventType_IsValid(i)) continue;
        names += (names.empty() ? "" : ", ") + ShortEventType(static_cast<v1::EventType>(i));
      }
      return Usage(c, "--type: unknown event type '" + t + "' (one of " + names + ")");
    }
    req.add_types(*type);
  }
  if (max_events && *max_events == 0) return kExitOk;

  // Where to start: the cursor file if it exists, else --from-revision, else now.
  const std::string cursor_file = c.args.Get("cursor-file");
  std::optional<uint64_t> from;
  if (!cursor_file.empty()) {
    std::string error;
    from = ReadCursor(cursor_file, &error);
    if (!error.empty()) {
      c.err << "clusterctl: " << error << "\n";
      return kExitUsage;
    }
  }
  const bool from_cursor = from.has_value();
  if (!from) from = from_flag;
  if (!from) {
    v1::GetSummaryResponse s;
    if (auto st = c.Client().GetSummary(&s); !st.ok()) return RpcFailure(c, "GetSummary", st);
    from = s.revision();
  }
  if (!cursor_file.empty() && !from_cursor) {
    // Record the starting point at once: a restart before the first event
    // must not skip what happened in between.
    std::string error;
    if (!WriteCursor(cursor_file, *from, &error)) {
      c.err << "clusterctl: " << error << "\n";
      return kExitRpcError;
    }
  }

  if (!c.json()) c.out << WatchHeader() << std::endl;
  uint64_t cursor = *from;
  uint64_t printed = 0;
  bool done = false;
  std::string write_error;
  int resumes_without_progress = 0;
  for (;;) {
    req.set_from_revision(cursor);
    const uint64_t cursor_at_start = cursor;
    grpc::Status st = c.Client().Watch(req, [&](const v1::WatchResponse& resp) {
      for (const auto& e : resp.events()) {
        if (c.json()) {
          c.out << ToJson(e, false) << "\n";
        } else {
          c.out << WatchLine(e) << "\n";
        }
        ++printed;
        if (max_events && printed >= *max_events) {
          // Stopped inside this response: resume after the last event shown.
          done = true;
          cursor = &e == &resp.events(resp.events_size() - 1) ? std::max(resp.revision(), e.revision()) : e.revision();
          break;
        }
      }
      if (!done) cursor = std::max(cursor, resp.revision());
      c.out.flush();
      if (!cursor_file.empty() && !WriteCursor(cursor_file, cursor, &write_error)) return false;
      return !done;
    });
    if (!write_error.empty()) {
      c.err << "clusterctl: " << write_error << "\n";
      return kExitRpcError;
    }
    if (st.ok()) {
      if (done) return kExitOk;
      c.err << "clusterctl: clusterd ended the watch at revision " << cursor << "\n";
      return kExitRpcError;
    }
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      // The server ends a watcher that falls too far behind; nothing is lost
      // by resuming from the last revision received.
      resumes_without_progress = cursor == cursor_at_start ? resumes_without_progress + 1 : 0;
      if (resumes_without_progress >= kMaxResumesWithoutProgress) return RpcFailure(c, "Watch", st);
      c.err << "clusterctl: watch fell behind (" << Sanitize(st.error_message()) << "); resuming from revision "
            << cursor << "\n";
      continue;
    }
    if (st.error_code() == grpc::StatusCode::OUT_OF_RANGE) {
      c.err << "clusterctl: revision " << cursor << " is no longer in the history (" << Sanitize(st.error_message())
            << ")\n";
      v1::GetSummaryResponse s;
      if (c.Client().GetSummary(&s).ok()) {
        c.err << "clusterctl: the oldest available revision is " << s.compacted_revision() + 1
              << "; watch with --from-revision " << s.compacted_revision()
              << (cursor_file.empty() ? "" : " (and remove the cursor file)") << " to read what is left\n";
      }
      return kExitOutOfRange;
    }
    return RpcFailure(c, "Watch", st);
  }
}

// ----------------------------------------------------------------- jobs ---

size_t NodeCount(const v1::Job& j) {
  std::set<std::string> nodes;
  for (const auto& p : j.placement()) nodes.insert(p.node());
  return nodes.size();
}

std::vector<uint32_t> ImpactedRanks(const v1::Job& j) {
  std::vector<uint32_t> ranks;
  for (const auto& i : j.impacts()) ranks.insert(ranks.end(), i.ranks().begin(), i.ranks().end());
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

Table JobTable(Context& c) {
  std::vector<std::string> h = {"ID", "KIND", "STATE", "RANKS", "NODES", "IMPACTED-RANKS"};
  if (c.wide()) h.insert(h.end(), {"RANKS-HIT", "IMPACTING-FAULTS", "CREATED", "REVISION", "LABELS"});
  return Table(std::move(h));
}

void AddJobRow(Context& c, Table* t, const v1::Job& j) {
  const std::vector<uint32_t> impacted = ImpactedRanks(j);
  std::vector<std::string> row = {j.id(),
                                  ShortJobKind(j.kind()),
                                  ShortJobState(j.state()),
                                  std::to_string(j.placement_size()),
                                  std::to_string(NodeCount(j)),
                                  std::to_string(impacted.size())};
  if (c.wide()) {
    row.push_back(RankRanges(impacted));
    row.push_back(std::to_string(j.impacts_size()));
    row.push_back(FormatTime(j.create_time()));
    row.push_back(std::to_string(j.revision()));
    row.push_back(LabelsText(j.labels()));
  }
  t->AddRow(std::move(row));
}

int GetJobs(Context& c) {
  if (auto e = CheckPositional(c, 0, 1, "")) return *e;
  if (c.args.positional.size() == 1) {  // get job ID: one row
    if (c.args.Has("state") || c.args.Has("kind")) {
      return Usage(c, "get jobs ID: --state and --kind filter lists, not one job");
    }
    v1::GetJobResponse resp;
    if (auto st = c.Client().GetJob(c.args.positional[0], &resp); !st.ok()) return RpcFailure(c, "GetJob", st);
    if (c.json()) {
      c.out << ToJson(resp.job(), true) << "\n";
      return kExitOk;
    }
    Table t = JobTable(c);
    AddJobRow(c, &t, resp.job());
    t.Print(c.out);
    return kExitOk;
  }
  v1::ListJobsRequest req;
  if (c.args.Has("state")) {
    auto s = ParseJobState(c.args.Get("state"));
    if (!s) {
      return Usage(c, "--state: unknown job state '" + c.args.Get("state") +
                          "' (one of PENDING, RUNNING, RECOVERING, SUCCEEDED, FAILED)");
    }
    req.set_state(*s);
  }
  if (c.args.Has("kind")) {
    auto k = ParseJobKind(c.args.Get("kind"));
    if (!k) return Usage(c, "--kind: unknown job kind '" + c.args.Get("kind") + "' (one of TRAINING, INFERENCE)");
    req.set_kind(*k);
  }
  v1::ListJobsResponse resp;
  if (auto st = c.Client().ListAllJobs(req, &resp); !st.ok()) return RpcFailure(c, "ListJobs", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  if (resp.jobs().empty()) {
    c.err << "No jobs found.\n";
    return kExitOk;
  }
  Table t = JobTable(c);
  for (const auto& j : resp.jobs()) AddJobRow(c, &t, j);
  t.Print(c.out);
  return kExitOk;
}

std::string PolicyStrategies(const v1::RecoveryPolicy& p) {
  if (p.allowed_strategies().empty()) return "all";
  std::string out;
  for (int s : p.allowed_strategies()) {
    if (!out.empty()) out += ", ";
    out += ShortStrategy(static_cast<v1::RecoveryStrategy>(s));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> PolicyLines(const v1::RecoveryPolicy& p) {
  std::vector<std::pair<std::string, std::string>> kv = {{"Allowed strategies", PolicyStrategies(p)}};
  std::string timeouts;
  for (const auto& t : p.step_timeouts()) {
    if (!timeouts.empty()) timeouts += ", ";
    timeouts += ShortStrategy(t.strategy()) + "=" + DurationText(t.timeout());
  }
  kv.push_back({"Step timeouts", timeouts.empty() ? "-" : timeouts});
  kv.push_back({"Max retries per job",
                p.has_max_retries_per_job() ? std::to_string(p.max_retries_per_job()) : std::string("-")});
  kv.push_back({"Max retries per node",
                p.has_max_retries_per_node() ? std::to_string(p.max_retries_per_node()) : std::string("-")});
  kv.push_back({"Hold-down", DurationText(p.hold_down())});
  kv.push_back({"Min replicas", std::to_string(p.min_replicas())});
  kv.push_back({"Ranks per replica", std::to_string(p.ranks_per_replica() == 0 ? 1 : p.ranks_per_replica())});
  std::string silences;
  for (const auto& w : p.silences()) {
    if (!silences.empty()) silences += ", ";
    silences += w.code() + (w.has_until() ? " until " + FormatTime(w.until()) : std::string(" (no end)"));
  }
  kv.push_back({"Silences", silences.empty() ? "-" : silences});
  return kv;
}

int DescribeJob(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "job id")) return *e;
  v1::GetJobResponse resp;
  if (auto st = c.Client().GetJob(c.args.positional[0], &resp); !st.ok()) return RpcFailure(c, "GetJob", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  const v1::Job& j = resp.job();
  const std::vector<uint32_t> impacted = ImpactedRanks(j);
  PrintKeyValues(c, {
                        {"Id", j.id()},
                        {"Kind", ShortJobKind(j.kind())},
                        {"State", ShortJobState(j.state())},
                        {"Ranks", std::to_string(j.placement_size()) + " on " + std::to_string(NodeCount(j)) +
                                      (NodeCount(j) == 1 ? " node" : " nodes")},
                        {"Impacted ranks", impacted.empty() ? "none"
                                                            : std::to_string(impacted.size()) + " (" +
                                                                  RankRanges(impacted) + ")"},
                        {"Labels", LabelsText(j.labels())},
                        {"Created", FormatTime(j.create_time())},
                        {"Updated", FormatTime(j.update_time())},
                        {"Revision", std::to_string(j.revision())},
                    });

  // The faults hitting each rank, by code, for the placement table.
  std::map<uint32_t, std::set<std::string>> faults_by_rank;
  for (const auto& i : j.impacts()) {
    for (uint32_t r : i.ranks()) faults_by_rank[r].insert(i.code());
  }
  c.out << "\nPlacement:\n";
  if (j.placement().empty()) {
    c.out << "  <none>\n";
  } else {
    std::vector<const v1::RankPlacement*> placement;
    for (const auto& p : j.placement()) placement.push_back(&p);
    std::sort(placement.begin(), placement.end(), [](const auto* a, const auto* b) { return a->rank() < b->rank(); });
    Table t({"RANK", "NODE", "DEVICE", "FAULTS"});
    for (const auto* p : placement) {
      std::string faults;
      if (auto it = faults_by_rank.find(p->rank()); it != faults_by_rank.end()) {
        for (const auto& code : it->second) faults += (faults.empty() ? "" : ",") + code;
      }
      t.AddRow({std::to_string(p->rank()), p->node(),
                DeviceText(p->has_device_id() ? std::optional<uint32_t>(p->device_id()) : std::nullopt),
                faults.empty() ? "-" : faults});
    }
    c.out << Indent(TableText(t));
  }

  c.out << "\nRecovery policy:\n";
  PrintKeyValues(c, PolicyLines(j.policy()), "  ");

  c.out << "\nImpacts (active faults hitting the job):\n";
  if (j.impacts().empty()) {
    c.out << "  <none>\n";
  } else {
    Table t({"NODE", "DEVICE", "CODE", "LEVEL", "RANKS", "FAULT-ID"});
    for (const auto& i : j.impacts()) {
      t.AddRow({i.node(), DeviceText(i.has_device_id() ? std::optional<uint32_t>(i.device_id()) : std::nullopt),
                i.code(), ShortLevel(i.level()),
                RankRanges(std::vector<uint32_t>(i.ranks().begin(), i.ranks().end())) +
                    (i.total_ranks() > static_cast<uint32_t>(i.ranks_size())
                         ? " (+" + std::to_string(i.total_ranks() - i.ranks_size()) + " more)"
                         : ""),
                i.fault_id()});
    }
    c.out << Indent(TableText(t));
    if (j.impacts_truncated()) {
      c.out << "  (" << j.impacts_size() << " of " << j.total_impacts()
            << " impacts shown: the answer is cut to fit 4 MiB; grpcurl ListFaults with job=" << Sanitize(j.id())
            << " lists every fault)\n";
    }
  }
  return kExitOk;
}

// A possibly multi-line message (the JSON parser points at the error on a
// second line): each line sanitised, continuation lines indented.
std::string MultiLine(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out += (out.empty() ? "" : "\n  ") + Sanitize(line);
  return out;
}

// Reads FILE ("-": standard input) into *text. Returns an error message, empty on success.
std::string ReadInput(const std::string& path, std::string* text) {
  if (path == "-") {
    text->assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return std::cin.bad() ? "cannot read standard input" : "";
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return path + " is a directory";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path;
  text->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) return "cannot read " + path;
  return "";
}

int CreateJob(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  if (c.args.Get("filename").empty()) return Usage(c, "create-job: -f FILE is required (a Job in proto JSON)");
  const std::string path = c.args.Get("filename");
  std::string text;
  if (std::string error = ReadInput(path, &text); !error.empty()) {
    c.err << "clusterctl: create-job: " << Sanitize(error) << "\n";
    return kExitUsage;
  }
  v1::CreateJobRequest req;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;  // a misspelt field is an error, not a silent default
  if (auto st = google::protobuf::util::JsonStringToMessage(text, req.mutable_job(), opts); !st.ok()) {
    c.err << "clusterctl: create-job: " << Sanitize(path == "-" ? "standard input" : path)
          << " is not a valid Job (proto JSON): " << MultiLine(std::string(st.message())) << "\n";
    return kExitUsage;
  }
  v1::CreateJobResponse resp;
  if (auto st = c.Client().CreateJob(req, &resp); !st.ok()) return RpcFailure(c, "CreateJob", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  const v1::Job& j = resp.job();
  c.out << "job " << Sanitize(j.id()) << " created: " << ShortJobKind(j.kind()) << ", " << j.placement_size()
        << " ranks on " << NodeCount(j) << (NodeCount(j) == 1 ? " node" : " nodes") << ", state "
        << ShortJobState(j.state()) << ", revision " << j.revision() << "\n";
  const std::vector<uint32_t> impacted = ImpactedRanks(j);
  if (!impacted.empty()) {
    c.out << "warning: " << impacted.size() << " ranks already hit by active faults (" << RankRanges(impacted)
          << "); see 'clusterctl describe job " << Sanitize(j.id()) << "'\n";
  }
  return kExitOk;
}

int DeleteJob(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "job id")) return *e;
  v1::DeleteJobResponse resp;
  if (auto st = c.Client().DeleteJob(c.args.positional[0], &resp); !st.ok()) return RpcFailure(c, "DeleteJob", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  c.out << "job " << Sanitize(c.args.positional[0]) << " deleted, revision " << resp.revision() << "\n";
  return kExitOk;
}

// ----------------------------------------------------------- recoveries ---

std::string JoinText(const std::vector<std::string>& items, const std::string& sep = ",") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out.empty() ? "-" : out;
}

std::string DeviceRefsText(const google::protobuf::RepeatedPtrField<v1::DeviceRef>& refs) {
  std::vector<std::string> items;
  for (const auto& d : refs) items.push_back(d.node() + " dev " + std::to_string(d.device_id()));
  return JoinText(items, ", ");
}

std::vector<uint32_t> Ranks(const google::protobuf::RepeatedField<uint32_t>& ranks) {
  return std::vector<uint32_t>(ranks.begin(), ranks.end());
}

// WAITING: why it waits; otherwise the outcome in words.
std::string RecoveryNote(const v1::Recovery& r) {
  if (r.state() == v1::RECOVERY_STATE_WAITING && !r.wait_reason().empty()) return r.wait_reason();
  return r.message().empty() ? "-" : r.message();
}

// "agent RESTART_PROCESSES ranks 1-3", "actuator isolate_device worker02 dev 0".
std::string StepWhat(const v1::RecoveryStep& s) {
  std::string out;
  if (s.action() != v1::CLUSTER_ACTION_UNSPECIFIED) {
    out = "actuator " + ShortClusterAction(s.action());
  } else {
    out = "agent " + ShortJobCommand(s.command());
  }
  if (!s.node().empty()) out += " " + s.node();
  if (s.has_device_id()) out += " dev " + std::to_string(s.device_id());
  if (!s.ranks().empty()) out += " ranks " + RankRanges(Ranks(s.ranks()));
  return out;
}

Table RecoveryTable(Context& c) {
  std::vector<std::string> h = {"ID", "JOB", "STATE", "STRATEGY", "LEVEL", "RANKS", "STEPS", "CREATED"};
  if (c.wide()) h.insert(h.end(), {"TRIGGERS", "UPDATED", "ENDED", "REVISION"});
  h.push_back("MESSAGE");
  return Table(std::move(h));
}

void AddRecoveryRow(Context& c, Table* t, const v1::Recovery& r) {
  std::vector<std::string> row = {r.id(),
                                  r.job_id(),
                                  ShortRecoveryState(r.state()),
                                  RecoveryStrategyText(r),
                                  ShortLevel(r.level()),
                                  RankRanges(Ranks(r.hit_ranks())),
                                  StepsText(r),
                                  FormatTime(r.create_time())};
  if (c.wide()) {
    row.push_back(JoinText(std::vector<std::string>(r.trigger_fault_ids().begin(), r.trigger_fault_ids().end())));
    row.push_back(FormatTime(r.update_time()));
    row.push_back(FormatTime(r.end_time()));
    row.push_back(std::to_string(r.revision()));
  }
  row.push_back(c.wide() ? RecoveryNote(r) : Truncate(RecoveryNote(r), 60));
  t->AddRow(std::move(row));
}

std::string RecoveryStateNames() {
  std::string out;
  for (int s = v1::RECOVERY_STATE_UNSPECIFIED + 1; s <= v1::RecoveryState_MAX; ++s) {
    if (!v1::RecoveryState_IsValid(s)) continue;
    if (!out.empty()) out += ", ";
    out += ShortRecoveryState(static_cast<v1::RecoveryState>(s));
  }
  return out;
}

int GetRecoveries(Context& c) {
  if (auto e = CheckPositional(c, 0, 1, "")) return *e;
  if (c.args.positional.size() == 1) {  // get recovery ID: one row
    if (c.args.Has("job") || c.args.Has("state")) {
      return Usage(c, "get recoveries ID: --job and --state filter lists, not one recovery");
    }
    v1::GetRecoveryResponse resp;
    if (auto st = c.Client().GetRecovery(c.args.positional[0], &resp); !st.ok()) {
      return RpcFailure(c, "GetRecovery", st);
    }
    if (c.json()) {
      c.out << ToJson(resp.recovery(), true) << "\n";
      return kExitOk;
    }
    Table t = RecoveryTable(c);
    AddRecoveryRow(c, &t, resp.recovery());
    t.Print(c.out);
    return kExitOk;
  }
  v1::ListRecoveriesRequest req;
  req.set_job(c.args.Get("job"));
  if (c.args.Has("state")) {
    auto s = ParseRecoveryState(c.args.Get("state"));
    if (!s) {
      return Usage(c, "--state: unknown recovery state '" + c.args.Get("state") + "' (one of " +
                          RecoveryStateNames() + ")");
    }
    req.set_state(*s);
  }
  v1::ListRecoveriesResponse resp;
  if (auto st = c.Client().ListAllRecoveries(req, &resp); !st.ok()) return RpcFailure(c, "ListRecoveries", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  if (resp.recoveries().empty()) {
    c.err << "No recoveries found.\n";
    return kExitOk;
  }
  Table t = RecoveryTable(c);
  for (const auto& r : resp.recoveries()) AddRecoveryRow(c, &t, r);
  t.Print(c.out);
  return kExitOk;
}

int DescribeRecovery(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "recovery id")) return *e;
  v1::GetRecoveryResponse resp;
  if (auto st = c.Client().GetRecovery(c.args.positional[0], &resp); !st.ok()) return RpcFailure(c, "GetRecovery", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  const v1::Recovery& r = resp.recovery();
  PrintKeyValues(c, {
                        {"Id", r.id()},
                        {"Job", r.job_id()},
                        {"State", ShortRecoveryState(r.state())},
                        {"Strategy", ShortStrategy(r.strategy())},
                        {"Initial strategy", ShortStrategy(r.initial_strategy())},
                        {"Level", ShortLevel(r.level())},
                        {"Hit ranks", RankRanges(Ranks(r.hit_ranks()))},
                        {"Steps ended", StepsText(r)},
                        {"Dry run", r.dry_run() ? "yes" : "no"},
                        {"Graceful", r.graceful() ? "yes (checkpoint first, replacement before stop)" : "no"},
                        {"Isolate nodes", JoinText(std::vector<std::string>(r.isolate_nodes().begin(), r.isolate_nodes().end()), ", ")},
                        {"Isolate devices", DeviceRefsText(r.isolate_devices())},
                        {"Reset devices", DeviceRefsText(r.reset_devices())},
                        {"Wait reason", r.wait_reason().empty() ? "-" : r.wait_reason()},
                        {"Message", r.message().empty() ? "-" : r.message()},
                        {"Created", FormatTime(r.create_time()) + " (revision " + std::to_string(r.create_revision()) +
                                        ")"},
                        {"Updated", FormatTime(r.update_time())},
                        {"Ended", FormatTime(r.end_time())},
                        {"Revision", std::to_string(r.revision())},
                    });

  c.out << "\nTrigger faults:\n";
  if (r.trigger_fault_ids().empty()) c.out << "  <none>\n";
  for (const auto& id : r.trigger_fault_ids()) c.out << "  " << Sanitize(id) << "\n";

  c.out << "\nReasons:\n";
  if (r.reasons().empty()) c.out << "  <none>\n";
  for (const auto& reason : r.reasons()) c.out << "  - " << Sanitize(reason) << "\n";

  c.out << "\nSteps:\n";
  if (r.steps().empty()) {
    c.out << "  <none>\n";
    return kExitOk;
  }
  std::vector<const v1::RecoveryStep*> steps;
  for (const auto& s : r.steps()) steps.push_back(&s);
  std::stable_sort(steps.begin(), steps.end(), [](const auto* a, const auto* b) { return a->index() < b->index(); });
  std::vector<std::string> h = {"INDEX", "RUNG", "WHAT", "STATE", "STARTED", "ENDED"};
  if (c.wide()) h.insert(h.end(), {"DEADLINE", "KEY"});
  h.push_back("MESSAGE");
  Table t(std::move(h));
  for (const auto* s : steps) {
    std::vector<std::string> row = {std::to_string(s->index()), ShortStrategy(s->strategy()), StepWhat(*s),
                                    ShortStepState(s->state()),  FormatTime(s->start_time(), true),
                                    FormatTime(s->end_time(), true)};
    if (c.wide()) {
      row.push_back(FormatTime(s->deadline(), true));
      row.push_back(s->idempotency_key().empty() ? "-" : s->idempotency_key());
    }
    row.push_back(s->message().empty() ? "-" : s->message());
    t.AddRow(std::move(row));
  }
  c.out << Indent(TableText(t));
  return kExitOk;
}

// ---------------------------------------------------------------- admin ---

int CordonOrUncordon(Context& c, bool cordon) {
  if (auto e = CheckPositional(c, 1, 1, "node name")) return *e;
  if (cordon) {
    if (auto e = RequireFlags(c, {"reason"})) return *e;
  }
  std::string actor;
  if (auto e = ActorFlag(c, &actor)) return *e;
  v1::Node node;
  if (cordon) {
    v1::CordonNodeRequest req;
    req.set_node(c.args.positional[0]);
    req.set_actor(actor);
    req.set_reason(c.args.Get("reason"));
    v1::CordonNodeResponse resp;
    if (auto st = c.Client().CordonNode(req, &resp); !st.ok()) return RpcFailure(c, "CordonNode", st);
    if (c.json()) {
      c.out << ToJson(resp, true) << "\n";
      return kExitOk;
    }
    node = resp.node();
  } else {
    v1::UncordonNodeRequest req;
    req.set_node(c.args.positional[0]);
    req.set_actor(actor);
    req.set_reason(c.args.Get("reason"));
    v1::UncordonNodeResponse resp;
    if (auto st = c.Client().UncordonNode(req, &resp); !st.ok()) return RpcFailure(c, "UncordonNode", st);
    if (c.json()) {
      c.out << ToJson(resp, true) << "\n";
      return kExitOk;
    }
    node = resp.node();
  }
  c.out << "node " << Sanitize(node.name()) << (node.cordoned() ? " cordoned" : " uncordoned");
  if (node.cordoned() && !node.cordon_reason().empty()) c.out << " (" << Sanitize(node.cordon_reason()) << ")";
  c.out << ", revision " << node.revision() << "\n";
  return kExitOk;
}

int Cordon(Context& c) { return CordonOrUncordon(c, true); }
int Uncordon(Context& c) { return CordonOrUncordon(c, false); }

std::string ModeText(const v1::AdminState& s) {
  return std::string("recovery ") + (s.recovery_paused() ? "paused" : "active") + ", dry-run " +
         (s.dry_run() ? "on" : "off");
}

int SetMode(Context& c, std::optional<bool> paused, std::optional<bool> dry_run) {
  std::string actor;
  if (auto e = ActorFlag(c, &actor)) return *e;
  v1::SetRecoveryModeRequest req;
  if (paused) req.set_recovery_paused(*paused);
  if (dry_run) req.set_dry_run(*dry_run);
  req.set_actor(actor);
  req.set_reason(c.args.Get("reason"));
  v1::SetRecoveryModeResponse resp;
  if (auto st = c.Client().SetRecoveryMode(req, &resp); !st.ok()) return RpcFailure(c, "SetRecoveryMode", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  c.out << ModeText(resp.state()) << ", revision " << resp.state().revision() << "\n";
  return kExitOk;
}

int Pause(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  if (auto e = RequireFlags(c, {"reason"})) return *e;
  return SetMode(c, true, std::nullopt);
}

int Resume(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  return SetMode(c, false, std::nullopt);
}

int DryRun(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "on or off")) return *e;
  const std::string& v = c.args.positional[0];
  if (v != "on" && v != "off") return Usage(c, "dry-run: '" + v + "' is neither on nor off");
  if (v == "on") {
    if (auto e = RequireFlags(c, {"reason"})) return *e;
  }
  return SetMode(c, std::nullopt, v == "on");
}

int GetAdmin(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  v1::GetAdminStateResponse resp;
  if (auto st = c.Client().GetAdminState(&resp); !st.ok()) return RpcFailure(c, "GetAdminState", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  const v1::AdminState& s = resp.state();
  PrintKeyValues(c, {
                        {"Recovery", s.recovery_paused() ? "paused" : "active"},
                        {"Dry run", s.dry_run() ? "on" : "off"},
                        {"Changed by", s.actor().empty() ? "-" : s.actor()},
                        {"Reason", s.reason().empty() ? "-" : s.reason()},
                        {"Changed", FormatTime(s.update_time())},
                        {"Revision", std::to_string(s.revision())},
                    });
  return kExitOk;
}

// --------------------------------------------------- report/clear fault ---

void PrintReport(Context& c, const v1::ReportResponse& r, const std::string& verb) {
  if (c.json()) {
    c.out << ToJson(r, true) << "\n";
    return;
  }
  const v1::Fault& f = r.fault();
  c.out << "fault " << Sanitize(f.reporter() + "/" + f.external_id()) << " on " << Sanitize(f.node());
  if (f.has_device_id()) c.out << " device " << f.device_id();
  if (r.unchanged()) {
    c.out << " unchanged (already " << (verb == "raised" ? "active" : "cleared") << ")";
  } else {
    c.out << " " << verb;
  }
  c.out << ": code " << Sanitize(f.code()) << ", level " << ShortLevel(f.level()) << ", state "
        << ShortState(f.state()) << ", revision " << r.revision() << "\n";
}

int ReportFault(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  if (auto e = RequireFlags(c, {"reporter", "id", "node", "code"})) return *e;
  v1::ReportRequest req;
  req.set_reporter(c.args.Get("reporter"));
  req.set_id(c.args.Get("id"));
  req.set_node(c.args.Get("node"));
  req.set_code(c.args.Get("code"));
  req.set_message(c.args.Get("message"));
  req.set_action(v1::TRANSITION_ACTION_RAISE);
  std::optional<uint64_t> device;
  if (auto e = U64Flag(c, "device", &device, UINT32_MAX)) return *e;
  if (device) req.set_device_id(static_cast<uint32_t>(*device));
  v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
  if (auto e = LevelFlag(c, "level", &level)) return *e;
  req.set_level(level);
  v1::ReportResponse resp;
  if (auto st = c.Client().Report(req, &resp); !st.ok()) return RpcFailure(c, "Report", st);
  PrintReport(c, resp, "raised");
  return kExitOk;
}

// clear-fault FAULT_ID: AdminService.ClearFault, any active fault.
int ClearFaultById(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "fault id")) return *e;
  for (const char* flag : {"reporter", "id", "node", "device", "code", "message"}) {
    if (c.args.Has(flag)) {
      return Usage(c, "clear-fault FAULT_ID: --" + std::string(flag) +
                          " belongs to the external-report form (--reporter R --id ID --node N)");
    }
  }
  if (auto e = RequireFlags(c, {"reason"})) return *e;
  std::string actor;
  if (auto e = ActorFlag(c, &actor)) return *e;
  v1::ClearFaultRequest req;
  req.set_fault_id(c.args.positional[0]);
  req.set_actor(actor);
  req.set_reason(c.args.Get("reason"));
  v1::ClearFaultResponse resp;
  if (auto st = c.Client().ClearFault(req, &resp); !st.ok()) return RpcFailure(c, "ClearFault", st);
  if (c.json()) {
    c.out << ToJson(resp, true) << "\n";
    return kExitOk;
  }
  const v1::Fault& f = resp.fault();
  c.out << "fault " << Sanitize(f.id()) << " cleared: code " << Sanitize(FaultCode(f)) << ", level "
        << ShortLevel(f.level()) << ", state " << ShortState(f.state()) << ", revision " << f.revision() << "\n";
  return kExitOk;
}

int ClearFault(Context& c) {
  if (!c.args.positional.empty()) return ClearFaultById(c);
  if (!c.args.Has("reporter") && !c.args.Has("id") && !c.args.Has("node")) {
    return Usage(c, "clear-fault: missing FAULT_ID (or --reporter R --id ID --node N for an external report)");
  }
  if (c.args.Has("reason") || c.args.Has("actor")) {
    return Usage(c, "clear-fault: --reason and --actor go with a FAULT_ID; the external-report form takes --message");
  }
  if (auto e = RequireFlags(c, {"reporter", "id", "node"})) return *e;
  const std::string reporter = c.args.Get("reporter"), id = c.args.Get("id"), node = c.args.Get("node");
  std::optional<uint64_t> device;
  if (auto e = U64Flag(c, "device", &device, UINT32_MAX)) return *e;

  // The server identifies an external fault by (node, device, reporter, id)
  // but still wants its code: look the fault up to fill in what is missing.
  v1::ListFaultsRequest lreq;
  lreq.set_node(node);
  if (device) lreq.set_device_id(static_cast<uint32_t>(*device));
  v1::ListFaultsResponse faults;
  if (auto st = c.Client().ListAllFaults(lreq, &faults); !st.ok()) return RpcFailure(c, "ListFaults", st);
  std::vector<const v1::Fault*> matches;
  for (const auto& f : faults.faults()) {
    if (f.source() != v1::FAULT_SOURCE_EXTERNAL || f.reporter() != reporter || f.external_id() != id) continue;
    if (device && (!f.has_device_id() || f.device_id() != *device)) continue;
    matches.push_back(&f);
  }
  if (matches.empty()) {
    c.err << "clusterctl: no fault reported by '" << Sanitize(reporter) << "' with id '" << Sanitize(id)
          << "' on node " << Sanitize(node) << (device ? " device " + std::to_string(*device) : std::string())
          << " (a fault raised by a node agent is cleared with 'clear-fault FAULT_ID --reason R')\n";
    return kExitNotFound;
  }
  if (matches.size() > 1) {
    std::string where;
    for (const auto* f : matches) where += " " + DeviceText(FaultDevice(*f));
    return Usage(c, "clear-fault: '" + reporter + "/" + id + "' exists on several devices of " + node + " (" +
                        where.substr(1) + "); name one with --device");
  }
  const v1::Fault& f = *matches[0];
  v1::ReportRequest req;
  req.set_reporter(reporter);
  req.set_id(id);
  req.set_node(node);
  if (f.has_device_id()) req.set_device_id(f.device_id());
  req.set_code(c.args.Get("code", f.code()));
  req.set_message(c.args.Get("message"));
  req.set_action(v1::TRANSITION_ACTION_CLEAR);
  v1::ReportResponse resp;
  if (auto st = c.Client().Report(req, &resp); !st.ok()) return RpcFailure(c, "Report", st);
  PrintReport(c, resp, "cleared");
  return kExitOk;
}

int Version(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  if (c.json()) {
    c.out << "{\"client_version\": \"" << CLUSTERCTL_VERSION << "\"}\n";
  } else {
    c.out << "clusterctl " << CLUSTERCTL_VERSION << "\n";
  }
  return kExitOk;
}

// ----------------------------------------------------------- dispatch ---

struct Command {
  std::vector<FlagSpec> flags;
  int (*run)(Context&);
};

const std::vector<FlagSpec> kReportFlags = {
    {"reporter", 0, true, false}, {"id", 0, true, false},   {"node", 0, true, false},    {"device", 0, true, false},
    {"code", 0, true, false},     {"level", 0, true, false}, {"message", 0, true, false},
};

// Operator actions (AdminService): who and why.
const std::vector<FlagSpec> kAdminFlags = {{"reason", 0, true, false}, {"actor", 0, true, false}};

// Looks up "get nodes", "describe node", "watch" ... (singular or plural
// resource names). Returns nullptr for an unknown command.
const Command* FindCommand(const std::string& verb, const std::string& resource) {
  static const Command kSummary{{}, GetSummary};
  static const Command kNodes{{{"health", 0, true, false}, {"selector", 'l', true, false},
                               {"label-selector", 0, true, false}},
                              GetNodes};
  static const Command kFaults{{{"node", 0, true, false},
                                {"device", 0, true, false},
                                {"min-level", 0, true, false},
                                {"active", 0, false, false},
                                {"since-revision", 0, true, false}},
                               GetFaults};
  static const Command kDescribeNode{{}, DescribeNode};
  static const Command kWatch{{{"from-revision", 0, true, false},
                               {"node", 0, true, true},
                               {"type", 0, true, true},
                               {"min-level", 0, true, false},
                               {"cursor-file", 0, true, false},
                               {"max-events", 0, true, false}},
                              Watch};
  static const Command kReport{kReportFlags, ReportFault};
  static const Command kClear{{{"reporter", 0, true, false},
                               {"id", 0, true, false},
                               {"node", 0, true, false},
                               {"device", 0, true, false},
                               {"code", 0, true, false},
                               {"message", 0, true, false},
                               {"reason", 0, true, false},
                               {"actor", 0, true, false}},
                              ClearFault};
  static const Command kVersion{{}, Version};
  static const Command kJobs{{{"state", 0, true, false}, {"kind", 0, true, false}}, GetJobs};
  static const Command kDescribeJob{{}, DescribeJob};
  static const Command kRecoveries{{{"job", 0, true, false}, {"state", 0, true, false}}, GetRecoveries};
  static const Command kDescribeRecovery{{}, DescribeRecovery};
  static const Command kCreateJob{{{"filename", 'f', true, false}}, CreateJob};
  static const Command kDeleteJob{{}, DeleteJob};
  static const Command kAdmin{{}, GetAdmin};
  static const Command kCordon{kAdminFlags, Cordon};
  static const Command kUncordon{kAdminFlags, Uncordon};
  static const Command kPause{kAdminFlags, Pause};
  static const Command kResume{kAdminFlags, Resume};
  static const Command kDryRun{kAdminFlags, DryRun};
  if (verb == "get") {
    if (resource == "summary") return &kSummary;
    if (resource == "nodes" || resource == "node" || resource == "no") return &kNodes;
    if (resource == "faults" || resource == "fault") return &kFaults;
    if (resource == "jobs" || resource == "job") return &kJobs;
    if (resource == "recoveries" || resource == "recovery") return &kRecoveries;
    if (resource == "admin") return &kAdmin;
    return nullptr;
  }
  if (verb == "describe") {
    if (resource == "node" || resource == "nodes") return &kDescribeNode;
    if (resource == "job" || resource == "jobs") return &kDescribeJob;
    if (resource == "recovery" || resource == "recoveries") return &kDescribeRecovery;
    return nullptr;
  }
  if (verb == "watch") return &kWatch;
  if (verb == "report-fault") return &kReport;
  if (verb == "clear-fault") return &kClear;
  if (verb == "create-job") return &kCreateJob;
  if (verb == "delete-job") return &kDeleteJob;
  if (verb == "cordon") return &kCordon;
  if (verb == "uncordon") return &kUncordon;
  if (verb == "pause") return &kPause;
  if (verb == "resume") return &kResume;
  if (verb == "dry-run") return &kDryRun;
  if (verb == "version") return &kVersion;
  return nullptr;
}

}  // namespace

std::string ClusterctlUsage() {
  return R"(clusterctl: query, watch and operate ClusterD.

Usage: clusterctl [--server ADDR] [-o table|wide|json] [--timeout 10s] COMMAND [ARGS]

Global flags (before or after the command):
  --server ADDR       clusterd gRPC address (default: $CLUSTERD_ADDR, else localhost:8899)
  -o, --output FMT    table (default), wide (more columns) or json (proto field names)
  --timeout D         deadline of each request, e.g. 10s (default 10s; watch has none)
  -h, --help          this help

Commands:
  get summary                         cluster health counts, active faults per level, revision
  get nodes [NAME] [--health H] [--selector k=v,...]
                                      nodes (all pages); H: HEALTHY, SUB_HEALTHY, UNHEALTHY, UNKNOWN
  get faults [--node N] [--device D] [--min-level L] [--active] [--since-revision R]
                                      faults, active and cleared unless --active
  get jobs [ID] [--state S] [--kind K]
                                      jobs (all pages) with their ranks, nodes and the ranks hit
                                      by active faults; S: PENDING, RUNNING, RECOVERING,
                                      SUCCEEDED, FAILED; K: TRAINING, INFERENCE
  get recoveries [ID] [--job J] [--state S]
                                      recoveries (all pages), newest first: state, strategy
                                      (A->B once escalated), level, hit ranks, steps ended/total,
                                      message (WAITING: why it waits); -o wide adds the trigger
                                      faults. S: RUNNING, WAITING, SUCCEEDED, FAILED, DRY_RUN,
                                      CANCELLED
  get admin                           recovery paused or not, dry-run, who changed it last and why
  describe node NAME                  node, inventory, devices, isolation, active faults, metrics
  describe job ID                     job, placement (rank -> node/device), recovery policy and
                                      the active faults that hit it (impacts)
  describe recovery ID                recovery (e.g. train-a.2): every field, the trigger faults,
                                      the decision's reasons and escalations, and each step
                                      (agent command or actuator action, state, times, answer)
  watch [--from-revision R] [--node N]... [--type T]... [--min-level L] [--cursor-file F]
                                      print every change after revision R (default: from now),
                                      then follow live changes; one line (or JSON object) per
                                      event. --cursor-file keeps the last revision seen and
                                      resumes from it when it exists. T: NODE_REGISTERED,
                                      NODE_UPDATED, NODE_HEALTH_CHANGED, DEVICE_HEALTH_CHANGED,
                                      FAULT_RAISED, FAULT_UPDATED, FAULT_CLEARED, JOB_CREATED,
                                      JOB_UPDATED, JOB_DELETED, NODE_CORDONED, NODE_UNCORDONED,
                                      RECOVERY_MODE_CHANGED, RECOVERY_STARTED, RECOVERY_UPDATED,
                                      RECOVERY_FINISHED
  report-fault --reporter R --id ID --node N [--device D] --code C [--level L] [--message M]
                                      raise an external fault (idempotent by reporter and id)
  clear-fault FAULT_ID --reason R [--actor A]
                                      clear any active fault by hand, agent-raised included
                                      (FAULT_ID as in 'get faults -o wide', e.g.
                                      worker01/3/accelerator/80E01801)
  clear-fault --reporter R --id ID --node N [--device D] [--message M]
                                      clear an external fault as its reporter would
  create-job -f FILE                  create a job from a Job in proto JSON (FILE '-': stdin)
  delete-job ID                       delete a job
  cordon NODE --reason R [--actor A]  maintenance: the node's faults are recorded but start
                                      no recovery
  uncordon NODE [--reason R] [--actor A]
  pause --reason R [--actor A]        pause automatic recovery cluster-wide
  resume [--reason R] [--actor A]     resume automatic recovery
  dry-run on --reason R | off [--reason R] [--actor A]
                                      dry-run: recovery decisions are recorded, nothing is acted on
  version                             client version
  help                                this help

Actor of cordon, uncordon, pause, resume, dry-run and clear-fault FAULT_ID: --actor, else
  $CLUSTERCTL_ACTOR, else the login name ($USER), else "clusterctl".

Levels (mildest first): NOT_HANDLE, SUB_HEALTH, PRE_SEPARATE, RESTART_REQUEST,
  RESTART_BUSINESS, FREE_RESTART_NPU, RESTART_NPU, SEPARATE (a FAULT_LEVEL_ prefix is accepted).

Exit codes: 0 ok, 1 server unreachable or RPC error (the server's code and message are
  printed, e.g. FAILED_PRECONDITION), 2 usage error (also a bad job file), 3 not found,
  4 watch revision compacted (the oldest available revision is printed), 5 the server does not
  implement the call (UNIMPLEMENTED: a clusterd older than this clusterctl).
)";
}

int RunClusterctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, GetEnvFn getenv) {
  if (!getenv) getenv = SystemGetenv;
  Context c(out, err);
  c.getenv = getenv;

  // Global flags, then the verb (and for get/describe the resource), then the
  // verb's own flags mixed with global ones and positional arguments.
  size_t i = 0;
  for (; i < args.size() && LooksLikeFlag(args[i]); ++i) {
    if (args[i] == "--") {
      ++i;
      break;
    }
    if (std::string e = ParseOneFlag(args, &i, kGlobalFlags, &c.args); !e.empty()) return Usage(c, e);
  }
  if (i >= args.size()) {
    if (c.args.Has("help")) {
      out << ClusterctlUsage();
      return kExitOk;
    }
    return Usage(c, "no command given");
  }
  c.verb = args[i++];
  if (c.verb == "help") {
    out << ClusterctlUsage();
    return kExitOk;
  }
  std::string resource;
  if (c.verb == "get" || c.verb == "describe") {
    if (i < args.size() && !LooksLikeFlag(args[i])) resource = args[i++];
    if (resource.empty()) {
      if (c.args.Has("help")) {
        out << ClusterctlUsage();
        return kExitOk;
      }
      return Usage(c, c.verb == "get" ? "get what? (summary, nodes, faults, jobs, recoveries, admin)"
                                      : "describe what? (node NAME, job ID, recovery ID)");
    }
    c.verb += " " + resource;
  }

  const Command* cmd = FindCommand(c.verb.substr(0, c.verb.find(' ')), resource);
  if (!cmd) return Usage(c, "unknown command '" + c.verb + "'");
  std::vector<FlagSpec> spec = kGlobalFlags;
  spec.insert(spec.end(), cmd->flags.begin(), cmd->flags.end());
  bool flags_done = false;
  for (; i < args.size(); ++i) {
    if (!flags_done && args[i] == "--") {
      flags_done = true;
      continue;
    }
    if (!flags_done && LooksLikeFlag(args[i])) {
      if (std::string e = ParseOneFlag(args, &i, spec, &c.args); !e.empty()) return Usage(c, c.verb + ": " + e);
      continue;
    }
    c.args.positional.push_back(args[i]);
  }
  if (c.args.Has("help")) {
    out << ClusterctlUsage();
    return kExitOk;
  }
  if (c.args.Has("label-selector")) c.args.flags["selector"] = c.args.flags["label-selector"];

  const std::string output = c.args.Get("output", "table");
  if (output == "table") {
    c.output = Output::kTable;
  } else if (output == "wide") {
    c.output = Output::kWide;
  } else if (output == "json") {
    c.output = Output::kJson;
  } else {
    return Usage(c, "--output: unknown format '" + output + "' (one of table, wide, json)");
  }
  if (c.args.Has("timeout")) {
    auto d = clusterd::ParseDuration(c.args.Get("timeout"));
    if (!d.ok() || d->count() <= 0) {
      return Usage(c, "--timeout: '" + c.args.Get("timeout") + "' is not a positive duration such as 10s");
    }
    c.timeout = std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(*d));
  }
  c.server = c.args.Get("server");
  if (c.server.empty()) {
    const char* env = getenv("CLUSTERD_ADDR");
    c.server = env && *env ? env : kDefaultServer;
  }
  return cmd->run(c);
}

}  // namespace clusterctl
