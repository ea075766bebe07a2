#include "clusterd/engine/disk_monitor.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "common/logging.h"

namespace clusterd {
namespace {

class StatvfsSource final : public FreeSpaceSource {
 public:
  explicit StatvfsSource(std::string path) : path_(std::move(path)) {}
  StatusOr<DiskSpace> Query() override {
    struct statvfs st {};
    if (::statvfs(path_.c_str(), &st) != 0) {
      return Unavailable("statvfs " + path_ + ": " + std::strerror(errno));
    }
    DiskSpace space;
    space.free_bytes = static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
    space.free_inodes = static_cast<uint64_t>(st.f_favail);
    space.has_inodes = st.f_files != 0;
    return space;
  }

 private:
  const std::string path_;
};

}  // namespace

std::unique_ptr<FreeSpaceSource> MakeStatvfsSource(std::string path) {
  return std::make_unique<StatvfsSource>(std::move(path));
}

DiskMonitor::DiskMonitor(std::unique_ptr<FreeSpaceSource> source, DiskMonitorOptions options, MetricsRegistry* metrics)
    : source_(std::move(source)), options_(std::move(options)) {
  if (metrics) {
    metrics->AddCallbackGauge("clusterd_data_dir_free_bytes", "Bytes available on the data directory's filesystem.",
                              [this] { return static_cast<double>(free_bytes()); });
    metrics->AddCallbackGauge("clusterd_data_dir_free_inodes", "Inodes available on the data directory's filesystem.",
                              [this] { return static_cast<double>(free_inodes()); });
    metrics->AddCallbackGauge("clusterd_data_dir_min_free_bytes",
                              "The min_free_bytes reserve: below it writes are refused.",
                              [this] { return static_cast<double>(options_.min_free_bytes); });
    query_errors_ = &metrics->AddCounter("clusterd_data_dir_statvfs_errors_total",
                                         "Failed free-space queries (statvfs) on the data directory.");
  }
  Refresh();
}

bool DiskMonitor::Refresh() {
  auto space = source_->Query();
  if (!space.ok()) {
    if (query_errors_) query_errors_->Inc();
    std::lock_guard lock(mu_);
    if (last_error_ != space.status().message()) {
      last_error_ = space.status().message();
      GetLogger("store")->warn("free space of the data dir unknown: {}", last_error_);
    }
    return !low();
  }
  free_bytes_.store(space->free_bytes, std::memory_order_relaxed);
  free_inodes_.store(space->has_inodes ? space->free_inodes : 0, std::memory_order_relaxed);
  std::string reason;
  if (space->free_bytes < options_.min_free_bytes) {
    reason = "data dir " + options_.path + " has " + std::to_string(space->free_bytes) +
             " bytes free, below the min_free_bytes reserve " + std::to_string(options_.min_free_bytes) +
             "; writes resume when space returns";
  } else if (space->has_inodes && space->free_inodes < options_.min_free_inodes) {
    reason = "data dir " + options_.path + " has " + std::to_string(space->free_inodes) +
             " inodes free, below the min_free_inodes reserve " + std::to_string(options_.min_free_inodes) +
             "; writes resume when inodes return";
  }
  const bool low = !reason.empty();
  std::lock_guard lock(mu_);
  last_error_.clear();
  if (low != low_.load(std::memory_order_relaxed)) {
    if (low) {
      GetLogger("store")->error("refusing writes: {}", reason);
    } else {
      GetLogger("store")->info("data dir {} has {} bytes free again, above the reserve", options_.path,
                               space->free_bytes);
    }
  }
  reason_ = std::move(reason);
  low_.store(low, std::memory_order_release);
  return !low;
}

std::optional<std::string> DiskMonitor::LowSpaceReason() const {
  if (!low()) return std::nullopt;
  std::lock_guard lock(mu_);
  if (reason_.empty()) return std::nullopt;
  return reason_;
}

}  // namespace clusterd
