#include "common/http_server.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_set>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "common/logging.h"

namespace clusterd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;

// After refusing a request whose body we did not read (413, 400), read and
// discard what the client still sends for a while before closing. Closing a
// socket with unread input makes the kernel send RST, which can destroy the
// error response before the client reads it ("lingering close").
constexpr std::size_t kDrainLimitBytes = 8 << 20;
constexpr auto kDrainTimeout = std::chrono::seconds(5);

std::shared_ptr<spdlog::logger> Log() {
  static const auto log = GetLogger("http");
  return log;
}

// Splits "host:port" / "[v6]:port". Port 0..65535.
Status ParseListenAddress(const std::string& text, tcp::endpoint* out) {
  const auto bad = [&](const std::string& why) { return InvalidArgument("bad listen address '" + text + "': " + why); };
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return bad("expected host:port");
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return bad("IPv6 addresses must be bracketed, as in [::1]:80");
  }
  if (host.empty()) return bad("empty host");
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return bad("port must be a number in 0..65535");
  }
  boost::system::error_code addr_ec;
  const asio::ip::address address = asio::ip::make_address(host, addr_ec);
  if (addr_ec) return bad("host must be a numeric IP address");
  *out = tcp::endpoint(address, static_cast<unsigned short>(port));
  return Status::Ok();
}

// The peer a connection counts against: an IPv4 client of a dual-stack
// listener ("::ffff:10.0.0.1") is the same peer as 10.0.0.1.
asio::ip::address PeerOf(const asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  return address;
}

// Refuses a connection without reading from it: a best-effort 503 (one
// non-blocking write that may fail), then close, which frees the descriptor
// at once.
void RefuseConnection(tcp::socket& socket, const std::string& body) {
  const std::string response =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
      "Connection: close\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  beast::error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(response), ignored);
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
}

// Log lines about refusals that do not flood: the first and every 1000th.
bool WorthLogging(uint64_t count) { return count == 1 || count % 1000 == 0; }

// The verified client certificate of a finished handshake as PEM; "" when
// the client sent none (or it was not verified: request mode without a CA).
std::string VerifiedPeerCertificate(SSL* ssl) {
  if (SSL_get_verify_result(ssl) != X509_V_OK) return "";
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return "";
  std::string pem;
  if (BIO* bio = BIO_new(BIO_s_mem())) {
    if (PEM_write_bio_X509(bio, cert) == 1) {
      char* data = nullptr;
      const long n = BIO_get_mem_data(bio, &data);
      if (n > 0) pem.assign(data, static_cast<std::size_t>(n));
    }
    BIO_free(bio);
  }
  X509_free(cert);
  return pem;
}

}  // namespace

struct HttpServer::Impl {
  class Session;

  explicit Impl(Options o) : options(std::move(o)) {
    if (options.max_connections > 0 && !options.reserved_paths.empty()) {
      reserved_share = std::min(options.reserved_connections, options.max_connections - 1);
    }
    for (const std::string& p : options.reserved_paths) {
      reserved_paths_text += (reserved_paths_text.empty() ? "" : ", ") + p;
    }
    reserved_refusal = "HTTP connections are all in use; only " + reserved_paths_text + " answer now\n";
    reserved_io_timeout = std::min(options.io_timeout, options.reserved_io_timeout);
  }

  // Runs on the server thread. Closes the listener and every connection so
  // that io_context::run() runs out of work and returns.
  void CloseAll();
  void DoAccept();
  // Server thread: admits or refuses a freshly accepted connection.
  void Admit(tcp::socket socket);
  bool IsReservedPath(const std::string& path) const {
    for (const std::string& p : options.reserved_paths) {
      if (p == path) return true;
    }
    return false;
  }

  const Options options;
  // Slots kept for reserved_paths (0: none), the paths as "/a, /b", the body
  // of the 503 for another path over one, and the io timeout of a reserved
  // connection.
  std::size_t reserved_share = 0;
  std::string reserved_paths_text;
  std::string reserved_refusal;
  std::chrono::nanoseconds reserved_io_timeout;
  // path -> method -> handler. Written only before Start(), then read-only
  // on the server thread.
  std::map<std::string, std::map<std::string, Handler>> routes;

  std::mutex lifecycle_mu;  // serialises Start() and Stop()
  bool started = false;     // guarded by lifecycle_mu (also read by Handle())
  bool stopped = false;     // guarded by lifecycle_mu
  std::atomic<int> bound_port{0};
  std::thread thread;

