// MindClusterStack, what a pass reads: the ConfigMaps found at start
// (adopted), the device plugin's ConfigMaps (its chips' faults reported to
// ClusterD), MindCluster NodeD's ConfigMaps and the public-fault ConfigMaps
// (docs/mindcluster.md, "The stack's ConfigMaps").
#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/context.h"
#include "clusterd/mindcluster/k8s/stack.h"
#include "clusterd/mindcluster/signal.h"
#include "clusterd/mindcluster/taskd.h"
#include "common/logging.h"

namespace clusterd {

namespace {

using nlohmann::json;
namespace mc = mindcluster;

std::string ReportId(const std::string& node, const mc::ChipFault& f) {
  return node + "/" + std::to_string(f.device) + "/" + f.code;
}

}  // namespace

// ---- the ConfigMaps found at start ----

bool MindClusterStack::Adopt() {
  const std::string path = "/api/v1/namespaces/" + k8s::UrlEncode(options_.cluster_info_namespace) +
                           "/configmaps?labelSelector=" + k8s::UrlEncode(std::string(mc::kVolcanoLabel) + "=true");
  auto list = client_->Get(path);
  if (!list.ok()) {
    Warn("adopt", "mindcluster: cannot list the cluster-info ConfigMaps in " + options_.cluster_info_namespace + ": " +
                      list.status().message() + " (retrying)");
    return false;
  }
  const json items = list->value("items", json::array());
  for (const json& cm : items.is_array() ? items : json::array()) {
    const std::string name = k8s::StringAt(cm, {"metadata", "name"});
    const bool device = name.rfind(mc::kClusterInfoDevicePrefix, 0) == 0;
    const bool switches = name.rfind(mc::kClusterInfoSwitchPrefix, 0) == 0;
    if (!device && !switches && name != mc::kClusterInfoNodeName) continue;
    versions_[name] = k8s::ResourceVersionOf(cm);
    const std::string value = k8s::StringAt(cm, {"data", name});
    if (!device && !switches) {
      AdoptNodeCm(value);
      continue;
    }
    if (Status st = device ? publisher_.Adopt(name, value) : switch_publisher_.Adopt(name, value); !st.ok()) {
      Warn("adopt/" + name, "mindcluster: " + options_.cluster_info_namespace + "/" + name +
                                " is not one ClusterD can take over (" + st.message() + "); it will be rewritten");
    }
  }
  // Those written with a larger mindcluster_cluster_info_chunk_bytes (or by
  // the reference, at 800 KiB) hand nodes on until they fit.
  publisher_.Fit();
  switch_publisher_.Fit();
  return true;
}

void MindClusterStack::AdoptNodeCm(const std::string& value) {
  // What is there is what the next write would repeat, unless it changed:
  // its entries keep their UpdateTimes, and an unchanged value is not written.
  node_cm_written_ = value;
  const json doc = json::parse(value, nullptr, false);
  if (!doc.is_object()) return;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key().rfind(mc::kNodeInfoPrefix, 0) != 0 || !it->is_object()) continue;
    mc::PublishedNodeInfo p;
    p.info.node_status = it->value("NodeStatus", "");
    const json ut = it->value("UpdateTime", json());
    p.update_time_ms = ut.is_number_integer() ? ut.get<int64_t>() : 0;
    const json list = it->value("FaultDevList", json());
    for (const json& d : list.is_array() ? list : json::array()) {
      if (!d.is_object()) continue;
      mc::NodeFaultDevice dev;
      dev.device_type = d.value("DeviceType", "");
      const json id = d.value("DeviceId", json());
      dev.device_id = id.is_number_integer() ? id.get<int64_t>() : -1;
      const json codes = d.value("FaultCode", json());
      for (const json& c : codes.is_array() ? codes : json::array()) {
        if (c.is_string()) dev.fault_codes.push_back(c.get<std::string>());
      }
      dev.fault_level = d.value("FaultLevel", "");
      p.info.faults.push_back(std::move(dev));
    }
    node_cm_[it.key().substr(mc::kNodeInfoPrefix.size())] = std::move(p);
  }
}

