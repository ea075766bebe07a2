// doctor [NODE]: the accelerator software chain, link by link, with the
// evidence and the fix: across the cluster the broken links and version drift
// (worst first), or every link of one node.
#include <algorithm>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "clusterctl/resources/resources.h"
#include "common/chain_fix.h"

namespace clusterctl {
namespace {

constexpr std::string_view kDriftCode = "CHAIN_VERSION_DRIFT";
constexpr std::string_view kAllocatableCode = "NODE_ALLOCATABLE_MISMATCH";

std::string StateText(v1::ChainLinkState s) {
  switch (s) {
    case v1::CHAIN_LINK_STATE_OK: return "ok";
    case v1::CHAIN_LINK_STATE_BROKEN: return "BROKEN";
    default: return "unknown";
  }
}

struct Finding {
  int rank = 0;  // 0: broken link, 1: drift, 2: unknown, 3: ok
  std::string node, link, state, version, evidence, fix;
};

void AddLinks(const v1::Node& n, bool all, std::vector<Finding>* out) {
  for (const auto& l : n.inventory().chain()) {
    const int rank = l.state() == v1::CHAIN_LINK_STATE_BROKEN ? 0 : l.state() == v1::CHAIN_LINK_STATE_OK ? 3 : 2;
    if (!all && rank != 0) continue;
    out->push_back(Finding{rank, n.name(), l.name(), StateText(l.state()), l.version(), l.evidence(),
                           std::string(clusterd::ChainFix(l.code()))});
  }
}

// Version drift (ClusterD's) and the kubelet's allocatable NPUs below the
// usable chips (the kubernetes integration's), from the active faults.
void AddDrift(const google::protobuf::RepeatedPtrField<v1::Fault>& faults, std::vector<Finding>* out) {
  for (const auto& f : faults) {
    if (f.state() != v1::FAULT_STATE_ACTIVE) continue;
    if (f.code() == kAllocatableCode) {
      out->push_back(Finding{0, f.node(), "kubelet_allocatable", "SHORT", "", f.message(),
                             std::string(clusterd::ChainFix(kAllocatableCode))});
      continue;
    }
    if (f.code() != kDriftCode) continue;
    const std::string& id = f.external_id();  // <node>/<link>
    const std::string link = id.substr(id.find('/') + 1);
    out->push_back(Finding{1, f.node(), link, "DRIFT", "", f.message(), std::string(clusterd::ChainFix(kDriftCode))});
  }
}

void Print(Context& c, std::vector<Finding> found, const std::string& summary) {
  std::stable_sort(found.begin(), found.end(), [](const Finding& a, const Finding& b) {
    return std::tie(a.rank, a.node, a.link) < std::tie(b.rank, b.node, b.link);
  });
  if (c.json()) {
    nlohmann::json doc = {{"findings", nlohmann::json::array()}, {"summary", summary}};
    for (const Finding& f : found) {
      doc["findings"].push_back({{"node", f.node},
                                 {"link", f.link},
                                 {"state", f.state},
                                 {"version", f.version},
                                 {"evidence", f.evidence},
                                 {"fix", f.fix}});
    }
    c.out << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
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
  std::vector<Finding> found;
  if (c.args.positional.size() == 1) {
    v1::GetNodeResponse resp;
    if (grpc::Status st = c.Client().GetNode(c.args.positional[0], &resp); !st.ok())
      return RpcFailure(c, "GetNode", st);
    AddLinks(resp.node(), /*all=*/true, &found);
    AddDrift(resp.active_faults(), &found);
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
  std::set<std::string> bad_nodes;
  for (const auto& n : nodes.nodes()) {
    reporting += n.inventory().chain_size() > 0;
    AddLinks(n, /*all=*/false, &found);
  }
  v1::ListFaultsRequest req;
  req.set_active_only(true);
  req.set_min_level(v1::FAULT_LEVEL_SUB_HEALTH);
  v1::ListFaultsResponse faults;
  if (grpc::Status st = c.Client().ListAllFaults(req, &faults); !st.ok()) return RpcFailure(c, "ListFaults", st);
  AddDrift(faults.faults(), &found);
  size_t drifted = 0;
  for (const auto& f : found) {
    bad_nodes.insert(f.node);
    drifted += f.rank == 1;
  }
  Print(c, std::move(found),
        std::to_string(nodes.nodes_size()) + " node(s), " + std::to_string(reporting) +
            " reporting a software chain; " + std::to_string(bad_nodes.size()) + " with a broken link or drift (" +
            std::to_string(drifted) + " drift finding(s))");
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
