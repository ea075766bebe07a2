// Requests that are not valid proto3 on the wire (a string that is not
// UTF-8), sent as raw bytes to a real in-process ClusterD: each gets
// INVALID_ARGUMENT naming the field and changes nothing. gRPC alone answers
// UNIMPLEMENTED (unary) or ends a stream without a status.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/server/server.h"
#include "test/support/state/state_fixtures.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/server/server_fixture.h"

namespace clusterd {
namespace {

// The serialized message with `needle` (which must occur once) replaced by
// bytes of the same length that are not UTF-8.
std::string Corrupt(const google::protobuf::Message& msg, const std::string& needle) {
  std::string bytes = msg.SerializeAsString();
  const size_t at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos);
  EXPECT_EQ(bytes.find(needle, at + 1), std::string::npos);
  for (size_t i = 0; i < needle.size(); ++i) bytes[at + i] = static_cast<char>(0xFF - i % 2);
  return bytes;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

class WireTest : public testing::ClusterdServerTest {
 protected:
  void SetUp() override { StartServer(); }
  void OnServerStarted() override { stub_ = std::make_unique<grpc::GenericStub>(channel_); }

  grpc::Status Unary(const std::string& method, const std::string& bytes, grpc::ByteBuffer* reply) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    grpc::ByteBuffer request = ToBuffer(bytes);
    stub_->UnaryCall(&ctx, method, grpc::StubOptions(), &request, reply, [&](grpc::Status s) {
      std::lock_guard lock(mu);
      status = std::move(s);
      done = true;
      cv.notify_all();
    });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
    return status;
  }

  uint64_t Revision() {
    auto stub = v1::ClusterService::NewStub(channel_);
    grpc::ClientContext ctx;
    v1::GetSummaryResponse resp;
    EXPECT_TRUE(stub->GetSummary(&ctx, v1::GetSummaryRequest(), &resp).ok());
    return resp.revision();
  }

  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(WireTest, UnaryRequestWithInvalidUtf8IsInvalidArgumentNamingTheField) {
  v1::ReportRequest req;
  req.set_reporter("netprobe");
  req.set_id("probe-1");
  req.set_node("worker01");
  req.set_code("NET_DOWN");
  req.set_action(v1::TRANSITION_ACTION_RAISE);
  req.set_message("link XXXX down");
  const uint64_t before = Revision();
  grpc::ByteBuffer reply;
  grpc::Status st = Unary("/clusterd.v1.FaultService/Report", Corrupt(req, "XXXX"), &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("message"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("UTF-8"), std::string::npos) << st.error_message();
  EXPECT_EQ(Revision(), before);

  // In a name: the name's own rule refuses it, naming the field.
  v1::CordonNodeRequest cordon;
  cordon.set_node("workerXX");
  cordon.set_actor("alice");
  cordon.set_reason("disk swap");
  st = Unary("/clusterd.v1.AdminService/CordonNode", Corrupt(cordon, "XX"), &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("node"), std::string::npos) << st.error_message();

  // Garbage that is no message at all is refused too (and the server lives).
  st = Unary("/clusterd.v1.ClusterService/GetNode", std::string("\x0a\xff\xff\xff\xff\x0f", 6), &reply);
  EXPECT_NE(st.error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(Revision(), before);
}

TEST_F(WireTest, StreamMessageWithInvalidUtf8EndsTheStreamWithInvalidArgument) {
  v1::ConnectRequest hello;
  *hello.mutable_hello() = testing::MakeHello("worker01", 1, 2);
  hello.mutable_hello()->set_boot_id("boot-XXXX");

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::CompletionQueue cq;
  auto call = stub_->PrepareCall(&ctx, "/clusterd.v1.NodeAgentService/Connect", &cq);
  void* tag;
  bool ok;
  auto step = [&](void* want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(tag, want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(reinterpret_cast<void*>(1)));
  grpc::ByteBuffer msg = ToBuffer(Corrupt(hello, "XXXX"));
  call->Write(msg, reinterpret_cast<void*>(2));
  step(reinterpret_cast<void*>(2));
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  EXPECT_FALSE(step(reinterpret_cast<void*>(3)));  // no Welcome
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(4));
  step(reinterpret_cast<void*>(4));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("hello.boot_id"), std::string::npos) << st.error_message();
  EXPECT_EQ(Revision(), 0u);  // the node was not registered
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST(WireScrubTest, ReplacesOnlyTheBadBytesOfStringFieldsInNestedMessages) {
  v1::ConnectRequest req;
  *req.mutable_hello() = testing::MakeHello("worker01", 1, 1);
  (*req.mutable_hello()->mutable_labels())["rack"] = "rXX";
  req.mutable_hello()->mutable_inventory()->mutable_devices(0)->set_serial("é-ok-ZZ");
  std::string bytes = req.SerializeAsString();
  bytes.replace(bytes.find("XX"), 2, "\xC0\xAF");  // an overlong '/': not UTF-8
  bytes.replace(bytes.find("ZZ"), 2, "\xED\xA0");  // a cut surrogate
  v1::ConnectRequest parsed;
  ASSERT_FALSE(parsed.ParseFromString(bytes));
  ASSERT_TRUE(wire::ScrubInvalidUtf8(bytes.data(), bytes.size(), v1::ConnectRequest::descriptor()));
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.hello().labels().at("rack"), std::string("r\0\0", 3));
  EXPECT_EQ(parsed.hello().inventory().devices(0).serial(), std::string("é-ok-\0\0", 8));
  EXPECT_EQ(parsed.hello().node_name(), "worker01");
  // Not a message: refused, never read past the end.
  std::string junk("\x0a\x05\x01", 3);
  EXPECT_FALSE(wire::ScrubInvalidUtf8(junk.data(), junk.size(), v1::ConnectRequest::descriptor()));
}

}  // namespace
}  // namespace clusterd
