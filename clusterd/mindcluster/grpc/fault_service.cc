#include "clusterd/mindcluster/grpc/fault_service.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid_io.hpp>

#include "clusterd/mindcluster/signal.h"
#include "clusterd/edge/peer_limiter.h"
#include "clusterd/edge/stream_writer.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"

namespace clusterd {
namespace {

constexpr std::string_view kRegisterMethod = "/fault.Fault/Register";
constexpr std::string_view kSubscribeMethod = "/fault.Fault/SubscribeFaultMsgSignal";
constexpr std::string_view kGetMethod = "/fault.Fault/GetFaultMsgSignal";
constexpr size_t kMaxRoleLength = 128;
// GetFaultMsgSignal's jobId, as the reference checks it.
constexpr size_t kMinJobIdLength = 8;
constexpr size_t kMaxJobIdLength = 128;
// Events the pump reads at a time.
constexpr size_t kPumpBatch = 1024;

// A registration and its subscription stream: (jobId, role); jobId "" is
// the whole cluster.
using Key = std::pair<std::string, std::string>;

std::string Describe(const Key& key) { return "(jobId \"" + key.first + "\", role \"" + key.second + "\")"; }

// Whom a registration counts against, as messages name them: an
// authenticated principal by its name; without authentication (--insecure,
// where every caller is anonymous) the client's IP address, as the per-peer
// stream limits count.
std::string OwnerOf(const Principal& p) {
  if (p.kind == Principal::Kind::kAuthenticated) return "principal \"" + p.name + "\"";
  return "client " + PeerLimiter::PeerKey(p.peer);
}

std::string NewUuid() {
  // One generator per thread: it is not thread-safe, and seeding is costly.
  thread_local boost::uuids::random_generator generator;
  return boost::uuids::to_string(generator());
}

class Subscriber;

}  // namespace

// What the service's handlers and streams share: the registrations, the open
// streams, and the pump that turns the hub's events into touched jobs.
//
// Locking: mu is never held while calling into a stream (gRPC may run a
// stream's reactions, OnDone included, inline) nor while reading the state
// (the hub's listener, which takes mu, may run on the writer thread); a
// stream may take mu while holding its own mutex.
struct MindClusterFaultService::Core : std::enable_shared_from_this<MindClusterFaultService::Core> {
  Core(const ClusterState* s, WatchHub* h, boost::asio::thread_pool* p, MindClusterFaultOptions o,
       const Authenticator* a)
      : state(s), hub(h), pool(p), options(o), auth(a) {
    timers = options.timers;
    if (timers == nullptr) {
      own_timers = std::make_unique<ThreadExecutor>(&MonotonicClock::Instance(), "mindcluster-fault");
      timers = own_timers.get();
    }
  }

  const ClusterState* const state;
  WatchHub* const hub;
  boost::asio::thread_pool* const pool;
  const MindClusterFaultOptions options;
  const Authenticator* const auth;
  // The subscribers' flush timers (options.timers, or a thread of its own,
  // stopped with the service). Its tasks hold no subscriber: they post the
  // flush to the pool through a weak reference.
  std::unique_ptr<ThreadExecutor> own_timers;
  Executor* timers = nullptr;
  // Cleared with the service: a timer still waiting on a caller's executor
  // then posts nothing to the pool.
  std::shared_ptr<std::atomic<bool>> alive = std::make_shared<std::atomic<bool>>(true);
  Gauge* subscribers_gauge = nullptr;
  Counter* messages = nullptr;
  Gauge* registrations_gauge = nullptr;
  Counter* expired = nullptr;
  Counter* refused_total = nullptr;          // at max_subscribers
  Counter* refused_per_principal = nullptr;  // at max_registrations_per_principal

  // A registration: since when it has had no stream (while one is open, the
  // time it was registered or its last stream ended; ignored), and whom it
  // counts against (OwnerOf the last Register of its key).
  struct Registration {
    TimePoint idle_since{};  // on the timers' clock
    std::string owner;
  };

  mutable std::mutex mu;
  std::map<Key, Registration> registrations;  // guarded by mu
  // Registrations per owner; an owner holding none has no entry, so the map
  // holds at most max_subscribers entries. Guarded by mu.
  std::map<std::string, uint32_t> owned;
  std::map<Key, std::shared_ptr<Subscriber>> subscribers;  // guarded by mu
  bool hub_subscribed = false;                             // guarded by mu
  uint64_t hub_subscription = 0;                           // guarded by mu
  uint64_t processed = 0;                                  // events up to here were handed out; guarded by mu
  bool pump_scheduled = false;                             // guarded by mu
  // Streams that took their baseline: from then on every change is told.
  size_t live = 0;  // guarded by mu

