#include "clusterd/ha/replica.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>

#include "clusterd/ha/election.h"
#include "clusterd/ha/etcd_client.h"
#include "clusterd/ha/etcd_log.h"
#include "clusterd/ha/log_follower.h"
#include "clusterd/ha/pod_label.h"
#include "clusterd/ha/replication/checkpoint.h"
#include "clusterd/ha/replication/log_entry.h"
#include "clusterd/ha/replication/replicated_store.h"
#include "clusterd/ha/standby_server.h"
#include "clusterd/server/probe_routes.h"
#include "clusterd/server/server.h"
#include "clusterd/server/server_parts.h"
#include "clusterd/edge/tls.h"
#include "clusterd/storage/rocksdb_store.h"
#include "clusterd/storage/v1/replica.pb.h"
#include "common/config_util.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/monotonic_clock.h"
#include "common/signals.h"
#include "common/tls_context.h"

namespace clusterd::ha {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kFollowInterval = milliseconds(50);
constexpr auto kProgressInterval = milliseconds(1000);
constexpr auto kTruncateInterval = milliseconds(5000);
// A replica the log no longer reaches tries a checkpoint this often.
constexpr auto kRebuildInterval = milliseconds(2000);
constexpr const char* kReconnectsHelp =
    "Channels to etcd members this process replaced after calls kept failing (a count since it started; "
    "a stopped member can leave a gRPC channel failing for good).";

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Close-on-exec for every descriptor but stdio, then exec this binary again
// with the same arguments: the process starts over as a standby, with no
// listening socket, RocksDB lock or thread of the leader it was.
[[noreturn]] void RestartAsStandby(char** argv) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    if (fd > 2) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  execv("/proc/self/exe", argv);
  std::perror("clusterd: exec to restart as a standby");
  _exit(3);
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "clusterd";
  return name;
}

// 256 random bits, hex: the bearer token of this process's checkpoint endpoint.
std::string NewToken() {
  std::random_device random;
  std::string out;
  for (int i = 0; i < 8; ++i) {
    char word[9];
    std::snprintf(word, sizeof word, "%08x", static_cast<unsigned>(random()));
    out += word;
  }
  return out;
}

// Who may fetch a checkpoint of this store besides holding its token
// (docs/ha.md): where the HTTP port verifies client certificates, a client
// presenting one whose Subject CN is a peer replica's (ha_peer_names; by
// default this replica's own, which its peers share and present). Null
// where no client certificate is verified: the token alone.
std::function<std::string(const HttpRequest&)> CheckpointPeerCheck(const ClusterdConfig& cfg) {
  if (cfg.insecure || cfg.tls.client_ca_file.empty() || cfg.tls.client_auth == "none") return nullptr;
  std::vector<std::string> names = cfg.ha.peer_names;
  if (names.empty()) {
    auto pem = ReadFileToString(cfg.tls.cert_file);
    if (std::string cn = pem.ok() ? CertificateCommonName(*pem) : ""; !cn.empty()) names.push_back(std::move(cn));
  }
  return replication::PeerCertificateCheck(std::move(names));
}

// Where peers reach this replica's HTTP port.
std::string AdvertiseAddress(const ClusterdConfig& cfg, int http_port) {
  if (!cfg.ha.advertise_address.empty()) return cfg.ha.advertise_address;
  std::string host = cfg.http_listen.substr(0, cfg.http_listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "0.0.0.0" || host == "::") host = HostName();
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(http_port);
}

// A progress key's value: the proto, or the bare index an older version wrote.
storage::v1::ReplicaProgress ParseProgress(const std::string& value) {
  storage::v1::ReplicaProgress p;
  if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos) {
    p.set_log_index(std::strtoull(value.c_str(), nullptr, 10));
  } else if (!p.ParseFromString(value)) {
    p.Clear();
  }
  return p;
}

