// Job progress from files on the node (docs/noded.md, "Job progress"): a
// training process that does not speak to ClusterD writes its rank's latest
// step into <dir>/<job id>/<rank>.json (a framework callback:
// examples/progress/), replacing the file each time. NodeD reads the files
// that changed since its last pass and sends them to ClusterD on its stream,
// one ProgressReport per job. The files come from workloads: each is
// bounded (4 KiB), opened without following links, parsed without
// exceptions; a bad one is skipped and named in the pass's errors.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "clusterd/v1/agent.pb.h"
#include "common/clock.h"
#include "common/status.h"

namespace clusterd::noded {

struct ProgressFileOptions {
  std::string dir = "/run/clusterd/progress";  // "" disables
  size_t max_file_bytes = 4096;
  size_t max_jobs = 256;
  size_t max_ranks_per_job = 4096;
  // A file not written for this long is an old job's: not sent.
  std::chrono::nanoseconds max_age = std::chrono::minutes(15);
};

// One rank's file: {"step": N, "step_time": s, "collective_time": s,
// "time": unix seconds, "samples": N, "tokens": N, "checkpointing": bool}.
// Only "step" is required. InvalidArgument naming the field otherwise.
StatusOr<v1::RankProgress> ParseRankProgress(const std::string& text, uint32_t rank);

class ProgressFiles {
 public:
  explicit ProgressFiles(ProgressFileOptions options) : options_(std::move(options)) {}

  struct Pass {
    std::vector<v1::JobProgressReport> reports;  // one per job with a changed file
    std::vector<std::string> errors;             // at most 16, one line each
    size_t files_read = 0;
  };
  // Reads the files changed since the last pass (by modification time, size
  // and inode). Not thread-safe.
  Pass Scan(TimePoint now);

 private:
  struct Seen {
    int64_t mtime_ns = 0;
    int64_t size = -1;
    uint64_t inode = 0;  // a writer that renames a new file into place changes it every time
  };
  ProgressFileOptions options_;
  std::map<std::string, Seen> seen_;  // path -> as last read
};

}  // namespace clusterd::noded
