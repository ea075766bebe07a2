#include "clusterd/mindcluster/signal.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "clusterd/state/placement_index.h"
#include "clusterd/storage/key_codec.h"

namespace clusterd::mindcluster {
namespace {

// The faults listed on one node, grouped per (device, type) and per code.
class NodeFaults {
 public:
  void Add(const v1::Fault& f) {
    // Node-level groups (-1) sort before the chips.
    const int64_t device = f.has_device_id() ? static_cast<int64_t>(f.device_id()) : -1;
    Group& g = groups_[{device, std::string(DeviceType(f))}];
    v1::FaultLevel& level = g.codes[f.code()];
    level = std::max(level, f.level());
    g.worst = std::max(g.worst, f.level());
    worst_ = std::max(worst_, f.level());
  }

  fault::NodeFaultInfo ToProto(const std::string& name, const v1::Node* node) const {
    fault::NodeFaultInfo out;
    out.set_nodename(name);
    out.set_nodeip(name);
    if (node) {
      auto ip = node->labels().find(std::string(kNodeIpLabel));
      if (ip != node->labels().end() && !ip->second.empty()) out.set_nodeip(ip->second);
      auto sn = node->labels().find(std::string(kNodeSnLabel));
      if (sn != node->labels().end()) out.set_nodesn(sn->second);
    }
    out.set_faultlevel(std::string(HealthName(worst_)));
    for (const auto& [key, g] : groups_) {
      auto* d = out.add_faultdevice();
      d->set_deviceid(key.first < 0 ? std::string(kNodeLevelDeviceId) : std::to_string(key.first));
      d->set_devicetype(key.second);
      d->set_faultlevel(std::string(HealthName(g.worst)));
      // std::map: codes sorted and unique; the levels follow them.
      for (const auto& [code, level] : g.codes) {
        d->add_faultcodes(code);
        d->add_faultlevels(std::string(LevelName(level)));
      }
    }
    return out;
  }

 private:
  struct Group {
    std::map<std::string, v1::FaultLevel> codes;
    v1::FaultLevel worst = v1::FAULT_LEVEL_UNSPECIFIED;
  };
  std::map<std::pair<int64_t, std::string>, Group> groups_;
  v1::FaultLevel worst_ = v1::FAULT_LEVEL_UNSPECIFIED;
};

// Turns the nodes' groups into the signal: nodes by nodeIP, then name, cut at
// the byte budget.
fault::FaultMsgSignal Finish(const StateView& state, const std::string& job_id,
                             const std::map<std::string, NodeFaults>& nodes, const SignalLimits& limits,
                             bool* truncated) {
  std::vector<fault::NodeFaultInfo> infos;
  infos.reserve(nodes.size());
  for (const auto& [name, faults] : nodes) infos.push_back(faults.ToProto(name, state.FindNode(name)));
  std::sort(infos.begin(), infos.end(), [](const fault::NodeFaultInfo& a, const fault::NodeFaultInfo& b) {
    return std::tie(a.nodeip(), a.nodename()) < std::tie(b.nodeip(), b.nodename());
  });
  fault::FaultMsgSignal out;
  out.set_jobid(job_id);
  size_t bytes = 0;
  bool cut = false;
  for (auto& info : infos) {
    const size_t size = info.ByteSizeLong() + 8;  // with the field's tag and length
    if (out.nodefaultinfo_size() > 0 && bytes + size > limits.max_bytes) {
      cut = true;
      break;
    }
    bytes += size;
    *out.add_nodefaultinfo() = std::move(info);
  }
  out.set_signaltype(std::string(out.nodefaultinfo_size() > 0 ? kSignalFault : kSignalNormal));
  if (truncated) *truncated = cut;
  return out;
}

}  // namespace

std::string_view LevelName(v1::FaultLevel level) {
  switch (level) {
    case v1::FAULT_LEVEL_NOT_HANDLE: return "NotHandleFault";
    case v1::FAULT_LEVEL_SUB_HEALTH: return "SubHealthFault";
    case v1::FAULT_LEVEL_PRE_SEPARATE: return "PreSeparateNPU";
    case v1::FAULT_LEVEL_RESTART_REQUEST: return "RestartRequest";
    case v1::FAULT_LEVEL_RESTART_BUSINESS: return "RestartBusiness";
    case v1::FAULT_LEVEL_FREE_RESTART_NPU: return "FreeRestartNPU";
    case v1::FAULT_LEVEL_RESTART_NPU: return "RestartNPU";
    case v1::FAULT_LEVEL_SEPARATE: return "SeparateNPU";
    default: return "";
  }
}

std::string_view HealthName(v1::FaultLevel worst) {
  if (worst >= v1::FAULT_LEVEL_RESTART_REQUEST) return "UnHealthy";
  if (worst >= v1::FAULT_LEVEL_SUB_HEALTH) return "SubHealthy";
  return "Healthy";
}

std::string_view DeviceType(const v1::Fault& f) {
  if (f.has_device_id()) return kChipDeviceType;
  switch (f.source()) {
    case v1::FAULT_SOURCE_NETWORK: return "Network";
    case v1::FAULT_SOURCE_DISK: return "Storage";
    default: return "Node";
  }
}

bool Listed(const v1::Fault& f) {
  return f.state() == v1::FAULT_STATE_ACTIVE && f.level() >= v1::FAULT_LEVEL_SUB_HEALTH;
}

fault::FaultMsgSignal JobSignal(const StateView& state, const v1::Job& job, const SignalLimits& limits,
                                bool* truncated) {
  // Indexed once: matching a node's faults costs a lookup each, not a walk
  // over the job's ranks.
  const PlacementIndex placement(job);
  std::map<std::string, NodeFaults> nodes;
  const auto& faults = state.faults();
  for (const auto& node : placement.Nodes()) {
    const auto end = faults.lower_bound(storage::NodePrefixEnd(node));
    for (auto it = faults.lower_bound(storage::NodePrefix(node)); it != end; ++it) {
      const v1::Fault& f = it->second;
      if (!Listed(f)) continue;
      const auto* ranks = placement.RanksHit(f);
      if (ranks == nullptr || ranks->empty()) continue;
      nodes[node].Add(f);
    }
  }
  return Finish(state, job.id(), nodes, limits, truncated);
}

fault::FaultMsgSignal ClusterSignal(const StateView& state, const SignalLimits& limits, bool* truncated) {
  std::map<std::string, NodeFaults> nodes;
  for (const auto& [key, f] : state.faults()) {
    if (Listed(f)) nodes[f.node()].Add(f);
  }
  return Finish(state, "", nodes, limits, truncated);
}

std::string SignalContent(const fault::FaultMsgSignal& signal) {
  fault::FaultMsgSignal copy = signal;
  copy.clear_uuid();
  // No maps in these messages: the encoding of equal content is equal.
  return copy.SerializeAsString();
}

void AddJobsTouchedBy(const v1::Event& event, std::set<std::string>* out) {
  switch (event.type()) {
    case v1::EVENT_TYPE_FAULT_RAISED:
    case v1::EVENT_TYPE_FAULT_UPDATED:
    case v1::EVENT_TYPE_FAULT_CLEARED:
    case v1::EVENT_TYPE_JOB_CREATED:
    case v1::EVENT_TYPE_JOB_UPDATED:
    case v1::EVENT_TYPE_JOB_DELETED:
      for (const auto& id : event.job_ids()) out->insert(id);
      if (event.has_job() && !event.job().id().empty()) out->insert(event.job().id());
      break;
    default: break;
  }
}

}  // namespace clusterd::mindcluster
