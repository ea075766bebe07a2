// The "mindcluster" integration (docs/mindcluster.md, "The stack's
// ConfigMaps"): ClusterD in the place of MindCluster's ClusterD next to the
// Ascend device plugin and Volcano's Ascend plugin.
//
// In: the device plugin's kube-system/mindx-dl-deviceinfo-<node> ConfigMaps
// (label mx-consumer-cim=true, key DeviceInfoCfg, CheckCode verified). Each
// chip fault the plugin lists becomes a ClusterD fault of the reporter
// "ascend-device-plugin", raised and cleared by diffing against what that
// reporter has active in ClusterD (so a restart or a relist raises nothing
// twice and clears what went while ClusterD was away). A ConfigMap that does
// not parse or whose CheckCode is wrong changes nothing: the node keeps its
// last good view, the refusal is counted and logged once per version.
//
// Out: mindx-dl/cluster-info-device-<i> (what Volcano schedules on: every
// NPU node's chips, the plugin's view merged with ClusterD's faults,
// isolations and cordons; ClusterInfoPublisher cuts and numbers them) and
// mindx-dl/cluster-info-node-cm (NodeStatus from ClusterD's node-level
// faults), label mx-consumer-volcano=true, one data key equal to the name.
// Written within a pass of the change (a commit in ClusterD or a ConfigMap
// that changes wakes the loop, passes at least 20 ms apart and at most 250 ms),
// at most `writes_per_second`,
// each resourceVersion-guarded; the ConfigMaps found at start are adopted, so
// UpdateTimes keep growing and nothing is emptied across a restart; all are
// rewritten with a fresh UpdateTime every `refresh_interval`. ClusterD runs
// integrations on the leader only, so under HA one replica writes.
//
// Steppable like the "kubernetes" integration: every decision reads the
// Clock of the IntegrationEnv, and tests Step it over an in-memory API server.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/config/config.h"
#include "clusterd/engine/integration.h"
#include "common/rate_limit.h"
#include "clusterd/k8s/api/client.h"
#include "clusterd/k8s/api/informer.h"
#include "clusterd/mindcluster/cluster_info.h"
#include "clusterd/mindcluster/device_info.h"
#include "clusterd/mindcluster/manual_separation.h"
#include "clusterd/mindcluster/node_info.h"
#include "clusterd/mindcluster/pubfault.h"
#include "clusterd/mindcluster/statistics.h"
#include "clusterd/mindcluster/switch_info.h"
#include "common/clock.h"
#include "common/rate_limit.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

struct MindClusterStackOptions {
  std::string device_info_namespace = "kube-system";  // the device plugin's ConfigMaps
  std::string cluster_info_namespace = "mindx-dl";    // what Volcano reads
  // Every ConfigMap rewritten with a fresh UpdateTime this often (0: never).
  std::chrono::nanoseconds refresh_interval = std::chrono::seconds(45);
  // Writes (creates, updates, deletes) to the API server per second at most.
  uint32_t writes_per_second = 5;
  // The reporter of the plugin's faults in ClusterD.
  std::string reporter = "ascend-device-plugin";
  size_t max_cluster_info_bytes = mindcluster::kDefaultClusterInfoChunkBytes;
  // MindCluster NodeD's mindx-dl-nodeinfo-<node> ConfigMaps (read in
  // cluster_info_namespace): their faults are node faults of this reporter.
  std::string noded_reporter = "mindcluster-noded";
  // Public-fault ConfigMaps (label mc-consumer-publicfault=true, key
  // PublicFault) are read in these namespaces; "*": every namespace; none:
  // not read. Checked and applied as PubFault.SendPublicFault's requests.
  std::vector<std::string> public_fault_namespaces;
  PubFaultCodeTable pubfault_table = PubFaultCodeTable::Default();
  PubFaultOptions pubfault_options;
  // MindCluster's operators' ConfigMaps in system_namespace (docs/mindcluster.md,
  // "Separation through ConfigMaps"), each off unless set:
  std::string system_namespace = "cluster-system";
  // clusterd-config-cm's manually_separate_policy.conf, when valid, over
  // `separation_default` (ClusterD's separation_* settings), which applies
  // while the ConfigMap or its key is absent.
  bool separation_policy_cm = false;
  SeparationPolicy separation_default;
  // clusterd-manual-info-cm: the separated chips, rewritten at most once per
  // `manual_info_interval`; a chip an operator deletes there is released.
  bool manual_info_cm = false;
  std::chrono::nanoseconds manual_info_interval = std::chrono::seconds(15);
  // Observability: statistic-fault-info, current-job-statistic,
  // scheduling-exception-report, each rewritten at most once per
  // `statistics_interval` when its content changed.
  bool statistics_cms = false;
  bool scheduling_exception_cm = false;
  std::chrono::nanoseconds statistics_interval = std::chrono::seconds(60);
  // super-pod-<id> ConfigMaps in system_namespace for MindCluster NodeD's
  // pingmesh, built from the device plugin's Node annotations
  // (stack_superpod.cc, mindcluster/superpod.h).
  bool super_pod_cms = false;
};