// One replica: an Election (the lease and the leader key), a LogFollower
// (the standby's store following the log), and leading (the server on a
// replicated store). It also publishes its progress, serves checkpoints of
// its store, and rebuilds its store from a peer's checkpoint for the
// follower (LogFollower::Restorer).
class Replica final : private LogFollower::Restorer {
 public:
  Replica(const ClusterdConfig& config, char** argv, EtcdClient::Options etcd)
      : cfg_(config),
        argv_(argv),
        id_(config.ha.replica_id.empty() ? HostName() : config.ha.replica_id),
        prefix_(config.ha.key_prefix),
        etcd_(std::move(etcd)),
        log_(GetLogger("ha")),
        token_(NewToken()),
        election_(&etcd_, ElectionOptions()),
        etcd_log_(&etcd_, prefix_, &election_),
        follower_(&etcd_log_, this, &metrics_, &MonotonicClock::Instance(), FollowerOptions()) {
    metrics_.AddCallbackGauge("clusterd_ha_leader", "1 on the replica that leads (serves writes), 0 on a standby.",
                              [this] { return leading_.load() ? 1.0 : 0.0; });
    AddLeaseGauges(&metrics_);
    follower_.set_on_applied([this](const storage::ChangeSet& written) {
      if (reads_) reads_->Applied(written);
    });
  }

  int Run();

 private:
  Election::Options ElectionOptions() {
    Election::Options options;
    options.key = prefix_ + "leader";
    options.candidate = id_;
    options.ttl = cfg_.ha.lease_ttl;
    options.campaigns = &metrics_.AddCounter("clusterd_ha_campaigns_total", "Attempts to become the leader.");
    return options;
  }
  static LogFollower::Options FollowerOptions() {
    LogFollower::Options options;
    options.restore_interval = kRebuildInterval;
    return options;
  }
  // On the standby's registry and on the leader's.
  void AddLeaseGauges(MetricsRegistry* metrics) {
    metrics->AddCallbackGauge("clusterd_ha_lease_valid", "1 while this replica's etcd lease is known to be alive.",
                              [this] { return election_.LeaseValid() ? 1.0 : 0.0; });
    metrics->AddCallbackGauge("clusterd_ha_etcd_reconnects", kReconnectsHelp,
                              [this] { return static_cast<double>(etcd_.reconnects()); });
  }

  // Grants a lease; retries until it succeeds or a signal arrives (false).
  bool GrantLease();
  // Publishes how far this replica got, where it serves checkpoints, and
  // whether the log still reaches it.
  void PutProgress(uint64_t index, bool behind_log = false);
  // LogFollower::Restorer: the log no longer reaches this replica's store:
  // fetch a live peer's checkpoint and put it in place of the store.
  Status Restore(std::unique_ptr<storage::Store>* store, bool keep_old,
                 const std::function<bool()>& cancelled) override;
  void Truncate(uint64_t own_index);
  // Starts (store) or stops (null) the standby's read-only server.
  Status ServeReads(storage::Store* store);
  // "standby <id> at log index N; leader: L": what its probes say first.
  std::string StandbyWhere() const;
  // /readyz/replica: ready as a replica (docs/ha.md).
  Probe StandbyReplicaReady() const;
  Probe LeaderReplicaReady() const;
  // Not ready: the reason, or "" (the leader's /readyz).
  std::string LeaderProblem(const char* lease_lost) const;

  // Returns the exit code, or nullopt once elected (with the store caught up
  // and closed).
  std::optional<int> Standby();
  int Lead();

  ClusterdConfig cfg_;
  char** argv_;
  const std::string id_;
  const std::string prefix_;
  EtcdClient etcd_;
  std::shared_ptr<spdlog::logger> log_;
  MetricsRegistry metrics_;  // the standby's /metrics
  const std::string token_;  // for peers fetching a checkpoint of this store
  std::string advertise_;    // where they fetch it
  Election election_;
  EtcdLog etcd_log_;
  LogFollower follower_;

  std::atomic<bool> leading_{false};
  std::unique_ptr<PodLabeler> labeler_;  // with config ha_pod: this replica's role on its pod
  // The standby's checkpoint endpoint while it runs (Restore swaps its source).
  replication::CheckpointServer* checkpoints_ = nullptr;
  // The standby's read-only gRPC server (queries and Watch); replaced while
  // a checkpoint replaces the store, gone once elected. The follower thread
  // changes it; reads_mu_ guards it for /metrics.
  std::mutex reads_mu_;
  std::unique_ptr<StandbyServer> reads_;
  uint64_t truncated_ = 0;
  std::atomic<uint64_t> truncated_index_{0};  // for the leader's gauge
  double elected_unix_ = 0;                   // when this replica won the election (unix seconds)
  std::atomic<double> serving_unix_{0};
};

