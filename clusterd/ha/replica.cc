#include "clusterd/ha/replica.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "clusterd/ha/etcd_client.h"
#include "clusterd/ha/pod_label.h"
#include "clusterd/ha/replication/checkpoint.h"
#include "clusterd/ha/replication/log_entry.h"
#include "clusterd/ha/replication/replicated_store.h"
#include "clusterd/ha/standby_server.h"
#include "clusterd/server/server.h"
#include "clusterd/server/server_parts.h"
#include "clusterd/storage/rocksdb_store.h"
#include "clusterd/storage/v1/replica.pb.h"
#include "common/config_util.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/signals.h"

namespace clusterd::ha {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Log entries read per request while following: an entry holds at most
// ha_max_entry_bytes (plus one closure), so this bounds an answer to a few
// tens of MiB.
constexpr int64_t kFollowBatch = 16;
constexpr auto kFollowInterval = milliseconds(50);
constexpr auto kProgressInterval = milliseconds(1000);
constexpr auto kTruncateInterval = milliseconds(5000);
// A replica the log no longer reaches tries a checkpoint this often.
constexpr auto kRebuildInterval = milliseconds(2000);
constexpr const char* kReconnectsHelp =
    "Channels to etcd members this process replaced after calls kept failing (a count since it started; "
    "a stopped member can leave a gRPC channel failing for good).";

std::string LogKey(const std::string& prefix, uint64_t index) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%016" PRIx64, index);
  return prefix + "log/" + digits;
}

int64_t SteadyNanos() { return SteadyClock::now().time_since_epoch().count(); }

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

class Replica;

// The log as the leader writes it: one fenced etcd transaction per entry.
class EtcdLogWriter final : public replication::LogWriter {
 public:
  explicit EtcdLogWriter(Replica* replica) : replica_(replica) {}
  Status Append(uint64_t index, const std::string& entry) override;

 private:
  Replica* replica_;
};

class Replica {
 public:
  Replica(const ClusterdConfig& config, char** argv, EtcdClient::Options etcd)
      : cfg_(config),
        argv_(argv),
        id_(config.ha.replica_id.empty() ? HostName() : config.ha.replica_id),
        prefix_(config.ha.key_prefix),
        leader_key_(prefix_ + "leader"),
        etcd_(std::move(etcd)),
        log_(GetLogger("ha")),
        token_(NewToken()) {
    ttl_seconds_ = std::max<int64_t>(
        1,
        std::chrono::duration_cast<std::chrono::seconds>(cfg_.ha.lease_ttl + std::chrono::milliseconds(999)).count());
    metrics_.AddCallbackGauge("clusterd_ha_leader", "1 on the replica that leads (serves writes), 0 on a standby.",
                              [this] { return leading_.load() ? 1.0 : 0.0; });
    metrics_.AddCallbackGauge("clusterd_ha_log_index", "The last log entry applied to this replica's store.",
                              [this] { return static_cast<double>(applied_.load()); });
    metrics_.AddCallbackGauge("clusterd_ha_lease_valid", "1 while this replica's etcd lease is known to be alive.",
                              [this] { return LeaseValid() ? 1.0 : 0.0; });
    metrics_.AddCallbackGauge("clusterd_ha_etcd_reconnects", kReconnectsHelp,
                              [this] { return static_cast<double>(etcd_.reconnects()); });
    campaigns_ = &metrics_.AddCounter("clusterd_ha_campaigns_total", "Attempts to become the leader.");
    follow_errors_ = &metrics_.AddCounter("clusterd_ha_follow_errors_total",
                                          "Failed reads or applies while following the log (retried).");
    restores_ = &metrics_.AddCounter("clusterd_ha_checkpoint_restores_total",
                                     "Times this replica replaced its store by a peer's checkpoint.");
    restore_failures_ = &metrics_.AddCounter("clusterd_ha_checkpoint_restore_failures_total",
                                             "Attempts to fetch a peer's checkpoint that failed (retried).");
  }

  int Run();

  // The leader's append (EtcdLogWriter).
  Status Append(uint64_t index, const std::string& entry);

