#include "common.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <grpcpp/grpcpp.h>

extern char** environ;

namespace clusterd::bench {

namespace fs = std::filesystem;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

void SleepUntilNs(int64_t t) { std::this_thread::sleep_until(Clock::time_point(std::chrono::nanoseconds(t))); }

// ---------------------------------------------------------------- options

namespace {

[[noreturn]] void Usage(int code) {
  std::fprintf(
      code ? stderr : stdout,
      "usage: clusterd-bench [--short] [--only LIST] [--duration SECONDS] [--streams N] [--rate EVENTS_PER_S]\n"
      "                      [--decision-samples N] [--storm-nodes N] [--watchers N] [--fanout-rate R]\n"
      "                      [--footprint SECONDS] [--query-nodes N] [--query-duration SECONDS]\n"
      "                      [--agents N] [--agent-channels N] [--steady SECONDS] [--detect-samples N]\n"
      "                      [--lost-samples N] [--restart-nodes N] [--restart-events N] [--devices N]\n"
      "                      [--ha-nodes N] [--job-reports N] [--stack-nodes N] [--stack-samples N]\n"
      "                      [--stack-churn-nodes N] [--stack-churn SECONDS] [--stack-chunk-kib N]\n"
      "                      [--taskd-samples N]\n"
      "                      [--clusterd PATH] [--noded PATH] [--ghz PATH] [--etcd PATH]\n"
      "                      [--kube-apiserver PATH] [--kube-peer PATH] [--json PATH] [--tmpdir DIR]\n"
      "  --short             a short run with tiny sizes (what scripts/test.sh runs)\n"
      "  --only              scenarios to run, e.g. 1,2,5 (default: all of 1-20)\n"
      "  --duration          seconds per measured phase of scenarios 1, 2 and 6 (default 10)\n"
      "  --streams           concurrent agent streams of scenarios 1 and 2 (default 16)\n"
      "  --rate              offered rate of scenario 2, events/s across streams (default 10000)\n"
      "  --decision-samples  scenario 5: single faults timed one at a time (default 100)\n"
      "  --storm-nodes       scenario 5: nodes x 8 devices faulting within one second (default 1000)\n"
      "  --watchers          scenario 6: Watch streams (default 1000)\n"
      "  --fanout-rate       scenario 6: events/s produced (default 1000)\n"
      "  --footprint         scenario 8: seconds NodeD is sampled (default 10)\n"
      "  --query-nodes       scenario 9: nodes stored (default 10000)\n"
      "  --query-duration    scenario 9: seconds per ghz run (default 5)\n"
      "  --agents            scenarios 3/4: simulated agents, one stream each (default 10000)\n"
      "  --agent-channels    scenarios 3/4/7: HTTP/2 connections the agent streams share (default 32)\n"
      "  --steady            scenario 3: seconds of steady state measured (default 20)\n"
      "  --detect-samples    scenario 4: faults timed to their Watch event (default 100)\n"
      "  --lost-samples      scenario 4: agents stopped and timed to HEARTBEAT_LOST (default 20)\n"
      "  --restart-nodes     scenario 7: nodes (x --devices) stored and reattaching (default 10000)\n"
      "  --devices           scenarios 3/4/7: devices per simulated node (default 8; 16 for\n"
      "                      MindCluster's largest documented cluster)\n"
      "  --restart-events    scenario 7: history events stored before the kill -9 (default 1000000)\n"
      "  --ha-nodes          scenario 11: agents attached when the HA leader is killed (default 10000)\n"
      "  --job-reports       scenario 12: node-level Reports timed per node (default 2048)\n"
      "  --stack-nodes       scenario 13: nodes x 16 Ascend910B3 chips known to clusterd (default 16000)\n"
      "  --stack-samples     scenario 13: chip faults timed to Volcano's ConfigMaps, per path (default 50)\n"
      "  --stack-churn-nodes scenario 13: device-plugin ConfigMaps rewritten once a second (default 1000)\n"
      "  --stack-churn       scenario 13: seconds of that churn measured (default 30)\n"
      "  --stack-chunk-kib   scenario 13: clusterd's cluster-info ConfigMap size at most, KiB (default: its own)\n"
      "  --taskd-samples     scenario 14: step retries through TaskD's Recover service timed (default 50)\n"
      "  --doctor-nodes      scenario 15: nodes reporting a software chain, a fifth drifted (default 16000)\n"
      "  --validation-nodes  scenario 17: nodes of 16 chips (default 16000)\n"
      "  --validation-chips  scenario 17: chips validated at once, one per node first (default 1000)\n"
      "  --validation-ms     scenario 17: one validation's duration, the agents' answer delay (default 2000)\n"
      "  --incident-nodes    scenario 18: nodes in SuperPoDs of 48 (default 16000, at least 144)\n"
      "  --incident-faults   scenario 18: chip faults of the cascade, in 1 s over 20 SuperPoDs (default 1000)\n"
      "  --progress-jobs     scenario 16: jobs reporting progress (default 1000)\n"
      "  --progress-ranks    scenario 16: ranks per job (default 1000, at most 4096)\n"
      "  --progress-interval scenario 16: seconds between a job's reports (default 10)\n"
      "  --pingmesh-nodes    scenario 19: simulated NodeDs in SuperPoDs of 48 (default 16000)\n"
      "  --fleet-nodes LIST  scenario 20: nodes (x --devices) on one leader, per point (default 50000,100000)\n"
      "  --fleet-heartbeat   scenario 20: the agents' and clusterd's heartbeat interval, seconds; the node\n"
      "                      grace is 3x it (default 20)\n"
      "  --fleet-queries     scenario 20: GetSummary calls and ListNodes pages timed per point (default 200)\n"
      "  --fleet-sink BOOL   scenario 20: the raw gRPC sink with the same agents first (default true)\n"
      "  --fleet-ha-nodes N  scenario 20: nodes of the point with HA on (3 etcd, 3 replicas; default 100000;\n"
      "                      0: none; skipped with a note without --etcd)\n"
      "  --clusterd-arg ARG  appended to every clusterd's command line (repeat it; e.g.\n"
      "                      --clusterd-arg=--watch-coalesce=20ms)\n"
      "  --clusterd, --noded binaries (default: next to this binary)\n"
      "  --ghz               ghz binary (default: on PATH, else $HOME/go/bin/ghz; scenario 9 is\n"
      "                      skipped with a note when there is none)\n"
      "  --etcd              etcd binary for scenarios 10, 11 and 13 (default: on PATH; skipped with a\n"
      "                      note when there is none; scripts/bench.sh passes scripts/k8s-tools.sh's)\n"
      "  --kube-apiserver    kube-apiserver binary for scenarios 10 and 13 (default: on PATH)\n"
      "  --kube-peer         scenario 10's client-go driver (default: clusterd-kube-peer next to\n"
      "                      this binary; scripts/kube-peer.sh builds it)\n"
      "  --json              results file (default bench-results.json)\n"
      "  --tmpdir            where data dirs and the fsync file go (default $TMPDIR or /tmp)\n"
      "clusterd-bench --agent-pool TARGET N PREFIX: N simulated agents (PREFIX0 ...) attached to TARGET,\n"
      "  heartbeating, until SIGTERM; prints \"attached N\" once all are (test/e2e/ha_test.py uses it)\n");
  std::exit(code);
}

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string p = dir + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

}  // namespace

Options ParseArgs(int argc, char** argv) {
  Options o;
  std::set<std::string> given;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v;
    auto eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    auto value = [&]() -> std::string {
      if (eq != std::string::npos) return v;
      if (i + 1 >= argc) Usage(2);
      return argv[++i];
    };
    given.insert(a);
    try {
      if (a == "--short")
        o.short_mode = true;
      else if (a == "--duration")
        o.duration_s = std::stod(value());
      else if (a == "--streams")
        o.streams = std::stoi(value());
      else if (a == "--rate")
        o.rate = std::stod(value());
      else if (a == "--job-reports")
        o.job_reports = std::stoi(value());
      else if (a == "--decision-samples")
        o.decision_samples = std::stoi(value());
      else if (a == "--storm-nodes")
        o.storm_nodes = std::stoi(value());
      else if (a == "--watchers")
        o.watchers = std::stoi(value());
      else if (a == "--fanout-rate")
        o.fanout_rate = std::stod(value());
      else if (a == "--footprint")
        o.footprint_s = std::stod(value());
      else if (a == "--query-nodes")
        o.query_nodes = std::stoi(value());
      else if (a == "--query-duration")
        o.query_s = std::stod(value());
      else if (a == "--agents")
        o.agents = std::stoi(value());
      else if (a == "--devices")
        o.devices = std::stoi(value());
      else if (a == "--agent-channels")
        o.agent_channels = std::stoi(value());
      else if (a == "--steady")
        o.steady_s = std::stod(value());
      else if (a == "--detect-samples")
        o.detect_samples = std::stoi(value());
      else if (a == "--lost-samples")
        o.lost_samples = std::stoi(value());
      else if (a == "--restart-nodes")
        o.restart_nodes = std::stoi(value());
      else if (a == "--ha-nodes")
        o.ha_nodes = std::stoi(value());
      else if (a == "--stack-nodes")
        o.stack_nodes = std::stoi(value());
      else if (a == "--stack-samples")
        o.stack_samples = std::stoi(value());
      else if (a == "--stack-churn-nodes")
        o.stack_churn_nodes = std::stoi(value());
      else if (a == "--stack-churn")
        o.stack_churn_s = std::stod(value());
      else if (a == "--stack-chunk-kib")
        o.stack_chunk_kib = std::stoi(value());
      else if (a == "--taskd-samples")
        o.taskd_samples = std::stoi(value());
      else if (a == "--doctor-nodes")
        o.doctor_nodes = std::stoi(value());
      else if (a == "--validation-nodes")
        o.validation_nodes = std::stoi(value());
      else if (a == "--validation-chips")
        o.validation_chips = std::stoi(value());
      else if (a == "--validation-ms")
        o.validation_ms = std::stoi(value());
      else if (a == "--incident-nodes")
        o.incident_nodes = std::stoi(value());
      else if (a == "--incident-faults")
        o.incident_faults = std::stoi(value());
      else if (a == "--progress-jobs")
        o.progress_jobs = std::stoi(value());
      else if (a == "--progress-ranks")
        o.progress_ranks = std::stoi(value());
      else if (a == "--progress-interval")
        o.progress_interval_s = std::stod(value());
      else if (a == "--pingmesh-nodes")
        o.pingmesh_nodes = std::stoi(value());
      else if (a == "--fleet-nodes") {
        o.fleet_nodes.clear();
        std::istringstream list(value());
        for (std::string n; std::getline(list, n, ',');) o.fleet_nodes.push_back(std::stoi(n));
      } else if (a == "--fleet-heartbeat")
        o.fleet_heartbeat_s = std::stod(value());
      else if (a == "--fleet-queries")
        o.fleet_queries = std::stoi(value());
      else if (a == "--fleet-ha-nodes")
        o.fleet_ha_nodes = std::stoi(value());
      else if (a == "--fleet-sink")
        o.fleet_sink = value() != "false";
      else if (a == "--clusterd-arg")
        o.clusterd_args.push_back(value());
      else if (a == "--restart-events")
        o.restart_events = std::stoll(value());
      else if (a == "--clusterd")
        o.clusterd = value();
      else if (a == "--noded")
        o.noded = value();
      else if (a == "--ghz")
        o.ghz = value();
      else if (a == "--etcd")
        o.etcd = value();
      else if (a == "--kube-apiserver")
        o.kube_apiserver = value();
      else if (a == "--kube-peer")
        o.kube_peer = value();
      else if (a == "--json")
        o.json_path = value();
      else if (a == "--tmpdir")
        o.tmp_root = value();
      else if (a == "--only") {
        std::istringstream list(value());
        for (std::string s; std::getline(list, s, ',');) {
          const int n = std::stoi(s);
          if (n < 1 || n > 20) Usage(2);
          o.only.insert(n);
        }
      } else if (a == "--help" || a == "-h")
        Usage(0);
      else
        Usage(2);
    } catch (const std::logic_error&) {
      Usage(2);
    }
  }
  if (o.short_mode) {
    auto dflt = [&](const char* flag, auto* field, auto v) {
      if (!given.count(flag)) *field = v;
    };
    dflt("--duration", &o.duration_s, 2.0);
    dflt("--streams", &o.streams, 4);
    dflt("--rate", &o.rate, 2000.0);
    dflt("--decision-samples", &o.decision_samples, 5);
    dflt("--storm-nodes", &o.storm_nodes, 50);
    dflt("--watchers", &o.watchers, 20);
    dflt("--fanout-rate", &o.fanout_rate, 200.0);
    dflt("--footprint", &o.footprint_s, 2.0);
    dflt("--query-nodes", &o.query_nodes, 200);
    dflt("--query-duration", &o.query_s, 0.5);
    dflt("--agents", &o.agents, 200);
    dflt("--agent-channels", &o.agent_channels, 4);
    dflt("--steady", &o.steady_s, 1.0);
    o.scale_warmup_s = 0.5;
    dflt("--detect-samples", &o.detect_samples, 10);
    dflt("--lost-samples", &o.lost_samples, 3);
    dflt("--restart-nodes", &o.restart_nodes, 200);
    dflt("--restart-events", &o.restart_events, int64_t{20000});
    dflt("--ha-nodes", &o.ha_nodes, 200);
    dflt("--job-reports", &o.job_reports, 200);
    dflt("--stack-nodes", &o.stack_nodes, 1000);
    dflt("--stack-samples", &o.stack_samples, 5);
    dflt("--stack-churn-nodes", &o.stack_churn_nodes, 100);
    dflt("--stack-churn", &o.stack_churn_s, 3.0);
    dflt("--taskd-samples", &o.taskd_samples, 10);
    dflt("--doctor-nodes", &o.doctor_nodes, 1000);
    dflt("--validation-nodes", &o.validation_nodes, 200);
    dflt("--validation-chips", &o.validation_chips, 200);
    dflt("--validation-ms", &o.validation_ms, 200);
    dflt("--incident-nodes", &o.incident_nodes, 960);
    dflt("--progress-jobs", &o.progress_jobs, 50);
    dflt("--progress-ranks", &o.progress_ranks, 200);
    dflt("--progress-interval", &o.progress_interval_s, 1.0);
    dflt("--pingmesh-nodes", &o.pingmesh_nodes, 960);
    if (!given.count("--fleet-nodes")) o.fleet_nodes = {2000};
    dflt("--fleet-heartbeat", &o.fleet_heartbeat_s, 1.0);
    dflt("--fleet-queries", &o.fleet_queries, 20);
    dflt("--fleet-ha-nodes", &o.fleet_ha_nodes, 1000);
    o.restart_grace_s = 1.5;
  }
  bool fleet_ok = !o.fleet_nodes.empty() && o.fleet_heartbeat_s >= 0.1 && o.fleet_queries > 0;
  for (int n : o.fleet_nodes) fleet_ok &= n >= 10;
  fleet_ok &= o.fleet_ha_nodes == 0 || o.fleet_ha_nodes >= 10;
  if (o.duration_s <= 0 || o.streams <= 0 || o.rate <= 0 || o.decision_samples <= 0 || o.storm_nodes <= 0 ||
      o.watchers <= 0 || o.fanout_rate <= 0 || o.footprint_s <= 0 || o.query_nodes <= 0 || o.query_s <= 0 ||
      o.agents <= 0 || o.agent_channels <= 0 || o.steady_s <= 0 || o.detect_samples <= 0 || o.lost_samples <= 0 ||
      o.restart_nodes <= 0 || o.ha_nodes <= 0 || o.job_reports <= 0 || o.job_reports > 4000 || o.restart_events < 0 ||
      o.devices <= 0 || o.devices > 64 || o.stack_nodes <= 0 || o.stack_samples <= 0 || o.stack_churn_nodes <= 0 ||
      o.stack_chunk_kib < 0 || o.stack_chunk_kib > 800 || o.stack_churn_s <= 0 || o.taskd_samples <= 0 ||
      o.doctor_nodes < 10 || o.progress_jobs < 2 || o.progress_ranks < 8 || o.progress_ranks > 4096 ||
      o.progress_interval_s <= 0 || o.pingmesh_nodes < 2 || o.validation_nodes < 1 || o.validation_chips < 1 ||
      o.validation_ms < 1 || o.incident_nodes < 3 * 48 || o.incident_faults < 3 * 20 || !fleet_ok) {
    Usage(2);
  }
  const fs::path self_dir = fs::read_symlink("/proc/self/exe").parent_path();
  if (o.clusterd.empty()) o.clusterd = (self_dir / "clusterd").string();
  if (o.noded.empty()) o.noded = (self_dir / "noded").string();
  if (o.ghz.empty()) {
    o.ghz = FindOnPath("ghz");
    const char* home = std::getenv("HOME");
    if (o.ghz.empty() && home && ::access((std::string(home) + "/go/bin/ghz").c_str(), X_OK) == 0) {
      o.ghz = std::string(home) + "/go/bin/ghz";
    }
  }
  if (o.etcd.empty()) o.etcd = FindOnPath("etcd");
  if (o.kube_apiserver.empty()) o.kube_apiserver = FindOnPath("kube-apiserver");
  if (o.kube_peer.empty()) o.kube_peer = (self_dir / "clusterd-kube-peer").string();
  if (o.tmp_root.empty()) {
    const char* t = std::getenv("TMPDIR");
    o.tmp_root = t && *t ? t : "/tmp";
  }
  return o;
}

