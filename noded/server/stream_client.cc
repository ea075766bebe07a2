#include "noded/server/stream_client.h"

#include <map>

#include <google/protobuf/util/time_util.h>

#include "common/logging.h"

namespace clusterd::noded {

using google::protobuf::util::TimeUtil;

namespace {

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const StreamOptions& options, size_t rotation = 0) {
  grpc::ChannelArguments args;
  // Notice a dead ClusterD (or path) even when nothing is being sent.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Our own backoff governs reconnects; keep gRPC's short.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2'000);
  return CreateClientChannel(RotateAddresses(options.server, rotation), options.security, args);
}

}  // namespace

StatusOr<std::unique_ptr<StreamClient>> StreamClient::Create(StreamOptions options, const Agent* agent, Outbox* outbox,
                                                             MetricsRegistry* metrics) {
  auto channel = MakeChannel(options);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<StreamClient>(
      new StreamClient(std::move(options), std::move(*channel), agent, outbox, metrics));
}

StreamClient::StreamClient(StreamOptions options, std::shared_ptr<grpc::Channel> channel, const Agent* agent,
                           Outbox* outbox, MetricsRegistry* metrics)
    : options_(std::move(options)), agent_(agent), outbox_(outbox), channel_(std::move(channel)) {
  stub_ = v1::NodeAgentService::NewStub(channel_);
  if (metrics) {
    reconnects_ = &metrics->AddCounter("noded_stream_connects_total", "Streams opened to ClusterD.");
    sent_transitions_ =
        &metrics->AddCounter("noded_transitions_sent_total", "Fault transitions sent (resends included).");
    acks_ = &metrics->AddCounter("noded_acks_total", "Acknowledgements received from ClusterD.");
    metrics->AddCallbackGauge("noded_stream_connected", "1 while the stream to ClusterD is up.",
                              [this] { return connected_.load() ? 1.0 : 0.0; });
  }
}

StreamClient::~StreamClient() { Stop(); }

void StreamClient::Start() {
  thread_ = std::thread([this] { Run(); });
}

void StreamClient::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if (current_) current_->TryCancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StreamClient::Notify() {
  {
    std::lock_guard lock(mu_);
    dirty_ = true;
  }
  cv_.notify_all();
}

