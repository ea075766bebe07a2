#include "clusterd/k8s/context.h"

#include <map>

#include "clusterd/k8s/api/kubeconfig.h"
#include "common/logging.h"

namespace clusterd {

using nlohmann::json;

KubernetesMarks MarksFor(const ClusterdConfig::Kubernetes& k8s) {
  std::string domain = k8s.taint_key;
  if (size_t slash = domain.find('/'); slash != std::string::npos) {
    domain.resize(slash);
  } else {
    domain = "clusterd.io";
  }
  return {k8s.taint_key,
          domain + "/cordoned",
          domain + "/isolated-at",
          domain + "/isolated-devices",
          domain + "/isolated-device-",
          domain + "/avoid-domain"};
}

k8s::DiscoveryOptions DiscoveryOptionsFrom(const ClusterdConfig::Kubernetes& k8s) {
  k8s::DiscoveryOptions o;
  o.rank_annotation = k8s.rank_annotation;
  o.rank_index_keys = k8s.rank_index_keys;
  o.rank_env = k8s.rank_env;
  o.devices_annotation = k8s.devices_annotation;
  o.job_kind_label = k8s.job_kind_label;
  return o;
}

k8s::DraMatch DraMatchFrom(const ClusterdConfig::Kubernetes& k8s) {
  k8s::DraMatch m;
  m.drivers = k8s.dra_drivers;
  m.attribute = k8s.dra_device_attribute;
  m.names = k8s.dra_device_names;
  return m;
}

StatusOr<std::unique_ptr<k8s::Client>> MakeKubernetesClient(const ClusterdConfig::Kubernetes& k8s) {
  auto config = k8s.kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(k8s.kubeconfig, k8s.kube_context);
  if (!config.ok()) return config.status();
  return k8s::Client::Create(std::move(*config));
}

StatusOr<std::shared_ptr<KubernetesContext>> KubernetesContext::For(const ClusterdConfig& config) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<KubernetesContext>> contexts;
  const auto& k = config.k8s;
  const std::string key = k.kubeconfig + "\n" + k.kube_context + "\n" + k.namespace_;
  std::lock_guard lock(mu);
  if (auto existing = contexts[key].lock()) return existing;
  auto client = MakeKubernetesClient(k);
  if (!client.ok()) return client.status();
  auto made = Create(k, std::move(*client));
  contexts[key] = made;
  return made;
}

std::shared_ptr<KubernetesContext> KubernetesContext::Create(ClusterdConfig::Kubernetes settings,
                                                             std::shared_ptr<const k8s::ApiClient> client) {
  return std::shared_ptr<KubernetesContext>(new KubernetesContext(std::move(settings), std::move(client)));
}

KubernetesContext::KubernetesContext(ClusterdConfig::Kubernetes settings, std::shared_ptr<const k8s::ApiClient> client)
    : settings_(std::move(settings)),
      client_(std::move(client)),
      discovery_(DiscoveryOptionsFrom(settings_)),
      marks_(MarksFor(settings_)),
      dra_match_(DraMatchFrom(settings_)) {}

KubernetesContext::~KubernetesContext() { StopWatches(); }

bool KubernetesContext::DraUnavailable(const Status& s) {
  return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kPermissionDenied;
}

StatusOr<std::string> KubernetesContext::DraVersion(const std::string& resource, TimePoint now) {
  std::optional<DraProbe> before;
  {
    std::lock_guard lock(dra_mu_);
    auto it = dra_.find(resource);
    if (it != dra_.end()) {
      if (now < it->second.until) {
        if (!it->second.status.ok()) return it->second.status;
        return it->second.version;
      }
      before = it->second;
    }
  }
  // The first version whose collection answers; 404 is "not served here".
  DraProbe probe{NotFound("no version of resource.k8s.io serves " + resource), "", now + std::chrono::minutes(5)};
  for (std::string_view version : k8s::kDraVersions) {
    auto r = client_->Get(k8s::DraPath(version, resource) + "?limit=1");
    if (r.ok()) {
      probe.status = Status::Ok();
      probe.version = version;
      break;
    }
    if (r.status().code() == StatusCode::kNotFound) continue;
    if (!DraUnavailable(r.status())) return r.status();  // the probe failed: not remembered
    probe.status = {StatusCode::kPermissionDenied,
                    resource + " in resource.k8s.io/" + std::string(version) + ": " + r.status().message()};
    break;
  }
  const bool changed = !before || before->status.code() != probe.status.code() || before->version != probe.version;
  if (changed) {
    if (probe.status.ok()) {
      GetLogger("k8s")->info("kubernetes: DRA: {} served in resource.k8s.io/{}", resource, probe.version);
    } else {
      GetLogger("k8s")->info("kubernetes: DRA device taints off: {}", probe.status.message());
    }
  }
  std::lock_guard lock(dra_mu_);
  dra_[resource] = probe;
  if (!probe.status.ok()) return probe.status;
  return probe.version;
}

