// Kubernetes job discovery, the objects: Pods and Volcano PodGroups as
// discovery reads them (discovery.h: ParsePod, ParsePodGroup). Every JSON
// access is checked (type tests before get_ref), and each entry point also
// catches what the JSON library might throw, so hostile input never escapes
// as an exception.
#include "clusterd/k8s/discovery.h"

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

using input::ParseUnsigned;
using input::Printable;
using input::Quoted;
using input::SplitComma;
using input::Trim;
using nlohmann::json;

namespace {

struct ObjectMeta {
  std::string ns, name, uid;
  std::string owner_uid, owner_kind, owner_name;
  const json* labels = nullptr;       // object or null
  const json* annotations = nullptr;  // object or null
  bool terminating = false;
};

// metadata of a namespaced object: name, namespace and uid required; the
// controller owner reference optional but validated when present.
StatusOr<ObjectMeta> ParseMeta(const json& obj, std::string_view what) {
  if (!obj.is_object()) return InvalidArgument(std::string(what) + ": not a JSON object");
  const json* md = ValueAt(obj, {"metadata"});
  if (!md || !md->is_object()) return InvalidArgument(std::string(what) + ": no metadata");
  ObjectMeta m;
  m.ns = StringAt(*md, {"namespace"});
  m.name = StringAt(*md, {"name"});
  m.uid = StringAt(*md, {"uid"});
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(std::string(what) + " metadata.namespace", m.ns));
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(std::string(what) + " metadata.name", m.name));
  const std::string where = std::string(what) + " " + m.ns + "/" + m.name;
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(where + " metadata.uid", m.uid));
  if (const json* owners = ValueAt(*md, {"ownerReferences"})) {
    if (!owners->is_array()) return InvalidArgument(where + ": metadata.ownerReferences is not a list");
    for (const json& ref : *owners) {
      const json* controller = ValueAt(ref, {"controller"});
      if (!controller || !controller->is_boolean() || !controller->get<bool>()) continue;
      m.owner_uid = StringAt(ref, {"uid"});
      m.owner_kind = StringAt(ref, {"kind"});
      m.owner_name = StringAt(ref, {"name"});
      CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(where + " controller owner uid", m.owner_uid));
      CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(where + " controller owner name", m.owner_name));
      CLUSTERD_RETURN_IF_ERROR(ValidateToken(where + " controller owner kind", m.owner_kind));
      break;  // the API server allows at most one controller reference
    }
  }
  if (const json* l = ValueAt(*md, {"labels"}); l && l->is_object()) m.labels = l;
  if (const json* a = ValueAt(*md, {"annotations"}); a && a->is_object()) m.annotations = a;
  m.terminating = ValueAt(*md, {"deletionTimestamp"}) != nullptr;
  return m;
}

std::map<std::string, std::string> PolicyAnnotations(const json* annotations, const DiscoveryOptions& opts) {
  std::map<std::string, std::string> out;
  if (!annotations || opts.policy_prefix.empty()) return out;
  for (auto it = annotations->begin(); it != annotations->end(); ++it) {
    if (!it.value().is_string()) continue;
    if (it.key().rfind(opts.policy_prefix, 0) != 0 || it.key() == opts.job_kind_label) continue;
    out.emplace(it.key(), it.value().get<std::string>());
  }
  return out;
}

// The trailing device number of "Ascend910-3" (or "3").
std::optional<uint32_t> DeviceNumber(std::string_view item) {
  const size_t dash = item.rfind('-');
  // "Ascend910-3" or "3"; not "-3" or "Ascend910--3".
  if (dash != std::string_view::npos && (dash == 0 || item[dash - 1] == '-')) return std::nullopt;
  std::string_view digits = dash == std::string_view::npos ? item : item.substr(dash + 1);
  auto v = ParseUnsigned(digits, kMaxDeviceId);
  if (!v) return std::nullopt;
  return static_cast<uint32_t>(*v);
}

