// Dynamic Resource Allocation (resource.k8s.io, docs/kubernetes.md "DRA
// device taints"): where a DRA driver (NVIDIA's, Ascend's) publishes a
// node's accelerators as ResourceSlice devices, isolate_device also writes a
// DeviceTaintRule that keeps the scheduler off the faulty device, and the
// integration deletes it once ClusterD returns the device to service. This
// file holds what that takes without I/O: the paths, which ResourceSlice
// device is ClusterD's device id, the rule ClusterD writes and how it is
// read back.
//
// Thread contract: free functions without shared state; call from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/v1/types.pb.h"

namespace clusterd::k8s {

// The versions of resource.k8s.io tried, in this order; the first one the
// API server serves a resource in is used. kube-apiserver 1.37 serves
// ResourceSlices and DeviceTaintRules in v1 by default (DeviceTaintRules
// also in v1alpha3 with --runtime-config); releases before it served
// DeviceTaintRules in an alpha or beta version behind the DRADeviceTaints
// feature gate. The fields ClusterD writes are the same in all of them.
inline constexpr std::array<std::string_view, 4> kDraVersions = {"v1", "v1beta2", "v1beta1", "v1alpha3"};

// "/apis/resource.k8s.io/<version>/<resource>[/<name>]".
std::string DraPath(std::string_view version, std::string_view resource, std::string_view name = {});
// The ResourceSlices of one node: the collection with
// fieldSelector=spec.nodeName=<node>.
std::string NodeSlicesPath(std::string_view version, std::string_view node);
// The DeviceTaintRules ClusterD wrote: the collection with
// labelSelector=<kManagedLabel>=true.
std::string ManagedRulesPath(std::string_view version);

// How ClusterD's device id on a node is found among the devices the node's
// ResourceSlices publish (settings k8s_dra_*).
struct DraMatch {
  // Only slices of these drivers count; empty: every driver.
  std::vector<std::string> drivers;
  // An int device attribute that is the device id ("index": NVIDIA's
  // driver publishes index and minor), unqualified or qualified with a
  // domain ("gpu.nvidia.com/index"). "": names only.
  std::string attribute = "index";
  // Device names with "{id}" for the device id ("npu-{id}", "gpu-{id}"),
  // tried for a device that does not carry the attribute.
  std::vector<std::string> names = {"npu-{id}", "gpu-{id}"};
};

// A device as DeviceTaintRule's deviceSelector names it.
struct DraDevice {
  std::string driver, pool, name;
  bool operator==(const DraDevice&) const = default;
};

// The devices of `slices` (the items of a ResourceSlice list, any served
// version) that are device `id` of `node`: only slices with spec.nodeName
// `node` and, when match.drivers is set, one of those drivers. A device that
// carries match.attribute matches when its int value is `id`; a device
// without it matches when its name is one of match.names with "{id}"
// replaced. Malformed slices and devices are skipped. Sorted by driver,
// pool and name; more than one is an ambiguity the caller refuses.
std::vector<DraDevice> MatchDraDevices(const nlohmann::json& slices, std::string_view node, uint32_t id,
                                       const DraMatch& match);

// The effect of a device taint at `level` (the recovery's worst trigger):
// NoExecute at SEPARATE (the chip is gone: Kubernetes also evicts the pods
// whose claims hold it), NoSchedule below (PRE_SEPARATE: no new claims get
// it, the pods on it run on until the recovery moves them).
std::string DeviceTaintEffect(v1::FaultLevel level);

// What ClusterD puts on the rules it writes: the label it lists them by
// (value "true"), and the node and device id each one is for.
inline constexpr std::string_view kManagedLabel = "clusterd.io/managed";
inline constexpr std::string_view kRuleNodeAnnotation = "clusterd.io/node";
inline constexpr std::string_view kRuleDeviceAnnotation = "clusterd.io/device";
// When isolate_device wrote the rule (RFC 3339): the integration leaves a
// rule alone this long before ClusterD must show the device isolated.
inline constexpr std::string_view kRuleIsolatedAtAnnotation = "clusterd.io/isolated-at";

// "clusterd-dra-<node>-<device>-<hash>": the same name for the same node
// and device id, so a repeated isolate_device finds its rule.
std::string DeviceTaintRuleName(std::string_view node, uint32_t device);

struct DeviceTaintSpec {
  std::string version;  // of resource.k8s.io, for apiVersion
  std::string node;
  uint32_t device = 0;  // ClusterD's device id
  DraDevice target;
  std::string key, value, effect;  // the taint: <taint key>=<level>:<effect>
  std::string now;                 // RFC 3339
};
// The DeviceTaintRule (named DeviceTaintRuleName, labelled kManagedLabel)
// that taints `spec.target`. The API server stamps taint.timeAdded.
nlohmann::json DeviceTaintRuleBody(const DeviceTaintSpec& spec);
// The merge patch (guarded by the resourceVersion) that brings an existing
// rule of that name to `want` (a DeviceTaintRuleBody): the selector when it
// names another device, the taint when want's effect is stronger (None <
// NoSchedule < NoExecute; a stronger one stays). nullopt: nothing to change.
std::optional<nlohmann::json> DeviceTaintRulePatch(const nlohmann::json& rule, const nlohmann::json& want);

// A rule ClusterD wrote, read back; nullopt for one without the label or
// with a node or device annotation that does not parse.
struct ManagedRule {
  std::string name, node;
  uint32_t device = 0;
  int64_t isolated_at = -1;  // seconds since the epoch; -1 when unknown
};
std::optional<ManagedRule> ParseManagedRule(const nlohmann::json& rule);

}  // namespace clusterd::k8s
