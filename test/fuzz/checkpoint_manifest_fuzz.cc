// Checkpoint manifests (clusterd/ha/replication/checkpoint.h): a replica that
// rebuilds reads one from a peer's HTTP answer and creates the files it
// names, so any bytes must give a manifest or an InvalidArgument, and an
// accepted manifest names only plain file names (nothing that could leave the
// download directory) and formats back to itself.
//
// Input: the manifest text.
#include <string>
#include <string_view>

#include "clusterd/ha/replication/checkpoint.h"
#include "fuzz_util.h"

using namespace clusterd;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto manifest = replication::ParseManifest(text);
  if (!manifest.ok()) {
    FUZZ_CHECK(manifest.status().code() == StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(!manifest->id.empty() && !manifest->files.empty());
  for (const auto& [name, bytes] : manifest->files) {
    FUZZ_CHECK(!name.empty() && name != "." && name != "..");
    FUZZ_CHECK(name.find('/') == std::string::npos && name.find('\0') == std::string::npos);
  }
  auto again = replication::ParseManifest(replication::FormatManifest(*manifest));
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->id == manifest->id && again->log_index == manifest->log_index &&
             again->revision == manifest->revision && again->files == manifest->files);
  return 0;
}
