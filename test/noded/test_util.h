// Helpers for NodeD tests: the fixtures directory, and the shared temporary
// directory (test/support/temp_dir.h) under the name the suites use.
#pragma once

#include <string>

#include "test/support/temp_dir.h"

namespace clusterd::noded::testing {

inline std::string FixtureDir(const std::string& name) { return std::string(NODED_FIXTURES_DIR) + "/" + name; }

using clusterd::testing::TempDir;

}  // namespace clusterd::noded::testing