// The annotation of clusterd-manual-info-cm that holds what ClusterD wrote
// (node -> chips), so that an entry deleted while it was away is released
// at its start.
inline constexpr std::string_view kManualInfoListedAnnotation = "clusterd.io/manual-info-listed";

class MindClusterStack final : public Integration {
 public:
  enum class Driver { kThread, kManual };

  MindClusterStack(std::shared_ptr<const k8s::ApiClient> client, MindClusterStackOptions options,
                   Driver driver = Driver::kThread);
  ~MindClusterStack() override;

  std::string_view name() const override { return "mindcluster"; }
  Status Start(const IntegrationEnv& env) override;
  void Stop() override;

  struct StepResult {
    bool adopted = false;  // the ConfigMaps found at start are taken over
    bool synced = false;   // the plugin's ConfigMaps have been listed
    size_t reports = 0;    // faults raised or cleared in ClusterD
    size_t writes = 0;     // ConfigMaps created, updated or deleted
    bool pending = false;  // writes wait for the rate limit or a retry
  };
  // One turn at the Clock's now, never waiting for anything but the API
  // server and ClusterD's replies. After Start; on the driver thread, or with
  // kManual on one caller's thread.
  StepResult Step();

  // Inspection (tests).
  const mindcluster::ClusterInfoPublisher& publisher() const { return publisher_; }
  const mindcluster::SwitchInfoPublisher& switch_publisher() const { return switch_publisher_; }
  // The separation policy sent to ClusterD last (nullopt: none yet), and
  // whether it came from clusterd-config-cm.
  const std::optional<SeparationPolicy>& separation_policy() const { return policy_sent_; }
  bool separation_policy_from_cm() const { return policy_from_cm_; }

 private:
  struct PluginNode {
    std::string resource_version;                     // of the ConfigMap last read
    std::optional<mindcluster::NodeDeviceInfo> view;  // the last good one
    mindcluster::SwitchInfo switches;                 // SwitchInfoCfg's, the last good one
    bool switches_known = false;                      // a good SwitchInfoCfg (or none) was read
    bool switches_changed = false;
  };
  struct OurNode {
    mindcluster::NodeState state;
    mindcluster::NodeInfo node_info;  // its node-level faults, as Volcano reads them
    bool plugin_only = false;         // registered by this integration: no agent of ClusterD there
    std::map<uint32_t, mindcluster::ManualChip> separated;    // its chips the separation policy separated
    std::vector<mindcluster::PublicFaultStat> public_faults;  // its active public faults
  };

