#include "clusterd/recovery/actuators/registry.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace clusterd {

Status ActuatorRegistry::Register(std::string name, Factory factory, Validator validate) {
  if (name.empty()) return InvalidArgument("actuator registry: empty name");
  if (!factory) return InvalidArgument("actuator registry: " + name + " has no factory");
  if (Has(name)) return InvalidArgument("actuator registry: " + name + " is already registered");
  names_.push_back(std::move(name));
  entries_.push_back({std::move(factory), std::move(validate)});
  return Status::Ok();
}

const ActuatorRegistry::Entry* ActuatorRegistry::Find(std::string_view name) const {
  auto it = std::find(names_.begin(), names_.end(), name);
  if (it == names_.end()) return nullptr;
  return &entries_[static_cast<size_t>(it - names_.begin())];
}

bool ActuatorRegistry::Has(std::string_view name) const { return Find(name) != nullptr; }

Status ActuatorRegistry::Validate(const ClusterdConfig& config) const {
  const Entry* entry = Find(config.actuator);
  if (!entry) return InvalidArgument("actuator: \"" + config.actuator + "\" is not one of " + JoinNames(names_));
  return entry->validate ? entry->validate(config) : Status::Ok();
}

StatusOr<std::unique_ptr<Actuator>> ActuatorRegistry::Create(const ClusterdConfig& config) const {
  const Entry* entry = Find(config.actuator);
  if (!entry) return InvalidArgument("actuator: \"" + config.actuator + "\" is not one of " + JoinNames(names_));
  return entry->factory(config);
}

}  // namespace clusterd
