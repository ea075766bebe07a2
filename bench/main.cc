// clusterd-bench: scenarios 1 (durable ingest) and 2 (ack latency at a fixed
// offered rate) of the benchmark issue, against a real clusterd process, next
// to baselines measured in the same run: a raw gRPC sink (no storage), RocksDB
// synced group commits and the single-writer fdatasync rate. Figures are
// printed and written as JSON, never asserted. See docs/performance.md.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "clusterd/v1/agent.grpc.pb.h"
#include "sink.h"

extern char** environ;

namespace clusterd::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

int64_t NowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

struct Options {
  double duration_s = 10;
  int streams = 16;
  double rate = 10000;
  std::string clusterd;
  std::string json_path = "bench-results.json";
  std::string tmp_root;
  bool short_mode = false;
};

[[noreturn]] void Usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: clusterd-bench [--short] [--duration SECONDS] [--streams N] [--rate EVENTS_PER_S]\n"
               "                      [--clusterd PATH] [--json PATH] [--tmpdir DIR]\n"
               "  --short      a few seconds in all: 2 s phases, 4 streams, 2000 events/s\n"
               "  --duration   seconds per measured phase (default 10)\n"
               "  --streams    concurrent agent streams (default 16)\n"
               "  --rate       offered rate of scenario 2, events/s across streams (default 10000)\n"
               "  --clusterd   clusterd binary (default: next to this binary)\n"
               "  --json       results file (default bench-results.json)\n"
               "  --tmpdir     where data dirs and the fsync file go (default $TMPDIR or /tmp)\n");
  std::exit(code);
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  bool have_duration = false, have_streams = false, have_rate = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v;
    auto eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    auto value = [&]() -> std::string {
      if (!v.empty()) return v;
      if (i + 1 >= argc) Usage(2);
      return argv[++i];
    };
    try {
      if (a == "--short") o.short_mode = true;
      else if (a == "--duration") o.duration_s = std::stod(value()), have_duration = true;
      else if (a == "--streams") o.streams = std::stoi(value()), have_streams = true;
      else if (a == "--rate") o.rate = std::stod(value()), have_rate = true;
      else if (a == "--clusterd") o.clusterd = value();
      else if (a == "--json") o.json_path = value();
      else if (a == "--tmpdir") o.tmp_root = value();
      else if (a == "--help" || a == "-h") Usage(0);
      else Usage(2);
    } catch (const std::logic_error&) {
      Usage(2);
    }
  }
  if (o.short_mode) {
    if (!have_duration) o.duration_s = 2;
    if (!have_streams) o.streams = 4;
    if (!have_rate) o.rate = 2000;
  }
  if (o.duration_s <= 0 || o.streams <= 0 || o.rate <= 0) Usage(2);
  if (o.clusterd.empty()) o.clusterd = (fs::read_symlink("/proc/self/exe").parent_path() / "clusterd").string();
  if (o.tmp_root.empty()) {
    const char* t = std::getenv("TMPDIR");
    o.tmp_root = t && *t ? t : "/tmp";
  }
  return o;
}