// ---------------------------------------------------------------- small things

TempDir::TempDir(const std::string& root) {
  std::string tmpl = root + "/clusterd-bench.XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp under " + root + ": " + std::strerror(errno));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

double Percentile(std::vector<int64_t>& v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(std::llround(p * static_cast<double>(v.size() - 1)));
  return static_cast<double>(v[idx]) / 1e6;  // ms
}

json LatencyJson(std::vector<int64_t> v) {
  json j = {{"samples", v.size()}};
  if (v.empty()) return j;
  j["p50_ms"] = Percentile(v, 0.5);
  j["p90_ms"] = Percentile(v, 0.9);
  j["p99_ms"] = Percentile(v, 0.99);
  j["max_ms"] = static_cast<double>(v.back()) / 1e6;
  return j;
}

namespace {
constexpr double kHistBase = 1.01;
int HistIndex(int64_t ns) {
  const double us = static_cast<double>(ns) / 1e3;
  if (us <= 1) return 0;
  return std::min(1899, 1 + static_cast<int>(std::log(us) / std::log(kHistBase)));
}
}  // namespace

void LatencyHist::Add(int64_t ns) {
  ++buckets_[HistIndex(ns)];
  ++count_;
  max_ns_ = std::max(max_ns_, ns);
}

void LatencyHist::Merge(const LatencyHist& other) {
  for (int i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  max_ns_ = std::max(max_ns_, other.max_ns_);
}

double LatencyHist::PercentileMs(double p) const {
  if (count_ == 0) return NAN;
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(p * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      const double upper_us = i == 0 ? 1.0 : std::pow(kHistBase, i);
      return std::min(upper_us / 1e3, max_ms());
    }
  }
  return max_ms();
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::write(fd, req.data(), req.size()) < 0) {
    close(fd);
    return "";
  }
  std::string resp;
  char buf[8192];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  const auto body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  auto rp = line.rfind(')');
  if (rp == std::string::npos) return NAN;
  std::istringstream rest(line.substr(rp + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int idx = 3; rest >> field; ++idx) {  // field 3 is state
    if (idx == 14) utime = std::stod(field);
    if (idx == 15) {
      stime = std::stod(field);
      break;
    }
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double ProcessRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6));
  }
  return NAN;
}

