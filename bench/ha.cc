// Scenario 11: high availability on etcd (docs/ha.md). Three etcd members
// and three clusterd replicas on loopback, fsync on everywhere. Measured
// against a single-node clusterd in the same run, with the same writers:
// durable ingest (closed loop) and ack latency at --rate; then the takeover:
// --ha-nodes agents attached to the leader through an ipv4:a,b,c target (as
// NodeD is given on bare metal), kill -9 of the leader, the time to the first
// acknowledged write (a FaultService.Report tried on every replica until one
// answers OK) and until every agent is attached again.
#include "ha.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "agents.h"
#include "clusterd/v1/fault.grpc.pb.h"
#include "common/free_port.h"

namespace clusterd::bench {
namespace {

// One report through a fresh channel to `target`: true when acknowledged.
bool ReportOnce(const std::string& target, const std::string& node, const std::string& id) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = v1::FaultService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  v1::ReportRequest req;
  req.set_reporter("bench-ha");
  req.set_id(id);
  req.set_node(node);
  req.set_code("ROCE_LINK_DOWN");
  req.set_level(v1::FAULT_LEVEL_SUB_HEALTH);
  req.set_action(v1::TRANSITION_ACTION_RAISE);
  v1::ReportResponse resp;
  return stub->Report(&ctx, req, &resp).ok();
}

}  // namespace

std::string StartEtcdCluster(const Options& o, const TempDir& tmp, const std::string& prefix, EtcdCluster* out) {
  std::string cluster;
  for (int i = 0; i < 3; ++i) {
    auto m = std::make_unique<EtcdCluster::Member>();
    m->name = "e" + std::to_string(i);
    m->client = FreeLoopbackPort();
    m->peer = FreeLoopbackPort();
    cluster += (i ? "," : "") + m->name + "=http://127.0.0.1:" + std::to_string(m->peer);
    out->endpoints += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(m->client);
    out->members.push_back(std::move(m));
  }
  for (auto& m : out->members) {
    const std::string client = "http://127.0.0.1:" + std::to_string(m->client);
    const std::string peer = "http://127.0.0.1:" + std::to_string(m->peer);
    if (auto err = m->proc.Spawn({o.etcd,
                                  "--name",
                                  m->name,
                                  "--data-dir",
                                  tmp.Sub(prefix + "-" + m->name),
                                  "--listen-client-urls",
                                  client,
                                  "--advertise-client-urls",
                                  client,
                                  "--listen-peer-urls",
                                  peer,
                                  "--initial-advertise-peer-urls",
                                  peer,
                                  "--initial-cluster",
                                  cluster,
                                  "--max-request-bytes",
                                  "8388608",
                                  "--max-txn-ops",
                                  "1024",
                                  "--quota-backend-bytes",
                                  std::to_string(8LL << 30),
                                  "--log-level",
                                  "warn"},
                                 tmp.Sub(prefix + "-" + m->name + ".log"));
        !err.empty()) {
      return "etcd: " + err;
    }
  }
  const int64_t deadline = NowNs() + static_cast<int64_t>(30e9);
  for (auto& m : out->members) {
    while (HttpGet(m->client, "/health").find("\"true\"") == std::string::npos) {
      if (NowNs() > deadline) return "etcd member " + m->name + " not healthy within 30 s";
      SleepUntilNs(NowNs() + 50'000'000);
    }
  }
  return "";
}

