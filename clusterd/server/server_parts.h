// Pieces of the server's wiring that a leader (server.cc) and a standby's
// read-only server (standby_server.cc) build the same way from the config.
#pragma once

#include <memory>

#include <grpcpp/server_builder.h>

#include "clusterd/auth/token_review.h"
#include "clusterd/config/config.h"
#include "clusterd/edge/auth.h"
#include "clusterd/server/cluster_service.h"
#include "clusterd/state/mutation.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

// The state's limits, with their refusal and truncation counters in metrics.
StateLimits MakeStateLimits(const ClusterdConfig& cfg, MetricsRegistry* metrics);

// Who may call what: the configured tokens, bindings and TokenReview (the
// reviewer, when configured, lands in *reviewer_out, which must outlive the
// authenticator).
StatusOr<std::unique_ptr<Authenticator>> MakeConfiguredAuthenticator(const ClusterdConfig& cfg,
                                                                     MetricsRegistry* metrics,
                                                                     std::unique_ptr<TokenReviewer>* reviewer_out);

WatchOptions MakeWatchOptions(const ClusterdConfig& cfg);

// Message sizes, keepalive and handshake limits of the gRPC port.
void ConfigureGrpcServer(const ClusterdConfig& cfg, grpc::ServerBuilder* builder);

// The HTTP port's limits: max_http_connections, of which a quarter (at most
// 16) is kept for the probe and scrape paths (/healthz, /readyz,
// /readyz/replica, /metrics) so that API clients cannot starve the kubelet's
// probes; max_http_connections_per_peer, at most half of the total;
// http_timeout. Metrics are the caller's to add.
HttpServer::Options MakeHttpServerOptions(const ClusterdConfig& cfg);

}  // namespace clusterd
