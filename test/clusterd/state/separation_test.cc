// Separating a chip that fails again and again (state/separation.h): the
// count within the window, the settle time that tells a job's software fault
// from a chip's, the release after a fault-free time, and an operator's.
#include <gtest/gtest.h>

#include "clusterd/state/separation.h"

namespace clusterd {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

const TimePoint kT0 = TimePoint{} + hours(24 * 365 * 50);
const ChipRef kChip{"worker01", 3};
const ChipRef kOther{"worker01", 4};

TEST(Separation, TheThresholdWithinTheWindowSeparates) {
  SeparationTracker t{SeparationPolicy{}};  // 3 within 24h, settle 30s
  t.Observe(kChip, "80E01801", "job-a", kT0);
  t.Observe(kChip, "80E01801", "job-a", kT0 + hours(1));
  EXPECT_TRUE(t.Advance(kT0 + hours(1) + seconds(29)).empty());
  EXPECT_EQ(t.Count(kChip), 1u);  // the second is still settling
  t.Observe(kChip, "8C1F860B", "", kT0 + hours(2));
  auto changes = t.Advance(kT0 + hours(3));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].chip, kChip);
  EXPECT_TRUE(changes[0].separated);
  EXPECT_EQ(changes[0].reason, "3 faults within 24h");
  EXPECT_TRUE(t.Separated(kChip));
  EXPECT_FALSE(t.Separated(kOther));
}

TEST(Separation, FaultsOlderThanTheWindowDoNotCount) {
  SeparationTracker t{SeparationPolicy{}};
  t.Observe(kChip, "A", "", kT0);
  t.Observe(kChip, "A", "", kT0 + hours(12));
  EXPECT_TRUE(t.Advance(kT0 + hours(12) + minutes(1)).empty());
  t.Observe(kChip, "A", "", kT0 + hours(25));  // the first has left the window
  EXPECT_TRUE(t.Advance(kT0 + hours(25) + minutes(1)).empty());
  EXPECT_EQ(t.Count(kChip), 2u);
  EXPECT_FALSE(t.Separated(kChip));
}

TEST(Separation, OneCodeOnSeveralChipsOfAJobIsTheJobsFault) {
  SeparationPolicy p;
  p.threshold = 1;
  SeparationTracker t{p};
  t.Observe(kChip, "80E01801", "job-a", kT0);
  t.Observe(kOther, "80E01801", "job-a", kT0 + seconds(10));
  EXPECT_TRUE(t.Advance(kT0 + minutes(5)).empty());
  EXPECT_EQ(t.Count(kChip), 0u);
  EXPECT_EQ(t.Count(kOther), 0u);
  // Also when they settle at different times: the later one still sees the
  // earlier, settled one.
  t.Observe(kChip, "8C1F860B", "job-a", kT0 + hours(1));
  t.Observe(kOther, "8C1F860B", "job-a", kT0 + hours(1) + seconds(25));
  EXPECT_TRUE(t.Advance(kT0 + hours(1) + seconds(30)).empty());
  EXPECT_EQ(t.pending(), 1u);
  EXPECT_TRUE(t.Advance(kT0 + hours(1) + seconds(60)).empty());
  EXPECT_EQ(t.Count(kChip), 0u);
  EXPECT_EQ(t.Count(kOther), 0u);
  // The same code on two chips of different jobs, or another code: the chips'.
  t.Observe(kChip, "80E01801", "job-a", kT0 + hours(2));
  t.Observe(kOther, "80E01801", "job-b", kT0 + hours(2));
  EXPECT_EQ(t.Advance(kT0 + hours(3)).size(), 2u);
}

TEST(Separation, ReleasedWhenFaultFreeLongEnoughOrByAnOperator) {
  SeparationPolicy p;
  p.threshold = 1;
  SeparationTracker t{p};
  t.Observe(kChip, "A", "", kT0);
  ASSERT_EQ(t.Advance(kT0 + minutes(1)).size(), 1u);
  t.StillFaulty(kChip, kT0 + hours(10));  // the fault stayed active until then
  EXPECT_TRUE(t.Advance(kT0 + hours(50)).empty());
  auto released = t.Advance(kT0 + hours(58));
  ASSERT_EQ(released.size(), 1u);
  EXPECT_FALSE(released[0].separated);
  EXPECT_EQ(released[0].reason, "fault-free for 48h");
  EXPECT_FALSE(t.Separated(kChip));

  t.Observe(kChip, "A", "", kT0 + hours(60));
  ASSERT_EQ(t.Advance(kT0 + hours(61)).size(), 1u);
  EXPECT_TRUE(t.Release(kChip).ok());
  EXPECT_FALSE(t.Separated(kChip));
  EXPECT_EQ(t.Count(kChip), 0u);  // counting starts again
  EXPECT_EQ(t.Release(kChip).code(), StatusCode::kNotFound);

  // Never released by itself when the policy says so.
  p.release_after.reset();
  SeparationTracker forever{p};
  forever.Observe(kChip, "A", "", kT0);
  forever.Advance(kT0 + minutes(1));
  EXPECT_TRUE(forever.Advance(kT0 + hours(24 * 365)).empty());
  EXPECT_TRUE(forever.Separated(kChip));
}

