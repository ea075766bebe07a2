// Scenario 10, etcd: the fault stream of scenarios 1, 2 and 6 written to a
// real etcd (one member on loopback, fsync on, as durable as ClusterD's
// synced group commits) the way a control plane keeping fault state in etcd
// would: one key per fault, one transaction per transition, fenced on a
// leader key (the compare an HA writer needs so that a deposed leader cannot
// write), and watchers on the fault prefix. Same concurrency as ClusterD's
// runs: `streams` writers over 4 HTTP/2 connections, each with up to 32
// transactions in flight (kWindow says why not 512 like the agents), paced
// on the same schedule for the latency phases; W Watch streams over 4
// connections for the fan-out. See docs/performance.md.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "agents.h"
#include "common.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "peers.h"

namespace clusterd::bench {
namespace {

namespace epb = etcdserverpb;

constexpr char kFaultPrefix[] = "clusterd-bench/faults/";
constexpr char kLeaderKey[] = "clusterd-bench/leader";
// Transactions in flight per writer. ClusterD's agents keep up to 512
// transitions unacknowledged, but 16 x 512 overruns a single etcd member:
// it refuses with "too many requests" (more than 5,000 entries committed and
// not yet applied) and times requests out. Of 8, 32 and 128 per writer, 32
// gave etcd its best throughput here, with no errors.
constexpr uint64_t kWindow = 32;

std::string PrefixEnd(std::string prefix) {
  prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

// A fault record of the size ClusterD stores for one transition, carrying
// the send time and the sequence so a watcher can time it.
std::string FaultValue(uint64_t seq, int64_t send_ns, size_t bytes) {
  std::string v(std::max<size_t>(bytes, 16), 'f');
  std::memcpy(v.data(), &send_ns, 8);
  std::memcpy(v.data() + 8, &seq, 8);
  return v;
}

int64_t SendNsOf(const std::string& value) {
  int64_t t = 0;
  if (value.size() >= 8) std::memcpy(&t, value.data(), 8);
  return t;
}

class EtcdProcess {
 public:
  EtcdProcess(std::string bin, std::string dir) : bin_(std::move(bin)), dir_(std::move(dir)) {}
  std::string Start() {
    client_port_ = FreeLoopbackPort();
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
    if (auto err = proc_.Spawn({bin_, "--name", "bench", "--data-dir", dir_ + "/data", "--listen-client-urls", client,
                                "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                "--initial-advertise-peer-urls", peer, "--initial-cluster", "bench=" + peer,
                                "--quota-backend-bytes", std::to_string(8LL << 30), "--log-level", "warn"},
                               dir_ + "/etcd.log");
        !err.empty()) {
      return err;
    }
    channel_ = grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
    auto kv = epb::KV::NewStub(channel_);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      if (proc_.Exited()) return "etcd exited during start (see " + dir_ + "/etcd.log)";
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      epb::RangeRequest req;
      req.set_key(kLeaderKey);
      epb::RangeResponse resp;
      if (kv->Range(&ctx, req, &resp).ok()) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "etcd did not answer within 30 s (see " + dir_ + "/etcd.log)";
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(client_port_); }
  pid_t pid() const { return proc_.pid(); }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  std::string bin_, dir_;
  ChildProcess proc_;
  int client_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
};

std::string Version(const std::string& bin) {
  std::string out;
  if (FILE* p = ::popen(("'" + bin + "' --version 2>/dev/null").c_str(), "r")) {
    char buf[256];
    if (std::fgets(buf, sizeof(buf), p)) out = buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// The fence: the leader key's create revision, which every transaction
// compares (a new leader would have re-created the key).
std::pair<int64_t, std::string> PutLeader(epb::KV::Stub* kv) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  epb::PutRequest req;
  req.set_key(kLeaderKey);
  req.set_value("bench");
  epb::PutResponse resp;
  auto st = kv->Put(&ctx, req, &resp);
  if (!st.ok()) return {0, "etcd put " + std::string(kLeaderKey) + ": " + st.error_message()};
  return {resp.header().revision(), ""};
}

struct TxnRun {
  uint64_t acked = 0, failed = 0, fenced_out = 0;
  uint64_t succeeded = 0;  // every transaction that committed, warm-up and drain included
  double acked_per_s = 0, sent_per_s = 0, window_s = 0;
  double p50_ms = NAN, p99_ms = NAN, lag_p99_ms = NAN;
  std::string error;
};

// One writer: transactions for its own node's faults, at most kWindow in
// flight, on its own completion queue and thread.
class TxnWriter {
 public:
  TxnWriter(std::shared_ptr<grpc::Channel> ch, int index, int writers, int64_t fence, size_t value_bytes)
      : kv_(epb::KV::NewStub(ch)), index_(index), writers_(writers), fence_(fence), value_bytes_(value_bytes) {}

  // rate <= 0: closed loop; else this writer's share of `rate`, on the
  // shared schedule. Latency (send -> response) of transactions sent at or
  // after measure_from; counts of those answered in [measure_from, end).
  void Run(int64_t start, int64_t measure_from, int64_t end, double rate) {
    uint64_t k = 0;
    for (;;) {
      int64_t now = NowNs();
      while (now < end && inflight_ < kWindow) {
        int64_t due = now;
        if (rate > 0) {
          due = start + static_cast<int64_t>(1e9 * static_cast<double>(k * writers_ + index_) / rate);
          if (due > now) break;
        }
        Issue(++k, now, now - due, measure_from);
        now = NowNs();
      }
      if (now >= end && inflight_ == 0) break;
      int64_t wait_until = now + 50'000'000;
      if (rate > 0 && now < end) {
        wait_until =
            std::min(wait_until, start + static_cast<int64_t>(1e9 * static_cast<double>(k * writers_ + index_) / rate));
      }
      if (now >= end) wait_until = now + 5'000'000'000;  // drain
      void* tag = nullptr;
      bool ok = false;
      const auto st =
          cq_.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::nanoseconds(wait_until - now));
      if (st == grpc::CompletionQueue::SHUTDOWN) break;
      if (st == grpc::CompletionQueue::TIMEOUT) {
        if (now >= end) break;  // a drain that never ends: count what is missing
        continue;
      }
      Complete(static_cast<Call*>(tag), measure_from, end);
    }
    abandoned = inflight_;
  }

  std::vector<int64_t> latencies, lags;
  uint64_t acked = 0, succeeded = 0, failed = 0, fenced_out = 0, sent_in_window = 0, abandoned = 0;
  std::string error;

  ~TxnWriter() {
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) delete static_cast<Call*>(tag);
  }

 private:
  struct Call {
    grpc::ClientContext ctx;
    epb::TxnResponse resp;
    grpc::Status status;
    int64_t sent_ns = 0;
    std::unique_ptr<grpc::ClientAsyncResponseReader<epb::TxnResponse>> rpc;
  };

  // Transition k of this writer's node: odd k raises device ((k-1)/2) % 8,
  // even k clears it (the record is kept, as ClusterD keeps it).
  void Issue(uint64_t k, int64_t now, int64_t lag, int64_t measure_from) {
    auto* c = new Call;
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    epb::TxnRequest req;
    auto* cmp = req.add_compare();
    cmp->set_key(kLeaderKey);
    cmp->set_target(epb::Compare::CREATE);
    cmp->set_result(epb::Compare::EQUAL);
    cmp->set_create_revision(fence_);
    auto* put = req.add_success()->mutable_request_put();
    const uint64_t device = ((k - 1) / 2) % kDevices;
    put->set_key(std::string(kFaultPrefix) + "w" + std::to_string(index_) + "/" + std::to_string(device) +
                 "/020000002");
    put->set_value(FaultValue(k, now, value_bytes_));
    c->sent_ns = now;
    c->rpc = kv_->AsyncTxn(&c->ctx, req, &cq_);
    c->rpc->Finish(&c->resp, &c->status, c);
    ++inflight_;
    if (now >= measure_from) {
      ++sent_in_window;
      if (lag >= 0) lags.push_back(lag);
    }
  }

  void Complete(Call* c, int64_t measure_from, int64_t end) {
    const int64_t now = NowNs();
    --inflight_;
    if (!c->status.ok()) {
      ++failed;
      if (error.empty()) error = "etcd txn: " + c->status.error_message();
    } else if (!c->resp.succeeded()) {
      ++fenced_out;
    } else {
      ++succeeded;
      if (now >= measure_from && now < end) ++acked;
      if (c->sent_ns >= measure_from) latencies.push_back(now - c->sent_ns);
    }
    delete c;
  }

  std::unique_ptr<epb::KV::Stub> kv_;
  grpc::CompletionQueue cq_;
  const int index_, writers_;
  const int64_t fence_;
  const size_t value_bytes_;
  uint64_t inflight_ = 0;
};

TxnRun DriveTxns(const std::vector<std::shared_ptr<grpc::Channel>>& chans, int writers, double duration_s, double rate,
                 int64_t fence, size_t value_bytes) {
  std::vector<std::unique_ptr<TxnWriter>> ws;
  for (int i = 0; i < writers; ++i) {
    ws.push_back(std::make_unique<TxnWriter>(chans[i % chans.size()], i, writers, fence, value_bytes));
  }
  const double warmup_s = std::min(1.0, duration_s / 4);
  const int64_t start = NowNs() + 1'000'000;
  const int64_t measure_from = start + static_cast<int64_t>(warmup_s * 1e9);
  const int64_t end = start + static_cast<int64_t>(duration_s * 1e9);
  std::vector<std::thread> threads;
  for (auto& w : ws) threads.emplace_back([&, w = w.get()] { w->Run(start, measure_from, end, rate); });
  for (auto& t : threads) t.join();
  TxnRun r;
  r.window_s = static_cast<double>(end - measure_from) / 1e9;
  std::vector<int64_t> lat, lag;
  uint64_t sent = 0;
  for (auto& w : ws) {
    r.acked += w->acked;
    r.succeeded += w->succeeded;
    r.failed += w->failed + w->abandoned;
    r.fenced_out += w->fenced_out;
    sent += w->sent_in_window;
    lat.insert(lat.end(), w->latencies.begin(), w->latencies.end());
    lag.insert(lag.end(), w->lags.begin(), w->lags.end());
    if (r.error.empty()) r.error = w->error;
  }
  r.acked_per_s = static_cast<double>(r.acked) / r.window_s;
  r.sent_per_s = static_cast<double>(sent) / r.window_s;
  r.p50_ms = Percentile(lat, 0.5);
  r.p99_ms = Percentile(lat, 0.99);
  r.lag_p99_ms = Percentile(lag, 0.99);
  return r;
}

json TxnJson(const TxnRun& r) {
  return {{"acked_per_s", r.acked_per_s},
          {"sent_per_s", r.sent_per_s},
          {"acked", r.acked},
          {"failed", r.failed},
          {"fenced_out", r.fenced_out},
          {"window_s", r.window_s},
          {"p50_ms", r.p50_ms},
          {"p99_ms", r.p99_ms},
          {"send_lag_p99_ms", r.lag_p99_ms},
          {"error", r.error}};
}

// ---------------------------------------------------------------- watchers

// One etcd Watch stream holding one watch on the fault prefix.
class EtcdWatcher : public grpc::ClientBidiReactor<epb::WatchRequest, epb::WatchResponse> {
 public:
  EtcdWatcher(epb::Watch::Stub* stub, int64_t start_revision) {
    stub->async()->Watch(&ctx_, this);
    auto* create = req_.mutable_create_request();
    create->set_key(kFaultPrefix);
    create->set_range_end(PrefixEnd(kFaultPrefix));
    create->set_start_revision(start_revision);
    StartWrite(&req_);
    StartRead(&resp_);
    StartCall();
  }
  void OnWriteDone(bool) override {}
  void OnReadDone(bool ok) override {
    if (!ok) return;
    const int64_t now = NowNs();
    if (resp_.created()) created.store(true);
    if (resp_.canceled()) canceled.store(true);
    for (const auto& ev : resp_.events()) {
      const int64_t t = SendNsOf(ev.kv().value());
      if (t >= measure_from.load(std::memory_order_relaxed)) {
        hist.Add(now - t);
        events.fetch_add(1, std::memory_order_relaxed);
      } else {
        warm.fetch_add(1, std::memory_order_relaxed);
      }
    }
    StartRead(&resp_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    cv_.notify_all();
  }
  void Cancel() {
    ctx_.TryCancel();
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_; });
  }
  bool done() {
    std::lock_guard<std::mutex> lk(mu_);
    return done_;
  }

