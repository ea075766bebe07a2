// The one token bucket of the code base, on the injected Clock (tests step a
// FakeClock instead of waiting out a throttle).
//
// TokenBucket: `rate` tokens a second up to `burst`, starting full; not
// thread-safe (its owner's lock guards it). A clock that steps back refills
// nothing and is not held against later refills.
//
// RateLimit: a thread-safe bucket of `rate` per second with a burst of one
// second's worth. The MindCluster services put it in front of their calls
// (shared, per job, per client).
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>

#include "common/clock.h"

namespace clusterd {

class TokenBucket {
 public:
  TokenBucket(double rate, double burst, TimePoint now) : rate_(rate), burst_(burst), tokens_(burst), at_(now) {}

  // The tokens there are at `now` (refilled first).
  double Available(TimePoint now) {
    const double elapsed = std::chrono::duration<double>(now - at_).count();
    at_ = now;
    tokens_ = std::min(burst_, tokens_ + std::max(elapsed, 0.0) * rate_);
    return tokens_;
  }
  // Takes one token if at least 1 + keep are there: `keep` reserves tokens
  // for more urgent takers. False (nothing taken) otherwise.
  bool Take(TimePoint now, double keep = 0) {
    if (Available(now) < 1 + keep) return false;
    tokens_ -= 1;
    return true;
  }

 private:
  double rate_;
  double burst_;
  double tokens_;
  TimePoint at_;
};

class RateLimit {
 public:
  explicit RateLimit(double rate, const Clock* clock = &SystemClock::Instance())
      : clock_(clock), bucket_(std::max(rate, 1.0), std::max(rate, 1.0), clock->Now()) {}
  // Takes one token; false (nothing taken) when the bucket is empty.
  bool Take() {
    std::lock_guard lock(mu_);
    return bucket_.Take(clock_->Now());
  }

 private:
  std::mutex mu_;
  const Clock* const clock_;
  TokenBucket bucket_;
};

}  // namespace clusterd
