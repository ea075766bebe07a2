// The progress monitor (clusterd/progress/monitor.h) on its own: a real
// ClusterState and Engine on a MemoryStore, the writer stepped by hand, and
// the monitor's passes on a ManualExecutor (common/executor.h) over a
// FakeClock. A 2 s hang timeout passes in microseconds: the test moves the
// clock, the monitor's pass at the hang's due time raises JOB_HANG, the
// writer commits it, and the job advancing again clears it.
#include "clusterd/progress/monitor.h"

#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include "common/executor.h"
#include "common/metrics.h"
#include "test/support/state/state_fixtures.h"
#include "test/support/state/writer_on_memory.h"

namespace clusterd {
namespace {

using google::protobuf::util::TimeUtil;
using namespace std::chrono_literals;

constexpr uint32_t kRanks = 8;

class ProgressMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.node_grace = std::chrono::hours(24 * 365);  // no node is lost while the clock jumps
    options.commit_delay = 0ns;
    writer_.Open(&clock_, options, &metrics_);
    monitor_ = std::make_unique<ProgressMonitor>(
        writer_.state(), [this](Engine::Apply apply) { return writer_.engine()->Submit(std::move(apply)); }, &clock_,
        ProgressOptions{}, &metrics_);
    Write([](ClusterState& s, Mutation* m) { return s.ApplyHello(testing::MakeHello("worker01", 1), 1, m).status(); });
  }

  void TearDown() override {
    monitor_->Stop();
    monitor_.reset();
  }

  template <typename Fn>
  void Write(Fn fn) {
    writer_.Write(fn);
    writer_.Idle();
  }
  // The monitor's passes due in the next `d`, then the writer (what the
  // monitor submitted is then committed).
  void Advance(Duration d) {
    executor_.Advance(d);
    writer_.Idle();
  }

  void CreateJob(std::chrono::seconds hang_timeout) {
    v1::Job job;
    job.set_id("train");
    job.set_kind(v1::JOB_KIND_TRAINING);
    job.mutable_policy()->mutable_hold_down()->set_seconds(0);
    job.mutable_policy()->mutable_progress()->mutable_hang_timeout()->set_seconds(hang_timeout.count());
    for (uint32_t r = 0; r < kRanks; ++r) {
      auto* p = job.add_placement();
      p->set_rank(r);
      p->set_node("worker01");
      p->set_device_id(r);
    }
    Write([job](ClusterState& s, Mutation* m) { return s.ApplyCreateJob(job, m).status(); });
  }
  v1::Job Job() {
    return writer_.state()->Read([](const StateView& v) { return v.jobs().at("train"); });
  }
  // Every rank at `step`, one second a step, from the job's agent.
  Status Steps(uint64_t step) {
    v1::ProgressReport r;
    for (uint32_t k = 0; k < kRanks; ++k) {
      auto* p = r.add_ranks();
      p->set_rank(k);
      p->set_step(step);
      *p->mutable_step_time() = TimeUtil::MillisecondsToDuration(1000);
    }
    return monitor_->Report(Job(), r, ProgressSender{"job-agent", kRanks});
  }
  std::vector<v1::Fault> ActiveFaults(const std::string& code) {
    return writer_.state()->Read([&](const StateView& v) {
      std::vector<v1::Fault> out;
      for (const auto& [key, f] : v.faults()) {
        if (f.reporter() == ProgressMonitor::kReporter && f.code() == code && f.state() == v1::FAULT_STATE_ACTIVE) {
          out.push_back(f);
        }
      }
      return out;
    });
  }

  FakeClock clock_;
  ManualExecutor executor_{&clock_};
  MetricsRegistry metrics_;
  testing::WriterOnMemory writer_;
  std::unique_ptr<ProgressMonitor> monitor_;
};