  // Live sessions and the closing flag; server thread only. Declared before
  // io_context so that they outlive it: sessions still owned by queued
  // handlers are destroyed by the io_context destructor.
  std::unordered_set<Session*> sessions;
  // Connections per remote address, and how many of them are reserved; an
  // entry goes when its last connection does, so there are never more
  // entries than connections. Server thread only.
  struct PeerSlots {
    std::size_t open = 0;
    std::size_t reserved = 0;
    std::size_t evicting = 0;  // closed to make room for a newer one, not yet gone
  };
  std::map<asio::ip::address, PeerSlots> peers;
  std::size_t reserved_open = 0;  // reserved connections among sessions
  bool closing = false;
  // Accept failures in a row, for a log line that does not flood; server
  // thread only.
  uint64_t accept_failures_in_row = 0;

  // Readable from any thread (accessors and metrics).
  // Shared with the metrics gauge, which may be rendered after the server is gone.
  std::shared_ptr<std::atomic<std::size_t>> open_connections = std::make_shared<std::atomic<std::size_t>>(0);
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> peer_rejected{0};
  std::atomic<uint64_t> peer_replaced{0};
  std::atomic<uint64_t> reserved_refused{0};
  std::atomic<uint64_t> accept_errors{0};
  std::atomic<uint64_t> tls_failures{0};
  Counter* tls_failures_metric = nullptr;
  Counter* rejected_metric = nullptr;
  Counter* peer_rejected_metric = nullptr;
  Counter* peer_replaced_metric = nullptr;
  Counter* reserved_refused_metric = nullptr;
  Counter* accept_errors_metric = nullptr;

  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_backoff{ioc};
};

