// The process's file-descriptor limit. Every connection (gRPC, HTTP) costs a
// descriptor, and gRPC 1.51's listener stops accepting for good the first time
// accept() fails with EMFILE (see docs/operate.md, "File descriptors"), so the
// daemons raise their soft limit to the hard one at start and export both.
//
// Threading: all functions are thread-safe (they only make system calls).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace clusterd {

struct FdLimit {
  uint64_t soft_before = 0;  // RLIMIT_NOFILE soft limit as found
  uint64_t soft = 0;         // soft limit now (== hard unless raising failed)
  uint64_t hard = 0;
  std::string error;  // why raising failed; empty on success
};

// Raises the soft RLIMIT_NOFILE to the hard limit. Never lowers it. On
// failure (which only a sandbox causes) `error` says why and the limit is
// left as it was: the daemon still runs, with less headroom.
FdLimit RaiseFdLimit();

// The current soft RLIMIT_NOFILE; nullopt if it cannot be read.
std::optional<uint64_t> SoftFdLimit();

// Descriptors open in this process (entries of /proc/self/fd); nullopt where
// /proc is not mounted.
std::optional<uint64_t> CountOpenFds();

}  // namespace clusterd
