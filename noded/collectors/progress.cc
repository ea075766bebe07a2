#include "noded/collectors/progress.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <google/protobuf/util/time_util.h>
#include <nlohmann/json.hpp>

namespace clusterd::noded {
namespace {

using google::protobuf::util::TimeUtil;

constexpr size_t kMaxErrors = 16;
constexpr double kMaxSeconds = 86'400;  // a step, or its collective waits, of at most a day

// A job id as ClusterD takes it (a name: letters, digits, '.', '_', '-').
bool JobName(const std::string& s) {
  if (s.empty() || s.size() > 253 || s[0] == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// "<rank>.json" -> rank.
bool RankName(const std::string& s, uint32_t* rank) {
  constexpr std::string_view kExt = ".json";
  if (s.size() <= kExt.size() || s.size() > 10 + kExt.size() || !s.ends_with(kExt)) return false;
  uint64_t v = 0;
  for (size_t i = 0; i + kExt.size() < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  if (v > UINT32_MAX) return false;
  *rank = static_cast<uint32_t>(v);
  return true;
}

std::vector<std::string> Entries(const std::string& dir, size_t max) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    out.push_back(std::move(name));
    if (out.size() >= 4 * max) break;
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<double> Seconds(const nlohmann::json& j, const char* field) {
  const auto& v = j.at(field);
  if (!v.is_number()) return InvalidArgument(std::string(field) + ": not a number");
  const double s = v.get<double>();
  if (!std::isfinite(s) || s < 0 || s > kMaxSeconds) {
    return InvalidArgument(std::string(field) + ": must be between 0 and 86400 seconds");
  }
  return s;
}

google::protobuf::Duration ToDuration(double s) {
  return TimeUtil::NanosecondsToDuration(static_cast<int64_t>(std::llround(s * 1e9)));
}

}  // namespace

StatusOr<v1::RankProgress> ParseRankProgress(const std::string& text, uint32_t rank) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("not a JSON object");
  v1::RankProgress p;
  p.set_rank(rank);
  if (!j.contains("step") || !j["step"].is_number_unsigned()) {
    return InvalidArgument("step: required, a whole number of at least 0");
  }
  p.set_step(j["step"].get<uint64_t>());
  std::optional<double> step_time;
  if (j.contains("step_time")) {
    auto s = Seconds(j, "step_time");
    if (!s.ok()) return s.status();
    step_time = *s;
    *p.mutable_step_time() = ToDuration(*s);
  }
  if (j.contains("collective_time")) {
    auto s = Seconds(j, "collective_time");
    if (!s.ok()) return s.status();
    if (step_time && *s > *step_time) return InvalidArgument("collective_time: above step_time");
    *p.mutable_collective_time() = ToDuration(*s);
  }
  if (j.contains("time")) {
    const auto& t = j["time"];
    if (!t.is_number() || !std::isfinite(t.get<double>()) || t.get<double>() < 0 || t.get<double>() > 4102444800.0) {
      return InvalidArgument("time: unix seconds, before 2100");
    }
    *p.mutable_step_end_time() = TimeUtil::NanosecondsToTimestamp(static_cast<int64_t>(t.get<double>() * 1e9));
  }
  for (const char* f : {"samples", "tokens"}) {
    if (!j.contains(f)) continue;
    if (!j[f].is_number_unsigned()) return InvalidArgument(std::string(f) + ": a whole number of at least 0");
    if (std::string_view(f) == "samples") {
      p.set_samples(j[f].get<uint64_t>());
    } else {
      p.set_tokens(j[f].get<uint64_t>());
    }
  }
  if (j.contains("checkpointing")) {
    if (!j["checkpointing"].is_boolean()) return InvalidArgument("checkpointing: true or false");
    p.set_checkpointing(j["checkpointing"].get<bool>());
  }
  return p;
}

ProgressFiles::Pass ProgressFiles::Scan(TimePoint now) {
  Pass pass;
  if (options_.dir.empty()) return pass;
  auto error = [&](std::string e) {
    if (pass.errors.size() < kMaxErrors) pass.errors.push_back(std::move(e));
  };
  std::set<std::string> present;
  size_t jobs = 0;
  for (const std::string& job : Entries(options_.dir, options_.max_jobs)) {
    const std::string job_dir = options_.dir + "/" + job;
    struct stat st {};
    // A directory itself, never a link to one.
    if (lstat(job_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (!JobName(job)) {
      error(job_dir + ": not a job id");
      continue;
    }
    if (++jobs > options_.max_jobs) {
      error(options_.dir + ": more than " + std::to_string(options_.max_jobs) + " job directories");
      break;
    }
    v1::JobProgressReport report;
    report.set_job_id(job);
    size_t ranks = 0;
    for (const std::string& name : Entries(job_dir, options_.max_ranks_per_job)) {
      uint32_t rank = 0;
      if (!RankName(name, &rank)) continue;  // the writers' temporary files, anything else
      const std::string path = job_dir + "/" + name;
      const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) {
        if (errno == ELOOP) error(path + ": a symbolic link, not read");
        continue;
      }
      struct stat fs {};
      std::string text;
      bool ok = fstat(fd, &fs) == 0 && S_ISREG(fs.st_mode);
      if (!ok) error(path + ": not a regular file");
      const int64_t mtime = ok ? static_cast<int64_t>(fs.st_mtim.tv_sec) * 1'000'000'000 + fs.st_mtim.tv_nsec : 0;
      present.insert(path);
      Seen& seen = seen_[path];
      if (ok && mtime == seen.mtime_ns && fs.st_size == seen.size && fs.st_ino == seen.inode) ok = false;  // unchanged
      if (ok && now - TimePoint(std::chrono::nanoseconds(mtime)) > options_.max_age) ok = false;  // an old job's
      if (ok && static_cast<size_t>(fs.st_size) > options_.max_file_bytes) {
        error(path + ": " + std::to_string(fs.st_size) + " bytes, more than " +
              std::to_string(options_.max_file_bytes));
        ok = false;
      }
      if (ok) {
        text.resize(options_.max_file_bytes + 1);
        const ssize_t n = read(fd, text.data(), text.size());
        ok = n >= 0 && static_cast<size_t>(n) <= options_.max_file_bytes;
        text.resize(n > 0 ? static_cast<size_t>(n) : 0);
      }
      close(fd);
      if (!ok) continue;
      seen = Seen{mtime, fs.st_size, static_cast<uint64_t>(fs.st_ino)};
      ++pass.files_read;
      auto parsed = ParseRankProgress(text, rank);
      if (!parsed.ok()) {
        error(path + ": " + parsed.status().message());
        continue;
      }
      if (++ranks > options_.max_ranks_per_job) {
        error(job_dir + ": more than " + std::to_string(options_.max_ranks_per_job) + " ranks");
        break;
      }
      *report.mutable_report()->add_ranks() = std::move(*parsed);
    }
    if (report.report().ranks_size() > 0) pass.reports.push_back(std::move(report));
  }
  // Files gone: forgotten (a rank file written again later is new).
  for (auto it = seen_.begin(); it != seen_.end();) it = present.contains(it->first) ? std::next(it) : seen_.erase(it);
  return pass;
}

}  // namespace clusterd::noded
