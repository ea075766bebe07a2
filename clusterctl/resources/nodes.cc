// get nodes [NAME], describe node NAME.
#include <cstdio>
#include <map>

#include "clusterctl/resources/resources.h"
#include "common/chain_doctor.h"

namespace clusterctl {
namespace {

using NodeResource = Resource<v1::Node, v1::GetNodeResponse, v1::ListNodesRequest, v1::ListNodesResponse>;

std::string YesNo(bool b) { return b ? "yes" : "no"; }
std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }
// "no", "yes" or "yes (REASON)".
std::string YesWhy(bool b, const std::string& why) { return !b ? "no" : why.empty() ? "yes" : "yes (" + why + ")"; }

Columns<v1::Node> NodeColumns() {
  return {
      {"NAME", false, [](const v1::Node& n, bool) { return n.name(); }},
      {"HEALTH", false, [](const v1::Node& n, bool) { return ShortHealth(n.health()); }},
      {"WORST-LEVEL", false, [](const v1::Node& n, bool) { return ShortLevel(n.worst_level()); }},
      {"FAULTS", false, [](const v1::Node& n, bool) { return std::to_string(n.active_faults()); }},
      {"DEVICES", false, [](const v1::Node& n, bool) { return std::to_string(n.inventory().devices_size()); }},
      {"CONNECTED", false, [](const v1::Node& n, bool) { return YesNo(n.connected()); }},
      {"CORDONED", false, [](const v1::Node& n, bool) { return YesNo(n.cordoned()); }},
      {"ISOLATED", false, [](const v1::Node& n, bool) { return YesNo(n.isolated()); }},
      {"LAST-HEARTBEAT", false, [](const v1::Node& n, bool) { return FormatTime(n.last_heartbeat_time()); }},
      {"AGENT", true, [](const v1::Node& n, bool) { return OrDash(n.agent_version()); }},
      {"BOOT-ID", true, [](const v1::Node& n, bool) { return OrDash(n.boot_id()); }},
      {"REVISION", true, [](const v1::Node& n, bool) { return std::to_string(n.revision()); }},
      {"LABELS", true, [](const v1::Node& n, bool) { return LabelsText(n.labels()); }},
  };
}

std::optional<int> ReadNodeFilters(Context& c, v1::ListNodesRequest* req) {
  if (c.args.Has("health")) {
    auto h = ParseHealth(c.args.Get("health"));
    if (!h) {
      return Usage(c, "--health: unknown health '" + c.args.Get("health") +
                          "' (one of HEALTHY, SUB_HEALTHY, UNHEALTHY, UNKNOWN)");
    }
    req->set_health(*h);
  }
  req->set_label_selector(c.args.Get("selector"));
  return std::nullopt;
}

void DescribeNode(Context& c, const v1::GetNodeResponse& resp) {
  const v1::Node& n = resp.node();
  const v1::Inventory& inv = n.inventory();
  PrintKeyValues(c.out, {
                            {"Name", n.name()},
                            {"Health", ShortHealth(n.health())},
                            {"Worst level", ShortLevel(n.worst_level())},
                            {"Active faults", std::to_string(n.active_faults())},
                            {"Connected", YesNo(n.connected())},
                            {"Cordoned", YesWhy(n.cordoned(), n.cordon_reason())},
                            {"Isolated", YesWhy(n.isolated(), n.isolation_reason())},
                            {"Last heartbeat", FormatTime(n.last_heartbeat_time())},
                            {"Registered", FormatTime(n.registered_time())},
                            {"Agent version", OrDash(n.agent_version())},
                            {"Boot id", OrDash(n.boot_id())},
                            {"Revision", std::to_string(n.revision())},
                            {"Labels", LabelsText(n.labels())},
                            {"CPU", inv.cpu_count() == 0 && inv.cpu_model().empty()
                                        ? "-"
                                        : std::to_string(inv.cpu_count()) +
                                              (inv.cpu_model().empty() ? "" : " x " + inv.cpu_model())},
                            {"Memory", inv.memory_bytes() ? Bytes(inv.memory_bytes()) : "-"},
                            {"Kernel", OrDash(inv.kernel_version())},
                            {"OS image", OrDash(inv.os_image())},
                        });

  if (!inv.disks().empty()) {
    c.out << "\nDisks:\n";
    Table t({"MOUNT", "DEVICE", "FS", "CAPACITY"});
    for (const auto& d : inv.disks()) t.AddRow({d.mount_point(), d.device(), d.fs_type(), Bytes(d.capacity_bytes())});
    c.out << Indent(TableText(t));
  }

  c.out << "\nDevices:\n";
  if (resp.devices().empty()) {
    c.out << "  <none>\n";
  } else {
    Table t({"ID", "VENDOR", "MODEL", "SERIAL", "HEALTH", "WORST-LEVEL", "FAULTS", "ISOLATED", "COUNTED", "SEPARATED"});
    for (const auto& d : resp.devices()) {
      t.AddRow({std::to_string(d.id()), OrDash(d.vendor()), OrDash(d.model()), OrDash(d.serial()),
                ShortHealth(d.health()), ShortLevel(d.worst_level()), std::to_string(d.active_faults()),
                YesWhy(d.isolated(), d.isolation_reason()), std::to_string(d.separation_fault_times_size()),
                YesWhy(d.separated(), d.separation_reason())});
    }
    c.out << Indent(TableText(t));
  }

  if (!inv.chain().empty()) {
    c.out << "\nSoftware chain (clusterctl doctor " << Sanitize(n.name()) << " for the fixes):\n";
    Table t({"LINK", "STATE", "VERSION", "EVIDENCE"});
    for (const auto& l : inv.chain()) {
      t.AddRow({l.name(), std::string(clusterd::ChainLinkStateText(l.state())), OrDash(l.version()),
                c.wide() ? l.evidence() : Truncate(l.evidence(), 70)});
    }
    c.out << Indent(TableText(t));
  }

  c.out << "\nActive faults:\n";
  if (resp.active_faults().empty()) {
    c.out << "  <none>\n";
  } else {
    c.out << Indent(TableText(MakeTable(FaultColumns(false), c.wide(), resp.active_faults())));
    if (resp.active_faults_truncated()) {
      c.out << "  (" << resp.active_faults_size() << " of " << n.active_faults()
            << " shown; clusterctl get faults --node " << Sanitize(n.name()) << " --active lists them all)\n";
    }
  }

  if (resp.has_metrics() && !resp.metrics().gauges().empty()) {
    c.out << "\nMetrics (" << FormatTime(resp.metrics().time()) << "):\n";
    std::map<std::string, double> sorted(resp.metrics().gauges().begin(), resp.metrics().gauges().end());
    Table t({"NAME", "VALUE"});
    for (const auto& [k, v] : sorted) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", v);
      t.AddRow({k, buf});
    }
    c.out << Indent(TableText(t));
  } else {
    c.out << "\nMetrics:\n  <none>\n";
  }

