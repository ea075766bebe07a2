// clusterctl's entry point as a library function, so tests run the real
// command line in-process against a real clusterd.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace clusterctl {

// Exit codes (also documented in docs/operate.md and `clusterctl help`).
enum ExitCode : int {
  kExitOk = 0,
  kExitRpcError = 1,     // server unreachable, or the RPC failed (code and message printed)
  kExitUsage = 2,        // bad command line
  kExitNotFound = 3,     // the named node, fault, job or recovery does not exist
  kExitOutOfRange = 4,   // watch: the revision was compacted away
  kExitUnsupported = 5,  // the server does not implement the call (UNIMPLEMENTED: an older clusterd)
};

using GetEnvFn = const char* (*)(const char*);

// Runs one command line (argv without the program name). Normal output goes
// to `out`, diagnostics to `err`. `getenv` reads CLUSTERD_ADDR and the
// transport security variables (CLUSTERD_CA, CLUSTERD_TOKEN, ...).
int RunClusterctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                  GetEnvFn getenv = nullptr);

std::string ClusterctlUsage();

}  // namespace clusterctl
