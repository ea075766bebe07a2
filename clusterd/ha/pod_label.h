// The replica's role on its pod (docs/ha.md "On Kubernetes"): a label
// clusterd.io/ha-role=leader|standby that the chart's Service selects, so
// the Service follows the leader while every healthy replica stays Ready
// (rolling updates, `helm --wait` and PodDisruptionBudgets see them all).
//
// A thread of its own patches the pod (a JSON merge patch through the
// Kubernetes API) whenever the wanted role differs from the one last
// written, retrying every retry_interval; a new leader also marks the pod of
// the replica it replaced as a standby (best effort: that process, if it
// still runs, marks itself as well before it is Ready).
//
// Thread contract: every public method is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "clusterd/config/config.h"
#include "clusterd/k8s/api/client.h"
#include "common/status.h"

namespace clusterd::ha {

inline constexpr const char* kRoleLabel = "clusterd.io/ha-role";

class PodLabeler {
 public:
  PodLabeler(std::unique_ptr<k8s::Client> client, std::string pod_namespace, std::string pod_name,
             std::chrono::milliseconds retry_interval = std::chrono::milliseconds(500));
  ~PodLabeler();  // stops the thread
  PodLabeler(const PodLabeler&) = delete;
  PodLabeler& operator=(const PodLabeler&) = delete;

  // "leader" or "standby": written to this replica's pod from now on.
  void Want(const std::string& role);
  // The pod carries the wanted role (written and answered 2xx).
  bool Settled() const;
  // Why it is not settled ("" when it is).
  std::string Problem() const;
  // Marks another replica's pod (same namespace) as a standby, once.
  void MarkStandby(const std::string& pod_name);

 private:
  void Run();
  Status Patch(const std::string& pod, const std::string& role) const;

  const std::unique_ptr<k8s::Client> client_;
  const std::string namespace_;
  const std::string pod_;
  const std::chrono::milliseconds retry_interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string wanted_;
  std::string written_;
  std::string problem_;
  std::set<std::string> others_;  // pods to mark as standbys
  bool stop_ = false;
  std::thread thread_;
};

// A labeler for config.ha.pod_* through config.k8s's API access; null when
// no pod is configured.
StatusOr<std::unique_ptr<PodLabeler>> MakePodLabeler(const ClusterdConfig& config);

}  // namespace clusterd::ha