bool Replica::GrantLease() {
  for (;;) {
    Status st = election_.GrantLease();
    if (st.ok()) return true;
    log_->warn("cannot get a lease: {}", st.ToString());
    if (WaitForTerminationSignalFor(milliseconds(500)) != 0) return false;
  }
}

void Replica::PutProgress(uint64_t index, bool behind_log) {
  storage::v1::ReplicaProgress progress;
  progress.set_log_index(index);
  progress.set_checkpoint_address(advertise_);
  progress.set_checkpoint_token(token_);
  progress.set_behind_log(behind_log);
  epb::PutRequest put;
  put.set_key(prefix_ + "progress/" + id_);
  put.set_value(progress.SerializeAsString());
  put.set_lease(election_.lease_id());
  if (auto st = etcd_.Put(put); !st.ok()) log_->warn("progress: {}", st.status().ToString());
}

void Replica::Truncate(uint64_t own_index) {
  epb::RangeRequest range;
  range.set_key(prefix_ + "progress/");
  range.set_range_end(PrefixEnd(prefix_ + "progress/"));
  auto answer = etcd_.Range(range);
  if (!answer.ok()) return;
  uint64_t slowest = own_index;
  for (const auto& kv : answer->kvs()) {
    // A replica the log no longer reaches waits for a checkpoint: keeping
    // the log for it would only let etcd fill up.
    const auto progress = ParseProgress(kv.value());
    if (!progress.behind_log()) slowest = std::min<uint64_t>(slowest, progress.log_index());
  }
  const uint64_t retain = cfg_.ha.log_retain_entries;
  if (slowest <= retain) return;
  const uint64_t cut = slowest - retain;  // entries <= cut go
  if (cut <= truncated_) return;
  if (!etcd_log_.Trim(cut).ok()) return;
  truncated_ = cut;
  truncated_index_ = cut;
  log_->debug("log trimmed to entries after {}", cut);
}

Status Replica::ServeReads(storage::Store* store) {
  std::unique_ptr<StandbyServer> old;
  {
    std::lock_guard lock(reads_mu_);
    old = std::move(reads_);
  }
  if (old) old->Shutdown();
  old.reset();
  if (!store) return Status::Ok();
  StandbyServer::Options options;
  options.replica_id = id_;
  options.leader = [this] { return election_.leader(); };
  auto reads = std::make_unique<StandbyServer>(cfg_, store, std::move(options));
  CLUSTERD_RETURN_IF_ERROR(reads->Start());
  std::lock_guard lock(reads_mu_);
  reads_ = std::move(reads);
  return Status::Ok();
}

