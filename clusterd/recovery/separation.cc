#include "clusterd/recovery/separation.h"

#include <algorithm>
#include <utility>

namespace clusterd::recovery {

Status ValidateSeparationPolicy(const SeparationPolicy& p) {
  if (p.threshold < 1 || p.threshold > 50) return InvalidArgument("separation threshold: 1 to 50");
  if (p.window.count() < 1 || p.window.count() > 720) return InvalidArgument("separation window: 1h to 720h");
  if (p.release_after && (p.release_after->count() < 1 || p.release_after->count() > 240)) {
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
  pending_.push_back(Pending{chip, code, job, at});
  recent_.push_back(pending_.back());
}

void SeparationTracker::StillFaulty(const ChipRef& chip, TimePoint now) {
  if (auto it = separated_.find(chip); it != separated_.end()) {
    it->second.last_fault = std::max(it->second.last_fault, now);
  }
}

std::vector<SeparationTracker::Change> SeparationTracker::Advance(TimePoint now) {
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
    times.erase(std::remove_if(times.begin(), times.end(), [&](TimePoint t) { return now - t > policy_.window; }),
                times.end());
    if (times.empty()) {
      it = counted_.erase(it);
      continue;
    }
    if (touched.count(it->first) && times.size() >= policy_.threshold && !separated_.count(it->first)) {
      const TimePoint last = *std::max_element(times.begin(), times.end());
      separated_.emplace(it->first, Separation{now, last});
      changes.push_back(
          Change{it->first, true,
                 std::to_string(times.size()) + " faults within " + std::to_string(policy_.window.count()) + "h"});
      it = counted_.erase(it);
      continue;
    }
    ++it;
  }
  // Release: fault-free for release_after.
  if (policy_.release_after) {
    for (auto it = separated_.begin(); it != separated_.end();) {
      if (now - it->second.last_fault >= *policy_.release_after) {
        changes.push_back(
            Change{it->first, false, "fault-free for " + std::to_string(policy_.release_after->count()) + "h"});
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

size_t SeparationTracker::Count(const ChipRef& chip) const {
  auto it = counted_.find(chip);
  return it == counted_.end() ? 0 : it->second.size();
}

}  // namespace clusterd::recovery
