// The real clusterd binary as a child process, for the process-level tests
// (kill -9 and restart, a full disk, descriptor limits): plaintext, gRPC and
// HTTP on loopback ports picked at each Start, its data in a directory the
// test owns.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "test/support/process.h"

namespace clusterd::testing {

class ClusterdProcess {
 public:
  struct Options {
    std::string data_dir;
    // Added after the launcher's own flags (--listen, --insecure,
    // --http-listen, --data-dir, --log-level=warn, --shutdown-grace=0s: a
    // stop cancels the streams still open at once).
    std::vector<std::string> flags;
    // When not empty, the binary is started by /bin/sh after
    // `ulimit <ulimit>` (e.g. "-n 1024"), which applies to it alone.
    std::string ulimit;
    // Start also waits until /readyz answers 200, not only gRPC.
    bool wait_ready = false;
  };

  explicit ClusterdProcess(Options options) : options_(std::move(options)) {}
  explicit ClusterdProcess(std::string data_dir) { options_.data_dir = std::move(data_dir); }

  // Starts it on new ports and waits (30 s at most, a failure bound) until a
  // gRPC channel to it is connected; a fatal failure if it is not. Call as
  // ASSERT_NO_FATAL_FAILURE(server.Start()).
  void Start();
  // SIGKILL and reap (the destructor does it too).
  void Kill() { process_.Kill(); }
  // SIGTERM and wait: the waitpid status.
  int Terminate() { return process_.Terminate(); }

  // The channel Start connected (plaintext).
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  pid_t pid() const { return process_.pid(); }

 private:
  Options options_;
  ChildProcess process_;
  int grpc_port_ = 0;
  int http_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace clusterd::testing
