#include "test/support/wait.h"

#include <thread>

namespace clusterd::testing {

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds deadline) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

}  // namespace clusterd::testing
