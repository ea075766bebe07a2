// Checkpoints: how a replica that the log no longer reaches (it was away
// while the log was trimmed past it, its data dir is new or was wiped, or its
// store holds other history) gets a whole copy of a peer's store and then
// follows the log from there (docs/ha.md "Rebuilding a replica").
//
// Every replica serves checkpoints of its own store on its HTTP port, to
// peers that present its bearer token (published in etcd with its progress:
// etcd access is what replicas trust each other by):
//
//   POST /ha/v1/checkpoint           start a checkpoint (202), or the fresh one (200)
//   GET  /ha/v1/checkpoint           202 while it is made, then its manifest (200)
//   GET  /ha/v1/checkpoint/file?id=ID&name=FILE&offset=N
//                                    up to chunk_bytes of one file (200)
//
// A checkpoint is RocksDB's: a consistent copy (hard links) in a directory
// next to the data dir, made on a thread of its own, kept while peers fetch
// it and removed after keep_idle without a request. The manifest names the
// log index and revision it holds and every file with its size.
//
// The fetching side downloads every file into <data_dir>.bootstrap, checks
// that it opens at the manifest's log index, and swaps it in for the data
// dir (InstallCheckpoint); a crash at any point leaves either the old data
// dir or the complete new one (FinishInterruptedInstall at startup).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/http_server.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd::replication {

struct CheckpointManifest {
  std::string id;
  uint64_t log_index = 0;
  uint64_t revision = 0;
  std::vector<std::pair<std::string, uint64_t>> files;  // name, bytes
};
std::string FormatManifest(const CheckpointManifest& manifest);
// INVALID_ARGUMENT for anything else, including a file name that is not a
// plain name (a peer cannot make the fetcher write outside its directory).
StatusOr<CheckpointManifest> ParseManifest(std::string_view text);

class CheckpointServer {
 public:
  // Writes a consistent copy of the store into `dir` (which does not exist yet).
  using Source = std::function<Status(const std::string& dir)>;
  struct Options {
    std::string root;   // checkpoints live here (removed and made again at start)
    std::string token;  // the bearer token peers present
    // Not null: who else a request must come from (checked after the token):
    // "" when its client may fetch (a peer replica: Replica's check of the
    // client certificate, ha_peer_names), else why not (403).
    std::function<std::string(const HttpRequest&)> peer_check = {};
    // A POST within this long of the last checkpoint gets that one.
    std::chrono::nanoseconds fresh_for = std::chrono::seconds(30);
    // A checkpoint nobody asked for this long is removed (Tick).
    std::chrono::nanoseconds keep_idle = std::chrono::minutes(5);
    size_t chunk_bytes = 1 << 20;
  };
  explicit CheckpointServer(Options options);
  ~CheckpointServer();  // waits for a checkpoint being made; removes root
  CheckpointServer(const CheckpointServer&) = delete;
  CheckpointServer& operator=(const CheckpointServer&) = delete;

  // Counters: clusterd_ha_checkpoints_created_total and friends. Once, before
  // any request.
  void RegisterMetrics(MetricsRegistry* metrics);
  // Where checkpoints come from; null: none now (requests answer 503). Waits
  // for a checkpoint being made from the previous source.
  void SetSource(Source source);
  // Registers the three routes (handle: HttpServer::Handle or the server's
  // equivalent). Handlers run on the HTTP thread; they read at most one
  // chunk from disk and never make a checkpoint there.
  void Install(const std::function<void(std::string method, std::string path, HttpServer::Handler)>& handle);
  // Removes a checkpoint idle for keep_idle. Any thread.
  void Tick();

 private:
  struct Current {
    CheckpointManifest manifest;
    std::string dir;
    std::chrono::steady_clock::time_point made;
    std::chrono::steady_clock::time_point used;
  };
  HttpResponse Start(const HttpRequest& req);
  HttpResponse Manifest(const HttpRequest& req);
  HttpResponse File(const HttpRequest& req);
  // Empty when the request carries the token and passes peer_check; the
  // refusal otherwise (401 without the token, 403 from another client),
  // counted and audited (the "audit" logger).
  std::optional<HttpResponse> Refusal(const HttpRequest& req, std::string_view what);
  void Make(const Source& source, std::string id);  // the maker thread
  void Join();

  const Options options_;
  std::mutex mu_;
  Source source_;
  std::shared_ptr<Current> current_;
  bool making_ = false;
  std::string failure_;  // why the last checkpoint failed
  uint64_t next_id_ = 1;
  std::thread maker_;

  Counter* created_ = nullptr;
  Counter* failed_ = nullptr;
  Counter* bytes_served_ = nullptr;
  Counter* refused_ = nullptr;
};

// A CheckpointServer::Options::peer_check: the request must come with a
// verified client certificate (the HTTP port's client CA checked it) whose
// Subject CN is one of `names` (a peer replica's: ha_peer_names); refused,
// with why, otherwise (no certificate, another CN; every request when
// `names` is empty).
std::function<std::string(const HttpRequest&)> PeerCertificateCheck(std::vector<std::string> names);

struct FetchOptions {
  std::string address;  // the peer's HTTP "host:port"
  std::string token;
  // Not null: the peer's HTTP port speaks TLS (unless --insecure); this
  // client context (MakeHttpPeerTls) presents this replica's certificate.
  std::shared_ptr<boost::asio::ssl::context> tls;
  std::chrono::nanoseconds request_timeout = std::chrono::seconds(10);
  // The longest wait for the peer to make the checkpoint.
  std::chrono::nanoseconds make_timeout = std::chrono::seconds(120);
  // Polled between requests: true stops the fetch (CANCELLED).
  std::function<bool()> cancelled;
  // Called once the manifest is known, before the files are fetched.
  std::function<void(const CheckpointManifest&)> on_manifest;
};
// Downloads a checkpoint into `dir` (emptied first) and checks that it opens
// at the manifest's log index and revision.
StatusOr<CheckpointManifest> FetchCheckpoint(const FetchOptions& options, const std::string& dir);

// Where FetchCheckpoint puts a checkpoint for `data_dir`.
std::string BootstrapDir(const std::string& data_dir);
// Replaces data_dir by the fetched checkpoint in BootstrapDir(data_dir)
// (crash-safe). keep_old: the old data dir is moved to <data_dir>.diverged
// (replacing an older one) instead of removed.
Status InstallCheckpoint(const std::string& data_dir, bool keep_old);
// At startup, before the store opens: completes an install that a crash
// interrupted, or removes a fetch that never completed.
Status FinishInterruptedInstall(const std::string& data_dir);

}  // namespace clusterd::replication
