#include "clusterd/progress/tracker.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <google/protobuf/util/time_util.h>

#include "common/time_proto.h"

namespace clusterd::progress {
namespace {

using google::protobuf::util::TimeUtil;
using std::chrono::duration_cast;
using std::chrono::seconds;

constexpr int64_t kMaxDurationNanos = int64_t{86'400} * 1'000'000'000;  // one day
constexpr int64_t kMaxEndSeconds = 4'102'444'800;                       // 2100-01-01

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }
Duration FromSeconds(double s) { return duration_cast<Duration>(std::chrono::duration<double>(s)); }

google::protobuf::Duration ToProto(Duration d) { return TimeUtil::NanosecondsToDuration(d.count()); }
Duration FromProto(const google::protobuf::Duration& d) { return Duration(TimeUtil::DurationToNanoseconds(d)); }

bool ValidDuration(const google::protobuf::Duration& d) {
  return d.seconds() >= 0 && d.nanos() >= 0 && d.nanos() < 1'000'000'000 &&
         TimeUtil::DurationToNanoseconds(d) <= kMaxDurationNanos;
}

// a + b, or UINT64_MAX when that does not fit: a job's running totals of
// samples and tokens stop at the top rather than wrap to a small number.
uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

// The median of v (reordered); 0 for none.
double MedianOf(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  }
  return m;
}

}  // namespace

Settings SettingsOf(const v1::ProgressPolicy& p) {
  Settings s;
  if (p.has_hang_timeout()) s.hang_timeout = FromProto(p.hang_timeout());
  if (p.hang_action() != v1::HANG_ACTION_UNSPECIFIED) s.hang_action = p.hang_action();
  if (p.slow_threshold_percent() > 0) s.slow_threshold = p.slow_threshold_percent() / 100.0;
  if (p.slow_window() > 0) s.window = std::min<size_t>(p.slow_window(), kMaxWindow);
  if (p.warmup_reports() > 0) s.warmup_reports = std::min<size_t>(p.warmup_reports(), 1000);
  s.disabled = p.disabled();
  return s;
}

Status ValidateReport(const v1::ProgressReport& report, const std::function<bool(uint32_t)>& placed) {
  if (report.ranks_size() == 0) return InvalidArgument("progress.ranks: empty");
  if (static_cast<size_t>(report.ranks_size()) > kMaxRanksPerReport) {
    return InvalidArgument("progress.ranks: " + std::to_string(report.ranks_size()) + " ranks, at most " +
                           std::to_string(kMaxRanksPerReport) + " per report");
  }
  std::set<uint32_t> seen;
  for (const auto& r : report.ranks()) {
    const std::string where = "progress.ranks[rank " + std::to_string(r.rank()) + "]";
    if (!seen.insert(r.rank()).second) return InvalidArgument(where + ": reported twice");
    if (!placed(r.rank())) return InvalidArgument(where + ": not a rank of the job");
    if (r.step() > kMaxStep) {
      return InvalidArgument(where + ".step: " + std::to_string(r.step()) + " is above " + std::to_string(kMaxStep));
    }
    if (r.has_step_time() && !ValidDuration(r.step_time())) {
      return InvalidArgument(where + ".step_time: must be between 0 and one day");
    }
    if (r.has_collective_time()) {
      if (!ValidDuration(r.collective_time())) {
        return InvalidArgument(where + ".collective_time: must be between 0 and one day");
      }
      if (r.has_step_time() &&
          TimeUtil::DurationToNanoseconds(r.collective_time()) > TimeUtil::DurationToNanoseconds(r.step_time())) {
        return InvalidArgument(where + ".collective_time: above its step_time");
      }
    }
    if (r.has_step_end_time()) {
      const auto& t = r.step_end_time();
      // 1970 to 2100: nanoseconds since the epoch fit in 64 bits.
      if (t.seconds() < 0 || t.seconds() > kMaxEndSeconds || t.nanos() < 0 || t.nanos() >= 1'000'000'000) {
        return InvalidArgument(where + ".step_end_time: not a time between 1970 and 2100");
      }
    }
  }
  return Status::Ok();
}

void JobTracker::Rank::Push(float v, size_t size) {
  window[next] = v;
  next = static_cast<uint8_t>((next + 1) % size);
  if (filled < size) ++filled;
}

