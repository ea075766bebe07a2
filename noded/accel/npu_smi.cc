#include "noded/accel/npu_smi.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <set>
#include <sstream>
#include <utility>

extern char** environ;

namespace clusterd::noded {
namespace {

std::string_view TrimLine(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Tokens(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// "| a | b |" -> {"a", "b"}; cells are trimmed.
std::vector<std::string_view> Cells(std::string_view line) {
  line = TrimLine(line);
  if (!line.empty() && line.front() == '|') line.remove_prefix(1);
  if (!line.empty() && line.back() == '|') line.remove_suffix(1);
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t bar = line.find('|', start);
    out.push_back(TrimLine(line.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start)));
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  return out;
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool IContains(std::string_view hay, std::string_view needle) {
  if (needle.size() > hay.size()) return false;
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    if (IEquals(hay.substr(i, needle.size()), needle)) return true;
  }
  return false;
}

std::optional<int> ParseInt(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// nullopt for "NA", "-" and the like; an error for anything else not a number.
StatusOr<std::optional<double>> ParseReading(std::string_view s, size_t line_no, const char* what) {
  if (IEquals(s, "NA") || IEquals(s, "N/A") || s == "-" || s == "--") return std::optional<double>{};
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) {
    return InvalidArgument("npu-smi output line " + std::to_string(line_no) + ": " + what + " '" + std::string(s) +
                           "' is not a number");
  }
  return std::optional<double>(v);
}

Status Malformed(size_t line_no, const std::string& why) {
  return InvalidArgument("npu-smi output line " + std::to_string(line_no) + ": " + why);
}

enum class SecondColumn { kNone, kDevice, kPhyId };

}  // namespace

StatusOr<std::vector<NpuSmiChip>> ParseNpuSmiInfo(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= text.size();) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) {
      if (start < text.size()) lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }

  // Header: "| NPU  Name | Health | ..." followed by "| Chip [Device|Phy-ID] | Bus-Id | ...".
  size_t i = 0;
  for (; i < lines.size(); ++i) {
    std::string_view l = TrimLine(lines[i]);
    if (l.empty() || l.front() != '|') continue;
    auto cells = Cells(l);
    auto first = Tokens(cells[0]);
    if (cells.size() >= 2 && first.size() >= 2 && IEquals(first[0], "NPU") && IEquals(first[1], "Name") &&
        IContains(cells[1], "Health")) {
      break;
    }
  }
  if (i == lines.size()) return InvalidArgument("npu-smi output has no device table header (NPU Name | Health)");
  ++i;
  SecondColumn second = SecondColumn::kNone;
  {
    if (i >= lines.size()) return Malformed(i + 1, "missing the second header line (Chip | Bus-Id)");
    auto cells = Cells(lines[i]);
    auto first = Tokens(cells[0]);
    if (first.empty() || !IEquals(first[0], "Chip")) {
      return Malformed(i + 1, "expected the second header line (Chip | Bus-Id)");
    }
    if (first.size() >= 2 && IEquals(first[1], "Device")) second = SecondColumn::kDevice;
    if (first.size() >= 2 && IEquals(first[1], "Phy-ID")) second = SecondColumn::kPhyId;
    ++i;
  }

