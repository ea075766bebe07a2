#include "clusterd/server/server.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <set>
#include <thread>

#include <boost/asio/thread_pool.hpp>
#include <grpcpp/create_channel.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/server_builder.h>

#include "clusterd/engine/disk_monitor.h"
#include "clusterd/engine/engine.h"
#include "clusterd/engine/integration.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/engine/writer_rules.h"
#include "clusterd/state/validation_rule.h"
#include "clusterd/state/pingmesh_rule.h"
#include "clusterd/k8s/token_reviewer.h"
#include "clusterd/mindcluster/grpc/config_service.h"
#include "clusterd/mindcluster/grpc/fault_service.h"
#include "clusterd/mindcluster/grpc/job_feed.h"
#include "clusterd/mindcluster/grpc/job_service.h"
#include "clusterd/mindcluster/grpc/pubfault_service.h"
#include "clusterd/mindcluster/grpc/recover_service.h"
#include "clusterd/mindcluster/grpc/trace_service.h"
#include "clusterd/mindcluster/grpc/view_service.h"
#include "clusterd/mindcluster/k8s/taskd_objects.h"
#include "clusterd/k8s/context.h"
#include "clusterd/recovery/actuators/actuator.h"
#include "clusterd/recovery/actuators/registry.h"
#include "clusterd/recovery/coordinator/coordinator.h"
#include "clusterd/recovery/coordinator/job_agent_hub.h"
#include "clusterd/server/admin_service.h"
#include "clusterd/server/agent_service.h"
#include "clusterd/edge/auth.h"
#include "clusterd/server/cluster_service.h"
#include "clusterd/server/health_service.h"
#include "clusterd/server/http_api.h"
#include "clusterd/server/job_service.h"
#include "clusterd/server/probe_routes.h"
#include "clusterd/progress/monitor.h"
#include "clusterd/server/registries.h"
#include "clusterd/server/self_check.h"
#include "clusterd/server/server_parts.h"
#include "clusterd/server/status_page.h"
#include "clusterd/edge/tls.h"
#include "clusterd/state/catalog.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/state/evidence.h"
#include "clusterd/state/incidents.h"
#include "clusterd/state/response_limits.h"
#include "clusterd/storage/rocksdb_store.h"
#include "common/duration.h"
#include "common/fd_limit.h"
#include "common/http_server.h"
#include "common/levels.h"
#include "common/logging.h"
#include "common/metrics.h"

namespace clusterd {

struct ClusterdServer::Impl {
  ClusterdConfig config;
  const Clock* clock;
  Executor* timers = nullptr;  // SetTimers; nullptr: each its own thread
  MetricsRegistry metrics;
  Catalog catalog;
  // The state, its store and its one writer (OpenState, StartWriter).
  std::unique_ptr<DiskMonitor> disk_monitor;
  std::unique_ptr<storage::Store> store;
  // The writer's timed policies (engine/writer_rules.h): attached to the
  // state, run by the engine; outlive both.
  WriterRules rules;
  // The writer's messages for the agents (validation requests, probe plans), on their way to the
  // streams (state/agent_outbox.h); outlives the rules and the services.
  AgentOutbox outbox;
  std::unique_ptr<ClusterState> state;
  std::unique_ptr<WatchHub> hub;
  std::unique_ptr<Engine> engine;
  // Recovery: how actions reach the cluster, and who decides them.
  std::unique_ptr<Actuator> actuator;
  JobAgentHub job_agents;
  std::unique_ptr<Coordinator> coordinator;
  // Job progress: hangs, slow ranks, ETTR (progress/monitor.h).
  std::unique_ptr<ProgressMonitor> progress;
  // The gRPC edge (MakeServices, StartGrpc): who made each write
  // (edge/auth.h), before the services that use it.
  std::unique_ptr<TokenReviewer> token_reviewer;
  std::unique_ptr<Authenticator> authenticator;
  std::unique_ptr<boost::asio::thread_pool> watch_pool;
  // MindCluster's job summaries (job.Job, config.Config): outlives their
  // services, which hold it.
  std::unique_ptr<JobSummaryFeed> job_feed;
  // The Recover service's writes to TaskD jobs' Kubernetes objects (when an
  // integration on Kubernetes is configured); outlives the services.
  std::unique_ptr<TaskdKubeObjects> taskd_objects;
  struct Services {
    std::unique_ptr<AgentService> agent;
    std::unique_ptr<ClusterServiceImpl> cluster;
    std::unique_ptr<FaultServiceImpl> fault;
    std::unique_ptr<HealthServiceImpl> health;
    std::unique_ptr<JobServiceImpl> job;
    std::unique_ptr<AdminServiceImpl> admin;
    std::unique_ptr<MindClusterFaultService> mindcluster_fault;
    std::unique_ptr<PubFaultServiceImpl> pubfault;
    std::unique_ptr<RecoverServiceImpl> recover;
    std::unique_ptr<TrainingDataTraceService> trace;
    std::unique_ptr<MindClusterJobService> mindcluster_job;
    std::unique_ptr<MindClusterConfigService> mindcluster_config;
    std::unique_ptr<MindClusterViewService> mindcluster_view;
    void RegisterWith(grpc::ServerBuilder& builder) const {
      for (grpc::Service* service : std::initializer_list<grpc::Service*>{
               agent.get(), cluster.get(), fault.get(), health.get(), job.get(), admin.get(), mindcluster_fault.get(),
               pubfault.get(), recover.get(), trace.get(), mindcluster_job.get(), mindcluster_config.get(),
               mindcluster_view.get()}) {
        builder.RegisterService(service);
      }
    }
  } services;
  std::unique_ptr<grpc::Server> grpc_server;
  int grpc_port = 0;
  std::unique_ptr<GrpcSelfCheck> self_check;  // behind /readyz and /healthz
  std::unique_ptr<HttpServer> http;
  std::unique_ptr<HttpServer> probe_http;  // probe_listen; null without it
  // Integrations (integration.h), each with its own facade and env; the
  // vector is filled once, before any starts (the env's address is theirs).
  struct RunningIntegration {
    std::unique_ptr<Integration> integration;
    std::unique_ptr<ClusterCommands> commands;
    IntegrationEnv env;
  };
  std::vector<std::unique_ptr<Integration>> added_integrations;  // AddIntegration, until Start
  ClusterdServer::StoreWrapper store_wrapper;                    // WrapStore, used by OpenState
  std::function<std::string()> readiness;                        // SetReadinessCheck, for /readyz
  struct ExtraRoute {
    std::string method, path;
    HttpServer::Handler handler;
  };
  std::vector<ExtraRoute> extra_routes;  // AddHttpHandler
  std::vector<RunningIntegration> integrations;
  std::atomic<bool> serving{false};
  bool shut_down = false;

