#include "clusterd/mindcluster/grpc/job_service.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid_io.hpp>

#include "clusterd/mindcluster/grpc/queued_stream.h"
#include "clusterd/edge/peer_limiter.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;

constexpr std::string_view kRegisterMethod = "/job.Job/Register";
constexpr std::string_view kSubscribeMethod = "/job.Job/SubscribeJobSummarySignal";
constexpr std::string_view kSubscribeListMethod = "/job.Job/SubscribeJobSummarySignalList";
// The reference's role whitelist.
constexpr std::array<std::string_view, 4> kRoles = {"CCAgent", "DefaultUser1", "DefaultUser2", "FdAgent"};
// Clients whose call rate is tracked at most (ClientRateLimits).
constexpr size_t kMaxRateClients = 4096;

std::string NewUuid() {
  thread_local boost::uuids::random_generator generator;
  return boost::uuids::to_string(generator());
}

// Whom a registration counts against: an authenticated principal by name,
// else the client's IP address (as fault.Fault counts).
std::string OwnerOf(const Principal& p) {
  if (p.kind == Principal::Kind::kAuthenticated) return "principal \"" + p.name + "\"";
  return "client " + PeerLimiter::PeerKey(p.peer);
}

grpc::Status CheckRole(const std::string& role) {
  if (std::find(kRoles.begin(), kRoles.end(), role) != kRoles.end()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "role \"" + role.substr(0, 64) +
                          "\" is not allowed: job.Job serves the roles CCAgent, DefaultUser1, DefaultUser2, FdAgent");
}

std::string NowMillis() {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

}  // namespace

struct MindClusterJobService::Core : std::enable_shared_from_this<MindClusterJobService::Core> {
  Core(JobSummaryFeed* f, boost::asio::thread_pool* p, const Authenticator* a, MindClusterJobOptions o,
       MetricsRegistry* metrics)
      : feed(f),
        pool(p),
        auth(a),
        options(o),
        clock(o.clock != nullptr ? o.clock : &MonotonicClock::Instance()),
        client_rates(o.client_rate, kMaxRateClients, clock),
        call_rate(o.call_rate, clock) {
    if (metrics == nullptr) return;
    subscribers = &metrics->AddGauge("clusterd_mindcluster_job_subscribers", "job.Job subscription streams open.");
    clients_gauge = &metrics->AddGauge("clusterd_mindcluster_job_clients", "job.Job clients registered.");
    messages =
        &metrics->AddCounter("clusterd_mindcluster_job_messages_total", "job.Job messages written to subscribers.");
    for (const char* limit : {"rate", "client_rate", "clients", "per_principal", "per_role", "slow_reader"}) {
      refused[limit] =
          &metrics->AddCounter("clusterd_mindcluster_job_refused_total",
                               "job.Job calls and streams refused or ended at a limit.", {{"limit", limit}});
    }
  }

  struct Client {
    std::string role;
    std::string owner;
    TimePoint idle_since;
    uint64_t stream = 0;  // 0: none open
    std::function<void(grpc::Status)> end;
  };

  JobSummaryFeed* const feed;
  boost::asio::thread_pool* const pool;
  const Authenticator* const auth;
  const MindClusterJobOptions options;
  const Clock* const clock;  // options.clock, or the monotonic clock
  ClientRateLimits client_rates;
  RateLimit call_rate;
  Gauge* subscribers = nullptr;
  Gauge* clients_gauge = nullptr;
  Counter* messages = nullptr;
  std::map<std::string, Counter*> refused;

  mutable std::mutex mu;
  std::map<std::string, Client> clients;         // by clientId; guarded by mu
  std::map<std::string, uint32_t> owned;         // registrations per owner; guarded by mu
  std::map<std::string, uint32_t> role_streams;  // open streams per role; guarded by mu
  size_t streams = 0;                            // guarded by mu
  uint64_t next_stream = 1;                      // guarded by mu

  void Refused(const char* limit) {
    auto it = refused.find(limit);
    if (it != refused.end()) it->second->Inc();
  }

  // Authorization, then the caller's rate and the service's.
  StatusOr<Principal> Admit(grpc::CallbackServerContext* ctx, std::string_view method) {
    auto who = auth->Authorize(*ctx, method);
    if (!who.ok()) return who.status();
    if (!client_rates.Take(OwnerOf(*who))) {
      Refused("client_rate");
      return ResourceExhausted("job.Job calls of " + OwnerOf(*who) + " are limited to " +
                               std::to_string(static_cast<long>(options.client_rate)) + " per second; retry later");
    }
    if (!call_rate.Take()) {
      Refused("rate");
      return ResourceExhausted("job.Job calls are limited to " + std::to_string(static_cast<long>(options.call_rate)) +
                               " per second; retry later");
    }
    return who;
  }

