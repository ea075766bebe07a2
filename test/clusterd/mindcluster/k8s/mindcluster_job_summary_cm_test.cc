// MindCluster's job-summary-<job> ConfigMaps: the pure shape
// (mindcluster/job_summary_cm.h) and the "mindcluster-jobs" integration
// (mindcluster/k8s/job_summaries.h) on an in-memory API server with ClusterD's
// commands faked, stepped by hand on a FakeClock.
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/job_summary.h"
#include "clusterd/mindcluster/job_summary_cm.h"
#include "clusterd/mindcluster/k8s/job_summaries.h"
#include "common/clock.h"
#include "test/support/fakes/fake_cluster_commands.h"
#include "test/support/fakes/fake_k8s_client.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;
using json = nlohmann::json;
using namespace std::chrono_literals;

const std::string kNs = "/api/v1/namespaces/train/configmaps/";

v1::Job K8sJob(const std::string& id, const std::string& name, int nodes, v1::JobState state) {
  v1::Job j;
  j.set_id(id);
  j.set_state(state);
  (*j.mutable_labels())["k8s.namespace"] = "train";
  (*j.mutable_labels())["k8s.name"] = name;
  (*j.mutable_labels())["mindcluster/framework"] = "pytorch";
  j.mutable_create_time()->set_seconds(1700000000);
  for (int n = 0; n < nodes; ++n) {
    for (uint32_t d = 0; d < 8; ++d) {
      auto* r = j.add_placement();
      r->set_rank(static_cast<uint32_t>(n) * 8 + d);
      r->set_node("node-" + std::to_string(n));
      r->set_device_id(d);
    }
  }
  return j;
}

TEST(JobSummaryCm, OneConfigMapWithTheReferencesKeys) {
  job::JobSummarySignal s;
  s.set_jobid("uid-1");
  s.set_jobname("llm");
  s.set_framework("pytorch");
  s.set_jobstatus("running");
  s.set_time("1700000000");
  s.set_operator_("add");
  s.set_sid("uid-1");
  const std::string table = R"({"status":"complete","server_list":[{"server_id":"a"}],"server_count":"1","total":1})";
  auto cms = mc::JobSummaryConfigMaps(s, table);
  ASSERT_EQ(cms.size(), 1u);
  EXPECT_EQ(cms[0].name, "job-summary-llm");
  std::set<std::string> keys;
  for (const auto& [k, v] : cms[0].data) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"job_id", "job_name", "framework", "job_status", "time", "operator",
                                         "cm_index", "total", "hccl.json", "sid", "sharedTorIp", "masterAddr"}));
  EXPECT_EQ(cms[0].data["hccl.json"], table);
  EXPECT_EQ(cms[0].data["cm_index"], "0");
  EXPECT_EQ(cms[0].data["total"], "1");
  // Not PyTorch: no sharedTorIp / masterAddr; ended: deleteTime.
  s.set_framework("mindspore");
  s.set_jobstatus("complete");
  s.set_deletetime("1700000100");
  cms = mc::JobSummaryConfigMaps(s, "");
  ASSERT_EQ(cms.size(), 1u);
  EXPECT_FALSE(cms[0].data.count("masterAddr"));
  EXPECT_EQ(cms[0].data["deleteTime"], "1700000100");
  EXPECT_EQ(cms[0].data["hccl.json"], mc::kHcclInitializing);
}

