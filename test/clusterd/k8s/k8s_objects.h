// API objects for the kubernetes integration and actuator tests, shaped as
// test/k8s/kubernetes_e2e_test.sh creates them in a real API server: Nodes, a
// Volcano job's PodGroup and pods (hccl/rankIndex, huawei.com/AscendReal),
// and the world they live in (the in-memory API server, a context over it,
// a FakeClock).
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterd/config/config.h"
#include "clusterd/k8s/context.h"
#include "clusterd/v1/types.pb.h"
#include "common/clock.h"
#include "test/support/fakes/fake_k8s_client.h"

namespace clusterd::testing {

inline constexpr const char* kJobUid = "7b0c2f4e-0000-4000-8000-00000000a001";  // the Volcano job's
inline constexpr const char* kNamespace = "train";

inline std::string NodePathOf(const std::string& name) { return "/api/v1/nodes/" + name; }
inline std::string PodPathOf(const std::string& name) {
  return std::string("/api/v1/namespaces/") + kNamespace + "/pods/" + name;
}
inline std::string PodGroupPathOf(const std::string& name) {
  return std::string("/apis/scheduling.volcano.sh/v1beta1/namespaces/") + kNamespace + "/podgroups/" + name;
}
inline std::string EventsPathOf(const std::string& ns) { return "/apis/events.k8s.io/v1/namespaces/" + ns + "/events"; }

// A Node whose Ready condition is `ready` ("True", "False", "Unknown").
inline nlohmann::json NodeObject(const std::string& name, const std::string& ready = "True") {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}, {"labels", {{"workerselector", "dls-worker-node"}}}}},
          {"spec", nlohmann::json::object()},
          {"status",
           {{"conditions", nlohmann::json::array({{{"type", "Ready"},
                                                   {"status", ready},
                                                   {"reason", ready == "True" ? "KubeletReady" : "KubeletNotReady"},
                                                   {"message", "test"}}})}}}};
}

inline nlohmann::json OwnerRefs(const std::string& job, const std::string& uid) {
  return nlohmann::json::array({{{"apiVersion", "batch.volcano.sh/v1alpha1"},
                                 {"kind", "Job"},
                                 {"name", job},
                                 {"uid", uid},
                                 {"controller", true}}});
}

inline nlohmann::json PodGroupObject(const std::string& job = "llm", const std::string& uid = kJobUid) {
  return {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
          {"kind", "PodGroup"},
          {"metadata", {{"name", job}, {"uid", "pg-" + job}, {"ownerReferences", OwnerRefs(job, uid)}}},
          {"spec", {{"minMember", 2}}}};
}

// A bound, running pod of the Volcano job `job` holding Ascend chips 0 and 1
// of `node` at pod rank `rank` (device ranks 2*rank and 2*rank+1).
inline nlohmann::json PodObject(const std::string& name, const std::string& pod_uid, const std::string& node, int rank,
                                const std::string& job = "llm", const std::string& job_uid = kJobUid) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"uid", pod_uid},
            {"labels", {{"volcano.sh/job-name", job}}},
            {"annotations",
             {{"scheduling.k8s.io/group-name", job},
              {"hccl/rankIndex", std::to_string(rank)},
              {"huawei.com/AscendReal", "Ascend910-0,Ascend910-1"}}},
            {"ownerReferences", OwnerRefs(job, job_uid)}}},
          {"spec",
           {{"nodeName", node},
            {"containers", nlohmann::json::array({{{"name", "main"},
                                                   {"image", "train:1"},
                                                   {"resources", {{"limits", {{"huawei.com/Ascend910", "2"}}}}}}})}}},
          {"status", {{"phase", "Running"}}}};
}

// resource.k8s.io/v1 paths (DRA).
inline std::string SlicePathOf(const std::string& name) { return "/apis/resource.k8s.io/v1/resourceslices/" + name; }
inline std::string RulesPath() { return "/apis/resource.k8s.io/v1/devicetaintrules"; }
inline std::string RulePathOf(const std::string& name) { return RulesPath() + "/" + name; }

