// Shared pieces of clusterd-bench: options, time, temp dirs, percentiles,
// child processes (clusterd, noded), /metrics scraping and the result table.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/free_port.h"

namespace clusterd::bench {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// Steady-clock nanoseconds.
int64_t NowNs();
void SleepUntilNs(int64_t t);

struct Options {
  double duration_s = 10;
  int streams = 16;
  double rate = 10000;
  std::string clusterd;  // default: next to this binary
  std::string noded;     // default: next to this binary
  std::string ghz;       // default: ghz on PATH, else $HOME/go/bin/ghz
  // Scenario 10's peers: etcd and kube-apiserver (default: on PATH; also
  // scenario 13's API server, etcd scenario 11's) and the client-go driver
  // (default: clusterd-kube-peer next to this binary).
  std::string etcd, kube_apiserver, kube_peer;
  std::string json_path = "bench-results.json";
  std::string tmp_root;
  bool short_mode = false;
  std::set<int> only;  // scenarios to run; empty: all
  // Scenario 5.
  int decision_samples = 100;
  int storm_nodes = 1000;
  // Scenario 6.
  int watchers = 1000;
  double fanout_rate = 1000;
  // Scenario 8.
  double footprint_s = 10;
  // Scenario 9.
  int query_nodes = 10000;
  double query_s = 5;
  // Scenarios 3 and 4.
  int agents = 10000;
  int devices = 8;  // per simulated node (scenarios 3, 4 and 7)
  int agent_channels = 32;
  double steady_s = 20;
  double scale_warmup_s = 5;
  int detect_samples = 100;
  int lost_samples = 20;
  // Scenario 7.
  int restart_nodes = 10000;
  int64_t restart_events = 1000000;
  double restart_grace_s = 10;
  // Scenario 11.
  int ha_nodes = 10000;
  // Scenario 12.
  int job_reports = 2048;
  // Scenario 13.
  int stack_nodes = 16000;
  int stack_samples = 50;
  int stack_churn_nodes = 1000;
  double stack_churn_s = 30;
  int stack_chunk_kib = 0;  // clusterd's mindcluster_cluster_info_chunk_bytes / 1024; 0: its default
  // Scenario 14.
  int taskd_samples = 50;
  // Scenario 15.
  int doctor_nodes = 16000;
  // Scenario 17 (return to service): nodes of 16 chips, chips validated at
  // once, one validation's duration.
  int validation_nodes = 16000;
  int validation_chips = 1000;
  int validation_ms = 2000;
  // Scenario 16.
  int progress_jobs = 1000;
  int progress_ranks = 1000;
  double progress_interval_s = 10;
  // Scenario 19.
  int pingmesh_nodes = 16000;
  // Scenario 18.
  int incident_nodes = 16000;
  int incident_faults = 1000;
  // Scenario 20 (one leader at fleet scale): the points (nodes of --devices
  // each), their heartbeat interval (clusterd's --heartbeat-interval; the
  // node grace is 3x it) and the GetSummary / ListNodes calls timed per point.
  // 20 s: at 100,000 nodes 10 s heartbeats (10,000/s) on top of the Hello
  // storm after the restart exceed 2 vCPUs shared with the agents
  // (docs/performance.md, scenario 20).
  std::vector<int> fleet_nodes = {50000, 100000};
  double fleet_heartbeat_s = 20;
  int fleet_queries = 200;
  bool fleet_sink = true;  // the raw gRPC sink with the same agents first
  // Appended to every clusterd's command line (an A/B of a setting).
  std::vector<std::string> clusterd_args;
  int fleet_ha_nodes = 100000;  // the point with HA on (3 etcd, 3 replicas); 0: none