float JobTracker::Rank::Median(size_t size) const {
  std::array<float, kMaxWindow> copy = window;
  const size_t n = std::min<size_t>(filled, size);
  const size_t mid = n / 2;
  std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(mid),
                   copy.begin() + static_cast<std::ptrdiff_t>(n));
  return copy[mid];
}

uint32_t JobTracker::SenderIndex(std::string_view sender) {
  auto it = sender_index_.find(std::string(sender));
  if (it != sender_index_.end()) return it->second;
  const auto index = static_cast<uint32_t>(senders_.size());
  senders_.emplace_back(sender);
  sender_index_.emplace(std::string(sender), index);
  return index;
}

void JobTracker::MoveStep(std::optional<uint64_t> from, uint64_t to) {
  if (from) {
    auto it = steps_.find(*from);
    if (it != steps_.end() && --it->second == 0) steps_.erase(it);
  }
  ++steps_[to];
}

void JobTracker::Ingest(const v1::ProgressReport& report, TimePoint now, std::string_view sender) {
  if (!since_) since_ = now;
  bool advanced = false;
  const size_t window = std::clamp<size_t>(settings_.window, 1, kMaxWindow);
  const uint32_t from = SenderIndex(sender);
  for (const auto& r : report.ranks()) {
    auto [it, created] = ranks_.try_emplace(r.rank());
    Rank& k = it->second;
    k.last_report = now;
    k.sender = from;
    if (k.checkpointing != r.checkpointing()) checkpointing_ranks_ += r.checkpointing() ? 1 : -1;
    k.checkpointing = r.checkpointing();
    samples_ = SaturatingAdd(samples_, r.samples());
    tokens_ = SaturatingAdd(tokens_, r.tokens());
    const std::optional<TimePoint> end =
        r.has_step_end_time() ? std::optional<TimePoint>(FromTimestamp(r.step_end_time())) : std::nullopt;
    if (k.has_step && r.step() < k.step) {
      // Restarted (from a checkpoint): its history starts again, and so
      // does the job's notion of "behind" (steps_ holds where ranks are
      // now, not the highest step ever).
      MoveStep(k.step, r.step());
      k.step = r.step();
      k.agent_end = end;
      k.filled = k.next = 0;
      k.reports = 0;
      continue;
    }
    if (k.has_step && r.step() == k.step) continue;
    // A step the rank had not reported: a sample of its step time.
    std::optional<double> sample;
    if (r.has_step_time()) {
      sample = Seconds(FromProto(r.step_time()));
    } else if (k.has_step && end && k.agent_end && *end > *k.agent_end) {
      sample = Seconds(*end - *k.agent_end) / static_cast<double>(r.step() - k.step);
    }
    if (sample && r.has_collective_time()) {
      const double wait = Seconds(FromProto(r.collective_time()));
      sample = std::max(0.0, *sample - (r.has_step_time() ? wait : wait / std::max<double>(1, r.step() - k.step)));
    }
    if (k.has_step) advanced = true;
    if (sample && k.reports >= settings_.warmup_reports) {
      k.Push(static_cast<float>(*sample), window);
      samples_changed_ = true;
    }
    if (k.reports < UINT16_MAX) ++k.reports;
    MoveStep(k.has_step ? std::optional<uint64_t>(k.step) : std::nullopt, r.step());
    k.has_step = true;
    k.step = r.step();
    k.agent_end = end;
  }
  if (advanced) OnAdvance(now);
}

Duration JobTracker::NormalGap() const {
  if (gap_count_ == 0) return Duration(0);
  std::vector<double> v;
  for (size_t i = 0; i < std::min(gap_count_, gaps_.size()); ++i) v.push_back(static_cast<double>(gaps_[i].count()));
  return Duration(static_cast<Duration::rep>(MedianOf(v)));
}

Duration JobTracker::StallAfter() const {
  const Duration normal = NormalGap();
  if (normal == Duration(0)) return HangTimeout();
  return std::min(std::max(3 * normal, normal + Duration(seconds(10))), HangTimeout());
}

Duration JobTracker::HangTimeout() const {
  // A policy's timeout, but never below two report intervals (a job cannot
  // advance more often than it reports).
  if (settings_.hang_timeout > Duration(0)) return std::max(settings_.hang_timeout, 2 * NormalGap());
  Duration t = kMinHangTimeout;
  if (median_step_ > 0) t = std::max(t, FromSeconds(10 * median_step_));
  return std::max(t, 3 * NormalGap());
}

