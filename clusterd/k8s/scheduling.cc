#include "clusterd/k8s/scheduling.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "clusterd/k8s/api_input.h"
#include "clusterd/k8s/discovery.h"

namespace clusterd::k8s {

using nlohmann::json;

// Not anonymous: the unity build puts other files' helpers next to these.
namespace pending {

constexpr size_t kMaxEvidence = 512;
constexpr uint32_t kMaxCount = 1u << 20;

const json& Field(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

std::string Str(const json& v) { return v.is_string() ? v.get<std::string>() : std::string(); }

// An extended resource a device plugin registers ("vendor.com/name"), not
// one of Kubernetes' own.
bool Extended(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos || slash == 0) return false;
  const std::string domain = name.substr(0, slash);
  return domain.find('.') != std::string::npos && domain != "kubernetes.io" &&
         (domain.size() < 14 || domain.compare(domain.size() - 14, 14, ".kubernetes.io") != 0);
}

// The extended resources a pod asks for: per container its limits (else its
// requests), added up.
std::map<std::string, uint32_t> Asked(const json& pod) {
  std::map<std::string, uint32_t> out;
  const json& containers = Field(Field(pod, "spec"), "containers");
  if (!containers.is_array()) return out;
  for (const json& c : containers) {
    const json& res = Field(c, "resources");
    std::map<std::string, uint32_t> mine;
    for (const char* kind : {"requests", "limits"}) {  // limits win
      const json& m = Field(res, kind);
      if (!m.is_object()) continue;
      for (const auto& [name, q] : m.items()) {
        if (!Extended(name)) continue;
        if (const uint64_t n = DeviceQuantity(q); n <= kMaxCount) mine[name] = static_cast<uint32_t>(n);
      }
    }
    for (const auto& [name, n] : mine) out[name] = std::min(kMaxCount, out[name] + n);
  }
  std::erase_if(out, [](const auto& e) { return e.second == 0; });
  return out;
}

bool Unschedulable(const json& pod) {
  if (Str(Field(Field(pod, "status"), "phase")) != "Pending") return false;
  if (!Str(Field(Field(pod, "spec"), "nodeName")).empty()) return false;
  if (!Field(Field(pod, "metadata"), "deletionTimestamp").is_null()) return false;
  const json& conds = Field(Field(pod, "status"), "conditions");
  if (!conds.is_array()) return false;
  for (const json& c : conds) {
    if (Str(Field(c, "type")) == "PodScheduled" && Str(Field(c, "status")) == "False" &&
        Str(Field(c, "reason")) == "Unschedulable") {
      return true;
    }
  }
  return false;
}

struct Taint {
  std::string key, value, effect;
  std::string Text() const { return key + (value.empty() ? "" : "=" + value) + ":" + effect; }
};

// The Node's taints that keep pods off (NoSchedule, NoExecute), a cordon as
// the taint Kubernetes puts for it.
std::vector<Taint> Blocking(const json& node) {
  std::vector<Taint> out;
  const json& spec = Field(node, "spec");
  if (Field(spec, "unschedulable").is_boolean() && Field(spec, "unschedulable").get<bool>()) {
    out.push_back({"node.kubernetes.io/unschedulable", "", "NoSchedule"});
  }
  const json& taints = Field(spec, "taints");
  if (taints.is_array()) {
    for (const json& t : taints) {
      Taint x{Str(Field(t, "key")), Str(Field(t, "value")), Str(Field(t, "effect"))};
      if (x.effect == "NoSchedule" || x.effect == "NoExecute") out.push_back(std::move(x));
    }
  }
  return out;
}

bool Tolerates(const json& pod, const Taint& taint) {
  const json& tols = Field(Field(pod, "spec"), "tolerations");
  if (!tols.is_array()) return false;
  for (const json& t : tols) {
    const std::string key = Str(Field(t, "key")), op = Str(Field(t, "operator")), effect = Str(Field(t, "effect"));
    if (!effect.empty() && effect != taint.effect) continue;
    if (op == "Exists") {
      if (key.empty() || key == taint.key) return true;
    } else if (key == taint.key && Str(Field(t, "value")) == taint.value) {
      return true;
    }
  }
  return false;
}

std::string Bounded(std::string s) {
  if (s.size() > kMaxEvidence) s = s.substr(0, kMaxEvidence - 3) + "...";
  return s;
}

}  // namespace pending

std::vector<PendingFinding> DiagnosePending(const std::vector<json>& pods, const std::vector<json>& nodes, size_t max) {
  // What each node offers, and its blocking taints.
  struct NodeOffer {
    std::string name;
    std::map<std::string, uint32_t> allocatable;  // extended resources only
    std::vector<pending::Taint> taints;
  };
  std::vector<NodeOffer> offers;
  std::map<std::string, size_t> offered_by;  // resource -> nodes offering any of it
  for (const json& n : nodes) {
    NodeOffer o;
    o.name = pending::Str(pending::Field(pending::Field(n, "metadata"), "name"));
    const json& alloc = pending::Field(pending::Field(n, "status"), "allocatable");
    if (o.name.empty() || !alloc.is_object()) continue;
    for (const auto& [name, q] : alloc.items()) {
      if (!pending::Extended(name)) continue;
      if (const uint64_t c = DeviceQuantity(q); c > 0 && c <= pending::kMaxCount) {
        o.allocatable[name] = static_cast<uint32_t>(c);
        ++offered_by[name];
      }
    }
    o.taints = pending::Blocking(n);
    offers.push_back(std::move(o));
  }
  std::vector<PendingFinding> out;
  for (const json& pod : pods) {
    if (!pending::Unschedulable(pod)) continue;
    const json& meta = pending::Field(pod, "metadata");
    for (const auto& [resource, count] : pending::Asked(pod)) {
      PendingFinding f{pending::Str(pending::Field(meta, "namespace")),
                       pending::Str(pending::Field(meta, "name")),
                       pending::Str(pending::Field(meta, "uid")),
                       resource,
                       count,
                       "",
                       ""};
      if (!offered_by.count(resource)) {
        // A name mismatch: what the nodes offer instead, of the same vendor first.
        const std::string domain = resource.substr(0, resource.find('/') + 1);
        std::vector<std::pair<size_t, std::string>> others;
        for (const auto& [name, nodes_with] : offered_by) {
          if (name.rfind(domain, 0) == 0) others.emplace_back(nodes_with, name);
        }
        std::sort(others.rbegin(), others.rend());
        std::string list;
        for (size_t i = 0; i < others.size() && i < 3; ++i) {
          list += (i ? ", " : "") + others[i].second + " (" + std::to_string(others[i].first) + " nodes)";
        }
        f.reason = "no-node-offers";
        f.evidence = "no node offers " + resource +
                     (list.empty() ? "; no node offers any " + domain.substr(0, domain.size() - 1) + " resource"
                                   : "; nodes offer " + list);
      } else {
        std::vector<const NodeOffer*> enough;
        uint32_t most = 0;
        std::string most_on;
        for (const NodeOffer& o : offers) {
          auto it = o.allocatable.find(resource);
          if (it == o.allocatable.end()) continue;
          if (it->second > most) {
            most = it->second;
            most_on = o.name;
          }
          if (it->second >= count) enough.push_back(&o);
        }
        if (enough.empty()) {
          f.reason = "too-few";
          f.evidence = "no node offers " + std::to_string(count) + " " + resource + ": at most " +
                       std::to_string(most) + " (" + most_on + ")";
        } else {
          std::map<std::string, size_t> blocking;  // taint text -> nodes
          bool free = false;
          for (const NodeOffer* o : enough) {
            std::vector<std::string> mine;
            for (const pending::Taint& t : o->taints) {
              if (!pending::Tolerates(pod, t)) mine.push_back(t.Text());
            }
            if (mine.empty()) {
              free = true;
              break;
            }
            for (const auto& t : mine) ++blocking[t];
          }
          if (free) continue;  // some node fits on this count: not the accelerator's trouble
          std::string list;
          size_t shown = 0;
          for (const auto& [text, n] : blocking) {
            if (shown++ == 3) break;
            list += (list.empty() ? "" : ", ") + text + " (" + std::to_string(n) + " nodes)";
          }
          f.reason = "taints";
          f.evidence = "the " + std::to_string(enough.size()) + " node(s) with " + std::to_string(count) + " " +
                       resource + " all carry a taint the pod does not tolerate: " + list;
        }
      }
      f.evidence = pending::Bounded(std::move(f.evidence));
      out.push_back(std::move(f));
    }
  }
  std::sort(out.begin(), out.end(), [](const PendingFinding& a, const PendingFinding& b) {
    return std::tie(a.ns, a.pod, a.resource) < std::tie(b.ns, b.pod, b.resource);
  });
  if (out.size() > max) out.resize(max);
  return out;
}

}  // namespace clusterd::k8s
