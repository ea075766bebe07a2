#include "clusterd/ha/standby_server.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include <boost/asio/thread_pool.hpp>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/async_generic_service.h>
#include <google/protobuf/descriptor.h>
#include <grpcpp/server_builder.h>

#include "clusterd/engine/watch_hub.h"
#include "clusterd/edge/auth.h"
#include "clusterd/server/cluster_service.h"
#include "clusterd/server/health_service.h"
#include "clusterd/server/server_parts.h"
#include "clusterd/edge/tls.h"
#include "clusterd/state/catalog.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/storage/key_codec.h"
#include "common/logging.h"

namespace clusterd {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A method of the leader's services ("/clusterd.v1.FaultService/Report"):
// one its generated code defines. Anything else is as unknown here as there.
bool LeaderServes(const std::string& method) {
  const size_t slash = method.rfind('/');
  if (method.empty() || method[0] != '/' || slash == 0 || slash == std::string::npos) return false;
  bool ours = false;
  for (const char* service : {"/clusterd.v1.", "/fault.Fault/", "/PubFault/", "/Recover/", "/TrainingDataTrace/",
                              "/job.Job/", "/config.Config/"}) {
    ours = ours || method.rfind(service, 0) == 0;
  }
  const std::string full = method.substr(1, slash - 1) + "." + method.substr(slash + 1);
  return ours && google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full) != nullptr;
}

// Every method a standby does not serve: refused at once, without reading
// the request, naming the leader.
class RefuseService final : public grpc::CallbackGenericService {
 public:
  RefuseService(std::string replica, std::function<std::string()> leader, Counter* refused)
      : replica_(std::move(replica)), leader_(std::move(leader)), refused_(refused) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(grpc::Status status) { Finish(std::move(status)); }
      void OnDone() override { delete this; }
    };
    const std::string& method = ctx->method();
    if (!LeaderServes(method))
      return new Reactor(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown method " + method));
    refused_->Inc();
    const std::string leader = leader_();
    return new Reactor(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                    "standby " + replica_ + " serves only ClusterService queries and Watch; " + method +
                                        " goes to the leader (" + (leader.empty() ? "none elected yet" : leader) +
                                        ")"));
  }

 private:
  const std::string replica_;
  const std::function<std::string()> leader_;
  Counter* refused_;
};

// The store's own counters, as written (the store's revision_at_open is
// from when it opened).
struct MetaCounters {
  uint64_t revision = 0;
  uint64_t compacted = 0;
};

StatusOr<MetaCounters> ReadMetaCounters(const storage::Store& store) {
  MetaCounters out;
  Status bad;
  Status st = store.ForEach(storage::Cf::kMeta, [&](std::string_view key, std::string_view value) {
    uint64_t* field = key == storage::kMetaRevision            ? &out.revision
                      : key == storage::kMetaCompactedRevision ? &out.compacted
                                                               : nullptr;
    if (!field) return;
    if (auto v = storage::DecodeU64(value)) {
      *field = *v;
    } else {
      bad = DataLoss("meta key " + std::string(key) + " in " + store.path() + " is not a u64");
    }
  });
  if (!st.ok()) return st;
  if (!bad.ok()) return bad;
  return out;
}

}  // namespace

struct StandbyServer::Impl {
  ClusterdConfig config;
  storage::Store* store;
  Options options;
  const Clock* clock;
  std::shared_ptr<spdlog::logger> log = GetLogger("standby");
  MetricsRegistry metrics;
  Catalog catalog;
  StateLimits limits;
  Counter* refused = nullptr;
  Counter* loads = nullptr;
  Counter* load_failures = nullptr;

  mutable std::mutex state_mu;
  std::shared_ptr<const ClusterState> state;  // what queries read
  std::atomic<uint64_t> state_revision{0};
  bool changed = false;  // the store changed since the last load (follower thread)
  SteadyClock::time_point last_load;
  SteadyClock::duration load_took{};
  std::unique_ptr<WatchHub> hub;