// One connection: read a request, answer it, repeat while keep-alive.
// Owned by the shared_ptrs captured in its pending completion handlers.
class HttpServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  // `reserved`: the connection holds one of the slots kept for
  // reserved_paths (Options).
  // `peer_capped`: reserved because its address is at
  // max_connections_per_peer and it replaced one of that address's older
  // connections (only the probe paths answer over it).
  // `tls`: the context of a TLS connection (null: plaintext).
  Session(Impl* server, tcp::socket socket, asio::ip::address peer, std::string remote,
          std::shared_ptr<ssl::context> tls, bool reserved, bool peer_capped = false)
      : server_(server),
        stream_(std::move(socket)),
        peer_(std::move(peer)),
        remote_(std::move(remote)),
        tls_context_(std::move(tls)),
        reserved_(reserved),
        peer_capped_(peer_capped),
        io_timeout_(reserved ? server->reserved_io_timeout : server->options.io_timeout) {
    server_->sessions.insert(this);
    Impl::PeerSlots& slots = server_->peers[peer_];
    ++slots.open;
    if (reserved_) {
      ++slots.reserved;
      ++server_->reserved_open;
    }
    server_->open_connections->store(server_->sessions.size());
  }
  ~Session() {
    server_->sessions.erase(this);
    const auto it = server_->peers.find(peer_);
    if (it != server_->peers.end()) {
      --it->second.open;
      if (evicted_) --it->second.evicting;
      if (reserved_) --it->second.reserved;
      if (it->second.open == 0) server_->peers.erase(it);
    }
    if (reserved_) --server_->reserved_open;
    server_->open_connections->store(server_->sessions.size());
  }

  void Start() {
    if (!tls_context_) {
      DoRead();
      return;
    }
    tls_.emplace(stream_, *tls_context_);
    // The handshake is bounded like a request: a client that never finishes
    // it loses the slot after the io timeout.
    stream_.expires_after(io_timeout_);
    tls_->async_handshake(ssl::stream_base::server,
                          [self = shared_from_this()](beast::error_code ec) { self->OnHandshake(ec); });
  }

  const asio::ip::address& peer() const { return peer_; }
  // Waiting for a request (its first, or the next on a kept-alive
  // connection) and not being evicted already: what a newer connection of
  // the same address at its per-peer limit may replace.
  bool Evictable() const { return waiting_ && !evicted_; }
  std::chrono::steady_clock::time_point waiting_since() const { return waiting_since_; }
  // Closes it to make room for a newer connection from its address; it
  // still counts for the address until it is gone, but not toward the limit.
  void Evict() {
    evicted_ = true;
    ++server_->peers[peer_].evicting;
    Close();
  }

  // Cancels every pending operation (and the timeout timer); their handlers
  // then run with an error and release the session.
  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

 private:
  // Runs f on the stream requests travel on: TLS when the port has it.
  template <typename F>
  void WithStream(F&& f) {
    if (tls_) {
      f(*tls_);
    } else {
      f(stream_);
    }
  }

  void OnHandshake(beast::error_code ec) {
    if (ec) {
      // Plaintext on a TLS port, a client certificate the CA does not
      // verify (another CA, expired), a client that gave up: no answer.
      const uint64_t n = server_->tls_failures.fetch_add(1) + 1;
      if (server_->tls_failures_metric) server_->tls_failures_metric->Inc();
      if (WorthLogging(n)) {
        Log()->warn("TLS handshake with {} failed: {} ({} failed so far)", remote_, ec.message(), n);
      }
      return;
    }
    client_certificate_ = VerifiedPeerCertificate(tls_->native_handle());
    DoRead();
  }

  void DoRead() {
    waiting_ = true;
    waiting_since_ = std::chrono::steady_clock::now();
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    stream_.expires_after(io_timeout_);
    WithStream([this](auto& stream) {
      http::async_read(stream, buffer_, *parser_,
                       [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
    });
  }

  void OnRead(beast::error_code ec) {
    waiting_ = false;
    if (ec == http::error::end_of_stream) {
      // Client closed its side between requests.
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      return;
    }
    if (ec == http::error::body_limit) {
      Reply(Plain(http::status::payload_too_large,
                  "request body exceeds " + std::to_string(server_->options.max_body_bytes) + " bytes\n"),
            /*close=*/true);
      return;
    }
    if (ec.category() == http::make_error_code(http::error::end_of_stream).category()) {
      // Any other parse error (malformed request, header too large).
      Reply(Plain(http::status::bad_request, "bad request: " + ec.message() + "\n"), /*close=*/true);
      return;
    }
    if (ec) return;  // timeout, reset, operation_aborted: just drop it

    auto& req = parser_->get();
    if (reserved_) {
      // A slot kept for probes: anything else waits for a free API slot.
      const std::string target(req.target());
      const std::string path = target.substr(0, target.find('?'));
      if (!server_->IsReservedPath(path)) {
        const uint64_t n = server_->reserved_refused.fetch_add(1) + 1;
        if (server_->reserved_refused_metric) server_->reserved_refused_metric->Inc();
        if (WorthLogging(n)) {
          Log()->warn("HTTP connections all in use: refused {} requests for other paths than {} so far", n,
                      server_->reserved_paths_text);
        }
        Reply(Plain(http::status::service_unavailable,
                    peer_capped_ ? "too many HTTP connections from " + peer_.to_string() + "; only " +
                                       server_->reserved_paths_text + " answer over more\n"
                                 : server_->reserved_refusal),
              /*close=*/true);
        return;
      }
    }
    Reply(Dispatch(req), /*close=*/!req.keep_alive());
  }

  http::response<http::string_body> Dispatch(const http::request<http::string_body>& req) {
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    auto route = server_->routes.find(path);
    if (route == server_->routes.end()) {
      // A prefix route ("/api/v1/nodes/*") takes every path below it; the
      // longest one wins.
      size_t best = 0;
      for (auto it = server_->routes.begin(); it != server_->routes.end(); ++it) {
        const std::string& key = it->first;
        if (key.size() < 2 || key.back() != '*') continue;
        const std::string_view prefix(key.data(), key.size() - 1);
        if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 && prefix.size() > best) {
          best = prefix.size();
          route = it;
        }
      }
    }
    if (route == server_->routes.end()) {
      return Plain(http::status::not_found, "not found: " + path + "\n");
    }
    const std::string method(req.method_string());
    const auto handler = route->second.find(method);
    if (handler == route->second.end()) {
      std::string allow;
      for (const auto& [m, h] : route->second) allow += (allow.empty() ? "" : ", ") + m;
      auto res = Plain(http::status::method_not_allowed, "method " + method + " not allowed on " + path + "\n");
      res.set(http::field::allow, allow);
      return res;
    }

    HttpRequest request{method,     target,
                        req.body(), std::string(req[boost::beast::http::field::authorization]),
                        remote_,    client_certificate_};
    HttpResponse response;
    // Handlers are user code on the server thread: an escaping exception
    // would end io_context::run() for everyone, so it becomes a 500 here.
    try {
      response = handler->second(request);
    } catch (const std::exception& e) {
      Log()->error("handler for {} {} threw: {}", method, path, e.what());
      return Plain(http::status::internal_server_error, "internal error\n");
    } catch (...) {
      Log()->error("handler for {} {} threw a non-std exception", method, path);
      return Plain(http::status::internal_server_error, "internal error\n");
    }
    if (response.status < 100 || response.status > 999) {
      Log()->error("handler for {} {} returned invalid status {}", method, path, response.status);
      return Plain(http::status::internal_server_error, "internal error\n");
    }
    http::response<http::string_body> res{static_cast<http::status>(response.status), 11};
    res.set(http::field::content_type, response.content_type);
    res.body() = std::move(response.body);
    return res;
  }

  static http::response<http::string_body> Plain(http::status status, std::string body) {
    http::response<http::string_body> res{status, 11};
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = std::move(body);
    return res;
  }

  void Reply(http::response<http::string_body> res, bool close) {
    res.keep_alive(!close);
    res.prepare_payload();
    res_ = std::move(res);
    stream_.expires_after(io_timeout_);
    WithStream([this, close](auto& stream) {
      http::async_write(stream, res_, [self = shared_from_this(), close](beast::error_code ec, std::size_t) {
        self->OnWrite(ec, close);
      });
    });
  }

  void OnWrite(beast::error_code ec, bool close) {
    if (ec) return;
    if (close) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      // The request may not have been read completely (413, 400): drain.
      drained_ = 0;
      stream_.expires_after(reserved_ ? std::min<std::chrono::nanoseconds>(kDrainTimeout, io_timeout_) : kDrainTimeout);
      DoDrain();
      return;
    }
    DoRead();
  }

  void DoDrain() {
    WithStream([this](auto& stream) {
      stream.async_read_some(asio::buffer(drain_buf_),
                             [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                               self->drained_ += n;
                               // EOF, error, timeout or limit: the session ends and the socket closes.
                               if (!ec && self->drained_ < kDrainLimitBytes) self->DoDrain();
                             });
    });
  }

  Impl* const server_;
  beast::tcp_stream stream_;
  const asio::ip::address peer_;
  const std::string remote_;  // "address:port", for handlers and logs
  const std::shared_ptr<ssl::context> tls_context_;
  // Over stream_; declared after it, so destroyed first.
  std::optional<ssl::stream<beast::tcp_stream&>> tls_;
  std::string client_certificate_;  // verified, PEM; "" none
  const bool reserved_;
  const bool peer_capped_;
  const std::chrono::nanoseconds io_timeout_;
  bool waiting_ = false;  // a read of a request is pending (DoRead)
  std::chrono::steady_clock::time_point waiting_since_{};
  bool evicted_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;  // must outlive async_write
  std::size_t drained_ = 0;
  char drain_buf_[16 * 1024];
};