  // Start's stages, in order.
  // The catalog, the data dir, the store (read-only below the disk
  // reserve), the state loaded from it and the watch hub.
  Status OpenState();
  // The actuator, the coordinator and the writer with its hooks.
  Status StartWriter();
  // The authenticator and every gRPC service.
  Status MakeServices();
  // Gauges over the state.
  void AddStateMetrics();
  Status StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials);
  Status StartHttp();
  // Creates the configured and added integrations and starts them in order.
  Status StartIntegrations();
  std::string SelfCheckTarget() const;

  // The per-health and per-level gauges read the state's summary, which is
  // cached per revision (StateView::GetSummary), so a scrape walks the
  // state at most once.
  v1::GetSummaryResponse ScrapeSummary() {
    return state->Read([](const StateView& st) { return st.GetSummary(); });
  }
};

ClusterdServer::ClusterdServer(ClusterdConfig config, const Clock* clock) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->clock = clock;
}

ClusterdServer::~ClusterdServer() { Shutdown(); }

Status ClusterdServer::Start() {
  Impl& s = *impl_;
  CLUSTERD_RETURN_IF_ERROR(ValidateSecurity(s.config));
  // Certificate files are checked before anything is opened.
  auto credentials = MakeServerCredentials(s.config);
  if (!credentials.ok()) return credentials.status();
  CLUSTERD_RETURN_IF_ERROR(s.OpenState());
  CLUSTERD_RETURN_IF_ERROR(s.StartWriter());
  CLUSTERD_RETURN_IF_ERROR(s.MakeServices());
  s.AddStateMetrics();
  CLUSTERD_RETURN_IF_ERROR(s.StartGrpc(*credentials));
  // Agents can reach this process from now: their grace starts here.
  s.engine->Serve();
  CLUSTERD_RETURN_IF_ERROR(s.StartHttp());
  CLUSTERD_RETURN_IF_ERROR(s.StartIntegrations());
  s.serving = true;
  s.services.health->SetServing(true);
  s.self_check->Start();
  GetLogger("server")->info("serving gRPC on port {} and HTTP on port {} (revision {})", s.grpc_port, s.http->port(),
                            s.state->revision());
  return Status::Ok();
}