  // Registers key for `owner` (OwnerOf the caller), who owns it from now on.
  // *replaced: the stream of an earlier registration of the same key, for
  // the caller to end (outside mu). RESOURCE_EXHAUSTED at max_subscribers,
  // or when the owner holds max_registrations_per_principal others, after
  // dropping the expired registrations and those of jobs deleted since.
  grpc::Status Register(const Key& key, const std::string& owner, std::shared_ptr<Subscriber>* replaced);
  // Adds a stream for its registered key. *replaced: the older stream of the
  // same key, for the caller to end.
  grpc::Status Attach(const std::shared_ptr<Subscriber>& sub, std::shared_ptr<Subscriber>* replaced);
  // The stream took its baseline (counted in the gauge until Detach).
  void MarkLive();
  // From the stream's OnDone.
  void Detach(const Key& key, const Subscriber* sub, bool was_live);
  // The job is gone: its registrations go (their streams end by themselves).
  void Unregister(const std::string& job);

  void OnPublished(uint64_t head);
  void Pump();

 private:
  // Why a Register of key by owner would be refused now.
  enum class Refusal { kNone, kTotal, kPerPrincipal };
  Refusal RefusalLocked(const Key& key, const std::string& owner) const {
    auto it = registrations.find(key);
    if (it != registrations.end() && it->second.owner == owner) return Refusal::kNone;  // holds it already
    // A new pair needs a slot of the cluster's; any pair not the owner's, one
    // of the owner's.
    if (it == registrations.end() && registrations.size() >= options.max_subscribers) return Refusal::kTotal;
    auto n = owned.find(owner);
    if (n != owned.end() && n->second >= options.max_registrations_per_principal) return Refusal::kPerPrincipal;
    return Refusal::kNone;
  }
  void DisownLocked(const std::string& owner) {
    auto it = owned.find(owner);
    if (it != owned.end() && --it->second == 0) owned.erase(it);
  }
  // Every registration goes through here: its owner's count goes down.
  std::map<Key, Registration>::iterator EraseLocked(std::map<Key, Registration>::iterator it) {
    DisownLocked(it->second.owner);
    it = registrations.erase(it);
    RegistrationsChangedLocked();
    return it;
  }
  void EraseJobLocked(const std::string& job) {
    for (auto it = registrations.lower_bound({job, ""}); it != registrations.end() && it->first.first == job;) {
      it = EraseLocked(it);
    }
  }
  void RegistrationsChangedLocked() {
    if (registrations_gauge) registrations_gauge->Set(static_cast<double>(registrations.size()));
  }
  // Whether a registration has been without a stream for the TTL.
  bool ExpiredLocked(const Key& key, const Registration& r, TimePoint now) const {
    return !subscribers.count(key) && now - r.idle_since >= options.registration_ttl;
  }
  // Drops one expired registration, counted; the next one.
  std::map<Key, Registration>::iterator DropExpiredLocked(std::map<Key, Registration>::iterator it) {
    if (expired) expired->Inc();
    return EraseLocked(it);
  }
  // Drops every expired registration.
  void ExpireLocked(TimePoint now) {
    for (auto it = registrations.begin(); it != registrations.end();) {
      it = ExpiredLocked(it->first, it->second, now) ? DropExpiredLocked(it) : std::next(it);
    }
  }
  void SubscribedChangedLocked() {
    // The hub subscription is held only while a stream is open: without one
    // the pump has no one to tell.
    if (subscribers.empty() && hub_subscribed) {
      hub->Unsubscribe(hub_subscription);
      hub_subscribed = false;
    } else if (!subscribers.empty() && !hub_subscribed) {
      // Events up to the head cannot concern a stream that subscribes now:
      // it takes its baseline from a state at least that new.
      processed = std::max(processed, hub->head());
      std::weak_ptr<Core> weak = weak_from_this();
      hub_subscription = hub->Subscribe([weak](uint64_t head) {
        if (auto core = weak.lock()) core->OnPublished(head);
      });
      hub_subscribed = true;
    }
  }
};

namespace {

// One SubscribeFaultMsgSignal stream. It keeps what it last told the client
// per job (absent: nothing, or "normal"), starting from the jobs' content at
// subscription; the pump marks the jobs events touched, and a flush on the
// watch pool recomputes them and sends each job whose content changed. State
// is under a recursive mutex held while any gRPC operation starts (gRPC may
// run a reaction inline from inside one started on another thread).
class Subscriber final : public grpc::ServerWriteReactor<fault::FaultMsgSignal>,
                         public std::enable_shared_from_this<Subscriber> {
 public:
  using Core = MindClusterFaultService::Core;

  Subscriber(std::shared_ptr<Core> core, grpc::CallbackServerContext* ctx) : core_(std::move(core)), ctx_(ctx) {}

  const Key& key() const { return key_; }

  void Begin(std::shared_ptr<Subscriber> self, const fault::ClientInfo& req) {
    self_ = std::move(self);
    std::shared_ptr<Subscriber> replaced;
    {
      std::lock_guard lock(mu_);
      if (auto who = core_->auth->Authorize(*ctx_, kSubscribeMethod); !who.ok()) {
        FinishLocked(ToGrpc(who.status()));
        return;
      }
      if (req.role().empty()) {
        FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "role is required"));
        return;
      }
      key_ = {req.jobid(), req.role()};
      if (grpc::Status st = core_->Attach(shared_from_this(), &replaced); !st.ok()) {
        FinishLocked(std::move(st));
        return;
      }
      attached_ = true;
      boost::asio::post(*core_->pool, [self = shared_from_this()] { self->Baseline(); });
    }
    if (replaced) {
      replaced->End(grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer subscription of " + Describe(key_)));
    }
  }

