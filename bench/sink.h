// Raw gRPC baseline: a NodeAgentService that acknowledges every transition
// as soon as it is read, with no storage and no state. Same message shapes
// and the same one-read/one-write-in-flight discipline as clusterd's reactor.
#pragma once

#include <memory>

#include <grpcpp/grpcpp.h>

namespace clusterd::bench {

class SinkServer {
 public:
  SinkServer();
  ~SinkServer();
  int port() const { return port_; }

 private:
  struct Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace clusterd::bench
