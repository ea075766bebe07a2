#include "clusterd/k8s/actuator.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/discovery.h"
#include "clusterd/k8s/dra.h"
#include "clusterd/k8s/node_status.h"
#include "clusterd/k8s/requests.h"
#include "clusterd/recovery/actuators/pooled.h"
#include "common/config_util.h"  // JoinNames
#include "common/duration.h"
#include "common/levels.h"
#include "common/logging.h"

namespace clusterd {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

KubernetesActionsEnv WithDefaults(KubernetesActionsEnv env) {
  if (env.clock == nullptr) env.clock = &SystemClock::Instance();
  if (!env.sleep) env.sleep = [](Duration d) { std::this_thread::sleep_for(d); };
  if (env.host.empty()) env.host = k8s::HostName();
  return env;
}

// A conflict: the Node changed since it was read (409, or 422 from the
// resourceVersion test of a JSON patch); read it again and retry.
bool Conflict(const Status& s) { return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kAborted; }

}  // namespace

KubernetesActions::KubernetesActions(std::shared_ptr<KubernetesContext> ctx, KubernetesActionsEnv env)
    : ctx_(std::move(ctx)), env_(WithDefaults(std::move(env))) {}

ActionResult KubernetesActions::Run(const ActionRequest& req) {
  switch (req.action) {
    case v1::CLUSTER_ACTION_ISOLATE_NODE: return IsolateNode(req);
    case v1::CLUSTER_ACTION_ISOLATE_DEVICE: return IsolateDevice(req);
    case v1::CLUSTER_ACTION_RESCHEDULE_PODS: return RemovePods(req, /*evict=*/true);
    case v1::CLUSTER_ACTION_RESTART_JOB: return RemovePods(req, /*evict=*/false);
    case v1::CLUSTER_ACTION_RESET_DEVICE:
      return {false, "reset_device: Kubernetes cannot reset a chip; the recovery escalates"};
    default: return {false, "unknown action"};
  }
}

void KubernetesActions::Sleep(Duration d) const { env_.sleep(d); }

// Cordon + taint, in one JSON patch guarded by the Node's resourceVersion;
// retried on a conflict. Already tainted and cordoned: done.
ActionResult KubernetesActions::IsolateNode(const ActionRequest& req) {
  const auto& marks = ctx_->marks();
  const std::string& effect = ctx_->settings().taint_effect;
  const std::string level =
      ShortLevelName(req.level == v1::FAULT_LEVEL_UNSPECIFIED ? v1::FAULT_LEVEL_SEPARATE : req.level);
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto node = api().Get(k8s::NodePath(req.node));
    if (!node.ok()) return {false, "get node " + req.node + ": " + node.status().message()};
    const std::string uid = k8s::StringAt(*node, {"metadata", "uid"});
    auto patch = k8s::IsolateNodePatch(*node, marks, level, effect, k8s::Rfc3339(env_.clock->Now(), false));
    if (!patch) {
      PostEvent(Event(req, "Node", req.node, "", uid, "Isolate",
                      "node " + req.node + " isolated (cordoned, taint " + marks.taint_key + ")"));
      return {true, "node " + req.node + " already cordoned and tainted"};
    }
    auto r = api().Patch(k8s::NodePath(req.node), *patch, k8s::PatchType::kJson);
    const std::string taint = marks.taint_key + "=" + level + ":" + effect;
    if (r.ok()) {
      PostEvent(Event(req, "Node", req.node, "", uid, "Isolate",
                      "recovery " + req.recovery_id + ": cordoned node " + req.node + ", taint " + taint));
      return {true, "cordoned and tainted " + taint};
    }
    if (!Conflict(r.status())) return {false, "patch node " + req.node + ": " + r.status().message()};
  }
  return {false, "patch node " + req.node + ": kept conflicting"};
}

