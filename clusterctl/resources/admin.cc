// Operator actions (AdminService): get admin, cordon, uncordon, release, pause, resume, dry-run,
// validate, skip-validation, hold (docs/validation.md).
#include <functional>

#include "clusterctl/resources/resources.h"

namespace clusterctl {
namespace {

// Who and why, on every action.
const std::vector<FlagSpec> kAdminFlags = {{"reason", 0, true, false}, {"actor", 0, true, false}};

void PrintAdmin(Context& c, const v1::GetAdminStateResponse& resp) {
  const v1::AdminState& s = resp.state();
  PrintKeyValues(c.out, {
                            {"Recovery", s.recovery_paused() ? "paused" : "active"},
                            {"Dry run", s.dry_run() ? "on" : "off"},
                            {"Changed by", s.actor().empty() ? "-" : s.actor()},
                            {"Reason", s.reason().empty() ? "-" : s.reason()},
                            {"Changed", FormatTime(s.update_time())},
                            {"Revision", std::to_string(s.revision())},
                        });
}

// CordonNode and UncordonNode take and answer the same fields.
template <typename Req, typename Resp>
int CordonOrUncordon(Context& c, bool cordon, const std::string& rpc,
                     grpc::Status (ClusterClient::*call)(const Req&, Resp*)) {
  if (auto e = CheckPositional(c, 1, 1, "node name")) return *e;
  if (cordon) {
    if (auto e = RequireFlags(c, {"reason"})) return *e;
  }
  std::string actor;
  if (auto e = ActorFlag(c, &actor)) return *e;
  Req req;
  req.set_node(c.args.positional[0]);
  req.set_actor(actor);
  req.set_reason(c.args.Get("reason"));
  if constexpr (std::is_same_v<Req, v1::UncordonNodeRequest>) req.set_force(c.args.Has("force"));
  return CallAndPrint<Resp>(
      c, rpc, [&](ClusterClient& client, Resp* resp) { return (client.*call)(req, resp); },
      [&](const Resp& resp) {
        const v1::Node& node = resp.node();
        c.out << "node " << Sanitize(node.name()) << (node.cordoned() ? " cordoned" : " uncordoned");
        if (node.cordoned() && !node.cordon_reason().empty()) c.out << " (" << Sanitize(node.cordon_reason()) << ")";
        c.out << ", revision " << node.revision() << "\n";
      });
}

int Cordon(Context& c) { return CordonOrUncordon(c, true, "CordonNode", &ClusterClient::CordonNode); }
int Uncordon(Context& c) { return CordonOrUncordon(c, false, "UncordonNode", &ClusterClient::UncordonNode); }

// A device the separation policy separated, back to service.
int Release(Context& c) {
  if (auto e = CheckPositional(c, 2, 2, "node name and device id")) return *e;
  if (auto e = RequireFlags(c, {"reason"})) return *e;
  std::string actor;
  if (auto e = ActorFlag(c, &actor)) return *e;
  uint64_t id = 0;
  if (!ParseU64(c.args.positional[1], &id) || id > UINT32_MAX) {
    return Usage(c, "release: device id '" + Sanitize(Truncate(c.args.positional[1], 40)) + "' is not a number");
  }
  v1::ReleaseDeviceRequest req;
  req.set_node(c.args.positional[0]);
  req.set_device_id(static_cast<uint32_t>(id));
  req.set_actor(actor);
  req.set_reason(c.args.Get("reason"));
  req.set_force(c.args.Has("force"));
  return CallAndPrint<v1::ReleaseDeviceResponse>(
      c, "ReleaseDevice",
      [&](ClusterClient& client, v1::ReleaseDeviceResponse* resp) { return client.ReleaseDevice(req, resp); },
      [&](const v1::ReleaseDeviceResponse& resp) {
        const v1::Device& d = resp.device();
        c.out << "node " << Sanitize(d.node()) << " device " << d.id()
              << (d.service_phase() == v1::SERVICE_PHASE_VALIDATING ? " validating (" + d.validation_id() + ")"
                  : d.separated()                                   ? " still separated"
                                                                    : " in service")
              << ", revision " << d.revision() << "\n";
      });
}

// validate, skip-validation, hold: NODE [DEVICE] --reason R [--actor A].
template <typename Req, typename Resp>
int ValidationAction(Context& c, const std::string& verb, const std::string& rpc,
                     grpc::Status (ClusterClient::*call)(const Req&, Resp*),
                     const std::function<void(const Resp&)>& print) {
  if (auto e = CheckPositional(c, 1, 2, "node name [and device id]")) return *e;
  if (auto e = RequireFlags(c, {"reason"})) return *e;
  std::string actor;
  if (auto e = ActorFlag(c, &actor)) return *e;
  Req req;
  req.set_node(c.args.positional[0]);
  if (c.args.positional.size() == 2) {
    uint64_t id = 0;
    if (!ParseU64(c.args.positional[1], &id) || id > UINT32_MAX) {
      return Usage(c, verb + ": device id '" + Sanitize(Truncate(c.args.positional[1], 40)) + "' is not a number");
    }
    req.set_device_id(static_cast<uint32_t>(id));
  }
  req.set_actor(actor);
  req.set_reason(c.args.Get("reason"));
  return CallAndPrint<Resp>(
      c, rpc, [&](ClusterClient& client, Resp* resp) { return (client.*call)(req, resp); }, print);
}

void PrintValidation(Context& c, const v1::Validation& v) {
  c.out << "validation " << v.id() << " of node " << Sanitize(v.node());
  for (uint32_t d : v.device_ids()) c.out << " device " << d;
  c.out << ": " << v1::ValidationState_Name(v.state()).substr(17) << ", revision " << v.revision() << "\n";
}

int Validate(Context& c) {
  return ValidationAction<v1::StartValidationRequest, v1::StartValidationResponse>(
      c, "validate", "StartValidation", &ClusterClient::StartValidation,
      [&c](const v1::StartValidationResponse& r) { PrintValidation(c, r.validation()); });
}

int SkipValidation(Context& c) {
  return ValidationAction<v1::SkipValidationRequest, v1::SkipValidationResponse>(
      c, "skip-validation", "SkipValidation", &ClusterClient::SkipValidation,
      [&c](const v1::SkipValidationResponse& r) { PrintValidation(c, r.validation()); });
}

int Hold(Context& c) {
  return ValidationAction<v1::HoldOutRequest, v1::HoldOutResponse>(
      c, "hold", "HoldOut", &ClusterClient::HoldOut, [&c](const v1::HoldOutResponse& r) {
        c.out << "node " << Sanitize(r.node().name());
        if (r.has_device()) c.out << " device " << r.device().id();
        c.out << " held, revision " << (r.has_device() ? r.device().revision() : r.node().revision()) << "\n";
      });
}

int SetMode(Context& c, std::optional<bool> paused, std::optional<bool> dry_run) {
  std::string actor;
  if (auto e = ActorFlag(c, &actor)) return *e;
  v1::SetRecoveryModeRequest req;
  if (paused) req.set_recovery_paused(*paused);
  if (dry_run) req.set_dry_run(*dry_run);
  req.set_actor(actor);
  req.set_reason(c.args.Get("reason"));
  return CallAndPrint<v1::SetRecoveryModeResponse>(
      c, "SetRecoveryMode",
      [&](ClusterClient& client, v1::SetRecoveryModeResponse* resp) { return client.SetRecoveryMode(req, resp); },
      [&](const v1::SetRecoveryModeResponse& resp) {
        const v1::AdminState& s = resp.state();
        c.out << "recovery " << (s.recovery_paused() ? "paused" : "active") << ", dry-run "
              << (s.dry_run() ? "on" : "off") << ", revision " << s.revision() << "\n";
      });
}

int Pause(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  if (auto e = RequireFlags(c, {"reason"})) return *e;
  return SetMode(c, true, std::nullopt);
}

int Resume(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  return SetMode(c, false, std::nullopt);
}

int DryRun(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "on or off")) return *e;
  const std::string& v = c.args.positional[0];
  if (v != "on" && v != "off") return Usage(c, "dry-run: '" + v + "' is neither on nor off");
  if (v == "on") {
    if (auto e = RequireFlags(c, {"reason"})) return *e;
  }
  return SetMode(c, std::nullopt, v == "on");
}

}  // namespace

