#include "clusterd/server/server.h"

#include <atomic>
#include <filesystem>
#include <mutex>
#include <shared_mutex>
#include <set>

#include <boost/asio/thread_pool.hpp>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/server_builder.h>

#include "clusterd/actuator.h"
#include "clusterd/catalog.h"
#include "clusterd/cluster_state.h"
#include "clusterd/coordinator.h"
#include "clusterd/engine.h"
#include "clusterd/job_agent_hub.h"
#include "clusterd/server/admin_service.h"
#include "clusterd/server/agent_service.h"
#include "clusterd/server/cluster_service.h"
#include "clusterd/server/health_service.h"
#include "clusterd/server/job_service.h"
#include "clusterd/storage/store.h"
#include "clusterd/watch_hub.h"
#include "common/http_server.h"
#include "common/levels.h"
#include "common/logging.h"
#include "common/metrics.h"

namespace clusterd {

struct ClusterdServer::Impl {
  ClusterdConfig config;
  const Clock* clock;
  MetricsRegistry metrics;
  Catalog catalog;
  std::unique_ptr<storage::Store> store;
  std::unique_ptr<ClusterState> state;
  std::unique_ptr<WatchHub> hub;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Actuator> actuator;
  JobAgentHub job_agents;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<boost::asio::thread_pool> watch_pool;
  std::unique_ptr<AgentService> agent_service;
  std::unique_ptr<ClusterServiceImpl> cluster_service;
  std::unique_ptr<FaultServiceImpl> fault_service;
  std::unique_ptr<HealthServiceImpl> health_service;
  std::unique_ptr<JobServiceImpl> job_service;
  std::unique_ptr<AdminServiceImpl> admin_service;
  std::unique_ptr<grpc::Server> grpc_server;
  HttpServer http;
  int grpc_port = 0;
  std::atomic<bool> serving{false};
  bool shut_down = false;

  // The per-health and per-level gauges read the state's summary, which is
  // cached per revision (ClusterState::GetSummary), so a scrape walks the
  // state at most once.
  v1::GetSummaryResponse ScrapeSummary() {
    std::shared_lock state_lock(state->mutex());
    return state->GetSummary();
  }
};

ClusterdServer::ClusterdServer(ClusterdConfig config, const Clock* clock) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->clock = clock;
}

ClusterdServer::~ClusterdServer() { Shutdown(); }

