// Kubernetes job discovery; see discovery.h. Every JSON access is checked
// (api/object.h: ValueAt, StringPtrAt, StringAt; type tests before get_ref),
// and each entry point also catches what the JSON
// library might throw, so hostile input never escapes as an exception.
#include "clusterd/k8s/discovery.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <exception>
#include <set>
#include <tuple>
#include <utility>

#include "clusterd/k8s/api/object.h"
#include "clusterd/state/fault_table.h"
#include "common/duration.h"
#include "common/levels.h"
#include "common/validation.h"

namespace clusterd::k8s {
namespace {

using nlohmann::json;

constexpr size_t kMaxFieldBytes = 1024;        // NodeReadiness strings, condition message
constexpr size_t kMaxPolicyValueBytes = 4096;  // one policy annotation's value
constexpr size_t kMaxPolicyKeys = 64;
constexpr size_t kMaxSilences = 64;
constexpr uint32_t kMaxRetries = 1'000'000;
constexpr uint32_t kMaxReplicaCount = 16'777'216;

// A one-line, bounded copy of API text for a message: non-printable or
// non-ASCII bytes become '?'.
std::string Printable(std::string_view s, size_t max = kMaxFieldBytes) {
  std::string out;
  out.reserve(std::min(s.size(), max));
  for (char c : s.substr(0, max)) out.push_back(c >= ' ' && c <= '~' ? c : '?');
  return out;
}

std::string Quoted(std::string_view s) { return "\"" + Printable(s, 64) + (s.size() > 64 ? "...\"" : "\""); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> SplitComma(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.push_back(Trim(s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// Plain decimal digits (no sign, no spaces) up to `max`.
std::optional<uint64_t> ParseUnsigned(std::string_view s, uint64_t max) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

std::string Upper(std::string_view s) {
  std::string out = AsciiUpper(s);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

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

// ---- policy ----

StatusOr<google::protobuf::Duration> ParseProtoDuration(const std::string& key, const std::string& value,
                                                        bool positive) {
  auto d = ParseDuration(Trim(value));
  if (!d.ok()) return InvalidArgument(key + ": " + d.status().message());
  if (positive && d->count() <= 0) return InvalidArgument(key + ": must be positive");
  google::protobuf::Duration out;
  out.set_seconds(d->count() / 1'000'000'000);
  out.set_nanos(static_cast<int32_t>(d->count() % 1'000'000'000));
  return out;
}

std::optional<v1::RecoveryStrategy> ParseStrategyName(std::string_view text) {
  std::string upper = Upper(Trim(text));
  if (upper.rfind("RECOVERY_STRATEGY_", 0) != 0) upper = "RECOVERY_STRATEGY_" + upper;
  v1::RecoveryStrategy s;
  if (!v1::RecoveryStrategy_Parse(upper, &s) || s == v1::RECOVERY_STRATEGY_UNSPECIFIED) return std::nullopt;
  return s;
}

Status SetCount(const std::string& key, const std::string& value, uint32_t max, uint32_t* out) {
  auto v = ParseUnsigned(Trim(value), max);
  if (!v)
    return InvalidArgument(key + ": " + Quoted(value) + " is not a whole number from 0 to " + std::to_string(max));
  *out = static_cast<uint32_t>(*v);
  return Status::Ok();
}

// ---- warnings ----

class Warnings {
 public:
  void Add(std::string w) {
    if (list_.size() < kMaxWarningsPerJob - 1) {
      list_.push_back(std::move(w));
    } else {
      ++dropped_;
    }
  }
  std::vector<std::string> Take() {
    if (dropped_ > 0) list_.push_back("and " + std::to_string(dropped_) + " more warnings");
    return std::move(list_);
  }

 private:
  std::vector<std::string> list_;
  size_t dropped_ = 0;
};

std::string RankRange(const std::vector<uint32_t>& ranks) {
  if (ranks.empty()) return "none";
  if (ranks.size() == 1) return "rank " + std::to_string(ranks.front());
  return "ranks " + std::to_string(ranks.front()) + ".." + std::to_string(ranks.back()) + " (" +
         std::to_string(ranks.size()) + ")";
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

// ---- pods and PodGroups ----

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

std::string PodGroupMapKey(std::string_view ns, std::string_view name) {
  std::string k(ns);
  k += '/';
  k += name;
  return k;
}

std::string JobKeyOf(const PodInfo& pod, const PodGroupMap& podgroups) {
  if (!pod.podgroup.empty()) {
    auto it = podgroups.find(PodGroupMapKey(pod.ns, pod.podgroup));
    if (it != podgroups.end()) return it->second.owner_uid.empty() ? it->second.uid : it->second.owner_uid;
  }
  return pod.owner_uid;
}

bool HoldsRanks(const PodInfo& pod) {
  return !pod.node.empty() && !pod.terminating && pod.phase != "Succeeded" && pod.phase != "Failed";
}

std::vector<uint32_t> PodDeviceRanks(const PodInfo& pod) {
  std::vector<uint32_t> out;
  if (!HoldsRanks(pod)) return out;
  // ParsePod bounds devices_per_pod and refuses a rank whose last device
  // rank overflows 32 bits; a PodInfo built by hand is checked here as well.
  const uint64_t width = std::clamp<uint64_t>(pod.devices_per_pod, 1, kMaxDevicesPerPod);
  const uint64_t base = uint64_t{pod.rank} * width;
  if (base + width - 1 > UINT32_MAX) return out;
  out.reserve(width);
  for (uint64_t i = 0; i < width; ++i) out.push_back(static_cast<uint32_t>(base + i));
  return out;
}

void RankJobSetPods(std::vector<PodInfo>& pods, const PodGroupMap& podgroups) {
  std::map<std::string, std::vector<PodInfo*>> jobs;
  for (auto& p : pods) {
    if (p.jobset_index && p.rank_from_index) jobs[JobKeyOf(p, podgroups)].push_back(&p);
  }
  for (auto& [key, members] : jobs) {
    if (key.empty()) continue;
    uint64_t width = 0;  // pods per child Job: the widest one's
    for (const PodInfo* p : members) width = std::max<uint64_t>(width, uint64_t{p->rank} + 1);
    for (PodInfo* p : members) {
      const uint64_t rank = uint64_t{*p->jobset_index} * width + p->rank;
      const uint64_t devices = std::max<uint64_t>(p->devices_per_pod, 1);
      p->jobset_index.reset();  // applied once
      // Too large: keeps the index within its Job (a duplicate rank, warned about).
      if (rank > kMaxPodRank || rank * devices + devices - 1 > UINT32_MAX) continue;
      p->rank = static_cast<uint32_t>(rank);
    }
  }
}

size_t ApplyKubeletDevices(std::vector<PodInfo>& pods, const KubeletDevices& kubelet) {
  size_t applied = 0;
  for (auto& pod : pods) {
    if (pod.devices_per_pod == 0 || !pod.devices.empty() || pod.node.empty()) continue;
    auto node = kubelet.find(pod.node);
    if (node == kubelet.end()) continue;
    auto held = node->second.find(pod.ns + "/" + pod.name);
    if (held == node->second.end() || held->second.size() != pod.devices_per_pod) continue;
    pod.devices = held->second;
    ++applied;
  }
  return applied;
}

std::optional<v1::JobKind> ParseJobKind(std::string_view text) {
  std::string upper = Upper(Trim(text));
  if (upper.rfind("JOB_KIND_", 0) != 0) upper = "JOB_KIND_" + upper;
  v1::JobKind k;
  if (!v1::JobKind_Parse(upper, &k) || k == v1::JOB_KIND_UNSPECIFIED) return std::nullopt;
  return k;
}

StatusOr<v1::RecoveryPolicy> ParsePolicyAnnotations(const std::map<std::string, std::string>& annotations,
                                                    const DiscoveryOptions& opts, std::vector<std::string>* warnings) {
  v1::RecoveryPolicy policy;
  if (opts.policy_prefix.empty()) return policy;
  const std::string& prefix = opts.policy_prefix;
  size_t keys = 0;
  std::set<v1::RecoveryStrategy> timed;
  for (const auto& [full_key, value] : annotations) {
    if (full_key.rfind(prefix, 0) != 0 || full_key == opts.job_kind_label) continue;
    if (++keys > kMaxPolicyKeys)
      return InvalidArgument("more than " + std::to_string(kMaxPolicyKeys) + " " + prefix + " annotations");
    const std::string key = Printable(full_key, 128);
    if (value.size() > kMaxPolicyValueBytes) return InvalidArgument(key + ": value longer than 4096 bytes");
    const std::string_view name = std::string_view(full_key).substr(prefix.size());
    if (name == "allowed-strategies") {
      std::set<v1::RecoveryStrategy> seen;
      for (std::string_view item : SplitComma(value)) {
        auto s = ParseStrategyName(item);
        if (!s) {
          return InvalidArgument(key + ": " + Quoted(item) +
                                 " is not a strategy (STEP_RETRY, PROCESS_RESTART, POD_RESCHEDULE, JOB_RESCHEDULE, "
                                 "SCALE_IN, FAIL)");
        }
        if (seen.insert(*s).second) policy.add_allowed_strategies(*s);
      }
    } else if (name == "max-retries-per-job" || name == "max-retries-per-node") {
      uint32_t v = 0;
      CLUSTERD_RETURN_IF_ERROR(SetCount(key, value, kMaxRetries, &v));
      if (name == "max-retries-per-job") {
        policy.set_max_retries_per_job(v);
      } else {
        policy.set_max_retries_per_node(v);
      }
    } else if (name == "hold-down" || name == "escalation-window" || name == "agent-attach-grace") {
      auto d = ParseProtoDuration(key, value, /*positive=*/false);
      if (!d.ok()) return d.status();
      *(name == "hold-down"           ? policy.mutable_hold_down()
        : name == "escalation-window" ? policy.mutable_escalation_window()
                                      : policy.mutable_agent_attach_grace()) = *d;
    } else if (name == "require-agent") {
      const std::string_view v = Trim(value);
      if (v != "true" && v != "false") return InvalidArgument(key + ": " + Quoted(value) + " is not true or false");
      policy.set_require_agent(v == "true");
    } else if (name == "min-replicas" || name == "ranks-per-replica") {
      uint32_t v = 0;
      CLUSTERD_RETURN_IF_ERROR(SetCount(key, value, kMaxReplicaCount, &v));
      if (name == "min-replicas") {
        policy.set_min_replicas(v);
      } else {
        policy.set_ranks_per_replica(v);
      }
    } else if (name == "silences") {
      std::set<std::string> seen;
      for (std::string_view item : SplitComma(value)) {
        std::string code(item);
        std::string bare = code;
        if (!bare.empty() && bare.back() == '*') bare.pop_back();
        if (Status st = ValidateCode(key + " code " + Quoted(item), bare); !st.ok()) return st;
        if (!seen.insert(code).second) continue;
        if (seen.size() > kMaxSilences) return InvalidArgument(key + ": more than 64 codes");
        policy.add_silences()->set_code(code);
      }
    } else if (name.rfind("step-timeout.", 0) == 0) {
      auto s = ParseStrategyName(name.substr(13));
      if (!s) return InvalidArgument(key + ": " + Quoted(name.substr(13)) + " is not a strategy");
      if (!timed.insert(*s).second) {
        return InvalidArgument(key + ": a second step timeout for " + v1::RecoveryStrategy_Name(*s));
      }
      auto d = ParseProtoDuration(key, value, /*positive=*/true);
      if (!d.ok()) return d.status();
      auto* t = policy.add_step_timeouts();
      t->set_strategy(*s);
      *t->mutable_timeout() = *d;
    } else if (warnings) {
      warnings->push_back("unknown policy annotation " + key + " ignored");
    }
  }
  return policy;
}

// ---- jobs ----

std::vector<DiscoveredJob> BuildJobs(const std::vector<PodInfo>& pods, const PodGroupMap& podgroups,
                                     const DiscoveryOptions& opts) {
  std::map<std::string, std::vector<const PodInfo*>> groups;
  for (const auto& p : pods) {
    std::string key = JobKeyOf(p, podgroups);
    if (!key.empty()) groups[std::move(key)].push_back(&p);
  }
  std::vector<DiscoveredJob> out;
  out.reserve(groups.size());
  for (auto& [key, members] : groups) {
    std::sort(members.begin(), members.end(),
              [](const PodInfo* a, const PodInfo* b) { return std::tie(a->name, a->uid) < std::tie(b->name, b->uid); });
    DiscoveredJob d;
    Warnings warn;
    v1::Job& job = d.job;
    job.set_id(key);
    job.set_source(std::string(kSource));
    const PodInfo& first = *members.front();
    const PodGroupInfo* pg = nullptr;
    std::string podgroup_name;
    for (const PodInfo* p : members) {
      if (p->podgroup.empty() || p->ns != first.ns) continue;
      podgroup_name = p->podgroup;
      if (auto it = podgroups.find(PodGroupMapKey(p->ns, p->podgroup)); it != podgroups.end()) pg = &it->second;
      break;
    }
    auto& labels = *job.mutable_labels();
    labels[std::string(kLabelNamespace)] = first.ns;
    labels[std::string(kLabelName)] = first.job_name;
    if (!first.owner_kind.empty()) labels[std::string(kLabelOwnerKind)] = first.owner_kind;
    if (!podgroup_name.empty()) labels[std::string(kLabelPodGroup)] = podgroup_name;
    if (pg) {
      for (const auto& [key, value] : pg->mindcluster) labels[std::string(kMindClusterLabelPrefix) + key] = value;
    }
    {
      // MindCluster's job summary facts: the framework, the shared ToR IPs
      // (distinct, in pod order, as a JSON array; left out past a label's
      // 256 characters) and the first MASTER_ADDR.
      std::string framework = pg ? pg->framework : "";
      std::string tors, master;
      std::set<std::string> seen_tor;
      for (const PodInfo* p : members) {
        if (framework.empty()) framework = p->framework;
        if (master.empty()) master = p->master_addr;
        if (!p->shared_tor_ip.empty() && seen_tor.insert(p->shared_tor_ip).second) {
          tors += (tors.empty() ? "[\"" : ",\"") + p->shared_tor_ip + "\"";
        }
      }
      if (!framework.empty()) labels[std::string(kMindClusterFrameworkLabel)] = framework;
      if (!tors.empty() && tors.size() + 1 <= 256) labels[std::string(kMindClusterSharedTorLabel)] = tors + "]";
      if (!master.empty() && master.size() <= 256) labels[std::string(kMindClusterMasterAddrLabel)] = master;
    }

    // Kind.
    std::optional<v1::JobKind> kind;
    if (pg && !pg->kind_label.empty()) {
      kind = ParseJobKind(pg->kind_label);
      if (!kind) warn.Add("podgroup " + pg->ns + "/" + pg->name + ": invalid job kind label " + Quoted(pg->kind_label));
    }
    const PodInfo* kind_pod = nullptr;
    for (const PodInfo* p : members) {
      if (p->kind_label.empty() || p->ns != first.ns) continue;
      if (!kind_pod) {
        kind_pod = p;
      } else if (Upper(Trim(p->kind_label)) != Upper(Trim(kind_pod->kind_label))) {
        warn.Add("pod " + p->name + ": job kind label " + Quoted(p->kind_label) + " differs from pod " +
                 kind_pod->name + "'s " + Quoted(kind_pod->kind_label));
      }
    }
    if (!kind && kind_pod) {
      kind = ParseJobKind(kind_pod->kind_label);
      if (!kind) warn.Add("pod " + kind_pod->name + ": invalid job kind label " + Quoted(kind_pod->kind_label));
    }
    if (!kind) {
      if (auto it = opts.kind_by_owner_kind.find(first.owner_kind);
          !first.owner_kind.empty() && it != opts.kind_by_owner_kind.end()) {
        kind = it->second;
      }
    }
    job.set_kind(kind.value_or(opts.default_kind));

    // Policy: pods' annotations, first pod's value per key; the PodGroup's win.
    std::map<std::string, std::string> merged;
    std::map<std::string, const PodInfo*> from;
    for (const PodInfo* p : members) {
      if (p->ns != first.ns) continue;
      for (const auto& [k, v] : p->policy_annotations) {
        auto [it, added] = merged.emplace(k, v);
        if (added) {
          from[k] = p;
        } else if (it->second != v && !(pg && pg->policy_annotations.count(k))) {
          warn.Add("pod " + p->name + ": annotation " + Printable(k, 128) + "=" + Quoted(v) + " differs from pod " +
                   from[k]->name + "'s " + Quoted(it->second) + "; using the latter");
        }
      }
    }
    if (pg) {
      for (const auto& [k, v] : pg->policy_annotations) merged[k] = v;
    }
    std::vector<std::string> policy_notes;
    auto policy = ParsePolicyAnnotations(merged, opts, &policy_notes);
    for (auto& n : policy_notes) warn.Add(std::move(n));
    if (policy.ok()) {
      *job.mutable_policy() = std::move(*policy);
    } else {
      warn.Add("recovery policy annotations ignored, defaults apply: " + policy.status().message());
    }

    // Placement.
    std::map<uint32_t, std::pair<const PodInfo*, std::optional<uint32_t>>> ranks;  // rank -> pod, device
    std::map<std::pair<std::string, uint32_t>, uint32_t> device_owner;             // (node, device) -> rank
    uint32_t most_per_device = 1;                                                  // ranks claiming one (node, device)
    std::map<std::pair<std::string, uint32_t>, uint32_t> claims;
    for (const PodInfo* p : members) {
      if (p->ns != first.ns) {
        warn.Add("pod " + p->ns + "/" + p->name + ": in another namespace than " + first.ns + "; ignored");
        continue;
      }
      ++d.pods;
      if (p->phase == "Running") ++d.pods_running;
      if (!HoldsRanks(*p)) continue;
      ++d.pods_placed;
      const std::vector<uint32_t> pr = PodDeviceRanks(*p);
      std::vector<uint32_t> lost;
      const PodInfo* winner = nullptr;
      for (size_t i = 0; i < pr.size(); ++i) {
        std::optional<uint32_t> dev;
        if (i < p->devices.size()) dev = p->devices[i];
        auto [it, added] = ranks.emplace(pr[i], std::make_pair(p, dev));
        if (!added) {
          lost.push_back(pr[i]);
          if (!winner) winner = it->second.first;
          continue;
        }
        if (dev) {
          most_per_device = std::max(most_per_device, ++claims[{p->node, *dev}]);
          auto [dit, fresh] = device_owner.emplace(std::make_pair(p->node, *dev), pr[i]);
          if (!fresh) {
            warn.Add("device " + std::to_string(*dev) + " on node " + p->node + " is claimed by rank " +
                     std::to_string(dit->second) + " and rank " + std::to_string(pr[i]) + " (pod " + p->name + ")");
          }
        }
      }
      if (!lost.empty()) {
        warn.Add("pod " + p->name + " (rank " + std::to_string(p->rank) + "): device " + RankRange(lost) +
                 " already held by pod " + winner->name + "; ignored");
      }
    }
    // Ranks that share a chip are kept (a fault on it hits them all): the job
    // says so, or ClusterD would refuse it.
    if (most_per_device > 1) job.set_ranks_per_device(most_per_device);
    for (const auto& [rank, where] : ranks) {
      auto* rp = job.add_placement();
      rp->set_rank(rank);
      rp->set_node(where.first->node);
      if (where.second) {
        rp->set_device_id(*where.second);
        if (auto ip = where.first->device_ips.find(*where.second); ip != where.first->device_ips.end()) {
          rp->set_device_ip(ip->second);
        }
      } else if (where.first->devices_per_pod > 0) {
        // The pod holds accelerators, which ones unknown (no devices
        // annotation: a GPU pod): a fault on any device of its node hits it.
        rp->set_any_device(true);
      }
    }
    d.warnings = warn.Take();
    out.push_back(std::move(d));
  }
  return out;
}

// ---- nodes ----

std::string_view ReadinessName(NodeReadiness::State state) {
  switch (state) {
    case NodeReadiness::State::kReady: return "Ready";
    case NodeReadiness::State::kNotReady: return "NotReady";
    case NodeReadiness::State::kUnknown: return "Unknown";
  }
  return "Unknown";
}

uint64_t DeviceQuantity(const json& q) {
  if (q.is_number_unsigned()) return q.get<uint64_t>();
  if (q.is_number_integer()) {
    const int64_t v = q.get<int64_t>();
    return v < 0 ? UINT64_MAX : static_cast<uint64_t>(v);
  }
  if (q.is_string()) return ParseUnsigned(q.get_ref<const std::string&>(), UINT64_MAX).value_or(UINT64_MAX);
  return UINT64_MAX;
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
