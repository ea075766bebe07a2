// Roles and what decides them (docs/security.md). Domain-level: the gRPC edge
// (edge/authz.h) maps methods to roles; this file only names the roles and
// derives a principal's roles and scopes from its user name and groups.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/auth/principal.h"
#include "common/status.h"

namespace clusterd {

enum class Role : uint8_t {
  kViewer = 0,    // queries and Watch
  kReporter = 1,  // FaultService.Report under its own reporter name
  kOperator = 2,  // cordon, clear faults, jobs (and what a viewer may)
  kAdmin = 3,     // everything
  kJobAgent = 4,  // JobService.Attach for its own job
  kAgent = 5,     // NodeAgentService.Connect for its own node
};
inline constexpr int kRoleCount = 6;

using RoleMask = uint32_t;
constexpr RoleMask RoleBit(Role r) { return RoleMask{1} << static_cast<int>(r); }
inline constexpr RoleMask kAllRoles = (RoleMask{1} << kRoleCount) - 1;

const char* RoleName(Role role);
std::optional<Role> ParseRole(std::string_view name);
// "viewer,operator" for a mask ("none" when empty).
std::string RoleMaskNames(RoleMask mask);

// Prefixes of user names that carry their own scope: "system:node:<node>"
// is the NodeD agent of <node>, "job:<id>" the recovery agent of job <id>.
inline constexpr std::string_view kNodeUserPrefix = "system:node:";
inline constexpr std::string_view kJobUserPrefix = "job:";
// Groups "clusterd:<role>" grant <role>.
inline constexpr std::string_view kRoleGroupPrefix = "clusterd:";

// "ROLE=user:NAME" or "ROLE=group:NAME".
struct RoleBinding {
  Role role;
  bool group = false;
  std::string name;
};
StatusOr<RoleBinding> ParseRoleBinding(std::string_view text);
inline Status CheckRoleBinding(std::string_view text) { return ParseRoleBinding(text).status(); }

// Fills p->roles, p->node and p->job from p->name and p->groups:
// role groups, the bindings, and the scoped user-name forms above.
void AssignRoles(const std::vector<RoleBinding>& bindings, Principal* p);

// The reporter name a reporter principal may report under: its user name, or
// <sa> for a service account "system:serviceaccount:<ns>:<sa>".
std::string ReporterScope(const Principal& p);

}  // namespace clusterd
