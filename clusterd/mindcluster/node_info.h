// A node's own health as MindCluster's components exchange it: the ConfigMap
// mindx-dl/mindx-dl-nodeinfo-<node> that MindCluster's NodeD writes (key
// NodeInfo; read for fleets that still run it), and the one ConfigMap
// mindx-dl/cluster-info-node-cm that Volcano reads, where a node whose
// NodeStatus is UnHealthy or PreSeparate fails the NPU predicate
// (docs/mindcluster.md). Pure: parsing with its CheckCode, and the value
// built from ClusterD's node-level faults.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd::mindcluster {

inline constexpr std::string_view kNodeInfoPrefix = "mindx-dl-nodeinfo-";
inline constexpr std::string_view kNodeInfoKey = "NodeInfo";
inline constexpr std::string_view kClusterInfoNodeName = "cluster-info-node-cm";
inline constexpr size_t kMaxNodeFaultDevices = 1024;

// NodeStatus values.
inline constexpr std::string_view kNodeHealthy = "Healthy";
inline constexpr std::string_view kNodeSubHealthy = "SubHealthy";
inline constexpr std::string_view kNodePreSeparate = "PreSeparate";
inline constexpr std::string_view kNodeUnHealthy = "UnHealthy";

// One faulty device of a node (a CPU, memory, disk, network port, ...).
struct NodeFaultDevice {
  std::string device_type;
  int64_t device_id = -1;
  std::vector<std::string> fault_codes;
  std::string fault_level;  // MindCluster's level name
  bool operator==(const NodeFaultDevice&) const = default;
};

struct NodeInfo {
  std::vector<NodeFaultDevice> faults;  // FaultDevList
  std::string node_status;
  bool operator==(const NodeInfo&) const = default;
};

// The NodeInfo value of MindCluster NodeD's ConfigMap:
// {"NodeInfo":{"FaultDevList":[...],"NodeStatus":"..."},"CheckCode":"..."}.
// InvalidArgument for another shape or more than kMaxNodeFaultDevices
// devices; FailedPrecondition when CheckCode is missing or is not the
// SHA-256 of the Go-JSON of the inner NodeInfo.
StatusOr<NodeInfo> ParseNodeInfoCm(std::string_view text);

// The Go-JSON of the inner NodeInfo, and the whole value with its CheckCode.
std::string NodeInfoJson(const NodeInfo& info);
std::string NodeInfoCmJson(const NodeInfo& info);

// NodeStatus for a node's worst node-level fault: SEPARATE and the restart
// levels UnHealthy, PRE_SEPARATE PreSeparate, SUB_HEALTH SubHealthy, else
// Healthy.
std::string_view NodeStatusFor(v1::FaultLevel worst);

// A node's node-level faults (not a chip's) as ClusterD holds them.
struct NodeLevelFault {
  std::string kind;  // "CPU", "Memory", "Disk", "Network", ...
  int64_t device_id = -1;
  std::string code;
  v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
};
// The NodeInfo ClusterD publishes for a node: one device per (kind, id),
// its codes sorted, its worst level's name; NOT_HANDLE faults left out (as
// MindCluster leaves them out); the status from the worst level.
NodeInfo NodeInfoFromFaults(const std::vector<NodeLevelFault>& faults);

// The value of cluster-info-node-cm: a Go-JSON map "mindx-dl-nodeinfo-<node>"
// -> {"FaultDevList":[...],"NodeStatus":"...","CmName":"...","UpdateTime":ms},
// "" when there is no node (as the reference writes it). Never split: at
// about 100 bytes a healthy node, 1 MiB holds thousands of faulty ones;
// InvalidArgument past `max_bytes`.
struct PublishedNodeInfo {
  NodeInfo info;
  int64_t update_time_ms = 0;
};
StatusOr<std::string> ClusterInfoNodeValue(const std::map<std::string, PublishedNodeInfo>& nodes,
                                           size_t max_bytes = 1000 * 1024);

}  // namespace clusterd::mindcluster
