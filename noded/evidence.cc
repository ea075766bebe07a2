#include "noded/evidence.h"

#include <time.h>

#include <algorithm>
#include <cctype>

#include <google/protobuf/util/time_util.h>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "noded/accel/npu_smi.h"
#include "noded/collectors/kmsg.h"

namespace clusterd::noded {

namespace {

constexpr size_t kMaxEvidenceCommands = 16;
constexpr size_t kMaxEvidenceArgs = 64;
// Bytes kept free per section for its name, flags and framing.
constexpr size_t kSectionOverhead = 256;

int64_t ClockNs(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Text as valid UTF-8 (a proto string must be): each byte of an invalid
// sequence becomes '?'.
std::string EvidenceUtf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    const auto c = static_cast<unsigned char>(in[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= in.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(in[i + k]) & 0xC0) == 0x80;
    if (!ok) {
      out.push_back('?');
      ++i;
      continue;
    }
    out.append(in.substr(i, len));
    i += len;
  }
  return out;
}

// The last max_bytes of `text`, from a line start where there is one.
std::string EvidenceTail(const std::string& text, size_t max_bytes, bool* truncated) {
  if (text.size() <= max_bytes) return text;
  *truncated = true;
  size_t from = text.size() - max_bytes;
  if (size_t nl = text.find('\n', from); nl != std::string::npos && nl + 1 < text.size()) from = nl + 1;
  return text.substr(from);
}

std::string KmsgLevelName(int level) {
  static const char* const kNames[] = {"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"};
  return level >= 0 && level < 8 ? kNames[level] : std::to_string(level);
}

}  // namespace

StatusOr<std::vector<EvidenceCommand>> ParseEvidenceCommands(const std::string& text) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("evidence commands: not a JSON object");
  if (!doc.contains("commands")) return std::vector<EvidenceCommand>{};
  const nlohmann::json& list = doc["commands"];
  if (!list.is_array()) return InvalidArgument("evidence commands: \"commands\" is not an array");
  if (list.size() > kMaxEvidenceCommands) {
    return InvalidArgument("evidence commands: at most " + std::to_string(kMaxEvidenceCommands) + " commands");
  }
  std::vector<EvidenceCommand> out;
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    const std::string where = "evidence commands[" + std::to_string(i) + "]";
    if (!e.is_object()) return InvalidArgument(where + ": not an object");
    EvidenceCommand c;
    if (!e.contains("name") || !e["name"].is_string()) return InvalidArgument(where + ".name: a string is required");
    c.name = e["name"].get<std::string>();
    const bool name_ok =
        !c.name.empty() && c.name.size() <= 64 && std::all_of(c.name.begin(), c.name.end(), [](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
        });
    if (!name_ok) return InvalidArgument(where + ".name: 1 to 64 characters of [A-Za-z0-9._-]");
    if (!names.insert(c.name).second) return InvalidArgument(where + ".name: \"" + c.name + "\" given twice");
    if (!e.contains("argv") || !e["argv"].is_array() || e["argv"].empty() || e["argv"].size() > kMaxEvidenceArgs) {
      return InvalidArgument(where + ".argv: an array of 1 to " + std::to_string(kMaxEvidenceArgs) + " strings");
    }
    for (const auto& a : e["argv"]) {
      if (!a.is_string()) return InvalidArgument(where + ".argv: not all strings");
      c.argv.push_back(a.get<std::string>());
    }
    if (c.argv[0].empty()) return InvalidArgument(where + ".argv[0]: empty");
    if (e.contains("timeout_seconds")) {
      const auto& t = e["timeout_seconds"];
      if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 600) {
        return InvalidArgument(where + ".timeout_seconds: 1 to 600");
      }
      c.timeout = std::chrono::seconds(t.get<int64_t>());
    }
    if (e.contains("max_bytes")) {
      const auto& b = e["max_bytes"];
      if (!b.is_number_integer() || b.get<int64_t>() < 1 || b.get<int64_t>() > (1 << 20)) {
        return InvalidArgument(where + ".max_bytes: 1 to 1048576");
      }
      c.max_bytes = static_cast<size_t>(b.get<int64_t>());
    }
    out.push_back(std::move(c));
  }
  return out;
}

StatusOr<std::string> KernelLogExcerpt(const std::string& path, int64_t since_unix_ns, size_t max_bytes,
                                       bool* truncated) {
  KmsgReaderOptions ko;
  ko.path = path;
  ko.start_at_end = false;
  ko.max_records_per_poll = 4096;
  KmsgReader reader(ko);
  // Boot time on the wall clock: a record's time since boot is monotonic.
  const int64_t boot_ns = ClockNs(CLOCK_REALTIME) - ClockNs(CLOCK_MONOTONIC);
  std::string text;
  // The ring buffer is bounded; a file is read to its end. At most 64 polls
  // (256 Ki records) either way.
  for (int poll = 0; poll < 64; ++poll) {
    auto records = reader.Poll();
    if (!records.ok()) return records.status();
    if (records->empty()) break;
    for (const KmsgRecord& r : *records) {
      const int64_t wall_ns = boot_ns + static_cast<int64_t>(r.timestamp_us) * 1000;
      if (wall_ns < since_unix_ns) continue;
      text += google::protobuf::util::TimeUtil::ToString(
                  google::protobuf::util::TimeUtil::NanosecondsToTimestamp(wall_ns / 1000 * 1000)) +
              " " + KmsgLevelName(r.level) + " " + r.message + "\n";
      // Keep memory bounded while reading: only the newest max_bytes matter.
      if (text.size() > 2 * max_bytes) text = EvidenceTail(text, max_bytes, truncated);
    }
  }
  return EvidenceTail(text, max_bytes, truncated);
}

