// noded: the per-node agent. See docs/noded.md.
#include <iostream>
#include <string>
#include <vector>

#include "common/fd_limit.h"
#include "common/logging.h"
#include "common/signals.h"
#include "noded/server/config.h"
#include "noded/server/noded_server.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool help = false;
  auto config = clusterd::noded::ParseNodedConfig(args, &help);
  if (help) {
    std::cout << clusterd::noded::NodedUsage();
    return 0;
  }
  if (!config.ok()) {
    std::cerr << "noded: " << config.status().message() << "\n";
    return 2;
  }
  clusterd::SetLogLevel(config->log_level);
  if (config->probe) return clusterd::noded::RunProbe(*config, std::cout);

  // Every connection costs a descriptor; the soft limit (often 1024) is far
  // below what the hard limit allows.
  if (const clusterd::FdLimit fds = clusterd::RaiseFdLimit(); fds.error.empty()) {
    clusterd::GetLogger("noded")->info("file descriptor limit: soft {} (was {}), hard {}", fds.soft, fds.soft_before,
                                       fds.hard);
  } else {
    clusterd::GetLogger("noded")->warn("file descriptor limit: soft {}, hard {}; cannot raise: {}", fds.soft, fds.hard,
                                       fds.error);
  }

  clusterd::BlockTerminationSignals();  // before any thread starts

  clusterd::noded::NodedServer server(*config);
  if (clusterd::Status st = server.Start(); !st.ok()) {
    std::cerr << "noded: " << st.ToString() << "\n";
    return 1;
  }
  const int sig = clusterd::WaitForTerminationSignal();
  clusterd::GetLogger("noded")->info("signal {}: stopping", sig);
  server.Shutdown();
  return 0;
}