// The device in the Node's devices annotation (a JSON patch guarded by the
// resourceVersion, retried on a conflict), then its DeviceTaintRule where a
// DRA driver publishes it; one Event when either changed something.
ActionResult KubernetesActions::IsolateDevice(const ActionRequest& req) {
  if (!req.device) return {false, "isolate_device without a device"};
  const auto& marks = ctx_->marks();
  const std::string device = std::to_string(*req.device);
  std::string uid, done;
  bool changed = false;
  for (int attempt = 0; attempt < 5 && done.empty(); ++attempt) {
    auto node = api().Get(k8s::NodePath(req.node));
    if (!node.ok()) return {false, "get node " + req.node + ": " + node.status().message()};
    uid = k8s::StringAt(*node, {"metadata", "uid"});
    auto patch = k8s::IsolateDevicePatch(*node, marks, *req.device);
    if (!patch) {
      done = "device already marked isolated on node " + req.node;
      break;
    }
    auto r = api().Patch(k8s::NodePath(req.node), *patch, k8s::PatchType::kJson);
    if (r.ok()) {
      done = "device " + device + " marked isolated in " + marks.devices_annotation;
      changed = true;
    } else if (!Conflict(r.status())) {
      return {false, "patch node " + req.node + ": " + r.status().message()};
    }
  }
  if (done.empty()) return {false, "patch node " + req.node + ": kept conflicting"};
  bool taint_changed = false;
  auto tainted = TaintDevice(req, &taint_changed);
  if (!tainted.ok()) return {false, done + "; device taint: " + tainted.status().message()};
  std::string note = "recovery " + req.recovery_id + ": device " + device + " of node " + req.node + " isolated (" +
                     marks.devices_annotation + ")";
  if (!tainted->empty()) {
    done += "; " + *tainted;
    note += "; " + *tainted;
  }
  bool fallback_changed = false;
  auto seen = SchedulerView(req, !tainted->empty(), &fallback_changed);
  if (!seen.ok()) return {false, done + "; " + seen.status().message()};
  if (!seen->empty()) {
    done += "; " + *seen;
    if (fallback_changed) note += "; " + *seen;
  }
  changed = changed || taint_changed || fallback_changed;
  if (changed) PostEvent(Event(req, "Node", req.node, "", uid, "IsolateDevice", note));
  return {true, done};
}

bool KubernetesActions::AwaitPodCache(const ActionRequest& req) {
  // The watches normally run already (the integration started them);
  // without the integration the first action starts them.
  if (env_.start_watches) ctx_->StartWatches(nullptr);
  const TimePoint sync_by = std::min(env_.clock->Now() + 30s, req.deadline);
  while (!ctx_->JobsSynced() && env_.clock->Now() < sync_by) Sleep(100ms);
  return ctx_->JobsSynced();
}

bool KubernetesActions::ScheduledByVolcano(const ActionRequest& req) {
  if (!env_.volcano_cluster_info || req.job_id.empty() || !AwaitPodCache(req)) return false;
  const auto pods = PodsOfJob(req.job_id);
  return std::any_of(pods.begin(), pods.end(), [](const k8s::PodInfo& p) { return p.scheduler == "volcano"; });
}

StatusOr<std::string> KubernetesActions::SchedulerView(const ActionRequest& req, bool dra, bool* changed) {
  const auto& marks = ctx_->marks();
  const bool volcano = !dra && ScheduledByVolcano(req);
  const std::string level =
      ShortLevelName(req.level == v1::FAULT_LEVEL_UNSPECIFIED ? v1::FAULT_LEVEL_SEPARATE : req.level);
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto node = api().Get(k8s::NodePath(req.node));
    if (!node.ok()) return Status(node.status().code(), "get node " + req.node + ": " + node.status().message());
    k8s::IsolationViewInputs in;
    in.volcano = volcano;
    in.dra = dra;
    std::set<uint32_t> isolated = k8s::MarkedDevices(*node, marks);
    isolated.insert(*req.device);
    in.isolated_on_node = static_cast<uint32_t>(isolated.size());
    std::string offered = "no accelerator resource";
    if (auto alloc = k8s::ParseAcceleratorAllocatable(*node)) {
      in.has_resource = true;
      in.capacity = alloc->capacity;
      in.allocatable = alloc->allocatable;
      offered = alloc->resource + " allocatable " + std::to_string(alloc->allocatable) + " of " +
                std::to_string(alloc->capacity);
    }
    switch (k8s::DecideIsolationView(in)) {
      case k8s::IsolationView::kVolcano: return std::string("Volcano sees it (cluster-info ConfigMaps)");
      case k8s::IsolationView::kDra: return std::string();  // the DeviceTaintRule says so
      case k8s::IsolationView::kAllocatable: return "the device plugin left it out (" + offered + ")";
      case k8s::IsolationView::kNone: break;
    }
    const std::string unseen =
        "no scheduler of the job sees the isolation (no Volcano cluster-info, no DRA device, " + offered + ")";
    if (!ctx_->settings().device_fallback_taint) return unseen + "; fallback taint off (k8s_device_fallback_taint)";
    const std::string key = k8s::DeviceTaintKey(marks, *req.device);
    auto patch =
        k8s::DeviceFallbackTaintPatch(*node, marks, *req.device, level, k8s::Rfc3339(env_.clock->Now(), false));
    if (!patch) return unseen + ": node already tainted " + key;
    auto r = api().Patch(k8s::NodePath(req.node), *patch, k8s::PatchType::kJson);
    if (r.ok()) {
      *changed = true;
      return unseen + ": tainted node " + req.node + " " + key + "=" + level + ":NoSchedule";
    }
    if (!Conflict(r.status())) {
      return Status(r.status().code(), "fallback taint: patch node " + req.node + ": " + r.status().message());
    }
  }
  return Status(StatusCode::kAborted, "fallback taint: patch node " + req.node + ": kept conflicting");
}

