// Load generator and independent checker for the fault-injection suite
// (test/faults/run.sh). It talks to a real clusterd over gRPC while the suite
// kills, partitions or starves that clusterd, and survives every such fault
// the way NodeD does: reconnect with backoff, say Hello with the faults
// active at the end of what it is about to resend, resend every transition
// not yet acknowledged with its original id.
//
// Mode "ingest" (default) plays N agents, M external reporters
// (FaultService.Report) and one Watch consumer until the stop file appears,
// then waits until everything it sent is acknowledged and checks, from its
// own record of what was acknowledged (never from clusterd's counters):
//   - every fault it raised or cleared is in ListFaults with the state and
//     raise count its acknowledged transitions/reports imply (a lost
//     transition, a duplicate or a resurrected one changes one of them);
//   - the Watch history has exactly one FAULT_RAISED per raise and one
//     FAULT_CLEARED per clear of those faults;
//   - Watch revisions are strictly increasing without a gap or a duplicate
//     across every reconnect (each resumes from the last revision seen), up
//     to the revision GetSummary reports at the end;
//   - a report's first attempt never finds its change already made, and the
//     raise count in each Report response is the expected one.
// Exits 0 with a one-line summary, 1 with "VIOLATION: ..." lines, 2 on bad
// usage or a deadline.
//
// Mode "helloless" opens many Connect streams that never send a Hello, holds
// them, and checks that a real agent still gets a Welcome before a deadline.
//
// Hostile agents (issue 51, items 1 and 2; run.sh checks clusterd's side):
// mode "progress-flood" registers a job of 16 ranks, 8 on each of two nodes
// (<prefix>-hostile, <prefix>-honest, hang timeout --hang-timeout), whose
// agents report progress on their streams for --seconds: the honest one its
// ranks' next step every 100 ms, the hostile one its own ranks 1,000 steps
// ahead of the honest ones as fast as its stream takes them. Mode
// "inventory-churn" has one agent (<prefix>-churn) send --updates
// PodDevicesUpdates as fast as its stream takes them, alternating two large
// valid ones (512 pods, 4,096 device ids each), then a fault transition,
// and waits for its Ack: everything before it was read.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "clusterd/v1/agent.grpc.pb.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/fault.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"

namespace {

namespace v1 = clusterd::v1;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Options {
  std::string mode = "ingest";
  std::string target;
  int agents = 4;
  int reporters = 2;
  int devices = 8;
  int codes = 4;            // fault codes per device an agent cycles through
  int external_ids = 16;    // ids per reporter
  double rate = 200;        // transitions per second per agent
  double report_rate = 40;  // reports per second per reporter
  int max_inflight = 128;   // unacknowledged transitions per agent
  std::string node_prefix = "fi";
  std::string stop_file;
  std::string progress_file;
  int deadline_s = 180;  // whole run, a failure bound
  int stall_ms = 5000;   // no ack progress with transitions pending: reconnect
  uint64_t seed = 0;
  uint64_t epoch = 1;
  // helloless mode
  int streams = 300;
  int channels = 10;
  int agent_deadline_s = 30;
  // progress-flood and inventory-churn modes
  int seconds = 10;
  int hang_timeout_s = 3;
  int updates = 5000;
};

std::mutex g_violations_mu;
std::vector<std::string> g_violations;
std::atomic<bool> g_fatal{false};

void Violation(const std::string& what) {
  std::lock_guard lock(g_violations_mu);
  if (g_violations.size() < 50) g_violations.push_back(what);
  std::fprintf(stderr, "VIOLATION: %s\n", what.c_str());
}

size_t ViolationCount() {
  std::lock_guard lock(g_violations_mu);
  return g_violations.size();
}

// A fresh channel per session: a connection that a partition left half-open
// must not be reused, and reconnects stay quick.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& target, int salt = 0) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("fault_driver.salt", salt);  // a distinct channel, its own connection
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

bool StopRequested(const Options& o) { return !o.stop_file.empty() && std::filesystem::exists(o.stop_file); }

void SleepJitter(std::mt19937_64& rng, milliseconds base) {
  std::uniform_real_distribution<double> j(0.5, 1.5);
  std::this_thread::sleep_for(milliseconds(static_cast<int64_t>(base.count() * j(rng))));
}

bool Retryable(grpc::StatusCode c) {
  return c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::DEADLINE_EXCEEDED ||
         c == grpc::StatusCode::CANCELLED || c == grpc::StatusCode::RESOURCE_EXHAUSTED ||
         c == grpc::StatusCode::UNKNOWN || c == grpc::StatusCode::INTERNAL || c == grpc::StatusCode::ABORTED;
}

std::string Describe(const grpc::Status& s) {
  return std::to_string(static_cast<int>(s.error_code())) + " " + s.error_message();
}

// What one fault should look like at the end.
struct Expected {
  uint64_t raises = 0;
  uint64_t clears = 0;
  bool active = false;
};

// Key of a fault in both the expectation and the observation maps:
// agent faults "A|node|device|code", external ones "E|node|reporter|id".
std::string AgentKey(const std::string& node, uint32_t device, const std::string& code) {
  return "A|" + node + "|" + std::to_string(device) + "|" + code;
}
std::string ExternalKey(const std::string& node, const std::string& reporter, const std::string& id) {
  return "E|" + node + "|" + reporter + "|" + id;
}
std::optional<std::string> KeyOf(const v1::Fault& f) {
  if (f.source() == v1::FAULT_SOURCE_EXTERNAL) return ExternalKey(f.node(), f.reporter(), f.external_id());
  if (f.source() == v1::FAULT_SOURCE_ACCELERATOR && f.has_device_id())
    return AgentKey(f.node(), f.device_id(), f.code());
  return std::nullopt;
}

// ---------------------------------------------------------------- agents

class Agent {
 public:
  Agent(const Options& o, int index)
      : o_(o), node_(o.node_prefix + "-node-" + std::to_string(index)), rng_(o.seed * 1000 + index) {
    instance_ = "fault-driver-" + std::to_string(o.seed) + "-" + std::to_string(index);
  }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

