#include "clusterd/k8s/kubernetes.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <ctime>
#include <map>
#include <set>
#include <thread>

#include "clusterd/k8s/api/kubeconfig.h"
#include "clusterd/recovery/actuators/pooled.h"
#include "common/levels.h"
#include "common/logging.h"

namespace clusterd {
namespace {

using nlohmann::json;

std::string Rfc3339(TimePoint t, bool micro) {
  const auto since = t.time_since_epoch();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since);
  std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = buf;
  if (micro) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(since - secs).count();
    char frac[16];
    std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(us));
    out += frac;
  }
  return out + "Z";
}

// Seconds since the epoch of an RFC 3339 time ("2026-11-30T01:02:03Z"), or -1.
int64_t ParseRfc3339(const std::string& s) {
  std::tm tm{};
  if (strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return -1;
  return static_cast<int64_t>(timegm(&tm));
}

std::string Str(const json& obj, std::initializer_list<const char*> path) {
  const json* cur = &obj;
  for (const char* key : path) {
    if (!cur->is_object()) return {};
    auto it = cur->find(key);
    if (it == cur->end()) return {};
    cur = &*it;
  }
  return cur->is_string() ? cur->get<std::string>() : std::string();
}

std::string Annotation(const json& obj, const std::string& key) {
  auto meta = obj.find("metadata");
  if (meta == obj.end() || !meta->is_object()) return {};
  auto ann = meta->find("annotations");
  if (ann == meta->end() || !ann->is_object()) return {};
  auto it = ann->find(key);
  return it != ann->end() && it->is_string() ? it->get<std::string>() : std::string();
}

json Taints(const json& node) {
  auto spec = node.find("spec");
  if (spec == node.end() || !spec->is_object()) return json::array();
  auto taints = spec->find("taints");
  return taints != spec->end() && taints->is_array() ? *taints : json::array();
}

bool HasTaint(const json& node, const std::string& key) {
  for (const auto& t : Taints(node)) {
    if (t.is_object() && t.value("key", std::string()) == key) return true;
  }
  return false;
}

bool Unschedulable(const json& node) {
  auto spec = node.find("spec");
  return spec != node.end() && spec->is_object() && spec->value("unschedulable", false);
}

// "train.1/2" -> "clusterd-train.1-2-<hash>": an object name (DNS subdomain)
// that is the same for the same key, so a repeated action finds its record.
std::string RecordName(const std::string& key) {
  std::string clean;
  for (char c : key) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    clean.push_back(std::isalnum(static_cast<unsigned char>(l)) || l == '.' ? l : '-');
  }
  if (clean.size() > 200) clean.resize(200);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "clusterd-" + clean + "-" + hex;
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "clusterd";
  return buf;
}

std::string Join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

}  // namespace

KubernetesMarks MarksFor(const ClusterdConfig::Kubernetes& k8s) {
  // The annotations live in the taint key's domain ("clusterd.io").
  std::string domain = k8s.taint_key;
  if (size_t slash = domain.find('/'); slash != std::string::npos) {
    domain.resize(slash);
  } else {
    domain = "clusterd.io";
  }
  return {k8s.taint_key, domain + "/cordoned", domain + "/isolated-at", domain + "/isolated-devices"};
}

StatusOr<std::unique_ptr<k8s::Client>> MakeKubernetesClient(const ClusterdConfig::Kubernetes& k8s) {
  auto config = k8s.kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(k8s.kubeconfig, k8s.kube_context);
  if (!config.ok()) return config.status();
  return k8s::Client::Create(std::move(*config));
}

k8s::DiscoveryOptions DiscoveryOptionsFrom(const ClusterdConfig::Kubernetes& k8s) {
  k8s::DiscoveryOptions o;
  o.rank_annotation = k8s.rank_annotation;
  o.rank_env = k8s.rank_env;
  o.devices_annotation = k8s.devices_annotation;
  o.job_kind_label = k8s.job_kind_label;
  return o;
}

// ------------------------------------------------------------- context ---