// Devices per pod from the containers' limits (requests without a limit).
StatusOr<uint32_t> DevicesFromResources(const json& spec, const DiscoveryOptions& opts, const std::string& where) {
  const json* containers = ValueAt(spec, {"containers"});
  if (!containers) return 0u;
  if (!containers->is_array()) return InvalidArgument(where + ": spec.containers is not a list");
  uint64_t total = 0;
  for (const json& c : *containers) {
    const json* res = ValueAt(c, {"resources"});
    if (!res) continue;
    const json* limits = ValueAt(*res, {"limits"});
    const json* requests = ValueAt(*res, {"requests"});
    // The resources counted in this container: exact names, and those a
    // prefix names (limits first; a request without its limit too).
    std::vector<std::pair<std::string, const json*>> counted;
    for (const auto& name : opts.device_resources) {
      if (name.empty() || name.back() != '*') {
        const json* q = limits ? ValueAt(*limits, {name}) : nullptr;
        if (!q && requests) q = ValueAt(*requests, {name});
        if (q) counted.emplace_back(name, q);
        continue;
      }
      const std::string_view prefix(name.data(), name.size() - 1);
      std::set<std::string> seen;
      for (const json* side : {limits, requests}) {
        if (!side || !side->is_object()) continue;
        for (auto it = side->begin(); it != side->end(); ++it) {
          if (it.key().rfind(prefix, 0) == 0 && seen.insert(it.key()).second) counted.emplace_back(it.key(), &*it);
        }
      }
    }
    for (const auto& [name, q] : counted) {
      const uint64_t n = DeviceQuantity(*q);
      if (n > kMaxDevicesPerPod) {
        return InvalidArgument(where + ": resource " + name + " is not a device count from 0 to " +
                               std::to_string(kMaxDevicesPerPod));
      }
      total += n;
      if (total > kMaxDevicesPerPod) {
        return InvalidArgument(where + ": more than " + std::to_string(kMaxDevicesPerPod) + " devices");
      }
    }
  }
  return static_cast<uint32_t>(total);
}

// The literal value of the first container env var `name`.
// The key of a fieldRef to the pod's own metadata: metadata.labels['KEY'] or
// metadata.annotations['KEY'] (either quote); *label tells which.
std::optional<std::string> MetadataFieldKey(std::string_view path, bool* label) {
  for (std::string_view prefix : {std::string_view("metadata.labels["), std::string_view("metadata.annotations[")}) {
    if (path.substr(0, prefix.size()) != prefix) continue;
    std::string_view rest = path.substr(prefix.size());
    if (rest.size() < 4 || (rest.front() != '\'' && rest.front() != '"') || rest.back() != ']' ||
        rest[rest.size() - 2] != rest.front()) {
      return std::nullopt;
    }
    *label = prefix[9] == 'l';
    return std::string(rest.substr(1, rest.size() - 3));
  }
  return std::nullopt;
}

// A container env var's value: its literal `value`, or its valueFrom.fieldRef
// to the pod's own label or annotation (how Kubeflow's trainer and JobSet give
// PET_NODE_RANK the completion index); *from_key is that key ("" for a literal).
std::optional<std::string> EnvValue(const json& spec, const std::string& name, const json& labels,
                                    const json& annotations, std::string* from_key) {
  const json* containers = ValueAt(spec, {"containers"});
  if (!containers || !containers->is_array()) return std::nullopt;
  for (const json& c : *containers) {
    const json* env = ValueAt(c, {"env"});
    if (!env || !env->is_array()) continue;
    for (const json& e : *env) {
      const std::string* n = StringPtrAt(e, {"name"});
      if (!n || *n != name) continue;
      if (const std::string* v = StringPtrAt(e, {"value"})) {
        from_key->clear();
        return *v;
      }
      const json* from = ValueAt(e, {"valueFrom"});
      const json* ref = from ? ValueAt(*from, {"fieldRef"}) : nullptr;
      const std::string* path = ref ? StringPtrAt(*ref, {"fieldPath"}) : nullptr;
      bool label = false;
      auto key = path ? MetadataFieldKey(*path, &label) : std::nullopt;
      if (!key) continue;
      if (const std::string* v = StringPtrAt(label ? labels : annotations, {*key})) {
        *from_key = *key;
        return *v;
      }
    }
  }
  return std::nullopt;
}

