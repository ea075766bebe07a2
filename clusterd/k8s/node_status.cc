// Kubernetes Nodes: their Ready condition and accelerator resource in, the
// accelerator condition out (node_status.h). Every JSON access is checked.
#include "clusterd/k8s/node_status.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <set>
#include <tuple>
#include <utility>

#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/api_input.h"
#include "clusterd/state/fault_table.h"
#include "common/duration.h"
#include "common/levels.h"
#include "common/validation.h"

namespace clusterd::k8s {

using input::kMaxFieldBytes;
using input::Printable;
using nlohmann::json;

std::string_view ReadinessName(NodeReadiness::State state) {
  switch (state) {
    case NodeReadiness::State::kReady: return "Ready";
    case NodeReadiness::State::kNotReady: return "NotReady";
    case NodeReadiness::State::kUnknown: return "Unknown";
  }
  return "Unknown";
}

std::optional<AcceleratorAllocatable> ParseAcceleratorAllocatable(const json& node) {
  if (!node.is_object()) return std::nullopt;
  const json* status = node.contains("status") && node["status"].is_object() ? &node["status"] : nullptr;
  if (status == nullptr) return std::nullopt;
  auto count = [](const json& map, const std::string& key) -> std::optional<uint32_t> {
    if (!map.is_object() || !map.contains(key)) return std::nullopt;
    const uint64_t n = DeviceQuantity(map[key]);
    return n < (1u << 20) ? std::optional<uint32_t>(static_cast<uint32_t>(n)) : std::nullopt;
  };
  const json capacity = status->value("capacity", json::object());
  const json allocatable = status->value("allocatable", json::object());
  for (const char* resource :
       {"huawei.com/Ascend910", "huawei.com/Ascend310P", "huawei.com/Ascend310", "huawei.com/npu", "nvidia.com/gpu"}) {
    auto cap = count(capacity, resource);
    if (!cap) continue;
    AcceleratorAllocatable out;
    out.resource = resource;
    out.capacity = *cap;
    if (allocatable.is_object() && allocatable.contains(resource)) {
      auto alloc = count(allocatable, resource);
      if (!alloc) return std::nullopt;
      out.allocatable = *alloc;
    }
    return out;
  }
  return std::nullopt;
}

StatusOr<NodeReadiness> ParseNodeReadiness(const json& node) {
  try {
    if (!node.is_object()) return InvalidArgument("node: not a JSON object");
    const json* md = ValueAt(node, {"metadata"});
    if (!md) return InvalidArgument("node: no metadata");
    NodeReadiness r;
    r.name = StringAt(*md, {"name"});
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node metadata.name", r.name));
    if (const json* spec = ValueAt(node, {"spec"})) {
      const json* u = ValueAt(*spec, {"unschedulable"});
      r.unschedulable = u && u->is_boolean() && u->get<bool>();
    }
    const json* status = ValueAt(node, {"status"});
    const json* conditions = status ? ValueAt(*status, {"conditions"}) : nullptr;
    if (conditions && conditions->is_array()) {
      for (const json& c : *conditions) {
        const std::string* type = StringPtrAt(c, {"type"});
        if (!type || *type != "Ready") continue;
        const std::string s = StringAt(c, {"status"});
        r.state = s == "True"    ? NodeReadiness::State::kReady
                  : s == "False" ? NodeReadiness::State::kNotReady
                                 : NodeReadiness::State::kUnknown;
        r.reason = Printable(StringAt(c, {"reason"}));
        r.message = Printable(StringAt(c, {"message"}));
        r.last_transition_time = Printable(StringAt(c, {"lastTransitionTime"}), 64);
        break;
      }
    }
    return r;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("node: unreadable object: ") + Printable(e.what(), 200));
  }
}

