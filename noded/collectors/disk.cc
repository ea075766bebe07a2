#include "noded/collectors/disk.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace clusterd::noded {
namespace {

bool HasOption(std::string_view options, std::string_view want) {
  while (!options.empty()) {
    size_t comma = options.find(',');
    if (options.substr(0, comma) == want) return true;
    if (comma == std::string_view::npos) break;
    options.remove_prefix(comma + 1);
  }
  return false;
}

template <typename Fn>
void ForEachLine(std::string_view text, Fn fn) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    fn(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

}  // namespace

RealStatFs::RealStatFs(std::string root) : fs_(std::move(root)) {}

StatusOr<FsStats> RealStatFs::Stat(const std::string& mount_point) {
  struct statvfs sv {};
  const std::string path = fs_.Path(mount_point);
  if (::statvfs(path.c_str(), &sv) != 0) {
    return Unavailable("statvfs " + path + ": " + std::strerror(errno));
  }
  FsStats s;
  s.fragment_size = sv.f_frsize;
  s.blocks = sv.f_blocks;
  s.blocks_free = sv.f_bfree;
  s.blocks_available = sv.f_bavail;
  s.files = sv.f_files;
  s.files_free = sv.f_ffree;
  return s;
}

std::vector<std::string> DiskCollectorOptions::DefaultSkipFsTypes() {
  return {"proc",       "sysfs",     "devtmpfs", "devpts",      "tmpfs",      "ramfs",    "cgroup*",
          "securityfs", "pstore",    "bpf",      "debugfs",     "tracefs",    "configfs", "fusectl",
          "mqueue",     "hugetlbfs", "autofs",   "binfmt_misc", "rpc_pipefs", "nsfs",     "efivarfs",
          "selinuxfs",  "overlay",   "squashfs", "iso9660",     "erofs",      "nfs*",     "cifs",
          "smb3",       "fuse*",     "ceph",     "glusterfs",   "lustre",     "gpfs",     "9p"};
}

std::vector<std::string> DiskCollectorOptions::DefaultSkipMountPrefixes() {
  return {"/var/lib/kubelet/pods/", "/var/lib/docker/", "/var/lib/containerd/",
          "/run/containerd/",       "/run/k3s/",        "/snap/"};
}

DiskCollector::DiskCollector(DiskCollectorOptions options, StatFs& statfs)
    : options_(std::move(options)), fs_(options_.root), statfs_(statfs) {}

bool DiskCollector::Skipped(std::string_view fs_type, std::string_view mount_point) const {
  for (const auto& t : options_.skip_fs_types) {
    if (!t.empty() && t.back() == '*') {
      if (fs_type.starts_with(std::string_view(t).substr(0, t.size() - 1))) return true;
    } else if (fs_type == t) {
      return true;
    }
  }
  for (const auto& p : options_.skip_mount_prefixes) {
    if (mount_point.starts_with(p)) return true;
  }
  return false;
}

std::set<std::string> DiskCollector::FstabReadWrite() const {
  std::set<std::string> rw;
  auto fstab = fs_.Read(options_.fstab_file);
  if (!fstab.ok()) return rw;
  ForEachLine(*fstab, [&](std::string_view line) {
    auto f = SplitWhitespace(line);
    if (f.size() < 4 || f[0].starts_with("#")) return;
    if (!f[1].starts_with("/")) return;  // swap, none
    if (!HasOption(f[3], "ro")) rw.insert(UnescapeOctal(f[1]));
  });
  return rw;
}

StatusOr<DiskReading> DiskCollector::Collect() {
  auto mounts = fs_.Read(options_.mounts_file);
  if (!mounts.ok()) return mounts.status();
  const std::set<std::string> fstab_rw = FstabReadWrite();

  // The last entry for a mount point wins: it is the one stacked on top.
  std::map<std::string, MountReading> by_point;
  ForEachLine(*mounts, [&](std::string_view line) {
    auto f = SplitWhitespace(line);
    if (f.size() < 4) return;
    std::string point = UnescapeOctal(f[1]);
    if (Skipped(f[2], point)) {
      by_point.erase(point);
      return;
    }
    MountReading m;
    m.device = UnescapeOctal(f[0]);
    m.mount_point = point;
    m.fs_type = std::string(f[2]);
    m.read_only = HasOption(f[3], "ro");
    by_point[point] = std::move(m);
  });

  DiskReading r;
  for (auto& [point, m] : by_point) {
    if (m.read_only) {
      m.unexpected_read_only = fstab_rw.count(point) > 0 || seen_rw_.count(point) > 0;
    } else {
      seen_rw_.insert(point);
    }
    auto st = statfs_.Stat(point);
    if (!st.ok()) {
      m.stat_error = st.status().message();
    } else {
      m.stats = *st;
      const FsStats& s = *st;
      uint64_t used = s.blocks >= s.blocks_free ? s.blocks - s.blocks_free : 0;
      uint64_t denom = used + s.blocks_available;
      if (s.blocks > 0 && denom > 0) {
        m.used_percent = 100.0 * static_cast<double>(used) / static_cast<double>(denom);
      }
      if (s.files > 0) {
        uint64_t iused = s.files >= s.files_free ? s.files - s.files_free : 0;
        m.inodes_used_percent = 100.0 * static_cast<double>(iused) / static_cast<double>(s.files);
      }
    }
    r.mounts.push_back(std::move(m));
  }
  // Forget mounts that went away, so a later mount at the same point starts fresh.
  for (auto it = seen_rw_.begin(); it != seen_rw_.end();) {
    it = by_point.count(*it) ? std::next(it) : seen_rw_.erase(it);
  }

  for (const auto& name : fs_.List("/sys/block")) {
    if (auto errs = fs_.ReadUint("/sys/block/" + name + "/device/ioerr_cnt")) {
      r.devices.push_back({name, *errs});
    }
  }
  return r;
}

}  // namespace clusterd::noded