void HttpServer::Impl::DoAccept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (closing || !acceptor.is_open()) return;  // Stop() in progress
    if (ec) {
      // Nothing here may stop the listener for good: out of descriptors
      // (EMFILE, ENFILE) or memory (ENOBUFS, ENOMEM) passes once connections
      // close, so wait a little and accept again (not at once: the failing
      // connection stays queued and would spin the loop). The connection
      // waits in the kernel's backlog meanwhile.
      accept_errors.fetch_add(1);
      if (accept_errors_metric) accept_errors_metric->Inc();
      ++accept_failures_in_row;
      if (accept_failures_in_row == 1 || accept_failures_in_row % 100 == 0) {
        Log()->warn("accept failed ({} in a row): {}; retrying in 100ms", accept_failures_in_row, ec.message());
      }
      accept_backoff.expires_after(std::chrono::milliseconds(100));
      accept_backoff.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec && !closing) DoAccept();
      });
      return;
    }
    if (accept_failures_in_row > 0) {
      Log()->info("accepting again after {} failed accepts", accept_failures_in_row);
      accept_failures_in_row = 0;
    }
    Admit(std::move(socket));
    DoAccept();
  });
}

void HttpServer::Impl::Admit(tcp::socket socket) {
  beast::error_code ec;
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  if (ec) {
    // Reset before we looked (ENOTCONN): nobody to answer.
    socket.close(ec);
    return;
  }
  if (options.max_connections > 0 && sessions.size() >= options.max_connections) {
    const uint64_t n = rejected.fetch_add(1) + 1;
    if (rejected_metric) rejected_metric->Inc();
    if (WorthLogging(n)) {
      Log()->warn("HTTP connection limit {} reached: refused {} connections so far", options.max_connections, n);
    }
    RefuseConnection(socket, "too many HTTP connections; try later\r\n");
    return;
  }
  asio::ip::address peer = PeerOf(remote.address());
  const std::string remote_text =
      (remote.address().is_v6() ? "[" + remote.address().to_string() + "]" : remote.address().to_string()) + ":" +
      std::to_string(remote.port());
  // Beyond the API's share, a connection takes a reserved slot.
  const bool reserved =
      reserved_share > 0 && sessions.size() - reserved_open >= options.max_connections - reserved_share;
  const auto slots = peers.find(peer);
  const std::size_t peer_open = slots == peers.end() ? 0 : slots->second.open;
  const std::size_t peer_reserved = slots == peers.end() ? 0 : slots->second.reserved;
  const std::size_t peer_evicting = slots == peers.end() ? 0 : slots->second.evicting;
  const bool over_peer =
      options.max_connections_per_peer > 0 && peer_open - peer_evicting >= options.max_connections_per_peer;
  // An address at its cap still gets a probe through: its oldest connection
  // that waits for a request (a slow client's, an idle kept-alive one) is
  // closed to make room, and the newer one may ask only for the probe paths
  // (reserved_paths, the short wait). The kubelet shares the node's address
  // with every host-network pod: one of them holding slow connections must
  // not fail the node's probes, and it can only push out its own.
  bool replaced = false;
  if (over_peer && reserved_share > 0) {
    Session* victim = nullptr;
    for (Session* s : sessions) {
      if (s->peer() == peer && s->Evictable() && (victim == nullptr || s->waiting_since() < victim->waiting_since())) {
        victim = s;
      }
    }
    if (victim != nullptr) {
      victim->Evict();
      replaced = true;
      const uint64_t n = peer_replaced.fetch_add(1) + 1;
      if (peer_replaced_metric) peer_replaced_metric->Inc();
      if (WorthLogging(n)) {
        Log()->warn(
            "HTTP connections from {}: at the per-peer limit {}, closed its oldest one waiting for a request to take a "
            "newer one (probe paths only); {} so far",
            peer.to_string(), options.max_connections_per_peer, n);
      }
    }
  }
  const bool over_reserved_peer = reserved && !replaced && options.reserved_connections_per_peer > 0 &&
                                  peer_reserved >= options.reserved_connections_per_peer;
  if ((over_peer && !replaced) || over_reserved_peer) {
    const uint64_t n = peer_rejected.fetch_add(1) + 1;
    if (peer_rejected_metric) peer_rejected_metric->Inc();
    const std::string who = peer.to_string();
    if (WorthLogging(n)) {
      Log()->warn("HTTP connections from {}: {} open ({} reserved) reached a per-peer limit; refused {} so far", who,
                  peer_open, peer_reserved, n);
    }
    RefuseConnection(socket, "too many HTTP connections from " + who + "; close some and try later\r\n");
    return;
  }
  std::shared_ptr<ssl::context> tls;
  if (options.tls) tls = options.tls();
  std::make_shared<Session>(this, std::move(socket), std::move(peer), remote_text, std::move(tls), reserved || replaced,
                            replaced && !reserved)
      ->Start();
}

