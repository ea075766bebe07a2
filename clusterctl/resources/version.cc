// version: the client's own version (no call to the server).
#include "clusterctl/resources/resources.h"

#ifndef CLUSTERCTL_VERSION
#define CLUSTERCTL_VERSION "dev"
#endif

namespace clusterctl {
namespace {

int Version(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  if (c.json()) {
    c.out << "{\"client_version\": \"" << CLUSTERCTL_VERSION << "\"}\n";
  } else {
    c.out << "clusterctl " << CLUSTERCTL_VERSION << "\n";
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> VersionCommands() {
  return {Command{"version", {}, "", {}, Version, "  version                             client version\n"}};
}

}  // namespace clusterctl
