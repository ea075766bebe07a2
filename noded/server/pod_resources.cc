#include "noded/server/pod_resources.h"

#include <sys/stat.h>

#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/logging.h"
#include "k8s/podresources/v1/api.grpc.pb.h"

namespace clusterd::noded {

struct PodResourcesWatcher::Rpc {
  std::unique_ptr<::v1::PodResourcesLister::Stub> stub;
};

PodResourcesWatcher::PodResourcesWatcher(PodResourcesOptions options, Agent* agent, std::function<void()> on_change,
                                         MetricsRegistry* metrics)
    : options_(std::move(options)), agent_(agent), on_change_(std::move(on_change)), rpc_(std::make_unique<Rpc>()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_answer_bytes);
  // A restarted kubelet is asked again within seconds, not after gRPC's
  // default reconnect backoff (up to two minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  rpc_->stub = ::v1::PodResourcesLister::NewStub(
      grpc::CreateCustomChannel("unix://" + options_.socket, grpc::InsecureChannelCredentials(), args));
  if (metrics != nullptr) {
    errors_ = &metrics->AddCounter("noded_pod_resources_errors_total",
                                   "Questions to the kubelet's pod-resources API that failed (its socket present).");
    up_ = &metrics->AddGauge("noded_pod_resources_up", "1 when the kubelet's pod-resources API answered last time.");
    pods_ = &metrics->AddGauge("noded_pod_resources_pods",
                               "Pods holding accelerator devices on this node, as reported to ClusterD.");
    unmapped_ = &metrics->AddGauge(
        "noded_pod_resources_unmapped_ids",
        "Device ids in the kubelet's last answer that name no device of this node (their pods not reported).");
  }
}

PodResourcesWatcher::~PodResourcesWatcher() { Stop(); }

void PodResourcesWatcher::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void PodResourcesWatcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PodResourcesWatcher::Loop() {
  for (;;) {
    (void)ListOnce();
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, options_.interval, [this] { return stop_; })) return;
  }
}

void PodResourcesWatcher::LogOnce(const std::string& key, const std::string& message, bool warn) {
  std::string& last = key == "state" ? logged_state_ : logged_unmapped_;
  if (last == message) return;
  last = message;
  if (message.empty()) return;
  if (warn) {
    GetLogger("noded")->warn("{}", message);
  } else {
    GetLogger("noded")->info("{}", message);
  }
}

Status PodResourcesWatcher::ListOnce() {
  struct stat st {};
  if (::stat(options_.socket.c_str(), &st) != 0) {
    if (up_ != nullptr) up_->Set(0);
    LogOnce("state",
            "kubelet pod-resources: no socket at " + options_.socket +
                ": which devices each pod holds is not reported (asked again every interval)",
            false);
    return NotFound("no kubelet pod-resources socket at " + options_.socket);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout));
  ::v1::ListPodResourcesResponse resp;
  grpc::Status rpc = rpc_->stub->List(&ctx, ::v1::ListPodResourcesRequest(), &resp);
  if (!rpc.ok()) {
    if (errors_ != nullptr) errors_->Inc();
    if (up_ != nullptr) up_->Set(0);
    LogOnce("state",
            "kubelet pod-resources at " + options_.socket + ": List failed (" + std::to_string(rpc.error_code()) + " " +
                rpc.error_message().substr(0, 256) + "); the last answer stands",
            true);
    return Unavailable("kubelet pod-resources List: " + rpc.error_message());
  }
  std::vector<KubeletPod> pods;
  pods.reserve(resp.pod_resources_size());
  for (const auto& p : resp.pod_resources()) {
    KubeletPod pod;
    pod.ns = p.namespace_();
    pod.name = p.name();
    for (const auto& c : p.containers()) {
      for (const auto& d : c.devices()) {
        if (d.device_ids().empty()) continue;
        pod.devices.push_back({d.resource_name(), {d.device_ids().begin(), d.device_ids().end()}});
      }
    }
    if (!pod.devices.empty()) pods.push_back(std::move(pod));
  }
  const uint64_t before = agent_->PodDevicesVersion();
  const PodDevicesResult r = agent_->SetKubeletPods(pods, options_.mapping);
  if (up_ != nullptr) up_->Set(1);
  if (pods_ != nullptr) pods_->Set(static_cast<double>(r.pods.size()));
  if (unmapped_ != nullptr) unmapped_->Set(r.unmapped_ids);
  LogOnce("state", "kubelet pod-resources at " + options_.socket + ": answering", false);
  LogOnce("unmapped",
          r.first_unmapped.empty()
              ? ""
              : "kubelet pod-resources: " + std::to_string(r.unmapped_ids) +
                    " device id(s) name no device of this node, their pods are placed on any device (first: " +
                    r.first_unmapped + ")",
          true);
  if (agent_->PodDevicesVersion() != before && on_change_) on_change_();
  return Status::Ok();
}

}  // namespace clusterd::noded
