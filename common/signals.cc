#include "common/signals.h"

#include <pthread.h>
#include <signal.h>

namespace clusterd {
namespace {
sigset_t TerminationSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}
}  // namespace

void BlockTerminationSignals() {
  sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t signals = TerminationSignals();
  int sig = 0;
  sigwait(&signals, &sig);
  return sig;
}

int WaitForTerminationSignalFor(std::chrono::milliseconds timeout) {
  sigset_t signals = TerminationSignals();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  timespec ts{static_cast<time_t>(secs.count()), static_cast<long>((timeout - secs).count() * 1'000'000)};
  const int sig = sigtimedwait(&signals, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

}  // namespace clusterd
