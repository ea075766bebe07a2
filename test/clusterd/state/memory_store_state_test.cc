// ClusterState over the Store interface: a representative scenario (hello, a
// fault, a job, a restart) on MemoryStore, and the same scenario on both
// stores leaves the same bytes in every table: MemoryStore is a faithful
// stand-in for RocksDbStore in tests.
#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "clusterd/state/cluster_state.h"
#include "test/support/state/state_fixtures.h"
#include "test/support/state/state_on_store.h"
#include "test/support/state/store_backends.h"

namespace clusterd {
namespace {

using testing::MakeHello;
using testing::MakeTransition;

using Tables = std::map<storage::Cf, std::map<std::string, std::string>>;

template <typename Backend>
class StateOnStore : public testing::StateOnStore<Backend> {
 public:
  using Base = testing::StateOnStore<Backend>;
  using Base::Commit;
  using Base::state_;
  using Base::store_;

  // hello, a device fault, a job on the faulty device.
  void Scenario() {
    ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyHello(MakeHello("worker01", 1), 1, m); }).ok());
    ASSERT_TRUE(Commit([&](Mutation* m) {
                  return state_->ApplyTransition("worker01", 1, MakeTransition(1, 1, true, 3, "80E01801"), m);
                }).ok());
    v1::Job job;
    job.set_id("llm");
    job.set_kind(v1::JOB_KIND_TRAINING);
    for (uint32_t rank = 0; rank < 2; ++rank) {
      auto* p = job.add_placement();
      p->set_rank(rank);
      p->set_node("worker01");
      p->set_device_id(rank + 2);  // devices 2 and 3
    }
    ASSERT_TRUE(Commit([&](Mutation* m) { return state_->ApplyCreateJob(job, m); }).ok());
  }

  Tables Dump() const {
    Tables out;
    for (size_t i = 0; i < storage::kCfCount; ++i) {
      const auto cf = static_cast<storage::Cf>(i);
      EXPECT_TRUE(store_->ForEach(cf, [&](std::string_view k, std::string_view v) { out[cf].emplace(k, v); }).ok());
    }
    return out;
  }
};

TEST(MemoryStoreStateTest, HelloFaultJobSurviveRestart) {
  StateOnStore<testing::MemoryBackend> s;
  ASSERT_NO_FATAL_FAILURE(s.Open());
  ASSERT_NO_FATAL_FAILURE(s.Scenario());
  const uint64_t revision = s.state_->revision();
  // NODE_REGISTERED; FAULT_RAISED, DEVICE_ and NODE_HEALTH_CHANGED; JOB_CREATED.
  ASSERT_EQ(s.events_.size(), 5u);
  EXPECT_EQ(revision, 5u);

  ASSERT_NO_FATAL_FAILURE(s.Open());  // restart
  EXPECT_EQ(s.state_->revision(), revision);
  EXPECT_EQ(s.state_->durable_revision(), revision);
  v1::GetNodeRequest req;
  req.set_name("worker01");
  auto node = s.state_->GetNode(req);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(node->node().health(), v1::HEALTH_UNHEALTHY);
  ASSERT_EQ(node->devices_size(), 8);
  EXPECT_EQ(node->devices(3).health(), v1::HEALTH_UNHEALTHY);
  EXPECT_EQ(node->devices(2).health(), v1::HEALTH_HEALTHY);
  ASSERT_EQ(node->active_faults_size(), 1);
  EXPECT_EQ(node->active_faults(0).id(), "worker01/3/accelerator/80E01801");
  auto job = s.state_->GetJob("llm");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->placement_size(), 2);
  ASSERT_EQ(job->impacts_size(), 1);  // rank 1 on device 3

  // The event log reads back in order.
  auto events = s.store_->ReadEvents(0, 100);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 5u);
  for (size_t i = 0; i < events->size(); ++i) EXPECT_EQ((*events)[i].revision(), i + 1);
  EXPECT_EQ(events->back().type(), v1::EVENT_TYPE_JOB_CREATED);

  // The applied sequence survived: the agent is told so when it reconnects,
  // and a resend is a duplicate that stores nothing.
  auto welcome = s.Commit([&](Mutation* m) { return s.state_->ApplyHello(MakeHello("worker01", 1), 2, m); });
  ASSERT_TRUE(welcome.ok()) << welcome.status().ToString();
  EXPECT_EQ(welcome->applied_seq(), 1u);
  const uint64_t before = s.state_->revision();
  const auto resend = MakeTransition(1, 1, true, 3, "80E01801");
  auto again = s.Commit([&](Mutation* m) { return s.state_->ApplyTransition("worker01", 2, resend, m); });
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(s.state_->revision(), before);
}

TEST(MemoryStoreStateTest, SameBytesAsRocksDb) {
  StateOnStore<testing::MemoryBackend> memory;
  StateOnStore<testing::RocksDbBackend> rocks;
  ASSERT_NO_FATAL_FAILURE(memory.Open());
  ASSERT_NO_FATAL_FAILURE(rocks.Open());
  ASSERT_NO_FATAL_FAILURE(memory.Scenario());
  ASSERT_NO_FATAL_FAILURE(rocks.Scenario());
  const Tables stored = memory.Dump();
  EXPECT_FALSE(stored.at(storage::Cf::kEvents).empty());
  EXPECT_EQ(stored, rocks.Dump());
}

}  // namespace
}  // namespace clusterd