  std::vector<NpuSmiChip> chips;
  std::optional<NpuSmiChip> pending;  // first row read, second row expected
  for (; i < lines.size(); ++i) {
    const size_t line_no = i + 1;
    std::string_view l = TrimLine(lines[i]);
    if (!l.empty() && l.front() == '+') continue;                            // separator
    if (l.empty() || l.front() != '|' || IContains(l, "Process id")) break;  // end of the device table
    auto cells = Cells(l);
    if (!pending) {
      if (cells.size() < 3) return Malformed(line_no, "NPU row has fewer than 3 columns");
      auto first = Tokens(cells[0]);
      if (first.size() < 2) return Malformed(line_no, "NPU row lacks the NPU id or the name");
      auto npu = ParseInt(first[0]);
      if (!npu) return Malformed(line_no, "NPU id '" + std::string(first[0]) + "' is not a number");
      NpuSmiChip c;
      c.npu_id = *npu;
      std::string name;
      for (size_t k = 1; k < first.size(); ++k) name += (k > 1 ? " " : "") + std::string(first[k]);
      c.name = std::move(name);
      if (cells[1].empty()) return Malformed(line_no, "NPU row has an empty health column");
      c.health = std::string(cells[1]);
      auto readings = Tokens(cells[2]);
      if (readings.size() < 2) return Malformed(line_no, "NPU row lacks power and temperature");
      auto power = ParseReading(readings[0], line_no, "power");
      if (!power.ok()) return power.status();
      auto temp = ParseReading(readings[1], line_no, "temperature");
      if (!temp.ok()) return temp.status();
      c.power_w = *power;
      c.temperature_c = *temp;
      pending = std::move(c);
      continue;
    }
    if (cells.size() < 2) return Malformed(line_no, "chip row has fewer than 2 columns");
    auto first = Tokens(cells[0]);
    if (first.empty()) return Malformed(line_no, "chip row lacks the chip index");
    auto chip = ParseInt(first[0]);
    if (!chip) return Malformed(line_no, "chip index '" + std::string(first[0]) + "' is not a number");
    pending->chip = *chip;
    if (second != SecondColumn::kNone) {
      if (first.size() < 2) return Malformed(line_no, "chip row lacks the device id column");
      auto id = ParseInt(first[1]);
      if (!id) return Malformed(line_no, "device id '" + std::string(first[1]) + "' is not a number");
      pending->column_id = *id;
    }
    pending->bus_id = std::string(cells[1]);
    chips.push_back(std::move(*pending));
    pending.reset();
  }
  if (pending) return Malformed(i + 1, "NPU " + std::to_string(pending->npu_id) + " has no chip row");

  const bool single_chip = std::all_of(chips.begin(), chips.end(), [](const NpuSmiChip& c) { return c.chip == 0; });
  std::set<int32_t> seen;
  for (size_t k = 0; k < chips.size(); ++k) {
    NpuSmiChip& c = chips[k];
    c.id = c.column_id ? *c.column_id : single_chip ? c.npu_id : static_cast<int32_t>(k);
    if (!seen.insert(c.id).second) {
      return InvalidArgument("npu-smi output: two chips have device id " + std::to_string(c.id));
    }
  }
  std::sort(chips.begin(), chips.end(), [](const NpuSmiChip& a, const NpuSmiChip& b) { return a.id < b.id; });
  return chips;
}

uint32_t NpuSmiHealthRaw(std::string_view health) {
  if (IEquals(health, "OK")) return 0;
  if (IEquals(health, "Warning")) return 1;
  if (IEquals(health, "Alarm")) return 2;
  if (IEquals(health, "Critical")) return 3;
  return kHealthUnknown;
}

std::optional<std::string> NpuSmiHealthCode(std::string_view health) {
  switch (NpuSmiHealthRaw(health)) {
    case 0: return std::nullopt;
    case 1: return kNpuSmiHealthWarning;
    case 2: return kNpuSmiHealthAlarm;
    case 3: return kNpuSmiHealthCritical;
    default: return kNpuSmiHealthUnknown;
  }
}