  const std::string& node() const { return node_; }
  bool welcomed_once() const { return welcomed_once_.load(); }
  uint64_t acked() const { return acked_total_.load(); }
  uint64_t sessions() const { return sessions_.load(); }
  bool done() const { return done_.load(); }
  size_t pending() {
    std::lock_guard lock(mu_);
    return unacked_.size();
  }
  void Abort() { abort_ = true; }

  std::map<std::string, Expected> expected() {
    std::lock_guard lock(mu_);
    return expected_;
  }

 private:
  struct Fault {
    uint32_t device;
    std::string code;
  };

  std::string CodeOf(int i) const {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "FI%06X", i);
    return buf;
  }

  // The next transition: flip one of this agent's faults. Called with mu_.
  v1::ConnectRequest NextLocked() {
    std::uniform_int_distribution<int> dev(0, o_.devices - 1), code(0, o_.codes - 1);
    const uint32_t d = dev(rng_);
    const std::string c = CodeOf(code(rng_));
    const std::string key = AgentKey(node_, d, c);
    Expected& e = expected_[key];
    const bool raise = !e.active;
    e.active = raise;
    (raise ? e.raises : e.clears)++;
    v1::ConnectRequest req;
    auto* t = req.mutable_transition();
    t->mutable_id()->set_epoch(o_.epoch);
    t->mutable_id()->set_seq(++next_seq_);
    t->set_action(raise ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
    t->mutable_fault()->set_device_id(d);
    t->mutable_fault()->set_source(v1::FAULT_SOURCE_ACCELERATOR);
    t->mutable_fault()->set_code(c);
    t->mutable_fault()->set_message("fault-driver");
    return req;
  }

  // Hello consistent with the end of the unacknowledged transitions.
  v1::ConnectRequest HelloLocked() const {
    v1::ConnectRequest req;
    auto* h = req.mutable_hello();
    h->set_node_name(node_);
    h->set_boot_id("fault-driver-boot");
    h->set_agent_version("fault-driver");
    h->set_epoch(o_.epoch);
    h->set_instance_id(instance_);
    for (int i = 0; i < o_.devices; ++i) {
      auto* d = h->mutable_inventory()->add_devices();
      d->set_id(i);
      d->set_vendor("sim");
      d->set_model("FAULT-DRIVER");
    }
    for (const auto& [key, e] : expected_) {
      if (!e.active) continue;
      // key: A|node|device|code
      const size_t a = key.find('|', 2), b = key.find('|', a + 1);
      auto* r = h->add_active_faults();
      r->set_device_id(static_cast<uint32_t>(std::stoul(key.substr(a + 1, b - a - 1))));
      r->set_source(v1::FAULT_SOURCE_ACCELERATOR);
      r->set_code(key.substr(b + 1));
      r->set_message("fault-driver");
    }
    return req;
  }

  void AckUpTo(uint64_t seq) {
    std::lock_guard lock(mu_);
    while (!unacked_.empty() && unacked_.front().transition().id().seq() <= seq) {
      unacked_.pop_front();
      ++acked_total_;
    }
    if (seq > acked_seq_) {
      acked_seq_ = seq;
      last_progress_ = Clock::now();
    }
    cv_.notify_all();
  }

  void Run() {
    std::mt19937_64 jitter(rng_());
    auto backoff = milliseconds(100);
    while (!abort_) {
      const bool stopping = StopRequested(o_);
      {
        std::lock_guard lock(mu_);
        if (stopping && unacked_.empty() && welcomed_once_) break;
      }
      const auto began = Clock::now();
      Session();
      if (abort_) break;
      if (Clock::now() - began > milliseconds(2000)) backoff = milliseconds(100);
      SleepJitter(jitter, backoff);
      backoff = std::min(backoff * 2, milliseconds(1000));
    }
    done_ = true;
  }

  // One stream: Hello, Welcome, resend, then new transitions until the stream
  // breaks, stalls, or everything is acknowledged after the stop. A watchdog
  // cancels the stream when no Welcome comes or acknowledgements stop while
  // transitions are pending (a partition: writes may block, reads never end).
  void Session() {
    auto channel = NewChannel(o_.target, static_cast<int>(sessions_.load()));
    auto stub = v1::NodeAgentService::NewStub(channel);
    grpc::ClientContext ctx;
    const auto began = Clock::now();
    v1::ConnectRequest hello;
    {
      std::lock_guard lock(mu_);
      hello = HelloLocked();
      stream_ended_ = false;
      session_over_ = false;
      welcomed_ = false;
      last_progress_ = began;
    }
    std::thread watchdog([&] {
      std::unique_lock lock(mu_);
      while (!session_over_) {
        const auto now = Clock::now();
        const bool no_welcome = !welcomed_ && now - began > milliseconds(o_.stall_ms);
        const bool stalled = welcomed_ && !unacked_.empty() && now - last_progress_ > milliseconds(o_.stall_ms);
        if (no_welcome || stalled || abort_) {
          ctx.TryCancel();
          stream_ended_ = true;
          cv_.notify_all();
          break;
        }
        cv_.wait_for(lock, milliseconds(100));
      }
    });
    auto stream = stub->Connect(&ctx);
    ++sessions_;
    std::thread reader;
    bool ok = stream->Write(hello);
    if (ok) {
      reader = std::thread([&] {
        v1::ConnectResponse r;
        while (stream->Read(&r)) {
          if (r.has_welcome()) {
            {
              std::lock_guard lock(mu_);
              if (r.welcome().applied_seq() < acked_seq_) {
                Violation(node_ + ": Welcome says applied_seq " + std::to_string(r.welcome().applied_seq()) +
                          " but seq " + std::to_string(acked_seq_) + " was acknowledged before");
              }
            }
            AckUpTo(r.welcome().applied_seq());
            std::lock_guard lock(mu_);
            welcomed_ = true;
            welcomed_once_ = true;
            last_progress_ = Clock::now();
            cv_.notify_all();
          } else if (r.has_ack()) {
            if (r.ack().id().epoch() != o_.epoch) {
              Violation(node_ + ": ack for epoch " + std::to_string(r.ack().id().epoch()));
            }
            AckUpTo(r.ack().id().seq());
          }
        }
        std::lock_guard lock(mu_);
        stream_ended_ = true;
        cv_.notify_all();
      });
      // The Welcome's applied_seq drops some of what is pending; resend the rest.
      std::vector<v1::ConnectRequest> resend;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return welcomed_ || stream_ended_; });
        ok = welcomed_ && !stream_ended_;
        if (ok) resend.assign(unacked_.begin(), unacked_.end());
      }
      for (const auto& r : resend) {
        if (!ok) break;
        ok = stream->Write(r);
      }
    }
    const auto interval = std::chrono::duration<double>(1.0 / o_.rate);
    auto next = Clock::now();
    auto next_heartbeat = Clock::now();
    while (ok && !abort_) {
      const bool stopping = StopRequested(o_);
      std::optional<v1::ConnectRequest> send;
      {
        std::unique_lock lock(mu_);
        if (stream_ended_) break;
        if (stopping && unacked_.empty()) break;
        if (!stopping && Clock::now() >= next && unacked_.size() < static_cast<size_t>(o_.max_inflight)) {
          send = NextLocked();
          unacked_.push_back(*send);
          next += std::chrono::duration_cast<Clock::duration>(interval);
          if (Clock::now() - next > milliseconds(100)) next = Clock::now();  // no catch-up bursts
        } else {
          cv_.wait_until(lock, std::min(next, Clock::now() + milliseconds(50)));
        }
      }
      if (send) ok = stream->Write(*send);
      if (ok && Clock::now() >= next_heartbeat) {
        v1::ConnectRequest hb;
        hb.mutable_heartbeat();
        ok = stream->Write(hb);
        next_heartbeat = Clock::now() + milliseconds(500);
      }
    }
    ctx.TryCancel();
    if (reader.joinable()) reader.join();
    {
      std::lock_guard lock(mu_);
      session_over_ = true;
      cv_.notify_all();
    }
    watchdog.join();
    stream->Finish();
  }

  const Options& o_;
  std::string node_;
  std::string instance_;
  std::mt19937_64 rng_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::ConnectRequest> unacked_;  // in sequence order
  std::map<std::string, Expected> expected_;
  uint64_t next_seq_ = 0;
  uint64_t acked_seq_ = 0;
  bool stream_ended_ = false;  // this session's stream: ended, or given up on
  bool session_over_ = false;
  bool welcomed_ = false;
  Clock::time_point last_progress_ = Clock::now();
  std::atomic<uint64_t> acked_total_{0};
  std::atomic<uint64_t> sessions_{0};
  std::atomic<bool> welcomed_once_{false};
  std::atomic<bool> done_{false};
  std::atomic<bool> abort_{false};
};

