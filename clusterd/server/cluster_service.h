// gRPC adapters for ClusterService (queries read ClusterState under its
// shared lock; Watch pulls from the WatchHub on the watch executor) and
// FaultService (submitted to the Engine, answered once durable).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/thread_pool.hpp>

#include "clusterd/engine/engine.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/edge/auth.h"
#include "clusterd/edge/peer_limiter.h"
#include "clusterd/server/wire_events.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/fault.grpc.pb.h"
#include "common/metrics.h"

namespace clusterd {

struct WatchOptions {
  size_t batch_events = 256;
  uint64_t max_lag_events = 10'000;
  // A live watcher's next response starts no sooner than this after its
  // previous one started (0: at once).
  std::chrono::nanoseconds coalesce{0};
  // Admission: Watch streams open at once, in all and per client IP address;
  // more are refused with RESOURCE_EXHAUSTED (each holds a batch and a
  // subscription, some hundreds of KiB at worst).
  uint32_t max_streams = 10'000;
  uint32_t max_streams_per_peer = 1'000;
};

// Watch is a raw method (its messages are byte buffers, wire_events.h); the
// others are typed.
class ClusterServiceImpl final
    : public v1::ClusterService::WithRawCallbackMethod_Watch<v1::ClusterService::CallbackService> {
 public:
  // Where queries read: the leader's one state, or the state a standby last
  // loaded from the store it follows the log into (standby_server.h), which
  // it replaces as it goes. Called once per query, on any thread.
  using StateFn = std::function<std::shared_ptr<const ClusterState>()>;

  // `auth` decides who may call what; it must outlive this.
  ClusterServiceImpl(const ClusterState* state, WatchHub* hub, boost::asio::thread_pool* watch_pool,
                     WatchOptions options, MetricsRegistry* metrics, const Authenticator* auth);
  // `compacted`: the history's floor for Watch, when it is read elsewhere
  // than from the state queries read (null: from there).
  ClusterServiceImpl(StateFn state, WatchHub* hub, boost::asio::thread_pool* watch_pool, WatchOptions options,
                     MetricsRegistry* metrics, const Authenticator* auth,
                     std::function<uint64_t()> compacted = nullptr);

  grpc::ServerUnaryReactor* GetSummary(grpc::CallbackServerContext* ctx, const v1::GetSummaryRequest* req,
                                       v1::GetSummaryResponse* resp) override;
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx, const v1::ListNodesRequest* req,
                                      v1::ListNodesResponse* resp) override;
  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* ctx, const v1::GetNodeRequest* req,
                                    v1::GetNodeResponse* resp) override;
  grpc::ServerUnaryReactor* ListFaults(grpc::CallbackServerContext* ctx, const v1::ListFaultsRequest* req,
                                       v1::ListFaultsResponse* resp) override;
  grpc::ServerUnaryReactor* ListRecoveries(grpc::CallbackServerContext* ctx, const v1::ListRecoveriesRequest* req,
                                           v1::ListRecoveriesResponse* resp) override;
  grpc::ServerUnaryReactor* ListValidations(grpc::CallbackServerContext* ctx, const v1::ListValidationsRequest* req,
                                            v1::ListValidationsResponse* resp) override;
  grpc::ServerUnaryReactor* GetRecovery(grpc::CallbackServerContext* ctx, const v1::GetRecoveryRequest* req,
                                        v1::GetRecoveryResponse* resp) override;
  // The request is a serialized v1::WatchRequest; each response a serialized
  // v1::WatchResponse.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* req) override;
  // Fault domains and incidents (state/incidents.h, docs/domains.md).
  grpc::ServerUnaryReactor* ListDomains(grpc::CallbackServerContext* ctx, const v1::ListDomainsRequest* req,
                                        v1::ListDomainsResponse* resp) override;
  grpc::ServerUnaryReactor* GetIncident(grpc::CallbackServerContext* ctx, const v1::GetIncidentRequest* req,
                                        v1::GetIncidentResponse* resp) override;
  grpc::ServerUnaryReactor* ListIncidents(grpc::CallbackServerContext* ctx, const v1::ListIncidentsRequest* req,
                                          v1::ListIncidentsResponse* resp) override;
  // The pingmesh's loss matrix (state/pingmesh_rule.h, docs/pingmesh.md).
  grpc::ServerUnaryReactor* ListLinks(grpc::CallbackServerContext* ctx, const v1::ListLinksRequest* req,
                                      v1::ListLinksResponse* resp) override;
  grpc::ServerUnaryReactor* GetIncidentEvidence(grpc::CallbackServerContext* ctx,
                                                const v1::GetIncidentEvidenceRequest* req,
                                                v1::GetIncidentEvidenceResponse* resp) override;

  // Events at or below it are no longer in the history.
  uint64_t compacted_revision() const { return compacted_ ? compacted_() : state_()->compacted_revision(); }
  WatchHub* hub() const { return hub_; }
  boost::asio::thread_pool* pool() const { return pool_; }
  const Authenticator* auth() const { return auth_; }
  const WatchOptions& options() const { return options_; }
  WireEventCache* wire_cache() { return &wire_cache_; }
  Counter* watch_ended_lagging = nullptr;
  Counter* watch_events_sent = nullptr;
  Counter* watch_rejected = nullptr;
  Counter* watch_rejected_per_peer = nullptr;

  // Watch admission (any thread): counts the stream in and returns OK, or
  // returns RESOURCE_EXHAUSTED naming the limit. Each OK is undone by one
  // ReleaseWatch with the same peer key.
  grpc::Status AdmitWatch(const std::string& peer_key);
  void ReleaseWatch(const std::string& peer_key);
  int64_t open_watch_streams() const { return open_watches_.load(); }

 private:
  StateFn state_;
  std::function<uint64_t()> compacted_;
  WatchHub* hub_;
  boost::asio::thread_pool* pool_;
  WatchOptions options_;
  const Authenticator* auth_;
  std::atomic<int64_t> open_watches_{0};
  PeerLimiter watch_peers_;
  WireEventCache wire_cache_;
};

class FaultServiceImpl final : public v1::FaultService::CallbackService {
 public:
  // `auth` derives each write's principal; it must outlive this.
  FaultServiceImpl(Engine* engine, const Authenticator* auth) : engine_(engine), auth_(auth) {}
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx, const v1::ReportRequest* req,
                                   v1::ReportResponse* resp) override;

 private:
  Engine* engine_;
  const Authenticator* auth_;
};

}  // namespace clusterd
