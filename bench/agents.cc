#include "agents.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <random>
#include <thread>

#include "common/grpc/credentials.h"

namespace clusterd::bench {

// ---------------------------------------------------------------- messages

namespace {
std::atomic<int> devices_per_node{kDevices};
std::atomic<const char*> device_model{"910B3"};
}  // namespace

int DevicesPerNode() { return devices_per_node.load(std::memory_order_relaxed); }
void SetDevicesPerNode(int n) { devices_per_node = n; }
const char* DeviceModel() { return device_model.load(std::memory_order_relaxed); }
void SetDeviceModel(const char* model) { device_model = model; }

namespace {
std::function<void(v1::Hello*)>& HelloEdit() {
  static std::function<void(v1::Hello*)> edit;
  return edit;
}
}  // namespace

void SetHelloEdit(std::function<void(v1::Hello*)> edit) { HelloEdit() = std::move(edit); }

v1::ConnectRequest MakeHello(const std::string& node) {
  v1::ConnectRequest req;
  auto* h = req.mutable_hello();
  h->set_node_name(node);
  h->set_boot_id("bench-boot");
  h->set_agent_version("clusterd-bench");
  h->set_epoch(kEpoch);
  for (int i = 0; i < DevicesPerNode(); ++i) {
    auto* d = h->mutable_inventory()->add_devices();
    d->set_id(i);
    d->set_vendor("huawei");
    d->set_model(DeviceModel());
  }
  if (HelloEdit()) HelloEdit()(h);
  return req;
}

void FillFault(uint64_t seq, v1::TransitionAction action, uint32_t device, const std::string& code,
               v1::FaultLevel level, v1::ConnectRequest* req) {
  auto* t = req->mutable_transition();
  t->mutable_id()->set_epoch(kEpoch);
  t->mutable_id()->set_seq(seq);
  t->set_action(action);
  auto* f = t->mutable_fault();
  f->set_device_id(device);
  f->set_source(v1::FAULT_SOURCE_ACCELERATOR);
  f->set_code(code);
  f->set_level(level);
  f->set_message("bench: injected fault " + code);
  auto now = std::chrono::system_clock::now().time_since_epoch();
  t->mutable_time()->set_seconds(std::chrono::duration_cast<std::chrono::seconds>(now).count());
  t->mutable_time()->set_nanos(
      static_cast<int32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count() % 1000000000));
}

void FillTransition(uint64_t seq, v1::ConnectRequest* req) {
  FillFault(seq, seq % 2 == 1 ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR,
            static_cast<uint32_t>(((seq - 1) / 2) % kDevices), "020000002", v1::FAULT_LEVEL_SUB_HEALTH, req);
  req->mutable_transition()->mutable_fault()->set_message("bench: HBM single-bit ECC error count above threshold");
}

size_t RecordSize() {
  v1::ConnectRequest req;
  FillTransition(1, &req);
  return req.transition().ByteSizeLong();
}

std::vector<std::string> NodeNames(const std::string& prefix, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// "ipv4:a,b,c" -> "ipv4:a"; any other target as it is.
static std::string FirstAddress(const std::string& target) {
  if (AddressCount(target) < 2) return target;
  const size_t comma = target.find(',');
  return comma == std::string::npos ? target : target.substr(0, comma);
}

std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(const std::string& target, int channels,
                                                         const std::string& role) {
  std::vector<std::shared_ptr<grpc::Channel>> out;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("bench.channel", i);  // distinct args -> distinct subchannel/connection
    args.SetString("bench.role", role);
    args.SetMaxReceiveMessageSize(64 << 20);
    // As NodeD: its own backoff governs reconnects, gRPC's is kept short.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2'000);
    out.push_back(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  }
  return out;
}

// ---------------------------------------------------------------- DriveAgents

namespace {

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

}  // namespace

DriveResult DriveAgents(const std::string& target, const std::string& node_prefix, int streams, double duration_s,
                        double rate, uint64_t window) {
  DriveResult result;
  const bool paced = rate > 0;
  const double warmup_s = std::min(1.0, duration_s / 4);
  // Several channels, like several agents' connections (each channel is one HTTP/2 connection).
  const int channels = std::min(streams, 4);
  auto chans = MakeChannels(target, channels);
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
    std::this_thread::sleep_until(
        Clock::time_point(std::chrono::nanoseconds(start + static_cast<int64_t>(duration_s * 1e9))));
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
  json j = {{"acked_per_s", r.acked_per_s},
            {"sent_per_s", r.sent_per_s},
            {"acked_total", r.acked_total},
            {"window_s", r.window_s},
            {"ok", r.ok}};
  if (!std::isnan(r.p50_ms)) {
    j["latency_ms"] = {
        {"p50", r.p50_ms}, {"p90", r.p90_ms}, {"p99", r.p99_ms}, {"max", r.max_ms}, {"samples", r.latency_samples}};
    j["send_lag_p99_ms"] = r.send_lag_p99_ms;
  }
  if (!r.ok) j["error"] = r.error;
  return j;
}

// ---------------------------------------------------------------- AgentPool

// One attempt of a stream: a reactor per call, so a stream that reconnects
// gets a fresh call (and ClientContext). It forwards to its Stream and is
// deleted by it in OnDone (gRPC touches a client reactor no more after OnDone).
class AgentPool::Call final : public grpc::ClientBidiReactor<v1::ConnectRequest, v1::ConnectResponse> {
 public:
  explicit Call(Stream* s) : stream(s) {}
  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& st) override;
  Stream* stream;
  grpc::ClientContext ctx;
  v1::ConnectRequest out;
  v1::ConnectResponse in;
  std::deque<v1::ConnectRequest> queue;
  bool writing = false, writes_done = false, welcomed = false;
  // Writes start from other threads too (heartbeats, Send): a hold keeps
  // gRPC from running OnDone (which deletes the call) while one starts.
  // Released once the call's read fails: the call is over, and no write
  // starts after that (`over`).
  bool over = false;
};

