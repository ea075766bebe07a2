// gRPC adapter for MindCluster's PubFault.SendPublicFault (pubfault.h,
// docs/mindcluster.md): validates like the reference server, rate-limits per
// resource, and answers once the faults are durable. The gRPC status is OK
// unless the caller may not call it at all; the outcome is RespStatus.code.
//
// Cheap work first, on the gRPC thread: the caller's role, the resource
// (allowed, and one the caller may report as), a rate-limit token of that
// resource (so every request from there on is charged, invalid ones too),
// then the request-level rules and size (CheckPubFaultRequest: O(repeated
// entries)). What passes is queued for the planning worker, one thread that
// validates every fault (PlanPublicFaults) and hands the plan to the writer:
// the gRPC threads serve every service (GetSummary, agents' streams) and
// never run the per-element validation. At most options.max_queued requests
// wait for it; beyond, 410 "busy".
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "clusterd/engine/engine.h"
#include "clusterd/mindcluster/pubfault.h"
#include "clusterd/edge/auth.h"
#include "common/metrics.h"
#include "mindcluster/pubfault.grpc.pb.h"

namespace clusterd {

class PubFaultServiceImpl final : public ::PubFault::CallbackService {
 public:
  struct Hooks {
    // Runs on the planning worker before each request it takes (tests: hold
    // the worker to fill its queue).
    std::function<void()> before_plan;
  };

  // `engine`, `auth`, `clock` and `metrics` must outlive this. Starts the
  // planning worker.
  PubFaultServiceImpl(Engine* engine, const Authenticator* auth, const Clock* clock, PubFaultCodeTable table,
                      PubFaultOptions options, MetricsRegistry* metrics, Hooks hooks = {});
  // Plans and answers what is still queued (the engine must still take or
  // refuse writes), then ends the worker. After the gRPC server's Shutdown,
  // which waits for the calls the worker answers, nothing is queued.
  ~PubFaultServiceImpl() override;

  grpc::ServerUnaryReactor* SendPublicFault(grpc::CallbackServerContext* ctx, const ::PublicFaultRequest* req,
                                            ::RespStatus* resp) override;

  // Requests waiting for the worker (not the one it is planning).
  size_t queued() const;

 private:
  // A call waiting for the worker; the request and the reply stay valid
  // until its reactor finishes.
  struct Pending {
    grpc::CallbackServerContext* ctx = nullptr;
    const ::PublicFaultRequest* req = nullptr;
    ::RespStatus* resp = nullptr;
    grpc::ServerUnaryReactor* reactor = nullptr;
  };

  void Count(int32_t code);
  void Answer(grpc::ServerUnaryReactor* reactor, ::RespStatus* resp, int32_t code, std::string info);
  void RunWorker();
  // Worker: validates the whole request and submits its plan to the writer.
  void Plan(const Pending& p);

  Engine* engine_;
  const Authenticator* auth_;
  const PubFaultCodeTable table_;
  const PubFaultOptions options_;
  const Hooks hooks_;
  PubFaultRateLimiter limiter_;
  std::map<int32_t, Counter*> replies_;  // by RespStatus code; fixed after construction
  Counter* faults_applied_ = nullptr;
  Counter* faults_dropped_ = nullptr;
  Counter* rate_limited_ = nullptr;
  Counter* busy_ = nullptr;
  Gauge* queue_depth_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;  // guarded by mu_; at most options_.max_queued
  bool stopping_ = false;      // guarded by mu_
  std::thread worker_;         // last: started once the rest is built
};

}  // namespace clusterd