  void GaugesLocked() {
    if (clients_gauge) clients_gauge->Set(static_cast<double>(clients.size()));
    if (subscribers) subscribers->Set(static_cast<double>(streams));
  }
  std::map<std::string, Client>::iterator EraseLocked(std::map<std::string, Client>::iterator it) {
    auto o = owned.find(it->second.owner);
    if (o != owned.end() && --o->second == 0) owned.erase(o);
    it = clients.erase(it);
    GaugesLocked();
    return it;
  }
  bool ExpiredLocked(const Client& c, TimePoint now) const {
    return c.stream == 0 && now - c.idle_since >= options.registration_ttl;
  }
  void ExpireLocked(TimePoint now) {
    for (auto it = clients.begin(); it != clients.end();) {
      it = ExpiredLocked(it->second, now) ? EraseLocked(it) : std::next(it);
    }
  }

  // The stream of clientId is done (its cleanup): the client goes with it,
  // unless a newer stream replaced it.
  void Detach(const std::string& client_id, uint64_t stream) {
    std::lock_guard lock(mu);
    auto it = clients.find(client_id);
    if (it == clients.end() || it->second.stream != stream) return;
    auto r = role_streams.find(it->second.role);
    if (r != role_streams.end() && --r->second == 0) role_streams.erase(r);
    --streams;
    EraseLocked(it);
  }

  template <typename Message>
  grpc::ServerWriteReactor<Message>* Subscribe(grpc::CallbackServerContext* ctx, const job::ClientInfo& req,
                                               std::string_view method, bool list);
};

template <typename Message>
grpc::ServerWriteReactor<Message>* MindClusterJobService::Core::Subscribe(grpc::CallbackServerContext* ctx,
                                                                          const job::ClientInfo& req,
                                                                          std::string_view method, bool list) {
  using Stream = QueuedStream<Message>;
  auto slow = refused.find("slow_reader");
  auto stream = std::make_shared<Stream>(ctx, pool, messages, slow == refused.end() ? nullptr : slow->second);
  stream->Begin(stream);
  auto fail = [&](grpc::Status st) {
    stream->End(std::move(st));
    return stream.get();
  };
  auto who = Admit(ctx, method);
  if (!who.ok()) return fail(ToGrpc(who.status()));
  if (grpc::Status st = CheckRole(req.role()); !st.ok()) return fail(st);
  const std::string& id = req.clientid();
  if (id.empty()) {
    return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "clientId is required: call Register first"));
  }
  const std::string short_id = id.substr(0, 64);
  uint64_t stream_id = 0;
  std::function<void(grpc::Status)> replaced;
  {
    std::lock_guard lock(mu);
    auto it = clients.find(id);
    if (it != clients.end() && ExpiredLocked(it->second, clock->Now())) {
      EraseLocked(it);
      it = clients.end();
    }
    if (it == clients.end()) {
      return fail(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                               "clientId " + short_id + " is not registered (or expired): call Register first"));
    }
    Client& c = it->second;
    if (c.role != req.role()) {
      return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "clientId " + short_id + " was registered as role " + c.role + ", not " + req.role()));
    }
    if (c.owner != OwnerOf(*who)) {
      return fail(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                               "clientId " + short_id + " was registered by another client"));
    }
    if (c.stream == 0) {
      auto r = role_streams.find(c.role);
      if (r != role_streams.end() && r->second >= options.max_streams_per_role) {
        Refused("per_role");
        return fail(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 "role " + c.role + " already has " + std::to_string(r->second) +
                                     " job.Job streams open (the most per role)"));
      }
      ++role_streams[c.role];
      ++streams;
    } else {
      replaced = std::move(c.end);
    }
    stream_id = next_stream++;
    c.stream = stream_id;
    std::weak_ptr<Stream> weak = stream;
    c.end = [weak](grpc::Status st) {
      if (auto s = weak.lock()) s->End(std::move(st));
    };
    GaugesLocked();
  }
  if (replaced) {
    replaced(grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer subscription of clientId " + short_id));
  }
  std::weak_ptr<Stream> weak = stream;
  const size_t max_queued = options.max_queued;
  const uint64_t handle = feed->Listen(
      [&](const mc::JobSummaryBook& book) {
        if constexpr (std::is_same_v<Message, job::JobSummarySignalList>) {
          // Every job now (the reference's history on subscription).
          auto batches = mc::Batches(book.All());
          stream->SetLimit(batches.size() + max_queued);
          const std::string at = NowMillis();
          for (auto& batch : batches) {
            job::JobSummarySignalList msg;
            for (auto& s : batch) *msg.add_jobsummarysignals() = std::move(s);
            msg.set_reporttime(at);
            msg.set_jobtotalnum(static_cast<int32_t>(book.size()));
            stream->Push(std::move(msg));
          }
        } else {
          stream->SetLimit(max_queued);
        }
      },
      [weak](const mc::JobSummaryEntry& e) {
        auto s = weak.lock();
        if (!s) return;
        if constexpr (std::is_same_v<Message, job::JobSummarySignalList>) {
          job::JobSummarySignalList msg;
          *msg.add_jobsummarysignals() = e.summary;
          msg.set_reporttime(NowMillis());
          msg.set_jobtotalnum(1);
          s->Push(std::move(msg));
        } else {
          s->Push(e.summary);
        }
      });
  std::weak_ptr<Core> core = weak_from_this();
  stream->SetCleanup([core, id, stream_id, handle, feed = feed] {
    feed->Unlisten(handle);
    if (auto c = core.lock()) c->Detach(id, stream_id);
  });
  GetLogger("mindcluster")
      ->info("job.Job: client {} (role {}) subscribed{}", short_id, req.role(), list ? " to the list" : "");
  return stream.get();
}

