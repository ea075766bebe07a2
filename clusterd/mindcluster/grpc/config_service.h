// MindCluster's config.Config service (docs/mindcluster.md,
// "config.Config"): MindIE registers for a job and follows its rank table
// (the JobSummaryFeed's, mindcluster/job_summary.h: built from the job's
// placement in ClusterD), sent at subscription once the job is placed and
// again whenever its placement changes.
//
// One registration per jobId (a newer Register replaces it and ends its
// stream), one stream per registration (a newer one replaces it). A stream
// holds at most one waiting message (a newer rank table replaces one not yet
// written). Registrations at most max_registrations, a registration without
// a stream expires after registration_ttl; per-client and service-wide call
// rates. A deleted job's stream ends with NOT_FOUND. Refusals change
// nothing.
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
#include "mindcluster/config.grpc.pb.h"

namespace clusterd {

struct MindClusterConfigOptions {
  uint32_t max_registrations = 1000;
  std::chrono::seconds registration_ttl{300};
  double client_rate = 10;
  double call_rate = 100;
  // The clock of the rates and the registrations' idle time: nullptr, the
  // monotonic clock; a test's FakeClock moves them without waiting.
  const Clock* clock = nullptr;
};

class MindClusterConfigService final : public config::Config::CallbackService {
 public:
  // `feed`, `pool` and `auth` must outlive this and every stream. Metrics (in
  // `metrics`, may be nullptr): clusterd_mindcluster_config_subscribers
  // (gauge), clusterd_mindcluster_config_registrations (gauge),
  // clusterd_mindcluster_config_messages_total,
  // clusterd_mindcluster_config_refused_total{limit="rate"|"client_rate"|"registrations"}.
  MindClusterConfigService(JobSummaryFeed* feed, boost::asio::thread_pool* pool, const Authenticator* auth,
                           MindClusterConfigOptions options, MetricsRegistry* metrics);
  ~MindClusterConfigService() override;

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const config::ClientInfo* req,
                                     config::Status* resp) override;
  grpc::ServerWriteReactor<config::RankTableStream>* SubscribeRankTable(grpc::CallbackServerContext* ctx,
                                                                        const config::ClientInfo* req) override;

  size_t registration_count() const;
  size_t subscriber_count() const;

  struct Core;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace clusterd
