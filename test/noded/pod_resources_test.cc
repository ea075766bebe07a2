// NodeD's PodResourcesWatcher against a stand-in kubelet serving the
// pod-resources API on a real unix socket: which devices each pod holds
// reaches the agent's hello and its PodDevicesUpdate, a kubelet that fails
// leaves the last answer standing, no socket is not an error.
#include "noded/server/pod_resources.h"

#include <atomic>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "fake_kubelet/fake_kubelet.h"
#include "noded/accel/sim_backend.h"
#include "test/support/wait.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

using namespace std::chrono_literals;

::v1::ListPodResourcesResponse Listing(
    const std::vector<std::tuple<std::string, std::string, std::string, std::vector<std::string>>>& pods) {
  ::v1::ListPodResourcesResponse r;
  for (const auto& [ns, name, resource, ids] : pods) {
    auto* p = r.add_pod_resources();
    p->set_namespace_(ns);
    p->set_name(name);
    auto* c = p->add_containers();
    c->set_name("main");
    auto* d = c->add_devices();
    d->set_resource_name(resource);
    for (const auto& id : ids) d->add_device_ids(id);
  }
  return r;
}

class PodResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto outbox = Outbox::Open(dir_.path() + "/state");
    ASSERT_TRUE(outbox.ok()) << outbox.status().ToString();
    outbox_ = std::move(*outbox);
    sim_ = std::make_unique<SimBackend>(8);
    AgentOptions options;
    options.node_name = "worker01";
    options.root = testing::FixtureDir("full");
    options.kmsg_path = "";
    options.mounts_file = "/proc/mounts";
    agent_ = std::make_unique<Agent>(options, outbox_.get(), sim_.get(), &clock_);
    ASSERT_TRUE(agent_->Init().ok());
    options_.socket = dir_.path() + "/kubelet.sock";
    options_.timeout = 5s;
  }

  std::unique_ptr<PodResourcesWatcher> Watcher() {
    return std::make_unique<PodResourcesWatcher>(
        options_, agent_.get(), [this] { ++changes_; }, &metrics_);
  }

  std::string Pods() {
    std::string out;
    const v1::Hello hello = agent_->MakeHello();
    for (const auto& p : hello.inventory().pod_devices()) {
      out += p.namespace_() + "/" + p.name() + ":";
      for (uint32_t id : p.device_ids()) out += std::to_string(id) + ",";
      out += " ";
    }
    return out;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  MetricsRegistry metrics_;
  std::unique_ptr<Outbox> outbox_;
  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<Agent> agent_;
  PodResourcesOptions options_;
  std::atomic<int> changes_{0};
};

TEST_F(PodResourcesTest, NoSocketIsNotAnErrorAndReportsNothing) {
  auto w = Watcher();
  Status st = w->ListOnce();
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(Pods(), "");
  EXPECT_EQ(changes_, 0);
  EXPECT_NE(metrics_.Render().find("noded_pod_resources_up 0"), std::string::npos);
}

