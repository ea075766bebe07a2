// Kubernetes job discovery: the pure mapping from API objects (Pods and
// Volcano PodGroups, as the API server returns them in JSON) to ClusterD's
// jobs (node_status.h maps Nodes, and ClusterD's node health back to the Node
// condition it keeps in step). Parsing pods and PodGroups is
// discovery_pods.cc, the policy annotations discovery_policy.cc, grouping
// pods into jobs discovery.cc. No network, no threads, no clock: the informers feed these
// functions and the integration compares their output with what it wrote
// before, so every function is deterministic (equal inputs, equal outputs,
// including the order of lists and warnings).
//
// Every input is untrusted: any field may be missing, of the wrong JSON type,
// huge or negative. Nothing here throws or aborts; bad input comes back as a
// Status or a warning. docs/kubernetes.md describes the mapping for users.
//
// Thread contract: free functions without shared state; call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd::k8s {

// Bounds on what one pod may claim: a pod holds at most this many devices,
// and its rank is at most kMaxPodRank. Larger values are refused as malformed
// (a device rank must also fit in 32 bits: pod rank x devices + index).
inline constexpr uint32_t kMaxDevicesPerPod = 1024;
inline constexpr uint32_t kMaxPodRank = 16'777'215;
// Device ids above this are refused (ClusterD's job validation refuses them).
inline constexpr uint32_t kMaxDeviceId = 65'535;
// At most this many warnings per job; the rest are counted in a last one.
inline constexpr size_t kMaxWarningsPerJob = 32;

// Job.source of every discovered job.
inline constexpr std::string_view kSource = "kubernetes";
// The Node's allocatable Ascend resource is below the chips NodeD sees usable.
inline constexpr std::string_view kAllocatableMismatchCode = "NODE_ALLOCATABLE_MISMATCH";
// Labels set on every discovered job; with the job id (the key, a UID) they
// let the actuator find the job's pods again.
inline constexpr std::string_view kLabelNamespace = "k8s.namespace";
inline constexpr std::string_view kLabelName = "k8s.name";             // Volcano job / owner / PodGroup name
inline constexpr std::string_view kLabelOwnerKind = "k8s.owner-kind";  // absent for pods without an owner
inline constexpr std::string_view kLabelPodGroup = "k8s.podgroup";     // absent without a PodGroup

