// Which accelerator devices the kubelet gave each pod on this node
// (docs/noded.md, "Which devices a pod holds"): what the kubelet's
// pod-resources API lists (read by the adapter in noded/server), mapped onto
// the node's device ids, so that ClusterD places a pod's ranks on the devices
// it really holds. Pure: no gRPC, no I/O, no clock.
//
// A device plugin names devices its own way: NVIDIA's by the GPU's UUID (its
// default) or index, a MIG device by its own UUID; Ascend's device plugin
// "Ascend910-3". An id that names no device of the node leaves its whole pod
// out (a pod with part of its devices would look smaller than it is): the pod
// then stays placed on "any device" of its node, which is never wrong, only
// wider.
//
// Thread contract: free functions without shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "noded/accel/backend.h"

namespace clusterd::noded {

// One pod as the kubelet lists it: its devices by resource name, all
// containers together (init containers included).
struct KubeletPod {
  std::string ns, name;
  struct Devices {
    std::string resource;  // e.g. "nvidia.com/gpu"
    std::vector<std::string> ids;
  };
  std::vector<Devices> devices;
};

struct PodDevicesOptions {
  // The resources that are accelerators; a name ending in '*' is a prefix.
  std::vector<std::string> resources = {"nvidia.com/gpu",        "nvidia.com/mig-*",     "huawei.com/Ascend910",
                                        "huawei.com/Ascend310P", "huawei.com/Ascend310", "huawei.com/npu"};
  // ClusterD's limits on what one node reports (clusterd/state/validation.h).
  size_t max_pods = 512;
  size_t max_ids = 4096;
};

// One pod and the node's device ids it holds: sorted, each once.
struct PodDevices {
  std::string ns, name;
  std::vector<uint32_t> device_ids;
  bool operator==(const PodDevices&) const = default;
};

struct PodDevicesResult {
  // Pods holding at least one accelerator device, all of them mapped,
  // sorted by namespace then name.
  std::vector<PodDevices> pods;
  // Device ids that named no device of the node (their pods left out).
  uint32_t unmapped_ids = 0;
  // Pods left out: an unmapped id, a name ClusterD would refuse, a
  // namespace/name listed twice, or beyond max_pods / max_ids.
  uint32_t pods_left_out = 0;
  // The first unmapped id and its pod, for the log ("" when none).
  std::string first_unmapped;
};

// The pods' accelerator devices on `devices` (the backend's inventory):
// an id is a device's id when it is one of the device's kubelet_ids, a
// decimal number that is a device id, or NAME-N (letters and digits, one
// '-', N a device id: Ascend's "Ascend910-3").
PodDevicesResult MapPodDevices(std::span<const KubeletPod> pods, std::span<const DeviceInfo> devices,
                               const PodDevicesOptions& options = {});

}  // namespace clusterd::noded
