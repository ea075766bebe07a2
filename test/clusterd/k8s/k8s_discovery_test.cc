// Job discovery from recorded Kubernetes API objects (testdata/k8s: Pods,
// Volcano PodGroups and Nodes as the API server returns them).
#include "clusterd/k8s/discovery.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <tuple>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "clusterd/k8s/node_status.h"
#include "clusterd/state/validation.h"

namespace clusterd::k8s {
namespace {

using google::protobuf::util::MessageDifferencer;
using nlohmann::json;

constexpr char kVcJobUid[] = "5f0c3b8e-3c1a-4d2e-9b7a-1d2e3f4a5b6c";
constexpr char kPodGroupUid[] = "a7d4e2c1-88b0-4f5e-b3a9-0c6d7e8f9a10";
constexpr char kPodGroupName[] = "llama-pretrain-5f0c3b8e-3c1a-4d2e-9b7a-1d2e3f4a5b6c";

json Load(const std::string& name) {
  std::ifstream in(std::string(K8S_TESTDATA_DIR) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

const DiscoveryOptions kAscend;  // the defaults: Ascend / Volcano conventions
const PodGroupMap kNoPodGroups;

PodInfo MustParse(const json& pod, const DiscoveryOptions& opts = kAscend) {
  auto p = ParsePod(pod, opts);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : PodInfo{};
}

PodGroupMap PodGroups(std::initializer_list<json> objects) {
  PodGroupMap out;
  for (const json& o : objects) {
    auto g = ParsePodGroup(o, kAscend);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (g.ok()) out[PodGroupMapKey(g->ns, g->name)] = *g;
  }
  return out;
}

std::vector<PodInfo> VolcanoPods() {
  json list = Load("volcano-job-pods.json");
  return {MustParse(list["items"][0]), MustParse(list["items"][1])};
}

// "rank node device" lines, for readable placement comparisons.
std::vector<std::string> Placement(const v1::Job& job) {
  std::vector<std::string> out;
  for (const auto& p : job.placement()) {
    out.push_back(std::to_string(p.rank()) + " " + p.node() + " " +
                  (p.has_device_id() ? std::to_string(p.device_id()) : std::string("-")));
  }
  return out;
}

std::vector<std::string> ExpectedRanks(uint32_t first_rank, const std::string& node, uint32_t first_device,
                                       uint32_t n) {
  std::vector<std::string> out;
  for (uint32_t i = 0; i < n; ++i) {
    out.push_back(std::to_string(first_rank + i) + " " + node + " " + std::to_string(first_device + i));
  }
  return out;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool AnyContains(const std::vector<std::string>& list, const std::string& needle) {
  return std::any_of(list.begin(), list.end(), [&](const std::string& s) { return s.find(needle) != s.npos; });
}

// ---- Volcano / Ascend ----

TEST(K8sDiscovery, ParsesAscendVolcanoPod) {
  const PodInfo p = VolcanoPods()[1];
  EXPECT_EQ(p.ns, "ai-train");
  EXPECT_EQ(p.name, "llama-pretrain-worker-1");
  EXPECT_EQ(p.uid, "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f");
  EXPECT_EQ(p.node, "ascend-node-02");
  EXPECT_EQ(p.phase, "Running");
  EXPECT_EQ(p.owner_uid, kVcJobUid);
  EXPECT_EQ(p.owner_kind, "Job");
  EXPECT_EQ(p.owner_name, "llama-pretrain");
  EXPECT_EQ(p.podgroup, kPodGroupName);
  EXPECT_EQ(p.job_name, "llama-pretrain");
  EXPECT_EQ(p.rank, 1u);
  EXPECT_EQ(p.devices, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(p.devices_per_pod, 8u);
  EXPECT_FALSE(p.terminating);
  EXPECT_EQ(p.kind_label, "training");
  // Only the policy annotations are kept.
  EXPECT_EQ(p.policy_annotations.size(), 3u);
  EXPECT_EQ(p.policy_annotations.at("clusterd.io/max-retries-per-job"), "5");
  EXPECT_EQ(PodDeviceRanks(p), (std::vector<uint32_t>{8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(K8sDiscovery, VolcanoJobTwoPodsEightDevices) {
  const auto podgroups = PodGroups({Load("volcano-podgroup.json")});
  const auto jobs = BuildJobs(VolcanoPods(), podgroups, kAscend);
  ASSERT_EQ(jobs.size(), 1u);
  const DiscoveredJob& d = jobs[0];
  EXPECT_TRUE(d.warnings.empty()) << d.warnings.front();
  // The PodGroup is owned by the Volcano job: the key is the job's UID, as
  // MindCluster keys it.
  EXPECT_EQ(d.job.id(), kVcJobUid);
  EXPECT_EQ(d.job.source(), "kubernetes");
  EXPECT_EQ(d.job.kind(), v1::JOB_KIND_TRAINING);
  EXPECT_EQ(d.job.state(), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(d.job.labels().at("k8s.namespace"), "ai-train");
  EXPECT_EQ(d.job.labels().at("k8s.name"), "llama-pretrain");
  EXPECT_EQ(d.job.labels().at("k8s.owner-kind"), "Job");
  EXPECT_EQ(d.job.labels().at("k8s.podgroup"), kPodGroupName);
  // The pods' label "app", as MindCluster reads a framework when the PodGroup has no label "framework".
  EXPECT_EQ(d.job.labels().at("mindcluster/framework"), "llama-pretrain");
  EXPECT_EQ(d.job.labels().size(), 5u);
  EXPECT_EQ(Placement(d.job),
            Concat(ExpectedRanks(0, "ascend-node-01", 0, 8), ExpectedRanks(8, "ascend-node-02", 0, 8)));
  EXPECT_EQ(d.pods, 2u);
  EXPECT_EQ(d.pods_placed, 2u);
  EXPECT_EQ(d.pods_running, 2u);

  // Policy: the pods' annotations, the PodGroup's overriding per key.
  const v1::RecoveryPolicy& pol = d.job.policy();
  ASSERT_EQ(pol.allowed_strategies_size(), 3);
  EXPECT_EQ(pol.allowed_strategies(0), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  EXPECT_EQ(pol.allowed_strategies(1), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  EXPECT_EQ(pol.allowed_strategies(2), v1::RECOVERY_STRATEGY_JOB_RESCHEDULE);
  EXPECT_EQ(pol.max_retries_per_job(), 3u);  // PodGroup: 3, pods: 5
  EXPECT_FALSE(pol.has_max_retries_per_node());
  EXPECT_EQ(pol.hold_down().seconds(), 20);
  ASSERT_EQ(pol.step_timeouts_size(), 1);
  EXPECT_EQ(pol.step_timeouts(0).strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  EXPECT_EQ(pol.step_timeouts(0).timeout().seconds(), 300);

  // Without the PodGroup in the cache: the same job id (the pods' owner),
  // the pods' own policy.
  const auto alone = BuildJobs(VolcanoPods(), kNoPodGroups, kAscend);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].job.id(), kVcJobUid);
  EXPECT_EQ(alone[0].job.labels().at("k8s.podgroup"), kPodGroupName);
  EXPECT_EQ(alone[0].job.policy().max_retries_per_job(), 5u);
  EXPECT_EQ(Placement(alone[0].job), Placement(d.job));
}

TEST(K8sDiscovery, DeterministicWhateverTheInputOrder) {
  const auto podgroups = PodGroups({Load("volcano-podgroup.json")});
  auto pods = VolcanoPods();
  json torch = Load("pytorchjob-pods.json");
  DiscoveryOptions opts;
  opts.rank_env = "RANK";
  pods.push_back(MustParse(torch["items"][0], opts));
  pods.push_back(MustParse(torch["items"][1], opts));
  const auto first = BuildJobs(pods, podgroups, opts);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_LT(first[0].job.id(), first[1].job.id());
  std::mt19937 rng(7);
  for (int i = 0; i < 10; ++i) {
    std::shuffle(pods.begin(), pods.end(), rng);
    const auto again = BuildJobs(pods, podgroups, opts);
    ASSERT_EQ(again.size(), first.size());
    for (size_t j = 0; j < again.size(); ++j) {
      EXPECT_TRUE(MessageDifferencer::Equals(again[j].job, first[j].job)) << again[j].job.ShortDebugString();
      EXPECT_EQ(again[j].warnings, first[j].warnings);
    }
  }
}

TEST(K8sDiscovery, RescheduleMovesTheRanksKeepsTheJob) {
  const auto podgroups = PodGroups({Load("volcano-podgroup.json")});
  json list = Load("volcano-job-pods.json");
  const auto before = BuildJobs(VolcanoPods(), podgroups, kAscend);
  ASSERT_EQ(before.size(), 1u);

  // 1. The evicted pod is terminating, its replacement not scheduled yet:
  //    ranks 8-15 are gone, the job stays.
  json old1 = list["items"][1];
  old1["metadata"]["deletionTimestamp"] = "2025-03-12T02:40:50Z";
  old1["metadata"]["deletionGracePeriodSeconds"] = 30;
  json new1 = Load("volcano-pod1-rescheduled.json");
  json pending = new1;
  pending["spec"].erase("nodeName");
  pending["metadata"]["annotations"].erase("huawei.com/AscendReal");
  pending["status"] = {{"phase", "Pending"},
                       {"conditions",
                        {{{"type", "PodScheduled"},
                          {"status", "False"},
                          {"reason", "Unschedulable"},
                          {"message", "0/4 nodes are available: 1 node(s) had untolerated taint"}}}}};
  std::vector<PodInfo> during = {MustParse(list["items"][0]), MustParse(old1), MustParse(pending)};
  EXPECT_TRUE(during[1].terminating);
  EXPECT_TRUE(PodDeviceRanks(during[1]).empty());
  EXPECT_TRUE(PodDeviceRanks(during[2]).empty());
  const auto mid = BuildJobs(during, podgroups, kAscend);
  ASSERT_EQ(mid.size(), 1u);
  EXPECT_EQ(mid[0].job.id(), kVcJobUid);
  EXPECT_EQ(Placement(mid[0].job), ExpectedRanks(0, "ascend-node-01", 0, 8));
  EXPECT_EQ(mid[0].pods, 3u);
  EXPECT_EQ(mid[0].pods_placed, 1u);
  EXPECT_EQ(mid[0].pods_running, 2u);  // the terminating one still reports Running
  EXPECT_TRUE(mid[0].warnings.empty());

  // 2. The replacement runs on another node with other chips.
  const auto after = BuildJobs({MustParse(list["items"][0]), MustParse(new1)}, podgroups, kAscend);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].job.id(), before[0].job.id());
  EXPECT_EQ(Placement(after[0].job),
            Concat(ExpectedRanks(0, "ascend-node-01", 0, 8), ExpectedRanks(8, "ascend-node-03", 8, 8)));
  EXPECT_FALSE(MessageDifferencer::Equals(after[0].job, before[0].job));
}

// ---- Kubernetes' own indexes: Indexed Jobs and StatefulSets ----

// A pod of a workload whose template cannot give each pod a rank annotation.
json IndexedPod(const std::string& name, const json& labels, const json& annotations) {
  json pod = json::parse(R"({"apiVersion": "v1", "kind": "Pod",
    "metadata": {"namespace": "train",
      "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "llm", "uid": "job-uid", "controller": true}]},
    "spec": {"nodeName": "node-1", "containers": [{"name": "main", "env": [{"name": "RANK", "value": "7"}],
      "resources": {"limits": {"huawei.com/Ascend910": "8"}}}]}})");
  pod["metadata"]["name"] = name;
  pod["metadata"]["uid"] = name + "-uid";
  pod["metadata"]["labels"] = labels;
  pod["metadata"]["annotations"] = annotations;
  return pod;
}

// GPU pods: nvidia.com/gpu, and MIG slices by prefix (a request without a
// limit counts too); an Ascend and a GPU resource in one pod add up.
TEST(K8sDiscovery, GpuPodsCountNvidiaGpusAndMigSlices) {
  DiscoveryOptions opts;
  json pod = IndexedPod("g", json::object(), {{"batch.kubernetes.io/job-completion-index", "2"}});
  pod["spec"]["containers"][0]["resources"] = json::parse(R"({"limits": {"nvidia.com/gpu": "8"}})");
  PodInfo info = MustParse(pod, opts);
  EXPECT_EQ(info.rank, 2u);
  EXPECT_EQ(info.devices_per_pod, 8u);
  EXPECT_TRUE(info.devices.empty());
  // Its job's ranks hold GPUs whose ids are unknown: any_device.
  std::vector<PodInfo> pods = {info};
  auto jobs = BuildJobs(pods, {}, opts);
  ASSERT_EQ(jobs.size(), 1u);
  ASSERT_EQ(jobs[0].job.placement_size(), 8);
  for (const auto& p : jobs[0].job.placement()) {
    EXPECT_FALSE(p.has_device_id());
    EXPECT_TRUE(p.any_device()) << p.rank();
  }
  pod["spec"]["containers"][0]["resources"] =
      json::parse(R"({"limits": {"nvidia.com/mig-1g.10gb": 2, "cpu": "4"}, "requests": {"nvidia.com/mig-3g.40gb": "1",
                                  "nvidia.com/mig-1g.10gb": 2}})");
  EXPECT_EQ(MustParse(pod, opts).devices_per_pod, 3u);
  pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] = "lots";
  EXPECT_EQ(ParsePod(pod, opts).status().code(), StatusCode::kInvalidArgument);
}

// The devices the kubelet gave GPU pods (NodeD's pod-resources report) place
// their ranks on those devices; a count that differs, another node, or a pod
// that names its devices itself is left as it was.
TEST(K8sDiscovery, KubeletDevicesPlaceGpuPodsOnTheirDevices) {
  DiscoveryOptions opts;
  auto gpu_pod = [&](const std::string& name, const std::string& index, int gpus) {
    json pod = IndexedPod(name, json::object(), {{"batch.kubernetes.io/job-completion-index", index}});
    pod["spec"]["containers"][0]["resources"] = json{{"limits", {{"nvidia.com/gpu", std::to_string(gpus)}}}};
    return MustParse(pod, opts);
  };
  std::vector<PodInfo> pods = {gpu_pod("a", "0", 2), gpu_pod("b", "1", 2), gpu_pod("c", "2", 2)};
  json named =
      IndexedPod("d", json::object(),
                 {{"batch.kubernetes.io/job-completion-index", "9"}, {"huawei.com/AscendReal", "Ascend910-6"}});
  named["spec"]["containers"][0]["resources"] = json{{"limits", {{"huawei.com/Ascend910", "1"}}}};
  pods.push_back(MustParse(named, opts));
  const KubeletDevices kubelet = {
      {"node-1", {{"train/a", {4, 5}}, {"train/b", {1}}, {"train/d", {0}}, {"train/zz", {7}}}},
      {"node-2", {{"train/c", {0, 1}}}},
  };
  EXPECT_EQ(ApplyKubeletDevices(pods, kubelet), 1u);
  EXPECT_EQ(pods[0].devices, (std::vector<uint32_t>{4, 5}));
  EXPECT_TRUE(pods[1].devices.empty()) << "1 device reported for a pod asking 2";
  EXPECT_TRUE(pods[2].devices.empty()) << "reported on another node";
  EXPECT_EQ(pods[3].devices, std::vector<uint32_t>{6}) << "the pod's own annotation wins";
  auto jobs = BuildJobs(pods, {}, opts);
  ASSERT_EQ(jobs.size(), 1u);
  std::vector<std::string> placed;
  for (const auto& p : jobs[0].job.placement()) {
    placed.push_back(std::to_string(p.rank()) + "@" + (p.has_device_id() ? std::to_string(p.device_id()) : "-") +
                     (p.any_device() ? "*" : ""));
  }
  EXPECT_EQ(placed, (std::vector<std::string>{"0@4", "1@5", "2@-*", "3@-*", "4@-*", "5@-*", "9@6"}));
}

TEST(K8sDiscovery, RankFromTheIndexOfAnIndexedJobOrAStatefulSet) {
  DiscoveryOptions opts;
  opts.rank_env = "RANK";
  // Indexed Job: the annotation always, the label since Kubernetes 1.28.
  EXPECT_EQ(MustParse(IndexedPod("a", json::object(), {{"batch.kubernetes.io/job-completion-index", "3"}}), opts).rank,
            3u);
  EXPECT_EQ(MustParse(IndexedPod("b", {{"batch.kubernetes.io/job-completion-index", "4"}},
                                 {{"batch.kubernetes.io/job-completion-index", "4"}}),
                      opts)
                .rank,
            4u);
  // StatefulSet: the pod-index label.
  EXPECT_EQ(MustParse(IndexedPod("c", {{"apps.kubernetes.io/pod-index", "5"}}, json::object()), opts).rank, 5u);
  // The rank annotation comes first, the env var last.
  EXPECT_EQ(MustParse(IndexedPod("d", {{"apps.kubernetes.io/pod-index", "5"}}, {{"hccl/rankIndex", "1"}}), opts).rank,
            1u);
  EXPECT_EQ(MustParse(IndexedPod("e", json::object(), json::object()), opts).rank, 7u);
  // The order is the option's: without index keys the env var decides.
  DiscoveryOptions no_index = opts;
  no_index.rank_index_keys.clear();
  EXPECT_EQ(MustParse(IndexedPod("f", {{"apps.kubernetes.io/pod-index", "5"}}, json::object()), no_index).rank, 7u);
  // A bad index is refused, naming where it came from.
  auto bad = ParsePod(IndexedPod("g", {{"apps.kubernetes.io/pod-index", "x5"}}, json::object()), opts);
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("label apps.kubernetes.io/pod-index"), std::string::npos)
      << bad.status().message();
}

// ---- PyTorchJob, other conventions ----

TEST(K8sDiscovery, PyTorchJobByRankEnvWithoutDeviceIds) {
  json list = Load("pytorchjob-pods.json");
  // Default (Ascend) options: no rank annotation, not a job pod.
  auto plain = ParsePod(list["items"][0], kAscend);
  EXPECT_EQ(plain.status().code(), StatusCode::kNotFound);

  DiscoveryOptions opts;
  opts.rank_env = "RANK";
  const PodInfo master = MustParse(list["items"][0], opts);
  const PodInfo worker = MustParse(list["items"][1], opts);
  EXPECT_EQ(master.rank, 0u);
  EXPECT_EQ(worker.rank, 1u);
  EXPECT_TRUE(worker.devices.empty());
  EXPECT_EQ(worker.devices_per_pod, 4u);  // huawei.com/npu limit
  EXPECT_EQ(worker.owner_kind, "PyTorchJob");
  EXPECT_TRUE(worker.podgroup.empty());

  const auto jobs = BuildJobs({worker, master}, kNoPodGroups, opts);
  ASSERT_EQ(jobs.size(), 1u);
  const v1::Job& job = jobs[0].job;
  EXPECT_EQ(job.id(), "71c2d3e4-f5a6-4b7c-8d9e-0f1a2b3c4d5e");
  EXPECT_EQ(job.kind(), v1::JOB_KIND_TRAINING);
  EXPECT_EQ(job.labels().at("k8s.name"), "bert-finetune");
  EXPECT_EQ(job.labels().at("k8s.owner-kind"), "PyTorchJob");
  EXPECT_EQ(job.labels().count("k8s.podgroup"), 0u);
  EXPECT_EQ(Placement(job), (std::vector<std::string>{"0 gpu-a-07 -", "1 gpu-a-07 -", "2 gpu-a-07 -", "3 gpu-a-07 -",
                                                      "4 gpu-a-09 -", "5 gpu-a-09 -", "6 gpu-a-09 -", "7 gpu-a-09 -"}));
  EXPECT_EQ(job.policy().ByteSizeLong(), 0u);
  EXPECT_TRUE(jobs[0].warnings.empty());

  // The annotation wins over the env var.
  json annotated = list["items"][1];
  annotated["metadata"]["annotations"]["hccl/rankIndex"] = "5";
  EXPECT_EQ(MustParse(annotated, opts).rank, 5u);
  // valueFrom: a fieldRef to the pod's own label or annotation is resolved;
  // nothing else is (another field, a missing key, a malformed path).
  json from_field = list["items"][1];
  from_field["metadata"]["labels"]["replica-index"] = "6";
  from_field["spec"]["containers"][0]["env"][3] = {
      {"name", "RANK"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.labels['replica-index']"}}}}}};
  EXPECT_EQ(MustParse(from_field, opts).rank, 6u);
  EXPECT_FALSE(MustParse(from_field, opts).rank_from_index);
  for (const char* path : {"metadata.labels['no-such-label']", "spec.nodeName", "metadata.labels[replica-index]",
                           "metadata.labels['replica-index\"]", "metadata.labels['']"}) {
    from_field["spec"]["containers"][0]["env"][3]["valueFrom"]["fieldRef"]["fieldPath"] = path;
    EXPECT_EQ(ParsePod(from_field, opts).status().code(), StatusCode::kNotFound) << path;
  }
  // A pod holding no accelerator: one rank, no device.
  json cpu_only = list["items"][1];
  cpu_only["spec"]["containers"][0]["resources"] = {{"limits", {{"cpu", "4"}}}};
  const PodInfo cpu = MustParse(cpu_only, opts);
  EXPECT_EQ(cpu.devices_per_pod, 0u);
  EXPECT_EQ(PodDeviceRanks(cpu), (std::vector<uint32_t>{1}));
  // Requests count when a container has no limit.
  json requests_only = list["items"][1];
  requests_only["spec"]["containers"][0]["resources"]["limits"].erase("huawei.com/npu");
  EXPECT_EQ(MustParse(requests_only, opts).devices_per_pod, 4u);
}

// A JobSet (Kubeflow's trainer runs PyTorch on one): two child Jobs of two
// pods each, PET_NODE_RANK from each pod's completion index. One job keyed by
// the JobSet's UID, ranks across the JobSet (child Job index x 2 + index), as
// the actuator sees them too.
TEST(K8sDiscovery, JobSetPodsAreOneJobRankedAcrossItsChildJobs) {
  auto pod = [](const std::string& name, int job_index, int index) {
    json p = IndexedPod(name, json::object(), {{"batch.kubernetes.io/job-completion-index", std::to_string(index)}});
    p["metadata"]["ownerReferences"][0]["name"] = "llm-node-" + std::to_string(job_index);
    p["metadata"]["ownerReferences"][0]["uid"] = "child-job-" + std::to_string(job_index);
    p["metadata"]["labels"] = {{"jobset.sigs.k8s.io/jobset-name", "llm"},
                               {"jobset.sigs.k8s.io/jobset-uid", "jobset-uid-1"},
                               {"jobset.sigs.k8s.io/replicatedjob-name", "node"},
                               {"jobset.sigs.k8s.io/job-index", std::to_string(job_index)},
                               {"jobset.sigs.k8s.io/job-global-index", std::to_string(job_index)}};
    p["spec"]["containers"][0]["env"] = json::array(
        {{{"name", "PET_NODE_RANK"},
          {"valueFrom",
           {{"fieldRef", {{"fieldPath", "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}}}}});
    p["spec"]["containers"][0]["resources"] = json{{"limits", {{"nvidia.com/gpu", "2"}}}};
    return p;
  };
  DiscoveryOptions opts;
  opts.rank_index_keys = {};  // the rank from the env var alone
  opts.rank_env = "RANK,PET_NODE_RANK";
  std::vector<PodInfo> pods;
  for (const auto& [name, job, index] : std::vector<std::tuple<std::string, int, int>>{
           {"llm-node-1-1", 1, 1}, {"llm-node-0-0", 0, 0}, {"llm-node-1-0", 1, 0}, {"llm-node-0-1", 0, 1}}) {
    pods.push_back(MustParse(pod(name, job, index), opts));
  }
  EXPECT_EQ(pods[0].owner_uid, "jobset-uid-1");
  EXPECT_EQ(pods[0].owner_kind, "JobSet");
  EXPECT_TRUE(pods[0].rank_from_index);
  EXPECT_EQ(pods[0].rank, 1u);  // within its child Job, until ranked across the JobSet
  RankJobSetPods(pods, kNoPodGroups);
  EXPECT_EQ(pods[0].rank, 3u);
  EXPECT_EQ(pods[1].rank, 0u);
  EXPECT_EQ(pods[2].rank, 2u);
  EXPECT_EQ(pods[3].rank, 1u);
  RankJobSetPods(pods, kNoPodGroups);  // applied once
  EXPECT_EQ(pods[0].rank, 3u);
  auto jobs = BuildJobs(pods, kNoPodGroups, opts);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job.id(), "jobset-uid-1");
  EXPECT_EQ(jobs[0].job.labels().at("k8s.name"), "llm");
  EXPECT_EQ(jobs[0].job.labels().at("k8s.owner-kind"), "JobSet");
  EXPECT_EQ(jobs[0].job.placement_size(), 8);
  EXPECT_TRUE(jobs[0].warnings.empty());
  // A literal RANK (the user's own global rank) is not re-ranked.
  json literal = pod("llm-node-1-0", 1, 0);
  literal["spec"]["containers"][0]["env"].push_back({{"name", "RANK"}, {"value", "5"}});
  std::vector<PodInfo> one = {MustParse(literal, opts)};
  RankJobSetPods(one, kNoPodGroups);
  EXPECT_EQ(one[0].rank, 5u);
  // A bad child Job index is refused.
  json bad = pod("x", 0, 0);
  bad["metadata"]["labels"]["jobset.sigs.k8s.io/job-global-index"] = "-1";
  EXPECT_EQ(ParsePod(bad, opts).status().code(), StatusCode::kInvalidArgument);
}

TEST(K8sDiscovery, OwnerKindAndKindLabelChooseTheKind) {
  json list = Load("pytorchjob-pods.json");
  DiscoveryOptions opts;
  opts.rank_env = "RANK";
  json pod = list["items"][0];
  pod["metadata"]["ownerReferences"][0]["kind"] = "ReplicaSet";
  EXPECT_EQ(BuildJobs({MustParse(pod, opts)}, kNoPodGroups, opts)[0].job.kind(), v1::JOB_KIND_INFERENCE);
  pod["metadata"]["labels"]["clusterd.io/job-kind"] = "TRAINING";
  EXPECT_EQ(BuildJobs({MustParse(pod, opts)}, kNoPodGroups, opts)[0].job.kind(), v1::JOB_KIND_TRAINING);
  // An invalid label is reported and the next rule applies.
  pod["metadata"]["labels"]["clusterd.io/job-kind"] = "batch";
  const auto jobs = BuildJobs({MustParse(pod, opts)}, kNoPodGroups, opts);
  EXPECT_EQ(jobs[0].job.kind(), v1::JOB_KIND_INFERENCE);
  EXPECT_TRUE(AnyContains(jobs[0].warnings, "invalid job kind label \"batch\""));
  opts.default_kind = v1::JOB_KIND_INFERENCE;
  opts.kind_by_owner_kind.clear();
  EXPECT_EQ(BuildJobs({MustParse(list["items"][1], opts)}, kNoPodGroups, opts)[0].job.kind(), v1::JOB_KIND_INFERENCE);
  EXPECT_EQ(ParseJobKind(" Inference "), v1::JOB_KIND_INFERENCE);
  EXPECT_EQ(ParseJobKind("JOB_KIND_TRAINING"), v1::JOB_KIND_TRAINING);
  EXPECT_FALSE(ParseJobKind("unspecified").has_value());
  EXPECT_FALSE(ParseJobKind("").has_value());
}

TEST(K8sDiscovery, PodsWithoutOwnerOrPodGroupAreNotJobPods) {
  json standalone = Load("standalone-pod.json");
  auto p = ParsePod(standalone, kAscend);
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("default/npu-smoke-test"), std::string::npos);
  // A non-controller owner reference does not make it a job pod either.
  standalone["metadata"]["ownerReferences"] = {
      {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", "x"}, {"uid", "0a0b0c0d-1111-2222-3333-444455556666"}}};
  EXPECT_EQ(ParsePod(standalone, kAscend).status().code(), StatusCode::kNotFound);
  standalone["metadata"]["ownerReferences"][0]["controller"] = false;
  EXPECT_EQ(ParsePod(standalone, kAscend).status().code(), StatusCode::kNotFound);
  // A controller owner without a rank: a DaemonSet pod, say.
  json ds = Load("standalone-pod.json");
  ds["metadata"]["annotations"].erase("hccl/rankIndex");
  ds["metadata"]["ownerReferences"] = {{{"apiVersion", "apps/v1"},
                                        {"kind", "DaemonSet"},
                                        {"name", "noded"},
                                        {"uid", "aa11bb22-cc33-dd44-ee55-ff6677889900"},
                                        {"controller", true}}};
  EXPECT_EQ(ParsePod(ds, kAscend).status().code(), StatusCode::kNotFound);
}

// What MindCluster's job summaries read from an ascend-operator job's pods
// and PodGroup: the framework, the shared ToR IPs and the master address.
TEST(K8sDiscovery, MindClusterFactsFromPodsAndPodGroup) {
  json list = Load("volcano-job-pods.json");
  json pg = Load("volcano-podgroup.json");
  pg["metadata"]["labels"]["framework"] = "pytorch";
  for (json* pod : {&list["items"][0], &list["items"][1]}) {
    (*pod)["metadata"]["annotations"]["isSharedTor"] = "1";
    (*pod)["spec"]["containers"][0]["env"] = json::array({{{"name", "MASTER_ADDR"}, {"value", "10.0.0.9"}}});
  }
  list["items"][0]["metadata"]["annotations"]["sharedTorIp"] = "10.1.0.2";
  list["items"][1]["metadata"]["annotations"]["sharedTorIp"] = "10.1.0.1";
  auto jobs = BuildJobs({MustParse(list["items"][0]), MustParse(list["items"][1])}, PodGroups({pg}), kAscend);
  ASSERT_EQ(jobs.size(), 1u);
  const auto& labels = jobs[0].job.labels();
  EXPECT_EQ(labels.at("mindcluster/framework"), "pytorch");  // the PodGroup's, over the pods' "app"
  EXPECT_EQ(labels.at("mindcluster/shared-tor-ip"), R"(["10.1.0.2","10.1.0.1"])");
  EXPECT_EQ(labels.at("mindcluster/master-addr"), "10.0.0.9");

  // A pod not on a shared ToR, hostile values: nothing taken from them.
  list["items"][0]["metadata"]["annotations"]["isSharedTor"] = "0";
  list["items"][1]["metadata"]["annotations"]["sharedTorIp"] = "10.1.0.1\",\"x";
  list["items"][0]["spec"]["containers"][0]["env"][0]["value"] = "a b";
  list["items"][1]["spec"]["containers"][0]["env"][0]["value"] = std::string(300, 'a');
  list["items"][0]["metadata"]["labels"]["app"] = "x y";
  list["items"][1]["metadata"]["labels"]["app"] = "x y";
  jobs = BuildJobs({MustParse(list["items"][0]), MustParse(list["items"][1])}, {}, kAscend);
  ASSERT_EQ(jobs.size(), 1u);
  for (const char* key : {"mindcluster/framework", "mindcluster/shared-tor-ip", "mindcluster/master-addr"}) {
    EXPECT_EQ(jobs[0].job.labels().count(key), 0u) << key;
  }
}

// The device plugin's record of the pod's chips gives each rank its
// device_ip (the hccl.json of a job summary); what is unreadable is left out.
// The annotation's key and shape as MindCluster writes and reads it:
// Ascend/mind-cluster component/ascend-common/api/default_name.go
// (Pod910DeviceAnno), component/clusterd/pkg/domain/pod/pod_util.go
// (getServerInfo: devices[].device_id / device_ip, strings) and the sample in
// component/clusterd/pkg/domain/job/job_util_test.go (a5DeviceAnno).
TEST(K8sDiscovery, DeviceIpsFromTheDevicePluginsAnnotation) {
  json list = Load("volcano-job-pods.json");
  json& pod = list["items"][0];
  const std::string key = "ascend.kubectl.kubernetes.io/ascend-910-configuration";
  const auto first = MustParse(pod);
  ASSERT_GE(first.devices.size(), 2u);
  const uint32_t d0 = first.devices[0], d1 = first.devices[1];
  json conf = {{"pod_name", "p0"},
               {"server_id", "10.0.0.1"},
               {"devices",
                {{{"device_id", std::to_string(d0)}, {"device_ip", "192.168.1.6"}},
                 {{"device_id", std::to_string(d1)}, {"device_ip", "fe80::1"}},
                 {{"device_id", "4096"}, {"device_ip", "192.168.1.8"}}}}};
  pod["metadata"]["annotations"][key] = conf.dump();
  auto jobs = BuildJobs({MustParse(pod)}, {}, kAscend);
  ASSERT_EQ(jobs.size(), 1u);
  std::map<uint32_t, std::string> ips;
  for (const auto& r : jobs[0].job.placement()) ips[r.device_id()] = r.device_ip();
  EXPECT_EQ(ips[d0], "192.168.1.6");
  EXPECT_EQ(ips[d1], "fe80::1");
  EXPECT_TRUE(ValidateJob(jobs[0].job).ok());

  // Hostile or broken: no address, the pod and its job stand as before.
  for (const json& bad :
       {json("not json"), json(R"({"devices": 7})"), json(R"({"devices": [{"device_id": 0}]})"),
        json(json{{"devices", {{{"device_id", std::to_string(d0)}, {"device_ip", "1.2.3.4\",\"x"}}}}}.dump()),
        json(json{{"devices", {{{"device_id", std::to_string(d0)}, {"device_ip", std::string(46, '1')}}}}}.dump()),
        json(json{{"devices", {{{"device_id", "-1"}, {"device_ip", "1.2.3.4"}}}}}.dump()),
        json(std::string(300 * 1024, '{'))}) {
    pod["metadata"]["annotations"][key] = bad;
    auto parsed = ParsePod(pod, kAscend);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_TRUE(parsed->device_ips.empty()) << bad.dump().substr(0, 80);
  }
}

// ---- hostile and malformed input ----

TEST(K8sDiscovery, MalformedRankAndDevicesAreInvalid) {
  const json base = Load("volcano-job-pods.json")["items"][0];
  auto with_annotation = [&](const std::string& key, const json& value) {
    json p = base;
    p["metadata"]["annotations"][key] = value;
    return ParsePod(p, kAscend);
  };
  for (const json& bad : {json("-1"), json("abc"), json("16777216"), json(""), json("1e3"), json("0x10"), json("+2"),
                          json("99999999999999999999999"), json(3), json::array()}) {
    auto r = with_annotation("hccl/rankIndex", bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad.dump();
  }
  EXPECT_EQ(with_annotation("hccl/rankIndex", "16777215")->rank, 16'777'215u);
  EXPECT_EQ(with_annotation("hccl/rankIndex", " 7 ")->rank, 7u);

  std::string too_many;
  for (uint32_t i = 0; i <= kMaxDevicesPerPod; ++i)
    too_many += (i ? "," : "") + std::string("Ascend910-") + std::to_string(i);
  for (const json& bad : {json("Ascend910-"), json("Ascend910-x"), json("Ascend910-0,,Ascend910-1"),
                          json("Ascend910-0,Ascend910-0"), json("Ascend910-70000"), json("Ascend910--1"),
                          json("Ascend910-1 2"), json("-3"), json(too_many), json(7), json::object()}) {
    auto r = with_annotation("huawei.com/AscendReal", bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad.dump().substr(0, 80);
  }
  EXPECT_EQ(with_annotation("huawei.com/AscendReal", "Ascend310P-3, 5")->devices, (std::vector<uint32_t>{3, 5}));
  // Empty: as if absent, the limits give the count.
  auto empty = with_annotation("huawei.com/AscendReal", "");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->devices.empty());
  EXPECT_EQ(empty->devices_per_pod, 8u);

  json no_real = base;
  no_real["metadata"]["annotations"].erase("huawei.com/AscendReal");
  for (const json& bad : {json("-8"), json("8.5"), json("1025"), json("8Gi"), json(-3), json(8.5), json::object()}) {
    json p = no_real;
    p["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] = bad;
    EXPECT_EQ(ParsePod(p, kAscend).status().code(), StatusCode::kInvalidArgument) << bad.dump();
  }
  json sum = no_real;
  sum["spec"]["containers"].push_back({{"name", "side"}, {"resources", {{"limits", {{"huawei.com/npu", 1020}}}}}});
  EXPECT_EQ(ParsePod(sum, kAscend).status().code(), StatusCode::kInvalidArgument);  // 8 + 1020 > 1024

  // A device rank must fit 32 bits.
  json big = no_real;
  big["metadata"]["annotations"]["hccl/rankIndex"] = "16777215";
  big["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] = "1024";
  EXPECT_EQ(ParsePod(big, kAscend).status().code(), StatusCode::kInvalidArgument);
  big["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] = "256";
  auto fits = ParsePod(big, kAscend);
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(PodDeviceRanks(*fits).back(), 16'777'215u * 256u + 255u);
}

TEST(K8sDiscovery, MalformedObjectsAreInvalid) {
  const json base = Load("volcano-job-pods.json")["items"][0];
  for (const json& not_pod : {json(), json(1), json("pod"), json::array(), json::object(), json{{"metadata", "x"}}}) {
    EXPECT_EQ(ParsePod(not_pod, kAscend).status().code(), StatusCode::kInvalidArgument) << not_pod.dump();
  }
  auto mutate = [&](auto fn) {
    json p = base;
    fn(p);
    return ParsePod(p, kAscend).status().code();
  };
  EXPECT_EQ(mutate([](json& p) { p["metadata"].erase("uid"); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["metadata"]["uid"] = 42; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["metadata"]["name"] = "has space"; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["metadata"]["name"] = std::string(100000, 'a'); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["metadata"].erase("namespace"); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["metadata"]["ownerReferences"] = "Job"; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["metadata"]["ownerReferences"][0].erase("uid"); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["metadata"]["ownerReferences"][0]["kind"] = "Job\n"; }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["spec"]["nodeName"] = 12; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["spec"]["nodeName"] = "node/../x"; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["spec"] = "x"; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(mutate([](json& p) { p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "a b"; }),
            StatusCode::kInvalidArgument);
  // Annotations of the wrong type: as if absent (then no rank: not a job pod).
  EXPECT_EQ(mutate([](json& p) { p["metadata"]["annotations"] = json::array(); }), StatusCode::kNotFound);
  // Labels of the wrong type are ignored.
  EXPECT_EQ(mutate([](json& p) { p["metadata"]["labels"] = 5; }), StatusCode::kOk);
  // Status of the wrong type: no phase.
  EXPECT_EQ(mutate([](json& p) { p["status"] = json::array(); }), StatusCode::kOk);
}

// Every subtree of every recorded object replaced by hostile values: the
// parsers answer (ok or an error) and never throw; what parses builds jobs.
TEST(K8sDiscovery, HostileValuesAnywhereNeverThrow) {
  const std::vector<json> hostile = {json(),
                                     json(-1),
                                     json(-1e308),
                                     json(1e308),
                                     json(""),
                                     json(std::string(70000, 'x')),
                                     json(true),
                                     json::array({1, "a"}),
                                     json::object({{"a", json::array()}}),
                                     json(UINT64_MAX),
                                     json("Ascend910-4294967296")};
  std::vector<json> objects;
  // Named: a range-for over a temporary's member would dangle.
  const json volcano = Load("volcano-job-pods.json"), torch = Load("pytorchjob-pods.json"), nodes = Load("nodes.json");
  for (const auto& item : volcano["items"]) objects.push_back(item);
  for (const auto& item : torch["items"]) objects.push_back(item);
  objects.push_back(Load("volcano-podgroup.json"));
  objects.push_back(Load("standalone-pod.json"));
  for (const auto& item : nodes["items"]) objects.push_back(item);
  DiscoveryOptions opts;
  opts.rank_env = "RANK";
  size_t runs = 0;
  std::vector<PodInfo> parsed;
  for (const json& obj : objects) {
    const json flat = obj.flatten();
    for (auto it = flat.begin(); it != flat.end(); ++it) {
      // Replace the leaf and, one level up, its parent.
      std::vector<json::json_pointer> targets = {json::json_pointer(it.key())};
      if (!targets[0].empty()) targets.push_back(targets[0].parent_pointer());
      for (const auto& ptr : targets) {
        for (const json& h : hostile) {
          json m = obj;
          m[ptr] = h;
          ++runs;
          EXPECT_NO_THROW({
            auto p = ParsePod(m, opts);
            if (p.ok()) {
              (void)PodDeviceRanks(*p);
              if (parsed.size() < 2000) parsed.push_back(*p);
            }
            (void)ParsePodGroup(m, opts);
            (void)ParseNodeReadiness(m);
            (void)ConditionMatches(m, json{{"type", "AcceleratorHealthy"}, {"status", "True"}});
            (void)StampCondition(m, json{{"type", "Ready"}, {"status", "True"}}, "2025-03-12T03:00:00Z");
          }) << ptr.to_string();
        }
      }
    }
  }
  EXPECT_GT(runs, 1000u);
  EXPECT_GT(parsed.size(), 100u);  // the mutations also reach the parsers' success paths
  EXPECT_NO_THROW({
    const auto jobs = BuildJobs(parsed, PodGroups({Load("volcano-podgroup.json")}), opts);
    for (const auto& d : jobs) EXPECT_LE(d.warnings.size(), kMaxWarningsPerJob);
  });
}

// ---- placement rules ----

TEST(K8sDiscovery, TerminatingUnscheduledAndFinishedPodsHoldNoRanks) {
  const json base = Load("volcano-job-pods.json")["items"][0];
  json terminating = base;
  terminating["metadata"]["deletionTimestamp"] = "2025-03-12T02:40:50Z";
  json unscheduled = base;
  unscheduled["spec"].erase("nodeName");
  json empty_node = base;
  empty_node["spec"]["nodeName"] = "";
  json failed = base;
  failed["status"]["phase"] = "Failed";
  failed["status"]["reason"] = "Evicted";
  json succeeded = base;
  succeeded["status"]["phase"] = "Succeeded";
  for (const json& p : {terminating, unscheduled, empty_node, failed, succeeded}) {
    const PodInfo info = MustParse(p);
    EXPECT_FALSE(HoldsRanks(info)) << info.node << " " << info.phase;
    EXPECT_TRUE(PodDeviceRanks(info).empty());
    const auto jobs = BuildJobs({info}, kNoPodGroups, kAscend);
    ASSERT_EQ(jobs.size(), 1u);  // the job is still there, with no ranks
    EXPECT_EQ(jobs[0].job.placement_size(), 0);
    EXPECT_EQ(jobs[0].pods, 1u);
    EXPECT_EQ(jobs[0].pods_placed, 0u);
  }
}

TEST(K8sDiscovery, DuplicateRanksKeepTheLowestNamedPod) {
  json list = Load("volcano-job-pods.json");
  // worker-1 claims rank 0 too.
  json dup = list["items"][1];
  dup["metadata"]["annotations"]["hccl/rankIndex"] = "0";
  const auto jobs = BuildJobs({MustParse(dup), MustParse(list["items"][0])}, kNoPodGroups, kAscend);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(Placement(jobs[0].job), ExpectedRanks(0, "ascend-node-01", 0, 8));
  ASSERT_EQ(jobs[0].warnings.size(), 1u);
  EXPECT_EQ(jobs[0].warnings[0],
            "pod llama-pretrain-worker-1 (rank 0): device ranks 0..7 (8) already held by pod llama-pretrain-worker-0; "
            "ignored");

  // Partial overlap: a 16-device worker-0 (ranks 0-15) and worker-1 (ranks 8-15).
  json wide = list["items"][0];
  std::string devs;
  for (int i = 0; i < 16; ++i) devs += (i ? "," : "") + std::string("Ascend910-") + std::to_string(i);
  wide["metadata"]["annotations"]["huawei.com/AscendReal"] = devs;
  const auto overlap = BuildJobs({MustParse(wide), MustParse(list["items"][1])}, kNoPodGroups, kAscend);
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(Placement(overlap[0].job), ExpectedRanks(0, "ascend-node-01", 0, 16));
  EXPECT_TRUE(AnyContains(overlap[0].warnings, "device ranks 8..15 (8) already held by pod llama-pretrain-worker-0"));

  // Two ranks on one (node, device): reported, both kept, and the job says
  // its ranks share a device (ClusterD refuses the job otherwise).
  EXPECT_EQ(overlap[0].job.ranks_per_device(), 0u);
  json same_chip = list["items"][1];
  same_chip["spec"]["nodeName"] = "ascend-node-01";
  same_chip["metadata"]["annotations"]["huawei.com/AscendReal"] =
      "Ascend910-7,Ascend910-8,Ascend910-9,Ascend910-10,"
      "Ascend910-11,Ascend910-12,Ascend910-13,Ascend910-14";
  const auto shared = BuildJobs({MustParse(list["items"][0]), MustParse(same_chip)}, kNoPodGroups, kAscend);
  EXPECT_EQ(shared[0].job.placement_size(), 16);
  EXPECT_TRUE(AnyContains(shared[0].warnings, "device 7 on node ascend-node-01 is claimed by rank 7 and rank 8"));
  EXPECT_EQ(shared[0].job.ranks_per_device(), 2u);
  EXPECT_TRUE(ValidateJob(shared[0].job).ok()) << ValidateJob(shared[0].job).ToString();
}

TEST(K8sDiscovery, WarningsAreBounded) {
  const json base = Load("volcano-job-pods.json")["items"][0];
  std::vector<PodInfo> pods;
  for (int i = 0; i < 100; ++i) {
    json p = base;
    p["metadata"]["name"] = "clone-" + std::to_string(1000 + i);
    p["metadata"]["uid"] = "uid-" + std::to_string(i);
    pods.push_back(MustParse(p));
  }
  const auto jobs = BuildJobs(pods, kNoPodGroups, kAscend);
  ASSERT_EQ(jobs.size(), 1u);
  ASSERT_EQ(jobs[0].warnings.size(), kMaxWarningsPerJob);
  EXPECT_EQ(jobs[0].warnings.back(), "and " + std::to_string(99 - (kMaxWarningsPerJob - 1)) + " more warnings");
  EXPECT_EQ(jobs[0].job.placement_size(), 8);
}

// ---- recovery policy ----

TEST(K8sDiscovery, PolicyAnnotationsValid) {
  std::vector<std::string> warnings;
  auto pol = ParsePolicyAnnotations({{"clusterd.io/allowed-strategies",
                                      " step_retry, Pod-Reschedule,"
                                      "RECOVERY_STRATEGY_SCALE_IN,pod_reschedule"},
                                     {"clusterd.io/max-retries-per-job", "7"},
                                     {"clusterd.io/max-retries-per-node", "0"},
                                     {"clusterd.io/hold-down", "1500ms"},
                                     {"clusterd.io/escalation-window", "2h"},
                                     {"clusterd.io/min-replicas", "2"},
                                     {"clusterd.io/ranks-per-replica", "8"},
                                     {"clusterd.io/silences", "80E01801, 8C1F*"},
                                     {"clusterd.io/step-timeout.PROCESS_RESTART", "90s"},
                                     {"clusterd.io/step-timeout.job-reschedule", "10m"},
                                     {"clusterd.io/job-kind", "inference"},
                                     {"clusterd.io/max-retrys", "4"},
                                     {"other.io/hold-down", "bogus"}},
                                    kAscend, &warnings);
  ASSERT_TRUE(pol.ok()) << pol.status().ToString();
  ASSERT_EQ(pol->allowed_strategies_size(), 3);
  EXPECT_EQ(pol->allowed_strategies(0), v1::RECOVERY_STRATEGY_STEP_RETRY);
  EXPECT_EQ(pol->allowed_strategies(1), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  EXPECT_EQ(pol->allowed_strategies(2), v1::RECOVERY_STRATEGY_SCALE_IN);
  EXPECT_EQ(pol->max_retries_per_job(), 7u);
  ASSERT_TRUE(pol->has_max_retries_per_node());
  EXPECT_EQ(pol->max_retries_per_node(), 0u);
  EXPECT_EQ(pol->hold_down().seconds(), 1);
  EXPECT_EQ(pol->hold_down().nanos(), 500'000'000);
  EXPECT_EQ(pol->escalation_window().seconds(), 7200);
  EXPECT_EQ(pol->min_replicas(), 2u);
  EXPECT_EQ(pol->ranks_per_replica(), 8u);
  ASSERT_EQ(pol->silences_size(), 2);
  EXPECT_EQ(pol->silences(0).code(), "80E01801");
  EXPECT_EQ(pol->silences(1).code(), "8C1F*");
  EXPECT_FALSE(pol->silences(1).has_until());
  ASSERT_EQ(pol->step_timeouts_size(), 2);
  EXPECT_EQ(pol->step_timeouts(0).strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  EXPECT_EQ(pol->step_timeouts(0).timeout().seconds(), 90);
  EXPECT_EQ(pol->step_timeouts(1).strategy(), v1::RECOVERY_STRATEGY_JOB_RESCHEDULE);
  EXPECT_EQ(pol->step_timeouts(1).timeout().seconds(), 600);
  EXPECT_EQ(warnings, (std::vector<std::string>{"unknown policy annotation clusterd.io/max-retrys ignored"}));

  // Another prefix.
  DiscoveryOptions opts;
  opts.policy_prefix = "acme.com/recovery-";
  auto other = ParsePolicyAnnotations({{"acme.com/recovery-hold-down", "5s"}}, opts, nullptr);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->hold_down().seconds(), 5);
}

TEST(K8sDiscovery, PolicyAnnotationsInvalid) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"clusterd.io/allowed-strategies", "PROCESS_RESTART,REBOOT"},
      {"clusterd.io/allowed-strategies", ""},
      {"clusterd.io/allowed-strategies", "UNSPECIFIED"},
      {"clusterd.io/max-retries-per-job", "-1"},
      {"clusterd.io/max-retries-per-job", "5x"},
      {"clusterd.io/max-retries-per-node", "4294967296"},
      {"clusterd.io/hold-down", "30"},
      {"clusterd.io/hold-down", "-5s"},
      {"clusterd.io/hold-down", "99999999999h"},
      {"clusterd.io/escalation-window", "soon"},
      {"clusterd.io/min-replicas", "two"},
      {"clusterd.io/ranks-per-replica", "1.5"},
      {"clusterd.io/silences", "80E01801,bad code"},
      {"clusterd.io/silences", ","},
      {"clusterd.io/step-timeout.reboot", "60s"},
      {"clusterd.io/step-timeout.", "60s"},
      {"clusterd.io/step-timeout.pod_reschedule", "0s"},
      {"clusterd.io/step-timeout.pod_reschedule", std::string(5000, '1') + "s"},
  };
  for (const auto& [k, v] : bad) {
    auto pol = ParsePolicyAnnotations({{k, v}}, kAscend, nullptr);
    EXPECT_EQ(pol.status().code(), StatusCode::kInvalidArgument) << k << "=" << v.substr(0, 40);
  }
  auto twice = ParsePolicyAnnotations(
      {{"clusterd.io/step-timeout.POD_RESCHEDULE", "60s"}, {"clusterd.io/step-timeout.pod-reschedule", "90s"}}, kAscend,
      nullptr);
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  std::map<std::string, std::string> many;
  for (int i = 0; i < 65; ++i) many["clusterd.io/unknown-" + std::to_string(i)] = "1";
  EXPECT_EQ(ParsePolicyAnnotations(many, kAscend, nullptr).status().code(), StatusCode::kInvalidArgument);

  // In a job: one bad value voids the whole annotation policy, with a warning.
  json pod = Load("volcano-job-pods.json")["items"][0];
  pod["metadata"]["annotations"]["clusterd.io/hold-down"] = "forever";
  const auto jobs = BuildJobs({MustParse(pod)}, kNoPodGroups, kAscend);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job.policy().ByteSizeLong(), 0u);  // not half-applied
  ASSERT_EQ(jobs[0].warnings.size(), 1u);
  EXPECT_NE(jobs[0].warnings[0].find("recovery policy annotations ignored, defaults apply: clusterd.io/hold-down"),
            std::string::npos)
      << jobs[0].warnings[0];
}

TEST(K8sDiscovery, PodsDisagreeingOnPolicyAreReported) {
  json list = Load("volcano-job-pods.json");
  json p1 = list["items"][1];
  p1["metadata"]["annotations"]["clusterd.io/max-retries-per-job"] = "9";
  const auto jobs = BuildJobs({MustParse(list["items"][0]), MustParse(p1)}, kNoPodGroups, kAscend);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job.policy().max_retries_per_job(), 5u);  // the first pod's
  ASSERT_EQ(jobs[0].warnings.size(), 1u);
  EXPECT_EQ(jobs[0].warnings[0],
            "pod llama-pretrain-worker-1: annotation clusterd.io/max-retries-per-job=\"9\" differs from pod "
            "llama-pretrain-worker-0's \"5\"; using the latter");
  // The PodGroup sets the key: no disagreement to report.
  const auto with_pg =
      BuildJobs({MustParse(list["items"][0]), MustParse(p1)}, PodGroups({Load("volcano-podgroup.json")}), kAscend);
  EXPECT_TRUE(with_pg[0].warnings.empty());
  EXPECT_EQ(with_pg[0].job.policy().max_retries_per_job(), 3u);
}

// ---- PodGroup grouping ----

TEST(K8sDiscovery, PodGroupGathersPodsOfSeveralOwners) {
  const json pg = Load("podgroup-no-owner.json");
  const json base = Load("volcano-job-pods.json")["items"][0];
  auto gang_pod = [&](const std::string& name, const std::string& uid, const std::string& owner,
                      const std::string& owner_uid, int rank, const std::string& node) {
    json p = base;
    p["metadata"]["namespace"] = "team-b";
    p["metadata"]["name"] = name;
    p["metadata"]["uid"] = uid;
    p["metadata"]["labels"] = {{"job-name", owner}};
    p["metadata"]["annotations"] = {{"scheduling.k8s.io/group-name", "mnist-gang"},
                                    {"hccl/rankIndex", std::to_string(rank)},
                                    {"huawei.com/AscendReal", "Ascend910-0,Ascend910-1"}};
    if (owner.empty()) {
      p["metadata"].erase("ownerReferences");
    } else {
      p["metadata"]["ownerReferences"] = {{{"apiVersion", "batch/v1"},
                                           {"kind", "Job"},
                                           {"name", owner},
                                           {"uid", owner_uid},
                                           {"controller", true},
                                           {"blockOwnerDeletion", true}}};
    }
    p["spec"]["nodeName"] = node;
    return MustParse(p);
  };
  const std::vector<PodInfo> pods = {
      gang_pod("mnist-a-7xk2q", "10000000-0000-4000-8000-00000000000a", "mnist-a",
               "a0000000-0000-4000-8000-000000000001", 0, "ascend-node-01"),
      gang_pod("mnist-b-p9z4c", "10000000-0000-4000-8000-00000000000b", "mnist-b",
               "b0000000-0000-4000-8000-000000000002", 1, "ascend-node-02"),
      gang_pod("mnist-c", "10000000-0000-4000-8000-00000000000c", "", "", 2, "ascend-node-03"),
  };
  EXPECT_EQ(pods[2].job_name, "mnist-gang");
  EXPECT_TRUE(pods[2].owner_uid.empty());

  // PodGroup unknown: one job per owner; the owner-less pod waits.
  EXPECT_EQ(JobKeyOf(pods[2], kNoPodGroups), "");
  const auto split = BuildJobs(pods, kNoPodGroups, kAscend);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0].job.id(), "a0000000-0000-4000-8000-000000000001");
  EXPECT_EQ(split[1].job.id(), "b0000000-0000-4000-8000-000000000002");
  EXPECT_EQ(split[0].job.labels().at("k8s.podgroup"), "mnist-gang");

  // Known: one job keyed by the PodGroup's UID, kind from its label.
  const auto podgroups = PodGroups({pg});
  EXPECT_EQ(JobKeyOf(pods[2], podgroups), "d2c1b0a9-8f7e-4d6c-5b4a-392817161514");
  const auto gang = BuildJobs(pods, podgroups, kAscend);
  ASSERT_EQ(gang.size(), 1u);
  const v1::Job& job = gang[0].job;
  EXPECT_EQ(job.id(), "d2c1b0a9-8f7e-4d6c-5b4a-392817161514");
  EXPECT_EQ(job.kind(), v1::JOB_KIND_INFERENCE);
  EXPECT_EQ(job.labels().at("k8s.namespace"), "team-b");
  EXPECT_EQ(job.labels().at("k8s.name"), "mnist-a");  // the first pod's owner
  EXPECT_EQ(job.labels().at("k8s.podgroup"), "mnist-gang");
  EXPECT_EQ(Placement(job),
            (std::vector<std::string>{"0 ascend-node-01 0", "1 ascend-node-01 1", "2 ascend-node-02 0",
                                      "3 ascend-node-02 1", "4 ascend-node-03 0", "5 ascend-node-03 1"}));
  EXPECT_TRUE(gang[0].warnings.empty()) << gang[0].warnings.front();

  // The same PodGroup name in another namespace is another PodGroup.
  PodInfo elsewhere = pods[0];
  elsewhere.ns = "team-c";
  EXPECT_EQ(JobKeyOf(elsewhere, podgroups), "a0000000-0000-4000-8000-000000000001");
}

TEST(K8sDiscovery, ParsesPodGroup) {
  auto g = ParsePodGroup(Load("volcano-podgroup.json"), kAscend);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->ns, "ai-train");
  EXPECT_EQ(g->name, kPodGroupName);
  EXPECT_EQ(g->uid, kPodGroupUid);
  EXPECT_EQ(g->owner_uid, kVcJobUid);
  EXPECT_EQ(g->owner_kind, "Job");
  EXPECT_EQ(g->policy_annotations.size(), 2u);
  json broken = Load("volcano-podgroup.json");
  broken["metadata"]["uid"] = nullptr;
  EXPECT_EQ(ParsePodGroup(broken, kAscend).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePodGroup(json::array(), kAscend).status().code(), StatusCode::kInvalidArgument);
}

TEST(K8sDiscovery, MindClusterRecoveryKeysOfThePodGroupBecomeJobLabels) {
  json pg = Load("podgroup-no-owner.json");
  pg["metadata"]["labels"]["process-recover-enable"] = "on";
  pg["metadata"]["labels"]["fault-scheduling"] = "grace";
  // Labels first, else annotations; cleaned to [A-Za-z0-9,._-].
  pg["metadata"]["annotations"]["recover-strategy"] = "retry, recover\n;$(x)";
  pg["metadata"]["annotations"]["fault-scheduling"] = "force";
  pg["metadata"]["annotations"]["pod-rescheduling"] = std::string(500, 'o');
  // MindCluster's SuperPoD affinity (ascend-for-volcano reads it off the
  // PodGroup) travels the same way: the job then moves as a unit out of a
  // fault domain with an incident (state/incidents.h DomainAffinityOf).
  pg["metadata"]["annotations"]["sp-block"] = "16";
  pg["metadata"]["annotations"]["huawei.com/schedule_policy"] = "chip2-node16-sp";
  auto g = ParsePodGroup(pg, kAscend);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->mindcluster.at("process-recover-enable"), "on");
  EXPECT_EQ(g->mindcluster.at("fault-scheduling"), "grace");
  EXPECT_EQ(g->mindcluster.at("recover-strategy"), "retry,recoverx");
  EXPECT_EQ(g->mindcluster.at("pod-rescheduling").size(), 128u);

  json base = Load("volcano-job-pods.json")["items"][0];
  base["metadata"]["namespace"] = "team-b";
  base["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "mnist-gang";
  base["metadata"].erase("ownerReferences");
  const auto jobs = BuildJobs({MustParse(base)}, PodGroups({pg}), kAscend);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job.labels().at("mindcluster/process-recover-enable"), "on");
  EXPECT_EQ(jobs[0].job.labels().at("mindcluster/recover-strategy"), "retry,recoverx");
  EXPECT_EQ(jobs[0].job.labels().at("mindcluster/sp-block"), "16");
  EXPECT_EQ(jobs[0].job.labels().at("mindcluster/huawei.com/schedule_policy"), "chip2-node16-sp");
  EXPECT_EQ(jobs[0].job.labels().count("mindcluster/unknown"), 0u);
}

// ---- nodes ----

TEST(K8sDiscovery, NodeReadinessVariants) {
  const json nodes = Load("nodes.json")["items"];
  auto r = [&](int i) {
    auto s = ParseNodeReadiness(nodes[i]);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : NodeReadiness{};
  };
  const NodeReadiness ready = r(0), not_ready = r(1), unknown = r(2), fresh = r(3);
  EXPECT_EQ(ready.name, "ascend-node-01");
  EXPECT_EQ(ready.state, NodeReadiness::State::kReady);
  EXPECT_EQ(ready.reason, "KubeletReady");
  EXPECT_EQ(ready.last_transition_time, "2025-02-01T10:00:20Z");
  EXPECT_FALSE(ready.unschedulable);
  EXPECT_EQ(not_ready.state, NodeReadiness::State::kNotReady);
  EXPECT_EQ(not_ready.reason, "KubeletNotReady");
  EXPECT_NE(not_ready.message.find("cni plugin not initialized"), std::string::npos);
  EXPECT_TRUE(not_ready.unschedulable);
  EXPECT_EQ(unknown.state, NodeReadiness::State::kUnknown);
  EXPECT_EQ(unknown.reason, "NodeStatusUnknown");
  EXPECT_EQ(unknown.message, "Kubelet stopped posting node status.");
  EXPECT_EQ(fresh.name, "ascend-node-04");
  EXPECT_EQ(fresh.state, NodeReadiness::State::kUnknown);  // no Ready condition yet
  EXPECT_EQ(fresh.reason, "");
  EXPECT_EQ(ReadinessName(NodeReadiness::State::kNotReady), "NotReady");

  json odd = nodes[0];
  odd["status"]["conditions"][2]["status"] = "Maybe";
  odd["status"]["conditions"][2]["message"] = std::string(5000, 'm') + "\n";
  auto o = ParseNodeReadiness(odd);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->state, NodeReadiness::State::kUnknown);
  EXPECT_EQ(o->message.size(), 1024u);
  odd["status"]["conditions"] = "Ready";
  EXPECT_EQ(ParseNodeReadiness(odd)->state, NodeReadiness::State::kUnknown);
  json unnamed = nodes[0];
  unnamed["metadata"].erase("name");
  EXPECT_EQ(ParseNodeReadiness(unnamed).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNodeReadiness(json("node")).status().code(), StatusCode::kInvalidArgument);
}

v1::Fault MakeFault(const std::string& node, std::optional<uint32_t> device, const std::string& code,
                    v1::FaultLevel level, v1::FaultState state = v1::FAULT_STATE_ACTIVE) {
  v1::Fault f;
  f.set_node(node);
  if (device) f.set_device_id(*device);
  f.set_code(code);
  f.set_level(level);
  f.set_state(state);
  f.set_count(3);
  f.mutable_last_seen()->set_seconds(1'741'745'000);
  return f;
}

v1::Node MakeNode(const std::string& name, v1::Health health, v1::FaultLevel worst) {
  v1::Node n;
  n.set_name(name);
  n.set_health(health);
  n.set_worst_level(worst);
  return n;
}

TEST(K8sDiscovery, AcceleratorConditionFollowsHealth) {
  const json nodes = Load("nodes.json")["items"];
  const v1::Node faulty = MakeNode("ascend-node-01", v1::HEALTH_UNHEALTHY, v1::FAULT_LEVEL_SEPARATE);
  const std::vector<v1::Fault> faults = {
      MakeFault("ascend-node-01", 3, "80E01801", v1::FAULT_LEVEL_SEPARATE),
      MakeFault("ascend-node-01", 5, "80C98000", v1::FAULT_LEVEL_NOT_HANDLE),  // healthy level
      MakeFault("ascend-node-01", 2, "80E18005", v1::FAULT_LEVEL_RESTART_NPU, v1::FAULT_STATE_CLEARED),  // cleared
      MakeFault("ascend-node-02", 1, "81078603", v1::FAULT_LEVEL_SEPARATE),                              // another node
  };
  const json c = AcceleratorCondition(faulty, "AcceleratorHealthy", faults);
  EXPECT_EQ(c, (json{{"type", "AcceleratorHealthy"},
                     {"status", "False"},
                     {"reason", "AcceleratorFaulty"},
                     {"message", "worst level SEPARATE; 1 active fault: 80E01801 (device 3, SEPARATE)"}}));
  // What the node already carries: no patch needed.
  EXPECT_TRUE(ConditionMatches(nodes[0], c));
  EXPECT_FALSE(ConditionMatches(nodes[1], c));  // no such condition there
  json other_msg = c;
  other_msg["message"] = "worst level SEPARATE";
  EXPECT_FALSE(ConditionMatches(nodes[0], other_msg));
  json other_status = c;
  other_status["status"] = "True";
  EXPECT_FALSE(ConditionMatches(nodes[0], other_status));
  for (const json& hostile : {json(), json::array(), json{{"status", "x"}}, json{{"status", {{"conditions", 1}}}}}) {
    EXPECT_FALSE(ConditionMatches(hostile, c));
  }
  EXPECT_FALSE(ConditionMatches(nodes[0], json{{"status", "False"}}));  // no type

  // Stamping: unchanged status keeps the transition time; a change takes now.
  const json kept = StampCondition(nodes[0], c, "2025-03-12T03:05:00Z");
  EXPECT_EQ(kept["lastTransitionTime"], "2025-03-12T02:31:07Z");
  EXPECT_EQ(kept["lastHeartbeatTime"], "2025-03-12T03:05:00Z");
  const json healed = AcceleratorCondition(MakeNode("ascend-node-01", v1::HEALTH_HEALTHY, v1::FAULT_LEVEL_UNSPECIFIED),
                                           "AcceleratorHealthy", std::span<const v1::Fault>());
  EXPECT_EQ(healed, (json{{"type", "AcceleratorHealthy"},
                          {"status", "True"},
                          {"reason", "AcceleratorHealthy"},
                          {"message", "no active faults"}}));
  EXPECT_FALSE(ConditionMatches(nodes[0], healed));
  EXPECT_EQ(StampCondition(nodes[0], healed, "2025-03-12T03:05:00Z")["lastTransitionTime"], "2025-03-12T03:05:00Z");
  EXPECT_EQ(StampCondition(nodes[1], healed, "2025-03-12T03:05:00Z")["lastTransitionTime"], "2025-03-12T03:05:00Z");
}

TEST(K8sDiscovery, AcceleratorConditionStatesAndBounds) {
  const std::vector<v1::Fault> sub = {MakeFault("n1", std::nullopt, "NODE_DISK_FULL", v1::FAULT_LEVEL_SUB_HEALTH),
                                      MakeFault("n1", 0, "80CB8009", v1::FAULT_LEVEL_PRE_SEPARATE)};
  const json s = AcceleratorCondition(MakeNode("n1", v1::HEALTH_SUB_HEALTHY, v1::FAULT_LEVEL_PRE_SEPARATE), "T", sub);
  EXPECT_EQ(s["status"], "True");
  EXPECT_EQ(s["reason"], "AcceleratorSubHealthy");
  EXPECT_EQ(s["message"],
            "worst level PRE_SEPARATE; 2 active faults: 80CB8009 (device 0, PRE_SEPARATE), NODE_DISK_FULL (node, "
            "SUB_HEALTH)");

  const std::vector<v1::Fault> lost = {MakeFault("n1", std::nullopt, "NODE_HEARTBEAT_LOST", v1::FAULT_LEVEL_SEPARATE)};
  const json u = AcceleratorCondition(MakeNode("n1", v1::HEALTH_UNKNOWN, v1::FAULT_LEVEL_SEPARATE), "T", lost);
  EXPECT_EQ(u["status"], "Unknown");
  EXPECT_EQ(u["reason"], "NodeAgentLost");
  EXPECT_EQ(u["message"],
            "no heartbeat from the node agent; worst level SEPARATE; 1 active fault: NODE_HEARTBEAT_LOST (node, "
            "SEPARATE)");
  const json unspecified = AcceleratorCondition(MakeNode("n1", v1::HEALTH_UNSPECIFIED, v1::FAULT_LEVEL_UNSPECIFIED),
                                                "T", std::span<const v1::Fault>());
  EXPECT_EQ(unspecified["status"], "Unknown");
  EXPECT_EQ(unspecified["reason"], "HealthUnknown");

  // Many faults: at most max_codes named, worst first, the rest counted;
  // duplicates of (code, device) once; independent of input order and of
  // counts and times.
  std::vector<v1::Fault> many;
  for (uint32_t d = 0; d < 16; ++d) {
    many.push_back(MakeFault("n1", d, "80E01801", d % 2 ? v1::FAULT_LEVEL_SEPARATE : v1::FAULT_LEVEL_RESTART_NPU));
    many.push_back(MakeFault("n1", d, "80E01801", d % 2 ? v1::FAULT_LEVEL_SEPARATE : v1::FAULT_LEVEL_RESTART_NPU));
  }
  const v1::Node bad = MakeNode("n1", v1::HEALTH_UNHEALTHY, v1::FAULT_LEVEL_SEPARATE);
  const json m = AcceleratorCondition(bad, "T", many, 3);
  EXPECT_EQ(m["message"],
            "worst level SEPARATE; 16 active faults: 80E01801 (device 1, SEPARATE), 80E01801 (device 3, SEPARATE), "
            "80E01801 (device 5, SEPARATE), and 13 more");
  std::mt19937 rng(11);
  std::shuffle(many.begin(), many.end(), rng);
  for (auto& f : many) f.set_count(f.count() + 100);
  EXPECT_EQ(AcceleratorCondition(bad, "T", many, 3), m);

  // Hostile codes: bounded and printable.
  std::vector<v1::Fault> hostile;
  for (int i = 0; i < 50; ++i) {
    hostile.push_back(
        MakeFault("n1", static_cast<uint32_t>(i), std::string(300, 'A') + "\n\x01\xff", v1::FAULT_LEVEL_SEPARATE));
  }
  const json h = AcceleratorCondition(bad, "T", hostile, 50);
  const std::string msg = h["message"];
  EXPECT_LE(msg.size(), 1024u);
  EXPECT_TRUE(std::all_of(msg.begin(), msg.end(), [](char ch) { return ch >= ' ' && ch <= '~'; }));
  EXPECT_NO_THROW((void)h.dump());
}

}  // namespace
}  // namespace clusterd::k8s
