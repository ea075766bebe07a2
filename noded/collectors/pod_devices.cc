#include "noded/collectors/pod_devices.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "common/validation.h"

namespace clusterd::noded {
namespace {

bool IsAccelerator(std::string_view resource, const std::vector<std::string>& resources) {
  for (const auto& r : resources) {
    if (!r.empty() && r.back() == '*') {
      if (resource.substr(0, r.size() - 1) == std::string_view(r).substr(0, r.size() - 1)) return true;
    } else if (resource == r) {
      return true;
    }
  }
  return false;
}

std::optional<int32_t> Decimal(std::string_view text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int32_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

bool IsAlnumWord(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); });
}

class DeviceNames {
 public:
  explicit DeviceNames(std::span<const DeviceInfo> devices) {
    for (const auto& d : devices) {
      ids_.insert(d.id);
      for (const auto& k : d.kubelet_ids) {
        if (!k.empty()) by_name_.emplace(k, d.id);
      }
    }
  }

  std::optional<uint32_t> Resolve(std::string_view id) const {
    if (auto it = by_name_.find(std::string(id)); it != by_name_.end()) return static_cast<uint32_t>(it->second);
    std::optional<int32_t> n = Decimal(id);
    if (!n) {
      const size_t dash = id.find('-');
      if (dash != std::string_view::npos && id.find('-', dash + 1) == std::string_view::npos &&
          IsAlnumWord(id.substr(0, dash))) {
        n = Decimal(id.substr(dash + 1));
      }
    }
    if (n && ids_.count(*n)) return static_cast<uint32_t>(*n);
    return std::nullopt;
  }

 private:
  std::set<int32_t> ids_;
  std::map<std::string, int32_t, std::less<>> by_name_;
};

}  // namespace

PodDevicesResult MapPodDevices(std::span<const KubeletPod> pods, std::span<const DeviceInfo> devices,
                               const PodDevicesOptions& options) {
  PodDevicesResult out;
  const DeviceNames names(devices);
  // By (namespace, name); a pod listed twice is left out altogether.
  std::map<std::pair<std::string, std::string>, std::optional<std::vector<uint32_t>>> by_pod;
  for (const auto& pod : pods) {
    std::set<uint32_t> held;
    bool any = false, mapped = true;
    for (const auto& d : pod.devices) {
      if (!IsAccelerator(d.resource, options.resources)) continue;
      for (const auto& id : d.ids) {
        any = true;
        if (auto dev = names.Resolve(id)) {
          held.insert(*dev);
          continue;
        }
        mapped = false;
        ++out.unmapped_ids;
        if (out.first_unmapped.empty()) {
          out.first_unmapped =
              d.resource + " " + id.substr(0, 128) + " of pod " + pod.ns.substr(0, 63) + "/" + pod.name.substr(0, 253);
        }
      }
    }
    if (!any) continue;
    const bool valid_names =
        ValidateNodeName("namespace", pod.ns).ok() && pod.ns.size() <= 63 && ValidateNodeName("name", pod.name).ok();
    auto [it, fresh] = by_pod.try_emplace({pod.ns, pod.name});
    if (!fresh || !mapped || !valid_names) {
      if (fresh || it->second.has_value()) ++out.pods_left_out;
      it->second.reset();
      continue;
    }
    it->second.emplace(held.begin(), held.end());
  }
  size_t ids = 0;
  for (auto& [key, held] : by_pod) {
    if (!held) continue;
    if (out.pods.size() >= options.max_pods || ids + held->size() > options.max_ids) {
      ++out.pods_left_out;
      continue;
    }
    ids += held->size();
    out.pods.push_back(PodDevices{key.first, key.second, std::move(*held)});
  }
  return out;
}

}  // namespace clusterd::noded