// ---- the device plugin's ConfigMaps ----

void MindClusterStack::ReadPlugin(std::set<std::string>* dirty) {
  std::map<std::string, std::optional<json>> changes;
  {
    std::lock_guard lock(mu_);
    changes.swap(plugin_changes_);
  }
  for (auto& [name, cm_or_gone] : changes) {
    if (name.rfind(mc::kDeviceInfoPrefix, 0) != 0 || name.size() == mc::kDeviceInfoPrefix.size()) continue;
    const std::string node = name.substr(mc::kDeviceInfoPrefix.size());
    if (!cm_or_gone) {  // deleted (or gone while the watch was down: the relist says so)
      if (plugin_.erase(node) > 0) dirty->insert(node);
      if (switch_reported_.count(node)) switches_gone_.insert(node);
      continue;
    }
    const json& cm = *cm_or_gone;
    PluginNode& p = plugin_[node];
    const std::string rv = k8s::ResourceVersionOf(cm);
    if (!rv.empty() && rv == p.resource_version) continue;
    p.resource_version = rv;
    const std::string where = options_.device_info_namespace + "/" + name + " (resourceVersion " + rv + ")";
    const json* data = cm.contains("data") && cm["data"].is_object() ? &cm["data"] : nullptr;
    // The switch faults (A3), apart: a bad SwitchInfoCfg keeps the last
    // good switch view, a missing one says the switch has none.
    if (data != nullptr && data->contains(mc::kSwitchInfoKey) && (*data)[std::string(mc::kSwitchInfoKey)].is_string()) {
      auto sw = mc::ParseSwitchInfoCfg((*data)[std::string(mc::kSwitchInfoKey)].get<std::string>());
      if (!sw.ok()) {
        if (refused_malformed_ != nullptr) refused_malformed_->Inc();
        Warn("switch/" + node, "mindcluster: " + options_.device_info_namespace + "/" + name + " (resourceVersion " +
                                   rv + ") refused: " + sw.status().message() + "; keeping the last good switch view");
      } else if (!p.switches_known || !(*sw == p.switches)) {
        if (!p.switches_known || sw->faults != p.switches.faults) p.switches_changed = true;
        p.switches = std::move(*sw);
        p.switches_known = true;
        dirty->insert(node);  // cluster-info-switch-<i>
      }
    } else if (!p.switches_known || p.switches.present || !p.switches.faults.empty()) {
      p.switches_changed = p.switches_changed || !p.switches_known || !p.switches.faults.empty();
      p.switches = {};
      p.switches_known = true;
      dirty->insert(node);
    }
    if (data == nullptr || !data->contains(mc::kDeviceInfoKey) ||
        !(*data)[std::string(mc::kDeviceInfoKey)].is_string()) {
      if (refused_malformed_ != nullptr) refused_malformed_->Inc();
      Warn("plugin/" + node, "mindcluster: " + where + " has no " + std::string(mc::kDeviceInfoKey) +
                                 "; keeping the node's last good view");
      continue;
    }
    auto view = mc::ParseDeviceInfoCfg((*data)[std::string(mc::kDeviceInfoKey)].get<std::string>());
    if (!view.ok()) {
      Counter* c = view.status().code() == StatusCode::kFailedPrecondition ? refused_check_code_ : refused_malformed_;
      if (c != nullptr) c->Inc();
      Warn("plugin/" + node,
           "mindcluster: " + where + " refused: " + view.status().message() + "; keeping the node's last good view");
      continue;
    }
    warned_.erase("plugin/" + node);
    if (p.view && *p.view == *view) continue;
    p.view = std::move(*view);
    dirty->insert(node);
  }
}

