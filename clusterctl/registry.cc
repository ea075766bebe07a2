#include "clusterctl/registry.h"

#include "clusterctl/resources/resources.h"

namespace clusterctl {

const std::vector<Command>& Commands() {
  static const std::vector<Command> kCommands = [] {
    // Within each verb, `clusterctl help` and "get what?" follow this order.
    std::vector<Command> all;
    for (auto group :
         {SummaryCommands, NodeCommands, WatchCommands, FaultCommands, JobCommands, RecoveryCommands,
          ValidationCommands, DomainCommands, MindClusterCommands, AdminCommands, DoctorCommands, VersionCommands}) {
      for (auto& cmd : group()) all.push_back(std::move(cmd));
    }
    return all;
  }();
  return kCommands;
}

const Command* FindCommand(const std::string& verb, const std::string& resource) {
  for (const auto& cmd : Commands()) {
    if (cmd.verb != verb) continue;
    if (cmd.resources.empty()) return &cmd;
    for (const auto& name : cmd.resources) {
      if (name == resource) return &cmd;
    }
  }
  return nullptr;
}

std::string CommandsHelp() {
  std::string out;
  for (const auto& cmd : Commands()) {
    if (cmd.verb == "get") out += cmd.help;
  }
  for (const auto& cmd : Commands()) {
    if (cmd.verb == "describe") out += cmd.help;
  }
  for (const auto& cmd : Commands()) {
    if (cmd.verb != "get" && cmd.verb != "describe") out += cmd.help;
  }
  return out + "  help                                this help\n";
}

std::string ResourceNames(const std::string& verb) {
  std::string out;
  for (const auto& cmd : Commands()) {
    if (cmd.verb != verb || cmd.resources.empty()) continue;
    if (!out.empty()) out += ", ";
    out += cmd.resources[0];
    if (verb == "describe") out += " " + cmd.operand;
  }
  return out;
}

}  // namespace clusterctl
