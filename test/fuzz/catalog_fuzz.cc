// The fault catalog override file (clusterd/state/catalog.h Catalog::MergeJson),
// merged over the built-in catalog as clusterd does at start. Anything must
// merge completely or give an InvalidArgument and change nothing.
#include "clusterd/state/catalog.h"
#include "fuzz_util.h"

using namespace clusterd;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Catalog base = Catalog::Default();
  Catalog catalog = base;
  const std::string_view text = fuzz::AsView(data, size);
  Status st = catalog.MergeJson(text, "catalog file fuzz.json");
  if (!st.ok()) {
    FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
    FUZZ_CHECK(catalog.size() == base.size());
    FUZZ_CHECK(catalog.default_level() == base.default_level());
  } else {
    FUZZ_CHECK(catalog.size() >= base.size());
    FUZZ_CHECK(catalog.Contains("HEARTBEAT_LOST"));
  }
  // Lookups of arbitrary codes (the input itself, as a reporter could send it).
  const v1::FaultLevel level = catalog.Resolve(text, v1::FAULT_LEVEL_UNSPECIFIED);
  FUZZ_CHECK(v1::FaultLevel_IsValid(level) && level != v1::FAULT_LEVEL_UNSPECIFIED);
  return 0;
}
