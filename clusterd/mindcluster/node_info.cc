#include "clusterd/mindcluster/node_info.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/go_json.h"
#include "clusterd/mindcluster/signal.h"  // LevelName

namespace clusterd::mindcluster {
namespace {

using json = nlohmann::json;

std::string FaultDevListJson(const std::vector<NodeFaultDevice>& devices) {
  if (devices.empty()) return "null";  // Go's nil slice
  std::string out = "[";
  for (const NodeFaultDevice& d : devices) {
    if (out.size() > 1) out.push_back(',');
    out += "{\"DeviceType\":" + GoJsonString(d.device_type) + ",\"DeviceId\":" + std::to_string(d.device_id) +
           ",\"FaultCode\":";
    if (d.fault_codes.empty()) {
      out += "null";
    } else {
      out += "[";
      for (size_t i = 0; i < d.fault_codes.size(); ++i) out += (i ? "," : "") + GoJsonString(d.fault_codes[i]);
      out += "]";
    }
    out += ",\"FaultLevel\":" + GoJsonString(d.fault_level) + "}";
  }
  return out + "]";
}

StatusOr<std::string> String(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) return InvalidArgument(where + "." + key + " is not a string");
  return it->get<std::string>();
}

}  // namespace

std::string NodeInfoJson(const NodeInfo& info) {
  return "{\"FaultDevList\":" + FaultDevListJson(info.faults) + ",\"NodeStatus\":" + GoJsonString(info.node_status) +
         "}";
}

std::string NodeInfoCmJson(const NodeInfo& info) {
  const std::string inner = NodeInfoJson(info);
  return "{\"NodeInfo\":" + inner + ",\"CheckCode\":" + GoJsonString(Sha256Hex(inner)) + "}";
}

StatusOr<NodeInfo> ParseNodeInfoCm(std::string_view text) {
  json doc = json::parse(text, nullptr, false);
  if (!doc.is_object()) return InvalidArgument("NodeInfo is not a JSON object");
  auto inner = doc.find("NodeInfo");
  if (inner == doc.end() || !inner->is_object()) return InvalidArgument("NodeInfo has no NodeInfo object");
  NodeInfo info;
  auto status = String(*inner, "NodeStatus", "NodeInfo");
  if (!status.ok()) return status.status();
  info.node_status = std::move(*status);
  if (auto list = inner->find("FaultDevList"); list != inner->end() && !list->is_null()) {
    if (!list->is_array()) return InvalidArgument("NodeInfo.FaultDevList is not a list");
    if (list->size() > kMaxNodeFaultDevices) {
      return InvalidArgument("NodeInfo.FaultDevList has more than " + std::to_string(kMaxNodeFaultDevices) +
                             " devices");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      const json& d = (*list)[i];
      const std::string where = "NodeInfo.FaultDevList[" + std::to_string(i) + "]";
      if (!d.is_object()) return InvalidArgument(where + " is not an object");
      NodeFaultDevice dev;
      auto type = String(d, "DeviceType", where);
      auto level = String(d, "FaultLevel", where);
      if (!type.ok()) return type.status();
      if (!level.ok()) return level.status();
      dev.device_type = std::move(*type);
      dev.fault_level = std::move(*level);
      if (auto id = d.find("DeviceId"); id != d.end()) {
        if (!id->is_number_integer()) return InvalidArgument(where + ".DeviceId is not an integer");
        dev.device_id = id->get<int64_t>();
      }
      if (auto codes = d.find("FaultCode"); codes != d.end() && !codes->is_null()) {
        if (!codes->is_array() || codes->size() > 256) {
          return InvalidArgument(where + ".FaultCode is not a list of at most 256 codes");
        }
        for (const json& c : *codes) {
          if (!c.is_string()) return InvalidArgument(where + ".FaultCode holds a code that is not a string");
          dev.fault_codes.push_back(c.get<std::string>());
        }
      }
      info.faults.push_back(std::move(dev));
    }
  }
  auto code = doc.find("CheckCode");
  if (code == doc.end() || !code->is_string() || code->get<std::string>().empty()) {
    return FailedPrecondition("NodeInfo has no CheckCode");
  }
  // The hash covers the inner object as NodeD marshalled it: re-marshalled
  // from what was parsed (field order and spelling are Go's).
  if (code->get<std::string>() != Sha256Hex(NodeInfoJson(info))) {
    return FailedPrecondition("NodeInfo's CheckCode is not the SHA-256 of its NodeInfo");
  }
  return info;
}

std::string_view NodeStatusFor(v1::FaultLevel worst) {
  if (worst >= v1::FAULT_LEVEL_RESTART_REQUEST) return kNodeUnHealthy;
  if (worst == v1::FAULT_LEVEL_PRE_SEPARATE) return kNodePreSeparate;
  if (worst == v1::FAULT_LEVEL_SUB_HEALTH) return kNodeSubHealthy;
  return kNodeHealthy;
}

NodeInfo NodeInfoFromFaults(const std::vector<NodeLevelFault>& faults) {
  struct Device {
    std::vector<std::string> codes;
    v1::FaultLevel worst = v1::FAULT_LEVEL_UNSPECIFIED;
  };
  std::map<std::pair<std::string, int64_t>, Device> devices;
  v1::FaultLevel worst = v1::FAULT_LEVEL_UNSPECIFIED;
  for (const NodeLevelFault& f : faults) {
    if (f.level <= v1::FAULT_LEVEL_NOT_HANDLE) continue;
    Device& d = devices[{f.kind, f.device_id}];
    d.codes.push_back(f.code);
    d.worst = std::max(d.worst, f.level);
    worst = std::max(worst, f.level);
  }
  NodeInfo info;
  for (auto& [key, d] : devices) {
    std::sort(d.codes.begin(), d.codes.end());
    d.codes.erase(std::unique(d.codes.begin(), d.codes.end()), d.codes.end());
    info.faults.push_back(NodeFaultDevice{key.first, key.second, std::move(d.codes), std::string(LevelName(d.worst))});
  }
  info.node_status = std::string(NodeStatusFor(worst));
  return info;
}

StatusOr<std::string> ClusterInfoNodeValue(const std::map<std::string, PublishedNodeInfo>& nodes, size_t max_bytes) {
  if (nodes.empty()) return std::string();
  std::string out = "{";
  for (const auto& [node, p] : nodes) {
    if (out.size() > 1) out.push_back(',');
    const std::string cm = std::string(kNodeInfoPrefix) + node;
    out += GoJsonString(cm) + ":{\"FaultDevList\":" + FaultDevListJson(p.info.faults) +
           ",\"NodeStatus\":" + GoJsonString(p.info.node_status) + ",\"CmName\":" + GoJsonString(cm) +
           ",\"UpdateTime\":" + std::to_string(p.update_time_ms) + "}";
    if (out.size() + 1 > max_bytes) {
      return InvalidArgument("cluster-info-node-cm would pass " + std::to_string(max_bytes) + " bytes at node " + node);
    }
  }
  return out + "}";
}

}  // namespace clusterd::mindcluster