Status Replica::Restore(std::unique_ptr<storage::Store>* store, bool keep_old, const std::function<bool()>& cancelled) {
  // The leader stops keeping the log for this replica meanwhile.
  PutProgress(follower_.applied(), /*behind_log=*/true);
  // The live peers the log still reaches.
  epb::RangeRequest range;
  range.set_key(prefix_ + "progress/");
  range.set_range_end(PrefixEnd(prefix_ + "progress/"));
  auto answer = etcd_.Range(range);
  if (!answer.ok()) return answer.status();
  std::vector<std::pair<std::string, storage::v1::ReplicaProgress>> peers;
  for (const auto& kv : answer->kvs()) {
    auto progress = ParseProgress(kv.value());
    if (kv.key() == prefix_ + "progress/" + id_ || progress.behind_log() || progress.checkpoint_address().empty()) {
      continue;
    }
    peers.emplace_back(kv.key().substr(prefix_.size() + 9), std::move(progress));
  }
  if (peers.empty()) return Unavailable("no live peer serves a checkpoint");
  // Standbys first (a checkpoint flushes the store: spare the leader), the
  // furthest ahead first among them.
  election_.ReadLeader();
  const std::string leader = election_.leader();
  std::sort(peers.begin(), peers.end(), [&](const auto& a, const auto& b) {
    const bool a_leads = a.first == leader, b_leads = b.first == leader;
    if (a_leads != b_leads) return b_leads;
    return a.second.log_index() > b.second.log_index();
  });
  Status last;
  for (const auto& [peer, progress] : peers) {
    replication::FetchOptions options;
    options.address = progress.checkpoint_address();
    options.token = progress.checkpoint_token();
    auto peer_tls = MakeHttpPeerTls(cfg_);
    if (!peer_tls.ok()) return peer_tls.status();
    options.tls = std::move(*peer_tls);
    options.request_timeout = std::max<std::chrono::nanoseconds>(cfg_.ha.request_timeout, std::chrono::seconds(10));
    options.cancelled = [this, &cancelled] {
      if (WaitForTerminationSignalFor(milliseconds(0)) != 0) follower_.Stop();
      return cancelled();
    };
    // Keep the log from the checkpoint on while its files come.
    options.on_manifest = [this](const replication::CheckpointManifest& m) {
      log_->info("fetching checkpoint {} (log index {}, {} files)", m.id, m.log_index, m.files.size());
      PutProgress(m.log_index);
    };
    const auto start = SteadyClock::now();
    log_->info("rebuilding from a checkpoint of {} ({}) at log index {}", peer, options.address, progress.log_index());
    auto fetched = replication::FetchCheckpoint(options, replication::BootstrapDir(cfg_.data_dir));
    if (!fetched.ok()) {
      last = Unavailable("checkpoint from " + peer + ": " + fetched.status().message());
      log_->warn("{}", last.message());
      continue;
    }
    // Swap it in: the checkpoint endpoint and the read-only server stop
    // using the old store first.
    checkpoints_->SetSource(nullptr);
    (void)ServeReads(nullptr);
    store->reset();
    Status installed = replication::InstallCheckpoint(cfg_.data_dir, keep_old);
    auto reopened = storage::RocksDbStore::Open(cfg_.data_dir);
    if (!reopened.ok()) return reopened.status();  // Standby ends: the process restarts
    storage::RocksDbStore* raw = reopened->get();
    *store = std::move(*reopened);
    checkpoints_->SetSource([raw](const std::string& dir) { return raw->CreateCheckpoint(dir); });
    if (!installed.ok()) return installed;
    log_->info("rebuilt from {}'s checkpoint {} in {} ms: log index {}, revision {}", peer, fetched->id,
               std::chrono::duration_cast<milliseconds>(SteadyClock::now() - start).count(), fetched->log_index,
               (*store)->revision_at_open());
    return Status::Ok();
  }
  return last;
}

std::string Replica::StandbyWhere() const {
  const std::string leader = election_.leader();
  return "standby " + id_ + " at log index " + std::to_string(follower_.applied()) +
         "; leader: " + (leader.empty() ? "none" : leader);
}

Probe Replica::StandbyReplicaReady() const {
  const std::string where = StandbyWhere();
  if (std::string error = follower_.error(); !error.empty())
    return {false, where + "; cannot follow the log: " + error};
  if (!election_.LeaseValid()) return {false, where + "; no etcd lease"};
  if (labeler_ && !labeler_->Settled()) return {false, where + "; " + labeler_->Problem()};
  return {true, where};
}

std::string Replica::LeaderProblem(const char* lease_lost) const {
  if (etcd_log_.fenced()) return "fenced: another replica leads";
  if (!election_.LeaseHeld()) return lease_lost;
  return "";
}

Probe Replica::LeaderReplicaReady() const {
  if (std::string problem = LeaderProblem("the leader's lease ran out"); !problem.empty()) return {false, problem};
  if (labeler_ && !labeler_->Settled()) return {false, labeler_->Problem()};
  return {true, "leader " + id_};
}