EvidenceCollector::EvidenceCollector(EvidenceCollectorOptions options, Readout readout, std::function<void()> ready)
    : options_(std::move(options)), readout_(std::move(readout)), ready_(std::move(ready)) {
  worker_ = std::thread([this] { Work(); });
}

EvidenceCollector::~EvidenceCollector() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void EvidenceCollector::Submit(const v1::EvidenceRequest& req) {
  {
    std::lock_guard lock(mu_);
    if (waiting_ids_.count(req.incident_id()) != 0) return;
    if (waiting_.size() >= options_.max_queued) {
      ++dropped_;
      GetLogger("noded")->warn("evidence request for incident {} dropped: {} requests wait already",
                               req.incident_id().substr(0, 64), waiting_.size());
      return;
    }
    waiting_.push_back(req);
    waiting_ids_.insert(req.incident_id());
  }
  cv_.notify_all();
}

std::vector<v1::EvidenceBundle> EvidenceCollector::TakeReady() {
  std::lock_guard lock(mu_);
  std::vector<v1::EvidenceBundle> out;
  out.swap(ready_bundles_);
  return out;
}

uint64_t EvidenceCollector::collected() const {
  std::lock_guard lock(mu_);
  return collected_;
}

uint64_t EvidenceCollector::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

void EvidenceCollector::Work() {
  for (;;) {
    v1::EvidenceRequest req;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty(); });
      if (stop_) return;
      req = std::move(waiting_.front());
      waiting_.pop_front();
    }
    v1::EvidenceBundle bundle = Collect(req);
    {
      std::lock_guard lock(mu_);
      waiting_ids_.erase(req.incident_id());
      ready_bundles_.push_back(std::move(bundle));
      ++collected_;
    }
    if (ready_) ready_();
  }
}

v1::EvidenceBundle EvidenceCollector::Collect(const v1::EvidenceRequest& req) const {
  v1::EvidenceBundle b;
  b.set_incident_id(req.incident_id());
  b.set_node(req.node());
  size_t budget = options_.max_bytes;
  if (req.max_bytes() > 0) budget = std::min<size_t>(budget, req.max_bytes());
  // What is left for the next section's content.
  auto room = [&](size_t cap) -> size_t {
    const size_t used = b.ByteSizeLong() + kSectionOverhead + 64;  // 64: the collect time set last
    return used >= budget ? 0 : std::min(cap, budget - used);
  };
  auto add = [&](const std::string& name, const std::string& text, size_t cap, const std::string& error) {
    v1::EvidenceSection* s = b.add_sections();
    s->set_name(name);
    bool truncated = false;
    s->set_content(EvidenceUtf8(EvidenceTail(text, room(cap), &truncated)));
    // Made valid, a cut sequence may have grown by nothing: still under room.
    s->set_truncated(truncated);
    s->set_error(EvidenceUtf8(error.substr(0, 512)));
  };
  if (!options_.kmsg_path.empty()) {
    bool truncated = false;
    const int64_t since = google::protobuf::util::TimeUtil::TimestampToNanoseconds(req.since());
    // At most half the bundle: the readout and the tools keep their room.
    const size_t cap = std::min(options_.max_kmsg_bytes, budget / 2);
    auto log = KernelLogExcerpt(options_.kmsg_path, since, room(cap), &truncated);
    add("kernel-log", log.ok() ? *log : "", cap, log.ok() ? "" : log.status().ToString());
    if (truncated) b.mutable_sections(b.sections_size() - 1)->set_truncated(true);
  }
  if (readout_) {
    for (const auto& [name, text] : readout_()) add(name, text, options_.max_section_bytes, "");
  }
  for (const EvidenceCommand& c : options_.commands) {
    CaptureOptions co;
    co.max_output = std::max<size_t>(1, std::min(c.max_bytes, room(c.max_bytes)));
    co.with_stderr = true;
    co.keep_tail = true;
    auto run = RunCommandCapture(c.argv, c.timeout, co);
    std::string error;
    std::string output;
    bool cut = false;
    if (!run.ok()) {
      error = run.status().ToString();
    } else {
      output = std::move(run->output);
      cut = run->truncated;
      if (run->timed_out) {
        error = "timed out after " + std::to_string(c.timeout.count()) + " ms";
      } else if (run->signal != 0) {
        error = "ended by signal " + std::to_string(run->signal);
      } else if (run->exit_code != 0) {
        error = "exit " + std::to_string(run->exit_code);
      }
    }
    add("command/" + c.name, output, c.max_bytes, error);
    if (cut) b.mutable_sections(b.sections_size() - 1)->set_truncated(true);
  }
  *b.mutable_collect_time() = google::protobuf::util::TimeUtil::GetCurrentTime();
  return b;
}

}  // namespace clusterd::noded
