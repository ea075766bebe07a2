#include "clusterd/k8s/requests.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "clusterd/k8s/api/client.h"  // UrlEncode
#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/discovery.h"
#include "clusterd/k8s/node_status.h"
#include "common/config_util.h"

namespace clusterd::k8s {
namespace {

using nlohmann::json;

// The resourceVersion guard every Node JSON patch starts with: the patch
// fails (422) when the Node changed since it was read.
json TestResourceVersion(const json& node) {
  return {{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", ResourceVersionOf(node)}};
}

// The Node's taints without those with `key`.
json NodeTaintsWithout(const json& node, const std::string& key) {
  json taints = json::array();
  for (const auto& t : Taints(node)) {
    if (!(t.is_object() && StringAt(t, {"key"}) == key)) taints.push_back(t);
  }
  return taints;
}

// The guarded patch that writes `taints` as the Node's (op "add" or "replace").
json NodeTaintsPatch(const json& node, std::string_view op, json taints) {
  json ops = json::array();
  ops.push_back(TestResourceVersion(node));
  ops.push_back({{"op", op}, {"path", "/spec/taints"}, {"value", std::move(taints)}});
  return ops;
}

}  // namespace

std::string NodePath(std::string_view node) { return "/api/v1/nodes/" + UrlEncode(node); }

std::string PodPath(std::string_view ns, std::string_view name) {
  return "/api/v1/namespaces/" + UrlEncode(ns) + "/pods/" + UrlEncode(name);
}

std::string EventsPath(std::string_view ns) { return "/apis/events.k8s.io/v1/namespaces/" + UrlEncode(ns) + "/events"; }

std::optional<json> IsolateNodePatch(const json& node, const KubernetesMarks& marks, std::string_view level,
                                     std::string_view effect, std::string_view now) {
  const bool tainted = HasTaint(node, marks.taint_key);
  const bool cordoned = Unschedulable(node);
  if (tainted && cordoned) return std::nullopt;
  json taints = Taints(node);
  if (!tainted) {
    taints.push_back({{"key", marks.taint_key}, {"value", level}, {"effect", effect}, {"timeAdded", now}});
  }
  json ops = json::array();
  ops.push_back(TestResourceVersion(node));
  ops.push_back({{"op", "add"}, {"path", "/spec/taints"}, {"value", taints}});
  if (!cordoned) ops.push_back({{"op", "add"}, {"path", "/spec/unschedulable"}, {"value", true}});
  json ann = Annotations(node);
  if (!cordoned) ann[marks.cordoned_annotation] = "true";
  ann[marks.isolated_annotation] = now;
  ops.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", ann}});
  return ops;
}

std::set<uint32_t> MarkedDevices(const json& node, const KubernetesMarks& marks) {
  std::set<uint32_t> devices;
  for (const std::string& item : SplitCommaList(Annotation(node, marks.devices_annotation))) {
    if (item.size() < 6 &&
        std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
      devices.insert(static_cast<uint32_t>(std::stoul(item)));
    }
  }
  return devices;
}

std::string DeviceList(const std::vector<uint32_t>& devices) {
  std::vector<std::string> items;
  items.reserve(devices.size());
  for (uint32_t d : devices) items.push_back(std::to_string(d));
  return JoinCommaList(items);
}

std::optional<json> IsolateDevicePatch(const json& node, const KubernetesMarks& marks, uint32_t device) {
  std::set<uint32_t> devices = MarkedDevices(node, marks);
  if (!devices.insert(device).second) return std::nullopt;
  json ann = Annotations(node);
  ann[marks.devices_annotation] = DeviceList({devices.begin(), devices.end()});
  json ops = json::array();
  ops.push_back(TestResourceVersion(node));
  ops.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", ann}});
  return ops;
}

std::string_view IsolationViewName(IsolationView view) {
  switch (view) {
    case IsolationView::kVolcano: return "volcano";
    case IsolationView::kDra: return "dra";
    case IsolationView::kAllocatable: return "allocatable";
    case IsolationView::kNone: break;
  }
  return "none";
}

IsolationView DecideIsolationView(const IsolationViewInputs& in) {
  if (in.volcano) return IsolationView::kVolcano;
  if (in.dra) return IsolationView::kDra;
  if (in.has_resource && in.isolated_on_node > 0 && in.allocatable <= in.capacity &&
      in.capacity - in.allocatable >= in.isolated_on_node) {
    return IsolationView::kAllocatable;
  }
  return IsolationView::kNone;
}

std::string DeviceTaintKey(const KubernetesMarks& marks, uint32_t device) {
  return marks.device_taint_prefix + std::to_string(device);
}

std::optional<json> DeviceFallbackTaintPatch(const json& node, const KubernetesMarks& marks, uint32_t device,
                                             std::string_view level, std::string_view now) {
  const std::string key = DeviceTaintKey(marks, device);
  if (HasTaint(node, key)) return std::nullopt;
  json taints = Taints(node);
  taints.push_back({{"key", key}, {"value", level}, {"effect", "NoSchedule"}, {"timeAdded", now}});
  json ops = json::array();
  ops.push_back(TestResourceVersion(node));
  ops.push_back({{"op", "add"}, {"path", "/spec/taints"}, {"value", taints}});
  return ops;
}

std::map<uint32_t, int64_t> DeviceFallbackTaints(const json& node, const KubernetesMarks& marks) {
  std::map<uint32_t, int64_t> out;
  if (marks.device_taint_prefix.empty()) return out;
  for (const auto& t : Taints(node)) {
    if (!t.is_object()) continue;
    const std::string key = StringAt(t, {"key"});
    if (key.size() <= marks.device_taint_prefix.size() || key.rfind(marks.device_taint_prefix, 0) != 0) continue;
    const std::string id = key.substr(marks.device_taint_prefix.size());
    if (id.size() > 5 || !std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
      continue;
    }
    out[static_cast<uint32_t>(std::stoul(id))] = ParseRfc3339(StringAt(t, {"timeAdded"}));
  }
  return out;
}

json RemoveDeviceTaintsPatch(const json& node, const KubernetesMarks& marks, const std::set<uint32_t>& devices) {
  std::set<std::string> keys;
  for (uint32_t d : devices) keys.insert(DeviceTaintKey(marks, d));
  json taints = json::array();
  for (const auto& t : Taints(node)) {
    if (!(t.is_object() && keys.count(StringAt(t, {"key"})))) taints.push_back(t);
  }
  json ops = json::array();
  ops.push_back(TestResourceVersion(node));
  ops.push_back({{"op", "replace"}, {"path", "/spec/taints"}, {"value", taints}});
  return ops;
}

std::optional<std::string> AvoidTaint(const json& node, const KubernetesMarks& marks) {
  if (marks.avoid_taint_key.empty()) return std::nullopt;
  for (const auto& t : Taints(node)) {
    if (t.is_object() && StringAt(t, {"key"}) == marks.avoid_taint_key) return StringAt(t, {"value"});
  }
  return std::nullopt;
}

std::optional<json> AvoidTaintPatch(const json& node, const KubernetesMarks& marks, std::string_view incident,
                                    std::string_view now) {
  if (AvoidTaint(node, marks) == std::optional<std::string>(incident)) return std::nullopt;
  json taints = NodeTaintsWithout(node, marks.avoid_taint_key);
  taints.push_back(
      {{"key", marks.avoid_taint_key}, {"value", incident}, {"effect", "PreferNoSchedule"}, {"timeAdded", now}});
  return NodeTaintsPatch(node, "add", std::move(taints));
}

std::optional<json> RemoveAvoidTaintPatch(const json& node, const KubernetesMarks& marks) {
  if (!AvoidTaint(node, marks)) return std::nullopt;
  return NodeTaintsPatch(node, "replace", NodeTaintsWithout(node, marks.avoid_taint_key));
}

std::string IsolatedPlacement(const std::string& node_name, const std::optional<json>& node,
                              const std::vector<uint32_t>& devices, const KubernetesMarks& marks) {
  if (!node) return "";
  if (HasTaint(*node, marks.taint_key)) return "node " + node_name + " is isolated (taint " + marks.taint_key + ")";
  const std::set<uint32_t> isolated = MarkedDevices(*node, marks);
  std::vector<uint32_t> on;
  for (uint32_t d : devices) {
    if (isolated.count(d)) on.push_back(d);
  }
  if (on.empty()) return "";
  return "device" + std::string(on.size() > 1 ? "s " : " ") + DeviceList(on) + " of node " + node_name + " isolated (" +
         marks.devices_annotation + ")";
}

bool CordonedByClusterd(const json& node, const KubernetesMarks& marks) {
  return Annotation(node, marks.cordoned_annotation) == "true";
}

json UnisolatePatch(const json& node, const KubernetesMarks& marks) {
  json ops = NodeTaintsPatch(node, "replace", NodeTaintsWithout(node, marks.taint_key));
  if (CordonedByClusterd(node, marks)) {
    ops.push_back({{"op", "replace"}, {"path", "/spec/unschedulable"}, {"value", false}});
  }
  for (const auto& key : {marks.cordoned_annotation, marks.isolated_annotation}) {
    if (!Annotation(node, key).empty()) {
      ops.push_back({{"op", "remove"}, {"path", "/metadata/annotations/" + JsonPointerToken(key)}});
    }
  }
  return ops;
}

json NodeCondition(const v1::Node& node, std::string_view type, std::span<const v1::Fault> active_faults,
                   const std::vector<uint32_t>& isolated_devices) {
  json cond = AcceleratorCondition(node, type, active_faults);
  if (!isolated_devices.empty() && cond.is_object()) {
    std::string msg = cond.value("message", std::string());
    msg += (msg.empty() ? "" : "; ") + std::string("isolated devices: ") + DeviceList(isolated_devices);
    cond["message"] = msg.substr(0, 1024);
  }
  return cond;
}

json ConditionPatch(const json& node, const json& condition, std::string_view now) {
  return {{"status", {{"conditions", json::array({StampCondition(node, condition, now)})}}}};
}

json DevicesAnnotationPatch(const KubernetesMarks& marks, std::string_view devices) {
  json value = devices.empty() ? json(nullptr) : json(devices);
  return {{"metadata", {{"annotations", {{marks.devices_annotation, value}}}}}};
}

json EvictionBody(std::string_view ns, std::string_view name, std::string_view uid) {
  return {{"apiVersion", "policy/v1"},
          {"kind", "Eviction"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"deleteOptions", {{"preconditions", {{"uid", uid}}}}}};
}

json DeleteOptionsBody(std::string_view uid) {
  return {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}, {"preconditions", {{"uid", uid}}}};
}

std::string RecordName(std::string_view key) {
  std::string clean;
  for (char c : key) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    clean.push_back(std::isalnum(static_cast<unsigned char>(l)) || l == '.' ? l : '-');
  }
  if (clean.size() > 200) clean.resize(200);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "clusterd-" + clean + "-" + hex;
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "clusterd";
  return buf;
}

std::string EventNamespace(const EventSpec& spec) {
  return spec.regarding_namespace.empty() ? "default" : spec.regarding_namespace;
}

json EventBody(const EventSpec& spec) {
  json regarding = {{"kind", spec.regarding_kind}, {"name", spec.regarding_name}, {"apiVersion", "v1"}};
  if (!spec.regarding_namespace.empty()) regarding["namespace"] = spec.regarding_namespace;
  if (!spec.regarding_uid.empty()) regarding["uid"] = spec.regarding_uid;
  return {{"apiVersion", "events.k8s.io/v1"},
          {"kind", "Event"},
          {"metadata", {{"name", spec.name}, {"namespace", EventNamespace(spec)}}},
          {"eventTime", spec.event_time},
          {"reportingController", "clusterd.io/clusterd"},
          {"reportingInstance", spec.reporting_instance.substr(0, 128)},
          {"action", spec.action},
          {"reason", spec.reason},
          {"type", spec.type},
          {"regarding", regarding},
          {"note", spec.note.substr(0, 1000)}};
}

json RemovalRecordBody(EventSpec spec, std::string_view idempotency_key, const std::vector<std::string>& uids) {
  spec.name = RecordName(idempotency_key);
  json ev = EventBody(spec);
  ev["metadata"]["annotations"] = {{std::string(kPodUidsAnnotation), JoinCommaList(uids)},
                                   {std::string(kIdempotencyKeyAnnotation), idempotency_key}};
  return ev;
}

std::set<std::string> RecordedPodUids(const json& record) {
  std::vector<std::string> uids = SplitCommaList(Annotation(record, std::string(kPodUidsAnnotation)));
  return {uids.begin(), uids.end()};
}

}  // namespace clusterd::k8s