StatusOr<CommandRun> RunCommandCapture(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                       const CaptureOptions& options) {
  if (argv.empty() || argv[0].empty()) return InvalidArgument("command is empty");
  const std::string what = "'" + argv[0] + "'";
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Internal("pipe2: " + std::string(std::strerror(errno)));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC
  if (options.with_stderr) {
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Its own process group, so that a timeout kills whatever it started too.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return Unavailable("cannot run " + what + ": " + std::strerror(rc));
  }

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto remaining_ms = [&]() {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  };
  CommandRun run;
  Status failure;
  char buf[4096];
  while (true) {
    pollfd p{fds[0], POLLIN, 0};
    int left = remaining_ms();
    int n = left > 0 ? ::poll(&p, 1, left) : 0;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failure = Status(StatusCode::kDeadlineExceeded,
                       what + " did not finish within " + std::to_string(timeout.count()) + " ms");
      break;
    }
    ssize_t r = ::read(fds[0], buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      failure = Internal("reading the output of " + what + ": " + std::strerror(errno));
      break;
    }
    if (r == 0) break;  // EOF
    run.output.append(buf, static_cast<size_t>(r));
    if (run.output.size() > options.max_output) {
      if (!options.keep_tail) {
        failure = ResourceExhausted(what + " printed more than " + std::to_string(options.max_output) + " bytes");
        break;
      }
      run.output.erase(0, run.output.size() - options.max_output);
      run.truncated = true;
    }
  }
  ::close(fds[0]);

  // Reap the child. On failure kill it first. Otherwise it has closed its output:
  // wait for it to exit, but never past the deadline; after that it is killed.
  int wstatus = 0;
  auto kill_and_reap = [&]() {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
  };
  if (!failure.ok()) {
    kill_and_reap();
  } else {
    while (true) {
      pid_t w = ::waitpid(pid, &wstatus, WNOHANG);
      if (w == pid) break;
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        failure = Internal("waitpid " + what + ": " + std::strerror(errno));
        break;
      }
      if (remaining_ms() == 0) {
        failure = Status(StatusCode::kDeadlineExceeded,
                         what + " did not exit within " + std::to_string(timeout.count()) + " ms");
        kill_and_reap();
        break;
      }
      ::poll(nullptr, 0, std::min(remaining_ms(), 5));  // output closed, exit not yet seen
    }
  }
  if (failure.code() == StatusCode::kDeadlineExceeded && options.keep_tail) {
    run.timed_out = true;
    return run;
  }
  if (!failure.ok()) return failure;
  if (WIFEXITED(wstatus)) run.exit_code = WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) run.signal = WTERMSIG(wstatus);
  return run;
}

StatusOr<std::string> RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                 size_t max_output) {
  CaptureOptions options;
  options.max_output = max_output;
  auto run = RunCommandCapture(argv, timeout, options);
  if (!run.ok()) return run.status();
  const std::string what = "'" + argv[0] + "'";
  if (run->exit_code > 0) return Unavailable(what + " exited with status " + std::to_string(run->exit_code));
  if (run->signal != 0) return Unavailable(what + " was killed by signal " + std::to_string(run->signal));
  return std::move(run->output);
}

NpuSmiBackend::Source NpuSmiBackend::CommandSource(const std::string& command, std::chrono::milliseconds timeout) {
  std::vector<std::string> argv;
  std::istringstream in(command);
  for (std::string tok; in >> tok;) argv.push_back(tok);
  return [argv, timeout]() { return RunCommand(argv, timeout); };
}

NpuSmiBackend::NpuSmiBackend(Source source) : source_(std::move(source)) {}

StatusOr<std::vector<NpuSmiChip>> NpuSmiBackend::Read() {
  auto text = source_();
  if (!text.ok()) return text.status();
  return ParseNpuSmiInfo(*text);
}

Status NpuSmiBackend::Init() {
  auto chips = Read();
  if (!chips.ok()) return chips.status();
  initialised_ = true;
  return Status::Ok();
}

StatusOr<std::vector<DeviceInfo>> NpuSmiBackend::Devices() {
  if (!initialised_) return FailedPrecondition("npu-smi backend: Init has not succeeded");
  auto chips = Read();
  if (!chips.ok()) return chips.status();
  std::vector<DeviceInfo> out;
  for (const NpuSmiChip& c : *chips) {
    DeviceInfo d;
    d.id = c.id;
    d.vendor = "huawei";
    d.model = c.name;
    d.location = "npu " + std::to_string(c.npu_id) + " chip " + std::to_string(c.chip) +
                 (c.bus_id.empty() ? "" : " bus " + c.bus_id);
    out.push_back(std::move(d));
  }
  return out;
}

StatusOr<std::vector<DeviceStatus>> NpuSmiBackend::Poll() {
  if (!initialised_) return FailedPrecondition("npu-smi backend: Init has not succeeded");
  auto chips = Read();
  if (!chips.ok()) return chips.status();
  std::vector<DeviceStatus> out;
  for (const NpuSmiChip& c : *chips) {
    DeviceStatus s;
    s.id = c.id;
    s.health_raw = NpuSmiHealthRaw(c.health);
    s.healthy = s.health_raw == 0;
    if (auto code = NpuSmiHealthCode(c.health)) s.error_codes.push_back(*code);
    s.temperature_c = c.temperature_c;
    s.power_w = c.power_w;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace clusterd::noded
