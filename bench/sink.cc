#include "sink.h"

#include <pthread.h>
#include <signal.h>

#include <deque>
#include <string>
#include <mutex>
#include <stdexcept>

#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include "clusterd/v1/agent.grpc.pb.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace clusterd::bench {
namespace {

using Req = v1::ConnectRequest;
using Resp = v1::ConnectResponse;

class SinkReactor final : public grpc::ServerBidiReactor<Req, Resp> {
 public:
  SinkReactor() { StartRead(&req_); }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) {
      read_closed_ = true;
      MaybeFinishLocked();
      return;
    }
    if (req_.has_hello()) {
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

  std::mutex mu_;
  Req req_;
  Resp out_;
  std::deque<Resp> outq_;
  bool writing_ = false;
  bool read_closed_ = false;
  bool finished_ = false;
  uint64_t revision_ = 1;
};

}  // namespace

struct SinkServer::Service final : v1::NodeAgentService::CallbackService {
  grpc::ServerBidiReactor<Req, Resp>* Connect(grpc::CallbackServerContext*) override { return new SinkReactor(); }
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
    : service_(std::make_unique<Service>()), health_(std::make_unique<Health>()), cluster_(std::make_unique<Cluster>()) {
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