StatusOr<std::string> KubernetesActions::TaintDevice(const ActionRequest& req, bool* changed) {
  const TimePoint now = env_.clock->Now();
  auto slices_version = ctx_->DraVersion("resourceslices", now);
  if (!slices_version.ok()) {
    if (KubernetesContext::DraUnavailable(slices_version.status())) return std::string();
    return slices_version.status();
  }
  auto slices = api().Get(k8s::NodeSlicesPath(*slices_version, req.node));
  if (!slices.ok()) return Status(slices.status().code(), "list ResourceSlices: " + slices.status().message());
  const json items = slices->is_object() ? slices->value("items", json::array()) : json::array();
  const auto found = k8s::MatchDraDevices(items, req.node, *req.device, ctx_->dra_match());
  const std::string what = "device " + std::to_string(*req.device) + " of node " + req.node;
  if (found.size() != 1) {
    std::vector<std::string> names;
    names.reserve(found.size());
    for (const auto& d : found) names.push_back(d.driver + "/" + d.pool + "/" + d.name);
    NoteOnce("dra/" + req.node + "/" + std::to_string(*req.device),
             "kubernetes: " + what +
                 (found.empty() ? ": no DRA device publishes it" : " is ambiguous in DRA: " + JoinNames(names)) +
                 ": no device taint (k8s_dra_* settings)");
    return std::string();
  }
  auto rules_version = ctx_->DraVersion("devicetaintrules", now);
  if (!rules_version.ok()) {
    if (KubernetesContext::DraUnavailable(rules_version.status())) return std::string();
    return rules_version.status();
  }
  k8s::DeviceTaintSpec spec;
  spec.version = *rules_version;
  spec.node = req.node;
  spec.device = *req.device;
  spec.target = found.front();
  const v1::FaultLevel level = req.level == v1::FAULT_LEVEL_UNSPECIFIED ? v1::FAULT_LEVEL_SEPARATE : req.level;
  spec.key = ctx_->marks().taint_key;
  spec.value = ShortLevelName(level);
  spec.effect = k8s::DeviceTaintEffect(level);
  spec.now = k8s::Rfc3339(now, false);
  const json want = k8s::DeviceTaintRuleBody(spec);
  const std::string name = k8s::DeviceTaintRuleName(spec.node, spec.device);
  const std::string taint = "DeviceTaintRule " + name + " on " + spec.target.driver + "/" + spec.target.pool + "/" +
                            spec.target.name + " (" + spec.key + "=" + spec.value + ":" + spec.effect + ")";
  auto made = api().Post(k8s::DraPath(spec.version, "devicetaintrules"), want);
  if (made.ok()) {
    *changed = true;
    return taint;
  }
  if (made.status().code() != StatusCode::kAlreadyExists) {
    return Status(made.status().code(), "create " + taint + ": " + made.status().message());
  }
  // There already (a repeated step, or the device was isolated before): at
  // least as strong as this step wants.
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto rule = api().Get(k8s::DraPath(spec.version, "devicetaintrules", name));
    if (!rule.ok()) return Status(rule.status().code(), "get DeviceTaintRule " + name + ": " + rule.status().message());
    auto patch = k8s::DeviceTaintRulePatch(*rule, want);
    if (!patch) return "DeviceTaintRule " + name + " already there";
    auto r = api().Patch(k8s::DraPath(spec.version, "devicetaintrules", name), *patch, k8s::PatchType::kMerge);
    if (r.ok()) {
      *changed = true;
      return "updated " + taint;
    }
    if (!Conflict(r.status())) return Status(r.status().code(), "patch " + taint + ": " + r.status().message());
  }
  return Status(StatusCode::kAborted, "patch DeviceTaintRule " + name + ": kept conflicting");
}

