// Separating a chip that fails again and again (MindCluster's "manual
// separation" policy, docs/recovery.md): a chip whose counted faults reach a
// threshold within a window is separated, so no scheduler places work on it,
// until it has been fault-free for a set time or an operator releases it.
// Pure: the caller tells it what happened and when; it says what to separate
// and release. Any accelerator, not only Ascend.
//
// What counts: each new occurrence of a fault above SUB_HEALTH on a chip,
// once per code, after a settle time. When one code appears on several chips
// of one job within the settle time, it is the job's (software) fault, not
// the chips': none of those occurrences is counted.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace clusterd {

struct SeparationPolicy {
  bool enabled = true;
  // Counted faults within `window` that separate a chip (MindCluster: 1 to
  // 50, default 3; 1 to 720 h, default 24 h).
  uint32_t threshold = 3;
  std::chrono::nanoseconds window = std::chrono::hours(24);
  // Fault-free time after which a separated chip is released; nullopt:
  // never by itself (MindCluster: 1 to 240 h or -1, default 48 h).
  std::optional<std::chrono::nanoseconds> release_after = std::chrono::hours(48);
  // An occurrence is counted after this long, unless the same code hit
  // another chip of the same job meanwhile (MindCluster: 30 s).
  std::chrono::nanoseconds settle = std::chrono::seconds(30);
};

// Bounds of a policy read from configuration; InvalidArgument naming the
// field otherwise.
Status ValidateSeparationPolicy(const SeparationPolicy& p);

struct ChipRef {
  std::string node;
  uint32_t device = 0;
  auto operator<=>(const ChipRef&) const = default;
};

class SeparationTracker {
 public:
  explicit SeparationTracker(SeparationPolicy policy);

  // A fault occurred on `chip` with `code` at `at`; `job` is the job whose
  // rank holds the chip ("" for none). Only occurrences the policy counts
  // should be given (level above SUB_HEALTH, a new occurrence). The same
  // code on the chip while an occurrence of it still settles is that one.
  void Observe(const ChipRef& chip, const std::string& code, const std::string& job, TimePoint at);
  // The chip has an active fault at `now` (it is not fault-free yet).
  void StillFaulty(const ChipRef& chip, TimePoint now);

  struct Change {
    ChipRef chip;
    bool separated = false;  // false: released (or, with deferred, its release waits)
    std::string reason;
    bool deferred = false;  // due, but may_release said no (once per wait)
  };
  // How often a release that `may_release` refused is asked again.
  static constexpr std::chrono::seconds kReleaseRecheck{60};
  // Settles what waited long enough, separates chips at the threshold and
  // releases those fault-free for release_after for which `may_release`
  // (when given) agrees; the others stay separated and are asked again
  // every kReleaseRecheck. Time only moves forward. `recounted`: the chips
  // whose counted occurrences changed (counted, or out of the window),
  // whose records the caller keeps.
  std::vector<Change> Advance(TimePoint now, std::set<ChipRef>* recounted = nullptr,
                              const std::function<bool(const ChipRef&)>& may_release = nullptr);
  // When Advance next has something to do: an occurrence to settle, a count
  // leaving the window, a release; TimePoint::max() when nothing.
  TimePoint NextDue() const;

  bool Separated(const ChipRef& chip) const { return separated_.count(chip) > 0; }
  // An operator's release: the chip's count starts again from zero.
  // NotFound when it is not separated.
  Status Release(const ChipRef& chip);
  // Counted occurrences of the chip within the window, as of the last Advance.
  size_t Count(const ChipRef& chip) const;
  size_t pending() const { return pending_.size(); }
  const SeparationPolicy& policy() const { return policy_; }
  // The policy from now on (an operator's ConfigMap, docs/mindcluster.md):
  // what was counted and separated is kept; the new window, threshold and
  // release time apply from the next Advance (a threshold lowered below a
  // chip's count separates it at its next counted fault). Valid policies
  // only (ValidateSeparationPolicy).
  void SetPolicy(const SeparationPolicy& policy) { policy_ = policy; }

  // What the tracker keeps of one chip, to be stored with it and given back
  // to Restore after a restart (an occurrence still settling is not kept: a
  // restart within its settle time does not count it).
  struct ChipRecord {
    std::vector<TimePoint> counted;  // within the window, oldest first
    std::optional<TimePoint> separated_since;
    TimePoint last_fault{};  // while separated
  };
  ChipRecord RecordOf(const ChipRef& chip) const;
  void Restore(const ChipRef& chip, const ChipRecord& record);
  std::vector<ChipRef> SeparatedChips() const;

 private:
  struct Pending {
    ChipRef chip;
    std::string code;
    std::string job;
    TimePoint at;
  };
  struct Separation {
    TimePoint since;
    TimePoint last_fault;
    TimePoint recheck{};  // a refused release is asked again then
  };
  SeparationPolicy policy_;
  std::vector<Pending> pending_;                       // waiting for their settle time, in the order observed
  std::vector<Pending> recent_;                        // observed within two settle times: the software-fault check
  std::map<ChipRef, std::vector<TimePoint>> counted_;  // within the window
  std::map<ChipRef, Separation> separated_;
};

}  // namespace clusterd
