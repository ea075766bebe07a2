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

}  // namespace clusterd
