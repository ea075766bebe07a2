#include "clusterd/mindcluster/grpc/config_service.h"

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "clusterd/mindcluster/grpc/queued_stream.h"
#include "clusterd/edge/peer_limiter.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "common/validation.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;

constexpr std::string_view kRegisterMethod = "/config.Config/Register";
constexpr std::string_view kSubscribeMethod = "/config.Config/SubscribeRankTable";
constexpr size_t kMaxRateClients = 4096;
constexpr size_t kMaxJobIdLength = 128;
constexpr size_t kMaxRoleLength = 128;

std::string ClientOf(const Principal& p) {
  if (p.kind == Principal::Kind::kAuthenticated) return "principal \"" + p.name + "\"";
  return "client " + PeerLimiter::PeerKey(p.peer);
}

// The request's jobId and role: a job id as ClusterD takes one (a token of at
// most 128 characters) and a role of at most 128 printable characters (it
// may be empty: the reference does not read it).
grpc::Status CheckRequest(const config::ClientInfo& req) {
  if (req.jobid().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "jobId is required");
  if (req.jobid().size() > kMaxJobIdLength || !ValidateToken("jobId", req.jobid()).ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "jobId must be 1 to 128 printable characters without spaces (a job's id)");
  }
  if (req.role().size() > kMaxRoleLength || (!req.role().empty() && !ValidateLine("role", req.role(), 128).ok())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "role must be at most 128 printable characters");
  }
  return grpc::Status::OK;
}

config::RankTableStream RankTableMessage(const std::string& job, const std::string& table) {
  config::RankTableStream msg;
  msg.set_jobid(job);
  msg.set_ranktable(table);
  return msg;
}

}  // namespace

struct MindClusterConfigService::Core : std::enable_shared_from_this<MindClusterConfigService::Core> {
  Core(JobSummaryFeed* f, boost::asio::thread_pool* p, const Authenticator* a, MindClusterConfigOptions o,
       MetricsRegistry* metrics)
      : feed(f),
        pool(p),
        auth(a),
        options(o),
        clock(o.clock != nullptr ? o.clock : &MonotonicClock::Instance()),
        client_rates(o.client_rate, kMaxRateClients, clock),
        call_rate(o.call_rate, clock) {
    if (metrics == nullptr) return;
    subscribers =
        &metrics->AddGauge("clusterd_mindcluster_config_subscribers", "config.Config rank-table streams open.");
    registrations_gauge =
        &metrics->AddGauge("clusterd_mindcluster_config_registrations", "config.Config registrations held.");
    messages = &metrics->AddCounter("clusterd_mindcluster_config_messages_total",
                                    "config.Config rank tables written to subscribers.");
    for (const char* limit : {"rate", "client_rate", "registrations"}) {
      refused[limit] = &metrics->AddCounter("clusterd_mindcluster_config_refused_total",
                                            "config.Config calls refused at a limit.", {{"limit", limit}});
    }
  }

  struct Registration {
    std::string role;
    TimePoint idle_since;
    uint64_t generation = 0;  // which Register made it
    uint64_t stream = 0;      // 0: none open
    std::function<void(grpc::Status)> end;
  };

  JobSummaryFeed* const feed;
  boost::asio::thread_pool* const pool;
  const Authenticator* const auth;
  const MindClusterConfigOptions options;
  const Clock* const clock;  // options.clock, or the monotonic clock
  ClientRateLimits client_rates;
  RateLimit call_rate;
  Gauge* subscribers = nullptr;
  Gauge* registrations_gauge = nullptr;
  Counter* messages = nullptr;
  std::map<std::string, Counter*> refused;

  mutable std::mutex mu;
  std::map<std::string, Registration> registrations;  // by jobId; guarded by mu
  size_t streams = 0;                                 // guarded by mu
  uint64_t next_id = 1;                               // guarded by mu

