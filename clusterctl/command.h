// What every clusterctl command is given and shares: the parsed command line
// (Context), the command table entry (Command), and the checks and error
// mappings that make commands agree on messages and exit codes.
//
// Single-threaded: one Context per RunClusterctl call, used by one command.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "clusterctl/cli.h"
#include "clusterctl/client.h"

namespace clusterctl {

struct FlagSpec {
  std::string name;  // long name without "--"
  char short_name;   // 0 if none
  bool takes_value;
  bool repeated;
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

enum class Output { kTable, kWide, kJson };

inline constexpr std::chrono::milliseconds kDefaultTimeout{10'000};

struct Context {
  Context(std::ostream& o, std::ostream& e) : out(o), err(e) {}
  std::ostream& out;
  std::ostream& err;
  Args args;
  std::string verb;  // "get nodes", "watch" ...: the prefix of usage messages
  std::string server;
  Output output = Output::kTable;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  GetEnvFn getenv = nullptr;
  // Made by RunClusterctl before the command runs (with the transport
  // security flags); gRPC dials on the first call, so a usage error never does.
  std::unique_ptr<ClusterClient> client;

  ClusterClient& Client() { return *client; }
  bool json() const { return output == Output::kJson; }
  bool wide() const { return output == Output::kWide; }
};

// One line of the command table: `verb` alone ("watch", "cordon") or, for get
// and describe, `verb` followed by one of `resources`.
struct Command {
  std::string verb;
  // get/describe: the names accepted after the verb, the canonical one first
  // ("nodes", "node", "no"); listed in "get what? (...)". Empty for other verbs.
  std::vector<std::string> resources;
  // describe: what names the object ("NAME", "ID"), for "describe what? (node NAME, ...)".
  std::string operand;
  std::vector<FlagSpec> flags;  // the command's own; the global flags are added
  std::function<int(Context&)> run;
  // The command's lines under "Commands:" in `clusterctl help`, aligned, each ending in "\n".
  std::string help;
};

// Prints "clusterctl: MESSAGE" and the pointer to help; returns kExitUsage.
int Usage(Context& c, const std::string& message);

// Prints why `rpc` failed (unreachable, deadline, not implemented, or the
// server's code and message) and returns the exit code for its status.
int RpcFailure(Context& c, const std::string& rpc, const grpc::Status& st);

// Checks that the command got between min and max positional arguments.
std::optional<int> CheckPositional(Context& c, size_t min, size_t max, const std::string& what);

// Each of `names` must be given a non-empty value.
std::optional<int> RequireFlags(Context& c, const std::vector<std::string>& names);

bool ParseU64(const std::string& s, uint64_t* out);

// Parses the optional numeric flag `name` into *out. Returns an exit code on error.
std::optional<int> U64Flag(Context& c, const std::string& name, std::optional<uint64_t>* out,
                           uint64_t max = UINT64_MAX);

// Parses the optional fault level flag `name` into *out. Returns an exit code on error.
std::optional<int> LevelFlag(Context& c, const std::string& name, v1::FaultLevel* out);

// Who does an admin action: --actor, else $CLUSTERCTL_ACTOR, else the login
// name (getlogin_r, then $USER), else "clusterctl". Returns an exit code on error.
std::optional<int> ActorFlag(Context& c, std::string* actor);

}  // namespace clusterctl
