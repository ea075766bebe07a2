#include "clusterd/auth/roles.h"

namespace clusterd {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kReporter: return "reporter";
    case Role::kOperator: return "operator";
    case Role::kAdmin: return "admin";
    case Role::kJobAgent: return "job-agent";
    case Role::kAgent: return "agent";
  }
  return "unknown";
}

std::optional<Role> ParseRole(std::string_view name) {
  for (int i = 0; i < kRoleCount; ++i) {
    auto role = static_cast<Role>(i);
    if (name == RoleName(role)) return role;
  }
  return std::nullopt;
}

std::string RoleMaskNames(RoleMask mask) {
  std::string out;
  for (int i = 0; i < kRoleCount; ++i) {
    if ((mask & RoleBit(static_cast<Role>(i))) == 0) continue;
    if (!out.empty()) out += ",";
    out += RoleName(static_cast<Role>(i));
  }
  return out.empty() ? "none" : out;
}

StatusOr<RoleBinding> ParseRoleBinding(std::string_view text) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos)
    return InvalidArgument("\"" + std::string(text) + "\" is not ROLE=user:NAME or ROLE=group:NAME");
  auto role = ParseRole(text.substr(0, eq));
  if (!role) {
    return InvalidArgument("\"" + std::string(text) +
                           "\": role is not one of viewer, reporter, operator, admin, job-agent, agent");
  }
  std::string_view subject = text.substr(eq + 1);
  RoleBinding b{*role, false, ""};
  if (subject.rfind("user:", 0) == 0) {
    b.name = std::string(subject.substr(5));
  } else if (subject.rfind("group:", 0) == 0) {
    b.group = true;
    b.name = std::string(subject.substr(6));
  } else {
    return InvalidArgument("\"" + std::string(text) + "\": subject is not user:NAME or group:NAME");
  }
  if (b.name.empty()) return InvalidArgument("\"" + std::string(text) + "\": empty name");
  // A bare agent or job-agent role has no scope to act in; those come only
  // from the scoped user names.
  if (b.role == Role::kAgent || b.role == Role::kJobAgent) {
    return InvalidArgument("\"" + std::string(text) + "\": " + RoleName(b.role) +
                           " comes from the user name (system:node:<node>, job:<id>), not from a binding");
  }
  return b;
}

void AssignRoles(const std::vector<RoleBinding>& bindings, Principal* p) {
  RoleMask roles = 0;
  for (const auto& g : p->groups) {
    if (g.rfind(kRoleGroupPrefix, 0) != 0) continue;
    auto role = ParseRole(std::string_view(g).substr(kRoleGroupPrefix.size()));
    if (role && *role != Role::kAgent && *role != Role::kJobAgent) roles |= RoleBit(*role);
  }
  for (const auto& b : bindings) {
    bool hit = false;
    if (b.group) {
      for (const auto& g : p->groups) hit = hit || g == b.name;
    } else {
      hit = p->name == b.name;
    }
    if (hit) roles |= RoleBit(b.role);
  }
  const std::string& n = p->name;
  if (n.rfind(kNodeUserPrefix, 0) == 0 && n.size() > kNodeUserPrefix.size()) {
    roles |= RoleBit(Role::kAgent);
    p->node = n.substr(kNodeUserPrefix.size());
  }
  if (n.rfind(kJobUserPrefix, 0) == 0 && n.size() > kJobUserPrefix.size()) {
    roles |= RoleBit(Role::kJobAgent);
    p->job = n.substr(kJobUserPrefix.size());
  }
  p->roles |= roles;
}

std::string ReporterScope(const Principal& p) {
  constexpr std::string_view kSa = "system:serviceaccount:";
  if (p.name.rfind(kSa, 0) == 0) {
    auto colon = p.name.rfind(':');
    if (colon != std::string::npos && colon >= kSa.size()) return p.name.substr(colon + 1);
  }
  return p.name;
}

}  // namespace clusterd
