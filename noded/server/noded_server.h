// Wires NodeD together: the Outbox, the accelerator backend, the Agent and its
// polling thread, the stream to ClusterD and the HTTP endpoints (plus the
// simulator's fault-injection endpoint in sim mode).
#pragma once

#include <memory>
#include <ostream>

#include "common/status.h"
#include "noded/server/config.h"

namespace clusterd::noded {

class NodedServer {
 public:
  explicit NodedServer(NodedConfig config);
  ~NodedServer();

  Status Start();
  // Stops polling and the stream; what is in the Outbox stays for the next start.
  void Shutdown();
  int http_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `noded --probe`: the accelerator backend of `config` initialised, its
// devices, one Poll, the driver versions it gives the software chain and
// its node faults, printed to `out` as one JSON object; no Outbox, no
// stream, no threads left behind. 0 when the devices could be listed (no
// driver is a listing of none, with its node fault), 1 otherwise (the error
// in the object).
int RunProbe(const NodedConfig& config, std::ostream& out);

}  // namespace clusterd::noded
