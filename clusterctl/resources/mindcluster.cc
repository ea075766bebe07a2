// describe mindcluster JOB: what ClusterD tells MindCluster's stack of one
// job (docs/mindcluster.md, "A job's MindCluster view"): its job.Job
// summary, the hccl.json server list, the rank table config.Config gives
// MindIE, and its NIC switches and stress tests with each step's outcome and
// the stress test's per-chip results.
#include <algorithm>
#include <cstdlib>
#include <map>

#include "clusterctl/resources/resources.h"

namespace clusterctl {
namespace {

std::string McOr(const std::string& s) { return s.empty() ? std::string("-") : s; }

// The reference's Unix-seconds string as a time ("-" when unset or not a number).
std::string McUnixText(const std::string& seconds) {
  if (seconds.empty() || seconds.find_first_not_of("0123456789") != std::string::npos || seconds.size() > 12) {
    return McOr(seconds);
  }
  google::protobuf::Timestamp t;
  t.set_seconds(std::strtoll(seconds.c_str(), nullptr, 10));
  return FormatTime(t);
}

std::string McPlural(size_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

void PrintMcSummary(Context& c, const v1::GetMindClusterJobResponse& r) {
  if (!r.has_summary()) {
    PrintKeyValues(c.out, {{"Job", r.job_id()}, {"Summary", "none (ClusterD has told MindCluster nothing of it)"}});
    return;
  }
  const v1::MindClusterJobSummary& s = r.summary();
  size_t devices = 0;
  for (const auto& sv : r.servers()) devices += static_cast<size_t>(sv.devices_size());
  std::string hccl = s.hccl_status().empty() ? "left out (above 40,000 chips or 4 MiB)" : s.hccl_status();
  if (s.hccl_status() == "complete") {
    hccl += ", " + McPlural(r.total_servers(), "server", "servers") + ", " + McPlural(devices, "device", "devices");
  }
  PrintKeyValues(c.out, {
                            {"Job", r.job_id()},
                            {"Status", McOr(s.job_status())},
                            {"Operator", McOr(s.operator_()) + (s.deleted() ? " (the job is deleted)" : "")},
                            {"Name", McOr(s.job_name())},
                            {"Namespace", McOr(s.namespace_())},
                            {"Framework", McOr(s.framework())},
                            {"Time", McUnixText(s.time())},
                            {"Deleted", McUnixText(s.delete_time())},
                            {"SID", McOr(s.sid())},
                            {"Shared ToR IP", McOr(s.shared_tor_ip())},
                            {"Master address", McOr(s.master_addr())},
                            {"ConfigMap slice", McOr(s.cm_index()) + " of " + McOr(s.total())},
                            {"Sequence", std::to_string(s.sequence())},
                            {"hccl.json", hccl},
                        });
}

void PrintMcServers(Context& c, const v1::GetMindClusterJobResponse& r) {
  c.out << "\nServers (hccl.json server_list):\n";
  if (r.servers().empty()) {
    c.out << "  <none>\n";
    return;
  }
  Table t({"SERVER", "SERVER-ID", "HOST-IP", "SN", "DEVICE", "DEVICE-IP", "RANK"});
  for (const auto& s : r.servers()) {
    if (s.devices().empty())
      t.AddRow({s.server_name(), McOr(s.server_id()), McOr(s.host_ip()), McOr(s.server_sn()), "-", "-", "-"});
    for (const auto& d : s.devices()) {
      t.AddRow({s.server_name(), McOr(s.server_id()), McOr(s.host_ip()), McOr(s.server_sn()), McOr(d.device_id()),
                McOr(d.device_ip()), McOr(d.rank_id())});
    }
  }
  c.out << Indent(TableText(t));
}

void PrintMcRankTable(Context& c, const v1::GetMindClusterJobResponse& r) {
  c.out << "\nRank table (config.Config, as MindIE gets it):\n";
  if (!r.rank_table().empty()) {
    c.out << "  " << Sanitize(c.wide() ? r.rank_table() : Truncate(r.rank_table(), 200)) << "\n";
  } else if (r.rank_table_omitted()) {
    c.out << "  (too large for one answer: its servers are listed above)\n";
  } else {
    c.out << "  <none> (the job is pending, deleted or above 4 MiB)\n";
  }
}

void PrintMcOperation(Context& c, const v1::MindClusterOperation& op) {
  c.out << "\n" << (op.kind() == "nic-switch" ? "NIC switch " : "Stress test ") << Sanitize(op.id()) << ":\n";
  std::string request;
  if (op.kind() == "nic-switch") {
    for (int i = 0; i < op.ranks_size(); ++i) {
      request +=
          (request.empty() ? "rank " : ", ") + op.ranks(i) + " -> " + (i < op.planes_size() ? op.planes(i) : "?");
    }
  } else {
    std::map<std::pair<size_t, std::string>, std::string> sorted;
    for (const auto& [rank, ops] : op.stress_ops()) sorted[{rank.size(), rank}] = ops;
    for (const auto& [key, ops] : sorted) request += (request.empty() ? "rank " : ", ") + key.second + " " + ops;
  }
  if (op.total_ranks() > static_cast<uint32_t>(std::max(op.ranks_size(), op.stress_ops_size()))) {
    request += " (" + std::to_string(op.total_ranks()) + " ranks in all)";
  }
  PrintKeyValues(c.out,
                 {{"Stage", op.stage()},
                  {"Requested by", McOr(op.actor())},
                  {"Request", McOr(request)},
                  {"Started", FormatTime(op.started())},
                  {"Wait ends", FormatTime(op.deadline())},
                  {"Finished", FormatTime(op.finished())},
                  {"Fault reported", op.fault_reported() ? "yes (TaskD reported a fault while it ran)" : "no"}},
                 "  ");
  c.out << "  Steps:\n";
  if (op.messages().empty()) c.out << "    <none yet>\n";
  int n = 0;
  for (const auto& m : op.messages()) {
    c.out << "    " << ++n << ". " << Sanitize(c.wide() ? m : Truncate(m, 160)) << "\n";
  }
  if (op.kind() == "stress-test" && op.total_chip_results() > 0) {
    c.out << "  Per-chip results:\n";
    Table t({"NODE", "DEVICE", "OP", "CODE", "RESULT"});
    for (const auto& chip : op.chip_results()) {
      t.AddRow({chip.node(), chip.device(),
                chip.op() == "0"   ? "AIC"
                : chip.op() == "1" ? "P2P"
                                   : chip.op(),
                McOr(chip.code()), McOr(c.wide() ? chip.result() : Truncate(chip.result(), 60))});
    }
    c.out << Indent(TableText(t), "    ");
    if (op.total_chip_results() > static_cast<uint32_t>(op.chip_results_size())) {
      c.out << "    (" << op.chip_results_size() << " of " << op.total_chip_results() << " results shown)\n";
    }
  }
}

void PrintMcOperations(Context& c, const v1::GetMindClusterJobResponse& r) {
  c.out << "\nNIC switches and stress tests (newest first):\n";
  std::vector<const v1::MindClusterOperation*> ops;
  if (r.has_current_operation()) ops.push_back(&r.current_operation());
  for (const auto& op : r.history()) ops.push_back(&op);
  if (ops.empty()) {
    c.out << "  <none>\n";
    return;
  }
  Table t({"ID", "KIND", "STAGE", "RANKS", "ACTOR", "STARTED", "FINISHED"});
  for (const auto* op : ops) {
    t.AddRow({op->id(), op->kind(), op->stage(), std::to_string(op->total_ranks()), McOr(op->actor()),
              FormatTime(op->started()), FormatTime(op->finished())});
  }
  c.out << Indent(TableText(t));
  for (const auto* op : ops) PrintMcOperation(c, *op);
}

int DescribeMindClusterJob(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "mindcluster job id")) return *e;
  const std::string& id = c.args.positional[0];
  return CallAndPrint<v1::GetMindClusterJobResponse>(
      c, "GetMindClusterJob",
      [&](ClusterClient& client, v1::GetMindClusterJobResponse* resp) { return client.GetMindClusterJob(id, resp); },
      [&](const v1::GetMindClusterJobResponse& r) {
        PrintMcSummary(c, r);
        PrintMcServers(c, r);
        PrintMcRankTable(c, r);
        PrintMcOperations(c, r);
      });
}

}  // namespace

std::vector<Command> MindClusterCommands() {
  return {
      Command{"describe",
              {"mindcluster", "mindcluster-job"},
              "ID",
              {},
              DescribeMindClusterJob,
              "  describe mindcluster ID             a job as MindCluster's stack sees it: its job.Job summary,\n"
              "                                      hccl.json servers (devices, IPs, rank ids), the rank\n"
              "                                      table MindIE gets, its NIC switches and stress tests\n"},
  };
}

}  // namespace clusterctl