void KubernetesContext::SetListener(Listener listener) {
  std::lock_guard lock(mu_);
  listener_ = std::move(listener);
}

void KubernetesContext::Notify() {
  // Called under the lock, so that once SetListener(nullptr) returns the old
  // listener never runs again (its owner may be gone). Listeners are quick.
  std::lock_guard lock(mu_);
  if (listener_) listener_();
}

void KubernetesContext::StartWatches(MetricsRegistry* metrics) {
  std::lock_guard lock(mu_);
  if (pods_) return;
  const std::string ns = settings_.namespace_;
  auto scoped = [&ns](const std::string& prefix, const std::string& resource) {
    return ns.empty() ? prefix + "/" + resource : prefix + "/namespaces/" + k8s::UrlEncode(ns) + "/" + resource;
  };
  k8s::Informer::Handlers h;
  h.on_upsert = [this](const json&) { Notify(); };
  h.on_delete = [this](const json&) { Notify(); };
  h.on_synced = [this]() { Notify(); };
  k8s::InformerOptions pods;
  pods.name = "pods";
  pods.path = scoped("/api/v1", "pods");
  pods_ = std::make_unique<k8s::Informer>(client_.get(), pods, h, metrics);
  if (settings_.podgroups) {
    k8s::InformerOptions pg;
    pg.name = "podgroups";
    pg.path = scoped("/apis/scheduling.volcano.sh/v1beta1", "podgroups");
    // Volcano is optional: without its CRD, pods are jobs by their owners.
    pg.may_be_absent = true;
    pg.absent_recheck = std::chrono::duration_cast<std::chrono::milliseconds>(settings_.crd_recheck);
    podgroups_ = std::make_unique<k8s::Informer>(client_.get(), pg, h, metrics);
  }
  k8s::InformerOptions nodes;
  nodes.name = "nodes";
  nodes.path = "/api/v1/nodes";
  nodes_ = std::make_unique<k8s::Informer>(client_.get(), nodes, h, metrics);
  pods_->Start();
  if (podgroups_) podgroups_->Start();
  nodes_->Start();
}

void KubernetesContext::StopWatches() {
  std::unique_ptr<k8s::Informer> pods, podgroups, nodes;
  {
    std::lock_guard lock(mu_);
    pods = std::move(pods_);
    podgroups = std::move(podgroups_);
    nodes = std::move(nodes_);
  }
  if (pods) pods->Stop();
  if (podgroups) podgroups->Stop();
  if (nodes) nodes->Stop();
}

std::vector<json> KubernetesContext::Pods() const {
  std::lock_guard lock(mu_);
  return pods_ ? pods_->List() : std::vector<json>();
}

std::vector<json> KubernetesContext::PodGroups() const {
  std::lock_guard lock(mu_);
  return podgroups_ ? podgroups_->List() : std::vector<json>();
}

std::vector<json> KubernetesContext::Nodes() const {
  std::lock_guard lock(mu_);
  return nodes_ ? nodes_->List() : std::vector<json>();
}

std::optional<json> KubernetesContext::Node(const std::string& name) const {
  std::lock_guard lock(mu_);
  return nodes_ ? nodes_->Get(name) : std::nullopt;
}

bool KubernetesContext::JobsSynced() const {
  std::lock_guard lock(mu_);
  return pods_ && pods_->synced() && (!podgroups_ || podgroups_->synced());
}

bool KubernetesContext::NodesSynced() const {
  std::lock_guard lock(mu_);
  return nodes_ && nodes_->synced();
}

}  // namespace clusterd