  // From the pump: these jobs' signals may have changed (all: every job).
  void Touch(const std::set<std::string>& jobs, bool all) {
    std::lock_guard lock(mu_);
    if (out_.finishing()) return;
    if (all) {
      all_dirty_ = true;
    } else if (cluster()) {
      dirty_.insert(jobs.begin(), jobs.end());
    } else if (jobs.count(key_.first)) {
      dirty_.insert(key_.first);
    } else {
      return;
    }
    ScheduleLocked();
  }

  // Any thread, no lock held.
  void End(grpc::Status status) {
    std::lock_guard lock(mu_);
    FinishLocked(std::move(status));
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (ok && core_->messages) core_->messages->Inc();
    if (out_.WriteDone()) return;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to subscriber failed"));
      return;
    }
    out_.Next();
    if (drain_status_ && out_.idle()) FinishLocked(*drain_status_);
  }

  void OnCancel() override {
    std::lock_guard lock(mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "subscription cancelled"));
  }

  void OnDone() override {
    {
      std::lock_guard lock(mu_);
      timer_.Cancel();
    }
    bool live;
    {
      std::lock_guard lock(mu_);
      live = baseline_ready_;
    }
    if (attached_) core_->Detach(key_, this, live);
    self_.reset();
  }

 private:
  bool cluster() const { return key_.first.empty(); }

  // On the pool: what the jobs say now is what the client is taken to know.
  void Baseline() {
    {
      std::lock_guard lock(mu_);
      if (out_.finishing()) return;
    }
    std::map<std::string, std::string> baseline;
    const bool found = core_->state->Read([&](const StateView& state) {
      auto take = [&](const v1::Job& job) {
        auto signal = mindcluster::JobSignal(state, job);
        if (signal.nodefaultinfo_size() > 0) baseline[job.id()] = mindcluster::SignalContent(signal);
      };
      if (cluster()) {
        for (const auto& [id, job] : state.jobs()) take(job);
        return true;
      }
      auto it = state.jobs().find(key_.first);
      if (it == state.jobs().end()) return false;
      take(it->second);
      return true;
    });
    if (!found) {
      core_->Unregister(key_.first);
      End(grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + key_.first + " does not exist (deleted?)"));
      return;
    }
    std::lock_guard lock(mu_);
    if (out_.finishing()) return;
    last_ = std::move(baseline);
    baseline_ready_ = true;
    // Under mu_, so that OnDone sees live and counted together.
    core_->MarkLive();
    ScheduleLocked();
  }

  // A flush now, or when the interval since the last one has passed.
  void ScheduleLocked() {
    if (out_.finishing() || !baseline_ready_ || flush_scheduled_) return;
    if (dirty_.empty() && !all_dirty_) return;
    flush_scheduled_ = true;
    if (core_->timers->clock().Now() >= next_flush_) {
      boost::asio::post(*core_->pool, [self = shared_from_this()] { self->Flush(); });
      return;
    }
    // Cancelled when the stream is done; a subscriber gone meanwhile is not flushed.
    timer_ = core_->timers->PostAt(next_flush_, [weak = weak_from_this(), pool = core_->pool, alive = core_->alive] {
      if (!alive->load()) return;
      boost::asio::post(*pool, [weak] {
        if (auto self = weak.lock()) self->Flush();
      });
    });
  }

  // On the pool: recomputes the touched jobs and sends what changed.
  void Flush() {
    std::set<std::string> jobs;
    bool all = false;
    {
      std::lock_guard lock(mu_);
      if (out_.finishing()) return;
      jobs.swap(dirty_);
      all = all_dirty_;
      all_dirty_ = false;
      if (all) {
        // Every job the client was told about, and (below) every job there is.
        for (const auto& [id, content] : last_) jobs.insert(id);
        if (!cluster()) jobs.insert(key_.first);
      }
    }
    // nullopt: the job does not exist (any more).
    std::vector<std::pair<std::string, std::optional<fault::FaultMsgSignal>>> results;
    core_->state->Read([&](const StateView& state) {
      if (all && cluster()) {
        for (const auto& [id, job] : state.jobs()) jobs.insert(id);
      }
      for (const auto& id : jobs) {
        auto it = state.jobs().find(id);
        if (it == state.jobs().end()) {
          results.emplace_back(id, std::nullopt);
        } else {
          results.emplace_back(id, mindcluster::JobSignal(state, it->second));
        }
      }
      return 0;
    });
    std::lock_guard lock(mu_);
    flush_scheduled_ = false;
    next_flush_ = core_->timers->clock().Now() + core_->options.min_send_interval;
    if (out_.finishing()) return;
    bool job_gone = false;
    for (auto& [id, signal] : results) {
      auto last = last_.find(id);
      if (!signal || signal->nodefaultinfo_size() == 0) {
        if (!signal && !cluster()) job_gone = true;
        // "normal" once, and only after "fault" (or faults at subscription).
        if (last == last_.end()) continue;
        last_.erase(last);
        fault::FaultMsgSignal normal;
        normal.set_jobid(id);
        normal.set_signaltype(std::string(mindcluster::kSignalNormal));
        SendLocked(std::move(normal));
        continue;
      }
      std::string content = mindcluster::SignalContent(*signal);
      if (last != last_.end() && last->second == content) continue;
      last_[id] = std::move(content);
      SendLocked(std::move(*signal));
    }
    if (job_gone) {
      core_->Unregister(key_.first);
      // What is queued (a last "normal") goes out first.
      EndAfterDrainLocked(grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + key_.first + " was deleted"));
      return;
    }
    ScheduleLocked();
  }

  void SendLocked(fault::FaultMsgSignal msg) {
    msg.set_uuid(NewUuid());
    // A client that reads slowly gets each job's latest content, not every
    // step: a message for the job still waiting in the queue is replaced.
    for (auto& queued : out_.queue()) {
      if (queued.jobid() == msg.jobid()) {
        queued = std::move(msg);
        return;
      }
    }
    out_.Push(std::move(msg));
  }

  void EndAfterDrainLocked(grpc::Status status) {
    if (out_.idle()) {
      FinishLocked(std::move(status));
      return;
    }
    drain_status_ = std::move(status);
  }

  void FinishLocked(grpc::Status status) { out_.Finish(std::move(status)); }

  std::shared_ptr<Core> core_;
  grpc::CallbackServerContext* ctx_;
  std::shared_ptr<Subscriber> self_;  // owned by gRPC until OnDone
  Key key_;                           // set in Begin, then read-only
  bool attached_ = false;             // in core_->subscribers; detached in OnDone
  std::recursive_mutex mu_;
  bool baseline_ready_ = false;
  std::map<std::string, std::string> last_;  // job -> content of the last "fault" told
  std::set<std::string> dirty_;
  bool all_dirty_ = false;
  bool flush_scheduled_ = false;
  TimePoint next_flush_{};  // on the timers' clock
  TaskHandle timer_;
  std::optional<grpc::Status> drain_status_;  // finish with this once the queue is written
  StreamWriter<Subscriber, fault::FaultMsgSignal> out_{this};
};

}  // namespace