// ---------------------------------------------------------------- processes

std::string ChildProcess::Spawn(const std::vector<std::string>& args, const std::string& log_path) {
  if (args.empty() || ::access(args[0].c_str(), X_OK) != 0) return (args.empty() ? "" : args[0]) + " is not executable";
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    pid_ = -1;
    return "posix_spawn " + args[0] + ": " + std::strerror(rc);
  }
  return "";
}

bool ChildProcess::Exited() {
  if (pid_ <= 0) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return true;
  }
  return false;
}

void ChildProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void ChildProcess::Kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string ClusterdProcess::Respawn() { return SpawnOnPorts(); }

namespace {
std::vector<std::string>& CommonArgs() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace

void ClusterdProcess::SetCommonArgs(std::vector<std::string> args) { CommonArgs() = std::move(args); }

std::string ClusterdProcess::SpawnOnPorts() {
  std::vector<std::string> args = {
      bin_, "--listen=127.0.0.1:" + std::to_string(port_), "--http-listen=127.0.0.1:" + std::to_string(http_port_),
      "--data-dir=" + data_dir_, "--log-level=warn", "--node-grace=1h", "--insecure",
      // Every simulated agent and watcher connects from
      // 127.0.0.1: one peer as far as the per-peer limits go.
      "--max-streams-per-peer=1000000", "--max-watch-streams-per-peer=1000000", "--max-watch-streams=1000000"};
  args.insert(args.end(), extra_.begin(), extra_.end());
  args.insert(args.end(), CommonArgs().begin(), CommonArgs().end());
  started_ns_ = NowNs();
  return proc_.Spawn(args);
}

std::string ClusterdProcess::Launch() {
  port_ = FreeLoopbackPort();
  http_port_ = FreeLoopbackPort();
  return SpawnOnPorts();
}

std::string ClusterdProcess::Start() {
  if (auto err = Launch(); !err.empty()) return err;
  auto channel = grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    if (proc_.Exited()) return "clusterd exited during start";
    if (channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::milliseconds(200))) return "";
  }
  return "clusterd did not accept connections within 30 s";
}

