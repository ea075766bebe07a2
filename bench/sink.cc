#include "sink.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <google/protobuf/util/time_util.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include "clusterd/v1/agent.grpc.pb.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace clusterd::bench {
namespace {

using Req = v1::ConnectRequest;
using Resp = v1::ConnectResponse;
using google::protobuf::util::TimeUtil;

constexpr size_t kWatchBatch = 256;  // events per WatchResponse at most, as clusterd's default

class SinkWatch;

// The raw server-streaming baseline (scenario 6): every transition the sink
// reads becomes an Event carrying the fields clusterd fills, handed to every
// open Watch stream. Writes start on a 2-thread pool (clusterd's watch pool),
// one write in flight per stream; what queued meanwhile goes out in the next
// response. No storage, no history, no filter, no lag limit.
class WatchFanout {
 public:
  WatchFanout() : pool_(2) {}
  ~WatchFanout() { pool_.join(); }
  bool active() const { return watchers_.load(std::memory_order_relaxed) > 0; }
  uint64_t NextRevision() { return revision_.fetch_add(1) + 1; }
  void Add(const std::shared_ptr<SinkWatch>& w);
  void Remove(SinkWatch* w);
  void Publish(const std::shared_ptr<const v1::Event>& e);
  boost::asio::thread_pool& pool() { return pool_; }

