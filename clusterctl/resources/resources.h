// The commands of each resource, one file each; clusterctl/registry.cc lists
// them. A new resource is a new file here that returns its Commands (most of
// them from GetCommand/DescribeCommand in clusterctl/resource.h) and one line
// in the registry.
#pragma once

#include <vector>

#include "clusterctl/command.h"
#include "clusterctl/resource.h"

namespace clusterctl {

std::vector<Command> SummaryCommands();      // get summary
std::vector<Command> NodeCommands();         // get nodes, describe node
std::vector<Command> WatchCommands();        // watch
std::vector<Command> FaultCommands();        // get faults, report-fault, clear-fault
std::vector<Command> JobCommands();          // get jobs, describe job, create-job, delete-job
std::vector<Command> RecoveryCommands();     // get recoveries, describe recovery
std::vector<Command> ValidationCommands();   // get validations
std::vector<Command> DomainCommands();       // get domains, get incidents, describe incident
std::vector<Command> MindClusterCommands();  // describe mindcluster
std::vector<Command> AdminCommands();        // get admin, cordon, uncordon, pause, resume, dry-run
std::vector<Command> DoctorCommands();       // doctor
std::vector<Command> VersionCommands();      // version

// A fault table, with or without the NODE column (describe node shows its own
// faults); the MESSAGE is cut to 60 characters unless wide.
const Columns<v1::Fault>& FaultColumns(bool with_node);

// A validation table, and a node's validation history with the failed
// checks' evidence (describe node; nothing when there is none).
const Columns<v1::Validation>& ValidationColumns();
void PrintValidationHistory(Context& c, const std::string& node);

}  // namespace clusterctl
