// MindClusterStack: the super-pod-<id> ConfigMaps MindCluster NodeD's pingmesh
// reads (docs/mindcluster.md, "SuperPoD ConfigMaps for MindCluster NodeD's
// pingmesh"), from the device plugin's Node annotations.
//
// Nodes are watched (one informer, each Node cut to its name, version and the
// four annotations read, so 16,000 Nodes cost a few MiB), each change handed
// over by name; a pass recomputes only the SuperPoDs a change touched and
// writes a ConfigMap only when its value differs from what is there. The
// ConfigMaps themselves are watched too (label app=pingmesh in the system
// namespace): those found at start are adopted (the same value is not
// written again), and one changed or deleted by someone else is written
// back. Writes share the integration's rate limit.
#include <algorithm>
#include <array>
#include <deque>
#include <mutex>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/k8s/api/object.h"
#include "clusterd/mindcluster/k8s/stack.h"
#include "clusterd/mindcluster/superpod.h"
#include "common/logging.h"

namespace clusterd {

namespace {

using nlohmann::json;
namespace mc = mindcluster;

// A Node as the SuperPoD index needs it: its name, version and the device
// plugin's four annotations.
json CutNode(json node) {
  json meta = {{"name", k8s::StringAt(node, {"metadata", "name"})}, {"resourceVersion", k8s::ResourceVersionOf(node)}};
  const json annotations = node.contains("metadata") && node["metadata"].is_object()
                               ? node["metadata"].value("annotations", json::object())
                               : json::object();
  json kept = json::object();
  if (annotations.is_object()) {
    for (std::string_view key : {mc::kSuperPodIdAnnotation, mc::kServerIndexAnnotation, mc::kServerTypeAnnotation,
                                 mc::kBaseDeviceInfosAnnotation}) {
      auto it = annotations.find(std::string(key));
      if (it != annotations.end()) kept[std::string(key)] = *it;
    }
  }
  meta["annotations"] = std::move(kept);
  return json{{"metadata", std::move(meta)}};
}

}  // namespace

struct MindClusterStack::SuperPods {
  std::unique_ptr<k8s::Informer> nodes;
  std::unique_ptr<k8s::Informer> cms;

  // Handed over by the informers' threads.
  std::mutex mu;
  std::map<std::string, std::optional<json>> node_changes;  // name -> cut Node (nullopt: deleted)
  std::map<std::string, std::pair<bool, json>> cm_changes;  // name -> (deleted, object)

  // The stepping thread's.
  mc::SuperPodIndex index;
  std::set<uint64_t> dirty;  // SuperPoDs whose ConfigMap may differ from what is there
  struct There {
    std::string value;  // its superPodDevice
    std::string version;
    bool labelled = true;
    std::deque<std::string> ours;  // the versions we wrote, the newest few
  };
  std::map<uint64_t, There> there;  // the ConfigMaps there, as last seen or written

