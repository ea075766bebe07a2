// Size limits (issue 11, defects 4 and 5): a job's impacts, a node's faults
// and every answer stay bounded, and every answer fits a client with gRPC's
// default 4 MiB receive limit. In-process ClusterD on port 0; every client is
// a plain grpc::CreateChannel with default arguments.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clusterd/server/server.h"
#include "clusterd/state/validation.h"
#include "clusterd/v1/fault.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/server/server_fixture.h"

namespace clusterd {
namespace {

using testing::TestAgent;

constexpr size_t kDefaultReceive = 4 << 20;  // gRPC's default max receive size

// A client exactly as grpcurl or any default stub: no channel arguments.
std::shared_ptr<grpc::Channel> DefaultClient(int port) {
  return grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
}

// GET /metrics over a plain socket (HTTP/1.0: the server closes when done).
std::string Scrape(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

// The value of one series in a Prometheus text page, -1 when absent.
double MetricValue(const std::string& page, const std::string& series) {
  const std::string prefix = series + " ";
  for (size_t pos = 0; pos < page.size();) {
    size_t end = page.find('\n', pos);
    if (end == std::string::npos) end = page.size();
    if (page.compare(pos, prefix.size(), prefix) == 0) return std::stod(page.substr(pos + prefix.size(), end - pos));
    pos = end + 1;
  }
  return -1;
}

// A node name of exactly `len` characters, distinct per i.
std::string LongName(int i, size_t len) {
  std::string name = "n" + std::to_string(i) + "-";
  name.resize(len, 'x');
  return name;
}

class LimitsTest : public testing::ClusterdServerTest {
 protected:
  void OnServerStarted() override {
    channel_ = DefaultClient(server_->grpc_port());
    cluster_ = v1::ClusterService::NewStub(channel_);
    jobs_ = v1::JobService::NewStub(channel_);
    faults_ = v1::FaultService::NewStub(channel_);
  }

  // Registers `node` through an agent whose hello carries `count` active
  // node-level faults with messages of `message_bytes` (and subjects, part of
  // their identity, of `subject_bytes`).
  void NodeWithFaults(const std::string& node, int count, size_t message_bytes, size_t subject_bytes = 0) {
    TestAgent agent(channel_, node, 1);
    v1::Hello hello = agent.MakeHello();
    for (int i = 0; i < count; ++i) {
      auto* r = hello.add_active_faults();
      r->set_source(v1::FAULT_SOURCE_CPU);
      r->set_code("TEST_FAULT");
      std::string subject = "s" + std::to_string(i) + "-";
      subject.resize(std::max<size_t>(subject.size(), subject_bytes), 'x');
      r->set_subject(subject);
      r->set_level(v1::FAULT_LEVEL_SUB_HEALTH);
      r->set_message(std::string(message_bytes, 'm'));
    }
    ASSERT_TRUE(agent.Connect(&hello)) << agent.status().error_message();
    agent.Close();
  }

  uint64_t Revision() {
    grpc::ClientContext ctx;
    v1::GetSummaryResponse resp;
    EXPECT_TRUE(cluster_->GetSummary(&ctx, v1::GetSummaryRequest(), &resp).ok());
    return resp.revision();
  }

  grpc::Status CreateJob(const v1::Job& job, v1::Job* out = nullptr) {
    grpc::ClientContext ctx;
    v1::CreateJobRequest req;
    *req.mutable_job() = job;
    v1::CreateJobResponse resp;
    grpc::Status st = jobs_->CreateJob(&ctx, req, &resp);
    if (out) *out = resp.job();
    return st;
  }

  grpc::Status Report(const std::string& node, const std::string& id, bool raise) {
    grpc::ClientContext ctx;
    v1::ReportRequest req;
    req.set_reporter("ext");
    req.set_id(id);
    req.set_node(node);
    req.set_code("EXT_FAULT");
    req.set_level(v1::FAULT_LEVEL_SUB_HEALTH);
    req.set_action(raise ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
    v1::ReportResponse resp;
    return faults_->Report(&ctx, req, &resp);
  }

  // Every fault ListFaults returns for `req`, page by page; each page must
  // arrive (fit the default receive limit).
  std::set<std::string> AllFaults(v1::ListFaultsRequest req) {
    std::set<std::string> ids;
    for (int pages = 0; pages < 1000; ++pages) {
      grpc::ClientContext ctx;
      v1::ListFaultsResponse resp;
      grpc::Status st = cluster_->ListFaults(&ctx, req, &resp);
      EXPECT_TRUE(st.ok()) << st.error_message();
      if (!st.ok()) break;
      EXPECT_LE(resp.ByteSizeLong(), kDefaultReceive);
      for (const auto& f : resp.faults()) EXPECT_TRUE(ids.insert(f.id()).second) << "fault listed twice: " << f.id();
      if (resp.next_page_token().empty()) break;
      req.set_page_token(resp.next_page_token());
    }
    return ids;
  }

  std::unique_ptr<v1::ClusterService::Stub> cluster_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::FaultService::Stub> faults_;
};

// 4096 faults of ~6 KB each: 25 MB of active faults on one node (a thousand
// of them are 6 MB). GetNode answers with what fits, says so, and ListFaults
// pages through the rest.
TEST_F(LimitsTest, GetNodeWithManyLargeFaultsFitsADefaultClient) {
  StartServer([](ClusterdConfig& c) { c.max_message_bytes = 48 << 20; });  // the hello itself is 21 MB
  NodeWithFaults("big", 4096, 4000, 1000);

  grpc::ClientContext ctx;
  v1::GetNodeRequest req;
  req.set_name("big");
  v1::GetNodeResponse node;
  grpc::Status st = cluster_->GetNode(&ctx, req, &node);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(node.node().active_faults(), 4096u);
  EXPECT_TRUE(node.active_faults_truncated());
  EXPECT_GT(node.active_faults_size(), 0);
  EXPECT_LT(node.active_faults_size(), 4096);
  EXPECT_LE(node.ByteSizeLong(), kDefaultReceive);
  EXPECT_EQ(node.devices_size(), 8);

  // The rest, from where GetNode stopped.
  std::set<std::string> ids;
  for (const auto& f : node.active_faults()) ids.insert(f.id());
  v1::ListFaultsRequest rest;
  rest.set_node("big");
  rest.set_active_only(true);
  rest.set_page_size(1000);
  rest.set_page_token(node.next_faults_page_token());
  for (const auto& id : AllFaults(rest)) EXPECT_TRUE(ids.insert(id).second) << "fault listed twice: " << id;
  EXPECT_EQ(ids.size(), 4096u);

  // Pages of the maximum page size fit too, and cover everything.
  v1::ListFaultsRequest all;
  all.set_page_size(1000);
  EXPECT_EQ(AllFaults(all).size(), 4096u);

  EXPECT_EQ(MetricValue(Scrape(server_->http_port()), "clusterd_answers_truncated_total{what=\"node_faults\"}"), 1);
}

// The crash, scaled down: a job with the most ranks one node may
// hold (1,024) on a node with 4096 active faults. Before: 4096 impacts x
// every rank in CreateJob's answer (and in every GetJob/ListJobs after it).
// Now the impacts are cut and counted; ListFaults(job=) lists every fault
// that hits the job.
TEST_F(LimitsTest, JobImpactsAreBoundedAndFitADefaultClient) {
  StartServer();
  NodeWithFaults("big", 4096, 16);
  v1::Job job;
  job.set_id("train");
  job.set_kind(v1::JOB_KIND_TRAINING);
  for (uint32_t r = 0; r < kMaxJobRanksPerNode; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    p->set_node("big");
  }
  v1::Job created;
  grpc::Status st = CreateJob(job, &created);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  auto check = [](const v1::Job& j) {
    EXPECT_EQ(j.placement_size(), static_cast<int>(kMaxJobRanksPerNode));
    EXPECT_TRUE(j.impacts_truncated());
    EXPECT_EQ(j.total_impacts(), 4096u);
    EXPECT_GT(j.impacts_size(), 0);
    EXPECT_LE(j.impacts_size(), 1024);
    for (const auto& i : j.impacts()) {
      EXPECT_EQ(i.total_ranks(), kMaxJobRanksPerNode);
      ASSERT_EQ(i.ranks_size(), static_cast<int>(kMaxJobRanksPerNode));  // every rank, in order
      EXPECT_EQ(i.ranks(0), 0u);
      EXPECT_EQ(i.ranks(1023), 1023u);
    }
    EXPECT_LE(j.ByteSizeLong(), kDefaultReceive);
  };
  check(created);
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id("train");
    v1::GetJobResponse resp;
    st = jobs_->GetJob(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
    check(resp.job());
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsResponse resp;
    st = jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &resp);
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
    ASSERT_EQ(resp.jobs_size(), 1);
    check(resp.jobs(0));
  }
  v1::ListFaultsRequest hit;
  hit.set_job("train");
  hit.set_page_size(1000);
  EXPECT_EQ(AllFaults(hit).size(), 4096u);
  EXPECT_GE(MetricValue(Scrape(server_->http_port()), "clusterd_answers_truncated_total{what=\"job_impacts\"}"), 3);
}

// max_job_impacts caps the list even when the bytes would allow more.
TEST_F(LimitsTest, MaxJobImpactsCapsTheList) {
  StartServer([](ClusterdConfig& c) { c.max_job_impacts = 10; });
  NodeWithFaults("w1", 50, 16);
  v1::Job job;
  job.set_id("small");
  job.set_kind(v1::JOB_KIND_INFERENCE);
  job.add_placement()->set_node("w1");
  v1::Job created;
  ASSERT_TRUE(CreateJob(job, &created).ok());
  EXPECT_EQ(created.impacts_size(), 10);
  EXPECT_TRUE(created.impacts_truncated());
  EXPECT_EQ(created.total_impacts(), 50u);
}

// The default max_job_ranks is a job that can be sent, stored and answered:
// 131,072 ranks (8,192 nodes x 16 devices) with 14-character node names fit
// the 3 MiB record and a default client's 4 MiB (docs/operate.md).
TEST_F(LimitsTest, TheLargestDefaultJobFitsADefaultClient) {
  StartServer();
  const uint32_t ranks = ClusterdConfig().max_job_ranks;
  ASSERT_EQ(ranks, 131'072u);
  v1::Job job;
  job.set_id("largest");
  job.set_kind(v1::JOB_KIND_TRAINING);
  for (uint32_t r = 0; r < ranks; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    char node[16];
    std::snprintf(node, sizeof node, "worker-%07u", r / 16);  // 14 characters
    p->set_node(node);
    p->set_device_id(r % 16);
  }
  v1::Job created;
  grpc::Status st = CreateJob(job, &created);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(created.placement_size(), static_cast<int>(ranks));
  EXPECT_LE(created.ByteSizeLong(), 3u << 20);
  // One rank more is refused by count, before anything else is looked at.
  job.set_id("larger");
  auto* p = job.add_placement();
  p->set_rank(ranks);
  p->set_node("worker-9999999");
  st = CreateJob(job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("max_job_ranks"), std::string::npos) << st.error_message();
}

TEST_F(LimitsTest, OversizedJobsAreRefusedAndNothingIsStored) {
  StartServer([](ClusterdConfig& c) { c.max_job_ranks = 100; });
  const uint64_t before = Revision();
  v1::Job job;
  job.set_id("wide");
  job.set_kind(v1::JOB_KIND_TRAINING);
  for (uint32_t r = 0; r < 101; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    p->set_node("w1");
  }
  grpc::Status st = CreateJob(job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("max_job_ranks"), std::string::npos) << st.error_message();

  // Few enough ranks, but a record larger than any answer may carry.
  StartServer();
  job.clear_placement();
  for (uint32_t r = 0; r < 12'500; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    p->set_node(LongName(static_cast<int>(r), 253));
  }
  ASSERT_GT(job.ByteSizeLong(), 3u << 20);
  ASSERT_LT(job.ByteSizeLong(), kDefaultReceive);
  st = CreateJob(job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("bytes"), std::string::npos) << st.error_message();
  EXPECT_EQ(Revision(), before);
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.total_size(), 0);
  EXPECT_EQ(MetricValue(Scrape(server_->http_port()), "clusterd_jobs_refused_total"), 1);
}

// Three jobs of ~2 MB: before, their three events went out as one 6 MB Watch
// response that no default client could receive.
TEST_F(LimitsTest, WatchSplitsLargeEventsAcrossResponses) {
  StartServer();
  for (int j = 0; j < 3; ++j) {
    v1::Job job;
    job.set_id("job" + std::to_string(j));
    job.set_kind(v1::JOB_KIND_TRAINING);
    for (uint32_t r = 0; r < 7500; ++r) {
      auto* p = job.add_placement();
      p->set_rank(r);
      p->set_node(LongName(static_cast<int>(r), 253));
    }
    ASSERT_GT(job.ByteSizeLong(), 1900'000u);
    grpc::Status st = CreateJob(job);
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  }
  // A few small events after them share responses.
  NodeWithFaults("w1", 5, 16);
  const uint64_t head = Revision();

  grpc::ClientContext ctx;
  v1::WatchRequest req;
  req.set_from_revision(0);
  auto reader = cluster_->Watch(&ctx, req);
  v1::WatchResponse resp;
  uint64_t last = 0;
  int jobs = 0;
  while (last < head && reader->Read(&resp)) {
    EXPECT_LE(resp.ByteSizeLong(), kDefaultReceive);
    for (const auto& e : resp.events()) {
      EXPECT_EQ(e.revision(), last + 1) << "gap or duplicate";
      last = e.revision();
      if (e.type() == v1::EVENT_TYPE_JOB_CREATED) {
        ++jobs;
        EXPECT_EQ(e.job().placement_size(), 7500);
        EXPECT_EQ(resp.events_size(), 1) << "a 2 MB event travels alone";
      }
    }
  }
  EXPECT_EQ(last, head);
  EXPECT_EQ(jobs, 3);
  ctx.TryCancel();
  grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok() || st.error_code() == grpc::StatusCode::CANCELLED) << st.error_message();
}

// Nodes with the largest inventory a hello may carry (~800 KB each): a page
// of them stops by bytes, not only at page_size.
TEST_F(LimitsTest, ListNodesPagesByBytes) {
  StartServer();
  for (int n = 0; n < 8; ++n) {
    TestAgent agent(channel_, "node" + std::to_string(n), 1, 0);
    v1::Hello hello = agent.MakeHello();
    for (uint32_t d = 0; d < 1024; ++d) {
      auto* dev = hello.mutable_inventory()->add_devices();
      dev->set_id(d);
      dev->set_vendor(std::string(256, 'v'));
      dev->set_model(std::string(256, 'm'));
      dev->set_serial(std::string(256, 's'));
    }
    ASSERT_TRUE(agent.Connect(&hello)) << agent.status().error_message();
    agent.Close();
  }
  v1::ListNodesRequest req;
  req.set_page_size(1000);
  std::set<std::string> names;
  int pages = 0;
  for (; pages < 100; ++pages) {
    grpc::ClientContext ctx;
    v1::ListNodesResponse resp;
    grpc::Status st = cluster_->ListNodes(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
    EXPECT_EQ(resp.total_size(), 8);
    for (const auto& n : resp.nodes()) EXPECT_TRUE(names.insert(n.name()).second);
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  EXPECT_EQ(names.size(), 8u);
  EXPECT_GT(pages, 1);
}

// External reporters may not crowd a node past max_faults_per_node, and they
// cannot crowd out the node's own agent (counted apart).
TEST_F(LimitsTest, ExternalFaultsPerNodeAreBounded) {
  StartServer([](ClusterdConfig& c) { c.max_faults_per_node = 16; });
  TestAgent agent(channel_, "w1", 1);
  ASSERT_TRUE(agent.Connect());
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(Report("w1", "f" + std::to_string(i), true).ok());
  const uint64_t before = Revision();
  grpc::Status st = Report("w1", "f16", true);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("max_faults_per_node"), std::string::npos) << st.error_message();
  EXPECT_EQ(Revision(), before);
  // Refreshing one already active is no new fault; clearing makes room.
  EXPECT_TRUE(Report("w1", "f3", true).ok());
  EXPECT_TRUE(Report("w1", "f3", false).ok());
  EXPECT_TRUE(Report("w1", "f16", true).ok());
  // The agent's own raise still goes through.
  EXPECT_TRUE(agent.Transition(1, true, 0, "80E01801"));
  agent.Close();
  EXPECT_EQ(MetricValue(Scrape(server_->http_port()), "clusterd_faults_refused_total{origin=\"external\"}"), 1);
}

// An agent raise beyond the limit is refused with RESOURCE_EXHAUSTED before
// it counts as applied (the agent keeps it in its outbox); after the agent
// reconnects with its current active set, the resent transitions go through.
TEST_F(LimitsTest, AgentRaiseBeyondLimitIsRefusedNotDropped) {
  StartServer([](ClusterdConfig& c) { c.max_faults_per_node = 16; });
  auto code = [](int i) { return "TEST_" + std::to_string(i); };
  {
    TestAgent agent(channel_, "w1", 1);
    ASSERT_TRUE(agent.Connect());
    for (int i = 0; i < 16; ++i) ASSERT_TRUE(agent.Transition(i + 1, true, 0, code(i)));
    const uint64_t before = Revision();
    EXPECT_FALSE(agent.Transition(17, true, 0, code(16)));  // seq 17: one too many
    agent.Close();
    EXPECT_EQ(agent.status().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(agent.status().error_message().find("max_faults_per_node"), std::string::npos);
    EXPECT_EQ(Revision(), before);
  }
  // Meanwhile the agent cleared TEST_0 (seq 18). It reconnects: the hello
  // carries what is active now, then it resends 17 and 18.
  TestAgent agent(channel_, "w1", 1);
  v1::Hello hello = agent.MakeHello();
  for (int i = 1; i <= 16; ++i) {
    auto* r = hello.add_active_faults();
    r->set_device_id(0);
    r->set_source(v1::FAULT_SOURCE_ACCELERATOR);
    r->set_code(code(i));
  }
  ASSERT_TRUE(agent.Connect(&hello));
  EXPECT_EQ(agent.welcome().applied_seq(), 16u);  // 17 was not taken
  ASSERT_TRUE(agent.Transition(17, true, 0, code(16)));
  ASSERT_TRUE(agent.Transition(18, false, 0, code(0)));
  agent.Close();
  grpc::ClientContext ctx;
  v1::GetNodeRequest req;
  req.set_name("w1");
  v1::GetNodeResponse node;
  ASSERT_TRUE(cluster_->GetNode(&ctx, req, &node).ok());
  std::set<std::string> active;
  for (const auto& f : node.active_faults()) active.insert(f.code());
  EXPECT_EQ(active.size(), 16u);
  EXPECT_TRUE(active.count(code(16)));
  EXPECT_FALSE(active.count(code(0)));
  EXPECT_EQ(MetricValue(Scrape(server_->http_port()), "clusterd_faults_refused_total{origin=\"agent\"}"), 1);
}

}  // namespace
}  // namespace clusterd