// Which keys discovery reads. Every key is configurable; the defaults are the
// Ascend device plugin / Volcano conventions (MindCluster's).
struct DiscoveryOptions {
  // Pod rank: this annotation ("0", "1", ...).
  std::string rank_annotation = "hccl/rankIndex";
  // Without it: the first of these present as a label, else as an
  // annotation: the indexes Kubernetes gives the pods of an Indexed Job and
  // of a StatefulSet (a pod template cannot give each pod its own rank).
  std::vector<std::string> rank_index_keys = {"batch.kubernetes.io/job-completion-index",
                                              "apps.kubernetes.io/pod-index"};
  // When set (e.g. "RANK,PET_NODE_RANK": comma-separated, the first found)
  // and neither the rank annotation nor an index is there: the first container
  // env var of this name gives the pod rank, from its literal `value` or its
  // valueFrom.fieldRef to one of the pod's own labels or annotations
  // (metadata.labels['KEY'], metadata.annotations['KEY']); other valueFrom
  // sources are not resolved.
  std::string rank_env;
  // A JobSet (jobset.x-k8s.io): its pods, each owned by one of its child
  // Jobs, are one job keyed by this label (the JobSet's UID), named by the
  // name label, owner kind "JobSet". A pod whose rank is its index within
  // its child Job (an index key, or an env var taken from one) is ranked
  // across the JobSet by RankJobSetPods, with the first of the index labels
  // it has (the child Job's index in the JobSet).
  std::string jobset_uid_label = "jobset.sigs.k8s.io/jobset-uid";
  std::string jobset_name_label = "jobset.sigs.k8s.io/jobset-name";
  std::vector<std::string> jobset_index_labels = {"jobset.sigs.k8s.io/job-global-index",
                                                  "jobset.sigs.k8s.io/job-index"};
  // Devices the pod really holds: "Ascend910-0,Ascend910-1" -> {0, 1} (the
  // integer after the last '-' of each comma-separated item, or an item that
  // is only digits). An empty value counts as absent.
  std::string devices_annotation = "huawei.com/AscendReal";
  // The device plugin's JSON record of the pod's chips with their addresses
  // on the accelerator network (device_ip), which ranks then carry. Empty:
  // not read.
  std::string device_config_annotation = "ascend.kubectl.kubernetes.io/ascend-910-configuration";
  // Without the devices annotation: devices per pod = the sum over containers
  // of these resources' limits (requests when a container has no limit);
  // device ids are then unknown and ranks carry no device_id. A name ending
  // in '*' is a prefix: every resource that starts with it (MIG slices).
  std::vector<std::string> device_resources = {"huawei.com/Ascend910", "huawei.com/npu", "nvidia.com/gpu",
                                               "nvidia.com/mig-*"};
  // Volcano: the PodGroup a pod belongs to, and the Volcano job's name.
  std::string podgroup_annotation = "scheduling.k8s.io/group-name";
  std::string volcano_job_label = "volcano.sh/job-name";
  // Job kind: this label on the PodGroup, else on the pods ("training" or
  // "inference", any case); else by the controller owner's kind; else
  // default_kind.
  std::string job_kind_label = "clusterd.io/job-kind";
  std::map<std::string, v1::JobKind> kind_by_owner_kind = {{"ReplicaSet", v1::JOB_KIND_INFERENCE},
                                                           {"Deployment", v1::JOB_KIND_INFERENCE}};
  v1::JobKind default_kind = v1::JOB_KIND_TRAINING;
  // Recovery policy annotations (on pods and the PodGroup), named after the
  // RecoveryPolicy fields:
  //   <prefix>allowed-strategies   "PROCESS_RESTART,pod_reschedule,job-reschedule"
  //   <prefix>max-retries-per-job  "5"        <prefix>max-retries-per-node "2"
  //   <prefix>hold-down            "30s"      <prefix>escalation-window    "30m"
  //   <prefix>min-replicas         "2"        <prefix>ranks-per-replica    "8"
  //   <prefix>silences             "80E01801,8C1F*"  (codes; '*' = prefix)
  //   <prefix>step-timeout.<strategy>  "60s"  (e.g. step-timeout.pod_reschedule)
  //   <prefix>require-agent        "true"     <prefix>agent-attach-grace   "2m"
  // Any invalid value voids the whole annotation policy (the job gets the
  // empty policy, i.e. ClusterD's defaults) with a warning: never half-applied.
  // Other keys under the prefix are ignored with a warning.
  std::string policy_prefix = "clusterd.io/";
};

// What discovery reads from one Pod object. Every string is validated (names
// and UIDs: [A-Za-z0-9._-], at most 253 characters).
struct PodInfo {
  std::string ns, name, uid;
  std::string node;       // spec.nodeName; empty: not scheduled yet
  std::string phase;      // status.phase ("Pending", "Running", "Succeeded", "Failed", ...)
  std::string scheduler;  // spec.schedulerName ("volcano"); empty when absent
  // The controller owner reference (ownerReferences[] with controller: true);
  // all empty for a pod without one.
  std::string owner_uid, owner_kind, owner_name;
  std::string podgroup;  // the PodGroup annotation; empty without one
  // The job's name: the Volcano job label, else the owner's name, else the PodGroup's.
  std::string job_name;
  uint32_t rank = 0;
  // Device ids from the devices annotation, in its order (no duplicates);
  // empty when the annotation is absent.
  std::vector<uint32_t> devices;
  // devices.size() when the annotation is present, else from the resource
  // limits (0: the pod holds no accelerator).
  uint32_t devices_per_pod = 0;
  // The rank is the pod's index within its workload (an index key, or an
  // env var taken from one), not a rank of the whole job.
  bool rank_from_index = false;
  // A JobSet pod's child Job index (DiscoveryOptions::jobset_index_labels),
  // until RankJobSetPods applied it.
  std::optional<uint32_t> jobset_index;
  bool terminating = false;  // metadata.deletionTimestamp set
  std::string kind_label;    // the job kind label's value, empty when absent
  // Annotations under DiscoveryOptions::policy_prefix (string values only).
  std::map<std::string, std::string> policy_annotations;
  // What MindCluster's job summaries read from a job's pods (the reference's
  // clusterd/pkg/domain/pod): the label "app" (the framework, when the
  // PodGroup names none); the annotations "isSharedTor" ("1") and
  // "sharedTorIp" (the ToR switch the pod shares); the env MASTER_ADDR of
  // its containers (PyTorch's master). Each cleaned to the characters such a
  // value has, empty when absent or unusable.
  std::string framework;
  std::string shared_tor_ip;  // set only when isSharedTor is "1"
  std::string master_addr;
  // Device id -> its address on the accelerator network, from the device
  // plugin's annotation (only for pods with the devices annotation).
  std::map<uint32_t, std::string> device_ips;
};

