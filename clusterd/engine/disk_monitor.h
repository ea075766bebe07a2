// Free space on the data directory, and the decision it drives: below the
// min_free_bytes / min_free_inodes reserve clusterd refuses writes (before
// the disk is full), because RocksDB cannot fail a write cleanly: the Debian
// build asserts on the first ENOSPC of its WAL, and a memtable flush or a
// compaction needs room of its own. See docs/operate.md ("Disk full").
//
// The space source is an interface so that tests can fake it; the real one
// calls statvfs(2) on the data directory.
//
// Thread contract: Refresh() may be called from any thread (the Engine's
// writer calls it before every commit and at least every liveness interval);
// LowSpaceReason(), free_bytes() and free_inodes() read the last refresh and
// are lock-free enough for gRPC threads (one mutex for the reason string).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

struct DiskSpace {
  uint64_t free_bytes = 0;   // available to an unprivileged writer (f_bavail)
  uint64_t free_inodes = 0;  // f_favail
  bool has_inodes = true;    // false where the filesystem has no inode limit (f_files == 0)
};

class FreeSpaceSource {
 public:
  virtual ~FreeSpaceSource() = default;
  virtual StatusOr<DiskSpace> Query() = 0;
};

// statvfs(2) on path.
std::unique_ptr<FreeSpaceSource> MakeStatvfsSource(std::string path);

struct DiskMonitorOptions {
  std::string path;  // for messages
  uint64_t min_free_bytes = 256ull << 20;
  uint64_t min_free_inodes = 1024;
};

class DiskMonitor {
 public:
  // metrics may be null. Refreshes once.
  DiskMonitor(std::unique_ptr<FreeSpaceSource> source, DiskMonitorOptions options, MetricsRegistry* metrics);

  // Reads the source again; returns whether the reserve is available.
  bool Refresh();

  // Why writes must be refused now (the reserve is not available), as of the
  // last Refresh; nullopt when there is room. A failed statvfs is not a
  // reason: the store's own errors then decide.
  std::optional<std::string> LowSpaceReason() const;
  bool low() const { return low_.load(std::memory_order_acquire); }

  uint64_t free_bytes() const { return free_bytes_.load(std::memory_order_relaxed); }
  uint64_t free_inodes() const { return free_inodes_.load(std::memory_order_relaxed); }
  const DiskMonitorOptions& options() const { return options_; }

 private:
  std::unique_ptr<FreeSpaceSource> source_;
  const DiskMonitorOptions options_;
  std::atomic<uint64_t> free_bytes_{0};
  std::atomic<uint64_t> free_inodes_{0};
  std::atomic<bool> low_{false};
  mutable std::mutex mu_;
  std::string reason_;      // under mu_
  std::string last_error_;  // under mu_: the last failed Query, logged once
  Counter* query_errors_ = nullptr;
};

}  // namespace clusterd