  std::unique_ptr<TokenReviewer> token_reviewer;
  std::unique_ptr<Authenticator> authenticator;
  std::unique_ptr<boost::asio::thread_pool> watch_pool;
  std::unique_ptr<ClusterServiceImpl> cluster;
  std::unique_ptr<HealthServiceImpl> health;
  std::unique_ptr<RefuseService> refuse;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  bool shut_down = false;

  std::atomic<int64_t> last_query{0};  // steady clock, for the refresh interval

  // For a query: it also makes loads more frequent for a while.
  std::shared_ptr<const ClusterState> QueryState() {
    last_query = SteadyClock::now().time_since_epoch().count();
    return CurrentState();
  }
  std::shared_ptr<const ClusterState> CurrentState() const {
    std::lock_guard lock(state_mu);
    return state;
  }

  // A fresh state from the store; the old one stays with the readers that
  // hold it.
  Status Load() {
    const auto start = SteadyClock::now();
    auto counters = ReadMetaCounters(*store);
    if (!counters.ok()) return counters.status();
    auto fresh = std::make_shared<ClusterState>(store, &catalog, clock);
    fresh->set_limits(limits);
    CLUSTERD_RETURN_IF_ERROR(fresh->Load(counters->revision, counters->compacted));
    {
      std::lock_guard lock(state_mu);
      state = std::move(fresh);
    }
    state_revision = counters->revision;
    changed = false;
    loads->Inc();
    last_load = SteadyClock::now();
    load_took = last_load - start;
    return Status::Ok();
  }

  // Whether the next load is due: sooner while clients query.
  bool LoadDue() const {
    const auto now = SteadyClock::now();
    const bool queried =
        now - SteadyClock::time_point(SteadyClock::duration(last_query.load())) < std::chrono::seconds(10);
    const std::chrono::nanoseconds interval = queried ? options.min_refresh_interval : options.idle_refresh_interval;
    return now >= last_load + std::max<SteadyClock::duration>(interval, load_took * 9);
  }
};

StandbyServer::StandbyServer(const ClusterdConfig& config, storage::Store* store, Options options, const Clock* clock)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = config;
  impl_->store = store;
  impl_->options = std::move(options);
  impl_->clock = clock;
}

StandbyServer::~StandbyServer() { Shutdown(); }

Status StandbyServer::Start() {
  Impl& s = *impl_;
  const ClusterdConfig& cfg = s.config;
  CLUSTERD_RETURN_IF_ERROR(ValidateSecurity(cfg));
  auto credentials = MakeServerCredentials(cfg);
  if (!credentials.ok()) return credentials.status();
  // Codes are resolved by the leader's writes; queries only read what it stored.
  s.catalog = Catalog::Default(cfg.default_level);
  s.limits = MakeStateLimits(cfg, &s.metrics);
  s.refused = &s.metrics.AddCounter("clusterd_standby_refused_total",
                                    "Calls a standby refused: everything but ClusterService queries and Watch.");
  s.loads = &s.metrics.AddCounter("clusterd_standby_state_loads_total",
                                  "Times a standby loaded its query state from its store.");
  s.load_failures = &s.metrics.AddCounter("clusterd_standby_state_load_failures_total",
                                          "Loads of a standby's query state that failed (the last one is kept).");
  s.metrics.AddCallbackGauge("clusterd_standby_state_revision",
                             "The revision a standby answers queries at (Watch follows the log entry by entry).",
                             [&s] { return static_cast<double>(s.state_revision.load()); });
  CLUSTERD_RETURN_IF_ERROR(s.Load());
  s.hub = std::make_unique<WatchHub>(s.store, cfg.watch_cache_events, cfg.watch_cache_bytes);
  s.hub->Init(s.state_revision);

  auto auth = MakeConfiguredAuthenticator(cfg, &s.metrics, &s.token_reviewer);
  if (!auth.ok()) return auth.status();
  s.authenticator = std::move(*auth);
  s.watch_pool = std::make_unique<boost::asio::thread_pool>(2);
  // Watch streams read the compaction floor only: they are not queries.
  s.cluster = std::make_unique<ClusterServiceImpl>([&s] { return s.QueryState(); }, s.hub.get(), s.watch_pool.get(),
                                                   MakeWatchOptions(cfg), &s.metrics, s.authenticator.get(),
                                                   [&s] { return s.CurrentState()->compacted_revision(); });
  s.health = std::make_unique<HealthServiceImpl>(
      std::set<std::string>{"clusterd.v1.NodeAgentService", "clusterd.v1.ClusterService", "clusterd.v1.FaultService",
                            "clusterd.v1.JobService", "clusterd.v1.AdminService", "fault.Fault"},
      std::set<std::string>{"clusterd.v1.ClusterService"});
  s.health->SetServing(true);
  s.refuse = std::make_unique<RefuseService>(s.options.replica_id, s.options.leader, s.refused);

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(cfg.listen, *credentials, &s.port);
  ConfigureGrpcServer(cfg, &builder);
  builder.RegisterService(s.cluster.get());
  builder.RegisterService(s.health.get());
  builder.RegisterCallbackGenericService(s.refuse.get());
  s.server = builder.BuildAndStart();
  if (!s.server || s.port == 0) {
    return Unavailable("cannot listen for gRPC on " + cfg.listen + " (address in use or invalid?)");
  }
  s.log->info("standby serving queries and Watch on gRPC port {} at revision {}", s.port, s.state_revision.load());
  return Status::Ok();
}