 private:
  bool LeaseValid() const { return SteadyNanos() < lease_valid_until_.load(); }
  // Grants a lease; retries until it succeeds or a signal arrives (false).
  bool GrantLease();
  void KeepAliveLoop();
  // One campaign: true when this replica now holds the leader key.
  bool Campaign();
  // Reads and applies log entries after applied_ until none is left (or an
  // error). `linearizable`: a quorum read, so nothing committed is missed.
  Status CatchUp(storage::Store* store, bool linearizable);
  // Publishes how far this replica got, where it serves checkpoints, and
  // whether the log still reaches it.
  void PutProgress(uint64_t index, bool behind_log = false);
  // The log no longer reaches this replica's store: fetch a live peer's
  // checkpoint and put it in place of the store (reopened in *store). OK
  // once replaced; the store stays as it was otherwise.
  Status Rebuild(std::unique_ptr<storage::RocksDbStore>* store, bool keep_old,
                 replication::CheckpointServer* checkpoints);
  // Who holds the leader key now, for /readyz (a standby that cannot
  // campaign still says who leads).
  void ReadLeader();
  void Truncate(uint64_t own_index);
  void Resign();
  // Starts (store) or stops (null) the standby's read-only server.
  Status ServeReads(storage::Store* store);

  // Returns the exit code, or nullopt once elected (with the store caught up
  // and closed).
  std::optional<int> Standby();
  int Lead();

  ClusterdConfig cfg_;
  char** argv_;
  const std::string id_;
  const std::string prefix_;
  const std::string leader_key_;
  EtcdClient etcd_;
  std::shared_ptr<spdlog::logger> log_;
  MetricsRegistry metrics_;  // the standby's /metrics
  Counter* campaigns_ = nullptr;
  Counter* follow_errors_ = nullptr;
  Counter* restores_ = nullptr;
  Counter* restore_failures_ = nullptr;
  int64_t ttl_seconds_ = 2;
  const std::string token_;  // for peers fetching a checkpoint of this store
  std::string advertise_;    // where they fetch it

  std::atomic<int64_t> lease_id_{0};
  std::atomic<int64_t> lease_valid_until_{0};
  std::atomic<bool> lease_lost_{false};
  std::atomic<bool> stop_keepalive_{false};
  std::thread keepalive_;

