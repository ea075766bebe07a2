#include "clusterd/server/registries.h"

#include "clusterd/actuator_registry.h"
#include "clusterd/integration.h"

namespace clusterd {

const ConfigChecks& BuiltinConfigChecks() {
  static const ConfigChecks checks{
      .actuators = BuiltinActuators().Names(),
      .integrations = BuiltinIntegrations().Names(),
      .validate_actuator = [](const ClusterdConfig& cfg) { return BuiltinActuators().Validate(cfg); },
  };
  return checks;
}

StatusOr<ClusterdConfig> ParseClusterdFlags(const std::vector<std::string>& args, bool* help) {
  return ParseClusterdConfig(args, BuiltinConfigChecks(), help);
}

std::string ClusterdHelp() { return ClusterdUsage(BuiltinConfigChecks()); }

}  // namespace clusterd