// A ResourceSlice (resource.k8s.io/v1) of `node`'s pool as a DRA driver
// publishes it: devices <prefix>-0 .. <prefix>-<count - 1>, each with the
// int attribute "index" when `index` is set (NVIDIA's driver) and none
// otherwise (names only).
inline nlohmann::json ResourceSliceObject(const std::string& node, const std::string& driver, const std::string& prefix,
                                          int count, bool index) {
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < count; ++i) {
    nlohmann::json d = {{"name", prefix + "-" + std::to_string(i)}};
    if (index) d["attributes"] = {{"index", {{"int", i}}}, {"uuid", {{"string", "u-" + std::to_string(i)}}}};
    devices.push_back(d);
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", node + "-" + prefix}}},
          {"spec",
           {{"driver", driver},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices", devices}}}};
}

// An active fault of a chip, as ClusterD lists it for a node.
inline v1::Fault ChipFault(const std::string& node, const std::string& code, uint32_t device,
                           v1::FaultLevel level = v1::FAULT_LEVEL_SEPARATE) {
  v1::Fault f;
  f.set_node(node);
  f.set_code(code);
  f.set_device_id(device);
  f.set_level(level);
  f.set_state(v1::FAULT_STATE_ACTIVE);
  return f;
}

// The in-memory API server with two Ready Nodes (worker01, worker02), the
// job "llm" (PodGroup and two pods, llm-worker-0 on worker01 and
// llm-worker-1 on worker02), and contexts over it.
struct K8sWorld {
  FakeClock clock;
  std::shared_ptr<FakeK8sClient> api = std::make_shared<FakeK8sClient>();
  ClusterdConfig::Kubernetes settings;

  K8sWorld() {
    // The workload's controller: a removed pod comes back as "<name>-r" (a
    // new uid) holding the same ranks on worker03 (replacement_node),
    // Running, as the actuator
    // waits for (replace_pods = false: nothing comes back).
    api->SetPodController([this](const nlohmann::json& removed) {
      if (!replace_pods) return;
      nlohmann::json pod = removed;
      auto& meta = pod["metadata"];
      meta["name"] = meta.value("name", "") + "-r";
      meta["uid"] = meta.value("uid", "") + "-r";
      meta.erase("resourceVersion");
      meta.erase("deletionTimestamp");
      pod["spec"]["nodeName"] = replacement_node;
      pod["status"] = {{"phase", "Running"}};
      api->Set("/api/v1/namespaces/" + meta.value("namespace", "") + "/pods/" + meta["name"].get<std::string>(), pod);
      Settle();  // in the caches before the actuator looks for it
    });
    api->Set(NodePathOf("worker01"), NodeObject("worker01"));
    api->Set(NodePathOf("worker02"), NodeObject("worker02"));
    api->Set(PodGroupPathOf("llm"), PodGroupObject());
    api->Set(PodPathOf("llm-worker-0"), PodObject("llm-worker-0", "pod-uid-0", "worker01", 0));
    api->Set(PodPathOf("llm-worker-1"), PodObject("llm-worker-1", "pod-uid-1", "worker02", 1));
  }

  // A context of its own (as after a restart of ClusterD) over the same API
  // server, with its watches started and caught up.
  std::shared_ptr<KubernetesContext> Context() {
    auto ctx = KubernetesContext::Create(settings, api);
    ctx->StartWatches(nullptr);
    Watching();
    return ctx;
  }
  // Watches were started (a context's, or an integration's): waits until
  // they are open and caught up.
  void Watching() {
    watches += settings.podgroups ? 3 : 2;  // pods, Nodes, PodGroups when followed
    Settle();
  }
  // Waits until every watch has seen the changes made so far.
  void Settle() const { ASSERT_TRUE(api->WaitCaughtUp(watches)); }

  size_t watches = 0;  // started so far
  bool replace_pods = true;
  std::string replacement_node = "worker03";  // where the scheduler puts a replacement
};

}  // namespace clusterd::testing
