#include "clusterd/server/probe_routes.h"

#include "common/metrics.h"

namespace clusterd {

HttpResponse ProbeResponse(const Probe& probe) {
  return HttpResponse{probe.ok ? 200 : 503, "text/plain", probe.text + "\n"};
}

HttpServer::Handler ProbeHandler(std::function<Probe()> probe) {
  return [probe = std::move(probe)](const HttpRequest&) { return ProbeResponse(probe()); };
}

void RegisterProbeRoutes(HttpServer* http, ProbeRoutes routes) {
  http->Handle("GET", "/healthz", [unhealthy = std::move(routes.unhealthy)](const HttpRequest&) {
    const std::string problem = unhealthy ? unhealthy() : "";
    return ProbeResponse({problem.empty(), problem.empty() ? "ok" : problem});
  });
  http->Handle("GET", "/readyz", ProbeHandler(std::move(routes.ready)));
  if (!routes.metrics) return;
  http->Handle("GET", "/metrics",
               [metrics = std::move(routes.metrics), auth = routes.metrics_auth,
                roles = routes.metrics_roles](const HttpRequest& req) {
                 if (auth) {
                   if (Status st = auth->AuthorizeHttp(req, roles, "GET /metrics"); !st.ok()) {
                     return HttpResponse{HttpStatusOfRefusal(st), "text/plain", st.message() + "\n"};
                   }
                 }
                 return HttpResponse{200, MetricsRegistry::kContentType, metrics()};
               });
}

}  // namespace clusterd
