// A loopback TCP port that was free a moment ago, for starting a child
// process (a daemon under test, a benchmark's server) on a port it must be
// told up front. In-process servers bind port 0 instead.
#pragma once

namespace clusterd {

// 0 if no socket could be bound.
int FreeLoopbackPort();

}  // namespace clusterd
