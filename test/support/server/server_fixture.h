// An in-process ClusterD for tests: its configuration on loopback, and a
// gtest fixture that starts it with a fresh data directory.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/config/config.h"
#include "clusterd/server/server.h"
#include "test/support/temp_dir.h"

namespace clusterd::testing {

// gRPC and HTTP on loopback port 0, plaintext, its data under data_dir,
// warnings only.
ClusterdConfig LoopbackConfig(const std::string& data_dir);

// A fixture holding one in-process ClusterdServer at a time, its data in
// dir_.Sub("data") (kept across restarts within a test), stopped in TearDown.
// A suite starts it in its SetUp or in each test (a config to tweak first):
//
//   class MyTest : public testing::ClusterdServerTest {
//    protected:
//     void SetUp() override { StartServer(); }
//     void OnServerStarted() override { cluster_ = v1::ClusterService::NewStub(channel_); }
//     std::unique_ptr<v1::ClusterService::Stub> cluster_;
//   };
class ClusterdServerTest : public ::testing::Test {
 protected:
  void TearDown() override { StopServer(); }

  // Stops the running server, then starts one on
  // LoopbackConfig(dir_.Sub("data")) edited by `tweak`; a fatal failure if
  // it does not start. Then channel_ is a plaintext channel to it and
  // OnServerStarted runs.
  void StartServer(const std::function<void(ClusterdConfig&)>& tweak = nullptr);
  // Stops and destroys the server (nothing when none runs).
  virtual void StopServer() { server_.reset(); }
  // For a suite's stubs and state on the new server (fatal failures in it
  // fail StartServer's caller as well).
  virtual void OnServerStarted() {}

  TempDir dir_;
  // When set before StartServer: the server's timed work runs there
  // (ClusterdServer::SetTimers), a ManualExecutor the test steps.
  Executor* timers_ = nullptr;
  // When set before StartServer: the server's clock (the writer's, its
  // rules', the services'), a FakeClock the test moves; the writer reads it
  // when it next runs (after any write). Set commit_delay to 0 with it: a
  // small group gathers until a time on that clock.
  const Clock* server_clock_ = nullptr;
  std::unique_ptr<ClusterdServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace clusterd::testing
