// The switch faults the Ascend device plugin reports on A3 nodes: the key
// SwitchInfoCfg of its kube-system/mindx-dl-deviceinfo-<node> ConfigMap
// (docs/mindcluster.md). Pure: parsing, and the faults it names as ClusterD
// records them (node faults: a switch port is not a chip).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd::mindcluster {

inline constexpr std::string_view kSwitchInfoKey = "SwitchInfoCfg";
inline constexpr size_t kMaxSwitchFaults = 4096;

// One fault of the FaultCode list: where on the switch and which code.
struct SwitchFault {
  std::string code;         // AssembledFaultCode
  std::string switch_chip;  // SwitchChipId ("" when absent)
  std::string switch_port;  // SwitchPortId
  v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
  std::string message;
  bool operator==(const SwitchFault&) const = default;
};

struct SwitchInfo {
  std::vector<SwitchFault> faults;  // sorted by (chip, port, code), one each at its worst level
  std::string node_status;          // NodeStatus
  // As the plugin wrote them, for Volcano's cluster-info-switch-<i>.
  bool present = false;                  // a SwitchInfoCfg was read
  std::vector<std::string> fault_codes;  // FaultCode
  std::string fault_level;               // FaultLevel
  std::string levels_json = "{}";        // FaultTimeAndLevelMap
  bool operator==(const SwitchInfo&) const = default;
};

// Parses SwitchInfoCfg: {FaultCode: [string], FaultLevel, UpdateTime,
// NodeStatus, FaultTimeAndLevelMap}, each FaultCode element itself the JSON
// of {EventType, AssembledFaultCode, PeerPortDevice, PeerPortId, SwitchChipId,
// SwitchPortId, Severity, Assertion, AlarmRaisedTime}. A fault's level is its
// code's entry in FaultTimeAndLevelMap, else FaultLevel (MindCluster's level
// names; unknown: SEPARATE, the plugin took the switch out for a reason).
// InvalidArgument for another shape or more than kMaxSwitchFaults faults.
StatusOr<SwitchInfo> ParseSwitchInfoCfg(std::string_view text);

}  // namespace clusterd::mindcluster
