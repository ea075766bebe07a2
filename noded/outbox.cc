#include "noded/outbox.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/durable_file.h"
#include "common/logging.h"
#include "common/validation.h"

namespace clusterd::noded {
namespace {

constexpr char kMagic[] = "NDOUTBX1";
constexpr size_t kMagicLen = 8;
constexpr size_t kHeaderLen = 16;
constexpr uint32_t kMaxPayload = 64u << 20;
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kWriteChunk = 1 << 20;

constexpr const char* kLogName = "outbox.log";
constexpr const char* kEpochName = "epoch";
constexpr const char* kInstanceName = "instance";
constexpr size_t kInstanceHexLen = 32;
constexpr const char* kLockName = "LOCK";

enum RecordType : uint8_t { kTransition = 1, kAck = 2, kSnapshot = 3 };

// CRC32C (Castagnoli), reflected, table driven.
constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

uint32_t Crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string JoinPath(const std::string& dir, const char* name) { return dir + "/" + name; }

// `what` is a literal so that building the arguments cannot clobber errno.
Status ErrnoStatus(const char* what, const std::string& path, int err) {
  return Internal(std::string("outbox: ") + what + " " + path + ": " + std::strerror(err));
}

// An error of common/durable_file.h, prefixed as the outbox's own are.
Status Outboxed(Status s) {
  if (s.ok()) return s;
  return {s.code(), "outbox: " + s.message()};
}

// Appends the encoded record (header + payload) to *out.
void EncodeRecord(uint8_t type, const std::string& payload, std::string* out) {
  std::string header;
  header.reserve(kHeaderLen);
  PutU32(&header, static_cast<uint32_t>(payload.size()));
  header.push_back(static_cast<char>(type));
  header.append(3, '\0');
  PutU32(&header, Crc32c(header.data(), 8));
  PutU32(&header, Crc32c(payload.data(), payload.size()));
  out->append(header);
  out->append(payload);
}

Status SyncFd(int fd, const std::string& path) { return Outboxed(SyncFile(fd, path, SyncKind::kData)); }

Status SyncDir(const std::string& dir) { return Outboxed(SyncDirectory(dir)); }

// Replaces dir/name with content durably (common/durable_file.h).
Status ReplaceFile(const std::string& dir, const char* name, std::string_view content) {
  return Outboxed(WriteFileDurably(JoinPath(dir, name), content));
}

// Reads a small file whole (at most max bytes are looked at); nullopt when it
// does not exist.
StatusOr<std::optional<std::string>> ReadSmallFile(const std::string& path, size_t max) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return ErrnoStatus("open", path, errno);
  }
  std::string text(max, '\0');
  size_t got = 0;
  Status st = Status::Ok();
  while (got < max) {
    ssize_t r = ::read(fd, text.data() + got, max - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      st = ErrnoStatus("read", path, errno);
      break;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  CLUSTERD_RETURN_IF_ERROR(st);
  text.resize(got);
  return std::optional<std::string>(std::move(text));
}

// 128 random bits from the kernel, as lowercase hex.
StatusOr<std::string> NewInstanceId() {
  unsigned char bytes[kInstanceHexLen / 2];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t r = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Internal(std::string("outbox: getrandom: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(r);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xF]);
  }
  return out;
}

// Reads a file through a window of at least kReadChunk bytes, so that replay
// never holds the whole log in memory.
class ChunkReader {
 public:
  ChunkReader(int fd, uint64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}

  uint64_t size() const { return size_; }
  void set_size(uint64_t size) {
    size_ = size;
    buf_.clear();
  }

  // Points *out at n bytes at off. Returns false (and an Ok *st) when the file
  // ends first; false with an error *st on an I/O error.
  bool At(uint64_t off, size_t n, const char** out, Status* st) {
    *st = Status::Ok();
    if (off > size_ || n > size_ - off) return false;
    if (off < buf_off_ || off + n > buf_off_ + buf_.size()) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(std::max(n, kReadChunk), size_ - off));
      buf_.resize(want);
      size_t got = 0;
      while (got < want) {
        ssize_t r = ::pread(fd_, buf_.data() + got, want - got, static_cast<off_t>(off + got));
        if (r < 0) {
          if (errno == EINTR) continue;
          *st = ErrnoStatus("read", path_, errno);
          buf_.clear();
          return false;
        }
        if (r == 0) break;
        got += static_cast<size_t>(r);
      }
      buf_.resize(got);
      buf_off_ = off;
      if (got < n) return false;  // shrank underneath us
    }
    *out = buf_.data() + (off - buf_off_);
    return true;
  }

 private:
  int fd_;
  uint64_t size_;
  std::string path_;
  uint64_t buf_off_ = 0;
  std::string buf_;
};

struct RecordView {
  uint8_t type = 0;
  uint64_t total = 0;  // header + payload
  std::string payload;
};

enum class Probe {
  kValid,       // checksums match, entirely inside the file
  kBadHeader,   // incomplete header, or its checksum/padding/length is wrong
  kTruncated,   // valid header, but the payload runs past the end of the file
  kBadPayload,  // valid header, payload checksum mismatch (rec->total is known)
  kIoError,     // *st says why
};

Probe ProbeRecordAt(ChunkReader& r, uint64_t off, RecordView* rec, Status* st) {
  const char* h = nullptr;
  if (!r.At(off, kHeaderLen, &h, st)) return st->ok() ? Probe::kBadHeader : Probe::kIoError;
  if (GetU32(h + 8) != Crc32c(h, 8)) return Probe::kBadHeader;
  if (h[5] != 0 || h[6] != 0 || h[7] != 0) return Probe::kBadHeader;
  const uint32_t len = GetU32(h);
  if (len > kMaxPayload) return Probe::kBadHeader;
  const uint8_t type = static_cast<uint8_t>(h[4]);
  const uint32_t pcrc = GetU32(h + 12);
  rec->type = type;
  rec->total = kHeaderLen + len;
  const char* p = nullptr;
  if (!r.At(off + kHeaderLen, len, &p, st)) return st->ok() ? Probe::kTruncated : Probe::kIoError;
  if (Crc32c(p, len) != pcrc) return Probe::kBadPayload;
  rec->payload.assign(p, len);
  return Probe::kValid;
}

std::string EncodeSnapshot(uint64_t epoch, const std::vector<v1::FaultReport>& active) {
  std::string out;
  PutU64(&out, epoch);
  PutU32(&out, static_cast<uint32_t>(active.size()));
  std::string one;
  for (const auto& f : active) {
    one.clear();
    f.SerializeToString(&one);
    PutU32(&out, static_cast<uint32_t>(one.size()));
    out.append(one);
  }
  return out;
}

bool DecodeSnapshot(const std::string& payload, uint64_t* epoch, std::vector<v1::FaultReport>* active) {
  if (payload.size() < 12) return false;
  *epoch = GetU64(payload.data());
  const uint32_t count = GetU32(payload.data() + 8);
  size_t pos = 12;
  active->clear();
  for (uint32_t i = 0; i < count; ++i) {
    if (payload.size() - pos < 4) return false;
    const uint32_t len = GetU32(payload.data() + pos);
    pos += 4;
    if (payload.size() - pos < len) return false;
    v1::FaultReport f;
    if (!f.ParseFromArray(payload.data() + pos, static_cast<int>(len))) return false;
    pos += len;
    active->push_back(std::move(f));
  }
  return pos == payload.size();
}

bool ValidAction(v1::TransitionAction a) {
  return a == v1::TRANSITION_ACTION_RAISE || a == v1::TRANSITION_ACTION_CLEAR;
}

}  // namespace

