// grpc.health.v1.Health for ClusterD: SERVING while the server accepts work,
// NOT_SERVING while it drains. Knows the overall server ("") and each
// clusterd.v1 service by name. A standby (standby_server.h) serves only some:
// the others answer NOT_SERVING.
#pragma once

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"

namespace clusterd {

class HealthServiceImpl final : public grpc::health::v1::Health::CallbackService {
 public:
  explicit HealthServiceImpl(std::set<std::string> services) : services_(std::move(services)) {}
  // `serving_only`: while serving, these say SERVING and every other name
  // (the overall server "" included) NOT_SERVING.
  HealthServiceImpl(std::set<std::string> services, std::set<std::string> serving_only)
      : services_(std::move(services)), serving_only_(std::move(serving_only)) {}

  void SetServing(bool serving) { serving_.store(serving); }

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::health::v1::HealthCheckResponse* resp) override;
  // Sends the current status once and keeps the stream open until the client
  // or the server's shutdown cancels it.
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req) override;

 private:
  grpc::health::v1::HealthCheckResponse::ServingStatus StatusOf(const std::string& service) const;

  const std::set<std::string> services_;
  const std::set<std::string> serving_only_;  // empty: all of them
  std::atomic<bool> serving_{false};
};

}  // namespace clusterd
