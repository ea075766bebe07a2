// ClusterD on Kubernetes (docs/kubernetes.md): the "kubernetes" integration
// (jobs discovered from pods and Volcano PodGroups, Node readiness as a fault
// source, a Node condition and the isolation marks kept in step with
// ClusterD's state) and the "kubernetes" actuator (cordon + taint, device
// isolation on the Node, eviction, job restart, Events).
//
// Both talk to the API server through one shared KubernetesContext: one
// client, one watch of pods, PodGroups and Nodes for the whole process, so
// that turning on both costs one set of watches.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "clusterd/config/config.h"
#include "clusterd/engine/integration.h"
#include "clusterd/k8s/api/client.h"
#include "clusterd/k8s/api/informer.h"
#include "clusterd/k8s/discovery.h"
#include "clusterd/recovery/actuators/actuator.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

// Annotations ClusterD writes on Nodes (under the taint key's domain).
struct KubernetesMarks {
  std::string taint_key;            // "clusterd.io/fault"
  std::string cordoned_annotation;  // "clusterd.io/cordoned": we set spec.unschedulable
  std::string isolated_annotation;  // "clusterd.io/isolated-at": when isolate_node ran
  std::string devices_annotation;   // "clusterd.io/isolated-devices": "0,3"
};
KubernetesMarks MarksFor(const ClusterdConfig::Kubernetes& k8s);

// The API client and the watches, shared by the integration and the actuator
// of one ClusterD. Informers start on the first Acquire of each and stop
// with the context. Thread-safe.
class KubernetesContext {
 public:
  // The context for this config (one per kubeconfig/context/namespace in the
  // process); built on first use.
  static StatusOr<std::shared_ptr<KubernetesContext>> For(const ClusterdConfig& config);
  ~KubernetesContext();

  const k8s::Client& client() const { return *client_; }
  const ClusterdConfig::Kubernetes& settings() const { return settings_; }
  const k8s::DiscoveryOptions& discovery() const { return discovery_; }
  const KubernetesMarks& marks() const { return marks_; }

  // Something changed in the watched pods, PodGroups or Nodes (after the
  // caches were updated); called on an informer thread: be quick.
  using Listener = std::function<void()>;
  void SetListener(Listener listener);
  // Starts the watches (idempotent); `metrics` may be null.
  void StartWatches(MetricsRegistry* metrics);
  void StopWatches();

  // Cached objects (empty before the first list).
  std::vector<nlohmann::json> Pods() const;
  std::vector<nlohmann::json> PodGroups() const;
  std::vector<nlohmann::json> Nodes() const;
  std::optional<nlohmann::json> Node(const std::string& name) const;
  // True once pods (and PodGroups when followed) have been listed once.
  bool JobsSynced() const;
  bool NodesSynced() const;

 private:
  KubernetesContext(ClusterdConfig::Kubernetes settings, std::unique_ptr<k8s::Client> client);
  void Notify();

  const ClusterdConfig::Kubernetes settings_;
  std::unique_ptr<k8s::Client> client_;
  k8s::DiscoveryOptions discovery_;
  KubernetesMarks marks_;

  mutable std::mutex mu_;
  Listener listener_;                                        // guarded by mu_
  std::unique_ptr<k8s::Informer> pods_, podgroups_, nodes_;  // set once by StartWatches
};

// The client for config.k8s: --kubeconfig, else the pod's service account.
StatusOr<std::unique_ptr<k8s::Client>> MakeKubernetesClient(const ClusterdConfig::Kubernetes& k8s);
k8s::DiscoveryOptions DiscoveryOptionsFrom(const ClusterdConfig::Kubernetes& k8s);

StatusOr<std::unique_ptr<Integration>> MakeKubernetesIntegration(const ClusterdConfig& config);
StatusOr<std::unique_ptr<Actuator>> MakeKubernetesActuator(const ClusterdConfig& config);

}  // namespace clusterd
