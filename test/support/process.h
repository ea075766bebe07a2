// Child processes for the process-level tests: this build's binaries
// (clusterd, noded, ...) started with posix_spawn and killed at the end.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace clusterd::testing {

// The path of one of this build's programs: $CLUSTERD_BIN_DIR/name (ctest
// sets CLUSTERD_BIN_DIR to build/bin), else build/bin/name from the working
// directory.
std::string BinaryPath(const std::string& name);

// One child process. The destructor kills it (SIGKILL) and reaps it, so a
// failed assertion never leaves a daemon behind. Not thread-safe: one owner.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess() { Kill(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts argv[0] (a path, not looked up in PATH) with argv and this
  // process's environment; kills the previous child first. False if it could
  // not be started (error() says why).
  bool Start(const std::vector<std::string>& argv);
  // SIGKILL, then reaps it. Nothing when no child runs.
  void Kill();
  // SIGTERM, then waits for it to exit: its waitpid status (-1 when no child
  // ran).
  int Terminate();
  // Whether the child has not exited yet (an exited child is reaped).
  bool Running();

  pid_t pid() const { return pid_; }
  const std::string& error() const { return error_; }

 private:
  int Reap();

  pid_t pid_ = -1;
  std::string error_;
};

}  // namespace clusterd::testing
