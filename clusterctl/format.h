// Output helpers for clusterctl: aligned tables, short enum names, times and
// JSON (proto field names, zero values included).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/duration.pb.h>
#include <google/protobuf/map.h>
#include <google/protobuf/message.h>
#include <google/protobuf/timestamp.pb.h>

#include "clusterd/v1/types.pb.h"

namespace clusterctl {

namespace v1 = clusterd::v1;

// Columns separated by two spaces, each as wide as its widest cell; the last
// column is not padded. Cells are sanitised (control characters become '?').
class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  void Print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
};

// Replaces control characters so a hostile string cannot break a line or a table.
std::string Sanitize(const std::string& s);

// JSON of a message: proto field names, enums as names, zero values printed.
// `pretty` adds indentation; otherwise one line.
std::string ToJson(const google::protobuf::Message& m, bool pretty);

// "2024-05-01T10:00:00Z" (or with milliseconds); "-" for an unset timestamp.
std::string FormatTime(const google::protobuf::Timestamp& t, bool millis = false);

std::string ShortHealth(v1::Health h);                          // "UNHEALTHY", "-" when unspecified
std::string ShortLevel(v1::FaultLevel l);                       // "SEPARATE", "-" when unspecified
std::string ShortState(v1::FaultState s);                       // "ACTIVE", "CLEARED"
std::string ShortEventType(v1::EventType t);                    // "FAULT_RAISED"
std::string ShortSource(v1::FaultSource s);                     // "accelerator"
std::string DeviceText(const std::optional<uint32_t>& device);  // "3" or "-"
std::string Bytes(uint64_t n);                                  // "1.5 GiB"
std::string ShortJobKind(v1::JobKind k);                        // "TRAINING", "-" when unspecified
std::string ShortJobState(v1::JobState s);                      // "RUNNING", "-" when unspecified
std::string ShortStrategy(v1::RecoveryStrategy s);              // "POD_RESCHEDULE"
std::string ShortRecoveryState(v1::RecoveryState s);            // "RUNNING", "DRY_RUN", "-" when unspecified
std::string ShortStepState(v1::StepState s);                    // "TIMED_OUT", "-" when unspecified
std::string ShortJobCommand(v1::JobCommand c);                  // "RESTART_PROCESSES", "-" when unspecified
std::string ShortClusterAction(v1::ClusterAction a);            // "isolate_device", "-" when unspecified
// "0-3,7,9-10" for a set of ranks (sorted, duplicates dropped); "-" when empty.
std::string RankRanges(std::vector<uint32_t> ranks);

// Text shared by several commands.
std::string Truncate(const std::string& s, size_t max_chars);  // "abc..." past max_chars code points
// Each line of `text` with `prefix` before it (a table nested under a heading).
std::string Indent(const std::string& text, const std::string& prefix = "  ");
std::string TableText(const Table& t);
std::string LabelsText(const google::protobuf::Map<std::string, std::string>& labels);      // "a=1,b=2" or "-"
std::string DurationText(const google::protobuf::Duration& d);                              // "30s", "-" when zero
std::string JoinText(const std::vector<std::string>& items, const std::string& sep = ",");  // "-" when empty
// "Key:  value" lines, the values aligned and sanitised.
void PrintKeyValues(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& kv,
                    const std::string& prefix = "");
std::string FaultCode(const v1::Fault& f);  // "CODE" or "CODE@subject"
std::optional<uint32_t> FaultDevice(const v1::Fault& f);
// The current rung; "PROCESS_RESTART->POD_RESCHEDULE" once it escalated from where it started.
std::string RecoveryStrategyText(const v1::Recovery& r);
// Steps that ended (succeeded, failed, timed out or skipped) out of all planned so far: "2/3".
std::string StepsText(const v1::Recovery& r);

std::optional<v1::Health> ParseHealth(const std::string& name);
std::optional<v1::EventType> ParseEventType(const std::string& name);
// Case-insensitive, with or without the JOB_STATE_ / JOB_KIND_ prefix.
std::optional<v1::JobState> ParseJobState(const std::string& name);
std::optional<v1::JobKind> ParseJobKind(const std::string& name);
// Also with the RECOVERY_STATE_ prefix, and "dry-run" for DRY_RUN.
std::optional<v1::RecoveryState> ParseRecoveryState(const std::string& name);

}  // namespace clusterctl