Status ClusterdServer::Start() {
  Impl& s = *impl_;
  auto log = GetLogger("server");
  const ClusterdConfig& cfg = s.config;

  s.catalog = Catalog::Default(cfg.default_level);
  if (!cfg.catalog_file.empty()) CLUSTERD_RETURN_IF_ERROR(s.catalog.MergeFile(cfg.catalog_file));
  log->info("fault catalog: {} codes, default level {}", s.catalog.size(), v1::FaultLevel_Name(s.catalog.default_level()));

  std::error_code ec;
  std::filesystem::create_directories(cfg.data_dir, ec);
  if (ec) return InvalidArgument("data_dir " + cfg.data_dir + ": " + ec.message());
  auto store = storage::Store::Open(cfg.data_dir);
  if (!store.ok()) return store.status();
  s.store = std::move(*store);
  s.state = std::make_unique<ClusterState>(s.store.get(), &s.catalog, s.clock);
  CLUSTERD_RETURN_IF_ERROR(s.state->Load());
  s.hub = std::make_unique<WatchHub>(s.store.get(), cfg.watch_cache_events);
  s.hub->Init(s.state->revision());

  EngineOptions eo;
  eo.node_grace = cfg.node_grace;
  eo.retention_events = cfg.retention_events;
  eo.retention_age = cfg.retention_age;
  eo.retention_interval = cfg.retention_interval;
  eo.commit_delay = cfg.commit_delay;
  s.engine = std::make_unique<Engine>(s.state.get(), s.store.get(), s.hub.get(), s.clock, eo, &s.metrics);

  if (cfg.actuator == "exec") {
    ExecActuatorOptions xo;
    xo.command = cfg.actuator_command;
    auto actuator = MakeExecActuator(xo);
    if (!actuator.ok()) return actuator.status();
    s.actuator = std::move(*actuator);
  } else if (cfg.actuator == "webhook") {
    WebhookActuatorOptions wo;
    wo.url = cfg.actuator_url;
    auto actuator = MakeWebhookActuator(wo);
    if (!actuator.ok()) return actuator.status();
    s.actuator = std::move(*actuator);
  } else {
    s.actuator = MakeNoneActuator();
  }
  log->info("recovery actuator: {}", s.actuator->kind());
  CoordinatorOptions co;
  co.limits.max_concurrent_recoveries = static_cast<int>(cfg.max_concurrent_recoveries);
  co.limits.max_isolated_node_percent = static_cast<int>(cfg.max_isolated_node_percent);
  co.budget_window = cfg.recovery_budget_window;
  co.resume_grace = cfg.recovery_resume_grace;
  s.coordinator = std::make_unique<Coordinator>(&s.job_agents, s.actuator.get(), s.clock, co, &s.metrics);
  s.coordinator->set_submit([engine = s.engine.get()](Engine::Apply apply) { return engine->Submit(std::move(apply)); });
  s.engine->set_tick([coordinator = s.coordinator.get()](ClusterState& state, TimePoint now, Mutation* m,
                                                          std::vector<Engine::Done>* after) {
    return coordinator->Tick(state, now, m, after);
  });
  s.metrics.AddCallbackGauge("clusterd_job_agents", "Attached job recovery agents.",
                             [&s] { return static_cast<double>(s.job_agents.attached()); });
  s.engine->Start();

  s.watch_pool = std::make_unique<boost::asio::thread_pool>(2);
  AgentServiceOptions ao;
  ao.max_inflight_per_stream = cfg.max_inflight_per_stream;
  ao.max_streams = cfg.max_streams;
  ao.heartbeat_interval = cfg.heartbeat_interval;
  ao.node_grace = cfg.node_grace;
  s.agent_service = std::make_unique<AgentService>(s.state.get(), s.engine.get(), ao, &s.metrics);
  WatchOptions wo;
  wo.max_lag_events = cfg.watch_max_lag_events;
  s.cluster_service =
      std::make_unique<ClusterServiceImpl>(s.state.get(), s.hub.get(), s.watch_pool.get(), wo, &s.metrics);
  s.fault_service = std::make_unique<FaultServiceImpl>(s.engine.get());
  s.job_service =
      std::make_unique<JobServiceImpl>(s.state.get(), s.engine.get(), s.coordinator.get(), &s.job_agents);
  s.admin_service = std::make_unique<AdminServiceImpl>(s.state.get(), s.engine.get());

  s.metrics.AddCallbackGauge("clusterd_revision", "Current durable revision.",
                             [&s] { return static_cast<double>(s.state->durable_revision()); });
  s.metrics.AddCallbackGauge("clusterd_compacted_revision", "Highest revision removed from the event log.",
                             [&s] { return static_cast<double>(s.state->compacted_revision()); });
  s.metrics.AddCallbackGauge("clusterd_nodes", "Registered nodes.", [&s] {
    std::shared_lock lock(s.state->mutex());
    return static_cast<double>(s.state->node_count());
  });
  // Health breakdowns for alerting (e.g. devices unhealthy, nodes unknown).
  using Pick = uint32_t (v1::HealthCounts::*)() const;
  const std::pair<const char*, Pick> kHealths[] = {{"healthy", &v1::HealthCounts::healthy},
                                                   {"sub_healthy", &v1::HealthCounts::sub_healthy},
                                                   {"unhealthy", &v1::HealthCounts::unhealthy},
                                                   {"unknown", &v1::HealthCounts::unknown}};
  for (const auto& [health, pick] : kHealths) {
    s.metrics.AddCallbackGauge(
        "clusterd_nodes_by_health", "Registered nodes per health.",
        [&s, pick = pick] { return static_cast<double>((s.ScrapeSummary().nodes().*pick)()); },
        {{"health", health}});
  }
  for (const auto& [health, pick] : kHealths) {
    s.metrics.AddCallbackGauge(
        "clusterd_devices_by_health", "Accelerator devices per health.",
        [&s, pick = pick] { return static_cast<double>((s.ScrapeSummary().devices().*pick)()); },
        {{"health", health}});
  }
  for (int level = v1::FAULT_LEVEL_NOT_HANDLE; level <= v1::FAULT_LEVEL_SEPARATE; ++level) {
    const std::string name = v1::FaultLevel_Name(static_cast<v1::FaultLevel>(level));
    s.metrics.AddCallbackGauge(
        "clusterd_active_faults", "Active faults per level.",
        [&s, name] {
          const auto summary = s.ScrapeSummary();
          auto it = summary.active_faults_by_level().find(name);
          return it == summary.active_faults_by_level().end() ? 0.0 : static_cast<double>(it->second);
        },
        {{"level", ShortLevelName(static_cast<v1::FaultLevel>(level))}});
  }

  s.health_service = std::make_unique<HealthServiceImpl>(std::set<std::string>{
      "clusterd.v1.NodeAgentService", "clusterd.v1.ClusterService", "clusterd.v1.FaultService",
      "clusterd.v1.JobService", "clusterd.v1.AdminService"});
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(cfg.listen, grpc::InsecureServerCredentials(), &s.grpc_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(cfg.max_message_bytes));
  builder.SetMaxSendMessageSize(64 << 20);
  // Detect dead agents' connections even when they send nothing.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5'000);
  builder.RegisterService(s.agent_service.get());
  builder.RegisterService(s.cluster_service.get());
  builder.RegisterService(s.fault_service.get());
  builder.RegisterService(s.health_service.get());
  builder.RegisterService(s.job_service.get());
  builder.RegisterService(s.admin_service.get());
  s.grpc_server = builder.BuildAndStart();
  if (!s.grpc_server || s.grpc_port == 0) {
    return Unavailable("cannot listen for gRPC on " + cfg.listen + " (address in use or invalid?)");
  }

  s.http.Handle("GET", "/healthz", [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ok\n"}; });
  s.http.Handle("GET", "/readyz", [&s](const HttpRequest&) {
    if (!s.serving.load()) return HttpResponse{503, "text/plain", "not serving\n"};
    return HttpResponse{200, "text/plain", "ready\n"};
  });
  s.http.Handle("GET", "/metrics", [&s](const HttpRequest&) {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", s.metrics.Render()};
  });
  CLUSTERD_RETURN_IF_ERROR(s.http.Start(cfg.http_listen));
  s.serving = true;
  s.health_service->SetServing(true);
  log->info("serving gRPC on port {} and HTTP on port {} (revision {})", s.grpc_port, s.http.port(),
            s.state->revision());
  return Status::Ok();
}

void ClusterdServer::Shutdown() {
  Impl& s = *impl_;
  if (s.shut_down) return;
  s.shut_down = true;
  s.serving = false;
  if (s.health_service) s.health_service->SetServing(false);
  auto log = GetLogger("server");
  if (s.grpc_server) {
    // Streams are cancelled after the deadline; unary calls in flight finish.
    s.grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  // Actions in flight finish and report to the engine (their results are
  // committed by Stop); anything not reported is dispatched again at restart.
  if (s.actuator) s.actuator->Stop();
  if (s.engine) s.engine->Stop();
  if (s.grpc_server) s.grpc_server->Wait();
  if (s.watch_pool) s.watch_pool->join();
  s.http.Stop();
  s.grpc_server.reset();
  s.store.reset();
  log->info("shut down");
}

int ClusterdServer::grpc_port() const { return impl_->grpc_port; }
int ClusterdServer::http_port() const { return impl_->http.port(); }

}  // namespace clusterd
