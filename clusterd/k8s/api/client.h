// A small Kubernetes API client: HTTPS (Boost.Beast + OpenSSL) with bearer
// tokens or client certificates, JSON in and out (nlohmann::json), and
// streaming GETs for watches. No packaged C++ client exists on Debian 12, and
// ClusterD needs only a handful of verbs: list/watch, get, patch, create,
// delete, and the eviction subresource.
//
// Each call opens its own TLS connection and runs on the calling thread with
// a deadline; nothing is shared between calls but the immutable TLS settings
// and the token, so a Client is thread-safe. The API server's answers are
// untrusted input: sizes are bounded, parse errors become Status values, and
// nothing here throws.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace clusterd::k8s {

// Where the API server is and how to prove who we are (kubeconfig.h builds
// one from a kubeconfig file or from the in-cluster service account).
struct ClientConfig {
  std::string host;  // DNS name or IP address
  std::string port = "443";
  // PEM bundle the server certificate must chain to. Empty: the system's
  // default CA paths.
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;
  // Name the server certificate must carry (default: host). IP addresses are
  // checked against the certificate's IP SANs.
  std::string tls_server_name;
  // Bearer token: a fixed one, or a file read again whenever it changes
  // (projected service-account tokens are rotated under a running process).
  std::string token;
  std::string token_file;
  // Client certificate and key (PEM), for kubeconfigs that use them.
  std::string client_cert_pem;
  std::string client_key_pem;
  std::chrono::milliseconds request_timeout{30'000};
  // Longest answer accepted for a plain request (lists are paged well below).
  size_t max_response_bytes = 64u << 20;
  // Longest line of a watch stream (one event, one object).
  size_t max_line_bytes = 16u << 20;
  std::string user_agent = "clusterd";
};

struct Response {
  int status = 0;
  std::string body;
  std::string retry_after;  // the Retry-After header, when sent (429, 503)
};

// Maps an HTTP answer to a Status: 2xx OK; 400/422 InvalidArgument; 401
// Unauthenticated-as-PermissionDenied; 403 PermissionDenied; 404 NotFound;
// 409 Aborted (conflict) or AlreadyExists (reason AlreadyExists); 410
// OutOfRange (expired resourceVersion); 429 ResourceExhausted; 5xx and
// anything else Unavailable. The message carries the API server's own Status
// message when the body is one.
Status ApiStatus(const Response& response);

enum class PatchType {
  kMerge,           // application/merge-patch+json
  kStrategicMerge,  // application/strategic-merge-patch+json (built-in kinds only)
  kJson,            // application/json-patch+json
};

// Cancels a Stream from another thread. Reusable: Reset() before the next
// Stream. Thread-safe.
class StreamCancel {
 public:
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }
  void Reset() { cancelled_ = false; }

  // For implementations of ApiClient::Stream: how to end the stream in
  // progress (run by Cancel, under this object's lock, so it must not call
  // back into it); Detach before Stream returns.
  void Attach(std::function<void()> cancel);
  void Detach();

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::function<void()> cancel_;
};

using LineSink = std::function<bool(std::string_view line)>;

// What ClusterD uses of an API server: one request (Do) and one streaming GET
// (Stream). The JSON verbs are built here on Do, once, so every
// implementation answers them alike (ApiStatus for a non-2xx answer). Client
// is the real one (HTTPS); tests use an in-memory API server
// (test/support/fakes/fake_k8s_client.h). Implementations are thread-safe.
class ApiClient {
 public:
  virtual ~ApiClient() = default;

  // One request; the answer whatever its HTTP status. Unavailable when the
  // server cannot be reached or the connection breaks, DeadlineExceeded at
  // the request's deadline, ResourceExhausted for an answer over the size
  // limit. An empty content_type with a body means application/json.
  virtual StatusOr<Response> Do(std::string_view method, std::string_view target, std::string_view body = {},
                                std::string_view content_type = {}) const = 0;

  // A streaming GET (a watch): calls on_line with each newline-terminated
  // line of the answer, in order, on this thread. Returns OK when the server
  // ends the answer or on_line returns false; Cancelled after cancel->Cancel();
  // DeadlineExceeded when nothing arrives for idle_timeout; ApiStatus of a
  // non-200 answer; Unavailable when the connection breaks.
  virtual Status Stream(std::string_view target, std::chrono::milliseconds idle_timeout, const LineSink& on_line,
                        StreamCancel* cancel = nullptr) const = 0;

  // JSON verbs: the parsed answer of a 2xx, ApiStatus otherwise.
  StatusOr<nlohmann::json> Get(std::string_view target) const;
  StatusOr<nlohmann::json> Post(std::string_view target, const nlohmann::json& body) const;
  StatusOr<nlohmann::json> Put(std::string_view target, const nlohmann::json& body) const;
  StatusOr<nlohmann::json> Patch(std::string_view target, const nlohmann::json& body, PatchType type) const;
  StatusOr<nlohmann::json> Delete(std::string_view target, const nlohmann::json& body = nullptr) const;
};

// The API server over HTTPS.
class Client final : public ApiClient {
 public:
  // InvalidArgument when the TLS material does not load.
  static StatusOr<std::unique_ptr<Client>> Create(ClientConfig config);
  ~Client() override;

  // The deadline is request_timeout; the size limit max_response_bytes
  // (max_line_bytes for one line of a Stream). The defaults are ApiClient's.
  StatusOr<Response> Do(std::string_view method, std::string_view target, std::string_view body = {},
                        std::string_view content_type = {}) const override;
  Status Stream(std::string_view target, std::chrono::milliseconds idle_timeout, const LineSink& on_line,
                StreamCancel* cancel = nullptr) const override;

  const ClientConfig& config() const { return config_; }

 private:
  struct Tls;
  explicit Client(ClientConfig config);
  std::string Token() const;

  ClientConfig config_;
  std::unique_ptr<Tls> tls_;
  mutable std::mutex token_mu_;
  mutable std::string token_cache_;
  mutable std::chrono::steady_clock::time_point token_read_{};
  mutable int64_t token_mtime_ = -1;
};

// "a/b c" -> "a%2Fb%20c": for names and selectors placed in a URL.
std::string UrlEncode(std::string_view s);

// A request body: compact JSON, invalid UTF-8 in strings replaced (never throws).
std::string JsonText(const nlohmann::json& value);

// A Retry-After header in delta-seconds ("3"); nullopt when absent or not a
// number of seconds (an HTTP date, garbage, more than a day).
std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view header);

}  // namespace clusterd::k8s
