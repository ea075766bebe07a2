// MindCluster's job.Job service (docs/mindcluster.md, "job.Job"):
// ascend-faultdiag-online and other platform agents register under one of
// the reference's roles, get a clientId, and follow every job's summary
// (mindcluster/job_summary.h) from the JobSummaryFeed:
// SubscribeJobSummarySignal from now on, SubscribeJobSummarySignalList with
// every job's summary first (in batches of at most 40,000 chips and 3 MiB),
// then each change.
//
// Limits (the reference's, and ClusterD's): 20 streams per role; a client's
// stream holds at most 10 messages waiting (beyond, it ends with
// RESOURCE_EXHAUSTED: it did not read); registrations at most max_clients
// in all and max_clients_per_principal per client, a registration without a
// stream expires after registration_ttl and one whose stream ended is gone
// (Register again, as the reference's clients do); a per-client and a
// service-wide call rate. Refusals change nothing.
//
// Threads: gRPC's callbacks; the feed's pump tells the streams (they only
// queue); cleanups run on the watch pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include <boost/asio/thread_pool.hpp>

#include "clusterd/mindcluster/grpc/job_feed.h"
#include "clusterd/edge/auth.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "mindcluster/job.grpc.pb.h"

namespace clusterd {

// job.Job's Status.code values (the reference's).
inline constexpr int32_t kMindClusterJobRegistered = 0;
inline constexpr int32_t kMindClusterJobRateLimited = 429;

struct MindClusterJobOptions {
  // Registered clientIds at most (the reference allows 100,000), and per
  // client (principal, else IP address).
  uint32_t max_clients = 1000;
  uint32_t max_clients_per_principal = 100;
  // Open streams per role (the reference's MaxClientPerRole).
  uint32_t max_streams_per_role = 20;
  // Messages waiting per stream (the reference's MsgCacheNumPerClient).
  size_t max_queued = 10;
  // A registration with no stream for this long expires.
  std::chrono::seconds registration_ttl{300};
  // Calls per second per client and in all (the reference: 20 subscriptions
  // a second in all).
  double client_rate = 10;
  double call_rate = 100;
  // The clock of the rates and the registrations' idle time: nullptr, the
  // monotonic clock; a test's FakeClock moves them without waiting.
  const Clock* clock = nullptr;
};

class MindClusterJobService final : public job::Job::CallbackService {
 public:
  // `feed`, `pool` and `auth` must outlive this and every stream. Metrics (in
  // `metrics`, may be nullptr): clusterd_mindcluster_job_subscribers (gauge),
  // clusterd_mindcluster_job_clients (gauge: registrations),
  // clusterd_mindcluster_job_messages_total, and
  // clusterd_mindcluster_job_refused_total{limit="rate"|"client_rate"|"clients"|"per_principal"|"per_role"|"slow_reader"}.
  MindClusterJobService(JobSummaryFeed* feed, boost::asio::thread_pool* pool, const Authenticator* auth,
                        MindClusterJobOptions options, MetricsRegistry* metrics);
  ~MindClusterJobService() override;

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const job::ClientInfo* req,
                                     job::Status* resp) override;
  grpc::ServerWriteReactor<job::JobSummarySignal>* SubscribeJobSummarySignal(grpc::CallbackServerContext* ctx,
                                                                             const job::ClientInfo* req) override;
  grpc::ServerWriteReactor<job::JobSummarySignalList>* SubscribeJobSummarySignalList(
      grpc::CallbackServerContext* ctx, const job::ClientInfo* req) override;

  size_t client_count() const;
  size_t subscriber_count() const;

  struct Core;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace clusterd
