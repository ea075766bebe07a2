// The kubelet's pod-resources API (docs/noded.md, "Which devices a pod
// holds"): a thread asks the kubelet's List every interval over its unix
// socket which devices each pod holds, and hands the answer to the Agent,
// which maps it onto the node's devices and keeps it for ClusterD
// (Inventory.pod_devices, PodDevicesUpdate). The adapter at the edge: the
// kubelet's gRPC API in, plain KubeletPod structs out.
//
// Without the socket (not a Kubernetes node, the path not mounted) nothing is
// reported and nothing is an error; the kubelet is asked again every
// interval. While the kubelet cannot be asked (a kubelet restart), the last
// answer stands: the pods' own Kubernetes state tells ClusterD which pods are
// gone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/metrics.h"
#include "common/status.h"
#include "noded/agent.h"
#include "noded/collectors/pod_devices.h"

namespace clusterd::noded {

struct PodResourcesOptions {
  std::string socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::chrono::nanoseconds interval = std::chrono::seconds(10);
  std::chrono::nanoseconds timeout = std::chrono::seconds(5);  // of one List
  // What one answer may hold at most (a node's every pod, CPU ids and all).
  int max_answer_bytes = 16 << 20;
  PodDevicesOptions mapping;
};

class PodResourcesWatcher {
 public:
  // agent outlives the watcher; on_change runs on the watcher's thread after
  // the agent's pod devices changed (wake the stream); metrics may be null.
  PodResourcesWatcher(PodResourcesOptions options, Agent* agent, std::function<void()> on_change,
                      MetricsRegistry* metrics);
  ~PodResourcesWatcher();

  void Start();
  void Stop();
  // One question to the kubelet, now (the thread asks every interval): Ok
  // when it answered; NotFound without its socket.
  Status ListOnce();

 private:
  struct Rpc;
  void Loop();
  void LogOnce(const std::string& key, const std::string& message, bool warn);

  const PodResourcesOptions options_;
  Agent* const agent_;
  const std::function<void()> on_change_;
  std::unique_ptr<Rpc> rpc_;
  std::string logged_state_, logged_unmapped_;
  Counter* errors_ = nullptr;
  Gauge* up_ = nullptr;
  Gauge* pods_ = nullptr;
  Gauge* unmapped_ = nullptr;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace clusterd::noded