TEST_F(PodResourcesTest, TheKubeletsAnswerReachesTheHelloAndEachChangeIsOneUpdate) {
  auto kubelet = clusterd::testing::FakeKubelet::Start(options_.socket);
  ASSERT_NE(kubelet, nullptr);
  kubelet->Answer(Listing({{"train", "llm-0", "huawei.com/Ascend910", {"Ascend910-1", "Ascend910-0"}},
                           {"train", "cpu", "cpu.example.com/core", {"7"}},
                           {"infer", "svc-0", "huawei.com/Ascend910", {"Ascend910-5"}}}));
  auto w = Watcher();
  ASSERT_TRUE(w->ListOnce().ok());
  EXPECT_EQ(Pods(), "infer/svc-0:5, train/llm-0:0,1, ");
  EXPECT_EQ(changes_, 1);
  uint64_t version = 0;
  v1::PodDevicesUpdate u = agent_->PodDevicesNow(&version);
  EXPECT_EQ(u.pods_size(), 2);
  EXPECT_EQ(version, agent_->PodDevicesVersion());
  // The same answer again changes nothing.
  ASSERT_TRUE(w->ListOnce().ok());
  EXPECT_EQ(changes_, 1);
  EXPECT_EQ(agent_->PodDevicesVersion(), version);
  // A pod gone, one with an id naming no device of this node (left out).
  kubelet->Answer(Listing({{"train", "llm-0", "huawei.com/Ascend910", {"Ascend910-0", "Ascend910-1"}},
                           {"train", "llm-9", "huawei.com/Ascend910", {"Ascend910-9"}}}));
  ASSERT_TRUE(w->ListOnce().ok());
  EXPECT_EQ(Pods(), "train/llm-0:0,1, ");
  EXPECT_EQ(changes_, 2);
  const std::string m = metrics_.Render();
  EXPECT_NE(m.find("noded_pod_resources_up 1"), std::string::npos) << m;
  EXPECT_NE(m.find("noded_pod_resources_pods 1"), std::string::npos) << m;
  EXPECT_NE(m.find("noded_pod_resources_unmapped_ids 1"), std::string::npos) << m;
}

TEST_F(PodResourcesTest, AKubeletThatFailsLeavesTheLastAnswerStanding) {
  auto kubelet = clusterd::testing::FakeKubelet::Start(options_.socket);
  ASSERT_NE(kubelet, nullptr);
  kubelet->Answer(Listing({{"train", "llm-0", "huawei.com/npu", {"2"}}}));
  auto w = Watcher();
  ASSERT_TRUE(w->ListOnce().ok());
  kubelet->Fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, "kubelet restarting"));
  Status st = w->ListOnce();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("kubelet restarting"), std::string::npos);
  EXPECT_EQ(Pods(), "train/llm-0:2, ");
  EXPECT_EQ(changes_, 1);
  const std::string m = metrics_.Render();
  EXPECT_NE(m.find("noded_pod_resources_errors_total 1"), std::string::npos) << m;
  EXPECT_NE(m.find("noded_pod_resources_up 0"), std::string::npos) << m;
}

TEST_F(PodResourcesTest, ARestartedKubeletIsAskedAgain) {
  auto kubelet = clusterd::testing::FakeKubelet::Start(options_.socket);
  ASSERT_NE(kubelet, nullptr);
  kubelet->Answer(Listing({{"train", "llm-0", "nvidia.com/gpu", {"1"}}}));
  auto w = Watcher();
  ASSERT_TRUE(w->ListOnce().ok());
  kubelet.reset();  // the kubelet restarts: its socket goes away
  EXPECT_FALSE(w->ListOnce().ok());
  EXPECT_EQ(Pods(), "train/llm-0:1, ");
  kubelet = clusterd::testing::FakeKubelet::Start(options_.socket);
  ASSERT_NE(kubelet, nullptr);
  kubelet->Answer(Listing({{"train", "llm-0", "nvidia.com/gpu", {"2"}}}));
  EXPECT_TRUE(clusterd::testing::WaitFor([&] { return w->ListOnce().ok(); }));
  EXPECT_EQ(Pods(), "train/llm-0:2, ");
}

TEST_F(PodResourcesTest, TheThreadAsksUntilStoppedAndAKubeletThatComesLaterIsFound) {
  // Its first question finds no kubelet; a later one does (a short interval:
  // the test waits for that question, not for a time).
  options_.interval = 20ms;
  auto w = Watcher();
  w->Start();  // no kubelet yet
  auto kubelet = clusterd::testing::FakeKubelet::Start(options_.socket);
  ASSERT_NE(kubelet, nullptr);
  kubelet->Answer(Listing({{"train", "llm-0", "nvidia.com/gpu", {"3"}}}));
  EXPECT_TRUE(clusterd::testing::WaitFor([&] { return changes_.load() == 1; }));
  EXPECT_EQ(Pods(), "train/llm-0:3, ");
  w->Stop();
  const int calls = kubelet->calls();
  EXPECT_GE(calls, 1);
}

}  // namespace
}  // namespace clusterd::noded