void HttpServer::Impl::CloseAll() {
  closing = true;
  beast::error_code ignored;
  acceptor.close(ignored);
  accept_backoff.cancel();
  // Close() does not destroy sessions synchronously (their handlers hold
  // them), so iterating the set while closing is safe.
  for (Session* s : sessions) s->Close();
}

HttpServer::HttpServer() : HttpServer(Options{}) {}
HttpServer::HttpServer(const Options& options) : impl_(std::make_unique<Impl>(options)) {
  if (MetricsRegistry* m = options.metrics) {
    const std::string& p = options.metrics_prefix;
    Impl* impl = impl_.get();
    m->AddCallbackGauge(p + "_http_connections", "Open HTTP connections.",
                        [open = impl->open_connections] { return static_cast<double>(open->load()); });
    impl->rejected_metric =
        &m->AddCounter(p + "_http_connections_rejected_total", "HTTP connections refused at the connection limit.");
    impl->peer_rejected_metric =
        &m->AddCounter(p + "_http_peer_connections_rejected_total",
                       "HTTP connections refused at a per-peer limit (one IP address holding too many).");
    impl->peer_replaced_metric = &m->AddCounter(
        p + "_http_peer_connections_replaced_total",
        "HTTP connections closed to make room for a newer one from the same IP address at its per-peer limit "
        "(the newer one may ask only for the probe paths).");
    impl->reserved_refused_metric =
        &m->AddCounter(p + "_http_reserved_requests_refused_total",
                       "HTTP requests refused because they came over a slot kept for probes and asked for "
                       "another path (every other slot in use).");
    if (options.tls) {
      impl->tls_failures_metric =
          &m->AddCounter(p + "_http_tls_handshake_failures_total",
                         "TLS handshakes on the HTTP port that failed: plaintext, a client certificate not "
                         "verified (another CA, expired), a client that gave up or timed out.");
    }
    impl->accept_errors_metric = &m->AddCounter(
        p + "_http_accept_errors_total", "Failed accepts on the HTTP port (e.g. out of file descriptors); retried.");
  }
}
HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string method, std::string path, Handler handler) {
  {
    std::lock_guard lock(impl_->lifecycle_mu);
    if (impl_->started) {
      Log()->critical("HttpServer::Handle({} {}) called after Start()", method, path);
      Log()->flush();
      std::abort();
    }
  }
  impl_->routes[std::move(path)][std::move(method)] = std::move(handler);
}

