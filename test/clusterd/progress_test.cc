// The progress tracker (clusterd/progress/tracker.h) on synthetic progress
// series: steady, one slow rank, gradual drift, noise, warm-up, a
// checkpoint pause, hangs (attributed and not), clock skew, missing reports,
// restarts, ETTR against injected downtime, and hostile reports.
#include "clusterd/progress/tracker.h"

#include <random>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include "common/time_proto.h"

namespace clusterd::progress {
namespace {

using google::protobuf::util::TimeUtil;
using std::chrono::milliseconds;
using std::chrono::seconds;

const TimePoint kStart = TimePoint(seconds(1'700'000'000));
constexpr Duration kInterval = seconds(10);  // the agents' report interval

double Secs(const google::protobuf::Duration& d) { return TimeUtil::DurationToNanoseconds(d) / 1e9; }

// A job of `ranks` ranks whose agents report every kInterval: each report
// carries each rank's step and its step time (compute, less collectives).
class Series {
 public:
  explicit Series(uint32_t ranks, Settings s = {}) : ranks_(ranks), tracker_(s), now_(kStart), step_(ranks, 0) {}

  // One report interval: each rank advances `steps` steps taking
  // time(rank) seconds each.
  template <typename TimeOf>
  void Tick(TimeOf time, uint64_t steps = 10, const Context& ctx = {}) {
    now_ += kInterval;
    v1::ProgressReport r;
    for (uint32_t k = 0; k < ranks_; ++k) {
      step_[k] += steps;
      auto* p = r.add_ranks();
      p->set_rank(k);
      p->set_step(step_[k]);
      *p->mutable_step_time() = TimeUtil::NanosecondsToDuration(static_cast<int64_t>(time(k) * 1e9));
    }
    tracker_.Ingest(r, now_);
    last_ = tracker_.Evaluate(now_, ctx);
  }
  void Steady(int n, double t = 1.0) {
    for (int i = 0; i < n; ++i) Tick([t](uint32_t) { return t; });
  }
  // Time passes without a report; the tracker is evaluated every second.
  void Idle(Duration d, const Context& ctx = {}) {
    for (Duration e{0}; e < d; e += seconds(1)) {
      now_ += seconds(1);
      last_ = tracker_.Evaluate(now_, ctx);
    }
  }

  JobTracker& tracker() { return tracker_; }
  const Verdict& last() const { return last_; }
  TimePoint now() const { return now_; }
  std::vector<uint64_t>& steps() { return step_; }
  void set_now(TimePoint t) { now_ = t; }

 private:
  uint32_t ranks_;
  JobTracker tracker_;
  TimePoint now_;
  std::vector<uint64_t> step_;
  Verdict last_;
};

std::vector<uint32_t> SlowRanks(const Verdict& v) {
  std::vector<uint32_t> out;
  for (const auto& s : v.slow_ranks) out.push_back(s.rank);
  return out;
}

TEST(ProgressTracker, SteadyJobAdvancesWithNoFindingsAndFullEttr) {
  Series s(64);
  s.Steady(60);
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_ADVANCING);
  EXPECT_TRUE(s.last().slow_ranks.empty());
  EXPECT_TRUE(s.last().hung_ranks.empty());
  const v1::JobProgress p = s.tracker().Snapshot(s.now());
  EXPECT_EQ(p.step(), 600u);
  EXPECT_EQ(p.ranks_reporting(), 64u);
  EXPECT_DOUBLE_EQ(p.ettr(), 1.0);
  EXPECT_NEAR(Secs(p.median_step_time()), 1.0, 1e-6);
  EXPECT_EQ(Secs(p.lost()), 0);
  // 10 x the median step is below the floor.
  EXPECT_EQ(Secs(p.hang_timeout()), 60);
}

TEST(ProgressTracker, OneRankFortyPercentSlowIsNamedWithinThreeWindowsWithEvidence) {
  Series s(64);
  s.Steady(10);
  const Settings& st = s.tracker().settings();
  int reports = 0;
  while (s.last().slow_ranks.empty() && reports < 100) {
    s.Tick([](uint32_t k) { return k == 17 ? 1.4 : 1.0; });
    ++reports;
  }
  EXPECT_LE(reports, static_cast<int>(3 * st.window));
  ASSERT_EQ(SlowRanks(s.last()), std::vector<uint32_t>{17});
  EXPECT_NEAR(s.last().slow_ranks[0].step_time, 1.4, 1e-6);
  EXPECT_NEAR(s.last().slow_ranks[0].job_median, 1.0, 1e-6);
  EXPECT_EQ(s.last().slow_ranks[0].window, st.window);
  // Back to normal: no longer named (once its window forgets the slow steps).
  for (int i = 0; i < 10; ++i) s.Tick([](uint32_t) { return 1.0; });
  EXPECT_TRUE(s.last().slow_ranks.empty());
}

TEST(ProgressTracker, ASingleSlowSampleIsNotASlowRank) {
  Series s(16);
  s.Steady(10);
  for (int i = 0; i < 20; ++i) {
    // Rank 3 has one bad step per window, never a majority of its window.
    s.Tick([i](uint32_t k) { return k == 3 && i % 5 == 0 ? 3.0 : 1.0; });
    EXPECT_TRUE(s.last().slow_ranks.empty()) << "report " << i;
  }
}

TEST(ProgressTracker, GradualDriftIsNamedOnceItPassesTheThreshold) {
  Series s(32);
  s.Steady(10);
  double t = 1.0;
  int named_at = -1;
  for (int i = 0; i < 60 && named_at < 0; ++i) {
    t += 0.01;  // 1 % slower each report
    const double now = t;
    s.Tick([now](uint32_t k) { return k == 9 ? now : 1.0; });
    if (!s.last().slow_ranks.empty()) named_at = i;
    if (named_at < 0) {
      EXPECT_LE(t, 1.36) << "not named although 30 % slower over the whole window";
    }
  }
  ASSERT_GE(named_at, 0);
  EXPECT_EQ(SlowRanks(s.last()), std::vector<uint32_t>{9});
  // Not named before its window's median was 30 % above the job's.
  EXPECT_GE(1.0 + 0.01 * (named_at + 1), 1.30);
}

TEST(ProgressTracker, ANoisyJobHasNoSlowRank) {
  Series s(128);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(0.8, 1.2);  // +-20 % per sample
  for (int i = 0; i < 200; ++i) {
    s.Tick([&](uint32_t) { return noise(rng); });
    ASSERT_TRUE(s.last().slow_ranks.empty()) << "report " << i << ": rank " << s.last().slow_ranks[0].rank;
  }
}

TEST(ProgressTracker, WarmUpStepsAreNotCompared) {
  Series s(8);
  // Rank 0 compiles its graph: its first two reports are 10 x slower.
  for (int i = 0; i < 2; ++i) s.Tick([](uint32_t k) { return k == 0 ? 10.0 : 1.0; });
  for (int i = 0; i < 20; ++i) {
    s.Tick([](uint32_t) { return 1.0; });
    EXPECT_TRUE(s.last().slow_ranks.empty());
  }
}

TEST(ProgressTracker, AllRanksStoppingIsAHangAfterTheTimeoutWithNoRankToBlame) {
  Series s(8);
  s.Steady(10);
  // Every rank keeps reporting the same step.
  for (int i = 0; i < 5; ++i) s.Tick([](uint32_t) { return 1.0; }, /*steps=*/0);
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_STALLED);
  s.Idle(seconds(15));
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_HUNG);
  EXPECT_TRUE(s.last().hang_unattributed);
  EXPECT_EQ(s.last().hung_ranks.size(), 8u);
  // One rank advancing clears it; the time lost is charged to JOB_HANG.
  s.Tick([](uint32_t) { return 1.0; });
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_ADVANCING);
  const v1::JobProgress p = s.tracker().Snapshot(s.now());
  ASSERT_EQ(p.lost_by_cause_size(), 1);
  EXPECT_EQ(p.lost_by_cause(0).cause(), "JOB_HANG");
  EXPECT_EQ(p.lost_by_cause(0).count(), 1u);
}

