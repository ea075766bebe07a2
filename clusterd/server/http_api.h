// The read-only JSON API on ClusterD's HTTP port (docs/operate.md#http-api):
// the same queries as ClusterService/JobService/AdminService, as proto3 JSON,
// with the same filters and pagination as query parameters:
//
//   GET /api/v1/summary                     GetSummaryResponse
//   GET /api/v1/nodes?health=&label_selector=&page_size=&page_token=
//   GET /api/v1/nodes/<name>                GetNodeResponse
//   GET /api/v1/faults?node=&active_only=true&min_level=&job=&...
//   GET /api/v1/jobs?state=&kind=&...       GET /api/v1/jobs/<id>
//   GET /api/v1/recoveries?job=&state=&...  GET /api/v1/recoveries/<id>
//   GET /api/v1/admin                       AdminState
//   GET /api/v1/domains?level=&degraded_only=&...      ListDomainsResponse
//   GET /api/v1/incidents?open_only=&domain=&...       GET /api/v1/incidents/<id>
//   GET /api/v1/mindcluster/jobs/<id>?page_size=&page_token=
//       GetMindClusterJobResponse: the job's MindCluster summary, rank table
//       and NIC switches / stress tests (a page of the rank table's servers)
//   GET /api/v1/events?from_revision=&limit=&nodes=&types=&min_level=&jobs=
//       the event history after from_revision (at most `limit`, 1000), the
//       delta feed a page follows; 410 with the oldest revision when that
//       history is compacted.
//
// Errors are {"code": "<gRPC code name>", "message": "..."} with the HTTP
// status of the code (400, 401, 403, 404, 410, 503). Unless ClusterD runs
// --insecure, every call needs "Authorization: Bearer <token>" or a client
// certificate (the port is TLS then) of a principal with the viewer role.
#pragma once

#include <functional>

#include "clusterd/progress/monitor.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/edge/auth.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/v1/mindcluster.pb.h"
#include "common/http_server.h"

namespace clusterd {

struct HttpApiOptions {
  // Bearer token of a viewer (or operator, admin) required.
  bool require_viewer = true;
  // Most events one /api/v1/events answer carries.
  size_t max_events = 1000;
  // The live Job.progress of GET /api/v1/jobs/<id> (null: the stored one).
  const ProgressMonitor* progress = nullptr;
  // GET /api/v1/mindcluster/jobs/<id> (unset: not served).
  std::function<StatusOr<v1::GetMindClusterJobResponse>(const v1::GetMindClusterJobRequest&)> mindcluster_job;
};

// Registers the routes on `http` (before it starts). The arguments must
// outlive it.
void RegisterHttpApi(HttpServer* http, const ClusterState* state, const WatchHub* hub, const Authenticator* auth,
                     const HttpApiOptions& options);

// For tests: query string -> request message by field name ("a=1&b=x&b=y"
// for a repeated b); unknown or malformed parameters are InvalidArgument.
Status QueryToMessage(std::string_view query, google::protobuf::Message* msg);

}  // namespace clusterd
