// Vocabulary of the NodeD rules engine: fault levels, sources, metrics, rules and
// the transitions the engine emits. Plain values; no behaviour beyond name lookups.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"

namespace clusterd::noded {

// The product's fault levels, mildest first (BRIEF.md). The gRPC adapter maps these
// one to one onto clusterd::v1::FaultLevel.
enum class Level {
  kNotHandle,
  kSubHealth,
  kPreSeparate,
  kRestartRequest,
  kRestartBusiness,
  kFreeRestartNpu,
  kRestartNpu,
  kSeparate,
};
const char* LevelName(Level level);  // "SUB_HEALTH"
std::optional<Level> ParseLevel(std::string_view name);

enum class Source { kCpu, kMemory, kDisk, kNetwork, kKernel };
const char* SourceName(Source source);  // "disk"

// A gauge is judged as is; a counter (cumulative, like an error count) is judged by
// how much it grew over the rule's window.
enum class MetricKind { kGauge, kCounter };

struct MetricInfo {
  std::string name;  // "disk.used_percent"
  Source source;
  MetricKind kind;
  const char* subject;  // what one sample is about: "mount point", "interface", "node"
};

// Known metrics, plus any "kernel.<CODE>" (a counter of kernel log matches for a
// pattern code). nullopt for an unknown name.
std::optional<MetricInfo> FindMetric(std::string_view name);

enum class Op { kAbove, kBelow };
const char* OpName(Op op);

// One rule. With op kAbove a fault is raised once the value has stayed above `raise`
// for `for_duration`, and cleared once it has stayed at or below `clear` for
// `clear_for` (kBelow mirrors it: below `raise`, at or above `clear`). `clear` on the
// far side of `raise` gives hysteresis. For a counter metric the value is its growth
// over the last `window`, so "raise above 0" means "any new error in the window" and
// the fault clears when a whole window passes without one.
struct Rule {
  std::string name;  // unique; JSON overrides address rules by it
  std::string metric;
  Op op = Op::kAbove;
  double raise = 0;
  double clear = 0;
  std::chrono::nanoseconds for_duration{0};
  std::chrono::nanoseconds clear_for{0};
  std::chrono::nanoseconds window{std::chrono::minutes(1)};  // counters only
  std::string code;                                          // e.g. "NODE_DISK_FULL"; unique among enabled rules
  Level level = Level::kSubHealth;
  bool enabled = true;
};

// What the engine reports: a fault for (code, subject) was raised or cleared.
struct Transition {
  enum class Action { kRaise, kClear };
  Action action = Action::kRaise;
  std::string code;
  Level level = Level::kNotHandle;
  Source source = Source::kCpu;
  std::string subject;  // mount point, interface, block device; "" for the node as a whole
  std::string message;  // human-readable: metric, value, threshold, subject, detail
  std::string rule;     // name of the rule that fired
  double value = 0;     // the value that decided it
  TimePoint at;
};
const char* ActionName(Transition::Action action);  // "raise" / "clear"

}  // namespace clusterd::noded