void JobTracker::Charge(Duration lost, const std::string& cause) {
  if (lost <= Duration(0)) return;
  lost_ += lost;
  std::string key = cause.empty() ? "stalled" : cause;
  if (!lost_by_cause_.contains(key) && lost_by_cause_.size() >= kMaxCauses) key = "other";
  Lost& l = lost_by_cause_[key];
  l.lost += lost;
  ++l.count;
}

void JobTracker::OnAdvance(TimePoint now) {
  if (last_advance_) {
    const Duration gap = std::max(Duration(0), now - *last_advance_);
    const Duration normal = NormalGap();  // 0 before two advances
    if (gap > StallAfter()) {
      // An interruption: one normal interval of it was work, the rest lost.
      productive_ += normal;
      Charge(gap - normal, open_cause_);
      interruptions_.push_back(
          Gap{*last_advance_ + normal, gap - normal, open_cause_.empty() ? "stalled" : open_cause_});
      if (interruptions_.size() > kMaxInterruptions) interruptions_.pop_front();
    } else {
      productive_ += gap;
      gaps_[gap_count_ % gaps_.size()] = gap;
      ++gap_count_;
    }
  }
  last_advance_ = now;
  open_cause_.clear();
}

std::optional<TimePoint> JobTracker::HangDue() const {
  if (!last_advance_ || settings_.disabled || last_.state == v1::PROGRESS_STATE_HUNG) return std::nullopt;
  const bool checkpointing = checkpointing_ranks_ > 0;
  TimePoint due = *last_advance_ + (checkpointing ? 10 : 1) * HangTimeout();
  if (recovering_seen_) due = std::max(due, *recovering_seen_ + kRestartGraceTimeouts * HangTimeout());
  return due + Duration(std::chrono::milliseconds(1));
}

bool JobTracker::Stalled(TimePoint now) const {
  return last_advance_.has_value() && now - *last_advance_ > StallAfter();
}

template <typename Behind, typename Ahead>
std::vector<uint32_t> JobTracker::Blame(const Behind& behind, const Ahead& ahead) const {
  // A sender's word moves its own ranks: its rank is blamed when another
  // rank of the same sender is ahead of it (the job agent speaks for every
  // rank, so for it this is the plain comparison), or when at least two
  // other senders, more than half of the others, have a rank ahead. One
  // node claiming to be ahead (or reporting on after the others stopped)
  // cannot put a hang on another node: the hang then names no rank.
  std::vector<char> present(senders_.size(), 0), has_ahead(senders_.size(), 0);
  for (const auto& [id, k] : ranks_) {
    present[k.sender] = 1;
    if (ahead(k)) has_ahead[k.sender] = 1;
  }
  const auto senders = static_cast<size_t>(std::count(present.begin(), present.end(), 1));
  const auto ahead_senders = static_cast<size_t>(std::count(has_ahead.begin(), has_ahead.end(), 1));
  std::vector<uint32_t> out;
  for (const auto& [id, k] : ranks_) {
    if (!behind(k)) continue;
    const bool own = has_ahead[k.sender] != 0;
    const size_t others = senders - 1;
    const size_t others_ahead = ahead_senders - (own ? 1 : 0);
    if (own || (others_ahead >= 2 && 2 * others_ahead > others)) out.push_back(id);
  }
  return out;
}