  void Refused(const char* limit) {
    auto it = refused.find(limit);
    if (it != refused.end()) it->second->Inc();
  }
  void GaugesLocked() {
    if (registrations_gauge) registrations_gauge->Set(static_cast<double>(registrations.size()));
    if (subscribers) subscribers->Set(static_cast<double>(streams));
  }
  StatusOr<Principal> Admit(grpc::CallbackServerContext* ctx, std::string_view method) {
    auto who = auth->Authorize(*ctx, method);
    if (!who.ok()) return who.status();
    if (!client_rates.Take(ClientOf(*who))) {
      Refused("client_rate");
      return ResourceExhausted("config.Config calls of " + ClientOf(*who) + " are limited to " +
                               std::to_string(static_cast<long>(options.client_rate)) + " per second; retry later");
    }
    if (!call_rate.Take()) {
      Refused("rate");
      return ResourceExhausted("config.Config calls are limited to " +
                               std::to_string(static_cast<long>(options.call_rate)) + " per second; retry later");
    }
    return who;
  }
  bool ExpiredLocked(const Registration& r, TimePoint now) const {
    return r.stream == 0 && now - r.idle_since >= options.registration_ttl;
  }
  // The stream is done: the registration stays (for a new stream) and its
  // TTL starts.
  void Detach(const std::string& job, uint64_t stream) {
    std::lock_guard lock(mu);
    auto it = registrations.find(job);
    if (it == registrations.end() || it->second.stream != stream) return;
    it->second.stream = 0;
    it->second.end = nullptr;
    it->second.idle_since = clock->Now();
    --streams;
    GaugesLocked();
  }
  // The job is gone: its registration goes too.
  void Forget(const std::string& job, uint64_t stream) {
    std::lock_guard lock(mu);
    auto it = registrations.find(job);
    if (it == registrations.end() || it->second.stream != stream) return;
    registrations.erase(it);
    --streams;
    GaugesLocked();
  }
};

MindClusterConfigService::MindClusterConfigService(JobSummaryFeed* feed, boost::asio::thread_pool* pool,
                                                   const Authenticator* auth, MindClusterConfigOptions options,
                                                   MetricsRegistry* metrics)
    : core_(std::make_shared<Core>(feed, pool, auth, options, metrics)) {}

MindClusterConfigService::~MindClusterConfigService() = default;

size_t MindClusterConfigService::registration_count() const {
  std::lock_guard lock(core_->mu);
  return core_->registrations.size();
}

size_t MindClusterConfigService::subscriber_count() const {
  std::lock_guard lock(core_->mu);
  return core_->streams;
}

grpc::ServerUnaryReactor* MindClusterConfigService::Register(grpc::CallbackServerContext* ctx,
                                                             const config::ClientInfo* req, config::Status* resp) {
  auto who = core_->Admit(ctx, kRegisterMethod);
  if (!who.ok()) return FinishUnary(ctx, who.status());
  if (grpc::Status st = CheckRequest(*req); !st.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(st);
    return reactor;
  }
  std::function<void(grpc::Status)> replaced;
  {
    std::lock_guard lock(core_->mu);
    const auto now = core_->clock->Now();
    auto it = core_->registrations.find(req->jobid());
    if (it == core_->registrations.end() && core_->registrations.size() >= core_->options.max_registrations) {
      for (auto r = core_->registrations.begin(); r != core_->registrations.end();) {
        r = core_->ExpiredLocked(r->second, now) ? core_->registrations.erase(r) : std::next(r);
      }
      if (core_->registrations.size() >= core_->options.max_registrations) {
        core_->Refused("registrations");
        core_->GaugesLocked();
        auto* reactor = ctx->DefaultReactor();
        reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                     "config.Config holds " + std::to_string(core_->options.max_registrations) +
                                         " registrations (the most; one without a stream expires after " +
                                         std::to_string(core_->options.registration_ttl.count()) + " s)"));
        return reactor;
      }
    }
    Core::Registration& r = core_->registrations[req->jobid()];
    if (r.stream != 0) {
      // As the reference: a new registration of the job replaces the old,
      // whose stream ends.
      replaced = std::move(r.end);
      --core_->streams;
    }
    r = Core::Registration{};
    r.role = req->role();
    r.idle_since = now;
    r.generation = core_->next_id++;
    core_->GaugesLocked();
  }
  if (replaced) {
    replaced(grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer registration of job " + req->jobid()));
  }
  GetLogger("mindcluster")
      ->info("config.Config: {} registered for job {} (role {})", ClientOf(*who), req->jobid(), req->role());
  resp->set_code(0);
  resp->set_info("register success");
  return FinishUnary(ctx, Status::Ok());
}