bool MindClusterStack::LoadReported() {
  v1::ListFaultsRequest req;
  req.set_active_only(true);
  req.set_page_size(1000);
  for (;;) {
    auto page = env_.commands->ListFaults(req);
    if (!page.ok()) {
      Warn("list-faults", "mindcluster: cannot list ClusterD's faults: " + page.status().message());
      return false;
    }
    for (const v1::Fault& f : page->faults()) {
      // Node faults (MindCluster NodeD's, the plugin's switch faults): the
      // raise that would be sent again, keyed by report id.
      auto* node_faults = f.reporter() == options_.noded_reporter                   ? &noded_reported_
                          : f.reporter() == options_.reporter && !f.has_device_id() ? &switch_reported_
                                                                                    : nullptr;
      if (node_faults != nullptr) {
        v1::ReportRequest r;
        r.set_reporter(f.reporter());
        r.set_id(f.external_id());
        r.set_node(f.node());
        r.set_code(f.code());
        r.set_level(f.level());
        r.set_action(v1::TRANSITION_ACTION_RAISE);
        r.set_message(f.message());
        (*node_faults)[f.node()][f.external_id()] = std::move(r);
        continue;
      }
      if (f.reporter() != options_.reporter || !f.has_device_id()) continue;
      mc::ChipFault c;
      c.device = f.device_id();
      c.code = f.code();
      c.level = f.level();
      c.message = f.message();
      reported_[f.node()][{c.device, c.code}] = std::move(c);
    }
    if (page->next_page_token().empty()) break;
    req.set_page_token(page->next_page_token());
  }
  return true;
}

void MindClusterStack::ReportFaults(const std::string& node, const std::vector<mc::ChipFault>& want) {
  std::vector<mc::ChipFault> have;
  if (auto it = reported_.find(node); it != reported_.end()) {
    for (const auto& [key, f] : it->second) have.push_back(f);  // in (device, code) order, as DiffFaults wants
  }
  const mc::FaultDiff diff = mc::DiffFaults(have, want);
  auto queue = [&](const mc::ChipFault& f, bool raise) {
    v1::ReportRequest r;
    r.set_reporter(options_.reporter);
    r.set_id(ReportId(node, f));
    r.set_node(node);
    r.set_device_id(f.device);
    r.set_code(f.code);
    r.set_level(f.level);
    r.set_action(raise ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
    r.set_message(f.message);
    const std::string what =
        "the device plugin's fault " + f.code + " on " + node + " chip " + std::to_string(f.device);
    Queue(std::move(r), what, [this, node, f, raise] {
      auto& mine = reported_[node];
      if (raise) {
        mine[{f.device, f.code}] = f;
      } else {
        mine.erase({f.device, f.code});
      }
      if (mine.empty()) reported_.erase(node);
    });
  };
  for (const auto& f : diff.clear) queue(f, false);
  for (const auto& f : diff.raise) queue(f, true);
}

void MindClusterStack::RegisterPluginNode(const std::string& node, const mc::NodeDeviceInfo& view) {
  v1::Inventory inventory;
  std::set<uint32_t> chips;
  for (const auto* list : {&view.available, &view.unhealthy, &view.network_unhealthy, &view.recovering}) {
    for (const std::string& chip : *list) {
      if (auto id = mc::ChipId(view.device_type, chip)) chips.insert(*id);
    }
  }
  for (uint32_t id : chips) {
    v1::DeviceInfo* d = inventory.add_devices();
    d->set_id(id);
    d->set_vendor("Huawei");
    d->set_model(view.device_type);
  }
  // Sent before the node's reports (the writer applies writes in order);
  // refused, the reports are refused too and both are tried again.
  // The reply runs on the writer thread: it only logs.
  env_.commands->RegisterNode(node, std::move(inventory), [node](const StatusOr<v1::Node>& r) {
    if (!r.ok()) GetLogger("mindcluster")->warn("mindcluster: node {} not registered: {}", node, r.status().message());
  });
}

void MindClusterStack::Queue(v1::ReportRequest report, std::string what, std::function<void()> on_done) {
  batch_.push_back({std::move(report), std::move(what), std::move(on_done)});
  if (batch_.size() >= kMaxBatch) Flush();
}

size_t MindClusterStack::Flush() {
  if (batch_.empty()) return 0;
  // Every report of the pass at once, then one wait: they share group
  // commits instead of waiting for one each.
  std::vector<Queued> batch;
  batch.swap(batch_);
  struct Replies {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Status> status;
    size_t left = 0;
  };
  auto replies = std::make_shared<Replies>();
  replies->status.resize(batch.size());
  replies->left = batch.size();
  for (size_t i = 0; i < batch.size(); ++i) {
    env_.commands->ReportFault(batch[i].report, [replies, i](const StatusOr<v1::ReportResponse>& r) {
      std::lock_guard lock(replies->mu);
      replies->status[i] = r.ok() ? Status::Ok() : r.status();
      if (--replies->left == 0) replies->cv.notify_all();
    });
  }
  {
    std::unique_lock lock(replies->mu);
    replies->cv.wait(lock, [&] { return replies->left == 0; });
  }
  size_t done = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Queued& q = batch[i];
    const bool raise = q.report.action() == v1::TRANSITION_ACTION_RAISE;
    if (!replies->status[i].ok()) {
      if (report_errors_ != nullptr) report_errors_->Inc();
      retry_reports_ = true;
      Warn("report/" + q.report.node(), "mindcluster: " + q.what + " was not " + (raise ? "raised" : "cleared") +
                                            " in ClusterD: " + replies->status[i].message() + " (retried)");
      continue;
    }
    if (reports_ != nullptr) reports_->Inc();
    ++done;
    q.on_done();
  }
  return done;
}

