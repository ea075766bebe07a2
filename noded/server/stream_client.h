// The one NodeAgentService.Connect stream to ClusterD. A dedicated thread
// connects, says hello with the Outbox's consistent snapshot (active faults +
// transitions not yet acknowledged), resends those, then streams new
// transitions, heartbeats and metric snapshots; a reader thread applies the
// acknowledgements to the Outbox. On any failure it reconnects with
// exponential backoff and jitter.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "clusterd/v1/agent.grpc.pb.h"
#include "common/grpc/credentials.h"
#include "common/metrics.h"
#include "common/status.h"
#include "noded/agent.h"
#include "noded/collectors/progress.h"
#include "noded/evidence.h"
#include "noded/outbox.h"
#include "noded/validator.h"
#include "noded/pingmesh.h"

namespace clusterd::noded {

struct StreamOptions {
  std::string server = "127.0.0.1:8899";
  std::chrono::nanoseconds heartbeat_interval = std::chrono::seconds(2);
  std::chrono::nanoseconds metrics_interval = std::chrono::seconds(10);
  // Job progress files (borrowed; null: none), read every progress_interval
  // on a connected stream and the changed ones sent.
  ProgressFiles* progress = nullptr;
  std::chrono::nanoseconds progress_interval = std::chrono::seconds(10);
  std::chrono::nanoseconds backoff_min = std::chrono::milliseconds(200);
  std::chrono::nanoseconds backoff_max = std::chrono::seconds(10);
  ClientSecurity security;  // TLS, client certificate, bearer token; plaintext when empty
  // Runs ClusterD's validation requests (docs/validation.md; borrowed, null:
  // requests are ignored) and its results go out on the stream.
  Validator* validator = nullptr;
  // This node's name: a request for another node is refused (logged).
  std::string node_name;
  // The pingmesh (docs/pingmesh.md; borrowed, null: off): its hello names
  // probe_address, ClusterD's probe plans go to the worker and its reports
  // out on the stream.
  PingmeshWorker* pingmesh = nullptr;
  std::string probe_address;  // "ip:port" or ":port"
  // Collects incidents' evidence bundles (docs/domains.md; borrowed, null:
  // off): its hello says so, ClusterD's requests go to it and its bundles
  // out on the stream.
  EvidenceCollector* evidence = nullptr;
};

class StreamClient {
 public:
  // Fails (naming the flag) when options.security is invalid; see
  // ValidateClientSecurity. Connecting starts with Start().
  static StatusOr<std::unique_ptr<StreamClient>> Create(StreamOptions options, const Agent* agent, Outbox* outbox,
                                                        MetricsRegistry* metrics);
  ~StreamClient();

  // Before Start: where peers probe this node (StreamOptions::probe_address),
  // once its port is bound.
  void set_probe_address(std::string address) { options_.probe_address = std::move(address); }
  void Start();
  void Stop();
  // Wakes the sender: new transitions are in the Outbox. Thread-safe.
  void Notify();
  bool connected() const { return connected_.load(); }

 private:
  StreamClient(StreamOptions options, std::shared_ptr<grpc::Channel> channel, const Agent* agent, Outbox* outbox,
               MetricsRegistry* metrics);

  void Run();
  // One connection's life; returns when it broke or Stop was called. True
  // when a standby replica refused it (it is not the leader).
  bool Session();
  // The progress files changed since the last pass, one message per job;
  // false when the stream broke. The files' errors are logged once each.
  bool SendProgress(grpc::ClientReaderWriterInterface<v1::ConnectRequest, v1::ConnectResponse>* stream);

  StreamOptions options_;
  const Agent* agent_;
  Outbox* outbox_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::NodeAgentService::Stub> stub_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool dirty_ = false;
  grpc::ClientContext* current_ = nullptr;  // guarded by mu_, for Stop's TryCancel
  std::atomic<bool> connected_{false};
  std::thread thread_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::set<std::string> progress_errors_logged_;  // the stream thread's
  size_t rotation_ = 0;                           // with several addresses: which one the next channel tries first

  Counter* reconnects_ = nullptr;
  Counter* sent_transitions_ = nullptr;
  Counter* acks_ = nullptr;
};

}  // namespace clusterd::noded
