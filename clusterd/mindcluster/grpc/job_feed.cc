#include "clusterd/mindcluster/grpc/job_feed.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>

#include "common/logging.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;

// Events the pump reads at a time.
constexpr size_t kPumpBatch = 1024;
// A client's bucket unused this long may be dropped when room is needed.
constexpr auto kIdleBucket = std::chrono::minutes(1);

bool IsJobEvent(const v1::Event& e) {
  return e.type() == v1::EVENT_TYPE_JOB_CREATED || e.type() == v1::EVENT_TYPE_JOB_UPDATED ||
         e.type() == v1::EVENT_TYPE_JOB_DELETED;
}

// A change to apply: a job's record at a revision, or its deletion.
struct Change {
  uint64_t seq = 0;
  int64_t now_s = 0;
  std::optional<v1::Job> job;  // absent: deleted
  std::string id;
};

}  // namespace

// Locking: pump_mu guards the pump's position (the hub's listener takes it
// on the writer thread, so nothing slow happens under it); run_mu serialises
// the pump's passes; mu guards the book and the listeners, and is never held
// while reading the state.
struct JobSummaryFeed::Core : std::enable_shared_from_this<JobSummaryFeed::Core> {
  Core(const ClusterState* s, WatchHub* h, boost::asio::thread_pool* p, const Clock* c, mc::JobSummaryOptions o)
      : state(s), hub(h), pool(p), clock(c), book(o) {}

  const ClusterState* const state;
  WatchHub* const hub;
  boost::asio::thread_pool* const pool;
  const Clock* const clock;

  std::mutex pump_mu;
  uint64_t processed = 0;       // guarded by pump_mu
  bool pump_scheduled = false;  // guarded by pump_mu
  bool hub_subscribed = false;  // guarded by pump_mu
  uint64_t hub_subscription = 0;

  std::mutex run_mu;

  mutable std::mutex mu;
  mc::JobSummaryBook book;                 // guarded by mu
  std::map<uint64_t, Listener> listeners;  // guarded by mu
  uint64_t next_listener = 1;              // guarded by mu
  Gauge* summaries = nullptr;

  int64_t NowSeconds() const {
    return std::chrono::duration_cast<std::chrono::seconds>(clock->Now().time_since_epoch()).count();
  }

  // The facts of these nodes, from the state.
  std::map<std::string, mc::ServerFacts> FactsOf(const std::set<std::string>& nodes) const {
    return state->Read([&](const StateView& s) {
      std::map<std::string, mc::ServerFacts> out;
      for (const auto& n : nodes) out.emplace(n, mc::ServerFactsOf(n, s.FindNode(n)));
      return out;
    });
  }

  // Applies the changes in order and tells the listeners.
  void Apply(const std::vector<Change>& changes, const std::map<std::string, mc::ServerFacts>& facts) {
    const mc::ServerFactsFn fn = [&facts](const std::string& node) {
      auto it = facts.find(node);
      return it == facts.end() ? mc::ServerFactsOf(node, nullptr) : it->second;
    };
    std::lock_guard lock(mu);
    for (const auto& c : changes) {
      auto entry = c.job ? book.Upsert(*c.job, c.seq, c.now_s, fn) : book.Remove(c.id, c.seq, c.now_s);
      if (!entry) continue;
      for (const auto& [id, l] : listeners) l(*entry);
    }
    if (summaries) summaries->Set(static_cast<double>(book.size()));
  }

  // The book from the state as it is now: every job's record, and the
  // deletion of those the book holds that are gone.
  void Resync() {
    std::vector<Change> changes;
    std::set<std::string> nodes;
    const int64_t now_s = NowSeconds();
    const uint64_t at = state->Read([&](const StateView& s) {
      for (const auto& [id, job] : s.jobs()) {
        Change c;
        c.seq = job.revision();
        c.now_s = now_s;
        c.job = job;
        c.id = id;
        for (const auto& r : job.placement()) nodes.insert(r.node());
        changes.push_back(std::move(c));
      }
      return state->durable_revision();
    });
    std::set<std::string> present;
    for (const auto& c : changes) present.insert(c.id);
    {
      std::lock_guard lock(mu);
      for (const auto& e : book.All()) {
        if (e.deleted || present.count(e.summary.jobid())) continue;
        Change c;
        c.seq = std::max(at, book.head() + 1);
        c.now_s = now_s;
        c.id = e.summary.jobid();
        changes.push_back(std::move(c));
      }
    }
    Apply(changes, FactsOf(nodes));
  }

  void OnPublished(uint64_t head) {
    std::lock_guard lock(pump_mu);
    if (pump_scheduled || head <= processed) return;
    pump_scheduled = true;
    boost::asio::post(*pool, [self = shared_from_this()] { self->Pump(); });
  }

