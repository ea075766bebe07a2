// Cluster actions of a recovery (isolate a device or node, reset a chip,
// reschedule pods, restart a job) go through an Actuator. ClusterD stores the
// step as RUNNING before it calls Execute, and stores the result before it
// moves on, so an action that succeeded is never asked for again; an action
// that was in flight when ClusterD died is asked for again after the restart
// with the SAME idempotency key, and the actuator (or what it drives) must
// treat a repeated key as already done.
//
// Shipped: "none" (every action fails: nothing is configured to act), "exec"
// (runs a command with the action as one JSON object on stdin) and "webhook"
// (HTTP POST of the same JSON). docs/recovery.md describes the JSON.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/v1/types.pb.h"
#include "common/clock.h"
#include "common/status.h"

namespace clusterd {

struct ActionRequest {
  std::string idempotency_key;  // "<recovery id>/<step index>"
  std::string recovery_id;
  std::string job_id;
  v1::ClusterAction action = v1::CLUSTER_ACTION_UNSPECIFIED;
  v1::RecoveryStrategy strategy = v1::RECOVERY_STRATEGY_UNSPECIFIED;
  std::string node;                // empty for RESTART_JOB
  std::optional<uint32_t> device;  // ISOLATE_DEVICE, RESET_DEVICE
  std::vector<uint32_t> ranks;     // RESCHEDULE_PODS, RESTART_JOB
  // Worst level among the recovery's trigger faults (e.g. a taint's value).
  v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
  // RESCHEDULE_PODS, RESTART_JOB: the fault domains no pod may be placed
  // into, as label selector terms ("huawei.com/topotree.superpodid=7"): those
  // with an open incident that avoids or isolates them (docs/domains.md).
  // At most 64.
  std::vector<std::string> avoid;
  // Wall-clock deadline of the step; the actuator gives up (and reports a
  // failure) when it passes.
  TimePoint deadline;
};

struct ActionResult {
  bool ok = false;
  std::string message;  // one line: what happened, or why it failed
};

// "isolate_device", "isolate_node", "reset_device", "reschedule_pods",
// "restart_job".
std::string_view ActionName(v1::ClusterAction action);

// The request as one line of JSON:
// {"idempotency_key":"train-1.1/2","recovery_id":"train-1.1","job_id":"train-1",
//  "action":"isolate_device","strategy":"POD_RESCHEDULE","node":"worker01",
//  "device_id":3,"ranks":[3],"deadline":"2026-11-30T01:02:03.000Z"}
// device_id is present only when set, "avoid" (an array of label selector
// terms) only when not empty; strings are JSON-escaped.
std::string ActionJson(const ActionRequest& req);

class Actuator {
 public:
  using Done = std::function<void(ActionResult)>;
  virtual ~Actuator() = default;
  // Starts `req` and returns at once; `done` runs exactly once, on any thread
  // (never inside Execute itself). Thread-safe.
  virtual void Execute(ActionRequest req, Done done) = 0;
  // Waits for running actions to finish (their `done` still runs) and refuses
  // new ones (their `done` runs with ok=false).
  virtual void Stop() = 0;
  virtual std::string_view kind() const = 0;
};

// Fails every action with "no actuator configured".
std::unique_ptr<Actuator> MakeNoneActuator();

struct ExecActuatorOptions {
  // Run as `/bin/sh -c command`; the JSON arrives on stdin (then EOF). Exit
  // status 0 is success; otherwise the last non-empty line of stdout+stderr
  // (truncated to 512 bytes) is the failure message. The environment also
  // carries CLUSTERD_ACTION, CLUSTERD_IDEMPOTENCY_KEY, CLUSTERD_JOB_ID.
  std::string command;
  // Actions run in parallel on this many worker threads.
  int workers = 2;
  // How long a command has after SIGTERM before SIGKILL (a test's command
  // that ignores SIGTERM is killed sooner).
  std::chrono::milliseconds kill_grace{2000};
};
// At the deadline the command's process group gets SIGTERM, kill_grace
// (2 s) later SIGKILL, and the action fails with "timed out".
StatusOr<std::unique_ptr<Actuator>> MakeExecActuator(ExecActuatorOptions options);

struct WebhookActuatorOptions {
  // http://host:port/path, or https://host:port/path: TLS, the receiver's
  // certificate verified against ca_file (empty: the system's roots) and
  // its name against the URL's host; cert_file and key_file (both or
  // neither) presented as a client certificate.
  std::string url;
  std::string ca_file = {};
  std::string cert_file = {};
  std::string key_file = {};
  int workers = 2;
};
// POSTs the JSON with Content-Type application/json and an Idempotency-Key
// header. A 2xx answer is success; anything else (or no answer before the
// deadline) fails, with the status line and the start of the body as the
// message.
StatusOr<std::unique_ptr<Actuator>> MakeWebhookActuator(const WebhookActuatorOptions& options);

}  // namespace clusterd
