#include "noded/pingmesh.h"

#include <google/protobuf/util/time_util.h>

#include "common/logging.h"
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
  }
  CLUSTERD_RETURN_IF_ERROR(ValidateProbe(p.targets, p.options));
  return p;
}

}  // namespace

PingmeshWorker::PingmeshWorker(std::function<void()> ready, MetricsRegistry* metrics) : ready_(std::move(ready)) {
  if (metrics != nullptr) {
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
    const auto outcomes = ProbePeers(probe->targets, probe->options);
    v1::ProbeReport report;
    report.set_round(plan.round());
    for (const auto& o : outcomes) {
      auto* r = report.add_peers();
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
    if (rounds_) rounds_->Inc();
    {
      std::lock_guard lock(mu_);
      report_ = std::move(report);
    }
    if (ready_) ready_();
  }
}

}  // namespace clusterd::noded
