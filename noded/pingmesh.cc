#include "noded/pingmesh.h"

#include <arpa/inet.h>
#include <google/protobuf/util/time_util.h>

#include <map>
#include <set>

#include "common/logging.h"
#include "common/validation.h"
#include "noded/collectors/peer_probe.h"

namespace clusterd::noded {
namespace {

using google::protobuf::util::TimeUtil;

struct PlannedProbe {
  std::vector<ProbeTarget> targets;
  PeerProbeOptions options;
};

StatusOr<PlannedProbe> PlannedProbeFrom(const v1::ProbePlan& plan) {
  PlannedProbe p;
  p.options.attempts = plan.attempts();
  const int64_t ms = TimeUtil::DurationToMilliseconds(plan.timeout());
  p.options.timeout = std::chrono::milliseconds(ms);
  if (plan.targets_size() > static_cast<int>(kMaxProbeTargets)) {
    return InvalidArgument("probe plan with " + std::to_string(plan.targets_size()) + " targets, at most " +
                           std::to_string(kMaxProbeTargets));
  }
  for (const auto& t : plan.targets()) {
    if (t.port() == 0 || t.port() > 65535) {
      return InvalidArgument("probe target " + t.node() + ": port " + std::to_string(t.port()) + " out of range");
    }
    p.targets.push_back({t.node(), t.address(), static_cast<uint16_t>(t.port())});
    if (t.devices_size() > static_cast<int>(kMaxDevicePorts)) {
      return InvalidArgument("probe target " + t.node() + ": more than " + std::to_string(kMaxDevicePorts) +
                             " device ports");
    }
    for (const auto& d : t.devices()) {
      unsigned char buf[4];
      if (inet_pton(AF_INET, d.address().c_str(), buf) != 1) {
        return InvalidArgument("probe target " + t.node() + ": device " + std::to_string(d.device_id()) +
                               " address is no IPv4 literal");
      }
    }
  }
  CLUSTERD_RETURN_IF_ERROR(ValidateProbe(p.targets, p.options));
  return p;
}

}  // namespace

PingmeshWorker::PingmeshWorker(std::function<void()> ready, MetricsRegistry* metrics, DevicePlaneOptions device)
    : ready_(std::move(ready)), device_(std::move(device)) {
  if (metrics != nullptr) {
    device_sent_ = &metrics->AddCounter("noded_pingmesh_device_probes_total",
                                        "Device-plane packets sent to peers' NPU ports (hccn_tool ping).");
    device_lost_ = &metrics->AddCounter("noded_pingmesh_device_probes_lost_total",
                                        "Device-plane packets lost (no reply, or the tool timed out).");
    device_errors_ = &metrics->AddCounter("noded_pingmesh_device_probe_errors_total",
                                          "Device-plane probes whose tool failed to run or printed no summary.");
    device_unprobed_ = &metrics->AddCounter("noded_pingmesh_device_rounds_unprobed_total",
                                            "Rounds with device targets not probed: the tool is missing.");
    rounds_ = &metrics->AddCounter("noded_pingmesh_rounds_total", "Probe plans from ClusterD run.");
    refused_ = &metrics->AddCounter("noded_pingmesh_plans_refused_total", "Probe plans refused as invalid.");
    sent_ = &metrics->AddCounter("noded_pingmesh_probes_total", "TCP probes sent to peers.");
    lost_ = &metrics->AddCounter("noded_pingmesh_probes_lost_total", "TCP probes refused, reset or timed out.");
  }
}

PingmeshWorker::~PingmeshWorker() { Stop(); }

void PingmeshWorker::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void PingmeshWorker::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status PingmeshWorker::Submit(const v1::ProbePlan& plan) {
  if (auto probe = PlannedProbeFrom(plan); !probe.ok()) {
    if (refused_) refused_->Inc();
    GetLogger("pingmesh")->warn("probe plan of round {} refused: {}", plan.round(), probe.status().ToString());
    return probe.status();
  }
  {
    std::lock_guard lock(mu_);
    next_ = plan;
  }
  cv_.notify_all();
  return Status::Ok();
}

std::optional<v1::ProbeReport> PingmeshWorker::TakeReady() {
  std::lock_guard lock(mu_);
  auto out = std::move(report_);
  report_.reset();
  return out;
}

void PingmeshWorker::Run() {
  for (;;) {
    v1::ProbePlan plan;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || next_.has_value(); });
      if (stop_) return;
      plan = std::move(*next_);
      next_.reset();
    }
    auto probe = PlannedProbeFrom(plan);  // validated at Submit
    if (!probe.ok()) continue;
    // The device plane runs beside the TCP probe (its tool takes seconds).
    std::vector<DeviceProbeOutcome> device_outcomes;
    v1::DevicePlaneState device_state = v1::DEVICE_PLANE_STATE_UNSPECIFIED;
    std::string device_detail;
    std::thread device_thread;
    if (!device_.ports.empty()) {
      device_thread = std::thread([&] { ProbeDevicePlane(plan, &device_outcomes, &device_state, &device_detail); });
    }
    const auto outcomes = ProbePeers(probe->targets, probe->options);
    if (device_thread.joinable()) device_thread.join();
    v1::ProbeReport report;
    report.set_round(plan.round());
    report.set_device_plane(device_state);
    report.set_device_plane_detail(device_detail);
    std::map<std::string, v1::PeerProbeResult*> by_node;
    for (const auto& o : outcomes) {
      auto* r = report.add_peers();
      by_node.emplace(o.node, r);
      r->set_node(o.node);
      r->set_sent(o.sent);
      r->set_lost(o.lost);
      if (sent_) sent_->Inc(o.sent);
      if (lost_) lost_->Inc(o.lost);
      const uint32_t replies = o.sent - o.lost;
      if (replies == 0) continue;
      *r->mutable_rtt_min() = TimeUtil::MicrosecondsToDuration(o.rtt_min.count());
      *r->mutable_rtt_max() = TimeUtil::MicrosecondsToDuration(o.rtt_max.count());
      *r->mutable_rtt_mean() = TimeUtil::MicrosecondsToDuration(o.rtt_sum.count() / replies);
    }
    for (const auto& o : device_outcomes) {
      auto it = by_node.find(o.target.node);
      if (!o.ran || it == by_node.end()) continue;
      auto* d = it->second->add_devices();
      d->set_device_id(o.target.device_id);
      d->set_peer_device_id(o.target.peer_device_id);
      d->set_sent(o.sent);
      d->set_lost(o.lost);
      if (const uint32_t replies = o.sent - o.lost; replies > 0) {
        *d->mutable_rtt_mean() = TimeUtil::MicrosecondsToDuration(o.rtt_sum.count() / replies);
        *d->mutable_rtt_max() = TimeUtil::MicrosecondsToDuration(o.rtt_max.count());
      }
    }
    if (rounds_) rounds_->Inc();
    {
      std::lock_guard lock(mu_);
      report_ = std::move(report);
    }
    if (ready_) ready_();
  }
}

