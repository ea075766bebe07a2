// The Recover service's marks on a TaskD job's Kubernetes objects
// (docs/mindcluster.md, "TaskD's Recover service"): the PodGroup's label
// process-recover-enable=on at Register, its annotation ProcessRecoverStatus
// (retry-success, recover-failed, ...) after each strategy, and the job's
// reset-config-<job> ConfigMap (reset.json and its checkCode) at each stage.
// Calls queue and return; one thread of its own writes, in order. The
// reset-config ConfigMap must exist (the job's YAML makes it, as for the
// reference); ClusterD only reads and updates it, resourceVersion-guarded.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "clusterd/k8s/api/client.h"
#include "clusterd/mindcluster/taskd.h"
#include "common/clock.h"
#include "common/metrics.h"

namespace clusterd {

class TaskdKubeObjects final : public mindcluster::TaskdObjects {
 public:
  // Writes queued beyond this are dropped (counted, logged).
  static constexpr size_t kMaxQueued = 10000;

  // Metrics: clusterd_mindcluster_taskd_object_writes_total{result="ok"|"error"|"dropped"}.
  TaskdKubeObjects(std::shared_ptr<const k8s::ApiClient> client, const Clock* clock, MetricsRegistry* metrics);
  ~TaskdKubeObjects() override;

  void RecoverEnable(const mindcluster::TaskdJobRef& job, std::string_view value) override;
  // Lists the pods of the job's namespace on each node (the job's: its
  // PodGroup annotation) and merge-patches their label.
  void PodFaultTypes(const mindcluster::TaskdJobRef& job, std::map<std::string, std::string> by_node) override;
  void RecoverStatus(const mindcluster::TaskdJobRef& job, const std::string& status) override;
  void ResetConfig(const mindcluster::TaskdJobRef& job, mindcluster::ResetOp op,
                   std::vector<mindcluster::ResetRank> ranks) override;

  // Waits until everything queued so far is written (tests).
  void Drain();

 private:
  void Queue(std::string what, std::function<Status()> write);
  void Loop();
  Status PatchPodGroup(const mindcluster::TaskdJobRef& job, const nlohmann::json& metadata) const;
  Status LabelPods(const mindcluster::TaskdJobRef& job, const std::string& node, const std::string& type) const;
  Status UpdateResetConfig(const mindcluster::TaskdJobRef& job, mindcluster::ResetOp op,
                           const std::vector<mindcluster::ResetRank>& ranks) const;

  std::shared_ptr<const k8s::ApiClient> client_;
  const Clock* clock_;
  Counter* ok_ = nullptr;
  Counter* errors_ = nullptr;
  Counter* dropped_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::function<Status()>>> queue_;
  size_t busy_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace clusterd
