// The two ConfigMaps through which MindCluster's operators run its "manual
// separation" (docs/mindcluster.md, "Separation through ConfigMaps"):
//
//  - cluster-system/clusterd-config-cm, key manually_separate_policy.conf:
//    the policy as YAML (enabled; separate.fault_window_hours 1..720,
//    separate.fault_threshold 1..50; release.fault_free_hours 1..240 or -1),
//    which ClusterD honours over its own separation_* settings while the
//    ConfigMap has a valid one;
//  - cluster-system/clusterd-manual-info-cm: one key per node with its
//    separated chips, {"Total":[chip],"Detail":{chip:[{FaultCode,
//    FaultLevel,LastSeparateTime}]}}, written by ClusterD; an operator
//    releases a chip by deleting it from there.
//
// Pure: parsing, the reference's checks and the values, in Go's JSON bytes.
// No Kubernetes client (mindcluster/k8s/stack.h reads and writes them).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/mindcluster/device_info.h"  // kManuallySeparateNPU
#include "clusterd/state/separation.h"
#include "common/status.h"

namespace clusterd::mindcluster {

inline constexpr std::string_view kClusterSystemNamespace = "cluster-system";
inline constexpr std::string_view kConfigCmName = "clusterd-config-cm";
inline constexpr std::string_view kSeparatePolicyKey = "manually_separate_policy.conf";
inline constexpr std::string_view kManualInfoCmName = "clusterd-manual-info-cm";
// A policy longer than this is refused unread (the reference's is 120 bytes).
inline constexpr size_t kMaxPolicyBytes = 64 * 1024;
// The manual-info ConfigMap is refused past these (a ConfigMap holds 1 MiB).
inline constexpr size_t kMaxManualInfoNodes = 20'000;
inline constexpr size_t kMaxManualInfoChipsPerNode = 1024;

// manually_separate_policy.conf as the reference's Go struct reads it
// (fields missing from the YAML are zero, as yaml.Unmarshal leaves them).
struct ManualSeparatePolicy {
  bool enabled = false;
  int64_t fault_window_hours = 0;
  int64_t fault_threshold = 0;
  int64_t fault_free_hours = 0;  // -1: never released by time
  bool operator==(const ManualSeparatePolicy&) const = default;
};

// The reference's check (conf.Check): InvalidArgument naming the field and
// its range, in the reference's words.
Status CheckManualSeparatePolicy(const ManualSeparatePolicy& p);

// Parses the YAML (block mappings of plain or quoted scalars, comments, a
// leading "---"; unknown keys ignored, as yaml.v2 ignores them; a duplicate
// key, a quoted number, a number that does not fit, flow style, lists or
// multi-line scalars refused) and checks it. InvalidArgument saying why.
StatusOr<ManualSeparatePolicy> ParseManualSeparatePolicy(std::string_view yaml);

// The policy ClusterD's separation tracker runs with: `p`'s fields over
// `base` (its settle time, which the reference fixes at 30 s, is kept).
SeparationPolicy ToSeparationPolicy(const ManualSeparatePolicy& p, const SeparationPolicy& base);

// One separated chip as the manual-info ConfigMap lists it.
struct ManualChip {
  std::string name;                // "Ascend910-3"
  std::vector<std::string> codes;  // its fault codes (one Detail entry each; none: one with "")
  int64_t separated_ms = 0;        // LastSeparateTime
  bool operator==(const ManualChip&) const = default;
};
// node -> its separated chips (by name).
using ManualInfo = std::map<std::string, std::vector<ManualChip>>;

// The ConfigMap's data: node -> the Go-JSON of the reference's NodeCmInfo,
// Total sorted, Detail's keys sorted (a Go map), one entry per code with
// FaultLevel ManuallySeparateNPU.
std::map<std::string, std::string> ManualInfoCmData(const ManualInfo& info);

// node -> the chips its Total lists, from the ConfigMap's data (a JSON
// object of strings, each the JSON of a NodeCmInfo; unknown fields ignored,
// a null Total is none). InvalidArgument for another shape or past the
// limits above: a version that does not parse releases nothing.
StatusOr<std::map<std::string, std::set<std::string>>> ParseManualInfoTotals(std::string_view data_json);

// What ClusterD wrote last (node -> chips), kept in an annotation of the
// ConfigMap so that an entry deleted while ClusterD was away is seen at
// its start: compact JSON and back (InvalidArgument when it does not parse).
std::string ListingJson(const std::map<std::string, std::set<std::string>>& listing);
StatusOr<std::map<std::string, std::set<std::string>>> ParseListingJson(std::string_view text);

}  // namespace clusterd::mindcluster
