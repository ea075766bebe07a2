// Kernel log: parse /dev/kmsg records, match them against configurable patterns,
// and follow the log without blocking.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace clusterd::noded {

// One /dev/kmsg record: "pri,seq,ts_us,flags[,...];message".
struct KmsgRecord {
  int level = 0;     // syslog level, pri & 7 (0 emerg ... 7 debug)
  int facility = 0;  // pri >> 3
  uint64_t seq = 0;
  uint64_t timestamp_us = 0;  // since boot
  std::string message;
};

// nullopt for anything that is not a record header (e.g. the " KEY=value"
// continuation lines /dev/kmsg appends to device messages).
std::optional<KmsgRecord> ParseKmsgLine(std::string_view line);

struct KernelPattern {
  std::string code;   // fault code it maps to, e.g. "KERNEL_OOM_KILL"
  std::string regex;  // ECMAScript, searched anywhere in the message
  bool ignore_case = false;
};

// The NVIDIA driver's Xid lines: no rule raises them; the nvml backend folds
// them into its GPUs' XID_<n> codes (NvmlBackend::KernelLine).
inline constexpr char kKernelGpuXidCode[] = "KERNEL_GPU_XID";

// OOM kills, hung tasks, machine checks, filesystem/IO errors, accelerator driver
// errors, NVIDIA Xids. Each pattern aims at one line per event (e.g. "Killed process N", not the
// several other lines an OOM kill prints) so that counts mean events.
std::vector<KernelPattern> DefaultKernelPatterns();

// Immutable after Create(); safe to share between threads.
class KmsgMatcher {
 public:
  // Refuses an empty code or a regex that does not compile, naming the pattern.
  static StatusOr<KmsgMatcher> Create(std::vector<KernelPattern> patterns);
  // Code of the first pattern that matches, or nullptr.
  const std::string* Match(std::string_view message) const;
  std::vector<std::string> Codes() const;

 private:
  struct Compiled {
    std::string code;
    std::regex re;
  };
  std::vector<Compiled> patterns_;
};

struct KmsgReaderOptions {
  std::string path = "/dev/kmsg";
  // Skip what is already in the log when first opened: on a NodeD restart, old
  // messages since boot should not count again.
  bool start_at_end = true;
  size_t max_records_per_poll = 4096;  // the rest waits for the next poll
};

// Follows /dev/kmsg (one record per read) or a regular file being appended to
// (tests, or a log file), without ever blocking: Poll() returns what is available
// now and remembers where it stopped. Records at or below the last sequence number
// seen are skipped, so a truncated-and-rewritten file does not repeat them.
// Not thread-safe; use from one thread.
class KmsgReader {
 public:
  explicit KmsgReader(KmsgReaderOptions options);
  ~KmsgReader();
  KmsgReader(const KmsgReader&) = delete;
  KmsgReader& operator=(const KmsgReader&) = delete;

  // Opens the file on first use (and again after an error). Fails when it cannot be
  // opened or read; the next Poll() tries again.
  StatusOr<std::vector<KmsgRecord>> Poll();
  // Records the kernel overwrote before we read them (gaps in sequence numbers).
  uint64_t lost() const { return lost_; }

 private:
  Status Open();
  void Close();
  void TakeLines(std::vector<KmsgRecord>* out);

  KmsgReaderOptions options_;
  int fd_ = -1;
  bool is_device_ = false;
  uint64_t offset_ = 0;  // regular files: next byte to read
  std::string partial_;  // bytes after the last newline, waiting for the rest of the line
  std::optional<uint64_t> last_seq_;
  uint64_t lost_ = 0;
};

struct KernelMatch {
  std::string code;
  KmsgRecord record;
};

struct KernelReading {
  // Cumulative matches per code since this collector started; every configured code
  // is present (zero until it matches) so that rules get a baseline.
  std::map<std::string, uint64_t> counts;
  std::map<std::string, std::string> last_message;  // per code, the latest matching line
  std::vector<KernelMatch> matches;                 // new in this poll
  uint64_t lost = 0;
};

// Reader + matcher. Not thread-safe; use from one thread.
class KernelLogCollector {
 public:
  KernelLogCollector(KmsgMatcher matcher, KmsgReaderOptions options);
  StatusOr<KernelReading> Collect();

 private:
  KmsgMatcher matcher_;
  KmsgReader reader_;
  std::map<std::string, uint64_t> counts_;
  std::map<std::string, std::string> last_message_;
};

}  // namespace clusterd::noded
