#include "clusterd/actuator_registry.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "clusterd/kubernetes.h"

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

const ActuatorRegistry& BuiltinActuators() {
  static const ActuatorRegistry registry = [] {
    ActuatorRegistry r;
    // Registering cannot fail here (fixed, distinct names); a failure would
    // be a programming error caught by the registry test.
    Status st = r.Register(
        "none", [](const ClusterdConfig&) -> StatusOr<std::unique_ptr<Actuator>> { return MakeNoneActuator(); });
    if (st.ok()) {
      st = r.Register(
          "exec",
          [](const ClusterdConfig& c) {
            ExecActuatorOptions o;
            o.command = c.actuator_command;
            return MakeExecActuator(std::move(o));
          },
          [](const ClusterdConfig& c) {
            if (c.actuator_command.empty()) return InvalidArgument("--actuator-command: required with --actuator exec");
            return Status::Ok();
          });
    }
    if (st.ok()) {
      st = r.Register(
          "webhook",
          [](const ClusterdConfig& c) {
            WebhookActuatorOptions o;
            o.url = c.actuator_url;
            return MakeWebhookActuator(o);
          },
          [](const ClusterdConfig& c) {
            if (c.actuator_url.empty()) return InvalidArgument("--actuator-url: required with --actuator webhook");
            return Status::Ok();
          });
    }
    if (st.ok()) {
      // The API server from --kubeconfig or the pod's service account
      // (docs/kubernetes.md); reached at start, so a bad kubeconfig fails it.
      st = r.Register("kubernetes", [](const ClusterdConfig& c) { return MakeKubernetesActuator(c); });
    }
    if (!st.ok()) std::abort();
    return r;
  }();
  return registry;
}

}  // namespace clusterd
