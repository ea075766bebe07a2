// The rules engine: judges each round of samples against the rules and reports
// fault transitions (raise / clear) per rule and subject.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "noded/rules/metrics.h"
#include "noded/rules/rule.h"

namespace clusterd::noded {

struct ActiveFault {
  std::string code;
  Level level;
  Source source;
  std::string subject;
  std::string rule;
  TimePoint since;
};

// Not thread-safe: owned by the NodeD sampling loop and called from that thread
// only. State lives in memory: after a restart counters start from a fresh baseline
// and active faults are re-derived from the next samples (the outbox, not the
// engine, is what keeps raised faults across restarts).
class RuleEngine {
 public:
  // `rules` should pass ValidateRulesConfig; disabled ones are dropped, and invalid ones
  // or a second rule with an already used code are dropped with an error log.
  // `clock` must outlive the engine.
  RuleEngine(std::vector<Rule> rules, const Clock& clock);

  // Judges one round at clock.Now(). A fault is keyed by (rule, subject). For the
  // sources in snapshot.sources, subjects that are absent (an unmounted filesystem,
  // a removed interface) clear their faults and forget their state.
  std::vector<Transition> Evaluate(const Snapshot& snapshot);

  std::vector<ActiveFault> Active() const;

 private:
  struct State {
    bool active = false;
    TimePoint since;                       // when it was raised
    std::optional<TimePoint> raise_since;  // raise condition holding since
    std::optional<TimePoint> clear_since;  // clear condition holding since
    // Counters: points where the value changed, oldest first; the front is the
    // value at or before the start of the window.
    std::deque<std::pair<TimePoint, double>> history;
  };
  struct RuleInfo {
    Rule rule;
    Source source;
    MetricKind kind;
  };

  double Judge(const RuleInfo& r, State& st, TimePoint now, double sample) const;
  Transition Make(const RuleInfo& r, Transition::Action action, const std::string& subject, double value,
                  const std::string& message, TimePoint now) const;

  std::vector<RuleInfo> rules_info_;
  const Clock& clock_;
  std::map<std::pair<size_t, std::string>, State> state_;  // (rule index, subject)
};

}  // namespace clusterd::noded