  Counter* writes = nullptr;
  Counter* write_errors = nullptr;
  Gauge* configmaps = nullptr;
  Gauge* listed = nullptr;
  std::array<Gauge*, mc::kSuperPodSkipReasons> skipped{};
};

void MindClusterStack::StartSuperPods(MetricsRegistry* m) {
  super_pods_ = std::make_shared<SuperPods>();
  SuperPods& sp = *super_pods_;
  if (m != nullptr) {
    sp.writes =
        &m->AddCounter("clusterd_mindcluster_super_pod_writes_total",
                       "super-pod-<id> ConfigMaps created, updated or deleted (written only when they change).");
    sp.write_errors = &m->AddCounter("clusterd_mindcluster_super_pod_write_errors_total",
                                     "Failed super-pod-<id> ConfigMap writes (retried).");
    sp.configmaps = &m->AddGauge("clusterd_mindcluster_super_pod_configmaps",
                                 "super-pod-<id> ConfigMaps ClusterD keeps (SuperPoDs with a node).");
    sp.listed = &m->AddGauge("clusterd_mindcluster_super_pod_nodes", "Nodes listed in super-pod-<id> ConfigMaps.");
    for (size_t i = 0; i < mc::kSuperPodSkipReasons; ++i) {
      sp.skipped[i] = &m->AddGauge(
          "clusterd_mindcluster_super_pod_nodes_skipped",
          "Nodes that name a SuperPoD but are left out of its ConfigMap, by reason (the log says why, once per node).",
          {{"reason", std::string(mc::SuperPodSkipName(static_cast<mc::SuperPodSkip>(i)))}});
    }
  }
  auto wake = [this] {
    {
      std::lock_guard lock(mu_);
      dirty_ = true;
    }
    cv_.notify_all();
  };
  k8s::InformerOptions nodes;
  nodes.name = "mindcluster-superpod-nodes";
  nodes.path = "/api/v1/nodes";
  nodes.transform = CutNode;
  k8s::Informer::Handlers nh;
  nh.on_upsert = [&sp, wake](const json& node) {
    {
      std::lock_guard lock(sp.mu);
      sp.node_changes[k8s::StringAt(node, {"metadata", "name"})] = node;
    }
    wake();
  };
  nh.on_delete = [&sp, wake](const json& node) {
    {
      std::lock_guard lock(sp.mu);
      sp.node_changes[k8s::StringAt(node, {"metadata", "name"})] = std::nullopt;
    }
    wake();
  };
  nh.on_synced = wake;
  sp.nodes = std::make_unique<k8s::Informer>(client_.get(), nodes, nh, m);

  k8s::InformerOptions cms;
  cms.name = "mindcluster-superpod-cms";
  cms.path = "/api/v1/namespaces/" + k8s::UrlEncode(options_.system_namespace) + "/configmaps";
  cms.label_selector = std::string(mc::kPingMeshLabelKey) + "=" + std::string(mc::kPingMeshLabelValue);
  k8s::Informer::Handlers ch;
  auto cm_changed = [&sp, wake](const json& cm, bool deleted) {
    const std::string name = k8s::StringAt(cm, {"metadata", "name"});
    if (!mc::SuperPodIdOfCmName(name)) return;  // pingmesh-config and others: not ours
    {
      std::lock_guard lock(sp.mu);
      sp.cm_changes[name] = {deleted, cm};
    }
    wake();
  };
  ch.on_upsert = [cm_changed](const json& cm) { cm_changed(cm, false); };
  ch.on_delete = [cm_changed](const json& cm) { cm_changed(cm, true); };
  ch.on_synced = wake;
  sp.cms = std::make_unique<k8s::Informer>(client_.get(), cms, ch, m);
  sp.nodes->Start();
  sp.cms->Start();
}

void MindClusterStack::StopSuperPods() {
  if (!super_pods_) return;
  if (super_pods_->nodes) super_pods_->nodes->Stop();
  if (super_pods_->cms) super_pods_->cms->Stop();
}

size_t MindClusterStack::SyncSuperPods(TimePoint now, bool* pending) {
  SuperPods& sp = *super_pods_;
  // Nothing is written before both lists are in: a restart neither deletes
  // a ConfigMap whose nodes are not listed yet nor rewrites one it would find.
  if (!sp.nodes->synced() || !sp.cms->synced()) return 0;
  std::map<std::string, std::optional<json>> node_changes;
  std::map<std::string, std::pair<bool, json>> cm_changes;
  {
    std::lock_guard lock(sp.mu);
    node_changes.swap(sp.node_changes);
    cm_changes.swap(sp.cm_changes);
  }
  for (auto& [node, object] : node_changes) {
    std::optional<mc::SuperPodVerdict> verdict;
    if (object) verdict = mc::SuperPodMemberOf((*object)["metadata"].value("annotations", json::object()));
    const std::string key = "superpod/" + node;
    if (verdict && verdict->skip) {
      Warn(key, "mindcluster: node " + node + " is left out of its SuperPoD's super-pod ConfigMap: " + verdict->why);
    } else {
      warned_.erase(key);
    }
    sp.index.Set(node, std::move(verdict), &sp.dirty);
  }
  for (auto& [name, change] : cm_changes) {
    const uint64_t id = *mc::SuperPodIdOfCmName(name);
    const auto& [deleted, cm] = change;
    const std::string version = k8s::ResourceVersionOf(cm);
    auto it = sp.there.find(id);
    const bool ours = it != sp.there.end() &&
                      std::find(it->second.ours.begin(), it->second.ours.end(), version) != it->second.ours.end();
    if (deleted) {
      // Gone (or its label removed). A version of ours older than the last
      // we wrote is the informer catching up: ignored.
      if (it != sp.there.end() && (version == it->second.version || !ours)) {
        sp.there.erase(it);
        sp.dirty.insert(id);
      }
      continue;
    }
    if (ours) continue;                  // our own write coming back
    SuperPods::There& t = sp.there[id];  // found at start, or written by someone else
    t.value = k8s::StringAt(cm, {"data", std::string(mc::kSuperPodDeviceKey)});
    t.version = version;
    t.labelled = true;
    sp.dirty.insert(id);
  }

  const std::string collection = "/api/v1/namespaces/" + k8s::UrlEncode(options_.system_namespace) + "/configmaps";
  const std::map<std::string, std::string> labels = {
      {std::string(mc::kPingMeshLabelKey), std::string(mc::kPingMeshLabelValue)}};
  size_t written = 0;
  for (auto id_it = sp.dirty.begin(); id_it != sp.dirty.end();) {
    const uint64_t id = *id_it;
    const std::string name = mc::SuperPodCmName(id);
    const std::optional<std::string> want = sp.index.Value(id);
    auto it = sp.there.find(id);
    if ((!want && it == sp.there.end()) ||
        (want && it != sp.there.end() && it->second.value == *want && it->second.labelled)) {
      id_it = sp.dirty.erase(id_it);  // as it should be
      continue;
    }
    if (!TakeToken(now)) {
      *pending = true;
      break;  // the rest at the next pass
    }
    Status st;
    if (want) {
      auto put = PutOwnConfigMap(options_.system_namespace, name, {{std::string(mc::kSuperPodDeviceKey), *want}},
                                 labels, {}, it == sp.there.end() ? "" : it->second.version);
      if (put.ok()) {
        SuperPods::There& t = sp.there[id];
        t.value = *want;
        t.version = *put;
        t.labelled = true;
        t.ours.push_back(*put);
        while (t.ours.size() > 8) t.ours.pop_front();
      } else {
        st = put.status();
      }
    } else {
      // No node left: the ConfigMap goes, as the reference deletes it;
      // guarded, so a version written since is looked at first.
      auto deleted = client_->Delete(collection + "/" + k8s::UrlEncode(name),
                                     json{{"preconditions", {{"resourceVersion", it->second.version}}}});
      if (deleted.ok() || deleted.status().code() == StatusCode::kNotFound) {
        sp.there.erase(it);
      } else {
        st = deleted.status();
      }
    }
    if (st.ok()) {
      if (sp.writes != nullptr) sp.writes->Inc();
      warned_.erase("write/" + name);
      ++written;
      id_it = sp.dirty.erase(id_it);
      continue;
    }
    // Someone else's version (a conflict, or one there already): read, and
    // written over at the next pass unless it already says the same; gone:
    // made again.
    const StatusCode code = st.code();
    if (code == StatusCode::kNotFound) {
      sp.there.erase(id);
    } else if (code == StatusCode::kAborted || code == StatusCode::kAlreadyExists) {
      auto got = client_->Get(collection + "/" + k8s::UrlEncode(name));
      if (got.ok()) {
        SuperPods::There& t = sp.there[id];
        t.value = k8s::StringAt(*got, {"data", std::string(mc::kSuperPodDeviceKey)});
        t.version = k8s::ResourceVersionOf(*got);
        t.labelled =
            k8s::StringAt(*got, {"metadata", "labels", std::string(mc::kPingMeshLabelKey)}) == mc::kPingMeshLabelValue;
      } else if (got.status().code() == StatusCode::kNotFound) {
        sp.there.erase(id);
      }
    }
    if (sp.write_errors != nullptr) sp.write_errors->Inc();
    Warn("write/" + name,
         "mindcluster: cannot write " + options_.system_namespace + "/" + name + ": " + st.message() + " (retrying)");
    *pending = true;
    ++id_it;
  }

  if (sp.configmaps != nullptr) {
    sp.configmaps->Set(static_cast<double>(sp.there.size()));
    sp.listed->Set(static_cast<double>(sp.index.listed()));
    const auto skipped = sp.index.skipped();
    for (size_t i = 0; i < mc::kSuperPodSkipReasons; ++i) sp.skipped[i]->Set(static_cast<double>(skipped[i]));
  }
  return written;
}

}  // namespace clusterd
