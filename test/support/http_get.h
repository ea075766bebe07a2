// A blocking HTTP GET on loopback for tests (one connection per request),
// and reading a sample out of Prometheus text.
#pragma once

#include <string>

namespace clusterd::testing {

struct HttpResult {
  int status = 0;  // 0: no answer (refused, reset, closed without a response)
  std::string body;
  std::string content_type;
  // HttpsGet: the server's certificate (PEM), or why the handshake failed.
  std::string server_certificate_pem;
  std::string tls_error;
};

// GET `target` from 127.0.0.1:port. `authorization`, when not empty, is sent
// as the Authorization header.
HttpResult HttpGet(int port, const std::string& target, const std::string& authorization = "");

// GET over TLS from 127.0.0.1:port: the server's certificate verified
// against ca_file for the name 127.0.0.1, cert_file/key_file presented when
// set. status 0 when the handshake fails (tls_error says why).
struct HttpTls {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};
HttpResult HttpsGet(int port, const std::string& target, const HttpTls& tls, const std::string& authorization = "");

// The value of an unlabelled sample in Prometheus text, or -1 if absent.
double MetricValue(const std::string& text, const std::string& name);

}  // namespace clusterd::testing
