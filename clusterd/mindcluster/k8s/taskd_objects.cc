#include "clusterd/mindcluster/k8s/taskd_objects.h"

#include <chrono>

#include "clusterd/k8s/requests.h"
#include "clusterd/mindcluster/go_json.h"
#include "common/logging.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;
using nlohmann::json;

constexpr char kResetKey[] = "reset.json";
constexpr char kCheckCodeKey[] = "checkCode";

}  // namespace

TaskdKubeObjects::TaskdKubeObjects(std::shared_ptr<const k8s::ApiClient> client, const Clock* clock,
                                   MetricsRegistry* metrics)
    : client_(std::move(client)), clock_(clock) {
  if (metrics != nullptr) {
    const std::string help =
        "Writes to TaskD jobs' Kubernetes objects (PodGroup label and annotation, reset-config ConfigMap).";
    ok_ = &metrics->AddCounter("clusterd_mindcluster_taskd_object_writes_total", help, {{"result", "ok"}});
    errors_ = &metrics->AddCounter("clusterd_mindcluster_taskd_object_writes_total", help, {{"result", "error"}});
    dropped_ = &metrics->AddCounter("clusterd_mindcluster_taskd_object_writes_total", help, {{"result", "dropped"}});
  }
  thread_ = std::thread([this] { Loop(); });
}

TaskdKubeObjects::~TaskdKubeObjects() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TaskdKubeObjects::Queue(std::string what, std::function<Status()> write) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    if (queue_.size() >= kMaxQueued) {
      if (dropped_ != nullptr) dropped_->Inc();
      GetLogger("taskd")->warn("{}: dropped, {} writes are queued already", what, kMaxQueued);
      return;
    }
    queue_.emplace_back(std::move(what), std::move(write));
  }
  cv_.notify_all();
}

void TaskdKubeObjects::Drain() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return stopping_ || (queue_.empty() && busy_ == 0); });
}

void TaskdKubeObjects::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto [what, write] = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    lock.unlock();
    const Status st = write();
    if (st.ok()) {
      if (ok_ != nullptr) ok_->Inc();
    } else {
      if (errors_ != nullptr) errors_->Inc();
      GetLogger("taskd")->warn("{}: {}", what, st.ToString());
    }
    lock.lock();
    --busy_;
    cv_.notify_all();
  }
}

Status TaskdKubeObjects::PatchPodGroup(const mc::TaskdJobRef& job, const json& metadata) const {
  const std::string path = "/apis/scheduling.volcano.sh/v1beta1/namespaces/" + k8s::UrlEncode(job.ns) + "/podgroups/" +
                           k8s::UrlEncode(job.podgroup);
  auto r = client_->Patch(path, json{{"metadata", metadata}}, k8s::PatchType::kMerge);
  return r.ok() ? Status::Ok() : r.status();
}

void TaskdKubeObjects::RecoverEnable(const mc::TaskdJobRef& job, std::string_view value) {
  if (!job.kubernetes() || job.podgroup.empty()) return;
  Queue("job " + job.id + ": PodGroup " + job.ns + "/" + job.podgroup + " process-recover-enable=" + std::string(value),
        [this, job, value = std::string(value)] {
          return PatchPodGroup(job, {{"labels", {{std::string(mc::kKeyProcessRecoverEnable), value}}}});
        });
}

void TaskdKubeObjects::RecoverStatus(const mc::TaskdJobRef& job, const std::string& status) {
  if (!job.kubernetes() || job.podgroup.empty()) return;
  Queue("job " + job.id + ": PodGroup " + job.ns + "/" + job.podgroup + " ProcessRecoverStatus=" + status,
        [this, job, status] {
          return PatchPodGroup(job, {{"annotations", {{"ProcessRecoverStatus", status}}}});
        });
}

void TaskdKubeObjects::PodFaultTypes(const mc::TaskdJobRef& job, std::map<std::string, std::string> by_node) {
  if (!job.kubernetes() || job.podgroup.empty()) return;
  for (auto& [node, type] : by_node) {
    Queue("job " + job.id + ": pods on " + node + " " + std::string(mc::kPodLabelFaultType) + "=" + type,
          [this, job, node = node, type = type] { return LabelPods(job, node, type); });
  }
}

Status TaskdKubeObjects::LabelPods(const mc::TaskdJobRef& job, const std::string& node, const std::string& type) const {
  const std::string pods = "/api/v1/namespaces/" + k8s::UrlEncode(job.ns) + "/pods";
  auto list = client_->Get(pods + "?fieldSelector=" + k8s::UrlEncode("spec.nodeName=" + node));
  if (!list.ok()) return list.status();
  size_t labelled = 0;
  if (auto items = list->find("items"); items != list->end() && items->is_array()) {
    for (const json& pod : *items) {
      const json& meta = pod.value("metadata", json::object());
      const json& annotations = meta.value("annotations", json::object());
      if (!annotations.is_object() || annotations.value("scheduling.k8s.io/group-name", json()) != job.podgroup) {
        continue;
      }
      const std::string name = meta.value("name", std::string());
      if (name.empty()) continue;
      auto r = client_->Patch(pods + "/" + k8s::UrlEncode(name),
                              json{{"metadata", {{"labels", {{std::string(mc::kPodLabelFaultType), type}}}}}},
                              k8s::PatchType::kMerge);
      if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
      ++labelled;
    }
  }
  if (labelled == 0) return NotFound("no pod of PodGroup " + job.podgroup + " on node " + node);
  return Status::Ok();
}

void TaskdKubeObjects::ResetConfig(const mc::TaskdJobRef& job, mc::ResetOp op, std::vector<mc::ResetRank> ranks) {
  if (!job.kubernetes() || op == mc::ResetOp::kNone) return;
  Queue("job " + job.id + ": ConfigMap " + job.ns + "/reset-config-" + job.name,
        [this, job, op, ranks = std::move(ranks)] { return UpdateResetConfig(job, op, ranks); });
}

Status TaskdKubeObjects::UpdateResetConfig(const mc::TaskdJobRef& job, mc::ResetOp op,
                                           const std::vector<mc::ResetRank>& ranks) const {
  const std::string path =
      "/api/v1/namespaces/" + k8s::UrlEncode(job.ns) + "/configmaps/" + k8s::UrlEncode("reset-config-" + job.name);
  // Guarded by the version read: a conflict (the device plugin or Volcano
  // wrote meanwhile) is read again, twice at most.
  Status last = Status::Ok();
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto cm = client_->Get(path);
    if (!cm.ok()) {
      if (cm.status().code() == StatusCode::kNotFound) {
        return NotFound("the job's reset-config-" + job.name +
                        " ConfigMap does not exist (the job's YAML makes it, as for MindCluster)");
      }
      return cm.status();
    }
    std::string current;
    if (auto d = cm->find("data"); d != cm->end() && d->is_object()) {
      if (auto v = d->find(kResetKey); v != d->end() && v->is_string()) current = v->get<std::string>();
    }
    const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(clock_->Now().time_since_epoch()).count();
    const std::string value = mc::ResetConfigJson(current, op, ranks, now_s);
    json body = *cm;
    body["data"][kResetKey] = value;
    body["data"][kCheckCodeKey] = mc::Sha256Hex(value);
    auto put = client_->Put(path, body);
    if (put.ok()) return Status::Ok();
    last = put.status();
    if (last.code() != StatusCode::kAborted) return last;
  }
  return last;
}

}  // namespace clusterd