grpc::Status MindClusterFaultService::Core::Register(const Key& key, const std::string& owner,
                                                     std::shared_ptr<Subscriber>* replaced) {
  Refusal refusal = Refusal::kNone;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<std::string> jobs;
    {
      std::lock_guard lock(mu);
      const auto now = timers->clock().Now();
      refusal = RefusalLocked(key, owner);
      // At a limit, registrations without a stream for the TTL go first.
      if (refusal != Refusal::kNone) {
        ExpireLocked(now);
        refusal = RefusalLocked(key, owner);
      }
      if (refusal == Refusal::kNone) {
        auto [reg, added] = registrations.try_emplace(key);
        if (added || reg->second.owner != owner) {
          // Registered again by another client: it is that client's now.
          if (!added) DisownLocked(reg->second.owner);
          reg->second.owner = owner;
          ++owned[owner];
        }
        reg->second.idle_since = now;
        RegistrationsChangedLocked();
        auto it = subscribers.find(key);
        if (it != subscribers.end()) {
          *replaced = std::move(it->second);
          subscribers.erase(it);
          SubscribedChangedLocked();
        }
        return grpc::Status::OK;
      }
      if (attempt > 0) break;
      for (const auto& [held, registration] : registrations) {
        // At the owner's limit, only its own registrations can make room.
        if (refusal == Refusal::kPerPrincipal && registration.owner != owner) continue;
        const std::string& job = held.first;
        if (!job.empty() && (jobs.empty() || jobs.back() != job)) jobs.push_back(job);
      }
    }
    // At the limit: the registrations of jobs deleted since go first (read
    // without mu, see Core).
    const std::vector<std::string> gone = state->Read([&](const StateView& s) {
      std::vector<std::string> out;
      for (const auto& job : jobs) {
        if (!s.jobs().count(job)) out.push_back(job);
      }
      return out;
    });
    std::lock_guard lock(mu);
    for (const auto& job : gone) EraseJobLocked(job);
  }
  const std::string expiry =
      "; one without a stream expires after " + std::to_string(options.registration_ttl.count()) + " s)";
  if (refusal == Refusal::kPerPrincipal) {
    if (refused_per_principal) refused_per_principal->Inc();
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many fault.Fault registrations held by " + owner +
                            " (mindcluster_max_registrations_per_principal=" +
                            std::to_string(options.max_registrations_per_principal) + expiry);
  }
  if (refused_total) refused_total->Inc();
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "too many fault.Fault registrations (mindcluster_max_subscribers=" +
                          std::to_string(options.max_subscribers) + expiry);
}