std::optional<int> Replica::Standby() {
  std::error_code ec;
  std::filesystem::create_directories(cfg_.data_dir, ec);
  if (ec) {
    log_->error("data_dir {}: {}", cfg_.data_dir, ec.message());
    return 1;
  }
  // A checkpoint swap a crash interrupted is finished (or dropped) first.
  if (Status st = replication::FinishInterruptedInstall(cfg_.data_dir); !st.ok()) {
    log_->error("{}", st.ToString());
    return 1;
  }
  auto opened = storage::RocksDbStore::Open(cfg_.data_dir);
  if (!opened.ok()) {
    log_->error("cannot open the store: {}", opened.status().ToString());
    return 1;
  }
  storage::RocksDbStore* raw = opened->get();
  // The read-only server stops before the store closes, however this ends.
  struct StopReads {
    Replica* replica;
    ~StopReads() {
      (void)replica->ServeReads(nullptr);
      replica->checkpoints_ = nullptr;
      replica->follower_.Close();
    }
  } stop_reads{this};
  if (Status st = follower_.Start(std::move(*opened)); !st.ok()) {
    log_->error("{}", st.ToString());
    return 1;
  }
  log_->info("standby {}: store at log index {}, revision {}", id_, follower_.applied(), raw->revision_at_open());

  HttpServer::Options http_options = MakeHttpServerOptions(cfg_);
  // The leader's TLS on the same port (docs/security.md).
  auto http_tls = MakeHttpTls(cfg_);
  if (!http_tls.ok()) {
    log_->error("HTTP TLS: {}", http_tls.status().ToString());
    return 1;
  }
  http_options.tls = std::move(*http_tls);
  // Declared first: the HTTP server, whose handlers use them, stops before they go.
  std::unique_ptr<TokenReviewer> metrics_reviewer;
  std::unique_ptr<Authenticator> metrics_authenticator;
  replication::CheckpointServer checkpoints({cfg_.data_dir + ".checkpoint", token_, CheckpointPeerCheck(cfg_)});
  HttpServer http(http_options);
  checkpoints.RegisterMetrics(&metrics_);
  checkpoints.SetSource([raw](const std::string& dir) { return raw->CreateCheckpoint(dir); });
  checkpoints_ = &checkpoints;
  checkpoints.Install([&http](std::string method, std::string path, HttpServer::Handler handler) {
    http.Handle(std::move(method), std::move(path), std::move(handler));
  });
  ProbeRoutes probes;
  probes.ready = [this]() -> Probe {
    std::string text = StandbyWhere();
    if (std::string error = follower_.error(); !error.empty()) text += "\ncannot follow the log: " + error;
    return {false, text};
  };
  probes.metrics = [this] {
    std::string text = metrics_.Render();
    std::lock_guard lock(reads_mu_);
    if (reads_) text += reads_->RenderMetrics();
    return text;
  };
  // /metrics behind the same credential as on the leader (metrics_auth,
  // metrics_role), with an authenticator of its own: its counters are not
  // exported (the standby's gRPC server exports its clusterd_auth_*), its
  // refusals are audited all the same.
  if (cfg_.auth.metrics_auth && !cfg_.insecure) {
    auto auth = MakeConfiguredAuthenticator(cfg_, nullptr, &metrics_reviewer);
    if (!auth.ok()) {
      log_->error("/metrics authentication: {}", auth.status().ToString());
      return 1;
    }
    metrics_authenticator = std::move(*auth);
    probes.metrics_auth = metrics_authenticator.get();
    probes.metrics_roles = MetricsRoles(cfg_.auth.metrics_role);
  }
  // The probe-only port (probe_listen), as the leader serves it.
  std::optional<HttpServer> probe_http;
  if (!cfg_.probe_listen.empty()) {
    probe_http.emplace();
    RegisterProbeRoutes(&*probe_http, ProbeOnly(probes));
    probe_http->Handle("GET", "/readyz/replica", ProbeHandler([this] { return StandbyReplicaReady(); }));
  }
  RegisterProbeRoutes(&http, std::move(probes));
  // Ready as a replica: following the log, lease alive, pod labelled. What a
  // Service that selects the leader by label probes (docs/ha.md).
  http.Handle("GET", "/readyz/replica", ProbeHandler([this] { return StandbyReplicaReady(); }));
  if (labeler_) labeler_->Want("standby");
  if (Status st = http.Start(cfg_.http_listen); !st.ok()) {
    log_->error("HTTP on {}: {}", cfg_.http_listen, st.ToString());
    return 1;
  }
  if (probe_http) {
    if (Status st = probe_http->Start(cfg_.probe_listen); !st.ok()) {
      log_->error("probe port on {}: {}", cfg_.probe_listen, st.ToString());
      return 1;
    }
  }
  advertise_ = AdvertiseAddress(cfg_, http.port());
  if (Status st = ServeReads(follower_.store()); !st.ok()) {
    log_->error("standby gRPC on {}: {}", cfg_.listen, st.ToString());
    return 1;
  }

  auto next_campaign = SteadyClock::now();
  auto next_progress = SteadyClock::now();
  const auto campaign_interval = std::clamp<std::chrono::nanoseconds>(
      std::chrono::seconds(election_.ttl_seconds()) / 10, milliseconds(100), milliseconds(500));
  for (;;) {
    if (int sig = WaitForTerminationSignalFor(std::chrono::duration_cast<milliseconds>(kFollowInterval)); sig != 0) {
      log_->info("signal {}: standby stopping", sig);
      return 0;
    }
    if (election_.LeaseLost() && !GrantLease()) return 0;
    Status st = follower_.Follow();
    if (follower_.stopped()) {
      log_->info("signal: standby stopping");
      return 0;
    }
    if (!follower_.store()) {
      log_->error("after a checkpoint install: {}", st.ToString());
      return 1;
    }
    // A checkpoint swapped in: serve the new store.
    if (!reads_) {
      if (Status served = ServeReads(follower_.store()); !served.ok()) {
        log_->error("standby gRPC on {} after a rebuild: {}", cfg_.listen, served.ToString());
        return 1;
      }
    }
    if (reads_) reads_->Refresh();
    const auto now = SteadyClock::now();
    if (now >= next_progress) {
      PutProgress(follower_.applied(), follower_.behind_log());
      election_.ReadLeader();
      checkpoints.Tick();
      next_progress = now + kProgressInterval;
    }
    // Only a replica that could follow the log may lead: it must be able to
    // read everything the last leader committed.
    if (st.ok() && now >= next_campaign && election_.LeaseValid()) {
      next_campaign = now + campaign_interval;
      if (election_.Campaign()) break;
    }
  }
  const auto elected = SteadyClock::now();
  elected_unix_ = UnixSeconds();
  // Everything the previous leader committed: a quorum read until the end.
  // Nobody else can append now (the fence moved to this replica's key).
  for (;;) {
    Status st = follower_.CatchUp(/*linearizable=*/true);
    if (st.ok()) break;
    log_->warn("elected, reading the rest of the log: {}", st.ToString());
    if (!election_.LeaseValid() || LogFollower::NeedsCheckpoint(st)) {
      log_->error("elected but cannot read the log; stepping down");
      election_.Resign();
      RestartAsStandby(argv_);
    }
    if (WaitForTerminationSignalFor(milliseconds(100)) != 0) {
      election_.Resign();
      return 0;
    }
  }
  log_->info("elected (fence revision {}) at log index {}; caught up in {} ms", election_.fence_revision(),
             follower_.applied(), std::chrono::duration_cast<milliseconds>(SteadyClock::now() - elected).count());
  // Watchers of this standby resume on the leader it now is.
  (void)ServeReads(nullptr);
  http.Stop();
  checkpoints.SetSource(nullptr);
  follower_.Close();
  return std::nullopt;
}