  void Loop();
  void Warn(const std::string& key, const std::string& message);
  bool Adopt();
  void AdoptNodeCm(const std::string& value);
  void ReadPlugin(std::set<std::string>* dirty);
  void ReadNodeInfo(bool all);
  // Raises what `want` has and (*reported)[node] does not, clears the
  // reverse, and keeps (*reported)[node] as what ClusterD holds; a refusal
  // is retried. `what` names the faults in the log.
  void SyncReports(const std::string& node, const std::map<std::string, v1::ReportRequest>& want,
                   std::map<std::string, std::map<std::string, v1::ReportRequest>>* reported, const std::string& what);
  size_t ReadPublicFaults();
  bool LoadReported();
  void ReportFaults(const std::string& node, const std::vector<mindcluster::ChipFault>& want);
  // A node with the plugin's ConfigMap that ClusterD does not know (no NodeD
  // there): registered with the plugin's chips (ClusterCommands::RegisterNode),
  // so that its faults, jobs and recoveries are ClusterD's like any node's.
  void RegisterPluginNode(const std::string& node, const mindcluster::NodeDeviceInfo& view);
  // Reports are queued and sent together by Flush (one wait for them all,
  // so they share group commits); on_done runs on this thread for each that
  // ClusterD took; a refused one is logged and retried.
  struct Queued {
    v1::ReportRequest report;
    std::string what;
    std::function<void()> on_done;
  };
  static constexpr size_t kMaxBatch = 4096;
  void Queue(v1::ReportRequest report, std::string what, std::function<void()> on_done);
  size_t Flush();
  void FollowState(std::set<std::string>* dirty);
  void Publish(const std::set<std::string>& dirty, int64_t now_s, int64_t now_ms);
  // The write budget refilled to `now`: the tokens there are.
  double Refill(TimePoint now);
  // A write token of the rate limit, if one is there beyond `keep`.
  bool TakeToken(TimePoint now, double keep = 0);
  size_t Write(TimePoint now, bool* pending);
  Status PutConfigMap(const std::string& name, const std::string& value);

  // ---- MindCluster's operators' ConfigMaps (stack_operators.cc) ----
  void StartOperatorMetrics(MetricsRegistry* m);
  // clusterd-config-cm: each version once; a valid policy is sent to
  // ClusterD, a bad one is counted and logged, the last good one kept.
  void ReadSeparationPolicy();
  // clusterd-manual-info-cm: an operator's deletions released, then our
  // separations written (rate-limited). Returns the writes made.
  size_t SyncManualInfo(TimePoint now, bool* pending);
  // statistic-fault-info, current-job-statistic, scheduling-exception-report:
  // each when its content changed, at most once per statistics_interval.
  size_t WriteObservability(TimePoint now, bool* pending);
  // ---- super-pod-<id> ConfigMaps (stack_superpod.cc) ----
  struct SuperPods;
  void StartSuperPods(MetricsRegistry* m);
  void StopSuperPods();
  // The Nodes' changes applied; the ConfigMaps whose SuperPoD changed
  // written (rate-limited), those of a SuperPoD without nodes deleted.
  size_t SyncSuperPods(TimePoint now, bool* pending);

  // PUT guarded by `resource_version` ("": POST) in `ns`; the new version.
  StatusOr<std::string> PutOwnConfigMap(const std::string& ns, const std::string& name,
                                        const std::map<std::string, std::string>& data,
                                        const std::map<std::string, std::string>& labels,
                                        const std::map<std::string, std::string>& annotations,
                                        const std::string& resource_version);

  const std::shared_ptr<const k8s::ApiClient> client_;
  const MindClusterStackOptions options_;
  const Driver driver_;
  IntegrationEnv env_;
  std::unique_ptr<k8s::Informer> plugin_cms_;
  std::unique_ptr<k8s::Informer> nodeinfo_cms_;
  std::vector<std::unique_ptr<k8s::Informer>> public_fault_cms_;

  // The loop's lock and wake-up, shared with the commit listener that
  // outlives the stack (ClusterCommands::OnCommit).
  struct Wake {
    std::mutex mu;
    std::condition_variable cv;
    bool state_changed = false;  // a commit since the last pass
  };
  const std::shared_ptr<Wake> wake_ = std::make_shared<Wake>();
  std::mutex& mu_ = wake_->mu;
  std::condition_variable& cv_ = wake_->cv;
  bool dirty_ = false;  // guarded by mu_: a watched ConfigMap changed
  // The plugin's ConfigMaps changed since the last pass, by name (nullopt:
  // deleted). Guarded by mu_.
  std::map<std::string, std::optional<nlohmann::json>> plugin_changes_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;

