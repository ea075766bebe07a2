// A job's MindCluster view (mindcluster/job_view.h), pure: the summary and
// the hccl.json servers from a summary entry, the rank table on the first
// page, paging by count and by bytes, the NIC switches and stress tests with
// their requests, steps and per-chip results, the bounds, and the refusals.
#include "clusterd/mindcluster/job_view.h"

#include <gtest/gtest.h>

#include "clusterd/mindcluster/om.h"

namespace clusterd::mindcluster {
namespace {

v1::Job ViewJob(const std::string& id, int ranks, int per_node = 8) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_create_time()->set_seconds(1764576000);
  (*job.mutable_labels())["k8s.namespace"] = "default";
  (*job.mutable_labels())["k8s.name"] = "train";
  for (int r = 0; r < ranks; ++r) {
    auto* p = job.add_placement();
    p->set_rank(static_cast<uint32_t>(r));
    p->set_node("worker" + std::to_string(r / per_node));
    p->set_device_id(static_cast<uint32_t>(r % per_node));
  }
  return job;
}

JobSummaryEntry Entry(const v1::Job& job) {
  JobSummaryBook book;
  auto e = book.Upsert(job, 42, 1764576100, [](const std::string& node) {
    v1::Node n;
    n.set_name(node);
    (*n.mutable_labels())["node-ip"] = node == "worker0" ? "10.0.0.7" : "10.0.0.8";
    return ServerFactsOf(node, &n);
  });
  EXPECT_TRUE(e);
  return *e;
}

TEST(MindClusterJobViewTest, SummaryServersAndRankTable) {
  const JobSummaryEntry e = Entry(ViewJob("uid-1", 10));
  JobViewInput in;
  in.job_id = "uid-1";
  in.entry = &e;
  auto v = BuildJobView(in);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_TRUE(v->has_summary());
  EXPECT_EQ(v->summary().job_status(), "running");
  EXPECT_EQ(v->summary().namespace_(), "default");
  EXPECT_EQ(v->summary().job_name(), "train");
  EXPECT_EQ(v->summary().operator_(), "add");
  EXPECT_EQ(v->summary().hccl_status(), "complete");
  EXPECT_EQ(v->summary().sequence(), 42u);
  EXPECT_EQ(v->rank_table(), e.rank_table);
  EXPECT_FALSE(v->rank_table_omitted());
  ASSERT_EQ(v->total_servers(), 2u);
  ASSERT_EQ(v->servers_size(), 2);
  EXPECT_EQ(v->servers(0).server_name(), "worker0");
  EXPECT_EQ(v->servers(0).host_ip(), "10.0.0.7");
  ASSERT_EQ(v->servers(0).devices_size(), 8);
  EXPECT_EQ(v->servers(0).devices(3).device_id(), "3");
  EXPECT_EQ(v->servers(0).devices(3).rank_id(), "3");
  EXPECT_EQ(v->servers(1).devices(1).rank_id(), "9");
  EXPECT_TRUE(v->next_page_token().empty());
  EXPECT_FALSE(v->has_current_operation());
  EXPECT_EQ(v->history_size(), 0);
}

TEST(MindClusterJobViewTest, PagesByCountAndBytesCoverEveryServerOnce) {
  const JobSummaryEntry e = Entry(ViewJob("uid-2", 8 * 40));  // 40 servers
  for (const auto& [size, bytes] : std::vector<std::pair<uint32_t, size_t>>{{7, kAnswerBytes}, {0, 4096}}) {
    JobViewInput in;
    in.job_id = "uid-2";
    in.entry = &e;
    in.page_size = size;
    in.max_bytes = bytes;
    std::vector<std::string> seen;
    bool first = true;
    for (int pages = 0; pages < 100; ++pages) {
      auto v = BuildJobView(in);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      EXPECT_EQ(v->total_servers(), 40u);
      if (size != 0) {
        EXPECT_LE(v->servers_size(), static_cast<int>(size));
      }
      if (bytes < kAnswerBytes) {
        EXPECT_LE(v->ByteSizeLong(), bytes + 1024);
      }
      // The rank table only on the first page, and only when it fits.
      if (!first) {
        EXPECT_TRUE(v->rank_table().empty());
      }
      EXPECT_EQ(v->rank_table().empty(), v->rank_table_omitted());
      first = false;
      for (const auto& s : v->servers()) seen.push_back(s.server_name());
      if (v->next_page_token().empty()) break;
      in.page_token = v->next_page_token();
    }
    ASSERT_EQ(seen.size(), 40u) << "page size " << size << ", bytes " << bytes;
    for (int i = 0; i < 40; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], "worker" + std::to_string(i));
  }
}

TEST(MindClusterJobViewTest, APendingJobHasNoServers) {
  v1::Job job = ViewJob("uid-3", 0);
  job.set_state(v1::JOB_STATE_PENDING);
  const JobSummaryEntry e = Entry(job);
  JobViewInput in;
  in.job_id = "uid-3";
  in.entry = &e;
  auto v = BuildJobView(in);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->summary().job_status(), "pending");
  EXPECT_EQ(v->summary().hccl_status(), "initializing");
  EXPECT_EQ(v->total_servers(), 0u);
  EXPECT_TRUE(v->rank_table().empty());
  EXPECT_FALSE(v->rank_table_omitted());
}