// ---------------------------------------------------------------- reporters

class Reporter {
 public:
  Reporter(const Options& o, int index, std::vector<std::string> nodes)
      : o_(o),
        name_(o.node_prefix + "-reporter-" + std::to_string(index)),
        nodes_(std::move(nodes)),
        rng_(o.seed * 7919 + index) {}

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  void Abort() { abort_ = true; }
  uint64_t acked() const { return acked_.load(); }
  uint64_t retries() const { return retries_.load(); }
  std::map<std::string, Expected> expected() {
    std::lock_guard lock(mu_);
    return expected_;
  }

 private:
  void Run() {
    std::uniform_int_distribution<int> pick(0, o_.external_ids - 1);
    const auto interval = std::chrono::duration<double>(1.0 / o_.report_rate);
    auto channel = NewChannel(o_.target, 100000 + static_cast<int>(rng_() % 1000));
    auto stub = v1::FaultService::NewStub(channel);
    std::mt19937_64 jitter(rng_());
    while (!abort_ && !StopRequested(o_)) {
      const int i = pick(rng_);
      const std::string node = nodes_[i % nodes_.size()];
      const std::string id = "x" + std::to_string(i);
      const std::string key = ExternalKey(node, name_, id);
      Expected want;
      {
        std::lock_guard lock(mu_);
        want = expected_[key];
      }
      const bool raise = !want.active;
      v1::ReportRequest req;
      req.set_reporter(name_);
      req.set_id(id);
      req.set_node(node);
      req.set_device_id(static_cast<uint32_t>(i % o_.devices));
      req.set_code("FIEXT");
      req.set_level(v1::FAULT_LEVEL_SUB_HEALTH);
      req.set_action(raise ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
      req.set_message("fault-driver report");
      // Retry the same report until it is acknowledged: it may or may not
      // have been applied before a failure, never twice.
      bool first = true;
      auto backoff = milliseconds(100);
      while (!abort_) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
        v1::ReportResponse resp;
        grpc::Status s = stub->Report(&ctx, req, &resp);
        if (s.ok()) {
          if (raise)
            ++want.raises;
          else
            ++want.clears;
          want.active = raise;
          if (first && resp.unchanged()) {
            Violation(name_ + " " + key + ": first attempt of a " + (raise ? "raise" : "clear") +
                      " found it already made (an earlier acknowledged report was lost?)");
          }
          if (resp.fault().count() != want.raises) {
            Violation(name_ + " " + key + ": Report response count " + std::to_string(resp.fault().count()) +
                      ", expected " + std::to_string(want.raises));
          }
          std::lock_guard lock(mu_);
          expected_[key] = want;
          ++acked_;
          break;
        }
        if (!Retryable(s.error_code())) {
          Violation(name_ + " " + key + ": Report failed for good: " + Describe(s));
          abort_ = true;
          return;
        }
        first = false;
        ++retries_;
        SleepJitter(jitter, backoff);
        backoff = std::min(backoff * 2, milliseconds(1000));
        // A channel that saw a failure may be stuck on a dead connection.
        channel = NewChannel(o_.target, 100000 + static_cast<int>(rng_() % 100000));
        stub = v1::FaultService::NewStub(channel);
      }
      std::this_thread::sleep_for(std::chrono::duration_cast<Clock::duration>(interval));
    }
  }

