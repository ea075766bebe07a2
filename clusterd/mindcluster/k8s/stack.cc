// MindClusterStack: the "mindcluster" integration's life (start, the loop,
// one pass, stop) and its factory. What a pass reads (the device plugin's,
// MindCluster NodeD's and the public-fault ConfigMaps) is stack_reads.cc,
// what it writes (Volcano's cluster-info from ClusterD's state)
// stack_cluster_info.cc, the operators' ConfigMaps stack_operators.cc, the
// super-pod ConfigMaps stack_superpod.cc.
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

int64_t Seconds(TimePoint t) { return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count(); }
int64_t Millis(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace

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
