// ClusterServiceImpl's Watch alone on a real gRPC server, with a watch pool
// of one thread the test can hold: a watcher is ended for lagging only when
// its client holds it back, never because the server's own pool was busy
// while events it filters out went by; watch_coalesce puts the events of one
// window in one response (docs/architecture.md, "Watch").
#include <condition_variable>
#include <future>
#include <mutex>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/edge/auth.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/server/cluster_service.h"
#include "test/support/state/state_on_store.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

v1::Event EventAt(uint64_t revision, v1::EventType type) {
  v1::Event e;
  e.set_revision(revision);
  e.set_type(type);
  e.set_node("worker01");
  e.mutable_fault()->set_code("80E01801");
  return e;
}

class WatchServiceTest : public ::testing::Test {
 protected:
  void Start(WatchOptions options) {
    ASSERT_NO_FATAL_FAILURE(db_.Open());
    hub_ = std::make_unique<WatchHub>(db_.store_.get(), 4096);
    hub_->Init(0);
    auth_ = MakeClaimedActorAuthenticator();
    service_ =
        std::make_unique<ClusterServiceImpl>(db_.state_.get(), hub_.get(), &pool_, options, &metrics_, auth_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr);
    stub_ = v1::ClusterService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    Release();
    if (server_) server_->Shutdown();
    pool_.join();
  }

  // Everything posted to the watch pool before this call has run.
  void DrainPool() {
    std::promise<void> ran;
    boost::asio::post(pool_, [&] { ran.set_value(); });
    ran.get_future().wait();
  }
  // The pool's one thread waits until Release.
  void HoldPool() {
    std::promise<void> held;
    boost::asio::post(pool_, [this, &held] {
      held.set_value();
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return released_; });
    });
    held.get_future().wait();
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

  void Publish(uint64_t from, uint64_t to, v1::EventType type) {
    std::vector<v1::Event> events;
    for (uint64_t r = from; r <= to; ++r) events.push_back(EventAt(r, type));
    hub_->Publish(std::move(events));
  }

  bool Metric(const std::string& line) { return metrics_.Render().find(line + "\n") != std::string::npos; }

  boost::asio::thread_pool pool_{1};
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  MetricsRegistry metrics_;
  testing::StateOnStore<testing::MemoryBackend> db_;
  std::unique_ptr<WatchHub> hub_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<ClusterServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ClusterService::Stub> stub_;
};

TEST_F(WatchServiceTest, AWatcherHeldUpByTheServersPoolIsNotEndedForLagging) {
  WatchOptions options;
  options.max_lag_events = 16;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::WatchRequest req;
  req.add_types(v1::EVENT_TYPE_FAULT_CLEARED);
  auto reader = stub_->Watch(&ctx, req);
  // Subscribed, then its first pump (posted before this drain) found it
  // caught up: the watcher is live.
  ASSERT_TRUE(testing::WaitFor([&] { return hub_->watcher_count() == 1; }));
  DrainPool();

  // While the pool is busy, 100 events it filters out go by: the watcher is
  // 100 behind, by the server's doing.
  HoldPool();
  Publish(1, 100, v1::EVENT_TYPE_FAULT_RAISED);
  Release();
  Publish(101, 101, v1::EVENT_TYPE_FAULT_CLEARED);

  v1::WatchResponse resp;
  ASSERT_TRUE(reader->Read(&resp)) << reader->Finish().error_message();
  ASSERT_EQ(resp.events_size(), 1);
  EXPECT_EQ(resp.events(0).revision(), 101u);
  EXPECT_EQ(resp.revision(), 101u);
  EXPECT_TRUE(Metric("clusterd_watch_lagging_ended_total 0")) << metrics_.Render();
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// The window is long against the four publishes that follow the first
// response (microseconds apart) and short against the test's deadline.
TEST_F(WatchServiceTest, EventsWithinTheCoalescingWindowGoInOneResponse) {
  WatchOptions options;
  options.coalesce = std::chrono::milliseconds(300);
  ASSERT_NO_FATAL_FAILURE(Start(options));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub_->Watch(&ctx, v1::WatchRequest());
  ASSERT_TRUE(testing::WaitFor([&] { return hub_->watcher_count() == 1; }));
  DrainPool();

  // Idle: the first event goes at once, alone.
  Publish(1, 1, v1::EVENT_TYPE_FAULT_RAISED);
  v1::WatchResponse resp;
  ASSERT_TRUE(reader->Read(&resp)) << reader->Finish().error_message();
  ASSERT_EQ(resp.events_size(), 1);
  // The next four, published one by one inside the window, come together.
  for (uint64_t r = 2; r <= 5; ++r) Publish(r, r, v1::EVENT_TYPE_FAULT_CLEARED);
  ASSERT_TRUE(reader->Read(&resp)) << reader->Finish().error_message();
  ASSERT_EQ(resp.events_size(), 4);
  EXPECT_EQ(resp.events(0).revision(), 2u);
  EXPECT_EQ(resp.events(3).revision(), 5u);
  EXPECT_EQ(resp.revision(), 5u);
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace clusterd
