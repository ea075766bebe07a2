// doctor [NODE]: the accelerator software chain, link by link, with the
// evidence and the fix: across the cluster the broken links and version drift
// (worst first), or every link of one node.
#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "clusterctl/resources/resources.h"
#include "common/chain_doctor.h"

namespace clusterctl {
namespace {

using clusterd::ChainFinding;

void Print(Context& c, std::vector<ChainFinding> found, const std::string& summary) {
  clusterd::SortChainFindings(&found);
  if (c.json()) {
    c.out << clusterd::ChainFindingsJson(found, summary).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
          << "\n";
    return;
  }
  if (found.empty()) {
    c.out << summary << "\n";
    return;
  }
  Table t({"NODE", "LINK", "STATE", "VERSION", "EVIDENCE"});
  for (const auto& f : found) {
    t.AddRow({f.node, f.link, f.state, f.version.empty() ? "-" : f.version,
              c.wide() ? f.evidence : Truncate(f.evidence, 70)});
  }
  t.Print(c.out);
  bool header = false;
  std::set<std::string> fixes;
  for (const auto& f : found) {
    if (f.fix.empty() || !fixes.insert(f.link + "\t" + f.fix).second) continue;
    if (!header) c.out << "\nFixes:\n";
    header = true;
    c.out << "  " << Sanitize(f.link) << ": " << Sanitize(f.fix) << "\n";
  }
  c.out << "\n" << summary << "\n";
}

int Doctor(Context& c) {
  if (auto e = CheckPositional(c, 0, 1, "node name")) return *e;
  std::vector<ChainFinding> found;
  if (c.args.positional.size() == 1) {
    v1::GetNodeResponse resp;
    if (grpc::Status st = c.Client().GetNode(c.args.positional[0], &resp); !st.ok())
      return RpcFailure(c, "GetNode", st);
    clusterd::AddChainLinks(resp.node(), /*all=*/true, &found);
    clusterd::AddChainFaults(resp.active_faults(), &found);
    const bool reported = resp.node().inventory().chain_size() > 0;
    size_t broken = 0;
    for (const auto& f : found) broken += f.rank <= 1;
    Print(c, std::move(found),
          !reported ? "node " + Sanitize(resp.node().name()) + ": its agent reports no software chain (an older NodeD)"
          : broken == 0 ? "node " + Sanitize(resp.node().name()) + ": no broken link"
                        : "node " + Sanitize(resp.node().name()) + ": " + std::to_string(broken) + " link(s) to fix");
    return 0;
  }
  v1::ListNodesResponse nodes;
  if (grpc::Status st = c.Client().ListAllNodes(v1::ListNodesRequest(), &nodes); !st.ok()) {
    return RpcFailure(c, "ListNodes", st);
  }
  size_t reporting = 0;
  for (const auto& n : nodes.nodes()) {
    reporting += n.inventory().chain_size() > 0;
    clusterd::AddChainLinks(n, /*all=*/false, &found);
  }
  v1::ListFaultsRequest req;
  req.set_active_only(true);
  req.set_min_level(v1::FAULT_LEVEL_SUB_HEALTH);
  v1::ListFaultsResponse faults;
  if (grpc::Status st = c.Client().ListAllFaults(req, &faults); !st.ok()) return RpcFailure(c, "ListFaults", st);
  clusterd::AddChainFaults(faults.faults(), &found);
  v1::GetSummaryResponse summary_resp;
  if (grpc::Status st = c.Client().GetSummary(&summary_resp); !st.ok()) return RpcFailure(c, "GetSummary", st);
  clusterd::AddSchedulingFindings(summary_resp.scheduling_findings(), &found);
  const auto drifted = std::count_if(found.begin(), found.end(), [](const ChainFinding& f) { return f.rank == 1; });
  const std::string summary = clusterd::ChainClusterSummary(static_cast<size_t>(nodes.nodes_size()), reporting, found) +
                              " (" + std::to_string(drifted) + " drift finding(s))";
  Print(c, std::move(found), summary);
  return 0;
}

}  // namespace

std::vector<Command> DoctorCommands() {
  return {Command{"doctor",
                  {},
                  "",
                  {},
                  Doctor,
                  "  doctor [NODE]                       the accelerator software chain: broken links and version\n"
                  "                                      drift across the cluster, or every link of one node, with\n"
                  "                                      the evidence and the fix\n"}};
}

}  // namespace clusterctl
