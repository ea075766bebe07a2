#include "noded/collectors/kmsg.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "noded/collectors/fs_root.h"

namespace clusterd::noded {

std::optional<KmsgRecord> ParseKmsgLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t semi = line.find(';');
  if (semi == std::string_view::npos || line.empty() || line.front() == ' ') return std::nullopt;
  std::string_view header = line.substr(0, semi);
  std::string_view fields[3];
  for (int i = 0; i < 3; ++i) {
    size_t comma = header.find(',');
    fields[i] = header.substr(0, comma);
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
  }
  auto pri = ParseUint(fields[0]);
  auto seq = ParseUint(fields[1]);
  auto ts = ParseUint(fields[2]);
  if (!pri || !seq || !ts) return std::nullopt;
  KmsgRecord r;
  r.level = static_cast<int>(*pri & 7);
  r.facility = static_cast<int>(*pri >> 3);
  r.seq = *seq;
  r.timestamp_us = *ts;
  r.message = std::string(line.substr(semi + 1));
  return r;
}

std::vector<KernelPattern> DefaultKernelPatterns() {
  return {
      // "Out of memory: Killed process 1234 (python)" and the cgroup variant
      // "Memory cgroup out of memory: Killed process ..."; one line per kill.
      {"KERNEL_OOM_KILL", R"(Killed process \d+)", false},
      {"KERNEL_HUNG_TASK", R"(blocked for more than \d+ seconds)", false},
      // Not a bare "mce:": thermal throttling messages carry that prefix too.
      {"KERNEL_MCE", R"(mce: \[Hardware Error\]|Machine check events logged|Machine Check Exception)", false},
      {"KERNEL_FS_ERROR",
       R"(EXT4-fs error|EXT4-fs .*Remounting filesystem read-only|XFS .*([Ee]rror|[Cc]orruption|[Ss]hutdown)|I/O error)",
       false},
      // "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
      {kKernelGpuXidCode, R"(NVRM: Xid \(PCI:)", false},
      {"KERNEL_ACCEL_DRIVER_ERROR",
       R"(\b(davinci|devdrv|devmm|hccl|hdc|npu|dcmi)\w*\b.*\b(error|fault|fail(ed|ure)?|timeout|exception)\b)", true},
  };
}

