#include "clusterd/state/separation.h"

#include <algorithm>
#include <utility>

namespace clusterd {
namespace {

// "24h", or "90m" for a time that is not whole hours.
std::string Hours(std::chrono::nanoseconds d) {
  using namespace std::chrono;
  if (d % hours(1) == nanoseconds(0)) return std::to_string(duration_cast<hours>(d).count()) + "h";
  return std::to_string(duration_cast<minutes>(d).count()) + "m";
}

}  // namespace

Status ValidateSeparationPolicy(const SeparationPolicy& p) {
  using std::chrono::hours;
  if (p.threshold < 1 || p.threshold > 50) return InvalidArgument("separation threshold: 1 to 50");
  if (p.window < hours(1) || p.window > hours(720)) return InvalidArgument("separation window: 1h to 720h");
  if (p.release_after && (*p.release_after < hours(1) || *p.release_after > hours(240))) {
    return InvalidArgument("separation release_after: 1h to 240h, or never");
  }
  if (p.settle.count() < 0 || p.settle > std::chrono::minutes(10)) {
    return InvalidArgument("separation settle: 0s to 10m");
  }
  return Status::Ok();
}

SeparationTracker::SeparationTracker(SeparationPolicy policy) : policy_(policy) {}

void SeparationTracker::Observe(const ChipRef& chip, const std::string& code, const std::string& job, TimePoint at) {
  if (!policy_.enabled) return;
  if (auto it = separated_.find(chip); it != separated_.end()) {
    it->second.last_fault = std::max(it->second.last_fault, at);
    return;  // already out: nothing more to count
  }
  // The same code on the same chip while one occurrence still settles is
  // that occurrence (two sources reporting one fault: NodeD and the device
  // plugin).
  const bool same = std::any_of(pending_.begin(), pending_.end(), [&](const Pending& p) {
    return p.chip == chip && p.code == code && (at > p.at ? at - p.at : p.at - at) <= policy_.settle;
  });
  if (same) return;
  pending_.push_back(Pending{chip, code, job, at});
  recent_.push_back(pending_.back());
}

void SeparationTracker::StillFaulty(const ChipRef& chip, TimePoint now) {
  if (auto it = separated_.find(chip); it != separated_.end()) {
    it->second.last_fault = std::max(it->second.last_fault, now);
    it->second.recheck = TimePoint{};
  }
}

std::vector<SeparationTracker::Change> SeparationTracker::Advance(
    TimePoint now, std::set<ChipRef>* recounted, const std::function<bool(const ChipRef&)>& may_release) {
  std::vector<Change> changes;
  if (!policy_.enabled) return changes;
  // Settle: an occurrence whose settle time passed is counted, unless its
  // code hit another chip of the same job within its settle time, before or
  // after it (recent_ keeps what was observed for that).
  std::vector<Pending> keep;
  std::set<ChipRef> touched;
  for (const Pending& p : pending_) {
    if (now - p.at < policy_.settle) {
      keep.push_back(p);
      continue;
    }
    const bool software = !p.job.empty() && std::any_of(recent_.begin(), recent_.end(), [&](const Pending& o) {
      return o.job == p.job && o.code == p.code && o.chip != p.chip &&
             (o.at > p.at ? o.at - p.at : p.at - o.at) <= policy_.settle;
    });
    if (software) continue;
    counted_[p.chip].push_back(p.at);
    touched.insert(p.chip);
    if (recounted) recounted->insert(p.chip);
  }
  pending_ = std::move(keep);
  // Keep in recent_ only what a later check can still need: occurrences
  // within a settle time of one still waiting, or of one yet to come.
  TimePoint horizon = now - policy_.settle;
  for (const Pending& p : pending_) horizon = std::min(horizon, p.at);
  recent_.erase(
      std::remove_if(recent_.begin(), recent_.end(), [&](const Pending& o) { return o.at + policy_.settle < horizon; }),
      recent_.end());
  // Count within the window; separate at the threshold.
  for (auto it = counted_.begin(); it != counted_.end();) {
    auto& times = it->second;
    const size_t before = times.size();
    times.erase(std::remove_if(times.begin(), times.end(), [&](TimePoint t) { return now - t > policy_.window; }),
                times.end());
    if (recounted && times.size() != before) recounted->insert(it->first);
    if (times.empty()) {
      it = counted_.erase(it);
      continue;
    }
    if (touched.count(it->first) && times.size() >= policy_.threshold && !separated_.count(it->first)) {
      const TimePoint last = *std::max_element(times.begin(), times.end());
      separated_.emplace(it->first, Separation{now, last});
      if (recounted) recounted->insert(it->first);
      changes.push_back(Change{it->first, true,
                               std::to_string(times.size()) +
                                   (times.size() == 1 ? " fault within " : " faults within ") + Hours(policy_.window)});
      it = counted_.erase(it);
      continue;
    }
    ++it;
  }
  // Release: fault-free for release_after.
  if (policy_.release_after) {
    for (auto it = separated_.begin(); it != separated_.end();) {
      if (now - it->second.last_fault >= *policy_.release_after && now >= it->second.recheck) {
        if (may_release && !may_release(it->first)) {
          if (it->second.recheck == TimePoint{}) {
            changes.push_back(Change{it->first, false, "fault-free for " + Hours(*policy_.release_after), true});
          }
          it->second.recheck = now + kReleaseRecheck;
          ++it;
          continue;
        }
        changes.push_back(Change{it->first, false, "fault-free for " + Hours(*policy_.release_after)});
        it = separated_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return changes;
}

Status SeparationTracker::Release(const ChipRef& chip) {
  if (!separated_.erase(chip)) {
    return NotFound("chip " + std::to_string(chip.device) + " of node " + chip.node + " is not separated");
  }
  counted_.erase(chip);
  return Status::Ok();
}

TimePoint SeparationTracker::NextDue() const {
  TimePoint due = TimePoint::max();
  if (!policy_.enabled) return due;
  for (const Pending& p : pending_) due = std::min(due, p.at + policy_.settle);
  for (const auto& [chip, times] : counted_) {
    for (TimePoint t : times) due = std::min(due, t + policy_.window + std::chrono::nanoseconds(1));
  }
  if (policy_.release_after) {
    for (const auto& [chip, s] : separated_)
      due = std::min(due, std::max(s.last_fault + *policy_.release_after, s.recheck));
  }
  return due;
}

SeparationTracker::ChipRecord SeparationTracker::RecordOf(const ChipRef& chip) const {
  ChipRecord r;
  if (auto it = counted_.find(chip); it != counted_.end()) {
    r.counted = it->second;
    std::sort(r.counted.begin(), r.counted.end());
  }
  if (auto it = separated_.find(chip); it != separated_.end()) {
    r.separated_since = it->second.since;
    r.last_fault = it->second.last_fault;
  }
  return r;
}

void SeparationTracker::Restore(const ChipRef& chip, const ChipRecord& record) {
  counted_.erase(chip);
  separated_.erase(chip);
  if (!record.counted.empty()) counted_[chip] = record.counted;
  if (record.separated_since) {
    // A record without the last fault's time: count from the separation.
    separated_[chip] = Separation{*record.separated_since,
                                  record.last_fault == TimePoint{} ? *record.separated_since : record.last_fault};
  }
}

std::vector<ChipRef> SeparationTracker::SeparatedChips() const {
  std::vector<ChipRef> out;
  out.reserve(separated_.size());
  for (const auto& [chip, s] : separated_) out.push_back(chip);
  return out;
}

size_t SeparationTracker::Count(const ChipRef& chip) const {
  auto it = counted_.find(chip);
  return it == counted_.end() ? 0 : it->second.size();
}

}  // namespace clusterd
