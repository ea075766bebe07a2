#include "common/chain_doctor.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace clusterd {
namespace {

constexpr std::string_view kDriftCode = "CHAIN_VERSION_DRIFT";
constexpr std::string_view kAllocatableCode = "NODE_ALLOCATABLE_MISMATCH";
constexpr std::string_view kFirmwareCode = "CHAIN_FIRMWARE_MISMATCH";

}  // namespace

std::string_view ChainLinkStateText(v1::ChainLinkState state) {
  switch (state) {
    case v1::CHAIN_LINK_STATE_OK: return "ok";
    case v1::CHAIN_LINK_STATE_BROKEN: return "BROKEN";
    default: return "unknown";
  }
}

std::string_view ChainFix(std::string_view code) {
  if (code == "NODE_CHAIN_DRIVER_NOT_INSTALLED") {
    return "install the Ascend driver and firmware on the host (or point NodeD's --ascend-path at it)";
  }
  if (code == "NODE_CHAIN_DRIVER_NOT_LOADED") {
    return "load the driver: check dmesg for the davinci modules, reinstall the driver or reboot the node";
  }
  if (code == "NODE_CHAIN_CHIPS_MISSING") {
    return "a chip is gone from the driver's view: npu-smi info on the node, then reseat, reset or replace it";
  }
  if (code == "NODE_CHAIN_RUNTIME_NOT_CONFIGURED") {
    return "install the Ascend Docker Runtime and add it to containerd's (or Docker's) configuration, then restart "
           "the runtime";
  }
  if (code == "NODE_CHAIN_DEVICE_PLUGIN_NOT_REGISTERED") {
    return "start the Ascend device plugin on the node (its DaemonSet's node selector, its logs) so that the kubelet "
           "offers NPUs";
  }
  if (code == kAllocatableCode) {
    return "the kubelet offers fewer NPUs than the node has: check the device plugin's pod and logs on the node, and "
           "its view of the chips' health";
  }
  if (code == kFirmwareCode) {
    return "install the firmware that goes with the node's driver (the same HDK release), or add the pair to the "
           "catalog's firmware_driver_pairs if it is supported";
  }
  if (code == kDriftCode) {
    return "upgrade or roll back the node to its pool's version, or label it into the pool it belongs to";
  }
  if (code == "no-node-offers") {
    return "ask for the resource name the device plugin registers (kubectl describe node: Allocatable), or deploy the "
           "plugin that registers this one";
  }
  if (code == "too-few") {
    return "ask for at most what one node offers per pod, or find the chips the device plugin left out";
  }
  if (code == "taints") {
    return "tolerate the taint in the pod's spec, or remove it from the nodes (clusterctl uncordon for ClusterD's own)";
  }
  return {};
}

void AddChainLinks(const v1::Node& n, bool all, std::vector<ChainFinding>* out) {
  for (const auto& l : n.inventory().chain()) {
    const int rank = l.state() == v1::CHAIN_LINK_STATE_BROKEN ? 0 : l.state() == v1::CHAIN_LINK_STATE_OK ? 3 : 2;
    if (!all && rank != 0) continue;
    out->push_back(ChainFinding{rank, n.name(), l.name(), std::string(ChainLinkStateText(l.state())), l.version(),
                                l.evidence(), std::string(ChainFix(l.code()))});
  }
}

void AddChainFaults(const google::protobuf::RepeatedPtrField<v1::Fault>& faults, std::vector<ChainFinding>* out) {
  for (const auto& f : faults) {
    if (f.state() != v1::FAULT_STATE_ACTIVE) continue;
    if (f.code() == kAllocatableCode) {
      out->push_back(ChainFinding{0, f.node(), "kubelet_allocatable", "SHORT", "", f.message(),
                                  std::string(ChainFix(kAllocatableCode))});
    } else if (f.code() == kFirmwareCode) {
      out->push_back(
          ChainFinding{0, f.node(), "firmware", "MISMATCH", "", f.message(), std::string(ChainFix(kFirmwareCode))});
    } else if (f.code() == kDriftCode) {
      const std::string& id = f.external_id();  // <node>/<link>
      out->push_back(ChainFinding{1, f.node(), id.substr(id.find('/') + 1), "DRIFT", "", f.message(),
                                  std::string(ChainFix(kDriftCode))});
    }
  }
}

std::vector<ChainFinding> ChainReleaseBlockers(const v1::Node& node, const std::vector<const v1::Fault*>& faults) {
  std::vector<ChainFinding> out;
  AddChainLinks(node, /*all=*/false, &out);
  google::protobuf::RepeatedPtrField<v1::Fault> blocking;
  for (const v1::Fault* f : faults) {
    if (f->code() == kAllocatableCode || f->code() == kFirmwareCode) *blocking.Add() = *f;
  }
  AddChainFaults(blocking, &out);
  SortChainFindings(&out);
  return out;
}

std::string ChainBlockersText(const std::vector<ChainFinding>& blockers) {
  std::string out;
  for (const ChainFinding& b : blockers) {
    if (!out.empty()) out += "; ";
    out += "link " + b.link + " " + b.state + (b.evidence.empty() ? "" : " (" + b.evidence + ")");
    if (!b.fix.empty()) out += ": " + b.fix;
  }
  return out;
}

void SortChainFindings(std::vector<ChainFinding>* found) {
  std::stable_sort(found->begin(), found->end(), [](const ChainFinding& a, const ChainFinding& b) {
    return std::tie(a.rank, a.node, a.link) < std::tie(b.rank, b.node, b.link);
  });
}

void AddSchedulingFindings(const google::protobuf::RepeatedPtrField<v1::SchedulingFinding>& findings,
                           std::vector<ChainFinding>* out) {
  for (const auto& f : findings) {
    out->push_back(ChainFinding{0, "pod " + f.pod_namespace() + "/" + f.pod(), "scheduler", "PENDING",
                                std::to_string(f.count()) + " " + f.resource(), f.evidence(),
                                std::string(ChainFix(f.reason()))});
  }
}

std::string ChainClusterSummary(size_t nodes, size_t reporting, const std::vector<ChainFinding>& found) {
  std::set<std::string> bad;
  size_t pods = 0;
  for (const auto& f : found) {
    if (f.link == "scheduler") {
      ++pods;
    } else {
      bad.insert(f.node);
    }
  }
  return std::to_string(nodes) + " node(s), " + std::to_string(reporting) + " reporting a software chain; " +
         std::to_string(bad.size()) + " with a broken link or drift" +
         (pods > 0 ? "; " + std::to_string(pods) + " Pending pod(s) no node can take" : "");
}

nlohmann::json ChainFindingsJson(const std::vector<ChainFinding>& found, const std::string& summary, size_t max) {
  nlohmann::json doc = {{"findings", nlohmann::json::array()}, {"summary", summary}};
  for (size_t i = 0; i < found.size() && i < max; ++i) {
    const ChainFinding& f = found[i];
    doc["findings"].push_back({{"node", f.node},
                               {"link", f.link},
                               {"state", f.state},
                               {"version", f.version},
                               {"evidence", f.evidence},
                               {"fix", f.fix}});
  }
  if (found.size() > max) {
    doc["truncated"] = true;
    doc["total"] = found.size();
  }
  return doc;
}

}  // namespace clusterd
