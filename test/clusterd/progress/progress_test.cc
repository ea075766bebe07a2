// The progress tracker (clusterd/progress/tracker.h) on synthetic progress
// series: steady, one slow rank, gradual drift, noise, warm-up, a
// checkpoint pause, hangs (attributed and not), clock skew, missing reports,
// restarts, ETTR against injected downtime, and hostile reports.
#include "clusterd/progress/tracker.h"

#include <random>

#include "clusterd/progress/monitor.h"
#include "clusterd/state/state_view.h"
#include "common/metrics.h"

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
  // The job's step is where its ranks are now, not the highest step ever.
  EXPECT_LT(20u, before);
  EXPECT_EQ(s.tracker().Snapshot(s.now()).step(), 20u);
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
  p->set_step(kMaxStep);
  *p->mutable_step_end_time() = ToTimestamp(kStart + seconds(1));
  ASSERT_TRUE(ValidateReport(r, [](uint32_t) { return true; }).ok());
  t.Ingest(r, kStart + seconds(10));
  EXPECT_EQ(t.Snapshot(kStart + seconds(10)).step(), kMaxStep);
  // Beyond it (2^64-1 and anything absurd) the report is refused whole:
  // such a step would stand as the job's step for good.
  for (uint64_t absurd : {kMaxStep + 1, UINT64_MAX}) {
    p->set_step(absurd);
    const Status st = ValidateReport(r, [](uint32_t) { return true; });
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("progress.ranks[rank 0].step: " + std::to_string(absurd) + " is above"),
              std::string::npos)
        << st.message();
  }
}

// samples and tokens are running totals in 64 bits: they stop at the top
// instead of wrapping to a small number.
TEST(ProgressTracker, SampleAndTokenTotalsSaturate) {
  JobTracker t;
  v1::ProgressReport r;
  auto* p = r.add_ranks();
  p->set_rank(0);
  p->set_samples(UINT64_MAX - 5);
  p->set_tokens(UINT64_MAX);
  t.Ingest(r, kStart);
  p->set_step(1);
  p->set_samples(10);
  p->set_tokens(1);
  t.Ingest(r, kStart + seconds(1));
  const v1::JobProgress snap = t.Snapshot(kStart + seconds(1));
  EXPECT_EQ(snap.samples(), UINT64_MAX);
  EXPECT_EQ(snap.tokens(), UINT64_MAX);
}

// Ranks [from, to) at `step`, one report.
v1::ProgressReport RanksAt(uint32_t from, uint32_t to, uint64_t step) {
  v1::ProgressReport r;
  for (uint32_t k = from; k < to; ++k) {
    auto* p = r.add_ranks();
    p->set_rank(k);
    p->set_step(step);
    *p->mutable_step_time() = TimeUtil::SecondsToDuration(1);
  }
  return r;
}

// Item 8 of the reliability probe: after a restart from a checkpoint (every
// rank's step goes back), a whole-job hang names no rank (one fault, the
// processes restart), as it does without the restart; before, the highest
// step ever stayed the job's "ahead" and every rank was named (SEPARATE on
// every chip with hang_action RESCHEDULE).
TEST(ProgressTracker, AfterACheckpointRestartAWholeJobHangNamesNoRank) {
  Series s(8);
  for (auto& st : s.steps()) st = 90;
  s.Steady(2);                         // 100, 110
  for (auto& st : s.steps()) st = 50;  // restarted from the checkpoint of step 50
  s.Steady(2);                         // 60, 70
  EXPECT_EQ(s.tracker().Snapshot(s.now()).step(), 70u);
  // Every rank stops at the same step.
  for (int i = 0; i < 5; ++i) s.Tick([](uint32_t) { return 1.0; }, /*steps=*/0);
  s.Idle(seconds(70));
  ASSERT_EQ(s.last().state, v1::PROGRESS_STATE_HUNG);
  EXPECT_TRUE(s.last().hang_unattributed);
  // A rank that restarted and fell behind the others after the restart is
  // still the one named.
  Series t(4);
  for (auto& st : t.steps()) st = 90;
  t.Steady(2);
  for (auto& st : t.steps()) st = 50;
  t.Steady(2);
  t.steps()[2] -= 10;
  t.Tick([](uint32_t) { return 1.0; });
  t.Idle(seconds(70));
  ASSERT_EQ(t.last().state, v1::PROGRESS_STATE_HUNG);
  EXPECT_FALSE(t.last().hang_unattributed);
  EXPECT_EQ(t.last().hung_ranks, std::vector<uint32_t>{2});
}