void KubernetesActions::NoteOnce(const std::string& key, const std::string& message) {
  {
    std::lock_guard lock(noted_mu_);
    if (!noted_.insert(key).second) return;
  }
  GetLogger("k8s")->info("{}", message);
}

// The job's pods in the shared pod cache, terminating ones too.
std::vector<k8s::PodInfo> KubernetesActions::PodsOfJob(const std::string& job_id) const {
  k8s::PodGroupMap podgroups;
  for (const auto& obj : ctx_->PodGroups()) {
    auto pg = k8s::ParsePodGroup(obj, ctx_->discovery());
    if (pg.ok()) podgroups[k8s::PodGroupMapKey(pg->ns, pg->name)] = std::move(*pg);
  }
  std::vector<k8s::PodInfo> out;
  for (const auto& obj : ctx_->Pods()) {
    auto pod = k8s::ParsePod(obj, ctx_->discovery());
    if (pod.ok() && k8s::JobKeyOf(*pod, podgroups) == job_id) out.push_back(std::move(*pod));
  }
  // Ranked as discovery ranks them (a JobSet's pods across its child Jobs).
  k8s::RankJobSetPods(out, podgroups);
  return out;
}

// Of the job's pods, those that hold any of the step's ranks (all of them
// for a job restart), with the ranks each holds.
std::vector<KubernetesActions::Target> KubernetesActions::FindPods(const ActionRequest& req, bool whole_job,
                                                                   const std::vector<k8s::PodInfo>& job) const {
  std::set<uint32_t> ranks(req.ranks.begin(), req.ranks.end());
  std::vector<Target> out;
  for (const auto& pod : job) {
    // Still the job's, but on its way out already (a NoExecute device
    // taint, an earlier try of this step): never picked.
    if (pod.terminating) continue;
    std::vector<uint32_t> held = k8s::PodDeviceRanks(pod);
    bool hit = whole_job || std::any_of(held.begin(), held.end(), [&](uint32_t r) { return ranks.count(r) > 0; });
    // A pod on the named node with no rank information left.
    if (!hit && ranks.empty() && !req.node.empty()) hit = pod.node == req.node;
    if (hit) out.push_back({pod.ns, pod.name, pod.uid, std::move(held)});
  }
  std::sort(out.begin(), out.end(), [](const Target& a, const Target& b) { return a.uid < b.uid; });
  return out;
}

