#include "clusterd/mindcluster/k8s/stack.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/context.h"
#include "clusterd/mindcluster/signal.h"
#include "clusterd/mindcluster/taskd.h"
#include "common/logging.h"

namespace clusterd {

namespace {

using nlohmann::json;
namespace mc = mindcluster;

constexpr auto kFollowInterval = std::chrono::milliseconds(250);
// The least time from one pass's start to the next one's.
constexpr auto kMinPassGap = std::chrono::milliseconds(20);
constexpr auto kReportRetry = std::chrono::seconds(5);

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

// A node-level fault's kind in NodeInfo's FaultDevList.
std::string KindOf(v1::FaultSource source) {
  switch (source) {
    case v1::FAULT_SOURCE_CPU: return "CPU";
    case v1::FAULT_SOURCE_MEMORY: return "Memory";
    case v1::FAULT_SOURCE_DISK: return "Disk";
    case v1::FAULT_SOURCE_NETWORK: return "Network";
    case v1::FAULT_SOURCE_HEARTBEAT: return "Heartbeat";
    default: return "Node";
  }
}

std::string ReportId(const std::string& node, const mc::ChipFault& f) {
  return node + "/" + std::to_string(f.device) + "/" + f.code;
}

int64_t Seconds(TimePoint t) { return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count(); }
int64_t Millis(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace

std::string AscendDeviceType(std::string_view vendor, std::string_view model) {
  const std::string v = Lower(vendor), m = Lower(model);
  if (v != "huawei" && v != "sim") return "";
  if (m.find("310p") != std::string::npos) return "Ascend310P";
  if (m.find("310") != std::string::npos) return "Ascend310";
  if (m.find("910") != std::string::npos) return "Ascend910";
  return v == "huawei" ? "npu" : "";
}

MindClusterStack::MindClusterStack(std::shared_ptr<const k8s::ApiClient> client, MindClusterStackOptions options,
                                   Driver driver)
    : client_(std::move(client)),
      options_(std::move(options)),
      driver_(driver),
      publisher_(options_.max_cluster_info_bytes),
      switch_publisher_(options_.max_cluster_info_bytes),
      // Full at the first use (refilled from the epoch), as at every start.
      tokens_(std::max<uint32_t>(options_.writes_per_second, 1), std::max<uint32_t>(options_.writes_per_second, 1),
              TimePoint{}) {}

MindClusterStack::~MindClusterStack() { Stop(); }

Status MindClusterStack::Start(const IntegrationEnv& env) {
  env_ = env;
  if (env.metrics != nullptr) {
    auto& m = *env.metrics;
    const std::string refused = "clusterd_mindcluster_deviceinfo_refused_total";
    const std::string refused_help =
        "Device-plugin ConfigMap versions refused (the node keeps its last good view), by reason.";
    refused_malformed_ = &m.AddCounter(refused, refused_help, {{"reason", "malformed"}});
    refused_check_code_ = &m.AddCounter(refused, refused_help, {{"reason", "check_code"}});
    reports_ = &m.AddCounter("clusterd_mindcluster_deviceinfo_reports_total",
                             "Device-plugin faults raised or cleared in ClusterD.");
    report_errors_ = &m.AddCounter("clusterd_mindcluster_deviceinfo_report_errors_total",
                                   "Device-plugin fault reports ClusterD refused (retried).");
    writes_ = &m.AddCounter(
        "clusterd_mindcluster_cluster_info_writes_total",
        "cluster-info ConfigMaps created or updated (a surplus one is rewritten with \"\", never deleted).");
    write_errors_ = &m.AddCounter("clusterd_mindcluster_cluster_info_write_errors_total",
                                  "Failed cluster-info ConfigMap writes (retried).");
    public_faults_refused_ =
        &m.AddCounter("clusterd_mindcluster_public_fault_cms_refused_total",
                      "Public-fault ConfigMap versions refused (malformed, or refused by PubFault's checks).");
    nodes_ = &m.AddGauge("clusterd_mindcluster_cluster_info_nodes", "Nodes listed in cluster-info-device ConfigMaps.");
    chunks_ = &m.AddGauge("clusterd_mindcluster_cluster_info_chunks", "cluster-info-device ConfigMaps.");
  }
  k8s::InformerOptions opts;
  opts.name = "mindcluster-deviceinfo";
  opts.path = "/api/v1/namespaces/" + k8s::UrlEncode(options_.device_info_namespace) + "/configmaps";
  opts.label_selector = std::string(mc::kCimLabel) + "=true";
  k8s::Informer::Handlers handlers;
  auto changed = [this](const json&) {
    {
      std::lock_guard lock(mu_);
      dirty_ = true;
    }
    cv_.notify_all();
  };
  handlers.on_upsert = changed;
  handlers.on_delete = changed;
  handlers.on_synced = [changed] { changed(json()); };
  // The plugin's ConfigMaps (one per node, thousands) are handed over one by
  // one as they change, so that a pass reads what changed, not the cache.
  k8s::Informer::Handlers plugin_handlers;
  auto plugin_changed = [this](const json& cm, bool deleted) {
    {
      std::lock_guard lock(mu_);
      const std::string name = k8s::StringAt(cm, {"metadata", "name"});
      if (deleted) {
        plugin_changes_[name] = std::nullopt;
      } else {
        plugin_changes_[name] = cm;
      }
      dirty_ = true;
    }
    cv_.notify_all();
  };
  plugin_handlers.on_upsert = [plugin_changed](const json& cm) { plugin_changed(cm, false); };
  plugin_handlers.on_delete = [plugin_changed](const json& cm) { plugin_changed(cm, true); };
  plugin_handlers.on_synced = handlers.on_synced;
  plugin_cms_ = std::make_unique<k8s::Informer>(client_.get(), opts, plugin_handlers, env.metrics);
  plugin_cms_->Start();
  k8s::InformerOptions nodeinfo = opts;
  nodeinfo.name = "mindcluster-nodeinfo";
  nodeinfo.path = "/api/v1/namespaces/" + k8s::UrlEncode(options_.cluster_info_namespace) + "/configmaps";
  nodeinfo_cms_ = std::make_unique<k8s::Informer>(client_.get(), nodeinfo, handlers, env.metrics);
  nodeinfo_cms_->Start();
  for (const std::string& ns : options_.public_fault_namespaces) {
    k8s::InformerOptions pf;
    pf.name = "mindcluster-publicfault";
    pf.path = ns == "*" ? "/api/v1/configmaps" : "/api/v1/namespaces/" + k8s::UrlEncode(ns) + "/configmaps";
    pf.label_selector = std::string(kPubFaultCmLabel) + "=true";
    public_fault_cms_.push_back(std::make_unique<k8s::Informer>(client_.get(), pf, handlers, env.metrics));
    public_fault_cms_.back()->Start();
  }
  if (options_.separation_policy_cm || options_.manual_info_cm) {
    // clusterd-config-cm and clusterd-manual-info-cm: a handful of
    // ConfigMaps in that namespace, watched whole (the names filter here).
    k8s::InformerOptions sys;
    sys.name = "mindcluster-system";
    sys.path = "/api/v1/namespaces/" + k8s::UrlEncode(options_.system_namespace) + "/configmaps";
    system_cms_ = std::make_unique<k8s::Informer>(client_.get(), sys, handlers, env.metrics);
    system_cms_->Start();
  }
  StartOperatorMetrics(env.metrics);
  if (options_.super_pod_cms) StartSuperPods(env.metrics);
  if (driver_ == Driver::kThread) {
    // A commit wakes the loop: a ClusterD fault reaches Volcano without
    // waiting for the next poll. The listener holds only the wake-up.
    env.commands->OnCommit([wake = wake_] {
      std::lock_guard lock(wake->mu);
      wake->state_changed = true;
      wake->cv.notify_one();
    });
    thread_ = std::thread([this] { Loop(); });
  }
  return Status::Ok();
}

void MindClusterStack::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (plugin_cms_) plugin_cms_->Stop();
  if (nodeinfo_cms_) nodeinfo_cms_->Stop();
  for (auto& informer : public_fault_cms_) informer->Stop();
  if (system_cms_) system_cms_->Stop();
  StopSuperPods();
}

void MindClusterStack::Loop() {
  for (;;) {
    const auto started = std::chrono::steady_clock::now();
    const StepResult r = Step();
    // A commit in ClusterD or a plugin ConfigMap that changes wakes the loop
    // at once (ClusterD's state is also followed every 250 ms); writes held
    // by the rate limit go on after a fifth of a second. Passes stay
    // kMinPassGap apart: a busy ClusterD commits many times a second.
    const auto wait = r.pending ? std::chrono::milliseconds(200) : kFollowInterval;
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, wait, [this] { return stopping_ || dirty_ || wake_->state_changed; });
    if (stopping_) return;
    wake_->state_changed = false;  // the next pass reads what it changed
    lock.unlock();
    const auto gap = started + kMinPassGap - std::chrono::steady_clock::now();
    if (gap.count() > 0) std::this_thread::sleep_for(gap);
  }
}

void MindClusterStack::Warn(const std::string& key, const std::string& message) {
  auto& last = warned_[key];
  if (last == message) return;
  last = message;
  GetLogger("mindcluster")->warn("{}", message);
}

MindClusterStack::StepResult MindClusterStack::Step() {
  const TimePoint now = env_.clock->Now();
  StepResult result;
  bool changed = false;  // a watched ConfigMap changed since the last pass
  {
    std::lock_guard lock(mu_);
    changed = dirty_;
    dirty_ = false;
  }
  if (!adopted_) adopted_ = Adopt();
  result.adopted = adopted_;
  result.synced = plugin_cms_ && plugin_cms_->synced();
  if (!adopted_ || !result.synced) return result;
  if (!reported_loaded_) reported_loaded_ = LoadReported();
  if (!reported_loaded_) return result;

  std::set<std::string> dirty;
  const bool first = !followed_;
  ReadPlugin(&dirty);
  // What Volcano reads first: the plugin's view is published as it is, so a
  // change reaches Volcano without waiting for its faults' reports below.
  FollowState(&dirty);
  if (first) {
    for (const std::string& node : publisher_.Nodes()) dirty.insert(node);
    for (const std::string& node : switch_publisher_.Nodes()) dirty.insert(node);
    node_cm_dirty_ = true;
    if (options_.refresh_interval.count() > 0) {
      next_refresh_ = now + std::chrono::duration_cast<TimePoint::duration>(options_.refresh_interval);
    }
  }
  Publish(dirty, Seconds(now), Millis(now));
  if (options_.refresh_interval.count() > 0 && now >= next_refresh_) {
    publisher_.Refresh(Seconds(now));
    switch_publisher_.Refresh(Seconds(now));
    next_refresh_ = now + std::chrono::duration_cast<TimePoint::duration>(options_.refresh_interval);
  }
  result.writes = Write(now, &result.pending);
  // MindCluster's operators' ConfigMaps, after what Volcano reads.
  if (system_cms_ && system_cms_->synced()) {
    if (options_.separation_policy_cm && (changed || !policy_read_)) ReadSeparationPolicy();
    if (options_.manual_info_cm) result.writes += SyncManualInfo(now, &result.pending);
  }
  if (options_.statistics_cms || options_.scheduling_exception_cm)
    result.writes += WriteObservability(now, &result.pending);
  if (options_.super_pod_cms) result.writes += SyncSuperPods(now, &result.pending);

  // The plugin's faults: those of the nodes whose view changed; all of them
  // on the first pass (what went while ClusterD was away) and after a refusal.
  std::set<std::string> report = dirty;
  const bool retry = retry_reports_ && now >= next_report_retry_;
  if (retry) retry_reports_ = false;
  if (first || retry) {
    for (const auto& [node, p] : plugin_) report.insert(node);
    for (const auto& [node, faults] : reported_) report.insert(node);
  }
  for (const std::string& node : report) {
    auto it = plugin_.find(node);
    // A ConfigMap refused since the start: what ClusterD holds stays.
    if (it != plugin_.end() && !it->second.view) continue;
    std::vector<mc::ChipFault> want;
    if (it != plugin_.end()) {
      want = mc::FaultsOf(*it->second.view);
      if (!ours_.count(node)) RegisterPluginNode(node, *it->second.view);
    }
    ReportFaults(node, want);
  }
  // The switch faults: node faults of the same reporter.
  std::set<std::string> switches;
  for (auto& [node, p] : plugin_) {
    if (p.switches_changed || first || retry) switches.insert(node);
    p.switches_changed = false;
  }
  if (first || retry) {
    for (const auto& [node, have] : switch_reported_) switches.insert(node);
  }
  switches.insert(switches_gone_.begin(), switches_gone_.end());
  switches_gone_.clear();
  for (const std::string& node : switches) {
    std::map<std::string, v1::ReportRequest> want;
    auto it = plugin_.find(node);
    if (it != plugin_.end() && !it->second.switches_known) continue;  // refused since the start: ClusterD's stays
    for (const mc::SwitchFault& f : it != plugin_.end() ? it->second.switches.faults : std::vector<mc::SwitchFault>{}) {
      v1::ReportRequest r;
      r.set_reporter(options_.reporter);
      r.set_id(node + "/switch/" + f.switch_chip + "/" + f.switch_port + "/" + f.code);
      r.set_node(node);
      r.set_code(f.code);
      r.set_level(f.level);
      r.set_action(v1::TRANSITION_ACTION_RAISE);
      r.set_message(f.message);
      want[r.id()] = std::move(r);
    }
    SyncReports(node, want, &switch_reported_, "the device plugin's switch fault");
  }
  // MindCluster NodeD's: likewise, all of them once listed the first time.
  if (nodeinfo_cms_->synced() && (changed || retry || !nodeinfo_read_)) {
    ReadNodeInfo(!nodeinfo_read_ || retry);
    nodeinfo_read_ = true;
  }
  result.reports += Flush();
  if (changed || retry || first) result.reports += ReadPublicFaults();
  if (retry_reports_ && next_report_retry_ <= now) next_report_retry_ = now + kReportRetry;

  if (nodes_ != nullptr) nodes_->Set(static_cast<double>(publisher_.node_count()));
  if (chunks_ != nullptr) chunks_->Set(static_cast<double>(publisher_.chunks()));
  return result;
}

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

// ---- ClusterD's own knowledge ----

void MindClusterStack::FollowState(std::set<std::string>* dirty) {
  const ClusterCommands::NodeChanges changes = env_.commands->NodesChangedSince(state_revision_);
  for (const ClusterCommands::NodeView& v : changes.nodes) {
    OurNode ours;
    std::set<uint32_t> npus;
    for (const v1::Device& d : v.devices) {
      const std::string type = AscendDeviceType(d.vendor(), d.model());
      if (type.empty()) continue;
      if (ours.state.device_type.empty()) ours.state.device_type = type;
      ours.state.chips.push_back(d.id());
      npus.insert(d.id());
      if (d.isolated()) ours.state.chip_state[d.id()].isolated = true;
      if (d.separated()) ours.state.chip_state[d.id()].separated = true;
    }
    ours.state.isolated = v.node.isolated() || v.node.cordoned();
    ours.plugin_only = v.node.registered_by() == name();
    // The pre-separate rule: a chip a pod holds stays out of -Unhealthy.
    for (uint32_t id : v.devices_in_use) {
      if (npus.empty() || npus.count(id)) ours.state.chip_state[id].in_use = true;
    }
    std::vector<mc::NodeLevelFault> node_level;
    const std::set<std::string> held(v.held_fault_ids.begin(), v.held_fault_ids.end());
    for (const v1::Fault& f : v.active_faults) {
      if (f.reporter() == options_.reporter) continue;  // the plugin's own: already in its lists
      // TaskD's process faults are not the chip's: the reference tells
      // Volcano through the pods' fault-type label, never these lists.
      if (f.reporter() == mc::kTaskdReporter) continue;
      // Nor are a job's progress faults (progress/monitor.h: JOB_HANG,
      // SLOW_RANK, SLOW_NODE), unless a hang moves the job off the chip
      // (SEPARATE): then Volcano must not place it there again.
      if (f.reporter() == "progress" && f.level() < v1::FAULT_LEVEL_SEPARATE) continue;
      // A step retry or in-place restart through TaskD is handling it: Volcano
      // does not see it (and delete the pods the retry keeps) unless that
      // recovery moves on to rescheduling or fails.
      if (held.count(f.id())) continue;
      if (!f.has_device_id()) {
        node_level.push_back({KindOf(f.source()), -1, f.code(), f.level()});
        continue;
      }
      // A fault of a device that is not an NPU chip is not Volcano's concern;
      // on a node whose chips ClusterD does not know, every device fault is
      // taken as a chip's.
      if (!npus.empty() && !npus.count(f.device_id())) continue;
      mc::ChipState& cs = ours.state.chip_state[f.device_id()];
      cs.level = std::max(cs.level, f.level());
      cs.codes.push_back(f.code());
      if (f.reporter().rfind("pubfault/", 0) == 0) cs.public_fault = true;
    }
    // Its public faults, for statistic-fault-info: one per sender and id,
    // with the chips it names.
    for (const v1::Fault& f : v.active_faults) {
      if (f.reporter().rfind("pubfault/", 0) != 0) continue;
      const std::string resource = f.reporter().substr(9);
      auto it = std::find_if(ours.public_faults.begin(), ours.public_faults.end(), [&](const mc::PublicFaultStat& p) {
        return p.resource == resource && p.fault_id == f.external_id() && p.code == f.code();
      });
      if (it == ours.public_faults.end()) {
        mc::PublicFaultStat p;
        p.resource = resource;
        p.fault_id = f.external_id();
        p.code = f.code();
        p.level = std::string(mc::LevelName(f.level()));
        p.time_ms = f.first_seen().seconds() * 1000 + f.first_seen().nanos() / 1'000'000;
        ours.public_faults.push_back(std::move(p));
        it = std::prev(ours.public_faults.end());
      }
      if (f.has_device_id()) it->dev_ids.push_back(static_cast<int32_t>(f.device_id()));
    }
    ours.node_info = mc::NodeInfoFromFaults(node_level);
    // The separated chips, as clusterd-manual-info-cm lists them: the codes
    // of their active faults, since when.
    for (const v1::Device& d : v.devices) {
      if (!d.separated() || !npus.count(d.id())) continue;
      mc::ManualChip& c = ours.separated[d.id()];
      c.name = mc::ChipName(ours.state.device_type, d.id());
      c.separated_ms = d.separated_time().seconds() * 1000 + d.separated_time().nanos() / 1'000'000;
      if (auto cs = ours.state.chip_state.find(d.id()); cs != ours.state.chip_state.end()) {
        std::set<std::string> codes(cs->second.codes.begin(), cs->second.codes.end());
        c.codes.assign(codes.begin(), codes.end());
      }
    }
    ours_[v.node.name()] = std::move(ours);
    dirty->insert(v.node.name());
  }
  state_revision_ = changes.revision;
  followed_ = true;
}

void MindClusterStack::Publish(const std::set<std::string>& dirty, int64_t now_s, int64_t now_ms) {
  static const OurNode kNobody;
  for (const std::string& node : dirty) {
    auto p = plugin_.find(node);
    const mc::NodeDeviceInfo* view = p != plugin_.end() && p->second.view ? &*p->second.view : nullptr;
    auto o = ours_.find(node);
    const OurNode& ours = o == ours_.end() ? kNobody : o->second;
    if (p != plugin_.end() && view == nullptr && publisher_.ChunkOf(node)) {
      // The plugin's ConfigMap is there but was refused since the start:
      // what was published before (adopted) stays until a good one comes.
    } else if (view == nullptr && (ours.state.chips.empty() || ours.plugin_only)) {
      // No NPU, or a node ClusterD knows only from the plugin, whose
      // ConfigMap is gone.
      publisher_.Remove(node);
    } else if (Status st = publisher_.Set(node, mc::MergeForVolcano(view, ours.state), now_s); !st.ok()) {
      Warn("publish/" + node, "mindcluster: " + st.message());
    }
    // The switch faults (A3) as the plugin reports them; a SwitchInfoCfg
    // refused since the start keeps what was published.
    if (p != plugin_.end() && p->second.switches_known && p->second.switches.present) {
      const mc::SwitchInfo& sw = p->second.switches;
      mc::SwitchEntry entry{sw.fault_codes, sw.fault_level, sw.node_status, sw.levels_json, 0};
      if (Status st = switch_publisher_.Set(node, std::move(entry), now_s); !st.ok()) {
        Warn("publish-switch/" + node, "mindcluster: " + st.message());
      }
    } else if (p == plugin_.end() || p->second.switches_known) {
      switch_publisher_.Remove(node);
    }
    const bool says = !ours.node_info.faults.empty() ||
                      (!ours.node_info.node_status.empty() && ours.node_info.node_status != mc::kNodeHealthy);
    auto cm = node_cm_.find(node);
    if (!says) {
      if (cm != node_cm_.end()) {
        node_cm_.erase(cm);
        node_cm_dirty_ = true;
      }
    } else if (cm == node_cm_.end() || !(cm->second.info == ours.node_info)) {
      const int64_t before = cm == node_cm_.end() ? 0 : cm->second.update_time_ms;
      node_cm_[node] = mc::PublishedNodeInfo{ours.node_info, std::max(now_ms, before + 1)};
      node_cm_dirty_ = true;
    }
  }
}

// ---- writes ----

double MindClusterStack::Refill(TimePoint now) { return tokens_.Available(now); }

bool MindClusterStack::TakeToken(TimePoint now, double keep) { return tokens_.Take(now, keep); }

size_t MindClusterStack::Write(TimePoint now, bool* pending) {
  size_t written = 0;
  bool stopped = false;
  // One write that is not urgent per pass: a pass that writes only what is
  // urgent stays short, so that a chip leaving the available list is planned
  // and written in the next pass instead of waiting behind a row of 800 KiB
  // rewrites (while 1,000 plugin ConfigMaps a second change, every chunk is
  // always dirty).
  bool routine_written = false;
  // A publisher's plan in its order (a ConfigMap that gains a node before the
  // one that loses it), stopping at the first that cannot be written now.
  auto write_plan = [&](auto& publisher) {
    // Only the values that can be written now are built (each up to 800 KiB).
    const auto plan = publisher.Pending(false, std::max<size_t>(static_cast<size_t>(Refill(now)), 1));
    auto done = decltype(plan){};
    if (plan.more) *pending = true;
    for (const auto& w : plan.writes) {
      if (stopped) break;
      // What is not urgent leaves a write in reserve, so that a fault coming
      // meanwhile does not wait for the next token.
      if ((!w.urgent && routine_written) || !TakeToken(now, !w.urgent && options_.writes_per_second > 1 ? 1 : 0)) {
        stopped = *pending = true;
        break;
      }
      if (!w.urgent) routine_written = true;
      if (Status st = PutConfigMap(w.name, w.value); !st.ok()) {
        if (write_errors_ != nullptr) write_errors_->Inc();
        Warn("write/" + w.name, "mindcluster: cannot write " + options_.cluster_info_namespace + "/" + w.name + ": " +
                                    st.message() + " (retrying)");
        stopped = *pending = true;
        break;
      }
      warned_.erase("write/" + w.name);
      done.writes.push_back(w);
      ++written;
    }
    publisher.Written(done);
  };
  write_plan(publisher_);
  write_plan(switch_publisher_);
  if (node_cm_dirty_ && !stopped) {
    // What is already there costs no write and no token.
    auto value = mc::ClusterInfoNodeValue(node_cm_);
    const bool same =
        value.ok() && *value == node_cm_written_ && versions_.count(std::string(mc::kClusterInfoNodeName));
    if (same) {
      node_cm_dirty_ = false;
    } else if (value.ok() && !TakeToken(now)) {
      *pending = true;
    } else {
      Status st = value.ok() ? PutConfigMap(std::string(mc::kClusterInfoNodeName), *value) : value.status();
      if (st.ok()) {
        node_cm_dirty_ = false;
        node_cm_written_ = *value;
        ++written;
      } else {
        if (write_errors_ != nullptr) write_errors_->Inc();
        Warn("write/node", "mindcluster: cannot write " + options_.cluster_info_namespace + "/" +
                               std::string(mc::kClusterInfoNodeName) + ": " + st.message() + " (retrying)");
        *pending = true;
      }
    }
  }
  if (writes_ != nullptr) writes_->Inc(written);
  return written;
}

Status MindClusterStack::PutConfigMap(const std::string& name, const std::string& value) {
  const std::string collection =
      "/api/v1/namespaces/" + k8s::UrlEncode(options_.cluster_info_namespace) + "/configmaps";
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata",
              {{"name", name},
               {"namespace", options_.cluster_info_namespace},
               {"labels", {{std::string(mc::kVolcanoLabel), "true"}}}}},
             {"data", {{name, value}}}};
  if (auto it = versions_.find(name); it != versions_.end()) {
    // Guarded: a ConfigMap someone else changed since we read it is read
    // again and written on the next pass.
    cm["metadata"]["resourceVersion"] = it->second;
    auto put = client_->Put(collection + "/" + k8s::UrlEncode(name), cm);
    if (put.ok()) {
      it->second = k8s::ResourceVersionOf(*put);
      return Status::Ok();
    }
    if (put.status().code() != StatusCode::kNotFound) {
      if (put.status().code() == StatusCode::kAborted) {
        if (auto now = client_->Get(collection + "/" + k8s::UrlEncode(name)); now.ok()) {
          it->second = k8s::ResourceVersionOf(*now);
        }
      }
      return put.status();
    }
    versions_.erase(it);
    cm["metadata"].erase("resourceVersion");
  }
  auto created = client_->Post(collection, cm);
  if (created.ok()) {
    versions_[name] = k8s::ResourceVersionOf(*created);
    return Status::Ok();
  }
  if (created.status().code() == StatusCode::kAlreadyExists) {
    // Made by someone else since: take its version, write over it next pass.
    if (auto now = client_->Get(collection + "/" + k8s::UrlEncode(name)); now.ok()) {
      versions_[name] = k8s::ResourceVersionOf(*now);
    }
  }
  return created.status();
}