grpc::Status MindClusterFaultService::Core::Attach(const std::shared_ptr<Subscriber>& sub,
                                                   std::shared_ptr<Subscriber>* replaced) {
  std::lock_guard lock(mu);
  const Key& key = sub->key();
  auto reg = registrations.find(key);
  if (reg != registrations.end() && ExpiredLocked(key, reg->second, timers->clock().Now())) {
    DropExpiredLocked(reg);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        Describe(key) + " is not registered: its registration expired after " +
                            std::to_string(options.registration_ttl.count()) +
                            " s without a stream (mindcluster_registration_ttl_seconds); call Register again");
  }
  if (reg == registrations.end()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        Describe(key) + " is not registered: call Register first");
  }
  auto it = subscribers.find(key);
  if (it != subscribers.end()) {
    *replaced = std::move(it->second);
    it->second = sub;
  } else {
    if (subscribers.size() >= options.max_subscribers) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "too many fault.Fault subscriptions (mindcluster_max_subscribers=" +
                              std::to_string(options.max_subscribers) + ")");
    }
    subscribers.emplace(key, sub);
  }
  SubscribedChangedLocked();
  return grpc::Status::OK;
}

void MindClusterFaultService::Core::MarkLive() {
  std::lock_guard lock(mu);
  ++live;
  if (subscribers_gauge) subscribers_gauge->Set(static_cast<double>(live));
}

