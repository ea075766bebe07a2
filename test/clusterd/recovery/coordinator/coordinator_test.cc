// The recovery coordinator against a real store and ClusterState, with a fake
// clock, a fake actuator and a fake agent sink: what is decided, stored and
// dispatched, escalation, safety gates, and resuming after a restart.
#include "clusterd/recovery/coordinator/coordinator.h"

#include <gtest/gtest.h>

#include "clusterd/storage/rocksdb_store.h"
#include "common/time_proto.h"
#include "test/support/fakes/fake_actuator.h"
#include "test/support/state/state_fixtures.h"
#include "test/support/temp_dir.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;
using testing::MakeHello;
using testing::MakeTransition;

using testing::FakeActuator;

class FakeSink final : public JobAgentHub::Sink {
 public:
  void Send(v1::AttachResponse msg) override {
    if (msg.has_command()) commands.push_back(msg.command());
  }
  void Replaced() override { replaced = true; }
  std::vector<v1::Command> commands;
  bool replaced = false;
};

// Placement: rank i on node nodes[i / per_node], device i % per_node.
v1::Job MakeJob(const std::string& id, const std::vector<std::string>& nodes, int per_node = 2) {
  v1::Job job;
  job.set_id(id);
  job.set_kind(v1::JOB_KIND_TRAINING);
  uint32_t rank = 0;
  for (const auto& node : nodes) {
    for (int d = 0; d < per_node; ++d) {
      auto* p = job.add_placement();
      p->set_rank(rank++);
      p->set_node(node);
      p->set_device_id(static_cast<uint32_t>(d));
    }
  }
  job.mutable_policy()->mutable_hold_down()->set_seconds(1);
  return job;
}

constexpr char kRestartBusiness[] = "80E01801";  // RESTART_BUSINESS in the catalog
constexpr char kSeparate[] = "4C4BA00C";         // SEPARATE

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    coordinator_.reset();
    state_.reset();
    store_.reset();
    auto store = storage::RocksDbStore::Open(dir_.path(), storage::StoreOptions{.sync = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    ASSERT_TRUE(state_->Load().ok());
    actuator_.requests.clear();
    metrics_ = std::make_unique<MetricsRegistry>();
    coordinator_ = std::make_unique<Coordinator>(&hub_, &actuator_, &clock_, options_, metrics_.get());
  }

  // One Engine group: fn's changes, then the coordinator's tick, one commit,
  // then the dispatches.
  template <typename Fn>
  void Group(Fn&& fn) {
    Mutation m;
    fn(&m);
    std::vector<Engine::Done> after;
    coordinator_->Tick(*state_, clock_.Now(), &m, &after);
    state_->FlushDirty(&m);
    ASSERT_TRUE(store_->Write(m.changes).ok());
    state_->set_durable_revision(state_->revision());
    events_.insert(events_.end(), m.events.begin(), m.events.end());
    for (auto& d : after) d();
  }
  void Tick() {
    Group([](Mutation*) {});
  }

  void Register(const std::string& node, uint64_t session) {
    Group([&](Mutation* m) { ASSERT_TRUE(state_->ApplyHello(MakeHello(node, 1), session, m).ok()); });
  }
  void Raise(const std::string& node, uint64_t session, uint64_t seq, std::optional<uint32_t> device,
             const std::string& code, bool raise = true) {
    Group([&](Mutation* m) {
      auto r = state_->ApplyTransition(node, session, MakeTransition(1, seq, raise, device, code), m);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    });
  }
  void CreateJob(const v1::Job& job) {
    Group([&](Mutation* m) { ASSERT_TRUE(state_->ApplyCreateJob(job, m).ok()); });
  }
  void Answer(const std::string& key, bool ok, const std::string& message = "done") {
    Group([&](Mutation* m) { coordinator_->ApplyResult(*state_, key, ok, message, m); });
  }
  void Attach(const std::string& job) {
    sink_ = std::make_shared<FakeSink>();
    hub_.Attach(job, sink_);
  }
  const v1::Recovery& Rec(const std::string& id) {
    static const v1::Recovery kNone;
    auto it = state_->recoveries().find(id);
    return it == state_->recoveries().end() ? kNone : it->second;
  }
  v1::JobState JobState(const std::string& id) { return state_->jobs().at(id).state(); }

  // Two nodes, a 4-rank job on devices 0-1 of each, agent attached.
  void StandardSetup() {
    Register("w1", 1);
    Register("w2", 2);
    CreateJob(MakeJob("train", {"w1", "w2"}));
    Attach("train");
  }

  testing::TempDir dir_;
  Catalog catalog_ = Catalog::Default();
  FakeClock clock_;
  std::unique_ptr<MetricsRegistry> metrics_;
  CoordinatorOptions options_;
  JobAgentHub hub_;
  FakeActuator actuator_;
  std::shared_ptr<FakeSink> sink_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<v1::Event> events_;
};

