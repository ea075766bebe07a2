// clusterctl: query and watch ClusterD from the command line. See docs/operate.md.
#include <iostream>
#include <string>
#include <vector>

#include "clusterctl/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return clusterctl::RunClusterctl(args, std::cout, std::cerr);
}
