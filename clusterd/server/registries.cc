#include "clusterd/server/registries.h"

#include <cstdlib>

#include "clusterd/engine/integration.h"
#include "clusterd/k8s/actuator.h"
#include "clusterd/k8s/integration.h"
#include "clusterd/mindcluster/k8s/job_summaries.h"
#include "clusterd/mindcluster/k8s/stack.h"
#include "clusterd/recovery/actuators/registry.h"

namespace clusterd {

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
            o.ca_file = c.actuator_ca_file;
            o.cert_file = c.actuator_cert_file;
            o.key_file = c.actuator_key_file;
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

const IntegrationRegistry& BuiltinIntegrations() {
  static const IntegrationRegistry registry = [] {
    IntegrationRegistry r;
    // Jobs from pods and PodGroups, Node readiness, Node conditions
    // (clusterd/k8s/integration.h).
    Status st = r.Register("kubernetes", [](const ClusterdConfig& c) { return MakeKubernetesIntegration(c); });
    if (!st.ok()) std::abort();
    // The device plugin's ConfigMaps in, Volcano's cluster-info ConfigMaps
    // out (clusterd/mindcluster/k8s/stack.h).
    st = r.Register("mindcluster", [](const ClusterdConfig& c) { return MakeMindClusterStackIntegration(c); });
    // MindCluster's job-summary-<job> ConfigMaps (clusterd/mindcluster/k8s/job_summaries.h).
    if (st.ok())
      st = r.Register("mindcluster-jobs", [](const ClusterdConfig& c) { return MakeJobSummaryIntegration(c); });
    if (!st.ok()) std::abort();
    return r;
  }();
  return registry;
}

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
