#include "clusterd/engine/writer_rules.h"

#include <map>
#include <optional>
#include <string>

#include "clusterd/state/evidence.h"
#include "clusterd/state/pingmesh_rule.h"
#include "clusterd/state/incidents.h"
#include "clusterd/state/rules.h"
#include "clusterd/state/validation_rule.h"

namespace clusterd {

void WriterRules::AttachTo(ClusterState* state) const {
  for (const auto& rule : policies) state->Attach(rule.get());
}

std::vector<WriterRule*> WriterRules::Ordered(WriterRule* recoveries) const {
  std::vector<WriterRule*> out;
  for (const auto& rule : policies) out.push_back(rule.get());
  if (recoveries != nullptr) out.push_back(recoveries);
  return out;
}

StatusOr<WriterRules> MakeWriterRules(const ClusterdConfig& cfg) {
  SeparationPolicy separation;
  separation.enabled = cfg.separation_enabled;
  separation.threshold = cfg.separation_threshold;
  separation.window = cfg.separation_window;
  separation.settle = cfg.separation_settle;
  separation.release_after =
      cfg.separation_release_after.count() ? std::optional(cfg.separation_release_after) : std::nullopt;
  CLUSTERD_RETURN_IF_ERROR(ValidateSeparationPolicy(separation));
  std::map<std::string, v1::FaultLevel> drift_levels;
  for (const std::string& e : cfg.chain_drift_levels) {
    auto entry = ParseChainDriftLevel(e);
    if (!entry.ok()) return entry.status();
    drift_levels[entry->first] = entry->second;
  }
  WriterRules rules;
  rules.policies.push_back(std::make_unique<AutoClearRule>());
  rules.policies.push_back(std::make_unique<SeparationRule>(separation));
  rules.policies.push_back(std::make_unique<ChainDriftRule>(cfg.chain_pool_label, std::move(drift_levels)));
  rules.policies.push_back(
      std::make_unique<RepeatOffenderRule>(cfg.repeat_offender_recoveries, cfg.repeat_offender_window));
  ValidationOptions validation;
  validation.enabled = cfg.validation_enabled;
  validation.max_per_node = cfg.validation_max_per_node;
  validation.max_in_flight = cfg.validation_max_in_flight;
  validation.timeout = cfg.validation_timeout;
  validation.stable_window = cfg.validation_stable_window;
  validation.commands = cfg.validation_commands;
  validation.flap_limit = cfg.validation_flap_limit;
  validation.flap_window = cfg.validation_flap_window;
  validation.retention = cfg.validation_retention_count;
  CLUSTERD_RETURN_IF_ERROR(ValidateValidationOptions(validation));
  rules.policies.push_back(std::make_unique<ValidationRule>(validation));
  // Empty: the built-in levels; "none": no domains.
  const bool no_domains = cfg.domain_levels.size() == 1 && cfg.domain_levels[0] == "none";
  auto domains = DomainModel::Make(no_domains                  ? std::vector<std::string>()
                                   : cfg.domain_levels.empty() ? DefaultDomainLevels()
                                                               : cfg.domain_levels);
  if (!domains.ok()) return domains.status();
  if (cfg.pingmesh_enabled) {
    PingmeshPolicy pingmesh;
    pingmesh.interval = cfg.pingmesh_interval;
    pingmesh.attempts = cfg.pingmesh_attempts;
    pingmesh.timeout = cfg.pingmesh_probe_timeout;
    pingmesh.limits.peers_per_node = cfg.pingmesh_peers_per_node;
    pingmesh.limits.max_probes_per_round = cfg.pingmesh_max_probes_per_round;
    pingmesh.window = cfg.pingmesh_window;
    pingmesh.raise_after = cfg.pingmesh_raise_after;
    pingmesh.clear_after = cfg.pingmesh_clear_after;
    pingmesh.suspect_probes = cfg.pingmesh_suspect_probes;
    pingmesh.max_suspects = cfg.pingmesh_max_suspects;
    CLUSTERD_RETURN_IF_ERROR(ValidatePingmeshPolicy(pingmesh));
    rules.policies.push_back(std::make_unique<PingmeshRule>(pingmesh, ModelDomains(*domains)));
  }
  IncidentPolicy incidents;
  incidents.enabled = cfg.incidents_enabled;
  incidents.window = cfg.incident_window;
  incidents.min_nodes = cfg.incident_min_nodes;
  incidents.min_devices = cfg.incident_min_devices;
  incidents.isolate_percent = cfg.incident_isolate_percent;
  incidents.max_isolated_domains = cfg.incident_max_isolated_domains;
  incidents.max_isolated_node_percent = cfg.max_isolated_node_percent;
  CLUSTERD_RETURN_IF_ERROR(ValidateIncidentPolicy(incidents));
  rules.policies.push_back(std::make_unique<IncidentRule>(*domains, incidents));
  // After the incidents: it asks the members of the ones that changed.
  EvidenceOptions evidence;
  evidence.enabled = cfg.evidence_enabled;
  evidence.max_bundle_bytes = cfg.evidence_max_bundle_bytes;
  evidence.max_total_bytes = cfg.evidence_max_total_bytes;
  evidence.max_age = cfg.evidence_max_age;
  evidence.timeout = cfg.evidence_timeout;
  evidence.max_in_flight = cfg.evidence_max_in_flight;
  evidence.log_before = cfg.evidence_log_before;
  CLUSTERD_RETURN_IF_ERROR(ValidateEvidenceOptions(evidence));
  rules.policies.push_back(std::make_unique<EvidenceRule>(evidence));
  return rules;
}

}  // namespace clusterd
