// A small synchronous HTTP/1.1 client (Boost.Beast): one request on a
// connection of its own, everything (resolve, connect, send, answer) within
// one deadline, the answer's body capped. For the webhook actuator and the
// replicas' checkpoint transfer (docs/ha.md); not a general client: no
// redirects, no keep-alive. HTTPS when given a TLS context.
//
// Thread contract: none (each call has its own io_context).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace clusterd {

struct HttpClientRequest {
  std::string method = "GET";
  std::string host;  // a name or an address, without brackets
  std::string port;  // "80", "8080"
  // The Host header; host:port when empty.
  std::string host_header;
  std::string target = "/";  // path and query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Not null: HTTPS with this client context (MakeTlsClientContext: what it
  // verifies, which certificate it presents). The host name is sent as SNI.
  std::shared_ptr<boost::asio::ssl::context> tls;
  // With tls: the name the server certificate must carry ("" = the chain is
  // verified, by the context, but not the name).
  std::string tls_verify_host;
};

struct HttpClientAnswer {
  // false: no answer (failed_at and error say why); the fields below are unset.
  bool answered = false;
  bool timed_out = false;
  const char* failed_at = "";  // "resolving the host", "connecting", ...
  std::string error;
  int status = 0;
  std::string reason;      // as sent, or the standard phrase
  std::string body;        // at most max_body bytes
  bool truncated = false;  // the body was longer than max_body
};

HttpClientAnswer HttpCall(const HttpClientRequest& request, std::chrono::steady_clock::time_point deadline,
                          std::size_t max_body);

// Splits "host:port" or "[v6]:port" (the port is required); false when it
// is not one.
bool SplitHostPort(const std::string& address, std::string* host, std::string* port);

}  // namespace clusterd
