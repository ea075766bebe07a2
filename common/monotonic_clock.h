// A Clock that never steps: steady time, for deciding timeouts that a change
// of the wall clock must neither stretch nor cut short (an etcd lease's
// validity, a retry interval). Its readings are only compared with each
// other: their epoch is the machine's boot, not 1970, so they are no
// timestamps to show or store.
#pragma once

#include <chrono>

#include "common/clock.h"

namespace clusterd {

class MonotonicClock final : public Clock {
 public:
  TimePoint Now() const override {
    return TimePoint(
        std::chrono::duration_cast<TimePoint::duration>(std::chrono::steady_clock::now().time_since_epoch()));
  }
  static MonotonicClock& Instance() {
    static MonotonicClock clock;
    return clock;
  }
};

}  // namespace clusterd