Outbox::Outbox(std::string dir, Options options) : dir_(std::move(dir)), options_(options) {}

Outbox::~Outbox() {
  if (log_fd_ >= 0) ::close(log_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

StatusOr<std::unique_ptr<Outbox>> Outbox::Open(const std::string& state_dir) { return Open(state_dir, Options{}); }

StatusOr<std::unique_ptr<Outbox>> Outbox::Open(const std::string& state_dir, Options options) {
  auto log = GetLogger("outbox");
  if (state_dir.empty()) return InvalidArgument("outbox: empty state dir");
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return Internal("outbox: create directory " + state_dir + ": " + ec.message());

  std::unique_ptr<Outbox> box(new Outbox(state_dir, options));
  std::lock_guard<std::mutex> lock(box->mu_);

  // One agent per state dir.
  const std::string lock_path = JoinPath(state_dir, kLockName);
  box->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (box->lock_fd_ < 0) return ErrnoStatus("open", lock_path, errno);
  while (::flock(box->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return FailedPrecondition("outbox: " + state_dir + " is in use by another agent");
    return ErrnoStatus("lock", lock_path, errno);
  }
  // Leftovers of an interrupted replace or compaction; the real files are
  // intact. Safe under the lock: no other agent writes here. Only disk space
  // is at stake, so a failure is a warning.
  for (const char* name : {kEpochName, kLogName, kInstanceName}) {
    const std::string path = JoinPath(state_dir, name);
    if (Status s = RemoveStaleTempFiles(path); !s.ok()) log->warn("outbox: {}", s.message());
    ::unlink((path + ".tmp").c_str());  // the one temp name of agents before durable_file.h
  }

  // Persisted epoch.
  uint64_t file_epoch = 0;
  const std::string epoch_path = JoinPath(state_dir, kEpochName);
  {
    auto text = ReadSmallFile(epoch_path, 64);
    if (!text.ok()) return text.status();
    if (*text) {
      std::string digits = **text;
      bool valid = digits.size() >= 2 && digits.size() <= 21 && digits.back() == '\n';
      if (valid) digits.pop_back();
      for (char c : digits) valid = valid && c >= '0' && c <= '9';
      if (valid) {
        errno = 0;
        file_epoch = std::strtoull(digits.c_str(), nullptr, 10);
        valid = errno == 0;
      }
      if (!valid) return DataLoss("outbox: " + epoch_path + " is corrupt (expected a decimal epoch)");
    }
  }

  // The incarnation of this state dir: made once, never changed. A wiped or
  // new state dir gets a new one, so ClusterD knows that epochs and sequences
  // start over and that nothing it stored for the node's earlier incarnation
  // acknowledges them.
  const std::string instance_path = JoinPath(state_dir, kInstanceName);
  {
    auto text = ReadSmallFile(instance_path, 64);
    if (!text.ok()) return text.status();
    if (*text) {
      std::string hex = **text;
      bool valid = hex.size() == kInstanceHexLen + 1 && hex.back() == '\n';
      if (valid) hex.pop_back();
      for (char c : hex) valid = valid && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
      if (!valid) return DataLoss("outbox: " + instance_path + " is corrupt (expected 32 lowercase hex digits)");
      box->instance_ = hex;
    } else {
      auto made = NewInstanceId();
      if (!made.ok()) return made.status();
      CLUSTERD_RETURN_IF_ERROR(ReplaceFile(state_dir, kInstanceName, *made + "\n"));
      box->instance_ = *made;
      log->info("outbox: new agent instance {} in {}", box->instance_, state_dir);
    }
  }

  uint64_t log_epoch = 0;
  CLUSTERD_RETURN_IF_ERROR(box->Replay(&log_epoch));
  if (file_epoch < log_epoch) {
    log->warn("outbox: {} says epoch {} but {} holds epoch {}; continuing above the latter", epoch_path, file_epoch,
              kLogName, log_epoch);
  }
  const uint64_t base = std::max(file_epoch, log_epoch);
  if (base == UINT64_MAX) return DataLoss("outbox: epoch space exhausted in " + state_dir);
  box->epoch_ = base + 1;
  box->next_seq_ = 1;
  CLUSTERD_RETURN_IF_ERROR(ReplaceFile(state_dir, kEpochName, std::to_string(box->epoch_) + "\n"));
  log->info("outbox: opened {} at epoch {}: {} pending transition(s), {} active fault(s), {} log record(s)", state_dir,
            box->epoch_, box->pending_.size(), box->active_.size(), box->log_records_);
  if (box->pending_.size() > options.max_pending) {
    log->warn("outbox: {} pending transitions exceed max_pending {}; keeping all, refusing new ones until acked",
              box->pending_.size(), options.max_pending);
  }
  box->MaybeCompactLocked();
  return box;
}

Status Outbox::Replay(uint64_t* max_epoch_seen) {
  auto log = GetLogger("outbox");
  const std::string path = log_path();
  *max_epoch_seen = 0;

  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    CLUSTERD_RETURN_IF_ERROR(ReplaceFile(dir_, kLogName, std::string_view(kMagic, kMagicLen)));
    fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  }
  if (fd < 0) return ErrnoStatus("open", path, errno);
  log_fd_ = fd;

  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat", path, errno);
  ChunkReader reader(fd, static_cast<uint64_t>(st.st_size), path);
  Status io = Status::Ok();

  const char* m = nullptr;
  if (!reader.At(0, kMagicLen, &m, &io)) {
    CLUSTERD_RETURN_IF_ERROR(io);
    // Shorter than the magic: only a prefix of it (or nothing) is acceptable.
    std::string head(static_cast<size_t>(reader.size()), '\0');
    if (!head.empty() && ::pread(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
      return ErrnoStatus("read", path, errno);
    }
    if (head != std::string(kMagic, head.size())) return DataLoss("outbox: " + path + " is not an outbox log");
    log->warn("outbox: {} is truncated to {} bytes; reinitialising it", path, head.size());
    if (::ftruncate(fd, 0) != 0) return ErrnoStatus("truncate", path, errno);
    CLUSTERD_RETURN_IF_ERROR(Outboxed(WriteAll(fd, std::string_view(kMagic, kMagicLen), path)));
    CLUSTERD_RETURN_IF_ERROR(SyncFd(fd, path));
    log_size_ = kMagicLen;
    log_records_ = 0;
    return Status::Ok();
  }
  if (std::memcmp(m, kMagic, kMagicLen) != 0) return DataLoss("outbox: " + path + " is not an outbox log (bad magic)");

  uint64_t off = kMagicLen;
  size_t records = 0;
  RecordView rec;
  while (off < reader.size()) {
    const Probe probe = ProbeRecordAt(reader, off, &rec, &io);
    if (probe == Probe::kIoError) return io;
    if (probe == Probe::kValid) {
      const std::string where = path + " at offset " + std::to_string(off);
      switch (rec.type) {
        case kTransition: {
          v1::FaultTransition t;
          if (!t.ParseFromString(rec.payload) || !t.has_id() || t.id().epoch() == 0 || t.id().seq() == 0 ||
              !ValidAction(t.action())) {
            return DataLoss("outbox: bad transition record in " + where);
          }
          *max_epoch_seen = std::max(*max_epoch_seen, t.id().epoch());
          PendingKey key{t.id().epoch(), t.id().seq()};
          if (pending_.count(key) != 0) {
            log->warn("outbox: duplicate transition {}/{} in {}; keeping the first", key.first, key.second, where);
            break;
          }
          ApplyToActive(t);
          pending_.emplace(key, std::move(t));
          break;
        }
        case kAck: {
          if (rec.payload.size() != 16) return DataLoss("outbox: bad ack record in " + where);
          const uint64_t e = GetU64(rec.payload.data());
          const uint64_t s = GetU64(rec.payload.data() + 8);
          *max_epoch_seen = std::max(*max_epoch_seen, e);
          pending_.erase(pending_.lower_bound({e, 0}), pending_.upper_bound({e, s}));
          break;
        }
        case kSnapshot: {
          uint64_t e = 0;
          std::vector<v1::FaultReport> faults;
          if (!DecodeSnapshot(rec.payload, &e, &faults)) return DataLoss("outbox: bad snapshot record in " + where);
          *max_epoch_seen = std::max(*max_epoch_seen, e);
          active_.clear();
          for (auto& f : faults) {
            FaultKey k = KeyOf(f);
            active_[k] = std::move(f);
          }
          break;
        }
        default: return DataLoss("outbox: unknown record type " + std::to_string(rec.type) + " in " + where);
      }
      off += rec.total;
      ++records;
      continue;
    }
    // A bad record at off. Torn tail or corruption in the middle? It is torn
    // when no valid record follows it. A record with a valid header is skipped
    // as a whole (its payload is never probed); a record that runs past the end
    // of the file is torn by definition.
    if (probe != Probe::kTruncated) {
      for (uint64_t at = probe == Probe::kBadPayload ? off + rec.total : off + 1; at + kHeaderLen <= reader.size();
           ++at) {
        RecordView later;
        const Probe p = ProbeRecordAt(reader, at, &later, &io);
        if (p == Probe::kIoError) return io;
        if (p == Probe::kValid) {
          return DataLoss("outbox: corrupt record in " + path + " at offset " + std::to_string(off) +
                          " (a valid record follows at offset " + std::to_string(at) + ", so it is not a torn tail)");
        }
      }
    }
    log->warn("outbox: {}: dropping a torn tail of {} byte(s) at offset {} (an interrupted write)", path,
              reader.size() - off, off);
    if (::ftruncate(fd, static_cast<off_t>(off)) != 0) return ErrnoStatus("truncate", path, errno);
    CLUSTERD_RETURN_IF_ERROR(SyncFd(fd, path));
    reader.set_size(off);
    break;
  }
  log_size_ = off;
  log_records_ = records;
  return Status::Ok();
}

Outbox::FaultKey Outbox::KeyOf(const v1::FaultReport& f) {
  return FaultKey{f.has_device_id(), f.has_device_id() ? f.device_id() : 0u, static_cast<int>(f.source()), f.code(),
                  f.subject()};
}

void Outbox::ApplyToActive(const v1::FaultTransition& t) {
  FaultKey key = KeyOf(t.fault());
  if (t.action() == v1::TRANSITION_ACTION_RAISE) {
    active_[key] = t.fault();
  } else if (t.action() == v1::TRANSITION_ACTION_CLEAR) {
    active_.erase(key);
  }
}

const std::string& Outbox::instance_id() const { return instance_; }

uint64_t Outbox::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

std::string Outbox::log_path() const { return JoinPath(dir_, kLogName); }

size_t Outbox::log_records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_records_;
}

size_t Outbox::pending_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

std::vector<v1::FaultReport> Outbox::ActiveLocked() const {
  std::vector<v1::FaultReport> out;
  out.reserve(active_.size());
  for (const auto& [key, f] : active_) out.push_back(f);
  return out;
}

std::vector<v1::FaultReport> Outbox::Active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ActiveLocked();
}

Outbox::Snapshot Outbox::Take() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot snap;
  snap.active = ActiveLocked();
  snap.pending.reserve(pending_.size());
  for (const auto& [key, t] : pending_) snap.pending.push_back(Pending{key.first, key.second, t});
  return snap;
}

