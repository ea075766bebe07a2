// Waiting on a condition with a deadline: tests never sleep for
// synchronisation, they poll what they wait for.
#pragma once

#include <chrono>
#include <functional>

namespace clusterd::testing {

// Polls cond (every 5 ms) until it holds or the deadline passes; returns its
// last value. The deadline is a failure bound, never a timing assertion.
bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds deadline = std::chrono::seconds(20));

}  // namespace clusterd::testing