int Replica::Lead() {
  const auto start = SteadyClock::now();
  // Declared first: the server's HTTP handlers use it.
  replication::CheckpointServer checkpoints({cfg_.data_dir + ".checkpoint", token_, CheckpointPeerCheck(cfg_)});
  ClusterdServer server(cfg_);
  checkpoints.Install([&server](std::string method, std::string path, HttpServer::Handler handler) {
    server.AddHttpHandler(std::move(method), std::move(path), std::move(handler));
  });
  replication::ReplicatedStore* replicated = nullptr;
  server.WrapStore([&](std::unique_ptr<storage::Store> inner,
                       MetricsRegistry* metrics) -> StatusOr<std::unique_ptr<storage::Store>> {
    auto index = replication::ReadLogIndex(*inner);
    if (!index.ok()) return index.status();
    if (*index != follower_.applied()) {
      return Internal("the store is at log index " + std::to_string(*index) + ", expected " +
                      std::to_string(follower_.applied()));
    }
    metrics->AddCallbackGauge("clusterd_ha_leader", "1 on the replica that leads (serves writes), 0 on a standby.",
                              [] { return 1.0; });
    metrics->AddCallbackGauge("clusterd_ha_log_truncated_index",
                              "The log is trimmed from etcd up to this entry (kept behind the slowest live replica).",
                              [this] { return static_cast<double>(truncated_index_.load()); });
    checkpoints.RegisterMetrics(metrics);
    if (auto* rocks = dynamic_cast<storage::RocksDbStore*>(inner.get())) {
      checkpoints.SetSource([rocks](const std::string& dir) { return rocks->CreateCheckpoint(dir); });
    }
    AddLeaseGauges(metrics);
    metrics->AddCallbackGauge("clusterd_ha_elected_time_seconds",
                              "When this replica won the election (unix time): a takeover's start.",
                              [this] { return elected_unix_; });
    metrics->AddCallbackGauge("clusterd_ha_serving_time_seconds",
                              "When this replica began to serve as the leader (unix time): elected, the log read, "
                              "the store opened, the state loaded, gRPC listening.",
                              [this] { return serving_unix_.load(); });
    // Fenced appends are known to etcd_log_ (LeaderProblem).
    auto store = std::make_unique<replication::ReplicatedStore>(
        std::move(inner), &etcd_log_, *index, id_, metrics, nullptr,
        cfg_.ha.log_compression ? replication::EntryCodec::kZstd : replication::EntryCodec::kPlain);
    replicated = store.get();
    return std::unique_ptr<storage::Store>(std::move(store));
  });
  server.AddHttpHandler("GET", "/readyz/replica", ProbeHandler([this] { return LeaderReplicaReady(); }));
  server.SetReadinessCheck([this] { return LeaderProblem("the leader's lease ran out: stepping down"); });
  if (Status st = server.Start(); !st.ok()) {
    log_->error("cannot start as the leader: {}", st.ToString());
    checkpoints.SetSource(nullptr);
    election_.Resign();
    return 1;
  }
  leading_ = true;
  serving_unix_ = UnixSeconds();
  advertise_ = AdvertiseAddress(cfg_, server.http_port());
  if (labeler_) {
    labeler_->Want("leader");
    labeler_->MarkStandby(election_.replaced());
  }
  log_->info("leading as {}: serving in {} ms", id_,
             std::chrono::duration_cast<milliseconds>(SteadyClock::now() - start).count());
  auto next_progress = SteadyClock::now();
  auto next_truncate = SteadyClock::now() + kTruncateInterval;
  for (;;) {
    if (int sig = WaitForTerminationSignalFor(milliseconds(50)); sig != 0) {
      log_->info("signal {}: draining, then resigning", sig);
      checkpoints.SetSource(nullptr);
      server.Shutdown();
      election_.Resign();
      return 0;
    }
    if (etcd_log_.fenced() || !election_.LeaseHeld()) {
      log_->critical("{}: this replica no longer leads; restarting as a standby",
                     etcd_log_.fenced() ? "fenced by another leader" : "lease lost");
      RestartAsStandby(argv_);
    }
    const auto now = SteadyClock::now();
    if (now >= next_progress) {
      PutProgress(replicated->applied_index());
      checkpoints.Tick();
      next_progress = now + kProgressInterval;
    }
    if (now >= next_truncate) {
      Truncate(replicated->applied_index());
      next_truncate = now + kTruncateInterval;
    }
  }
}