StatusOr<std::shared_ptr<KubernetesContext>> KubernetesContext::For(const ClusterdConfig& config) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<KubernetesContext>> contexts;
  const auto& k = config.k8s;
  const std::string key = k.kubeconfig + "\n" + k.kube_context + "\n" + k.namespace_;
  std::lock_guard lock(mu);
  if (auto existing = contexts[key].lock()) return existing;
  auto client = MakeKubernetesClient(k);
  if (!client.ok()) return client.status();
  std::shared_ptr<KubernetesContext> made(new KubernetesContext(k, std::move(*client)));
  contexts[key] = made;
  return made;
}

KubernetesContext::KubernetesContext(ClusterdConfig::Kubernetes settings, std::unique_ptr<k8s::Client> client)
    : settings_(std::move(settings)),
      client_(std::move(client)),
      discovery_(DiscoveryOptionsFrom(settings_)),
      marks_(MarksFor(settings_)) {}

KubernetesContext::~KubernetesContext() { StopWatches(); }

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

namespace {

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

// ---------------------------------------------------------- integration ---

class KubernetesIntegration final : public Integration {
 public:
  KubernetesIntegration(std::shared_ptr<KubernetesContext> ctx) : ctx_(std::move(ctx)) {}
  ~KubernetesIntegration() override { Stop(); }

  std::string_view name() const override { return k8s::kSource; }

  Status Start(const IntegrationEnv& env) override {
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
      conditions_written_ =
          &m.AddCounter("clusterd_k8s_node_condition_writes_total", "Node condition patches sent to the API server.");
      unisolations_ = &m.AddCounter("clusterd_k8s_node_unisolations_total",
                                    "Nodes whose clusterd taint (and cordon) was removed after un-isolation.");
      k8s_errors_ = &m.AddCounter("clusterd_k8s_api_errors_total",
                                  "Failed API calls of the integration (retried on the next pass).");
    }
    ctx_->SetListener([this] {
      {
        std::lock_guard lock(mu_);
        dirty_ = true;
      }
      cv_.notify_all();
    });
    ctx_->StartWatches(env.metrics);
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  void Stop() override {
    ctx_->SetListener(nullptr);
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    auto log = GetLogger("k8s");
    const auto interval = std::chrono::duration_cast<std::chrono::milliseconds>(ctx_->settings().condition_interval);
    auto next_nodes = std::chrono::steady_clock::now();
    for (;;) {
      bool dirty = false;
      {
        std::unique_lock lock(mu_);
        cv_.wait_until(lock, std::min(next_nodes, std::chrono::steady_clock::now() + std::chrono::milliseconds(200)),
                       [this] { return stopping_ || dirty_; });
        if (stopping_) return;
        dirty = dirty_;
        dirty_ = false;
      }
      if (dirty || !jobs_initialized_) {
        if (ctx_->JobsSynced()) SyncJobs();
        if (ctx_->NodesSynced()) SyncReadiness();
      }
      if (std::chrono::steady_clock::now() >= next_nodes) {
        if (ctx_->NodesSynced()) {
          // Also retries readiness reports refused before the node's agent
          // registered (only nodes whose state was not yet reported are sent).
          SyncReadiness();
          SyncNodes();
        }
        next_nodes = std::chrono::steady_clock::now() + interval;
      }
    }
  }

  void Warn(const std::string& key, const std::string& message) {
    // Once per distinct message and subject, so that a stuck write does not
    // flood the log at every pass.
    auto& last = warned_[key];
    if (last == message) return;
    last = message;
    GetLogger("k8s")->warn("{}", message);
  }

  // ---- jobs ----