  // Owned by the stepping thread:
  bool adopted_ = false;
  bool reported_loaded_ = false;
  bool retry_reports_ = false;
  TimePoint next_report_retry_{};
  bool followed_ = false;       // ClusterD's state was followed once
  bool nodeinfo_read_ = false;  // MindCluster NodeD's ConfigMaps were read once
  uint64_t state_revision_ = 0;
  std::map<std::string, PluginNode> plugin_;
  // The plugin's chip faults active in ClusterD: node -> (chip, code) -> fault.
  std::map<std::string, std::map<std::pair<uint32_t, std::string>, mindcluster::ChipFault>> reported_;
  std::vector<Queued> batch_;
  // MindCluster NodeD's: node -> (report id -> the raise) active in ClusterD,
  // and the resourceVersion of its ConfigMap last read ("" once deleted).
  std::map<std::string, std::map<std::string, v1::ReportRequest>> noded_reported_;
  std::map<std::string, std::string> noded_versions_;
  // The plugin's switch faults active in ClusterD (node -> report id ->
  // raise), and the nodes whose plugin ConfigMap went.
  std::map<std::string, std::map<std::string, v1::ReportRequest>> switch_reported_;
  std::set<std::string> switches_gone_;
  std::map<std::string, std::string> public_fault_versions_;  // "ns/name" -> resourceVersion applied
  std::map<std::string, OurNode> ours_;
  mindcluster::ClusterInfoPublisher publisher_;
  mindcluster::SwitchInfoPublisher switch_publisher_;
  std::map<std::string, mindcluster::PublishedNodeInfo> node_cm_;  // nodes with something to say
  bool node_cm_dirty_ = false;
  std::string node_cm_written_;                  // its value as last written or found
  std::map<std::string, std::string> versions_;  // our ConfigMaps: name -> resourceVersion
  TimePoint next_refresh_{};
  TokenBucket tokens_;  // the API server writes, under mu_
  std::map<std::string, std::string> warned_;

  // MindCluster's operators' ConfigMaps (stack_operators.cc).
  std::unique_ptr<k8s::Informer> system_cms_;
  bool policy_read_ = false;
  std::string policy_version_;  // of clusterd-config-cm last handled ("" : absent)
  std::optional<SeparationPolicy> policy_sent_;
  bool policy_from_cm_ = false;
  bool manual_loaded_ = false;
  std::map<std::string, std::set<std::string>> manual_written_;  // what clusterd-manual-info-cm lists from us
  // Its versions handled (looked at, or written by us), the newest few: a
  // version the informer brings late is never taken for an operator's.
  std::deque<std::string> manual_handled_;
  std::optional<std::string> manual_own_;  // the version we wrote last ("": deleted)
  TimePoint manual_next_write_{};
  Counter* policy_applied_ = nullptr;
  Counter* policy_unchanged_ = nullptr;
  Counter* policy_refused_ = nullptr;
  Gauge* policy_from_cm_gauge_ = nullptr;
  Gauge* policy_threshold_ = nullptr;
  Gauge* policy_window_hours_ = nullptr;
  Gauge* policy_release_hours_ = nullptr;
  TimePoint stats_next_{};
  // ns/name -> the data written last and its resourceVersion.
  std::map<std::string, std::map<std::string, std::string>> stats_written_;
  std::map<std::string, std::string> stats_versions_;
  Counter* stats_writes_ = nullptr;
  Counter* stats_write_errors_ = nullptr;
  Counter* manual_writes_ = nullptr;
  Counter* manual_write_errors_ = nullptr;
  Counter* manual_released_ = nullptr;
  Counter* manual_refused_ = nullptr;

  std::shared_ptr<SuperPods> super_pods_;  // with super_pod_cms (shared_ptr: the type is stack_superpod.cc's)

  Counter* public_faults_refused_ = nullptr;
  Counter* refused_malformed_ = nullptr;
  Counter* refused_check_code_ = nullptr;
  Counter* reports_ = nullptr;
  Counter* report_errors_ = nullptr;
  Counter* writes_ = nullptr;
  Counter* write_errors_ = nullptr;
  Gauge* nodes_ = nullptr;
  Gauge* chunks_ = nullptr;
};

// The integration for config: the API client of config.k8s (the one the
// "kubernetes" integration uses), the options of config.mindcluster_stack.
StatusOr<std::unique_ptr<Integration>> MakeMindClusterStackIntegration(const ClusterdConfig& config);

// The device type a NodeD device stands for in the device plugin's names
// ("Ascend910", "Ascend310P", "Ascend310", "npu"), from its vendor and model;
// "" for a device that is not an Ascend NPU. The simulator's chips ("sim",
// "SIM-910B") stand for Ascend910.
std::string AscendDeviceType(std::string_view vendor, std::string_view model);

}  // namespace clusterd
