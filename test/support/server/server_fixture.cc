#include "test/support/server/server_fixture.h"

#include "test/support/grpc/agent_client.h"

namespace clusterd::testing {

ClusterdConfig LoopbackConfig(const std::string& data_dir) {
  ClusterdConfig cfg;
  cfg.listen = "127.0.0.1:0";
  cfg.http_listen = "127.0.0.1:0";
  cfg.data_dir = data_dir;
  cfg.log_level = "warn";
  // Plaintext: the suites that are not about security (security_test.cc
  // starts TLS servers of its own).
  cfg.insecure = true;
  // Streams a test leaves open are cancelled at once when it stops the
  // server, not after the default 2 s (a test of the grace sets its own).
  cfg.shutdown_grace = std::chrono::seconds(0);
  return cfg;
}

void ClusterdServerTest::StartServer(const std::function<void(ClusterdConfig&)>& tweak) {
  StopServer();
  ClusterdConfig cfg = LoopbackConfig(dir_.Sub("data"));
  if (tweak) tweak(cfg);
  server_ = std::make_unique<ClusterdServer>(cfg, server_clock_ != nullptr ? server_clock_ : &SystemClock::Instance());
  if (timers_ != nullptr) server_->SetTimers(timers_);
  Status st = server_->Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  channel_ = Dial(server_->grpc_port());
  OnServerStarted();
}

}  // namespace clusterd::testing
