#include "clusterd/ha/replication/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>

#include "clusterd/ha/replication/log_entry.h"
#include "clusterd/storage/rocksdb_store.h"
#include "common/durable_file.h"
#include "common/http_client.h"
#include "common/logging.h"
#include "common/tls_context.h"
#include "common/token_file.h"

namespace clusterd::replication {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

constexpr std::string_view kManifestMagic = "clusterd-checkpoint 1";
constexpr const char* kCompleteMarker = "CLUSTERD_CHECKPOINT_COMPLETE";
constexpr size_t kMaxFiles = 100'000;

bool PlainName(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '.' || c == '_' || c == '-'; });
}

bool ParseU64(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// The query parameters of a target ("/p?a=1&b=2"); values are taken as
// written (ids, file names and numbers need no escaping).
std::map<std::string, std::string> Query(const std::string& target) {
  std::map<std::string, std::string> out;
  const size_t q = target.find('?');
  if (q == std::string::npos) return out;
  std::string_view rest(target);
  rest.remove_prefix(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos) out[std::string(pair.substr(0, eq))] = std::string(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return out;
}

HttpResponse Text(int status, const std::string& body) {
  return HttpResponse{status, "text/plain; charset=utf-8", body + "\n"};
}

// Opens the store in `dir` to read where it stands.
StatusOr<std::pair<uint64_t, uint64_t>> IndexAndRevision(const std::string& dir, bool read_only) {
  storage::StoreOptions options;
  options.read_only = read_only;
  auto store = storage::RocksDbStore::Open(dir, options);
  if (!store.ok()) return store.status();
  auto index = ReadLogIndex(**store);
  if (!index.ok()) return index.status();
  return std::make_pair(*index, (*store)->revision_at_open());
}

}  // namespace

std::string FormatManifest(const CheckpointManifest& m) {
  std::string out(kManifestMagic);
  out +=
      "\nid " + m.id + "\nlog_index " + std::to_string(m.log_index) + "\nrevision " + std::to_string(m.revision) + "\n";
  for (const auto& [name, size] : m.files) out += "file " + name + " " + std::to_string(size) + "\n";
  return out;
}

StatusOr<CheckpointManifest> ParseManifest(std::string_view text) {
  auto bad = [](const std::string& why) { return InvalidArgument("checkpoint manifest: " + why); };
  CheckpointManifest m;
  bool magic = false, have_index = false, have_revision = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty()) continue;
    if (!magic) {
      if (line != kManifestMagic)
        return bad("not a checkpoint manifest (first line '" + std::string(line.substr(0, 64)) + "')");
      magic = true;
      continue;
    }
    const size_t sp = line.find(' ');
    const std::string_view word = line.substr(0, sp);
    const std::string_view rest = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
    if (word == "id") {
      if (!PlainName(rest)) return bad("bad id");
      m.id = std::string(rest);
    } else if (word == "log_index") {
      if (!ParseU64(rest, &m.log_index)) return bad("bad log_index");
      have_index = true;
    } else if (word == "revision") {
      if (!ParseU64(rest, &m.revision)) return bad("bad revision");
      have_revision = true;
    } else if (word == "file") {
      const size_t sp2 = rest.rfind(' ');
      if (sp2 == std::string_view::npos) return bad("a file line needs a name and a size");
      const std::string_view name = rest.substr(0, sp2);
      uint64_t size = 0;
      if (!PlainName(name)) return bad("file name '" + std::string(name.substr(0, 64)) + "' is not a plain name");
      if (name == kCompleteMarker) return bad("reserved file name");
      if (!ParseU64(rest.substr(sp2 + 1), &size)) return bad("bad size of " + std::string(name));
      if (m.files.size() >= kMaxFiles) return bad("more than " + std::to_string(kMaxFiles) + " files");
      for (const auto& f : m.files) {
        if (f.first == name) return bad("file " + std::string(name) + " named twice");
      }
      m.files.emplace_back(std::string(name), size);
    } else {
      return bad("unknown line '" + std::string(line.substr(0, 64)) + "'");
    }
  }
  if (!magic) return bad("empty");
  if (m.id.empty() || !have_index || !have_revision || m.files.empty()) return bad("incomplete");
  return m;
}

// ------------------------------------------------------------- serving ---

CheckpointServer::CheckpointServer(Options options) : options_(std::move(options)) {
  std::error_code ec;
  fs::remove_all(options_.root, ec);
}

CheckpointServer::~CheckpointServer() {
  Join();
  std::error_code ec;
  fs::remove_all(options_.root, ec);
}