// NotFound: not a job pod (no controller owner and no PodGroup annotation, or
// no rank). InvalidArgument: not a Pod object, missing or invalid
// name/namespace/uid, or a malformed rank, device list, device resource
// quantity, node name or owner reference. The integration counts and logs
// both; neither is fatal.
StatusOr<PodInfo> ParsePod(const nlohmann::json& pod, const DiscoveryOptions& opts);

// A Volcano PodGroup (scheduling.volcano.sh/v1beta1) as far as discovery
// reads it.
struct PodGroupInfo {
  std::string ns, name, uid;
  std::string owner_uid, owner_kind, owner_name;  // controller owner, empty without one
  std::string kind_label;
  std::map<std::string, std::string> policy_annotations;
  // MindCluster's process-recovery keys (kMindClusterRecoveryKeys), from the
  // PodGroup's labels, else its annotations (ascend-operator copies the
  // AscendJob's onto it): spaces dropped, [A-Za-z0-9,._-] only, 128
  // characters at most. The job gets them as labels "mindcluster/<key>",
  // which the Recover service reads (mindcluster/taskd.h).
  std::map<std::string, std::string> mindcluster;
  // The PodGroup's label "framework" (ascend-operator copies the AscendJob's).
  std::string framework;
};
inline constexpr std::string_view kMindClusterLabelPrefix = "mindcluster/";
// The job labels discovery sets for MindCluster's job summaries
// (mindcluster/job_summary.h reads them): the framework (the PodGroup's label
// "framework", else a pod's label "app"), and for the summary's sharedTorIp
// and masterAddr the pods' distinct shared ToR IPs (a JSON array, as the
// reference) and the first MASTER_ADDR.
inline constexpr std::string_view kMindClusterFrameworkLabel = "mindcluster/framework";
inline constexpr std::string_view kMindClusterSharedTorLabel = "mindcluster/shared-tor-ip";
inline constexpr std::string_view kMindClusterMasterAddrLabel = "mindcluster/master-addr";
// The last two are its Volcano plugin's SuperPoD affinity (IsSuperPodJob:
// the schedule policy, else an sp-block), which makes the job move as a unit
// out of a fault domain with an incident (state/incidents.h DomainAffinityOf).
inline constexpr std::string_view kMindClusterRecoveryKeys[] = {"recover-strategy", "fault-scheduling",
                                                                "pod-rescheduling", "process-recover-enable",
                                                                "sp-block",         "huawei.com/schedule_policy"};
// InvalidArgument for a non-object or missing/invalid name, namespace or uid.
StatusOr<PodGroupInfo> ParsePodGroup(const nlohmann::json& podgroup, const DiscoveryOptions& opts);

// PodGroups by "namespace/name", as BuildJobs and JobKeyOf look them up.
using PodGroupMap = std::map<std::string, PodGroupInfo>;
std::string PodGroupMapKey(std::string_view ns, std::string_view name);

// The job a pod belongs to (the job id). A pod of a known PodGroup: the
// PodGroup's controller owner's UID (the Volcano job or Kubeflow job, which
// also owns the pods: the same key as without the PodGroup, so the job id does
// not change when the PodGroup shows up in the cache late), else the
// PodGroup's UID (pods of several owners, or none, in one group). Otherwise
// the pod's controller owner's UID. Empty for a pod that has only a PodGroup
// annotation naming a PodGroup not (yet) known: it joins no job.
std::string JobKeyOf(const PodInfo& pod, const PodGroupMap& podgroups);

