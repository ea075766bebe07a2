// What the "kubernetes" integration and actuator share (docs/kubernetes.md):
// one API client and one watch each of pods, PodGroups and Nodes per process,
// so that turning on both costs one set of watches; the settings both read
// (the discovery keys, the marks ClusterD puts on Nodes, the DRA device
// match); and which version of resource.k8s.io serves what (DRA).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/config/config.h"
#include "clusterd/k8s/api/client.h"
#include "clusterd/k8s/api/informer.h"
#include "clusterd/k8s/discovery.h"
#include "clusterd/k8s/dra.h"
#include "clusterd/k8s/requests.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

// The marks' names: the annotations live in the taint key's domain
// ("clusterd.io/fault" -> "clusterd.io/cordoned", ...).
KubernetesMarks MarksFor(const ClusterdConfig::Kubernetes& k8s);
k8s::DiscoveryOptions DiscoveryOptionsFrom(const ClusterdConfig::Kubernetes& k8s);
k8s::DraMatch DraMatchFrom(const ClusterdConfig::Kubernetes& k8s);
// The client for config.k8s: --kubeconfig, else the pod's service account.
StatusOr<std::unique_ptr<k8s::Client>> MakeKubernetesClient(const ClusterdConfig::Kubernetes& k8s);

// The API client and the watches, shared by the integration and the actuator
// of one ClusterD. Informers start on the first StartWatches and stop with the
// context (or StopWatches). Thread-safe.
class KubernetesContext {
 public:
  // The context for this config (one per kubeconfig/context/namespace in the
  // process), with the real client; built on first use.
  static StatusOr<std::shared_ptr<KubernetesContext>> For(const ClusterdConfig& config);
  // A context of its own over `client` (tests: an in-memory API server);
  // never shared through For.
  static std::shared_ptr<KubernetesContext> Create(ClusterdConfig::Kubernetes settings,
                                                   std::shared_ptr<const k8s::ApiClient> client);
  ~KubernetesContext();
  KubernetesContext(const KubernetesContext&) = delete;
  KubernetesContext& operator=(const KubernetesContext&) = delete;

  const k8s::ApiClient& client() const { return *client_; }
  const ClusterdConfig::Kubernetes& settings() const { return settings_; }
  const k8s::DiscoveryOptions& discovery() const { return discovery_; }
  const KubernetesMarks& marks() const { return marks_; }
  const k8s::DraMatch& dra_match() const { return dra_match_; }

  // The version of resource.k8s.io (the first of k8s::kDraVersions) that
  // serves `resource` ("resourceslices", "devicetaintrules"), probed with a
  // GET of one item. NotFound when no version serves it, PermissionDenied
  // when ClusterD may not list it: DRA is optional, callers then skip it.
  // Those answers and a version are remembered for 5 minutes after `now`
  // (a change is logged once); any other error (the API server not
  // reachable) is not remembered. Thread-safe; the probe runs unlocked.
  StatusOr<std::string> DraVersion(const std::string& resource, TimePoint now);
  // Whether a DraVersion error means DRA is not there (NotFound,
  // PermissionDenied) rather than a failed probe.
  static bool DraUnavailable(const Status& s);

  // Something changed in the watched pods, PodGroups or Nodes (after the
  // caches were updated); called on an informer thread: be quick. Once
  // SetListener returns, the previous listener never runs again.
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
  KubernetesContext(ClusterdConfig::Kubernetes settings, std::shared_ptr<const k8s::ApiClient> client);
  void Notify();

  const ClusterdConfig::Kubernetes settings_;
  const std::shared_ptr<const k8s::ApiClient> client_;
  const k8s::DiscoveryOptions discovery_;
  const KubernetesMarks marks_;
  const k8s::DraMatch dra_match_;

  struct DraProbe {
    Status status;  // OK: `version` serves the resource
    std::string version;
    TimePoint until;  // probed again after this
  };
  std::mutex dra_mu_;
  std::map<std::string, DraProbe> dra_;  // by resource; guarded by dra_mu_

  mutable std::mutex mu_;
  Listener listener_;                                        // guarded by mu_
  std::unique_ptr<k8s::Informer> pods_, podgroups_, nodes_;  // set once by StartWatches
};

}  // namespace clusterd
