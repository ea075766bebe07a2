#include "scenarios.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>
#include <unordered_map>

#include <grpcpp/grpcpp.h>

#include "agents.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/fault.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "sink.h"

namespace clusterd::bench {
namespace {

// SEPARATE and RESTART_BUSINESS codes of the built-in Ascend catalog.
constexpr const char* kSeparateCode = "4C4BA00C";
constexpr const char* kRestartBusinessCode = "80E01801";
// NOT_HANDLE: recorded, changes no health, so one transition is one event.
constexpr const char* kNotHandleCode = "200001002";

std::unique_ptr<grpc::ClientContext> Deadline(double seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3)));
  return ctx;
}

std::string StatusText(const grpc::Status& st) { return std::to_string(st.error_code()) + " " + st.error_message(); }

}  // namespace

uint64_t CurrentRevision(v1::ClusterService::Stub* cluster, std::string* err) {
  v1::GetSummaryResponse resp;
  auto ctx = Deadline(10);
  auto st = cluster->GetSummary(ctx.get(), v1::GetSummaryRequest(), &resp);
  if (!st.ok()) *err = "GetSummary: " + StatusText(st);
  return resp.revision();
}

std::string CreateJob(v1::JobService::Stub* jobs, const std::string& id, const std::vector<std::string>& nodes) {
  v1::CreateJobRequest req;
  v1::Job* job = req.mutable_job();
  job->set_id(id);
  job->set_kind(v1::JOB_KIND_TRAINING);
  uint32_t rank = 0;
  for (const auto& node : nodes) {
    for (uint32_t d = 0; d < kDevices; ++d) {
      auto* p = job->add_placement();
      p->set_rank(rank++);
      p->set_node(node);
      p->set_device_id(d);
    }
  }
  job->mutable_policy()->mutable_hold_down()->set_seconds(0);
  v1::CreateJobResponse resp;
  auto ctx = Deadline(10);
  auto st = jobs->CreateJob(ctx.get(), req, &resp);
  return st.ok() ? "" : "CreateJob " + id + ": " + StatusText(st);
}

namespace {

std::string DeleteJob(v1::JobService::Stub* jobs, const std::string& id) {
  v1::DeleteJobRequest req;
  req.set_id(id);
  v1::DeleteJobResponse resp;
  auto ctx = Deadline(10);
  auto st = jobs->DeleteJob(ctx.get(), req, &resp);
  return st.ok() ? "" : "DeleteJob " + id + ": " + StatusText(st);
}

double SelfCpuSeconds() { return ProcessCpuSeconds(getpid()); }

// Recovery starts seen on a Watch stream, by job id (the first one per job).
class RecoveryStarts {
 public:
  RecoveryStarts(const std::string& target, uint64_t from_revision) {
    v1::WatchRequest req;
    req.set_from_revision(from_revision);
    req.add_types(v1::EVENT_TYPE_RECOVERY_STARTED);
    watch_ = std::make_unique<WatchPool>(target, 1, req, [this](size_t, const v1::WatchResponse& resp, int64_t now) {
      std::lock_guard lock(mu_);
      for (const auto& ev : resp.events()) seen_.emplace(ev.recovery().job_id(), now);
      cv_.notify_all();
    });
  }
  // Time it was seen, or 0 after timeout.
  int64_t Wait(const std::string& job, double timeout_s) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return seen_.count(job) > 0; });
    auto it = seen_.find(job);
    return it == seen_.end() ? 0 : it->second;
  }
  // Waits until every job was seen or the deadline (steady ns) passes; how many were.
  size_t WaitAll(const std::vector<std::string>& jobs, int64_t deadline_ns) {
    std::unique_lock lock(mu_);
    auto count = [&] {
      size_t n = 0;
      for (const auto& j : jobs) n += seen_.count(j);
      return n;
    };
    cv_.wait_until(lock, Clock::time_point(std::chrono::nanoseconds(deadline_ns)),
                   [&] { return count() == jobs.size(); });
    return count();
  }
  int64_t At(const std::string& job) {
    std::lock_guard lock(mu_);
    auto it = seen_.find(job);
    return it == seen_.end() ? 0 : it->second;
  }
  size_t ended() const { return watch_->ended(); }
  std::string end_status() const { return watch_->first_end_status(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, int64_t> seen_;
  std::unique_ptr<WatchPool> watch_;
};

}  // namespace

std::vector<std::string> RecoveryClusterdArgs() {
  return {"--max-concurrent-recoveries=100000", "--max-isolated-node-percent=100"};
}

// ================================================================ scenario 5

