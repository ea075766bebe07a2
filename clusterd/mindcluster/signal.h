// MindCluster's job-fault signal (fault.Fault, docs/mindcluster.md): what a
// FaultMsgSignal says about a job, or about the whole cluster, built from
// ClusterState the way MindCluster's ClusterD shapes it. Pure domain: no gRPC;
// the adapter (mindcluster/grpc/fault_service.h) decides when to send.
//
// Rules:
//  - A job's signal lists the active faults that hit it: faults on the
//    devices its ranks use and node-level faults on its nodes. Faults of
//    level NOT_HANDLE (MindCluster's NotHandleFault) are never listed.
//  - One NodeFaultInfo per node, sorted by nodeIP (then name): nodeIP is the
//    node's kNodeIpLabel label, else its name; nodeSN its kNodeSnLabel label.
//  - One DeviceFaultInfo per (deviceId, deviceType): a chip is its id and
//    "NPU"; a node-level fault is "-1" with its kind ("Node", "Network",
//    "Storage"). faultCodes are sorted and unique; faultLevels gives each
//    code's raw level name (its worst, should one code be active at several
//    levels).
//  - faultLevel of a device or node collapses its worst listed fault to
//    Healthy / SubHealthy / UnHealthy.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>

#include "clusterd/state/cluster_state.h"
#include "clusterd/state/response_limits.h"
#include "clusterd/v1/types.pb.h"
#include "mindcluster/fault.pb.h"

namespace clusterd::mindcluster {

inline constexpr std::string_view kSignalFault = "fault";
inline constexpr std::string_view kSignalNormal = "normal";
// Node labels (NodeD --labels) that carry what MindCluster reads from the
// Kubernetes Node: its address and its serial number (the same label the
// PubFault service resolves nodeSN with).
inline constexpr std::string_view kNodeIpLabel = "node-ip";
inline constexpr std::string_view kNodeSnLabel = "product-serial-number";
inline constexpr std::string_view kNodeLevelDeviceId = "-1";
inline constexpr std::string_view kChipDeviceType = "NPU";

// MindCluster's raw level name: RestartRequest, RestartBusiness,
// FreeRestartNPU, RestartNPU, SeparateNPU, PreSeparateNPU, SubHealthFault,
// NotHandleFault; "" for UNSPECIFIED.
std::string_view LevelName(v1::FaultLevel level);
// The health a worst level collapses to: UnHealthy from RESTART_REQUEST up,
// SubHealthy for SUB_HEALTH and PRE_SEPARATE, else Healthy.
std::string_view HealthName(v1::FaultLevel worst);
// The deviceType of a fault: "NPU" on a device, else by source ("Network",
// "Storage" for disks, "Node" for the rest).
std::string_view DeviceType(const v1::Fault& f);
// Whether a fault belongs in a signal: active, at SUB_HEALTH or above.
bool Listed(const v1::Fault& f);

// Whole nodes are listed while the signal stays within max_bytes (the first
// node always is), so that it fits a client's 4 MiB receive limit;
// *truncated (if given) says whether some were left out.
struct SignalLimits {
  size_t max_bytes = kAnswerBytes;
};

// The job's signal: jobId set, uuid empty, signalType "fault" when a node is
// listed, else "normal". Called under ClusterState::Read.
fault::FaultMsgSignal JobSignal(const StateView& state, const v1::Job& job, const SignalLimits& limits = {},
                                bool* truncated = nullptr);
// Every listed fault of the cluster, whether or not a job uses its device
// (jobId "").
fault::FaultMsgSignal ClusterSignal(const StateView& state, const SignalLimits& limits = {}, bool* truncated = nullptr);

// What a signal says, for change detection: everything but the uuid.
std::string SignalContent(const fault::FaultMsgSignal& signal);

// The jobs whose signal an event may have changed, added to *out: a fault's
// event names the jobs it hits, a job's event the job.
void AddJobsTouchedBy(const v1::Event& event, std::set<std::string>* out);

}  // namespace clusterd::mindcluster
