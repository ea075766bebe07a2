// The exec actuator: each action runs `/bin/sh -c command` in a process
// group of its own, with the action's JSON on stdin, until it exits or the
// action's deadline passes.
#include "clusterd/recovery/actuators/actuator.h"
#include "clusterd/recovery/actuators/pooled.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>

#include "common/duration.h"

extern char** environ;

namespace clusterd {
namespace {

using actuator_internal::kMaxMessageBytes;
using actuator_internal::OneLine;
using std::chrono::system_clock;

// Raw bytes kept of the output line being read (before OneLine trims it).
constexpr size_t kMaxRawLineBytes = 4 * kMaxMessageBytes;
// Output read in one go, so that a chatty command cannot keep us from
// watching the deadline.
constexpr size_t kMaxReadBytes = 64 << 10;
// Output still read after the command exited (from what it left behind).
constexpr size_t kMaxDrainBytes = 1 << 20;
// Longest single wait, so that a wall-clock step is noticed soon.
constexpr auto kMaxWait = std::chrono::seconds(1);
// Without a pidfd (kernels before 5.3) the child is checked this often.
constexpr auto kExitPollInterval = std::chrono::milliseconds(50);

std::string ErrnoText(int err) { return std::system_category().message(err); }

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Writing to the stdin of a command that has exited raises SIGPIPE in the
// writing thread. While this lives the signal stays pending instead (and is
// discarded) and the write fails with EPIPE.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    Discard();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  void Discard() {
    if (sigismember(&old_, SIGPIPE)) return;  // not ours to take
    const timespec zero{};
    while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
    }
  }

 private:
  sigset_t pipe_;
  sigset_t old_;
};

// Remembers the last non-empty line of the output, as OneLine makes it.
class LastLine {
 public:
  void Add(std::string_view data) {
    for (const char c : data) {
      if (c == '\n') {
        EndLine();
      } else if (current_.size() < kMaxRawLineBytes) {
        current_ += c;
      }
    }
  }
  std::string Finish() {
    EndLine();
    return last_;
  }

 private:
  void EndLine() {
    std::string line = OneLine(current_, kMaxMessageBytes);
    if (!line.empty()) last_ = std::move(line);
    current_.clear();
  }

  std::string current_;
  std::string last_;
};

bool SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Starts /bin/sh -c command as the leader of a new process group, with
// stdin from `in` and stdout+stderr to `out`; every other descriptor is
// closed, and the signal mask and the usual signal dispositions are reset (a
// daemon blocks SIGTERM in its threads and may ignore SIGPIPE, and both
// would otherwise carry over). Returns 0 or an errno value.
int Spawn(const std::string& command, std::vector<std::string>& env, int in, int out, pid_t* pid) {
  std::string sh = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  if (int err = posix_spawn_file_actions_init(&actions); err != 0) return err;
  if (int err = posix_spawnattr_init(&attr); err != 0) {
    posix_spawn_file_actions_destroy(&actions);
    return err;
  }
  int err = posix_spawn_file_actions_adddup2(&actions, in, STDIN_FILENO);
  if (err == 0) err = posix_spawn_file_actions_adddup2(&actions, out, STDOUT_FILENO);
  if (err == 0) err = posix_spawn_file_actions_adddup2(&actions, out, STDERR_FILENO);
  if (err == 0) err = posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  sigset_t mask;
  sigemptyset(&mask);
  if (err == 0) err = posix_spawnattr_setsigmask(&attr, &mask);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (const int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD, SIGALRM, SIGUSR1, SIGUSR2}) {
    sigaddset(&defaults, sig);
  }
  if (err == 0) err = posix_spawnattr_setsigdefault(&attr, &defaults);
  if (err == 0) err = posix_spawnattr_setpgroup(&attr, 0);
  if (err == 0) {
    err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
  if (err == 0) err = posix_spawn(pid, sh.c_str(), &actions, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return err;
}

// The daemon's environment without our variables, then ours.
std::vector<std::string> CommandEnvironment(const ActionRequest& req) {
  static constexpr std::string_view kOurs[] = {"CLUSTERD_ACTION=", "CLUSTERD_IDEMPOTENCY_KEY=", "CLUSTERD_JOB_ID="};
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv(*e);
    if (std::none_of(std::begin(kOurs), std::end(kOurs), [&](std::string_view p) { return kv.starts_with(p); })) {
      env.emplace_back(kv);
    }
  }
  env.push_back(std::string(kOurs[0]) + std::string(ActionName(req.action)));
  env.push_back(std::string(kOurs[1]) + req.idempotency_key);
  env.push_back(std::string(kOurs[2]) + req.job_id);
  return env;
}

// A descriptor that becomes readable when `pid` exits, or -1 where the
// kernel has none (then we poll). The syscall, not glibc's wrapper: that one
// is missing before 2.36 and undeclared for C++ in 2.36.
int PidFd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// poll() timeout until `wake`, capped at `cap`; at least 0.
int PollTimeoutMs(system_clock::time_point now, system_clock::time_point wake, std::chrono::milliseconds cap) {
  if (wake <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now);
  return static_cast<int>(std::min(ms, cap).count());
}

