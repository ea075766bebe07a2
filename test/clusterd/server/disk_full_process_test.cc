// Disk full for real: the clusterd binary on a small tmpfs data directory,
// filled with a ballast file and freed again. Writes are refused with
// UNAVAILABLE before the disk is full while reads and Watch keep working; a
// clusterd restarted on the completely full disk serves reads; writes resume
// by themselves when space returns; every acknowledged transition is there.
// Needs mount(2) (root); skipped where it is not permitted.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/v1/fault.grpc.pb.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/grpc/clusterd_process.h"
#include "test/support/http_get.h"
#include "test/support/temp_dir.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

using testing::HttpGet;
using testing::WaitFor;

constexpr uint64_t kSmallestReserve = 16ull << 20;  // the smallest min_free_bytes allowed

uint64_t FreeBytes(const std::string& path) {
  struct statvfs st {};
  if (statvfs(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

// Appends to file until the filesystem has at most `leave` bytes free (0:
// until ENOSPC).
void Fill(const std::string& file, const std::string& fs, uint64_t leave) {
  int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  std::string buf(1 << 20, 'b');
  size_t chunk = buf.size();
  for (;;) {
    const uint64_t free = FreeBytes(fs);
    if (free <= leave) break;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, free - leave));
    ssize_t w = write(fd, buf.data(), n);
    if (w <= 0) {
      if (chunk == 1) break;  // full
      chunk /= 2;
    }
  }
  fsync(fd);
  close(fd);
}

class TmpfsMount {
 public:
  explicit TmpfsMount(std::string dir) : dir_(std::move(dir)) {
    mkdir(dir_.c_str(), 0755);
    mounted_ = mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=64m") == 0;
    if (!mounted_) error_ = strerror(errno);
  }
  ~TmpfsMount() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

// The real binary with the smallest reserve allowed, ready (/readyz 200)
// when Start returns.
class DiskFullClusterd : public testing::ClusterdProcess {
 public:
  explicit DiskFullClusterd(std::string data_dir)
      : ClusterdProcess(
            Options{std::move(data_dir), {"--min-free-bytes=" + std::to_string(kSmallestReserve)}, "", true}) {}
};

grpc::Status Report(const std::shared_ptr<grpc::Channel>& channel, const std::string& id) {
  auto stub = v1::FaultService::NewStub(channel);
  grpc::ClientContext ctx;
  v1::ReportRequest req;
  req.set_reporter("netprobe");
  req.set_id(id);
  req.set_node("worker01");
  req.set_code("NODE_NETWORK_DOWN");
  req.set_level(v1::FAULT_LEVEL_SUB_HEALTH);
  req.set_action(v1::TRANSITION_ACTION_RAISE);
  v1::ReportResponse resp;
  return stub->Report(&ctx, req, &resp);
}

std::set<std::string> FaultCodes(const std::shared_ptr<grpc::Channel>& channel) {
  auto cluster = v1::ClusterService::NewStub(channel);
  grpc::ClientContext ctx;
  v1::ListFaultsRequest req;
  req.set_page_size(1000);
  v1::ListFaultsResponse resp;
  grpc::Status st = cluster->ListFaults(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  std::set<std::string> codes;
  for (const auto& f : resp.faults()) codes.insert(f.code());
  return codes;
}

uint64_t Revision(const std::shared_ptr<grpc::Channel>& channel) {
  auto cluster = v1::ClusterService::NewStub(channel);
  grpc::ClientContext ctx;
  v1::GetSummaryResponse summary;
  EXPECT_TRUE(cluster->GetSummary(&ctx, v1::GetSummaryRequest(), &summary).ok());
  return summary.revision();
}

// Watch from 0 up to `to`: every revision once, in order.
void ExpectWatchUpTo(const std::shared_ptr<grpc::Channel>& channel, uint64_t to) {
  auto stub = v1::ClusterService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::WatchRequest req;
  req.set_from_revision(0);
  auto reader = stub->Watch(&ctx, req);
  std::vector<uint64_t> seen;
  v1::WatchResponse resp;
  while ((seen.empty() || seen.back() < to) && reader->Read(&resp)) {
    for (const auto& e : resp.events()) seen.push_back(e.revision());
  }
  ctx.TryCancel();
  reader->Finish();
  ASSERT_FALSE(seen.empty());
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i + 1) << "gap or duplicate at index " << i;
  EXPECT_EQ(seen.back(), to);
}

std::string Code(uint64_t seq) { return "E" + std::to_string(1000000 + seq); }

TEST(DiskFullProcessTest, RefusesWritesBeforeFullServesReadsOnAFullDiskAndResumesByItself) {
  testing::TempDir dir;
  const std::string fs = dir.Sub("fs");
  TmpfsMount tmpfs(fs);
  if (!tmpfs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs (needs root): " << tmpfs.error();
  const std::string ballast = fs + "/ballast";
  DiskFullClusterd server(fs + "/data");
  ASSERT_NO_FATAL_FAILURE(server.Start());
  constexpr uint64_t kEpoch = 7;
  std::set<std::string> acked;

  testing::TestAgent agent(server.channel(), "worker01", kEpoch);
  ASSERT_TRUE(agent.Connect());
  for (uint64_t seq = 1; seq <= 20; ++seq) {
    ASSERT_TRUE(agent.Transition(seq, true, static_cast<uint32_t>(seq % 8), Code(seq)));
    acked.insert(Code(seq));
  }
  ASSERT_TRUE(Report(server.channel(), "r1").ok());
  acked.insert("NODE_NETWORK_DOWN");

  // Below the reserve, before the disk is full: writes are refused.
  ASSERT_NO_FATAL_FAILURE(Fill(ballast, fs, kSmallestReserve / 2));
  ASSERT_TRUE(WaitFor([&] { return HttpGet(server.http_port(), "/readyz/writes").status == 503; }));
  grpc::Status refused = Report(server.channel(), "r2");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(refused.error_message().find("below the min_free_bytes reserve 16777216; writes resume when space "
                                         "returns"),
            std::string::npos)
      << refused.error_message();
  // The agent's transition is not acknowledged: its stream ends with
  // UNAVAILABLE (the agent keeps the transition and resends it).
  EXPECT_FALSE(agent.Transition(21, true, 5, Code(21)));
  agent.Close();
  EXPECT_EQ(agent.status().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(agent.status().error_message().find("min_free_bytes"), std::string::npos) << agent.status().error_message();
  // Reads, Watch, /readyz (reads are still served) and the metrics.
  EXPECT_EQ(FaultCodes(server.channel()), acked);
  const uint64_t revision = Revision(server.channel());
  ASSERT_NO_FATAL_FAILURE(ExpectWatchUpTo(server.channel(), revision));
  auto ready = HttpGet(server.http_port(), "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_NE(ready.body.find("writes refused"), std::string::npos) << ready.body;
  const std::string metrics = HttpGet(server.http_port(), "/metrics").body;
  EXPECT_NE(metrics.find("clusterd_store_writable 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("clusterd_writes_refused_total{reason=\"low_space\"}"), std::string::npos);

  // Killed, the disk filled to the last byte, restarted: it comes up, read-only.
  server.Kill();
  ASSERT_NO_FATAL_FAILURE(Fill(ballast, fs, 0));
  ASSERT_LT(FreeBytes(fs), 64u << 10);
  ASSERT_NO_FATAL_FAILURE(server.Start());
  EXPECT_EQ(FaultCodes(server.channel()), acked);
  EXPECT_EQ(Revision(server.channel()), revision);
  ASSERT_NO_FATAL_FAILURE(ExpectWatchUpTo(server.channel(), revision));
  EXPECT_EQ(HttpGet(server.http_port(), "/readyz/writes").status, 503);
  EXPECT_EQ(Report(server.channel(), "r2").error_code(), grpc::StatusCode::UNAVAILABLE);
  testing::TestAgent again(server.channel(), "worker01", kEpoch);
  EXPECT_FALSE(again.Connect());  // the hello is a write
  EXPECT_EQ(again.status().error_code(), grpc::StatusCode::UNAVAILABLE);

  // Space returns: writes resume by themselves, no restart.
  ASSERT_EQ(unlink(ballast.c_str()), 0);
  ASSERT_TRUE(WaitFor([&] { return HttpGet(server.http_port(), "/readyz/writes").status == 200; }));
  ASSERT_TRUE(again.Connect());
  EXPECT_EQ(again.welcome().applied_seq(), 20u);  // the refused 21 was never applied
  ASSERT_TRUE(again.Transition(21, true, 5, Code(21)));
  acked.insert(Code(21));
  ASSERT_TRUE(Report(server.channel(), "r3").ok());
  EXPECT_EQ(FaultCodes(server.channel()), acked);
  const uint64_t final_revision = Revision(server.channel());
  ASSERT_NO_FATAL_FAILURE(ExpectWatchUpTo(server.channel(), final_revision));
  again.Close();

  // And all of it survives a restart.
  const int status = server.Terminate();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_NO_FATAL_FAILURE(server.Start());
  EXPECT_EQ(FaultCodes(server.channel()), acked);
  EXPECT_EQ(Revision(server.channel()), final_revision);
}

}  // namespace
}  // namespace clusterd