// `v` kept if every character is in `allowed` (plus alphanumerics) and it is
// 1 to `max` long; else "" (a value MindCluster's components would not write).
std::string McFact(const std::string* v, std::string_view allowed, size_t max) {
  if (v == nullptr || v->empty() || v->size() > max) return "";
  for (char c : *v) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && allowed.find(c) == std::string_view::npos) return "";
  }
  return *v;
}

// The first MASTER_ADDR given as a value in the pod's containers' env.
std::string McMasterAddr(const json& spec) {
  const json* containers = ValueAt(spec, {"containers"});
  if (!containers || !containers->is_array()) return "";
  for (const json& c : *containers) {
    const json* env = c.is_object() ? ValueAt(c, {"env"}) : nullptr;
    if (!env || !env->is_array()) continue;
    for (const json& e : *env) {
      if (!e.is_object()) continue;
      const std::string* name = StringPtrAt(e, {"name"});
      if (name && *name == "MASTER_ADDR") return McFact(StringPtrAt(e, {"value"}), ".:-_[]", 253);
    }
  }
  return "";
}

// The device plugin's record of the chips it gave the pod (its annotation
// DiscoveryOptions::device_config_annotation, JSON: {"devices": [{"device_id":
// "0", "device_ip": "192.168.1.6"}, ...]}): device id -> its address on the
// accelerator network. What is unreadable is left out (the address is
// informational: a job is placed without it).
std::map<uint32_t, std::string> McDeviceIps(const std::string* text) {
  std::map<uint32_t, std::string> out;
  if (text == nullptr || text->empty() || text->size() > size_t{256} * 1024) return out;
  const json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  const json* devices = doc.is_object() ? ValueAt(doc, {"devices"}) : nullptr;
  if (!devices || !devices->is_array()) return out;
  for (const json& d : *devices) {
    if (!d.is_object() || out.size() >= kMaxDevicesPerPod) continue;
    const std::string* id = StringPtrAt(d, {"device_id"});
    const std::string* ip = StringPtrAt(d, {"device_ip"});
    auto n = id ? ParseUnsigned(*id, kMaxDeviceId) : std::nullopt;
    if (!n || !ip || !IsAddressText(*ip)) continue;
    out.emplace(static_cast<uint32_t>(*n), *ip);
  }
  return out;
}

}  // namespace