int Replica::Run() {
  log_->info("replica {}: etcd {}, key prefix {}, lease TTL {}s", id_, etcd_.current_endpoint(), prefix_,
             election_.ttl_seconds());
  auto labeler = MakePodLabeler(cfg_);
  if (!labeler.ok()) {
    log_->error("ha_pod: {}", labeler.status().ToString());
    return 1;
  }
  labeler_ = std::move(*labeler);
  if (!GrantLease()) return 0;
  election_.StartKeepAlive();
  std::optional<int> rc = Standby();
  if (rc) {
    election_.StopKeepAlive();
    election_.Resign();
    return *rc;
  }
  const int code = Lead();
  election_.StopKeepAlive();
  return code;
}

}  // namespace

int RunReplica(const ClusterdConfig& config, char** argv) {
  EtcdClient::Options etcd;
  etcd.endpoints = config.ha.etcd_endpoints;
  etcd.timeout = config.ha.request_timeout;
  etcd.reconnect_interval = config.ha.request_timeout;
  // TLS material is read once, here: a file that cannot be read ends the start.
  for (auto [file, pem] :
       {std::pair{&config.ha.etcd_ca_file, &etcd.ca_pem}, std::pair{&config.ha.etcd_cert_file, &etcd.cert_pem},
        std::pair{&config.ha.etcd_key_file, &etcd.key_pem}}) {
    if (file->empty()) continue;
    auto text = ReadFileToString(*file);
    if (!text.ok()) {
      GetLogger("ha")->error("TLS to etcd: {}", text.status().ToString());
      return 1;
    }
    *pem = std::move(*text);
  }
  Replica replica(config, argv, std::move(etcd));
  return replica.Run();
}

}  // namespace clusterd::ha