double ClusterdProcess::Metric(const std::string& name) const {
  std::istringstream lines(MetricsText());
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return NAN;
}

PromHistogram PromHistogram::Parse(const std::string& text, const std::string& name) {
  PromHistogram h;
  std::istringstream lines(text);
  std::string line;
  const std::string bucket = name + "_bucket{le=\"";
  while (std::getline(lines, line)) {
    try {
      if (line.rfind(bucket, 0) == 0) {
        const size_t q = line.find('"', bucket.size());
        const std::string le = line.substr(bucket.size(), q - bucket.size());
        const double count = std::stod(line.substr(line.rfind(' ') + 1));
        h.buckets.emplace_back(le == "+Inf" ? INFINITY : std::stod(le), count);
        h.found = true;
      } else if (line.rfind(name + "_sum ", 0) == 0) {
        h.sum = std::stod(line.substr(name.size() + 5));
      } else if (line.rfind(name + "_count ", 0) == 0) {
        h.count = std::stod(line.substr(name.size() + 7));
      }
    } catch (const std::logic_error&) {
    }
  }
  return h;
}

PromHistogram PromHistogram::Minus(const PromHistogram& before) const {
  PromHistogram d = *this;
  if (before.buckets.size() == buckets.size()) {
    for (size_t i = 0; i < buckets.size(); ++i) d.buckets[i].second -= before.buckets[i].second;
  }
  d.sum -= before.sum;
  d.count -= before.count;
  return d;
}

