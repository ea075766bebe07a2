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
#include "state_fixtures.h"
#include "writer_on_memory.h"

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
  ASSERT_TRUE(Steps(20).ok());  // at start + 0.5 s: the hang is due at 2.5 s
  Advance(1s);                  // the pass at start + 1 s
  Advance(1s);                  // ... at 2 s: the next is the hang's due time, before 3 s
  EXPECT_EQ(executor_.NextDue(), start + 2500ms);
  monitor_->Stop();
  EXPECT_EQ(executor_.Advance(10s), 0u) << "no pass after Stop";
  writer_.Idle();
  EXPECT_TRUE(ActiveFaults("JOB_HANG").empty());
}

TEST_F(ProgressMonitorTest, ReportsOfAJobThatIsNotRunningOrOfRanksItDoesNotHaveAreRefused) {
  CreateJob(2s);
  v1::ProgressReport r;
  auto* p = r.add_ranks();
  p->set_rank(kRanks);  // not a rank of the job
  p->set_step(1);
  const Status st = monitor_->Report(Job(), r, ProgressSender{"job-agent", kRanks});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  v1::Job done = Job();
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  r.mutable_ranks(0)->set_rank(0);
  const Status not_running = monitor_->Report(done, r, ProgressSender{"job-agent", kRanks});
  EXPECT_EQ(not_running.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_running.message().find("is not running"), std::string::npos) << not_running.message();
  EXPECT_EQ(monitor_->Live("train"), std::nullopt) << "nothing of a refused report is kept";
}

}  // namespace
}  // namespace clusterd
