#include "common/durable_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace clusterd {
namespace {

// `err` is errno as captured right after the failed call: building the message
// allocates, and nothing promises that leaves errno alone.
Status ErrnoError(std::string_view op, const std::string& path, int err) {
  return Internal(std::string(op) + " " + path + ": " + std::strerror(err));
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// "<pid>.<n>", as TempPathFor makes them.
bool TempSuffix(std::string_view s) {
  const size_t dot = s.find('.');
  return dot != std::string_view::npos && AllDigits(s.substr(0, dot)) && AllDigits(s.substr(dot + 1));
}

}  // namespace

std::string TempPathFor(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." +
         std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
}

Status WriteAll(int fd, std::string_view data, const std::string& path_for_errors) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return ErrnoError("write", path_for_errors, err);
    }
    if (n == 0) return Internal("write " + path_for_errors + ": wrote nothing");
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status SyncFile(int fd, const std::string& path, SyncKind kind) {
  for (;;) {
    const int rc = kind == SyncKind::kData ? ::fdatasync(fd) : ::fsync(fd);
    if (rc == 0) return Status::Ok();
    const int err = errno;
    if (err == EINTR) continue;
    return ErrnoError(kind == SyncKind::kData ? "fdatasync" : "fsync", path, err);
  }
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open directory", dir, errno);
  Status st = Status::Ok();
  while (::fsync(fd) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    st = ErrnoError("fsync directory", dir, err);
    break;
  }
  ::close(fd);  // read-only: nothing to lose
  return st;
}

Status CloseFile(int fd, const std::string& path) {
  // Never retried, EINTR included: Linux releases the descriptor before it
  // reports, and a retry could close one another thread has just opened.
  if (::close(fd) != 0) return ErrnoError("close", path, errno);
  return Status::Ok();
}

std::string ParentDirectory(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  while (slash > 0 && path[slash - 1] == '/') --slash;  // "a//b" -> "a"
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status RenameDurably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    return Internal("rename " + from + " to " + to + ": " + std::strerror(err));
  }
  const std::string to_dir = ParentDirectory(to);
  CLUSTERD_RETURN_IF_ERROR(SyncDirectory(to_dir));
  const std::string from_dir = ParentDirectory(from);
  if (from_dir != to_dir) CLUSTERD_RETURN_IF_ERROR(SyncDirectory(from_dir));
  return Status::Ok();
}

Status WriteFileDurably(const std::string& path, std::string_view content, mode_t mode) {
  const std::string tmp = TempPathFor(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("create", tmp, errno);
  Status st = WriteAll(fd, content, tmp);
  if (st.ok()) st = SyncFile(fd, tmp, SyncKind::kAll);
  Status closed = CloseFile(fd, tmp);
  if (st.ok()) st = std::move(closed);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    st = Internal("rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return SyncDirectory(ParentDirectory(path));
}

Status RemoveStaleTempFiles(const std::string& path) {
  const std::string dir = ParentDirectory(path);
  const std::string prefix = BaseName(path) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    const int err = errno;
    if (err == ENOENT) return Status::Ok();
    return ErrnoError("open directory", dir, err);
  }
  // Collected first, removed after: readdir need not be stable while the
  // directory changes.
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix &&
        TempSuffix(name.substr(prefix.size()))) {
      stale.push_back(dir + "/" + std::string(name));
    }
  }
  ::closedir(d);
  Status st = Status::Ok();
  for (const auto& victim : stale) {
    if (::unlink(victim.c_str()) != 0) {
      const int err = errno;
      if (err != ENOENT && st.ok()) st = ErrnoError("remove", victim, err);
    }
  }
  return st;
}

}  // namespace clusterd
