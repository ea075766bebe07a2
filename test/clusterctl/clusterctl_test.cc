// clusterctl's real entry point, in-process, against a real in-process
// clusterd over real gRPC (port 0, a unique temp data dir per test).
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterctl/cli.h"
#include "clusterd/mindcluster/om.h"
#include "clusterd/mindcluster/taskd.h"
#include "mindcluster/recover.grpc.pb.h"
#include "common/free_port.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/grpc/stream_reader.h"
#include "test/support/http_get.h"
#include "test/support/grpc/tls_test_server.h"
#include "test/support/server/server_fixture.h"
#include "test/support/temp_dir.h"
#include "test/support/test_certs.h"
#include "test/support/wait.h"

namespace clusterctl {
namespace {

using clusterd::testing::TempDir;
using clusterd::testing::TestAgent;
using clusterd::testing::WaitFor;
using json = nlohmann::json;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

const char* NoEnv(const char*) { return nullptr; }

std::string g_env_addr;
const char* EnvWithAddr(const char* name) {
  return std::string(name) == "CLUSTERD_ADDR" ? g_env_addr.c_str() : nullptr;
}

std::vector<std::string> Lines(const std::string& text);

std::string g_env_actor;
const char* EnvWithActor(const char* name) {
  return std::string(name) == "CLUSTERCTL_ACTOR" ? g_env_actor.c_str() : nullptr;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// The line of a table that starts with `first` (a name or id), or "".
std::string RowOf(const std::string& table, const std::string& first) {
  for (const auto& l : Lines(table)) {
    if (l.rfind(first + " ", 0) == 0) return l;
  }
  return "";
}

// The cell of a row under the header column `column` (cells are aligned to headers).
std::string Cell(const std::string& table, const std::string& row_key, const std::string& column) {
  std::string header;
  std::istringstream in(table);
  std::getline(in, header);
  const std::string row = RowOf(table, row_key);
  const size_t at = header.find(column);
  if (row.empty() || at == std::string::npos || at >= row.size()) return "";
  const size_t end = row.find(' ', at);
  return row.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Revisions of the JSON events printed by `watch -o json`, one per line.
std::vector<uint64_t> Revisions(const std::string& out) {
  std::vector<uint64_t> revs;
  for (const auto& line : Lines(out)) {
    json j = json::parse(line);
    revs.push_back(std::stoull(j.at("revision").get<std::string>()));
  }
  return revs;
}

class ClusterctlTest : public clusterd::testing::ClusterdServerTest {
 protected:
  void SetUp() override { StartServer(); }
  void StopServer() override {
    for (auto& a : agents_) a->Close();
    agents_.clear();
    ClusterdServerTest::StopServer();
  }
  void OnServerStarted() override { Populate(); }

  // worker01: 8 devices, label pool=train, metrics, fault 80E01801 on device 3.
  // worker02: 2 devices, healthy.
  void Populate() {
    auto w1 = std::make_unique<TestAgent>(channel_, "worker01", 1, 8);
    clusterd::v1::Hello hello = w1->MakeHello();
    (*hello.mutable_labels())["pool"] = "train";
    hello.mutable_inventory()->set_cpu_count(4);
    hello.mutable_inventory()->set_cpu_model("Kunpeng 920");
    ASSERT_TRUE(w1->Connect(&hello));
    clusterd::v1::ConnectRequest metrics;
    (*metrics.mutable_metrics()->mutable_gauges())["npu_temperature_celsius"] = 61.5;
    metrics.mutable_metrics()->mutable_time()->set_seconds(1'700'000'000);
    ASSERT_TRUE(w1->Send(metrics));
    // Ordered on the stream: once this transition is acknowledged the
    // snapshot sent before it has been applied too.
    ASSERT_TRUE(w1->Transition(1, true, 3, "80E01801", nullptr, "HBM ECC error"));
    auto w2 = std::make_unique<TestAgent>(channel_, "worker02", 1, 2);
    ASSERT_TRUE(w2->Connect());
    agents_.push_back(std::move(w1));
    agents_.push_back(std::move(w2));
  }

  std::string Addr() const { return "127.0.0.1:" + std::to_string(server_->grpc_port()); }

  Result Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--server", Addr()});
    return RunRaw(args);
  }

  Result RunRaw(const std::vector<std::string>& args, GetEnvFn env = NoEnv) {
    std::ostringstream out, err;
    Result r;
    r.code = RunClusterctl(args, out, err, env);
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  clusterd::v1::GetSummaryResponse Summary() {
    auto stub = clusterd::v1::ClusterService::NewStub(channel_);
    grpc::ClientContext ctx;
    clusterd::v1::GetSummaryResponse resp;
    EXPECT_TRUE(stub->GetSummary(&ctx, clusterd::v1::GetSummaryRequest(), &resp).ok());
    return resp;
  }

  std::vector<std::unique_ptr<TestAgent>> agents_;
};

TEST_F(ClusterctlTest, GetNodesTableIsAligned) {
  Result r = Run({"get", "nodes"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].rfind("NAME", 0), 0u);
  std::string w1;
  for (const auto& l : lines) {
    if (l.rfind("worker01", 0) == 0) w1 = l;
  }
  ASSERT_FALSE(w1.empty()) << r.out;
  EXPECT_EQ(w1.find("UNHEALTHY"), lines[0].find("HEALTH ")) << r.out;
  EXPECT_EQ(w1.find("RESTART_BUSINESS"), lines[0].find("WORST-LEVEL")) << r.out;
  EXPECT_NE(r.out.find("worker02"), std::string::npos);

  Result wide = Run({"get", "nodes", "-o", "wide"});
  ASSERT_EQ(wide.code, 0) << wide.err;
  EXPECT_NE(wide.out.find("pool=train"), std::string::npos) << wide.out;
  EXPECT_NE(wide.out.find("test-agent"), std::string::npos) << wide.out;
}

TEST_F(ClusterctlTest, GetNodesJsonHasTheFields) {
  Result r = Run({"-o", "json", "get", "nodes"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j.at("nodes").size(), 2u);
  EXPECT_EQ(j.at("total_size"), 2);
  json w1;
  for (const auto& n : j["nodes"]) {
    if (n.at("name") == "worker01") w1 = n;
  }
  ASSERT_FALSE(w1.is_null()) << r.out;
  EXPECT_EQ(w1.at("health"), "HEALTH_UNHEALTHY");
  EXPECT_EQ(w1.at("worst_level"), "FAULT_LEVEL_RESTART_BUSINESS");
  EXPECT_EQ(w1.at("active_faults"), 1);
  EXPECT_EQ(w1.at("labels").at("pool"), "train");
  EXPECT_EQ(w1.at("inventory").at("devices").size(), 8u);
  EXPECT_TRUE(w1.contains("last_heartbeat_time"));
}

TEST_F(ClusterctlTest, GetNodesFilters) {
  Result r = Run({"get", "nodes", "--health", "UNHEALTHY", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j.at("nodes").size(), 1u);
  EXPECT_EQ(j["nodes"][0]["name"], "worker01");

  r = Run({"get", "nodes", "--health", "healthy"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("worker02"), std::string::npos);
  EXPECT_EQ(r.out.find("worker01"), std::string::npos);

  r = Run({"get", "nodes", "--selector", "pool=train"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("worker01"), std::string::npos);
  EXPECT_EQ(r.out.find("worker02"), std::string::npos);

  r = Run({"get", "nodes", "-l", "pool=infer"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("No nodes"), std::string::npos);

  r = Run({"get", "node", "worker02"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Lines(r.out).size(), 2u) << r.out;
}

TEST_F(ClusterctlTest, GetFaultsFilters) {
  const uint64_t before = Summary().revision();
  Result rep = Run({"report-fault", "--reporter", "netprobe", "--id", "roce-0", "--node", "worker02", "--device", "0",
                    "--code", "ROCE_LINK_DOWN", "--level", "SEPARATE", "--message", "link down"});
  ASSERT_EQ(rep.code, 0) << rep.err;

  Result r = Run({"get", "faults", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("faults").size(), 2u);

  r = Run({"get", "faults", "--min-level", "separate", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j.at("faults").size(), 1u);
  EXPECT_EQ(j["faults"][0]["node"], "worker02");
  EXPECT_EQ(j["faults"][0]["code"], "ROCE_LINK_DOWN");
  EXPECT_EQ(j["faults"][0]["level"], "FAULT_LEVEL_SEPARATE");
  EXPECT_EQ(j["faults"][0]["reporter"], "netprobe");

  r = Run({"get", "faults", "--node", "worker01", "--device", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("80E01801"), std::string::npos);
  EXPECT_NE(r.out.find("HBM ECC error"), std::string::npos);
  EXPECT_EQ(r.out.find("ROCE_LINK_DOWN"), std::string::npos);

  r = Run({"get", "faults", "--node", "worker01", "--device", "5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("No faults"), std::string::npos);

  r = Run({"get", "faults", "--since-revision", std::to_string(before), "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  j = json::parse(r.out);
  ASSERT_EQ(j.at("faults").size(), 1u);
  EXPECT_EQ(j["faults"][0]["code"], "ROCE_LINK_DOWN");
}

TEST_F(ClusterctlTest, DescribeNode) {
  Result r = Run({"describe", "node", "worker01"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want :
       {"Name:", "worker01", "UNHEALTHY", "pool=train", "4 x Kunpeng 920", "Devices:", "910B3",
        "Active faults:", "80E01801", "HBM ECC error", "Metrics", "npu_temperature_celsius", "61.5"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  r = Run({"describe", "node", "worker01", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j.at("node").at("name"), "worker01");
  EXPECT_EQ(j.at("devices").size(), 8u);
  ASSERT_EQ(j.at("active_faults").size(), 1u);
  EXPECT_EQ(j["active_faults"][0]["code"], "80E01801");
  EXPECT_EQ(j["active_faults"][0]["device_id"], 3);
  EXPECT_EQ(j.at("metrics").at("gauges").at("npu_temperature_celsius"), 61.5);
}

TEST_F(ClusterctlTest, WatchFromRevisionPrintsEveryEventInOrder) {
  const uint64_t head = Summary().revision();
  ASSERT_GE(head, 4u);
  Result r = Run({"watch", "--from-revision", "0", "--max-events", std::to_string(head), "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<uint64_t> want;
  for (uint64_t i = 1; i <= head; ++i) want.push_back(i);
  EXPECT_EQ(Revisions(r.out), want) << r.out;
  json first = json::parse(Lines(r.out)[0]);
  EXPECT_EQ(first.at("type"), "EVENT_TYPE_NODE_REGISTERED");
  EXPECT_EQ(first.at("node"), "worker01");

  r = Run({"watch", "--from-revision", "0", "--type", "fault_raised", "--node", "worker01", "--max-events", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0].rfind("REVISION", 0), 0u);
  for (const char* want : {"FAULT_RAISED", "worker01", "80E01801", "RESTART_BUSINESS", "ACTIVE"}) {
    EXPECT_NE(lines[1].find(want), std::string::npos) << want << "\n" << r.out;
  }
  EXPECT_EQ(lines[1].find("DEVICE_HEALTH"), std::string::npos);
}

TEST_F(ClusterctlTest, WatchFollowsLiveEvents) {
  const uint64_t head = Summary().revision();
  Result live;
  std::thread watcher([&] {
    live = Run({"watch", "--from-revision", std::to_string(head), "--type", "FAULT_RAISED", "--max-events", "1", "-o",
                "json"});
  });
  Result rep =
      Run({"report-fault", "--reporter", "probe", "--id", "p1", "--node", "worker02", "--code", "NODE_DISK_FULL"});
  watcher.join();
  ASSERT_EQ(rep.code, 0) << rep.err;
  ASSERT_EQ(live.code, 0) << live.err;
  auto lines = Lines(live.out);
  ASSERT_EQ(lines.size(), 1u) << live.out;
  json e = json::parse(lines[0]);
  EXPECT_EQ(e.at("fault").at("code"), "NODE_DISK_FULL");
  EXPECT_GT(std::stoull(e.at("revision").get<std::string>()), head);
}

TEST_F(ClusterctlTest, WatchCursorFileResumesWithoutDuplicates) {
  const std::string cursor = dir_.Sub("cursor");
  const uint64_t head = Summary().revision();
  ASSERT_GE(head, 4u);
  Result a = Run({"watch", "--cursor-file", cursor, "--from-revision", "0", "--max-events", "3", "-o", "json"});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(Revisions(a.out), (std::vector<uint64_t>{1, 2, 3}));
  {
    std::ifstream in(cursor);
    std::string text;
    std::getline(in, text);
    EXPECT_EQ(text, "3");
  }
  // The cursor file wins over --from-revision once it exists.
  Result b = Run({"watch", "--cursor-file", cursor, "--from-revision", "0", "--max-events", std::to_string(head - 3),
                  "-o", "json"});
  ASSERT_EQ(b.code, 0) << b.err;
  std::vector<uint64_t> all = Revisions(a.out);
  for (uint64_t r : Revisions(b.out)) all.push_back(r);
  std::vector<uint64_t> want;
  for (uint64_t i = 1; i <= head; ++i) want.push_back(i);
  EXPECT_EQ(all, want);

  // A new change after the cursor: the next run starts exactly there.
  ASSERT_EQ(
      Run({"report-fault", "--reporter", "probe", "--id", "p2", "--node", "worker02", "--code", "NODE_DISK_FULL"}).code,
      0);
  // A temp file left by a watch killed while writing the cursor is removed
  // at the next start; a run leaves none of its own.
  const std::string stale = cursor + ".tmp.999999.7";
  std::ofstream(stale) << "12\n";
  Result c = Run({"watch", "--cursor-file", cursor, "--max-events", "1", "-o", "json"});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(Revisions(c.out), (std::vector<uint64_t>{head + 1}));
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(cursor).parent_path())) {
    EXPECT_EQ(entry.path().filename().string().find("cursor.tmp"), std::string::npos) << entry.path();
  }

  // A cursor file that holds garbage is an error, not a silent restart.
  {
    std::ofstream out(cursor, std::ios::trunc);
    out << "not-a-revision\n";
  }
  Result bad = Run({"watch", "--cursor-file", cursor, "--max-events", "1"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("cursor file"), std::string::npos) << bad.err;
}

TEST_F(ClusterctlTest, WatchFromCompactedHistoryIsOutOfRange) {
  StartServer([](clusterd::ClusterdConfig& c) {
    c.retention_events = 2;  // below the config parser's floor: a test-only setting
    c.retention_interval = std::chrono::milliseconds(50);
  });
  ASSERT_TRUE(WaitFor([&] { return Summary().compacted_revision() > 0; }));
  const uint64_t compacted = Summary().compacted_revision();
  Result r = Run({"watch", "--from-revision", "0", "--max-events", "1"});
  EXPECT_EQ(r.code, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("oldest available revision is"), std::string::npos) << r.err;
  // Retention may have moved on since; the printed revision is at least the one seen.
  const auto pos = r.err.find("oldest available revision is ");
  ASSERT_NE(pos, std::string::npos);
  EXPECT_GE(std::stoull(r.err.substr(pos + 29)), compacted + 1) << r.err;
}

TEST_F(ClusterctlTest, ReportAndClearExternalFault) {
  Result r = Run({"report-fault", "--reporter", "netprobe", "--id", "roce-3", "--node", "worker01", "--device", "3",
                  "--code", "ROCE_LINK_DOWN", "--level", "RESTART_REQUEST"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("raised"), std::string::npos) << r.out;
  r = Run({"report-fault", "--reporter", "netprobe", "--id", "roce-3", "--node", "worker01", "--device", "3", "--code",
           "ROCE_LINK_DOWN", "--level", "restart_request"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("unchanged"), std::string::npos) << r.out;

  r = Run({"get", "faults", "--active", "--node", "worker01", "-o", "wide"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("netprobe/roce-3"), std::string::npos) << r.out;

  r = Run({"clear-fault", "--reporter", "netprobe", "--id", "roce-3", "--node", "worker01"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cleared"), std::string::npos) << r.out;
  r = Run({"get", "faults", "--node", "worker01", "--device", "3", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  bool found = false;
  const json listed = json::parse(r.out);
  for (const auto& f : listed.at("faults")) {
    if (f.at("code") == "ROCE_LINK_DOWN") {
      found = true;
      EXPECT_EQ(f.at("state"), "FAULT_STATE_CLEARED");
      EXPECT_EQ(f.at("clear_reason"), "cleared by netprobe");
    }
  }
  EXPECT_TRUE(found) << r.out;
  r = Run({"clear-fault", "--reporter", "netprobe", "--id", "roce-3", "--node", "worker01", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("unchanged"), true);

  r = Run({"clear-fault", "--reporter", "netprobe", "--id", "nope", "--node", "worker01"});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("clear-fault FAULT_ID"), std::string::npos) << r.err;
  r = Run({"clear-fault", "--reporter", "netprobe", "--node", "worker01"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--id"), std::string::npos) << r.err;
}

// Ranks 0-3 on worker01 devices 4-7, ranks 4-5 on worker02 devices 0-1: no
// active fault hits it when created (worker01's fault is on device 3).
constexpr const char* kJobJson = R"({
  "id": "train-1",
  "kind": "JOB_KIND_TRAINING",
  "state": "JOB_STATE_RUNNING",
  "labels": {"team": "llm"},
  "placement": [
    {"rank": 0, "node": "worker01", "deviceId": 4},
    {"rank": 1, "node": "worker01", "deviceId": 5},
    {"rank": 2, "node": "worker01", "deviceId": 6},
    {"rank": 3, "node": "worker01", "deviceId": 7},
    {"rank": 4, "node": "worker02", "deviceId": 0},
    {"rank": 5, "node": "worker02", "deviceId": 1}
  ],
  "policy": {
    "allowedStrategies": ["RECOVERY_STRATEGY_PROCESS_RESTART", "RECOVERY_STRATEGY_POD_RESCHEDULE"],
    "maxRetriesPerJob": 3,
    "holdDown": "30s"
  }
})";

TEST_F(ClusterctlTest, CreateGetDescribeDeleteJob) {
  const std::string file = dir_.Sub("job.json");
  WriteFile(file, kJobJson);
  Result r = Run({"create-job", "-f", file});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("job train-1 created"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("6 ranks on 2 nodes"), std::string::npos) << r.out;

  r = Run({"get", "jobs"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Lines(r.out).size(), 2u) << r.out;
  for (const char* col : {"ID", "KIND", "STATE", "RANKS", "NODES", "IMPACTED-RANKS"}) {
    EXPECT_NE(Lines(r.out)[0].find(col), std::string::npos) << col << "\n" << r.out;
  }
  EXPECT_EQ(Cell(r.out, "train-1", "KIND"), "TRAINING") << r.out;
  EXPECT_EQ(Cell(r.out, "train-1", "STATE"), "RUNNING") << r.out;
  EXPECT_EQ(Cell(r.out, "train-1", "RANKS"), "6") << r.out;
  EXPECT_EQ(Cell(r.out, "train-1", "NODES"), "2") << r.out;
  EXPECT_EQ(Cell(r.out, "train-1", "IMPACTED-RANKS"), "0") << r.out;
  EXPECT_EQ(Cell(r.out, "train-1", "PROGRESS"), "-") << "no progress reported" << r.out;
  EXPECT_EQ(Cell(r.out, "train-1", "ETTR"), "-") << r.out;

  // Filters.
  r = Run({"get", "jobs", "--state", "running", "--kind", "TRAINING"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("train-1"), std::string::npos) << r.out;
  r = Run({"get", "jobs", "--kind", "inference"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("No jobs"), std::string::npos) << r.err;
  r = Run({"get", "jobs", "--state", "JOB_STATE_PENDING", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).value("jobs", json::array()).size(), 0u) << r.out;
  EXPECT_EQ(Run({"get", "jobs", "--state", "sleeping"}).code, 2);
  EXPECT_EQ(Run({"get", "jobs", "--kind", "batch"}).code, 2);

  // An agent-raised fault on worker01 device 5 hits rank 1.
  ASSERT_TRUE(agents_[0]->Transition(2, true, 5, "80E01802", nullptr, "HBM ECC error on 5"));
  r = Run({"get", "jobs"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Cell(r.out, "train-1", "IMPACTED-RANKS"), "1") << r.out;
  r = Run({"get", "jobs", "train-1", "-o", "wide"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("team=llm"), std::string::npos) << r.out;

  r = Run({"describe", "job", "train-1"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want : {"Id:", "train-1", "TRAINING", "RUNNING", "6 on 2 nodes", "Impacted ranks:", "1 (1)",
                           "Placement:", "RANK", "Recovery policy:", "PROCESS_RESTART, POD_RESCHEDULE",
                           "Max retries per job:", "30s", "Impacts", "80E01802", "worker01/5/"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  // In the placement table rank 1 names the fault; rank 0 has none.
  const std::string placement = r.out.substr(r.out.find("Placement:"));
  bool rank1 = false, rank0 = false;
  for (const auto& l : Lines(placement)) {
    if (l.rfind("  1 ", 0) == 0)
      rank1 = l.find("worker01") != std::string::npos && l.find("80E01802") != std::string::npos;
    if (l.rfind("  0 ", 0) == 0) rank0 = l.find("80E01802") == std::string::npos;
  }
  EXPECT_TRUE(rank1 && rank0) << r.out;

  r = Run({"describe", "job", "train-1", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out).at("job");
  ASSERT_EQ(j.at("impacts").size(), 1u) << r.out;
  EXPECT_EQ(j["impacts"][0].at("ranks"), json::array({1}));
  EXPECT_EQ(j["impacts"][0].at("code"), "80E01802");
  EXPECT_EQ(j["impacts"][0].at("device_id"), 5);

  // Errors: unknown job, duplicate, bad JSON naming the field, missing -f.
  r = Run({"describe", "job", "nope"});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  r = Run({"create-job", "-f", file});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("ALREADY_EXISTS"), std::string::npos) << r.err;
  WriteFile(dir_.Sub("typo.json"), R"({"id": "j2", "kind": "JOB_KIND_TRAINING", "placment": []})");
  r = Run({"create-job", "-f", dir_.Sub("typo.json")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("placment"), std::string::npos) << r.err;
  WriteFile(dir_.Sub("badenum.json"), R"({"id": "j2", "kind": "JOB_KIND_TRANING"})");
  r = Run({"create-job", "-f", dir_.Sub("badenum.json")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("kind"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"create-job", "-f", dir_.Sub("missing.json")}).code, 2);
  EXPECT_EQ(Run({"create-job"}).code, 2);
  // The server validates the job: INVALID_ARGUMENT is an RPC error.
  WriteFile(dir_.Sub("empty.json"), R"({"id": "j3", "kind": "JOB_KIND_INFERENCE"})");
  r = Run({"create-job", "-f", dir_.Sub("empty.json")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;

  r = Run({"delete-job", "train-1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("job train-1 deleted"), std::string::npos) << r.out;
  EXPECT_EQ(Run({"describe", "job", "train-1"}).code, 3);
  EXPECT_EQ(Run({"delete-job", "train-1"}).code, 3);
  EXPECT_EQ(Run({"delete-job"}).code, 2);
}

TEST_F(ClusterctlTest, CordonShowsInGetNodes) {
  Result r = Run({"get", "nodes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Cell(r.out, "worker02", "CORDONED"), "no") << r.out;

  r = Run({"cordon", "worker02", "--reason", "disk swap", "--actor", "alice"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("node worker02 cordoned (disk swap)"), std::string::npos) << r.out;

  r = Run({"get", "nodes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Cell(r.out, "worker02", "CORDONED"), "yes") << r.out;
  EXPECT_EQ(Cell(r.out, "worker01", "CORDONED"), "no") << r.out;
  r = Run({"get", "nodes", "worker02", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("cordoned"), true) << r.out;
  EXPECT_EQ(json::parse(r.out).at("cordon_reason"), "disk swap") << r.out;
  r = Run({"describe", "node", "worker02"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("yes (disk swap)"), std::string::npos) << r.out;

  // The change is an event with who and why.
  r = Run({"watch", "--from-revision", "0", "--type", "NODE_CORDONED", "--max-events", "1", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json e = json::parse(Lines(r.out).at(0));
  EXPECT_EQ(e.at("actor"), "alice");
  EXPECT_EQ(e.at("reason"), "disk swap");

  r = Run({"uncordon", "worker02"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("node worker02 uncordoned"), std::string::npos) << r.out;
  r = Run({"get", "nodes"});
  EXPECT_EQ(Cell(r.out, "worker02", "CORDONED"), "no") << r.out;

  r = Run({"cordon", "worker02"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--reason"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"cordon", "--reason", "x"}).code, 2);
  EXPECT_EQ(Run({"cordon", "nobody", "--reason", "x"}).code, 3);
  EXPECT_EQ(Run({"uncordon", "nobody"}).code, 3);
  EXPECT_EQ(Run({"cordon", "worker02", "--reason", "x", "--actor", ""}).code, 2);
}

// A device the separation policy separated (here at the first counted fault)
// shows in describe node and in watch, and `release` returns it to service.
TEST_F(ClusterctlTest, ReleaseReturnsASeparatedDevice) {
  StartServer([](clusterd::ClusterdConfig& c) {
    c.separation_threshold = 1;
    c.separation_settle = std::chrono::seconds(0);
  });
  // 80E01801 (RESTART_BUSINESS) counts; a SUB_HEALTH fault would not.
  ASSERT_TRUE(agents_[0]->Transition(2, true, 5, "80E01801", nullptr, "HBM multi-bit ECC error on 5"));
  Result r = Run({"describe", "node", "worker01"});
  ASSERT_NE(r.out.find("yes (1 fault within 24h)"), std::string::npos) << r.out;
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("SEPARATED"), std::string::npos) << r.out;
  r = Run({"watch", "--from-revision", "0", "--type", "DEVICE_SEPARATED", "--max-events", "1", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json e = json::parse(Lines(r.out).at(0));
  EXPECT_EQ(e.at("device_id"), 5);
  EXPECT_EQ(e.at("actor"), "clusterd");

  r = Run({"release", "worker01", "5"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--reason"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"release", "worker01", "five", "--reason", "x"}).code, 2);
  EXPECT_EQ(Run({"release", "worker01", "--reason", "x"}).code, 2);
  EXPECT_EQ(Run({"release", "nobody", "5", "--reason", "x"}).code, 3);
  r = Run({"release", "worker01", "5", "--reason", "card reseated", "--actor", "alice"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("node worker01 device 5 in service"), std::string::npos) << r.out;
  r = Run({"watch", "--from-revision", "0", "--type", "DEVICE_RELEASED", "--max-events", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("released by alice: card reseated"), std::string::npos) << r.out;
  r = Run({"describe", "node", "worker01"});
  EXPECT_EQ(r.out.find("yes (1 fault within 24h)"), std::string::npos) << r.out;
}

TEST_F(ClusterctlTest, PauseResumeDryRunInGetAdmin) {
  Result r = Run({"get", "admin"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Recovery:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("active"), std::string::npos) << r.out;

  r = Run({"pause", "--reason", "switch upgrade", "--actor", "bob"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recovery paused, dry-run off"), std::string::npos) << r.out;
  r = Run({"get", "admin"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want : {"paused", "bob", "switch upgrade"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }

  // The actor from the environment; --actor wins over it.
  g_env_actor = "carol";
  r = RunRaw({"--server", Addr(), "dry-run", "on", "--reason", "rehearsal"}, EnvWithActor);
  ASSERT_EQ(r.code, 0) << r.err;
  r = Run({"get", "admin", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json s = json::parse(r.out).at("state");
  EXPECT_EQ(s.at("recovery_paused"), true);
  EXPECT_EQ(s.at("dry_run"), true);
  EXPECT_EQ(s.at("actor"), "carol");
  EXPECT_EQ(s.at("reason"), "rehearsal");
  r = RunRaw({"--server", Addr(), "resume", "--actor", "dave"}, EnvWithActor);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recovery active, dry-run on"), std::string::npos) << r.out;
  r = Run({"get", "admin", "-o", "json"});
  s = json::parse(r.out).at("state");
  EXPECT_EQ(s.at("recovery_paused"), false);
  EXPECT_EQ(s.at("actor"), "dave");

  // No --actor, no environment: the login name or "clusterctl", never empty.
  r = Run({"dry-run", "off"});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Run({"get", "admin", "-o", "json"});
  s = json::parse(r.out).at("state");
  EXPECT_EQ(s.at("dry_run"), false);
  EXPECT_FALSE(s.at("actor").get<std::string>().empty());
  r = Run({"get", "admin"});
  EXPECT_NE(r.out.find("off"), std::string::npos) << r.out;

  r = Run({"pause"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--reason"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"dry-run"}).code, 2);
  EXPECT_EQ(Run({"dry-run", "maybe"}).code, 2);
  EXPECT_EQ(Run({"resume", "now"}).code, 2);
}

// Ranks 0-1 on worker02 devices 0-1, no hold-down: a fault there is acted on
// at the next coordinator tick.
constexpr const char* kRecoveryJobJson = R"({
  "id": "train-r",
  "kind": "JOB_KIND_TRAINING",
  "state": "JOB_STATE_RUNNING",
  "placement": [
    {"rank": 0, "node": "worker02", "deviceId": 0},
    {"rank": 1, "node": "worker02", "deviceId": 1}
  ],
  "policy": {"holdDown": "0s"}
})";

TEST_F(ClusterctlTest, RecoveriesThroughTheRealApi) {
  // None yet: an empty list, said on stderr like the other list verbs.
  Result r = Run({"get", "recoveries"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("No recoveries found"), std::string::npos) << r.err;
  r = Run({"get", "recoveries", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).value("recoveries", json::array()).size(), 0u) << r.out;
  EXPECT_EQ(json::parse(r.out).at("total_size"), 0) << r.out;
  r = Run({"describe", "recovery", "nope"});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"get", "recoveries", "nope"}).code, 3);
  EXPECT_EQ(Run({"get", "recoveries", "nope", "--state", "failed"}).code, 2);

  // Dry-run: a SEPARATE fault under the job is decided and recorded, nothing acted on.
  ASSERT_EQ(Run({"dry-run", "on", "--reason", "rehearsal", "--actor", "ops"}).code, 0);
  const std::string file = dir_.Sub("job.json");
  WriteFile(file, kRecoveryJobJson);
  ASSERT_EQ(Run({"create-job", "-f", file}).code, 0);
  r = Run({"report-fault", "--reporter", "netprobe", "--id", "dev0", "--node", "worker02", "--device", "0", "--code",
           "NPU_LOST", "--level", "SEPARATE", "--message", "device lost"});
  ASSERT_EQ(r.code, 0) << r.err;
  json listed;
  ASSERT_TRUE(WaitFor([&] {
    Result l = Run({"get", "recoveries", "-o", "json"});
    if (l.code != 0) return false;
    listed = json::parse(l.out);
    return listed.value("recoveries", json::array()).size() == 1;
  }));
  const json rec = listed["recoveries"][0];
  EXPECT_EQ(rec.at("id"), "train-r.1") << rec;
  EXPECT_EQ(rec.at("state"), "RECOVERY_STATE_DRY_RUN") << rec;
  const size_t steps = rec.at("steps").size();
  ASSERT_GT(steps, 0u) << rec;

  r = Run({"get", "recoveries"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Lines(r.out).size(), 2u) << r.out;
  for (const char* col : {"ID", "JOB", "STATE", "STRATEGY", "LEVEL", "RANKS", "STEPS", "CREATED", "MESSAGE"}) {
    EXPECT_NE(Lines(r.out)[0].find(col), std::string::npos) << col << "\n" << r.out;
  }
  EXPECT_EQ(Cell(r.out, "train-r.1", "JOB"), "train-r") << r.out;
  EXPECT_EQ(Cell(r.out, "train-r.1", "STATE"), "DRY_RUN") << r.out;
  EXPECT_EQ(Cell(r.out, "train-r.1", "LEVEL"), "SEPARATE") << r.out;
  EXPECT_EQ(Cell(r.out, "train-r.1", "RANKS"), "0") << r.out;
  EXPECT_EQ(Cell(r.out, "train-r.1", "STEPS"), std::to_string(steps) + "/" + std::to_string(steps)) << r.out;
  EXPECT_NE(Cell(r.out, "train-r.1", "STRATEGY"), "-") << r.out;

  // Wide: the trigger faults.
  r = Run({"get", "recoveries", "-o", "wide"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(Lines(r.out)[0].find("TRIGGERS"), std::string::npos) << r.out;
  EXPECT_EQ(Cell(r.out, "train-r.1", "TRIGGERS"), "worker02/0/external/netprobe/dev0") << r.out;

  // Filters, and one recovery by id.
  for (const char* state : {"dry_run", "dry-run", "DRY_RUN", "RECOVERY_STATE_DRY_RUN"}) {
    r = Run({"get", "recoveries", "--state", state});
    ASSERT_EQ(r.code, 0) << state << r.err;
    EXPECT_NE(RowOf(r.out, "train-r.1"), "") << state << "\n" << r.out;
  }
  r = Run({"get", "recoveries", "--state", "running"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  r = Run({"get", "recoveries", "--job", "train-r", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("recoveries").size(), 1u) << r.out;
  r = Run({"get", "recoveries", "--job", "other", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).value("recoveries", json::array()).size(), 0u) << r.out;
  r = Run({"get", "recovery", "train-r.1", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("id"), "train-r.1") << r.out;

  // describe: the fields, the reasons and one row per step.
  r = Run({"describe", "recovery", "train-r.1"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want :
       {"Id:", "train-r.1", "Job:", "train-r", "State:", "DRY_RUN", "Level:", "SEPARATE", "Dry run:", "yes",
        "Trigger faults:", "netprobe/dev0", "Reasons:", "Steps:", "INDEX", "RUNG", "WHAT", "SKIPPED"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  ASSERT_NE(r.out.find("\nSteps:\n"), std::string::npos) << r.out;
  const std::string step_table = r.out.substr(r.out.find("\nSteps:\n"));
  EXPECT_EQ(Lines(step_table).size(), steps + 2) << r.out;  // "Steps:", the header, one line per step
  for (const auto& s : rec.at("steps")) {
    if (s.contains("action") && s.at("action") == "CLUSTER_ACTION_ISOLATE_DEVICE") {
      EXPECT_NE(step_table.find("actuator isolate_device worker02 dev 0"), std::string::npos) << r.out;
    }
    if (s.contains("command") && s.at("command") == "JOB_COMMAND_PAUSE") {
      EXPECT_NE(step_table.find("agent PAUSE"), std::string::npos) << r.out;
    }
  }
  r = Run({"describe", "recovery", "train-r.1", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("recovery").at("id"), "train-r.1") << r.out;

  // The decision is an event, and watch says which recovery.
  r = Run({"watch", "--from-revision", "0", "--type", "RECOVERY_STARTED", "--max-events", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recovery train-r.1 DRY_RUN"), std::string::npos) << r.out;

  // Paused, then dry-run off: the still-active fault gets a real recovery that
  // waits, and the table says why.
  ASSERT_EQ(Run({"pause", "--reason", "switch upgrade", "--actor", "ops"}).code, 0);
  ASSERT_EQ(Run({"dry-run", "off", "--actor", "ops"}).code, 0);
  ASSERT_TRUE(WaitFor([&] {
    Result l = Run({"get", "recoveries", "--state", "waiting", "-o", "json"});
    return l.code == 0 && json::parse(l.out).value("recoveries", json::array()).size() == 1;
  }));
  r = Run({"get", "recoveries"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Lines(r.out).size(), 3u) << r.out;
  EXPECT_EQ(Lines(r.out)[1].rfind("train-r.2 ", 0), 0u) << "newest first\n" << r.out;
  EXPECT_EQ(Cell(r.out, "train-r.2", "STATE"), "WAITING") << r.out;
  EXPECT_NE(RowOf(r.out, "train-r.2").find("paused"), std::string::npos) << r.out;
  r = Run({"describe", "recovery", "train-r.2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Wait reason:"), std::string::npos) << r.out;
}

TEST_F(ClusterctlTest, IsolationShowsInNodes) {
  Result r = Run({"get", "nodes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Cell(r.out, "worker02", "ISOLATED"), "no") << r.out;
  r = Run({"describe", "node", "worker02"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Isolated:"), std::string::npos) << r.out;
  const std::string devices = r.out.substr(r.out.find("Devices:"));
  EXPECT_NE(Lines(devices).at(1).find("ISOLATED"), std::string::npos) << r.out;
}

TEST_F(ClusterctlTest, ClearFaultByIdClearsAnAgentFault) {
  Result r = Run({"get", "faults", "--node", "worker01", "--active", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json faults = json::parse(r.out).at("faults");
  ASSERT_EQ(faults.size(), 1u) << r.out;
  const std::string id = faults[0].at("id");
  EXPECT_EQ(faults[0].at("source"), "FAULT_SOURCE_ACCELERATOR");
  r = Run({"get", "faults", "-o", "wide"});
  EXPECT_NE(r.out.find(id), std::string::npos) << r.out;

  r = Run({"clear-fault", id});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--reason"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"clear-fault", id, "--reason", "x", "--node", "worker01"}).code, 2);
  EXPECT_EQ(Run({"clear-fault", "--reporter", "p", "--id", "x", "--node", "worker01", "--reason", "x"}).code, 2);

  r = Run({"clear-fault", id, "--reason", "HBM replaced", "--actor", "erin"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("fault " + id + " cleared"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CLEARED"), std::string::npos) << r.out;

  r = Run({"get", "faults", "--node", "worker01", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  faults = json::parse(r.out).at("faults");
  ASSERT_EQ(faults.size(), 1u) << r.out;
  EXPECT_EQ(faults[0].at("state"), "FAULT_STATE_CLEARED");
  const std::string reason = faults[0].at("clear_reason");
  EXPECT_NE(reason.find("erin"), std::string::npos) << reason;
  EXPECT_NE(reason.find("HBM replaced"), std::string::npos) << reason;
  EXPECT_EQ(Summary().active_faults(), 0u);

  // Clearing it again: the server's precondition, exit 1 with its message.
  r = Run({"clear-fault", id, "--reason", "again"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("FAILED_PRECONDITION"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not active"), std::string::npos) << r.err;
  r = Run({"clear-fault", "worker01/-/external/NOPE", "--reason", "x"});
  EXPECT_EQ(r.code, 3) << r.err;
}

TEST_F(ClusterctlTest, GetSummary) {
  Result r = Run({"get", "summary"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("RESTART_BUSINESS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NODES"), std::string::npos) << r.out;
  r = Run({"get", "summary", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j.at("nodes").at("total"), 2);
  EXPECT_EQ(j.at("nodes").at("unhealthy"), 1);
  EXPECT_EQ(j.at("active_faults"), 1);
  EXPECT_EQ(j.at("connected_agents"), 2);
  EXPECT_EQ(j.at("active_faults_by_level").at("FAULT_LEVEL_RESTART_BUSINESS"), 1);
}

TEST_F(ClusterctlTest, ExitCodes) {
  Result r = Run({"describe", "node", "nobody"});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;

  r = Run({"get", "faults", "--min-level", "BOGUS"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown level 'BOGUS'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("clusterctl help"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"get", "nodes", "--health", "SICK"}).code, 2);
  EXPECT_EQ(Run({"watch", "--type", "NOPE"}).code, 2);
  EXPECT_EQ(Run({"watch", "--from-revision", "abc"}).code, 2);
  EXPECT_EQ(
      Run({"report-fault", "--reporter", "p", "--id", "x", "--node", "worker01", "--code", "C", "--level", "bad"}).code,
      2);

  // The server refuses a bad argument: an RPC error, with its code.
  r = Run({"get", "nodes", "--selector", "no-equals-sign"});
  if (r.code != 0) {
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  }
  r = Run({"report-fault", "--reporter", "p", "--id", "x", "--node", "nobody", "--code", "C"});
  EXPECT_EQ(r.code, 3) << r.err;

  r = Run({"describe", "recovery", "nope"});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  EXPECT_EQ(Run({"get", "recoveries", "--state", "sleeping"}).code, 2);
  EXPECT_EQ(Run({"describe", "recovery"}).code, 2);

  EXPECT_EQ(RunRaw({}).code, 2);
  EXPECT_EQ(Run({"frobnicate"}).code, 2);
  EXPECT_EQ(Run({"get"}).code, 2);
  EXPECT_EQ(Run({"get", "widgets"}).code, 2);
  EXPECT_EQ(Run({"get", "nodes", "--bogus"}).code, 2);
  EXPECT_EQ(Run({"get", "nodes", "--health"}).code, 2);
  EXPECT_EQ(Run({"-o", "yaml", "get", "nodes"}).code, 2);
  EXPECT_EQ(Run({"describe", "node"}).code, 2);
  EXPECT_EQ(Run({"--timeout", "soon", "get", "nodes"}).code, 2);
  EXPECT_EQ(Run({"help"}).code, 0);
  EXPECT_EQ(Run({"get", "nodes", "--help"}).code, 0);
  r = Run({"version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("clusterctl ", 0), 0u);
}

// A stand-in ClusterService whose first Watch ends with RESOURCE_EXHAUSTED
// after two events, as clusterd does for a watcher that fell behind.
class LaggingWatchService final : public clusterd::v1::ClusterService::Service {
 public:
  grpc::Status Watch(grpc::ServerContext*, const clusterd::v1::WatchRequest* req,
                     grpc::ServerWriter<clusterd::v1::WatchResponse>* writer) override {
    std::lock_guard lock(mu_);
    from_.push_back(req->from_revision());
    clusterd::v1::WatchResponse resp;
    const uint64_t last = from_.size() == 1 ? 2 : 4;
    for (uint64_t r = req->from_revision() + 1; r <= last; ++r) {
      auto* e = resp.add_events();
      e->set_revision(r);
      e->set_type(clusterd::v1::EVENT_TYPE_NODE_UPDATED);
      e->set_node("worker01");
    }
    resp.set_revision(last);
    writer->Write(resp);
    if (from_.size() == 1) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "watcher fell behind; resume with from_revision=2");
    }
    return grpc::Status::OK;
  }
  std::vector<uint64_t> from() {
    std::lock_guard lock(mu_);
    return from_;
  }

 private:
  std::mutex mu_;
  std::vector<uint64_t> from_;
};

TEST(ClusterctlWatchTest, ResourceExhaustedResumesFromTheLastRevision) {
  LaggingWatchService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  ASSERT_TRUE(server && port > 0);
  TempDir dir;
  std::ostringstream out, err;
  int code = RunClusterctl({"--server", "127.0.0.1:" + std::to_string(port), "watch", "--from-revision", "0",
                            "--max-events", "4", "--cursor-file", dir.Sub("cursor"), "-o", "json"},
                           out, err, NoEnv);
  server->Shutdown();
  EXPECT_EQ(code, 0) << err.str();
  EXPECT_EQ(Revisions(out.str()), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(service.from(), (std::vector<uint64_t>{0, 2}));
  EXPECT_NE(err.str().find("resuming from revision 2"), std::string::npos) << err.str();
  std::ifstream in(dir.Sub("cursor"));
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "4");
}

// A stand-in ClusterService that serves hand-built recoveries one per page
// (whatever page_size asks) and an isolated node, to test paging and the
// formatting of what a short real run does not produce (escalation, step
// times, isolation).
class FakeRecoveryService final : public clusterd::v1::ClusterService::Service {
 public:
  FakeRecoveryService() {
    namespace v1 = clusterd::v1;
    v1::Recovery* a = &recoveries_.emplace_back();
    a->set_id("train-a.2");
    a->set_job_id("train-a");
    a->set_state(v1::RECOVERY_STATE_RUNNING);
    a->set_initial_strategy(v1::RECOVERY_STRATEGY_PROCESS_RESTART);
    a->set_strategy(v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
    a->set_level(v1::FAULT_LEVEL_SEPARATE);
    for (uint32_t r : {3u, 0u, 1u, 2u, 7u}) a->add_hit_ranks(r);
    a->add_trigger_fault_ids("worker02/0/accelerator/80E01801");
    a->add_trigger_fault_ids("worker02/1/accelerator/80E01801");
    a->add_reasons("2 fault(s) hit ranks [0-3,7]; worst SEPARATE starts at PROCESS_RESTART");
    a->add_reasons("step 0 timed out: escalated to POD_RESCHEDULE");
    a->set_graceful(true);
    auto* dev = a->add_isolate_devices();
    dev->set_node("worker02");
    dev->set_device_id(0);
    a->mutable_create_time()->set_seconds(1'700'000'000);
    a->set_create_revision(40);
    a->set_revision(44);
    v1::RecoveryStep* s0 = a->add_steps();
    s0->set_index(0);
    s0->set_strategy(v1::RECOVERY_STRATEGY_PROCESS_RESTART);
    s0->set_command(v1::JOB_COMMAND_RESTART_PROCESSES);
    for (uint32_t r : {0u, 1u, 2u, 3u, 7u}) s0->add_ranks(r);
    s0->set_state(v1::STEP_STATE_TIMED_OUT);
    s0->set_idempotency_key("train-a.2/0");
    s0->mutable_start_time()->set_seconds(1'700'000'000);
    s0->mutable_deadline()->set_seconds(1'700'000'300);
    s0->mutable_end_time()->set_seconds(1'700'000'301);
    s0->set_message("no answer before the deadline");
    v1::RecoveryStep* s1 = a->add_steps();
    s1->set_index(1);
    s1->set_strategy(v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
    s1->set_action(v1::CLUSTER_ACTION_ISOLATE_DEVICE);
    s1->set_node("worker02");
    s1->set_device_id(0);
    s1->set_state(v1::STEP_STATE_RUNNING);
    s1->set_idempotency_key("train-a.2/1");
    s1->mutable_start_time()->set_seconds(1'700'000'301);
    v1::RecoveryStep* s2 = a->add_steps();
    s2->set_index(2);
    s2->set_strategy(v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
    s2->set_command(v1::JOB_COMMAND_RESUME);
    s2->set_state(v1::STEP_STATE_PENDING);

    v1::Recovery* b = &recoveries_.emplace_back();
    b->set_id("train-b.1");
    b->set_job_id("train-b");
    b->set_state(v1::RECOVERY_STATE_WAITING);
    b->set_strategy(v1::RECOVERY_STRATEGY_PROCESS_RESTART);
    b->set_initial_strategy(v1::RECOVERY_STRATEGY_PROCESS_RESTART);
    b->set_level(v1::FAULT_LEVEL_RESTART_BUSINESS);
    b->add_hit_ranks(4);
    b->set_wait_reason("blast radius: max_concurrent_recoveries=1 reached (train-a.2 running); " +
                       std::string(80, 'x'));
    b->set_message("not the wait reason");

    v1::Recovery* c = &recoveries_.emplace_back();
    c->set_id("train-a.1");
    c->set_job_id("train-a");
    c->set_state(v1::RECOVERY_STATE_FAILED);
    c->set_strategy(v1::RECOVERY_STRATEGY_FAIL);
    c->set_initial_strategy(v1::RECOVERY_STRATEGY_STEP_RETRY);
    c->set_message("reached FAIL: the job is marked failed");
  }

  grpc::Status ListRecoveries(grpc::ServerContext*, const clusterd::v1::ListRecoveriesRequest* req,
                              clusterd::v1::ListRecoveriesResponse* resp) override {
    std::lock_guard lock(mu_);
    requests_.push_back(*req);
    const size_t at = req->page_token().empty() ? 0 : std::stoul(req->page_token());
    if (at >= recoveries_.size()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad token");
    *resp->add_recoveries() = recoveries_[at];
    resp->set_total_size(static_cast<int32_t>(recoveries_.size()));
    if (at + 1 < recoveries_.size()) resp->set_next_page_token(std::to_string(at + 1));
    return grpc::Status::OK;
  }
  grpc::Status GetRecovery(grpc::ServerContext*, const clusterd::v1::GetRecoveryRequest* req,
                           clusterd::v1::GetRecoveryResponse* resp) override {
    for (const auto& r : recoveries_) {
      if (r.id() == req->id()) {
        *resp->mutable_recovery() = r;
        return grpc::Status::OK;
      }
    }
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "recovery " + req->id() + " does not exist");
  }
  grpc::Status GetNode(grpc::ServerContext*, const clusterd::v1::GetNodeRequest* req,
                       clusterd::v1::GetNodeResponse* resp) override {
    auto* n = resp->mutable_node();
    n->set_name(req->name());
    n->set_isolated(true);
    n->set_isolation_reason("isolated by train-a.2");
    auto* d0 = resp->add_devices();
    d0->set_id(0);
    d0->set_isolated(true);
    d0->set_isolation_reason("isolated by train-a.1");
    resp->add_devices()->set_id(1);
    return grpc::Status::OK;
  }
  grpc::Status ListNodes(grpc::ServerContext*, const clusterd::v1::ListNodesRequest*,
                         clusterd::v1::ListNodesResponse* resp) override {
    auto* n = resp->add_nodes();
    n->set_name("worker02");
    n->set_isolated(true);
    resp->add_nodes()->set_name("worker03");
    resp->set_total_size(2);
    return grpc::Status::OK;
  }
  std::vector<clusterd::v1::ListRecoveriesRequest> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  std::mutex mu_;
  std::vector<clusterd::v1::Recovery> recoveries_;
  std::vector<clusterd::v1::ListRecoveriesRequest> requests_;
};

class ClusterctlFakeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ && port_ > 0);
  }
  void TearDown() override { server_->Shutdown(); }

  Result Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--server", "127.0.0.1:" + std::to_string(port_)});
    std::ostringstream out, err;
    Result r;
    r.code = RunClusterctl(args, out, err, NoEnv);
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  FakeRecoveryService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ClusterctlFakeServerTest, GetRecoveriesFollowsEveryPageAndFormats) {
  Result r = Run({"get", "recoveries", "--job", "train-a", "--state", "running"});
  ASSERT_EQ(r.code, 0) << r.err;
  // One request per page, each with the filters and the previous page's token.
  const auto reqs = service_.requests();
  ASSERT_EQ(reqs.size(), 3u);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].job(), "train-a");
    EXPECT_EQ(reqs[i].state(), clusterd::v1::RECOVERY_STATE_RUNNING);
    EXPECT_GT(reqs[i].page_size(), 0);
    EXPECT_EQ(reqs[i].page_token(), i == 0 ? "" : std::to_string(i));
  }
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[1].rfind("train-a.2 ", 0), 0u) << "the server's order is kept\n" << r.out;
  EXPECT_EQ(lines[2].rfind("train-b.1 ", 0), 0u) << r.out;
  EXPECT_EQ(lines[3].rfind("train-a.1 ", 0), 0u) << r.out;
  EXPECT_EQ(Cell(r.out, "train-a.2", "STRATEGY"), "PROCESS_RESTART->POD_RESCHEDULE") << r.out;
  EXPECT_EQ(Cell(r.out, "train-a.2", "STATE"), "RUNNING") << r.out;
  EXPECT_EQ(Cell(r.out, "train-a.2", "LEVEL"), "SEPARATE") << r.out;
  EXPECT_EQ(Cell(r.out, "train-a.2", "RANKS"), "0-3,7") << r.out;
  EXPECT_EQ(Cell(r.out, "train-a.2", "STEPS"), "1/3") << r.out;
  EXPECT_EQ(Cell(r.out, "train-a.2", "CREATED"), "2023-11-14T22:13:20Z") << r.out;
  EXPECT_EQ(Cell(r.out, "train-b.1", "STRATEGY"), "PROCESS_RESTART") << "no arrow when it did not escalate";
  EXPECT_EQ(Cell(r.out, "train-b.1", "STEPS"), "0/0") << r.out;
  EXPECT_EQ(Cell(r.out, "train-a.1", "STRATEGY"), "STEP_RETRY->FAIL") << r.out;
  // WAITING shows why, truncated in the table; the message otherwise.
  const std::string waiting = RowOf(r.out, "train-b.1");
  EXPECT_NE(waiting.find("blast radius: max_concurrent_recoveries=1"), std::string::npos) << r.out;
  EXPECT_EQ(waiting.find("not the wait reason"), std::string::npos) << r.out;
  EXPECT_EQ(waiting.substr(waiting.size() - 3), "...") << r.out;
  EXPECT_NE(RowOf(r.out, "train-a.1").find("reached FAIL"), std::string::npos) << r.out;

  // Wide: triggers, the whole wait reason.
  r = Run({"get", "recoveries", "-o", "wide"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Cell(r.out, "train-a.2", "TRIGGERS"), "worker02/0/accelerator/80E01801,worker02/1/accelerator/80E01801")
      << r.out;
  EXPECT_EQ(Cell(r.out, "train-a.2", "REVISION"), "44") << r.out;
  EXPECT_NE(RowOf(r.out, "train-b.1").find(std::string(80, 'x')), std::string::npos) << r.out;

  // JSON: every page in one response, proto field names.
  r = Run({"get", "recoveries", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j.at("recoveries").size(), 3u) << r.out;
  EXPECT_EQ(j.at("total_size"), 3);
  EXPECT_FALSE(j.contains("next_page_token") && !j.at("next_page_token").get<std::string>().empty()) << r.out;
  EXPECT_EQ(j["recoveries"][0].at("initial_strategy"), "RECOVERY_STRATEGY_PROCESS_RESTART");
  EXPECT_EQ(j["recoveries"][1].at("wait_reason").get<std::string>().rfind("blast radius", 0), 0u);
}

TEST_F(ClusterctlFakeServerTest, DescribeRecoveryShowsFieldsReasonsAndSteps) {
  Result r = Run({"describe", "recovery", "train-a.2"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want : {"Id:                train-a.2", "Job:               train-a", "State:             RUNNING",
                           "Strategy:          POD_RESCHEDULE", "Initial strategy:  PROCESS_RESTART",
                           "Level:             SEPARATE", "Hit ranks:         0-3,7", "Steps ended:       1/3",
                           "Graceful:          yes", "Isolate devices:   worker02 dev 0",
                           "Created:           2023-11-14T22:13:20Z (revision 40)", "Revision:          44",
                           "  worker02/1/accelerator/80E01801", "  - step 0 timed out: escalated to POD_RESCHEDULE"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  const std::string steps = r.out.substr(r.out.find("\nSteps:\n"));
  auto lines = Lines(steps);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  for (const char* col : {"INDEX", "RUNG", "WHAT", "STATE", "STARTED", "ENDED", "MESSAGE"}) {
    EXPECT_NE(lines[1].find(col), std::string::npos) << col << "\n" << r.out;
  }
  EXPECT_EQ(lines[1].find("DEADLINE"), std::string::npos) << "deadline only with -o wide";
  for (const char* want : {"PROCESS_RESTART", "agent RESTART_PROCESSES ranks 0-3,7", "TIMED_OUT",
                           "2023-11-14T22:13:20.000Z", "2023-11-14T22:18:21.000Z", "no answer before the deadline"}) {
    EXPECT_NE(lines[2].find(want), std::string::npos) << want << "\n" << r.out;
  }
  EXPECT_NE(lines[3].find("actuator isolate_device worker02 dev 0"), std::string::npos) << r.out;
  EXPECT_NE(lines[3].find("RUNNING"), std::string::npos) << r.out;
  EXPECT_NE(lines[4].find("agent RESUME"), std::string::npos) << r.out;
  EXPECT_NE(lines[4].find("PENDING"), std::string::npos) << r.out;

  r = Run({"describe", "recovery", "train-a.2", "-o", "wide"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("DEADLINE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2023-11-14T22:18:20.000Z"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train-a.2/1"), std::string::npos) << r.out;

  r = Run({"describe", "recovery", "train-b.1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Wait reason:       blast radius"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Steps:\n  <none>"), std::string::npos) << r.out;

  r = Run({"describe", "recovery", "nope"});
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
}

TEST_F(ClusterctlFakeServerTest, IsolatedNodeAndDevices) {
  Result r = Run({"get", "nodes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Cell(r.out, "worker02", "ISOLATED"), "yes") << r.out;
  EXPECT_EQ(Cell(r.out, "worker03", "ISOLATED"), "no") << r.out;
  r = Run({"describe", "node", "worker02"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Isolated:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("yes (isolated by train-a.2)"), std::string::npos) << r.out;
  const std::string devices = r.out.substr(r.out.find("Devices:"));
  EXPECT_NE(RowOf(devices, "  0").find("yes (isolated by train-a.1)"), std::string::npos) << r.out;
  EXPECT_EQ(RowOf(devices, "  1").substr(RowOf(devices, "  1").size() - 2), "no") << r.out;
}

TEST(ClusterctlUnimplementedTest, AnOlderServerIsExitFive) {
  // A server without ListRecoveries (the stand-in serves only Watch).
  LaggingWatchService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  ASSERT_TRUE(server && port > 0);
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{"get", "recoveries"}, {"describe", "recovery", "train-a.1"}}) {
    args.insert(args.begin(), {"--server", "127.0.0.1:" + std::to_string(port)});
    std::ostringstream out, err;
    EXPECT_EQ(RunClusterctl(args, out, err, NoEnv), 5) << err.str();
    EXPECT_NE(err.str().find("not supported by clusterd"), std::string::npos) << err.str();
    EXPECT_NE(err.str().find("UNIMPLEMENTED"), std::string::npos) << err.str();
  }
  server->Shutdown();
}

TEST_F(ClusterctlTest, UnreachableServerNamesTheAddress) {
  const std::string addr = "127.0.0.1:" + std::to_string(clusterd::FreeLoopbackPort());
  Result r = RunRaw({"--server", addr, "get", "nodes"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cannot reach clusterd at " + addr), std::string::npos) << r.err;
  r = RunRaw({"--server", addr, "watch", "--from-revision", "0"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(addr), std::string::npos) << r.err;
}

TEST_F(ClusterctlTest, ServerFromEnvironment) {
  g_env_addr = Addr();
  Result r = RunRaw({"get", "nodes"}, EnvWithAddr);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("worker01"), std::string::npos);
  // --server wins over the environment.
  g_env_addr = "127.0.0.1:1";
  r = RunRaw({"get", "nodes", "--server", Addr()}, EnvWithAddr);
  EXPECT_EQ(r.code, 0) << r.err;
}

// ------------------------------------------------ transport security ---

std::map<std::string, std::string> g_env_map;
const char* EnvFromMap(const char* name) {
  auto it = g_env_map.find(name);
  return it == g_env_map.end() ? nullptr : it->second.c_str();
}

// The flags are checked before any call: no server is needed to refuse them.
class ClusterctlSecurityFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_env_map.clear();
    WriteFile(ca_, "not a certificate\n");
    WriteFile(cert_, "not a certificate\n");
    WriteFile(key_, "not a key\n");
  }
  void TearDown() override { g_env_map.clear(); }

  static Result Run(const std::vector<std::string>& args) {
    std::ostringstream out, err;
    Result r;
    r.code = RunClusterctl(args, out, err, EnvFromMap);
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  TempDir dir_;
  const std::string ca_ = dir_.Sub("ca.crt"), cert_ = dir_.Sub("c.crt"), key_ = dir_.Sub("c.key");
  const std::string addr_ = "127.0.0.1:" + std::to_string(clusterd::FreeLoopbackPort());
};

TEST_F(ClusterctlSecurityFlagsTest, HelpListsTheFlags) {
  Result r = Run({"help"});
  ASSERT_EQ(r.code, 0);
  for (const char* flag : {"--ca FILE", "--cert FILE", "--key FILE", "--token TOKEN", "--token-file FILE",
                           "--server-name NAME", "CLUSTERD_CA", "CLUSTERD_TOKEN_FILE"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST_F(ClusterctlSecurityFlagsTest, ATokenWithoutCaIsRefused) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--server", addr_, "--token", "t", "get", "nodes"},
           {"--server", addr_, "get", "nodes", "--token=t"},  // global flags also after the command
           {"--server", addr_, "--token-file", ca_, "get", "summary"}}) {
    Result r = Run(args);
    EXPECT_EQ(r.code, kExitUsage) << r.err;
    EXPECT_NE(r.err.find("--token"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("only sent over TLS (give --ca)"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("cannot reach"), std::string::npos) << r.err;  // never dialled
  }
}

TEST_F(ClusterctlSecurityFlagsTest, ACertificateWithoutItsKeyIsRefused) {
  Result r = Run({"--server", addr_, "--ca", ca_, "--cert", cert_, "get", "nodes"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--cert: needs --key"), std::string::npos) << r.err;
  r = Run({"--server", addr_, "--ca", ca_, "--key", key_, "get", "nodes"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--key: needs --cert"), std::string::npos) << r.err;
}

TEST_F(ClusterctlSecurityFlagsTest, AMissingFileNamesTheFlag) {
  const std::string missing = dir_.Sub("missing.crt");
  Result r = Run({"--server", addr_, "--ca", missing, "get", "nodes"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--ca: cannot read " + missing), std::string::npos) << r.err;
  r = Run({"--server", addr_, "--server-name", "clusterd", "get", "nodes"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--server-name"), std::string::npos) << r.err;
  r = Run({"--server", addr_, "--ca"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--ca needs a value"), std::string::npos) << r.err;
}

TEST_F(ClusterctlSecurityFlagsTest, TheEnvironmentIsTheFallback) {
  g_env_map["CLUSTERD_CA"] = dir_.Sub("env-ca.crt");  // missing: the error shows which one was used
  Result r = Run({"--server", addr_, "get", "nodes"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--ca: cannot read " + dir_.Sub("env-ca.crt")), std::string::npos) << r.err;

  g_env_map.clear();
  g_env_map["CLUSTERD_TOKEN"] = "t";
  r = Run({"--server", addr_, "get", "nodes"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("only sent over TLS"), std::string::npos) << r.err;

  g_env_map["CLUSTERD_CERT"] = cert_;
  r = Run({"--server", addr_, "--ca", ca_, "get", "nodes"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--cert: needs --key"), std::string::npos) << r.err;
}

TEST_F(ClusterctlSecurityFlagsTest, AFlagWinsOverTheEnvironment) {
  g_env_map["CLUSTERD_CA"] = dir_.Sub("env-ca.crt");
  Result r = Run({"--server", addr_, "--ca", dir_.Sub("flag-ca.crt"), "get", "nodes"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("flag-ca.crt"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("env-ca.crt"), std::string::npos) << r.err;
}

// The same flags, all the way to a TLS server that records who called.
class ClusterctlTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_env_map.clear();
    ASSERT_TRUE(clusterd::testing::TestCerts::Get().ok()) << "test/security/make_certs.sh failed";
    ASSERT_TRUE(server_.Start(clusterd::testing::TestCerts::Get().dir()));
  }
  void TearDown() override { g_env_map.clear(); }

  static std::string Cert(const std::string& name) { return clusterd::testing::TestCerts::Get().Path(name); }

  Result Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--server", server_.address(), "--timeout", "30s"});
    std::ostringstream out, err;
    Result r;
    r.code = RunClusterctl(args, out, err, EnvFromMap);
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  clusterd::testing::TlsTestServer server_;
};

TEST_F(ClusterctlTlsTest, TokenOverTls) {
  Result r = Run({"--ca", Cert("ca.crt"), "--token-file", Cert("token-viewer"), "get", "summary", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("4242"), std::string::npos) << r.out;
  EXPECT_EQ(server_.service().last().authorization, "Bearer " + clusterd::testing::ReadWholeFile(Cert("token-viewer")));
}

TEST_F(ClusterctlTlsTest, MutualTls) {
  Result r = Run({"get", "summary", "--ca", Cert("ca.crt"), "--cert", Cert("operator.crt"), "--key",
                  Cert("operator.key"), "--server-name", "clusterd"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(server_.service().last().common_name, "bob");
  EXPECT_EQ(server_.service().last().authorization, "");
}

TEST_F(ClusterctlTlsTest, FromTheEnvironment) {
  g_env_map = {{"CLUSTERD_CA", Cert("ca.crt")},
               {"CLUSTERD_CERT", Cert("viewer.crt")},
               {"CLUSTERD_KEY", Cert("viewer.key")},
               {"CLUSTERD_TOKEN", "env-token"}};
  Result r = Run({"get", "summary"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(server_.service().last().common_name, "alice");
  EXPECT_EQ(server_.service().last().authorization, "Bearer env-token");

  // A token flag replaces the environment's token; a token file flag too
  // (and is not refused as a second token).
  r = Run({"get", "summary", "--token", "flag-token"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(server_.service().last().authorization, "Bearer flag-token");
  r = Run({"get", "summary", "--token-file", Cert("token-admin")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(server_.service().last().authorization, "Bearer " + clusterd::testing::ReadWholeFile(Cert("token-admin")));
}

TEST_F(ClusterctlTlsTest, WithoutTheFlagsItIsPlaintextAndFails) {
  // Plaintext to a TLS server: the handshake fails, an RPC error (exit 1).
  Result r = Run({"get", "summary"});
  EXPECT_EQ(r.code, kExitRpcError) << r.err;
  EXPECT_TRUE(server_.service().calls().empty());
  // A CA that did not sign the server's certificate: the token is never sent.
  r = Run({"get", "summary", "--ca", Cert("other-ca.crt"), "--token", "must-not-leak"});
  EXPECT_EQ(r.code, kExitRpcError) << r.err;
  EXPECT_TRUE(server_.service().calls().empty());
}

}  // namespace
}  // namespace clusterctl

namespace clusterctl {
namespace {

// doctor: the software chains of four more nodes, one with its device plugin
// not registered, one on an older driver than its pool.
TEST_F(ClusterctlTest, DoctorNamesBrokenLinksAndDriftWithTheirFixes) {
  std::vector<std::unique_ptr<TestAgent>> more;
  for (const std::string name : {"npu1", "npu2", "npu3", "npu4"}) {
    auto a = std::make_unique<TestAgent>(channel_, name, 1, 2);
    clusterd::v1::Hello hello = a->MakeHello();
    for (auto& d : *hello.mutable_inventory()->mutable_devices()) d.set_model("910B3");
    auto* driver = hello.mutable_inventory()->add_chain();
    driver->set_name("driver");
    driver->set_state(clusterd::v1::CHAIN_LINK_STATE_OK);
    driver->set_version(name == "npu4" ? "24.1.rc2" : "24.1.rc3");
    auto* plugin = hello.mutable_inventory()->add_chain();
    plugin->set_name("device_plugin");
    plugin->set_state(name == "npu3" ? clusterd::v1::CHAIN_LINK_STATE_BROKEN : clusterd::v1::CHAIN_LINK_STATE_OK);
    plugin->set_evidence(name == "npu3" ? "no Ascend device plugin socket next to kubelet.sock"
                                        : "registered: Ascend910.sock");
    if (name == "npu3") plugin->set_code("NODE_CHAIN_DEVICE_PLUGIN_NOT_REGISTERED");
    ASSERT_TRUE(a->Connect(&hello));
    more.push_back(std::move(a));
  }
  Result r;
  ASSERT_TRUE(WaitFor([&] {
    r = Run({"doctor"});
    return r.out.find("DRIFT") != std::string::npos;
  })) << r.out
      << r.err;
  EXPECT_EQ(r.code, 0) << r.err;
  // Broken links first, then drift; each with its fix once.
  const auto lines = Lines(r.out);
  ASSERT_GE(lines.size(), 3u) << r.out;
  EXPECT_NE(lines[1].find("npu3"), std::string::npos) << r.out;
  EXPECT_NE(lines[1].find("BROKEN"), std::string::npos) << r.out;
  EXPECT_NE(lines[2].find("npu4"), std::string::npos) << r.out;
  EXPECT_NE(lines[2].find("24.1.rc2 where 3 of 4 nodes of pool 910B3 run 24.1.rc3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("device_plugin: start the Ascend device plugin"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("driver: upgrade or roll back the node"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("6 node(s), 4 reporting a software chain; 2 with a broken link or drift"), std::string::npos)
      << r.out;

  // One node: every link, the healthy ones too.
  r = Run({"-o", "json", "doctor", "npu3"});
  ASSERT_EQ(r.code, 0) << r.err;
  json doc = json::parse(r.out);
  ASSERT_EQ(doc["findings"].size(), 2u) << r.out;
  EXPECT_EQ(doc["findings"][0]["link"], "device_plugin");
  EXPECT_EQ(doc["findings"][0]["state"], "BROKEN");
  EXPECT_EQ(doc["findings"][1]["state"], "ok");
  EXPECT_EQ(doc["summary"], "node npu3: 1 link(s) to fix");
  // An agent without a chain, and a node that does not exist.
  r = Run({"doctor", "worker02"});
  EXPECT_NE(r.out.find("reports no software chain"), std::string::npos) << r.out;
  EXPECT_NE(Run({"doctor", "nope"}).code, 0);
  EXPECT_NE(Run({"doctor", "a", "b"}).code, 0);
  // describe node shows the chain.
  r = Run({"describe", "node", "npu3"});
  EXPECT_NE(r.out.find("Software chain"), std::string::npos) << r.out;
  for (auto& a : more) a->Close();
}

// uncordon with release_chain_check always: refused while the node's
// device plugin is not registered, naming the link and its fix; --force
// returns it anyway.
TEST_F(ClusterctlTest, UncordonWaitsForAHealthyChainUnlessForced) {
  StartServer([](clusterd::ClusterdConfig& c) { c.release_chain_check = "always"; });
  TestAgent npu(channel_, "npu9", 1, 2);
  clusterd::v1::Hello hello = npu.MakeHello();
  auto* plugin = hello.mutable_inventory()->add_chain();
  plugin->set_name("device_plugin");
  plugin->set_state(clusterd::v1::CHAIN_LINK_STATE_BROKEN);
  plugin->set_evidence("no Ascend device plugin socket next to kubelet.sock");
  plugin->set_code("NODE_CHAIN_DEVICE_PLUGIN_NOT_REGISTERED");
  ASSERT_TRUE(npu.Connect(&hello));
  ASSERT_EQ(Run({"cordon", "npu9", "--reason", "driver upgrade"}).code, 0);
  Result r = Run({"uncordon", "npu9"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("link device_plugin BROKEN (no Ascend device plugin socket next to kubelet.sock)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("start the Ascend device plugin"), std::string::npos) << r.err;
  r = Run({"get", "node", "npu9", "-o", "json"});
  EXPECT_NE(r.out.find("\"cordoned\": true"), std::string::npos) << r.out;
  r = Run({"uncordon", "npu9", "--force", "--reason", "plugin checked by hand"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("node npu9 uncordoned"), std::string::npos) << r.out;
  npu.Close();
}

}  // namespace
}  // namespace clusterctl

namespace clusterctl {
namespace {

// The doctor's output, compared with the files under test/clusterctl/golden
// (CLUSTERD_UPDATE_GOLDEN=1 rewrites them): five nodes with every link,
// three healthy, one on an older driver and a firmware the catalog does not
// pair with it, one whose device plugin is not registered and has no CANN.
class DoctorGoldenTest : public ClusterctlTest {
 protected:
  void SetUp() override {
    const std::string catalog = dir_.Sub("catalog.json");
    std::ofstream(catalog) << R"({"firmware_driver_pairs": [{"driver": "24.1.rc3", "firmware": ["7.5.0.3.220"]},
                                                          {"driver": "24.1.rc2", "firmware": ["7.5.0.1.129"]}]})";
    StartServer([&](clusterd::ClusterdConfig& c) { c.catalog_file = catalog; });
  }

  static void AddLink(clusterd::v1::Hello* h, const std::string& name, clusterd::v1::ChainLinkState state,
                      const std::string& version, const std::string& evidence, const std::string& code = "") {
    auto* l = h->mutable_inventory()->add_chain();
    l->set_name(name);
    l->set_state(state);
    l->set_version(version);
    l->set_evidence(evidence);
    l->set_code(code);
  }

  void Agent(const std::string& name, const std::string& driver, const std::string& firmware, bool plugin, bool cann) {
    using clusterd::v1::CHAIN_LINK_STATE_BROKEN;
    using clusterd::v1::CHAIN_LINK_STATE_OK;
    using clusterd::v1::CHAIN_LINK_STATE_UNKNOWN;
    auto a = std::make_unique<TestAgent>(channel_, name, 1, 8);
    clusterd::v1::Hello hello = a->MakeHello();
    for (auto& d : *hello.mutable_inventory()->mutable_devices()) d.set_model("910B3");
    const std::string ascend = "/usr/local/Ascend";
    AddLink(&hello, "driver", CHAIN_LINK_STATE_OK, driver, ascend + "/driver/version.info: Version=" + driver);
    AddLink(&hello, "firmware", CHAIN_LINK_STATE_OK, firmware, ascend + "/firmware/version.info: Version=" + firmware);
    AddLink(&hello, "device_files", CHAIN_LINK_STATE_OK, "", "/dev/davinci_manager and 8 /dev/davinci<N>");
    AddLink(&hello, "chips", CHAIN_LINK_STATE_OK, "", "8 of 8 expected chips have a /dev/davinci<N>");
    if (cann) {
      AddLink(&hello, "cann", CHAIN_LINK_STATE_OK, "8.0.RC3",
              "version= in " + ascend + "/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info");
    } else {
      AddLink(&hello, "cann", CHAIN_LINK_STATE_UNKNOWN, "",
              "no CANN toolkit under " + ascend + " (jobs may bring their own in the image)");
    }
    AddLink(&hello, "runtime", CHAIN_LINK_STATE_OK, "", "/etc/containerd/config.toml names ascend-docker-runtime");
    if (plugin) {
      AddLink(&hello, "device_plugin", CHAIN_LINK_STATE_OK, "", "registered: Ascend910.sock");
    } else {
      AddLink(&hello, "device_plugin", CHAIN_LINK_STATE_BROKEN, "",
              "no Ascend device plugin socket next to /var/lib/kubelet/device-plugins/kubelet.sock",
              "NODE_CHAIN_DEVICE_PLUGIN_NOT_REGISTERED");
    }
    AddLink(&hello, "kernel", CHAIN_LINK_STATE_OK, "5.10.0-182.0.0.95.oe2203sp3.aarch64", "/proc/sys/kernel/osrelease");
    ASSERT_TRUE(a->Connect(&hello));
    agents_.push_back(std::move(a));
  }

 public:
  static void ExpectGolden(const std::string& name, const std::string& got) {
    const std::string path = std::string(CLUSTERD_GOLDEN_DIR) + "/" + name;
    if (const char* update = std::getenv("CLUSTERD_UPDATE_GOLDEN"); update && std::string(update) == "1") {
      std::ofstream(path, std::ios::trunc) << got;
      return;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in) << path << " is missing: run with CLUSTERD_UPDATE_GOLDEN=1";
    std::stringstream want;
    want << in.rdbuf();
    EXPECT_EQ(got, want.str()) << "doctor output differs from " << path
                               << " (CLUSTERD_UPDATE_GOLDEN=1 rewrites it after a deliberate change)";
  }
};

TEST_F(DoctorGoldenTest, OutputMatchesTheGoldenFiles) {
  Agent("npu1", "24.1.rc3", "7.5.0.3.220", true, true);
  Agent("npu2", "24.1.rc3", "7.5.0.3.220", true, true);
  Agent("npu3", "24.1.rc3", "7.5.0.3.220", true, true);
  Agent("npu5", "24.1.rc3", "7.5.0.3.220", false, false);
  // Last: every drift pass that sees npu4 sees the whole pool, so the
  // messages' counts are always the same.
  Agent("npu4", "24.1.rc2", "7.3.0.1.231", true, true);
  // Settled: npu4's driver and firmware drift and its mismatch are raised.
  Result r;
  ASSERT_TRUE(WaitFor([&] {
    r = Run({"-o", "json", "doctor"});
    return r.code == 0 && json::parse(r.out)["findings"].size() == 4;
  })) << r.out
      << r.err;
  r = Run({"doctor"});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectGolden("doctor.txt", r.out);
  r = Run({"doctor", "-o", "wide"});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectGolden("doctor-wide.txt", r.out);
  r = Run({"-o", "json", "doctor"});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectGolden("doctor.json", r.out);
  r = Run({"doctor", "npu4"});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectGolden("doctor-npu4.txt", r.out);
  r = Run({"doctor", "npu5"});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectGolden("doctor-npu5.txt", r.out);
  r = Run({"doctor", "npu1"});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectGolden("doctor-npu1.txt", r.out);
}

// describe mindcluster JOB, compared with test/clusterctl/golden/mindcluster.txt:
// a job on both nodes whose TaskD (the reference's Recover stubs, played
// here) carried out a NIC switch and an AIC stress test, each to its end.
// Times and the summary's sequence change from run to run: they are masked.
class MindClusterGoldenTest : public ClusterctlTest {
 protected:
  static constexpr char kJob[] = "mc-train";
  static ::ClientInfo Taskd() {
    ::ClientInfo c;
    c.set_jobid(kJob);
    c.set_role("taskd");
    return c;
  }
  template <typename Call, typename Request>
  int32_t Recover(Call call, const Request& req) {
    grpc::ClientContext ctx;
    ::Status resp;
    grpc::Status st = ((*recover_).*call)(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.code();
  }
  int32_t StopComplete() {
    ::StopCompleteRequest req;
    req.set_jobid(kJob);
    return Recover(&::Recover::Stub::ReportStopComplete, req);
  }
  int32_t Continued() {
    ::RecoverStatusRequest req;
    req.set_jobid(kJob);
    req.set_strategy("continue");
    return Recover(&::Recover::Stub::ReportRecoverStatus, req);
  }
  // The operation's last step reported on its stream: waits until the view says it ended.
  bool Ended(size_t ops) {
    return WaitFor([&] {
      Result r = Run({"-o", "json", "describe", "mindcluster", kJob});
      if (r.code != 0) return false;
      const json v = json::parse(r.out);
      return !v.contains("current_operation") && v["history"].size() == ops;
    });
  }
  static std::string Masked(std::string text) {
    text = std::regex_replace(text, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z)"), "<time>");
    return std::regex_replace(text, std::regex(R"(Sequence:( *)\d+)"), "Sequence:$1<seq>");
  }
  std::unique_ptr<::Recover::Stub> recover_;
};

TEST_F(MindClusterGoldenTest, DescribeShowsTheSummaryRankTableAndOperations) {
  namespace mc = clusterd::mindcluster;
  const std::string file = dir_.Sub("job.json");
  WriteFile(file, R"({"id": "mc-train", "kind": "JOB_KIND_TRAINING",
    "labels": {"k8s.namespace": "default", "k8s.name": "mc-train", "mindcluster/framework": "pytorch",
               "mindcluster/process-recover-enable": "on",
               "mindcluster/recover-strategy": "retry,recover-in-place,recover"},
    "placement": [{"rank": 0, "node": "worker01", "device_id": 0}, {"rank": 1, "node": "worker01", "device_id": 1},
                  {"rank": 2, "node": "worker02", "device_id": 0}, {"rank": 3, "node": "worker02", "device_id": 1}]})");
  ASSERT_EQ(std::string(mc::kLabelProcessRecoverEnable), "mindcluster/process-recover-enable");
  ASSERT_EQ(std::string(mc::kLabelRecoverStrategy), "mindcluster/recover-strategy");
  Result r = Run({"create-job", "-f", file});
  ASSERT_EQ(r.code, 0) << r.err;
  recover_ = ::Recover::NewStub(channel_);
  ASSERT_EQ(Recover(&::Recover::Stub::Init, Taskd()), mc::kRecoverOk);
  ASSERT_EQ(Recover(&::Recover::Stub::Register, Taskd()), mc::kRecoverOk);
  clusterd::testing::StreamReader<::ProcessManageSignal> signals(
      [&](grpc::ClientContext* ctx) { return recover_->SubscribeProcessManageSignal(ctx, Taskd()); },
      [](const ::ProcessManageSignal& s) { return s.signaltype() != "keep-alive"; });
  clusterd::testing::StreamReader<::SwitchRankList> nic(
      [&](grpc::ClientContext* ctx) { return recover_->SubscribeNotifySwitch(ctx, Taskd()); });
  clusterd::testing::StreamReader<::StressTestRankParams> stress(
      [&](grpc::ClientContext* ctx) { return recover_->SubscribeNotifyExecStressTest(ctx, Taskd()); });
  ASSERT_TRUE(WaitFor([&] {
    auto res = clusterd::testing::HttpGet(server_->http_port(), "/metrics");
    return clusterd::testing::MetricValue(res.body, "clusterd_job_agents") == 1;
  }));

  // The NIC switch: worker02's chip 1 (rank 3) to the backup plane.
  ::SwitchNics nics;
  nics.set_jobid(kJob);
  auto& ops = (*nics.mutable_nicops())["worker02"];
  ops.add_dev("1");
  ops.add_op(true);
  ASSERT_EQ(Recover(&::Recover::Stub::SwitchNicTrack, nics), mc::kRecoverOk);
  ASSERT_EQ(signals.WaitMessages(1).size(), 1u);
  ASSERT_EQ(StopComplete(), mc::kRecoverOk);
  ASSERT_EQ(nic.WaitMessages(1).size(), 1u);
  ::SwitchResult switched;
  switched.set_jobid(kJob);
  switched.set_result(true);
  ASSERT_EQ(Recover(&::Recover::Stub::ReplySwitchNicResult, switched), mc::kRecoverOk);
  ASSERT_EQ(signals.WaitMessages(2).size(), 2u);
  ASSERT_EQ(Continued(), mc::kRecoverOk);
  ASSERT_TRUE(Ended(1));

  // The stress test: AIC on every chip, all pass but rank 2's.
  ::StressTestParam param;
  param.set_jobid(kJob);
  param.add_allnodesops(mc::kStressOpAic);
  ASSERT_EQ(Recover(&::Recover::Stub::StressTest, param), mc::kRecoverOk);
  ASSERT_EQ(signals.WaitMessages(3).size(), 3u);
  ASSERT_EQ(StopComplete(), mc::kRecoverOk);
  ASSERT_EQ(stress.WaitMessages(1).size(), 1u);
  ::StressTestResult result;
  result.set_jobid(kJob);
  for (const char* rank : {"0", "1", "2", "3"}) {
    auto& op = (*(*result.mutable_stressresult())[rank].mutable_rankresult())["0"];
    op.set_code(std::string(rank) == "2" ? "1" : "0");  // "1": the test could not run there (no fault)
    op.set_result(std::string(rank) == "2" ? "aic busy" : "pass");
  }
  ASSERT_EQ(Recover(&::Recover::Stub::ReplyStressTestResult, result), mc::kRecoverOk);
  // pauseStartAgent, continueStartAgent, then the continue.
  ASSERT_EQ(signals.WaitMessages(6).size(), 6u);
  ASSERT_EQ(Continued(), mc::kRecoverOk);
  ASSERT_TRUE(Ended(2));

  r = Run({"describe", "mindcluster", kJob});
  ASSERT_EQ(r.code, 0) << r.err;
  DoctorGoldenTest::ExpectGolden("mindcluster.txt", Masked(r.out));
  r = Run({"-o", "json", "describe", "mindcluster", kJob});
  ASSERT_EQ(r.code, 0) << r.err;
  const json v = json::parse(r.out);
  EXPECT_EQ(v["summary"]["job_status"], "running");
  EXPECT_EQ(v["total_servers"], 2);
  EXPECT_EQ(v["servers"].size(), 2u);
  EXPECT_EQ(v["history"][0]["chip_results"].size(), 4u);
  // Unknown job: NOT_FOUND's exit code, the server's message.
  r = Run({"describe", "mindcluster", "no-such-job"});
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("no-such-job"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace clusterctl
