// The job summaries that MindCluster's job.Job and config.Config services
// serve (docs/mindcluster.md), kept current from ClusterD's event stream:
// one WatchHub subscription, held from Start to the destructor, feeds a pump
// on the watch pool that applies each JOB_CREATED / JOB_UPDATED /
// JOB_DELETED event to a JobSummaryBook (mindcluster/job_summary.h) and
// hands every changed entry to the listeners, in revision order. Each
// change's seq is the revision of its event; a listener added with Listen
// gets the book as it is at that moment and every change after it, none
// twice and none missed.
//
// Also the per-client rate limits both services put in front of their calls.
//
// Threads: the hub's listener runs on the writer thread (it only schedules
// the pump); the pump on the watch pool; Listen/Unlisten on gRPC threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <boost/asio/thread_pool.hpp>

#include "clusterd/engine/watch_hub.h"
#include "clusterd/mindcluster/job_summary.h"
#include "clusterd/state/cluster_state.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/rate_limit.h"

namespace clusterd {

class JobSummaryFeed {
 public:
  // Told of each change, under the feed's mutex: it must only queue (never
  // call back into the feed, never block).
  using Listener = std::function<void(const mindcluster::JobSummaryEntry&)>;

  // Everything passed must outlive the feed.
  // Metrics (in `metrics`, may be nullptr): clusterd_mindcluster_job_summaries
  // (gauge: jobs whose summary is kept, deleted ones included).
  JobSummaryFeed(const ClusterState* state, WatchHub* hub, boost::asio::thread_pool* pool, const Clock* clock,
                 mindcluster::JobSummaryOptions options, MetricsRegistry* metrics = nullptr);
  ~JobSummaryFeed();
  JobSummaryFeed(const JobSummaryFeed&) = delete;
  JobSummaryFeed& operator=(const JobSummaryFeed&) = delete;

  // Builds the book from the state and follows the hub from then on.
  void Start();

  // Adds a listener: `at_once` sees the book now, then `listener` every
  // change after it (both under the feed's mutex). Returns its handle.
  uint64_t Listen(const std::function<void(const mindcluster::JobSummaryBook&)>& at_once, Listener listener);
  void Unlisten(uint64_t handle);
  // Reads the book (under the feed's mutex).
  void Read(const std::function<void(const mindcluster::JobSummaryBook&)>& fn) const;

  // Pumps until the book has applied every event up to the hub's head (tests).
  void SyncForTest();

  struct Core;

 private:
  std::shared_ptr<Core> core_;
};

// A token bucket per client (a principal's name, else its IP address), in
// front of one service's calls, so that one client's flood cannot use up
// another's share. At most max_clients buckets; a bucket unused for a
// minute is dropped when room is needed, and with every bucket busy a new
// client is refused (Take false). On `clock` (common/rate_limit.h's
// TokenBucket: `rate` a second, a burst of one second's worth, at least 1).
// Thread-safe.
class ClientRateLimits {
 public:
  ClientRateLimits(double rate, size_t max_clients, const Clock* clock)
      : rate_(std::max(rate, 1.0)), max_clients_(max_clients), clock_(clock) {}
  bool Take(const std::string& client);
  size_t size() const;

 private:
  struct Bucket {
    TokenBucket bucket;
    TimePoint used;
  };
  const double rate_;
  const size_t max_clients_;
  const Clock* const clock_;
  mutable std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace clusterd
