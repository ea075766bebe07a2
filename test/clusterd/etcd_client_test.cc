// EtcdClient against an in-process server of etcd's Lease service (real gRPC
// over loopback): a member whose calls keep failing for the transport gets a
// new channel, a new connection; one that answers in between keeps its own.
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/ha/etcd_client.h"

namespace clusterd::ha {
namespace {

// Grants every lease, or answers UNAVAILABLE (what a call to a member that is
// down or stopped ends with) while `failing`; records each caller's address.
class FakeLease final : public epb::Lease::Service {
 public:
  grpc::Status LeaseGrant(grpc::ServerContext* ctx, const epb::LeaseGrantRequest* request,
                          epb::LeaseGrantResponse* response) override {
    {
      std::lock_guard lock(mu_);
      peers_.insert(ctx->peer());
      last_peer_ = ctx->peer();
    }
    if (failing.load()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "member down");
    response->set_id(7);
    response->set_ttl(request->ttl());
    return grpc::Status::OK;
  }
  std::string last_peer() {
    std::lock_guard lock(mu_);
    return last_peer_;
  }
  size_t peers() {
    std::lock_guard lock(mu_);
    return peers_.size();
  }

  std::atomic<bool> failing{false};

 private:
  std::mutex mu_;
  std::set<std::string> peers_;
  std::string last_peer_;
};

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&lease_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override { server_->Shutdown(); }

  EtcdClient::Options Options() const {
    EtcdClient::Options options;
    options.endpoints = {"http://127.0.0.1:" + std::to_string(port_)};
    options.reconnect_after_failures = 3;
    options.reconnect_interval = std::chrono::nanoseconds(0);
    return options;
  }

  FakeLease lease_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(EtcdClientTest, AMemberThatKeepsFailingGetsANewConnection) {
  EtcdClient client(Options());
  ASSERT_TRUE(client.LeaseGrant(2).ok());
  const std::string first = lease_.last_peer();
  lease_.failing = true;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(client.LeaseGrant(2).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(client.reconnects(), 0u) << "two failures are not enough";
  EXPECT_EQ(client.LeaseGrant(2).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(client.reconnects(), 1u) << "the third failure in a row replaces the channel";
  lease_.failing = false;
  auto granted = client.LeaseGrant(2);
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  EXPECT_EQ(granted->id(), 7);
  EXPECT_NE(lease_.last_peer(), first) << "the call after the replacement came over a new connection";
  EXPECT_EQ(lease_.peers(), 2u);
}

TEST_F(EtcdClientTest, AnAnswerInBetweenKeepsTheChannel) {
  EtcdClient client(Options());
  for (int round = 0; round < 3; ++round) {
    lease_.failing = true;
    for (int i = 0; i < 2; ++i) EXPECT_FALSE(client.LeaseGrant(2).ok());
    lease_.failing = false;
    ASSERT_TRUE(client.LeaseGrant(2).ok());
  }
  EXPECT_EQ(client.reconnects(), 0u);
  EXPECT_EQ(lease_.peers(), 1u) << "one connection throughout";
}

TEST_F(EtcdClientTest, ReplacementsAreRateLimited) {
  auto options = Options();
  options.reconnect_interval = std::chrono::hours(1);  // none within this test
  EtcdClient client(options);
  lease_.failing = true;
  for (int i = 0; i < 9; ++i) EXPECT_FALSE(client.LeaseGrant(2).ok());
  EXPECT_EQ(client.reconnects(), 0u);
}

TEST_F(EtcdClientTest, AnInvalidRequestIsNotATransportFailure) {
  // etcd refuses a bad request with INVALID_ARGUMENT: the member answered.
  class Refusing final : public epb::KV::Service {
    grpc::Status Range(grpc::ServerContext*, const epb::RangeRequest*, epb::RangeResponse*) override {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad range");
    }
  } kv;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&kv);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto options = Options();
  options.endpoints = {"127.0.0.1:" + std::to_string(port)};
  EtcdClient client(options);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(client.Range(epb::RangeRequest()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.reconnects(), 0u);
  server->Shutdown();
}

}  // namespace
}  // namespace clusterd::ha