std::string RunDecisions(const Options& o, const ClusterdProcess& cd, json* out, std::vector<Row>* rows) {
  auto channel = grpc::CreateChannel(cd.target(), grpc::InsecureChannelCredentials());
  auto jobs = v1::JobService::NewStub(channel);
  auto cluster = v1::ClusterService::NewStub(channel);
  std::string err;
  const uint64_t rev = CurrentRevision(cluster.get(), &err);
  if (!err.empty()) return err;
  RecoveryStarts starts(cd.target(), rev);
  const std::string metric = "clusterd_recovery_decision_seconds";
  const PromHistogram h0 = PromHistogram::Parse(cd.MetricsText(), metric);

  // --- latency: one fault at a time on an idle cluster, one job per node
  // (8 ranks), the job deleted after its sample. Sample 0 is a warm-up.
  const int samples = o.decision_samples;
  std::cerr << "[bench] scenario 5: decision latency, " << samples << " single faults\n";
  std::vector<int64_t> decision, ack, added;
  std::vector<int64_t> by_code[2];
  int missed = 0;
  {
    AgentPool pool(cd.target(), NodeNames("bench-dec-", samples + 1), 2);
    if (auto e = pool.Connect(); !e.empty()) return "scenario 5: " + e;
    for (int i = 0; i <= samples; ++i) {
      if (auto e = CreateJob(jobs.get(), "bench-dec-job-" + std::to_string(i), {pool.name(i)}); !e.empty()) return e;
    }
    for (int i = 0; i <= samples; ++i) {
      const std::string job = "bench-dec-job-" + std::to_string(i);
      const bool separate = i % 2 == 0;
      const uint64_t seq = pool.Send(i, v1::TRANSITION_ACTION_RAISE, static_cast<uint32_t>(i % kDevices),
                                     separate ? kSeparateCode : kRestartBusinessCode,
                                     separate ? v1::FAULT_LEVEL_SEPARATE : v1::FAULT_LEVEL_RESTART_BUSINESS);
      const int64_t t0 = pool.SentNs(i, seq);
      const int64_t seen = starts.Wait(job, 5);
      if (!pool.WaitAllAcked(10)) return "scenario 5: a transition was not acknowledged within 10 s";
      if (i > 0) {
        if (seen == 0) {
          ++missed;
        } else {
          const int64_t acked = pool.AckedNs(i, seq);
          decision.push_back(seen - t0);
          ack.push_back(acked - t0);
          added.push_back(seen - acked);
          by_code[separate ? 0 : 1].push_back(seen - t0);
        }
      }
      if (auto e = DeleteJob(jobs.get(), job); !e.empty()) return e;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (auto e = pool.Close(); !e.empty()) return "scenario 5: " + e;
  }
  const PromHistogram h1 = PromHistogram::Parse(cd.MetricsText(), metric);

  // --- storm: storm_nodes x 8 devices within one second, one job per 8 nodes.
  const int nodes = o.storm_nodes;
  const int njobs = (nodes + 7) / 8;
  const int64_t faults = static_cast<int64_t>(nodes) * kDevices;
  std::cerr << "[bench] scenario 5: storm, " << nodes << " nodes x " << kDevices << " devices within 1 s, " << njobs
            << " jobs\n";
  std::vector<std::string> job_ids = NodeNames("bench-storm-job-", njobs);
  std::vector<int64_t> job_first(njobs, 0), storm_lat;
  int64_t storm_start = 0, storm_sent_end = 0, last_seen = 0;
  size_t decided = 0;
  std::vector<int64_t> storm_acks;
  double cd_cpu = NAN;
  {
    AgentPool pool(cd.target(), NodeNames("bench-storm-", nodes), 4);
    if (auto e = pool.Connect(120); !e.empty()) return "scenario 5 storm: " + e;
    for (int k = 0; k < njobs; ++k) {
      std::vector<std::string> members;
      for (int n = k * 8; n < std::min(nodes, k * 8 + 8); ++n) members.push_back(pool.name(n));
      if (auto e = CreateJob(jobs.get(), job_ids[k], members); !e.empty()) return e;
    }
    const double cpu0 = cd.CpuSeconds();
    storm_start = NowNs() + 1'000'000;
    // Device-major: every node has its first fault in the first eighth of the second.
    for (int64_t n = 0; n < faults; ++n) {
      const int64_t due =
          storm_start + static_cast<int64_t>(1e9 * static_cast<double>(n) / static_cast<double>(faults));
      if (due > NowNs()) SleepUntilNs(due);
      const int node = static_cast<int>(n % nodes);
      const uint32_t dev = static_cast<uint32_t>(n / nodes);
      const bool separate = dev % 2 == 0;
      const uint64_t seq =
          pool.Send(node, v1::TRANSITION_ACTION_RAISE, dev, separate ? kSeparateCode : kRestartBusinessCode,
                    separate ? v1::FAULT_LEVEL_SEPARATE : v1::FAULT_LEVEL_RESTART_BUSINESS);
      if (job_first[node / 8] == 0) job_first[node / 8] = pool.SentNs(node, seq);
    }
    storm_sent_end = NowNs();
    decided = starts.WaitAll(job_ids, storm_start + static_cast<int64_t>(12e9));
    if (!pool.WaitAllAcked(30)) return "scenario 5 storm: transitions not acknowledged within 30 s";
    cd_cpu = cd.CpuSeconds() - cpu0;
    for (int k = 0; k < njobs; ++k) {
      const int64_t seen = starts.At(job_ids[k]);
      if (seen == 0) continue;
      storm_lat.push_back(seen - job_first[k]);
      last_seen = std::max(last_seen, seen);
    }
    storm_acks = pool.AckLatencies(storm_start);
    // Leave no running recovery behind for the next scenarios.
    for (const auto& id : job_ids) {
      if (auto e = DeleteJob(jobs.get(), id); !e.empty()) return e;
    }
    if (auto e = pool.Close(); !e.empty()) return "scenario 5 storm: " + e;
  }
  const PromHistogram h2 = PromHistogram::Parse(cd.MetricsText(), metric);
  if (starts.ended() > 0) return "scenario 5: the Watch stream ended: " + starts.end_status();

  // --- report
  json lat = LatencyJson(decision);
  lat["missed"] = missed;
  lat["ack"] = LatencyJson(ack);
  lat["decision_minus_ack"] = LatencyJson(added);
  lat["separate"] = LatencyJson(by_code[0]);
  lat["restart_business"] = LatencyJson(by_code[1]);
  const PromHistogram hl = h1.Minus(h0), hs = h2.Minus(h1);
  auto hist_json = [](const PromHistogram& h) {
    return json{{"count", h.count},
                {"mean_ms", h.MeanMs()},
                {"p50_bucket_le_ms", h.QuantileUpperMs(0.5)},
                {"p99_bucket_le_ms", h.QuantileUpperMs(0.99)}};
  };
  lat["clusterd_recovery_decision_seconds"] = hist_json(hl);
  std::vector<int64_t> dsorted = decision, asorted = ack, storm_sorted = storm_lat, storm_ack_sorted = storm_acks;
  const double storm_ack_p99 = Percentile(storm_ack_sorted, 0.99);
  const double p99 = Percentile(dsorted, 0.99), p50 = Percentile(dsorted, 0.5);
  const double ack_p99 = Percentile(asorted, 0.99), ack_p50 = Percentile(asorted, 0.5);
  const bool lat_met = missed == 0 && !decision.empty() && p99 < 100;
  lat["target_p99_max_ms"] = 100;
  lat["met"] = lat_met;

  const double storm_max = storm_sorted.empty() ? NAN : Percentile(storm_sorted, 1.0);
  const double storm_p50 = Percentile(storm_sorted, 0.5);
  const double last_ms = last_seen ? static_cast<double>(last_seen - storm_start) / 1e6 : NAN;
  const bool storm_met = decided == job_ids.size() && storm_max < 2000;
  json storm = {{"nodes", nodes},
                {"devices_per_node", kDevices},
                {"faults", faults},
                {"jobs", njobs},
                {"jobs_decided", decided},
                {"send_spread_ms", static_cast<double>(storm_sent_end - storm_start) / 1e6},
                {"decision_after_first_fault_of_job", LatencyJson(storm_lat)},
                {"last_decision_after_storm_start_ms", last_ms},
                {"ack", LatencyJson(storm_acks)},
                {"clusterd_cpu_seconds", cd_cpu},
                {"clusterd_recovery_decision_seconds", hist_json(hs)},
                {"target_max_ms", 2000},
                {"met", storm_met}};
  (*out)["scenario5_decisions"] = {{"latency", lat}, {"storm", storm}};

  rows->push_back({"5 decisions", "fault -> RECOVERY_STARTED seen p50 (" + std::to_string(decision.size()) + " faults)",
                   Fmt(p50, " ms"), Fmt(ack_p50, " ms") + " ack p50", "", "", ""});
  rows->push_back({"5 decisions", "fault -> RECOVERY_STARTED seen p99", Fmt(p99, " ms"),
                   Fmt(ack_p99, " ms") + " ack p99", Fmt(p99 - ack_p99, " ms") + " over", "< 100 ms, none missed",
                   std::string(Met(lat_met)) + (missed ? " (" + std::to_string(missed) + " missed)" : "")});
  rows->push_back({"5 decisions", "clusterd_recovery_decision_seconds p99",
                   "<= " + Fmt(hl.QuantileUpperMs(0.99), " ms") + " (mean " + Fmt(hl.MeanMs(), " ms") + ")", "", "", "",
                   ""});
  rows->push_back({"5 storm", std::to_string(nodes) + " nodes x 8 faults in 1 s: jobs decided",
                   std::to_string(decided) + " / " + std::to_string(njobs), "", "", "all",
                   Met(decided == job_ids.size())});
  rows->push_back({"5 storm", "decision after job's first fault p50 / max",
                   Fmt(storm_p50, " ms") + " / " + Fmt(storm_max, " ms"), "", "", "every one < 2 s", Met(storm_met)});
  rows->push_back({"5 storm", "last decision after storm start", Fmt(last_ms, " ms"),
                   Fmt(storm_ack_p99, " ms") + " storm ack p99", "", "", ""});
  return "";
}

// ================================================================ scenario 6

namespace {

struct FanoutResult {
  uint64_t expected = 0, received_min = 0, missing = 0;
  size_t watchers_complete = 0, watchers_ended = 0;
  std::string end_status;
  LatencyHist hist;
  double sent_per_s = 0, server_cores = NAN, bench_cores = NAN;
  double drain_s = 0, duration_s = 0;
  double delivered_per_s = 0;  // event deliveries per second over sending + drain
  uint64_t responses = 0;      // Watch responses received, all watchers (warm-up included)
  size_t event_bytes = 0;      // serialized size of one delivered raise event
};

struct WatcherState {
  LatencyHist hist;                 // the watcher's callback only
  std::atomic<uint64_t> events{0};  // measured events received
  std::atomic<uint64_t> warm{0};    // warm-up events received
  std::atomic<uint64_t> responses{0};
};

// seq of a producer's transition from its event: odd seq k raises device
// ((k-1)/2) % 8 (that device's raise number ((k-1)/2)/8 + 1), k+1 clears it.
uint64_t SeqOf(const v1::Event& ev) {
  const uint64_t count = std::max<uint64_t>(1, ev.fault().count());
  const uint64_t seq = 2 * ((count - 1) * kDevices + ev.fault().device_id()) + 1;
  return ev.type() == v1::EVENT_TYPE_FAULT_CLEARED ? seq + 1 : seq;
}

// W watchers on `target` (clusterd, or the raw sink: `server` is its pid, for
// CPU) and 16 agent streams producing R events/s; see docs/performance.md.
// subscribed_first: the server keeps no history (the sink), so wait until
// every watcher is subscribed (its headers arrived) before publishing.
FanoutResult MeasureFanout(const Options& o, const std::string& target, pid_t server, bool subscribed_first,
                           std::string* err) {
  FanoutResult r;
  r.duration_s = o.short_mode ? std::min(o.duration_s, 1.5) : o.duration_s;
  const int producers = std::min(o.streams, 16);
  const double duration = r.duration_s;
  AgentPool prod(target, NodeNames("bench-fan-", producers), 2);
  if (auto e = prod.Connect(); !e.empty()) {
    *err = "scenario 6: " + e;
    return r;
  }
  // Send times by (producer, seq), written by the pacer just before the send.
  const uint64_t per_producer = static_cast<uint64_t>(std::ceil(o.fanout_rate * duration / producers)) + 16;
  std::vector<std::unique_ptr<std::atomic<int64_t>[]>> sent_ns;
  for (int p = 0; p < producers; ++p) sent_ns.push_back(std::make_unique<std::atomic<int64_t>[]>(per_producer + 1));

  auto cluster = v1::ClusterService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  const uint64_t rev = CurrentRevision(cluster.get(), err);
  if (!err->empty()) return r;
  v1::WatchRequest req;
  req.set_from_revision(rev);
  req.add_types(v1::EVENT_TYPE_FAULT_RAISED);
  req.add_types(v1::EVENT_TYPE_FAULT_CLEARED);
  std::vector<WatcherState> ws(static_cast<size_t>(o.watchers));
  std::unordered_map<std::string, int> producer_of;
  for (int p = 0; p < producers; ++p) producer_of[prod.name(p)] = p;
  // Producer 0's seq 1 and 2 are the warm-up.
  auto on_resp = [&](size_t w, const v1::WatchResponse& resp, int64_t now) {
    WatcherState& s = ws[w];
    s.responses.fetch_add(1, std::memory_order_relaxed);
    for (const auto& ev : resp.events()) {
      auto it = producer_of.find(ev.node());
      if (it == producer_of.end()) continue;
      const uint64_t seq = SeqOf(ev);
      if (it->second == 0 && seq <= 2) {
        if (w == 0 && seq == 1) r.event_bytes = ev.ByteSizeLong();
        s.warm.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (seq <= per_producer) {
        const int64_t t = sent_ns[it->second][seq].load(std::memory_order_acquire);
        if (t > 0) s.hist.Add(now - t);
      }
      s.events.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::cerr << "[bench] scenario 6: " << o.watchers << " watchers, " << o.fanout_rate << " events/s from " << producers
            << " agent streams, " << duration << " s\n";
  WatchPool watchers(target, o.watchers, req, on_resp, 4);
  if (subscribed_first) {
    const int64_t deadline = NowNs() + static_cast<int64_t>(60e9);
    while (watchers.headers() < ws.size() && watchers.ended() == 0 && NowNs() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // Warm-up: one raise and one clear reach every watcher (all subscribed).
  for (int k = 1; k <= 2; ++k) {
    const uint64_t seq = prod.Send(0, k == 1 ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR, 0,
                                   kNotHandleCode, v1::FAULT_LEVEL_NOT_HANDLE);
    sent_ns[0][seq] = prod.SentNs(0, seq);
  }
  const int64_t warm_deadline = NowNs() + static_cast<int64_t>(60e9);
  for (;;) {
    size_t ready = 0;
    for (auto& s : ws) ready += s.warm.load() >= 2;
    if (ready == ws.size() || watchers.ended() > 0) break;
    if (NowNs() > warm_deadline) {
      *err = "scenario 6: only " + std::to_string(ready) + " of " + std::to_string(ws.size()) +
             " watchers got the warm-up events within 60 s";
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  const double cpu0 = ProcessCpuSeconds(server), self0 = SelfCpuSeconds();
  const int64_t start = NowNs() + 1'000'000;
  const int64_t end = start + static_cast<int64_t>(duration * 1e9);
  // Per producer, k = the next seq: 3 on producer 0 (after the warm-up), 1 elsewhere.
  std::vector<uint64_t> next(producers, 1);
  next[0] = 3;
  uint64_t sent = 0;
  for (uint64_t n = 0;; ++n) {
    const int64_t due = start + static_cast<int64_t>(1e9 * static_cast<double>(n) / o.fanout_rate);
    if (due >= end) break;
    if (due > NowNs()) SleepUntilNs(due);
    const int p = static_cast<int>(n % producers);
    const uint64_t k = next[p]++;
    if (k > per_producer) break;
    sent_ns[p][k].store(NowNs(), std::memory_order_release);  // before any watcher can see it
    const uint64_t seq =
        prod.Send(p, k % 2 == 1 ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR,
                  static_cast<uint32_t>(((k - 1) / 2) % kDevices), kNotHandleCode, v1::FAULT_LEVEL_NOT_HANDLE);
    if (seq != k) {
      *err = "scenario 6: producer seq out of step";
      return r;
    }
    ++sent;
  }
  const int64_t send_end = NowNs();
  r.sent_per_s = static_cast<double>(sent) / (static_cast<double>(send_end - start) / 1e9);
  r.expected = sent;
  if (!prod.WaitAllAcked(30)) {
    *err = "scenario 6: transitions not acknowledged within 30 s";
    return r;
  }
  // Let every watcher catch up (or be ended by clusterd).
  const int64_t drain_deadline = NowNs() + static_cast<int64_t>(120e9);
  for (;;) {
    size_t complete = 0;
    for (auto& s : ws) complete += s.events.load() >= r.expected;
    if (complete == ws.size() || complete + watchers.ended() >= ws.size() || NowNs() > drain_deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.drain_s = static_cast<double>(NowNs() - send_end) / 1e9;
  const double wall = static_cast<double>(NowNs() - start) / 1e9;
  r.server_cores = (ProcessCpuSeconds(server) - cpu0) / wall;
  r.bench_cores = (SelfCpuSeconds() - self0) / wall;
  r.watchers_ended = watchers.ended();
  r.end_status = watchers.first_end_status();
  watchers.Cancel();
  r.received_min = UINT64_MAX;
  for (auto& s : ws) {
    const uint64_t got = s.events.load();
    r.received_min = std::min(r.received_min, got);
    r.watchers_complete += got >= r.expected;
    r.missing += got >= r.expected ? 0 : r.expected - got;
    r.hist.Merge(s.hist);
  }
  {
    uint64_t total = 0;
    for (auto& s : ws) {
      total += s.events.load();
      r.responses += s.responses.load();
    }
    r.delivered_per_s = static_cast<double>(total) / wall;
  }
  if (auto e = prod.Close(); !e.empty()) *err = "scenario 6: " + e;
  return r;
}

}  // namespace

std::string RunFanout(const Options& o, const ClusterdProcess& cd, json* out, std::vector<Row>* rows) {
  std::string err;
  FanoutResult f = MeasureFanout(o, cd.target(), cd.pid(), false, &err);
  if (!err.empty()) return err;
  const double p99 = f.hist.PercentileMs(0.99);
  const bool fan_met = f.missing == 0 && f.watchers_ended == 0 && p99 < 50;
  // The same fan-out from the raw gRPC sink, in its own process: what gRPC
  // alone delivers on this machine with these watchers.
  FanoutResult sf;
  {
    ChildProcess proc;
    int port = 0;
    std::cerr << "[bench] scenario 6: the same fan-out from the raw gRPC sink\n";
    if (auto e = StartSinkProcess(&proc, &port); !e.empty()) return "scenario 6 (sink): " + e;
    sf = MeasureFanout(o, "127.0.0.1:" + std::to_string(port), proc.pid(), true, &err);
    if (!err.empty()) return "scenario 6 (sink): " + err;
  }
  const double sink_p99 = sf.hist.PercentileMs(0.99);
  const double fan_ratio = f.delivered_per_s / sf.delivered_per_s;

  // Stalled watcher: a Watch stream on its own connection whose reader never
  // reads (no BDP probing: the 64 KiB stream window fills at once). Ingest
  // ack p99, scenario 2 style at the fan-out rate, without and with it,
  // interleaved (A B, or A B A B in a full run) so drift hits both.
  const int pairs = o.short_mode ? 1 : 2;
  const double phase_s = o.short_mode ? std::min(o.duration_s, 1.0) : o.duration_s;
  std::vector<double> without, with, ended_after;
  const std::string lag_metric = "clusterd_watch_lagging_ended_total";
  const double lagging0 = cd.Metric(lag_metric);
  // Runs one ingest phase while polling /metrics every 250 ms (in both
  // phases, so both pay for it) for clusterd ending a lagging watcher;
  // returns the phase and when that happened (s after the start, or NAN).
  auto phase = [&](const std::string& name, double* ended_s) {
    std::atomic<bool> stop{false};
    const double before = cd.Metric(lag_metric);
    const int64_t t0 = NowNs();
    *ended_s = NAN;
    std::thread poll([&] {
      while (!stop) {
        if (cd.Metric(lag_metric) > before) {
          *ended_s = static_cast<double>(NowNs() - t0) / 1e9;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    });
    auto r = DriveAgents(cd.target(), name, o.streams, phase_s, o.fanout_rate);
    stop = true;
    poll.join();
    return r;
  };
  for (int i = 0; i < pairs; ++i) {
    double ignored = NAN, ended = NAN;
    std::cerr << "[bench] scenario 6: ingest at " << o.fanout_rate << "/s without a stalled watcher\n";
    auto a = phase("stall-a" + std::to_string(i), &ignored);
    if (!a.ok) return "scenario 6: " + a.error;
    without.push_back(a.p99_ms);
    std::cerr << "[bench] scenario 6: ingest at " << o.fanout_rate << "/s with a stalled watcher\n";
    grpc::ChannelArguments args;
    args.SetInt("bench.stalled", i);
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    auto stub =
        v1::ClusterService::NewStub(grpc::CreateCustomChannel(cd.target(), grpc::InsecureChannelCredentials(), args));
    auto cluster = v1::ClusterService::NewStub(grpc::CreateChannel(cd.target(), grpc::InsecureChannelCredentials()));
    const uint64_t rev = CurrentRevision(cluster.get(), &err);
    if (!err.empty()) return err;
    v1::WatchRequest req;
    req.set_from_revision(rev);
    grpc::ClientContext ctx;
    auto stalled = stub->Watch(&ctx, req);  // never read
    auto b = phase("stall-b" + std::to_string(i), &ended);
    ctx.TryCancel();
    stalled->Finish();
    if (!b.ok) return "scenario 6: " + b.error;
    with.push_back(b.p99_ms);
    ended_after.push_back(ended);
  }
  const double lagging = cd.Metric("clusterd_watch_lagging_ended_total") - lagging0;
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? NAN : s / static_cast<double>(v.size());
  };
  const double p_without = mean(without), p_with = mean(with);
  const double rise = p_with / p_without;
  const bool stall_met = rise <= 1.10;

  auto fan_json = [&](const FanoutResult& x) {
    return json{{"sent_per_s", x.sent_per_s},
                {"duration_s", x.duration_s},
                {"events_per_watcher", x.expected},
                {"watchers_complete", x.watchers_complete},
                {"watchers_ended_by_server", x.watchers_ended},
                {"first_end_status", x.end_status},
                {"missing_events_total", x.missing},
                {"fewest_received", x.received_min},
                {"deliveries", x.hist.count()},
                {"delivery_latency_ms",
                 {{"p50", x.hist.PercentileMs(0.5)},
                  {"p90", x.hist.PercentileMs(0.9)},
                  {"p99", x.hist.PercentileMs(0.99)},
                  {"max", x.hist.max_ms()}}},
                {"drain_after_last_send_s", x.drain_s},
                {"deliveries_per_s", x.delivered_per_s},
                {"responses", x.responses},
                {"events_per_response",
                 x.responses > 0 ? static_cast<double>(x.hist.count()) / static_cast<double>(x.responses) : NAN},
                {"server_cpu_cores", x.server_cores},
                {"bench_cpu_cores", x.bench_cores},
                {"event_bytes", x.event_bytes}};
  };
  json s6 = fan_json(f);
  s6["watchers"] = o.watchers;
  s6["offered_rate"] = o.fanout_rate;
  s6["baseline_sink"] = fan_json(sf);
  s6["deliveries_per_s_ratio_vs_sink"] = f.delivered_per_s / sf.delivered_per_s;
  s6["targets"] = {{"missing", 0},
                   {"p99_max_ms", 50},
                   {"met", fan_met},
                   {"deliveries_ratio_min", 2},
                   {"met_deliveries", fan_ratio >= 2}};
  s6["stalled_watcher"] = {{"ingest_rate", o.fanout_rate},
                           {"streams", o.streams},
                           {"phase_s", phase_s},
                           {"ack_p99_without_ms", without},
                           {"ack_p99_with_ms", with},
                           {"ratio", rise},
                           {"watchers_ended_lagging", lagging},
                           {"stalled_watcher_ended_by_clusterd_after_s", ended_after},
                           {"target_ratio_max", 1.10},
                           {"met", stall_met}};
  (*out)["scenario6_fanout"] = s6;

  const std::string shape = std::to_string(o.watchers) + " watchers @" + Fmt(f.sent_per_s, "/s");
  rows->push_back({"6 fan-out", shape + ": events missing",
                   std::to_string(f.missing) + " of " + std::to_string(f.expected * static_cast<uint64_t>(o.watchers)),
                   "", "", "0", Met(f.missing == 0 && f.watchers_ended == 0)});
  rows->push_back({"6 fan-out", "delivery p50 / p99 (send -> watcher)",
                   Fmt(f.hist.PercentileMs(0.5), " ms") + " / " + Fmt(p99, " ms"),
                   Fmt(sf.hist.PercentileMs(0.5), " ms") + " / " + Fmt(sink_p99, " ms") + " sink", "", "p99 < 50 ms",
                   Met(f.hist.count() > 0 && p99 < 50)});
  rows->push_back({"6 fan-out", "deliveries/s (events x watchers)", Fmt(f.delivered_per_s, "/s"),
                   Fmt(sf.delivered_per_s, "/s") + " sink", Fmt(fan_ratio, "x"), ">= 2x", Met(fan_ratio >= 2)});
  std::string ended_note;
  if (!ended_after.empty() && !std::isnan(ended_after[0]))
    ended_note = " (ended by clusterd after " + Fmt(ended_after[0], " s") + ")";
  rows->push_back({"6 fan-out", "ingest ack p99 with a stalled watcher" + ended_note, Fmt(p_with, " ms"),
                   Fmt(p_without, " ms") + " without", Fmt(rise, "x"), "<= 1.10x", Met(stall_met)});
  return "";
}

// ================================================================ scenario 8

namespace {

// /dev/kmsg can be opened but not read in some containers (EPERM).
bool KmsgReadable() {
  const int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[8192];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  const bool ok = n >= 0 || errno == EAGAIN || errno == EPIPE;  // EPIPE: the record we hit was overwritten
  ::close(fd);
  return ok;
}

}  // namespace

std::string RunNodedFootprint(const Options& o, const TempDir& tmp, const ClusterdProcess& cd, json* out,
                              std::vector<Row>* rows) {
  const bool kmsg = KmsgReadable();
  const int http = FreeLoopbackPort();
  const std::string node = "bench-noded";
  std::vector<std::string> args = {o.noded,
                                   "--server=" + cd.target(),
                                   "--node-name=" + node,
                                   "--http-listen=127.0.0.1:" + std::to_string(http),
                                   "--state-dir=" + tmp.Sub("noded-state"),
                                   "--accelerator=sim",
                                   "--sim-devices=8",
                                   std::string("--kmsg-path=") + (kmsg ? "/dev/kmsg" : "")};
  ChildProcess noded;
  if (auto e = noded.Spawn(args, tmp.Sub("noded.log")); !e.empty()) return "scenario 8: " + e;
  // Warm-up: connected to clusterd, then a few collection rounds.
  auto cluster = v1::ClusterService::NewStub(grpc::CreateChannel(cd.target(), grpc::InsecureChannelCredentials()));
  const int64_t deadline = NowNs() + static_cast<int64_t>(30e9);
  bool connected = false;
  while (!connected && NowNs() < deadline) {
    if (noded.Exited()) return "scenario 8: noded exited during start (see its log: " + tmp.Sub("noded.log") + ")";
    v1::GetNodeRequest req;
    req.set_name(node);
    v1::GetNodeResponse resp;
    auto ctx = Deadline(2);
    connected = cluster->GetNode(ctx.get(), req, &resp).ok() && resp.node().connected();
    if (!connected) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!connected) return "scenario 8: noded did not connect to clusterd within 30 s";
  const double warmup = o.short_mode ? 0.5 : 3.0;
  std::cerr << "[bench] scenario 8: noded footprint (" << warmup << " s warm-up, " << o.footprint_s << " s sampled)\n";
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  const double cpu0 = ProcessCpuSeconds(noded.pid());
  const int64_t t0 = NowNs(), end = t0 + static_cast<int64_t>(o.footprint_s * 1e9);
  double rss_max = 0, rss_last = 0;
  int threads = 0;
  while (NowNs() < end) {
    rss_last = ProcessRssKiB(noded.pid());
    rss_max = std::max(rss_max, rss_last);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  const double cpu = ProcessCpuSeconds(noded.pid()) - cpu0;
  const double wall = static_cast<double>(NowNs() - t0) / 1e9;
  {
    std::ifstream st("/proc/" + std::to_string(noded.pid()) + "/status");
    for (std::string line; std::getline(st, line);) {
      if (line.rfind("Threads:", 0) == 0) threads = std::stoi(line.substr(8));
    }
  }
  if (noded.Exited()) return "scenario 8: noded exited while sampled";
  noded.Stop();
  const double rss_mib = rss_max / 1024, cpu_pct = 100 * cpu / wall;
  const bool rss_met = rss_mib < 20, cpu_met = cpu_pct < 1;
  (*out)["scenario8_noded_footprint"] = {{"rss_max_mib", rss_mib},
                                         {"rss_last_mib", rss_last / 1024},
                                         {"cpu_percent_of_one_core", cpu_pct},
                                         {"cpu_seconds", cpu},
                                         {"sampled_s", wall},
                                         {"warmup_s", warmup},
                                         {"threads", threads},
                                         {"kmsg_followed", kmsg},
                                         {"accelerator", "sim, 8 devices"},
                                         {"cpu_tick_s", 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK))},
                                         {"targets", {{"rss_max_mib", 20}, {"cpu_max_percent", 1}}},
                                         {"met_rss", rss_met},
                                         {"met_cpu", cpu_met}};
  rows->push_back(
      {"8 noded", "RSS max over " + Fmt(wall, " s"), Fmt(rss_mib, " MiB"), "", "", "< 20 MiB", Met(rss_met)});
  rows->push_back({"8 noded", std::string("CPU (sim, 8 devices") + (kmsg ? ", kmsg" : ", no kmsg") + ")",
                   Fmt(cpu_pct, " % of a core"), "", "", "< 1 %", Met(cpu_met)});
  return "";
}

// ================================================================ scenario 9

namespace {

struct GhzResult {
  double rps = NAN, p50_ms = NAN, p99_ms = NAN;
  double ghz_cpu_cores = NAN;  // the load generator's own CPU use
  uint64_t count = 0, errors = 0;
  json error_distribution;
  json raw;
};

// Runs ghz for duration_s against target; "" or why it failed.
std::string RunGhz(const Options& o, const std::string& target, const std::string& call, const std::string& data,
                   GhzResult* r) {
  char dur[32];
  std::snprintf(dur, sizeof(dur), "%dms", static_cast<int>(o.query_s * 1000));
  // --duration-stop=ignore: calls still in flight at the end are neither
  // counted nor reported as errors.
  const std::string cmd = "'" + o.ghz + "' --insecure --call " + call + " -d '" + data + "' -z " + dur +
                          " --duration-stop=ignore -c 16 --connections 2 -O json " + target + " 2>&1";
  rusage ru0{}, ru1{};
  getrusage(RUSAGE_CHILDREN, &ru0);
  const int64_t t0 = NowNs();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "popen ghz failed";
  std::string text;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) text.append(buf, n);
  const int rc = pclose(p);
  getrusage(RUSAGE_CHILDREN, &ru1);
  auto secs = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6; };
  r->ghz_cpu_cores = (secs(ru1.ru_utime) + secs(ru1.ru_stime) - secs(ru0.ru_utime) - secs(ru0.ru_stime)) /
                     (static_cast<double>(NowNs() - t0) / 1e9);
  json j = json::parse(text, nullptr, false);
  if (rc != 0 || j.is_discarded() || !j.is_object())
    return "ghz " + call + " failed (status " + std::to_string(rc) + "): " + text.substr(0, 500);
  r->rps = j.value("rps", NAN);
  r->count = j.value("count", uint64_t{0});
  if (j.contains("latencyDistribution") && j["latencyDistribution"].is_array()) {
    for (const auto& d : j["latencyDistribution"]) {
      const int pct = d.value("percentage", 0);
      const double ms = d.value("latency", 0.0) / 1e6;
      if (pct == 50) r->p50_ms = ms;
      if (pct == 99) r->p99_ms = ms;
    }
  }
  if (j.contains("statusCodeDistribution") && j["statusCodeDistribution"].is_object()) {
    for (const auto& [code, n] : j["statusCodeDistribution"].items()) {
      if (code != "OK") r->errors += n.get<uint64_t>();
    }
  }
  if (j.contains("errorDistribution")) r->error_distribution = j["errorDistribution"];
  j.erase("details");
  r->raw = j;
  return "";
}

json GhzJson(const GhzResult& r) {
  json j = {{"rps", r.rps},     {"p50_ms", r.p50_ms}, {"p99_ms", r.p99_ms},
            {"count", r.count}, {"errors", r.errors}, {"ghz_cpu_cores", r.ghz_cpu_cores}};
  if (r.errors) j["error_distribution"] = r.error_distribution;
  return j;
}

}  // namespace

std::string RunQueries(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  if (o.ghz.empty()) {
    std::cout << "note: scenario 9 (query QPS) skipped: ghz is not installed (scripts/bench.sh installs it into "
                 "$HOME/go/bin)\n";
    (*out)["scenario9_queries"] = {{"skipped", "ghz not installed"}};
    rows->push_back({"9 queries", "skipped: ghz not installed", "", "", "", "", ""});
    return "";
  }
  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-query"));
  if (auto e = cd.Start(); !e.empty()) return "scenario 9: " + e;
  // Register the nodes: Hellos in waves of at most 1,000 streams, closed
  // after the Welcome (disconnected nodes stay stored).
  std::cerr << "[bench] scenario 9: registering " << o.query_nodes << " nodes\n";
  const int64_t reg0 = NowNs();
  for (int first = 0; first < o.query_nodes; first += 1000) {
    std::vector<std::string> names;
    for (int i = first; i < std::min(o.query_nodes, first + 1000); ++i) names.push_back("bench-q-" + std::to_string(i));
    AgentPool pool(cd.target(), std::move(names), 4);
    if (auto e = pool.Connect(120); !e.empty()) return "scenario 9: " + e;
    if (auto e = pool.Close(); !e.empty()) return "scenario 9: " + e;
  }
  const double reg_s = static_cast<double>(NowNs() - reg0) / 1e9;
  // The real answers, which the sink then serves canned.
  auto cluster = v1::ClusterService::NewStub(grpc::CreateChannel(cd.target(), grpc::InsecureChannelCredentials()));
  v1::GetSummaryResponse summary;
  v1::ListNodesResponse list;
  {
    auto ctx = Deadline(10);
    auto st = cluster->GetSummary(ctx.get(), v1::GetSummaryRequest(), &summary);
    if (!st.ok()) return "scenario 9: GetSummary: " + StatusText(st);
    v1::ListNodesRequest req;
    req.set_page_size(100);
    auto ctx2 = Deadline(10);
    st = cluster->ListNodes(ctx2.get(), req, &list);
    if (!st.ok()) return "scenario 9: ListNodes: " + StatusText(st);
  }
  if (static_cast<int>(summary.nodes().total()) != o.query_nodes) {
    return "scenario 9: " + std::to_string(summary.nodes().total()) + " nodes stored, expected " +
           std::to_string(o.query_nodes);
  }
  const size_t list_bytes = list.ByteSizeLong(), summary_bytes = summary.ByteSizeLong();
  const std::string list_data = "{\"page_size\":100}";
  GhzResult health, sink_sum, sink_list, sum, list_r;
  {
    SinkServer sink;
    sink.SetQueryAnswers(list, summary);
    const std::string target = "127.0.0.1:" + std::to_string(sink.port());
    std::cerr << "[bench] scenario 9: ghz on the raw gRPC sink: Health/Check, canned GetSummary, canned ListNodes\n";
    if (auto e = RunGhz(o, target, "grpc.health.v1.Health/Check", "{}", &health); !e.empty()) return "scenario 9: " + e;
    if (auto e = RunGhz(o, target, "clusterd.v1.ClusterService/GetSummary", "{}", &sink_sum); !e.empty()) {
      return "scenario 9: " + e;
    }
    if (auto e = RunGhz(o, target, "clusterd.v1.ClusterService/ListNodes", list_data, &sink_list); !e.empty()) {
      return "scenario 9: " + e;
    }
  }
  std::cerr << "[bench] scenario 9: ghz on clusterd: GetSummary, ListNodes (first page of 100)\n";
  const double cpu0 = cd.CpuSeconds();
  if (auto e = RunGhz(o, cd.target(), "clusterd.v1.ClusterService/GetSummary", "{}", &sum); !e.empty()) {
    return "scenario 9: " + e;
  }
  const double cpu1 = cd.CpuSeconds();
  if (auto e = RunGhz(o, cd.target(), "clusterd.v1.ClusterService/ListNodes", list_data, &list_r); !e.empty()) {
    return "scenario 9: " + e;
  }
  const double cpu2 = cd.CpuSeconds();
  cd.Stop();
  json j = {{"nodes_stored", o.query_nodes},
            {"registration_s", reg_s},
            {"ghz", {{"concurrency", 16}, {"connections", 2}, {"duration_s", o.query_s}}},
            {"list_nodes_response_bytes", list_bytes},
            {"get_summary_response_bytes", summary_bytes},
            {"baseline_health_check", GhzJson(health)},
            {"baseline_sink_get_summary", GhzJson(sink_sum)},
            {"baseline_sink_list_nodes", GhzJson(sink_list)},
            {"get_summary", GhzJson(sum)},
            {"list_nodes_page_100", GhzJson(list_r)},
            {"get_summary_ratio_vs_sink", sum.rps / sink_sum.rps},
            {"list_nodes_ratio_vs_sink", list_r.rps / sink_list.rps},
            {"get_summary_ratio_vs_health_check", sum.rps / health.rps},
            {"list_nodes_ratio_vs_health_check", list_r.rps / health.rps},
            {"targets", "none given in the issue for scenario 9: figures and ratios only"}};
  j["get_summary"]["clusterd_cpu_cores"] = (cpu1 - cpu0) / o.query_s;
  j["list_nodes_page_100"]["clusterd_cpu_cores"] = (cpu2 - cpu1) / o.query_s;
  (*out)["scenario9_queries"] = j;

  auto value = [](const GhzResult& r) {
    return Fmt(r.rps, " req/s") + (r.errors ? " (" + std::to_string(r.errors) + " errors)" : std::string());
  };
  auto base = [&](const GhzResult& r, const std::string& what) { return Fmt(r.rps, " req/s") + " " + what; };
  rows->push_back({"baseline", "raw gRPC unary Health/Check (ghz -c 16)", value(health), "", "", "", ""});
  rows->push_back({"9 queries",
                   "GetSummary, " + std::to_string(o.query_nodes) + " nodes, p99 " + Fmt(sum.p99_ms, " ms"), value(sum),
                   base(sink_sum, "sink, same answer"), Fmt(sum.rps / sink_sum.rps, "x"), "(none given)", ""});
  rows->push_back(
      {"9 queries",
       "ListNodes page of 100 (" + std::to_string(list_bytes / 1024) + " KiB), p99 " + Fmt(list_r.p99_ms, " ms"),
       value(list_r), base(sink_list, "sink, same answer"), Fmt(list_r.rps / sink_list.rps, "x"), "(none given)", ""});
  return "";
}

// ================================================================ scenario 12

namespace {

// A job of the most ranks allowed (131,072 by default) with the most one node
// may hold (1,024: 16 devices x 64 ranks sharing each) on `node`, the rest on
// 16-device nodes of short names (the 3 MiB record fits 14-character names).
v1::Job LargestJob(const std::string& id, const std::string& node, uint32_t ranks) {
  v1::Job job;
  job.set_id(id);
  job.set_kind(v1::JOB_KIND_TRAINING);
  job.set_ranks_per_device(64);
  for (uint32_t r = 0; r < ranks; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    if (r < 1024) {
      p->set_node(node);
    } else {
      char name[16];
      std::snprintf(name, sizeof name, "%s-%06u", id.c_str(), (r - 1024) / 16);
      p->set_node(name);
    }
    p->set_device_id(r % 16);
  }
  return job;
}

// `count` node-level Reports on `node`, one at a time; their rate, or 0 and *err.
double TimeReports(v1::FaultService::Stub* faults, const std::string& node, int count, std::string* err) {
  const int64_t t0 = NowNs();
  for (int i = 0; i < count; ++i) {
    v1::ReportRequest req;
    req.set_reporter("bench");
    req.set_id("node-fault-" + std::to_string(i));
    req.set_node(node);
    req.set_code("BENCH_NODE_FAULT");
    req.set_level(v1::FAULT_LEVEL_SUB_HEALTH);  // recorded, decided on, starts no recovery
    req.set_action(v1::TRANSITION_ACTION_RAISE);
    v1::ReportResponse resp;
    auto ctx = Deadline(60);
    auto st = faults->Report(ctx.get(), req, &resp);
    if (!st.ok()) {
      *err = "scenario 12: Report on " + node + ": " + StatusText(st);
      return 0;
    }
  }
  return count / (static_cast<double>(NowNs() - t0) / 1e9);
}

}  // namespace

std::string RunLargestJobs(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-jobs"), RecoveryClusterdArgs());
  std::cerr << "[bench] scenario 12: node-level faults under the largest jobs, " << o.job_reports
            << " Reports per node\n";
  if (auto err = cd.Start(); !err.empty()) return err;
  auto channel = grpc::CreateChannel(cd.target(), grpc::InsecureChannelCredentials());
  auto jobs = v1::JobService::NewStub(channel);
  auto faults = v1::FaultService::NewStub(channel);
  const std::vector<std::string> nodes = {"bench-free", "bench-busy"};
  AgentPool pool(cd.target(), nodes, 1);
  if (auto e = pool.Connect(); !e.empty()) return "scenario 12: " + e;
  constexpr uint32_t kRanks = 131'072;  // clusterd's default max_job_ranks
  for (const char* id : {"j1", "j2"}) {
    v1::CreateJobRequest req;
    *req.mutable_job() = LargestJob(id, "bench-busy", kRanks);
    v1::CreateJobResponse resp;
    auto ctx = Deadline(60);
    auto st = jobs->CreateJob(ctx.get(), req, &resp);
    if (!st.ok()) return std::string("scenario 12: CreateJob ") + id + ": " + StatusText(st);
  }
  // The baseline first: the same Reports on a node no job uses.
  std::string err;
  const double free_rate = TimeReports(faults.get(), "bench-free", o.job_reports, &err);
  const double cpu0 = cd.CpuSeconds();
  const int64_t t0 = NowNs();
  const double busy_rate = err.empty() ? TimeReports(faults.get(), "bench-busy", o.job_reports, &err) : 0;
  const double busy_cpu_ms = (cd.CpuSeconds() - cpu0) * 1e3 / o.job_reports;
  const double busy_s = static_cast<double>(NowNs() - t0) / 1e9;
  if (!err.empty()) return err;
  if (auto e = pool.Close(); !e.empty()) return "scenario 12: " + e;
  const double ratio = busy_rate / free_rate;
  (*out)["scenario12_largest_jobs"] = {{"job_ranks", kRanks},
                                       {"ranks_on_node_per_job", 1024},
                                       {"reports", o.job_reports},
                                       {"free_reports_per_s", free_rate},
                                       {"busy_reports_per_s", busy_rate},
                                       {"busy_seconds", busy_s},
                                       {"busy_cpu_ms_per_report", busy_cpu_ms},
                                       {"ratio", ratio}};
  rows->push_back({"12 largest jobs", "node-level Reports/s, node with 2 jobs x 1,024 of 131,072 ranks",
                   Fmt(busy_rate, "/s"), Fmt(free_rate, "/s (node without jobs)"), Fmt(ratio, "x"), ">= 0.5x",
                   Met(ratio >= 0.5)});
  rows->push_back({"12 largest jobs", "clusterd CPU per Report on that node", Fmt(busy_cpu_ms, " ms"), "", "", "", ""});
  return "";
}

}  // namespace clusterd::bench
