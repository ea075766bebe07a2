// Wires ClusterD together: store, catalog, state, engine, gRPC services
// (with health checking and reflection) and the HTTP endpoints. Only the
// clusterd binary and the process-level tests use this.
#pragma once

#include <functional>
#include <memory>

#include "clusterd/config/config.h"
#include "clusterd/engine/integration.h"
#include "clusterd/storage/store.h"
#include "common/clock.h"
#include "common/executor.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

class ClusterdServer {
 public:
  explicit ClusterdServer(ClusterdConfig config, const Clock* clock = &SystemClock::Instance());
  ~ClusterdServer();

  // Before Start: runs `integration` alongside ClusterD, like one the
  // config lists (integration.h): started after the writer, with a command
  // facade whose writes record integration->name() as their actor; stopped
  // before the writer.
  void AddIntegration(std::unique_ptr<Integration> integration);

  // Before Start: Start hands the local store it opened to `wrapper` and
  // uses what it returns (high availability wraps it in the replicated
  // store, clusterd/ha), before the state is loaded from it. An error ends
  // Start with it.
  using StoreWrapper = std::function<StatusOr<std::unique_ptr<storage::Store>>(std::unique_ptr<storage::Store>,
                                                                               MetricsRegistry* metrics)>;
  void WrapStore(StoreWrapper wrapper);
  // Before Start: /readyz answers 503 with what `check` returns while it
  // returns a non-empty string (a leader whose lease ran out is not ready,
  // even in the moment before it steps down). Called on the HTTP thread:
  // quick and thread-safe.
  void SetReadinessCheck(std::function<std::string()> check);
  // Before Start: one more route on the HTTP port (HttpServer::Handle), which
  // does its own authorization (high availability's checkpoint transfer).
  void AddHttpHandler(std::string method, std::string path, HttpServer::Handler handler);
  // Before Start: where the timed work of the progress monitor (its passes,
  // on `timers`' clock), TaskD's Recover service, the fault.Fault service
  // and the agent streams' hello deadlines runs (common/executor.h): a
  // test's ManualExecutor over a FakeClock steps a hang, a keep-alive, a
  // send interval or a hello_timeout instead of waiting it out; the
  // job.Job and config.Config services' call rates and registrations' idle
  // time read its clock too. By default each has a thread of its own on the
  // real clocks. Must outlive the server.
  void SetTimers(Executor* timers);

  // Opens the store, loads state, starts the writer, gRPC, HTTP and the
  // integrations.
  Status Start();
  // Stops accepting, ends streams (agents reconnect elsewhere or later),
  // commits what was accepted, closes the store. Idempotent.
  void Shutdown();

  int grpc_port() const;
  int http_port() const;
  // The probe-only port (probe_listen); 0 without one.
  int probe_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clusterd