std::vector<Outbox::Pending> Outbox::PendingAfter(uint64_t epoch, uint64_t seq, size_t max) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Pending> out;
  for (auto it = pending_.upper_bound({epoch, seq}); it != pending_.end() && out.size() < max; ++it) {
    out.push_back(Pending{it->first.first, it->first.second, it->second});
  }
  return out;
}

StatusOr<std::optional<v1::FaultTransition>> Outbox::Record(v1::FaultTransition t) {
  if (!ValidAction(t.action())) return InvalidArgument("outbox: transition action must be RAISE or CLEAR");
  if (t.fault().code().empty()) return InvalidArgument("outbox: transition without a fault code");

  {
    auto* f = t.mutable_fault();
    // proto3 refuses to parse a string field that is not UTF-8, so a
    // transition stored with such bytes (a kernel log line, say) could never
    // be replayed; ClusterD refuses control characters in a subject (part of
    // the fault's identity).
    // Each field is repaired, so no short-circuit here.
    const bool code_fixed = SanitizeUtf8(f->mutable_code());
    const bool message_fixed = SanitizeUtf8(f->mutable_message());
    const bool subject_fixed = SanitizeLine(f->mutable_subject());
    const bool fixed = code_fixed || message_fixed || subject_fixed;
    if (fixed) GetLogger("outbox")->warn("outbox: replaced invalid UTF-8 or control characters in fault {}", f->code());
  }

  std::lock_guard<std::mutex> lock(mu_);
  const FaultKey key = KeyOf(t.fault());
  auto it = active_.find(key);
  if (t.action() == v1::TRANSITION_ACTION_RAISE) {
    if (it != active_.end() && it->second.level() == t.fault().level() && it->second.message() == t.fault().message()) {
      return std::optional<v1::FaultTransition>();
    }
  } else if (it == active_.end()) {
    return std::optional<v1::FaultTransition>();
  }
  if (!broken_.ok()) return broken_;
  if (pending_.size() >= options_.max_pending) {
    return ResourceExhausted("outbox: " + std::to_string(pending_.size()) +
                             " transitions await acknowledgement (max_pending); retry after acks");
  }

  t.mutable_id()->set_epoch(epoch_);
  t.mutable_id()->set_seq(next_seq_);
  if (!t.has_time()) {
    const Clock& clock = options_.clock != nullptr ? *options_.clock : SystemClock::Instance();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock.Now().time_since_epoch()).count();
    t.mutable_time()->set_seconds(ns / 1'000'000'000);
    t.mutable_time()->set_nanos(static_cast<int32_t>(ns % 1'000'000'000));
  }
  std::string payload;
  if (!t.SerializeToString(&payload)) return Internal("outbox: cannot serialize transition");
  CLUSTERD_RETURN_IF_ERROR(AppendLocked(kTransition, payload));

  ++next_seq_;
  ApplyToActive(t);
  pending_.emplace(PendingKey{epoch_, next_seq_ - 1}, t);
  MaybeCompactLocked();
  return std::optional<v1::FaultTransition>(std::move(t));
}

Status Outbox::Ack(uint64_t epoch, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  auto first = pending_.lower_bound({epoch, 0});
  auto last = pending_.upper_bound({epoch, seq});
  if (epoch == 0 || seq == 0 || first == last) return Status::Ok();  // nothing to drop
  if (!broken_.ok()) return broken_;
  if (epoch == epoch_ && seq >= next_seq_) {
    GetLogger("outbox")->warn("outbox: ack of {}/{} beyond the last transition issued ({})", epoch, seq, next_seq_ - 1);
  }
  std::string payload;
  PutU64(&payload, epoch);
  PutU64(&payload, seq);
  CLUSTERD_RETURN_IF_ERROR(AppendLocked(kAck, payload));
  pending_.erase(first, last);
  MaybeCompactLocked();
  return Status::Ok();
}

Status Outbox::AppendLocked(uint8_t type, const std::string& payload) {
  const std::string path = log_path();
  if (payload.size() > kMaxPayload) return InvalidArgument("outbox: record too large");
  std::string rec;
  rec.reserve(kHeaderLen + payload.size());
  EncodeRecord(type, payload, &rec);
  Status w = Outboxed(WriteAll(log_fd_, rec, path));
  if (!w.ok()) {
    // Roll back a partial append so that later records never follow garbage.
    if (::ftruncate(log_fd_, static_cast<off_t>(log_size_)) != 0) {
      const int err = errno;
      broken_ = ErrnoStatus("roll back a failed append to", path, err);
      GetLogger("outbox")->error("{} (after: {}); refusing further writes", broken_.message(), w.message());
    }
    return w;
  }
  Status s = SyncFd(log_fd_, path);
  if (!s.ok()) {
    // The kernel may have dropped the dirty pages: the on-disk state is unknown.
    broken_ = s;
    GetLogger("outbox")->error("{}; refusing further writes until restart", s.message());
    return s;
  }
  log_size_ += rec.size();
  ++log_records_;
  return Status::Ok();
}

void Outbox::MaybeCompactLocked() {
  const size_t live = pending_.size() + 1;
  if (log_records_ <= options_.compact_after_records || log_records_ < 2 * live) return;
  Status s = CompactLocked();
  if (!s.ok()) GetLogger("outbox")->warn("outbox: compaction failed, keeping the current log: {}", s.message());
}

Status Outbox::Compact() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  return CompactLocked();
}

Status Outbox::CompactLocked() {
  const std::string path = log_path();
  // A fresh name each time: a crash leaves it for RemoveStaleTempFiles at Open.
  const std::string tmp = TempPathFor(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return ErrnoStatus("create", tmp, err);
  }
  auto fail = [&](Status s) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };

  std::string buf(kMagic, kMagicLen);
  uint64_t size = 0;
  size_t records = 0;
  auto flush = [&]() -> Status {
    Status s = Outboxed(WriteAll(fd, buf, tmp));
    size += buf.size();
    buf.clear();
    return s;
  };
  std::string payload;
  for (const auto& [key, t] : pending_) {
    payload.clear();
    if (!t.SerializeToString(&payload)) return fail(Internal("outbox: cannot serialize transition"));
    EncodeRecord(kTransition, payload, &buf);
    ++records;
    if (buf.size() >= kWriteChunk) {
      Status s = flush();
      if (!s.ok()) return fail(s);
    }
  }
  EncodeRecord(kSnapshot, EncodeSnapshot(epoch_, ActiveLocked()), &buf);
  ++records;
  Status s = flush();
  if (s.ok()) s = SyncFd(fd, tmp);
  if (!s.ok()) return fail(s);
  // Checked: a file system that reports write-back errors only at close would
  // otherwise have us replace a good log with a bad one.
  Status closed = Outboxed(CloseFile(fd, tmp));
  fd = -1;
  if (!closed.ok()) return fail(closed);

  // Open the new log for appending before it replaces the old one, so that no
  // failure can leave us without a usable descriptor after the rename.
  int new_fd = ::open(tmp.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (new_fd < 0) {
    const int err = errno;
    return fail(ErrnoStatus("open", tmp, err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::close(new_fd);
    return fail(ErrnoStatus("rename", tmp, err));
  }
  const uint64_t old_size = log_size_;
  // Every append to the old log was fdatasync'ed, so its close loses nothing;
  // a failure is only worth a line in the log.
  if (Status c = CloseFile(log_fd_, path); !c.ok()) GetLogger("outbox")->warn("outbox: old log: {}", c.message());
  log_fd_ = new_fd;
  log_size_ = size;
  log_records_ = records;
  // Until the directory is synced the rename may not survive a power loss, and
  // appends to the new file would then be lost with it: refuse further writes.
  Status d = SyncDir(dir_);
  if (!d.ok()) {
    broken_ = d;
    GetLogger("outbox")->error("{}; refusing further writes until restart", d.message());
  }
  GetLogger("outbox")->info("outbox: compacted {} from {} to {} bytes ({} records)", path, old_size, size, records);
  return Status::Ok();
}

}  // namespace clusterd::noded
