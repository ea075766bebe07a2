// Whether the gRPC port still accepts new connections, behind /readyz and
// /healthz.
//
// gRPC 1.51's listener stops accepting for good the first time accept()
// fails with anything but EAGAIN/EINTR (EMFILE included: on_read in
// tcp_server_posix.cc goes to its error path and never re-arms), and
// nothing in the API reports it. So the check cannot trust a flag: it asks
// whether a new connection to the port is accepted and answered
// (Health/Check), the way a client would, over a connection of its own (a
// fresh subchannel each time), every interval on a thread of its own. A
// connection that is accepted (the server's HTTP/2 settings arrive) but whose
// Health/Check is not answered in time passes, counted as slow: the server is
// busy, its listener is not dead.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/security/credentials.h>

#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

class GrpcSelfCheck {
 public:
  struct Options {
    std::string target;  // host:port of the listener, reachable from here
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    std::chrono::nanoseconds interval{};  // 0: never checked (always ok)
    std::chrono::nanoseconds timeout{};
  };

  // Registers clusterd_grpc_self_check_ok, _failures_total and _slow_total.
  GrpcSelfCheck(Options options, MetricsRegistry* metrics);
  ~GrpcSelfCheck();

  // Runs the first check before returning (so /readyz is truthful from the
  // first probe on), then one every interval until Stop.
  void Start();
  void Stop();

  bool ok() const { return ok_.load(); }
  // Why the last check failed.
  std::string problem() const;
  // How long the check has failed without a break (0 while it passes).
  std::chrono::nanoseconds failing_for() const;

  // One check: logs a change and publishes its result.
  Status RunOnce();

 private:
  void Loop();

  const Options options_;
  Counter* failures_;
  Counter* slow_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::atomic<bool> ok_{true};
  // When the check started failing without a break (steady clock, ns; 0
  // while it passes).
  std::atomic<int64_t> failing_since_{0};
  mutable std::mutex problem_mu_;
  std::string problem_;  // guarded by problem_mu_
  uint64_t checks_ = 0;  // RunOnce's caller only (Start, then the thread)
};

}  // namespace clusterd
