// Time as a collaborator: components take a Clock& so tests can step time by
// hand instead of sleeping.
#pragma once

#include <atomic>
#include <chrono>

namespace clusterd {

using TimePoint = std::chrono::system_clock::time_point;
using Duration = std::chrono::nanoseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::system_clock::now(); }
  static SystemClock& Instance();
};

// Thread-safe manual clock for tests.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint(std::chrono::seconds(1'700'000'000)))
      : now_ns_(start.time_since_epoch().count()) {}
  TimePoint Now() const override { return TimePoint(TimePoint::duration(now_ns_.load())); }
  void Advance(Duration d) { now_ns_ += std::chrono::duration_cast<TimePoint::duration>(d).count(); }
  void Set(TimePoint t) { now_ns_ = t.time_since_epoch().count(); }

 private:
  std::atomic<TimePoint::duration::rep> now_ns_;
};

inline SystemClock& SystemClock::Instance() {
  static SystemClock clock;
  return clock;
}

}  // namespace clusterd
