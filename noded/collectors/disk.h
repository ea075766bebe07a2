// Disk collector: space and inodes per real mount, read-only state, and SCSI
// I/O error counters.
//
// Which mounts are "real": everything in the mounts file except the filesystem
// types in DiskCollectorOptions::skip_fs_types and mount points under
// skip_mount_prefixes. Skipped by default:
//  - pseudo and memory filesystems (proc, sysfs, tmpfs, cgroup*, ...): no disk behind them;
//  - overlay, squashfs, iso9660, erofs, nsfs: container root filesystems and read-only
//    images, one per container on a Kubernetes node, owned by the runtime;
//  - network filesystems (nfs*, cifs, fuse.*, ceph, lustre, gpfs, ...): statvfs on a hung
//    server blocks the calling thread indefinitely, which would stall every collector.
//  - kubelet and container runtime state directories (per-pod volume mounts).
//
// Read-only: a mount reports read_only when its options contain "ro", and
// unexpected_read_only when it is read-only although it should be writable: /etc/fstab
// lists it without "ro", or this collector saw it mounted rw before (the kernel
// remounts a filesystem ro after errors). Mounts that are read-only by design stay quiet.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "noded/collectors/fs_root.h"

namespace clusterd::noded {

struct FsStats {
  uint64_t fragment_size = 0;  // f_frsize: the unit of the block counts
  uint64_t blocks = 0, blocks_free = 0, blocks_available = 0;
  uint64_t files = 0, files_free = 0;
};

// The statvfs seam: tests give fixed numbers. Implementations must be safe to call
// from the collector's thread; they may block as long as statvfs does.
class StatFs {
 public:
  virtual ~StatFs() = default;
  // `mount_point` as written in the mounts file (host view).
  virtual StatusOr<FsStats> Stat(const std::string& mount_point) = 0;
};

// statvfs(2) on root + mount_point.
class RealStatFs final : public StatFs {
 public:
  explicit RealStatFs(std::string root = "/");
  StatusOr<FsStats> Stat(const std::string& mount_point) override;

 private:
  FsRoot fs_;
};

struct MountReading {
  std::string device;       // "/dev/nvme0n1p2"
  std::string mount_point;  // "/data"
  std::string fs_type;      // "ext4"
  bool read_only = false;
  bool unexpected_read_only = false;
  std::optional<FsStats> stats;  // absent when statvfs failed
  std::string stat_error;        // why it failed
  // Like df: used / (used + available to unprivileged users) * 100.
  std::optional<double> used_percent;
  std::optional<double> inodes_used_percent;  // absent on filesystems without inode limits (btrfs)
};

struct BlockDeviceReading {
  std::string name;        // "sda"
  uint64_t io_errors = 0;  // /sys/block/<name>/device/ioerr_cnt (SCSI disks only)
};

struct DiskReading {
  std::vector<MountReading> mounts;
  std::vector<BlockDeviceReading> devices;
};

struct DiskCollectorOptions {
  std::string root = "/";
  // Relative to root. Inside a container with the host's / at root, use
  // "/proc/1/mounts" (with hostPID) to see the host's mount namespace.
  std::string mounts_file = "/proc/mounts";
  std::string fstab_file = "/etc/fstab";
  std::vector<std::string> skip_fs_types = DefaultSkipFsTypes();
  // A type ending in '*' matches by prefix ("cgroup*", "fuse.*").
  std::vector<std::string> skip_mount_prefixes = DefaultSkipMountPrefixes();

  static std::vector<std::string> DefaultSkipFsTypes();
  static std::vector<std::string> DefaultSkipMountPrefixes();
};

// Not thread-safe (remembers which mounts were seen rw); use from one thread.
class DiskCollector {
 public:
  // `statfs` must outlive the collector.
  DiskCollector(DiskCollectorOptions options, StatFs& statfs);
  // Fails only when the mounts file is unreadable; a failing statvfs is reported per mount.
  StatusOr<DiskReading> Collect();

 private:
  bool Skipped(std::string_view fs_type, std::string_view mount_point) const;
  std::set<std::string> FstabReadWrite() const;

  DiskCollectorOptions options_;
  FsRoot fs_;
  StatFs& statfs_;
  std::set<std::string> seen_rw_;
};

}  // namespace clusterd::noded