StatusOr<PodInfo> ParsePod(const json& pod, const DiscoveryOptions& opts) {
  try {
    auto meta = ParseMeta(pod, "pod");
    if (!meta.ok()) return meta.status();
    PodInfo p;
    p.ns = std::move(meta->ns);
    p.name = std::move(meta->name);
    p.uid = std::move(meta->uid);
    p.owner_uid = std::move(meta->owner_uid);
    p.owner_kind = std::move(meta->owner_kind);
    p.owner_name = std::move(meta->owner_name);
    p.terminating = meta->terminating;
    const std::string where = "pod " + p.ns + "/" + p.name;
    const json* annotations = meta->annotations;
    const json* labels = meta->labels;
    static const json kEmpty = json::object();
    const json& ann = annotations ? *annotations : kEmpty;
    const json& lab = labels ? *labels : kEmpty;

    if (!opts.podgroup_annotation.empty()) {
      if (const std::string* pg = StringPtrAt(ann, {opts.podgroup_annotation}); pg && !pg->empty()) {
        CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(where + " annotation " + opts.podgroup_annotation, *pg));
        p.podgroup = *pg;
      }
    }
    // A JobSet's pods (each owned by one of its child Jobs) are one job: the
    // JobSet's.
    if (!opts.jobset_uid_label.empty()) {
      if (const std::string* js = StringPtrAt(lab, {opts.jobset_uid_label}); js && !js->empty()) {
        CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(where + " label " + opts.jobset_uid_label, *js));
        p.owner_uid = *js;
        p.owner_kind = "JobSet";
        const std::string* name = StringPtrAt(lab, {opts.jobset_name_label});
        p.owner_name = name && ValidateNodeName("", *name).ok() ? *name : std::string();
        for (const std::string& key : opts.jobset_index_labels) {
          const std::string* v = StringPtrAt(lab, {key});
          if (!v) continue;
          auto index = ParseUnsigned(Trim(*v), kMaxPodRank);
          if (!index) {
            return InvalidArgument(where + ": label " + key + " " + Quoted(*v) + " is not an index from 0 to " +
                                   std::to_string(kMaxPodRank));
          }
          p.jobset_index = static_cast<uint32_t>(*index);
          break;
        }
      }
    }
    if (p.owner_uid.empty() && p.podgroup.empty()) {
      return NotFound(where + ": no controller owner and no PodGroup: not a job pod");
    }
    std::string volcano_job;
    if (!opts.volcano_job_label.empty()) {
      if (const std::string* vj = StringPtrAt(lab, {opts.volcano_job_label}); vj && !vj->empty()) {
        CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(where + " label " + opts.volcano_job_label, *vj));
        volcano_job = *vj;
      }
    }
    p.job_name = !volcano_job.empty() ? volcano_job : !p.owner_name.empty() ? p.owner_name : p.podgroup;

    static const json kEmptySpec = json::object();
    const json* spec_ptr = ValueAt(pod, {"spec"});
    if (spec_ptr && !spec_ptr->is_object()) return InvalidArgument(where + ": spec is not an object");
    const json& spec = spec_ptr ? *spec_ptr : kEmptySpec;

    // Rank: the annotation, else a Kubernetes index (label, then annotation),
    // else the env var.
    const json* rank_ann = opts.rank_annotation.empty() ? nullptr : ValueAt(ann, {opts.rank_annotation});
    std::optional<std::string> rank_text;
    std::string rank_from;
    if (rank_ann) {
      if (!rank_ann->is_string())
        return InvalidArgument(where + ": annotation " + opts.rank_annotation + " is not a string");
      rank_text = rank_ann->get<std::string>();
      rank_from = "annotation " + opts.rank_annotation;
    }
    for (size_t i = 0; !rank_text && i < opts.rank_index_keys.size(); ++i) {
      const std::string& key = opts.rank_index_keys[i];
      if (const std::string* v = StringPtrAt(lab, {key})) {
        rank_text = *v;
        rank_from = "label " + key;
      } else if (const std::string* a = StringPtrAt(ann, {key})) {
        rank_text = *a;
        rank_from = "annotation " + key;
      }
      p.rank_from_index = rank_text.has_value();
    }
    for (std::string_view env_name : SplitComma(opts.rank_env)) {
      if (rank_text) break;
      const std::string name(Trim(env_name));
      std::string from_key;
      rank_text = EnvValue(spec, name, lab, ann, &from_key);
      rank_from = "env " + name + (from_key.empty() ? "" : " (from " + from_key + ")");
      // Taken from a workload index: a configured index key, or Kubernetes' own.
      p.rank_from_index =
          rank_text &&
          (from_key == "batch.kubernetes.io/job-completion-index" || from_key == "apps.kubernetes.io/pod-index" ||
           std::find(opts.rank_index_keys.begin(), opts.rank_index_keys.end(), from_key) != opts.rank_index_keys.end());
    }
    if (!rank_text) return NotFound(where + ": no rank (" + opts.rank_annotation + ")");
    auto rank = ParseUnsigned(Trim(*rank_text), kMaxPodRank);
    if (!rank) {
      return InvalidArgument(where + ": " + rank_from + " " + Quoted(*rank_text) + " is not a rank from 0 to " +
                             std::to_string(kMaxPodRank));
    }
    p.rank = static_cast<uint32_t>(*rank);

    // Devices: the annotation, else the resource limits.
    const json* dev_ann = opts.devices_annotation.empty() ? nullptr : ValueAt(ann, {opts.devices_annotation});
    if (dev_ann && !dev_ann->is_string()) {
      return InvalidArgument(where + ": annotation " + opts.devices_annotation + " is not a string");
    }
    if (dev_ann && !Trim(dev_ann->get_ref<const std::string&>()).empty()) {
      const std::string& text = dev_ann->get_ref<const std::string&>();
      // Each item takes at least two bytes with its comma: a cheap bound first.
      if (text.size() > size_t{64} * kMaxDevicesPerPod) {
        return InvalidArgument(where + ": annotation " + opts.devices_annotation + " is too long");
      }
      std::set<uint32_t> seen;
      for (std::string_view item : SplitComma(text)) {
        auto id = DeviceNumber(item);
        if (!id) {
          return InvalidArgument(where + ": annotation " + opts.devices_annotation + " item " + Quoted(item) +
                                 " does not end in a device number from 0 to " + std::to_string(kMaxDeviceId));
        }
        if (!seen.insert(*id).second) {
          return InvalidArgument(where + ": annotation " + opts.devices_annotation + " lists device " +
                                 std::to_string(*id) + " twice");
        }
        if (p.devices.size() == kMaxDevicesPerPod) {
          return InvalidArgument(where + ": more than " + std::to_string(kMaxDevicesPerPod) + " devices");
        }
        p.devices.push_back(*id);
      }
      p.devices_per_pod = static_cast<uint32_t>(p.devices.size());
    } else {
      auto n = DevicesFromResources(spec, opts, where);
      if (!n.ok()) return n.status();
      p.devices_per_pod = *n;
    }
    const uint64_t width = std::max<uint64_t>(p.devices_per_pod, 1);
    if (uint64_t{p.rank} * width + (width - 1) > UINT32_MAX) {
      return InvalidArgument(where + ": rank " + std::to_string(p.rank) + " x " + std::to_string(width) +
                             " devices does not fit a 32-bit device rank");
    }

    if (const json* node = ValueAt(spec, {"nodeName"})) {
      if (!node->is_string()) return InvalidArgument(where + ": spec.nodeName is not a string");
      const std::string& n = node->get_ref<const std::string&>();
      if (!n.empty()) {
        CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(where + " spec.nodeName", n));
        p.node = n;
      }
    }
    if (const std::string* sched = StringPtrAt(spec, {"schedulerName"})) p.scheduler = Printable(*sched, 64);
    if (const json* status = ValueAt(pod, {"status"})) p.phase = Printable(StringAt(*status, {"phase"}), 64);

    if (!opts.job_kind_label.empty()) {
      if (const std::string* k = StringPtrAt(lab, {opts.job_kind_label})) p.kind_label = Printable(*k, 64);
    }
    p.policy_annotations = PolicyAnnotations(annotations, opts);
    p.framework = McFact(StringPtrAt(lab, {"app"}), "._-", 64);
    if (const std::string* shared = StringPtrAt(ann, {"isSharedTor"}); shared && *shared == "1") {
      p.shared_tor_ip = McFact(StringPtrAt(ann, {"sharedTorIp"}), ".:", 45);
    }
    p.master_addr = McMasterAddr(spec);
    if (!opts.device_config_annotation.empty() && !p.devices.empty()) {
      p.device_ips = McDeviceIps(StringPtrAt(ann, {opts.device_config_annotation}));
    }
    return p;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("pod: unreadable object: ") + Printable(e.what(), 200));
  }
}