// Logical state of one agent (one node), across calls. Everything is under a
// recursive mutex held while a write starts, so a reaction that runs inline
// finds it consistent.
class AgentPool::Stream {
 public:
  Stream(AgentPool* pool, size_t index, size_t slot, std::string name)
      : pool_(pool), index_(index), slot_(slot), name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // Starts a call: Hello (with the faults active now), then every
  // transition not acknowledged yet (clusterd drops what it already has).
  void Start() {
    std::lock_guard lock(mu_);
    if (final_done_ || stopped_) return;
    started_ = true;
    pending_reconnect_ = false;
    auto* c = new Call(this);
    call_ = c;
    ++pool_->live_calls_;
    pool_->Stub(slot_, rotation_)->async()->Connect(&c->ctx, c);
    c->AddHold();
    c->StartRead(&c->in);
    v1::ConnectRequest hello = MakeHello(name_);
    for (const auto& [key, report] : active_) *hello.mutable_hello()->add_active_faults() = report;
    EnqueueLocked(c, std::move(hello));
    for (const auto& req : unacked_) EnqueueLocked(c, req);
    last_msg_ns_ = NowNs();
    c->StartCall();
  }

  uint64_t Send(v1::TransitionAction action, uint32_t device, const std::string& code, v1::FaultLevel level) {
    v1::ConnectRequest req;
    std::lock_guard lock(mu_);
    const uint64_t seq = ++sent_;
    FillFault(seq, action, device, code, level, &req);
    const std::string key = std::to_string(device) + "/" + code;
    if (action == v1::TRANSITION_ACTION_RAISE) {
      active_[key] = req.transition().fault();
    } else {
      active_.erase(key);
    }
    const int64_t now = NowNs();
    send_ns_.push_back(now);
    ack_ns_.push_back(0);
    if (pool_->reconnect_) unacked_.push_back(req);
    if (call_ && !stopped_) {
      EnqueueLocked(call_, std::move(req));
      last_msg_ns_ = now;
    }
    return seq;
  }

