// common/executor.h: the ManualExecutor on a FakeClock (what every timed
// test uses) and the ThreadExecutor on the system clock, waited on with a
// deadline, never a sleep.
#include "common/executor.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

namespace clusterd {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ManualExecutor, PostsRunInOrderOnlyWhenRun) {
  FakeClock clock;
  ManualExecutor ex(&clock);
  std::vector<int> ran;
  ex.Post([&] { ran.push_back(1); });
  ex.Post([&] { ran.push_back(2); });
  EXPECT_TRUE(ran.empty()) << "nothing runs until the test runs it";
  EXPECT_EQ(ex.RunReady(), 2u);
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  EXPECT_EQ(ex.pending(), 0u);
}

TEST(ManualExecutor, PostAfterRunsAtItsTimeAndReadsThatTime) {
  FakeClock clock;
  ManualExecutor ex(&clock);
  const TimePoint start = clock.Now();
  std::vector<TimePoint> at;
  ex.PostAfter(seconds(2), [&] { at.push_back(clock.Now()); });
  ex.PostAfter(seconds(1), [&] { at.push_back(clock.Now()); });
  EXPECT_EQ(ex.Advance(milliseconds(999)), 0u);
  EXPECT_EQ(ex.Advance(seconds(5)), 2u);
  ASSERT_EQ(at.size(), 2u);
  EXPECT_EQ(at[0], start + seconds(1)) << "the earlier one first, at its own time";
  EXPECT_EQ(at[1], start + seconds(2));
  EXPECT_EQ(clock.Now(), start + milliseconds(5999));
}

TEST(ManualExecutor, HasDueAtNamesExactlyTheTimesWaitedForUntilCancelledOrRun) {
  FakeClock clock;
  ManualExecutor ex(&clock);
  const TimePoint start = clock.Now();
  EXPECT_FALSE(ex.HasDueAt(start + seconds(3)));
  ex.PostAfter(seconds(1), [] {});
  TaskHandle later = ex.PostAfter(seconds(3), [] {});
  EXPECT_TRUE(ex.HasDueAt(start + seconds(3)));
  EXPECT_FALSE(ex.HasDueAt(start + seconds(2)));
  later.Cancel();
  EXPECT_FALSE(ex.HasDueAt(start + seconds(3)));
  EXPECT_TRUE(ex.HasDueAt(start + seconds(1)));
  ex.Advance(seconds(1));
  EXPECT_FALSE(ex.HasDueAt(start + seconds(1)));
}

TEST(ManualExecutor, EveryRepeatsUntilCancelled) {
  FakeClock clock;
  ManualExecutor ex(&clock);
  int runs = 0;
  TaskHandle h = ex.Every(seconds(5), [&] { ++runs; });
  ex.Advance(seconds(4));
  EXPECT_EQ(runs, 0);
  ex.Advance(seconds(11));  // t = 15 s: at 5, 10 and 15
  EXPECT_EQ(runs, 3);
  h.Cancel();
  EXPECT_TRUE(h.cancelled());
  ex.Advance(seconds(60));
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(ex.pending(), 0u);
}

TEST(ManualExecutor, RepeatRunsWhenTheTaskSaysAndACancelledPostNeverRuns) {
  FakeClock clock;
  ManualExecutor ex(&clock);
  const TimePoint start = clock.Now();
  std::vector<TimePoint> at;
  // 1 s, then 3 s, then 6 s after the start: the task names its next time.
  ex.Repeat(start + seconds(1), [&] {
    at.push_back(clock.Now());
    return clock.Now() + seconds(static_cast<int>(at.size()) + 1);
  });
  bool ran = false;
  ex.PostAfter(seconds(2), [&] { ran = true; }).Cancel();
  ex.Advance(seconds(6));
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(at[0], start + seconds(1));
  EXPECT_EQ(at[1], start + seconds(3));
  EXPECT_EQ(at[2], start + seconds(6));
  EXPECT_FALSE(ran);
}

TEST(ManualExecutor, ATaskMayPostAndCancelOnItsOwnExecutor) {
  FakeClock clock;
  ManualExecutor ex(&clock);
  std::vector<int> ran;
  TaskHandle later = ex.PostAfter(seconds(1), [&] { ran.push_back(9); });
  ex.Post([&] {
    ran.push_back(1);
    later.Cancel();
    ex.Post([&] { ran.push_back(2); });
  });
  ex.Advance(seconds(2));
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
}

// The real thread: a post runs, a delayed post runs after its time, Every
// repeats, Stop drops what waits. Waited on with deadlines.
TEST(ThreadExecutor, RunsPostsDelayedPostsAndRepeatsOnItsThread) {
  ThreadExecutor ex(&SystemClock::Instance(), "test");
  std::mutex mu;
  std::condition_variable cv;
  int posts = 0, ticks = 0;
  bool on_thread = true;
  const TimePoint posted = SystemClock::Instance().Now();
  TimePoint delayed_at{};
  ex.Post([&] {
    std::lock_guard lock(mu);
    on_thread = on_thread && ex.OnExecutorThread();
    ++posts;
    cv.notify_all();
  });
  ex.PostAfter(milliseconds(20), [&] {
    std::lock_guard lock(mu);
    delayed_at = SystemClock::Instance().Now();
    cv.notify_all();
  });
  TaskHandle every = ex.Every(milliseconds(1), [&] {
    std::lock_guard lock(mu);
    ++ticks;
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, seconds(20), [&] { return posts == 1 && delayed_at != TimePoint{} && ticks >= 3; }));
  EXPECT_TRUE(on_thread);
  EXPECT_FALSE(ex.OnExecutorThread());
  EXPECT_GE(delayed_at - posted, milliseconds(20)) << "not before its time";
  every.Cancel();
  lock.unlock();
  ex.Stop();
  bool after_stop = false;
  ex.Post([&] { after_stop = true; });
  EXPECT_FALSE(after_stop);
}

}  // namespace
}  // namespace clusterd
