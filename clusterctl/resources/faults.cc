// get faults, report-fault, clear-fault.
#include "clusterctl/resources/resources.h"

namespace clusterctl {
namespace {

using FaultResource = Resource<v1::Fault, NoGet, v1::ListFaultsRequest, v1::ListFaultsResponse>;

Columns<v1::Fault> AllFaultColumns() {
  return {
      {"NODE", false, [](const v1::Fault& f, bool) { return f.node(); }},
      {"DEVICE", false, [](const v1::Fault& f, bool) { return DeviceText(FaultDevice(f)); }},
      {"SOURCE", false, [](const v1::Fault& f, bool) { return ShortSource(f.source()); }},
      {"CODE", false, [](const v1::Fault& f, bool) { return FaultCode(f); }},
      {"LEVEL", false, [](const v1::Fault& f, bool) { return ShortLevel(f.level()); }},
      {"STATE", false, [](const v1::Fault& f, bool) { return ShortState(f.state()); }},
      {"COUNT", false, [](const v1::Fault& f, bool) { return std::to_string(f.count()); }},
      {"LAST-SEEN", false, [](const v1::Fault& f, bool) { return FormatTime(f.last_seen()); }},
      {"FIRST-SEEN", true, [](const v1::Fault& f, bool) { return FormatTime(f.first_seen()); }},
      {"CLEARED", true,
       [](const v1::Fault& f, bool) -> std::string {
         if (f.state() != v1::FAULT_STATE_CLEARED) return "-";
         std::string cleared = FormatTime(f.cleared_time());
         if (!f.clear_reason().empty()) cleared += " (" + f.clear_reason() + ")";
         return cleared;
       }},
      {"REVISION", true, [](const v1::Fault& f, bool) { return std::to_string(f.revision()); }},
      {"REPORTER/ID", true,
       [](const v1::Fault& f, bool) { return f.reporter().empty() ? "-" : f.reporter() + "/" + f.external_id(); }},
      {"FAULT-ID", true, [](const v1::Fault& f, bool) { return f.id(); }},
      {"MESSAGE", false,
       [](const v1::Fault& f, bool wide) {
         const std::string msg = f.message().empty() ? "-" : f.message();
         return wide ? msg : Truncate(msg, 60);
       }},
  };
}

std::optional<int> ReadFaultFilters(Context& c, v1::ListFaultsRequest* req) {
  req->set_node(c.args.Get("node"));
  std::optional<uint64_t> device, since;
  if (auto e = U64Flag(c, "device", &device, UINT32_MAX)) return *e;
  if (auto e = U64Flag(c, "since-revision", &since)) return *e;
  v1::FaultLevel min_level = v1::FAULT_LEVEL_UNSPECIFIED;
  if (auto e = LevelFlag(c, "min-level", &min_level)) return *e;
  if (device) req->set_device_id(static_cast<uint32_t>(*device));
  if (since) req->set_since_revision(*since);
  req->set_min_level(min_level);
  req->set_active_only(c.args.Has("active"));
  return std::nullopt;
}

void PrintReport(Context& c, const v1::ReportResponse& r, const std::string& verb) {
  const v1::Fault& f = r.fault();
  c.out << "fault " << Sanitize(f.reporter() + "/" + f.external_id()) << " on " << Sanitize(f.node());
  if (f.has_device_id()) c.out << " device " << f.device_id();
  if (r.unchanged()) {
    c.out << " unchanged (already " << (verb == "raised" ? "active" : "cleared") << ")";
  } else {
    c.out << " " << verb;
  }
  c.out << ": code " << Sanitize(f.code()) << ", level " << ShortLevel(f.level()) << ", state " << ShortState(f.state())
        << ", revision " << r.revision() << "\n";
}

int Report(Context& c, const v1::ReportRequest& req, const std::string& verb) {
  return CallAndPrint<v1::ReportResponse>(
      c, "Report", [&](ClusterClient& client, v1::ReportResponse* resp) { return client.Report(req, resp); },
      [&](const v1::ReportResponse& resp) { PrintReport(c, resp, verb); });
}

int ReportFault(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  if (auto e = RequireFlags(c, {"reporter", "id", "node", "code"})) return *e;
  v1::ReportRequest req;
  req.set_reporter(c.args.Get("reporter"));
  req.set_id(c.args.Get("id"));
  req.set_node(c.args.Get("node"));
  req.set_code(c.args.Get("code"));
  req.set_message(c.args.Get("message"));
  req.set_action(v1::TRANSITION_ACTION_RAISE);
  std::optional<uint64_t> device;
  if (auto e = U64Flag(c, "device", &device, UINT32_MAX)) return *e;
  if (device) req.set_device_id(static_cast<uint32_t>(*device));
  v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
  if (auto e = LevelFlag(c, "level", &level)) return *e;
  req.set_level(level);
  return Report(c, req, "raised");
}

// clear-fault FAULT_ID: AdminService.ClearFault, any active fault.
int ClearFaultById(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "fault id")) return *e;
  for (const char* flag : {"reporter", "id", "node", "device", "code", "message"}) {
    if (c.args.Has(flag)) {
      return Usage(c, "clear-fault FAULT_ID: --" + std::string(flag) +
                          " belongs to the external-report form (--reporter R --id ID --node N)");
    }
  }
  if (auto e = RequireFlags(c, {"reason"})) return *e;
  std::string actor;
  if (auto e = ActorFlag(c, &actor)) return *e;
  v1::ClearFaultRequest req;
  req.set_fault_id(c.args.positional[0]);
  req.set_actor(actor);
  req.set_reason(c.args.Get("reason"));
  return CallAndPrint<v1::ClearFaultResponse>(
      c, "ClearFault",
      [&](ClusterClient& client, v1::ClearFaultResponse* resp) { return client.ClearFault(req, resp); },
      [&](const v1::ClearFaultResponse& resp) {
        const v1::Fault& f = resp.fault();
        c.out << "fault " << Sanitize(f.id()) << " cleared: code " << Sanitize(FaultCode(f)) << ", level "
              << ShortLevel(f.level()) << ", state " << ShortState(f.state()) << ", revision " << f.revision() << "\n";
      });
}