// Evicts (or deletes) the pods once: the chosen pods are recorded first in
// an Event named after the idempotency key, so that a repeat of the step
// after a restart acts on the same pods, never on their replacements.
ActionResult KubernetesActions::RemovePods(const ActionRequest& req, bool evict) {
  if (!AwaitPodCache(req)) return {false, "the pod cache is not synced yet"};
  const std::vector<k8s::PodInfo> job = PodsOfJob(req.job_id);
  auto targets = FindPods(req, !evict, job);
  // Every pod this step removes or removed before a restart (its record).
  std::set<std::string> removed;
  if (job.empty()) {
    // Not a job discovered from pods (registered through the API), or all
    // of its pods are gone: nothing here can move its ranks, and saying
    // "done" would mark a recovery succeeded that moved nothing.
    return {false, "no pod of job " + req.job_id +
                       " in the Kubernetes pod cache: the kubernetes actuator moves only jobs discovered from pods"};
  }
  const std::string verb = evict ? "Evict" : "Delete";
  if (!targets.empty()) {
    // The record: created once; a repeat reads the pods chosen then.
    const std::string ns = targets.front().ns;
    std::vector<std::string> uids, names;
    uids.reserve(targets.size());
    names.reserve(targets.size());
    for (const auto& t : targets) {
      uids.push_back(t.uid);
      names.push_back(t.name);
    }
    const k8s::EventSpec spec =
        Event(req, "Pod", targets.front().name, ns, targets.front().uid, verb,
              "recovery " + req.recovery_id + ": " + (evict ? "evicting" : "deleting") + " pods " + JoinNames(names));
    auto made = api().Post(k8s::EventsPath(ns), k8s::RemovalRecordBody(spec, req.idempotency_key, uids));
    if (!made.ok() && made.status().code() == StatusCode::kAlreadyExists) {
      auto prior = api().Get(k8s::EventsPath(ns) + "/" + k8s::RecordName(req.idempotency_key));
      if (prior.ok()) {
        const std::set<std::string> recorded = k8s::RecordedPodUids(*prior);
        std::erase_if(targets, [&](const Target& t) { return !recorded.count(t.uid); });
        removed.insert(recorded.begin(), recorded.end());
      }
    }
  }
  // The ranks the removed pods hold, which their replacements must hold
  // again (with the step's own).
  std::set<uint32_t> ranks(req.ranks.begin(), req.ranks.end());
  for (const auto& t : targets) {
    removed.insert(t.uid);
    ranks.insert(t.ranks.begin(), t.ranks.end());
  }
  std::set<std::string> before;
  for (const auto& p : job) before.insert(p.uid);
  if (targets.empty()) {
    return WaitForReplacements(req, ranks, removed, before,
                               "no pod of job " + req.job_id + " left to " + (evict ? "evict" : "delete"));
  }
  std::vector<std::string> done, fallen_back;
  std::string why;
  for (const auto& t : targets) {
    bool fell_back = false;
    Status s = evict ? Evict(t, req, &fell_back, &why) : DeletePod(t);
    if (!s.ok()) return {false, (evict ? "evict " : "delete ") + t.ns + "/" + t.name + ": " + s.message()};
    (fell_back ? fallen_back : done).push_back(t.name);
  }
  std::string message;
  if (!done.empty()) message = std::string(evict ? "evicted " : "deleted ") + JoinNames(done);
  if (!fallen_back.empty()) {
    // An operator must see that a budget was overridden: the step says so.
    message += (message.empty() ? "" : "; ") + std::string("deleted ") + JoinNames(fallen_back) +
               " after its eviction was refused for " + FormatDuration(ctx_->settings().eviction_timeout) +
               " (k8s_delete_fallback): " + why;
    GetLogger("k8s")->warn("recovery {}: {}", req.recovery_id, message);
  }
  return WaitForReplacements(req, ranks, removed, before, message);
}

ActionResult KubernetesActions::WaitForReplacements(const ActionRequest& req, const std::set<uint32_t>& ranks,
                                                    const std::set<std::string>& removed,
                                                    const std::set<std::string>& before, const std::string& done) {
  for (;;) {
    std::set<uint32_t> missing = ranks;
    std::set<std::string> running;  // the new pods that hold them: "name on node"
    std::set<std::string> bad;      // those of them on isolated hardware: "name on <why>"
    for (const auto& pod : PodsOfJob(req.job_id)) {
      if (removed.count(pod.uid) || pod.phase != "Running") continue;
      bool holds = false;
      for (uint32_t r : k8s::PodDeviceRanks(pod)) holds = missing.erase(r) > 0 || holds;
      if (holds && !before.count(pod.uid)) {
        running.insert(pod.name + " on " + pod.node);
        const std::string why = k8s::IsolatedPlacement(pod.node, ctx_->Node(pod.node), pod.devices, ctx_->marks());
        if (!why.empty()) bad.insert(pod.name + " on " + why);
      }
    }
    if (missing.empty()) {
      if (running.empty()) return {true, done};
      const std::string replaced =
          done + "; replaced: " + JoinNames(std::vector<std::string>(running.begin(), running.end())) + " Running";
      // A recovery succeeds only off the bad hardware: a replacement back
      // on an isolated node or device fails the step (the ladder escalates).
      if (!bad.empty()) {
        return {false, replaced + "; but " + JoinNames(std::vector<std::string>(bad.begin(), bad.end())) +
                           ": back on isolated hardware (no scheduler of the job saw the isolation)"};
      }
      return {true, replaced};
    }
    const TimePoint now = env_.clock->Now();
    if (now >= req.deadline) {
      std::vector<std::string> names;
      for (uint32_t r : missing) {
        if (names.size() == 8) {
          names.push_back("...");
          break;
        }
        names.push_back(std::to_string(r));
      }
      return {false, done + "; no replacement runs the ranks [" + JoinNames(names) +
                         "] by the step's deadline (the workload's controller, the scheduler or the kubelet did "
                         "not bring them back)"};
    }
    Sleep(std::min<Duration>(500ms, req.deadline - now));
  }
}

