#include "incidents.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "agents.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "scenarios.h"

namespace clusterd::bench {
namespace {

constexpr char kIncPrefix[] = "bench-inc-";
constexpr int kSuperPodSize = 48;                  // MindCluster's SuperPoD
constexpr int kHitPods = 20;                       // the cascade
constexpr int kMinNodes = 3;                       // clusterd's incident_min_nodes default
constexpr const char* kIncidentCode = "80E01801";  // RESTART_BUSINESS in the built-in catalog

int NodeIndex(const std::string& name) { return std::atoi(name.c_str() + name.rfind('-') + 1); }

void SuperPodOf(v1::Hello* h) {
  (*h->mutable_labels())["huawei.com/topotree.superpodid"] = std::to_string(NodeIndex(h->node_name()) / kSuperPodSize);
}

}  // namespace

std::string RunIncidents(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  const int n = o.incident_nodes;
  const int faults = o.incident_faults;
  const int pods = std::min(kHitPods, n / kSuperPodSize);
  std::cerr << "[bench] scenario 18: incidents, " << n << " nodes in SuperPoDs of " << kSuperPodSize << ", " << faults
            << " faults in 1 s across " << pods << " SuperPoDs\n";
  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-incidents"));
  if (std::string err = cd.Start(); !err.empty()) return "scenario 18: clusterd: " + err;
  SetHelloEdit(SuperPodOf);
  std::string err;
  json result;
  {
    AgentPool pool(cd.target(), NodeNames(kIncPrefix, n), o.short_mode ? 4 : o.agent_channels);
    err = pool.Connect(300);
    auto channel = grpc::CreateChannel(cd.target(), grpc::InsecureChannelCredentials());
    auto jobs = v1::JobService::NewStub(channel);
    auto cluster = v1::ClusterService::NewStub(channel);
    for (int p = 0; p < pods && err.empty(); ++p) {
      std::vector<std::string> nodes;
      for (int i = 0; i < kSuperPodSize; ++i) nodes.push_back(kIncPrefix + std::to_string(p * kSuperPodSize + i));
      err = CreateJob(jobs.get(), "inc-job-" + std::to_string(p), nodes);
    }
    const uint64_t from = err.empty() ? CurrentRevision(cluster.get(), &err) : 0;
    // What the Watch saw, by SuperPoD / job: the first arrival, and counts.
    std::mutex mu;
    std::map<std::string, int64_t> incident_at, decided_at;
    std::map<std::string, int> recoveries;
    v1::WatchRequest wreq;
    wreq.set_from_revision(from);
    wreq.add_types(v1::EVENT_TYPE_INCIDENT_OPENED);
    wreq.add_types(v1::EVENT_TYPE_RECOVERY_STARTED);
    WatchPool watch(cd.target(), 1, wreq, [&](size_t, const v1::WatchResponse& resp, int64_t recv_ns) {
      std::lock_guard lock(mu);
      for (const v1::Event& e : resp.events()) {
        if (e.type() == v1::EVENT_TYPE_INCIDENT_OPENED) incident_at.try_emplace(e.incident().domain().name(), recv_ns);
        if (e.type() == v1::EVENT_TYPE_RECOVERY_STARTED) {
          decided_at.try_emplace(e.recovery().job_id(), recv_ns);
          ++recoveries[e.recovery().job_id()];
        }
      }
    });
    // The cascade: fault k on SuperPoD k % pods, its (k / pods)-th node
    // (chip 0, then chip 1 ...), paced evenly over one second.
    std::vector<int64_t> crossed(pods, 0);
    const int64_t t0 = NowNs();
    for (int k = 0; k < faults && err.empty(); ++k) {
      const int64_t due = t0 + static_cast<int64_t>(1e9 * k / faults);
      while (NowNs() < due) std::this_thread::yield();
      const int pod = k % pods;
      const int slot = k / pods;
      const size_t i = static_cast<size_t>(pod * kSuperPodSize + slot % kSuperPodSize);
      const uint64_t seq = pool.Send(i, v1::TRANSITION_ACTION_RAISE, static_cast<uint32_t>(slot / kSuperPodSize),
                                     kIncidentCode, v1::FAULT_LEVEL_RESTART_BUSINESS);
      if (slot == kMinNodes - 1) crossed[pod] = pool.SentNs(i, seq);
    }
    const double cascade_s = static_cast<double>(NowNs() - t0) / 1e9;
    // Every SuperPoD's incident and job, within a minute.
    const int64_t end = NowNs() + 60'000'000'000;
    for (;;) {
      {
        std::lock_guard lock(mu);
        if (static_cast<int>(incident_at.size()) >= pods && static_cast<int>(decided_at.size()) >= pods) break;
      }
      if (NowNs() > end) {
        err = "not every SuperPoD got its incident and its job a decision within 60 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (err.empty()) (void)pool.WaitAllAcked(60);
    std::vector<int64_t> latency;
    int max_recoveries = 0;
    if (err.empty()) {
      std::lock_guard lock(mu);
      for (int p = 0; p < pods; ++p) {
        const int64_t formed = incident_at[std::to_string(p)];
        const int64_t decided = decided_at["inc-job-" + std::to_string(p)];
        latency.push_back(std::max<int64_t>(0, std::max(formed, decided) - crossed[p]));
        max_recoveries = std::max(max_recoveries, recoveries["inc-job-" + std::to_string(p)]);
      }
    }
    watch.Cancel();
    result = {{"nodes", n},
              {"superpods_hit", pods},
              {"faults", faults},
              {"cascade_s", cascade_s},
              {"threshold_to_decided", LatencyJson(latency)},
              {"max_recoveries_per_job", max_recoveries}};
    pool.Close();
  }
  SetHelloEdit(nullptr);
  cd.Stop();
  if (!err.empty()) return "scenario 18: " + err;
  (*out)["scenario18_incidents"] = result;
  const json& l = result["threshold_to_decided"];
  rows->push_back({"18 incidents",
                   "domain crosses the threshold -> incident formed and its job decided, p50 / max (" +
                       std::to_string(n) + " nodes, " + std::to_string(faults) + " faults in 1 s over " +
                       std::to_string(pods) + " SuperPoDs)",
                   Fmt(l["p50_ms"].get<double>(), " ms") + " / " + Fmt(l["max_ms"].get<double>(), " ms"), "", "",
                   "<= 1000 ms", Met(l["max_ms"].get<double>() <= 1000)});
  rows->push_back({"18 incidents", "recoveries per job for its incident (at most)",
                   std::to_string(result["max_recoveries_per_job"].get<int>()), "", "", "1",
                   Met(result["max_recoveries_per_job"].get<int>() == 1)});
  return "";
}

}  // namespace clusterd::bench
