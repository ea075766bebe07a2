// A blocking HTTP GET on loopback for tests (one connection per request),
// and reading a sample out of Prometheus text.
#pragma once

#include <string>

namespace clusterd::testing {

struct HttpResult {
  int status = 0;  // 0: no answer (refused, reset, closed without a response)
  std::string body;
  std::string content_type;
};

// GET `target` from 127.0.0.1:port. `authorization`, when not empty, is sent
// as the Authorization header.
HttpResult HttpGet(int port, const std::string& target, const std::string& authorization = "");

// The value of an unlabelled sample in Prometheus text, or -1 if absent.
double MetricValue(const std::string& text, const std::string& name);

}  // namespace clusterd::testing
