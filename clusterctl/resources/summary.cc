// get summary: the cluster in a few lines.
#include <utility>

#include "clusterctl/resources/resources.h"

namespace clusterctl {
namespace {

void PrintSummary(Context& c, const v1::GetSummaryResponse& s) {
  Table head({"REVISION", "OLDEST-REVISION", "CONNECTED-AGENTS", "ACTIVE-FAULTS"});
  head.AddRow({std::to_string(s.revision()), std::to_string(s.compacted_revision() + 1),
               std::to_string(s.connected_agents()), std::to_string(s.active_faults())});
  head.Print(c.out);
  c.out << "\n";
  Table health({"", "TOTAL", "HEALTHY", "SUB_HEALTHY", "UNHEALTHY", "UNKNOWN"});
  for (const auto& [name, h] :
       {std::pair<const char*, const v1::HealthCounts*>{"NODES", &s.nodes()}, {"DEVICES", &s.devices()}}) {
    health.AddRow({name, std::to_string(h->total()), std::to_string(h->healthy()), std::to_string(h->sub_healthy()),
                   std::to_string(h->unhealthy()), std::to_string(h->unknown())});
  }
  health.Print(c.out);
  if (!s.active_faults_by_level().empty()) {
    c.out << "\n";
    Table levels({"LEVEL", "ACTIVE-FAULTS"});
    for (int l = v1::FAULT_LEVEL_SEPARATE; l >= v1::FAULT_LEVEL_UNSPECIFIED; --l) {
      auto level = static_cast<v1::FaultLevel>(l);
      auto it = s.active_faults_by_level().find(v1::FaultLevel_Name(level));
      if (it != s.active_faults_by_level().end()) levels.AddRow({ShortLevel(level), std::to_string(it->second)});
    }
    levels.Print(c.out);
  }
}

}  // namespace

std::vector<Command> SummaryCommands() {
  return {ShowCommand<v1::GetSummaryResponse>(
      {"summary"}, "GetSummary", &ClusterClient::GetSummary, PrintSummary,
      "  get summary                         cluster health counts, active faults per level, revision\n")};
}

}  // namespace clusterctl