  // A heartbeat on the current call; false when there is none (reconnecting).
  bool Heartbeat() {
    std::lock_guard lock(mu_);
    if (!call_ || !call_->welcomed || stopped_) return false;
    v1::ConnectRequest req;
    auto now = std::chrono::system_clock::now().time_since_epoch();
    req.mutable_heartbeat()->mutable_time()->set_seconds(std::chrono::duration_cast<std::chrono::seconds>(now).count());
    req.mutable_heartbeat()->mutable_time()->set_nanos(
        static_cast<int32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count() % 1000000000));
    EnqueueLocked(call_, std::move(req));
    last_msg_ns_ = NowNs();
    return true;
  }

  void RequestClose() {
    std::lock_guard lock(mu_);
    stopped_ = true;
    close_requested_ = true;
    if (call_) {
      MaybeWritesDoneLocked(call_);
    } else if (started_) {
      FinalDoneLocked();  // waiting to reconnect: nothing to close
    }
  }

  // Ends the stream for good (no reconnect); with reconnect on, as an agent
  // that died: its call is cancelled.
  void Cancel() {
    std::lock_guard lock(mu_);
    stopped_ = true;
    if (call_) {
      call_->ctx.TryCancel();
    } else if (started_) {
      FinalDoneLocked();
    }
  }

  bool started() {
    std::lock_guard lock(mu_);
    return started_;
  }
  bool done() {
    std::lock_guard lock(mu_);
    return final_done_;
  }
  bool attached() {
    std::lock_guard lock(mu_);
    return call_ && call_->welcomed;
  }
  bool AllAcked() {
    std::lock_guard lock(mu_);
    return acked_ >= sent_;
  }
  uint64_t sent() {
    std::lock_guard lock(mu_);
    return sent_;
  }
  int64_t last_msg_ns() {
    std::lock_guard lock(mu_);
    return last_msg_ns_;
  }
  int64_t SentNs(uint64_t seq) {
    std::lock_guard lock(mu_);
    return seq >= 1 && seq <= sent_ ? send_ns_[seq] : 0;
  }
  int64_t AckedNs(uint64_t seq) {
    std::lock_guard lock(mu_);
    return seq >= 1 && seq <= sent_ ? ack_ns_[seq] : 0;
  }
  void AckLatencies(int64_t from, int64_t to, std::vector<int64_t>* out) {
    std::lock_guard lock(mu_);
    for (uint64_t q = 1; q <= sent_; ++q) {
      if (send_ns_[q] >= from && send_ns_[q] < to && ack_ns_[q] != 0) out->push_back(ack_ns_[q] - send_ns_[q]);
    }
  }
  grpc::Status status() {
    std::lock_guard lock(mu_);
    return status_;
  }

  void OnWriteDone(Call* c, bool ok) {
    std::lock_guard lock(mu_);
    c->writing = false;
    if (!ok || c->over) return;  // the call is over; OnDone follows
    if (!c->queue.empty()) {
      c->out = std::move(c->queue.front());
      c->queue.pop_front();
      c->writing = true;
      c->StartWrite(&c->out);
      return;
    }
    MaybeWritesDoneLocked(c);
  }

  void OnReadDone(Call* c, bool ok) {
    if (!ok) {
      std::lock_guard lock(mu_);
      c->over = true;
      c->RemoveHold();  // OnDone may run now (even inline): c is not touched after it
      return;
    }
    const int64_t now = NowNs();
    bool welcome = false;
    {
      std::lock_guard lock(mu_);
      uint64_t upto = 0;
      if (c->in.has_welcome() && !c->welcomed) {
        c->welcomed = true;
        welcome = true;
        upto = c->in.welcome().applied_seq();
        if (!ever_welcomed_) {
          ever_welcomed_ = true;
          ++pool_->welcomed_;
        }
        ++pool_->attached_;
        ++pool_->welcomes_total_;
      }
      if (c->in.has_ack()) upto = c->in.ack().id().seq();
      for (uint64_t q = acked_ + 1; q <= upto && q <= sent_; ++q) ack_ns_[q] = now;
      acked_ = std::max(acked_, std::min(upto, sent_));
      while (!unacked_.empty() && unacked_.front().transition().id().seq() <= acked_) unacked_.pop_front();
    }
    if (welcome) pool_->Notify(nullptr);
    if (pool_->on_message_ && !c->in.has_welcome() && !c->in.has_ack()) pool_->on_message_(index_, c->in);
    c->StartRead(&c->in);
  }

  // Any message on the current call; false when there is none.
  bool SendMessage(v1::ConnectRequest req) {
    std::lock_guard lock(mu_);
    if (!call_ || !call_->welcomed || stopped_) return false;
    EnqueueLocked(call_, std::move(req));
    last_msg_ns_ = NowNs();
    return true;
  }

  void OnDone(Call* c, const grpc::Status& s) {
    bool final_done = false;
    {
      std::lock_guard lock(mu_);
      status_ = s;
      if (c->welcomed) --pool_->attached_;
      if (call_ == c) call_ = nullptr;
      delete c;
      if (stopped_ || !pool_->reconnect_ || pool_->stopping_) {
        final_done = !final_done_;
        final_done_ = true;
      } else {
        // Like NodeD: the next call starts at the next replica's address;
        // exponential backoff with jitter, reset by a session that lasted
        // longer than the longest backoff and not grown by a standby's
        // refusal until every replica has refused.
        const int64_t now = NowNs();
        const size_t replicas = pool_->rotations_;
        rotation_ = (rotation_ + 1) % replicas;
        const bool refused =
            s.error_code() == grpc::StatusCode::UNAVAILABLE && s.error_message().rfind("standby ", 0) == 0;
        refusals_ = refused ? refusals_ + 1 : 0;
        if (now - call_start_ns_ > pool_->backoff_max_ns_ || (refused && refusals_ < replicas)) {
          backoff_ns_ = pool_->backoff_min_ns_;
        }
        std::uniform_real_distribution<double> jitter(0.5, 1.0);
        const int64_t wait = static_cast<int64_t>(static_cast<double>(backoff_ns_) * jitter(rng_));
        backoff_ns_ = std::min(backoff_ns_ * 2, pool_->backoff_max_ns_);
        pending_reconnect_ = true;
        pool_->ScheduleReconnect(this, now + wait);
      }
    }
    pool_->Notify(final_done ? &pool_->done_ : nullptr, true);  // last: the pool may be deleted once counted
  }

  // Timer thread: the backoff is over.
  void Reconnect() {
    std::lock_guard lock(mu_);
    if (!pending_reconnect_ || stopped_ || final_done_) return;
    call_start_ns_ = NowNs();
    Start();
  }

  void InitBackoff(int64_t min_ns, uint64_t seed) {
    backoff_ns_ = min_ns;
    rng_.seed(seed);
  }

 private:
  void FinalDoneLocked() {
    if (final_done_) return;
    final_done_ = true;
    pool_->Notify(&pool_->done_);
  }
  void EnqueueLocked(Call* c, v1::ConnectRequest req) {
    if (c->writes_done || c->over) return;
    if (c->writing) {
      c->queue.push_back(std::move(req));
      return;
    }
    c->out = std::move(req);
    c->writing = true;
    c->StartWrite(&c->out);
  }
  void MaybeWritesDoneLocked(Call* c) {
    if (!close_requested_ || c->writing || !c->queue.empty() || c->writes_done || c->over) return;
    c->writes_done = true;
    c->StartWritesDone();
  }

  AgentPool* pool_;
  const size_t index_;   // in the pool
  const size_t slot_;    // which of the pool's channels
  size_t rotation_ = 0;  // with several replicas: which one the next call tries first
  size_t refusals_ = 0;  // by standbys, in a row
  const std::string name_;
  std::recursive_mutex mu_;
  Call* call_ = nullptr;
  std::map<std::string, v1::FaultReport> active_;  // device/code -> report, for the Hello
  std::deque<v1::ConnectRequest> unacked_;         // resent after a reconnect (reconnect on only)
  bool started_ = false, close_requested_ = false, stopped_ = false, ever_welcomed_ = false;
  bool final_done_ = false, pending_reconnect_ = false;
  uint64_t sent_ = 0, acked_ = 0;
  int64_t last_msg_ns_ = 0, call_start_ns_ = 0, backoff_ns_ = 0;
  std::mt19937_64 rng_;
  std::vector<int64_t> send_ns_{0}, ack_ns_{0};  // by seq; [0] unused
  grpc::Status status_;
};