StatusOr<std::unique_ptr<Integration>> MakeMindClusterStackIntegration(const ClusterdConfig& config) {
  auto ctx = KubernetesContext::For(config);
  if (!ctx.ok()) return ctx.status();
  MindClusterStackOptions options;
  options.device_info_namespace = config.mindcluster_stack.device_info_namespace;
  options.cluster_info_namespace = config.mindcluster_stack.cluster_info_namespace;
  options.refresh_interval = config.mindcluster_stack.refresh_interval;
  options.writes_per_second = config.mindcluster_stack.writes_per_second;
  options.max_cluster_info_bytes = config.mindcluster_stack.chunk_bytes;
  options.public_fault_namespaces = config.mindcluster_stack.public_fault_namespaces;
  options.system_namespace = config.mindcluster_stack.system_namespace;
  options.separation_policy_cm = config.mindcluster_stack.separation_policy_cm;
  // ClusterD's own policy (as the server gives it to the state): what applies
  // while clusterd-config-cm has none.
  options.separation_default.enabled = config.separation_enabled;
  options.separation_default.threshold = config.separation_threshold;
  options.separation_default.window = config.separation_window;
  options.separation_default.settle = config.separation_settle;
  options.separation_default.release_after =
      config.separation_release_after.count() ? std::optional(config.separation_release_after) : std::nullopt;
  options.manual_info_cm = config.mindcluster_stack.manual_info_cm;
  options.manual_info_interval = config.mindcluster_stack.manual_info_interval;
  options.statistics_cms = config.mindcluster_stack.statistics_cms;
  options.scheduling_exception_cm = config.mindcluster_stack.scheduling_exception_cm;
  options.statistics_interval = config.mindcluster_stack.statistics_interval;
  options.super_pod_cms = config.mindcluster_stack.super_pod_cms;
  if (!config.pubfault.code_table_file.empty()) {
    CLUSTERD_RETURN_IF_ERROR(options.pubfault_table.MergeFile(config.pubfault.code_table_file));
  }
  options.pubfault_options.resources = config.pubfault.resources;
  options.pubfault_options.max_faults = config.pubfault.max_faults;
  // The context owns the client and outlives no integration that holds it.
  std::shared_ptr<const k8s::ApiClient> client(*ctx, &(*ctx)->client());
  return std::unique_ptr<Integration>(std::make_unique<MindClusterStack>(std::move(client), std::move(options)));
}

}  // namespace clusterd
