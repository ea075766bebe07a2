// GrpcSelfCheck (server/self_check.h) against three listeners of the test's
// own: one that answers, one that accepts connections but is slow to answer
// Health/Check (a busy server: the check passes, counted as slow), and one
// that never accepts (what gRPC 1.51's listener becomes after EMFILE: the
// check fails, /readyz would answer 503).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/server/self_check.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace clusterd {
namespace {

// Health/Check answers SERVING once released; until then its calls wait.
class HeldHealth final : public grpc::health::v1::Health::CallbackService {
 public:
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest*,
                                  grpc::health::v1::HealthCheckResponse* resp) override {
    resp->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    auto* reactor = ctx->DefaultReactor();
    std::lock_guard lock(mu_);
    if (released_) {
      reactor->Finish(grpc::Status::OK);
    } else {
      held_.push_back(reactor);
    }
    return reactor;
  }
  void Hold() {
    std::lock_guard lock(mu_);
    released_ = false;
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    for (auto* r : held_) r->Finish(grpc::Status::OK);
    held_.clear();
  }

 private:
  std::mutex mu_;
  bool released_ = true;
  std::vector<grpc::ServerUnaryReactor*> held_;
};

class SelfCheckTest : public ::testing::Test {
 protected:
  void TearDown() override {
    health_.Release();
    if (server_) server_->Shutdown();
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  std::string StartServer() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&health_);
    server_ = builder.BuildAndStart();
    return "127.0.0.1:" + std::to_string(port);
  }

  // A socket that listens and never accepts: the kernel completes the TCP
  // handshake into its backlog, no HTTP/2 settings ever come back.
  std::string StartDeadListener() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    return "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }

  std::unique_ptr<GrpcSelfCheck> Check(const std::string& target) {
    GrpcSelfCheck::Options o;
    o.target = target;
    o.credentials = grpc::InsecureChannelCredentials();
    o.interval = std::chrono::hours(1);  // RunOnce is called by the test
    o.timeout = std::chrono::milliseconds(200);
    return std::make_unique<GrpcSelfCheck>(o, &metrics_);
  }

  bool Metric(const std::string& line) { return metrics_.Render().find(line + "\n") != std::string::npos; }

  MetricsRegistry metrics_;
  HeldHealth health_;
  std::unique_ptr<grpc::Server> server_;
  int listen_fd_ = -1;
};

TEST_F(SelfCheckTest, AnAnsweredCheckPasses) {
  auto check = Check(StartServer());
  EXPECT_TRUE(check->RunOnce().ok());
  EXPECT_TRUE(check->ok());
  EXPECT_TRUE(Metric("clusterd_grpc_self_check_slow_total 0")) << metrics_.Render();
  EXPECT_TRUE(Metric("clusterd_grpc_self_check_failures_total 0")) << metrics_.Render();
}

TEST_F(SelfCheckTest, AnAcceptedConnectionSlowToAnswerPassesAsSlow) {
  auto check = Check(StartServer());
  health_.Hold();
  const Status st = check->RunOnce();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(check->ok());
  EXPECT_EQ(check->failing_for().count(), 0);
  EXPECT_TRUE(Metric("clusterd_grpc_self_check_slow_total 1")) << metrics_.Render();
  EXPECT_TRUE(Metric("clusterd_grpc_self_check_failures_total 0")) << metrics_.Render();
  EXPECT_TRUE(Metric("clusterd_grpc_self_check_ok 1")) << metrics_.Render();
}

TEST_F(SelfCheckTest, AListenerThatNeverAcceptsFails) {
  const std::string target = StartDeadListener();
  auto check = Check(target);
  const Status st = check->RunOnce();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Health/Check on a new connection to " + target + " failed within 200ms"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("the connection was not accepted"), std::string::npos) << st.message();
  EXPECT_FALSE(check->ok());
  EXPECT_EQ(check->problem(), st.message());
  EXPECT_TRUE(Metric("clusterd_grpc_self_check_failures_total 1")) << metrics_.Render();
  EXPECT_TRUE(Metric("clusterd_grpc_self_check_slow_total 0")) << metrics_.Render();
}

}  // namespace
}  // namespace clusterd
