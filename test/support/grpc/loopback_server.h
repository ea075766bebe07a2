// A gRPC server on 127.0.0.1 (port 0, plaintext) serving the services given,
// and a channel to it: for a test of one service without a whole ClusterD.
// The services must outlive the server.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

namespace clusterd::testing {

struct LoopbackServer {
  std::unique_ptr<grpc::Server> server;  // nullptr: it did not start
  std::shared_ptr<grpc::Channel> channel;
};

inline LoopbackServer StartLoopbackServer(std::initializer_list<grpc::Service*> services) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  LoopbackServer out;
  out.server = builder.BuildAndStart();
  if (out.server) {
    out.channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  }
  return out;
}

}  // namespace clusterd::testing
