#include "noded/rules/engine.h"

#include <set>
#include <sstream>
#include <unordered_map>

#include "common/duration.h"
#include "common/logging.h"
#include "noded/rules/rules_config.h"

namespace clusterd::noded {
namespace {

std::string ShortNum(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

std::string Describe(const Rule& r, const std::string& subject) {
  return r.metric + (subject.empty() ? "" : " on " + subject);
}

}  // namespace

RuleEngine::RuleEngine(std::vector<Rule> rules, const Clock& clock) : clock_(clock) {
  for (auto& r : rules) {
    if (!r.enabled) continue;
    if (Status st = ValidateRule(r); !st.ok()) {
      GetLogger("rules")->error("ignoring invalid rule: {}", st.message());
      continue;
    }
    bool duplicate = false;
    for (const auto& existing : rules_info_) duplicate = duplicate || existing.rule.code == r.code;
    if (duplicate) {  // two rules raising one (code, subject) would fight over it
      GetLogger("rules")->error("ignoring rule '{}': code {} is used by an earlier rule", r.name, r.code);
      continue;
    }
    auto info = *FindMetric(r.metric);
    rules_info_.push_back({std::move(r), info.source, info.kind});
  }
}

double RuleEngine::Judge(const RuleInfo& r, State& st, TimePoint now, double sample) const {
  if (r.kind == MetricKind::kGauge) return sample;
  auto& h = st.history;
  if (!h.empty() && sample < h.back().second) h.clear();  // counter reset (driver reload, reboot)
  if (h.empty() || sample != h.back().second) h.emplace_back(now, sample);
  // Keep one point at or before the window start: it holds the value the window began with.
  const TimePoint start = now - std::chrono::duration_cast<TimePoint::duration>(r.rule.window);
  while (h.size() >= 2 && h[1].first <= start) h.pop_front();
  return sample - h.front().second;
}

Transition RuleEngine::Make(const RuleInfo& r, Transition::Action action, const std::string& subject, double value,
                            const std::string& message, TimePoint now) const {
  Transition t;
  t.action = action;
  t.code = r.rule.code;
  t.level = r.rule.level;
  t.source = r.source;
  t.subject = subject;
  t.message = message;
  t.rule = r.rule.name;
  t.value = value;
  t.at = now;
  return t;
}

std::vector<Transition> RuleEngine::Evaluate(const Snapshot& snapshot) {
  const TimePoint now = clock_.Now();
  std::vector<Transition> out;

  std::unordered_map<std::string, std::vector<const Sample*>> by_metric;
  for (const auto& s : snapshot.samples) by_metric[s.metric].push_back(&s);

  for (size_t i = 0; i < rules_info_.size(); ++i) {
    const RuleInfo& ri = rules_info_[i];
    const Rule& r = ri.rule;
    const bool complete = snapshot.sources.count(ri.source) > 0;
    std::set<std::string> present;

    auto it = by_metric.find(r.metric);
    if (it != by_metric.end()) {
      for (const Sample* s : it->second) {
        present.insert(s->subject);
        State& st = state_[{i, s->subject}];
        const double v = Judge(ri, st, now, s->value);
        const bool over = r.op == Op::kAbove ? v > r.raise : v < r.raise;
        const bool back = r.op == Op::kAbove ? v <= r.clear : v >= r.clear;
        const std::string what = ri.kind == MetricKind::kCounter ? Describe(r, s->subject) + " grew by " + ShortNum(v) +
                                                                       " in " + FormatDuration(r.window)
                                                                 : Describe(r, s->subject) + " = " + ShortNum(v);
        const std::string detail = s->detail.empty() ? "" : "; " + s->detail;
        if (!st.active) {
          if (!over) {
            st.raise_since.reset();
            continue;
          }
          if (!st.raise_since) st.raise_since = now;
          if (now - *st.raise_since < r.for_duration) continue;
          st.active = true;
          st.since = now;
          st.raise_since.reset();
          st.clear_since.reset();
          std::string msg = what + ", " + OpName(r.op) + " " + ShortNum(r.raise);
          if (r.for_duration.count() > 0) msg += " for " + FormatDuration(r.for_duration);
          out.push_back(Make(ri, Transition::Action::kRaise, s->subject, v, msg + detail, now));
        } else {
          if (!back) {
            st.clear_since.reset();
            continue;
          }
          if (!st.clear_since) st.clear_since = now;
          if (now - *st.clear_since < r.clear_for) continue;
          st.active = false;
          st.clear_since.reset();
          std::string msg = what + ", back to " + ShortNum(r.clear);
          out.push_back(Make(ri, Transition::Action::kClear, s->subject, v, msg + detail, now));
        }
      }
    }

    if (!complete) continue;
    // Subjects of this rule that were not sampled although their source was collected.
    for (auto st_it = state_.lower_bound({i, std::string()}); st_it != state_.end() && st_it->first.first == i;) {
      const std::string& subject = st_it->first.second;
      if (present.count(subject)) {
        ++st_it;
        continue;
      }
      if (st_it->second.active) {
        out.push_back(Make(ri, Transition::Action::kClear, subject, 0,
                           Describe(r, subject) + " is no longer reported; clearing", now));
      }
      st_it = state_.erase(st_it);
    }
  }
  return out;
}

std::vector<ActiveFault> RuleEngine::Active() const {
  std::vector<ActiveFault> out;
  for (const auto& [key, st] : state_) {
    if (!st.active) continue;
    const RuleInfo& ri = rules_info_[key.first];
    out.push_back({ri.rule.code, ri.rule.level, ri.source, key.second, ri.rule.name, st.since});
  }
  return out;
}

}  // namespace clusterd::noded