// ---- MindCluster NodeD's ConfigMaps ----

void MindClusterStack::ReadNodeInfo(bool all) {
  // The nodes whose ConfigMap changed (all of them on the first pass and
  // after a refused report): what each says now, or nothing once deleted.
  std::map<std::string, std::optional<mc::NodeInfo>> changed;
  std::set<std::string> seen;
  for (const json& cm : nodeinfo_cms_->List()) {
    const std::string name = k8s::StringAt(cm, {"metadata", "name"});
    if (name.rfind(mc::kNodeInfoPrefix, 0) != 0 || name.size() == mc::kNodeInfoPrefix.size()) continue;
    const std::string node = name.substr(mc::kNodeInfoPrefix.size());
    seen.insert(node);
    const std::string rv = k8s::ResourceVersionOf(cm);
    std::string& last = noded_versions_[node];
    if (rv == last && !all) continue;
    const bool fresh = rv != last;
    last = rv;
    auto info = mc::ParseNodeInfoCm(k8s::StringAt(cm, {"data", std::string(mc::kNodeInfoKey)}));
    if (!info.ok()) {
      if (fresh) {
        Counter* c = info.status().code() == StatusCode::kFailedPrecondition ? refused_check_code_ : refused_malformed_;
        if (c != nullptr) c->Inc();
      }
      Warn("nodeinfo/" + node, "mindcluster: " + options_.cluster_info_namespace + "/" + name + " (resourceVersion " +
                                   rv + ") refused: " + info.status().message() +
                                   "; keeping the node's last good view");
      continue;
    }
    changed[node] = std::move(*info);
  }
  for (auto it = noded_versions_.begin(); it != noded_versions_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    changed[it->first] = std::nullopt;  // deleted: MindCluster's NodeD deletes it when the node is healthy
    it = noded_versions_.erase(it);
  }
  if (all) {
    for (const auto& [node, have] : noded_reported_) {
      if (!seen.count(node)) changed.emplace(node, std::nullopt);
    }
  }
  for (const auto& change : changed) {
    const std::string& node = change.first;  // a plain name: the lambda below captures it
    const std::optional<mc::NodeInfo>& info = change.second;
    std::map<std::string, v1::ReportRequest> want;
    for (const mc::NodeFaultDevice& d : info ? info->faults : std::vector<mc::NodeFaultDevice>{}) {
      const v1::FaultLevel level = ParseMindClusterLevel(d.fault_level).value_or(v1::FAULT_LEVEL_SUB_HEALTH);
      if (level == v1::FAULT_LEVEL_NOT_HANDLE) continue;
      for (const std::string& code : d.fault_codes) {
        v1::ReportRequest r;
        r.set_reporter(options_.noded_reporter);
        r.set_id(node + "/" + d.device_type + "/" + std::to_string(d.device_id) + "/" + code);
        r.set_node(node);
        r.set_code(code);
        r.set_level(level);
        r.set_action(v1::TRANSITION_ACTION_RAISE);
        r.set_message("MindCluster NodeD: " + d.device_type + " " + std::to_string(d.device_id) + " " + d.fault_level);
        want[r.id()] = std::move(r);
      }
    }
    SyncReports(node, want, &noded_reported_, "MindCluster NodeD's fault");
  }
}

