// The command table: every clusterctl command, gathered from the resource
// files (clusterctl/resources/). Built once on first use; read-only after.
#pragma once

#include <string>
#include <vector>

#include "clusterctl/command.h"

namespace clusterctl {

// Every command, in the order `clusterctl help` lists them within a verb.
const std::vector<Command>& Commands();

// "get" + "nodes", "describe" + "node", "watch" + "" ... (a get or describe
// resource by any of its names). Returns nullptr for an unknown command.
const Command* FindCommand(const std::string& verb, const std::string& resource);

// The "Commands:" lines of `clusterctl help`: get, then describe, then the
// other verbs, each in table order; `help` last.
std::string CommandsHelp();

// "summary, nodes, ..." after "get what?"; "node NAME, job ID, ..." after "describe what?".
std::string ResourceNames(const std::string& verb);

}  // namespace clusterctl
