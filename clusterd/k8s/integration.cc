#include "clusterd/k8s/integration.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <set>
#include <vector>

#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/discovery.h"
#include "clusterd/k8s/node_status.h"
#include "clusterd/k8s/requests.h"
#include "clusterd/k8s/scheduling.h"
#include "clusterd/k8s/validation_view.h"
#include "common/logging.h"

namespace clusterd {
namespace {

using nlohmann::json;

// Pods and PodGroups of the cache, parsed.
struct JobView {
  std::vector<k8s::PodInfo> pods;
  k8s::PodGroupMap podgroups;
  uint32_t refused = 0;  // pods that look like job pods but are malformed
};

JobView ParseJobView(const KubernetesContext& ctx) {
  JobView v;
  for (const auto& obj : ctx.PodGroups()) {
    auto pg = k8s::ParsePodGroup(obj, ctx.discovery());
    if (pg.ok()) v.podgroups[k8s::PodGroupMapKey(pg->ns, pg->name)] = std::move(*pg);
  }
  for (const auto& obj : ctx.Pods()) {
    auto pod = k8s::ParsePod(obj, ctx.discovery());
    if (pod.ok()) {
      v.pods.push_back(std::move(*pod));
    } else if (pod.status().code() == StatusCode::kInvalidArgument) {
      ++v.refused;
    }
  }
  k8s::RankJobSetPods(v.pods, v.podgroups);
  return v;
}

// What discovery owns of a job: compared with what was written last, so an
// unchanged job is never written again.
std::string Fingerprint(const v1::Job& job) {
  v1::Job f;
  f.set_id(job.id());
  f.set_kind(job.kind());
  *f.mutable_placement() = job.placement();
  *f.mutable_policy() = job.policy();
  *f.mutable_labels() = job.labels();
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  f.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

// A write that may go through if tried again as it is (ClusterD refuses
// writes while its disk is full, or is shutting down); a job it refused for
// what it is (invalid, another source's) waits for its pods to change.
bool Transient(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kResourceExhausted ||
         s.code() == StatusCode::kAborted || s.code() == StatusCode::kDeadlineExceeded;
}

std::string LabelOr(const v1::Job& job, std::string_view key) {
  auto it = job.labels().find(std::string(key));
  return it == job.labels().end() ? std::string() : it->second;
}

}  // namespace

KubernetesIntegration::KubernetesIntegration(std::shared_ptr<KubernetesContext> ctx, Driver driver)
    : ctx_(std::move(ctx)), driver_(driver) {}

KubernetesIntegration::~KubernetesIntegration() { Stop(); }

std::string_view KubernetesIntegration::name() const { return k8s::kSource; }

Status KubernetesIntegration::Start(const IntegrationEnv& env) {
  env_ = env;
  if (env.metrics != nullptr) {
    auto& m = *env.metrics;
    jobs_written_ =
        &m.AddCounter("clusterd_k8s_jobs_written_total", "Discovered jobs created, updated or deleted in ClusterD.");
    jobs_refused_ = &m.AddCounter("clusterd_k8s_job_writes_failed_total",
                                  "Writes of discovered jobs that ClusterD refused or that failed.");
    discovery_warnings_ =
        &m.AddGauge("clusterd_k8s_discovery_warnings",
                    "Warnings of the last job discovery pass (duplicate ranks, invalid policy annotations, ...).");
    pods_refused_ = &m.AddGauge("clusterd_k8s_pods_malformed",
                                "Pods that look like job pods but carry malformed rank or device data.");
    pods_kubelet_devices_ =
        &m.AddGauge("clusterd_k8s_pods_kubelet_devices",
                    "Pods of the last discovery pass placed on the devices their node's kubelet gave them "
                    "(NodeD's pod-resources report) instead of any device of the node.");
    conditions_written_ =
        &m.AddCounter("clusterd_k8s_node_condition_writes_total", "Node condition patches sent to the API server.");
    unisolations_ = &m.AddCounter("clusterd_k8s_node_unisolations_total",
                                  "Nodes whose clusterd taint (and cordon) was removed after un-isolation.");
    device_untaints_ = &m.AddCounter("clusterd_k8s_device_untaints_total",
                                     "DRA DeviceTaintRules deleted after ClusterD returned their device to service.");
    fallback_lifts_ = &m.AddCounter("clusterd_k8s_device_fallback_taints_lifted_total",
                                    "Fallback device taints (k8s_device_fallback_taint) removed from Nodes after "
                                    "ClusterD returned their device to service.");
    avoid_taints_ = &m.AddCounter("clusterd_k8s_avoid_domain_taints_total",
                                  "PreferNoSchedule avoid-domain taints added to or removed from Nodes (the nodes "
                                  "of a fault domain with an open incident that did not isolate it).");
    k8s_errors_ = &m.AddCounter("clusterd_k8s_api_errors_total",
                                "Failed API calls of the integration (retried on the next pass).");
    validation_events_posted_ =
        &m.AddCounter("clusterd_k8s_validation_events_total",
                      "Kubernetes Events posted for validations (started, passed, failed, skipped, cancelled) and "
                      "holds of devices and nodes returning to service.");
  }
  host_ = k8s::HostName();
  ctx_->SetListener([this] {
    {
      std::lock_guard lock(mu_);
      dirty_ = true;
    }
    cv_.notify_all();
  });
  ctx_->StartWatches(env.metrics);
  if (driver_ == Driver::kThread) thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void KubernetesIntegration::Stop() {
  ctx_->SetListener(nullptr);
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

KubernetesIntegration::StepResult KubernetesIntegration::Step() {
  const TimePoint now = env_.clock->Now();
  const auto interval = std::chrono::duration_cast<TimePoint::duration>(ctx_->settings().condition_interval);
  bool dirty = false;
  {
    std::lock_guard lock(mu_);
    dirty = dirty_;
    dirty_ = false;
  }
  StepResult result;
  if (dirty || !jobs_initialized_) {
    if (ctx_->JobsSynced()) {
      SyncJobs();
      result.jobs = true;
    }
    if (ctx_->NodesSynced()) SyncReadiness();
    pending_dirty_ = pending_dirty_ || dirty;
  }
  if (pending_dirty_ && now >= pending_due_ && ctx_->JobsSynced() && ctx_->NodesSynced()) DiagnosePendingPods(now);
  // Due at the first turn, then an interval after the last pass; at once when
  // the clock went back by more than an interval.
  if (!nodes_passed_ || now >= next_nodes_ || next_nodes_ - now > interval) {
    // Job writes that failed for a passing reason (writes refused while
    // ClusterD's disk is full) are tried again without waiting for a change.
    if (jobs_failed_ && !result.jobs && ctx_->JobsSynced()) {
      SyncJobs();
      result.jobs = true;
    }
    if (ctx_->NodesSynced()) {
      // Also retries readiness reports refused before the node's agent
      // registered (only nodes whose state was not yet reported are sent).
      SyncReadiness();
      const bool kubelet_changed = SyncNodes(now);
      result.nodes = true;
      if (kubelet_changed && jobs_initialized_ && ctx_->JobsSynced()) {
        SyncJobs();
        result.jobs = true;
      }
    }
    nodes_passed_ = true;
    next_nodes_ = env_.clock->Now() + interval;
  }
  result.next = next_nodes_;
  return result;
}

void KubernetesIntegration::Loop() {
  for (;;) {
    const StepResult r = Step();
    // Wakes for a change or the next node pass, and at least every 200 ms:
    // until ClusterD's jobs could be listed once, every turn tries again.
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(r.next - env_.clock->Now());
    wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(200));
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, wait, [this] { return stopping_ || dirty_; });
    if (stopping_) return;
  }
}

void KubernetesIntegration::Warn(const std::string& key, const std::string& message) {
  // Once per distinct message and subject, so that a stuck write does not
  // flood the log at every pass.
  auto& last = warned_[key];
  if (last == message) return;
  last = message;
  GetLogger("k8s")->warn("{}", message);
}

void KubernetesIntegration::ApiError(const std::string& key, const std::string& message) {
  if (k8s_errors_ != nullptr) k8s_errors_->Inc();
  Warn(key, message);
}

// ---- jobs ----

bool KubernetesIntegration::LoadWrittenJobs() {
  v1::ListJobsRequest req;
  req.set_page_size(500);
  for (;;) {
    auto page = env_.commands->ListJobs(req);
    if (!page.ok()) {
      Warn("list-jobs", "kubernetes: cannot list ClusterD's jobs: " + page.status().message());
      return false;
    }
    for (const auto& job : page->jobs()) {
      if (job.source() == k8s::kSource) written_[job.id()] = Fingerprint(job);
    }
    if (page->next_page_token().empty()) return true;
    req.set_page_token(page->next_page_token());
  }
}

void KubernetesIntegration::SyncJobs() {
  if (!jobs_initialized_) {
    if (!LoadWrittenJobs()) return;
    jobs_initialized_ = true;
  }
  if (!kubelet_loaded_) kubelet_loaded_ = LoadKubeletDevices();
  jobs_failed_ = false;
  JobView view = ParseJobView(*ctx_);
  if (pods_refused_ != nullptr) pods_refused_->Set(view.refused);
  const size_t kubelet_placed = k8s::ApplyKubeletDevices(view.pods, kubelet_devices_);
  if (pods_kubelet_devices_ != nullptr) pods_kubelet_devices_->Set(static_cast<double>(kubelet_placed));
  auto discovered = k8s::BuildJobs(view.pods, view.podgroups, ctx_->discovery());
  std::set<std::string> seen;
  size_t warnings = 0;
  for (auto& dj : discovered) {
    const std::string id = dj.job.id();
    seen.insert(id);
    // Each distinct warning is logged once (Warn remembers the last one
    // per job), and counted in a gauge.
    warnings += dj.warnings.size();
    if (!dj.warnings.empty()) {
      std::string all;
      for (const auto& w : dj.warnings) all += (all.empty() ? "" : "; ") + w;
      Warn("discovery/" + id, "kubernetes: job " + id + ": " + all.substr(0, 2048));
    }
    // A job whose pods are all pending or terminating (a whole-job
    // reschedule) keeps its last placement until pods are placed again.
    if (dj.job.placement_size() == 0) continue;
    const std::string fp = Fingerprint(dj.job);
    auto it = written_.find(id);
    if (it != written_.end() && it->second == fp) continue;
    Status s = WriteJob(dj.job, it != written_.end());
    if (s.ok()) {
      written_[id] = fp;
      warned_.erase("job/" + id);
      if (jobs_written_ != nullptr) jobs_written_->Inc();
      GetLogger("k8s")->info("job {} ({}/{}): {} ranks from {} pods", id, LabelOr(dj.job, k8s::kLabelNamespace),
                             LabelOr(dj.job, k8s::kLabelName), dj.job.placement_size(), dj.pods_placed);
    } else {
      if (jobs_refused_ != nullptr) jobs_refused_->Inc();
      jobs_failed_ = jobs_failed_ || Transient(s);
      Warn("job/" + id, "kubernetes: job " + id + ": " + s.message());
    }
  }
  if (discovery_warnings_ != nullptr) discovery_warnings_->Set(static_cast<double>(warnings));
  for (auto it = written_.begin(); it != written_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    const std::string id = it->first;
    auto r = AwaitReply<uint64_t>([&](auto reply) { env_.commands->DeleteJob(id, reply); });
    if (r.ok() || r.status().code() == StatusCode::kNotFound) {
      GetLogger("k8s")->info("job {}: its pods are gone, deleted", id);
      if (jobs_written_ != nullptr) jobs_written_->Inc();
      it = written_.erase(it);
    } else {
      jobs_failed_ = jobs_failed_ || Transient(r.status());
      Warn("job/" + id, "kubernetes: deleting job " + id + ": " + r.status().message());
      ++it;
    }
  }
}

Status KubernetesIntegration::WriteJob(const v1::Job& job, bool known) {
  auto* cmds = env_.commands;
  if (known) {
    auto r = AwaitReply<v1::Job>([&](auto reply) { cmds->UpdateJob(job, reply); });
    if (r.ok()) return Status::Ok();
    if (r.status().code() == StatusCode::kInvalidArgument && r.status().message().find("kind") != std::string::npos) {
      // The kind cannot change in place: the job is made again.
      auto d = AwaitReply<uint64_t>([&](auto reply) { cmds->DeleteJob(job.id(), reply); });
      if (!d.ok() && d.status().code() != StatusCode::kNotFound) return d.status();
    } else if (r.status().code() != StatusCode::kNotFound) {
      return r.status();
    }
  }
  auto c = AwaitReply<v1::Job>([&](auto reply) { cmds->CreateJob(job, reply); });
  if (c.ok()) return Status::Ok();
  if (c.status().code() == StatusCode::kAlreadyExists) {
    auto u = AwaitReply<v1::Job>([&](auto reply) { cmds->UpdateJob(job, reply); });
    return u.ok() ? Status::Ok() : u.status();
  }
  return c.status();
}

// ---- Pending pods the scheduler cannot place ----

void KubernetesIntegration::DiagnosePendingPods(TimePoint now) {
  pending_dirty_ = false;
  pending_due_ = now + kPendingInterval;
  const auto found = k8s::DiagnosePending(ctx_->Pods(), ctx_->Nodes(), kMaxPendingFindings);
  std::vector<v1::SchedulingFinding> findings;
  std::string told;
  for (const auto& f : found) {
    v1::SchedulingFinding s;
    s.set_pod_namespace(f.ns);
    s.set_pod(f.pod);
    s.set_resource(f.resource);
    s.set_count(f.count);
    s.set_reason(f.reason);
    s.set_evidence(f.evidence);
    told += s.SerializeAsString();
    findings.push_back(std::move(s));
  }
  if (told == pending_told_) return;
  // Each pod's diagnosis logged once (while it lasts).
  std::set<std::string> logged;
  for (const auto& f : found) {
    std::string key = f.uid + "/" + f.resource + "/" + f.reason;
    if (!pending_logged_.count(key)) {
      GetLogger("k8s")->warn("kubernetes: pod {}/{} is Pending: {}", f.ns, f.pod, f.evidence);
    }
    logged.insert(std::move(key));
  }
  pending_logged_ = std::move(logged);
  pending_told_ = told;
  env_.commands->SetSchedulingFindings(std::move(findings));
}

// ---- node readiness as a fault source ----

void KubernetesIntegration::SyncReadiness() {
  const auto& s = ctx_->settings();
  for (const auto& obj : ctx_->Nodes()) {
    auto r = k8s::ParseNodeReadiness(obj);
    if (!r.ok()) continue;
    const bool faulty = r->state != k8s::NodeReadiness::State::kReady;
    // Reported once per change. A Ready node not seen before is cleared too:
    // a fault raised before a restart goes away (clearing an absent fault
    // changes nothing).
    auto it = not_ready_.find(r->name);
    if (it != not_ready_.end() && it->second == faulty) continue;
    v1::ReportRequest report;
    report.set_reporter(std::string(k8s::kSource));
    report.set_id("node-ready." + r->name);
    report.set_node(r->name);
    report.set_code("NODE_NOT_READY");
    report.set_level(s.node_not_ready_level);
    report.set_action(faulty ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
    std::string msg = "Kubernetes Node Ready=" + std::string(k8s::ReadinessName(r->state));
    if (!r->reason.empty()) msg += " (" + r->reason + ")";
    if (!r->message.empty()) msg += ": " + r->message;
    report.set_message(msg.substr(0, 512));
    auto res = AwaitReply<v1::ReportResponse>([&](auto reply) { env_.commands->ReportFault(report, reply); });
    if (res.ok() || (!faulty && res.status().code() == StatusCode::kNotFound)) {
      not_ready_[r->name] = faulty;
      warned_.erase("ready/" + r->name);
    } else {
      // Most often: the node has no NodeD (ClusterD does not know it yet).
      // Tried again at the next change or pass.
      Warn("ready/" + r->name, "kubernetes: node " + r->name + " " + std::string(k8s::ReadinessName(r->state)) + ": " +
                                   res.status().message());
    }
  }
}

// ---- Node condition, un-isolation, device marks, DRA device taints ----

namespace {
void AddKubeletDevices(const v1::Node& node, k8s::KubeletDevices* out) {
  if (node.inventory().pod_devices().empty()) return;
  auto& pods = (*out)[node.name()];
  for (const auto& p : node.inventory().pod_devices()) {
    pods[p.namespace_() + "/" + p.name()].assign(p.device_ids().begin(), p.device_ids().end());
  }
}

// Every node ClusterD holds, page by page, to `fn`; false when a page could
// not be read.
bool ForEachNode(const ClusterCommands& commands, const std::function<void(const v1::Node&)>& fn) {
  v1::ListNodesRequest req;
  req.set_page_size(500);
  for (;;) {
    auto page = commands.ListNodes(req);
    if (!page.ok()) return false;
    for (const auto& node : page->nodes()) fn(node);
    if (page->next_page_token().empty()) return true;
    req.set_page_token(page->next_page_token());
  }
}
}  // namespace

bool KubernetesIntegration::LoadKubeletDevices() {
  k8s::KubeletDevices devices;
  if (!ForEachNode(*env_.commands, [&](const v1::Node& node) { AddKubeletDevices(node, &devices); })) return false;
  kubelet_devices_ = std::move(devices);
  return true;
}

bool KubernetesIntegration::SyncNodes(TimePoint now) {
  // Seconds after isolate_node during which a node ClusterD does not (yet)
  // show as isolated keeps its taint: the step's result is stored within
  // milliseconds of the patch, well inside three passes.
  const int64_t grace = std::max<int64_t>(
      3, 3 * std::chrono::duration_cast<std::chrono::seconds>(ctx_->settings().condition_interval).count());
  ListDeviceTaintRules(now);
  avoided_ = env_.commands->AvoidedNodes();
  k8s::KubeletDevices devices;
  const bool listed = ForEachNode(*env_.commands, [&](const v1::Node& node) {
    AddKubeletDevices(node, &devices);
    if (auto obj = ctx_->Node(node.name())) SyncNode(node, *obj, now, grace);
  });
  if (!listed) return false;
  SyncValidations(now);
  if (devices == kubelet_devices_) return false;
  kubelet_devices_ = std::move(devices);
  kubelet_loaded_ = true;
  return true;
}

void KubernetesIntegration::SyncNode(const v1::Node& node, json obj, TimePoint now, int64_t grace_s) {
  const auto& s = ctx_->settings();
  const auto& marks = ctx_->marks();
  const std::string& name = node.name();
  const std::string path = k8s::NodePath(name);
  std::vector<v1::Fault> faults;
  std::vector<uint32_t> isolated_devices;
  uint32_t unusable = 0;  // devices ClusterD holds unhealthy, isolated or separated
  const bool has_device_mark = !k8s::Annotation(obj, marks.devices_annotation).empty();
  auto rules = dra_rules_.find(name);
  const bool has_rules = rules != dra_rules_.end();
  const std::map<uint32_t, int64_t> fallback = k8s::DeviceFallbackTaints(obj, marks);
  bool detail_read = false;
  if (node.active_faults() > 0 || has_device_mark || node.isolated() || has_rules || !fallback.empty()) {
    v1::GetNodeRequest greq;
    greq.set_name(name);
    auto detail = env_.commands->GetNode(greq);
    if (detail.ok()) {
      detail_read = true;
      faults.assign(detail->active_faults().begin(), detail->active_faults().end());
      for (const auto& d : detail->devices()) {
        if (d.isolated()) isolated_devices.push_back(d.id());
        unusable += d.health() == v1::HEALTH_UNHEALTHY || d.isolated() || d.separated();
      }
    }
  }
  // 1. The condition: written when it differs; a better picture must hold
  //    for two passes first, so that a flapping fault does not flap the Node.
  json cond = k8s::NodeCondition(node, s.node_condition, faults, isolated_devices);
  if (k8s::ConditionMatches(obj, cond)) {
    pending_.erase(name);
  } else {
    const std::string want = cond.dump();
    const bool worse = cond.value("status", std::string()) != "True";
    if (worse || pending_[name] == want) {
      auto r = ctx_->client().Patch(path + "/status", k8s::ConditionPatch(obj, cond, k8s::Rfc3339(now, false)),
                                    k8s::PatchType::kStrategicMerge);
      if (r.ok()) {
        pending_.erase(name);
        if (conditions_written_ != nullptr) conditions_written_->Inc();
        // The Node as written: what follows is guarded by its new
        // resourceVersion, not the cached one the write just made stale.
        if (r->is_object()) obj = std::move(*r);
      } else {
        ApiError("condition/" + name, "kubernetes: node " + name + " condition: " + r.status().message());
      }
    } else {
      pending_[name] = want;
    }
  }
  // 2. Un-isolation: ClusterD returned the node to service (UncordonNode),
  //    so what isolate_node did is undone; never a taint or cordon we did not
  //    put there, and never within the grace after isolating (the step's
  //    result may not be stored yet).
  if (!node.isolated() && k8s::HasTaint(obj, marks.taint_key)) {
    const int64_t at = k8s::ParseRfc3339(k8s::Annotation(obj, marks.isolated_annotation));
    const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    if (at < 0 || now_s - at >= grace_s) Unisolate(name, obj);
  }
  // 3. Isolated devices, as an annotation a device plugin or scheduler
  //    extender can read.
  const std::string want_devices = k8s::DeviceList(isolated_devices);
  if (want_devices != k8s::Annotation(obj, marks.devices_annotation)) {
    auto r = ctx_->client().Patch(path, k8s::DevicesAnnotationPatch(marks, want_devices), k8s::PatchType::kMerge);
    if (!r.ok()) {
      ApiError("devices/" + name, "kubernetes: node " + name + " devices: " + r.status().message());
    } else if (r->is_object()) {
      obj = std::move(*r);  // what follows is guarded by the new resourceVersion
    }
  }
  // 4. DRA device taints: a device ClusterD returned to service
  //    (UncordonNode) loses the DeviceTaintRule isolate_device wrote; as
  //    for the node, not within the grace after it was written, and only
  //    when ClusterD's detail of the node was read.
  if (has_rules && detail_read) {
    const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    for (const auto& rule : rules->second) {
      if (std::find(isolated_devices.begin(), isolated_devices.end(), rule.device) != isolated_devices.end()) continue;
      if (rule.isolated_at < 0 || now_s - rule.isolated_at >= grace_s) UntaintDevice(name, rule);
    }
  }
  // 4b. Fallback device taints (isolate_device, where no scheduler of the
  //     job saw the isolation): lifted once ClusterD no longer holds the
  //     device isolated; as above, not within the grace after the taint was
  //     added, and only when ClusterD's detail of the node was read.
  if (!fallback.empty() && detail_read) {
    const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    std::set<uint32_t> lift;
    for (const auto& [device, at] : fallback) {
      if (std::find(isolated_devices.begin(), isolated_devices.end(), device) != isolated_devices.end()) continue;
      if (at < 0 || now_s - at >= grace_s) lift.insert(device);
    }
    if (!lift.empty()) LiftDeviceTaints(name, obj, lift);
  }
  // 4c. The avoid-domain taint (docs/domains.md): PreferNoSchedule on the
  //     nodes of a fault domain whose open incident keeps placement out
  //     without isolating it, so that neither kube-scheduler nor Volcano
  //     (its nodeorder plugin scores taints) puts a replacement there while
  //     another node fits; removed once the incident closes or isolates the
  //     domain (its NoSchedule isolation taint takes over).
  {
    auto want = avoided_.find(name);
    std::optional<json> patch = want != avoided_.end()
                                    ? k8s::AvoidTaintPatch(obj, marks, want->second, k8s::Rfc3339(now, false))
                                    : k8s::RemoveAvoidTaintPatch(obj, marks);
    if (patch) {
      auto r = ctx_->client().Patch(path, *patch, k8s::PatchType::kJson);
      if (r.ok()) {
        if (avoid_taints_ != nullptr) avoid_taints_->Inc();
        GetLogger("k8s")->info("node {}: avoid-domain taint {}", name,
                               want != avoided_.end() ? "set (incident " + want->second + ")" : "removed");
        if (r->is_object()) obj = std::move(*r);
      } else {
        ApiError("avoid/" + name, "kubernetes: node " + name + " avoid-domain taint: " + r.status().message());
      }
    }
  }
  // 5. The kubelet's allocatable NPUs against those NodeD sees usable (the
  //    detail is read whenever the node has an active fault; without one,
  //    every device is usable).
  if (detail_read || node.active_faults() == 0) CheckAllocatable(node, obj, unusable, faults, now);
}

void KubernetesIntegration::CheckAllocatable(const v1::Node& node, const json& obj, uint32_t unusable,
                                             const std::vector<v1::Fault>& faults, TimePoint now) {
  const std::string& name = node.name();
  const auto alloc = k8s::ParseAcceleratorAllocatable(obj);
  // The devices of the vendor whose device plugin registered the resource:
  // NVIDIA's GPUs for nvidia.com/gpu; else Ascend chips, and the sim
  // backend's simulated ones (noded --accelerator sim: demo, tests).
  const bool gpus = alloc && alloc->resource.rfind("nvidia.com/", 0) == 0;
  uint32_t chips = 0;
  for (const auto& d : node.inventory().devices()) {
    std::string vendor = d.vendor();
    std::transform(vendor.begin(), vendor.end(), vendor.begin(), [](unsigned char c) { return std::tolower(c); });
    chips += gpus ? vendor == "nvidia" : vendor == "huawei" || vendor == "sim";
  }
  const uint32_t usable = chips > unusable ? chips - unusable : 0;
  // Judged only where NodeD reports the vendor's devices and its device
  // plugin registered a resource on the Node (its capacity); fewer
  // allocatable than usable, for k8s_allocatable_hold, is the fault.
  const bool short_of = chips > 0 && alloc && alloc->allocatable < usable;
  // What ClusterD holds (a fault raised before a restart included).
  const bool raised = std::any_of(faults.begin(), faults.end(), [](const v1::Fault& f) {
    return f.reporter() == k8s::kSource && f.code() == k8s::kAllocatableMismatchCode;
  });
  auto report = [&](v1::TransitionAction action, const std::string& message) {
    v1::ReportRequest r;
    r.set_reporter(std::string(k8s::kSource));
    r.set_id("allocatable." + name);
    r.set_node(name);
    r.set_code(std::string(k8s::kAllocatableMismatchCode));
    r.set_level(v1::FAULT_LEVEL_SUB_HEALTH);
    r.set_action(action);
    r.set_message(message);
    auto res = AwaitReply<v1::ReportResponse>([&](auto reply) { env_.commands->ReportFault(r, reply); });
    if (res.ok() || (action == v1::TRANSITION_ACTION_CLEAR && res.status().code() == StatusCode::kNotFound)) {
      warned_.erase("allocatable/" + name);
    } else {
      Warn("allocatable/" + name, "kubernetes: node " + name + " allocatable: " + res.status().message());
    }
  };
  if (!short_of) {
    mismatch_since_.erase(name);
    if (raised) report(v1::TRANSITION_ACTION_CLEAR, "the kubelet offers every usable NPU again");
    return;
  }
  const TimePoint since = mismatch_since_.try_emplace(name, now).first->second;
  if (now - since < ctx_->settings().allocatable_hold || raised) return;
  report(v1::TRANSITION_ACTION_RAISE, "NodeD sees " + std::to_string(usable) +
                                          (gpus ? " usable GPU(s) (" : " usable NPU(s) (") + std::to_string(chips) +
                                          " in all) while the kubelet offers " + std::to_string(alloc->allocatable) +
                                          " " + alloc->resource + " (capacity " + std::to_string(alloc->capacity) +
                                          "): the device plugin is down or sees faults ClusterD does not");
}

void KubernetesIntegration::ListDeviceTaintRules(TimePoint now) {
  dra_rules_.clear();
  auto version = ctx_->DraVersion("devicetaintrules", now);
  if (!version.ok()) {
    // Not served or not permitted: DRA is optional (the context logs it).
    if (!KubernetesContext::DraUnavailable(version.status())) {
      ApiError("dra", "kubernetes: DRA: " + version.status().message());
    }
    return;
  }
  auto list = ctx_->client().Get(k8s::ManagedRulesPath(*version));
  if (!list.ok()) {
    ApiError("dra", "kubernetes: list DeviceTaintRules: " + list.status().message());
    return;
  }
  dra_version_ = *version;
  const json items = list->is_object() ? list->value("items", json::array()) : json::array();
  if (!items.is_array()) return;
  for (const auto& item : items) {
    if (auto rule = k8s::ParseManagedRule(item)) dra_rules_[rule->node].push_back(std::move(*rule));
  }
}

void KubernetesIntegration::UntaintDevice(const std::string& node, const k8s::ManagedRule& rule) {
  auto r = ctx_->client().Delete(k8s::DraPath(dra_version_, "devicetaintrules", rule.name));
  if (r.ok() || r.status().code() == StatusCode::kNotFound) {
    if (device_untaints_ != nullptr) device_untaints_->Inc();
    GetLogger("k8s")->info("node {}: device {} returned to service: DeviceTaintRule {} deleted", node, rule.device,
                           rule.name);
  } else {
    ApiError("untaint/" + node + "/" + std::to_string(rule.device),
             "kubernetes: node " + node + " device " + std::to_string(rule.device) + " DeviceTaintRule " + rule.name +
                 ": " + r.status().message());
  }
}

void KubernetesIntegration::LiftDeviceTaints(const std::string& name, const json& obj,
                                             const std::set<uint32_t>& devices) {
  const auto& marks = ctx_->marks();
  std::vector<uint32_t> ids(devices.begin(), devices.end());
  auto r = ctx_->client().Patch(k8s::NodePath(name), k8s::RemoveDeviceTaintsPatch(obj, marks, devices),
                                k8s::PatchType::kJson);
  if (r.ok()) {
    if (fallback_lifts_ != nullptr) fallback_lifts_->Inc(devices.size());
    GetLogger("k8s")->info("node {}: device(s) {} returned to service: fallback taint {}* removed", name,
                           k8s::DeviceList(ids), marks.device_taint_prefix);
  } else {
    // A conflict is retried at the next pass with the fresh object.
    ApiError("fallback/" + name, "kubernetes: node " + name + " devices " + k8s::DeviceList(ids) +
                                     " fallback taint: " + r.status().message());
  }
}

void KubernetesIntegration::Unisolate(const std::string& name, const json& obj) {
  const auto& marks = ctx_->marks();
  auto r = ctx_->client().Patch(k8s::NodePath(name), k8s::UnisolatePatch(obj, marks), k8s::PatchType::kJson);
  if (r.ok()) {
    if (unisolations_ != nullptr) unisolations_->Inc();
    GetLogger("k8s")->info("node {}: returned to service: taint {} removed{}", name, marks.taint_key,
                           k8s::CordonedByClusterd(obj, marks) ? ", uncordoned" : "");
  } else {
    // A conflict (the Node changed since it was cached) is retried at the
    // next pass with the fresh object.
    ApiError("unisolate/" + name, "kubernetes: node " + name + " un-isolation: " + r.status().message());
  }
}

void KubernetesIntegration::SyncValidations(TimePoint now) {
  v1::ListValidationsRequest req;
  req.set_page_size(1000);
  auto page = env_.commands->ListValidations(req);
  if (!page.ok()) {
    Warn("validations", "kubernetes: validations: " + page.status().message());
    return;
  }
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  // What happened before this ClusterD's first pass was told by the one
  // before it (the Events' names keep a repeat out).
  if (validation_events_since_s_ < 0) validation_events_since_s_ = now_s - 60;
  std::map<std::string, std::vector<const v1::Validation*>> by_node;  // newest first
  for (const auto& v : page->validations()) by_node[v.node()].push_back(&v);
  std::set<std::string> posted;
  auto post = [&](k8s::EventSpec e) {
    if (validation_events_.count(e.name)) {
      posted.insert(e.name);
      return;
    }
    e.reporting_instance = host_;
    e.event_time = k8s::Rfc3339(now, true);
    auto r = ctx_->client().Post(k8s::EventsPath(k8s::EventNamespace(e)), k8s::EventBody(e));
    if (r.ok() || r.status().code() == StatusCode::kAlreadyExists) {
      posted.insert(e.name);  // not posted again while it is listed
      if (r.ok() && validation_events_posted_ != nullptr) validation_events_posted_->Inc();
    } else {
      ApiError("validation-event/" + e.regarding_name,
               "kubernetes: node " + e.regarding_name + " " + e.action + " event: " + r.status().message());
    }
  };
  for (const auto& [name, validations] : by_node) {
    for (const v1::Validation* v : validations) {
      for (auto& e : k8s::ValidationEvents(*v, validation_events_since_s_)) post(std::move(e));
    }
    v1::GetNodeRequest greq;
    greq.set_name(name);
    auto detail = env_.commands->GetNode(greq);
    if (!detail.ok()) continue;
    for (auto& e : k8s::HeldEvents(*detail, validation_events_since_s_)) post(std::move(e));
    auto obj = ctx_->Node(name);
    if (!obj) continue;
    json cond = k8s::ValidationCondition(*detail, validations);
    if (cond.is_null() || k8s::ConditionMatches(*obj, cond)) continue;
    auto r =
        ctx_->client().Patch(k8s::NodePath(name) + "/status", k8s::ConditionPatch(*obj, cond, k8s::Rfc3339(now, false)),
                             k8s::PatchType::kStrategicMerge);
    if (r.ok()) {
      if (conditions_written_ != nullptr) conditions_written_->Inc();
    } else {
      ApiError("validation-condition/" + name,
               "kubernetes: node " + name + " validation condition: " + r.status().message());
    }
  }
  validation_events_ = std::move(posted);
}

StatusOr<std::unique_ptr<Integration>> MakeKubernetesIntegration(const ClusterdConfig& config) {
  auto ctx = KubernetesContext::For(config);
  if (!ctx.ok()) return ctx.status();
  return std::unique_ptr<Integration>(new KubernetesIntegration(std::move(*ctx)));
}

}  // namespace clusterd
