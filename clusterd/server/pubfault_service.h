// gRPC adapter for MindCluster's PubFault.SendPublicFault (pubfault.h,
// docs/mindcluster.md): validates like the reference server, rate-limits per
// resource, and answers once the faults are durable. The gRPC status is OK
// unless the caller may not call it at all; the outcome is RespStatus.code.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "clusterd/engine.h"
#include "clusterd/pubfault.h"
#include "clusterd/server/auth.h"
#include "common/metrics.h"
#include "mindcluster/pubfault.grpc.pb.h"

namespace clusterd {

class PubFaultServiceImpl final : public ::PubFault::CallbackService {
 public:
  // `engine`, `auth`, `clock` and `metrics` must outlive this.
  PubFaultServiceImpl(Engine* engine, const Authenticator* auth, const Clock* clock, PubFaultCodeTable table,
                      PubFaultOptions options, MetricsRegistry* metrics);

  grpc::ServerUnaryReactor* SendPublicFault(grpc::CallbackServerContext* ctx, const ::PublicFaultRequest* req,
                                            ::RespStatus* resp) override;

 private:
  void Count(int32_t code);

  Engine* engine_;
  const Authenticator* auth_;
  const PubFaultCodeTable table_;
  const PubFaultOptions options_;
  PubFaultRateLimiter limiter_;
  std::map<int32_t, Counter*> replies_;  // by RespStatus code; fixed after construction
  Counter* faults_applied_ = nullptr;
  Counter* faults_dropped_ = nullptr;
};

}  // namespace clusterd