  // Return to service (docs/validation.md): what is validating or held,
  // then the history with the failed checks' evidence.
  std::vector<std::string> phases;
  auto phase_line = [&](const std::string& what, v1::ServicePhase p, const std::string& id, const std::string& hold,
                        int flaps) {
    if (p == v1::SERVICE_PHASE_UNSPECIFIED && flaps == 0) return;
    std::string line = what + ": " +
                       (p == v1::SERVICE_PHASE_VALIDATING ? "VALIDATING (" + id + ")"
                        : p == v1::SERVICE_PHASE_HELD     ? "HELD (" + hold + ")"
                                                          : "in service or isolated");
    if (flaps > 0) line += ", " + std::to_string(flaps) + " flaps in the window";
    phases.push_back(line);
  };
  phase_line("node", n.service_phase(), n.validation_id(), n.hold_reason(), n.flap_times_size());
  for (const auto& d : resp.devices()) {
    phase_line("device " + std::to_string(d.id()), d.service_phase(), d.validation_id(), d.hold_reason(),
               d.flap_times_size());
  }
  if (!phases.empty()) {
    c.out << "\nReturn to service:\n";
    for (const auto& line : phases) c.out << "  " << Sanitize(line) << "\n";
  }
  PrintValidationHistory(c, n.name());
}

}  // namespace

std::vector<Command> NodeCommands() {
  auto nodes = std::make_shared<const NodeResource>(NodeResource{
      .singular = "node",
      .plural = "nodes",
      .operand = "NAME",
      .columns = NodeColumns(),
      .list_rpc = "ListNodes",
      .list = &ClusterClient::ListAllNodes,
      .items = [](const v1::ListNodesResponse& r) -> const auto& { return r.nodes();
}
, .filters = {"health", "selector"}, .read_filters = ReadNodeFilters, .get_rpc = "GetNode",
  .get = &ClusterClient::GetNode, .item = [](const v1::GetNodeResponse& r) -> const auto& {
  return r.node();
}
, .describe = DescribeNode,
}  // namespace clusterctl
);
return {
    GetCommand(nodes, {"nodes", "node", "no"},
               {{"health", 0, true, false}, {"selector", 'l', true, false}, {"label-selector", 0, true, false}},
               "  get nodes [NAME] [--health H] [--selector k=v,...]\n"
               "                                      nodes (all pages); H: HEALTHY, SUB_HEALTHY, UNHEALTHY, "
               "UNKNOWN\n"),
    DescribeCommand(nodes, {"node", "nodes"},
                    "  describe node NAME                  node, inventory, devices, isolation, active faults, "
                    "metrics\n"),
};
}

}  // namespace clusterctl