void StandbyServer::Applied(const storage::ChangeSet& changes) {
  Impl& s = *impl_;
  if (!s.hub) return;
  // Compaction and recovery retention change the store without a new
  // revision: any change makes a load due.
  s.changed = s.changed || !changes.empty();
  std::vector<v1::Event> events;
  for (const storage::Change& c : changes) {
    if (c.op != storage::Change::Op::kPut || c.table != storage::Cf::kEvents) continue;
    v1::Event e;
    if (e.ParseFromString(c.value)) {
      events.push_back(std::move(e));
    } else {
      s.log->error("an event record in the log does not parse (key {})", storage::HexEncode(c.key));
    }
  }
  if (events.empty()) return;
  std::sort(events.begin(), events.end(),
            [](const v1::Event& a, const v1::Event& b) { return a.revision() < b.revision(); });
  if (events.front().revision() != s.hub->head() + 1) {
    // Never expected (the log carries every revision in order); the cache
    // starts over and watchers read the store, which never skips silently.
    s.log->error("log events start at revision {}, the watch head is {}: watchers read the store",
                 events.front().revision(), s.hub->head());
    s.hub->Init(events.back().revision());
    return;
  }
  s.hub->Publish(std::move(events));
}

void StandbyServer::Refresh() {
  Impl& s = *impl_;
  if (!s.server || !s.changed || !s.LoadDue()) return;
  if (Status st = s.Load(); !st.ok()) {
    s.load_failures->Inc();
    s.last_load = SteadyClock::now();
    s.log->warn("loading the query state: {}", st.ToString());
  }
}

void StandbyServer::Shutdown() {
  Impl& s = *impl_;
  if (s.shut_down) return;
  s.shut_down = true;
  if (s.health) s.health->SetServing(false);
  if (s.server) {
    // Watch streams end now: their clients resume from their revision on
    // whichever replica they reach (this one, once it leads).
    s.server->Shutdown(std::chrono::system_clock::now());
    s.server->Wait();
  }
  if (s.watch_pool) s.watch_pool->join();
  s.server.reset();
}

int StandbyServer::grpc_port() const { return impl_->port; }
uint64_t StandbyServer::state_revision() const { return impl_->state_revision.load(); }
std::string StandbyServer::RenderMetrics() const { return impl_->metrics.Render(); }

}  // namespace clusterd
