// Kubernetes job discovery, the jobs: which job a pod belongs to, the ranks it
// holds, and the jobs built from the pods and PodGroups (discovery.h:
// JobKeyOf, RankJobSetPods, ApplyKubeletDevices, BuildJobs). Parsing the
// objects is discovery_pods.cc, the policy annotations discovery_policy.cc.
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

using input::Printable;
using input::Quoted;
using input::Trim;
using input::Upper;
using nlohmann::json;

namespace {

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

}  // namespace

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

}  // namespace clusterd::k8s