// Item 1 of the reliability probe: ranks 0-7 on node a, 8-15 on node b, each
// node's agent reporting its own. The job stops at step S with b's ranks at S
// (waiting in a collective) while a claims S+1: a's word about its own ranks
// does not put the hang on b; the hang names no rank.
TEST(ProgressTracker, OneNodeClaimingToBeAheadCannotPutTheHangOnTheOther) {
  JobTracker t;
  TimePoint now = kStart;
  uint64_t step = 0;
  for (int i = 0; i < 10; ++i) {
    now += kInterval;
    step += 10;
    t.Ingest(RanksAt(0, 8, step), now, "node/a");
    t.Ingest(RanksAt(8, 16, step), now, "node/b");
    t.Evaluate(now, {});
  }
  now += kInterval;
  t.Ingest(RanksAt(0, 8, step + 1), now, "node/a");  // a lies: one step ahead
  t.Ingest(RanksAt(8, 16, step), now, "node/b");
  Verdict v;
  for (int i = 0; i < 120; ++i) v = t.Evaluate(now += seconds(1), {});
  ASSERT_EQ(v.state, v1::PROGRESS_STATE_HUNG);
  EXPECT_TRUE(v.hang_unattributed);

  // The same with a reporting on after b went quiet (as fast as it likes):
  // b stopped reporting "first", on a's word alone; no rank is named.
  JobTracker u;
  now = kStart;
  step = 0;
  for (int i = 0; i < 10; ++i) {
    now += kInterval;
    step += 10;
    u.Ingest(RanksAt(0, 8, step), now, "node/a");
    u.Ingest(RanksAt(8, 16, step), now, "node/b");
    u.Evaluate(now, {});
  }
  for (int i = 0; i < 120; ++i) {
    now += seconds(1);
    u.Ingest(RanksAt(0, 8, step), now, "node/a");
    v = u.Evaluate(now, {});
  }
  ASSERT_EQ(v.state, v1::PROGRESS_STATE_HUNG);
  EXPECT_TRUE(v.hang_unattributed);
}

// What a node says about its own ranks still names them: b's rank 12 behind
// b's other ranks is b's own evidence; with three nodes, two others ahead
// of b is enough (one liar is not).
TEST(ProgressTracker, ANodesOwnRanksOrTwoOtherNodesNameTheRankBehind) {
  auto hang = [](const std::vector<std::pair<std::string, v1::ProgressReport>>& last) {
    JobTracker t;
    TimePoint now = kStart;
    for (int i = 1; i <= 10; ++i) {
      now += kInterval;
      t.Ingest(RanksAt(0, 8, 10 * i), now, "node/a");
      t.Ingest(RanksAt(8, 16, 10 * i), now, "node/b");
      t.Ingest(RanksAt(16, 24, 10 * i), now, "node/c");
      t.Evaluate(now, {});
    }
    now += kInterval;
    for (const auto& [sender, report] : last) t.Ingest(report, now, sender);
    Verdict v;
    for (int i = 0; i < 120; ++i) v = t.Evaluate(now += seconds(1), {});
    EXPECT_EQ(v.state, v1::PROGRESS_STATE_HUNG);
    return v;
  };
  // b's rank 12 is behind b's other ranks.
  v1::ProgressReport b = RanksAt(8, 16, 101);
  b.mutable_ranks(4)->set_step(100);
  Verdict v = hang({{"node/a", RanksAt(0, 8, 100)}, {"node/b", b}, {"node/c", RanksAt(16, 24, 100)}});
  EXPECT_FALSE(v.hang_unattributed);
  EXPECT_EQ(v.hung_ranks, std::vector<uint32_t>{12});
  // b behind a and c: both others say so.
  v = hang({{"node/a", RanksAt(0, 8, 101)}, {"node/b", RanksAt(8, 16, 100)}, {"node/c", RanksAt(16, 24, 101)}});
  EXPECT_FALSE(v.hang_unattributed);
  EXPECT_EQ(v.hung_ranks.size(), 8u);
  EXPECT_EQ(v.hung_ranks.front(), 8u);
  // Only a says b is behind: nobody is named.
  v = hang({{"node/a", RanksAt(0, 8, 101)}, {"node/b", RanksAt(8, 16, 100)}, {"node/c", RanksAt(16, 24, 100)}});
  EXPECT_TRUE(v.hang_unattributed);
}