  bool LoadWrittenJobs() {
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

  void SyncJobs() {
    if (!jobs_initialized_) {
      if (!LoadWrittenJobs()) return;
      jobs_initialized_ = true;
    }
    JobView view = ParseJobView(*ctx_);
    if (pods_refused_ != nullptr) pods_refused_->Set(view.refused);
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
        GetLogger("k8s")->info(
            "job {} ({}/{}): {} ranks from {} pods", id,
            dj.job.labels().count(std::string(k8s::kLabelNamespace))
                ? dj.job.labels().at(std::string(k8s::kLabelNamespace))
                : "",
            dj.job.labels().count(std::string(k8s::kLabelName)) ? dj.job.labels().at(std::string(k8s::kLabelName)) : "",
            dj.job.placement_size(), dj.pods_placed);
      } else {
        if (jobs_refused_ != nullptr) jobs_refused_->Inc();
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
        Warn("job/" + id, "kubernetes: deleting job " + id + ": " + r.status().message());
        ++it;
      }
    }
  }

  Status WriteJob(const v1::Job& job, bool known) {
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

  // ---- node readiness as a fault source ----

  void SyncReadiness() {
    const auto& s = ctx_->settings();
    for (const auto& obj : ctx_->Nodes()) {
      auto r = k8s::ParseNodeReadiness(obj);
      if (!r.ok()) continue;
      const bool faulty = r->state != k8s::NodeReadiness::State::kReady;
      auto it = not_ready_.find(r->name);
      if (it != not_ready_.end() && it->second == faulty) continue;
      if (it == not_ready_.end() && !faulty) {
        // Nothing raised by this process; a fault raised before a restart is
        // cleared too (clearing an absent fault changes nothing).
      }
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
        Warn("ready/" + r->name, "kubernetes: node " + r->name + " " + std::string(k8s::ReadinessName(r->state)) +
                                     ": " + res.status().message());
      }
    }
  }

  // ---- Node condition, un-isolation, device marks ----

  void SyncNodes() {
    const auto& s = ctx_->settings();
    const auto& marks = ctx_->marks();
    const auto now = env_.clock->Now();
    // Seconds after isolate_node during which a node ClusterD does not (yet)
    // show as isolated keeps its taint: the step's result is stored within
    // milliseconds of the patch, well inside three passes.
    const int64_t grace =
        std::max<int64_t>(3, 3 * std::chrono::duration_cast<std::chrono::seconds>(s.condition_interval).count());
    v1::ListNodesRequest req;
    req.set_page_size(500);
    for (;;) {
      auto page = env_.commands->ListNodes(req);
      if (!page.ok()) return;
      for (const auto& node : page->nodes()) {
        auto obj = ctx_->Node(node.name());
        if (!obj) continue;
        SyncNode(node, *obj, marks, now, grace);
      }
      if (page->next_page_token().empty()) break;
      req.set_page_token(page->next_page_token());
    }
  }

