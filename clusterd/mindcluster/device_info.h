// The Ascend device plugin's view of one node: the ConfigMap
// kube-system/mindx-dl-deviceinfo-<node> (label mx-consumer-cim=true), key
// DeviceInfoCfg, as the plugin writes it (docs/mindcluster.md, "What the
// device plugin reports"). Pure: parsing, the CheckCode check, and the
// faults it reports as ClusterD sees them; the Kubernetes room reads the
// ConfigMaps and feeds the faults through its commands seam.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd::mindcluster {

inline constexpr std::string_view kDeviceInfoNamespace = "kube-system";
inline constexpr std::string_view kDeviceInfoPrefix = "mindx-dl-deviceinfo-";
inline constexpr std::string_view kDeviceInfoKey = "DeviceInfoCfg";
inline constexpr std::string_view kCimLabel = "mx-consumer-cim";

// Bounds on what one ConfigMap may make ClusterD hold (a ConfigMap is at
// most 1 MiB; a node has at most a few dozen chips).
inline constexpr size_t kMaxChipsPerList = 1024;
inline constexpr size_t kMaxFaultEntries = 4096;
inline constexpr size_t kMaxCodesPerEntry = 256;
inline constexpr uint32_t kMaxChipId = 65'535;

// The device type T of the resource names: "Ascend910", "Ascend310P",
// "Ascend310" or "npu" (huawei.com/T, huawei.com/T-Unhealthy, ...).
bool IsDeviceType(std::string_view type);

// "Ascend910-3" -> 3 for a chip of type `type`; nullopt for another type,
// no number, or a number above kMaxChipId.
std::optional<uint32_t> ChipId(std::string_view type, std::string_view chip);
std::string ChipName(std::string_view type, uint32_t id);

// One code of a DeviceFault: when it was raised (ms) and its level name.
struct FaultTimeAndLevel {
  int64_t fault_time_ms = 0;
  std::string fault_level;
  bool operator==(const FaultTimeAndLevel&) const = default;
};

// One entry of the huawei.com/T-Fault list: a chip and one kind of fault.
struct DeviceFault {
  std::string fault_type;  // CardUnhealthy, CardNetworkUnhealthy, PublicFault, ...
  std::string npu_name;    // "Ascend910-3"
  std::string large_model_fault_level;
  std::string fault_level;  // NotHandleFault ... SeparateNPU, ManuallySeparateNPU
  std::string fault_handling;
  std::string fault_code;  // upper-case hex codes joined by ','; may be empty
  std::map<std::string, FaultTimeAndLevel> fault_time_and_level;
  bool operator==(const DeviceFault&) const = default;
};

// A node's chips as the plugin sees them.
struct NodeDeviceInfo {
  std::string device_type;  // T
  std::vector<std::string> available, unhealthy, network_unhealthy, recovering;
  std::vector<DeviceFault> faults;
  int64_t update_time = 0;  // seconds
  int32_t super_pod_id = -1;
  int32_t server_index = -1;
  std::optional<int32_t> rack_id;
  bool operator==(const NodeDeviceInfo&) const = default;
};

// Parses DeviceInfoCfg. InvalidArgument for anything but the plugin's shape
// (wrong types, unknown or mixed device types, chip names that are not the
// type's, more than the bounds above), FailedPrecondition when CheckCode is
// missing or is not the SHA-256 of the Go-JSON of {DeviceList, UpdateTime}.
// Either way the caller keeps the node's last good view.
StatusOr<NodeDeviceInfo> ParseDeviceInfoCfg(std::string_view text);

// The lists of a DeviceList map (the five huawei.com/T keys; other keys are
// ignored), checked as ParseDeviceInfoCfg checks them; update_time and the
// ids are left at their defaults.
StatusOr<NodeDeviceInfo> ParseDeviceList(const std::map<std::string, std::string>& list);

// The DeviceList map as the plugin writes it (and hashes it): huawei.com/T
// and the -Unhealthy, -NetworkUnhealthy, -Recovering lists comma-joined,
// -Fault a JSON array of DeviceFault in Go-JSON. All five keys present.
std::map<std::string, std::string> DeviceListOf(const NodeDeviceInfo& info);

// The Go-JSON of DeviceFault entries (a -Fault value).
std::string FaultListJson(const std::vector<DeviceFault>& faults);

// DeviceInfoCfg as the plugin would write it for `info` (its CheckCode
// included): what tests and the fake device plugin produce.
std::string DeviceInfoCfgJson(const NodeDeviceInfo& info);

// A fault the plugin reports, as ClusterD records it: per chip and code.
struct ChipFault {
  uint32_t device = 0;
  std::string code;  // the hex code; the fault type when the entry names none
  v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
  std::string message;
  bool operator==(const ChipFault&) const = default;
};

// Every fault of `info`, sorted by (device, code), one per (device, code)
// at its most serious level: each code of each -Fault entry (its level from
// fault_time_and_level, else the entry's), and a chip listed -Unhealthy,
// -NetworkUnhealthy or -Recovering with no entry of that kind gets one named
// after the list (CardUnhealthy SEPARATE, CardNetworkUnhealthy
// RESTART_BUSINESS, Recovering RESTART_NPU). Unknown level names count as
// SEPARATE: the plugin took the chip out for a reason.
std::vector<ChipFault> FaultsOf(const NodeDeviceInfo& info);

// What changed between two fault lists (both as FaultsOf returns them):
// faults to raise (new, or at another level) and to clear.
struct FaultDiff {
  std::vector<ChipFault> raise;
  std::vector<ChipFault> clear;
};
FaultDiff DiffFaults(const std::vector<ChipFault>& before, const std::vector<ChipFault>& after);

// The level name of a chip MindCluster's manual-separation policy separated
// (ClusterD's separation policy, for Volcano).
inline constexpr std::string_view kManuallySeparateNPU = "ManuallySeparateNPU";

// MindCluster's order of seriousness of level names: ManuallySeparateNPU >
// SeparateNPU > PreSeparateNPU > RestartNPU > FreeRestartNPU >
// RestartBusiness > RestartRequest > SubHealthFault > NotHandleFault; 0 for
// an unknown name.
int LevelRank(std::string_view name);

}  // namespace clusterd::mindcluster
