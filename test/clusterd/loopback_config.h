// The configuration of an in-process ClusterD for tests: gRPC and HTTP on
// loopback port 0, plaintext, its data under data_dir, warnings only.
#pragma once

#include <string>

#include "clusterd/config/config.h"

namespace clusterd::testing {

inline ClusterdConfig LoopbackConfig(const std::string& data_dir) {
  ClusterdConfig cfg;
  cfg.listen = "127.0.0.1:0";
  cfg.http_listen = "127.0.0.1:0";
  cfg.data_dir = data_dir;
  cfg.log_level = "warn";
  // Plaintext: the suites that are not about security (security_test.cc
  // starts TLS servers of its own).
  cfg.insecure = true;
  return cfg;
}

}  // namespace clusterd::testing
