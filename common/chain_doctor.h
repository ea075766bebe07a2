// The accelerator software chain's diagnosis (docs/noded.md, "The software
// chain"): the findings clusterctl doctor prints and GET /api/v1/doctor
// answers, from the chains the agents reported (Inventory.chain) and the
// faults that judge it across nodes (version drift, the kubelet's
// allocatable NPUs), each with a fix in one line. Pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/repeated_ptr_field.h>
#include <nlohmann/json.hpp>

#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/types.pb.h"

namespace clusterd {

// The fix for a link's fault code ("" for none).
std::string_view ChainFix(std::string_view code);
// "ok", "BROKEN" or "unknown".
std::string_view ChainLinkStateText(v1::ChainLinkState state);

struct ChainFinding {
  int rank = 0;  // 0: broken link, allocatable short, firmware mismatch; 1: drift; 2: unknown; 3: ok
  std::string node, link, state, version, evidence, fix;
};

// The node's links: only the broken ones, or `all`.
void AddChainLinks(const v1::Node& node, bool all, std::vector<ChainFinding>* out);
// CHAIN_VERSION_DRIFT, CHAIN_FIRMWARE_MISMATCH and NODE_ALLOCATABLE_MISMATCH
// among active faults.
void AddChainFaults(const google::protobuf::RepeatedPtrField<v1::Fault>& faults, std::vector<ChainFinding>* out);
// What keeps a node from going back into service (UncordonNode, the
// automatic release of a separated chip): its broken links, a short kubelet
// allocatable and a firmware that does not go with the driver among `faults`
// (the node's); drift and unknown links never do.
std::vector<ChainFinding> ChainReleaseBlockers(const v1::Node& node, const std::vector<const v1::Fault*>& faults);
// "link device_plugin BROKEN (no socket ...): <fix>; ..." for an error.
std::string ChainBlockersText(const std::vector<ChainFinding>& blockers);

// The scheduler's link: Pending pods no node can take for want of an
// accelerator (GetSummary's scheduling_findings), as broken links whose node
// is "pod <namespace>/<name>".
void AddSchedulingFindings(const google::protobuf::RepeatedPtrField<v1::SchedulingFinding>& findings,
                           std::vector<ChainFinding>* out);

// Worst first, then by node and link.
void SortChainFindings(std::vector<ChainFinding>* found);
// The cluster's line: "N node(s), R reporting a software chain; B with a
// broken link or drift".
std::string ChainClusterSummary(size_t nodes, size_t reporting, const std::vector<ChainFinding>& found);
// {"findings": [{node, link, state, version, evidence, fix}], "summary": ...},
// at most `max` findings ("truncated": true and "total" when cut).
nlohmann::json ChainFindingsJson(const std::vector<ChainFinding>& found, const std::string& summary,
                                 size_t max = SIZE_MAX);

}  // namespace clusterd
