// ClusterD's JSON config file (clusterd/config/config.h ApplyClusterdConfigJson): the
// --config file an operator (or a Helm values file) provides. Anything must
// apply completely or give an InvalidArgument and change nothing.
#include "clusterd/config/config.h"
#include "fuzz_util.h"

using namespace clusterd;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

namespace {
// The fields a failed apply must leave alone (a sample of every kind of setter:
// strings, durations, levels, integers).
bool SameAsDefault(const ClusterdConfig& c) {
  const ClusterdConfig d;
  return c.listen == d.listen && c.http_listen == d.http_listen && c.data_dir == d.data_dir &&
         c.node_grace == d.node_grace && c.default_level == d.default_level &&
         c.retention_events == d.retention_events && c.retention_age == d.retention_age &&
         c.max_message_bytes == d.max_message_bytes && c.max_streams == d.max_streams && c.log_level == d.log_level &&
         c.actuator == d.actuator && c.actuator_url == d.actuator_url &&
         c.max_concurrent_recoveries == d.max_concurrent_recoveries;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ClusterdConfig cfg;
  Status st = ApplyClusterdConfigJson(fuzz::AsView(data, size), "config file fuzz.json", &cfg);
  if (!st.ok()) {
    FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
    FUZZ_CHECK(SameAsDefault(cfg));
  }
  return 0;
}