  std::atomic<uint64_t> applied_{0};
  uint64_t revision_ = 0;       // the standby store's revision counter (CatchUp's thread)
  storage::ChangeSet written_;  // the entry CatchUp applied last
  std::atomic<bool> leading_{false};
  std::atomic<bool> fenced_{false};
  std::atomic<bool> stopping_{false};  // a signal arrived while fetching a checkpoint
  int64_t fence_revision_ = 0;         // the leader key's create revision while leading
  std::mutex leader_mu_;
  std::string leader_seen_;              // who leads, as last read (for /readyz)
  std::string replaced_;                 // the leader this replica replaced (its pod is marked a standby)
  std::unique_ptr<PodLabeler> labeler_;  // with config ha_pod: this replica's role on its pod
  std::string follow_error_;
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

Status EtcdLogWriter::Append(uint64_t index, const std::string& entry) { return replica_->Append(index, entry); }

bool Replica::GrantLease() {
  for (;;) {
    const int64_t sent = SteadyNanos();
    auto granted = etcd_.LeaseGrant(ttl_seconds_);
    if (granted.ok()) {
      lease_id_ = granted->id();
      lease_valid_until_ = sent + std::chrono::nanoseconds(std::chrono::seconds(granted->ttl())).count();
      lease_lost_ = false;
      log_->info("lease {:x} granted, TTL {}s", granted->id(), granted->ttl());
      return true;
    }
    log_->warn("cannot get a lease: {}", granted.status().ToString());
    if (WaitForTerminationSignalFor(milliseconds(500)) != 0) return false;
  }
}

void Replica::KeepAliveLoop() {
  const auto period = std::max<std::chrono::nanoseconds>(std::chrono::seconds(ttl_seconds_) / 4, milliseconds(100));
  while (!stop_keepalive_.load()) {
    const int64_t id = lease_id_.load();
    const int64_t sent = SteadyNanos();
    auto answer = etcd_.LeaseKeepAlive(id);
    if (answer.ok() && answer->ttl() > 0) {
      lease_valid_until_ = sent + std::chrono::nanoseconds(std::chrono::seconds(answer->ttl())).count();
    } else if (answer.ok()) {
      if (!lease_lost_.exchange(true)) log_->error("lease {:x} expired", id);
    } else {
      log_->warn("lease keep-alive: {}", answer.status().ToString());
    }
    if (!LeaseValid() && !lease_lost_.exchange(true)) {
      log_->error("lease {:x}: no keep-alive answered within its TTL", id);
    }
    std::this_thread::sleep_for(answer.ok() ? period : milliseconds(100));
  }
}

bool Replica::Campaign() {
  campaigns_->Inc();
  epb::TxnRequest txn;
  auto* cmp = txn.add_compare();
  cmp->set_key(leader_key_);
  cmp->set_target(epb::Compare::CREATE);
  cmp->set_result(epb::Compare::EQUAL);
  cmp->set_create_revision(0);
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(leader_key_);
  put->set_value(id_);
  put->set_lease(lease_id_.load());
  txn.add_failure()->mutable_request_range()->set_key(leader_key_);
  auto answer = etcd_.Txn(txn);
  if (!answer.ok()) {
    log_->warn("campaign: {}", answer.status().ToString());
    return false;
  }
  if (answer->succeeded()) {
    fence_revision_ = answer->header().revision();
    std::lock_guard lock(leader_mu_);
    replaced_ = leader_seen_;
    leader_seen_ = id_;
    return true;
  }
  if (answer->responses_size() > 0 && answer->responses(0).response_range().kvs_size() > 0) {
    const auto& kv = answer->responses(0).response_range().kvs(0);
    if (kv.value() == id_ && kv.lease() != lease_id_.load()) {
      // This replica's own key from before it restarted: that process is
      // gone, so its lease may go at once instead of after its TTL.
      log_->info("revoking lease {:x} of this replica's previous process", kv.lease());
      (void)etcd_.LeaseRevoke(kv.lease());
    }
    std::lock_guard lock(leader_mu_);
    leader_seen_ = kv.value();
  }
  return false;
}

Status Replica::CatchUp(storage::Store* store, bool linearizable) {
  for (;;) {
    uint64_t applied = applied_.load();
    epb::RangeRequest range;
    range.set_key(LogKey(prefix_, applied + 1));
    range.set_range_end(PrefixEnd(prefix_ + "log/"));
    range.set_limit(kFollowBatch);
    range.set_serializable(!linearizable);
    auto answer = etcd_.Range(range);
    if (!answer.ok()) return answer.status();
    for (const auto& kv : answer->kvs()) {
      Status st = replication::ApplyLogEntry(store, kv.value(), &applied, &revision_, &written_);
      // Both need a peer's checkpoint (Rebuild); the codes stay apart.
      if (st.code() == StatusCode::kOutOfRange) {
        return OutOfRange(st.message() +
                          ": the log was trimmed past this replica (it was away, or its data dir is new); it needs a "
                          "checkpoint of a peer's store");
      }
      if (st.code() == StatusCode::kFailedPrecondition) {
        return FailedPrecondition(st.message() + "; it needs a checkpoint of a peer's store");
      }
      if (!st.ok()) return st;
      applied_.store(applied);
      if (reads_) reads_->Applied(written_);
    }
    if (!answer->more()) return Status::Ok();
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
  put.set_lease(lease_id_.load());
  if (auto st = etcd_.Put(put); !st.ok()) log_->warn("progress: {}", st.status().ToString());
}

void Replica::ReadLeader() {
  epb::RangeRequest range;
  range.set_key(leader_key_);
  range.set_serializable(true);
  auto answer = etcd_.Range(range);
  if (!answer.ok()) return;
  std::lock_guard lock(leader_mu_);
  leader_seen_ = answer->kvs_size() > 0 ? answer->kvs(0).value() : "";
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
  epb::DeleteRangeRequest del;
  del.set_key(prefix_ + "log/");
  del.set_range_end(LogKey(prefix_, cut + 1));
  auto deleted = etcd_.DeleteRange(del);
  if (!deleted.ok()) return;
  truncated_ = cut;
  truncated_index_ = cut;
  // etcd keeps every revision of the deleted entries until its history is
  // compacted; compacting up to the delete lets it reuse their space (an
  // etcd that compacts itself as well does no harm: ClusterD never reads an
  // old revision).
  if (Status st = etcd_.Compact(deleted->header().revision()); !st.ok()) {
    log_->debug("compaction of etcd's history: {}", st.ToString());
  }
  log_->debug("log trimmed to entries after {}", cut);
}

void Replica::Resign() {
  if (Status st = etcd_.LeaseRevoke(lease_id_.load()); !st.ok()) {
    log_->warn("resign: {}", st.ToString());
  } else {
    log_->info("resigned: lease {:x} revoked", lease_id_.load());
  }
}

Status Replica::Append(uint64_t index, const std::string& entry) {
  if (!LeaseValid() || lease_lost_.load()) {
    return Unavailable("the leader's etcd lease may have expired: not writing");
  }
  const std::string key = LogKey(prefix_, index);
  epb::TxnRequest txn;
  auto* fence = txn.add_compare();
  fence->set_key(leader_key_);
  fence->set_target(epb::Compare::CREATE);
  fence->set_result(epb::Compare::EQUAL);
  fence->set_create_revision(fence_revision_);
  auto* fresh = txn.add_compare();
  fresh->set_key(key);
  fresh->set_target(epb::Compare::VERSION);
  fresh->set_result(epb::Compare::EQUAL);
  fresh->set_version(0);
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(entry);
  txn.add_failure()->mutable_request_range()->set_key(leader_key_);
  txn.add_failure()->mutable_request_range()->set_key(key);
  auto answer = etcd_.Txn(txn);
  if (!answer.ok()) return answer.status();
  if (answer->succeeded()) return Status::Ok();
  // Not written now: an earlier attempt wrote it, or another replica leads.
  if (answer->responses_size() == 2) {
    const auto& existing = answer->responses(1).response_range();
    if (existing.kvs_size() > 0 && existing.kvs(0).value() == entry) return Status::Ok();
    const auto& leader = answer->responses(0).response_range();
    if (leader.kvs_size() == 0 || leader.kvs(0).create_revision() != fence_revision_) {
      fenced_ = true;
      return FailedPrecondition("fenced: the leader key is " +
                                (leader.kvs_size() == 0 ? std::string("free") : "held by " + leader.kvs(0).value()));
    }
  }
  fenced_ = true;
  return FailedPrecondition("log entry " + std::to_string(index) + " already holds another leader's change set");
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
  options.leader = [this] {
    std::lock_guard lock(leader_mu_);
    return leader_seen_;
  };
  auto reads = std::make_unique<StandbyServer>(cfg_, store, std::move(options));
  CLUSTERD_RETURN_IF_ERROR(reads->Start());
  std::lock_guard lock(reads_mu_);
  reads_ = std::move(reads);
  return Status::Ok();
}

Status Replica::Rebuild(std::unique_ptr<storage::RocksDbStore>* store, bool keep_old,
                        replication::CheckpointServer* checkpoints) {
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
  std::string leader;
  ReadLeader();
  {
    std::lock_guard lock(leader_mu_);
    leader = leader_seen_;
  }
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
    options.request_timeout = std::max<std::chrono::nanoseconds>(cfg_.ha.request_timeout, std::chrono::seconds(10));
    options.cancelled = [this] {
      if (WaitForTerminationSignalFor(milliseconds(0)) != 0) stopping_ = true;
      return stopping_.load();
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
    checkpoints->SetSource(nullptr);
    (void)ServeReads(nullptr);
    store->reset();
    Status installed = replication::InstallCheckpoint(cfg_.data_dir, keep_old);
    auto reopened = storage::RocksDbStore::Open(cfg_.data_dir);
    if (!reopened.ok()) return reopened.status();  // Standby ends: the process restarts
    *store = std::move(*reopened);
    storage::RocksDbStore* raw = store->get();
    checkpoints->SetSource([raw](const std::string& dir) { return raw->CreateCheckpoint(dir); });
    if (!installed.ok()) return installed;
    auto index = replication::ReadLogIndex(**store);
    if (!index.ok()) return index.status();
    applied_ = *index;
    revision_ = (*store)->revision_at_open();
    restores_->Inc();
    log_->info("rebuilt from {}'s checkpoint {} in {} ms: log index {}, revision {}", peer, fetched->id,
               std::chrono::duration_cast<milliseconds>(SteadyClock::now() - start).count(), *index, revision_);
    return Status::Ok();
  }
  return last;
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
  std::unique_ptr<storage::RocksDbStore> store = std::move(*opened);
  // The read-only server stops before the store closes, however this ends.
  struct StopReads {
    Replica* replica;
    ~StopReads() { (void)replica->ServeReads(nullptr); }
  } stop_reads{this};
  auto index = replication::ReadLogIndex(*store);
  if (!index.ok()) {
    log_->error("{}", index.status().ToString());
    return 1;
  }
  applied_ = *index;
  revision_ = store->revision_at_open();
  log_->info("standby {}: store at log index {}, revision {}", id_, *index, store->revision_at_open());

  const HttpServer::Options http_options = MakeHttpServerOptions(cfg_);
  // Declared first: the HTTP server, whose handlers use it, stops before it goes.
  replication::CheckpointServer checkpoints({cfg_.data_dir + ".checkpoint", token_});
  HttpServer http(http_options);
  checkpoints.RegisterMetrics(&metrics_);
  {
    storage::RocksDbStore* raw = store.get();
    checkpoints.SetSource([raw](const std::string& dir) { return raw->CreateCheckpoint(dir); });
  }
  checkpoints.Install([&http](std::string method, std::string path, HttpServer::Handler handler) {
    http.Handle(std::move(method), std::move(path), std::move(handler));
  });
  http.Handle("GET", "/healthz", [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ok\n"}; });
  http.Handle("GET", "/readyz", [this](const HttpRequest&) {
    std::lock_guard lock(leader_mu_);
    std::string body = "standby " + id_ + " at log index " + std::to_string(applied_.load()) +
                       "; leader: " + (leader_seen_.empty() ? "none" : leader_seen_) + "\n";
    if (!follow_error_.empty()) body += "cannot follow the log: " + follow_error_ + "\n";
    return HttpResponse{503, "text/plain", body};
  });
  http.Handle("GET", "/metrics", [this](const HttpRequest&) {
    std::string text = metrics_.Render();
    std::lock_guard lock(reads_mu_);
    if (reads_) text += reads_->RenderMetrics();
    return HttpResponse{200, MetricsRegistry::kContentType, std::move(text)};
  });
  // Ready as a replica: following the log, lease alive, pod labelled. What a
  // Service that selects the leader by label probes (docs/ha.md).
  http.Handle("GET", "/readyz/replica", [this](const HttpRequest&) {
    std::lock_guard lock(leader_mu_);
    const std::string where = "standby " + id_ + " at log index " + std::to_string(applied_.load()) +
                              "; leader: " + (leader_seen_.empty() ? "none" : leader_seen_);
    if (!follow_error_.empty())
      return HttpResponse{503, "text/plain", where + "; cannot follow the log: " + follow_error_ + "\n"};
    if (!LeaseValid()) return HttpResponse{503, "text/plain", where + "; no etcd lease\n"};
    if (labeler_ && !labeler_->Settled())
      return HttpResponse{503, "text/plain", where + "; " + labeler_->Problem() + "\n"};
    return HttpResponse{200, "text/plain", where + "\n"};
  });
  if (labeler_) labeler_->Want("standby");
  if (Status st = http.Start(cfg_.http_listen); !st.ok()) {
    log_->error("HTTP on {}: {}", cfg_.http_listen, st.ToString());
    return 1;
  }
  advertise_ = AdvertiseAddress(cfg_, http.port());
  if (Status st = ServeReads(store.get()); !st.ok()) {
    log_->error("standby gRPC on {}: {}", cfg_.listen, st.ToString());
    return 1;
  }

  auto next_campaign = SteadyClock::now();
  auto next_progress = SteadyClock::now();
  auto next_rebuild = SteadyClock::now();
  const auto campaign_interval = std::clamp<std::chrono::nanoseconds>(std::chrono::seconds(ttl_seconds_) / 10,
                                                                      milliseconds(100), milliseconds(500));
  bool caught_up = false;
  for (;;) {
    if (int sig = WaitForTerminationSignalFor(std::chrono::duration_cast<milliseconds>(kFollowInterval)); sig != 0) {
      log_->info("signal {}: standby stopping", sig);
      return 0;
    }
    if (lease_lost_.load() && !GrantLease()) return 0;
    Status st = CatchUp(store.get(), /*linearizable=*/false);
    // Trimmed past this store, or it holds other history: only a peer's
    // checkpoint helps. The leader stops keeping the log for it meanwhile.
    const bool behind = st.code() == StatusCode::kOutOfRange || st.code() == StatusCode::kFailedPrecondition;
    if (behind && SteadyClock::now() >= next_rebuild) {
      PutProgress(applied_.load(), /*behind_log=*/true);
      Status rebuilt = Rebuild(&store, /*keep_old=*/st.code() == StatusCode::kFailedPrecondition, &checkpoints);
      next_rebuild = SteadyClock::now() + kRebuildInterval;
      if (stopping_.load()) {
        log_->info("signal: standby stopping");
        return 0;
      }
      if (rebuilt.ok()) {
        st = CatchUp(store.get(), /*linearizable=*/false);
      } else {
        restore_failures_->Inc();
        if (!store) {
          log_->error("after a checkpoint install: {}", rebuilt.ToString());
          return 1;
        }
        st = Status(st.code(), st.message() + "; rebuilding: " + rebuilt.message());
      }
      if (!reads_) {
        if (Status served = ServeReads(store.get()); !served.ok()) {
          log_->error("standby gRPC on {} after a rebuild: {}", cfg_.listen, served.ToString());
          return 1;
        }
      }
    }
    if (reads_) reads_->Refresh();
    bool changed;
    {
      std::lock_guard lock(leader_mu_);
      changed = follow_error_ != (st.ok() ? "" : st.message());
      follow_error_ = st.ok() ? "" : st.message();
    }
    if (!st.ok()) {
      follow_errors_->Inc();
      // Retried every 50 ms: logged when it changes, counted every time.
      if (changed) log_->warn("following the log: {}", st.ToString());
    } else if (changed) {
      log_->info("following the log again at index {}", applied_.load());
    }
    caught_up = st.ok();
    const auto now = SteadyClock::now();
    if (now >= next_progress) {
      PutProgress(applied_.load(), /*behind_log=*/behind && !caught_up);
      ReadLeader();
      checkpoints.Tick();
      next_progress = now + kProgressInterval;
    }
    // Only a replica that could follow the log may lead: it must be able to
    // read everything the last leader committed.
    if (caught_up && now >= next_campaign && LeaseValid()) {
      next_campaign = now + campaign_interval;
      if (Campaign()) break;
    }
  }
  const auto elected = SteadyClock::now();
  elected_unix_ = UnixSeconds();
  // Everything the previous leader committed: a quorum read until the end.
  // Nobody else can append now (the fence moved to this replica's key).
  for (;;) {
    Status st = CatchUp(store.get(), /*linearizable=*/true);
    if (st.ok()) break;
    log_->warn("elected, reading the rest of the log: {}", st.ToString());
    if (!LeaseValid() || st.code() == StatusCode::kFailedPrecondition || st.code() == StatusCode::kOutOfRange) {
      log_->error("elected but cannot read the log; stepping down");
      Resign();
      RestartAsStandby(argv_);
    }
    if (WaitForTerminationSignalFor(milliseconds(100)) != 0) {
      Resign();
      return 0;
    }
  }
  log_->info("elected (fence revision {}) at log index {}; caught up in {} ms", fence_revision_, applied_.load(),
             std::chrono::duration_cast<milliseconds>(SteadyClock::now() - elected).count());
  // Watchers of this standby resume on the leader it now is.
  (void)ServeReads(nullptr);
  http.Stop();
  checkpoints.SetSource(nullptr);
  store.reset();
  return std::nullopt;
}

int Replica::Lead() {
  const auto start = SteadyClock::now();
  EtcdLogWriter writer(this);
  // Declared first: the server's HTTP handlers use it.
  replication::CheckpointServer checkpoints({cfg_.data_dir + ".checkpoint", token_});
  ClusterdServer server(cfg_);
  checkpoints.Install([&server](std::string method, std::string path, HttpServer::Handler handler) {
    server.AddHttpHandler(std::move(method), std::move(path), std::move(handler));
  });
  replication::ReplicatedStore* replicated = nullptr;
  server.WrapStore([&](std::unique_ptr<storage::Store> inner,
                       MetricsRegistry* metrics) -> StatusOr<std::unique_ptr<storage::Store>> {
    auto index = replication::ReadLogIndex(*inner);
    if (!index.ok()) return index.status();
    if (*index != applied_.load()) {
      return Internal("the store is at log index " + std::to_string(*index) + ", expected " +
                      std::to_string(applied_.load()));
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
    metrics->AddCallbackGauge("clusterd_ha_lease_valid", "1 while this replica's etcd lease is known to be alive.",
                              [this] { return LeaseValid() ? 1.0 : 0.0; });
    metrics->AddCallbackGauge("clusterd_ha_etcd_reconnects", kReconnectsHelp,
                              [this] { return static_cast<double>(etcd_.reconnects()); });
    metrics->AddCallbackGauge("clusterd_ha_elected_time_seconds",
                              "When this replica won the election (unix time): a takeover's start.",
                              [this] { return elected_unix_; });
    metrics->AddCallbackGauge("clusterd_ha_serving_time_seconds",
                              "When this replica began to serve as the leader (unix time): elected, the log read, "
                              "the store opened, the state loaded, gRPC listening.",
                              [this] { return serving_unix_.load(); });
    auto store = std::make_unique<replication::ReplicatedStore>(std::move(inner), &writer, *index, id_, metrics,
                                                                [this](const Status&) { fenced_ = true; });
    replicated = store.get();
    return std::unique_ptr<storage::Store>(std::move(store));
  });
  server.AddHttpHandler("GET", "/readyz/replica", [this](const HttpRequest&) {
    if (fenced_.load()) return HttpResponse{503, "text/plain", "fenced: another replica leads\n"};
    if (lease_lost_.load() || !LeaseValid()) return HttpResponse{503, "text/plain", "the leader's lease ran out\n"};
    if (labeler_ && !labeler_->Settled()) return HttpResponse{503, "text/plain", labeler_->Problem() + "\n"};
    return HttpResponse{200, "text/plain", "leader " + id_ + "\n"};
  });
  server.SetReadinessCheck([this]() -> std::string {
    if (fenced_.load()) return "fenced: another replica leads";
    if (lease_lost_.load() || !LeaseValid()) return "the leader's lease ran out: stepping down";
    return "";
  });
  if (Status st = server.Start(); !st.ok()) {
    log_->error("cannot start as the leader: {}", st.ToString());
    checkpoints.SetSource(nullptr);
    Resign();
    return 1;
  }
  leading_ = true;
  serving_unix_ = UnixSeconds();
  advertise_ = AdvertiseAddress(cfg_, server.http_port());
  if (labeler_) {
    labeler_->Want("leader");
    std::lock_guard lock(leader_mu_);
    labeler_->MarkStandby(replaced_);
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
      Resign();
      return 0;
    }
    if (fenced_.load() || lease_lost_.load() || !LeaseValid()) {
      log_->critical("{}: this replica no longer leads; restarting as a standby",
                     fenced_.load() ? "fenced by another leader" : "lease lost");
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
  log_->info("replica {}: etcd {}, key prefix {}, lease TTL {}s", id_, etcd_.current_endpoint(), prefix_, ttl_seconds_);
  auto labeler = MakePodLabeler(cfg_);
  if (!labeler.ok()) {
    log_->error("ha_pod: {}", labeler.status().ToString());
    return 1;
  }
  labeler_ = std::move(*labeler);
  if (!GrantLease()) return 0;
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
  auto stop_keepalive = [this] {
    stop_keepalive_ = true;
    if (keepalive_.joinable()) keepalive_.join();
  };
  std::optional<int> rc = Standby();
  if (rc) {
    stop_keepalive();
    Resign();
    return *rc;
  }
  const int code = Lead();
  stop_keepalive();
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