TEST_F(CoordinatorTest, RestartBusinessRestartsProcessesAfterHoldDown) {
  StandardSetup();
  Raise("w1", 1, 1, 1, kRestartBusiness);
  EXPECT_TRUE(state_->recoveries().empty()) << "hold-down: nothing before 1 s";
  clock_.Advance(1500ms);
  Tick();
  const v1::Recovery& r = Rec("train.1");
  ASSERT_EQ(r.state(), v1::RECOVERY_STATE_RUNNING);
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  ASSERT_EQ(r.steps_size(), 1);
  EXPECT_EQ(r.steps(0).command(), v1::JOB_COMMAND_RESTART_PROCESSES);
  EXPECT_EQ(r.steps(0).state(), v1::STEP_STATE_RUNNING);
  EXPECT_EQ(JobState("train"), v1::JOB_STATE_RECOVERING);
  ASSERT_EQ(sink_->commands.size(), 1u);
  EXPECT_EQ(sink_->commands[0].id(), "train.1/0");
  EXPECT_EQ(sink_->commands[0].ranks_size(), 1);
  EXPECT_EQ(sink_->commands[0].ranks(0), 1u);

  Answer("train.1/0", true, "restarted");
  EXPECT_EQ(Rec("train.1").state(), v1::RECOVERY_STATE_SUCCEEDED);
  EXPECT_EQ(Rec("train.1").steps(0).message(), "restarted");
  EXPECT_EQ(JobState("train"), v1::JOB_STATE_RUNNING);
  // The handled fault starts nothing more, and a repeated ack changes nothing.
  const uint64_t rev = state_->revision();
  Answer("train.1/0", true);
  clock_.Advance(10s);
  Tick();
  EXPECT_EQ(state_->revision(), rev);
  EXPECT_EQ(state_->recoveries().size(), 1u);
  // Every transition is an event carrying the recovery.
  int started = 0, finished = 0;
  for (const auto& ev : events_) {
    started += ev.type() == v1::EVENT_TYPE_RECOVERY_STARTED;
    finished += ev.type() == v1::EVENT_TYPE_RECOVERY_FINISHED;
    if (ev.type() == v1::EVENT_TYPE_RECOVERY_FINISHED) {
      EXPECT_EQ(ev.job_ids(0), "train");
    }
  }
  EXPECT_EQ(started, 1);
  EXPECT_EQ(finished, 1);
}

