// The state's aggregates on their own (library clusterd_state, no engine, no
// ClusterState): what each writes to the change set and emits, and the
// Validated<T> handshake. ClusterState's rules across them are covered by
// cluster_state_test.cc.
#include <gtest/gtest.h>

#include "clusterd/state/fault_table.h"
#include "clusterd/state/job_table.h"
#include "clusterd/state/journal.h"
#include "clusterd/state/node_table.h"
#include "clusterd/state/placement_index.h"
#include "clusterd/state/validation.h"
#include "clusterd/storage/key_codec.h"
#include "clusterd/storage/memory_store.h"
#include "common/clock.h"
#include "common/metrics.h"

namespace clusterd {
namespace {

using storage::Cf;

size_t CountWrites(const Mutation& m, Cf table) {
  size_t n = 0;
  for (const auto& c : m.changes) n += c.table == table && c.op == storage::Change::Op::kPut ? 1 : 0;
  return n;
}

v1::Fault AgentFault(const std::string& node, std::optional<uint32_t> device, v1::FaultLevel level,
                     const std::string& message = "m") {
  v1::Fault f;
  f.set_node(node);
  if (device) f.set_device_id(*device);
  f.set_source(v1::FAULT_SOURCE_ACCELERATOR);
  f.set_code("80E01801");
  f.set_level(level);
  f.set_message(message);
  return f;
}

std::string KeyOf(const v1::Fault& f) {
  return storage::FaultKey(f.node(), f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt,
                           f.source(), storage::AgentDiscriminator(f.code(), ""));
}

class StateTablesTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  Journal journal_{&clock_};
  StateLimits limits_;
};

TEST_F(StateTablesTest, JournalStampsEventsAndWritesTheCounterOncePerFlush) {
  Mutation m;
  const uint64_t r1 = journal_.Next();
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_NODE_UPDATED);
  journal_.Emit(&m, ev);  // no revision: takes the next one
  ASSERT_EQ(m.events.size(), 1u);
  EXPECT_EQ(m.events[0].revision(), r1 + 1);
  EXPECT_TRUE(m.events[0].has_time());
  EXPECT_EQ(CountWrites(m, Cf::kEvents), 1u);
  journal_.Flush(&m);
  const size_t after_first = m.changes.size();
  journal_.Flush(&m);  // nothing moved since
  EXPECT_EQ(m.changes.size(), after_first);
  EXPECT_EQ(journal_.revision(), 2u);
  journal_.Compact(1, &m);
  EXPECT_EQ(journal_.compacted(), 1u);
  journal_.Compact(1, &m);  // not above the floor: nothing
  EXPECT_EQ(journal_.compacted(), 1u);
}