json AcceleratorCondition(const v1::Node& node, std::string_view type, std::span<const v1::Fault> active_faults,
                          size_t max_codes) {
  struct Entry {
    v1::FaultLevel level;
    std::string code;
    std::optional<uint32_t> device;
    bool operator<(const Entry& o) const {
      // Worst first, then code, then node-level before devices, then device.
      return std::make_tuple(-static_cast<int>(level), code, device.has_value(), device.value_or(0)) <
             std::make_tuple(-static_cast<int>(o.level), o.code, o.device.has_value(), o.device.value_or(0));
    }
  };
  std::set<Entry> entries;
  v1::FaultLevel worst = node.worst_level();
  for (const v1::Fault& f : active_faults) {
    if (f.state() != v1::FAULT_STATE_ACTIVE || f.level() <= v1::FAULT_LEVEL_NOT_HANDLE) continue;
    if (!BlamesHardware(f)) continue;  // the job's (fault_table.h): not the node's condition
    if (!f.node().empty() && f.node() != node.name()) continue;
    if (!v1::FaultLevel_IsValid(f.level())) continue;
    if (f.level() > worst) worst = f.level();
    entries.insert(Entry{f.level(), Printable(f.code(), 64),
                         f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt});
  }
  std::string status, reason, message;
  switch (node.health()) {
    case v1::HEALTH_HEALTHY: status = "True", reason = "AcceleratorHealthy"; break;
    case v1::HEALTH_SUB_HEALTHY: status = "True", reason = "AcceleratorSubHealthy"; break;
    case v1::HEALTH_UNHEALTHY: status = "False", reason = "AcceleratorFaulty"; break;
    case v1::HEALTH_UNKNOWN:
      status = "Unknown", reason = "NodeAgentLost";
      message = "no heartbeat from the node agent; ";
      break;
    default: status = "Unknown", reason = "HealthUnknown"; break;
  }
  if (entries.empty()) {
    message += "no active faults";
  } else {
    message += "worst level " + ShortLevelName(worst) + "; " + std::to_string(entries.size()) + " active fault" +
               (entries.size() == 1 ? "" : "s") + ": ";
    size_t shown = 0;
    for (const Entry& e : entries) {
      if (shown == max_codes) break;
      if (shown > 0) message += ", ";
      message += e.code + " (" + (e.device ? "device " + std::to_string(*e.device) : std::string("node")) + ", " +
                 ShortLevelName(e.level) + ")";
      ++shown;
    }
    if (shown < entries.size()) message += ", and " + std::to_string(entries.size() - shown) + " more";
  }
  if (message.size() > kMaxFieldBytes) {
    message.resize(kMaxFieldBytes - 3);  // ASCII only (Printable): any cut is a character boundary
    message += "...";
  }
  json c = json::object();
  c["type"] = std::string(type);
  c["status"] = status;
  c["reason"] = reason;
  c["message"] = message;
  return c;
}

namespace {

const json* FindCondition(const json& node_object, const json& condition) {
  const std::string* type = StringPtrAt(condition, {"type"});
  if (!type) return nullptr;
  const json* status = ValueAt(node_object, {"status"});
  const json* conditions = status ? ValueAt(*status, {"conditions"}) : nullptr;
  if (!conditions || !conditions->is_array()) return nullptr;
  for (const json& c : *conditions) {
    const std::string* t = StringPtrAt(c, {"type"});
    if (t && *t == *type) return &c;
  }
  return nullptr;
}

}  // namespace

bool ConditionMatches(const json& node_object, const json& condition) {
  try {
    const json* existing = FindCondition(node_object, condition);
    if (!existing) return false;
    for (const char* field : {"status", "reason", "message"}) {
      const std::string* want = StringPtrAt(condition, {field});
      const std::string* have = StringPtrAt(*existing, {field});
      if ((want ? *want : std::string()) != (have ? *have : std::string())) return false;
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

json StampCondition(const json& node_object, json condition, std::string_view now) {
  try {
    if (!condition.is_object()) return condition;
    std::string transition(now);
    if (const json* existing = FindCondition(node_object, condition)) {
      const std::string* old_status = StringPtrAt(*existing, {"status"});
      const std::string* new_status = StringPtrAt(condition, {"status"});
      const std::string* old_time = StringPtrAt(*existing, {"lastTransitionTime"});
      if (old_status && new_status && *old_status == *new_status && old_time && !old_time->empty()) {
        transition = *old_time;
      }
    }
    condition["lastHeartbeatTime"] = std::string(now);
    condition["lastTransitionTime"] = transition;
    return condition;
  } catch (const std::exception&) {
    return condition;
  }
}

}  // namespace clusterd::k8s
