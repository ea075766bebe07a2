// EtcdClient against an in-process server of etcd's Lease service (real gRPC
// over loopback): a member whose calls keep failing for the transport gets a
// new channel, a new connection; one that answers in between keeps its own.
// And the election's requests (LeaseKv) as etcd receives them.
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

// An in-process server of `service` on a free loopback port (*port).
std::unique_ptr<grpc::Server> Serve(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = Serve(&lease_, &port_);
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override { server_->Shutdown(); }

  // A client of the fake Lease server, or of another one on `port`.
  EtcdClient::Options Options(int port = 0) const {
    EtcdClient::Options options;
    options.endpoints = {"http://127.0.0.1:" + std::to_string(port != 0 ? port : port_)};
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
  EXPECT_EQ(granted->id, 7);
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
  int port = 0;
  auto server = Serve(&kv, &port);
  ASSERT_NE(server, nullptr);
  EtcdClient client(Options(port));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(client.Range(epb::RangeRequest()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.reconnects(), 0u);
  server->Shutdown();
}

// The election's claim on the leader key, as etcd sees it: one transaction
// that creates the key only if it does not exist (create revision 0),
// attached to the lease, and reads it otherwise.
TEST_F(EtcdClientTest, CreateIfAbsentIsOneTransactionOnTheKeysCreateRevision) {
  class Kv final : public epb::KV::Service {
   public:
    grpc::Status Txn(grpc::ServerContext*, const epb::TxnRequest* request, epb::TxnResponse* response) override {
      std::lock_guard lock(mu);
      txn = *request;
      *response = answer;
      return grpc::Status::OK;
    }
    grpc::Status Range(grpc::ServerContext*, const epb::RangeRequest* request, epb::RangeResponse* response) override {
      std::lock_guard lock(mu);
      range = *request;
      *response = range_answer;
      return grpc::Status::OK;
    }
    std::mutex mu;
    epb::TxnRequest txn;
    epb::TxnResponse answer;
    epb::RangeRequest range;
    epb::RangeResponse range_answer;
  } kv;
  int port = 0;
  auto server = Serve(&kv, &port);
  ASSERT_NE(server, nullptr);
  EtcdClient client(Options(port));

  kv.answer.set_succeeded(true);
  kv.answer.mutable_header()->set_revision(42);
  auto won = client.CreateIfAbsent("/p/leader", "r1", 0x77);
  ASSERT_TRUE(won.ok()) << won.status().ToString();
  {
    std::lock_guard lock(kv.mu);
    ASSERT_EQ(kv.txn.compare_size(), 1);
    EXPECT_EQ(kv.txn.compare(0).key(), "/p/leader");
    EXPECT_EQ(kv.txn.compare(0).target(), epb::Compare::CREATE);
    EXPECT_EQ(kv.txn.compare(0).result(), epb::Compare::EQUAL);
    EXPECT_EQ(kv.txn.compare(0).create_revision(), 0);
    ASSERT_EQ(kv.txn.success_size(), 1);
    EXPECT_EQ(kv.txn.success(0).request_put().key(), "/p/leader");
    EXPECT_EQ(kv.txn.success(0).request_put().value(), "r1");
    EXPECT_EQ(kv.txn.success(0).request_put().lease(), 0x77);
    ASSERT_EQ(kv.txn.failure_size(), 1);
    EXPECT_EQ(kv.txn.failure(0).request_range().key(), "/p/leader");
  }
  EXPECT_TRUE(won->won);
  ASSERT_TRUE(won->holder.has_value());
  EXPECT_EQ(won->holder->value, "r1");
  EXPECT_EQ(won->holder->lease, 0x77);
  EXPECT_EQ(won->holder->create_revision, 42);  // the fencing token

  kv.answer.Clear();
  auto* held = kv.answer.add_responses()->mutable_response_range()->add_kvs();
  held->set_key("/p/leader");
  held->set_value("r2");
  held->set_lease(0x99);
  held->set_create_revision(17);
  auto lost = client.CreateIfAbsent("/p/leader", "r1", 0x77);
  ASSERT_TRUE(lost.ok()) << lost.status().ToString();
  EXPECT_FALSE(lost->won);
  ASSERT_TRUE(lost->holder.has_value());
  EXPECT_EQ(lost->holder->value, "r2");
  EXPECT_EQ(lost->holder->lease, 0x99);
  EXPECT_EQ(lost->holder->create_revision, 17);

  // Who holds it: a read any member may answer.
  auto nobody = client.Get("/p/leader");
  ASSERT_TRUE(nobody.ok()) << nobody.status().ToString();
  EXPECT_FALSE(nobody->has_value());
  {
    std::lock_guard lock(kv.mu);
    EXPECT_EQ(kv.range.key(), "/p/leader");
    EXPECT_TRUE(kv.range.serializable());
    *kv.range_answer.add_kvs() = *held;
  }
  auto holder = client.Get("/p/leader");
  ASSERT_TRUE(holder.ok() && holder->has_value());
  EXPECT_EQ((*holder)->value, "r2");
  server->Shutdown();
}

}  // namespace
}  // namespace clusterd::ha
