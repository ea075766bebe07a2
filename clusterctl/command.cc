#include "clusterctl/command.h"

#include <algorithm>
#include <charconv>

#include <unistd.h>

#include "clusterctl/format.h"
#include "common/duration.h"
#include "common/levels.h"

namespace clusterctl {
namespace {

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

std::string LevelNames() {
  std::string out;
  for (int l = v1::FAULT_LEVEL_NOT_HANDLE; l <= v1::FAULT_LEVEL_SEPARATE; ++l) {
    if (!out.empty()) out += ", ";
    out += clusterd::ShortLevelName(static_cast<v1::FaultLevel>(l));
  }
  return out;
}

// A string the server accepts as an actor: printable ASCII, no spaces.
bool IsToken(const std::string& s) {
  if (s.empty() || s.size() > 256) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) { return ch > ' ' && ch <= '~'; });
}

}  // namespace

int Usage(Context& c, const std::string& message) {
  c.err << "clusterctl: " << message << "\n"
        << "Run 'clusterctl help' for usage.\n";
  return kExitUsage;
}

int RpcFailure(Context& c, const std::string& rpc, const grpc::Status& st) {
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
      c.err << "clusterctl: " << rpc << " is not supported by clusterd at " << c.server
            << " (an older server than this clusterctl?) (" << detail << ")\n";
      break;
    default: c.err << "clusterctl: " << rpc << " failed: " << detail << "\n"; break;
  }
  return ExitFor(st.error_code());
}

std::optional<int> CheckPositional(Context& c, size_t min, size_t max, const std::string& what) {
  const size_t n = c.args.positional.size();
  if (n < min) return Usage(c, c.verb + ": missing " + what);
  if (n > max) return Usage(c, c.verb + ": unexpected argument '" + c.args.positional[max] + "'");
  return std::nullopt;
}

std::optional<int> RequireFlags(Context& c, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    if (c.args.Get(n).empty()) return Usage(c, c.verb + ": --" + n + " is required");
  }
  return std::nullopt;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

std::optional<int> U64Flag(Context& c, const std::string& name, std::optional<uint64_t>* out, uint64_t max) {
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

std::optional<int> LevelFlag(Context& c, const std::string& name, v1::FaultLevel* out) {
  if (!c.args.Has(name)) return std::nullopt;
  auto level = clusterd::ParseFaultLevel(c.args.Get(name));
  if (!level) return Usage(c, "--" + name + ": unknown level '" + c.args.Get(name) + "' (one of " + LevelNames() + ")");
  *out = *level;
  return std::nullopt;
}

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

}  // namespace clusterctl