void CheckpointServer::RegisterMetrics(MetricsRegistry* metrics) {
  created_ = &metrics->AddCounter("clusterd_ha_checkpoints_created_total",
                                  "Checkpoints of this replica's store made for peers that rebuild.");
  failed_ = &metrics->AddCounter("clusterd_ha_checkpoint_failures_total", "Checkpoints that could not be made.");
  bytes_served_ =
      &metrics->AddCounter("clusterd_ha_checkpoint_bytes_served_total", "Bytes of checkpoint files sent to peers.");
  refused_ = &metrics->AddCounter("clusterd_ha_checkpoint_requests_refused_total",
                                  "Checkpoint requests without the replica's token (answered 401).");
}

void CheckpointServer::Join() {
  std::thread maker;
  {
    std::lock_guard lock(mu_);
    maker = std::move(maker_);
  }
  if (maker.joinable()) maker.join();
}

void CheckpointServer::SetSource(Source source) {
  // The new source first, under the lock: a request from now on cannot start
  // a checkpoint of the old store; one already running is waited for.
  std::thread maker;
  {
    std::lock_guard lock(mu_);
    source_ = std::move(source);
    maker = std::move(maker_);
  }
  if (maker.joinable()) maker.join();
}

void CheckpointServer::Install(
    const std::function<void(std::string method, std::string path, HttpServer::Handler)>& handle) {
  handle("POST", "/ha/v1/checkpoint", [this](const HttpRequest& r) { return Start(r); });
  handle("GET", "/ha/v1/checkpoint", [this](const HttpRequest& r) { return Manifest(r); });
  handle("GET", "/ha/v1/checkpoint/file", [this](const HttpRequest& r) { return File(r); });
}

std::optional<HttpResponse> CheckpointServer::Refusal(const HttpRequest& req, std::string_view what) {
  // Compared in constant time: the token is a secret.
  const bool token = !options_.token.empty() && ConstantTimeEquals(BearerToken(req.authorization), options_.token);
  int code = 401;
  std::string why = "this replica's checkpoint token is required (Authorization: Bearer)";
  if (token) {
    why = options_.peer_check ? options_.peer_check(req) : std::string();
    if (why.empty()) return std::nullopt;
    code = 403;
  }
  if (refused_) refused_->Inc();
  const std::string who = req.client_certificate_pem.empty() ? "-" : CertificateCommonName(req.client_certificate_pem);
  GetLogger("audit")->warn("deny principal={} method=\"{}\" peer={} reason=\"{}\"", who.empty() ? "-" : who, what,
                           req.peer, why);
  return Text(code, why);
}

std::function<std::string(const HttpRequest&)> PeerCertificateCheck(std::vector<std::string> names) {
  std::string listed;
  for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
  if (listed.empty()) listed = "none";
  return [names = std::move(names), listed](const HttpRequest& req) -> std::string {
    if (req.client_certificate_pem.empty()) {
      return "only a peer replica may fetch a checkpoint: no client certificate was presented";
    }
    const std::string cn = CertificateCommonName(req.client_certificate_pem);
    if (!cn.empty() && std::find(names.begin(), names.end(), cn) != names.end()) return "";
    return "only a peer replica may fetch a checkpoint: the client certificate's CN \"" + cn +
           "\" is not a replica's (ha_peer_names: " + listed + ")";
  };
}

HttpResponse CheckpointServer::Start(const HttpRequest& req) {
  if (auto refused = Refusal(req, "POST /ha/v1/checkpoint")) return *refused;
  std::lock_guard lock(mu_);
  if (making_) return Text(202, "making a checkpoint");
  const auto now = SteadyClock::now();
  if (current_ && now - current_->made < options_.fresh_for) {
    current_->used = now;
    return HttpResponse{200, "text/plain; charset=utf-8", FormatManifest(current_->manifest)};
  }
  if (!source_) return Text(503, "this replica's store is not open now; try again");
  if (maker_.joinable()) maker_.join();  // finished: making_ is false
  making_ = true;
  failure_.clear();
  maker_ = std::thread(&CheckpointServer::Make, this, source_, std::to_string(next_id_++));
  return Text(202, "making a checkpoint");
}

void CheckpointServer::Make(const Source& source, std::string id) {
  const std::string dir = options_.root + "/" + id;
  std::error_code ec;
  fs::create_directories(options_.root, ec);
  Status st = ec ? Internal("create " + options_.root + ": " + ec.message()) : source(dir);
  auto cur = std::make_shared<Current>();
  cur->dir = dir;
  cur->manifest.id = id;
  if (st.ok()) {
    auto where = IndexAndRevision(dir, /*read_only=*/true);
    if (where.ok()) {
      cur->manifest.log_index = where->first;
      cur->manifest.revision = where->second;
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (!entry.is_regular_file()) continue;
        cur->manifest.files.emplace_back(entry.path().filename().string(), entry.file_size());
      }
      std::sort(cur->manifest.files.begin(), cur->manifest.files.end());
      if (ec) st = Internal("list " + dir + ": " + ec.message());
    } else {
      st = where.status();
    }
  }
  std::shared_ptr<Current> old;
  {
    std::lock_guard lock(mu_);
    making_ = false;
    if (!st.ok()) {
      failure_ = st.ToString();
      if (failed_) failed_->Inc();
    } else {
      cur->made = cur->used = SteadyClock::now();
      old = std::exchange(current_, cur);
      if (created_) created_->Inc();
    }
  }
  if (!st.ok()) {
    GetLogger("ha")->warn("checkpoint {}: {}", id, st.ToString());
    fs::remove_all(dir, ec);
  } else {
    GetLogger("ha")->info("checkpoint {} made for a peer: log index {}, {} files", id, cur->manifest.log_index,
                          cur->manifest.files.size());
  }
  if (old) fs::remove_all(old->dir, ec);
}