  bool Runs(int scenario) const { return only.empty() || only.count(scenario) > 0; }
};

Options ParseArgs(int argc, char** argv);

class TempDir {
 public:
  explicit TempDir(const std::string& root);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// p-quantile of nanosecond samples, in milliseconds (sorts v). NAN if empty.
double Percentile(std::vector<int64_t>& v, double p);
// samples (ns), p50/p90/p99/max in ms.
json LatencyJson(std::vector<int64_t> v);

// Latency histogram with ~1% relative resolution from 1 us to ~100 s, for
// counts too large to keep every sample (one per watcher, merged at the end).
class LatencyHist {
 public:
  void Add(int64_t ns);
  void Merge(const LatencyHist& other);
  uint64_t count() const { return count_; }
  double max_ms() const { return static_cast<double>(max_ns_) / 1e6; }
  // Upper edge of the bucket holding the p-quantile, in ms. NAN if empty.
  double PercentileMs(double p) const;

 private:
  static constexpr int kBuckets = 1900;
  std::array<uint32_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  int64_t max_ns_ = 0;
};

// GET http://127.0.0.1:port/path; the body, or "" on any failure.
std::string HttpGet(int port, const std::string& path);

// utime+stime in seconds and VmRSS in KiB of a process; NAN if unreadable.
double ProcessCpuSeconds(pid_t pid);
double ProcessRssKiB(pid_t pid);

// A child process, SIGTERM then SIGKILL on Stop.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess() { Stop(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // log_path: stdout and stderr go there ("" inherits ours). "" or why not.
  std::string Spawn(const std::vector<std::string>& args, const std::string& log_path = "");
  bool Exited();  // reaps it if it did
  void Stop();
  void Kill9();  // SIGKILL and reap
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

class ClusterdProcess {
 public:
  // Arguments every clusterd of this run gets after its own (--clusterd-arg).
  static void SetCommonArgs(std::vector<std::string> args);
  ClusterdProcess(std::string bin, std::string data_dir, std::vector<std::string> extra_args = {})
      : bin_(std::move(bin)), data_dir_(std::move(data_dir)), extra_(std::move(extra_args)) {}
  // Returns an empty string on success, else why it failed.
  std::string Start();
  // Spawns it on fresh ports and returns at once (an HA standby never
  // accepts gRPC connections).
  std::string Launch();
  void Stop() { proc_.Stop(); }
  // kill -9 (no shutdown at all), and a restart on the same data dir and
  // ports that returns right after the exec (started_ns: just before it).
  void Kill9() { proc_.Kill9(); }
  std::string Respawn();
  int64_t started_ns() const { return started_ns_; }
  bool Exited() { return proc_.Exited(); }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  int http_port() const { return http_port_; }
  pid_t pid() const { return proc_.pid(); }
  double CpuSeconds() const { return ProcessCpuSeconds(proc_.pid()); }
  std::string MetricsText() const { return HttpGet(http_port_, "/metrics"); }
  // An unlabelled series from /metrics; NAN if unavailable.
  double Metric(const std::string& name) const;

 private:
  std::string bin_, data_dir_;
  std::vector<std::string> extra_;
  std::string SpawnOnPorts();
  ChildProcess proc_;
  int port_ = 0, http_port_ = 0;
  int64_t started_ns_ = 0;
};

// A Prometheus histogram scraped from /metrics text (cumulative buckets).
struct PromHistogram {
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative count), +Inf last
  double sum = 0, count = 0;
  bool found = false;
  static PromHistogram Parse(const std::string& text, const std::string& name);
  // Observations between `before` and this scrape.
  PromHistogram Minus(const PromHistogram& before) const;
  // Upper bound (le) of the bucket holding the p-quantile, in ms; NAN if empty.
  double QuantileUpperMs(double p) const;
  double MeanMs() const { return count > 0 ? sum / count * 1e3 : NAN; }
};

// ---------------------------------------------------------------- report

std::string CpuModel();
std::string Fmt(double v, const char* unit = "");

struct Row {
  std::string scenario, figure, value, baseline, ratio, target, met;
};

void PrintTable(const std::vector<Row>& rows);
inline const char* Met(bool ok) { return ok ? "yes" : "NO"; }

}  // namespace clusterd::bench
