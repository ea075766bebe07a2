#include "clusterd/server/health_service.h"

namespace clusterd {

using grpc::health::v1::HealthCheckResponse;

HealthCheckResponse::ServingStatus HealthServiceImpl::StatusOf(const std::string& service) const {
  if (!service.empty() && !services_.count(service)) return HealthCheckResponse::SERVICE_UNKNOWN;
  if (!serving_only_.empty() && !serving_only_.count(service)) return HealthCheckResponse::NOT_SERVING;
  return serving_.load() ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

grpc::ServerUnaryReactor* HealthServiceImpl::Check(grpc::CallbackServerContext* ctx,
                                                   const grpc::health::v1::HealthCheckRequest* req,
                                                   HealthCheckResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  auto status = StatusOf(req->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service " + req->service()));
    return reactor;
  }
  resp->set_status(status);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

namespace {

class HealthWatchReactor final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  explicit HealthWatchReactor(HealthCheckResponse::ServingStatus status) {
    response_.set_status(status);
    StartWrite(&response_);
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    write_done_ = true;
    if (!ok || cancelled_) FinishOnce(grpc::Status::CANCELLED);
  }
  void OnCancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    if (write_done_) FinishOnce(grpc::Status::CANCELLED);
  }
  void OnDone() override { delete this; }

 private:
  void FinishOnce(grpc::Status status) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }
  std::mutex mu_;
  HealthCheckResponse response_;
  bool write_done_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
};

}  // namespace

grpc::ServerWriteReactor<HealthCheckResponse>* HealthServiceImpl::Watch(
    grpc::CallbackServerContext*, const grpc::health::v1::HealthCheckRequest* req) {
  return new HealthWatchReactor(StatusOf(req->service()));
}

}  // namespace clusterd
