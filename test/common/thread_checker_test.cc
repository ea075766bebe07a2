// ThreadChecker binds to the first thread that checks it and refuses others
// until detached.
#include "common/thread_checker.h"

#include <future>
#include <thread>

#include <gtest/gtest.h>

namespace clusterd {
namespace {

bool CheckOnNewThread(const ThreadChecker& checker) {
  bool valid = true;
  std::thread([&] { valid = checker.CalledOnValidThread(); }).join();
  return valid;
}

TEST(ThreadCheckerTest, BindsToTheFirstCheckingThread) {
  ThreadChecker checker;
  // The owner thread stays alive while others check (a finished thread's id
  // may be reused by the next one).
  std::promise<void> checked, release;
  bool owner_valid = false;
  std::thread owner([&] {
    owner_valid = checker.CalledOnValidThread();
    checked.set_value();
    release.get_future().wait();
  });
  checked.get_future().wait();
  EXPECT_FALSE(checker.CalledOnValidThread());
  release.set_value();
  owner.join();
  EXPECT_TRUE(owner_valid);
}

TEST(ThreadCheckerTest, DetachLetsTheNextThreadBind) {
  ThreadChecker checker;
  EXPECT_TRUE(checker.CalledOnValidThread());
  EXPECT_TRUE(checker.CalledOnValidThread());
  EXPECT_FALSE(CheckOnNewThread(checker));
  checker.Detach();
  EXPECT_TRUE(CheckOnNewThread(checker));
  EXPECT_FALSE(checker.CalledOnValidThread());
}

#if !defined(NDEBUG) && GTEST_HAS_DEATH_TEST
TEST(ThreadCheckerDeathTest, DebugBuildsAssertOffTheOwningThread) {
  ThreadChecker checker;
  CLUSTERD_DCHECK_ON_THREAD(checker);  // binds this thread
  EXPECT_DEATH(std::thread([&] { CLUSTERD_DCHECK_ON_THREAD(checker); }).join(), "owns this");
}
#endif

}  // namespace
}  // namespace clusterd