TEST(ProgressTracker, TheRanksBehindAreTheOnesThatStoppedFirst) {
  Series s(8);
  s.Steady(10);
  // Rank 5 stops; the others finish the steps they are in and wait for it.
  s.steps()[5] -= 10;
  s.Tick([](uint32_t) { return 1.0; });
  s.Idle(seconds(70));
  ASSERT_EQ(s.last().state, v1::PROGRESS_STATE_HUNG);
  EXPECT_FALSE(s.last().hang_unattributed);
  EXPECT_EQ(s.last().hung_ranks, std::vector<uint32_t>{5});
}

TEST(ProgressTracker, TheRanksThatStoppedReportingAreTheOnesThatStoppedFirst) {
  Series s(4);
  s.Steady(10);
  // Ranks 1 and 2 go silent; ranks 0 and 3 report the same step on.
  v1::ProgressReport r;
  for (uint32_t k : {0u, 3u}) {
    auto* p = r.add_ranks();
    p->set_rank(k);
    p->set_step(s.steps()[k]);
  }
  for (int i = 0; i < 8; ++i) {
    s.set_now(s.now() + kInterval);
    s.tracker().Ingest(r, s.now());
  }
  EXPECT_EQ(s.tracker().Evaluate(s.now(), {}).hung_ranks, (std::vector<uint32_t>{1, 2}));
}

