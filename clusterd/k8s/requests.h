// What the kubernetes integration and actuator send to the API server, built
// without I/O: the paths, the Node patches (cordon and taint, device marks,
// un-isolation, the condition), the eviction and delete bodies, and the
// Events. Each builder reads the object as it was fetched and the settings,
// and takes the time as a string, so equal inputs give equal requests and the
// unit tests check them without an API server (docs/kubernetes.md says what
// each one does in a cluster).
//
// Thread contract: free functions without shared state; call from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/v1/types.pb.h"

namespace clusterd {

// Annotations ClusterD writes on Nodes (under the taint key's domain).
struct KubernetesMarks {
  std::string taint_key;            // "clusterd.io/fault"
  std::string cordoned_annotation;  // "clusterd.io/cordoned": we set spec.unschedulable
  std::string isolated_annotation;  // "clusterd.io/isolated-at": when isolate_node ran
  std::string devices_annotation;   // "clusterd.io/isolated-devices": "0,3"
  // The fallback taint of an isolated device no scheduler sees:
  // "clusterd.io/isolated-device-" + the device id.
  std::string device_taint_prefix;
  // The PreferNoSchedule taint on the nodes of a fault domain whose open
  // incident keeps placement out without isolating it (docs/domains.md):
  // "clusterd.io/avoid-domain", its value the incident id.
  std::string avoid_taint_key;
};

namespace k8s {

// "/api/v1/nodes/<node>", "/api/v1/namespaces/<ns>/pods/<name>" and the
// events.k8s.io/v1 collection of a namespace; every name URL-encoded.
std::string NodePath(std::string_view node);
std::string PodPath(std::string_view ns, std::string_view name);
std::string EventsPath(std::string_view ns);

// ---- Nodes: what the actuator isolates ----

// The JSON patch that cordons and taints `node` (isolate_node): guarded by
// the Node's resourceVersion (a test op), it adds the taint <taint key>=
// <level>:<effect> (timeAdded = now) unless one with the key is there, sets
// spec.unschedulable, and the annotations `cordoned: "true"` (only when the
// Node was not cordoned: an administrator's cordon stays theirs) and
// `isolated-at: now`. nullopt when the Node is already tainted and cordoned:
// there is nothing to do.
std::optional<nlohmann::json> IsolateNodePatch(const nlohmann::json& node, const KubernetesMarks& marks,
                                               std::string_view level, std::string_view effect, std::string_view now);

// The devices the Node's devices annotation lists ("0,3"); items that are not
// a number up to 5 digits are skipped.
std::set<uint32_t> MarkedDevices(const nlohmann::json& node, const KubernetesMarks& marks);

// The JSON patch (guarded by the resourceVersion) that adds `device` to the
// devices annotation, sorted ("0,3"); nullopt when it is already listed.
std::optional<nlohmann::json> IsolateDevicePatch(const nlohmann::json& node, const KubernetesMarks& marks,
                                                 uint32_t device);

// ---- Isolation the job's scheduler sees (docs/recovery.md) ----

// Where a device's isolation reaches the scheduler that places the job's
// pods, best first: Volcano reads the cluster-info ConfigMaps the
// "mindcluster" integration writes (the job's pods name schedulerName
// "volcano"); a DRA driver publishes the device and its DeviceTaintRule is
// there; the device plugin dropped it from the Node's allocatable; or none of
// them, and the scheduler would put a replacement back on the device.
enum class IsolationView { kVolcano, kDra, kAllocatable, kNone };
// "volcano", "dra", "allocatable", "none".
std::string_view IsolationViewName(IsolationView view);

struct IsolationViewInputs {
  bool volcano = false;  // cluster-info written, and the job's pods are Volcano's
  bool dra = false;      // a DeviceTaintRule covers the device
  // The Node's accelerator resource (ParseAcceleratorAllocatable); nullopt
  // when no device plugin registered one.
  bool has_resource = false;
  uint32_t capacity = 0, allocatable = 0;
  // The devices the Node's devices annotation lists, this one included.
  uint32_t isolated_on_node = 0;
};
// The first view that covers the device. The allocatable covers it when it
// is at least `isolated_on_node` below the capacity: the device plugin left
// out as many devices as are isolated (a plugin that lowers the capacity as
// well is not told apart from one that never registered them: none).
IsolationView DecideIsolationView(const IsolationViewInputs& in);

// The fallback taint's key for `device`: marks.device_taint_prefix + id.
std::string DeviceTaintKey(const KubernetesMarks& marks, uint32_t device);
// The JSON patch (guarded by the resourceVersion) that adds the taint
// DeviceTaintKey=<level>:NoSchedule (timeAdded = now); nullopt when a taint
// with that key is there.
std::optional<nlohmann::json> DeviceFallbackTaintPatch(const nlohmann::json& node, const KubernetesMarks& marks,
                                                       uint32_t device, std::string_view level, std::string_view now);
// The fallback taints on the Node: device id -> timeAdded in Unix seconds
// (-1 when absent or unreadable).
std::map<uint32_t, int64_t> DeviceFallbackTaints(const nlohmann::json& node, const KubernetesMarks& marks);
// The JSON patch (guarded by the resourceVersion) that removes the fallback
// taints of `devices`, every other taint kept.
nlohmann::json RemoveDeviceTaintsPatch(const nlohmann::json& node, const KubernetesMarks& marks,
                                       const std::set<uint32_t>& devices);

// The avoid-domain taint (marks.avoid_taint_key=<incident>:PreferNoSchedule)
// on the Node: its value, nullopt when absent.
std::optional<std::string> AvoidTaint(const nlohmann::json& node, const KubernetesMarks& marks);
// The JSON patch (guarded by the resourceVersion) that sets the avoid-domain
// taint to `incident` (timeAdded = now), every other taint kept; nullopt when
// it is there with that value.
std::optional<nlohmann::json> AvoidTaintPatch(const nlohmann::json& node, const KubernetesMarks& marks,
                                              std::string_view incident, std::string_view now);
// The JSON patch (guarded by the resourceVersion) that removes the
// avoid-domain taint, every other taint kept; nullopt when there is none.
std::optional<nlohmann::json> RemoveAvoidTaintPatch(const nlohmann::json& node, const KubernetesMarks& marks);

// Why a pod on `node` (the Node object; nullopt: not in the cache) holding
// `devices` (empty: not known) sits on isolated hardware: the Node carries
// the isolation taint, or one of the devices is in its devices annotation.
// "" when it does not (a pod whose devices are not known is judged by its
// node only).
std::string IsolatedPlacement(const std::string& node_name, const std::optional<nlohmann::json>& node,
                              const std::vector<uint32_t>& devices, const KubernetesMarks& marks);

// ---- Nodes: what the integration keeps in step with ClusterD ----

// The JSON patch (guarded by the resourceVersion) that undoes isolate_node:
// removes the taint with the taint key, the cordon only when the cordoned
// annotation says ClusterD set it, and the cordoned and isolated-at
// annotations.
nlohmann::json UnisolatePatch(const nlohmann::json& node, const KubernetesMarks& marks);
// Whether the cordoned annotation says ClusterD cordoned the Node.
bool CordonedByClusterd(const nlohmann::json& node, const KubernetesMarks& marks);

// Device ids as the devices annotation and the condition list them: "0,3".
std::string DeviceList(const std::vector<uint32_t>& devices);

// The condition of a ClusterD node (AcceleratorCondition, node_status.h) with
// the isolated devices appended to its message ("...; isolated devices: 0,3"),
// cut to 1 KiB.
nlohmann::json NodeCondition(const v1::Node& node, std::string_view type, std::span<const v1::Fault> active_faults,
                             const std::vector<uint32_t>& isolated_devices);
// The strategic-merge patch of nodes/status that sets `condition`, stamped
// against the Node's current one (StampCondition).
nlohmann::json ConditionPatch(const nlohmann::json& node, const nlohmann::json& condition, std::string_view now);
// The merge patch that sets the devices annotation to `devices` ("0,3"), or
// removes it when empty.
nlohmann::json DevicesAnnotationPatch(const KubernetesMarks& marks, std::string_view devices);

// ---- pods ----

// The Eviction (policy/v1) of a pod, and the DeleteOptions of a delete; both
// with a UID precondition, so that a pod replaced under the same name is
// never the one removed.
nlohmann::json EvictionBody(std::string_view ns, std::string_view name, std::string_view uid);
nlohmann::json DeleteOptionsBody(std::string_view uid);

// ---- Events ----

// "train.1/2" -> "clusterd-train.1-2-<hash>": an object name (DNS subdomain)
// that is the same for the same key, so a repeated action finds its record.
std::string RecordName(std::string_view key);

// Annotations of the record a pod-removing step leaves (docs/kubernetes.md,
// Idempotency): the UIDs of the pods it chose, and its idempotency key.
inline constexpr std::string_view kPodUidsAnnotation = "clusterd.io/pod-uids";
inline constexpr std::string_view kIdempotencyKeyAnnotation = "clusterd.io/idempotency-key";

struct EventSpec {
  std::string name;  // metadata.name: RecordName(<idempotency key>/<action>)
  // The object the Event is about; namespace "" for a Node, uid may be "".
  std::string regarding_kind, regarding_name, regarding_namespace, regarding_uid;
  std::string action;              // "Isolate", "IsolateDevice", "Evict", "Delete"
  std::string note;                // what was done; cut to 1000 bytes
  std::string reporting_instance;  // the host name; cut to 128 bytes
  std::string event_time;          // RFC 3339 with microseconds
  std::string reason = "ClusterdRecovery";
  std::string type = "Warning";  // or "Normal"
};
// An events.k8s.io/v1 Event (reason and type from the spec: ClusterdRecovery
// and Warning unless said, from clusterd.io/clusterd), in the regarded
// object's namespace ("default" for a Node).
nlohmann::json EventBody(const EventSpec& spec);
// This host's name (an Event's reportingInstance); "clusterd" when unknown.
std::string HostName();
// The namespace EventBody puts the Event in.
std::string EventNamespace(const EventSpec& spec);

// The record of a pod-removing step: an Event named RecordName(key) that
// carries the chosen pods' UIDs (comma-separated) and the key.
nlohmann::json RemovalRecordBody(EventSpec spec, std::string_view idempotency_key,
                                 const std::vector<std::string>& uids);
// The UIDs a record carries (empty when it has none).
std::set<std::string> RecordedPodUids(const nlohmann::json& record);

}  // namespace k8s
}  // namespace clusterd
