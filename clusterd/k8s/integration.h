// The "kubernetes" integration (docs/kubernetes.md): jobs discovered from
// pods and Volcano PodGroups are written to ClusterD (created, updated,
// deleted as the pods change); a Node whose Ready condition is not True is a
// NODE_NOT_READY fault; and every condition interval a Node condition, the
// isolated-devices mark and the un-isolation of nodes and devices ClusterD
// returned to service (the node's taint and cordon, a device's DRA
// DeviceTaintRule) are kept in step with ClusterD's state.
//
// The loop is steppable (Step: one turn, never waits) with a thin thread
// driver, like the Engine's writer: every decision reads the Clock of the
// IntegrationEnv, so tests step it by hand on a FakeClock over an in-memory
// API server.
#pragma once

#include <condition_variable>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/config/config.h"
#include "clusterd/engine/integration.h"
#include "clusterd/k8s/context.h"
#include "clusterd/k8s/discovery.h"
#include "clusterd/k8s/dra.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

class KubernetesIntegration final : public Integration {
 public:
  // kThread: Start runs the loop on a thread of its own (what ClusterD does).
  // kManual: Start starts the watches only, and the caller Steps.
  enum class Driver { kThread, kManual };

  explicit KubernetesIntegration(std::shared_ptr<KubernetesContext> ctx, Driver driver = Driver::kThread);
  ~KubernetesIntegration() override;

  std::string_view name() const override;
  Status Start(const IntegrationEnv& env) override;
  void Stop() override;

  struct StepResult {
    bool jobs = false;   // jobs and readiness were compared with the caches
    bool nodes = false;  // the node pass ran (conditions, device marks, un-isolation)
    TimePoint next;      // when the next node pass is due (Clock time)
  };
  // One turn of the loop at the Clock's now, without waiting: jobs and Node
  // readiness when the watched objects changed since the last turn (or
  // ClusterD's jobs are not loaded yet); the node pass when due, with the
  // job writes that failed for a passing reason before. After Start; on the
  // driver thread, or with kManual on one caller's thread.
  StepResult Step();

 private:
  void Loop();
  void Warn(const std::string& key, const std::string& message);
  void ApiError(const std::string& key, const std::string& message);
  bool LoadWrittenJobs();
  void SyncJobs();
  Status WriteJob(const v1::Job& job, bool known);
  void SyncReadiness();
  // The Pending pods the scheduler cannot place for want of an accelerator
  // (k8s/scheduling.h), told to ClusterD when they change; at most once
  // every kPendingInterval, after pods or Nodes changed.
  void DiagnosePendingPods(TimePoint now);
  static constexpr std::chrono::seconds kPendingInterval{2};
  static constexpr size_t kMaxPendingFindings = 100;
  // The node pass; true when the devices NodeD reported the kubelet gave
  // pods (Inventory.pod_devices) changed, so the jobs are placed again.
  bool SyncNodes(TimePoint now);
  // kubelet_devices_ from ClusterD's nodes, before the first SyncJobs (so a
  // restarted ClusterD does not first write the jobs without them).
  bool LoadKubeletDevices();
  void SyncNode(const v1::Node& node, nlohmann::json obj, TimePoint now, int64_t grace_s);
  void Unisolate(const std::string& name, const nlohmann::json& obj);
  // NODE_ALLOCATABLE_MISMATCH: the Node's allocatable Ascend resource below
  // the chips NodeD sees usable (all but `unusable`) for k8s_allocatable_hold.
  // `faults`: the node's active faults (read when it has any).
  void CheckAllocatable(const v1::Node& node, const nlohmann::json& obj, uint32_t unusable,
                        const std::vector<v1::Fault>& faults, TimePoint now);
  // A device plugin restarting, or a chip fault the plugin and NodeD see a
  // moment apart, is not a mismatch.
  // The DeviceTaintRules isolate_device wrote, by node, into dra_rules_
  // (none when DRA is not served or the rules cannot be listed).
  void ListDeviceTaintRules(TimePoint now);
  void UntaintDevice(const std::string& node, const k8s::ManagedRule& rule);
  // Removes the fallback taints of `devices` from the Node (one patch,
  // guarded by obj's resourceVersion).
  void LiftDeviceTaints(const std::string& name, const nlohmann::json& obj, const std::set<uint32_t>& devices);
  // Return to service (k8s/validation_view.h): the Events of the newest
  // validations (one ListValidations page) and of held targets, each posted
  // once; the AcceleratorValidation condition of their nodes.
  void SyncValidations(TimePoint now);

  const std::shared_ptr<KubernetesContext> ctx_;
  const Driver driver_;
  IntegrationEnv env_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool dirty_ = false;     // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
  // Owned by the stepping thread:
  bool jobs_initialized_ = false;
  bool jobs_failed_ = false;   // a write of the last SyncJobs failed for a passing reason (Transient)
  bool nodes_passed_ = false;  // a node pass ran; next_nodes_ is set
  TimePoint next_nodes_;
  std::map<std::string, std::string> written_;  // job id -> Fingerprint of what ClusterD holds
  k8s::KubeletDevices kubelet_devices_;         // as of the last node pass
  std::map<std::string, std::string> avoided_;  // AvoidedNodes as of this node pass
  bool kubelet_loaded_ = false;
  std::map<std::string, bool> not_ready_;            // node -> NODE_NOT_READY raised
  std::map<std::string, TimePoint> mismatch_since_;  // node -> allocatable short since
  bool pending_dirty_ = true;                        // pods or Nodes changed since the last diagnosis
  TimePoint pending_due_{};
  std::string pending_told_;                    // the findings last told, serialized
  std::set<std::string> pending_logged_;        // uid/resource/reason of the pods logged
  std::map<std::string, std::string> pending_;  // node -> condition waiting for a second pass
  std::map<std::string, std::string> warned_;
  std::string dra_version_;                                         // of the rules listed by the current node pass
  std::map<std::string, std::vector<k8s::ManagedRule>> dra_rules_;  // node -> its rules, this pass
  // Validation Events posted (their names), of the validations and holds
  // the last pass listed: at most a page's worth.
  std::set<std::string> validation_events_;
  int64_t validation_events_since_s_ = -1;  // set at the first pass: a minute before it
  std::string host_;                        // the Events' reportingInstance
  Counter* jobs_written_ = nullptr;
  Counter* jobs_refused_ = nullptr;
  Gauge* pods_refused_ = nullptr;
  Gauge* pods_kubelet_devices_ = nullptr;
  Gauge* discovery_warnings_ = nullptr;
  Counter* conditions_written_ = nullptr;
  Counter* unisolations_ = nullptr;
  Counter* device_untaints_ = nullptr;
  Counter* fallback_lifts_ = nullptr;
  Counter* avoid_taints_ = nullptr;
  Counter* k8s_errors_ = nullptr;
  Counter* validation_events_posted_ = nullptr;
};

// The integration over KubernetesContext::For(config), run by a thread.
StatusOr<std::unique_ptr<Integration>> MakeKubernetesIntegration(const ClusterdConfig& config);

}  // namespace clusterd
