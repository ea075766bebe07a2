#include "common/fd_limit.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace clusterd {

FdLimit RaiseFdLimit() {
  FdLimit out;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    out.error = std::string("getrlimit(RLIMIT_NOFILE): ") + std::strerror(errno);
    return out;
  }
  out.soft_before = out.soft = lim.rlim_cur;
  out.hard = lim.rlim_max;
  if (lim.rlim_cur >= lim.rlim_max) return out;
  rlimit raised = lim;
  raised.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    out.error = std::string("setrlimit(RLIMIT_NOFILE): ") + std::strerror(errno);
    return out;
  }
  out.soft = raised.rlim_cur;
  return out;
}

std::optional<uint64_t> SoftFdLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return std::nullopt;
  return lim.rlim_cur;
}

std::optional<uint64_t> CountOpenFds() {
  // opendir itself needs a descriptor: at the limit the count is unknown.
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return std::nullopt;
  uint64_t n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n > 0 ? n - 1 : 0;  // not counting the directory's own descriptor
}

}  // namespace clusterd