Status KubernetesActions::DeletePod(const Target& t) {
  auto r = api().Delete(k8s::PodPath(t.ns, t.name), k8s::DeleteOptionsBody(t.uid));
  // Gone, or a different pod of that name by now: nothing to do.
  if (r.ok() || r.status().code() == StatusCode::kNotFound || r.status().code() == StatusCode::kAborted) {
    return Status::Ok();
  }
  return r.status();
}

// The Eviction API honours PodDisruptionBudgets: a refusal (429, or 5xx /
// unreachable) is retried until k8s_eviction_timeout (or the step's
// deadline), then the pod is deleted when k8s_delete_fallback is on.
Status KubernetesActions::Evict(const Target& t, const ActionRequest& req, bool* fell_back, std::string* why) {
  const auto& s = ctx_->settings();
  const std::string body = k8s::JsonText(k8s::EvictionBody(t.ns, t.name, t.uid));
  const std::string path = k8s::PodPath(t.ns, t.name) + "/eviction";
  const TimePoint give_up = std::min(env_.clock->Now() + s.eviction_timeout, req.deadline);
  for (;;) {
    auto r = api().Do("POST", path, body, "application/json");
    Status st = r.ok() ? k8s::ApiStatus(*r) : r.status();
    // Gone, or its uid changed (the pod was replaced): nothing to evict.
    if (st.ok() || st.code() == StatusCode::kNotFound || st.code() == StatusCode::kAborted) return Status::Ok();
    if (st.code() != StatusCode::kResourceExhausted && st.code() != StatusCode::kUnavailable) return st;
    const TimePoint now = env_.clock->Now();
    if (now >= give_up) {
      if (s.delete_fallback) {
        *fell_back = true;
        *why = st.message();
        return DeletePod(t);
      }
      return {StatusCode::kDeadlineExceeded, "eviction refused until the deadline: " + st.message()};
    }
    // The server's Retry-After when it sends one, else 2 s; the last try is
    // made at the give-up time, not after it.
    Duration wait = 2s;
    if (auto hint = r.ok() ? k8s::ParseRetryAfter(r->retry_after) : std::nullopt; hint && *hint > 0s) wait = *hint;
    Sleep(std::min<Duration>(wait, give_up - now));
  }
}

k8s::EventSpec KubernetesActions::Event(const ActionRequest& req, const std::string& kind, const std::string& name,
                                        const std::string& ns, const std::string& uid, const std::string& action,
                                        const std::string& note) const {
  k8s::EventSpec e;
  e.name = k8s::RecordName(req.idempotency_key + "/" + action);
  e.regarding_kind = kind;
  e.regarding_name = name;
  e.regarding_namespace = ns;
  e.regarding_uid = uid;
  e.action = action;
  e.note = note;
  e.reporting_instance = env_.host;
  e.event_time = k8s::Rfc3339(env_.clock->Now(), true);
  return e;
}

void KubernetesActions::PostEvent(const k8s::EventSpec& spec) {
  auto r = api().Post(k8s::EventsPath(k8s::EventNamespace(spec)), k8s::EventBody(spec));
  if (!r.ok() && r.status().code() != StatusCode::kAlreadyExists) {
    GetLogger("k8s")->warn("event for {} {}: {}", spec.regarding_kind, spec.regarding_name, r.status().message());
  }
}

std::unique_ptr<Actuator> MakeKubernetesActuator(std::shared_ptr<KubernetesContext> ctx, KubernetesActionsEnv env) {
  auto actions = std::make_shared<KubernetesActions>(std::move(ctx), std::move(env));
  return actuator_internal::MakePooledActuator("kubernetes", 4,
                                               [actions](const ActionRequest& req) { return actions->Run(req); });
}

StatusOr<std::unique_ptr<Actuator>> MakeKubernetesActuator(const ClusterdConfig& config) {
  auto ctx = KubernetesContext::For(config);
  if (!ctx.ok()) return ctx.status();
  KubernetesActionsEnv env;
  env.start_watches =
      std::find(config.integrations.begin(), config.integrations.end(), "kubernetes") == config.integrations.end();
  env.volcano_cluster_info =
      std::find(config.integrations.begin(), config.integrations.end(), "mindcluster") != config.integrations.end();
  return MakeKubernetesActuator(std::move(*ctx), std::move(env));
}

}  // namespace clusterd
