// MindCluster's job summaries and rank tables (mindcluster/job_summary.h),
// pure: a job's summary and HcclJson from its record, the status
// transitions with their reference strings, change detection, deletion, the
// kept deleted jobs, the NPU and size limits, and the batches a subscriber
// gets at once.
#include "clusterd/mindcluster/job_summary.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace clusterd::mindcluster {
namespace {

using nlohmann::json;

v1::Job MakeJob(const std::string& id, int ranks, v1::JobState state = v1::JOB_STATE_RUNNING, int per_node = 8) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.mutable_create_time()->set_seconds(1764576000);
  (*job.mutable_labels())["k8s.namespace"] = "default";
  (*job.mutable_labels())["k8s.name"] = "train-" + id;
  for (int r = 0; r < ranks; ++r) {
    auto* p = job.add_placement();
    p->set_rank(static_cast<uint32_t>(r));
    p->set_node("worker" + std::to_string(r / per_node));
    p->set_device_id(static_cast<uint32_t>(r % per_node));
  }
  return job;
}

ServerFacts Facts(const std::string& node) {
  v1::Node n;
  n.set_name(node);
  if (node == "worker0") {
    (*n.mutable_labels())["node-ip"] = "10.0.0.7";
    (*n.mutable_labels())["product-serial-number"] = "2102SN";
  }
  return ServerFactsOf(node, &n);
}

TEST(MindClusterJobSummaryTest, SummaryOfARunningJob) {
  JobSummaryBook book;
  auto job = MakeJob("uid-0001", 10);
  (*job.mutable_labels())[std::string(kFrameworkLabel)] = "pytorch";
  auto e = book.Upsert(job, 7, 1764576100, Facts);
  ASSERT_TRUE(e);
  const auto& s = e->summary;
  EXPECT_EQ(e->seq, 7u);
  EXPECT_EQ(s.jobid(), "uid-0001");
  EXPECT_EQ(s.jobname(), "train-uid-0001");
  EXPECT_EQ(s.namespace_(), "default");
  EXPECT_EQ(s.framework(), "pytorch");
  EXPECT_EQ(s.jobstatus(), "running");
  EXPECT_EQ(s.operator_(), "add");
  EXPECT_EQ(s.time(), "1764576000");
  EXPECT_EQ(s.cmindex(), "0");
  EXPECT_EQ(s.total(), "1");
  EXPECT_EQ(s.sid(), "uid-0001");
  EXPECT_EQ(s.deletetime(), "");
  EXPECT_EQ(s.uuid(), "uid-0001/7");
  auto h = json::parse(s.hccljson());
  EXPECT_EQ(h["status"], "complete");
  EXPECT_EQ(h["server_count"], "2");
  ASSERT_EQ(h["server_list"].size(), 2u);
  const auto& s0 = h["server_list"][0];
  EXPECT_EQ(s0["server_id"], "10.0.0.7");  // the node-ip label
  EXPECT_EQ(s0["host_ip"], "10.0.0.7");
  EXPECT_EQ(s0["server_name"], "worker0");
  EXPECT_EQ(s0["server_sn"], "2102SN");
  ASSERT_EQ(s0["device"].size(), 8u);
  EXPECT_EQ(s0["device"][3]["device_id"], "3");
  EXPECT_EQ(s0["device"][3]["rank_id"], "3");
  EXPECT_EQ(s0["device"][3]["device_ip"], "");  // unknown
  job.mutable_placement(3)->set_device_ip("192.168.1.9");
  const auto with_ip = json::parse(RankTableJson(job, Facts));
  EXPECT_EQ(with_ip["server_list"][0]["device"][3]["device_ip"], "192.168.1.9");
  const auto& s1 = h["server_list"][1];
  EXPECT_EQ(s1["server_id"], "worker1");  // no label: its name
  ASSERT_EQ(s1["device"].size(), 2u);
  EXPECT_EQ(s1["device"][1]["rank_id"], "9");
  EXPECT_EQ(e->rank_table, s.hccljson());
}

TEST(MindClusterJobSummaryTest, ServersInRankOrderAndRanksWithoutDevice) {
  v1::Job job = MakeJob("uid-0002", 0);
  for (auto [rank, node] : {std::pair{2, "b"}, std::pair{0, "c"}, std::pair{1, "b"}}) {
    auto* p = job.add_placement();
    p->set_rank(rank);
    p->set_node(node);
    if (rank != 1) p->set_device_id(rank);
  }
  auto h = json::parse(RankTableJson(job, nullptr));
  ASSERT_EQ(h["server_list"].size(), 2u);
  EXPECT_EQ(h["server_list"][0]["server_name"], "c");
  EXPECT_EQ(h["server_list"][1]["server_name"], "b");
  ASSERT_EQ(h["server_list"][1]["device"].size(), 1u);  // rank 1 has no chip
  EXPECT_EQ(h["server_list"][1]["device"][0]["rank_id"], "2");
}