  const Options& o_;
  std::string name_;
  std::vector<std::string> nodes_;
  std::mt19937_64 rng_;
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, Expected> expected_;
  std::atomic<uint64_t> acked_{0};
  std::atomic<uint64_t> retries_{0};
  std::atomic<bool> abort_{false};
};

// ---------------------------------------------------------------- watcher

class Watcher {
 public:
  explicit Watcher(const Options& o) : o_(o) {}
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_ = true;
    Kick();
    if (thread_.joinable()) thread_.join();
  }
  // Ends the current stream (it resumes from the last revision): a stream
  // over a connection a partition broke may never notice by itself.
  void Kick() {
    std::lock_guard lock(mu_);
    if (ctx_) ctx_->TryCancel();
  }
  uint64_t last() const { return last_.load(); }
  uint64_t events() const { return events_.load(); }
  uint64_t sessions() const { return sessions_.load(); }
  std::map<std::string, std::pair<uint64_t, uint64_t>> tallies() {
    std::lock_guard lock(mu_);
    return tallies_;
  }

 private:
  void Run() {
    std::mt19937_64 jitter(o_.seed + 17);
    auto backoff = milliseconds(100);
    while (!stop_) {
      auto channel = NewChannel(o_.target, 200000 + static_cast<int>(sessions_.load()));
      auto stub = v1::ClusterService::NewStub(channel);
      auto ctx = std::make_shared<grpc::ClientContext>();
      {
        std::lock_guard lock(mu_);
        ctx_ = ctx;
      }
      v1::WatchRequest req;
      req.set_from_revision(last_.load());
      auto reader = stub->Watch(ctx.get(), req);
      ++sessions_;
      v1::WatchResponse resp;
      bool got = false;
      while (!stop_ && reader->Read(&resp)) {
        got = true;
        for (const auto& e : resp.events()) Observe(e);
      }
      grpc::Status s = reader->Finish();
      {
        std::lock_guard lock(mu_);
        ctx_.reset();
      }
      if (stop_) break;
      if (s.error_code() == grpc::StatusCode::OUT_OF_RANGE || s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
        Violation("Watch from revision " + std::to_string(last_.load()) + " failed: " + Describe(s));
        return;
      }
      if (got) backoff = milliseconds(100);
      SleepJitter(jitter, backoff);
      backoff = std::min(backoff * 2, milliseconds(1000));
    }
  }

  void Observe(const v1::Event& e) {
    const uint64_t last = last_.load();
    if (e.revision() != last + 1) {
      Violation("Watch: revision " + std::to_string(e.revision()) + " after " + std::to_string(last) +
                (e.revision() <= last ? " (duplicate or out of order)" : " (gap)"));
    }
    if (e.revision() > last) last_ = e.revision();
    ++events_;
    if (e.type() != v1::EVENT_TYPE_FAULT_RAISED && e.type() != v1::EVENT_TYPE_FAULT_CLEARED) return;
    auto key = KeyOf(e.fault());
    if (!key) return;
    std::lock_guard lock(mu_);
    auto& t = tallies_[*key];
    (e.type() == v1::EVENT_TYPE_FAULT_RAISED ? t.first : t.second)++;
  }

  const Options& o_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> last_{0};
  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> sessions_{0};
  std::mutex mu_;
  std::shared_ptr<grpc::ClientContext> ctx_;
  std::map<std::string, std::pair<uint64_t, uint64_t>> tallies_;  // raised, cleared events
};

