// SIGTERM/SIGINT handling for the daemons: block the signals in every thread
// (call before starting any), then wait for one on the main thread.
#pragma once

#include <chrono>

namespace clusterd {

void BlockTerminationSignals();
// Returns the signal number received.
int WaitForTerminationSignal();
// The same, waiting at most `timeout`; 0 when none arrived.
int WaitForTerminationSignalFor(std::chrono::milliseconds timeout);

}  // namespace clusterd