TEST_F(ProgressMonitorTest, AJobThatStopsHangsAtItsTimeoutOnTheClockAndClearsWhenItAdvances) {
  CreateJob(2s);
  monitor_->Start(&executor_);
  ASSERT_EQ(executor_.RunReady(), 1u) << "the first pass runs at once";
  ASSERT_TRUE(Steps(10).ok());
  Advance(1s);
  ASSERT_TRUE(Steps(20).ok());
  // Then nothing: every rank stops at step 20.
  Advance(1s);
  EXPECT_TRUE(ActiveFaults("JOB_HANG").empty()) << "1 s of the 2 s timeout has passed";
  Advance(2s);
  const auto hangs = ActiveFaults("JOB_HANG");
  ASSERT_EQ(hangs.size(), 1u) << "no rank to blame: one fault names the job";
  EXPECT_EQ(hangs[0].level(), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_NE(hangs[0].message().find("no rank advanced past step 20"), std::string::npos) << hangs[0].message();
  EXPECT_EQ(Job().progress().state(), v1::PROGRESS_STATE_HUNG) << "the snapshot follows the hang";
  // The job advances again: the next pass clears JOB_HANG.
  ASSERT_TRUE(Steps(30).ok());
  Advance(1s);
  EXPECT_TRUE(ActiveFaults("JOB_HANG").empty());
}

TEST_F(ProgressMonitorTest, ThePassesFollowTheIntervalAndTheHangsDueTimeAndStopEndsThem) {
  CreateJob(2s);
  monitor_->Start(&executor_);
  executor_.RunReady();
  const TimePoint start = clock_.Now();
  // Nothing reported: one pass every interval (1 s).
  EXPECT_EQ(executor_.NextDue(), start + 1s);
  ASSERT_TRUE(Steps(10).ok());
  Advance(500ms);
  // At start + 0.5 s: with a 2 s timeout the hang is due 2 s after this
  // last advance (and a millisecond, to be past it).
  ASSERT_TRUE(Steps(20).ok());
  Advance(1s);     // the pass at start + 1 s; the clock at 1.5 s
  Advance(600ms);  // the pass at 2 s; the clock at 2.1 s
  EXPECT_EQ(executor_.NextDue(), start + 2501ms) << "the hang's due time comes before the next interval (3 s)";
  monitor_->Stop();
  EXPECT_EQ(executor_.Advance(10s), 0u) << "no pass after Stop";
  writer_.Idle();
  EXPECT_TRUE(ActiveFaults("JOB_HANG").empty());
}

// Where the adapters hand reports in: a node speaks for its own ranks only,
// the job's agent for every rank, and neither for a job ClusterD does not know.
TEST_F(ProgressMonitorTest, ANodeReportsOnlyItsOwnRanksOfAJobThatExists) {
  CreateJob(2s);  // ranks 0-7 on worker01
  v1::JobProgressReport node_report;
  node_report.set_job_id("train");
  auto* p = node_report.mutable_report()->add_ranks();
  p->set_rank(0);
  p->set_step(10);
  EXPECT_TRUE(monitor_->ReportFromNode("worker01", node_report).ok());
  const Status elsewhere = monitor_->ReportFromNode("worker02", node_report);
  EXPECT_EQ(elsewhere.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(elsewhere.message().find("rank 0 of job train is not placed on node worker02"), std::string::npos)
      << elsewhere.message();
  node_report.set_job_id("gone");
  EXPECT_EQ(monitor_->ReportFromNode("worker01", node_report).code(), StatusCode::kNotFound);
  node_report.set_job_id("not a name!");
  EXPECT_EQ(monitor_->ReportFromNode("worker01", node_report).code(), StatusCode::kInvalidArgument);
  // The job's agent: every rank, and its rank must be one of the job's.
  v1::ProgressReport agent = node_report.report();
  agent.mutable_ranks(0)->set_rank(7);
  EXPECT_TRUE(monitor_->ReportFromJobAgent("train", agent).ok());
  EXPECT_EQ(monitor_->ReportFromJobAgent("gone", agent).code(), StatusCode::kNotFound);
  agent.mutable_ranks(0)->set_rank(kRanks);
  EXPECT_EQ(monitor_->ReportFromJobAgent("train", agent).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(monitor_->Live("train").has_value());
  EXPECT_EQ(monitor_->Live("train")->step(), 10u);
}

TEST_F(ProgressMonitorTest, ReportsOfAJobThatIsNotRunningAreRefusedAndNothingIsKept) {
  CreateJob(2s);
  v1::ProgressReport r;
  auto* p = r.add_ranks();
  p->set_rank(0);
  p->set_step(1);
  v1::Job done = Job();
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  const Status not_running = monitor_->Report(done, r, ProgressSender{"job-agent", kRanks});
  EXPECT_EQ(not_running.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_running.message().find("is not running"), std::string::npos) << not_running.message();
  EXPECT_EQ(monitor_->Live("train"), std::nullopt) << "nothing of a refused report is kept";
}

}  // namespace
}  // namespace clusterd
