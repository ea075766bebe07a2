// NodeD's rules file (noded/rules/rules_config.h), read the way noded reads
// it: LoadRulesFile on a file holding the input, over the built-in rules.
// The file is operator input: anything must give a rule set that validates or
// an InvalidArgument naming the problem, never a crash or an exception.
#include "fuzz_util.h"
#include "noded/rules/rules_config.h"

using namespace clusterd;
using namespace clusterd::noded;

namespace {
const RulesConfig& Base() {
  static const RulesConfig base = DefaultRulesConfig();
  return base;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::TempDir() + "/rules.json";
  fuzz::WriteFile(path, fuzz::AsView(data, size));
  auto rules = LoadRulesFile(path, Base());
  if (rules.ok()) {
    // What loads is what the engine will run: it must pass validation again.
    FUZZ_CHECK(ValidateRulesConfig(*rules).ok());
  } else {
    FUZZ_CHECK(rules.status().code() == StatusCode::kInvalidArgument);
    FUZZ_CHECK(!rules.status().message().empty());
  }
  return 0;
}