storage::v1::OmOperation Nic(const std::string& id, size_t ranks) {
  storage::v1::OmOperation op;
  op.set_id(id);
  op.set_kind(std::string(kOmNicSwitch));
  op.set_job_id("uid-4");
  op.set_stage(std::string(kOmSucceeded));
  op.set_actor("ops");
  op.set_started_unix_ms(1764576000123);
  op.set_finished_unix_ms(1764576005000);
  for (size_t r = 0; r < ranks; ++r) {
    op.add_ranks(std::to_string(r));
    op.add_ops(r % 2 == 0);
  }
  op.add_messages("switch nic finish");
  return op;
}

TEST(MindClusterJobViewTest, OperationsNewestFirstWithRequestStepsAndChips) {
  storage::v1::OmJobRecord rec;
  rec.set_job_id("uid-4");
  *rec.add_history() = Nic("uid-4/nic-switch/1", 2);
  storage::v1::OmOperation st;
  st.set_id("uid-4/stress-test/2");
  st.set_kind(std::string(kOmStressTest));
  st.set_stage(std::string(kOmFailed));
  (*st.mutable_stress())["10"].add_ops(kStressOpAic);
  (*st.mutable_stress())["9"].add_ops(kStressOpAic);
  (*st.mutable_stress())["9"].add_ops(kStressOpP2p);
  st.add_messages(
      "stress test find fault, chips worker0/1 SEPARATE, result:"
      R"({"worker0":{"1":{"rankResult":{"0":{"code":"2","result":"aic error"},"1":{"code":"0","result":"ok"}}}}})");
  *rec.add_history() = st;
  *rec.mutable_current() = Nic("uid-4/nic-switch/3", 1);
  rec.mutable_current()->set_stage(std::string(kOmAwaitPause));
  rec.mutable_current()->set_deadline_unix_ms(1764576900000);
  JobViewInput in;
  in.job_id = "uid-4";
  in.om = &rec;
  auto v = BuildJobView(in);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_FALSE(v->has_summary());
  ASSERT_TRUE(v->has_current_operation());
  EXPECT_EQ(v->current_operation().stage(), "await-pause");
  EXPECT_EQ(v->current_operation().deadline().seconds(), 1764576900);
  ASSERT_EQ(v->history_size(), 2);
  const auto& stress = v->history(0);
  EXPECT_EQ(stress.id(), "uid-4/stress-test/2");
  EXPECT_EQ(stress.stress_ops().at("9"), "AIC,P2P");
  EXPECT_EQ(stress.stress_ops().at("10"), "AIC");
  EXPECT_EQ(stress.total_ranks(), 2u);
  ASSERT_EQ(stress.chip_results_size(), 2);
  EXPECT_EQ(stress.total_chip_results(), 2u);
  EXPECT_EQ(stress.chip_results(0).node(), "worker0");
  EXPECT_EQ(stress.chip_results(0).device(), "1");
  EXPECT_EQ(stress.chip_results(0).op(), "0");
  EXPECT_EQ(stress.chip_results(0).code(), "2");
  EXPECT_EQ(stress.chip_results(0).result(), "aic error");
  const auto& nic = v->history(1);
  EXPECT_EQ(nic.id(), "uid-4/nic-switch/1");
  ASSERT_EQ(nic.ranks_size(), 2);
  EXPECT_EQ(nic.planes(0), "backup");
  EXPECT_EQ(nic.planes(1), "primary");
  EXPECT_EQ(nic.started().seconds(), 1764576000);
  EXPECT_EQ(nic.started().nanos(), 123000000);
  EXPECT_EQ(nic.messages(0), "switch nic finish");
}

TEST(MindClusterJobViewTest, AHugeOperationIsCutAndCounted) {
  storage::v1::OmJobRecord rec;
  rec.set_job_id("uid-5");
  storage::v1::OmOperation op = Nic("uid-5/nic-switch/1", kOmMaxEntries);
  op.add_messages(std::string(1 << 20, 'x'));
  *rec.add_history() = op;
  for (int i = 0; i < kOmHistory; ++i) *rec.add_history() = op;
  JobViewInput in;
  in.job_id = "uid-5";
  in.om = &rec;
  auto v = BuildJobView(in);
  ASSERT_TRUE(v.ok());
  EXPECT_LT(v->ByteSizeLong(), size_t{4} << 20);
  EXPECT_EQ(v->history(0).ranks_size(), static_cast<int>(kViewMaxRanks));
  EXPECT_EQ(v->history(0).total_ranks(), kOmMaxEntries);
  EXPECT_LE(v->history(0).messages(1).size(), kViewMaxMessageBytes + 16);
}

TEST(MindClusterJobViewTest, RefusalsChangeNothing) {
  const JobSummaryEntry e = Entry(ViewJob("uid-6", 8));
  JobViewInput in;
  in.job_id = "nope";
  EXPECT_EQ(BuildJobView(in).status().code(), StatusCode::kNotFound);
  storage::v1::OmJobRecord empty;
  in.om = &empty;  // a record with nothing kept is no operation
  EXPECT_EQ(BuildJobView(in).status().code(), StatusCode::kNotFound);
  in.entry = &e;
  for (const std::string token : {"x", "-1", "2", "1 ", "99999999999999999999999"}) {
    in.page_token = token;
    EXPECT_EQ(BuildJobView(in).status().code(), StatusCode::kInvalidArgument) << token;
  }
  in.page_token = "";
  in.page_size = kViewMaxServers + 1;
  EXPECT_EQ(BuildJobView(in).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace clusterd::mindcluster