void AgentPool::Call::OnWriteDone(bool ok) { stream->OnWriteDone(this, ok); }
void AgentPool::Call::OnReadDone(bool ok) { stream->OnReadDone(this, ok); }
void AgentPool::Call::OnDone(const grpc::Status& st) { stream->OnDone(this, st); }

bool AgentPool::SendMessage(size_t i, v1::ConnectRequest req) { return streams_[i]->SendMessage(std::move(req)); }

AgentPool::AgentPool(const std::string& target, std::vector<std::string> names, int channels, bool reconnect)
    : rotations_(AddressCount(target)), slots_(static_cast<size_t>(channels)), reconnect_(reconnect) {
  // The channels once per replica, each to that replica's address alone.
  // NodeD opens a new channel on the rotated list for every session, so its
  // pick_first starts again at the next replica each time; these channels
  // live as long as the pool, and one made on the whole list would stay
  // connected to whichever replica answered while its first was down (a
  // standby during a takeover), so a stream's retries would all reach that
  // standby. One address per rotation: a stream's next attempt goes to the
  // next replica, as NodeD's does.
  for (size_t r = 0; r < rotations_; ++r) {
    for (auto& ch : MakeChannels(FirstAddress(RotateAddresses(target, r)), channels)) {
      stubs_.push_back(v1::NodeAgentService::NewStub(ch));
      channels_.push_back(std::move(ch));
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    index_[names[i]] = static_cast<int>(i);
    streams_.push_back(std::make_unique<Stream>(this, i, i % slots_, std::move(names[i])));
    streams_.back()->InitBackoff(backoff_min_ns_, i + 1);
  }
  hb_skip_ = std::make_unique<std::atomic<bool>[]>(streams_.size());
  if (reconnect_) timer_ = std::thread([this] { TimerLoop(); });
}

AgentPool::~AgentPool() {
  StopHeartbeats();
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (timer_.joinable()) timer_.join();
  for (auto& s : streams_) {
    if (s->started() && !s->done()) s->Cancel();
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return live_calls_.load() == 0; });
}

