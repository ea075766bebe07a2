// Wires NodeD together: the Outbox, the accelerator backend, the Agent and its
// polling thread, the stream to ClusterD and the HTTP endpoints (plus the
// simulator's fault-injection endpoint in sim mode).
#pragma once

#include <memory>

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

}  // namespace clusterd::noded