TEST(ProgressTracker, NoHangWhileARecoveryRunsOrAnotherFaultHitsTheJobAndTheLossIsItsCause) {
  Series s(4);
  s.Steady(10);
  Context recovering{.recovering = true, .faulted = false, .cause = "80CB8009"};
  s.Idle(seconds(300), recovering);
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_STALLED);
  EXPECT_TRUE(s.last().hung_ranks.empty());
  s.Tick([](uint32_t) { return 1.0; });
  v1::JobProgress p = s.tracker().Snapshot(s.now());
  ASSERT_EQ(p.lost_by_cause_size(), 1);
  EXPECT_EQ(p.lost_by_cause(0).cause(), "80CB8009");
  // 300 s idle plus the report interval, less one normal interval.
  EXPECT_NEAR(Secs(p.lost_by_cause(0).lost()), 300, 1e-6);

  Context faulted{.recovering = false, .faulted = true, .cause = "HEARTBEAT_LOST"};
  s.Idle(seconds(200), faulted);
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_STALLED);
}

TEST(ProgressTracker, AfterARecoveryTheJobHasThreeTimeoutsToAdvanceAgain) {
  Settings st;
  st.hang_timeout = seconds(20);
  Series s(4, st);
  s.Steady(10);
  // A recovery runs for a minute (the job is stalled, not hung), then ends.
  s.Idle(seconds(60), Context{.recovering = true, .faulted = false, .cause = "80E01801"});
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_STALLED);
  s.Idle(seconds(59));  // restarting: under three timeouts since the recovery
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_STALLED);
  s.Idle(seconds(2));
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_HUNG);
}

TEST(ProgressTracker, ACheckpointPauseIsNotAHang) {
  Series s(4);
  s.Steady(10);
  v1::ProgressReport r;
  for (uint32_t k = 0; k < 4; ++k) {
    auto* p = r.add_ranks();
    p->set_rank(k);
    p->set_step(s.steps()[k]);
    p->set_checkpointing(true);
  }
  s.set_now(s.now() + kInterval);
  s.tracker().Ingest(r, s.now());
  s.Idle(seconds(300));  // five times the hang timeout
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_CHECKPOINTING);
  s.Tick([](uint32_t) { return 1.0; });
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_ADVANCING);
  EXPECT_EQ(s.tracker().Snapshot(s.now()).lost_by_cause(0).cause(), "checkpoint");
  // A checkpoint that never ends is a hang after 10 x the timeout.
  for (auto* p : {r.mutable_ranks(0), r.mutable_ranks(1), r.mutable_ranks(2), r.mutable_ranks(3)}) {
    p->set_step(s.steps()[p->rank()]);
  }
  s.set_now(s.now() + kInterval);
  s.tracker().Ingest(r, s.now());
  s.Idle(seconds(601));
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_HUNG);
}