void AgentPool::Notify(std::atomic<size_t>* counter, bool call_ended) {
  std::lock_guard lock(mu_);
  if (counter) ++*counter;
  if (call_ended) --live_calls_;
  cv_.notify_all();
}

void AgentPool::ScheduleReconnect(Stream* s, int64_t due_ns) {
  std::lock_guard lock(mu_);
  timers_.emplace(due_ns, s);
  cv_.notify_all();
}

void AgentPool::TimerLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (timers_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const int64_t due = timers_.begin()->first;
    if (NowNs() < due) {
      cv_.wait_until(lock, Clock::time_point(std::chrono::nanoseconds(due)));
      continue;
    }
    Stream* s = timers_.begin()->second;
    timers_.erase(timers_.begin());
    ++reconnects_;
    lock.unlock();
    s->Reconnect();
    lock.lock();
  }
}

void AgentPool::StartHeartbeats(double interval_s, size_t threads) {
  StopHeartbeats();
  hb_stop_ = false;
  // With several threads, each sends for the streams i % threads == t: one
  // thread for 100,000 agents fell a whole grace behind while it shared 2
  // vCPUs with a reattach storm (scenario 20 uses 4).
  const size_t n = streams_.size();
  if (n == 0) return;
  threads = std::clamp<size_t>(threads, 1, n);
  const int64_t interval = static_cast<int64_t>(interval_s * 1e9);
  const int64_t start = NowNs();
  for (size_t t = 0; t < threads; ++t) {
    hb_.emplace_back([this, interval, start, n, threads, t] {
      const size_t mine = (n - t + threads - 1) / threads;  // streams t, t + threads, ...
      for (uint64_t k = 0; !hb_stop_.load(); ++k) {
        const size_t i = t + (k % mine) * threads;
        const int64_t due =
            start + static_cast<int64_t>(k / mine) * interval +
            static_cast<int64_t>(static_cast<double>(interval) * static_cast<double>(i) / static_cast<double>(n));
        if (due > NowNs() + 1'000'000) {
          // Sleep in slices of at most 50 ms so StopHeartbeats is prompt.
          while (!hb_stop_.load() && due > NowNs()) SleepUntilNs(std::min(due, NowNs() + 50'000'000));
        }
        if (hb_stop_.load()) break;
        if (!hb_skip_[i].load(std::memory_order_relaxed) && streams_[i]->Heartbeat()) {
          ++heartbeats_;
          const int64_t late = NowNs() - due;
          int64_t seen = hb_max_late_.load(std::memory_order_relaxed);
          while (late > seen && !hb_max_late_.compare_exchange_weak(seen, late)) {
          }
        }
      }
    });
  }
}

void AgentPool::StopHeartbeats() {
  hb_stop_ = true;
  for (auto& t : hb_) t.join();
  hb_.clear();
}

void AgentPool::SetHeartbeating(size_t i, bool on) { hb_skip_[i] = !on; }

const std::string& AgentPool::name(size_t i) const { return streams_[i]->name(); }

int AgentPool::IndexOf(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

std::string AgentPool::Connect(double timeout_s) {
  for (auto& s : streams_) s->Start();
  std::unique_lock lock(mu_);
  const bool ok = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                               [&] { return welcomed_.load() >= streams_.size() || done_.load() > 0; });
  if (ok && done_.load() == 0) return "";
  lock.unlock();
  for (auto& s : streams_) {
    if (s->done() && !s->status().ok()) return "agent stream " + s->name() + " ended: " + s->status().error_message();
  }
  return std::to_string(welcomed_.load()) + " of " + std::to_string(streams_.size()) +
         " agent streams welcomed within " + Fmt(timeout_s, " s");
}