class TempDir {
 public:
  explicit TempDir(const std::string& root) {
    std::string tmpl = root + "/clusterd-bench.XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp under " + root + ": " + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

double Percentile(std::vector<int64_t>& v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(std::llround(p * static_cast<double>(v.size() - 1)));
  return static_cast<double>(v[idx]) / 1e6;  // ms
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// ---------------------------------------------------------------- messages

constexpr uint64_t kEpoch = 1;
constexpr int kDevices = 8;

v1::ConnectRequest MakeHello(const std::string& node) {
  v1::ConnectRequest req;
  auto* h = req.mutable_hello();
  h->set_node_name(node);
  h->set_boot_id("bench-boot");
  h->set_agent_version("clusterd-bench");
  h->set_epoch(kEpoch);
  for (int i = 0; i < kDevices; ++i) {
    auto* d = h->mutable_inventory()->add_devices();
    d->set_id(i);
    d->set_vendor("huawei");
    d->set_model("910B3");
  }
  return req;
}

// Odd seq raises a fault on a device, the next even seq clears it.
void FillTransition(uint64_t seq, v1::ConnectRequest* req) {
  auto* t = req->mutable_transition();
  t->mutable_id()->set_epoch(kEpoch);
  t->mutable_id()->set_seq(seq);
  t->set_action(seq % 2 == 1 ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
  auto* f = t->mutable_fault();
  f->set_device_id(static_cast<uint32_t>(((seq - 1) / 2) % kDevices));
  f->set_source(v1::FAULT_SOURCE_ACCELERATOR);
  f->set_code("020000002");
  f->set_level(v1::FAULT_LEVEL_SUB_HEALTH);
  f->set_message("bench: HBM single-bit ECC error count above threshold");
  auto now = std::chrono::system_clock::now().time_since_epoch();
  t->mutable_time()->set_seconds(std::chrono::duration_cast<std::chrono::seconds>(now).count());
  t->mutable_time()->set_nanos(static_cast<int32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count() % 1000000000));
}

size_t RecordSize() {
  v1::ConnectRequest req;
  FillTransition(1, &req);
  return req.transition().ByteSizeLong();
}

// ---------------------------------------------------------------- agents

struct DriveResult {
  double acked_per_s = 0;     // acknowledged transitions per second in the window
  double sent_per_s = 0;      // sent per second in the window
  uint64_t acked_total = 0;
  double p50_ms = NAN, p90_ms = NAN, p99_ms = NAN, max_ms = NAN;
  uint64_t latency_samples = 0;
  double send_lag_p99_ms = NAN;  // how late the paced sender was against its schedule
  double window_s = 0;
  bool ok = true;
  std::string error;
};

struct AgentStream {
  std::unique_ptr<v1::NodeAgentService::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ConnectRequest, v1::ConnectResponse>> rw;
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> acked{0};
  std::atomic<bool> welcomed{false};
  std::atomic<bool> reader_done{false};
  std::atomic<bool> failed{false};
  std::unique_ptr<std::atomic<int64_t>[]> send_ns;  // by seq, paced mode only
  uint64_t capacity = 0;
  std::vector<int64_t> latencies;  // reader thread only
  std::vector<int64_t> lags;       // writer thread only
  std::mutex mu;
  std::condition_variable cv;
};

// Drives `streams` agent streams against target. rate <= 0: each stream sends
// as fast as acks allow with at most `window` unacknowledged transitions;
// rate > 0: transitions are paced on a steady-clock schedule and per-transition
// latency (send -> covering ack) is recorded after the warm-up.
DriveResult DriveAgents(const std::string& target, const std::string& node_prefix, int streams, double duration_s,
                        double rate, uint64_t window = 512) {
  DriveResult result;
  const bool paced = rate > 0;
  const double warmup_s = std::min(1.0, duration_s / 4);
  // Several channels, like several agents' connections (each channel is one HTTP/2 connection).
  const int channels = std::min(streams, 4);
  std::vector<std::shared_ptr<grpc::Channel>> chans;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("bench.channel", i);  // distinct args -> distinct subchannel/connection
    chans.push_back(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  }
  std::vector<std::unique_ptr<AgentStream>> ss;
  for (int i = 0; i < streams; ++i) {
    auto s = std::make_unique<AgentStream>();
    s->stub = v1::NodeAgentService::NewStub(chans[i % channels]);
    if (paced) {
      s->capacity = static_cast<uint64_t>(std::ceil((duration_s + 1) * rate / streams)) + 16;
      s->send_ns = std::make_unique<std::atomic<int64_t>[]>(s->capacity);
      s->latencies.reserve(s->capacity);
      s->lags.reserve(s->capacity);
    }
    ss.push_back(std::move(s));
  }

  std::atomic<bool> stop{false};
  std::atomic<int64_t> start_ns{0};  // set once every stream is welcomed
  std::atomic<int64_t> measure_from_ns{INT64_MAX};
  std::atomic<int> ready{0};
  std::vector<std::thread> readers, writers;

  for (int i = 0; i < streams; ++i) {
    AgentStream* s = ss[i].get();
    s->rw = s->stub->Connect(&s->ctx);
    readers.emplace_back([s, paced, &measure_from_ns] {
      v1::ConnectResponse resp;
      while (s->rw->Read(&resp)) {
        if (resp.has_welcome()) s->welcomed = true;
        if (!resp.has_ack()) continue;
        const uint64_t seq = resp.ack().id().seq();
        const uint64_t prev = s->acked.load(std::memory_order_relaxed);
        if (seq <= prev) continue;
        if (paced) {
          const int64_t now = NowNs();
          const int64_t from = measure_from_ns.load(std::memory_order_relaxed);
          for (uint64_t q = prev + 1; q <= seq && q < s->capacity; ++q) {
            const int64_t t = s->send_ns[q].load(std::memory_order_acquire);
            if (t >= from) s->latencies.push_back(now - t);
          }
        }
        {
          std::lock_guard lock(s->mu);
          s->acked.store(seq, std::memory_order_release);
        }
        s->cv.notify_one();
      }
      s->reader_done = true;
      s->cv.notify_one();
    });
    writers.emplace_back([s, i, streams, paced, rate, window, duration_s, &node_prefix, &stop, &start_ns, &ready] {
      if (!s->rw->Write(MakeHello("bench-" + node_prefix + "-" + std::to_string(i)))) {
        s->failed = true;
        ++ready;
        return;
      }
      const auto hello_deadline = Clock::now() + std::chrono::seconds(30);
      while (!s->welcomed && !s->reader_done && Clock::now() < hello_deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!s->welcomed) s->failed = true;
      ++ready;
      while (start_ns.load() == 0 && !stop) std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (s->failed) return;
      const int64_t start = start_ns.load();
      const int64_t end = start + static_cast<int64_t>(duration_s * 1e9);
      // Each stream sends every streams/rate seconds, phase-shifted by i/rate.
      const double interval_ns = paced ? 1e9 * streams / rate : 0;
      const double phase_ns = paced ? 1e9 * i / rate : 0;
      v1::ConnectRequest req;
      for (uint64_t seq = 1; !stop; ++seq) {
        if (paced) {
          const int64_t due = start + static_cast<int64_t>(phase_ns + interval_ns * static_cast<double>(seq - 1));
          if (due >= end || seq >= s->capacity) break;
          std::this_thread::sleep_until(Clock::time_point(std::chrono::nanoseconds(due)));
          FillTransition(seq, &req);
          const int64_t now = NowNs();
          s->lags.push_back(now - due);
          s->send_ns[seq].store(now, std::memory_order_release);
        } else {
          std::unique_lock lock(s->mu);
          s->cv.wait(lock, [&] { return stop || s->reader_done || seq - 1 - s->acked.load() < window; });
          if (stop || s->reader_done) break;
          lock.unlock();
          FillTransition(seq, &req);
        }
        if (!s->rw->Write(req)) {
          s->failed = true;
          break;
        }
        s->sent.store(seq, std::memory_order_release);
      }
    });
  }

  // Wait for every Welcome, then start all streams together.
  while (ready.load() < streams) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool any_failed = false;
  for (auto& s : ss) any_failed |= s->failed.load();
  auto sum = [&](auto field) {
    uint64_t n = 0;
    for (auto& s : ss) n += ((*s).*field).load();
    return n;
  };
  if (!any_failed) {
    const int64_t start = NowNs() + 1'000'000;
    measure_from_ns = start + static_cast<int64_t>(warmup_s * 1e9);
    start_ns = start;
    std::this_thread::sleep_until(Clock::time_point(std::chrono::nanoseconds(measure_from_ns.load())));
    const int64_t t0 = NowNs();
    const uint64_t a0 = sum(&AgentStream::acked), s0 = sum(&AgentStream::sent);
    std::this_thread::sleep_until(Clock::time_point(std::chrono::nanoseconds(start + static_cast<int64_t>(duration_s * 1e9))));
    const int64_t t1 = NowNs();
    const uint64_t a1 = sum(&AgentStream::acked), s1 = sum(&AgentStream::sent);
    result.window_s = static_cast<double>(t1 - t0) / 1e9;
    result.acked_per_s = static_cast<double>(a1 - a0) / result.window_s;
    result.sent_per_s = static_cast<double>(s1 - s0) / result.window_s;
  }
  stop = true;
  start_ns = start_ns.load() == 0 ? 1 : start_ns.load();
  for (auto& s : ss) s->cv.notify_all();
  for (auto& t : writers) t.join();
  // Let outstanding acks arrive (paced mode measures their latency), then half-close.
  const auto drain_deadline = Clock::now() + std::chrono::seconds(5);
  for (auto& s : ss) {
    while (!s->reader_done && s->acked.load() < s->sent.load() && Clock::now() < drain_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  for (auto& s : ss) s->rw->WritesDone();
  const auto close_deadline = Clock::now() + std::chrono::seconds(5);
  for (auto& s : ss) {
    while (!s->reader_done && Clock::now() < close_deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!s->reader_done) s->ctx.TryCancel();
  }
  for (auto& t : readers) t.join();
  std::vector<int64_t> lat, lag;
  for (auto& s : ss) {
    grpc::Status st = s->rw->Finish();
    if ((s->failed || !st.ok()) && result.ok) {
      result.ok = false;
      result.error = "stream ended: " + std::to_string(st.error_code()) + " " + st.error_message();
    }
    result.acked_total += s->acked.load();
    lat.insert(lat.end(), s->latencies.begin(), s->latencies.end());
    lag.insert(lag.end(), s->lags.begin(), s->lags.end());
  }
  if (any_failed && result.ok) {
    result.ok = false;
    result.error = "a stream got no Welcome";
  }
  if (paced) {
    result.latency_samples = lat.size();
    result.p50_ms = Percentile(lat, 0.50);
    result.p90_ms = Percentile(lat, 0.90);
    result.p99_ms = Percentile(lat, 0.99);
    result.max_ms = lat.empty() ? NAN : static_cast<double>(lat.back()) / 1e6;
    result.send_lag_p99_ms = Percentile(lag, 0.99);
  }
  return result;
}

json DriveJson(const DriveResult& r) {
  json j = {{"acked_per_s", r.acked_per_s}, {"sent_per_s", r.sent_per_s}, {"acked_total", r.acked_total},
            {"window_s", r.window_s},       {"ok", r.ok}};
  if (!std::isnan(r.p50_ms)) {
    j["latency_ms"] = {{"p50", r.p50_ms}, {"p90", r.p90_ms}, {"p99", r.p99_ms}, {"max", r.max_ms},
                       {"samples", r.latency_samples}};
    j["send_lag_p99_ms"] = r.send_lag_p99_ms;
  }
  if (!r.ok) j["error"] = r.error;
  return j;
}

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

// ---------------------------------------------------------------- clusterd process

class ClusterdProcess {
 public:
  ClusterdProcess(std::string bin, std::string data_dir) : bin_(std::move(bin)), data_dir_(std::move(data_dir)) {}
  ~ClusterdProcess() { Stop(); }

  // Returns an empty string on success, else why it failed.
  std::string Start() {
    if (::access(bin_.c_str(), X_OK) != 0) return bin_ + " is not executable";
    port_ = FreePort();
    http_port_ = FreePort();
    std::vector<std::string> args = {bin_,
                                     "--listen=127.0.0.1:" + std::to_string(port_),
                                     "--http-listen=127.0.0.1:" + std::to_string(http_port_),
                                     "--data-dir=" + data_dir_,
                                     "--log-level=warn",
                                     "--node-grace=1h"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (int rc = posix_spawn(&pid_, bin_.c_str(), nullptr, nullptr, argv.data(), environ); rc != 0) {
      pid_ = -1;
      return "posix_spawn " + bin_ + ": " + std::strerror(rc);
    }
    auto channel = grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return "clusterd exited during start (status " + std::to_string(status) + ")";
      }
      if (channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::milliseconds(200))) return "";
    }
    return "clusterd did not accept connections within 30 s";
  }

  void Stop() {
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

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

  // utime + stime of the process, in seconds.
  double CpuSeconds() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
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

  // A counter from /metrics (unlabelled series only); NAN if unavailable.
  double Metric(const std::string& name) const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(http_port_));
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return NAN;
    }
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, req.data(), req.size()) < 0) {
      close(fd);
      return NAN;
    }
    std::string body;
    char buf[8192];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) body.append(buf, static_cast<size_t>(n));
    close(fd);
    std::istringstream lines(body);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
    }
    return NAN;
  }

 private:
  std::string bin_, data_dir_;
  pid_t pid_ = -1;
  int port_ = 0, http_port_ = 0;
};

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