MindClusterJobService::MindClusterJobService(JobSummaryFeed* feed, boost::asio::thread_pool* pool,
                                             const Authenticator* auth, MindClusterJobOptions options,
                                             MetricsRegistry* metrics)
    : core_(std::make_shared<Core>(feed, pool, auth, options, metrics)) {}

MindClusterJobService::~MindClusterJobService() = default;

size_t MindClusterJobService::client_count() const {
  std::lock_guard lock(core_->mu);
  return core_->clients.size();
}

size_t MindClusterJobService::subscriber_count() const {
  std::lock_guard lock(core_->mu);
  return core_->streams;
}

grpc::ServerUnaryReactor* MindClusterJobService::Register(grpc::CallbackServerContext* ctx, const job::ClientInfo* req,
                                                          job::Status* resp) {
  auto who = core_->Admit(ctx, kRegisterMethod);
  if (!who.ok()) return FinishUnary(ctx, who.status());
  // The reference answers code 400 and an error: its clients see the error.
  if (grpc::Status st = CheckRole(req->role()); !st.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(st);
    return reactor;
  }
  const std::string owner = OwnerOf(*who);
  std::string id;
  {
    std::lock_guard lock(core_->mu);
    core_->ExpireLocked(core_->clock->Now());
    const auto& o = core_->options;
    auto n = core_->owned.find(owner);
    if (core_->clients.size() >= o.max_clients) {
      core_->Refused("clients");
      resp->set_code(kMindClusterJobRateLimited);
      resp->set_info("client num limit, max client num is " + std::to_string(o.max_clients));
    } else if (n != core_->owned.end() && n->second >= std::min(o.max_clients_per_principal, o.max_clients)) {
      core_->Refused("per_principal");
      resp->set_code(kMindClusterJobRateLimited);
      resp->set_info("too many job.Job registrations held by " + owner + " (" +
                     std::to_string(o.max_clients_per_principal) + "; one without a stream expires after " +
                     std::to_string(o.registration_ttl.count()) + " s)");
    } else {
      id = NewUuid();
      Core::Client c;
      c.role = req->role();
      c.owner = owner;
      c.idle_since = core_->clock->Now();
      core_->clients.emplace(id, std::move(c));
      ++core_->owned[owner];
      core_->GaugesLocked();
    }
  }
  if (!id.empty()) {
    resp->set_code(kMindClusterJobRegistered);
    resp->set_info("registration successful");
    resp->set_clientid(id);
    GetLogger("mindcluster")->info("job.Job: {} registered client {} (role {})", owner, id, req->role());
  }
  return FinishUnary(ctx, Status::Ok());
}

grpc::ServerWriteReactor<job::JobSummarySignal>* MindClusterJobService::SubscribeJobSummarySignal(
    grpc::CallbackServerContext* ctx, const job::ClientInfo* req) {
  return core_->Subscribe<job::JobSummarySignal>(ctx, *req, kSubscribeMethod, false);
}

grpc::ServerWriteReactor<job::JobSummarySignalList>* MindClusterJobService::SubscribeJobSummarySignalList(
    grpc::CallbackServerContext* ctx, const job::ClientInfo* req) {
  return core_->Subscribe<job::JobSummarySignalList>(ctx, *req, kSubscribeListMethod, true);
}

}  // namespace clusterd