size_t AgentPool::WaitAttached(size_t n, int64_t deadline_ns) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, Clock::time_point(std::chrono::nanoseconds(deadline_ns)), [&] { return attached_.load() >= n; });
  return attached_.load();
}

uint64_t AgentPool::Send(size_t i, v1::TransitionAction action, uint32_t device, const std::string& code,
                         v1::FaultLevel level) {
  return streams_[i]->Send(action, device, code, level);
}

void AgentPool::Kill(size_t i) { streams_[i]->Cancel(); }
bool AgentPool::Attached(size_t i) const { return streams_[i]->attached(); }
int64_t AgentPool::LastMessageNs(size_t i) const { return streams_[i]->last_msg_ns(); }
bool AgentPool::Heartbeat(size_t i) { return streams_[i]->Heartbeat(); }

int64_t AgentPool::SentNs(size_t i, uint64_t seq) const { return streams_[i]->SentNs(seq); }
int64_t AgentPool::AckedNs(size_t i, uint64_t seq) const { return streams_[i]->AckedNs(seq); }
uint64_t AgentPool::Sent(size_t i) const { return streams_[i]->sent(); }

bool AgentPool::WaitAllAcked(double timeout_s) {
  const int64_t deadline = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  for (;;) {
    bool all = true, failed = false;
    for (auto& s : streams_) {
      if (s->AllAcked()) continue;
      all = false;
      failed |= s->done();
    }
    if (all) return true;
    if (failed || NowNs() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::vector<int64_t> AgentPool::AckLatencies(int64_t from_ns, int64_t to_ns) const {
  std::vector<int64_t> out;
  for (auto& s : streams_) s->AckLatencies(from_ns, to_ns, &out);
  return out;
}

std::string AgentPool::Close(double timeout_s) {
  StopHeartbeats();
  size_t started = 0;
  for (auto& s : streams_) {
    if (!s->started()) continue;
    ++started;
    s->RequestClose();
  }
  {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done_.load() >= started; })) {
      lock.unlock();
      for (auto& s : streams_) {
        if (s->started() && !s->done()) s->Cancel();
      }
      return "agent streams did not end within " + Fmt(timeout_s, " s") + " of their half-close";
    }
  }
  for (auto& s : streams_) {
    if (s->started() && !s->status().ok()) {
      return "agent stream " + s->name() + " ended: " + std::to_string(s->status().error_code()) + " " +
             s->status().error_message();
    }
  }
  return "";
}

// ---------------------------------------------------------------- WatchPool

class WatchPool::Watcher final : public grpc::ClientReadReactor<v1::WatchResponse> {
 public:
  Watcher(WatchPool* pool, size_t index, v1::ClusterService::Stub* stub, const v1::WatchRequest& req)
      : pool_(pool), index_(index), req_(req) {
    stub->async()->Watch(&ctx_, &req_, this);
    StartRead(&resp_);
    StartCall();
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnReadInitialMetadataDone(bool ok) override {
    if (ok) pool_->headers_.fetch_add(1);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    const int64_t now = NowNs();
    pool_->on_response_(index_, resp_, now);
    StartRead(&resp_);
  }
  void OnDone(const grpc::Status& s) override { pool_->OnWatcherDone(s); }

 private:
  WatchPool* pool_;
  const size_t index_;
  grpc::ClientContext ctx_;
  v1::WatchRequest req_;
  v1::WatchResponse resp_;
};

WatchPool::WatchPool(const std::string& target, int count, const v1::WatchRequest& req, OnResponse on_response,
                     int channels)
    : channels_(MakeChannels(target, channels, "watch")), on_response_(std::move(on_response)) {
  for (auto& ch : channels_) stubs_.push_back(v1::ClusterService::NewStub(ch));
  for (int i = 0; i < count; ++i) {
    watchers_.push_back(std::make_unique<Watcher>(this, static_cast<size_t>(i), stubs_[i % stubs_.size()].get(), req));
  }
}

WatchPool::~WatchPool() { Cancel(); }

void WatchPool::OnWatcherDone(const grpc::Status& s) {
  std::lock_guard lock(mu_);
  ++done_;
  if (!cancelled_) {
    ++ended_;
    if (first_end_.empty()) first_end_ = std::to_string(s.error_code()) + " " + s.error_message();
  }
  cv_.notify_all();
}

std::string WatchPool::first_end_status() const {
  std::lock_guard lock(mu_);
  return first_end_;
}

void WatchPool::Cancel() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
  }
  for (auto& w : watchers_) w->Cancel();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_ >= watchers_.size(); });
}

}  // namespace clusterd::bench