// Item 1 of the reliability probe, at the monitor: a node's agent flooding
// its stream with its own ranks spends its own budget; the other node's
// reports of the same job are all taken, and so are the job agent's.
TEST(ProgressMonitor, OneNodesFloodNeverRefusesAnotherNodesReports) {
  FakeClock clock;
  MetricsRegistry metrics;
  ProgressMonitor monitor(
      nullptr, [](Engine::Apply) { return true; }, &clock, ProgressOptions{}, &metrics);
  v1::Job job;
  job.set_id("train");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_revision(1);
  for (uint32_t r = 0; r < 16; ++r) {
    auto* p = job.add_placement();
    p->set_rank(r);
    p->set_node(r < 8 ? "a" : "b");
    p->set_device_id(r % 8);
  }
  const ProgressSender a{"node/a", 8}, b{"node/b", 8}, agent{"job-agent", 16};
  size_t refused_a = 0, refused_b = 0;
  for (int second = 0; second < 3; ++second) {
    // a: 1,000 reports of its 8 ranks within the second, far above its
    // max(2 x 8, 4096) entries; b reports once, in the middle of it.
    for (int i = 0; i < 1000; ++i) {
      if (!monitor.Report(job, RanksAt(0, 8, 1000 + second), a).ok()) ++refused_a;
      if (i == 700) {
        const Status st = monitor.Report(job, RanksAt(8, 16, 10 + second), b);
        if (!st.ok()) ++refused_b;
        EXPECT_TRUE(st.ok()) << st.ToString();
        EXPECT_TRUE(monitor.Report(job, RanksAt(0, 16, 10 + second), agent).ok());
      }
    }
    clock.Advance(seconds(1));
  }
  EXPECT_EQ(refused_b, 0u);
  EXPECT_EQ(refused_a, 3u * (1000 - 4096 / 8));
  const Status st = monitor.Report(job, RanksAt(0, 8, 2000), a);
  EXPECT_TRUE(st.ok()) << "a new second, a new budget: " << st.ToString();
  clock.Advance(std::chrono::milliseconds(10));
  for (int i = 0; i < 600; ++i) (void)monitor.Report(job, RanksAt(0, 8, 2000), a);
  const Status refused = monitor.Report(job, RanksAt(0, 8, 2000), a);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("progress: node/a reported more than 4096 rank entries this second for job train"),
            std::string::npos)
      << refused.message();
}

// The job-level reporters the state leaves out of a node's tallies are the
// ones the progress monitor and TaskD report under.
TEST(ProgressMonitor, ItsReporterIsAJobReporter) {
  EXPECT_TRUE(IsJobReporter(ProgressMonitor::kReporter));
  EXPECT_TRUE(IsJobReporter("taskd"));  // mindcluster/taskd.h, kTaskdReporter
  EXPECT_FALSE(IsJobReporter("clusterd-chain"));
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