void PingmeshWorker::ProbeDevicePlane(const v1::ProbePlan& plan, std::vector<DeviceProbeOutcome>* outcomes,
                                      v1::DevicePlaneState* state, std::string* detail) {
  // Each of this node's ports probes the peer's port of the same id.
  std::set<uint32_t> mine;
  for (const auto& p : device_.ports) mine.insert(p.device_id);
  std::vector<DeviceProbeTarget> targets;
  for (const auto& t : plan.targets()) {
    for (const auto& d : t.devices()) {
      if (mine.contains(d.device_id()) && targets.size() < kMaxDeviceProbesPerRound) {
        targets.push_back({t.node(), d.device_id(), d.device_id(), d.address()});
      }
    }
  }
  if (targets.empty()) return;
  if (!DeviceToolUsable(device_.tool)) {
    *state = v1::DEVICE_PLANE_STATE_NO_TOOL;
    *detail = "no executable probe tool at " + device_.tool;
    if (device_unprobed_) device_unprobed_->Inc();
    return;
  }
  DeviceProbeOptions options;
  options.tool = device_.tool;
  options.packets = plan.attempts();
  options.timeout = device_.timeout;
  *outcomes = ProbeDevices(targets, options);
  size_t errors = 0;
  std::string first_error;
  for (const auto& o : *outcomes) {
    if (!o.ran) {
      if (errors++ == 0) first_error = o.error;
      continue;
    }
    if (device_sent_) device_sent_->Inc(o.sent);
    if (device_lost_) device_lost_->Inc(o.lost);
  }
  if (device_errors_) device_errors_->Inc(errors);
  *state = errors == 0 ? v1::DEVICE_PLANE_STATE_PROBED : v1::DEVICE_PLANE_STATE_PARTIAL;
  if (errors > 0) {
    *detail = std::to_string(errors) + " of " + std::to_string(outcomes->size()) +
              " device probes failed: " + first_error.substr(0, 512);
    SanitizeLine(detail);
    GetLogger("pingmesh")->warn("round {}: {}", plan.round(), *detail);
  }
}

}  // namespace clusterd::noded
