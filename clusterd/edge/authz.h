// The one table of who may call what (docs/security.md): every method of
// every service ClusterD serves, with the roles allowed. A method missing
// here is refused for everyone, and test/clusterd/edge/security_test.cc walks every
// method of every registered service through reflection, so a new method
// without an entry fails the tests.
#pragma once

#include <string_view>
#include <vector>

#include "clusterd/auth/roles.h"

namespace clusterd {

struct MethodRule {
  std::string_view method;  // "/clusterd.v1.AdminService/CordonNode"
  RoleMask roles = 0;       // admin is always added
  bool anyone = false;      // health and reflection: no identity needed
};

const std::vector<MethodRule>& MethodRules();
// nullptr when the method is not in the table.
const MethodRule* FindMethodRule(std::string_view method);

}  // namespace clusterd
