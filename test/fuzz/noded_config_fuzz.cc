// NodeD's JSON config file (noded/server/config.h ParseNodedConfig with
// --config), the file an operator or the Helm chart's ConfigMap provides.
// Anything must give a config or an InvalidArgument, never a crash.
#include "fuzz_util.h"
#include "noded/server/config.h"

using namespace clusterd;
using namespace clusterd::noded;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::TempDir() + "/noded.json";
  fuzz::WriteFile(path, fuzz::AsView(data, size));
  bool help = false;
  auto cfg = ParseNodedConfig({"--config", path}, &help);
  FUZZ_CHECK(!help);
  if (!cfg.ok()) {
    FUZZ_CHECK(cfg.status().code() == StatusCode::kInvalidArgument);
  } else {
    FUZZ_CHECK(!cfg->node_name.empty());
  }
  return 0;
}