TEST(Separation, AReleaseTheCallerRefusesWaitsAndIsAskedAgain) {
  SeparationPolicy p;
  p.threshold = 1;
  SeparationTracker t{p};
  t.Observe(kChip, "A", "", kT0);
  ASSERT_EQ(t.Advance(kT0 + minutes(1)).size(), 1u);
  bool healthy = false;
  int asked = 0;
  auto may = [&](const ChipRef& c) {
    EXPECT_EQ(c, kChip);
    ++asked;
    return healthy;
  };
  auto waits = t.Advance(kT0 + hours(49), nullptr, may);
  ASSERT_EQ(waits.size(), 1u);  // said once
  EXPECT_TRUE(waits[0].deferred);
  EXPECT_FALSE(waits[0].separated);
  EXPECT_TRUE(t.Separated(kChip));
  EXPECT_EQ(t.NextDue(), kT0 + hours(49) + SeparationTracker::kReleaseRecheck);
  EXPECT_TRUE(t.Advance(kT0 + hours(49) + seconds(30), nullptr, may).empty());
  EXPECT_EQ(asked, 1);                                                          // not before the recheck
  EXPECT_TRUE(t.Advance(kT0 + hours(49) + seconds(60), nullptr, may).empty());  // asked, still no: quiet
  EXPECT_EQ(asked, 2);
  healthy = true;
  auto released = t.Advance(kT0 + hours(49) + seconds(120), nullptr, may);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_FALSE(released[0].deferred);
  EXPECT_FALSE(t.Separated(kChip));
}

TEST(Separation, DisabledCountsNothing) {
  SeparationPolicy p;
  p.enabled = false;
  p.threshold = 1;
  SeparationTracker t{p};
  t.Observe(kChip, "A", "", kT0);
  EXPECT_TRUE(t.Advance(kT0 + hours(1)).empty());
  EXPECT_EQ(t.pending(), 0u);
}

TEST(Separation, PolicyBounds) {
  EXPECT_TRUE(ValidateSeparationPolicy(SeparationPolicy{}).ok());
  SeparationPolicy p;
  p.threshold = 51;
  EXPECT_FALSE(ValidateSeparationPolicy(p).ok());
  p = SeparationPolicy{};
  p.window = hours(721);
  EXPECT_FALSE(ValidateSeparationPolicy(p).ok());
  p = SeparationPolicy{};
  p.release_after = hours(0);
  EXPECT_FALSE(ValidateSeparationPolicy(p).ok());
}

// Two sources reporting one fault (NodeD and the device plugin) while it
// settles are one occurrence.
TEST(Separation, TheSameCodeOnTheChipWhileSettlingIsOneOccurrence) {
  SeparationTracker t{SeparationPolicy{}};
  t.Observe(kChip, "80E01801", "", kT0);
  t.Observe(kChip, "80E01801", "", kT0 + seconds(2));
  EXPECT_EQ(t.pending(), 1u);
  std::set<ChipRef> recounted;
  EXPECT_TRUE(t.Advance(kT0 + minutes(1), &recounted).empty());
  EXPECT_EQ(t.Count(kChip), 1u);
  EXPECT_EQ(recounted, std::set<ChipRef>{kChip});
  // Once counted, the next one is a new occurrence.
  t.Observe(kChip, "80E01801", "", kT0 + minutes(2));
  EXPECT_EQ(t.pending(), 1u);
}

// What a restart keeps: the counted occurrences and the separation, given
// back through Restore; NextDue says when Advance has work.
TEST(Separation, RecordsRestoreAndTheNextDueTime) {
  SeparationTracker t{SeparationPolicy{}};
  EXPECT_EQ(t.NextDue(), TimePoint::max());
  t.Observe(kChip, "A", "", kT0);
  EXPECT_EQ(t.NextDue(), kT0 + seconds(30));
  t.Advance(kT0 + seconds(30));
  EXPECT_EQ(t.NextDue(), kT0 + hours(24) + std::chrono::nanoseconds(1));  // the count leaves the window
  t.Observe(kChip, "B", "", kT0 + hours(1));
  t.Observe(kChip, "C", "", kT0 + hours(2));
  std::set<ChipRef> recounted;
  auto changes = t.Advance(kT0 + hours(3), &recounted);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(recounted.count(kChip));
  SeparationTracker::ChipRecord r = t.RecordOf(kChip);
  ASSERT_TRUE(r.separated_since.has_value());
  EXPECT_EQ(*r.separated_since, kT0 + hours(3));
  EXPECT_EQ(r.last_fault, kT0 + hours(2));
  EXPECT_EQ(t.NextDue(), kT0 + hours(50));

  SeparationTracker restored{SeparationPolicy{}};
  restored.Restore(kChip, r);
  SeparationTracker::ChipRecord counted;
  counted.counted = {kT0 + hours(1)};
  restored.Restore(kOther, counted);
  EXPECT_TRUE(restored.Separated(kChip));
  EXPECT_EQ(restored.SeparatedChips(), std::vector<ChipRef>{kChip});
  EXPECT_EQ(restored.Count(kOther), 1u);
  recounted.clear();
  EXPECT_TRUE(restored.Advance(kT0 + hours(49), &recounted).empty());
  EXPECT_EQ(recounted, std::set<ChipRef>{kOther}) << "its count left the window";
  EXPECT_EQ(restored.Count(kOther), 0u);
  changes = restored.Advance(kT0 + hours(50));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].separated);
  EXPECT_EQ(changes[0].reason, "fault-free for 48h");
}

}  // namespace
}  // namespace clusterd
