// Executors on the injected Clock: where timed work runs (a policy's tick, a
// keep-alive, a retry after a wait) instead of a hand-rolled thread with a
// condition variable in every component. Tests drive a ManualExecutor on a
// FakeClock: a 2 s hang or a 5 s keep-alive takes microseconds.
//
// Executor: Post (soon, in order), PostAt / PostAfter (once its time on the
// executor's clock has come), Every (every interval, measured from the end
// of the previous run) and Repeat (the task says when it runs next). Each
// returns a TaskHandle that cancels what has not started yet; a run already
// started finishes (Cancel does not wait for it: stop the executor for that).
// Tasks run one at a time, in the order of their due time, posts of equal
// time in the order posted.
//
// ThreadExecutor: one thread of its own; Stop (or the destructor) joins it
// and drops what has not run. ManualExecutor: no thread; RunReady and
// Advance run what is due on the caller's thread.
//
// Thread contract: Post*, Every, Repeat, Cancel from any thread, also from a
// task on the same executor.
#pragma once

#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "common/clock.h"

namespace clusterd {

// Cancels a posted task (and every later run of an Every/Repeat). Copyable;
// an empty handle cancels nothing.
class TaskHandle {
 public:
  TaskHandle() = default;
  explicit TaskHandle(std::shared_ptr<std::atomic<bool>> cancelled) : cancelled_(std::move(cancelled)) {}
  void Cancel() const {
    if (cancelled_) cancelled_->store(true);
  }
  bool cancelled() const { return cancelled_ && cancelled_->load(); }

 private:
  std::shared_ptr<std::atomic<bool>> cancelled_;
};

class Executor {
 public:
  using Task = std::function<void()>;
  // Returns when it runs next.
  using RepeatedTask = std::function<TimePoint()>;

  virtual ~Executor() = default;
  virtual const Clock& clock() const = 0;

  TaskHandle Post(Task task) { return Schedule(TimePoint::min(), std::move(task), NewFlag()); }
  TaskHandle PostAt(TimePoint when, Task task) { return Schedule(when, std::move(task), NewFlag()); }
  TaskHandle PostAfter(Duration delay, Task task) { return PostAt(clock().Now() + delay, std::move(task)); }
  // `task` at `first`, then whenever its last run says (a time already
  // passed: as soon as possible), until cancelled.
  TaskHandle Repeat(TimePoint first, RepeatedTask task);
  // `task` every `interval` (the first after one interval), until cancelled.
  TaskHandle Every(Duration interval, Task task);

 protected:
  // Queues `task` to run at `when` unless `cancelled` is set by then.
  virtual TaskHandle Schedule(TimePoint when, Task task, std::shared_ptr<std::atomic<bool>> cancelled) = 0;
  static std::shared_ptr<std::atomic<bool>> NewFlag() { return std::make_shared<std::atomic<bool>>(false); }

 private:
  void RepeatAt(TimePoint when, std::shared_ptr<RepeatedTask> task, std::shared_ptr<std::atomic<bool>> cancelled);
};

// The queue both executors keep: due time, then the order posted.
class TaskQueue {
 public:
  void Push(TimePoint when, Executor::Task task, std::shared_ptr<std::atomic<bool>> cancelled);
  // The earliest entry due at `now`, if any (cancelled ones are dropped).
  bool PopDue(TimePoint now, Executor::Task* task);
  // When the earliest entry is due (cancelled ones are dropped); nullopt: empty.
  std::optional<TimePoint> NextDue();
  // Whether an entry not cancelled is due at exactly `when`.
  bool HasDueAt(TimePoint when) const;
  size_t size() const { return entries_.size(); }
  void Clear() { entries_.clear(); }

 private:
  struct Entry {
    Executor::Task task;
    std::shared_ptr<std::atomic<bool>> cancelled;
  };
  void DropCancelled();
  std::map<std::pair<TimePoint, uint64_t>, Entry> entries_;
  uint64_t seq_ = 0;
};

// One thread of its own on `clock` (SystemClock or MonotonicClock: it waits
// real time for the clock's time to come; a FakeClock is for a
// ManualExecutor). Named for its log lines.
class ThreadExecutor final : public Executor {
 public:
  explicit ThreadExecutor(const Clock* clock, std::string name = "executor");
  ~ThreadExecutor() override;
  ThreadExecutor(const ThreadExecutor&) = delete;
  ThreadExecutor& operator=(const ThreadExecutor&) = delete;

  const Clock& clock() const override { return *clock_; }
  // Joins the thread; what has not run is dropped, and later posts are
  // ignored. Not from one of its own tasks.
  void Stop();
  // True on the executor's own thread (for thread contracts).
  bool OnExecutorThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  TaskHandle Schedule(TimePoint when, Task task, std::shared_ptr<std::atomic<bool>> cancelled) override;
  void Loop();

  const Clock* const clock_;
  const std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  TaskQueue queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest is built
};

// For tests: no thread; the test runs what is due, stepping a FakeClock.
class ManualExecutor final : public Executor {
 public:
  explicit ManualExecutor(FakeClock* clock) : clock_(clock) {}
  const Clock& clock() const override { return *clock_; }

  // Runs every task due at the clock's time (also those the runs post and
  // that are due); how many ran.
  size_t RunReady();
  // Steps the clock by `d`, stopping at each due time on the way to run what
  // is due then (so a task reads the time it was due at); how many ran.
  size_t Advance(Duration d);
  // Tasks waiting (cancelled ones not counted once dropped).
  size_t pending();
  // When the next task is due; nullopt when none waits.
  std::optional<TimePoint> NextDue();
  // Whether a task waits to run at exactly `when` (a test waits for what it
  // expects to be scheduled before it moves the clock there).
  bool HasDueAt(TimePoint when);

 private:
  TaskHandle Schedule(TimePoint when, Task task, std::shared_ptr<std::atomic<bool>> cancelled) override;

  FakeClock* const clock_;
  std::mutex mu_;
  TaskQueue queue_;
};

}  // namespace clusterd
