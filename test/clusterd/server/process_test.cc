// Process-level: the real clusterd binary, killed with SIGKILL mid-stream and
// restarted on the same data directory. Every acknowledged transition must be
// stored exactly once, and a watcher resuming from its last revision must see
// no gap and no duplicate.
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "test/support/grpc/agent_client.h"
#include "test/support/grpc/clusterd_process.h"
#include "test/support/process.h"
#include "test/support/temp_dir.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using testing::WaitFor;

using Clusterd = testing::ClusterdProcess;

// Follows Watch from a revision, recording every event's revision.
class Watcher {
 public:
  Watcher(std::shared_ptr<grpc::Channel> channel, uint64_t from) : stub_(v1::ClusterService::NewStub(channel)) {
    thread_ = std::thread([this, from] {
      v1::WatchRequest req;
      req.set_from_revision(from);
      auto reader = stub_->Watch(&ctx_, req);
      v1::WatchResponse resp;
      while (reader->Read(&resp)) {
        std::lock_guard lock(mu_);
        for (const auto& e : resp.events()) revisions_.push_back(e.revision());
      }
      reader->Finish();
    });
  }
  ~Watcher() { Stop(); }
  void Stop() {
    ctx_.TryCancel();
    if (thread_.joinable()) thread_.join();
  }
  std::vector<uint64_t> revisions() {
    std::lock_guard lock(mu_);
    return revisions_;
  }

 private:
  std::unique_ptr<v1::ClusterService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::mutex mu_;
  std::vector<uint64_t> revisions_;
  std::thread thread_;
};

v1::ConnectRequest RaiseCode(uint64_t epoch, uint64_t seq) {
  v1::ConnectRequest req;
  auto* t = req.mutable_transition();
  t->mutable_id()->set_epoch(epoch);
  t->mutable_id()->set_seq(seq);
  t->set_action(v1::TRANSITION_ACTION_RAISE);
  t->mutable_fault()->set_device_id(seq % 8);
  t->mutable_fault()->set_source(v1::FAULT_SOURCE_ACCELERATOR);
  char code[16];
  std::snprintf(code, sizeof(code), "E%07llu", static_cast<unsigned long long>(seq));
  t->mutable_fault()->set_code(code);
  return req;
}