std::vector<uint32_t> JobTracker::FirstStopped(bool* unattributed) const {
  // The ranks behind the others (the lowest step); when every rank is at the
  // same step (or no blame holds), those that stopped reporting before the
  // rest.
  std::vector<uint32_t> out;
  *unattributed = false;
  if (!steps_.empty() && steps_.begin()->first < steps_.rbegin()->first) {
    const uint64_t low = steps_.begin()->first;
    out = Blame([low](const Rank& k) { return k.step == low; }, [low](const Rank& k) { return k.step > low; });
  }
  if (out.empty()) {
    TimePoint oldest = TimePoint::max(), newest = TimePoint::min();
    for (const auto& [id, k] : ranks_) {
      oldest = std::min(oldest, k.last_report);
      newest = std::max(newest, k.last_report);
    }
    const Duration tolerance = std::max(NormalGap(), Duration(seconds(1)));
    if (newest - oldest > tolerance) {
      const auto first = [&](const Rank& k) { return k.last_report - oldest <= tolerance / 2; };
      out = Blame(first, [&](const Rank& k) { return !first(k); });
    }
  }
  if (out.empty()) {
    *unattributed = true;
    for (const auto& [id, k] : ranks_) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<SlowRankFinding> JobTracker::FindSlow() {
  const size_t window = std::clamp<size_t>(settings_.window, 1, kMaxWindow);
  std::vector<std::pair<uint32_t, double>> medians;
  medians.reserve(ranks_.size());
  for (const auto& [id, k] : ranks_) {
    if (k.filled >= window) medians.emplace_back(id, k.Median(window));
  }
  std::vector<double> values;
  values.reserve(medians.size());
  for (const auto& m : medians) values.push_back(m.second);
  median_step_ = MedianOf(values);
  std::vector<SlowRankFinding> out;
  if (medians.size() < 3 || median_step_ <= 0) return out;
  // Robust spread: the median absolute deviation. A rank is slow when it is
  // above the threshold AND well outside the job's own noise.
  std::vector<double> dev;
  dev.reserve(medians.size());
  for (const auto& m : medians) dev.push_back(std::abs(m.second - median_step_));
  const double mad = MedianOf(dev) * 1.4826;
  // Once named, a rank stays slow until it is back within half the threshold
  // (no flapping at the line).
  std::set<uint32_t> named;
  for (const auto& s : last_.slow_ranks) named.insert(s.rank);
  for (const auto& [id, m] : medians) {
    const double limit = named.contains(id)
                             ? median_step_ * (1 + settings_.slow_threshold / 2)
                             : std::max(median_step_ * (1 + settings_.slow_threshold), median_step_ + 3 * mad);
    if (m > limit) out.push_back(SlowRankFinding{id, m, median_step_, window});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return out;
}

Verdict JobTracker::Evaluate(TimePoint now, const Context& ctx) {
  Verdict v;
  if (!since_) return last_ = v;
  if (samples_changed_) {
    last_.slow_ranks = FindSlow();
    samples_changed_ = false;
  }
  v.slow_ranks = settings_.disabled ? std::vector<SlowRankFinding>{} : last_.slow_ranks;
  if (!last_advance_) {
    // Reports came, no rank advanced yet (the first report of each).
    v.state = v1::PROGRESS_STATE_ADVANCING;
    last_advance_ = now;
    return last_ = v;
  }
  const Duration idle = now - *last_advance_;
  const bool checkpointing = checkpointing_ranks_ > 0;
  const Duration timeout = HangTimeout();
  if (!Stalled(now)) {
    v.state = checkpointing ? v1::PROGRESS_STATE_CHECKPOINTING : v1::PROGRESS_STATE_ADVANCING;
    return last_ = v;
  }
  // A recovery of the job restarts its processes: it gets three timeouts
  // from the recovery's end to advance again (loading a checkpoint, warming
  // up) before its silence is a hang again.
  if (ctx.recovering) recovering_seen_ = now;
  const bool after_recovery = recovering_seen_ && now - *recovering_seen_ <= kRestartGraceTimeouts * timeout;
  const bool hang = !settings_.disabled && !ctx.recovering && !ctx.faulted && !after_recovery &&
                    idle > (checkpointing ? 10 * timeout : timeout);
  if (hang) {
    v.state = v1::PROGRESS_STATE_HUNG;
    v.hung_ranks = last_.state == v1::PROGRESS_STATE_HUNG ? last_.hung_ranks : FirstStopped(&v.hang_unattributed);
    if (last_.state == v1::PROGRESS_STATE_HUNG) v.hang_unattributed = last_.hang_unattributed;
    // A hang keeps the cause it was found with (the recovery it starts
    // charges to it too).
    if (open_cause_.empty() || open_cause_ == "stalled") open_cause_ = "JOB_HANG";
  } else {
    v.state = checkpointing ? v1::PROGRESS_STATE_CHECKPOINTING : v1::PROGRESS_STATE_STALLED;
    if (last_.state == v1::PROGRESS_STATE_HUNG && ctx.recovering) {
      // The recovery the hang started: the hang stays named.
      v.hung_ranks = last_.hung_ranks;
      v.hang_unattributed = last_.hang_unattributed;
    }
    if (!ctx.cause.empty() && open_cause_ != "JOB_HANG") {
      open_cause_ = ctx.cause;
    } else if (open_cause_.empty()) {
      open_cause_ = checkpointing ? "checkpoint" : "stalled";
    }
  }
  return last_ = v;
}

v1::JobProgress JobTracker::Snapshot(TimePoint now) const {
  v1::JobProgress p;
  if (!since_) return p;
  p.set_state(last_.state);
  p.set_step(steps_.empty() ? restored_step_ : steps_.rbegin()->first);
  if (last_advance_) *p.mutable_last_advance_time() = ToTimestamp(*last_advance_);
  p.set_ranks_reporting(static_cast<uint32_t>(ranks_.size()));
  *p.mutable_median_step_time() = ToProto(FromSeconds(median_step_));
  *p.mutable_hang_timeout() = ToProto(HangTimeout());
  for (const auto& s : last_.slow_ranks) {
    if (static_cast<size_t>(p.slow_ranks_size()) >= kMaxNamedRanks) break;
    auto* out = p.add_slow_ranks();
    out->set_rank(s.rank);
    *out->mutable_step_time() = ToProto(FromSeconds(s.step_time));
    *out->mutable_job_median() = ToProto(FromSeconds(s.job_median));
    out->set_window(static_cast<uint32_t>(s.window));
  }
  for (uint32_t r : last_.hung_ranks) {
    if (static_cast<size_t>(p.hung_ranks_size()) >= kMaxNamedRanks) break;
    p.add_hung_ranks(r);
  }
  // The interruption in progress counts as lost already.
  Duration lost = lost_;
  std::map<std::string, Lost> by_cause = lost_by_cause_;
  const size_t open_one = last_advance_ && Stalled(now) ? 1 : 0;
  for (size_t i = interruptions_.size() + open_one > kMaxInterruptions ? 1 : 0; i < interruptions_.size(); ++i) {
    auto* out = p.add_interruptions();
    *out->mutable_start() = ToTimestamp(interruptions_[i].start);
    *out->mutable_lost() = ToProto(interruptions_[i].lost);
    out->set_cause(interruptions_[i].cause);
  }
  if (open_one) {
    const Duration open = now - *last_advance_ - NormalGap();
    if (open > Duration(0)) {
      const std::string cause = open_cause_.empty() ? "stalled" : open_cause_;
      lost += open;
      Lost& l = by_cause[cause];
      l.lost += open;
      ++l.count;
      auto* out = p.add_interruptions();
      *out->mutable_start() = ToTimestamp(*last_advance_ + NormalGap());
      *out->mutable_lost() = ToProto(open);
      out->set_cause(cause);
      out->set_open(true);
    }
  }
  const Duration total = productive_ + lost;
  p.set_ettr(total > Duration(0) ? Seconds(productive_) / Seconds(total) : 1.0);
  *p.mutable_since() = ToTimestamp(*since_);
  *p.mutable_productive() = ToProto(productive_);
  *p.mutable_lost() = ToProto(lost);
  std::vector<std::pair<std::string, Lost>> sorted(by_cause.begin(), by_cause.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.lost > b.second.lost; });
  for (const auto& [cause, l] : sorted) {
    auto* out = p.add_lost_by_cause();
    out->set_cause(cause);
    *out->mutable_lost() = ToProto(l.lost);
    out->set_count(l.count);
  }
  p.set_samples(samples_);
  p.set_tokens(tokens_);
  return p;
}

void JobTracker::Restore(const v1::JobProgress& stored, TimePoint now) {
  if (!stored.has_since()) return;
  since_ = FromTimestamp(stored.since());
  last_advance_ = now;
  restored_step_ = std::min(stored.step(), kMaxStep);
  productive_ = FromProto(stored.productive());
  lost_ = Duration(0);
  lost_by_cause_.clear();
  for (const auto& l : stored.lost_by_cause()) {
    if (lost_by_cause_.size() >= kMaxCauses) break;
    Lost& into = lost_by_cause_[l.cause()];
    into.lost = FromProto(l.lost());
    into.count = l.count();
    lost_ += into.lost;
  }
  samples_ = stored.samples();
  tokens_ = stored.tokens();
  interruptions_.clear();
  for (const auto& i : stored.interruptions()) {
    if (i.open()) continue;  // ClusterD's own downtime ended it
    interruptions_.push_back(Gap{FromTimestamp(i.start()), FromProto(i.lost()), i.cause()});
  }
}

}  // namespace clusterd::progress