  LatencyHist hist;  // the reactor's callbacks only
  std::atomic<uint64_t> events{0}, warm{0};
  std::atomic<bool> created{false}, canceled{false};
  std::atomic<int64_t> measure_from{INT64_MAX};

 private:
  grpc::ClientContext ctx_;
  epb::WatchRequest req_;
  epb::WatchResponse resp_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

int64_t CurrentRevision(epb::KV::Stub* kv, std::string* err) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  epb::RangeRequest req;
  req.set_key(kLeaderKey);
  epb::RangeResponse resp;
  auto st = kv->Range(&ctx, req, &resp);
  if (!st.ok()) *err = "etcd range: " + st.error_message();
  return resp.header().revision();
}

// Waits (up to timeout_s) until pred() holds; false on timeout.
template <typename Pred>
bool WaitFor(double timeout_s, Pred pred) {
  const int64_t deadline = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  while (!pred()) {
    if (NowNs() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

json MeasureWatchFanout(const Options& o, const EtcdProcess& etcd, int64_t fence, std::string* err) {
  const double duration = o.short_mode ? std::min(o.duration_s, 1.5) : o.duration_s;
  auto chans = MakeChannels(etcd.target(), 4);
  std::vector<std::unique_ptr<epb::Watch::Stub>> stubs;
  for (auto& c : chans) stubs.push_back(epb::Watch::NewStub(c));
  auto kv = epb::KV::NewStub(etcd.channel());
  const int64_t rev = CurrentRevision(kv.get(), err);
  if (!err->empty()) return {};
  std::cerr << "[bench] scenario 10: etcd watch fan-out, " << o.watchers << " watchers, " << o.fanout_rate
            << " puts/s, " << duration << " s\n";
  std::vector<std::unique_ptr<EtcdWatcher>> ws;
  for (int i = 0; i < o.watchers; ++i) ws.push_back(std::make_unique<EtcdWatcher>(stubs[i % 4].get(), rev + 1));
  auto cancel_all = [&] {
    for (auto& w : ws) w->Cancel();
  };
  const int writers = std::min(o.streams, 16);
  const auto prod_chans = MakeChannels(etcd.target(), 2);
  // Warm-up: one transaction reaches every watcher (every watch created).
  DriveTxns(prod_chans, 1, 0.05, 20, fence, RecordSize());
  if (!WaitFor(60, [&] {
        for (auto& w : ws)
          if (w->warm.load() == 0 && !w->done()) return false;
        return true;
      })) {
    cancel_all();
    *err = "scenario 10: etcd watchers did not get the warm-up transaction within 60 s";
    return {};
  }
  const int64_t base = CurrentRevision(kv.get(), err);
  if (!err->empty()) {
    cancel_all();
    return {};
  }
  const int64_t measure_from = NowNs();
  for (auto& w : ws) w->measure_from = measure_from;
  const double cpu0 = ProcessCpuSeconds(etcd.pid());
  const TxnRun run = DriveTxns(prod_chans, writers, duration, o.fanout_rate, fence, RecordSize());
  const int64_t send_end = NowNs();
  // Each committed transaction is one revision, and every one of the run was
  // sent after measure_from: a watcher must count exactly the revisions
  // since base. (A transaction that timed out may still commit: the revision
  // counts it, the producer's tally does not.)
  uint64_t expected = 0;
  const int64_t drain_deadline = NowNs() + static_cast<int64_t>(120e9);
  for (;;) {
    expected = static_cast<uint64_t>(CurrentRevision(kv.get(), err) - base);
    const bool all = WaitFor(0.5, [&] {
      for (auto& w : ws)
        if (!w->done() && w->events.load() < expected) return false;
      return true;
    });
    if ((all && static_cast<uint64_t>(CurrentRevision(kv.get(), err) - base) == expected) || NowNs() > drain_deadline ||
        !err->empty()) {
      break;
    }
  }
  const double wall = static_cast<double>(NowNs() - measure_from) / 1e9;
  const double etcd_cores = (ProcessCpuSeconds(etcd.pid()) - cpu0) / wall;
  LatencyHist hist;
  uint64_t total = 0, missing = 0, ended = 0;
  for (auto& w : ws) {
    const uint64_t got = w->events.load();
    total += got;
    missing += got >= expected ? 0 : expected - got;
    ended += w->done() || w->canceled.load();
  }
  cancel_all();
  for (auto& w : ws) hist.Merge(w->hist);
  return {{"watchers", o.watchers},
          {"offered_rate", o.fanout_rate},
          {"duration_s", duration},
          {"events", expected},
          {"deliveries_expected", expected * ws.size()},
          {"received", total},
          {"missing", missing},
          {"watches_ended", ended},
          {"delivery_p50_ms", hist.PercentileMs(0.5)},
          {"delivery_p99_ms", hist.PercentileMs(0.99)},
          {"delivery_max_ms", hist.max_ms()},
          {"deliveries_per_s", static_cast<double>(total) / wall},
          {"drain_s", static_cast<double>(NowNs() - send_end) / 1e9},
          {"etcd_cpu_cores", etcd_cores},
          {"producer", TxnJson(run)}};
}

}  // namespace

std::string RunEtcdPeer(const Options& o, const TempDir& tmp, json* result) {
  EtcdProcess etcd(o.etcd, tmp.Sub("etcd"));
  ::mkdir(tmp.Sub("etcd").c_str(), 0700);
  std::cerr << "[bench] scenario 10: starting " << o.etcd << " (one member, fsync on)\n";
  if (auto err = etcd.Start(); !err.empty()) return "scenario 10: " + err;
  auto kv = epb::KV::NewStub(etcd.channel());
  const auto [fence, ferr] = PutLeader(kv.get());
  if (!ferr.empty()) return "scenario 10: " + ferr;
  const size_t value_bytes = RecordSize();
  const auto chans = MakeChannels(etcd.target(), std::min(o.streams, 4));
  json& j = *result;
  j["version"] = Version(o.etcd);
  j["value_bytes"] = value_bytes;
  j["writers"] = o.streams;
  j["window"] = kWindow;

  std::cerr << "[bench] scenario 10: etcd fenced transactions, closed loop (" << o.streams << " writers, "
            << o.duration_s << " s)\n";
  double cpu0 = ProcessCpuSeconds(etcd.pid());
  int64_t t0 = NowNs();
  TxnRun tput = DriveTxns(chans, o.streams, o.duration_s, 0, fence, value_bytes);
  j["throughput"] = TxnJson(tput);
  j["throughput"]["etcd_cpu_cores"] =
      (ProcessCpuSeconds(etcd.pid()) - cpu0) / (static_cast<double>(NowNs() - t0) / 1e9);
  if (tput.acked == 0) return "scenario 10: etcd acknowledged nothing: " + tput.error;

  // Paced at scenario 2's rate, then at scenario 6's (its stalled-watcher
  // phases pace ClusterD's ingest at that rate too).
  for (const auto& [key, rate] :
       {std::pair<const char*, double>{"paced", o.rate}, {"paced_fanout_rate", o.fanout_rate}}) {
    std::cerr << "[bench] scenario 10: etcd fenced transactions at " << rate << "/s\n";
    cpu0 = ProcessCpuSeconds(etcd.pid());
    t0 = NowNs();
    TxnRun paced = DriveTxns(chans, o.streams, o.duration_s, rate, fence, value_bytes);
    j[key] = TxnJson(paced);
    j[key]["offered_rate"] = rate;
    j[key]["etcd_cpu_cores"] = (ProcessCpuSeconds(etcd.pid()) - cpu0) / (static_cast<double>(NowNs() - t0) / 1e9);
  }

  std::string err;
  j["fanout"] = MeasureWatchFanout(o, etcd, fence, &err);
  j["rss_mib"] = ProcessRssKiB(etcd.pid()) / 1024;
  return err;
}

}  // namespace clusterd::bench