TEST_F(StateTablesTest, FaultTableRaisesRefreshesUpdatesAndClears) {
  FaultTable faults(&journal_);
  const v1::Fault proposed = AgentFault("n1", 3, v1::FAULT_LEVEL_RESTART_REQUEST);
  const std::string key = KeyOf(proposed);
  Mutation m;
  auto raised = faults.Raise(key, proposed, &m);
  ASSERT_TRUE(raised.changed);
  EXPECT_FALSE(raised.was_active);
  EXPECT_EQ(raised.fault->state(), v1::FAULT_STATE_ACTIVE);
  EXPECT_EQ(raised.fault->count(), 1u);
  EXPECT_FALSE(raised.fault->id().empty());
  const uint64_t rev = raised.fault->revision();
  EXPECT_EQ(raised.fault->create_revision(), rev);
  EXPECT_EQ(CountWrites(m, Cf::kFaults), 1u);

  Mutation refresh;
  clock_.Advance(std::chrono::seconds(1));
  raised = faults.Raise(key, proposed, &refresh);  // same level and message
  EXPECT_FALSE(raised.changed);
  EXPECT_TRUE(refresh.changes.empty());
  EXPECT_EQ(raised.fault->revision(), rev);

  Mutation update;
  raised = faults.Raise(key, AgentFault("n1", 3, v1::FAULT_LEVEL_SEPARATE), &update);
  EXPECT_TRUE(raised.changed);
  EXPECT_TRUE(raised.was_active);
  EXPECT_GT(raised.fault->revision(), rev);

  auto tally = faults.Active("n1", 3);
  EXPECT_EQ(tally.node.active, 1u);
  EXPECT_EQ(tally.device.active, 1u);
  EXPECT_EQ(tally.device.worst, v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(faults.Active("n1", 4).device.active, 0u);
  EXPECT_EQ(faults.ActiveFrom("n1", /*external=*/false), 1u);
  EXPECT_EQ(faults.ActiveFrom("n1", /*external=*/true), 0u);

  Mutation clear;
  const v1::Fault* cleared = faults.Clear(key, "gone", &clear);
  ASSERT_NE(cleared, nullptr);
  EXPECT_EQ(cleared->state(), v1::FAULT_STATE_CLEARED);
  EXPECT_EQ(cleared->clear_reason(), "gone");
  EXPECT_EQ(faults.Clear(key, "again", &clear), nullptr);  // not active: nothing
  EXPECT_EQ(faults.Active("n1", 3).node.active, 0u);
  EXPECT_EQ(faults.FindById(cleared->id()), cleared);
}

// The nodes with fault records (what a walk over a job's nodes narrows to)
// count each record once, cleared ones too, and survive a reload.
TEST_F(StateTablesTest, FaultTableKnowsTheNodesWithFaults) {
  auto store = storage::MemoryStore::Open();
  ASSERT_TRUE(store.ok());
  FaultTable faults(&journal_);
  Mutation m;
  for (const v1::Fault& f :
       {AgentFault("n1", 1, v1::FAULT_LEVEL_SEPARATE), AgentFault("n1", 2, v1::FAULT_LEVEL_SEPARATE),
        AgentFault("n3", std::nullopt, v1::FAULT_LEVEL_SEPARATE)}) {
    faults.Raise(KeyOf(f), f, &m);
  }
  const v1::Fault again = AgentFault("n1", 1, v1::FAULT_LEVEL_SEPARATE);
  faults.Clear(KeyOf(again), "gone", &m);
  faults.Raise(KeyOf(again), again, &m);  // the same record, raised again
  const std::map<std::string, uint32_t> want = {{"n1", 2}, {"n3", 1}};
  EXPECT_EQ(faults.nodes(), want);
  ASSERT_TRUE((*store)->Write(m.changes).ok());
  FaultTable loaded(&journal_);
  ASSERT_TRUE(loaded.Load(**store).ok());
  EXPECT_EQ(loaded.nodes(), want);
}

TEST_F(StateTablesTest, FaultTableAutoClearsComeDueInOrderAndEndWithTheFault) {
  FaultTable faults(&journal_);
  v1::Fault a = AgentFault("n1", 1, v1::FAULT_LEVEL_SEPARATE);
  v1::Fault b = AgentFault("n1", 2, v1::FAULT_LEVEL_SEPARATE);
  a.set_source(v1::FAULT_SOURCE_EXTERNAL);
  a.set_reporter("pubfault/CardUnhealthy");
  Mutation m;
  faults.Raise(KeyOf(a), a, &m);
  faults.Raise(KeyOf(b), b, &m);
  EXPECT_EQ(faults.active_public(), 1u);
  const TimePoint t0 = clock_.Now();
  EXPECT_EQ(faults.NextAutoClear(), TimePoint::max());
  faults.SetAutoClear(KeyOf(b), t0 + std::chrono::seconds(5), &m);
  faults.SetAutoClear(KeyOf(a), t0 + std::chrono::seconds(10), &m);
  EXPECT_EQ(faults.NextAutoClear(), t0 + std::chrono::seconds(5));
  EXPECT_FALSE(faults.DueAutoClear(t0 + std::chrono::seconds(4)));
  auto due = faults.DueAutoClear(t0 + std::chrono::seconds(5));
  ASSERT_TRUE(due);
  EXPECT_EQ(*due, KeyOf(b));
  faults.Clear(KeyOf(b), "due", &m);  // ends its auto-clear
  EXPECT_EQ(faults.NextAutoClear(), t0 + std::chrono::seconds(10));
  faults.SetAutoClear(KeyOf(a), std::nullopt, &m);
  EXPECT_FALSE(faults.DueAutoClear(t0 + std::chrono::hours(1)));
  faults.Clear(KeyOf(a), "recovered", &m);
  EXPECT_EQ(faults.active_public(), 0u);
}

TEST_F(StateTablesTest, JobTableKeepsSourcesApartAndFindsTheJobsAFaultHits) {
  JobTable jobs(&journal_, &limits_);
  v1::Job job;
  job.set_id("train-1");
  job.set_kind(v1::JOB_KIND_TRAINING);
  for (uint32_t r = 0; r < 4; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    p->set_node(r < 2 ? "n1" : "n2");
    p->set_device_id(r % 2);
  }
  Mutation m;
  auto created = jobs.Create(job, "kubernetes", &m);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(created->source(), "kubernetes");
  EXPECT_EQ(CountWrites(m, Cf::kJobs), 1u);
  ASSERT_EQ(m.events.size(), 1u);
  EXPECT_EQ(m.events[0].type(), v1::EVENT_TYPE_JOB_CREATED);
  EXPECT_EQ(jobs.Create(job, "kubernetes", &m).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(jobs.Update(job, JobTable::kApiSource, &m).status().code(), StatusCode::kFailedPrecondition);

  EXPECT_EQ(jobs.HitBy(AgentFault("n1", 1, v1::FAULT_LEVEL_SEPARATE)), std::vector<std::string>{"train-1"});
  EXPECT_TRUE(jobs.HitBy(AgentFault("n1", 7, v1::FAULT_LEVEL_SEPARATE)).empty());  // no rank on device 7
  EXPECT_TRUE(jobs.HitBy(AgentFault("n3", std::nullopt, v1::FAULT_LEVEL_SEPARATE)).empty());
  const PlacementIndex placement(job);
  EXPECT_EQ(*placement.RanksHit(AgentFault("n2", std::nullopt, v1::FAULT_LEVEL_SEPARATE)),
            (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(*placement.RanksHit(AgentFault("n2", 1, v1::FAULT_LEVEL_SEPARATE)), (std::vector<uint32_t>{3}));
  {
    // A GPU pod's ranks (any_device) on n3: hit by a fault on any of its devices.
    v1::Job gpu;
    gpu.set_id("gpu-1");
    gpu.set_kind(v1::JOB_KIND_TRAINING);
    for (uint32_t r = 0; r < 2; ++r) {
      auto* p = gpu.add_placement();
      p->set_rank(r);
      p->set_node("n3");
      p->set_any_device(true);
    }
    Mutation gm;
    auto made = jobs.Create(gpu, "kubernetes", &gm);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    EXPECT_EQ(jobs.HitBy(AgentFault("n3", 5, v1::FAULT_LEVEL_SEPARATE)), std::vector<std::string>{"gpu-1"});
    EXPECT_EQ(jobs.HitBy(AgentFault("n1", 7, v1::FAULT_LEVEL_SEPARATE)).size(), 0u);
    const PlacementIndex gpu_placement(gpu);
    EXPECT_EQ(*gpu_placement.RanksHit(AgentFault("n3", 5, v1::FAULT_LEVEL_SEPARATE)), (std::vector<uint32_t>{0, 1}));
    EXPECT_EQ(gpu_placement.RanksHit(AgentFault("n1", 5, v1::FAULT_LEVEL_SEPARATE)), nullptr);
  }

  // The API may delete a discovered job; another integration may not.
  EXPECT_EQ(jobs.Delete("train-1", "other", &m).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(jobs.Delete("train-1", JobTable::kApiSource, &m).ok());
  EXPECT_TRUE(jobs.HitBy(AgentFault("n1", 1, v1::FAULT_LEVEL_SEPARATE)).empty());  // the index forgot it
}

TEST_F(StateTablesTest, JobTableCountsRefusedJobs) {
  MetricsRegistry metrics;
  limits_.jobs_refused = &metrics.AddCounter("refused", "x");
  limits_.max_job_ranks = 2;
  JobTable jobs(&journal_, &limits_);
  v1::Job job;
  job.set_id("big");
  job.set_kind(v1::JOB_KIND_TRAINING);
  for (uint32_t r = 0; r < 3; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    p->set_node("n1");
  }
  Mutation m;
  EXPECT_EQ(jobs.Create(job, JobTable::kApiSource, &m).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.changes.empty());
  EXPECT_EQ(limits_.jobs_refused->Value(), 1u);
}

// What one fault can hit of a job is bounded: one rank per (node, device)
// unless the job says its ranks share devices (at most 64), and at most 1,024
// ranks of a job on one node. Refused whole, naming the rank and the node.
TEST_F(StateTablesTest, JobPlacementIsBoundedPerDeviceAndPerNode) {
  JobTable jobs(&journal_, &limits_);
  auto add = [](v1::Job* job, uint32_t rank, const std::string& node, std::optional<uint32_t> device) {
    auto* p = job->add_placement();
    p->set_rank(rank);
    p->set_node(node);
    if (device) p->set_device_id(*device);
  };
  v1::Job shared;
  shared.set_id("shared");
  shared.set_kind(v1::JOB_KIND_INFERENCE);
  add(&shared, 0, "n1", 0);
  add(&shared, 1, "n1", 0);
  Mutation m;
  auto refused = jobs.Create(shared, JobTable::kApiSource, &m);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("job.placement[rank 1]: device 0 of node n1 already runs another rank"),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_TRUE(m.changes.empty());

  shared.set_ranks_per_device(2);
  ASSERT_TRUE(jobs.Create(shared, JobTable::kApiSource, &m).ok());
  add(&shared, 2, "n1", 0);
  refused = jobs.Update(shared, JobTable::kApiSource, &m);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("already runs 2 ranks"), std::string::npos) << refused.status().ToString();
  EXPECT_EQ(jobs.Find("shared")->placement_size(), 2);  // unchanged

  shared.set_ranks_per_device(65);
  EXPECT_NE(jobs.Update(shared, JobTable::kApiSource, &m).status().message().find("job.ranks_per_device: 65"),
            std::string::npos);

  // 1,024 ranks without a device on one node fit; one more does not.
  v1::Job wide;
  wide.set_id("wide");
  wide.set_kind(v1::JOB_KIND_TRAINING);
  for (uint32_t r = 0; r < kMaxJobRanksPerNode; ++r) add(&wide, r, "n2", std::nullopt);
  add(&wide, kMaxJobRanksPerNode, "n3", std::nullopt);
  ASSERT_TRUE(jobs.Create(wide, JobTable::kApiSource, &m).ok());
  wide.set_id("wider");
  add(&wide, kMaxJobRanksPerNode + 1, "n2", 5);
  refused = jobs.Create(wide, JobTable::kApiSource, &m);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("more than 1024 ranks of the job on node n2"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(jobs.Find("wider"), nullptr);
}

// A rank's device_ip (from the device plugin) is an address or nothing.
TEST_F(StateTablesTest, AJobsDeviceIpsMustBeAddressesOfAPlacedDevice) {
  JobTable jobs(&journal_, &limits_);
  v1::Job job;
  job.set_id("ips");
  job.set_kind(v1::JOB_KIND_TRAINING);
  auto* p = job.add_placement();
  p->set_rank(0);
  p->set_node("n1");
  p->set_device_id(3);
  p->set_device_ip("fe80::a:1");
  Mutation m;
  ASSERT_TRUE(jobs.Create(job, JobTable::kApiSource, &m).ok());
  for (const std::string& bad :
       std::vector<std::string>{"1.2.3.4 ", "10.0.0.1\n", "host.example", std::string(46, '1')}) {
    job.mutable_placement(0)->set_device_ip(bad);
    const auto refused = jobs.Update(job, JobTable::kApiSource, &m);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("job.placement[rank 0].device_ip: not an IPv4 or IPv6 address"),
              std::string::npos)
        << refused.status().ToString();
  }
  job.mutable_placement(0)->set_device_ip("10.0.0.1");
  job.mutable_placement(0)->clear_device_id();
  EXPECT_NE(jobs.Update(job, JobTable::kApiSource, &m).status().message().find("set without a device_id"),
            std::string::npos);
  EXPECT_EQ(jobs.Find("ips")->placement(0).device_ip(), "fe80::a:1");  // unchanged
}

TEST_F(StateTablesTest, NodeTableWritesEachChangedRecordOncePerFlush) {
  NodeTable nodes(&journal_);
  auto [n, created] = nodes.FindOrAdd("n1");
  ASSERT_TRUE(created);
  n->record.mutable_node()->set_name("n1");
  n->record.mutable_node()->mutable_labels()->insert({"product-serial-number", "SN1"});
  v1::Device& d = n->devices[0];
  d.set_node("n1");
  d.set_id(0);
  nodes.Changed(*n);
  nodes.Changed(*n);
  nodes.Changed(d);
  Mutation m;
  nodes.Flush(&m);
  EXPECT_EQ(CountWrites(m, Cf::kNodes), 1u);
  EXPECT_EQ(CountWrites(m, Cf::kDevices), 1u);
  Mutation again;
  nodes.Flush(&again);
  EXPECT_TRUE(again.changes.empty());
  EXPECT_EQ(nodes.ByLabel("product-serial-number").at("SN1"), "n1");

  // Isolation is idempotent: one event, then none.
  Mutation iso;
  ASSERT_TRUE(nodes.SetIsolated("n1", 5, "bad HBM", &iso).ok());
  ASSERT_TRUE(nodes.SetIsolated("n1", 5, "bad HBM", &iso).ok());
  EXPECT_EQ(iso.events.size(), 1u);
  EXPECT_TRUE(n->devices.at(5).isolated());
  EXPECT_EQ(nodes.SetIsolated("ghost", std::nullopt, "x", &iso).code(), StatusCode::kNotFound);
  Mutation uncordon;
  nodes.SetCordon(*n, false, "alice", "", &uncordon);  // uncordon ends isolation
  EXPECT_FALSE(n->devices.at(5).isolated());
  EXPECT_EQ(uncordon.events.size(), 1u);
}

TEST_F(StateTablesTest, NodeTableKeepsTheHelloEpochWhenEvicting) {
  NodeState n;
  n.hello_epoch = 1;
  NodeTable::TrackEpoch(n, 1) = 5;
  for (uint64_t e = 2; e < 2 + NodeTable::kEpochsKept + 3; ++e) NodeTable::TrackEpoch(n, e);
  EXPECT_EQ(n.record.applied_seq().size(), NodeTable::kEpochsKept);
  EXPECT_EQ(n.record.applied_seq().at(1), 5u);
}

TEST_F(StateTablesTest, OnlyValidateMakesAValidatedMessage) {
  v1::FaultTransition t;
  EXPECT_EQ(Validate(t).status().code(), StatusCode::kInvalidArgument);  // id 0
  t.mutable_id()->set_epoch(1);
  t.mutable_id()->set_seq(1);
  t.set_action(v1::TRANSITION_ACTION_RAISE);
  t.mutable_fault()->set_source(v1::FAULT_SOURCE_ACCELERATOR);
  t.mutable_fault()->set_code("80E01801");
  auto valid = Validate(t);
  ASSERT_TRUE(valid.ok()) << valid.status().ToString();
  const Validated<v1::FaultTransition> copy = *valid;  // shared, not copied
  EXPECT_EQ(&*copy, &**valid);
  EXPECT_EQ(copy->id().seq(), 1u);
  static_assert(!std::is_constructible_v<Validated<v1::FaultTransition>, v1::FaultTransition>);
  static_assert(!std::is_default_constructible_v<Validated<v1::FaultTransition>>);
}

TEST_F(StateTablesTest, AggregatesLoadWhatTheyWrote) {
  auto store = storage::MemoryStore::Open();
  ASSERT_TRUE(store.ok());
  FaultTable faults(&journal_);
  JobTable jobs(&journal_, &limits_);
  Mutation m;
  const v1::Fault f = AgentFault("n1", 0, v1::FAULT_LEVEL_SEPARATE);
  faults.Raise(KeyOf(f), f, &m);
  v1::Job job;
  job.set_id("j");
  job.set_kind(v1::JOB_KIND_INFERENCE);
  auto* rank = job.add_placement();
  rank->set_node("n1");
  rank->set_device_id(0);
  ASSERT_TRUE(jobs.Create(job, JobTable::kApiSource, &m).ok());
  ASSERT_TRUE((*store)->Write(m.changes).ok());

  Journal journal2(&clock_);
  FaultTable faults2(&journal2);
  JobTable jobs2(&journal2, &limits_);
  ASSERT_TRUE(faults2.Load(**store).ok());
  ASSERT_TRUE(jobs2.Load(**store).ok());
  EXPECT_EQ(faults2.size(), 1u);
  EXPECT_TRUE(faults2.IsActive(KeyOf(f)));
  EXPECT_EQ(jobs2.HitBy(f), std::vector<std::string>{"j"});
}

}  // namespace
}  // namespace clusterd