ActionResult RunCommand(const std::string& command, std::chrono::milliseconds kill_grace, const ActionRequest& req) {
  const auto start = system_clock::now();
  if (start >= req.deadline) return {false, "timed out: the deadline passed before the command started"};
  SigpipeBlock sigpipe;
  const std::string input = ActionJson(req) + "\n";
  std::vector<std::string> env = CommandEnvironment(req);

  // O_CLOEXEC: a command that another worker starts at the same moment must
  // not inherit these ends (it would hold our stdin open past our EOF).
  int in_fds[2], out_fds[2];
  if (pipe2(in_fds, O_CLOEXEC) != 0) return {false, "cannot create a pipe: " + ErrnoText(errno)};
  Fd in_read(in_fds[0]), in_write(in_fds[1]);
  if (pipe2(out_fds, O_CLOEXEC) != 0) return {false, "cannot create a pipe: " + ErrnoText(errno)};
  Fd out_read(out_fds[0]), out_write(out_fds[1]);
  // Only our ends: the command's ends are other open file descriptions.
  if (!SetNonBlocking(in_write.get()) || !SetNonBlocking(out_read.get())) {
    return {false, "cannot set up the pipes: " + ErrnoText(errno)};
  }

  pid_t pid = -1;
  if (const int err = Spawn(command, env, in_read.get(), out_write.get(), &pid); err != 0) {
    return {false, "cannot start /bin/sh: " + ErrnoText(err)};
  }
  in_read.Reset();
  out_write.Reset();
  // The group id is the leader's pid, which stays ours (a zombie at worst)
  // until the waitpid at the end, so signalling the group is safe until then.
  const pid_t group = pid;
  Fd exit_fd(PidFd(pid));  // readable once the command exits

  size_t written = 0;
  LastLine output;
  char buf[4096];
  // Reads what is available now; false at EOF or on an error.
  const auto read_output = [&](size_t limit) {
    size_t total = 0;
    while (total < limit) {
      const ssize_t n = ::read(out_read.get(), buf, sizeof buf);
      if (n > 0) {
        output.Add(std::string_view(buf, static_cast<size_t>(n)));
        total += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return true;
  };
  const auto exited = [&] {
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
  };

  bool timed_out = false, killed = false;
  system_clock::time_point kill_at;
  while (!exited()) {
    const auto now = system_clock::now();
    if (!timed_out && now >= req.deadline) {
      timed_out = true;
      kill_at = now + kill_grace;
      killpg(group, SIGTERM);
      in_write.Reset();
    } else if (timed_out && !killed && now >= kill_at) {
      killed = true;
      killpg(group, SIGKILL);
    }
    const auto wake = !timed_out ? req.deadline : !killed ? kill_at : now + kMaxWait;
    const auto cap =
        exit_fd.valid() ? std::chrono::duration_cast<std::chrono::milliseconds>(kMaxWait) : kExitPollInterval;
    pollfd fds[3];
    nfds_t nfds = 0;
    if (out_read.valid()) fds[nfds++] = {out_read.get(), POLLIN, 0};
    if (in_write.valid()) fds[nfds++] = {in_write.get(), POLLOUT, 0};
    if (exit_fd.valid()) fds[nfds++] = {exit_fd.get(), POLLIN, 0};
    if (poll(fds, nfds, PollTimeoutMs(now, wake, cap)) < 0 && errno != EINTR) {
      const int err = errno;
      killpg(group, SIGKILL);
      waitpid(pid, nullptr, 0);
      return {false, "poll failed: " + ErrnoText(err)};
    }
    for (nfds_t i = 0; i < nfds; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == out_read.get()) {
        if (!read_output(kMaxReadBytes)) out_read.Reset();
      } else if (fds[i].fd == in_write.get()) {
        const ssize_t n = ::write(in_write.get(), input.data() + written, input.size() - written);
        const int err = n < 0 ? errno : 0;
        if (n > 0) written += static_cast<size_t>(n);
        if (err == EPIPE) sigpipe.Discard();
        // All written, or the command closed its stdin: no more input.
        if (written == input.size() || (err != 0 && err != EAGAIN && err != EINTR)) in_write.Reset();
      }
    }
  }
  // What the command wrote before it exited is in the pipe now; a process it
  // left behind may keep the pipe open, so read only what is there.
  if (out_read.valid()) read_output(kMaxDrainBytes);
  // Processes it left behind after a timeout go too (the leader, a zombie,
  // still holds the group id).
  if (timed_out && !killed) killpg(group, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }

  const std::string line = output.Finish();
  const auto with_line = [&](std::string message) {
    if (!line.empty()) message += ": " + line;
    return message;
  };
  if (timed_out) {
    const auto ran = std::chrono::round<std::chrono::milliseconds>(req.deadline - start);
    return {false,
            with_line("timed out after " + FormatDuration(ran) + (killed ? " (killed: SIGTERM was not enough)" : ""))};
  }
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 0) return {true, line};
    return {false, with_line("exit status " + std::to_string(WEXITSTATUS(status)))};
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return {false, with_line("killed by signal " + std::to_string(sig) +
                             (name != nullptr ? std::string(" (SIG") + name + ")" : std::string()))};
  }
  return {false, with_line("ended with wait status " + std::to_string(status))};
}

}  // namespace

StatusOr<std::unique_ptr<Actuator>> MakeExecActuator(ExecActuatorOptions options) {
  if (options.command.find_first_not_of(" \t\r\n") == std::string::npos) {
    return InvalidArgument("exec actuator: command is empty");
  }
  if (options.command.find('\0') != std::string::npos) {
    return InvalidArgument("exec actuator: command contains a NUL byte");
  }
  if (options.workers < 1) {
    return InvalidArgument("exec actuator: workers must be at least 1, got " + std::to_string(options.workers));
  }
  return actuator_internal::MakePooledActuator(
      "exec", options.workers,
      [command = std::move(options.command), grace = options.kill_grace](const ActionRequest& req) {
        return RunCommand(command, grace, req);
      });
}

}  // namespace clusterd
