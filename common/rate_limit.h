// A token bucket of `rate` per second with a burst of one second's worth,
// on the steady clock. Thread-safe. The Recover and TrainingDataTrace
// services put it in front of their calls (shared, and per job).
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>

namespace clusterd {

class RateLimit {
 public:
  explicit RateLimit(double rate) : rate_(std::max(rate, 1.0)), tokens_(rate_) {}
  // Takes one token; false (nothing taken) when the bucket is empty.
  bool Take() {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - at_).count();
    at_ = now;
    tokens_ = std::min(rate_, tokens_ + std::max(elapsed, 0.0) * rate_);
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

 private:
  std::mutex mu_;
  const double rate_;
  double tokens_;
  std::chrono::steady_clock::time_point at_ = std::chrono::steady_clock::now();
};

}  // namespace clusterd