// ---------------------------------------------------------------- checks

template <typename Call>
grpc::Status Retrying(const Options& o, Clock::time_point deadline, Call call) {
  grpc::Status s;
  int attempt = 0;
  while (Clock::now() < deadline) {
    auto channel = NewChannel(o.target, 300000 + attempt++);
    s = call(channel);
    if (s.ok() || !Retryable(s.error_code())) return s;
    std::this_thread::sleep_for(milliseconds(200));
  }
  return s;
}

std::map<std::string, v1::Fault> ListAll(const Options& o, const std::vector<std::string>& nodes,
                                         Clock::time_point deadline, bool* ok) {
  std::map<std::string, v1::Fault> out;
  for (const auto& node : nodes) {
    std::string token;
    do {
      v1::ListFaultsResponse resp;
      grpc::Status s = Retrying(o, deadline, [&](std::shared_ptr<grpc::Channel> ch) {
        v1::ListFaultsRequest req;
        req.set_node(node);
        req.set_page_size(1000);
        req.set_page_token(token);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        resp.Clear();
        return v1::ClusterService::NewStub(ch)->ListFaults(&ctx, req, &resp);
      });
      if (!s.ok()) {
        std::fprintf(stderr, "ListFaults(%s): %s\n", node.c_str(), Describe(s).c_str());
        *ok = false;
        return out;
      }
      for (const auto& f : resp.faults()) {
        auto key = KeyOf(f);
        if (!key) continue;
        // Other writers (the suite's own probes) may report on these nodes.
        if (f.source() == v1::FAULT_SOURCE_EXTERNAL && f.reporter().rfind(o.node_prefix + "-reporter-", 0) != 0)
          continue;
        if (out.count(*key)) Violation("ListFaults lists " + *key + " twice");
        out[*key] = f;
      }
      token = resp.next_page_token();
    } while (!token.empty());
  }
  return out;
}

void WriteProgress(const Options& o, const std::string& line) {
  if (o.progress_file.empty()) return;
  const std::string tmp = o.progress_file + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << line << "\n";
  }
  std::rename(tmp.c_str(), o.progress_file.c_str());
}