Status HttpServer::Start(const std::string& listen_address) {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (impl_->started || impl_->stopped) {
    return FailedPrecondition("HttpServer::Start(" + listen_address + "): server already started");
  }
  tcp::endpoint endpoint;
  CLUSTERD_RETURN_IF_ERROR(ParseListenAddress(listen_address, &endpoint));

  tcp::acceptor& acceptor = impl_->acceptor;
  beast::error_code ec;
  const auto fail = [&](const char* what) {
    beast::error_code ignored;
    acceptor.close(ignored);
    return Unavailable(std::string("cannot ") + what + " HTTP listener on " + listen_address + ": " + ec.message());
  };
  if (acceptor.open(endpoint.protocol(), ec)) return fail("open");
  // Lets a restarted process rebind while old connections sit in TIME_WAIT;
  // on Linux it does not allow two live listeners on one port.
  if (acceptor.set_option(asio::socket_base::reuse_address(true), ec)) return fail("configure");
  if (acceptor.bind(endpoint, ec)) return fail("bind");
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec)) return fail("listen on");
  const tcp::endpoint local = acceptor.local_endpoint(ec);
  if (ec) return fail("query");
  impl_->bound_port.store(local.port());

  impl_->DoAccept();
  try {
    impl_->thread = std::thread([impl = impl_.get()] {
      // No work guard: run() returns once CloseAll() leaves nothing pending.
      for (;;) {
        try {
          impl->ioc.run();
          return;
        } catch (const std::exception& e) {
          Log()->error("HTTP server loop: {}", e.what());
        }
      }
    });
  } catch (const std::system_error& e) {
    // The queued accept is never run; refuse further Start()s rather than
    // reuse an io_context holding it.
    impl_->stopped = true;
    beast::error_code ignored;
    acceptor.close(ignored);
    return Internal("cannot start HTTP server thread for " + listen_address + ": " + e.what());
  }
  impl_->started = true;
  Log()->info("HTTP server listening on {} (port {})", listen_address, local.port());
  return Status::Ok();
}

int HttpServer::port() const { return impl_->bound_port.load(); }
std::size_t HttpServer::open_connections() const { return impl_->open_connections->load(); }
uint64_t HttpServer::rejected_connections() const { return impl_->rejected.load(); }
uint64_t HttpServer::peer_rejected_connections() const { return impl_->peer_rejected.load(); }
uint64_t HttpServer::peer_replaced_connections() const { return impl_->peer_replaced.load(); }
uint64_t HttpServer::reserved_refused_requests() const { return impl_->reserved_refused.load(); }
uint64_t HttpServer::accept_errors() const { return impl_->accept_errors.load(); }
uint64_t HttpServer::tls_handshake_failures() const { return impl_->tls_failures.load(); }

void HttpServer::Stop() {
  std::lock_guard lock(impl_->lifecycle_mu);
  if (!impl_->started || impl_->stopped) return;
  if (std::this_thread::get_id() == impl_->thread.get_id()) {
    Log()->critical("HttpServer::Stop() called from a handler (would join its own thread)");
    Log()->flush();
    std::abort();
  }
  asio::post(impl_->ioc, [impl = impl_.get()] { impl->CloseAll(); });
  impl_->thread.join();
  impl_->stopped = true;
}

}  // namespace clusterd