TEST(ProgressTracker, ThePolicyTimeoutWinsAndDetectionCanBeOff) {
  Settings st;
  st.hang_timeout = seconds(20);
  Series s(2, st);
  s.Steady(5);
  s.Idle(seconds(21));
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_HUNG);

  st.disabled = true;
  Series off(2, st);
  off.Steady(5);
  off.Idle(seconds(600));
  EXPECT_EQ(off.last().state, v1::PROGRESS_STATE_STALLED);
}

TEST(ProgressTracker, SlowStepsRaiseTheDerivedHangTimeout) {
  Series s(4);
  for (int i = 0; i < 20; ++i) s.Tick([](uint32_t) { return 30.0; }, 1);
  EXPECT_EQ(s.tracker().HangTimeout(), Duration(seconds(300)));
}

TEST(ProgressTracker, StepTimesFromTheAgentsClocksIgnoreSkewBetweenNodes) {
  JobTracker t;
  TimePoint now = kStart;
  // Each rank's clock is off by hours (and rank 3's runs behind the
  // others'): only differences of one rank's own timestamps count.
  const Duration skew[4] = {std::chrono::hours(0), std::chrono::hours(5), -std::chrono::hours(3), seconds(-7)};
  Verdict v;
  for (int i = 1; i <= 30; ++i) {
    now += kInterval;
    v1::ProgressReport r;
    for (uint32_t k = 0; k < 4; ++k) {
      auto* p = r.add_ranks();
      p->set_rank(k);
      p->set_step(static_cast<uint64_t>(i) * 10);
      *p->mutable_step_end_time() = ToTimestamp(now + skew[k] - milliseconds(k * 300));
    }
    t.Ingest(r, now);
    v = t.Evaluate(now, {});
    EXPECT_TRUE(v.slow_ranks.empty());
  }
  EXPECT_NEAR(Secs(t.Snapshot(now).median_step_time()), 1.0, 1e-3);
}

TEST(ProgressTracker, CollectiveWaitsAreLeftOutOfTheComparison) {
  // Synchronous data parallelism: every rank's step takes as long as the
  // slowest's; the others wait in the all-reduce.
  JobTracker t;
  TimePoint now = kStart;
  Verdict v;
  for (int i = 1; i <= 20; ++i) {
    now += kInterval;
    v1::ProgressReport r;
    for (uint32_t k = 0; k < 8; ++k) {
      auto* p = r.add_ranks();
      p->set_rank(k);
      p->set_step(static_cast<uint64_t>(i) * 10);
      p->mutable_step_time()->set_nanos(0);
      p->mutable_step_time()->set_seconds(2);
      p->mutable_collective_time()->set_seconds(k == 6 ? 0 : 1);
      p->mutable_collective_time()->set_nanos(k == 6 ? 0 : 400'000'000);  // 1.4 s waiting for rank 6
    }
    t.Ingest(r, now);
    v = t.Evaluate(now, {});
  }
  ASSERT_EQ(SlowRanks(v), std::vector<uint32_t>{6});
  EXPECT_NEAR(v.slow_ranks[0].step_time, 2.0, 1e-6);
  EXPECT_NEAR(v.slow_ranks[0].job_median, 0.6, 1e-6);
}

TEST(ProgressTracker, MissingReportsOfSomeRanksAreNeitherSlowNorAHang) {
  Series s(16);
  std::mt19937 rng(3);
  for (int i = 0; i < 50; ++i) {
    s.Tick([](uint32_t) { return 1.0; });
    // A quarter of the ranks' reports are lost, at random.
    v1::ProgressReport r;
    for (uint32_t k = 0; k < 16; ++k) {
      s.steps()[k] += 10;
      if (rng() % 4 == 0) continue;
      auto* p = r.add_ranks();
      p->set_rank(k);
      p->set_step(s.steps()[k]);
      p->mutable_step_time()->set_seconds(1);
    }
    s.set_now(s.now() + kInterval);
    s.tracker().Ingest(r, s.now());
    const Verdict v = s.tracker().Evaluate(s.now(), {});
    EXPECT_TRUE(v.slow_ranks.empty());
    EXPECT_EQ(v.state, v1::PROGRESS_STATE_ADVANCING);
  }
}