std::string RunHa(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  json& s11 = (*out)["scenario11_high_availability"];
  if (o.etcd.empty() || ::access(o.etcd.c_str(), X_OK) != 0) {
    std::cerr << "[bench] scenario 11 skipped: no etcd binary (--etcd, or scripts/k8s-tools.sh builds one)\n";
    s11["skipped"] = "no etcd binary";
    return "";
  }
  EtcdCluster etcd;
  if (auto err = StartEtcdCluster(o, tmp, "ha", &etcd); !err.empty()) return "scenario 11: " + err;
  const std::string& endpoints = etcd.endpoints;

  // The single-node baseline, same writers, same run.
  DriveResult single_tput, single_lat;
  // CPU seconds in the closed-loop phase: {server(s), bench}.
  std::pair<double, double> single_cpu{NAN, NAN};
  {
    ClusterdProcess single(o.clusterd, tmp.Sub("ha-single"));
    if (auto err = single.Start(); !err.empty()) return "scenario 11: " + err;
    std::cerr << "[bench] scenario 11: single-node ingest (" << o.streams << " streams, " << o.duration_s << " s)\n";
    const double cpu0 = single.CpuSeconds(), self0 = SelfCpuSeconds();
    single_tput = DriveAgents(single.target(), "single", o.streams, o.duration_s, 0);
    single_cpu = {single.CpuSeconds() - cpu0, SelfCpuSeconds() - self0};
    single_lat = DriveAgents(single.target(), "single-lat", o.streams, o.duration_s, o.rate);
    single.Stop();
  }

  std::vector<std::unique_ptr<ClusterdProcess>> replicas;
  for (int i = 0; i < 3; ++i) {
    replicas.push_back(std::make_unique<ClusterdProcess>(
        o.clusterd, tmp.Sub("ha-r" + std::to_string(i)),
        std::vector<std::string>{"--etcd-endpoints=" + endpoints, "--ha-replica-id=r" + std::to_string(i),
                                 "--ha-lease-ttl=2s"}));
    if (auto err = replicas.back()->Launch(); !err.empty()) return "scenario 11: " + err;
  }
  auto leader = [&]() -> int {
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (HttpGet(replicas[i]->http_port(), "/readyz").rfind("ready", 0) == 0) return static_cast<int>(i);
    }
    return -1;
  };
  auto wait_leader = [&](int not_this, double seconds) {
    const int64_t deadline = NowNs() + static_cast<int64_t>(seconds * 1e9);
    for (;;) {
      const int l = leader();
      if (l >= 0 && l != not_this) return l;
      if (NowNs() > deadline) return -1;
      SleepUntilNs(NowNs() + 10'000'000);
    }
  };
  int lead = wait_leader(-1, 60);
  if (lead < 0) return "scenario 11: no replica became the leader within 60 s";
  std::cerr << "[bench] scenario 11: HA ingest against leader r" << lead << "\n";
  // Where the closed loop's time goes on the leader: its appends (one etcd
  // transaction each), their latency and the log's bytes before and after
  // compression.
  const std::vector<std::string> kLogMetrics = {
      "clusterd_ha_log_appends_total", "clusterd_ha_log_append_duration_seconds_sum",
      "clusterd_ha_log_change_bytes_total", "clusterd_ha_log_stored_bytes_total"};
  auto log_metrics = [&] {
    std::vector<double> v;
    for (const auto& m : kLogMetrics) v.push_back(replicas[lead]->Metric(m));
    return v;
  };
  // Every process's CPU over the closed loop: on two cores the leader, both
  // standbys (each applies every entry), three etcd members and the bench's
  // agents share them, which bounds the HA rate (docs/performance.md).
  auto cpu_now = [&] {
    std::vector<double> v;
    v.push_back(replicas[lead]->CpuSeconds());
    double standbys = 0;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (static_cast<int>(i) != lead) standbys += replicas[i]->CpuSeconds();
    }
    v.push_back(standbys);
    double members = 0;
    for (auto& m : etcd.members) members += ProcessCpuSeconds(m->proc.pid());
    v.push_back(members);
    v.push_back(SelfCpuSeconds());
    return v;
  };
  const std::vector<double> log0 = log_metrics();
  const std::vector<double> cpu0 = cpu_now();
  auto ha_tput = DriveAgents(replicas[lead]->target(), "ha", o.streams, o.duration_s, 0);
  const std::vector<double> cpu1 = cpu_now();
  const std::vector<double> log1 = log_metrics();
  auto ha_lat = DriveAgents(replicas[lead]->target(), "ha-lat", o.streams, o.duration_s, o.rate);
  const double appends = replicas[lead]->Metric("clusterd_ha_log_appends_total");
  const double tput_appends = log1[0] - log0[0];
  json log_json = {
      {"appends", tput_appends},
      {"appends_per_s", tput_appends / ha_tput.window_s},
      {"transitions_per_append", tput_appends > 0 ? ha_tput.acked_per_s * ha_tput.window_s / tput_appends : NAN},
      {"append_ms_mean", tput_appends > 0 ? 1e3 * (log1[1] - log0[1]) / tput_appends : NAN},
      {"append_busy_share", (log1[1] - log0[1]) / ha_tput.window_s},
      {"change_bytes_per_append", tput_appends > 0 ? (log1[2] - log0[2]) / tput_appends : NAN},
      {"stored_bytes_per_append", tput_appends > 0 ? (log1[3] - log0[3]) / tput_appends : NAN},
      {"compression_ratio", (log1[3] - log0[3]) > 0 ? (log1[2] - log0[2]) / (log1[3] - log0[3]) : NAN}};
  // Cores used in the closed loop, and CPU per acknowledged transition (µs),
  // HA against single-node: the machine's bound when the sum is ~2 cores.
  const double ha_acked = ha_tput.acked_per_s * ha_tput.window_s;
  const double single_acked = single_tput.acked_per_s * single_tput.window_s;
  auto cores = [&](size_t i) { return (cpu1[i] - cpu0[i]) / ha_tput.window_s; };
  const double ha_total = (cpu1[0] - cpu0[0]) + (cpu1[1] - cpu0[1]) + (cpu1[2] - cpu0[2]) + (cpu1[3] - cpu0[3]);
  json cpu_json = {{"ha_cores",
                    {{"leader", cores(0)},
                     {"standbys", cores(1)},
                     {"etcd", cores(2)},
                     {"bench", cores(3)},
                     {"total", ha_total / ha_tput.window_s}}},
                   {"ha_cpu_us_per_transition",
                    {{"leader", ha_acked > 0 ? 1e6 * (cpu1[0] - cpu0[0]) / ha_acked : NAN},
                     {"all", ha_acked > 0 ? 1e6 * ha_total / ha_acked : NAN}}},
                   {"single_cores",
                    {{"clusterd", single_cpu.first / single_tput.window_s},
                     {"bench", single_cpu.second / single_tput.window_s},
                     {"total", (single_cpu.first + single_cpu.second) / single_tput.window_s}}},
                   {"single_cpu_us_per_transition",
                    {{"clusterd", single_acked > 0 ? 1e6 * single_cpu.first / single_acked : NAN},
                     {"all", single_acked > 0 ? 1e6 * (single_cpu.first + single_cpu.second) / single_acked : NAN}}}};
  if (!ha_tput.ok || !ha_lat.ok || !single_tput.ok || !single_lat.ok) {
    return "scenario 11: an ingest run failed: " + ha_tput.error + ha_lat.error + single_tput.error + single_lat.error;
  }

  // Takeover with n agents attached through every replica's address.
  const int n = o.ha_nodes;
  std::string all = "ipv4:";
  for (size_t i = 0; i < replicas.size(); ++i) all += (i ? "," : "") + replicas[i]->target();
  std::cerr << "[bench] scenario 11: " << n << " agents attached, kill -9 of the leader\n";
  AgentPool pool(all, NodeNames("bench-ha-", n), std::max(1, std::min(o.agent_channels, 32)), /*reconnect=*/true);
  if (auto err = pool.Connect(120); !err.empty()) return "scenario 11: agents: " + err;
  const int64_t kill = NowNs();
  const double kill_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  replicas[lead]->Kill9();
  const int old = lead;
  int64_t first_write = 0;
  int probe = 0;
  while (first_write == 0 && NowNs() - kill < static_cast<int64_t>(60e9)) {
    for (size_t i = 0; i < replicas.size() && first_write == 0; ++i) {
      if (static_cast<int>(i) == old) continue;
      if (ReportOnce(replicas[i]->target(), "bench-ha-0", "probe-" + std::to_string(probe++))) first_write = NowNs();
    }
  }
  lead = leader();
  const double elected_s = lead >= 0 ? replicas[lead]->Metric("clusterd_ha_elected_time_seconds") - kill_unix : NAN;
  const double serving_s = lead >= 0 ? replicas[lead]->Metric("clusterd_ha_serving_time_seconds") - kill_unix : NAN;
  const size_t attached = pool.WaitAttached(static_cast<size_t>(n), kill + static_cast<int64_t>(60e9));
  const int64_t all_attached = NowNs();
  const double write_s = first_write ? static_cast<double>(first_write - kill) / 1e9 : NAN;
  const double reattach_s = attached == static_cast<size_t>(n) ? static_cast<double>(all_attached - kill) / 1e9 : NAN;
  pool.Close(10);
  for (auto& r : replicas) r->Stop();
  etcd.Stop();

  const double ratio = ha_tput.acked_per_s / single_tput.acked_per_s;
  s11 = {{"single_node_ingest", DriveJson(single_tput)},
         {"single_node_paced", DriveJson(single_lat)},
         {"ha_ingest", DriveJson(ha_tput)},
         {"ha_paced", DriveJson(ha_lat)},
         {"ha_log_appends", appends},
         {"ha_closed_loop_log", log_json},
         {"closed_loop_cpu", cpu_json},
         {"ratio_ingest_vs_single", ratio},
         {"takeover_nodes", n},
         {"kill_to_elected_s", elected_s},
         {"kill_to_serving_s", serving_s},
         {"kill_to_first_acked_write_s", write_s},
         {"kill_to_all_reattached_s", reattach_s},
         {"reattached", attached},
         {"targets",
          {{"ratio_min", 0.8},
           {"first_write_max_s", 5},
           {"reattach_max_s", 15},
           {"met_ratio", ratio >= 0.8},
           {"met_first_write", write_s <= 5},
           {"met_reattach", reattach_s <= 15}}}};
  const std::string sc = "11 HA (3 etcd, 3 replicas)";
  rows->push_back({sc, "durable ingest, closed loop", Fmt(ha_tput.acked_per_s, "/s"),
                   Fmt(single_tput.acked_per_s, "/s single"), Fmt(ratio, "x"), ">= 0.8x", Met(ratio >= 0.8)});
  {
    const double ha_us = ha_acked > 0 ? 1e6 * ha_total / ha_acked : NAN;
    const double single_us = single_acked > 0 ? 1e6 * (single_cpu.first + single_cpu.second) / single_acked : NAN;
    rows->push_back(
        {sc,
         "closed loop: cores leader / standbys / etcd / bench (" + Fmt(ha_total / ha_tput.window_s, "") + " in all)",
         Fmt(cores(0), "") + " / " + Fmt(cores(1), "") + " / " + Fmt(cores(2), "") + " / " + Fmt(cores(3), ""), "", "",
         "", ""});
    rows->push_back({sc, "closed loop: CPU per transition, every process", Fmt(ha_us, " us"),
                     Fmt(single_us, " us single"), Fmt(ha_us / single_us, "x"), "", ""});
  }
  rows->push_back({sc, "ack p50 / p99 at " + Fmt(o.rate, "/s"),
                   Fmt(ha_lat.p50_ms, " ms") + " / " + Fmt(ha_lat.p99_ms, " ms"),
                   Fmt(single_lat.p50_ms, " ms") + " / " + Fmt(single_lat.p99_ms, " ms") + " single", "", "", ""});
  rows->push_back({sc, "kill -9 of the leader -> elected / serving",
                   Fmt(elected_s, " s") + " / " + Fmt(serving_s, " s"), "", "", "", ""});
  rows->push_back({sc, "kill -9 of the leader -> first acknowledged write", Fmt(write_s, " s"), "", "", "<= 5 s",
                   Met(write_s <= 5)});
  rows->push_back({sc, "kill -9 -> all " + std::to_string(n) + " agents reattached", Fmt(reattach_s, " s"), "", "",
                   "<= 15 s", Met(reattach_s <= 15)});
  if (lead < 0) std::cerr << "[bench] scenario 11: no leader at the end\n";
  return "";
}

}  // namespace clusterd::bench