std::string Fmt(double v, const char* unit = "") {
  if (std::isnan(v)) return "n/a";
  char b[64];
  if (std::fabs(v) >= 1000) std::snprintf(b, sizeof(b), "%.0f%s", v, unit);
  else if (std::fabs(v) >= 10) std::snprintf(b, sizeof(b), "%.1f%s", v, unit);
  else std::snprintf(b, sizeof(b), "%.3f%s", v, unit);
  return b;
}

struct Row {
  std::string scenario, figure, value, baseline, ratio, target, met;
};

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

const char* Met(bool ok) { return ok ? "yes" : "NO"; }

int Run(const Options& o) {
  TempDir tmp(o.tmp_root);
  const size_t record_bytes = RecordSize();
  const double storage_s = std::min(o.duration_s, 3.0);
  json out;
  out["machine"] = {{"nproc", std::thread::hardware_concurrency()}, {"cpu_model", CpuModel()},
                    {"tmpdir", o.tmp_root}};
  out["options"] = {{"duration_s", o.duration_s}, {"streams", o.streams}, {"rate", o.rate},
                    {"short", o.short_mode},      {"clusterd", o.clusterd}};

  std::cerr << "[bench] fdatasync baseline (" << storage_s << " s)\n";
  auto fsync = MeasureFdatasync(tmp.Sub("fsync.dat"), storage_s);
  out["baselines"]["fdatasync"] = {{"ops_per_s", fsync.ops_per_s}, {"p50_ms", fsync.p50_ms},
                                   {"p99_ms", fsync.p99_ms}, {"ops", fsync.ops}, {"write_bytes", 200}};

  std::cerr << "[bench] rocksdb synced WriteBatch baseline (" << storage_s << " s)\n";
  auto rocks = MeasureRocksDb(tmp.Sub("rocks"), storage_s, 64, record_bytes);
  out["baselines"]["rocksdb_group_commit"] = {{"records_per_s", rocks.records_per_s}, {"commits_per_s", rocks.commits_per_s},
                                              {"commit_p50_ms", rocks.commit_p50_ms},
                                              {"commit_p99_ms", rocks.commit_p99_ms},
                                              {"records_per_batch", rocks.batch}, {"record_bytes", rocks.record_bytes}};

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
  if (!sink_tput.ok || !sink_lat.ok) {
    std::cerr << "[bench] error: raw gRPC sink run failed: " << sink_tput.error << sink_lat.error << "\n";
    return 1;
  }

  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-data"));
  std::cerr << "[bench] starting " << o.clusterd << "\n";
  if (auto err = cd.Start(); !err.empty()) {
    std::cerr << "[bench] error: " << err << "\n";
    return 1;
  }
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
  if (!s1.ok || !s2.ok) {
    std::cerr << "[bench] error: clusterd run failed: " << s1.error << " " << s2.error << "\n";
    return 1;
  }

  const double r_grpc = s1.acked_per_s / sink_tput.acked_per_s;
  const double r_fsync = s1.acked_per_s / fsync.ops_per_s;
  const double p99_target = fsync.p99_ms + 2.0;
  out["scenario1_durable_ingest"] = s1j;
  out["scenario1_durable_ingest"]["ratio_vs_grpc_sink"] = r_grpc;
  out["scenario1_durable_ingest"]["ratio_vs_fdatasync"] = r_fsync;
  out["scenario1_durable_ingest"]["ratio_vs_rocksdb_group_commit"] = s1.acked_per_s / rocks.records_per_s;
  out["scenario1_durable_ingest"]["targets"] = {{"ratio_vs_grpc_sink_min", 0.5}, {"ratio_vs_fdatasync_min", 20},
                                                {"met_grpc", r_grpc >= 0.5}, {"met_fdatasync", r_fsync >= 20}};
  out["scenario2_ack_latency"] = s2j;
  out["scenario2_ack_latency"]["offered_rate"] = o.rate;
  out["scenario2_ack_latency"]["targets"] = {{"p50_max_ms", 1.0}, {"p99_max_ms", p99_target},
                                             {"met_p50", s2.p50_ms <= 1.0}, {"met_p99", s2.p99_ms <= p99_target}};

  std::vector<Row> rows;
  rows.push_back({"baseline", "fdatasync 200 B, 1 writer", Fmt(fsync.ops_per_s, " ops/s"), "", "", "", ""});
  rows.push_back({"baseline", "fdatasync latency p50 / p99", Fmt(fsync.p50_ms, " ms") + " / " + Fmt(fsync.p99_ms, " ms"),
                  "", "", "", ""});
  rows.push_back({"baseline", "RocksDB synced batch x" + std::to_string(rocks.batch) + " (" +
                                  std::to_string(record_bytes) + " B)",
                  Fmt(rocks.records_per_s, " rec/s"), "", "", "", ""});
  rows.push_back({"baseline", "raw gRPC sink, streaming acks", Fmt(sink_tput.acked_per_s, " msg/s"), "", "", "", ""});
  rows.push_back({"baseline", "raw gRPC sink ack p50 / p99 @" + Fmt(o.rate, "/s"),
                  Fmt(sink_lat.p50_ms, " ms") + " / " + Fmt(sink_lat.p99_ms, " ms"), "", "", "", ""});
  rows.push_back({"1 ingest", "durable acks/s vs raw gRPC", Fmt(s1.acked_per_s, "/s"), Fmt(sink_tput.acked_per_s, "/s"),
                  Fmt(r_grpc, "x"), ">= 0.5x", Met(r_grpc >= 0.5)});
  rows.push_back({"1 ingest", "durable acks/s vs fdatasync", Fmt(s1.acked_per_s, "/s"), Fmt(fsync.ops_per_s, "/s"),
                  Fmt(r_fsync, "x"), ">= 20x", Met(r_fsync >= 20)});
  rows.push_back({"1 ingest", "transitions per group commit", Fmt(s1j["transitions_per_commit"].get<double>()), "", "",
                  "", ""});
  rows.push_back({"2 latency", "ack p50 @" + Fmt(s2.sent_per_s, "/s") + " sent", Fmt(s2.p50_ms, " ms"), "", "",
                  "<= 1 ms", Met(s2.p50_ms <= 1.0)});
  rows.push_back({"2 latency", "ack p99", Fmt(s2.p99_ms, " ms"), Fmt(fsync.p99_ms, " ms") + " fsync p99",
                  Fmt(s2.p99_ms - fsync.p99_ms, " ms") + " over", "<= fsync p99 + 2 ms", Met(s2.p99_ms <= p99_target)});
  rows.push_back({"2 latency", "acks/s (offered " + Fmt(o.rate, "/s") + ")", Fmt(s2.acked_per_s, "/s"), "", "", "", ""});
  std::cout << "clusterd-bench" << (o.short_mode ? " --short" : "") << ": " << std::thread::hardware_concurrency()
            << " CPUs (" << CpuModel() << "), " << o.streams << " streams, " << o.duration_s << " s per phase\n";
  PrintTable(rows);

  std::ofstream f(o.json_path);
  f << out.dump(2) << "\n";
  if (!f) {
    std::cerr << "[bench] error: could not write " << o.json_path << "\n";
    return 1;
  }
  std::cout << "results: " << o.json_path << "\n";
  return 0;
}

}  // namespace
}  // namespace clusterd::bench

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  auto opts = clusterd::bench::ParseArgs(argc, argv);
  try {
    return clusterd::bench::Run(opts);
  } catch (const std::exception& e) {
    std::cerr << "[bench] error: " << e.what() << "\n";
    return 1;
  }
}
