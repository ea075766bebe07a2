#include "clusterctl/cli.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "clusterctl/client.h"
#include "clusterctl/format.h"
#include "common/duration.h"
#include "common/levels.h"

#ifndef CLUSTERCTL_VERSION
#define CLUSTERCTL_VERSION "dev"
#endif

namespace clusterctl {
namespace {

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
  std::ostream& out;
  std::ostream& err;
  Args args;
  std::string verb;
  std::string server;
  Output output = Output::kTable;
  std::chrono::milliseconds timeout = kDefaultTimeout;
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

int Unsupported(Context& c, const std::string& what, const std::string& service) {
  c.err << "clusterctl: " << what << " is not supported by this server yet: it needs clusterd.v1." << service
        << ", which clusterd does not provide yet\n";
  return kExitUnsupported;
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
  std::vector<std::string> h = {"NAME", "HEALTH", "WORST-LEVEL", "FAULTS", "DEVICES", "CONNECTED", "LAST-HEARTBEAT"};
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
    Table t({"ID", "VENDOR", "MODEL", "SERIAL", "HEALTH", "WORST-LEVEL", "FAULTS"});
    for (const auto& d : resp.devices()) {
      t.AddRow({std::to_string(d.id()), d.vendor().empty() ? "-" : d.vendor(), d.model().empty() ? "-" : d.model(),
                d.serial().empty() ? "-" : d.serial(), ShortHealth(d.health()), ShortLevel(d.worst_level()),
                std::to_string(d.active_faults())});
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
  std::string line = Col("REVISION", 8) + Col("TIME", 24) + Col("TYPE", 20) + Col("NODE", 16) + Col("DEVICE", 6) +
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
      break;
    case v1::EVENT_TYPE_NODE_HEALTH_CHANGED:
    case v1::EVENT_TYPE_DEVICE_HEALTH_CHANGED:
      state = ShortHealth(e.previous_health()) + "->" + ShortHealth(e.health());
      break;
    case v1::EVENT_TYPE_NODE_REGISTERED:
    case v1::EVENT_TYPE_NODE_UPDATED:
      if (e.has_node_info()) state = ShortHealth(e.node_info().health());
      break;
    default:
      break;
  }
  std::string line = Col(std::to_string(e.revision()), 8) + Col(FormatTime(e.time(), true), 24) +
                     Col(ShortEventType(e.type()), 20) + Col(e.node().empty() ? "-" : e.node(), 16) +
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