double PromHistogram::QuantileUpperMs(double p) const {
  if (count <= 0) return NAN;
  for (const auto& [le, cum] : buckets) {
    if (cum >= p * count) return le * 1e3;
  }
  return INFINITY;
}

// ---------------------------------------------------------------- report

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  }
  return "unknown";
}

std::string Fmt(double v, const char* unit) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return std::string(v > 0 ? "inf" : "-inf") + unit;
  char b[64];
  if (std::fabs(v) >= 1000)
    std::snprintf(b, sizeof(b), "%.0f%s", v, unit);
  else if (std::fabs(v) >= 10)
    std::snprintf(b, sizeof(b), "%.1f%s", v, unit);
  else
    std::snprintf(b, sizeof(b), "%.3f%s", v, unit);
  return b;
}

void PrintTable(const std::vector<Row>& rows) {
  std::vector<Row> all = {{"scenario", "figure", "value", "baseline", "ratio", "target", "met?"}};
  all.insert(all.end(), rows.begin(), rows.end());
  size_t w[7] = {};
  for (auto& r : all) {
    const std::string* f[7] = {&r.scenario, &r.figure, &r.value, &r.baseline, &r.ratio, &r.target, &r.met};
    for (int i = 0; i < 7; ++i) w[i] = std::max(w[i], f[i]->size());
  }
  for (size_t k = 0; k < all.size(); ++k) {
    auto& r = all[k];
    const std::string* f[7] = {&r.scenario, &r.figure, &r.value, &r.baseline, &r.ratio, &r.target, &r.met};
    std::string line = "|";
    for (int i = 0; i < 7; ++i) line += " " + *f[i] + std::string(w[i] - f[i]->size(), ' ') + " |";
    std::cout << line << "\n";
    if (k == 0) {
      std::string sep = "|";
      for (int i = 0; i < 7; ++i) sep += std::string(w[i] + 2, '-') + "|";
      std::cout << sep << "\n";
    }
  }
}

}  // namespace clusterd::bench
