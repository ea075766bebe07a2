// TaskD jobs' Kubernetes objects (clusterd/mindcluster/k8s/taskd_objects.h)
// on the in-memory API server (fake_k8s_client.h): the PodGroup's label and
// annotation, the fault-type label on the job's pods of one node (and no
// other PodGroup's), reset-config-<job> written with its checkCode and the
// time of the injected clock, a conflict read again, a missing ConfigMap an
// error counted, and nothing written for a job off Kubernetes.
#include "clusterd/mindcluster/k8s/taskd_objects.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/go_json.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "test/support/fakes/fake_k8s_client.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;

const std::string kTaskdPodGroup = "/apis/scheduling.volcano.sh/v1beta1/namespaces/train/podgroups/pg-llm";
const std::string kTaskdResetCm = "/api/v1/namespaces/train/configmaps/reset-config-llm";

mc::TaskdJobRef TaskdObjectsJob() { return mc::TaskdJobRef{"uid-1", "train", "llm", "pg-llm"}; }

nlohmann::json TaskdObjectsPod(const std::string& name, const std::string& node, const std::string& group) {
  return {{"metadata",
           {{"name", name}, {"namespace", "train"}, {"annotations", {{"scheduling.k8s.io/group-name", group}}}}},
          {"spec", {{"nodeName", node}}}};
}

class TaskdObjectsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_->Set(kTaskdPodGroup, {{"metadata", {{"name", "pg-llm"}, {"namespace", "train"}}}});
    api_->Set(kTaskdResetCm,
              {{"metadata", {{"name", "reset-config-llm"}, {"namespace", "train"}}}, {"data", {{"reset.json", "{}"}}}});
    objects_ = std::make_unique<TaskdKubeObjects>(api_, &clock_, &metrics_);
  }
  bool Metric(const std::string& line) { return metrics_.Render().find(line + "\n") != std::string::npos; }

  FakeClock clock_;
  MetricsRegistry metrics_;
  std::shared_ptr<testing::FakeK8sClient> api_ = std::make_shared<testing::FakeK8sClient>();
  std::unique_ptr<TaskdKubeObjects> objects_;
};

TEST_F(TaskdObjectsTest, ThePodGroupGetsTheLabelAndTheStatusAnnotation) {
  objects_->RecoverEnable(TaskdObjectsJob(), "on");
  objects_->RecoverStatus(TaskdObjectsJob(), "retry-success");
  objects_->Drain();
  const auto pg = api_->Object(kTaskdPodGroup);
  ASSERT_TRUE(pg.has_value());
  EXPECT_EQ((*pg)["metadata"]["labels"]["process-recover-enable"], "on");
  EXPECT_EQ((*pg)["metadata"]["annotations"]["ProcessRecoverStatus"], "retry-success");
  EXPECT_TRUE(Metric("clusterd_mindcluster_taskd_object_writes_total{result=\"ok\"} 2"));
}

TEST_F(TaskdObjectsTest, OnlyTheJobsPodsOnTheNodeAreLabelled) {
  api_->Set("/api/v1/namespaces/train/pods/llm-0", TaskdObjectsPod("llm-0", "worker01", "pg-llm"));
  api_->Set("/api/v1/namespaces/train/pods/other-0", TaskdObjectsPod("other-0", "worker01", "pg-other"));
  objects_->PodFaultTypes(TaskdObjectsJob(), {{"worker01", "hardware"}});
  objects_->Drain();
  EXPECT_EQ((*api_->Object("/api/v1/namespaces/train/pods/llm-0"))["metadata"]["labels"]["fault-type"], "hardware");
  EXPECT_FALSE((*api_->Object("/api/v1/namespaces/train/pods/other-0"))["metadata"].contains("labels"))
      << "another PodGroup's pod on the node";
  // The pods are listed by node (the API server filters; the fake does not).
  const auto lists = api_->CallsTo("GET", "/api/v1/namespaces/train/pods");
  ASSERT_EQ(lists.size(), 1u);
  EXPECT_NE(lists[0].query.find("fieldSelector=spec.nodeName%3Dworker01"), std::string::npos) << lists[0].query;
  // No pod of the job there (any more): an error, counted.
  ASSERT_TRUE(api_->Remove("/api/v1/namespaces/train/pods/llm-0"));
  objects_->PodFaultTypes(TaskdObjectsJob(), {{"worker01", "software"}});
  objects_->Drain();
  EXPECT_TRUE(Metric("clusterd_mindcluster_taskd_object_writes_total{result=\"error\"} 1"));
}

TEST_F(TaskdObjectsTest, ResetConfigIsWrittenWithItsCheckCodeAndTheClocksTimeAndAConflictIsReadAgain) {
  api_->Script("PUT", kTaskdResetCm, 409, "Conflict");  // someone wrote meanwhile: read again
  objects_->ResetConfig(TaskdObjectsJob(), mc::ResetOp::kFlushing, {});
  objects_->Drain();
  const auto cm = api_->Object(kTaskdResetCm);
  ASSERT_TRUE(cm.has_value());
  const std::string reset = (*cm)["data"]["reset.json"];
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(clock_.Now().time_since_epoch()).count();
  EXPECT_EQ(reset, mc::ResetConfigJson("{}", mc::ResetOp::kFlushing, {}, now_s));
  EXPECT_EQ((*cm)["data"]["checkCode"], mc::Sha256Hex(reset));
  EXPECT_EQ(api_->CallsTo("PUT", kTaskdResetCm).size(), 2u);
  EXPECT_TRUE(Metric("clusterd_mindcluster_taskd_object_writes_total{result=\"ok\"} 1"));
}

TEST_F(TaskdObjectsTest, AMissingResetConfigIsAnErrorAndAJobOffKubernetesWritesNothing) {
  ASSERT_TRUE(api_->Remove(kTaskdResetCm));
  objects_->ResetConfig(TaskdObjectsJob(), mc::ResetOp::kClear, {});
  objects_->Drain();
  EXPECT_TRUE(Metric("clusterd_mindcluster_taskd_object_writes_total{result=\"error\"} 1"));
  api_->ClearCalls();
  const mc::TaskdJobRef off{"uid-2", "", "", ""};
  objects_->RecoverEnable(off, "on");
  objects_->RecoverStatus(off, "recover-failed");
  objects_->ResetConfig(off, mc::ResetOp::kClear, {});
  objects_->Drain();
  EXPECT_TRUE(api_->Calls().empty());
}

}  // namespace
}  // namespace clusterd
