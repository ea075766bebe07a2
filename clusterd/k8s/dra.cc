#include "clusterd/k8s/dra.h"

#include <algorithm>
#include <tuple>

#include "clusterd/k8s/api/client.h"  // UrlEncode
#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/requests.h"  // RecordName

namespace clusterd::k8s {
namespace {

using nlohmann::json;

// The value of an int attribute of a device ({"int": 3}), found under its
// own name or qualified with a domain ("gpu.nvidia.com/index"); v1beta1
// keeps attributes under "basic". nullopt when the device has no such
// attribute; an attribute of another type reads as -1 (never an id).
std::optional<int64_t> IntAttribute(const json& device, const std::string& name) {
  const json* attrs = nullptr;
  if (device.contains("attributes")) {
    attrs = &device["attributes"];
  } else if (device.contains("basic") && device["basic"].is_object() && device["basic"].contains("attributes")) {
    attrs = &device["basic"]["attributes"];
  }
  if (attrs == nullptr || !attrs->is_object()) return std::nullopt;
  for (const auto& [key, value] : attrs->items()) {
    const bool named = key == name || (key.size() > name.size() && key.ends_with("/" + name));
    if (!named) continue;
    if (value.is_object() && value.contains("int") && value["int"].is_number_integer()) {
      return value["int"].get<int64_t>();
    }
    return -1;
  }
  return std::nullopt;
}

bool NameMatches(const std::string& name, const std::vector<std::string>& templates, uint32_t id) {
  const std::string digits = std::to_string(id);
  for (std::string t : templates) {
    for (size_t at = t.find("{id}"); at != std::string::npos; at = t.find("{id}", at + digits.size())) {
      t.replace(at, 4, digits);
    }
    if (t == name) return true;
  }
  return false;
}

int EffectRank(const std::string& effect) {
  if (effect == "None") return 0;
  if (effect == "NoSchedule") return 1;
  return 2;  // NoExecute, and any effect added later: never weakened
}

}  // namespace

std::string DraPath(std::string_view version, std::string_view resource, std::string_view name) {
  std::string path = "/apis/resource.k8s.io/" + std::string(version) + "/" + std::string(resource);
  if (!name.empty()) path += "/" + UrlEncode(name);
  return path;
}

std::string NodeSlicesPath(std::string_view version, std::string_view node) {
  return DraPath(version, "resourceslices") + "?fieldSelector=" + UrlEncode("spec.nodeName=" + std::string(node));
}

std::string ManagedRulesPath(std::string_view version) {
  return DraPath(version, "devicetaintrules") + "?labelSelector=" + UrlEncode(std::string(kManagedLabel) + "=true");
}

std::vector<DraDevice> MatchDraDevices(const json& slices, std::string_view node, uint32_t id, const DraMatch& match) {
  std::vector<DraDevice> out;
  if (!slices.is_array() || node.empty()) return out;
  for (const auto& slice : slices) {
    if (!slice.is_object() || StringAt(slice, {"spec", "nodeName"}) != node) continue;
    const std::string driver = StringAt(slice, {"spec", "driver"});
    if (!match.drivers.empty() &&
        std::find(match.drivers.begin(), match.drivers.end(), driver) == match.drivers.end()) {
      continue;
    }
    const json& spec = slice["spec"];
    if (!spec.contains("devices") || !spec["devices"].is_array()) continue;
    const std::string pool = StringAt(slice, {"spec", "pool", "name"});
    for (const auto& device : spec["devices"]) {
      const std::string name = device.is_object() ? StringAt(device, {"name"}) : "";
      if (name.empty() || driver.empty() || pool.empty()) continue;
      std::optional<int64_t> value;
      if (!match.attribute.empty()) value = IntAttribute(device, match.attribute);
      if (value ? *value == id : NameMatches(name, match.names, id)) out.push_back({driver, pool, name});
    }
  }
  std::sort(out.begin(), out.end(), [](const DraDevice& a, const DraDevice& b) {
    return std::tie(a.driver, a.pool, a.name) < std::tie(b.driver, b.pool, b.name);
  });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string DeviceTaintEffect(v1::FaultLevel level) {
  return level == v1::FAULT_LEVEL_SEPARATE ? "NoExecute" : "NoSchedule";
}

std::string DeviceTaintRuleName(std::string_view node, uint32_t device) {
  return RecordName("dra/" + std::string(node) + "/" + std::to_string(device));
}

json DeviceTaintRuleBody(const DeviceTaintSpec& spec) {
  return {
      {"apiVersion", "resource.k8s.io/" + spec.version},
      {"kind", "DeviceTaintRule"},
      {"metadata",
       {{"name", DeviceTaintRuleName(spec.node, spec.device)},
        {"labels", {{std::string(kManagedLabel), "true"}}},
        {"annotations",
         {{std::string(kRuleNodeAnnotation), spec.node},
          {std::string(kRuleDeviceAnnotation), std::to_string(spec.device)},
          {std::string(kRuleIsolatedAtAnnotation), spec.now}}}}},
      {"spec",
       {{"deviceSelector", {{"driver", spec.target.driver}, {"pool", spec.target.pool}, {"device", spec.target.name}}},
        {"taint", {{"key", spec.key}, {"value", spec.value}, {"effect", spec.effect}}}}}};
}

std::optional<json> DeviceTaintRulePatch(const json& rule, const json& want) {
  json spec = json::object();
  const json& want_selector = want["spec"]["deviceSelector"];
  for (const char* field : {"driver", "pool", "device"}) {
    if (StringAt(rule, {"spec", "deviceSelector", field}) != want_selector.value(field, "")) {
      spec["deviceSelector"] = want_selector;
      break;
    }
  }
  const std::string have_effect = StringAt(rule, {"spec", "taint", "effect"});
  const json& want_taint = want["spec"]["taint"];
  if (StringAt(rule, {"spec", "taint", "key"}) != want_taint.value("key", "") ||
      EffectRank(want_taint.value("effect", "")) > EffectRank(have_effect)) {
    spec["taint"] = want_taint;
  }
  if (spec.empty()) return std::nullopt;
  return json{{"metadata", {{"resourceVersion", ResourceVersionOf(rule)}}}, {"spec", spec}};
}

std::optional<ManagedRule> ParseManagedRule(const json& rule) {
  if (StringAt(rule, {"metadata", "labels", kManagedLabel}) != "true") return std::nullopt;
  ManagedRule r;
  r.name = StringAt(rule, {"metadata", "name"});
  r.node = Annotation(rule, std::string(kRuleNodeAnnotation));
  const std::string device = Annotation(rule, std::string(kRuleDeviceAnnotation));
  if (r.name.empty() || r.node.empty() || device.empty() || device.size() > 5 ||
      !std::all_of(device.begin(), device.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  r.device = static_cast<uint32_t>(std::stoul(device));
  r.isolated_at = ParseRfc3339(Annotation(rule, std::string(kRuleIsolatedAtAnnotation)));
  return r;
}

}  // namespace clusterd::k8s
