// clusterd: the central fault-management service. See docs/architecture.md.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "clusterd/config.h"
#include "clusterd/server/server.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool help = false;
  auto config = clusterd::ParseClusterdConfig(args, &help);
  if (help) {
    std::cout << clusterd::ClusterdUsage();
    return 0;
  }
  if (!config.ok()) {
    std::cerr << "clusterd: " << config.status().message() << "\n";
    return 2;
  }
  clusterd::SetLogLevel(config->log_level);

  // Block the stop signals in every thread; the main thread waits for one.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  clusterd::ClusterdServer server(*config);
  if (clusterd::Status st = server.Start(); !st.ok()) {
    std::cerr << "clusterd: " << st.ToString() << "\n";
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  clusterd::GetLogger("server")->info("signal {}: draining", sig);
  server.Shutdown();
  return 0;
}
