// The text of `npu-smi info`: the parser (noded/accel/npu_smi.h) and the
// backend that turns its chips into devices and statuses. The text comes from a
// driver tool whose output format varies by version, so anything must give a
// chip list or an InvalidArgument, never a crash.
#include <set>

#include "fuzz_util.h"
#include "noded/accel/npu_smi.h"

using namespace clusterd;
using namespace clusterd::noded;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::AsView(data, size));
  auto chips = ParseNpuSmiInfo(text);
  if (chips.ok()) {
    // Documented: two chips never share an id.
    std::set<int32_t> ids;
    for (const auto& c : *chips) {
      FUZZ_CHECK(ids.insert(c.id).second);
      (void)NpuSmiHealthRaw(c.health);
      (void)NpuSmiHealthCode(c.health);
    }
  } else {
    FUZZ_CHECK(chips.status().code() == StatusCode::kInvalidArgument);
  }

  // The backend over the same text, as noded polls it.
  NpuSmiBackend backend([&text]() -> StatusOr<std::string> { return text; });
  if (backend.Init().ok()) {
    auto devices = backend.Devices();
    auto status = backend.Poll();
    if (devices.ok() && status.ok()) FUZZ_CHECK(devices->size() == status->size());
  }
  return 0;
}