void MindClusterFaultService::Core::Detach(const Key& key, const Subscriber* sub, bool was_live) {
  std::lock_guard lock(mu);
  if (was_live) {
    --live;
    if (subscribers_gauge) subscribers_gauge->Set(static_cast<double>(live));
  }
  auto it = subscribers.find(key);
  if (it == subscribers.end() || it->second.get() != sub) return;  // replaced already
  subscribers.erase(it);
  // From now on the registration is idle: it expires after the TTL unless a
  // stream subscribes again.
  if (auto reg = registrations.find(key); reg != registrations.end()) {
    reg->second.idle_since = timers->clock().Now();
  }
  SubscribedChangedLocked();
}

void MindClusterFaultService::Core::Unregister(const std::string& job) {
  if (job.empty()) return;
  std::lock_guard lock(mu);
  EraseJobLocked(job);
}

void MindClusterFaultService::Core::OnPublished(uint64_t head) {
  std::lock_guard lock(mu);
  if (pump_scheduled || head <= processed) return;
  pump_scheduled = true;
  boost::asio::post(*pool, [self = shared_from_this()] { self->Pump(); });
}

void MindClusterFaultService::Core::Pump() {
  for (;;) {
    uint64_t after;
    {
      std::lock_guard lock(mu);
      const uint64_t head = hub->head();
      if (subscribers.empty()) processed = std::max(processed, head);
      // Cleared under mu, which the listener also takes: a publish after
      // this point schedules a new pump.
      if (processed >= head) {
        pump_scheduled = false;
        return;
      }
      after = processed;
    }
    std::set<std::string> touched;
    std::set<std::string> deleted;
    bool all = false;
    uint64_t last = after;
    auto batch = hub->Fetch(after, kPumpBatch);
    if (!batch.ok() || batch->empty()) {
      // Behind the event log's compaction, or a read error: every stream
      // recomputes everything it follows, from the state as it is now.
      if (!batch.ok())
        GetLogger("mindcluster")->warn("fault.Fault: events after {}: {}", after, batch.status().ToString());
      all = true;
      last = hub->head();
    } else {
      for (const auto& e : *batch) {
        mindcluster::AddJobsTouchedBy(*e, &touched);
        if (e->type() == v1::EVENT_TYPE_JOB_DELETED) {
          for (const auto& id : e->job_ids()) deleted.insert(id);
        }
        last = e->revision();
      }
    }
    std::vector<std::shared_ptr<Subscriber>> subs;
    {
      std::lock_guard lock(mu);
      processed = std::max(processed, last);
      for (const auto& job : deleted) EraseJobLocked(job);
      if (all || !touched.empty()) {
        subs.reserve(subscribers.size());
        for (const auto& [key, sub] : subscribers) subs.push_back(sub);
      }
    }
    for (const auto& sub : subs) sub->Touch(touched, all);
  }
}

MindClusterFaultService::MindClusterFaultService(const ClusterState* state, WatchHub* hub,
                                                 boost::asio::thread_pool* pool, MindClusterFaultOptions options,
                                                 MetricsRegistry* metrics, const Authenticator* auth)
    : core_(std::make_shared<Core>(state, hub, pool, options, auth)) {
  if (metrics) {
    core_->subscribers_gauge = &metrics->AddGauge("clusterd_mindcluster_fault_subscribers",
                                                  "Open fault.Fault SubscribeFaultMsgSignal streams (MindCluster).");
    core_->messages = &metrics->AddCounter("clusterd_mindcluster_fault_messages_total",
                                           "FaultMsgSignal messages written to fault.Fault subscribers.");
    core_->registrations_gauge =
        &metrics->AddGauge("clusterd_mindcluster_fault_registrations",
                           "fault.Fault registrations held (mindcluster_max_subscribers at most).");
    core_->expired = &metrics->AddCounter(
        "clusterd_mindcluster_fault_registrations_expired_total",
        "fault.Fault registrations dropped after mindcluster_registration_ttl_seconds without a stream.");
    const std::string refused_help =
        "fault.Fault Register calls refused with RESOURCE_EXHAUSTED: at "
        "mindcluster_max_subscribers (total) or at the caller's "
        "mindcluster_max_registrations_per_principal (per_principal).";
    core_->refused_total = &metrics->AddCounter("clusterd_mindcluster_fault_registrations_refused_total", refused_help,
                                                {{"reason", "total"}});
    core_->refused_per_principal = &metrics->AddCounter("clusterd_mindcluster_fault_registrations_refused_total",
                                                        refused_help, {{"reason", "per_principal"}});
  }
}