  // One pass: the next batch of events after `processed`. False when there
  // was nothing to do.
  bool PumpOnce() {
    std::lock_guard run(run_mu);
    uint64_t after, head;
    {
      std::lock_guard lock(pump_mu);
      head = hub->head();
      if (processed >= head) return false;
      after = processed;
    }
    uint64_t last = after;
    auto batch = hub->Fetch(after, kPumpBatch);
    if (!batch.ok() || batch->empty()) {
      // Behind the event log's compaction, or a read error: the book is
      // rebuilt from the state as it is now.
      if (!batch.ok()) GetLogger("mindcluster")->warn("job.Job: events after {}: {}", after, batch.status().ToString());
      Resync();
      last = head;
    } else {
      std::vector<Change> changes;
      std::set<std::string> nodes;
      for (const auto& e : *batch) {
        last = e->revision();
        if (!IsJobEvent(*e)) continue;
        Change c;
        c.seq = e->revision();
        c.now_s = e->has_time() ? e->time().seconds() : NowSeconds();
        c.id = e->job().id();
        if (c.id.empty() && e->job_ids_size() > 0) c.id = e->job_ids(0);
        if (e->type() != v1::EVENT_TYPE_JOB_DELETED) {
          c.job = e->job();
          for (const auto& r : e->job().placement()) nodes.insert(r.node());
        }
        changes.push_back(std::move(c));
      }
      if (!changes.empty()) Apply(changes, FactsOf(nodes));
    }
    std::lock_guard lock(pump_mu);
    processed = std::max(processed, last);
    return true;
  }

  void Pump() {
    for (;;) {
      PumpOnce();
      std::lock_guard lock(pump_mu);
      // Cleared under pump_mu, which the listener also takes: a publish
      // after this point schedules a new pump.
      if (processed >= hub->head()) {
        pump_scheduled = false;
        return;
      }
    }
  }
};

JobSummaryFeed::JobSummaryFeed(const ClusterState* state, WatchHub* hub, boost::asio::thread_pool* pool,
                               const Clock* clock, mc::JobSummaryOptions options, MetricsRegistry* metrics)
    : core_(std::make_shared<Core>(state, hub, pool, clock, options)) {
  if (metrics != nullptr) {
    core_->summaries = &metrics->AddGauge("clusterd_mindcluster_job_summaries",
                                          "Jobs whose MindCluster summary is kept (deleted ones included).");
  }
}

JobSummaryFeed::~JobSummaryFeed() {
  std::lock_guard lock(core_->pump_mu);
  if (core_->hub_subscribed) core_->hub->Unsubscribe(core_->hub_subscription);
  core_->hub_subscribed = false;
}

void JobSummaryFeed::Start() {
  {
    std::lock_guard lock(core_->pump_mu);
    if (core_->hub_subscribed) return;
    // Events up to here are in the state Resync reads below; one that
    // comes between is applied twice, which changes nothing.
    core_->processed = core_->hub->head();
    std::weak_ptr<Core> weak = core_;
    core_->hub_subscription = core_->hub->Subscribe([weak](uint64_t head) {
      if (auto core = weak.lock()) core->OnPublished(head);
    });
    core_->hub_subscribed = true;
  }
  {
    std::lock_guard run(core_->run_mu);
    core_->Resync();
  }
  size_t jobs = 0;
  Read([&](const mc::JobSummaryBook& book) { jobs = book.size(); });
  GetLogger("mindcluster")->info("job.Job / config.Config: summaries of {} jobs", jobs);
}

uint64_t JobSummaryFeed::Listen(const std::function<void(const mc::JobSummaryBook&)>& at_once, Listener listener) {
  std::lock_guard lock(core_->mu);
  at_once(core_->book);
  const uint64_t id = core_->next_listener++;
  core_->listeners.emplace(id, std::move(listener));
  return id;
}

void JobSummaryFeed::Unlisten(uint64_t handle) {
  std::lock_guard lock(core_->mu);
  core_->listeners.erase(handle);
}

void JobSummaryFeed::Read(const std::function<void(const mc::JobSummaryBook&)>& fn) const {
  std::lock_guard lock(core_->mu);
  fn(core_->book);
}

void JobSummaryFeed::SyncForTest() {
  const uint64_t target = core_->hub->head();
  for (;;) {
    {
      std::lock_guard lock(core_->pump_mu);
      if (core_->processed >= target) return;
    }
    core_->PumpOnce();
  }
}

bool ClientRateLimits::Take(const std::string& client) {
  const TimePoint now = clock_->Now();
  std::lock_guard lock(mu_);
  {
    auto it = buckets_.find(client);
    if (it == buckets_.end()) {
      if (buckets_.size() >= max_clients_) {
        for (auto b = buckets_.begin(); b != buckets_.end();) {
          b = now - b->second.used >= kIdleBucket ? buckets_.erase(b) : std::next(b);
        }
      }
      if (buckets_.size() >= max_clients_) return false;
      it = buckets_.emplace(client, Bucket{TokenBucket(rate_, rate_, now), now}).first;
    }
    it->second.used = now;
    return it->second.bucket.Take(now);
  }
}

size_t ClientRateLimits::size() const {
  std::lock_guard lock(mu_);
  return buckets_.size();
}

}  // namespace clusterd