grpc::ServerWriteReactor<config::RankTableStream>* MindClusterConfigService::SubscribeRankTable(
    grpc::CallbackServerContext* ctx, const config::ClientInfo* req) {
  using Stream = QueuedStream<config::RankTableStream>;
  auto stream = std::make_shared<Stream>(ctx, core_->pool, core_->messages, nullptr);
  stream->Begin(stream);
  auto fail = [&](grpc::Status st) {
    stream->End(std::move(st));
    return stream.get();
  };
  auto who = core_->Admit(ctx, kSubscribeMethod);
  if (!who.ok()) return fail(ToGrpc(who.status()));
  if (grpc::Status st = CheckRequest(*req); !st.ok()) return fail(st);
  const std::string job = req->jobid();
  uint64_t stream_id = 0;
  std::function<void(grpc::Status)> replaced;
  {
    std::lock_guard lock(core_->mu);
    auto it = core_->registrations.find(job);
    if (it != core_->registrations.end() && core_->ExpiredLocked(it->second, core_->clock->Now())) {
      core_->registrations.erase(it);
      it = core_->registrations.end();
      core_->GaugesLocked();
    }
    if (it == core_->registrations.end()) {
      return fail(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                               "job " + job + " is not registered (or its registration expired): call Register first"));
    }
    auto& r = it->second;
    if (r.stream != 0) {
      replaced = std::move(r.end);
    } else {
      ++core_->streams;
    }
    stream_id = core_->next_id++;
    r.stream = stream_id;
    std::weak_ptr<Stream> weak = stream;
    r.end = [weak](grpc::Status st) {
      if (auto s = weak.lock()) s->End(std::move(st));
    };
    core_->GaugesLocked();
  }
  if (replaced) replaced(grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer subscription of job " + job));
  // One message waits at most: Replace keeps the newest.
  stream->SetLimit(1);
  std::weak_ptr<Stream> weak = stream;
  // The last rank table queued, to tell only changes (under the feed's mutex).
  auto last = std::make_shared<std::string>();
  const uint64_t handle = core_->feed->Listen(
      [&](const mc::JobSummaryBook& book) {
        const auto* e = book.Find(job);
        if (e != nullptr && e->deleted) {
          stream->End(grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + job + " was deleted"));
          return;
        }
        if (e == nullptr || e->rank_table.empty()) return;
        *last = e->rank_table;
        stream->Replace(RankTableMessage(job, e->rank_table));
      },
      [weak, job, last](const mc::JobSummaryEntry& e) {
        if (e.summary.jobid() != job) return;
        auto s = weak.lock();
        if (!s) return;
        if (e.deleted) {
          s->End(grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + job + " was deleted"));
          return;
        }
        if (e.rank_table.empty() || e.rank_table == *last) return;
        *last = e.rank_table;
        s->Replace(RankTableMessage(job, e.rank_table));
      });
  std::weak_ptr<Core> core = core_;
  stream->SetCleanup([core, job, stream_id, handle, feed = core_->feed] {
    feed->Unlisten(handle);
    auto c = core.lock();
    if (!c) return;
    // A deleted job's registration goes with its stream.
    bool deleted = false;
    feed->Read([&](const mc::JobSummaryBook& book) {
      const auto* e = book.Find(job);
      deleted = e != nullptr && e->deleted;
    });
    if (deleted) {
      c->Forget(job, stream_id);
    } else {
      c->Detach(job, stream_id);
    }
  });
  GetLogger("mindcluster")->info("config.Config: {} follows the rank table of job {}", ClientOf(*who), job);
  return stream.get();
}

}  // namespace clusterd
