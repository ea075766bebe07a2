// SIGTERM/SIGINT handling for the daemons: block the signals in every thread
// (call before starting any), then wait for one on the main thread.
#pragma once

namespace clusterd {

void BlockTerminationSignals();
// Returns the signal number received.
int WaitForTerminationSignal();

}  // namespace clusterd
