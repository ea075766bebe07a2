// Raw gRPC baselines: a NodeAgentService that acknowledges every transition
// as soon as it is read, with no storage and no state (same message shapes
// and the same one-read/one-write-in-flight discipline as clusterd's
// reactor); grpc.health.v1.Health/Check answering SERVING at once (the
// trivial unary baseline of scenario 9); and ClusterService.ListNodes /
// GetSummary answering canned responses (the same-shape unary baseline of
// scenario 9: serialization and transport, no lookup); and
// ClusterService.Watch, the raw server-streaming baseline of scenario 6: each
// transition read becomes an event (clusterd's fields) sent to every Watch
// stream, no storage, no history. Server reflection is on, for ghz.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "clusterd/v1/cluster.pb.h"
#include "common.h"

namespace clusterd::bench {

// Starts `clusterd-bench --sink-server PORT` (this binary) on a free port and
// waits until it accepts connections; "" or why not.
std::string StartSinkProcess(ChildProcess* proc, int* port);

// Serves until SIGTERM/SIGINT on 127.0.0.1:port: `clusterd-bench --sink-server PORT`,
// the sink as its own process so /proc CPU and RSS are the sink's alone.
int RunSinkServer(int port);

class SinkServer {
 public:
  explicit SinkServer(int port = 0);  // 0: any free port
  ~SinkServer();
  int port() const { return port_; }
  // What ListNodes and GetSummary answer (whatever the request).
  void SetQueryAnswers(v1::ListNodesResponse list, v1::GetSummaryResponse summary);

 private:
  struct Fanout;
  struct Service;
  struct Health;
  struct Cluster;
  std::unique_ptr<Fanout> fanout_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<Health> health_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace clusterd::bench