void StreamClient::Run() {
  auto log = GetLogger("stream");
  auto backoff = options_.backoff_min;
  const size_t addresses = AddressCount(options_.server);
  size_t refusals = 0;  // by standbys in a row
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
    const auto began = std::chrono::steady_clock::now();
    const bool refused = Session();
    connected_ = false;
    // The next session starts on a new channel. With several addresses
    // (ipv4:a,b,c: the replicas of a highly available ClusterD, docs/ha.md)
    // it tries the next address first: pick_first would otherwise connect to
    // the same standby again (standbys listen, for queries and Watch, and
    // refuse agents). A new channel also tries an address afresh that gRPC
    // 1.51's pick_first would keep in its backoff.
    if (addresses > 1) ++rotation_;
    if (auto fresh = MakeChannel(options_, rotation_); fresh.ok()) {
      channel_ = std::move(*fresh);
      stub_ = v1::NodeAgentService::NewStub(channel_);
    }
    refusals = refused ? refusals + 1 : 0;
    // A session that lasted reset the backoff; quick failures grow it. A
    // standby's refusal does not, until every address has refused.
    if (std::chrono::steady_clock::now() - began > options_.backoff_max) backoff = options_.backoff_min;
    if (refused && refusals < addresses) backoff = options_.backoff_min;
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(backoff * jitter(rng_));
    log->info("reconnecting to {} in {} ms", options_.server,
              std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, wait, [&] { return stop_; });
    if (stop_) return;
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

bool StreamClient::Session() {
  auto log = GetLogger("stream");
  grpc::ClientContext ctx;
  {
    std::lock_guard lock(mu_);
    if (stop_) return false;
    current_ = &ctx;
  }
  struct Clear {
    StreamClient* self;
    ~Clear() {
      std::lock_guard lock(self->mu_);
      self->current_ = nullptr;
    }
  } clear{this};

  auto stream = stub_->Connect(&ctx);
  // Hello and the resend list come from one consistent snapshot.
  Outbox::Snapshot snapshot = outbox_->Take();
  v1::ConnectRequest hello;
  // Read before the hello: a chain that changes in between is sent again
  // (harmless), never missed.
  uint64_t sent_chain = agent_->ChainVersion();
  uint64_t sent_pods = agent_->PodDevicesVersion();
  *hello.mutable_hello() = agent_->MakeHello();
  hello.mutable_hello()->set_epoch(outbox_->epoch());
  hello.mutable_hello()->set_instance_id(outbox_->instance_id());
  if (options_.pingmesh != nullptr) {
    hello.mutable_hello()->set_probe_address(options_.probe_address);
    for (const auto& p : options_.pingmesh->device_ports()) {
      v1::DeviceAddress* d = hello.mutable_hello()->add_device_addresses();
      d->set_device_id(p.device_id);
      d->set_address(p.address);
    }
  }
  hello.mutable_hello()->set_collects_evidence(options_.evidence != nullptr);
  for (auto& r : snapshot.active) *hello.mutable_hello()->add_active_faults() = std::move(r);
  v1::ConnectResponse resp;
  if (!stream->Write(hello) || !stream->Read(&resp) || !resp.has_welcome()) {
    grpc::Status st = stream->Finish();
    log->warn("connect to {} failed: {} {}", options_.server, static_cast<int>(st.error_code()), st.error_message());
    return st.error_code() == grpc::StatusCode::UNAVAILABLE && st.error_message().rfind("standby ", 0) == 0;
  }
  if (reconnects_) reconnects_->Inc();
  const uint64_t epoch = outbox_->epoch();
  if (resp.welcome().applied_seq() > 0) {
    // A failed ack only keeps entries ClusterD already has: they are resent
    // and acknowledged again as duplicates.
    Status acked = outbox_->Ack(epoch, resp.welcome().applied_seq());
    if (!acked.ok()) log->error("outbox ack of the welcome: {}", acked.ToString());
  }
  connected_ = true;
  log->info("connected to {} (revision {}, {} transitions to resend)", options_.server, resp.welcome().revision(),
            snapshot.pending.size());

  std::atomic<bool> broken{false};
  std::thread reader([&] {
    v1::ConnectResponse in;
    while (stream->Read(&in)) {
      if (in.has_validation()) {
        if (options_.validator == nullptr) continue;
        if (in.validation().node() != options_.node_name) {
          log->warn("validation {} for node {} refused: this is node {}", in.validation().validation_id(),
                    in.validation().node(), options_.node_name);
          continue;
        }
        options_.validator->Submit(in.validation());
        continue;
      }
      if (in.has_evidence_request()) {
        if (options_.evidence == nullptr) continue;
        if (in.evidence_request().node() != options_.node_name) {
          log->warn("evidence request of incident {} for node {} refused: this is node {}",
                    in.evidence_request().incident_id(), in.evidence_request().node(), options_.node_name);
          continue;
        }
        options_.evidence->Submit(in.evidence_request());
        continue;
      }
      if (in.has_probe_plan()) {
        // A bad plan is refused and logged by the worker; the stream goes on.
        if (options_.pingmesh != nullptr) (void)options_.pingmesh->Submit(in.probe_plan());
        continue;
      }
      if (!in.has_ack()) continue;
      if (acks_) acks_->Inc();
      Status st = outbox_->Ack(in.ack().id().epoch(), in.ack().id().seq());
      if (!st.ok()) log->error("outbox ack: {}", st.ToString());
    }
    broken = true;
    cv_.notify_all();
  });

  // Highest sequence sent per epoch on this stream.
  std::map<uint64_t, uint64_t> sent;
  if (resp.welcome().applied_seq() > 0) sent[epoch] = resp.welcome().applied_seq();
  // Resend order key of the last transition handed to the stream (or skipped
  // as already applied): each wake asks the outbox only for what follows it.
  std::pair<uint64_t, uint64_t> cursor{0, 0};
  auto send_pending = [&](const std::vector<Outbox::Pending>& pending) {
    for (const auto& p : pending) {
      cursor = {p.epoch, p.seq};
      if (p.seq <= sent[p.epoch]) continue;
      v1::ConnectRequest req;
      *req.mutable_transition() = p.transition;
      if (!stream->Write(req)) return false;
      sent[p.epoch] = p.seq;
      if (sent_transitions_) sent_transitions_->Inc();
    }
    return true;
  };
  // Everything recorded since the last send, in bounded batches.
  auto send_new = [&] {
    constexpr size_t kBatch = 256;
    for (;;) {
      std::vector<Outbox::Pending> batch = outbox_->PendingAfter(cursor.first, cursor.second, kBatch);
      if (batch.empty()) return true;
      if (!send_pending(batch)) return false;
      if (batch.size() < kBatch) return true;
    }
  };
  bool ok = send_pending(snapshot.pending);
  auto next_heartbeat = std::chrono::steady_clock::now();
  auto next_metrics = std::chrono::steady_clock::now();
  auto next_progress =
      options_.progress ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point::max();
  while (ok) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_heartbeat) {
      v1::ConnectRequest req;
      *req.mutable_heartbeat()->mutable_time() = TimeUtil::GetCurrentTime();
      ok = stream->Write(req);
      next_heartbeat = now + options_.heartbeat_interval;
    }
    if (ok && now >= next_metrics) {
      v1::ConnectRequest req;
      *req.mutable_metrics() = agent_->LatestMetrics();
      ok = stream->Write(req);
      next_metrics = now + options_.metrics_interval;
    }
    // The software chain changed since the hello or the last update.
    if (ok && agent_->ChainVersion() != sent_chain) {
      v1::ConnectRequest req;
      *req.mutable_chain() = agent_->Chain(&sent_chain);
      ok = stream->Write(req);
    }
    // The pods holding devices changed since the hello or the last update.
    if (ok && agent_->PodDevicesVersion() != sent_pods) {
      v1::ConnectRequest req;
      *req.mutable_pod_devices() = agent_->PodDevicesNow(&sent_pods);
      ok = stream->Write(req);
    }
    if (ok && now >= next_progress) {
      ok = SendProgress(stream.get());
      next_progress = now + options_.progress_interval;
    }
    if (!ok) break;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, std::min({next_heartbeat, next_metrics, next_progress}),
                     [&] { return stop_ || dirty_ || broken.load(); });
      if (stop_ || broken) break;
      dirty_ = false;
    }
    ok = send_new();
    // Validation results (docs/validation.md): one lost with a broken
    // stream is asked again by ClusterD and answered from the kept result.
    if (ok && options_.validator != nullptr) {
      for (auto& r : options_.validator->TakeReady()) {
        v1::ConnectRequest req;
        *req.mutable_validation_result() = std::move(r);
        if (!(ok = stream->Write(req))) break;
      }
    }
    // Evidence bundles (docs/domains.md): one lost with a broken stream is
    // not sent again (ClusterD asks again after its restart, or marks it
    // failed at its timeout).
    if (ok && options_.evidence != nullptr) {
      for (auto& b : options_.evidence->TakeReady()) {
        v1::ConnectRequest req;
        *req.mutable_evidence() = std::move(b);
        if (!(ok = stream->Write(req))) break;
      }
    }
    // The pingmesh's last round (docs/pingmesh.md); one lost with a broken
    // stream is not sent again: the next round's is.
    if (ok && options_.pingmesh != nullptr) {
      if (auto report = options_.pingmesh->TakeReady()) {
        v1::ConnectRequest req;
        *req.mutable_probes() = std::move(*report);
        ok = stream->Write(req);
      }
    }
  }
  connected_ = false;
  ctx.TryCancel();
  reader.join();
  grpc::Status st = stream->Finish();
  bool stopping;
  {
    std::lock_guard lock(mu_);
    stopping = stop_;
  }
  if (!stopping) {
    log->warn("stream to {} ended: {} {}", options_.server, static_cast<int>(st.error_code()), st.error_message());
  }
  return false;
}

bool StreamClient::SendProgress(grpc::ClientReaderWriterInterface<v1::ConnectRequest, v1::ConnectResponse>* stream) {
  ProgressFiles::Pass pass = options_.progress->Scan(std::chrono::system_clock::now());
  for (const auto& e : pass.errors) {
    // A bad file stays bad until it is written again: said once.
    if (progress_errors_logged_.size() < 1024 && progress_errors_logged_.insert(e).second) {
      GetLogger("noded")->warn("job progress file skipped: {}", e);
    }
  }
  for (auto& r : pass.reports) {
    v1::ConnectRequest req;
    *req.mutable_progress() = std::move(r);
    if (!stream->Write(req)) return false;
  }
  return true;
}

}  // namespace clusterd::noded
