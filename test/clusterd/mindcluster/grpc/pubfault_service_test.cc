// PubFaultServiceImpl alone on a real gRPC server, with its planning worker
// held by a hook: the worker's queue is bounded, a request beyond it is
// answered 410 "busy" at once and counted, and what was queued is answered
// once the worker runs again (docs/mindcluster.md).
#include <condition_variable>
#include <mutex>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/engine/watch_hub.h"
#include "clusterd/mindcluster/grpc/pubfault_service.h"
#include "clusterd/storage/memory_store.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

::PublicFaultRequest Request(const std::string& fault_id) {
  ::PublicFaultRequest r;
  r.set_id("req-" + fault_id);
  r.set_timestamp(1'700'000'000'000);
  r.set_version("1.0");
  r.set_resource("pingmesh");
  auto* f = r.add_faults();
  f->set_faultid(fault_id);
  f->set_faulttype("Network");
  f->set_faultcode("220001001");
  f->set_assertion("occur");
  auto* in = f->add_influence();
  in->set_nodename("worker01");  // not registered: planned, then dropped by the writer
  in->add_deviceids(0);
  return r;
}

// Holds the worker in its hook until Open; counts the requests it took.
class Gate {
 public:
  void Pass() {
    std::unique_lock lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool WaitEntered(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return entered_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool open_ = false;
};

// One call made with the callback client API; Wait returns once answered.
struct AsyncCall {
  grpc::ClientContext ctx;
  ::PublicFaultRequest req;
  ::RespStatus resp;
  grpc::Status status;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;

  void Start(::PubFault::Stub* stub) {
    stub->async()->SendPublicFault(&ctx, &req, &resp, [this](grpc::Status st) {
      std::lock_guard lock(mu);
      status = std::move(st);
      done = true;
      cv.notify_all();
    });
  }
  bool Wait() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(20), [this] { return done; });
  }
};

class PubFaultServiceTest : public ::testing::Test {
 protected:
  void Start(PubFaultOptions options) {
    auto store = storage::MemoryStore::Open(std::make_shared<storage::MemoryDisk>(), storage::StoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &SystemClock::Instance());
    ASSERT_TRUE(state_->Load().ok());
    hub_ = std::make_unique<WatchHub>(store_.get(), 1024);
    hub_->Init(state_->revision());
    engine_ = std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), &SystemClock::Instance(),
                                       EngineOptions(), &metrics_);
    engine_->Start();
    auth_ = MakeClaimedActorAuthenticator();
    PubFaultServiceImpl::Hooks hooks;
    hooks.before_plan = [this] { gate_.Pass(); };
    service_ = std::make_unique<PubFaultServiceImpl>(engine_.get(), auth_.get(), &SystemClock::Instance(),
                                                     PubFaultCodeTable::Default(), std::move(options), &metrics_,
                                                     std::move(hooks));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr);
    stub_ = ::PubFault::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    gate_.Open();  // the server's Shutdown waits for the calls the worker answers
    if (server_) server_->Shutdown();
    service_.reset();
    if (engine_) engine_->Stop();
  }

  // The metric's rendered line, e.g. "clusterd_pubfault_refused_total{reason=\"busy\"} 1".
  bool Metric(const std::string& line) { return metrics_.Render().find(line + "\n") != std::string::npos; }

  Gate gate_;
  MetricsRegistry metrics_;
  Catalog catalog_ = Catalog::Default();
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<WatchHub> hub_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<PubFaultServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<::PubFault::Stub> stub_;
};

TEST_F(PubFaultServiceTest, BeyondTheQueueARequestIsRefusedBusyAndTheQueuedOnesAreAnsweredLater) {
  PubFaultOptions options;
  options.max_queued = 1;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  // The worker takes the first and is held; the second waits in the queue.
  AsyncCall first, second;
  first.req = Request("fault-0001");
  first.Start(stub_.get());
  ASSERT_TRUE(gate_.WaitEntered(1));
  second.req = Request("fault-0002");
  second.Start(stub_.get());
  ASSERT_TRUE(testing::WaitFor([&] { return service_->queued() == 1; }));

  // The third finds the queue full: answered at once, without the worker.
  grpc::ClientContext ctx;
  ::RespStatus resp;
  ASSERT_TRUE(stub_->SendPublicFault(&ctx, Request("fault-0003"), &resp).ok());
  EXPECT_EQ(resp.code(), kPubFaultRefused);
  EXPECT_NE(resp.info().find("busy: 1 public-fault requests are already waiting"), std::string::npos) << resp.info();
  EXPECT_TRUE(Metric("clusterd_pubfault_refused_total{reason=\"busy\"} 1")) << metrics_.Render();
  EXPECT_TRUE(Metric("clusterd_pubfault_queued 1")) << metrics_.Render();

  // Released, the worker plans both and the writer answers them (their node
  // is not registered: nothing applied, each says why).
  gate_.Open();
  for (AsyncCall* call : {&first, &second}) {
    ASSERT_TRUE(call->Wait());
    ASSERT_TRUE(call->status.ok()) << call->status.error_message();
    EXPECT_EQ(call->resp.code(), kPubFaultInvalid) << call->resp.info();
    EXPECT_NE(call->resp.info().find("node worker01 is not registered"), std::string::npos) << call->resp.info();
  }
  EXPECT_EQ(service_->queued(), 0u);
  EXPECT_TRUE(Metric("clusterd_pubfault_queued 0")) << metrics_.Render();
}

// A request the cheap checks refuse never reaches the worker: answered on
// the gRPC thread while the worker is held.
TEST_F(PubFaultServiceTest, CheapRefusalsDoNotWaitForTheWorker) {
  PubFaultOptions options;
  options.max_queued = 1;
  options.max_faults = 2;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  AsyncCall held;
  held.req = Request("fault-0001");
  held.Start(stub_.get());
  ASSERT_TRUE(gate_.WaitEntered(1));

  auto big = Request("fault-0002");
  big.mutable_faults(0)->mutable_influence(0)->add_deviceids(1);
  big.mutable_faults(0)->mutable_influence(0)->add_deviceids(2);
  grpc::ClientContext ctx;
  ::RespStatus resp;
  ASSERT_TRUE(stub_->SendPublicFault(&ctx, big, &resp).ok());
  EXPECT_EQ(resp.code(), kPubFaultInvalid);
  EXPECT_NE(resp.info().find("names 3 (fault, node, device) entries, more than the 2"), std::string::npos)
      << resp.info();
  EXPECT_EQ(service_->queued(), 0u);
  gate_.Open();
  ASSERT_TRUE(held.Wait());
}

}  // namespace
}  // namespace clusterd
