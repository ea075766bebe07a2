// A ManualExecutor over a FakeClock whose due tasks a thread of the test's
// runs as soon as they are due, for a whole server's timers
// (ClusterdServer::SetTimers): the services also post work that must run
// without the test's help (TaskD's Recover service takes subscriptions and
// reads jobs there), while the timed work waits until the test moves the
// clock. Pause it while a server stops, so no task runs while the server
// goes (ClusterdServerTest::StopServer).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/executor.h"
#include "test/support/wait.h"

namespace clusterd::testing {

class RunningTimers {
 public:
  RunningTimers() { Resume(); }
  ~RunningTimers() { Pause(); }
  RunningTimers(const RunningTimers&) = delete;
  RunningTimers& operator=(const RunningTimers&) = delete;

  FakeClock& clock() { return clock_; }
  ManualExecutor& executor() { return executor_; }

  // Stops the thread (a task running finishes first); idempotent.
  void Pause() {
    if (!runner_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    runner_.join();
  }
  // Starts the thread again (nothing when it runs).
  void Resume() {
    if (runner_.joinable()) return;
    stop_ = false;
    runner_ = std::thread([this] {
      std::unique_lock lock(mu_);
      while (!stop_) {
        lock.unlock();
        executor_.RunReady();
        lock.lock();
        // What the server posts is picked up within a millisecond: nothing
        // waits on this beyond that (no timing of a test depends on it).
        cv_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stop_; });
      }
    });
  }

  // Waits (up to `deadline`, a failure bound) until a task is due `d` from
  // now, then moves the clock there; false if none came.
  bool AdvanceToTaskIn(std::chrono::nanoseconds d, std::chrono::milliseconds deadline) {
    const TimePoint due = clock_.Now() + d;
    if (!WaitFor([&] { return executor_.HasDueAt(due); }, deadline)) return false;
    clock_.Advance(d);
    return true;
  }

 private:
  FakeClock clock_;
  ManualExecutor executor_{&clock_};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread runner_;  // last: started once the rest is built
};

}  // namespace clusterd::testing