int RunIngest(const Options& o) {
  const auto deadline = Clock::now() + std::chrono::seconds(o.deadline_s);
  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<std::string> nodes;
  for (int i = 0; i < o.agents; ++i) {
    agents.push_back(std::make_unique<Agent>(o, i));
    nodes.push_back(agents.back()->node());
  }
  Watcher watcher(o);
  watcher.Start();
  for (auto& a : agents) a->Start();
  // Reports need registered nodes.
  while (Clock::now() < deadline &&
         !std::all_of(agents.begin(), agents.end(), [](auto& a) { return a->welcomed_once(); })) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::vector<std::unique_ptr<Reporter>> reporters;
  for (int i = 0; i < o.reporters; ++i) reporters.push_back(std::make_unique<Reporter>(o, i, nodes));
  for (auto& r : reporters) r->Start();

  auto progress = [&] {
    uint64_t acked = 0, reports = 0, sessions = 0;
    size_t pending = 0;
    for (auto& a : agents) acked += a->acked(), sessions += a->sessions(), pending += a->pending();
    for (auto& r : reporters) reports += r->acked();
    return std::make_tuple(acked, reports, sessions, pending);
  };
  bool timed_out = false;
  while (true) {
    auto [acked, reports, sessions, pending] = progress();
    WriteProgress(o, std::to_string(acked + reports) + " " + std::to_string(acked) + " " + std::to_string(reports) +
                         " " + std::to_string(watcher.last()));
    const bool all_done = std::all_of(agents.begin(), agents.end(), [](auto& a) { return a->done(); });
    if (all_done && StopRequested(o)) break;
    if (ViolationCount() > 0 && g_fatal) break;
    if (Clock::now() >= deadline) {
      timed_out = true;
      std::fprintf(stderr, "DEADLINE: %d s passed; %zu transitions still unacknowledged (stop file %s)\n", o.deadline_s,
                   pending, StopRequested(o) ? "present" : "absent");
      break;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  for (auto& r : reporters) {
    if (timed_out) r->Abort();
    r->Join();
  }
  for (auto& a : agents) {
    if (timed_out) a->Abort();
    a->Join();
  }
  if (timed_out) {
    watcher.Stop();
    return 2;
  }

  // The watcher must reach the revision clusterd reports now.
  const auto check_deadline = Clock::now() + std::chrono::seconds(60);
  v1::GetSummaryResponse summary;
  grpc::Status s = Retrying(o, check_deadline, [&](std::shared_ptr<grpc::Channel> ch) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return v1::ClusterService::NewStub(ch)->GetSummary(&ctx, v1::GetSummaryRequest(), &summary);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "DEADLINE: GetSummary: %s\n", Describe(s).c_str());
    watcher.Stop();
    return 2;
  }
  auto kick = Clock::now() + std::chrono::seconds(5);
  while (watcher.last() < summary.revision() && Clock::now() < check_deadline) {
    if (Clock::now() > kick) {
      watcher.Kick();
      kick = Clock::now() + std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  if (watcher.last() < summary.revision()) {
    Violation("Watch reached revision " + std::to_string(watcher.last()) + ", GetSummary says " +
              std::to_string(summary.revision()));
  }
  watcher.Stop();

  std::map<std::string, Expected> expected;
  for (auto& a : agents) expected.merge(a->expected());
  for (auto& r : reporters) expected.merge(r->expected());
  bool listed = true;
  auto stored = ListAll(o, nodes, check_deadline, &listed);
  if (!listed) return 2;
  auto tallies = watcher.tallies();
  uint64_t raises = 0, clears = 0;
  for (const auto& [key, e] : expected) {
    raises += e.raises;
    clears += e.clears;
    if (e.raises == 0) continue;  // a clear of a never-raised fault changes nothing
    auto it = stored.find(key);
    if (it == stored.end()) {
      Violation(key + ": raised " + std::to_string(e.raises) + " times, acknowledged, not in ListFaults");
      continue;
    }
    const v1::Fault& f = it->second;
    const bool active = f.state() == v1::FAULT_STATE_ACTIVE;
    if (active != e.active) {
      Violation(key + ": state " + v1::FaultState_Name(f.state()) + ", expected " + (e.active ? "ACTIVE" : "CLEARED") +
                " (clear_reason '" + f.clear_reason() + "')");
    }
    if (f.count() != e.raises) {
      Violation(key + ": count " + std::to_string(f.count()) + ", expected " + std::to_string(e.raises));
    }
    auto t = tallies[key];
    if (t.first != e.raises || t.second != e.clears) {
      Violation(key + ": Watch history has " + std::to_string(t.first) + " FAULT_RAISED and " +
                std::to_string(t.second) + " FAULT_CLEARED, expected " + std::to_string(e.raises) + " and " +
                std::to_string(e.clears));
    }
  }
  for (const auto& [key, f] : stored) {
    if (!expected.count(key) || expected[key].raises == 0) Violation(key + ": stored but never raised");
  }
  uint64_t acked = 0, reports = 0, sessions = 0, retries = 0;
  for (auto& a : agents) acked += a->acked(), sessions += a->sessions();
  for (auto& r : reporters) reports += r->acked(), retries += r->retries();
  const size_t violations = ViolationCount();
  std::printf(
      "%s: %llu acknowledged transitions from %d agents (%llu streams), %llu reports from %d reporters (%llu "
      "retries), %zu faults (%llu raises, %llu clears), Watch %llu events to revision %llu over %llu streams, "
      "%zu violations\n",
      violations ? "FAILED" : "ok", (unsigned long long)acked, o.agents, (unsigned long long)sessions,
      (unsigned long long)reports, o.reporters, (unsigned long long)retries, expected.size(),
      (unsigned long long)raises, (unsigned long long)clears, (unsigned long long)watcher.events(),
      (unsigned long long)watcher.last(), (unsigned long long)watcher.sessions(), violations);
  return violations ? 1 : 0;
}

// ---------------------------------------------------------------- helloless

int RunHelloless(const Options& o) {
  using Stream = grpc::ClientReaderWriter<v1::ConnectRequest, v1::ConnectResponse>;
  struct Held {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<Stream> stream;
  };
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::NodeAgentService::Stub>> stubs;
  // At most 50 streams a connection: HTTP/2 stream limits never queue them.
  const int nchannels = std::max(o.channels, (o.streams + 49) / 50);
  for (int i = 0; i < nchannels; ++i) {
    channels.push_back(NewChannel(o.target, 400000 + i));
    stubs.push_back(v1::NodeAgentService::NewStub(channels.back()));
  }
  std::vector<Held> held;
  for (int i = 0; i < o.streams; ++i) {
    Held h;
    h.ctx = std::make_unique<grpc::ClientContext>();
    h.ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(o.agent_deadline_s + 30));
    h.stream = stubs[i % stubs.size()]->Connect(h.ctx.get());
    held.push_back(std::move(h));
  }
  // A real agent, on its own connection, must get in before the deadline.
  const auto deadline = Clock::now() + std::chrono::seconds(o.agent_deadline_s);
  grpc::Status last;
  int attempts = 0;
  bool welcomed = false;
  while (!welcomed && Clock::now() < deadline) {
    auto stub = v1::NodeAgentService::NewStub(NewChannel(o.target, 500000 + attempts++));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    auto stream = stub->Connect(&ctx);
    v1::ConnectRequest hello;
    hello.mutable_hello()->set_node_name(o.node_prefix + "-real-agent");
    hello.mutable_hello()->set_epoch(1);
    hello.mutable_hello()->set_instance_id("fault-driver-real-agent");
    hello.mutable_hello()->set_boot_id("fault-driver-boot");
    hello.mutable_hello()->set_agent_version("fault-driver");
    v1::ConnectResponse resp;
    if (stream->Write(hello) && stream->Read(&resp) && resp.has_welcome()) {
      welcomed = true;
      stream->WritesDone();
      ctx.TryCancel();
    }
    last = stream->Finish();
    if (!welcomed) std::this_thread::sleep_for(milliseconds(200));
  }
  for (auto& h : held) h.ctx->TryCancel();
  for (auto& h : held) h.stream->Finish();
  if (!welcomed) {
    std::printf(
        "FAILED: with %d hello-less Connect streams open, a real agent got no Welcome in %d s "
        "(%d attempts; last: %s)\n",
        o.streams, o.agent_deadline_s, attempts, Describe(last).c_str());
    return 1;
  }
  std::printf("ok: with %d hello-less Connect streams open a real agent got a Welcome after %d attempt(s)\n", o.streams,
              attempts);
  return 0;
}

// ---------------------------------------------------------------- hostile agents

// One agent stream, said hello and welcomed (synchronous: these modes send
// from one thread per agent).
class HostileAgent {
 public:
  HostileAgent(const Options& o, const std::string& node, int salt)
      : node_(node), stub_(v1::NodeAgentService::NewStub(NewChannel(o.target, salt))) {}

  bool Connect(const Options& o) {
    stream_ = stub_->Connect(&ctx_);
    v1::ConnectRequest req;
    auto* h = req.mutable_hello();
    h->set_node_name(node_);
    h->set_boot_id("fault-driver-boot");
    h->set_agent_version("fault-driver");
    h->set_epoch(o.epoch);
    h->set_instance_id("fault-driver-" + node_);
    for (int i = 0; i < o.devices; ++i) {
      auto* d = h->mutable_inventory()->add_devices();
      d->set_id(i);
      d->set_vendor("sim");
      d->set_model("FAULT-DRIVER");
    }
    v1::ConnectResponse resp;
    return stream_->Write(req) && stream_->Read(&resp) && resp.has_welcome();
  }
  bool Write(const v1::ConnectRequest& req) { return stream_->Write(req); }
  // A transition, and its Ack: every message written before it was read.
  bool Barrier(uint64_t seq) {
    v1::ConnectRequest req;
    auto* t = req.mutable_transition();
    t->mutable_id()->set_epoch(1);
    t->mutable_id()->set_seq(seq);
    t->set_action(v1::TRANSITION_ACTION_RAISE);
    t->mutable_fault()->set_device_id(0);
    t->mutable_fault()->set_source(v1::FAULT_SOURCE_ACCELERATOR);
    t->mutable_fault()->set_code("80E01801");
    t->mutable_fault()->set_message("fault-driver barrier");
    if (!stream_->Write(req)) return false;
    v1::ConnectResponse resp;
    while (stream_->Read(&resp)) {
      if (resp.has_ack() && resp.ack().id().seq() >= seq) return true;
    }
    return false;
  }
  grpc::Status Close() {
    stream_->WritesDone();
    v1::ConnectResponse resp;
    while (stream_->Read(&resp)) {
    }
    return stream_->Finish();
  }

 private:
  std::string node_;
  std::unique_ptr<v1::NodeAgentService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ConnectRequest, v1::ConnectResponse>> stream_;
};

v1::ConnectRequest ProgressOf(const std::string& job, uint32_t first_rank, uint64_t step) {
  v1::ConnectRequest req;
  auto* p = req.mutable_progress();
  p->set_job_id(job);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  for (uint32_t r = first_rank; r < first_rank + 8; ++r) {
    auto* rp = p->mutable_report()->add_ranks();
    rp->set_rank(r);
    rp->set_step(step);
    rp->mutable_step_end_time()->set_seconds(std::chrono::duration_cast<std::chrono::seconds>(now).count());
    rp->mutable_step_end_time()->set_nanos(static_cast<int32_t>((now % std::chrono::seconds(1)).count()));
    rp->mutable_step_time()->set_nanos(100'000'000);
  }
  return req;
}

int RunProgressFlood(const Options& o) {
  const std::string job = o.node_prefix + "-job";
  const std::string hostile_node = o.node_prefix + "-hostile", honest_node = o.node_prefix + "-honest";
  HostileAgent hostile(o, hostile_node, 600000), honest(o, honest_node, 600001);
  if (!hostile.Connect(o) || !honest.Connect(o)) {
    std::printf("FAILED: the agents got no Welcome\n");
    return 2;
  }
  {
    auto stub = v1::JobService::NewStub(NewChannel(o.target, 600002));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::CreateJobRequest req;
    v1::Job* j = req.mutable_job();
    j->set_id(job);
    j->set_kind(v1::JOB_KIND_TRAINING);
    for (uint32_t r = 0; r < 16; ++r) {
      auto* p = j->add_placement();
      p->set_rank(r);
      p->set_node(r < 8 ? hostile_node : honest_node);
      p->set_device_id(r % 8);
    }
    j->mutable_policy()->mutable_progress()->mutable_hang_timeout()->set_seconds(o.hang_timeout_s);
    v1::CreateJobResponse resp;
    if (grpc::Status st = stub->CreateJob(&ctx, req, &resp); !st.ok()) {
      std::printf("FAILED: CreateJob %s: %s\n", job.c_str(), Describe(st).c_str());
      return 2;
    }
  }
  std::atomic<uint64_t> step{1};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> flood_sent{0};
  std::thread flood([&] {
    while (!stop.load() && hostile.Write(ProgressOf(job, 0, step.load() + 1000))) ++flood_sent;
  });
  uint64_t honest_sent = 0;
  const auto end = Clock::now() + std::chrono::seconds(o.seconds);
  bool honest_ok = true;
  for (auto next = Clock::now(); Clock::now() < end; next += milliseconds(100)) {
    std::this_thread::sleep_until(next);  // the honest agent's pace, not a wait for anything
    if (!honest.Write(ProgressOf(job, 8, step.fetch_add(1) + 1))) {
      honest_ok = false;
      break;
    }
    ++honest_sent;
  }
  stop = true;
  flood.join();
  // The honest stream's last reports read: a transition acknowledged after them.
  const bool read = honest_ok && honest.Barrier(1);
  const grpc::Status hostile_end = hostile.Close(), honest_end = honest.Close();
  if (!read || !honest_end.ok()) {
    std::printf("FAILED: the honest agent's stream ended: %s\n", Describe(honest_end).c_str());
    return 1;
  }
  std::printf(
      "ok: %s sent %llu progress reports in %d s (8 ranks each, 1,000 steps ahead); %s sent %llu; "
      "the hostile stream ended with %s\n",
      hostile_node.c_str(), static_cast<unsigned long long>(flood_sent.load()), o.seconds, honest_node.c_str(),
      static_cast<unsigned long long>(honest_sent), hostile_end.ok() ? "OK" : Describe(hostile_end).c_str());
  return 0;
}

int RunInventoryChurn(const Options& o) {
  const std::string node = o.node_prefix + "-churn";
  HostileAgent agent(o, node, 700000);
  if (!agent.Connect(o)) {
    std::printf("FAILED: the agent got no Welcome\n");
    return 2;
  }
  // Two large valid updates: 512 pods (the most allowed) of 8 device ids
  // each (4,096 in all, the most allowed), long names; they differ in every
  // pod's name, so that each one applied changes the node's record.
  v1::ConnectRequest updates[2];
  for (int v = 0; v < 2; ++v) {
    auto* u = updates[v].mutable_pod_devices();
    for (int i = 0; i < 512; ++i) {
      auto* p = u->add_pods();
      p->set_namespace_(std::string(60, 'n') + std::to_string(v));
      char name[32];
      std::snprintf(name, sizeof(name), "-%04d", i);
      p->set_name(std::string(200, v ? 'b' : 'a') + name);
      for (uint32_t d = 0; d < 8; ++d) p->add_device_ids(d);
    }
  }
  const auto start = Clock::now();
  for (int i = 0; i < o.updates; ++i) {
    if (!agent.Write(updates[i % 2])) {
      std::printf("FAILED: the stream ended after %d updates: %s\n", i, Describe(agent.Close()).c_str());
      return 1;
    }
  }
  if (!agent.Barrier(1)) {
    std::printf("FAILED: no Ack after the updates: %s\n", Describe(agent.Close()).c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("ok: %d PodDevicesUpdates of %zu bytes each, alternating, read in %.1f s\n", o.updates,
              updates[0].ByteSizeLong(), secs);
  std::fflush(stdout);
  // Held open until the stop file: run.sh measures clusterd meanwhile.
  const auto deadline = Clock::now() + std::chrono::seconds(o.deadline_s);
  while (!StopRequested(o) && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(50));
  const grpc::Status end = agent.Close();
  if (!end.ok()) {
    std::printf("FAILED: the stream ended with %s\n", Describe(end).c_str());
    return 1;
  }
  return 0;
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "fault_driver: %s\n"
               "usage: fault_driver --target HOST:PORT [--mode ingest|helloless|progress-flood|inventory-churn]\n"
               "  [--agents N] [--reporters M]\n"
               "  [--rate PER_S] [--report-rate PER_S] [--stop-file F] [--progress-file F] [--deadline S]\n"
               "  [--seed N] [--node-prefix P] [--streams N] [--channels N] [--agent-deadline S]\n"
               "  [--seconds S] [--hang-timeout S] [--updates N]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Usage(("missing value for " + arg).c_str());
    }
    try {
      if (arg == "--mode")
        o.mode = value;
      else if (arg == "--target")
        o.target = value;
      else if (arg == "--agents")
        o.agents = std::stoi(value);
      else if (arg == "--reporters")
        o.reporters = std::stoi(value);
      else if (arg == "--rate")
        o.rate = std::stod(value);
      else if (arg == "--report-rate")
        o.report_rate = std::stod(value);
      else if (arg == "--stop-file")
        o.stop_file = value;
      else if (arg == "--progress-file")
        o.progress_file = value;
      else if (arg == "--deadline")
        o.deadline_s = std::stoi(value);
      else if (arg == "--stall-ms")
        o.stall_ms = std::stoi(value);
      else if (arg == "--seed")
        o.seed = std::stoull(value);
      else if (arg == "--node-prefix")
        o.node_prefix = value;
      else if (arg == "--streams")
        o.streams = std::stoi(value);
      else if (arg == "--channels")
        o.channels = std::stoi(value);
      else if (arg == "--agent-deadline")
        o.agent_deadline_s = std::stoi(value);
      else if (arg == "--seconds")
        o.seconds = std::stoi(value);
      else if (arg == "--hang-timeout")
        o.hang_timeout_s = std::stoi(value);
      else if (arg == "--updates")
        o.updates = std::stoi(value);
      else
        return Usage(("unknown flag " + arg).c_str());
    } catch (const std::exception&) {
      return Usage(("bad value for " + arg + ": " + value).c_str());
    }
  }
  if (o.target.empty()) return Usage("--target is required");
  if (o.agents < 1 || o.rate <= 0 || o.report_rate <= 0 || o.channels < 1) return Usage("bad counts or rates");
  if (o.seed == 0) o.seed = static_cast<uint64_t>(std::random_device{}());
  if (o.mode == "ingest") return RunIngest(o);
  if (o.mode == "helloless") return RunHelloless(o);
  if (o.mode == "progress-flood") return RunProgressFlood(o);
  if (o.mode == "inventory-churn") return RunInventoryChurn(o);
  return Usage("unknown mode");
}
