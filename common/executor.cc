#include "common/executor.h"

#include <utility>

#include "common/logging.h"

namespace clusterd {

TaskHandle Executor::Repeat(TimePoint first, RepeatedTask task) {
  auto cancelled = NewFlag();
  RepeatAt(first, std::make_shared<RepeatedTask>(std::move(task)), cancelled);
  return TaskHandle(cancelled);
}

TaskHandle Executor::Every(Duration interval, Task task) {
  return Repeat(clock().Now() + interval, [this, interval, task = std::move(task)] {
    task();
    return clock().Now() + interval;
  });
}

void Executor::RepeatAt(TimePoint when, std::shared_ptr<RepeatedTask> task,
                        std::shared_ptr<std::atomic<bool>> cancelled) {
  Task run = [this, task = std::move(task), cancelled] {
    const TimePoint next = (*task)();
    if (!cancelled->load()) RepeatAt(next, task, cancelled);
  };
  Schedule(when, std::move(run), std::move(cancelled));
}

void TaskQueue::Push(TimePoint when, Executor::Task task, std::shared_ptr<std::atomic<bool>> cancelled) {
  entries_.emplace(std::make_pair(when, seq_++), Entry{std::move(task), std::move(cancelled)});
}

void TaskQueue::DropCancelled() {
  while (!entries_.empty() && entries_.begin()->second.cancelled->load()) entries_.erase(entries_.begin());
}

bool TaskQueue::PopDue(TimePoint now, Executor::Task* task) {
  DropCancelled();
  if (entries_.empty() || entries_.begin()->first.first > now) return false;
  *task = std::move(entries_.begin()->second.task);
  entries_.erase(entries_.begin());
  return true;
}

std::optional<TimePoint> TaskQueue::NextDue() {
  DropCancelled();
  if (entries_.empty()) return std::nullopt;
  return entries_.begin()->first.first;
}

bool TaskQueue::HasDueAt(TimePoint when) const {
  for (auto it = entries_.lower_bound({when, 0}); it != entries_.end() && it->first.first == when; ++it) {
    if (!it->second.cancelled || !it->second.cancelled->load()) return true;
  }
  return false;
}

ThreadExecutor::ThreadExecutor(const Clock* clock, std::string name)
    : clock_(clock), name_(std::move(name)), thread_([this] { Loop(); }) {}

ThreadExecutor::~ThreadExecutor() { Stop(); }

void ThreadExecutor::Stop() {
  TaskQueue dropped;  // destroyed outside the lock: what a task holds may post
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    std::swap(dropped, queue_);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

TaskHandle ThreadExecutor::Schedule(TimePoint when, Task task, std::shared_ptr<std::atomic<bool>> cancelled) {
  TaskHandle handle(cancelled);
  {
    std::lock_guard lock(mu_);
    if (stopping_) return handle;
    queue_.Push(when, std::move(task), std::move(cancelled));
  }
  cv_.notify_one();
  return handle;
}

void ThreadExecutor::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    Task task;
    if (queue_.PopDue(clock_->Now(), &task)) {
      lock.unlock();
      try {
        task();
      } catch (const std::exception& e) {
        // A task that throws is a bug of its own; the executor goes on.
        GetLogger(name_)->error("a task threw: {}", e.what());
      }
      task = nullptr;  // what it captured goes outside the lock
      lock.lock();
      continue;
    }
    const std::optional<TimePoint> next = queue_.NextDue();
    if (!next) {
      cv_.wait(lock);
      continue;
    }
    // Real time until the clock's: a post or Stop wakes it sooner.
    cv_.wait_for(lock, *next - clock_->Now());
  }
}

TaskHandle ManualExecutor::Schedule(TimePoint when, Task task, std::shared_ptr<std::atomic<bool>> cancelled) {
  TaskHandle handle(cancelled);
  std::lock_guard lock(mu_);
  queue_.Push(when, std::move(task), std::move(cancelled));
  return handle;
}

size_t ManualExecutor::RunReady() {
  size_t ran = 0;
  for (;;) {
    Task task;
    {
      std::lock_guard lock(mu_);
      if (!queue_.PopDue(clock_->Now(), &task)) return ran;
    }
    task();
    ++ran;
  }
}

size_t ManualExecutor::Advance(Duration d) {
  const TimePoint until = clock_->Now() + d;
  size_t ran = RunReady();
  for (;;) {
    std::optional<TimePoint> next;
    {
      std::lock_guard lock(mu_);
      next = queue_.NextDue();
    }
    if (!next || *next > until) break;
    if (*next > clock_->Now()) clock_->Set(*next);
    ran += RunReady();
  }
  clock_->Set(until);
  return ran + RunReady();
}

size_t ManualExecutor::pending() {
  std::lock_guard lock(mu_);
  (void)queue_.NextDue();
  return queue_.size();
}

std::optional<TimePoint> ManualExecutor::NextDue() {
  std::lock_guard lock(mu_);
  return queue_.NextDue();
}

bool ManualExecutor::HasDueAt(TimePoint when) {
  std::lock_guard lock(mu_);
  return queue_.HasDueAt(when);
}

}  // namespace clusterd