int ClearFault(Context& c) {
  if (!c.args.positional.empty()) return ClearFaultById(c);
  if (!c.args.Has("reporter") && !c.args.Has("id") && !c.args.Has("node")) {
    return Usage(c, "clear-fault: missing FAULT_ID (or --reporter R --id ID --node N for an external report)");
  }
  if (c.args.Has("reason") || c.args.Has("actor")) {
    return Usage(c, "clear-fault: --reason and --actor go with a FAULT_ID; the external-report form takes --message");
  }
  if (auto e = RequireFlags(c, {"reporter", "id", "node"})) return *e;
  const std::string reporter = c.args.Get("reporter"), id = c.args.Get("id"), node = c.args.Get("node");
  std::optional<uint64_t> device;
  if (auto e = U64Flag(c, "device", &device, UINT32_MAX)) return *e;

  // The server identifies an external fault by (node, device, reporter, id)
  // but still wants its code: look the fault up to fill in what is missing.
  v1::ListFaultsRequest lreq;
  lreq.set_node(node);
  if (device) lreq.set_device_id(static_cast<uint32_t>(*device));
  v1::ListFaultsResponse faults;
  if (auto st = c.Client().ListAllFaults(lreq, &faults); !st.ok()) return RpcFailure(c, "ListFaults", st);
  std::vector<const v1::Fault*> matches;
  for (const auto& f : faults.faults()) {
    if (f.source() != v1::FAULT_SOURCE_EXTERNAL || f.reporter() != reporter || f.external_id() != id) continue;
    if (device && (!f.has_device_id() || f.device_id() != *device)) continue;
    matches.push_back(&f);
  }
  if (matches.empty()) {
    c.err << "clusterctl: no fault reported by '" << Sanitize(reporter) << "' with id '" << Sanitize(id) << "' on node "
          << Sanitize(node) << (device ? " device " + std::to_string(*device) : std::string())
          << " (a fault raised by a node agent is cleared with 'clear-fault FAULT_ID --reason R')\n";
    return kExitNotFound;
  }
  if (matches.size() > 1) {
    std::string where;
    for (const auto* f : matches) where += " " + DeviceText(FaultDevice(*f));
    return Usage(c, "clear-fault: '" + reporter + "/" + id + "' exists on several devices of " + node + " (" +
                        where.substr(1) + "); name one with --device");
  }
  const v1::Fault& f = *matches[0];
  v1::ReportRequest req;
  req.set_reporter(reporter);
  req.set_id(id);
  req.set_node(node);
  if (f.has_device_id()) req.set_device_id(f.device_id());
  req.set_code(c.args.Get("code", f.code()));
  req.set_message(c.args.Get("message"));
  req.set_action(v1::TRANSITION_ACTION_CLEAR);
  return Report(c, req, "cleared");
}

}  // namespace

const Columns<v1::Fault>& FaultColumns(bool with_node) {
  static const Columns<v1::Fault> kWithNode = AllFaultColumns();
  static const Columns<v1::Fault> kWithoutNode(kWithNode.begin() + 1, kWithNode.end());
  return with_node ? kWithNode : kWithoutNode;
}

std::vector<Command> FaultCommands() {
  auto faults = std::make_shared<const FaultResource>(FaultResource{
      .singular = "fault",
      .plural = "faults",
      .operand = "",
      .columns = FaultColumns(true),
      .list_rpc = "ListFaults",
      .list = &ClusterClient::ListAllFaults,
      .items = [](const v1::ListFaultsResponse& r) -> const auto& { return r.faults();
}
, .filters = {}, .read_filters = ReadFaultFilters,
}  // namespace clusterctl
);
const FlagSpec node{"node", 0, true, false}, device{"device", 0, true, false}, code{"code", 0, true, false};
const FlagSpec reporter{"reporter", 0, true, false}, id{"id", 0, true, false}, message{"message", 0, true, false};
return {
    GetCommand(
        faults, {"faults", "fault"},
        {node, device, {"min-level", 0, true, false}, {"active", 0, false, false}, {"since-revision", 0, true, false}},
        "  get faults [--node N] [--device D] [--min-level L] [--active] [--since-revision R]\n"
        "                                      faults, active and cleared unless --active\n"),
    Command{"report-fault",
            {},
            "",
            {reporter, id, node, device, code, {"level", 0, true, false}, message},
            ReportFault,
            "  report-fault --reporter R --id ID --node N [--device D] --code C [--level L] [--message M]\n"
            "                                      raise an external fault (idempotent by reporter and id)\n"},
    Command{"clear-fault",
            {},
            "",
            {reporter, id, node, device, code, message, {"reason", 0, true, false}, {"actor", 0, true, false}},
            ClearFault,
            "  clear-fault FAULT_ID --reason R [--actor A]\n"
            "                                      clear any active fault by hand, agent-raised included\n"
            "                                      (FAULT_ID as in 'get faults -o wide', e.g.\n"
            "                                      worker01/3/accelerator/80E01801)\n"
            "  clear-fault --reporter R --id ID --node N [--device D] [--message M]\n"
            "                                      clear an external fault as its reporter would\n"},
};
}

}  // namespace clusterctl