std::vector<Command> AdminCommands() {
  return {
      ShowCommand<v1::GetAdminStateResponse>(
          {"admin"}, "GetAdminState", &ClusterClient::GetAdminState, PrintAdmin,
          "  get admin                           recovery paused or not, dry-run, who changed it last and why\n"),
      Command{"cordon",
              {},
              "",
              kAdminFlags,
              Cordon,
              "  cordon NODE --reason R [--actor A]  maintenance: the node's faults are recorded but start\n"
              "                                      no recovery\n"},
      Command{"uncordon",
              {},
              "",
              {{"reason", 0, true, false}, {"actor", 0, true, false}, {"force", 0, false, false}},
              Uncordon,
              "  uncordon NODE [--reason R] [--actor A] [--force: even with a broken software chain, and\n"
              "                                      without a validation when validation_enabled]\n"},
      Command{"release",
              {},
              "",
              {{"reason", 0, true, false}, {"actor", 0, true, false}, {"force", 0, false, false}},
              Release,
              "  release NODE DEVICE --reason R [--actor A] [--force]\n"
              "                                      return a device the separation policy separated to service\n"
              "                                      (validated first when validation_enabled; --force skips it\n"
              "                                      and releases a HELD device)\n"},
      Command{"validate",
              {},
              "",
              kAdminFlags,
              Validate,
              "  validate NODE [DEVICE] --reason R [--actor A]\n"
              "                                      queue a validation of a device or the whole node\n"},
      Command{"skip-validation",
              {},
              "",
              kAdminFlags,
              SkipValidation,
              "  skip-validation NODE [DEVICE] --reason R [--actor A]\n"
              "                                      return it to service without its validation (recorded)\n"},
      Command{"hold",
              {},
              "",
              kAdminFlags,
              Hold,
              "  hold NODE [DEVICE] --reason R [--actor A]\n"
              "                                      hold it out of service until released with --force\n"},
      Command{"pause",
              {},
              "",
              kAdminFlags,
              Pause,
              "  pause --reason R [--actor A]        pause automatic recovery cluster-wide\n"},
      Command{
          "resume", {}, "", kAdminFlags, Resume, "  resume [--reason R] [--actor A]     resume automatic recovery\n"},
      Command{"dry-run",
              {},
              "",
              kAdminFlags,
              DryRun,
              "  dry-run on --reason R | off [--reason R] [--actor A]\n"
              "                                      dry-run: recovery decisions are recorded, nothing is acted "
              "on\n"},
  };
}

}  // namespace clusterctl
