// MindClusterStack, what a pass writes: ClusterD's own knowledge of its nodes
// followed, Volcano's cluster-info ConfigMaps published from it and written
// within the write budget (docs/mindcluster.md, "The stack's ConfigMaps").
#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/context.h"
#include "clusterd/mindcluster/k8s/stack.h"
#include "clusterd/mindcluster/signal.h"
#include "clusterd/mindcluster/taskd.h"
#include "common/logging.h"

namespace clusterd {

namespace {

using nlohmann::json;
namespace mc = mindcluster;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

// A node-level fault's kind in NodeInfo's FaultDevList.
std::string KindOf(v1::FaultSource source) {
  switch (source) {
    case v1::FAULT_SOURCE_CPU: return "CPU";
    case v1::FAULT_SOURCE_MEMORY: return "Memory";
    case v1::FAULT_SOURCE_DISK: return "Disk";
    case v1::FAULT_SOURCE_NETWORK: return "Network";
    case v1::FAULT_SOURCE_HEARTBEAT: return "Heartbeat";
    default: return "Node";
  }
}

}  // namespace

std::string AscendDeviceType(std::string_view vendor, std::string_view model) {
  const std::string v = Lower(vendor), m = Lower(model);
  if (v != "huawei" && v != "sim") return "";
  if (m.find("310p") != std::string::npos) return "Ascend310P";
  if (m.find("310") != std::string::npos) return "Ascend310";
  if (m.find("910") != std::string::npos) return "Ascend910";
  return v == "huawei" ? "npu" : "";
}

// ---- ClusterD's own knowledge ----

void MindClusterStack::FollowState(std::set<std::string>* dirty) {
  const ClusterCommands::NodeChanges changes = env_.commands->NodesChangedSince(state_revision_);
  for (const ClusterCommands::NodeView& v : changes.nodes) {
    OurNode ours;
    std::set<uint32_t> npus;
    for (const v1::Device& d : v.devices) {
      const std::string type = AscendDeviceType(d.vendor(), d.model());
      if (type.empty()) continue;
      if (ours.state.device_type.empty()) ours.state.device_type = type;
      ours.state.chips.push_back(d.id());
      npus.insert(d.id());
      if (d.isolated()) ours.state.chip_state[d.id()].isolated = true;
      if (d.separated()) ours.state.chip_state[d.id()].separated = true;
    }
    ours.state.isolated = v.node.isolated() || v.node.cordoned();
    ours.plugin_only = v.node.registered_by() == name();
    // The pre-separate rule: a chip a pod holds stays out of -Unhealthy.
    for (uint32_t id : v.devices_in_use) {
      if (npus.empty() || npus.count(id)) ours.state.chip_state[id].in_use = true;
    }
    std::vector<mc::NodeLevelFault> node_level;
    const std::set<std::string> held(v.held_fault_ids.begin(), v.held_fault_ids.end());
    for (const v1::Fault& f : v.active_faults) {
      if (f.reporter() == options_.reporter) continue;  // the plugin's own: already in its lists
      // TaskD's process faults are not the chip's: the reference tells
      // Volcano through the pods' fault-type label, never these lists.
      if (f.reporter() == mc::kTaskdReporter) continue;
      // Nor are a job's progress faults (progress/monitor.h: JOB_HANG,
      // SLOW_RANK, SLOW_NODE), unless a hang moves the job off the chip
      // (SEPARATE): then Volcano must not place it there again.
      if (f.reporter() == "progress" && f.level() < v1::FAULT_LEVEL_SEPARATE) continue;
      // A step retry or in-place restart through TaskD is handling it: Volcano
      // does not see it (and delete the pods the retry keeps) unless that
      // recovery moves on to rescheduling or fails.
      if (held.count(f.id())) continue;
      if (!f.has_device_id()) {
        node_level.push_back({KindOf(f.source()), -1, f.code(), f.level()});
        continue;
      }
      // A fault of a device that is not an NPU chip is not Volcano's concern;
      // on a node whose chips ClusterD does not know, every device fault is
      // taken as a chip's.
      if (!npus.empty() && !npus.count(f.device_id())) continue;
      mc::ChipState& cs = ours.state.chip_state[f.device_id()];
      cs.level = std::max(cs.level, f.level());
      cs.codes.push_back(f.code());
      if (f.reporter().rfind("pubfault/", 0) == 0) cs.public_fault = true;
    }
    // Its public faults, for statistic-fault-info: one per sender and id,
    // with the chips it names.
    for (const v1::Fault& f : v.active_faults) {
      if (f.reporter().rfind("pubfault/", 0) != 0) continue;
      const std::string resource = f.reporter().substr(9);
      auto it = std::find_if(ours.public_faults.begin(), ours.public_faults.end(), [&](const mc::PublicFaultStat& p) {
        return p.resource == resource && p.fault_id == f.external_id() && p.code == f.code();
      });
      if (it == ours.public_faults.end()) {
        mc::PublicFaultStat p;
        p.resource = resource;
        p.fault_id = f.external_id();
        p.code = f.code();
        p.level = std::string(mc::LevelName(f.level()));
        p.time_ms = f.first_seen().seconds() * 1000 + f.first_seen().nanos() / 1'000'000;
        ours.public_faults.push_back(std::move(p));
        it = std::prev(ours.public_faults.end());
      }
      if (f.has_device_id()) it->dev_ids.push_back(static_cast<int32_t>(f.device_id()));
    }
    ours.node_info = mc::NodeInfoFromFaults(node_level);
    // The separated chips, as clusterd-manual-info-cm lists them: the codes
    // of their active faults, since when.
    for (const v1::Device& d : v.devices) {
      if (!d.separated() || !npus.count(d.id())) continue;
      mc::ManualChip& c = ours.separated[d.id()];
      c.name = mc::ChipName(ours.state.device_type, d.id());
      c.separated_ms = d.separated_time().seconds() * 1000 + d.separated_time().nanos() / 1'000'000;
      if (auto cs = ours.state.chip_state.find(d.id()); cs != ours.state.chip_state.end()) {
        std::set<std::string> codes(cs->second.codes.begin(), cs->second.codes.end());
        c.codes.assign(codes.begin(), codes.end());
      }
    }
    ours_[v.node.name()] = std::move(ours);
    dirty->insert(v.node.name());
  }
  state_revision_ = changes.revision;
  followed_ = true;
}

void MindClusterStack::Publish(const std::set<std::string>& dirty, int64_t now_s, int64_t now_ms) {
  static const OurNode kNobody;
  for (const std::string& node : dirty) {
    auto p = plugin_.find(node);
    const mc::NodeDeviceInfo* view = p != plugin_.end() && p->second.view ? &*p->second.view : nullptr;
    auto o = ours_.find(node);
    const OurNode& ours = o == ours_.end() ? kNobody : o->second;
    if (p != plugin_.end() && view == nullptr && publisher_.ChunkOf(node)) {
      // The plugin's ConfigMap is there but was refused since the start:
      // what was published before (adopted) stays until a good one comes.
    } else if (view == nullptr && (ours.state.chips.empty() || ours.plugin_only)) {
      // No NPU, or a node ClusterD knows only from the plugin, whose
      // ConfigMap is gone.
      publisher_.Remove(node);
    } else if (Status st = publisher_.Set(node, mc::MergeForVolcano(view, ours.state), now_s); !st.ok()) {
      Warn("publish/" + node, "mindcluster: " + st.message());
    }
    // The switch faults (A3) as the plugin reports them; a SwitchInfoCfg
    // refused since the start keeps what was published.
    if (p != plugin_.end() && p->second.switches_known && p->second.switches.present) {
      const mc::SwitchInfo& sw = p->second.switches;
      mc::SwitchEntry entry{sw.fault_codes, sw.fault_level, sw.node_status, sw.levels_json, 0};
      if (Status st = switch_publisher_.Set(node, std::move(entry), now_s); !st.ok()) {
        Warn("publish-switch/" + node, "mindcluster: " + st.message());
      }
    } else if (p == plugin_.end() || p->second.switches_known) {
      switch_publisher_.Remove(node);
    }
    const bool says = !ours.node_info.faults.empty() ||
                      (!ours.node_info.node_status.empty() && ours.node_info.node_status != mc::kNodeHealthy);
    auto cm = node_cm_.find(node);
    if (!says) {
      if (cm != node_cm_.end()) {
        node_cm_.erase(cm);
        node_cm_dirty_ = true;
      }
    } else if (cm == node_cm_.end() || !(cm->second.info == ours.node_info)) {
      const int64_t before = cm == node_cm_.end() ? 0 : cm->second.update_time_ms;
      node_cm_[node] = mc::PublishedNodeInfo{ours.node_info, std::max(now_ms, before + 1)};
      node_cm_dirty_ = true;
    }
  }
}

// ---- writes ----

double MindClusterStack::Refill(TimePoint now) { return tokens_.Available(now); }

bool MindClusterStack::TakeToken(TimePoint now, double keep) { return tokens_.Take(now, keep); }

size_t MindClusterStack::Write(TimePoint now, bool* pending) {
  size_t written = 0;
  bool stopped = false;
  // One write that is not urgent per pass: a pass that writes only what is
  // urgent stays short, so that a chip leaving the available list is planned
  // and written in the next pass instead of waiting behind a row of 800 KiB
  // rewrites (while 1,000 plugin ConfigMaps a second change, every chunk is
  // always dirty).
  bool routine_written = false;
  // A publisher's plan in its order (a ConfigMap that gains a node before the
  // one that loses it), stopping at the first that cannot be written now.
  auto write_plan = [&](auto& publisher) {
    // Only the values that can be written now are built (each up to 800 KiB).
    const auto plan = publisher.Pending(false, std::max<size_t>(static_cast<size_t>(Refill(now)), 1));
    auto done = decltype(plan){};
    if (plan.more) *pending = true;
    for (const auto& w : plan.writes) {
      if (stopped) break;
      // What is not urgent leaves a write in reserve, so that a fault coming
      // meanwhile does not wait for the next token.
      if ((!w.urgent && routine_written) || !TakeToken(now, !w.urgent && options_.writes_per_second > 1 ? 1 : 0)) {
        stopped = *pending = true;
        break;
      }
      if (!w.urgent) routine_written = true;
      if (Status st = PutConfigMap(w.name, w.value); !st.ok()) {
        if (write_errors_ != nullptr) write_errors_->Inc();
        Warn("write/" + w.name, "mindcluster: cannot write " + options_.cluster_info_namespace + "/" + w.name + ": " +
                                    st.message() + " (retrying)");
        stopped = *pending = true;
        break;
      }
      warned_.erase("write/" + w.name);
      done.writes.push_back(w);
      ++written;
    }
    publisher.Written(done);
  };
  write_plan(publisher_);
  write_plan(switch_publisher_);
  if (node_cm_dirty_ && !stopped) {
    // What is already there costs no write and no token.
    auto value = mc::ClusterInfoNodeValue(node_cm_);
    const bool same =
        value.ok() && *value == node_cm_written_ && versions_.count(std::string(mc::kClusterInfoNodeName));
    if (same) {
      node_cm_dirty_ = false;
    } else if (value.ok() && !TakeToken(now)) {
      *pending = true;
    } else {
      Status st = value.ok() ? PutConfigMap(std::string(mc::kClusterInfoNodeName), *value) : value.status();
      if (st.ok()) {
        node_cm_dirty_ = false;
        node_cm_written_ = *value;
        ++written;
      } else {
        if (write_errors_ != nullptr) write_errors_->Inc();
        Warn("write/node", "mindcluster: cannot write " + options_.cluster_info_namespace + "/" +
                               std::string(mc::kClusterInfoNodeName) + ": " + st.message() + " (retrying)");
        *pending = true;
      }
    }
  }
  if (writes_ != nullptr) writes_->Inc(written);
  return written;
}

Status MindClusterStack::PutConfigMap(const std::string& name, const std::string& value) {
  const std::string collection =
      "/api/v1/namespaces/" + k8s::UrlEncode(options_.cluster_info_namespace) + "/configmaps";
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata",
              {{"name", name},
               {"namespace", options_.cluster_info_namespace},
               {"labels", {{std::string(mc::kVolcanoLabel), "true"}}}}},
             {"data", {{name, value}}}};
  if (auto it = versions_.find(name); it != versions_.end()) {
    // Guarded: a ConfigMap someone else changed since we read it is read
    // again and written on the next pass.
    cm["metadata"]["resourceVersion"] = it->second;
    auto put = client_->Put(collection + "/" + k8s::UrlEncode(name), cm);
    if (put.ok()) {
      it->second = k8s::ResourceVersionOf(*put);
      return Status::Ok();
    }
    if (put.status().code() != StatusCode::kNotFound) {
      if (put.status().code() == StatusCode::kAborted) {
        if (auto now = client_->Get(collection + "/" + k8s::UrlEncode(name)); now.ok()) {
          it->second = k8s::ResourceVersionOf(*now);
        }
      }
      return put.status();
    }
    versions_.erase(it);
    cm["metadata"].erase("resourceVersion");
  }
  auto created = client_->Post(collection, cm);
  if (created.ok()) {
    versions_[name] = k8s::ResourceVersionOf(*created);
    return Status::Ok();
  }
  if (created.status().code() == StatusCode::kAlreadyExists) {
    // Made by someone else since: take its version, write over it next pass.
    if (auto now = client_->Get(collection + "/" + k8s::UrlEncode(name)); now.ok()) {
      versions_[name] = k8s::ResourceVersionOf(*now);
    }
  }
  return created.status();
}

}  // namespace clusterd