MindClusterFaultService::~MindClusterFaultService() {
  {
    std::lock_guard lock(core_->mu);
    if (core_->hub_subscribed) {
      core_->hub->Unsubscribe(core_->hub_subscription);
      core_->hub_subscribed = false;
    }
  }
  // No flush timer fires after the service (what waits is dropped).
  core_->alive->store(false);
  if (core_->own_timers) core_->own_timers->Stop();
}

size_t MindClusterFaultService::subscriber_count() const {
  std::lock_guard lock(core_->mu);
  return core_->subscribers.size();
}

size_t MindClusterFaultService::registration_count() const {
  std::lock_guard lock(core_->mu);
  return core_->registrations.size();
}

grpc::ServerUnaryReactor* MindClusterFaultService::Register(grpc::CallbackServerContext* ctx,
                                                            const fault::ClientInfo* req, fault::Status* resp) {
  auto who = core_->auth->Authorize(*ctx, kRegisterMethod);
  if (!who.ok()) return FinishUnary(ctx, who.status());
  auto reply = [&](int32_t code, std::string info) {
    resp->set_code(code);
    resp->set_info(std::move(info));
    return FinishUnary(ctx, Status::Ok());
  };
  if (req->role().empty()) return reply(kMindClusterInvalid, "role is required");
  if (req->role().size() > kMaxRoleLength) {
    return reply(kMindClusterInvalid, "role is longer than " + std::to_string(kMaxRoleLength) + " characters");
  }
  const std::string& job = req->jobid();
  if (job.size() > kMaxJobIdLength) {
    return reply(kMindClusterInvalid, "jobId is longer than " + std::to_string(kMaxJobIdLength) + " characters");
  }
  if (!job.empty()) {
    const bool known = core_->state->Read([&](const StateView& s) { return s.jobs().count(job) > 0; });
    if (!known) return reply(kMindClusterUnknownJob, "job " + job + " is not known");
  }
  std::shared_ptr<Subscriber> replaced;
  const Key key{job, req->role()};
  if (grpc::Status st = core_->Register(key, OwnerOf(*who), &replaced); !st.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(st);
    return reactor;
  }
  if (replaced) replaced->End(grpc::Status(grpc::StatusCode::ABORTED, Describe(key) + " was registered again"));
  return reply(kMindClusterRegistered, job.empty() ? "registered for the whole cluster" : "registered for job " + job);
}

grpc::ServerWriteReactor<fault::FaultMsgSignal>* MindClusterFaultService::SubscribeFaultMsgSignal(
    grpc::CallbackServerContext* ctx, const fault::ClientInfo* req) {
  auto reactor = std::make_shared<Subscriber>(core_, ctx);
  Subscriber* raw = reactor.get();
  raw->Begin(std::move(reactor), *req);
  return raw;
}

grpc::ServerUnaryReactor* MindClusterFaultService::GetFaultMsgSignal(grpc::CallbackServerContext* ctx,
                                                                     const fault::ClientInfo* req,
                                                                     fault::FaultQueryResult* resp) {
  if (auto* refused = RefuseUnary(ctx, *core_->auth, kGetMethod)) return refused;
  const std::string& job = req->jobid();
  if (!job.empty() && (job.size() < kMinJobIdLength || job.size() > kMaxJobIdLength)) {
    resp->set_code(kMindClusterInvalid);
    resp->set_info("jobId must be " + std::to_string(kMinJobIdLength) + " to " + std::to_string(kMaxJobIdLength) +
                   " characters, or empty for the whole cluster");
    return FinishUnary(ctx, Status::Ok());
  }
  bool truncated = false;
  const bool found = core_->state->Read([&](const StateView& s) {
    if (job.empty()) {
      *resp->mutable_faultsignal() = mindcluster::ClusterSignal(s, {}, &truncated);
      return true;
    }
    auto it = s.jobs().find(job);
    if (it == s.jobs().end()) return false;
    *resp->mutable_faultsignal() = mindcluster::JobSignal(s, it->second, {}, &truncated);
    return true;
  });
  if (!found) {
    resp->set_code(kMindClusterUnknownJob);
    resp->set_info("job " + job + " is not known");
    return FinishUnary(ctx, Status::Ok());
  }
  resp->mutable_faultsignal()->set_uuid(NewUuid());
  resp->set_code(kMindClusterQueryOk);
  resp->set_info(truncated ? "truncated: more nodes have faults than one answer holds" : "ok");
  return FinishUnary(ctx, Status::Ok());
}

}  // namespace clusterd