void MindClusterStack::SyncReports(const std::string& node, const std::map<std::string, v1::ReportRequest>& want,
                                   std::map<std::string, std::map<std::string, v1::ReportRequest>>* reported,
                                   const std::string& what) {
  const auto found = reported->find(node);
  static const std::map<std::string, v1::ReportRequest> kNone;
  const auto& have = found == reported->end() ? kNone : found->second;
  auto queue = [&](v1::ReportRequest r) {
    const bool raise = r.action() == v1::TRANSITION_ACTION_RAISE;
    v1::ReportRequest kept = r;
    const std::string id = r.id();
    Queue(std::move(r), what + " " + id, [reported, node, id, raise, kept = std::move(kept)] {
      auto& mine = (*reported)[node];
      if (raise) {
        mine[id] = kept;
      } else {
        mine.erase(id);
      }
      if (mine.empty()) reported->erase(node);
    });
  };
  std::vector<v1::ReportRequest> clears;
  for (const auto& [id, r] : have) {
    if (!want.count(id)) {
      v1::ReportRequest c = r;
      c.set_action(v1::TRANSITION_ACTION_CLEAR);
      clears.push_back(std::move(c));
    }
  }
  for (auto& c : clears) queue(std::move(c));
  for (const auto& [id, r] : want) {
    auto h = have.find(id);
    if (h == have.end() || h->second.level() != r.level()) queue(r);
  }
}

// ---- public-fault ConfigMaps ----

size_t MindClusterStack::ReadPublicFaults() {
  size_t done = 0;
  for (const auto& informer : public_fault_cms_) {
    if (!informer->synced()) continue;
    for (const json& cm : informer->List()) {
      const std::string key = k8s::ObjectKey(cm);
      const std::string rv = k8s::ResourceVersionOf(cm);
      auto& last = public_fault_versions_[key];
      if (rv == last) continue;  // each version once; a deleted one changes nothing (as the reference)
      auto refuse = [&](const std::string& why) {
        last = rv;
        if (public_faults_refused_ != nullptr) public_faults_refused_->Inc();
        Warn("publicfault/" + key,
             "mindcluster: public-fault ConfigMap " + key + " (resourceVersion " + rv + ") refused: " + why);
      };
      auto req = ParsePublicFaultCm(k8s::StringAt(cm, {"data", std::string(kPubFaultCmKey)}));
      if (!req.ok()) {
        refuse(req.status().message());
        continue;
      }
      PubFaultPlan plan;
      PubFaultVerdict verdict = PlanPublicFaults(*req, options_.pubfault_table, options_.pubfault_options, &plan);
      if (verdict.code != kPubFaultOk) {
        refuse(std::to_string(verdict.code) + " " + verdict.info);
        continue;
      }
      auto applied = AwaitReply<ClusterCommands::PublicFaultsApplied>(
          [&](auto cb) { env_.commands->ApplyPublicFaults(std::move(plan), options_.pubfault_options, cb); });
      if (!applied.ok()) {
        // Refused as a whole (writes refused, or too many public faults): again on the next pass.
        if (report_errors_ != nullptr) report_errors_->Inc();
        retry_reports_ = true;
        Warn("publicfault/" + key, "mindcluster: public-fault ConfigMap " + key +
                                       " was not applied: " + applied.status().message() + " (retried)");
        continue;
      }
      last = rv;
      done += applied->applied;
      warned_.erase("publicfault/" + key);
    }
  }
  return done;
}

}  // namespace clusterd