TEST(ProgressTracker, AStepGoingBackwardsIsARestartNotProgress) {
  Series s(4);
  s.Steady(10);
  const uint64_t before = s.tracker().Snapshot(s.now()).step();
  // Every rank restarts from the checkpoint at step 20.
  for (auto& st : s.steps()) st = 20;
  s.Tick([](uint32_t) { return 5.0; }, 0);
  EXPECT_EQ(s.tracker().Snapshot(s.now()).step(), before);  // the highest step ever
  // Warm-up again: the slow first steps after the restart are not compared.
  s.Tick([](uint32_t k) { return k == 0 ? 9.0 : 1.0; });
  s.Tick([](uint32_t) { return 1.0; });
  EXPECT_TRUE(s.last().slow_ranks.empty());
  EXPECT_EQ(s.last().state, v1::PROGRESS_STATE_ADVANCING);
}

TEST(ProgressTracker, EttrMatchesTheInjectedDowntime) {
  Series s(64);
  s.Steady(60);  // ten minutes of work
  // Down for 5 minutes: a chip fault, its recovery, the restart.
  Context ctx{.recovering = true, .faulted = false, .cause = "8C1F8609"};
  s.Idle(std::chrono::minutes(5), ctx);
  const v1::JobProgress during = s.tracker().Snapshot(s.now());
  EXPECT_EQ(during.state(), v1::PROGRESS_STATE_STALLED);
  EXPECT_NEAR(Secs(during.lost()), 300, 10) << "the interruption in progress counts already";
  s.Steady(60);  // ten more minutes
  const v1::JobProgress p = s.tracker().Snapshot(s.now());
  // 1200 s of work, 300 s down: the report interval is the only blur.
  EXPECT_NEAR(Secs(p.lost()), 300, 10);
  EXPECT_NEAR(p.ettr(), 1200.0 / 1500.0, 0.01);
  ASSERT_EQ(p.lost_by_cause_size(), 1);
  EXPECT_EQ(p.lost_by_cause(0).cause(), "8C1F8609");
  EXPECT_EQ(p.lost_by_cause(0).count(), 1u);
  // The timeline: the interruption, where it was (ten minutes in).
  ASSERT_EQ(p.interruptions_size(), 1);
  EXPECT_EQ(p.interruptions(0).cause(), "8C1F8609");
  EXPECT_FALSE(p.interruptions(0).open());
  EXPECT_NEAR(Secs(p.interruptions(0).lost()), 300, 10);
  EXPECT_NEAR(static_cast<double>(p.interruptions(0).start().seconds() - p.since().seconds()), 600, 20);
  ASSERT_EQ(during.interruptions_size(), 1);
  EXPECT_TRUE(during.interruptions(0).open());
}

TEST(ProgressTracker, TheTimelineKeepsTheLastSixteenInterruptions) {
  Series s(2);
  s.Steady(5);
  for (int i = 0; i < 20; ++i) {
    s.Idle(seconds(60), Context{.recovering = true, .faulted = false, .cause = "C" + std::to_string(i)});
    s.Steady(3);
  }
  const v1::JobProgress p = s.tracker().Snapshot(s.now());
  ASSERT_EQ(p.interruptions_size(), static_cast<int>(kMaxInterruptions));
  EXPECT_EQ(p.interruptions(0).cause(), "C4");
  EXPECT_EQ(p.interruptions(15).cause(), "C19");
  EXPECT_EQ(p.lost_by_cause_size(), 20);
  // A stored timeline comes back after a restart (without an open one).
  JobTracker t;
  t.Restore(p, s.now());
  EXPECT_EQ(t.Snapshot(s.now()).interruptions_size(), static_cast<int>(kMaxInterruptions));
}

TEST(ProgressTracker, RestoreGoesOnFromTheStoredAccountsWithAFreshHangTimer) {
  Series s(4);
  s.Steady(30);
  s.Idle(seconds(100), Context{.recovering = true, .faulted = false, .cause = "X"});
  s.Steady(10);
  const v1::JobProgress stored = s.tracker().Snapshot(s.now());

  JobTracker t;
  const TimePoint later = s.now() + std::chrono::hours(1);  // ClusterD was down an hour
  t.Restore(stored, later);
  const v1::JobProgress p = t.Snapshot(later);
  EXPECT_EQ(p.productive().seconds(), stored.productive().seconds());
  EXPECT_EQ(p.lost().seconds(), stored.lost().seconds());
  EXPECT_EQ(p.lost_by_cause(0).cause(), "X");
  EXPECT_FALSE(t.Stalled(later + seconds(30)));
  EXPECT_EQ(t.Evaluate(later + seconds(30), {}).state, v1::PROGRESS_STATE_ADVANCING);
}