// A rank table over the slice limit is cut by servers, in order, each part
// with the table's other keys and the number of parts.
TEST(JobSummaryCm, ALargeRankTableIsSlicedByServers) {
  const v1::Job job = K8sJob("uid-2", "big", 40, v1::JOB_STATE_RUNNING);
  const std::string table = mc::RankTableJson(job, nullptr);
  const auto slices = mc::HcclSlices(table, table.size() / 3);
  ASSERT_GE(slices.size(), 3u);
  std::vector<std::string> servers;
  for (const auto& slice : slices) {
    EXPECT_LE(slice.size(), table.size() / 3);
    json part = json::parse(slice);
    EXPECT_EQ(part["status"], "complete");
    EXPECT_EQ(part["total"], slices.size());
    for (const auto& s : part["server_list"]) servers.push_back(s["server_name"]);
  }
  ASSERT_EQ(servers.size(), 40u);
  for (size_t i = 0; i < servers.size(); ++i) EXPECT_EQ(servers[i], "node-" + std::to_string(i));
  EXPECT_EQ(mc::HcclSlices(table), std::vector<std::string>{table});  // fits: as it is
  EXPECT_EQ(mc::HcclSlices("not json at all, but long", 4), std::vector<std::string>{"not json at all, but long"});

  job::JobSummarySignal s;
  s.set_jobname("big");
  const auto cms = mc::JobSummaryConfigMaps(s, table, table.size() / 3);
  ASSERT_EQ(cms.size(), slices.size());
  EXPECT_EQ(cms[1].name, "job-summary-big-1");
  EXPECT_EQ(cms[1].data.at("cm_index"), "1");
  EXPECT_EQ(cms[1].data.at("total"), std::to_string(slices.size()));
}

class JobSummaryConfigMapsTest : public ::testing::Test {
 protected:
  void SetUp() override { clock_.Set(TimePoint(std::chrono::seconds(1700000000))); }
  void TearDown() override {
    if (writer_) writer_->Stop();
  }
  void Start(JobSummaryCmOptions options = {}) {
    options.writes_per_second = 1000;
    writer_ = std::make_unique<JobSummaryConfigMaps>(api_, options, JobSummaryConfigMaps::Driver::kManual);
    env_ = IntegrationEnv{&commands_, &clock_, nullptr};
    ASSERT_TRUE(writer_->Start(env_).ok());
  }
  std::optional<json> Cm(const std::string& name) const { return api_->Object(kNs + name); }

  FakeClock clock_;
  std::shared_ptr<testing::FakeK8sClient> api_ = std::make_shared<testing::FakeK8sClient>();
  testing::FakeClusterCommands commands_;
  std::unique_ptr<JobSummaryConfigMaps> writer_;
  IntegrationEnv env_;
};

TEST_F(JobSummaryConfigMapsTest, FollowsTheJobFromPendingToDeletedThenDeletesAfterTheDelay) {
  v1::Job job = K8sJob("uid-1", "llm", 2, v1::JOB_STATE_PENDING);
  job.clear_placement();
  job.set_revision(1);
  commands_.jobs[job.id()] = job;
  v1::Job other;  // no Kubernetes namespace: nowhere to write it
  other.set_id("api-job");
  other.set_revision(1);
  commands_.jobs[other.id()] = other;
  // A JobService client's labels that name nothing Kubernetes accepts: skipped.
  v1::Job hostile = K8sJob("uid-bad", "Bad_Name/../x", 1, v1::JOB_STATE_RUNNING);
  hostile.set_revision(1);
  commands_.jobs[hostile.id()] = hostile;
  v1::Job huge = K8sJob("uid-huge", std::string(300, 'a'), 1, v1::JOB_STATE_RUNNING);
  huge.set_revision(1);
  commands_.jobs[huge.id()] = huge;
  Start();
  EXPECT_EQ(writer_->Pass().writes, 1u);
  auto cm = Cm("job-summary-llm");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["metadata"]["labels"], json({{"outside-job-info", "true"}}));
  EXPECT_EQ((*cm)["data"]["job_status"], "pending");
  EXPECT_EQ((*cm)["data"]["operator"], "add");
  EXPECT_EQ((*cm)["data"]["hccl.json"], mc::kHcclInitializing);
  EXPECT_EQ(api_->Objects("/api/v1/configmaps").size(), 1u);
  EXPECT_EQ(writer_->Pass().writes, 0u) << "nothing changed: nothing written";

  // Placed and running: the rank table.
  job = K8sJob("uid-1", "llm", 2, v1::JOB_STATE_RUNNING);
  job.set_revision(2);
  commands_.jobs[job.id()] = job;
  EXPECT_EQ(writer_->Pass().writes, 1u);
  cm = Cm("job-summary-llm");
  EXPECT_EQ((*cm)["data"]["job_status"], "running");
  json table = json::parse((*cm)["data"]["hccl.json"].get<std::string>());
  EXPECT_EQ(table["status"], "complete");
  EXPECT_EQ(table["server_list"].size(), 2u);

  // Deleted: once more with operator "delete", then gone after the delay.
  commands_.jobs.erase(job.id());
  EXPECT_EQ(writer_->Pass().writes, 1u);
  cm = Cm("job-summary-llm");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["data"]["operator"], "delete");
  EXPECT_EQ((*cm)["data"]["job_status"], "failed");
  EXPECT_EQ((*cm)["data"]["deleteTime"], "1700000000");
  clock_.Advance(59s);
  writer_->Pass();
  EXPECT_TRUE(Cm("job-summary-llm").has_value());
  clock_.Advance(1s);
  EXPECT_EQ(writer_->Pass().writes, 1u);
  EXPECT_FALSE(Cm("job-summary-llm").has_value());
  EXPECT_EQ(writer_->Pass().writes, 0u);
}

