// The composition root's registries: the actuator kinds and integrations
// this binary is built with, and what the configuration may name from them.
// The rooms below know only the registry classes
// (recovery/actuators/registry.h, engine/integration.h); which entries exist is decided here,
// where every room is linked, so that no lower room links a higher one to
// register it.
#pragma once

#include <string>
#include <vector>

#include "clusterd/config/config.h"

namespace clusterd {

class ActuatorRegistry;
class IntegrationRegistry;

// The shipped actuator kinds, in this order: "none", "exec", "webhook",
// "kubernetes". Built on first use, never changed afterwards; safe to read
// from any thread.
const ActuatorRegistry& BuiltinActuators();

// The shipped integrations: "kubernetes". Built on first use, never changed
// afterwards; safe to read from any thread.
const IntegrationRegistry& BuiltinIntegrations();

// --actuator and --integrations take these names; the actuator's own check
// (e.g. exec needs --actuator-command) comes from its registration.
const ConfigChecks& BuiltinConfigChecks();

// ParseClusterdConfig with BuiltinConfigChecks: what clusterd's main runs.
StatusOr<ClusterdConfig> ParseClusterdFlags(const std::vector<std::string>& args, bool* help);

// --help, naming the built-in actuators and integrations.
std::string ClusterdHelp();

}  // namespace clusterd