  void SyncNode(const v1::Node& node, const json& obj, const KubernetesMarks& marks, TimePoint now, int64_t grace) {
    const auto& s = ctx_->settings();
    const std::string& name = node.name();
    const std::string path = "/api/v1/nodes/" + k8s::UrlEncode(name);
    std::vector<v1::Fault> faults;
    std::vector<std::string> isolated_devices;
    const bool has_device_mark = !Annotation(obj, marks.devices_annotation).empty();
    if (node.active_faults() > 0 || has_device_mark || node.isolated()) {
      v1::GetNodeRequest greq;
      greq.set_name(name);
      auto detail = env_.commands->GetNode(greq);
      if (detail.ok()) {
        faults.assign(detail->active_faults().begin(), detail->active_faults().end());
        for (const auto& d : detail->devices()) {
          if (d.isolated()) isolated_devices.push_back(std::to_string(d.id()));
        }
      }
    }
    // 1. The condition: written when it differs; a better picture must hold
    //    for two passes first, so that a flapping fault does not flap the Node.
    json cond = k8s::AcceleratorCondition(node, s.node_condition, faults);
    if (!isolated_devices.empty() && cond.is_object()) {
      std::string msg = cond.value("message", std::string());
      msg += (msg.empty() ? "" : "; ") + std::string("isolated devices: ") + Join(isolated_devices, ",");
      cond["message"] = msg.substr(0, 1024);
    }
    if (k8s::ConditionMatches(obj, cond)) {
      pending_.erase(name);
    } else {
      const std::string want = cond.dump();
      const bool worse = cond.value("status", std::string()) != "True";
      if (worse || pending_[name] == want) {
        json patch = {{"status", {{"conditions", json::array({k8s::StampCondition(obj, cond, Rfc3339(now, false))})}}}};
        auto r = ctx_->client().Patch(path + "/status", patch, k8s::PatchType::kStrategicMerge);
        if (r.ok()) {
          pending_.erase(name);
          if (conditions_written_ != nullptr) conditions_written_->Inc();
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
    if (!node.isolated() && HasTaint(obj, marks.taint_key)) {
      const int64_t at = ParseRfc3339(Annotation(obj, marks.isolated_annotation));
      const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
      if (at < 0 || now_s - at >= grace) Unisolate(name, obj, marks);
    }
    // 3. Isolated devices, as an annotation a device plugin or scheduler
    //    extender can read.
    std::string want_devices = Join(isolated_devices, ",");
    if (want_devices != Annotation(obj, marks.devices_annotation)) {
      json value = want_devices.empty() ? json(nullptr) : json(want_devices);
      json patch = {{"metadata", {{"annotations", {{marks.devices_annotation, value}}}}}};
      auto r = ctx_->client().Patch(path, patch, k8s::PatchType::kMerge);
      if (!r.ok()) ApiError("devices/" + name, "kubernetes: node " + name + " devices: " + r.status().message());
    }
  }

  void Unisolate(const std::string& name, const json& obj, const KubernetesMarks& marks) {
    json taints = json::array();
    for (const auto& t : Taints(obj)) {
      if (!(t.is_object() && t.value("key", std::string()) == marks.taint_key)) taints.push_back(t);
    }
    json ops = json::array();
    ops.push_back({{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", k8s::ResourceVersionOf(obj)}});
    ops.push_back({{"op", "replace"}, {"path", "/spec/taints"}, {"value", taints}});
    const bool we_cordoned = Annotation(obj, marks.cordoned_annotation) == "true";
    if (we_cordoned) ops.push_back({{"op", "replace"}, {"path", "/spec/unschedulable"}, {"value", false}});
    auto escape = [](const std::string& k) {
      std::string out;
      for (char c : k) out += c == '/' ? "~1" : c == '~' ? "~0" : std::string(1, c);
      return out;
    };
    for (const auto& key : {marks.cordoned_annotation, marks.isolated_annotation}) {
      if (!Annotation(obj, key).empty()) {
        ops.push_back({{"op", "remove"}, {"path", "/metadata/annotations/" + escape(key)}});
      }
    }
    auto r = ctx_->client().Patch("/api/v1/nodes/" + k8s::UrlEncode(name), ops, k8s::PatchType::kJson);
    if (r.ok()) {
      if (unisolations_ != nullptr) unisolations_->Inc();
      GetLogger("k8s")->info("node {}: returned to service: taint {} removed{}", name, marks.taint_key,
                             we_cordoned ? ", uncordoned" : "");
    } else {
      // A conflict (the Node changed since it was cached) is retried at the
      // next pass with the fresh object.
      ApiError("unisolate/" + name, "kubernetes: node " + name + " un-isolation: " + r.status().message());
    }
  }

  void ApiError(const std::string& key, const std::string& message) {
    if (k8s_errors_ != nullptr) k8s_errors_->Inc();
    Warn(key, message);
  }

  std::shared_ptr<KubernetesContext> ctx_;
  IntegrationEnv env_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool dirty_ = false;     // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
  // Owned by the loop thread:
  bool jobs_initialized_ = false;
  std::map<std::string, std::string> written_;  // job id -> Fingerprint of what ClusterD holds
  std::map<std::string, bool> not_ready_;       // node -> NODE_NOT_READY raised
  std::map<std::string, std::string> pending_;  // node -> condition waiting for a second pass
  std::map<std::string, std::string> warned_;
  Counter* jobs_written_ = nullptr;
  Counter* jobs_refused_ = nullptr;
  Gauge* pods_refused_ = nullptr;
  Gauge* discovery_warnings_ = nullptr;
  Counter* conditions_written_ = nullptr;
  Counter* unisolations_ = nullptr;
  Counter* k8s_errors_ = nullptr;
};

// ------------------------------------------------------------ actuator ---

class KubernetesActions {
 public:
  explicit KubernetesActions(std::shared_ptr<KubernetesContext> ctx) : ctx_(std::move(ctx)), host_(Hostname()) {}

  ActionResult Run(const ActionRequest& req) {
    switch (req.action) {
      case v1::CLUSTER_ACTION_ISOLATE_NODE: return IsolateNode(req);
      case v1::CLUSTER_ACTION_ISOLATE_DEVICE: return IsolateDevice(req);
      case v1::CLUSTER_ACTION_RESCHEDULE_PODS: return RemovePods(req, /*evict=*/true);
      case v1::CLUSTER_ACTION_RESTART_JOB: return RemovePods(req, /*evict=*/false);
      case v1::CLUSTER_ACTION_RESET_DEVICE:
        return {false, "reset_device: Kubernetes cannot reset a chip; the recovery escalates"};
      default: return {false, "unknown action"};
    }
  }

 private:
  const k8s::Client& api() const { return ctx_->client(); }

  std::string NodePath(const std::string& node) const { return "/api/v1/nodes/" + k8s::UrlEncode(node); }

  // Cordon + taint, in one JSON patch guarded by the Node's
  // resourceVersion; retried on a conflict. Already tainted: done.
  ActionResult IsolateNode(const ActionRequest& req) {
    const auto& marks = ctx_->marks();
    const std::string level =
        ShortLevelName(req.level == v1::FAULT_LEVEL_UNSPECIFIED ? v1::FAULT_LEVEL_SEPARATE : req.level);
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto node = api().Get(NodePath(req.node));
      if (!node.ok()) return {false, "get node " + req.node + ": " + node.status().message()};
      if (HasTaint(*node, marks.taint_key) && Unschedulable(*node)) {
        PostEvent(req, "Node", req.node, "", Str(*node, {"metadata", "uid"}), "Isolate",
                  "node " + req.node + " isolated (cordoned, taint " + marks.taint_key + ")");
        return {true, "node " + req.node + " already cordoned and tainted"};
      }
      json taints = Taints(*node);
      if (!HasTaint(*node, marks.taint_key)) {
        taints.push_back({{"key", marks.taint_key},
                          {"value", level},
                          {"effect", ctx_->settings().taint_effect},
                          {"timeAdded", Rfc3339(SystemClock::Instance().Now(), false)}});
      }
      json ops = json::array();
      ops.push_back({{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", k8s::ResourceVersionOf(*node)}});
      ops.push_back({{"op", "add"}, {"path", "/spec/taints"}, {"value", taints}});
      if (!Unschedulable(*node)) {
        ops.push_back({{"op", "add"}, {"path", "/spec/unschedulable"}, {"value", true}});
      }
      json ann = json::object();
      if (auto meta = node->find("metadata"); meta != node->end() && meta->contains("annotations")) {
        ann = (*meta)["annotations"];
      }
      if (!ann.is_object()) ann = json::object();
      if (!Unschedulable(*node)) ann[marks.cordoned_annotation] = "true";
      ann[marks.isolated_annotation] = Rfc3339(SystemClock::Instance().Now(), false);
      ops.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", ann}});
      auto r = api().Patch(NodePath(req.node), ops, k8s::PatchType::kJson);
      if (r.ok()) {
        PostEvent(req, "Node", req.node, "", Str(*node, {"metadata", "uid"}), "Isolate",
                  "recovery " + req.recovery_id + ": cordoned node " + req.node + ", taint " + marks.taint_key + "=" +
                      level + ":" + ctx_->settings().taint_effect);
        return {true, "cordoned and tainted " + marks.taint_key + "=" + level + ":" + ctx_->settings().taint_effect};
      }
      // 422 from a failed test: the Node changed under us; read it again.
      if (r.status().code() != StatusCode::kInvalidArgument && r.status().code() != StatusCode::kAborted) {
        return {false, "patch node " + req.node + ": " + r.status().message()};
      }
    }
    return {false, "patch node " + req.node + ": kept conflicting"};
  }

  ActionResult IsolateDevice(const ActionRequest& req) {
    if (!req.device) return {false, "isolate_device without a device"};
    const auto& marks = ctx_->marks();
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto node = api().Get(NodePath(req.node));
      if (!node.ok()) return {false, "get node " + req.node + ": " + node.status().message()};
      std::set<uint32_t> devices;
      std::string current = Annotation(*node, marks.devices_annotation);
      for (size_t start = 0; start < current.size();) {
        size_t comma = current.find(',', start);
        std::string item = current.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty() && std::all_of(item.begin(), item.end(), ::isdigit) && item.size() < 6) {
          devices.insert(static_cast<uint32_t>(std::stoul(item)));
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (devices.count(*req.device)) return {true, "device already marked isolated on node " + req.node};
      devices.insert(*req.device);
      std::vector<std::string> items;
      items.reserve(devices.size());
      for (uint32_t d : devices) items.push_back(std::to_string(d));
      json ops = json::array();
      ops.push_back({{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", k8s::ResourceVersionOf(*node)}});
      json ann = json::object();
      if (auto meta = node->find("metadata"); meta != node->end() && meta->contains("annotations")) {
        ann = (*meta)["annotations"];
      }
      if (!ann.is_object()) ann = json::object();
      ann[marks.devices_annotation] = Join(items, ",");
      ops.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", ann}});
      auto r = api().Patch(NodePath(req.node), ops, k8s::PatchType::kJson);
      if (r.ok()) {
        PostEvent(req, "Node", req.node, "", Str(*node, {"metadata", "uid"}), "IsolateDevice",
                  "recovery " + req.recovery_id + ": device " + std::to_string(*req.device) + " of node " + req.node +
                      " isolated (" + marks.devices_annotation + ")");
        return {true, "device " + std::to_string(*req.device) + " marked isolated in " + marks.devices_annotation};
      }
      if (r.status().code() != StatusCode::kInvalidArgument && r.status().code() != StatusCode::kAborted) {
        return {false, "patch node " + req.node + ": " + r.status().message()};
      }
    }
    return {false, "patch node " + req.node + ": kept conflicting"};
  }

  struct Target {
    std::string ns, name, uid;
  };

  // The job's pods that hold any of `ranks` (all of its pods for a job
  // restart), from the shared pod cache.
  std::vector<Target> FindPods(const ActionRequest& req, bool whole_job, size_t* job_pods) {
    std::set<uint32_t> ranks(req.ranks.begin(), req.ranks.end());
    k8s::PodGroupMap podgroups;
    for (const auto& obj : ctx_->PodGroups()) {
      auto pg = k8s::ParsePodGroup(obj, ctx_->discovery());
      if (pg.ok()) podgroups[k8s::PodGroupMapKey(pg->ns, pg->name)] = std::move(*pg);
    }
    std::vector<Target> out;
    for (const auto& obj : ctx_->Pods()) {
      auto pod = k8s::ParsePod(obj, ctx_->discovery());
      if (!pod.ok() || pod->terminating) continue;
      if (k8s::JobKeyOf(*pod, podgroups) != req.job_id) continue;
      ++*job_pods;
      bool hit = whole_job;
      if (!hit) {
        for (uint32_t r : k8s::PodDeviceRanks(*pod)) hit = hit || ranks.count(r) > 0;
        // A pod on the named node with no rank information left.
        if (!hit && ranks.empty() && !req.node.empty()) hit = pod->node == req.node;
      }
      if (hit) out.push_back({pod->ns, pod->name, pod->uid});
    }
    std::sort(out.begin(), out.end(), [](const Target& a, const Target& b) { return a.uid < b.uid; });
    return out;
  }

  // Evicts (or deletes) the pods once: the chosen pods are recorded first in
  // an Event named after the idempotency key, so that a repeat of the step
  // after a restart acts on the same pods, never on their replacements.
  ActionResult RemovePods(const ActionRequest& req, bool evict) {
    // The watches normally run already (the integration started them);
    // without the integration the first action starts them.
    ctx_->StartWatches(nullptr);
    for (int i = 0; i < 300 && !ctx_->JobsSynced() && SystemClock::Instance().Now() < req.deadline; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!ctx_->JobsSynced()) return {false, "the pod cache is not synced yet"};
    size_t job_pods = 0;
    auto targets = FindPods(req, !evict, &job_pods);
    if (job_pods == 0) {
      // Not a job discovered from pods (registered through the API), or all
      // of its pods are gone: nothing here can move its ranks, and saying
      // "done" would mark a recovery succeeded that moved nothing.
      return {false, "no pod of job " + req.job_id +
                         " in the Kubernetes pod cache: the kubernetes actuator moves only jobs discovered from pods"};
    }
    const std::string verb = evict ? "Evict" : "Delete";
    std::string ns = targets.empty() ? std::string() : targets.front().ns;
    if (!targets.empty()) {
      // The record: created once; a repeat reads the pods chosen then.
      const std::string name = RecordName(req.idempotency_key);
      const std::string events = "/apis/events.k8s.io/v1/namespaces/" + k8s::UrlEncode(ns) + "/events";
      std::vector<std::string> uids, names;
      uids.reserve(targets.size());
      names.reserve(targets.size());
      for (const auto& t : targets) {
        uids.push_back(t.uid);
        names.push_back(t.name);
      }
      json ev = MakeEvent(
          req, "Pod", targets.front().name, ns, targets.front().uid, verb,
          "recovery " + req.recovery_id + ": " + (evict ? "evicting" : "deleting") + " pods " + Join(names, ", "));
      ev["metadata"]["name"] = name;
      ev["metadata"]["annotations"] = {{"clusterd.io/pod-uids", Join(uids, ",")},
                                       {"clusterd.io/idempotency-key", req.idempotency_key}};
      auto made = api().Post(events, ev);
      if (!made.ok() && made.status().code() == StatusCode::kAlreadyExists) {
        auto prior = api().Get(events + "/" + name);
        if (prior.ok()) {
          std::string recorded = Annotation(*prior, "clusterd.io/pod-uids");
          std::vector<Target> kept;
          for (const auto& t : targets) {
            if (("," + recorded + ",").find("," + t.uid + ",") != std::string::npos) kept.push_back(t);
          }
          targets = std::move(kept);
        }
      }
    }
    if (targets.empty()) return {true, "no pod of job " + req.job_id + " left to " + (evict ? "evict" : "delete")};
    std::vector<std::string> done;
    for (const auto& t : targets) {
      Status s = evict ? Evict(t, req) : DeletePod(t);
      if (!s.ok()) return {false, (evict ? "evict " : "delete ") + t.ns + "/" + t.name + ": " + s.message()};
      done.push_back(t.name);
    }
    return {true, std::string(evict ? "evicted " : "deleted ") + Join(done, ", ")};
  }

  Status DeletePod(const Target& t) {
    json opts = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}, {"preconditions", {{"uid", t.uid}}}};
    auto r = api().Delete("/api/v1/namespaces/" + k8s::UrlEncode(t.ns) + "/pods/" + k8s::UrlEncode(t.name), opts);
    // Gone, or a different pod of that name by now: nothing to do.
    if (r.ok() || r.status().code() == StatusCode::kNotFound || r.status().code() == StatusCode::kAborted) {
      return Status::Ok();
    }
    return r.status();
  }

  // The Eviction API honours PodDisruptionBudgets: a 429 is retried until
  // k8s_eviction_timeout (or the step's deadline), then the pod is deleted
  // when k8s_delete_fallback is on.
  Status Evict(const Target& t, const ActionRequest& req) {
    const auto& s = ctx_->settings();
    json body = {{"apiVersion", "policy/v1"},
                 {"kind", "Eviction"},
                 {"metadata", {{"name", t.name}, {"namespace", t.ns}}},
                 {"deleteOptions", {{"preconditions", {{"uid", t.uid}}}}}};
    const std::string path =
        "/api/v1/namespaces/" + k8s::UrlEncode(t.ns) + "/pods/" + k8s::UrlEncode(t.name) + "/eviction";
    const auto give_up = std::min(SystemClock::Instance().Now() + s.eviction_timeout, req.deadline);
    for (;;) {
      auto r = api().Post(path, body);
      if (r.ok() || r.status().code() == StatusCode::kNotFound) return Status::Ok();
      if (r.status().code() == StatusCode::kAborted) return Status::Ok();  // uid changed: the pod is gone
      if (r.status().code() != StatusCode::kResourceExhausted && r.status().code() != StatusCode::kUnavailable) {
        return r.status();
      }
      if (SystemClock::Instance().Now() >= give_up) {
        if (s.delete_fallback) return DeletePod(t);
        return {StatusCode::kDeadlineExceeded, "eviction refused until the deadline: " + r.status().message()};
      }
      std::this_thread::sleep_for(std::chrono::seconds(2));  // the API server's own retry hint for PDBs
    }
  }

  json MakeEvent(const ActionRequest& req, const std::string& kind, const std::string& name, const std::string& ns,
                 const std::string& uid, const std::string& action, const std::string& note) const {
    json regarding = {{"kind", kind}, {"name", name}, {"apiVersion", "v1"}};
    if (!ns.empty()) regarding["namespace"] = ns;
    if (!uid.empty()) regarding["uid"] = uid;
    return {{"apiVersion", "events.k8s.io/v1"},
            {"kind", "Event"},
            {"metadata",
             {{"name", RecordName(req.idempotency_key + "/" + action)}, {"namespace", ns.empty() ? "default" : ns}}},
            {"eventTime", Rfc3339(SystemClock::Instance().Now(), true)},
            {"reportingController", "clusterd.io/clusterd"},
            {"reportingInstance", host_.substr(0, 128)},
            {"action", action},
            {"reason", "ClusterdRecovery"},
            {"type", "Warning"},
            {"regarding", regarding},
            {"note", note.substr(0, 1000)}};
  }

  // Best effort: an Event that cannot be posted fails no action.
  void PostEvent(const ActionRequest& req, const std::string& kind, const std::string& name, const std::string& ns,
                 const std::string& uid, const std::string& action, const std::string& note) {
    json ev = MakeEvent(req, kind, name, ns, uid, action, note);
    const std::string target_ns = ns.empty() ? "default" : ns;
    auto r = api().Post("/apis/events.k8s.io/v1/namespaces/" + k8s::UrlEncode(target_ns) + "/events", ev);
    if (!r.ok() && r.status().code() != StatusCode::kAlreadyExists) {
      GetLogger("k8s")->warn("event for {} {}: {}", kind, name, r.status().message());
    }
  }

  std::shared_ptr<KubernetesContext> ctx_;
  const std::string host_;
};

}  // namespace

StatusOr<std::unique_ptr<Integration>> MakeKubernetesIntegration(const ClusterdConfig& config) {
  auto ctx = KubernetesContext::For(config);
  if (!ctx.ok()) return ctx.status();
  return std::unique_ptr<Integration>(new KubernetesIntegration(std::move(*ctx)));
}

StatusOr<std::unique_ptr<Actuator>> MakeKubernetesActuator(const ClusterdConfig& config) {
  auto ctx = KubernetesContext::For(config);
  if (!ctx.ok()) return ctx.status();
  auto actions = std::make_shared<KubernetesActions>(*ctx);
  return actuator_internal::MakePooledActuator("kubernetes", 4,
                                               [actions](const ActionRequest& req) { return actions->Run(req); });
}

}  // namespace clusterd