TEST_F(CoordinatorTest, SeparateIsolatesThroughTheActuatorAndReschedules) {
  StandardSetup();
  Raise("w2", 2, 1, 0, kSeparate);
  clock_.Advance(2s);
  Tick();
  const v1::Recovery& r = Rec("train.1");
  ASSERT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  ASSERT_EQ(r.steps_size(), 4);
  EXPECT_EQ(r.steps(0).command(), v1::JOB_COMMAND_PAUSE);
  EXPECT_EQ(r.steps(1).action(), v1::CLUSTER_ACTION_ISOLATE_DEVICE);
  EXPECT_EQ(r.steps(2).action(), v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  EXPECT_EQ(r.steps(3).command(), v1::JOB_COMMAND_RESUME);
  Answer("train.1/0", true);
  ASSERT_EQ(actuator_.requests.size(), 1u);
  EXPECT_EQ(actuator_.requests[0].idempotency_key, "train.1/1");
  EXPECT_EQ(actuator_.requests[0].action, v1::CLUSTER_ACTION_ISOLATE_DEVICE);
  EXPECT_EQ(actuator_.requests[0].node, "w2");
  EXPECT_EQ(actuator_.requests[0].device, 0u);
  EXPECT_EQ(actuator_.requests[0].deadline, FromTimestamp(Rec("train.1").steps(1).deadline()));
  Answer("train.1/1", true);
  auto node = state_->GetNode([] {
    v1::GetNodeRequest req;
    req.set_name("w2");
    return req;
  }());
  ASSERT_TRUE(node.ok());
  EXPECT_TRUE(node->devices(0).isolated());
  EXPECT_FALSE(node->node().isolated());
  ASSERT_EQ(actuator_.requests.size(), 2u);
  EXPECT_EQ(actuator_.requests[1].action, v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  ASSERT_EQ(actuator_.requests[1].ranks.size(), 1u);
  EXPECT_EQ(actuator_.requests[1].ranks[0], 2u);
  Answer("train.1/2", true);
  Answer("train.1/3", true);
  EXPECT_EQ(Rec("train.1").state(), v1::RECOVERY_STATE_SUCCEEDED);
  // Uncordon returns the device to service.
  Group([&](Mutation* m) { ASSERT_TRUE(state_->ApplyCordon("w2", false, "ops", "replaced", m).ok()); });
  auto after = state_->GetNode([] {
    v1::GetNodeRequest req;
    req.set_name("w2");
    return req;
  }());
  EXPECT_FALSE(after->devices(0).isolated());
}

TEST_F(CoordinatorTest, MissedDeadlineEscalatesDownTheLadder) {
  StandardSetup();
  Raise("w1", 1, 1, 0, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  ASSERT_EQ(Rec("train.1").steps(0).state(), v1::STEP_STATE_RUNNING);
  clock_.Advance(5min + 1s);  // PROCESS_RESTART's default step timeout
  Tick();
  const v1::Recovery& r = Rec("train.1");
  EXPECT_EQ(r.steps(0).state(), v1::STEP_STATE_TIMED_OUT);
  EXPECT_EQ(r.state(), v1::RECOVERY_STATE_RUNNING);
  EXPECT_EQ(r.initial_strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  ASSERT_GT(r.steps_size(), 1);
  EXPECT_EQ(r.steps(1).command(), v1::JOB_COMMAND_PAUSE);
  EXPECT_EQ(r.steps(1).state(), v1::STEP_STATE_RUNNING);
  EXPECT_NE(r.reasons(r.reasons_size() - 1).find("timed out"), std::string::npos);
  // The late answer to the timed-out step changes nothing.
  Answer("train.1/0", true);
  EXPECT_EQ(Rec("train.1").steps(0).state(), v1::STEP_STATE_TIMED_OUT);
}

TEST_F(CoordinatorTest, FailuresWalkTheLadderToFail) {
  StandardSetup();
  Raise("w1", 1, 1, 0, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  // Fail whatever is asked until the recovery ends.
  for (int guard = 0; guard < 20 && Rec("train.1").state() == v1::RECOVERY_STATE_RUNNING; ++guard) {
    for (const auto& s : Rec("train.1").steps()) {
      if (s.state() == v1::STEP_STATE_RUNNING) {
        Answer(s.idempotency_key(), false, "boom");
        break;
      }
    }
  }
  const v1::Recovery& r = Rec("train.1");
  EXPECT_EQ(r.state(), v1::RECOVERY_STATE_FAILED);
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_FAIL);
  EXPECT_EQ(JobState("train"), v1::JOB_STATE_FAILED);
  // PROCESS_RESTART, POD_RESCHEDULE, JOB_RESCHEDULE, SCALE_IN each failed once.
  std::set<v1::RecoveryStrategy> failed;
  for (const auto& s : r.steps()) {
    if (s.state() == v1::STEP_STATE_FAILED) failed.insert(s.strategy());
  }
  EXPECT_EQ(failed.size(), 4u);
  EXPECT_NE(metrics_->Render().find("clusterd_recoveries_failed_total 1"), std::string::npos);
}

TEST_F(CoordinatorTest, AWorseFaultDuringARecoveryMovesItDownTheLadder) {
  StandardSetup();
  Raise("w1", 1, 1, 0, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  ASSERT_EQ(Rec("train.1").strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  ASSERT_EQ(Rec("train.1").steps(0).state(), v1::STEP_STATE_RUNNING);
  // While the restart runs, a SEPARATE fault on another rank of the job.
  Raise("w2", 2, 1, 1, kSeparate);
  EXPECT_EQ(Rec("train.1").strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART) << "hold-down first";
  clock_.Advance(2s);
  Tick();
  ASSERT_EQ(state_->recoveries().size(), 1u) << "the same recovery, not a second one";
  const v1::Recovery& r = Rec("train.1");
  EXPECT_EQ(r.state(), v1::RECOVERY_STATE_RUNNING);
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  EXPECT_EQ(r.initial_strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  EXPECT_EQ(r.trigger_fault_ids_size(), 2);
  EXPECT_EQ(r.hit_ranks_size(), 2);
  EXPECT_EQ(r.steps(0).state(), v1::STEP_STATE_SKIPPED);
  EXPECT_NE(r.steps(0).message().find("superseded"), std::string::npos);
  ASSERT_GT(r.steps_size(), 1);
  EXPECT_EQ(r.steps(1).command(), v1::JOB_COMMAND_PAUSE);
  EXPECT_EQ(r.steps(1).state(), v1::STEP_STATE_RUNNING);
  ASSERT_EQ(r.isolate_devices_size(), 1);
  EXPECT_EQ(r.isolate_devices(0).node(), "w2");
  // The late answer to the superseded restart changes nothing.
  Answer("train.1/0", true);
  EXPECT_EQ(Rec("train.1").steps(0).state(), v1::STEP_STATE_SKIPPED);
  // A milder fault does not disturb the running plan.
  const int steps = Rec("train.1").steps_size();
  Raise("w1", 1, 2, 1, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  EXPECT_EQ(Rec("train.1").steps_size(), steps);
  EXPECT_EQ(state_->recoveries().size(), 1u);
}

TEST_F(CoordinatorTest, FlapAndCordonStartNothing) {
  StandardSetup();
  Raise("w1", 1, 1, 0, kRestartBusiness);
  clock_.Advance(300ms);
  Raise("w1", 1, 2, 0, kRestartBusiness, /*raise=*/false);
  clock_.Advance(5s);
  Tick();
  EXPECT_TRUE(state_->recoveries().empty());
  Group([&](Mutation* m) { ASSERT_TRUE(state_->ApplyCordon("w2", true, "ops", "maintenance", m).ok()); });
  Raise("w2", 2, 1, 1, kSeparate);
  clock_.Advance(5s);
  Tick();
  EXPECT_TRUE(state_->recoveries().empty());
}

TEST_F(CoordinatorTest, ANodeThatDiesWithItsDevicesIsOneRecovery) {
  StandardSetup();
  Raise("w2", 2, 1, std::nullopt, kSeparate);  // node-level
  for (uint32_t d = 0; d < 8; ++d) Raise("w2", 2, 2 + d, d, kSeparate);
  clock_.Advance(2s);
  Tick();
  ASSERT_EQ(state_->recoveries().size(), 1u);
  const v1::Recovery& r = Rec("train.1");
  EXPECT_EQ(r.trigger_fault_ids_size(), 3) << "the node fault and the two devices that carry ranks";
  EXPECT_EQ(r.hit_ranks_size(), 2);
  ASSERT_EQ(r.isolate_nodes_size(), 1);
  EXPECT_EQ(r.isolate_nodes(0), "w2");
  EXPECT_EQ(r.isolate_devices_size(), 0) << "devices of an isolated node are not isolated one by one";
}

TEST_F(CoordinatorTest, PauseHoldsRecoveriesThatSayWhy) {
  StandardSetup();
  v1::SetRecoveryModeRequest pause;
  pause.set_recovery_paused(true);
  pause.set_actor("ops");
  pause.set_reason("test");
  Group([&](Mutation* m) { ASSERT_TRUE(state_->ApplySetRecoveryMode(pause, m).ok()); });
  Raise("w1", 1, 1, 0, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  EXPECT_EQ(Rec("train.1").state(), v1::RECOVERY_STATE_WAITING);
  EXPECT_NE(Rec("train.1").wait_reason().find("paused"), std::string::npos);
  EXPECT_TRUE(sink_->commands.empty());
  const uint64_t rev = state_->revision();
  Tick();
  EXPECT_EQ(state_->revision(), rev) << "an unchanged wait is not stored again";
  pause.set_recovery_paused(false);
  Group([&](Mutation* m) { ASSERT_TRUE(state_->ApplySetRecoveryMode(pause, m).ok()); });
  EXPECT_EQ(Rec("train.1").state(), v1::RECOVERY_STATE_RUNNING);
  EXPECT_EQ(sink_->commands.size(), 1u);
}

TEST_F(CoordinatorTest, ConcurrencyLimitQueuesTheSecondJob) {
  options_.limits.max_concurrent_recoveries = 1;
  Open();
  Register("w1", 1);
  Register("w2", 2);
  CreateJob(MakeJob("a", {"w1"}));
  CreateJob(MakeJob("b", {"w2"}));
  Raise("w1", 1, 1, 0, kRestartBusiness);
  Raise("w2", 2, 1, 0, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  EXPECT_EQ(Rec("a.1").state(), v1::RECOVERY_STATE_RUNNING);
  EXPECT_EQ(Rec("b.1").state(), v1::RECOVERY_STATE_WAITING);
  EXPECT_NE(Rec("b.1").wait_reason().find("max_concurrent_recoveries"), std::string::npos);
  Answer("a.1/0", true);
  EXPECT_EQ(Rec("a.1").state(), v1::RECOVERY_STATE_SUCCEEDED);
  EXPECT_EQ(Rec("b.1").state(), v1::RECOVERY_STATE_RUNNING) << "the freed slot goes to the waiting job";
}

TEST_F(CoordinatorTest, TheJobRetryBudgetCountsStoredRecoveries) {
  Register("w1", 1);
  Register("w2", 2);
  v1::Job job = MakeJob("train", {"w1", "w2"});
  job.mutable_policy()->set_max_retries_per_job(1);
  CreateJob(job);
  Attach("train");
  Raise("w1", 1, 1, 0, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  Answer("train.1/0", true);
  ASSERT_EQ(Rec("train.1").state(), v1::RECOVERY_STATE_SUCCEEDED);
  // A second incident within the budget window: the budget of 1 is spent.
  Raise("w2", 2, 1, 1, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  const v1::Recovery& r = Rec("train.2");
  EXPECT_EQ(r.state(), v1::RECOVERY_STATE_FAILED);
  EXPECT_NE(r.message().find("job retry budget exhausted"), std::string::npos) << r.message();
  EXPECT_EQ(JobState("train"), v1::JOB_STATE_FAILED);
  EXPECT_EQ(sink_->commands.size(), 1u) << "nothing was sent for the refused recovery";
}

TEST_F(CoordinatorTest, DryRunRecordsOnceAndActsOnNothing) {
  StandardSetup();
  v1::SetRecoveryModeRequest dry;
  dry.set_dry_run(true);
  dry.set_actor("ops");
  dry.set_reason("test");
  Group([&](Mutation* m) { ASSERT_TRUE(state_->ApplySetRecoveryMode(dry, m).ok()); });
  Raise("w2", 2, 1, 0, kSeparate);
  clock_.Advance(2s);
  Tick();
  Tick();
  ASSERT_EQ(state_->recoveries().size(), 1u);
  const v1::Recovery& r = Rec("train.1");
  EXPECT_EQ(r.state(), v1::RECOVERY_STATE_DRY_RUN);
  EXPECT_TRUE(r.dry_run());
  for (const auto& s : r.steps()) EXPECT_EQ(s.state(), v1::STEP_STATE_SKIPPED);
  EXPECT_TRUE(sink_->commands.empty());
  EXPECT_TRUE(actuator_.requests.empty());
  EXPECT_EQ(JobState("train"), v1::JOB_STATE_RUNNING);
  // Dry-run off: the still-active fault is acted on for real.
  dry.set_dry_run(false);
  Group([&](Mutation* m) { ASSERT_TRUE(state_->ApplySetRecoveryMode(dry, m).ok()); });
  EXPECT_EQ(Rec("train.2").state(), v1::RECOVERY_STATE_RUNNING);
}

TEST_F(CoordinatorTest, DeletedJobCancelsItsRecovery) {
  StandardSetup();
  Raise("w1", 1, 1, 0, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  Group([&](Mutation* m) { ASSERT_TRUE(state_->ApplyDeleteJob("train", m).ok()); });
  EXPECT_EQ(Rec("train.1").state(), v1::RECOVERY_STATE_CANCELLED);
}

TEST_F(CoordinatorTest, AnAgentAnswersOnlyItsOwnJob) {
  StandardSetup();
  Raise("w1", 1, 1, 0, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  Group([&](Mutation* m) { coordinator_->ApplyResult(*state_, "train.1/0", true, "x", m, "other"); });
  EXPECT_EQ(Rec("train.1").steps(0).state(), v1::STEP_STATE_RUNNING);
  Group([&](Mutation* m) { coordinator_->ApplyResult(*state_, "garbage", true, "x", m); });
  Group([&](Mutation* m) { coordinator_->ApplyResult(*state_, "train.1/99", true, "x", m); });
  EXPECT_EQ(Rec("train.1").state(), v1::RECOVERY_STATE_RUNNING);
}

TEST_F(CoordinatorTest, RestartResumesTheStepInFlightAndNeverRepeatsADoneOne) {
  StandardSetup();
  Raise("w2", 2, 1, 0, kSeparate);
  clock_.Advance(2s);
  Tick();
  Answer("train.1/0", true);                 // PAUSE acked
  ASSERT_EQ(actuator_.requests.size(), 1u);  // isolate_device in flight...
  Answer("train.1/1", true);                 // ...done
  ASSERT_EQ(actuator_.requests.size(), 2u);  // reschedule_pods in flight: "crash" now
  Open();                                    // a new process: state reloaded from disk
  Tick();
  ASSERT_EQ(actuator_.requests.size(), 1u) << "only the step in flight is asked for again";
  EXPECT_EQ(actuator_.requests[0].idempotency_key, "train.1/2");
  EXPECT_EQ(Rec("train.1").steps(1).state(), v1::STEP_STATE_SUCCEEDED);
  Answer("train.1/2", true);
  // The agent's step waits for it to attach, then arrives with its id.
  auto pending = coordinator_->PendingCommands(*state_, "train");
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].id(), "train.1/3");
  EXPECT_EQ(pending[0].kind(), v1::JOB_COMMAND_RESUME);
  Answer("train.1/3", true);
  EXPECT_EQ(Rec("train.1").state(), v1::RECOVERY_STATE_SUCCEEDED);
  // The ids keep counting after a reload.
  EXPECT_EQ(state_->NextRecoveryId("train"), "train.2");
}

// ---- jobs without an agent (most discovered jobs: Volcano, Kubeflow, StatefulSets) ----

double MetricOf(const MetricsRegistry& metrics, const std::string& name) {
  const std::string text = metrics.Render();
  const auto at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

TEST_F(CoordinatorTest, AJobWithoutAnAgentSkipsItsCommandsAfterTheAttachGrace) {
  Register("w1", 1);
  Register("w2", 2);
  CreateJob(MakeJob("train", {"w1", "w2"}));  // no agent ever attaches
  Raise("w2", 2, 1, 0, kSeparate);
  clock_.Advance(2s);
  Tick();
  const TimePoint started = clock_.Now();
  {
    const v1::Recovery& r = Rec("train.1");
    ASSERT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
    ASSERT_EQ(r.steps(0).command(), v1::JOB_COMMAND_PAUSE);
    EXPECT_EQ(r.steps(0).state(), v1::STEP_STATE_RUNNING);
    // It waits the attach grace, not the rung's timeout.
    EXPECT_EQ(FromTimestamp(r.steps(0).deadline()), started + options_.agent_attach_grace);
    EXPECT_NE(r.steps(0).message().find("for the job's agent to attach"), std::string::npos) << r.steps(0).message();
    EXPECT_TRUE(actuator_.requests.empty());
  }
  clock_.Advance(options_.agent_attach_grace);
  Tick();
  {
    const v1::Recovery& r = Rec("train.1");
    EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE) << "skipping is not escalating";
    EXPECT_EQ(r.steps(0).state(), v1::STEP_STATE_SKIPPED);
    EXPECT_NE(r.steps(0).message().find("has no agent attached"), std::string::npos) << r.steps(0).message();
    EXPECT_EQ(r.steps(1).state(), v1::STEP_STATE_RUNNING);
  }
  ASSERT_EQ(actuator_.requests.size(), 1u);
  EXPECT_EQ(actuator_.requests[0].action, v1::CLUSTER_ACTION_ISOLATE_DEVICE);
  Answer("train.1/1", true);
  ASSERT_EQ(actuator_.requests.size(), 2u);
  EXPECT_EQ(actuator_.requests[1].action, v1::CLUSTER_ACTION_RESCHEDULE_PODS);
  Answer("train.1/2", true);
  // RESUME: the grace is long over, skipped at once; the recovery is done.
  const v1::Recovery& r = Rec("train.1");
  EXPECT_EQ(r.steps(3).state(), v1::STEP_STATE_SKIPPED);
  EXPECT_EQ(r.state(), v1::RECOVERY_STATE_SUCCEEDED);
  EXPECT_EQ(MetricOf(*metrics_, "clusterd_recovery_agent_steps_skipped_total"), 2);
  EXPECT_EQ(MetricOf(*metrics_, "clusterd_recovery_escalations_total"), 0);
}

TEST_F(CoordinatorTest, AnAgentThatAttachesWithinTheGraceGetsTheWholeTimeout) {
  Register("w1", 1);
  Register("w2", 2);
  CreateJob(MakeJob("train", {"w1", "w2"}));
  Raise("w2", 2, 1, 0, kSeparate);
  clock_.Advance(2s);
  Tick();
  const TimePoint started = clock_.Now();
  ASSERT_EQ(Rec("train.1").steps(0).state(), v1::STEP_STATE_RUNNING);
  clock_.Advance(10s);
  Attach("train");  // the job service hands it PendingCommands
  clock_.Advance(options_.agent_attach_grace);
  Tick();
  const v1::Recovery& r = Rec("train.1");
  EXPECT_EQ(r.steps(0).state(), v1::STEP_STATE_RUNNING);
  EXPECT_GT(FromTimestamp(r.steps(0).deadline()), started + options_.agent_attach_grace);
  EXPECT_TRUE(actuator_.requests.empty());
  Answer("train.1/0", true);
  ASSERT_EQ(actuator_.requests.size(), 1u);
  EXPECT_EQ(MetricOf(*metrics_, "clusterd_recovery_agent_steps_skipped_total"), 0);
}

TEST_F(CoordinatorTest, ARungThatIsTheAgentsOwnWorkEscalatesWithoutOne) {
  Register("w1", 1);
  Register("w2", 2);
  CreateJob(MakeJob("train", {"w1", "w2"}));
  Raise("w1", 1, 1, 1, kRestartBusiness);
  clock_.Advance(2s);
  Tick();
  ASSERT_EQ(Rec("train.1").strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  clock_.Advance(options_.agent_attach_grace);
  Tick();
  // PROCESS_RESTART cannot be done without an agent: the next rung, whose
  // PAUSE is skipped at once (the grace is spent), moves the pod.
  const v1::Recovery& r = Rec("train.1");
  EXPECT_EQ(r.initial_strategy(), v1::RECOVERY_STRATEGY_PROCESS_RESTART);
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  EXPECT_EQ(r.steps(0).state(), v1::STEP_STATE_SKIPPED);
  EXPECT_NE(r.steps(0).message().find("PROCESS_RESTART needs one"), std::string::npos) << r.steps(0).message();
  ASSERT_GT(r.steps_size(), 2);
  EXPECT_EQ(r.steps(1).command(), v1::JOB_COMMAND_PAUSE);
  EXPECT_EQ(r.steps(1).state(), v1::STEP_STATE_SKIPPED);
  ASSERT_FALSE(actuator_.requests.empty());
  EXPECT_EQ(MetricOf(*metrics_, "clusterd_recovery_escalations_total"), 1);
}

TEST_F(CoordinatorTest, APolicyThatRequiresAnAgentWaitsForIt) {
  Register("w1", 1);
  Register("w2", 2);
  v1::Job job = MakeJob("train", {"w1", "w2"});
  job.mutable_policy()->set_require_agent(true);
  CreateJob(job);
  Raise("w2", 2, 1, 0, kSeparate);
  clock_.Advance(2s);
  Tick();
  const TimePoint started = clock_.Now();
  EXPECT_GT(FromTimestamp(Rec("train.1").steps(0).deadline()), started + options_.agent_attach_grace);
  clock_.Advance(options_.agent_attach_grace + 1s);
  Tick();
  EXPECT_EQ(Rec("train.1").steps(0).state(), v1::STEP_STATE_RUNNING);
  EXPECT_TRUE(actuator_.requests.empty()) << "no pod moves before the agent paused the job";
}

TEST_F(CoordinatorTest, TheJobsOwnAttachGraceWins) {
  Register("w1", 1);
  Register("w2", 2);
  v1::Job job = MakeJob("train", {"w1", "w2"});
  job.mutable_policy()->mutable_agent_attach_grace()->set_seconds(5);
  CreateJob(job);
  Raise("w2", 2, 1, 0, kSeparate);
  clock_.Advance(2s);
  Tick();
  clock_.Advance(5s);
  Tick();
  EXPECT_EQ(Rec("train.1").steps(0).state(), v1::STEP_STATE_SKIPPED);
  ASSERT_EQ(actuator_.requests.size(), 1u);
}

}  // namespace
}  // namespace clusterd
