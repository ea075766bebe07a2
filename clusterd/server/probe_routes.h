// The HTTP port's probe and scrape routes, /healthz, /readyz and /metrics,
// as a leader's server (server.cc) and a high-availability standby
// (clusterd/ha/replica.cc) both serve them: each says what its probes
// check, this says how they answer. A probe answers 200 or 503 with one
// plain-text reason (a kubelet reads the code, a person the text).
//
// Thread contract: the functions given run on the HTTP server's threads:
// quick and thread-safe.
#pragma once

#include <functional>
#include <string>

#include "clusterd/edge/auth.h"
#include "common/http_server.h"

namespace clusterd {

// A probe's outcome: 200 when ok, 503 otherwise; `text` is the body, a
// newline added.
struct Probe {
  bool ok = true;
  std::string text;
};
HttpResponse ProbeResponse(const Probe& probe);
// A route that answers what `probe` says each time (/readyz/replica).
HttpServer::Handler ProbeHandler(std::function<Probe()> probe);

struct ProbeRoutes {
  // /healthz: "ok" while this returns "" (or is null); 503 with what it
  // returns otherwise (only a restart helps).
  std::function<std::string()> unhealthy;
  // /readyz.
  std::function<Probe()> ready;
  // /metrics: the exposition text (null: no /metrics route, as on the
  // probe-only port).
  std::function<std::string()> metrics;
  // Not null: /metrics needs the bearer token or client certificate of a
  // principal with one of metrics_roles (metrics_auth, metrics_role): 401
  // without an accepted one, 403 without the role, 503 when it could not be
  // checked. Borrowed; outlives the routes.
  const Authenticator* metrics_auth = nullptr;
  RoleMask metrics_roles = kReaderRoles;
};
// The routes a probe-only port serves (probe_listen): every route of
// `routes` but /metrics.
inline ProbeRoutes ProbeOnly(ProbeRoutes routes) {
  routes.metrics = nullptr;
  routes.metrics_auth = nullptr;
  return routes;
}
void RegisterProbeRoutes(HttpServer* http, ProbeRoutes routes);

}  // namespace clusterd