// The pods of a JobSet whose rank is their index within their child Job
// (rank_from_index, jobset_index set) get the rank across the JobSet:
// child Job index x W + index, W the widest child Job's pod count seen
// (JobSets run child Jobs of one size per replicated job). Each job's pods
// together (the integration's whole cache, or the actuator's pods of one
// job), so both see the same ranks. A rank that would not fit keeps the
// index within its Job (then a duplicate, warned about by BuildJobs).
void RankJobSetPods(std::vector<PodInfo>& pods, const PodGroupMap& podgroups);

// Whether a pod's ranks count in its job's placement: scheduled (nodeName
// set), not terminating, and not finished (phase Succeeded or Failed: its
// devices are released).
bool HoldsRanks(const PodInfo& pod);

// Device ranks the pod holds in its job: pod rank x n + i for i < n, where
// n = devices_per_pod (1 when 0); empty when !HoldsRanks(pod). The actuator
// uses it to find the pods to evict for a set of ranks (a pod that lost a
// duplicate-rank conflict in BuildJobs still lists the ranks it claims).
std::vector<uint32_t> PodDeviceRanks(const PodInfo& pod);

// The devices the kubelet gave pods, as each node's NodeD read them from the
// kubelet's pod-resources API (Inventory.pod_devices): node ->
// "namespace/name" -> device ids, sorted.
using KubeletDevices = std::map<std::string, std::map<std::string, std::vector<uint32_t>>>;
// Each pod that holds accelerators without naming them (devices_per_pod > 0,
// no devices annotation) and is placed on a node gets the devices the kubelet
// gave it there, when NodeD reported exactly devices_per_pod of them: its
// ranks are then placed on those devices instead of any_device. A different
// count (a MIG pod holding two slices of one GPU, a resource the discovery
// does not count) changes nothing. Returns how many pods got their devices.
size_t ApplyKubeletDevices(std::vector<PodInfo>& pods, const KubeletDevices& kubelet);

struct DiscoveredJob {
  // id (= key), kind, placement (sorted by rank), policy, labels, source.
  // state is left UNSPECIFIED: UpdateJob keeps the stored state, CreateJob
  // starts RUNNING. The placement is empty when no pod holds ranks (all
  // pending or terminating, e.g. during a whole-job reschedule); CreateJob and
  // UpdateJob refuse an empty placement, so the integration must keep the
  // job as it is (or not create it yet) in that case.
  v1::Job job;
  uint32_t pods = 0;          // pods grouped into the job
  uint32_t pods_placed = 0;   // of which HoldsRanks
  uint32_t pods_running = 0;  // of which phase Running
  // Conflicts and ignored input, deterministic, at most kMaxWarningsPerJob.
  std::vector<std::string> warnings;
};

// Groups pods into jobs (see JobKeyOf). For each job, pods are taken in
// (name, uid) order: the job's name/owner-kind/podgroup labels come from the
// first pod; kind from the PodGroup's kind label, else the first pod's that
// has one (pods that disagree are warned about), else kind_by_owner_kind,
// else default_kind (an invalid kind label is warned about and skipped);
// policy from the pods' policy annotations (the first pod's value per key,
// disagreement warned about) overridden per key by the PodGroup's. A device
// rank claimed by two pods stays with the first and the conflict is warned
// about; so is a (node, device) claimed by two ranks. Pods in another
// namespace than the job's first pod (a UID collision) are ignored with a
// warning. Jobs come back sorted by id.
std::vector<DiscoveredJob> BuildJobs(const std::vector<PodInfo>& pods, const PodGroupMap& podgroups,
                                     const DiscoveryOptions& opts);

// The policy from policy annotations (full keys, prefix included); unknown
// keys under the prefix are appended to *warnings (when not null). The
// job kind label key is not a policy key and is skipped.
StatusOr<v1::RecoveryPolicy> ParsePolicyAnnotations(const std::map<std::string, std::string>& annotations,
                                                    const DiscoveryOptions& opts, std::vector<std::string>* warnings);

// "training" / "inference" (any case; "JOB_KIND_TRAINING" also) -> kind.
std::optional<v1::JobKind> ParseJobKind(std::string_view text);

}  // namespace clusterd::k8s