HttpResponse CheckpointServer::Manifest(const HttpRequest& req) {
  if (auto refused = Refusal(req, "GET /ha/v1/checkpoint")) return *refused;
  std::lock_guard lock(mu_);
  if (making_) return Text(202, "making a checkpoint");
  if (!failure_.empty()) return Text(500, "the checkpoint failed: " + failure_);
  if (!current_) return Text(404, "no checkpoint; POST to make one");
  current_->used = SteadyClock::now();
  return HttpResponse{200, "text/plain; charset=utf-8", FormatManifest(current_->manifest)};
}

HttpResponse CheckpointServer::File(const HttpRequest& req) {
  if (auto refused = Refusal(req, "GET /ha/v1/checkpoint/file")) return *refused;
  auto query = Query(req.target);
  uint64_t offset = 0;
  if (!ParseU64(query["offset"], &offset)) return Text(400, "offset: a number is required");
  std::shared_ptr<Current> cur;
  {
    std::lock_guard lock(mu_);
    cur = current_;
    if (cur && cur->manifest.id == query["id"]) cur->used = SteadyClock::now();
  }
  if (!cur || cur->manifest.id != query["id"]) return Text(404, "no checkpoint " + query["id"].substr(0, 64));
  const std::string& name = query["name"];
  auto it = std::find_if(cur->manifest.files.begin(), cur->manifest.files.end(),
                         [&](const auto& f) { return f.first == name; });
  if (it == cur->manifest.files.end())
    return Text(404, "checkpoint " + cur->manifest.id + " has no file " + name.substr(0, 64));
  if (offset > it->second) return Text(416, "offset past the end of " + name);
  const size_t want = static_cast<size_t>(std::min<uint64_t>(options_.chunk_bytes, it->second - offset));
  HttpResponse out{200, "application/octet-stream", std::string(want, '\0')};
  // The file stays while this handler reads it: `cur` holds the checkpoint,
  // and a replaced one is removed by the maker only after the swap; a
  // removal racing this read fails the read, which the peer retries.
  const int fd = ::open((cur->dir + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Text(410, "checkpoint " + cur->manifest.id + " is gone; POST for a new one");
  size_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd, out.body.data() + got, want - got, static_cast<off_t>(offset + got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got != want) return Text(500, "short read of " + name);
  if (bytes_served_) bytes_served_->Inc(static_cast<double>(got));
  return out;
}

void CheckpointServer::Tick() {
  std::shared_ptr<Current> idle;
  {
    std::lock_guard lock(mu_);
    if (current_ && !making_ && SteadyClock::now() - current_->used > options_.keep_idle) idle = std::move(current_);
  }
  if (idle) {
    std::error_code ec;
    fs::remove_all(idle->dir, ec);
    GetLogger("ha")->info("checkpoint {} removed: unused for a while", idle->manifest.id);
  }
}

// ------------------------------------------------------------ fetching ---

StatusOr<CheckpointManifest> FetchCheckpoint(const FetchOptions& options, const std::string& dir) {
  HttpClientRequest base;
  if (!SplitHostPort(options.address, &base.host, &base.port)) {
    return InvalidArgument("peer address '" + options.address + "' is not host:port");
  }
  base.headers = {{"Authorization", "Bearer " + options.token}};
  base.tls = options.tls;
  auto call = [&](const std::string& method, const std::string& target, size_t max_body) -> StatusOr<HttpClientAnswer> {
    HttpClientRequest req = base;
    req.method = method;
    req.target = target;
    auto answer = HttpCall(req, SteadyClock::now() + options.request_timeout, max_body);
    if (!answer.answered) {
      return Unavailable(method + " http://" + options.address + target + ": " + answer.failed_at + ": " +
                         answer.error);
    }
    if (answer.truncated) return Unavailable(method + " " + target + ": the answer is too long");
    return answer;
  };
  auto cancelled = [&] { return options.cancelled && options.cancelled(); };

  // 1. Have the peer make a checkpoint, and wait for its manifest.
  const auto make_deadline = SteadyClock::now() + options.make_timeout;
  auto answer = call("POST", "/ha/v1/checkpoint", 1 << 20);
  for (;;) {
    if (!answer.ok()) return answer.status();
    if (answer->status == 200) break;
    if (answer->status != 202) {
      return Unavailable("checkpoint from " + options.address + ": HTTP " + std::to_string(answer->status) + " " +
                         answer->body.substr(0, 256));
    }
    if (SteadyClock::now() > make_deadline)
      return Status(StatusCode::kDeadlineExceeded, "the peer took too long to make a checkpoint");
    if (cancelled()) return Status(StatusCode::kCancelled, "stopping");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the peer is making it: poll
    answer = call("GET", "/ha/v1/checkpoint", 1 << 20);
  }
  auto manifest = ParseManifest(answer->body);
  if (!manifest.ok()) return manifest.status();
  if (options.on_manifest) options.on_manifest(*manifest);

  // 2. Every file, chunk by chunk, into an empty directory.
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return Internal("create " + dir + ": " + ec.message());
  for (const auto& [name, size] : manifest->files) {
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      return Internal("create " + path + ": " + std::strerror(err));
    }
    Status st;
    uint64_t offset = 0;
    while (st.ok() && offset < size) {
      if (cancelled()) {
        st = Status(StatusCode::kCancelled, "stopping");
        break;
      }
      auto chunk = call(
          "GET", "/ha/v1/checkpoint/file?id=" + manifest->id + "&name=" + name + "&offset=" + std::to_string(offset),
          8 << 20);
      if (!chunk.ok()) {
        st = chunk.status();
      } else if (chunk->status != 200) {
        st = Unavailable("checkpoint file " + name + ": HTTP " + std::to_string(chunk->status) + " " +
                         chunk->body.substr(0, 256));
      } else if (chunk->body.empty() || chunk->body.size() > size - offset) {
        st = Unavailable("checkpoint file " + name + ": a chunk of " + std::to_string(chunk->body.size()) +
                         " bytes at offset " + std::to_string(offset) + " of " + std::to_string(size));
      } else {
        st = WriteAll(fd, chunk->body, path);
        offset += chunk->body.size();
      }
    }
    if (st.ok()) st = SyncFile(fd, path, SyncKind::kAll);
    Status closed = CloseFile(fd, path);
    if (st.ok()) st = std::move(closed);
    if (!st.ok()) return st;
  }
  CLUSTERD_RETURN_IF_ERROR(SyncDirectory(dir));

  // 3. It must open where the manifest says.
  auto where = IndexAndRevision(dir, /*read_only=*/false);
  if (!where.ok()) return Internal("the fetched checkpoint does not open: " + where.status().ToString());
  if (where->first != manifest->log_index || where->second != manifest->revision) {
    return Internal("the fetched checkpoint is at log index " + std::to_string(where->first) + ", revision " +
                    std::to_string(where->second) + "; its manifest says " + std::to_string(manifest->log_index) +
                    ", " + std::to_string(manifest->revision));
  }
  return manifest;
}

std::string BootstrapDir(const std::string& data_dir) { return data_dir + ".bootstrap"; }

Status InstallCheckpoint(const std::string& data_dir, bool keep_old) {
  const std::string fetched = BootstrapDir(data_dir);
  // The fetched files and their directory entries are durable already
  // (FetchCheckpoint); the marker, written and renamed into place with a
  // sync of `fetched`, is what makes the checkpoint count as complete.
  CLUSTERD_RETURN_IF_ERROR(WriteFileDurably(fetched + "/" + kCompleteMarker, ""));
  std::error_code ec;
  if (keep_old && fs::exists(data_dir, ec)) {
    const std::string aside = data_dir + ".diverged";
    fs::remove_all(aside, ec);
    CLUSTERD_RETURN_IF_ERROR(RenameDurably(data_dir, aside));
    GetLogger("ha")->warn("the store that held other history is kept in {}", aside);
  }
  return FinishInterruptedInstall(data_dir);
}

Status FinishInterruptedInstall(const std::string& data_dir) {
  const std::string fetched = BootstrapDir(data_dir);
  const std::string marker = fetched + "/" + kCompleteMarker;
  std::error_code ec;
  if (!fs::exists(fetched, ec)) return Status::Ok();
  if (!fs::exists(marker, ec)) {
    // A fetch that never completed: the data dir is what it was.
    fs::remove_all(fetched, ec);
    if (ec) return Internal("remove " + fetched + ": " + ec.message());
    return Status::Ok();
  }
  fs::remove_all(data_dir, ec);
  if (ec) return Internal("remove " + data_dir + ": " + ec.message());
  CLUSTERD_RETURN_IF_ERROR(RenameDurably(fetched, data_dir));
  fs::remove(data_dir + "/" + kCompleteMarker, ec);
  return Status::Ok();
}

}  // namespace clusterd::replication