TEST(MindClusterJobSummaryTest, StatusTransitions) {
  JobSummaryBook book;
  auto job = MakeJob("uid-0003", 2, v1::JOB_STATE_PENDING);
  auto e = book.Upsert(job, 1, 100, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.jobstatus(), "pending");
  EXPECT_EQ(e->summary.hccljson(), kHcclInitializing);
  EXPECT_TRUE(e->rank_table.empty());

  job.set_state(v1::JOB_STATE_RUNNING);
  e = book.Upsert(job, 2, 101, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.jobstatus(), "running");
  EXPECT_FALSE(e->rank_table.empty());

  job.set_state(v1::JOB_STATE_RECOVERING);  // still running to MindCluster: nothing to tell
  EXPECT_FALSE(book.Upsert(job, 3, 102, Facts));

  job.set_state(v1::JOB_STATE_FAILED);
  e = book.Upsert(job, 4, 103, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.jobstatus(), "failed");
  EXPECT_EQ(e->summary.deletetime(), "103");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  e = book.Upsert(job, 5, 104, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.jobstatus(), "complete");
  EXPECT_EQ(e->summary.deletetime(), "103");  // when it first ended

  e = book.Remove("uid-0003", 6, 200);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.operator_(), "delete");
  EXPECT_EQ(e->summary.jobstatus(), "complete");  // completed stays complete
  EXPECT_EQ(e->summary.deletetime(), "200");
  EXPECT_TRUE(e->deleted);
  EXPECT_FALSE(book.Remove("uid-0003", 7, 201));  // told once
  EXPECT_EQ(book.head(), 6u);
}

TEST(MindClusterJobSummaryTest, ADeletedRunningJobFailedAndAJobMadeAgainStartsAfresh) {
  JobSummaryBook book;
  auto job = MakeJob("uid-0004", 1);
  ASSERT_TRUE(book.Upsert(job, 1, 100, Facts));
  auto e = book.Remove("uid-0004", 2, 150);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.jobstatus(), "failed");
  EXPECT_EQ(e->summary.operator_(), "delete");
  EXPECT_EQ(e->summary.hccljson(), book.Find("uid-0004")->summary.hccljson());  // the last placement, as told
  EXPECT_TRUE(e->rank_table.empty());
  e = book.Upsert(job, 3, 160, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.operator_(), "add");
  EXPECT_EQ(e->summary.jobstatus(), "running");
  EXPECT_EQ(e->summary.deletetime(), "");
  EXPECT_FALSE(e->deleted);
  EXPECT_FALSE(book.Remove("no-such-job", 4, 170));
}

TEST(MindClusterJobSummaryTest, AnUnchangedRecordTellsNothingAndAPlacementChangeDoes) {
  JobSummaryBook book;
  auto job = MakeJob("uid-0005", 4);
  ASSERT_TRUE(book.Upsert(job, 1, 100, Facts));
  EXPECT_FALSE(book.Upsert(job, 2, 200, Facts));  // same content, later
  EXPECT_EQ(book.Find("uid-0005")->seq, 1u);
  job.mutable_placement(3)->set_node("worker9");
  auto e = book.Upsert(job, 3, 300, Facts);
  ASSERT_TRUE(e);
  EXPECT_NE(e->rank_table.find("worker9"), std::string::npos);
  EXPECT_EQ(e->summary.uuid(), "uid-0005/3");
}

TEST(MindClusterJobSummaryTest, AboveTheNpuLimitHcclJsonIsEmptyButTheRankTableStays) {
  JobSummaryOptions o;
  o.max_hccl_npus = 16;
  JobSummaryBook book(o);
  auto e = book.Upsert(MakeJob("uid-0006", 17), 1, 100, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.hccljson(), "");
  EXPECT_EQ(e->summary.jobstatus(), "running");
  EXPECT_FALSE(e->rank_table.empty());
  e = book.Upsert(MakeJob("uid-0007", 16), 2, 100, Facts);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->summary.hccljson().empty());
}

TEST(MindClusterJobSummaryTest, OversizedSummariesLoseTheirHcclJson) {
  JobSummaryOptions o;
  o.max_summary_bytes = 2048;
  JobSummaryBook book(o);
  auto e = book.Upsert(MakeJob("uid-0008", 200), 1, 100, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.hccljson(), "");
  EXPECT_LE(e->summary.ByteSizeLong(), 2048u);
  EXPECT_TRUE(e->rank_table.empty());  // would not fit either
}