TEST(ProgressTracker, HostileReportsAreRefusedWholeAndChangeNothing) {
  const auto placed = [](uint32_t r) { return r < 1000; };
  v1::ProgressReport r;
  EXPECT_NE(ValidateReport(r, placed).message().find("empty"), std::string::npos);
  r.add_ranks()->set_rank(1'000'000'000);
  EXPECT_NE(ValidateReport(r, placed).message().find("not a rank of the job"), std::string::npos);
  r.Clear();
  r.add_ranks()->set_rank(3);
  r.add_ranks()->set_rank(3);
  EXPECT_NE(ValidateReport(r, placed).message().find("twice"), std::string::npos);
  r.Clear();
  auto* p = r.add_ranks();
  p->set_rank(1);
  p->mutable_step_time()->set_seconds(-1);
  EXPECT_NE(ValidateReport(r, placed).message().find("step_time"), std::string::npos);
  p->mutable_step_time()->set_seconds(1);
  p->mutable_collective_time()->set_seconds(2);
  EXPECT_NE(ValidateReport(r, placed).message().find("above its step_time"), std::string::npos);
  p->mutable_collective_time()->set_seconds(0);
  p->mutable_step_end_time()->set_seconds(INT64_MAX);
  EXPECT_NE(ValidateReport(r, placed).message().find("step_end_time"), std::string::npos);
  p->mutable_step_end_time()->set_seconds(253'402'300'799);  // year 9999: its nanoseconds overflow 64 bits
  EXPECT_NE(ValidateReport(r, placed).message().find("step_end_time"), std::string::npos);
  p->clear_step_end_time();
  EXPECT_TRUE(ValidateReport(r, placed).ok());
  r.Clear();
  for (uint32_t k = 0; k <= kMaxRanksPerReport; ++k) r.add_ranks()->set_rank(k);
  EXPECT_NE(ValidateReport(r, [](uint32_t) { return true; }).message().find("at most 4096"), std::string::npos);
}

TEST(ProgressTracker, StepsAtTheEndOfTheRangeDoNotOverflow) {
  JobTracker t;
  v1::ProgressReport r;
  auto* p = r.add_ranks();
  p->set_rank(0);
  p->set_step(0);
  *p->mutable_step_end_time() = ToTimestamp(kStart);
  t.Ingest(r, kStart);
  p->set_step(UINT64_MAX);
  *p->mutable_step_end_time() = ToTimestamp(kStart + seconds(1));
  t.Ingest(r, kStart + seconds(10));
  EXPECT_EQ(t.Snapshot(kStart + seconds(10)).step(), UINT64_MAX);
}

TEST(ProgressTracker, SettingsFromThePolicy) {
  v1::ProgressPolicy p;
  Settings s = SettingsOf(p);
  EXPECT_EQ(s.hang_timeout, Duration(0));
  EXPECT_EQ(s.hang_action, v1::HANG_ACTION_RESTART_PROCESSES);
  EXPECT_DOUBLE_EQ(s.slow_threshold, 0.30);
  EXPECT_EQ(s.window, 5u);
  p.mutable_hang_timeout()->set_seconds(90);
  p.set_hang_action(v1::HANG_ACTION_NOTIFY);
  p.set_slow_threshold_percent(50);
  p.set_slow_window(8);
  s = SettingsOf(p);
  EXPECT_EQ(s.hang_timeout, Duration(seconds(90)));
  EXPECT_EQ(s.hang_action, v1::HANG_ACTION_NOTIFY);
  EXPECT_DOUBLE_EQ(s.slow_threshold, 0.5);
  EXPECT_EQ(s.window, 8u);
}

}  // namespace
}  // namespace clusterd::progress
