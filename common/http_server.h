// A small HTTP/1.1 server (Boost.Beast) for /metrics, health and debug
// endpoints. Not a general web server: exact-path routing, bodies held in
// memory; TLS (and client certificates) when given a context (Options::tls).
//
// Threading: the server owns one io_context and one thread that runs it.
// Every connection, and every handler call, runs on that thread, so handlers
// must be quick and must not block (one slow handler stalls every other
// connection); hand long work to another thread and answer from state it
// publishes. Handlers may be called concurrently with the thread that owns
// the HttpServer, so whatever they read must be thread-safe.
//
// Lifecycle: construct, Handle() every route, Start() once, Stop() (or just
// destroy). Handle() after Start() and Start() a second time are programming
// errors. Stop() and the destructor must not be called from a handler.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace clusterd {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent, including any query string: "/metrics?x=1"
  std::string body;
  std::string authorization;  // the Authorization header, "" when absent
  std::string peer;           // the client's address: "10.0.0.7:40112", "[::1]:5000"
  // Over TLS: the client certificate (PEM, the leaf) when the client sent one
  // and the context verified it; "" otherwise.
  std::string client_certificate_pem;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  struct Options {
    // Larger request bodies are refused with 413 and the connection closed.
    std::size_t max_body_bytes = 1 << 20;
    // Longest wait for a whole request (also the keep-alive idle time) and
    // for a response write before the connection is dropped. The clock runs
    // from the start of a request, not from its last byte, so a client that
    // trickles a request (slow loris) is cut off as well.
    std::chrono::nanoseconds io_timeout = std::chrono::seconds(30);
    // Most connections open at once. Each costs a file descriptor, which the
    // gRPC server shares: unbounded HTTP connections can starve it. A
    // connection beyond the limit is answered 503 and closed at once (no
    // request is read). 0 means no limit.
    std::size_t max_connections = 256;
    // Most connections open at once from one remote IP address (an
    // IPv4-mapped IPv6 address counts as its IPv4 one), reserved ones
    // included, so that one client cannot take every slot. A connection
    // beyond it is answered 503 and closed at once, like one beyond
    // max_connections, unless there is a reserved share and the address has
    // a connection waiting for a request: then the oldest such one is closed
    // and the new one taken as a reserved connection (reserved_paths only),
    // so that a probe from an address that holds its cap (the kubelet's,
    // shared with host-network pods) still answers, and the address still
    // holds no more than its cap. 0 means no per-peer limit.
    std::size_t max_connections_per_peer = 0;
    // A share of max_connections kept for probes and scrapes. Once
    // max_connections - reserved_connections connections are open, a new one
    // is still accepted (up to max_connections) but "reserved": it may ask
    // only for one of reserved_paths (exact paths, without query); any other
    // path is answered 503 and the connection closed. Its wait for a request
    // is min(io_timeout, reserved_io_timeout), and one remote address may
    // hold at most reserved_connections_per_peer of them (0: only
    // max_connections_per_peer applies), so that neither a slow client nor a
    // single one can sit on the share. No reserved share without
    // reserved_paths or max_connections; at most max_connections - 1 slots
    // are reserved.
    std::vector<std::string> reserved_paths;
    std::size_t reserved_connections = 16;
    std::size_t reserved_connections_per_peer = 4;
    std::chrono::nanoseconds reserved_io_timeout = std::chrono::seconds(5);
    // When set, the server registers <metrics_prefix>_http_connections (gauge),
    // <metrics_prefix>_http_connections_rejected_total,
    // <metrics_prefix>_http_peer_connections_rejected_total,
    // <metrics_prefix>_http_peer_connections_replaced_total,
    // <metrics_prefix>_http_reserved_requests_refused_total and
    // <metrics_prefix>_http_accept_errors_total (counters) here. The registry
    // must outlive the server.
    MetricsRegistry* metrics = nullptr;
    std::string metrics_prefix = "http";
    // Not null: every connection speaks TLS, with the context this returns
    // when the connection is accepted (server thread; a newer one after a
    // certificate rotation: connections keep the one they started with). A
    // client that fails the handshake (plaintext, a certificate the context
    // does not verify, a timeout) is closed without an answer and counted in
    // <metrics_prefix>_http_tls_handshake_failures_total.
    std::function<std::shared_ptr<boost::asio::ssl::context>()> tls;
  };

  HttpServer();
  explicit HttpServer(const Options& options);
  ~HttpServer();  // Calls Stop().
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers `handler` for `method` on exactly `path` (the target up to any
  // '?'), or on every path below it when `path` ends in "/*" ("/api/v1/nodes/*":
  // the longest such prefix wins; the prefix itself is not matched). Unknown
  // paths answer 404; a known path with another method 405.
  // Must be called before Start() (aborts otherwise); registering the same
  // method+path twice replaces the handler.
  void Handle(std::string method, std::string path, Handler handler);

  // Binds and starts serving on "host:port", host a numeric IPv4 address or
  // a bracketed IPv6 one ("0.0.0.0:11253", "127.0.0.1:0", "[::1]:0"); port 0
  // picks a free port (see port()). Returns kInvalidArgument for a malformed
  // address, kUnavailable when the socket cannot be bound or listened on
  // (port in use, address not local), kFailedPrecondition when already
  // started. Never throws.
  Status Start(const std::string& listen_address);

  // The bound port after a successful Start(); 0 before.
  int port() const;

  // Connections open now; connections refused at max_connections, at a
  // per-peer limit (max_connections_per_peer, reserved_connections_per_peer);
  // requests refused because they came over a reserved connection for
  // another path; and accept() failures (EMFILE, ENFILE, ...) so far. Any
  // thread.
  std::size_t open_connections() const;
  uint64_t rejected_connections() const;
  uint64_t peer_rejected_connections() const;
  // Connections closed to make room for a newer one of their address at its
  // per-peer limit (max_connections_per_peer). Any thread.
  uint64_t peer_replaced_connections() const;
  uint64_t reserved_refused_requests() const;
  uint64_t accept_errors() const;
  // TLS handshakes that failed (Options::tls). Any thread.
  uint64_t tls_handshake_failures() const;

  // Stops accepting, closes every connection, joins the server thread.
  // Idempotent; safe to call without Start().
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clusterd