TEST(MindClusterJobSummaryTest, DeletedJobsKeptAreBounded) {
  JobSummaryOptions o;
  o.max_deleted = 2;
  JobSummaryBook book(o);
  uint64_t seq = 0;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(book.Upsert(MakeJob("job-" + std::to_string(i), 1), ++seq, 100, Facts));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(book.Remove("job-" + std::to_string(i), ++seq, 200));
  EXPECT_EQ(book.size(), 3u);  // job-3 live, job-1 and job-2 deleted
  EXPECT_EQ(book.Find("job-0"), nullptr);
  auto all = book.All();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].summary.jobid(), "job-3");  // in seq order
  EXPECT_EQ(all[1].summary.jobid(), "job-1");
  EXPECT_EQ(all[2].summary.jobid(), "job-2");
}

TEST(MindClusterJobSummaryTest, DeletionsSharingASeqAreEachKeptAndTrimmed) {
  JobSummaryOptions o;
  o.max_deleted = 2;
  JobSummaryBook book(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(book.Upsert(MakeJob("r-" + std::to_string(i), 1), i + 1, 100, Facts));
  // A resync finds all three gone at once.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(book.Remove("r-" + std::to_string(i), 10, 200));
  EXPECT_EQ(book.size(), 2u);
  EXPECT_EQ(book.Find("r-0"), nullptr);
  ASSERT_TRUE(book.Upsert(MakeJob("r-1", 1), 11, 300, Facts));  // made again
  EXPECT_FALSE(book.Find("r-1")->deleted);
  EXPECT_EQ(book.size(), 2u);
}

TEST(MindClusterJobSummaryTest, BatchesByChipsAndBytes) {
  JobSummaryBook book;
  uint64_t seq = 0;
  for (int i = 0; i < 5; ++i) book.Upsert(MakeJob("b-" + std::to_string(i), 10), ++seq, 100, Facts);
  auto batches = Batches(book.All(), 25);
  ASSERT_EQ(batches.size(), 3u);  // 2 + 2 + 1 jobs of 10 chips
  EXPECT_EQ(batches[0].size(), 2u);
  EXPECT_EQ(batches[2].size(), 1u);
  batches = Batches(book.All(), kMaxHcclNpus, 1);  // every job alone
  EXPECT_EQ(batches.size(), 5u);
  EXPECT_TRUE(Batches({}).empty());
}

TEST(MindClusterJobSummaryTest, HostileLabelsAreCopiedAsText) {
  JobSummaryBook book;
  auto job = MakeJob("uid-0009", 1);
  (*job.mutable_labels())["k8s.name"] = "\"},{\"evil\":1";
  (*job.mutable_labels())[std::string(kSidLabel)] = "sid-1";
  auto e = book.Upsert(job, 1, 100, [](const std::string& node) {
    ServerFacts f;
    f.server_id = node + "\",\"x\":\"";
    return f;
  });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.jobname(), "\"},{\"evil\":1");
  EXPECT_EQ(e->summary.sid(), "sid-1");
  auto h = json::parse(e->summary.hccljson());  // still one valid document
  EXPECT_EQ(h["server_list"][0]["server_id"], "worker0\",\"x\":\"");
}

TEST(MindClusterJobSummaryTest, SharedTorIpAndMasterAddrOfPytorchJobsOnly) {
  JobSummaryBook book;
  auto job = MakeJob("uid-0010", 10);
  (*job.mutable_labels())[std::string(kSharedTorIpLabel)] = R"(["10.1.0.1"])";
  (*job.mutable_labels())[std::string(kMasterAddrLabel)] = "10.0.0.9";
  // Not PyTorch: left empty, as the reference.
  auto e = book.Upsert(job, 1, 100, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.sharedtorip(), "");
  EXPECT_EQ(e->summary.masteraddr(), "");
  (*job.mutable_labels())[std::string(kFrameworkLabel)] = "pytorch";
  e = book.Upsert(job, 2, 100, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.sharedtorip(), R"(["10.1.0.1"])");
  EXPECT_EQ(e->summary.masteraddr(), "10.0.0.9");
  // A Volcano Job's master is its first server's host IP (worker0's node-ip label).
  (*job.mutable_labels())["k8s.owner-kind"] = "Job";
  e = book.Upsert(job, 3, 100, Facts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->summary.masteraddr(), "10.0.0.7");
}

}  // namespace
}  // namespace clusterd::mindcluster