namespace {

// std::regex (libstdc++ 12) reads the number of a back-reference (\N) and of a
// repeat count ({n,m}) into an int with no overflow check: a 20-digit one is
// undefined behaviour (found by the rules_config fuzzer). Such numbers are
// refused before the pattern is compiled; six digits is far beyond any real
// pattern's.
Status CheckRegexNumbers(const std::string& re) {
  constexpr size_t kMaxDigits = 6;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  for (size_t i = 0; i < re.size(); ++i) {
    const bool escape = re[i] == '\\';
    if (escape && (i + 1 >= re.size() || !digit(re[i + 1]))) {
      ++i;  // an escaped character, '{' included: a literal
      continue;
    }
    if (!escape && re[i] != '{') continue;
    size_t run = 0;
    for (size_t j = i + 1; j < re.size() && (digit(re[j]) || (!escape && re[j] == ',')); ++j) {
      run = digit(re[j]) ? run + 1 : 0;
      if (run > kMaxDigits) {
        return InvalidArgument(std::string(escape ? "a back-reference" : "a repeat count") + " at offset " +
                               std::to_string(i) + " has more than " + std::to_string(kMaxDigits) + " digits");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<KmsgMatcher> KmsgMatcher::Create(std::vector<KernelPattern> patterns) {
  KmsgMatcher m;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const KernelPattern& p = patterns[i];
    const std::string what = "kernel pattern " + std::to_string(i) + " (code '" + p.code + "')";
    if (p.code.empty()) return InvalidArgument(what + ": field 'code' is empty");
    if (p.regex.empty()) return InvalidArgument(what + ": field 'regex' is empty");
    if (Status st = CheckRegexNumbers(p.regex); !st.ok()) {
      return InvalidArgument(what + ": field 'regex': " + st.message());
    }
    auto flags = std::regex::ECMAScript | std::regex::optimize;
    if (p.ignore_case) flags |= std::regex::icase;
    try {
      m.patterns_.push_back({p.code, std::regex(p.regex, flags)});
    } catch (const std::regex_error& e) {
      return InvalidArgument(what + ": field 'regex' does not compile: " + e.what());
    }
  }
  return m;
}

const std::string* KmsgMatcher::Match(std::string_view message) const {
  for (const auto& p : patterns_) {
    if (std::regex_search(message.begin(), message.end(), p.re)) return &p.code;
  }
  return nullptr;
}

std::vector<std::string> KmsgMatcher::Codes() const {
  std::vector<std::string> codes;
  for (const auto& p : patterns_) codes.push_back(p.code);
  return codes;
}

KmsgReader::KmsgReader(KmsgReaderOptions options) : options_(std::move(options)) {}

KmsgReader::~KmsgReader() { Close(); }

void KmsgReader::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status KmsgReader::Open() {
  int fd = ::open(options_.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Unavailable("open " + options_.path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Unavailable("stat " + options_.path + ": " + std::strerror(errno));
  }
  fd_ = fd;
  is_device_ = S_ISCHR(st.st_mode);
  partial_.clear();
  // Reopening after an error resumes from the sequence number, not from the end.
  bool skip = options_.start_at_end && !last_seq_;
  if (is_device_) {
    // /dev/kmsg: SEEK_END moves past the last record, SEEK_SET to the oldest kept.
    ::lseek(fd_, 0, skip ? SEEK_END : SEEK_SET);
  } else {
    offset_ = skip ? static_cast<uint64_t>(st.st_size) : 0;
  }
  return Status::Ok();
}

StatusOr<std::vector<KmsgRecord>> KmsgReader::Poll() {
  if (fd_ < 0) CLUSTERD_RETURN_IF_ERROR(Open());
  std::vector<KmsgRecord> out;
  if (!is_device_) {
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) < offset_) {
      offset_ = 0;  // truncated: start over; sequence numbers drop what we already had
      partial_.clear();
    }
  }
  char buf[8192];  // /dev/kmsg records are at most about 8 KiB; a smaller read fails EINVAL
  while (out.size() < options_.max_records_per_poll) {
    ssize_t n =
        is_device_ ? ::read(fd_, buf, sizeof(buf)) : ::pread(fd_, buf, sizeof(buf), static_cast<off_t>(offset_));
    if (n > 0) {
      partial_.append(buf, static_cast<size_t>(n));
      if (is_device_ && partial_.back() != '\n') partial_.push_back('\n');
      offset_ += static_cast<uint64_t>(n);
      TakeLines(&out);
      continue;
    }
    if (n == 0) break;                                   // end of a regular file
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;  // nothing more now
    if (errno == EINTR) continue;
    if (errno == EPIPE) continue;  // /dev/kmsg: records overwritten; next read resumes, gap counted
    Status st = Unavailable("read " + options_.path + ": " + std::strerror(errno));
    Close();
    return st;
  }
  return out;
}

void KmsgReader::TakeLines(std::vector<KmsgRecord>* out) {
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    auto rec = ParseKmsgLine(std::string_view(partial_).substr(start, nl - start));
    if (!rec) continue;
    if (last_seq_ && rec->seq <= *last_seq_) continue;
    if (last_seq_ && rec->seq > *last_seq_ + 1) lost_ += rec->seq - *last_seq_ - 1;
    last_seq_ = rec->seq;
    out->push_back(std::move(*rec));
  }
  partial_.erase(0, start);
}

KernelLogCollector::KernelLogCollector(KmsgMatcher matcher, KmsgReaderOptions options)
    : matcher_(std::move(matcher)), reader_(std::move(options)) {
  for (const auto& code : matcher_.Codes()) counts_[code] = 0;
}

StatusOr<KernelReading> KernelLogCollector::Collect() {
  auto records = reader_.Poll();
  if (!records.ok()) return records.status();
  KernelReading r;
  for (auto& rec : *records) {
    if (const std::string* code = matcher_.Match(rec.message)) {
      ++counts_[*code];
      last_message_[*code] = rec.message;
      r.matches.push_back({*code, std::move(rec)});
    }
  }
  r.counts = counts_;
  r.last_message = last_message_;
  r.lost = reader_.lost();
  return r;
}

}  // namespace clusterd::noded
