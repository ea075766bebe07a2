#include "clusterd/ha/pod_label.h"

#include "clusterd/config/config.h"
#include "clusterd/k8s/api/kubeconfig.h"
#include "common/logging.h"

namespace clusterd::ha {

PodLabeler::PodLabeler(std::unique_ptr<k8s::Client> client, std::string pod_namespace, std::string pod_name,
                       std::chrono::milliseconds retry_interval)
    : client_(std::move(client)),
      namespace_(std::move(pod_namespace)),
      pod_(std::move(pod_name)),
      retry_interval_(retry_interval),
      thread_([this] { Run(); }) {}

PodLabeler::~PodLabeler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PodLabeler::Want(const std::string& role) {
  {
    std::lock_guard lock(mu_);
    wanted_ = role;
  }
  cv_.notify_all();
}

bool PodLabeler::Settled() const {
  std::lock_guard lock(mu_);
  return !wanted_.empty() && wanted_ == written_;
}

std::string PodLabeler::Problem() const {
  std::lock_guard lock(mu_);
  if (!wanted_.empty() && wanted_ == written_) return "";
  return "pod " + namespace_ + "/" + pod_ + " not yet labelled " + kRoleLabel + "=" + wanted_ +
         (problem_.empty() ? "" : ": " + problem_);
}

void PodLabeler::MarkStandby(const std::string& pod_name) {
  if (pod_name.empty() || pod_name == pod_) return;
  {
    std::lock_guard lock(mu_);
    others_.insert(pod_name);
  }
  cv_.notify_all();
}

Status PodLabeler::Patch(const std::string& pod, const std::string& role) const {
  nlohmann::json patch = {{"metadata", {{"labels", {{kRoleLabel, role}}}}}};
  auto answer = client_->Patch("/api/v1/namespaces/" + k8s::UrlEncode(namespace_) + "/pods/" + k8s::UrlEncode(pod),
                               patch, k8s::PatchType::kMerge);
  return answer.ok() ? Status::Ok() : answer.status();
}

void PodLabeler::Run() {
  auto log = GetLogger("ha");
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || wanted_ != written_ || !others_.empty(); });
    if (stop_) return;
    bool failed = false;
    if (wanted_ != written_) {
      const std::string role = wanted_;
      lock.unlock();
      Status st = Patch(pod_, role);
      lock.lock();
      if (st.ok()) {
        written_ = role;
        problem_.clear();
        log->info("pod {}/{} labelled {}={}", namespace_, pod_, kRoleLabel, role);
      } else {
        if (problem_ != st.ToString()) log->warn("labelling pod {}/{}: {}", namespace_, pod_, st.ToString());
        problem_ = st.ToString();
        failed = true;
      }
    }
    if (!others_.empty()) {
      const std::string other = *others_.begin();
      lock.unlock();
      Status st = Patch(other, "standby");
      lock.lock();
      // Gone (404) is as good as marked; other failures are retried.
      if (st.ok() || st.code() == StatusCode::kNotFound) {
        others_.erase(other);
        if (st.ok()) log->info("pod {}/{} of the replaced leader labelled {}=standby", namespace_, other, kRoleLabel);
      } else {
        log->warn("labelling the replaced leader's pod {}/{}: {}", namespace_, other, st.ToString());
        failed = true;
      }
    }
    if (failed) cv_.wait_for(lock, retry_interval_, [&] { return stop_; });
  }
}

StatusOr<std::unique_ptr<PodLabeler>> MakePodLabeler(const ClusterdConfig& config) {
  if (config.ha.pod_name.empty()) return std::unique_ptr<PodLabeler>();
  const auto& k = config.k8s;
  auto client_config =
      k.kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(k.kubeconfig, k.kube_context);
  if (!client_config.ok()) return client_config.status();
  client_config->request_timeout = std::chrono::milliseconds(5000);
  auto client = k8s::Client::Create(*client_config);
  if (!client.ok()) return client.status();
  return std::make_unique<PodLabeler>(std::move(*client), config.ha.pod_namespace, config.ha.pod_name);
}

}  // namespace clusterd::ha
