#include "test/support/process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace clusterd::testing {

std::string BinaryPath(const std::string& name) {
  const char* bin_dir = std::getenv("CLUSTERD_BIN_DIR");
  return std::string(bin_dir ? bin_dir : "build/bin") + "/" + name;
}

bool ChildProcess::Start(const std::vector<std::string>& argv) {
  Kill();
  error_.clear();
  if (argv.empty()) {
    error_ = "no program";
    return false;
  }
  std::vector<std::string> args = argv;
  std::vector<char*> ptrs;
  ptrs.reserve(args.size() + 1);
  for (auto& a : args) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  const int rc = posix_spawn(&pid_, args[0].c_str(), nullptr, nullptr, ptrs.data(), environ);
  if (rc != 0) {
    pid_ = -1;
    error_ = args[0] + ": " + std::strerror(rc);
    return false;
  }
  return true;
}

int ChildProcess::Reap() {
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return status;
}

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  Reap();
}

int ChildProcess::Terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  return Reap();
}

bool ChildProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

}  // namespace clusterd::testing
