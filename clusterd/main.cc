// clusterd: the central fault-management service. See docs/architecture.md.
#include <iostream>
#include <string>
#include <vector>

#include "clusterd/config/config.h"
#include "clusterd/ha/replica.h"
#include "clusterd/server/registries.h"
#include "clusterd/server/server.h"
#include "common/fd_limit.h"
#include "common/logging.h"
#include "common/signals.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool help = false;
  auto config = clusterd::ParseClusterdFlags(args, &help);
  if (help) {
    std::cout << clusterd::ClusterdHelp();
    return 0;
  }
  if (!config.ok()) {
    std::cerr << "clusterd: " << config.status().message() << "\n";
    return 2;
  }
  clusterd::SetLogLevel(config->log_level);

  // Every connection costs a descriptor; the soft limit (often 1024) is far
  // below what the hard limit allows.
  if (const clusterd::FdLimit fds = clusterd::RaiseFdLimit(); fds.error.empty()) {
    clusterd::GetLogger("server")->info("file descriptor limit: soft {} (was {}), hard {}", fds.soft, fds.soft_before,
                                        fds.hard);
  } else {
    clusterd::GetLogger("server")->warn("file descriptor limit: soft {}, hard {}; cannot raise: {}", fds.soft, fds.hard,
                                        fds.error);
  }

  clusterd::BlockTerminationSignals();  // before any thread starts

  // High availability (docs/ha.md): one replica of several, on etcd.
  if (!config->ha.etcd_endpoints.empty()) return clusterd::ha::RunReplica(*config, argv);

  clusterd::ClusterdServer server(*config);
  if (clusterd::Status st = server.Start(); !st.ok()) {
    std::cerr << "clusterd: " << st.ToString() << "\n";
    return 1;
  }
  const int sig = clusterd::WaitForTerminationSignal();
  clusterd::GetLogger("server")->info("signal {}: draining", sig);
  server.Shutdown();
  return 0;
}
