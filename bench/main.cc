// clusterd-bench: the benchmark issue's scenarios against real clusterd (and
// noded) processes, next to baselines measured in the same run: a raw gRPC
// sink (no storage), RocksDB synced group commits, the single-writer
// fdatasync rate and a raw unary call. Scenarios 1 (durable ingest) and 2
// (ack latency at a fixed offered rate) are here; 5, 6, 8, 9 and 12 are in
// scenarios.cc, 3, 4, 7 and 20 in scale.cc, 10 (etcd and the Kubernetes API
// server as peers) in peers.cc, 11 in ha.cc, 13 (the MindCluster stack's
// ConfigMaps) in stack.cc. Figures are printed and written as
// JSON, never asserted.
// See docs/performance.md.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "agents.h"
#include "common.h"
#include "ha.h"
#include "peers.h"
#include "scale.h"
#include "scenarios.h"
#include "sink.h"
#include "stack.h"
#include "doctor.h"
#include "incidents.h"
#include "pingmesh.h"
#include "progress.h"
#include "validation.h"
#include "taskd.h"

namespace clusterd::bench {
namespace {

// ---------------------------------------------------------------- storage baselines

struct FsyncResult {
  double ops_per_s = 0, p50_ms = NAN, p99_ms = NAN;
  uint64_t ops = 0;
};

FsyncResult MeasureFdatasync(const std::string& path, double duration_s) {
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  char buf[200];
  std::memset(buf, 'x', sizeof(buf));
  std::vector<int64_t> lat;
  const int64_t start = NowNs(), end = start + static_cast<int64_t>(duration_s * 1e9);
  int64_t now = start;
  while (now < end) {
    const int64_t t = now;
    if (::write(fd, buf, sizeof(buf)) != static_cast<ssize_t>(sizeof(buf)) || ::fdatasync(fd) != 0) {
      ::close(fd);
      throw std::runtime_error(std::string("write/fdatasync: ") + std::strerror(errno));
    }
    now = NowNs();
    lat.push_back(now - t);
  }
  ::close(fd);
  FsyncResult r;
  r.ops = lat.size();
  r.ops_per_s = static_cast<double>(lat.size()) / (static_cast<double>(now - start) / 1e9);
  r.p50_ms = Percentile(lat, 0.5);
  r.p99_ms = Percentile(lat, 0.99);
  return r;
}

struct RocksResult {
  double records_per_s = 0, commits_per_s = 0, commit_p50_ms = NAN, commit_p99_ms = NAN;
  int batch = 0;
  size_t record_bytes = 0;
};

RocksResult MeasureRocksDb(const std::string& dir, double duration_s, int batch, size_t record_bytes) {
  rocksdb::Options opts;
  opts.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  auto st = rocksdb::DB::Open(opts, dir, &raw);
  if (!st.ok()) throw std::runtime_error("rocksdb open: " + st.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  const std::string value(record_bytes, 'v');
  std::vector<int64_t> lat;
  uint64_t key = 0;
  char kbuf[32];
  const int64_t start = NowNs(), end = start + static_cast<int64_t>(duration_s * 1e9);
  int64_t now = start;
  while (now < end) {
    rocksdb::WriteBatch wb;
    for (int i = 0; i < batch; ++i) {
      std::snprintf(kbuf, sizeof(kbuf), "h/%016llx", static_cast<unsigned long long>(++key));
      wb.Put(kbuf, value);
    }
    const int64_t t = NowNs();
    st = db->Write(wo, &wb);
    if (!st.ok()) throw std::runtime_error("rocksdb write: " + st.ToString());
    now = NowNs();
    lat.push_back(now - t);
  }
  RocksResult r;
  const double secs = static_cast<double>(now - start) / 1e9;
  r.commits_per_s = static_cast<double>(lat.size()) / secs;
  r.records_per_s = r.commits_per_s * batch;
  r.commit_p50_ms = Percentile(lat, 0.5);
  r.commit_p99_ms = Percentile(lat, 0.99);
  r.batch = batch;
  r.record_bytes = record_bytes;
  return r;
}

// Baselines and scenarios 1 and 2. "" or a real error.
std::string RunIngest(const Options& o, const TempDir& tmp, json& out, std::vector<Row>& rows) {
  const size_t record_bytes = RecordSize();
  const double storage_s = std::min(o.duration_s, o.short_mode ? 1.0 : 3.0);
  std::cerr << "[bench] fdatasync baseline (" << storage_s << " s)\n";
  auto fsync = MeasureFdatasync(tmp.Sub("fsync.dat"), storage_s);
  out["baselines"]["fdatasync"] = {{"ops_per_s", fsync.ops_per_s},
                                   {"p50_ms", fsync.p50_ms},
                                   {"p99_ms", fsync.p99_ms},
                                   {"ops", fsync.ops},
                                   {"write_bytes", 200}};

  std::cerr << "[bench] rocksdb synced WriteBatch baseline (" << storage_s << " s)\n";
  auto rocks = MeasureRocksDb(tmp.Sub("rocks"), storage_s, 64, record_bytes);
  out["baselines"]["rocksdb_group_commit"] = {
      {"records_per_s", rocks.records_per_s}, {"commits_per_s", rocks.commits_per_s},
      {"commit_p50_ms", rocks.commit_p50_ms}, {"commit_p99_ms", rocks.commit_p99_ms},
      {"records_per_batch", rocks.batch},     {"record_bytes", rocks.record_bytes}};

  DriveResult sink_tput, sink_lat;
  {
    SinkServer sink;
    const std::string target = "127.0.0.1:" + std::to_string(sink.port());
    std::cerr << "[bench] raw gRPC sink: throughput (" << o.streams << " streams, " << o.duration_s << " s)\n";
    sink_tput = DriveAgents(target, "sink", o.streams, o.duration_s, 0);
    std::cerr << "[bench] raw gRPC sink: latency at " << o.rate << "/s\n";
    sink_lat = DriveAgents(target, "sink", o.streams, o.duration_s, o.rate);
  }
  out["baselines"]["grpc_sink_streaming"] = DriveJson(sink_tput);
  out["baselines"]["grpc_sink_paced"] = DriveJson(sink_lat);
  if (!sink_tput.ok || !sink_lat.ok) return "raw gRPC sink run failed: " + sink_tput.error + sink_lat.error;

  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-data"));
  std::cerr << "[bench] starting " << o.clusterd << "\n";
  if (auto err = cd.Start(); !err.empty()) return err;
  auto phase = [&](double rate, const char* name) {
    const double commits0 = cd.Metric("clusterd_store_commits_total");
    const double cpu0 = cd.CpuSeconds();
    const int64_t t0 = NowNs();
    auto r = DriveAgents(cd.target(), name, o.streams, o.duration_s, rate);
    const double wall = static_cast<double>(NowNs() - t0) / 1e9;
    const double cpu = cd.CpuSeconds() - cpu0;
    const double commits = cd.Metric("clusterd_store_commits_total") - commits0;
    json j = DriveJson(r);
    j["clusterd_cpu_cores"] = cpu / wall;  // whole phase incl. warm-up and drain
    j["group_commits"] = commits;
    j["transitions_per_commit"] = commits > 0 ? static_cast<double>(r.acked_total) / commits : NAN;
    return std::make_pair(r, j);
  };
  std::cerr << "[bench] scenario 1: durable ingest (" << o.streams << " streams, " << o.duration_s << " s)\n";
  auto [s1, s1j] = phase(0, "tput");
  std::cerr << "[bench] scenario 2: ack latency at " << o.rate << "/s\n";
  auto [s2, s2j] = phase(o.rate, "lat");
  cd.Stop();
  if (!s1.ok || !s2.ok) return "clusterd run failed: " + s1.error + " " + s2.error;

  const double r_grpc = s1.acked_per_s / sink_tput.acked_per_s;
  const double r_fsync = s1.acked_per_s / fsync.ops_per_s;
  // Issue 17's target: p99 within 3x what the raw sink and one fdatasync
  // take at the same rate in the same run (the old absolute "fsync p99 +
  // 2 ms" was below the sink's own p99 on this machine).
  const double p99_target = 3 * (sink_lat.p99_ms + fsync.p99_ms);
  out["scenario1_durable_ingest"] = s1j;
  out["scenario1_durable_ingest"]["ratio_vs_grpc_sink"] = r_grpc;
  out["scenario1_durable_ingest"]["ratio_vs_fdatasync"] = r_fsync;
  out["scenario1_durable_ingest"]["ratio_vs_rocksdb_group_commit"] = s1.acked_per_s / rocks.records_per_s;
  out["scenario1_durable_ingest"]["targets"] = {{"ratio_vs_grpc_sink_min", 0.5},
                                                {"ratio_vs_fdatasync_min", 20},
                                                {"met_grpc", r_grpc >= 0.5},
                                                {"met_fdatasync", r_fsync >= 20}};
  out["scenario2_ack_latency"] = s2j;
  out["scenario2_ack_latency"]["offered_rate"] = o.rate;
  out["scenario2_ack_latency"]["targets"] = {{"p50_max_ms", 1.0},
                                             {"p99_max_ms", p99_target},
                                             {"met_p50", s2.p50_ms <= 1.0},
                                             {"met_p99", s2.p99_ms <= p99_target}};

  rows.push_back({"baseline", "fdatasync 200 B, 1 writer", Fmt(fsync.ops_per_s, " ops/s"), "", "", "", ""});
  rows.push_back({"baseline", "fdatasync latency p50 / p99",
                  Fmt(fsync.p50_ms, " ms") + " / " + Fmt(fsync.p99_ms, " ms"), "", "", "", ""});
  rows.push_back({"baseline",
                  "RocksDB synced batch x" + std::to_string(rocks.batch) + " (" + std::to_string(record_bytes) + " B)",
                  Fmt(rocks.records_per_s, " rec/s"), "", "", "", ""});
  rows.push_back({"baseline", "raw gRPC sink, streaming acks", Fmt(sink_tput.acked_per_s, " msg/s"), "", "", "", ""});
  rows.push_back({"baseline", "raw gRPC sink ack p50 / p99 @" + Fmt(o.rate, "/s"),
                  Fmt(sink_lat.p50_ms, " ms") + " / " + Fmt(sink_lat.p99_ms, " ms"), "", "", "", ""});
  rows.push_back({"1 ingest", "durable acks/s vs raw gRPC", Fmt(s1.acked_per_s, "/s"), Fmt(sink_tput.acked_per_s, "/s"),
                  Fmt(r_grpc, "x"), ">= 0.5x", Met(r_grpc >= 0.5)});
  rows.push_back({"1 ingest", "durable acks/s vs fdatasync", Fmt(s1.acked_per_s, "/s"), Fmt(fsync.ops_per_s, "/s"),
                  Fmt(r_fsync, "x"), ">= 20x", Met(r_fsync >= 20)});
  rows.push_back(
      {"1 ingest", "transitions per group commit", Fmt(s1j["transitions_per_commit"].get<double>()), "", "", "", ""});
  rows.push_back({"2 latency", "ack p50 @" + Fmt(s2.sent_per_s, "/s") + " sent", Fmt(s2.p50_ms, " ms"), "", "",
                  "<= 1 ms", Met(s2.p50_ms <= 1.0)});
  rows.push_back({"2 latency", "ack p99", Fmt(s2.p99_ms, " ms"),
                  Fmt(sink_lat.p99_ms, " ms") + " sink + " + Fmt(fsync.p99_ms, " ms") + " fsync",
                  Fmt(s2.p99_ms / (sink_lat.p99_ms + fsync.p99_ms), "x"), "<= 3x (sink + fsync p99)",
                  Met(s2.p99_ms <= p99_target)});
  rows.push_back(
      {"2 latency", "acks/s (offered " + Fmt(o.rate, "/s") + ")", Fmt(s2.acked_per_s, "/s"), "", "", "", ""});
  return "";
}

// Scenarios 5, 6 and 8 share one clusterd with no recovery gate.
std::string RunRecoveryAndWatch(const Options& o, const TempDir& tmp, json& out, std::vector<Row>& rows) {
  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-recovery"), RecoveryClusterdArgs());
  std::cerr << "[bench] starting " << o.clusterd << " (recovery gates off)\n";
  if (auto err = cd.Start(); !err.empty()) return err;
  if (o.Runs(5)) {
    if (auto err = RunDecisions(o, cd, &out, &rows); !err.empty()) return err;
  }
  if (o.Runs(6)) {
    if (auto err = RunFanout(o, cd, &out, &rows); !err.empty()) return err;
  }
  if (o.Runs(8)) {
    if (auto err = RunNodedFootprint(o, tmp, cd, &out, &rows); !err.empty()) return err;
  }
  return "";
}

int Run(const Options& o) {
  TempDir tmp(o.tmp_root);
  const int64_t t0 = NowNs();
  json out;
  out["machine"] = {{"nproc", std::thread::hardware_concurrency()}, {"cpu_model", CpuModel()}, {"tmpdir", o.tmp_root}};
  json only = json::array();
  for (int s : o.only) only.push_back(s);
  out["options"] = {{"duration_s", o.duration_s},
                    {"streams", o.streams},
                    {"rate", o.rate},
                    {"short", o.short_mode},
                    {"clusterd", o.clusterd},
                    {"noded", o.noded},
                    {"ghz", o.ghz},
                    {"etcd", o.etcd},
                    {"kube_apiserver", o.kube_apiserver},
                    {"kube_peer", o.kube_peer},
                    {"only", only},
                    {"decision_samples", o.decision_samples},
                    {"storm_nodes", o.storm_nodes},
                    {"watchers", o.watchers},
                    {"fanout_rate", o.fanout_rate},
                    {"footprint_s", o.footprint_s},
                    {"query_nodes", o.query_nodes},
                    {"query_s", o.query_s},
                    {"agents", o.agents},
                    {"devices_per_node", o.devices},
                    {"agent_channels", o.agent_channels},
                    {"steady_s", o.steady_s},
                    {"detect_samples", o.detect_samples},
                    {"lost_samples", o.lost_samples},
                    {"restart_nodes", o.restart_nodes},
                    {"restart_events", o.restart_events},
                    {"ha_nodes", o.ha_nodes},
                    {"job_reports", o.job_reports},
                    {"stack_nodes", o.stack_nodes},
                    {"stack_samples", o.stack_samples},
                    {"stack_churn_nodes", o.stack_churn_nodes},
                    {"stack_churn_s", o.stack_churn_s},
                    {"stack_chunk_kib", o.stack_chunk_kib},
                    {"taskd_samples", o.taskd_samples},
                    {"doctor_nodes", o.doctor_nodes},
                    {"progress_jobs", o.progress_jobs},
                    {"progress_ranks", o.progress_ranks},
                    {"progress_interval_s", o.progress_interval_s},
                    {"pingmesh_nodes", o.pingmesh_nodes},
                    {"incident_nodes", o.incident_nodes},
                    {"incident_faults", o.incident_faults},
                    {"fleet_nodes", o.fleet_nodes},
                    {"fleet_heartbeat_s", o.fleet_heartbeat_s},
                    {"fleet_queries", o.fleet_queries},
                    {"fleet_sink", o.fleet_sink},
                    {"fleet_ha_nodes", o.fleet_ha_nodes},
                    {"clusterd_args", o.clusterd_args}};
  std::vector<Row> rows;
  // Each group of scenarios in turn. A group that fails is a row of the
  // table ("did not finish" and why) and the next group still runs, so one
  // failure does not cost a full run the scenarios after it; the run then
  // exits 1 with every error on stderr, and the JSON is written.
  struct Group {
    const char* name;
    bool runs;
    std::function<std::string()> run;
  };
  const std::vector<Group> groups = {
      {"1-2 ingest", o.Runs(1) || o.Runs(2), [&] { return RunIngest(o, tmp, out, rows); }},
      {"3-4 scale", o.Runs(3) || o.Runs(4), [&] { return RunScale(o, tmp, &out, &rows); }},
      {"5-8 recovery, watch", o.Runs(5) || o.Runs(6) || o.Runs(8),
       [&] { return RunRecoveryAndWatch(o, tmp, out, rows); }},
      {"7 restart", o.Runs(7), [&] { return RunRestart(o, tmp, &out, &rows); }},
      {"9 queries", o.Runs(9), [&] { return RunQueries(o, tmp, &out, &rows); }},
      {"10 peers", o.Runs(10), [&] { return RunPeers(o, tmp, &out, &rows); }},
      {"11 HA", o.Runs(11), [&] { return RunHa(o, tmp, &out, &rows); }},
      {"12 largest jobs", o.Runs(12), [&] { return RunLargestJobs(o, tmp, &out, &rows); }},
      {"13 stack", o.Runs(13), [&] { return RunStack(o, tmp, &out, &rows); }},
      {"14 taskd", o.Runs(14), [&] { return RunTaskd(o, tmp, &out, &rows); }},
      {"15 doctor", o.Runs(15), [&] { return RunDoctor(o, tmp, &out, &rows); }},
      {"16 progress", o.Runs(16), [&] { return RunProgress(o, tmp, &out, &rows); }},
      {"17 return", o.Runs(17), [&] { return RunReturnToService(o, tmp, &out, &rows); }},
      {"18 incidents", o.Runs(18), [&] { return RunIncidents(o, tmp, &out, &rows); }},
      {"19 pingmesh", o.Runs(19), [&] { return RunPingmesh(o, tmp, &out, &rows); }},
      {"20 fleet", o.Runs(20), [&] { return RunFleet(o, tmp, &out, &rows); }},
  };
  std::vector<std::string> errors;
  for (const auto& g : groups) {
    if (!g.runs) continue;
    if (std::string err = g.run(); !err.empty()) {
      std::cerr << "[bench] error: " << err << "\n";
      rows.push_back({g.name, "did not finish", err, "", "", "", "NO"});
      out["errors"].push_back(err);
      errors.push_back(err);
    }
  }
  out["wall_s"] = static_cast<double>(NowNs() - t0) / 1e9;

  std::cout << "clusterd-bench" << (o.short_mode ? " --short" : "") << ": " << std::thread::hardware_concurrency()
            << " CPUs (" << CpuModel() << "), " << o.streams << " streams, " << o.duration_s << " s per phase, "
            << Fmt(out["wall_s"].get<double>(), " s") << " in all\n";
  PrintTable(rows);

  std::ofstream f(o.json_path);
  f << out.dump(2) << "\n";
  if (!f) {
    std::cerr << "[bench] error: could not write " << o.json_path << "\n";
    return 1;
  }
  std::cout << "results: " << o.json_path << "\n";
  for (const auto& e : errors) std::cerr << "[bench] error: " << e << "\n";
  return errors.empty() ? 0 : 1;
}

// clusterd-bench --agent-pool TARGET N PREFIX: N simulated agents (PREFIX0 ..
// PREFIX<N-1>, one stream each, heartbeats every second) attached to TARGET
// (an ipv4:a,b,c list: each stream retries on the next address, as NodeD
// does) until SIGTERM. Prints "attached N" once every agent is welcomed.
// The HA end-to-end test (test/e2e/ha_test.py) attaches hundreds of agents
// this way: one process, not hundreds of NodeDs.
int RunAgentPool(const std::string& target, int n, const std::string& prefix) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before gRPC starts its threads
  AgentPool pool(target, NodeNames(prefix, n), std::min(n, 8), /*reconnect=*/true);
  if (auto err = pool.Connect(120); !err.empty()) {
    std::cerr << "agent pool: " << err << "\n";
    return 1;
  }
  pool.StartHeartbeats(1.0);
  std::cout << "attached " << pool.attached() << std::endl;
  int sig = 0;
  sigwait(&set, &sig);
  pool.StopHeartbeats();
  return 0;
}

}  // namespace
}  // namespace clusterd::bench

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc == 3 && std::string(argv[1]) == "--sink-server") return clusterd::bench::RunSinkServer(std::atoi(argv[2]));
  if (argc == 5 && std::string(argv[1]) == "--agent-pool") {
    return clusterd::bench::RunAgentPool(argv[2], std::atoi(argv[3]), argv[4]);
  }
  auto opts = clusterd::bench::ParseArgs(argc, argv);
  clusterd::bench::ClusterdProcess::SetCommonArgs(opts.clusterd_args);
  clusterd::bench::SetDevicesPerNode(opts.devices);
  try {
    return clusterd::bench::Run(opts);
  } catch (const std::exception& e) {
    std::cerr << "[bench] error: " << e.what() << "\n";
    return 1;
  }
}
