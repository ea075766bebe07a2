// MindCluster's ConfigMaps, as anyone allowed to write a ConfigMap may write
// them: the device plugin's DeviceInfoCfg (kube-system/mindx-dl-deviceinfo-*),
// MindCluster NodeD's NodeInfo (mindx-dl/mindx-dl-nodeinfo-*), a public-fault
// ConfigMap's PublicFault, an A3 plugin's SwitchInfoCfg, a cluster-info-device value found at start, and the
// operators' clusterd-config-cm policy (YAML) and clusterd-manual-info-cm data. Nothing may
// crash; what is accepted stays within the bounds, and writing it back and reading it again gives the same view (so the
// CheckCode ClusterD computes is the plugin's).
#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/cluster_info.h"
#include "clusterd/mindcluster/device_info.h"
#include "clusterd/mindcluster/manual_separation.h"
#include "clusterd/mindcluster/node_info.h"
#include "clusterd/mindcluster/pubfault.h"
#include "clusterd/mindcluster/switch_info.h"
#include "fuzz_util.h"

using namespace clusterd;
using namespace clusterd::mindcluster;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

namespace {

void CheckView(const NodeDeviceInfo& info) {
  FUZZ_CHECK(IsDeviceType(info.device_type));
  for (const auto* list : {&info.available, &info.unhealthy, &info.network_unhealthy, &info.recovering}) {
    FUZZ_CHECK(list->size() <= kMaxChipsPerList);
    for (const auto& chip : *list) FUZZ_CHECK(ChipId(info.device_type, chip).has_value());
  }
  FUZZ_CHECK(info.faults.size() <= kMaxFaultEntries);
  for (const ChipFault& f : FaultsOf(info)) {
    FUZZ_CHECK(f.device <= kMaxChipId);
    FUZZ_CHECK(!f.code.empty());
    FUZZ_CHECK(f.level != v1::FAULT_LEVEL_UNSPECIFIED);
  }
  // Merged and published: one ConfigMap value that parses as JSON.
  NodeState ours;
  ours.isolated = true;
  NodeDeviceInfo merged = MergeForVolcano(&info, ours);
  FUZZ_CHECK(merged.available.empty());
  FUZZ_CHECK(nlohmann::json::accept(ClusterInfoEntryJson("n", merged)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::AsView(data, size);
  auto info = ParseDeviceInfoCfg(text);
  if (info.ok()) {
    CheckView(*info);
    auto again = ParseDeviceInfoCfg(DeviceInfoCfgJson(*info));
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(*again == *info);
  }
  // The same bytes as a DeviceList map, without a CheckCode to get past.
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_object()) {
    std::map<std::string, std::string> list;
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (it->is_string()) list.emplace(it.key(), it->get<std::string>());
    }
    if (auto lists = ParseDeviceList(list); lists.ok()) CheckView(*lists);
  }
  // As MindCluster NodeD's NodeInfo: what is accepted reads back the same.
  if (auto node = ParseNodeInfoCm(text); node.ok()) {
    FUZZ_CHECK(node->faults.size() <= kMaxNodeFaultDevices);
    auto again = ParseNodeInfoCm(NodeInfoCmJson(*node));
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(*again == *node);
  }
  // As an A3 plugin's SwitchInfoCfg: within its bounds, one fault per place and code.
  if (auto sw = ParseSwitchInfoCfg(text); sw.ok()) {
    FUZZ_CHECK(sw->faults.size() <= kMaxSwitchFaults);
    for (const auto& f : sw->faults) FUZZ_CHECK(!f.code.empty() && f.code.size() <= 64);
  }
  // As a public-fault ConfigMap: planned like a gRPC request, one of its codes.
  if (auto req = ParsePublicFaultCm(text); req.ok()) {
    static const PubFaultCodeTable table = PubFaultCodeTable::Default();
    PubFaultPlan plan;
    const PubFaultVerdict v = PlanPublicFaults(*req, table, PubFaultOptions(), &plan);
    FUZZ_CHECK(v.code == kPubFaultOk || v.code == kPubFaultInvalid || v.code == kPubFaultRefused);
  }
  // As the operators' separation policy: what is accepted is within the reference's bounds,
  // and so a policy ClusterD's tracker takes.
  if (auto policy = ParseManualSeparatePolicy(text); policy.ok()) {
    FUZZ_CHECK(CheckManualSeparatePolicy(*policy).ok());
    FUZZ_CHECK(ValidateSeparationPolicy(ToSeparationPolicy(*policy, SeparationPolicy{})).ok());
  }
  // As clusterd-manual-info-cm's data: within its bounds.
  if (auto totals = ParseManualInfoTotals(text); totals.ok()) {
    FUZZ_CHECK(totals->size() <= kMaxManualInfoNodes);
    for (const auto& [node, chips] : *totals) FUZZ_CHECK(chips.size() <= kMaxManualInfoChipsPerNode);
  }
  // And as a cluster-info-device value found at start.
  ClusterInfoPublisher pub;
  if (pub.Adopt("cluster-info-device-0", text).ok()) {
    for (const auto& w : pub.Pending(true).writes) FUZZ_CHECK(nlohmann::json::accept(w.value));
  }
  return 0;
}