TEST(ProcessTest, KillNineMidStreamLosesNothingAcknowledged) {
  testing::TempDir dir;
  Clusterd server(dir.Sub("data"));
  ASSERT_NO_FATAL_FAILURE(server.Start());
  constexpr uint64_t kEpoch = 42;
  constexpr uint64_t kTotal = 3000;

  auto watcher = std::make_unique<Watcher>(server.channel(), 0);

  // Pipelined agent: a writer streams transitions while a reader collects acks.
  std::atomic<uint64_t> acked{0};
  std::atomic<uint64_t> sent{0};
  {
    auto stub = v1::NodeAgentService::NewStub(server.channel());
    grpc::ClientContext ctx;
    auto stream = stub->Connect(&ctx);
    testing::TestAgent helper(server.channel(), "worker01", kEpoch);
    v1::ConnectRequest hello;
    *hello.mutable_hello() = helper.MakeHello();
    ASSERT_TRUE(stream->Write(hello));
    std::thread reader([&] {
      v1::ConnectResponse resp;
      while (stream->Read(&resp)) {
        if (resp.has_ack()) acked = std::max<uint64_t>(acked.load(), resp.ack().id().seq());
      }
    });
    for (uint64_t seq = 1; seq <= kTotal; ++seq) {
      if (!stream->Write(RaiseCode(kEpoch, seq))) break;
      sent = seq;
      if (seq == 400) {
        // Let some acknowledgements arrive, then kill the server mid-stream.
        ASSERT_TRUE(WaitFor([&] { return acked.load() >= 100; }));
        server.Kill();
      }
    }
    reader.join();
    stream->Finish();
  }
  watcher->Stop();
  const uint64_t acked_before_crash = acked.load();
  ASSERT_GE(acked_before_crash, 100u);
  const auto seen_before = watcher->revisions();

  ASSERT_NO_FATAL_FAILURE(server.Start());
  // Reconnect with the same epoch: everything acknowledged is already applied.
  testing::TestAgent agent(server.channel(), "worker01", kEpoch);
  ASSERT_TRUE(agent.Connect());
  const uint64_t applied = agent.welcome().applied_seq();
  EXPECT_GE(applied, acked_before_crash);
  // Resend everything from the oldest unacknowledged, duplicates included.
  for (uint64_t seq = acked_before_crash + 1; seq <= 500; ++seq) ASSERT_TRUE(agent.Send(RaiseCode(kEpoch, seq)));
  ASSERT_TRUE(agent.ReadAckUpTo(500));

  // Each of the 500 transitions is stored exactly once.
  auto cluster = v1::ClusterService::NewStub(server.channel());
  std::map<std::string, uint64_t> counts;
  v1::ListFaultsRequest req;
  req.set_page_size(1000);
  grpc::ClientContext ctx;
  v1::ListFaultsResponse faults;
  ASSERT_TRUE(cluster->ListFaults(&ctx, req, &faults).ok());
  for (const auto& f : faults.faults()) counts[f.code()] += f.count();
  ASSERT_EQ(counts.size(), 500u);
  for (const auto& [code, count] : counts) EXPECT_EQ(count, 1u) << code;

  // A watcher resuming from its last revision sees no gap and no duplicate.
  const uint64_t resume_from = seen_before.empty() ? 0 : seen_before.back();
  grpc::ClientContext sctx;
  v1::GetSummaryResponse summary;
  ASSERT_TRUE(cluster->GetSummary(&sctx, v1::GetSummaryRequest(), &summary).ok());
  Watcher resumed(server.channel(), resume_from);
  ASSERT_TRUE(WaitFor([&] {
    auto r = resumed.revisions();
    return !r.empty() && r.back() >= summary.revision();
  }));
  resumed.Stop();
  std::vector<uint64_t> all = seen_before;
  for (uint64_t r : resumed.revisions()) all.push_back(r);
  ASSERT_FALSE(all.empty());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i + 1) << "gap or duplicate at index " << i;
  EXPECT_EQ(all.back(), summary.revision());

  agent.Close();
  const int status = server.Terminate();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(ProcessTest, RestartServesSameStateAndRevision) {
  testing::TempDir dir;
  Clusterd server(dir.Sub("data"));
  ASSERT_NO_FATAL_FAILURE(server.Start());
  testing::TestAgent agent(server.channel(), "worker01", 1);
  ASSERT_TRUE(agent.Connect());
  ASSERT_TRUE(agent.Transition(1, true, 3, "80E01801"));
  auto snapshot = [&] {
    auto cluster = v1::ClusterService::NewStub(server.channel());
    grpc::ClientContext ctx;
    v1::ListFaultsRequest req;
    v1::ListFaultsResponse resp;
    EXPECT_TRUE(cluster->ListFaults(&ctx, req, &resp).ok());
    grpc::ClientContext sctx;
    v1::GetSummaryResponse summary;
    EXPECT_TRUE(cluster->GetSummary(&sctx, v1::GetSummaryRequest(), &summary).ok());
    return std::make_pair(resp.SerializeAsString(), summary.revision());
  };
  auto before = snapshot();
  server.Kill();
  ASSERT_NO_FATAL_FAILURE(server.Start());
  auto after = snapshot();
  EXPECT_EQ(after.second, before.second);
  EXPECT_EQ(after.first, before.first);
  EXPECT_GT(after.second, 0u);
}

TEST(ProcessTest, BadFlagsExitWithAClearError) {
  std::string cmd = testing::BinaryPath("clusterd") + " --node-grace=soon 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(out.find("--node-grace"), std::string::npos) << out;
}

}  // namespace
}  // namespace clusterd