 private:
  boost::asio::thread_pool pool_;
  std::mutex mu_;
  std::map<SinkWatch*, std::weak_ptr<SinkWatch>> list_;
  std::atomic<size_t> watchers_{0};
  std::atomic<uint64_t> revision_{0};
};

class SinkWatch final : public grpc::ServerWriteReactor<v1::WatchResponse>,
                        public std::enable_shared_from_this<SinkWatch> {
 public:
  explicit SinkWatch(WatchFanout* fanout) : fanout_(fanout) {}
  // Subscribed, then the response headers: the bench waits for the headers
  // before it publishes, since this sink keeps no history to replay.
  void Begin(std::shared_ptr<SinkWatch> self) {
    self_ = std::move(self);
    {
      std::lock_guard lock(mu_);
      writing_ = true;  // the headers go first: events published meanwhile wait in pending_
    }
    fanout_->Add(self_);
    std::lock_guard lock(mu_);
    StartSendInitialMetadata();
  }
  void OnSendInitialMetadataDone(bool ok) override { OnWriteDone(ok); }
  void Enqueue(const std::shared_ptr<const v1::Event>& e) {
    std::lock_guard lock(mu_);
    if (finishing_) return;
    pending_.push_back(e);
    ScheduleLocked();
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    if (finish_) {
      Finish(*finish_);
      return;
    }
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    ScheduleLocked();
  }
  void OnCancel() override {
    std::lock_guard lock(mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override {
    fanout_->Remove(this);
    self_.reset();  // may delete this
  }

 private:
  void ScheduleLocked() {
    if (finishing_ || writing_ || scheduled_ || pending_.empty()) return;
    scheduled_ = true;
    boost::asio::post(fanout_->pool(), [self = shared_from_this()] { self->Pump(); });
  }
  void Pump() {
    std::lock_guard lock(mu_);
    scheduled_ = false;
    if (finishing_ || writing_ || pending_.empty()) return;
    resp_.Clear();
    const size_t n = std::min(pending_.size(), kWatchBatch);
    for (size_t i = 0; i < n; ++i) *resp_.add_events() = *pending_[i];
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
    resp_.set_revision(resp_.events(static_cast<int>(n) - 1).revision());
    writing_ = true;
    StartWrite(&resp_);
  }
  void FinishLocked(grpc::Status st) {
    if (finishing_) return;
    finishing_ = true;
    pending_.clear();
    if (writing_) {
      finish_ = std::move(st);
      return;
    }
    Finish(st);
  }

  WatchFanout* fanout_;
  std::shared_ptr<SinkWatch> self_;  // owned by gRPC until OnDone
  std::recursive_mutex mu_;          // gRPC may run OnWriteDone inline from StartWrite on a pool thread
  std::deque<std::shared_ptr<const v1::Event>> pending_;
  v1::WatchResponse resp_;
  bool writing_ = false, scheduled_ = false, finishing_ = false;
  std::optional<grpc::Status> finish_;
};

void WatchFanout::Add(const std::shared_ptr<SinkWatch>& w) {
  std::lock_guard lock(mu_);
  list_[w.get()] = w;
  watchers_.store(list_.size());
}

void WatchFanout::Remove(SinkWatch* w) {
  std::lock_guard lock(mu_);
  list_.erase(w);
  watchers_.store(list_.size());
}

void WatchFanout::Publish(const std::shared_ptr<const v1::Event>& e) {
  std::lock_guard lock(mu_);
  for (auto& [raw, weak] : list_) {
    if (auto w = weak.lock()) w->Enqueue(e);
  }
}

class SinkReactor final : public grpc::ServerBidiReactor<Req, Resp> {
 public:
  explicit SinkReactor(WatchFanout* fanout) : fanout_(fanout) { StartRead(&req_); }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) {
      read_closed_ = true;
      MaybeFinishLocked();
      return;
    }
    if (req_.has_hello()) {
      node_ = req_.hello().node_name();
      Resp r;
      r.mutable_welcome()->set_revision(1);
      r.mutable_welcome()->mutable_heartbeat_interval()->set_seconds(2);
      r.mutable_welcome()->mutable_node_grace()->set_seconds(10);
      outq_.push_back(std::move(r));
    } else if (req_.has_transition()) {
      // Cumulative acks, coalesced like clusterd's: a newer ack replaces a queued one.
      if (!outq_.empty() && outq_.back().has_ack()) outq_.pop_back();
      Resp r;
      *r.mutable_ack()->mutable_id() = req_.transition().id();
      r.mutable_ack()->set_revision(++revision_);
      outq_.push_back(std::move(r));
      if (fanout_->active()) fanout_->Publish(EventOf(req_.transition()));
    }
    MaybeWriteLocked();
    if (!finished_) StartRead(&req_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishOnceLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    MaybeWriteLocked();
    MaybeFinishLocked();
  }

  void OnDone() override { delete this; }

 private:
  void MaybeWriteLocked() {
    if (writing_ || outq_.empty() || finished_) return;
    out_ = std::move(outq_.front());
    outq_.pop_front();
    writing_ = true;
    StartWrite(&out_);
  }
  void MaybeFinishLocked() {
    if (read_closed_ && !writing_ && outq_.empty()) FinishOnceLocked(grpc::Status::OK);
  }
  void FinishOnceLocked(const grpc::Status& st) {
    if (finished_) return;
    finished_ = true;
    Finish(st);
  }

  // The event clusterd would emit for this transition (same fields; the
  // raise count kept per device and code, as clusterd's fault record does).
  std::shared_ptr<const v1::Event> EventOf(const v1::FaultTransition& t) {
    const auto& r = t.fault();
    const bool raise = t.action() == v1::TRANSITION_ACTION_RAISE;
    const auto now = TimeUtil::NanosecondsToTimestamp(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    auto ev = std::make_shared<v1::Event>();
    const uint64_t rev = fanout_->NextRevision();
    ev->set_revision(rev);
    ev->set_type(raise ? v1::EVENT_TYPE_FAULT_RAISED : v1::EVENT_TYPE_FAULT_CLEARED);
    ev->set_node(node_);
    *ev->mutable_time() = now;
    v1::Fault* f = ev->mutable_fault();
    f->set_node(node_);
    if (r.has_device_id()) {
      ev->set_device_id(r.device_id());
      f->set_device_id(r.device_id());
    }
    f->set_source(r.source());
    f->set_code(r.code());
    f->set_subject(r.subject());
    f->set_level(r.level());
    f->set_message(r.message());
    std::string source = v1::FaultSource_Name(r.source());  // FAULT_SOURCE_ACCELERATOR -> accelerator
    source.erase(0, std::string_view("FAULT_SOURCE_").size());
    std::transform(source.begin(), source.end(), source.begin(), [](unsigned char c) { return std::tolower(c); });
    f->set_id(node_ + "/" + (r.has_device_id() ? std::to_string(r.device_id()) : "-") + "/" + source + "/" + r.code());
    uint64_t& count = raises_[{r.has_device_id() ? r.device_id() : UINT32_MAX, r.code()}];
    if (raise) ++count;
    f->set_count(std::max<uint64_t>(count, 1));
    f->set_state(raise ? v1::FAULT_STATE_ACTIVE : v1::FAULT_STATE_CLEARED);
    *f->mutable_first_seen() = now;
    *f->mutable_last_seen() = now;
    *f->mutable_activated_time() = now;
    if (!raise) {
      *f->mutable_cleared_time() = now;
      f->set_clear_reason("cleared by agent");
    }
    f->set_revision(rev);
    f->set_create_revision(rev);
    return ev;
  }

  WatchFanout* fanout_;
  std::mutex mu_;
  Req req_;
  Resp out_;
  std::deque<Resp> outq_;
  bool writing_ = false;
  bool read_closed_ = false;
  bool finished_ = false;
  uint64_t revision_ = 1;
  std::string node_;
  std::map<std::pair<uint32_t, std::string>, uint64_t> raises_;
};

}  // namespace

struct SinkServer::Fanout final : WatchFanout {};

struct SinkServer::Service final : v1::NodeAgentService::CallbackService {
  explicit Service(WatchFanout* fanout) : fanout(fanout) {}
  grpc::ServerBidiReactor<Req, Resp>* Connect(grpc::CallbackServerContext*) override { return new SinkReactor(fanout); }
  WatchFanout* fanout;
};

// The raw unary baseline: answers SERVING at once, nothing looked up.
struct SinkServer::Health final : grpc::health::v1::Health::CallbackService {
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest*,
                                  grpc::health::v1::HealthCheckResponse* resp) override {
    resp->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// The same-shape unary baseline: canned answers, copied out under a lock.
struct SinkServer::Cluster final : v1::ClusterService::CallbackService {
  explicit Cluster(WatchFanout* fanout) : fanout(fanout) {}
  grpc::ServerWriteReactor<v1::WatchResponse>* Watch(grpc::CallbackServerContext*, const v1::WatchRequest*) override {
    auto w = std::make_shared<SinkWatch>(fanout);
    SinkWatch* raw = w.get();
    raw->Begin(std::move(w));
    return raw;
  }
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx, const v1::ListNodesRequest*,
                                      v1::ListNodesResponse* resp) override {
    {
      std::lock_guard lock(mu);
      *resp = list;
    }
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* GetSummary(grpc::CallbackServerContext* ctx, const v1::GetSummaryRequest*,
                                       v1::GetSummaryResponse* resp) override {
    {
      std::lock_guard lock(mu);
      *resp = summary;
    }
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  WatchFanout* fanout;
  std::mutex mu;
  v1::ListNodesResponse list;
  v1::GetSummaryResponse summary;
};

void SinkServer::SetQueryAnswers(v1::ListNodesResponse list, v1::GetSummaryResponse summary) {
  std::lock_guard lock(cluster_->mu);
  cluster_->list = std::move(list);
  cluster_->summary = std::move(summary);
}

SinkServer::SinkServer(int port)
    : fanout_(std::make_unique<Fanout>()),
      service_(std::make_unique<Service>(fanout_.get())),
      health_(std::make_unique<Health>()),
      cluster_(std::make_unique<Cluster>(fanout_.get())) {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // ghz finds the methods by reflection
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  builder.RegisterService(health_.get());
  builder.RegisterService(cluster_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) throw std::runtime_error("sink server failed to start");
}

SinkServer::~SinkServer() {
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

std::string StartSinkProcess(ChildProcess* proc, int* port) {
  *port = FreeLoopbackPort();
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  if (auto e = proc->Spawn({self, "--sink-server", std::to_string(*port)}); !e.empty()) return e;
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(*port), grpc::InsecureChannelCredentials());
  const int64_t deadline = NowNs() + static_cast<int64_t>(30e9);
  while (NowNs() < deadline) {
    if (proc->Exited()) return "sink process exited during start";
    if (channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::milliseconds(200))) return "";
  }
  return "sink process did not accept connections within 30 s";
}

int RunSinkServer(int port) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before gRPC starts its threads
  SinkServer sink(port);
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}

}  // namespace clusterd::bench