// A rank table that shrinks leaves no slice behind; a failed write is tried
// again on the next pass.
TEST_F(JobSummaryConfigMapsTest, SlicesFollowTheTableAndFailuresAreRetried) {
  JobSummaryCmOptions options;
  v1::Job job = K8sJob("uid-3", "big", 40, v1::JOB_STATE_RUNNING);
  job.set_revision(1);
  options.max_slice_bytes = mc::RankTableJson(job, nullptr).size() / 3;
  commands_.jobs[job.id()] = job;
  Start(options);
  writer_->Pass();
  const size_t slices = api_->Objects("/api/v1/namespaces/train/configmaps").size();
  ASSERT_GE(slices, 3u);
  job = K8sJob("uid-3", "big", 2, v1::JOB_STATE_RUNNING);
  job.set_revision(2);
  commands_.jobs[job.id()] = job;
  api_->Script("PUT", kNs + "job-summary-big", 503, "ServiceUnavailable");
  auto r = writer_->Pass();
  EXPECT_TRUE(r.pending);
  r = writer_->Pass();
  EXPECT_FALSE(r.pending);
  EXPECT_EQ(api_->Objects("/api/v1/namespaces/train/configmaps").size(), 1u);
  EXPECT_EQ(json::parse((*Cm("job-summary-big"))["data"]["hccl.json"].get<std::string>())["server_list"].size(), 2u);
}

// After a restart (a new leader): ConfigMaps of jobs ClusterD knows are
// rewritten from the records; those of jobs it does not know are deleted
// after the delay, unless a live job takes the name meanwhile.
TEST_F(JobSummaryConfigMapsTest, ARestartDeletesOrphansAndKeepsTheLiveJobs) {
  auto orphan = [&](const std::string& name, const std::string& id) {
    api_->Set(kNs + "job-summary-" + name,
              {{"apiVersion", "v1"},
               {"kind", "ConfigMap"},
               {"metadata",
                {{"name", "job-summary-" + name}, {"namespace", "train"}, {"labels", {{"outside-job-info", "true"}}}}},
               {"data", {{"job_id", id}, {"job_name", name}, {"operator", "add"}}}});
  };
  orphan("gone", "uid-gone");
  orphan("live", "uid-live");
  orphan("again", "uid-old");
  v1::Job live = K8sJob("uid-live", "live", 1, v1::JOB_STATE_RUNNING);
  live.set_revision(5);
  commands_.jobs[live.id()] = live;
  Start();
  writer_->Pass();
  EXPECT_EQ((*Cm("job-summary-live"))["data"]["job_status"], "running");
  EXPECT_TRUE(Cm("job-summary-gone").has_value());
  // A new job takes the name "again" before the delay ends.
  v1::Job again = K8sJob("uid-new", "again", 1, v1::JOB_STATE_RUNNING);
  again.set_revision(6);
  commands_.jobs[again.id()] = again;
  clock_.Advance(60s);
  writer_->Pass();
  EXPECT_FALSE(Cm("job-summary-gone").has_value());
  ASSERT_TRUE(Cm("job-summary-again").has_value());
  EXPECT_EQ((*Cm("job-summary-again"))["data"]["job_id"], "uid-new");
  EXPECT_TRUE(Cm("job-summary-live").has_value());
}

}  // namespace
}  // namespace clusterd