StatusOr<PodGroupInfo> ParsePodGroup(const json& podgroup, const DiscoveryOptions& opts) {
  try {
    auto meta = ParseMeta(podgroup, "podgroup");
    if (!meta.ok()) return meta.status();
    PodGroupInfo g;
    g.ns = std::move(meta->ns);
    g.name = std::move(meta->name);
    g.uid = std::move(meta->uid);
    g.owner_uid = std::move(meta->owner_uid);
    g.owner_kind = std::move(meta->owner_kind);
    g.owner_name = std::move(meta->owner_name);
    if (meta->labels && !opts.job_kind_label.empty()) {
      if (const std::string* k = StringPtrAt(*meta->labels, {opts.job_kind_label})) g.kind_label = Printable(*k, 64);
    }
    g.policy_annotations = PolicyAnnotations(meta->annotations, opts);
    for (std::string_view key : kMindClusterRecoveryKeys) {
      const std::string* v = meta->labels ? StringPtrAt(*meta->labels, {key}) : nullptr;
      if (!v && meta->annotations) v = StringPtrAt(*meta->annotations, {key});
      if (!v) continue;
      std::string clean;
      for (char c : *v) {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == ',' || c == '.' || c == '_' || c == '-') clean += c;
        if (clean.size() == 128) break;
      }
      g.mindcluster[std::string(key)] = std::move(clean);
    }
    if (meta->labels) g.framework = McFact(StringPtrAt(*meta->labels, {"framework"}), "._-", 64);
    return g;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("podgroup: unreadable object: ") + Printable(e.what(), 200));
  }
}

}  // namespace clusterd::k8s
