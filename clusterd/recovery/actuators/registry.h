// Which actuators ClusterD can run, by the name --actuator takes. The config
// parser validates names and settings through the registry (given to it as
// ConfigChecks), --help lists its names, and the server creates the
// configured one from it; so a new actuator is one Register call in
// BuiltinActuators() (server/registries.cc, the composition root), with no
// switch to extend elsewhere.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/config/config.h"
#include "clusterd/recovery/actuators/actuator.h"
#include "common/config_util.h"  // JoinNames
#include "common/status.h"

namespace clusterd {

class ActuatorRegistry {
 public:
  // Builds the actuator from the whole config (each kind reads its own
  // settings: actuator_command, actuator_url, ...). Called once, at start.
  using Factory = std::function<StatusOr<std::unique_ptr<Actuator>>(const ClusterdConfig& config)>;
  // Checks, when the flags are parsed, that the settings this kind needs are
  // there; InvalidArgument naming the flag otherwise. May be empty.
  using Validator = std::function<Status(const ClusterdConfig& config)>;

  // Adds a kind. InvalidArgument for an empty name, one already registered,
  // or an empty factory. Not thread-safe: register everything before use.
  Status Register(std::string name, Factory factory, Validator validate = nullptr);

  bool Has(std::string_view name) const;
  // In registration order (the order --help and error messages list them).
  const std::vector<std::string>& Names() const { return names_; }
  // OK when `config.actuator` is registered and its check passes.
  Status Validate(const ClusterdConfig& config) const;
  // The actuator `config.actuator` names; InvalidArgument for an unknown name.
  StatusOr<std::unique_ptr<Actuator>> Create(const ClusterdConfig& config) const;

 private:
  struct Entry {
    Factory factory;
    Validator validate;
  };
  const Entry* Find(std::string_view name) const;

  std::vector<std::string> names_;
  std::vector<Entry> entries_;  // parallel to names_
};

}  // namespace clusterd
