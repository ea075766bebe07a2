#include "clusterctl/cli.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>

#include "clusterctl/command.h"
#include "clusterctl/registry.h"
#include "common/duration.h"
#include "common/grpc/credentials.h"

namespace clusterctl {
namespace {

const char* SystemGetenv(const char* name) { return std::getenv(name); }

constexpr const char* kDefaultServer = "localhost:8899";

// ------------------------------------------------------------ arguments ---

const std::vector<FlagSpec> kGlobalFlags = {
    {"server", 0, true, false},
    {"output", 'o', true, false},
    {"timeout", 0, true, false},
    {"help", 'h', false, false},
    // Transport security (common/grpc/credentials.h).
    {"ca", 0, true, false},
    {"cert", 0, true, false},
    {"key", 0, true, false},
    {"token", 0, true, false},
    {"token-file", 0, true, false},
    {"server-name", 0, true, false},
};

// The flags above, then the CLUSTERD_* environment for what they left unset.
clusterd::ClientSecurity SecurityFromArgs(const Args& args, GetEnvFn getenv) {
  clusterd::ClientSecurity security;
  for (const char* name : {"ca", "cert", "key", "token", "token-file", "server-name"}) {
    if (args.Has(name)) clusterd::SetClientSecurityFlag(name, args.Get(name), &security);
  }
  clusterd::ApplyClientSecurityEnv(&security, getenv);
  return security;
}

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

}  // namespace

std::string ClusterctlUsage() {
  return R"(clusterctl: query, watch and operate ClusterD.

Usage: clusterctl [--server ADDR] [-o table|wide|json] [--timeout 10s] [--ca FILE ...] COMMAND [ARGS]

Global flags (before or after the command):
  --server ADDR       clusterd gRPC address (default: $CLUSTERD_ADDR, else localhost:8899)
  -o, --output FMT    table (default), wide (more columns) or json (proto field names)
  --timeout D         deadline of each request, e.g. 10s (default 10s; watch has none)
  -h, --help          this help

Transport security (a flag wins over its environment variable; TLS when any of
--ca, --cert, --key is set, else plaintext; a token is only sent over TLS):
)" + std::string(clusterd::ClientSecurityUsage()) +
         R"(
Commands:
)" + CommandsHelp() +
         R"(
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
      return Usage(c, c.verb + " what? (" + ResourceNames(c.verb) + ")");
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
  // The channel is made (not dialled: gRPC connects on the first call) before
  // the command runs, so a missing file or a token without TLS is a usage
  // error (exit 2) naming the flag (ValidateClientSecurity), never an RPC failure.
  auto client = ClusterClient::Create(c.server, c.timeout, SecurityFromArgs(c.args, getenv));
  if (!client.ok()) return Usage(c, client.status().message());
  c.client = std::move(*client);
  return cmd->run(c);
}

}  // namespace clusterctl
