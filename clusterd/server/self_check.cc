#include "clusterd/server/self_check.h"

#include <grpcpp/create_channel.h>

#include "common/duration.h"
#include "common/logging.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace clusterd {

GrpcSelfCheck::GrpcSelfCheck(Options options, MetricsRegistry* metrics) : options_(std::move(options)) {
  metrics->AddCallbackGauge("clusterd_grpc_self_check_ok",
                            "1 while a new loopback connection to the gRPC port is accepted and answered.",
                            [this] { return ok_.load() ? 1.0 : 0.0; });
  failures_ = &metrics->AddCounter("clusterd_grpc_self_check_failures_total",
                                   "gRPC self-checks (new connection + Health/Check) that failed.");
  slow_ = &metrics->AddCounter("clusterd_grpc_self_check_slow_total",
                               "gRPC self-checks whose new connection was accepted but whose Health/Check was not "
                               "answered within the timeout (a busy server: they pass).");
}

GrpcSelfCheck::~GrpcSelfCheck() { Stop(); }

void GrpcSelfCheck::Start() {
  if (options_.interval.count() <= 0) return;
  if (Status st = RunOnce(); !st.ok()) GetLogger("server")->warn("gRPC self-check: {}", st.message());
  thread_ = std::thread([this] { Loop(); });
}

void GrpcSelfCheck::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string GrpcSelfCheck::problem() const {
  std::lock_guard lock(problem_mu_);
  return problem_;
}

std::chrono::nanoseconds GrpcSelfCheck::failing_for() const {
  const int64_t since = failing_since_.load();
  if (since == 0) return std::chrono::nanoseconds(0);
  return std::chrono::steady_clock::now().time_since_epoch() - std::chrono::nanoseconds(since);
}

Status GrpcSelfCheck::RunOnce() {
  Status result = [&]() -> Status {
    grpc::ChannelArguments args;
    // A connection of its own every time: a reused one would prove nothing
    // about accept().
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    args.SetInt("clusterd.self_check", static_cast<int>(++checks_ % 1'000'000));
    auto channel = grpc::CreateCustomChannel(options_.target, options_.credentials, args);
    const std::string what = "Health/Check on a new connection to " + options_.target;
    // READY needs the server's HTTP/2 settings, which only an accepted
    // connection gets: this is what the check is for.
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + options_.timeout)) {
      return Unavailable(what + " failed within " + FormatDuration(options_.timeout) +
                         ": the connection was not accepted (channel " +
                         std::to_string(static_cast<int>(channel->GetState(false))) + ")");
    }
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options_.timeout);
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status st = stub->Check(&ctx, req, &resp);
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      // Accepted, not answered in time: a busy server (100,000 agents saying
      // hello at once), not a dead listener. Taking the pod out of its
      // Service now would only make the agents' storm longer.
      slow_->Inc();
      return Status::Ok();
    }
    if (!st.ok()) {
      return Unavailable(what + " failed within " + FormatDuration(options_.timeout) + ": " + st.error_message() +
                         " (code " + std::to_string(st.error_code()) + ")");
    }
    if (resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
      return Unavailable("Health/Check answered " +
                         grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()));
    }
    return Status::Ok();
  }();
  const bool was_ok = ok_.load();
  if (result.ok()) {
    if (!was_ok) GetLogger("server")->info("gRPC self-check passes again");
    failing_since_.store(0);
  } else {
    failures_->Inc();
    if (was_ok) {
      GetLogger("server")->error("gRPC self-check failed, /readyz answers 503: {}", result.message());
      failing_since_.store(std::chrono::steady_clock::now().time_since_epoch().count());
    }
    std::lock_guard lock(problem_mu_);
    problem_ = result.message();
  }
  ok_.store(result.ok());
  return result;
}

void GrpcSelfCheck::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (cv_.wait_for(lock, options_.interval, [this] { return stop_; })) return;
    lock.unlock();
    (void)RunOnce();  // logs and publishes its own result
    lock.lock();
  }
}

}  // namespace clusterd