Status ClusterdServer::Impl::OpenState() {
  auto log = GetLogger("server");
  const ClusterdConfig& cfg = config;
  catalog = Catalog::Default(cfg.default_level);
  if (!cfg.catalog_file.empty()) CLUSTERD_RETURN_IF_ERROR(catalog.MergeFile(cfg.catalog_file));
  log->info("fault catalog: {} codes, default level {}", catalog.size(), v1::FaultLevel_Name(catalog.default_level()));

  std::error_code ec;
  std::filesystem::create_directories(cfg.data_dir, ec);
  if (ec) return InvalidArgument("data_dir " + cfg.data_dir + ": " + ec.message());
  // Free space decides how the store opens: RocksDB writes files at every
  // writable open and asserts when one fails, so below the reserve it opens
  // read-only (reads and Watch work; the engine reopens it for writing once
  // space returns).
  DiskMonitorOptions dmo;
  dmo.path = cfg.data_dir;
  dmo.min_free_bytes = cfg.min_free_bytes;
  dmo.min_free_inodes = cfg.min_free_inodes;
  disk_monitor = std::make_unique<DiskMonitor>(MakeStatvfsSource(cfg.data_dir), dmo, &metrics);
  storage::StoreOptions store_options;
  if (auto low = disk_monitor->LowSpaceReason()) {
    if (!std::filesystem::exists(std::filesystem::path(cfg.data_dir) / "CURRENT")) {
      return Unavailable("cannot create a new store: " + *low);
    }
    log->error("opening the store read-only, writes refused: {}", *low);
    store_options.read_only = true;
  }
  auto opened = storage::RocksDbStore::Open(cfg.data_dir, store_options);
  if (!opened.ok()) return opened.status();
  store = std::move(*opened);
  if (store_wrapper) {
    auto wrapped = store_wrapper(std::move(store), &metrics);
    if (!wrapped.ok()) return wrapped.status();
    store = std::move(*wrapped);
  }
  state = std::make_unique<ClusterState>(store.get(), &catalog, clock);
  state->set_limits(MakeStateLimits(cfg, &metrics));
  state->set_reporter_levels({cfg.reporter_levels.begin(), cfg.reporter_levels.end()});
  // The timed policies: separation, chain drift, repeat offenders,
  // auto-clear (engine/writer_rules.h); they see the load.
  auto made_rules = MakeWriterRules(cfg);
  if (!made_rules.ok()) return made_rules.status();
  rules = std::move(*made_rules);
  if (auto* incidents = [&]() -> IncidentRule* {
        for (const auto& r : rules.policies) {
          if (auto* found = dynamic_cast<IncidentRule*>(r.get())) return found;
        }
        return nullptr;
      }()) {
    // Per domain level: open incidents and domains isolated by them.
    std::map<std::string, Gauge*> open, isolated;
    for (const DomainLevel& level : incidents->model().levels()) {
      open[level.name] = &metrics.AddGauge(
          "clusterd_incidents_open", "open incidents per domain level (docs/domains.md)", {{"level", level.name}});
      isolated[level.name] = &metrics.AddGauge(
          "clusterd_domains_isolated", "domains isolated as a whole by an open incident", {{"level", level.name}});
    }
    incidents->SetMetrics(&metrics.AddCounter("clusterd_incidents_opened_total", "incidents opened"), std::move(open),
                          std::move(isolated));
    // Per domain level: the domains degraded now (a faulted member or an
    // open incident), counted at each scrape under the state's lock.
    for (const DomainLevel& level : incidents->model().levels()) {
      metrics.AddCallbackGauge("clusterd_domains_degraded",
                               "domains with a member at SUB_HEALTH or worse or an open incident, per level",
                               [this, incidents, name = level.name] {
                                 return static_cast<double>(state->Read([&](const StateView& v) {
                                   return DegradedDomainsByLevel(v, incidents->model(), incidents)[name];
                                 }));
                               },
                               {{"level", level.name}});
    }
  }
  rules.AttachTo(state.get());
  if (ValidationRule* validation = state->Attached<ValidationRule>()) {
    validation->set_outbox(&outbox);
    validation->set_metrics(MakeValidationMetrics(&metrics));
  }
  if (auto* pingmesh = state->Attached<PingmeshRule>()) {
    pingmesh->set_outbox(&outbox);
    metrics.AddCallbackGauge("clusterd_pingmesh_agents",
                             "Agents the pingmesh can probe (connected with a probe address).",
                             [pingmesh] { return static_cast<double>(pingmesh->agents()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_rounds", "Probe rounds planned since the start.",
                             [pingmesh] { return static_cast<double>(pingmesh->rounds()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_round_probes", "Probes planned in the last round.",
                             [pingmesh] { return static_cast<double>(pingmesh->planned_probes()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_findings", "Node, link and domain findings active.",
                             [pingmesh] { return static_cast<double>(pingmesh->active_findings()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_results",
                             "Probe results (one direction of one pair in one report) taken since the start.",
                             [pingmesh] { return static_cast<double>(pingmesh->results()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_results_dropped",
                             "Probe results dropped: a window held pingmesh max pairs already.",
                             [pingmesh] { return static_cast<double>(pingmesh->dropped()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_device_results",
                             "Device-plane probe results (one port pair in one report) taken since the start.",
                             [pingmesh] { return static_cast<double>(pingmesh->device_results()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_device_unprobed_reports",
                             "Probe reports whose agent could not probe the device plane (no tool) since the start.",
                             [pingmesh] { return static_cast<double>(pingmesh->device_unprobed()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_suspects", "Suspect directions probed again by more peers now.",
                             [pingmesh] { return static_cast<double>(pingmesh->suspects()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_suspects_dropped",
                             "Suspect directions not taken since the start: pingmesh_max_suspects held already.",
                             [pingmesh] { return static_cast<double>(pingmesh->suspects_dropped()); });
    metrics.AddCallbackGauge("clusterd_pingmesh_suspect_probes", "Extra probes the last round planned for suspects.",
                             [pingmesh] { return static_cast<double>(pingmesh->suspect_probes()); });
  }
  if (auto* evidence = state->Attached<EvidenceRule>()) {
    evidence->set_outbox(&outbox);
    EvidenceMetrics em;
    em.asked =
        &metrics.AddCounter("clusterd_evidence_requests_total", "Member nodes asked for an incident's evidence.");
    em.stored = &metrics.AddCounter("clusterd_evidence_bundles_stored_total", "Evidence bundles stored.");
    em.failed = &metrics.AddCounter("clusterd_evidence_failed_total",
                                    "Members whose evidence failed (no bundle in time, the agent collects none).");
    em.refused = &metrics.AddCounter(
        "clusterd_evidence_bundles_refused_total",
        "Evidence bundles refused: not asked for, for another node, over evidence_max_bundle_bytes, or twice.");
    em.dropped = &metrics.AddCounter("clusterd_evidence_members_dropped_total",
                                     "Incident members not asked for evidence: the tracked members' bound reached.");
    em.expired_age = &metrics.AddCounter("clusterd_evidence_bundles_expired_total",
                                         "Evidence bundles deleted, by evidence_max_age or evidence_max_total_bytes.",
                                         {{"reason", "age"}});
    em.expired_size = &metrics.AddCounter("clusterd_evidence_bundles_expired_total",
                                          "Evidence bundles deleted, by evidence_max_age or evidence_max_total_bytes.",
                                          {{"reason", "size"}});
    em.bytes = &metrics.AddGauge("clusterd_evidence_bytes", "Bytes of the stored evidence bundles.");
    em.bundles = &metrics.AddGauge("clusterd_evidence_bundles", "Evidence bundles stored.");
    em.in_flight = &metrics.AddGauge("clusterd_evidence_in_flight", "Members asked for evidence, not answered yet.");
    em.queued = &metrics.AddGauge("clusterd_evidence_queued", "Members waiting to be asked for evidence.");
    evidence->set_metrics(em);
  }
  state->set_recoveries_caused_window(cfg.repeat_offender_window);
  state->set_release_chain_check(cfg.release_chain_check == "always"  ? ClusterState::ReleaseChainCheck::kAlways
                                 : cfg.release_chain_check == "never" ? ClusterState::ReleaseChainCheck::kNever
                                                                      : ClusterState::ReleaseChainCheck::kAutomatic);
  CLUSTERD_RETURN_IF_ERROR(state->Load());
  hub = std::make_unique<WatchHub>(store.get(), cfg.watch_cache_events, cfg.watch_cache_bytes);
  hub->Init(state->revision());

  return Status::Ok();
}

Status ClusterdServer::Impl::StartWriter() {
  auto log = GetLogger("server");
  const ClusterdConfig& cfg = config;
  EngineOptions eo;
  eo.node_grace = cfg.node_grace;
  eo.reattach_grace = cfg.reattach_grace;
  eo.liveness_waits_for_serve = true;  // Start calls Serve once gRPC listens
  eo.retention_events = cfg.retention_events;
  eo.retention_age = cfg.retention_age;
  eo.retention_interval = cfg.retention_interval;
  eo.commit_delay = cfg.commit_delay;
  // One etcd transaction carries a group's change set (docs/ha.md).
  if (!cfg.ha.etcd_endpoints.empty()) eo.max_group_bytes = cfg.ha.max_entry_bytes;
  eo.recovery_retention.max_count = cfg.recovery_retention_count;
  eo.recovery_retention.max_age = cfg.recovery_retention_age;
  // Budgets count recoveries within the budget window and escalation looks
  // back 30 minutes: retention never takes those.
  eo.recovery_retention.protect = std::max<std::chrono::nanoseconds>(cfg.recovery_budget_window, std::chrono::hours(1));

  auto made = BuiltinActuators().Create(cfg);
  if (!made.ok()) return made.status();
  actuator = std::move(*made);
  log->info("recovery actuator: {}", actuator->kind());
  CoordinatorOptions co;
  co.limits.max_concurrent_recoveries = static_cast<int>(cfg.max_concurrent_recoveries);
  co.limits.max_isolated_node_percent = static_cast<int>(cfg.max_isolated_node_percent);
  co.budget_window = cfg.recovery_budget_window;
  co.resume_grace = cfg.recovery_resume_grace;
  co.agent_attach_grace = cfg.recovery_agent_attach_grace;
  coordinator = std::make_unique<Coordinator>(&job_agents, actuator.get(), clock, co, &metrics);
  // The writer's hooks, fixed at construction: the timed policies, then the
  // coordinator (engine/writer_rules.h has the order), after every group;
  // the coordinator gets the Engine's Submit for its actuators' answers.
  Engine::Hooks hooks;
  hooks.rules = rules.Ordered(coordinator.get());
  hooks.disk_monitor = disk_monitor.get();
  engine = std::make_unique<Engine>(state.get(), store.get(), hub.get(), clock, eo, &metrics, std::move(hooks));
  metrics.AddCallbackGauge("clusterd_job_agents", "Attached job recovery agents.",
                           [this] { return static_cast<double>(job_agents.attached()); });
  engine->Start();
  ProgressOptions po;
  po.snapshot_interval = cfg.progress_snapshot_interval;
  po.max_jobs = cfg.progress_max_jobs;
  progress = std::make_unique<ProgressMonitor>(
      state.get(), [engine = engine.get()](Engine::Apply apply) { return engine->Submit(std::move(apply)); },
      timers != nullptr ? &timers->clock() : clock, po, &metrics);
  if (timers != nullptr) {
    progress->Start(timers);
  } else {
    progress->Start();
  }

  return Status::Ok();
}

Status ClusterdServer::Impl::MakeServices() {
  const ClusterdConfig& cfg = config;
  watch_pool = std::make_unique<boost::asio::thread_pool>(2);
  AgentServiceOptions ao;
  ao.max_inflight_per_stream = cfg.max_inflight_per_stream;
  ao.max_streams = cfg.max_streams;
  ao.heartbeat_interval = cfg.heartbeat_interval;
  ao.node_grace = cfg.node_grace;
  ao.hello_timeout = cfg.hello_timeout;
  ao.max_streams_per_peer = cfg.max_streams_per_peer;
  ao.inventory_update_interval = cfg.inventory_update_interval;
  ao.timers = timers;  // the hello deadlines; nullptr: the service's own thread
  // Who may call what (edge/auth.h), before the services that ask it.
  auto made_auth = MakeConfiguredAuthenticator(cfg, &metrics, &token_reviewer);
  if (!made_auth.ok()) return made_auth.status();
  authenticator = std::move(*made_auth);
  services.agent = std::make_unique<AgentService>(state.get(), engine.get(), ao, &metrics, authenticator.get());
  services.agent->set_progress(progress.get());
  services.agent->set_outbox(&outbox);
  services.cluster = std::make_unique<ClusterServiceImpl>(state.get(), hub.get(), watch_pool.get(),
                                                          MakeWatchOptions(cfg), &metrics, authenticator.get());
  services.fault = std::make_unique<FaultServiceImpl>(engine.get(), authenticator.get());
  services.job = std::make_unique<JobServiceImpl>(state.get(), engine.get(), coordinator.get(), &job_agents,
                                                  authenticator.get(), progress.get());
  services.admin = std::make_unique<AdminServiceImpl>(state.get(), engine.get(), authenticator.get());
  MindClusterFaultOptions mfo;
  mfo.max_subscribers = cfg.mindcluster_max_subscribers;
  // One client's share is never more than all of them (a lowered total with
  // the default share stays a valid config).
  mfo.max_registrations_per_principal =
      std::min(cfg.mindcluster_max_registrations_per_principal, cfg.mindcluster_max_subscribers);
  mfo.registration_ttl = cfg.mindcluster_registration_ttl;
  mfo.timers = timers;
  services.mindcluster_fault = std::make_unique<MindClusterFaultService>(state.get(), hub.get(), watch_pool.get(), mfo,
                                                                         &metrics, authenticator.get());
  {
    // MindCluster's job summaries and rank tables, from the jobs' records
    // (the registration limits are fault.Fault's settings).
    job_feed = std::make_unique<JobSummaryFeed>(state.get(), hub.get(), watch_pool.get(), clock,
                                                mindcluster::JobSummaryOptions{}, &metrics);
    job_feed->Start();
    MindClusterJobOptions jo;
    jo.max_clients = cfg.mindcluster_max_subscribers;
    jo.max_clients_per_principal = mfo.max_registrations_per_principal;
    jo.registration_ttl = cfg.mindcluster_registration_ttl;
    // Their rates and registrations' idle time run on the timers' clock
    // when a test sets it (SetTimers), else on the monotonic clock.
    jo.clock = timers != nullptr ? &timers->clock() : nullptr;
    services.mindcluster_job =
        std::make_unique<MindClusterJobService>(job_feed.get(), watch_pool.get(), authenticator.get(), jo, &metrics);
    MindClusterConfigOptions co;
    co.max_registrations = cfg.mindcluster_max_subscribers;
    co.registration_ttl = cfg.mindcluster_registration_ttl;
    co.clock = jo.clock;
    services.mindcluster_config =
        std::make_unique<MindClusterConfigService>(job_feed.get(), watch_pool.get(), authenticator.get(), co, &metrics);
  }
  RecoverServiceOptions ro;
  ro.mindio_wait = cfg.mindcluster_taskd_wait;
  ro.om_wait = cfg.mindcluster_om_wait;
  ro.store = store.get();  // the NIC switches and stress tests kept
  ro.executor = timers;
  const auto& integrations = cfg.integrations;
  if (std::find(integrations.begin(), integrations.end(), "kubernetes") != integrations.end() ||
      std::find(integrations.begin(), integrations.end(), "mindcluster") != integrations.end()) {
    auto ctx = KubernetesContext::For(cfg);
    if (!ctx.ok()) return ctx.status();
    // The context owns the client and outlives the writer that holds it.
    std::shared_ptr<const k8s::ApiClient> client(*ctx, &(*ctx)->client());
    taskd_objects = std::make_unique<TaskdKubeObjects>(std::move(client), clock, &metrics);
    ro.objects = taskd_objects.get();
  }
  services.recover = std::make_unique<RecoverServiceImpl>(state.get(), engine.get(), coordinator.get(), &job_agents,
                                                          authenticator.get(), ro, &metrics);
  // A job's MindCluster view (clusterctl, the status page).
  services.mindcluster_view =
      std::make_unique<MindClusterViewService>(job_feed.get(), services.recover.get(), authenticator.get());
  {
    // MindCluster's profiling switches, kept in the store (loaded here).
    TrainingDataTraceOptions to;
    to.limits.max_jobs = cfg.datatrace_max_jobs;
    to.limits.max_subscribers = cfg.datatrace_max_subscribers;
    to.limits.max_subscribers_per_job = cfg.datatrace_max_subscribers_per_job;
    auto trace = TrainingDataTraceService::Make(state.get(), engine.get(), store.get(), authenticator.get(), clock, to,
                                                &metrics);
    if (!trace.ok()) return trace.status();
    services.trace = std::move(*trace);
  }
  {
    PubFaultCodeTable table = PubFaultCodeTable::Default();
    if (!cfg.pubfault.code_table_file.empty()) CLUSTERD_RETURN_IF_ERROR(table.MergeFile(cfg.pubfault.code_table_file));
    PubFaultOptions po;
    po.resources = cfg.pubfault.resources;
    po.rate_per_second = cfg.pubfault.rate_per_second;
    po.burst = cfg.pubfault.burst;
    po.max_faults = cfg.pubfault.max_faults;
    services.pubfault = std::make_unique<PubFaultServiceImpl>(engine.get(), authenticator.get(), clock,
                                                              std::move(table), std::move(po), &metrics);
    metrics.AddCallbackGauge("clusterd_pubfault_active", "MindCluster public faults active.", [this] {
      return static_cast<double>(state->Read([](const StateView& st) { return st.active_public_faults(); }));
    });
  }

  return Status::Ok();
}

void ClusterdServer::Impl::AddStateMetrics() {
  // The watch cache's two bounds (watch_cache_events, watch_cache_bytes).
  metrics.AddCallbackGauge("clusterd_watch_cache_events", "Recent events the watch cache holds in memory.",
                           [this] { return hub ? static_cast<double>(hub->cached_events()) : 0.0; });
  metrics.AddCallbackGauge("clusterd_watch_cache_bytes", "Encoded bytes of the events the watch cache holds.",
                           [this] { return hub ? static_cast<double>(hub->cached_bytes()) : 0.0; });
  metrics.AddCallbackGauge("clusterd_revision", "Current durable revision.",
                           [this] { return static_cast<double>(state->durable_revision()); });
  metrics.AddCallbackGauge("clusterd_compacted_revision", "Highest revision removed from the event log.",
                           [this] { return static_cast<double>(state->compacted_revision()); });
  metrics.AddCallbackGauge("clusterd_nodes", "Registered nodes.", [this] {
    return static_cast<double>(state->Read([](const StateView& st) { return st.node_count(); }));
  });
  // Health breakdowns for alerting (e.g. devices unhealthy, nodes unknown).
  using Pick = uint32_t (v1::HealthCounts::*)() const;
  const std::pair<const char*, Pick> kHealths[] = {{"healthy", &v1::HealthCounts::healthy},
                                                   {"sub_healthy", &v1::HealthCounts::sub_healthy},
                                                   {"unhealthy", &v1::HealthCounts::unhealthy},
                                                   {"unknown", &v1::HealthCounts::unknown}};
  for (const auto& [health, pick] : kHealths) {
    metrics.AddCallbackGauge("clusterd_nodes_by_health", "Registered nodes per health.",
                             [this, pick = pick] { return static_cast<double>((ScrapeSummary().nodes().*pick)()); },
                             {{"health", health}});
  }
  for (const auto& [health, pick] : kHealths) {
    metrics.AddCallbackGauge("clusterd_devices_by_health", "Accelerator devices per health.",
                             [this, pick = pick] { return static_cast<double>((ScrapeSummary().devices().*pick)()); },
                             {{"health", health}});
  }
  for (int level = v1::FAULT_LEVEL_NOT_HANDLE; level <= v1::FAULT_LEVEL_SEPARATE; ++level) {
    const std::string name = v1::FaultLevel_Name(static_cast<v1::FaultLevel>(level));
    metrics.AddCallbackGauge("clusterd_active_faults", "Active faults per level.",
                             [this, name] {
                               const auto summary = ScrapeSummary();
                               auto it = summary.active_faults_by_level().find(name);
                               return it == summary.active_faults_by_level().end() ? 0.0
                                                                                   : static_cast<double>(it->second);
                             },
                             {{"level", ShortLevelName(static_cast<v1::FaultLevel>(level))}});
  }
}

Status ClusterdServer::Impl::StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  const ClusterdConfig& cfg = config;
  services.health = std::make_unique<HealthServiceImpl>(std::set<std::string>{
      "clusterd.v1.NodeAgentService", "clusterd.v1.ClusterService", "clusterd.v1.FaultService",
      "clusterd.v1.JobService", "clusterd.v1.AdminService", "fault.Fault", "job.Job", "config.Config"});
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(cfg.listen, credentials, &grpc_port);
  ConfigureGrpcServer(cfg, &builder);
  services.RegisterWith(builder);
  grpc_server = builder.BuildAndStart();
  if (!grpc_server || grpc_port == 0) {
    return Unavailable("cannot listen for gRPC on " + cfg.listen + " (address in use or invalid?)");
  }

  metrics.AddCallbackGauge("clusterd_open_fds", "File descriptors open in the clusterd process.", [] {
    auto n = CountOpenFds();
    return n ? static_cast<double>(*n) : -1.0;
  });
  metrics.AddCallbackGauge("clusterd_max_fds", "Soft limit on open file descriptors (RLIMIT_NOFILE).", [] {
    auto n = SoftFdLimit();
    return n ? static_cast<double>(*n) : -1.0;
  });
  GrpcSelfCheck::Options sco;
  sco.target = SelfCheckTarget();
  sco.interval = cfg.grpc_self_check_interval;
  sco.timeout = cfg.grpc_self_check_timeout;
  if (sco.interval.count() > 0) sco.credentials = MakeSelfCheckCredentials(cfg);
  self_check = std::make_unique<GrpcSelfCheck>(std::move(sco), &metrics);
  return Status::Ok();
}

Status ClusterdServer::Impl::StartHttp() {
  const ClusterdConfig& cfg = config;
  HttpServer::Options ho = MakeHttpServerOptions(cfg);
  ho.metrics = &metrics;
  ho.metrics_prefix = "clusterd";
  // TLS with the gRPC port's files unless --insecure (docs/security.md).
  auto tls = MakeHttpTls(cfg);
  if (!tls.ok()) return tls.status();
  ho.tls = std::move(*tls);
  http = std::make_unique<HttpServer>(ho);
  ProbeRoutes probes;
  probes.unhealthy = [this]() -> std::string {
    const auto failing = self_check->failing_for();
    const auto limit = config.grpc_unhealthy_after;
    if (failing.count() > 0 && limit.count() > 0 && failing >= limit) {
      return "gRPC port not accepting for " + FormatDuration(failing) + " (grpc_unhealthy_after " +
             FormatDuration(limit) + "): only a restart brings the listener back";
    }
    return "";
  };
  probes.ready = [this]() -> Probe {
    if (!serving.load()) return {false, "not serving"};
    if (readiness) {
      if (auto problem = readiness(); !problem.empty()) return {false, problem};
    }
    if (!self_check->ok()) return {false, "gRPC port not accepting: " + self_check->problem()};
    // Writes refused (disk below its reserve) keep the pod ready: reads and
    // Watch still work, and a 503 would take the only replica out of its
    // Service. The reason is in the body, on /readyz/writes (503), on
    // clusterd_store_writable and in the ClusterdWritesRefused alert.
    if (Status refusal = engine->WriteRefusal(); !refusal.ok()) {
      return {true, "ready for reads; writes refused: " + refusal.message()};
    }
    return {true, "ready"};
  };
  probes.metrics = [this] { return metrics.Render(); };
  // A scraper's bearer token, of a principal that may read the cluster.
  if (cfg.auth.metrics_auth) {
    probes.metrics_auth = authenticator.get();
    probes.metrics_roles = MetricsRoles(cfg.auth.metrics_role);
  }
  // The probe-only port: plaintext, the probes and nothing else.
  if (!cfg.probe_listen.empty()) {
    HttpServer::Options po;
    po.max_connections = 64;
    po.max_connections_per_peer = 16;
    po.io_timeout = std::min<std::chrono::nanoseconds>(cfg.http_timeout, std::chrono::seconds(5));
    probe_http = std::make_unique<HttpServer>(po);
    RegisterProbeRoutes(probe_http.get(), ProbeOnly(probes));
  }
  RegisterProbeRoutes(http.get(), std::move(probes));
  const auto writable = ProbeHandler([this]() -> Probe {
    if (Status refusal = engine->WriteRefusal(); !refusal.ok()) {
      return {false, "writes refused: " + refusal.message()};
    }
    return {true, "writable"};
  });
  http->Handle("GET", "/readyz/writes", writable);
  if (probe_http) probe_http->Handle("GET", "/readyz/writes", writable);
  HttpApiOptions api;
  api.progress = progress.get();
  api.require_viewer = !cfg.insecure;
  if (services.mindcluster_view) {
    api.mindcluster_job = [view = services.mindcluster_view.get()](const v1::GetMindClusterJobRequest& req) {
      return view->View(req);
    };
  }
  RegisterHttpApi(http.get(), state.get(), hub.get(), authenticator.get(), api);
  // The status page holds no data (it reads the API above), so no token.
  for (const char* path : {"/", "/index.html"}) {
    http->Handle("GET", path, [](const HttpRequest&) {
      return HttpResponse{200, "text/html; charset=utf-8", std::string(StatusPageHtml())};
    });
  }
  for (auto& route : extra_routes) {
    // A probe added by the caller (/readyz/replica) answers on the probe port too.
    if (probe_http && route.method == "GET" && route.path.starts_with("/readyz")) {
      probe_http->Handle(route.method, route.path, route.handler);
    }
    http->Handle(route.method, route.path, std::move(route.handler));
  }
  CLUSTERD_RETURN_IF_ERROR(http->Start(cfg.http_listen));
  if (probe_http) CLUSTERD_RETURN_IF_ERROR(probe_http->Start(cfg.probe_listen));
  return Status::Ok();
}

void ClusterdServer::Shutdown() {
  Impl& s = *impl_;
  if (s.shut_down) return;
  s.shut_down = true;
  s.serving = false;
  if (s.services.health) s.services.health->SetServing(false);
  auto log = GetLogger("server");
  if (s.grpc_server) {
    // Streams are cancelled after the deadline; unary calls in flight finish
    // (PubFault's planning worker answers its queued calls meanwhile: the
    // writer still runs, and the worker ends with its service).
    s.grpc_server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::duration_cast<std::chrono::system_clock::duration>(s.config.shutdown_grace));
  }
  // Integrations stop while the writer still answers their writes.
  for (auto it = s.integrations.rbegin(); it != s.integrations.rend(); ++it) it->integration->Stop();
  // Actions in flight finish and report to the engine (their results are
  // committed by Stop); anything not reported is dispatched again at restart.
  if (s.actuator) s.actuator->Stop();
  if (s.progress) s.progress->Stop();
  if (s.engine) s.engine->Stop();
  if (s.self_check) s.self_check->Stop();
  if (s.grpc_server) s.grpc_server->Wait();
  if (s.watch_pool) s.watch_pool->join();
  if (s.http) s.http->Stop();
  if (s.probe_http) s.probe_http->Stop();
  s.grpc_server.reset();
  s.store.reset();
  log->info("shut down");
}

void ClusterdServer::WrapStore(StoreWrapper wrapper) { impl_->store_wrapper = std::move(wrapper); }

void ClusterdServer::AddHttpHandler(std::string method, std::string path, HttpServer::Handler handler) {
  impl_->extra_routes.push_back({std::move(method), std::move(path), std::move(handler)});
}

void ClusterdServer::SetTimers(Executor* timers) { impl_->timers = timers; }

void ClusterdServer::SetReadinessCheck(std::function<std::string()> check) { impl_->readiness = std::move(check); }

void ClusterdServer::AddIntegration(std::unique_ptr<Integration> integration) {
  impl_->added_integrations.push_back(std::move(integration));
}

Status ClusterdServer::Impl::StartIntegrations() {
  std::vector<std::unique_ptr<Integration>> all;
  for (const auto& name : config.integrations) {
    auto made = BuiltinIntegrations().Create(name, config);
    if (!made.ok()) return made.status();
    all.push_back(std::move(*made));
  }
  for (auto& added : added_integrations) all.push_back(std::move(added));
  added_integrations.clear();
  integrations.reserve(all.size());
  for (auto& integration : all) {
    Principal principal;
    principal.kind = Principal::Kind::kInternal;
    principal.name = std::string(integration->name());
    RunningIntegration& r = integrations.emplace_back();
    r.commands = MakeEngineCommands(engine.get(), state.get(), std::move(principal));
    r.env = IntegrationEnv{r.commands.get(), clock, &metrics};
    r.integration = std::move(integration);
  }
  // Shutdown stops every one of them, started or not (Stop tolerates that).
  for (auto& r : integrations) {
    if (Status st = r.integration->Start(r.env); !st.ok()) {
      return Status(st.code(), "integration " + std::string(r.integration->name()) + ": " + st.message());
    }
    GetLogger("server")->info("integration {} started", r.integration->name());
  }
  return Status::Ok();
}

int ClusterdServer::grpc_port() const { return impl_->grpc_port; }
int ClusterdServer::http_port() const { return impl_->http ? impl_->http->port() : 0; }
int ClusterdServer::probe_port() const { return impl_->probe_http ? impl_->probe_http->port() : 0; }

std::string ClusterdServer::Impl::SelfCheckTarget() const {
  // A wildcard listener is reached over loopback; a specific address as is.
  const std::string& listen = config.listen;
  const std::string host = listen.substr(0, listen.rfind(':'));
  std::string target_host = host;
  if (host == "0.0.0.0" || host.empty()) target_host = "127.0.0.1";
  if (host == "[::]") target_host = "[::1]";
  return target_host + ":" + std::to_string(grpc_port);
}

StateLimits MakeStateLimits(const ClusterdConfig& cfg, MetricsRegistry* metrics) {
  StateLimits limits;
  limits.max_job_ranks = cfg.max_job_ranks;
  limits.max_faults_per_node = cfg.max_faults_per_node;
  limits.max_job_impacts = cfg.max_job_impacts;
  const char* kRefusedHelp = "Fault raises refused at max_faults_per_node, by origin.";
  limits.faults_refused_agent =
      &metrics->AddCounter("clusterd_faults_refused_total", kRefusedHelp, {{"origin", "agent"}});
  limits.faults_refused_external =
      &metrics->AddCounter("clusterd_faults_refused_total", kRefusedHelp, {{"origin", "external"}});
  limits.jobs_refused = &metrics->AddCounter("clusterd_jobs_refused_total",
                                             "Jobs refused for size: more than max_job_ranks ranks or a record "
                                             "over 3 MiB.");
  const char* kTruncatedHelp = "Answers cut to fit a client's 4 MiB receive limit, by what was cut.";
  limits.job_impacts_truncated =
      &metrics->AddCounter("clusterd_answers_truncated_total", kTruncatedHelp, {{"what", "job_impacts"}});
  limits.node_faults_truncated =
      &metrics->AddCounter("clusterd_answers_truncated_total", kTruncatedHelp, {{"what", "node_faults"}});
  return limits;
}

ValidationMetrics MakeValidationMetrics(MetricsRegistry* metrics) {
  ValidationMetrics vm;
  const char* kFinished = "Validations finished (docs/validation.md), by outcome.";
  vm.started = &metrics->AddCounter("clusterd_validations_started_total",
                                    "Validations queued before a device or node returns to service.");
  vm.passed = &metrics->AddCounter("clusterd_validations_finished_total", kFinished, {{"outcome", "passed"}});
  vm.failed = &metrics->AddCounter("clusterd_validations_finished_total", kFinished, {{"outcome", "failed"}});
  vm.skipped = &metrics->AddCounter("clusterd_validations_finished_total", kFinished, {{"outcome", "skipped"}});
  vm.flaps = &metrics->AddCounter("clusterd_validation_flaps_total",
                                  "Failed validations and returns that faulted again (the flap budget).");
  vm.held = &metrics->AddCounter("clusterd_validation_holds_total",
                                 "Devices and nodes held out after validation_flap_limit flaps.");
  vm.in_flight = &metrics->AddGauge("clusterd_validations_in_flight", "Validations asked of agents, not answered.");
  vm.queued = &metrics->AddGauge("clusterd_validations_queued",
                                 "Validations waiting for a slot (validation_max_per_node, validation_max_in_flight).");
  vm.held_now = &metrics->AddGauge("clusterd_validation_held", "Devices and nodes HELD now.");
  vm.return_seconds = &metrics->AddHistogram(
      "clusterd_validation_return_seconds",
      "Seconds from a validation's trigger (fault clear, separation due, the operator's release) to back in service.",
      {1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200});
  return vm;
}

StatusOr<std::unique_ptr<Authenticator>> MakeConfiguredAuthenticator(const ClusterdConfig& cfg,
                                                                     MetricsRegistry* metrics,
                                                                     std::unique_ptr<TokenReviewer>* reviewer_out) {
  AuthOptions auth_options;
  auth_options.insecure = cfg.insecure;
  auth_options.token_file = cfg.auth.token_file;
  auth_options.agent_service_accounts = cfg.auth.agent_service_accounts;
  auth_options.review_cache_ttl = cfg.auth.token_cache_ttl;
  for (const auto& b : cfg.auth.bindings) {
    auto binding = ParseRoleBinding(b);
    if (!binding.ok()) return InvalidArgument("auth_bindings: " + binding.status().message());
    auth_options.bindings.push_back(std::move(*binding));
  }
  if (cfg.auth.token_review) {
    auto reviewer = MakeKubernetesTokenReviewer(cfg);
    if (!reviewer.ok()) return reviewer.status();
    *reviewer_out = std::move(*reviewer);
    auth_options.reviewer = reviewer_out->get();
  }
  return MakeAuthenticator(std::move(auth_options), metrics);
}

WatchOptions MakeWatchOptions(const ClusterdConfig& cfg) {
  WatchOptions wo;
  wo.max_lag_events = cfg.watch_max_lag_events;
  wo.coalesce = cfg.watch_coalesce;
  wo.max_streams = cfg.max_watch_streams;
  wo.max_streams_per_peer = cfg.max_watch_streams_per_peer;
  return wo;
}

HttpServer::Options MakeHttpServerOptions(const ClusterdConfig& cfg) {
  HttpServer::Options ho;
  ho.max_connections = cfg.max_http_connections;
  // One client never holds more than half of the port, whatever the two
  // settings say (a total at or below the per-peer default stays valid).
  ho.max_connections_per_peer =
      cfg.max_http_connections_per_peer == 0
          ? 0
          : std::min<std::size_t>(cfg.max_http_connections_per_peer, std::max(1u, cfg.max_http_connections / 2));
  ho.reserved_paths = {"/healthz", "/readyz", "/readyz/replica", "/metrics"};
  ho.reserved_connections = std::min<std::size_t>(16, cfg.max_http_connections / 4);
  ho.io_timeout = cfg.http_timeout;
  return ho;
}

void ConfigureGrpcServer(const ClusterdConfig& cfg, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(static_cast<int>(cfg.max_message_bytes));
  // What every client accepts by default. Answers are built to fit it
  // (response_limits.h); one that did not would fail loudly here rather than
  // only for clients with default limits.
  builder->SetMaxSendMessageSize(static_cast<int>(kMaxSendBytes));
  // Detect dead agents' connections even when they send nothing.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 3'000);
  // A connection that never completes the HTTP/2 handshake (a raw TCP
  // connect that sends nothing) holds a descriptor until this passes; gRPC's
  // own default is 120s.
  builder->AddChannelArgument(
      GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
      static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(cfg.grpc_handshake_timeout).count()));
}

}  // namespace clusterd
