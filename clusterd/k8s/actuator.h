// The "kubernetes" actuator (docs/kubernetes.md): a recovery's cluster
// actions carried out through the API server. isolate_node cordons and
// taints the Node, isolate_device marks the device on it (and, where a DRA
// driver publishes it, taints it with a DeviceTaintRule), reschedule_pods
// evicts the pods that hold the step's ranks (deleting them after the
// eviction timeout when allowed), restart_job deletes all of the job's pods,
// and each step that changes something posts an Event. Every action is safe
// to repeat with the same idempotency key (after a restart of ClusterD): Node
// patches check their effect first, and pod removals record the pods they
// chose before removing any.
#pragma once

#include <functional>
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "clusterd/config/config.h"
#include "clusterd/k8s/context.h"
#include "clusterd/recovery/actuators/actuator.h"
#include "common/clock.h"
#include "common/status.h"

namespace clusterd {

struct KubernetesActionsEnv {
  // The time of the patches and Events, and of the eviction and sync
  // deadlines. Not owned; outlives the actions.
  const Clock* clock = &SystemClock::Instance();
  // Waits between two tries (an eviction refused, the pod cache not listed
  // yet); called from several workers at once. Empty: the calling thread
  // sleeps. Tests advance a FakeClock instead.
  std::function<void(Duration)> sleep;
  // The Events' reportingInstance. Empty: the host name (the pod's name
  // in a cluster).
  std::string host;
  // Whether an action starts the shared watches when they are not running.
  // False when the kubernetes integration runs too: it starts them with its
  // metrics (an action resumed after a restart comes first, and watches it
  // started would export none), and an action waits for their first list.
  bool start_watches = true;
  // Whether the "mindcluster" integration writes Volcano's cluster-info
  // ConfigMaps: then a device isolated under a job whose pods Volcano
  // schedules is seen by its scheduler (no fallback taint).
  bool volcano_cluster_info = false;
};

// The actions themselves, one call each on the calling thread. Thread-safe:
// the actuator runs them on several workers.
class KubernetesActions {
 public:
  KubernetesActions(std::shared_ptr<KubernetesContext> ctx, KubernetesActionsEnv env);

  ActionResult Run(const ActionRequest& req);

 private:
  struct Target {
    std::string ns, name, uid;
    std::vector<uint32_t> ranks;  // the device ranks the pod holds
  };

  const k8s::ApiClient& api() const { return ctx_->client(); }
  void Sleep(Duration d) const;
  ActionResult IsolateNode(const ActionRequest& req);
  ActionResult IsolateDevice(const ActionRequest& req);
  // The DeviceTaintRule of the step's device: what was done (*changed when
  // the rule was created or strengthened), "" when DRA does not publish the
  // device (nothing to taint); an error fails the step.
  StatusOr<std::string> TaintDevice(const ActionRequest& req, bool* changed);
  // Whether the device's isolation reaches the job's scheduler
  // (k8s::DecideIsolationView; `dra`: its DeviceTaintRule is there), and when
  // nothing does, the fallback taint on the Node (*changed when it was
  // added): what the step says about it ("" for DRA: its rule says so).
  StatusOr<std::string> SchedulerView(const ActionRequest& req, bool dra, bool* changed);
  // Volcano's cluster-info is written and the job's pods are Volcano's.
  bool ScheduledByVolcano(const ActionRequest& req);
  // Starts the watches when this actuator owns them and waits for the pod
  // cache's first list until 30 s or the step's deadline; false when not
  // synced by then.
  bool AwaitPodCache(const ActionRequest& req);
  // Logs `message` the first time `key` is seen.
  void NoteOnce(const std::string& key, const std::string& message);
  // The job's pods in the cache (terminating ones too).
  std::vector<k8s::PodInfo> PodsOfJob(const std::string& job_id) const;
  std::vector<Target> FindPods(const ActionRequest& req, bool whole_job, const std::vector<k8s::PodInfo>& job) const;
  ActionResult RemovePods(const ActionRequest& req, bool evict);
  // Once pods are removed: waits until `ranks` are held again by pods of the
  // job that run (phase Running) and are none of `removed` (uids), until the
  // step's deadline. The recovery ends (and the agent is told to resume) only
  // when the job is whole again; a replacement that never runs, or that runs
  // on an isolated node or device (k8s::IsolatedPlacement), fails the step
  // and the ladder escalates. `done` says what was removed; the message names
  // the new pods (not in `before`) that hold the ranks.
  ActionResult WaitForReplacements(const ActionRequest& req, const std::set<uint32_t>& ranks,
                                   const std::set<std::string>& removed, const std::set<std::string>& before,
                                   const std::string& done);
  Status DeletePod(const Target& t);
  // *fell_back: the eviction was refused until the timeout and the pod was
  // deleted instead (k8s_delete_fallback); *why: the last refusal.
  Status Evict(const Target& t, const ActionRequest& req, bool* fell_back, std::string* why);
  // Best effort: an Event that cannot be posted fails no action.
  void PostEvent(const k8s::EventSpec& spec);
  k8s::EventSpec Event(const ActionRequest& req, const std::string& kind, const std::string& name,
                       const std::string& ns, const std::string& uid, const std::string& action,
                       const std::string& note) const;

  const std::shared_ptr<KubernetesContext> ctx_;
  const KubernetesActionsEnv env_;
  std::mutex noted_mu_;
  std::set<std::string> noted_;  // guarded by noted_mu_
};

// The actions over KubernetesContext::For(config) on the system clock, run
// on 4 worker threads.
StatusOr<std::unique_ptr<Actuator>> MakeKubernetesActuator(const ClusterdConfig& config);
// The same over a context and an environment of the caller's (tests).
std::unique_ptr<Actuator> MakeKubernetesActuator(std::shared_ptr<KubernetesContext> ctx, KubernetesActionsEnv env);

}  // namespace clusterd
