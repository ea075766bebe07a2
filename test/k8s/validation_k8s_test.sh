#!/usr/bin/env bash
# Return to service, proven (docs/validation.md), on Kubernetes: a REAL etcd +
# kube-apiserver on loopback (test/k8s/lib.sh; the test plays the controllers),
# clusterd with the kubernetes and mindcluster integrations and the kubernetes
# actuator, validation on, sim NodeDs with a validation command:
#  A. a SEPARATE chip fault on a StatefulSet pod (no Volcano, no DRA): the chip
#     is isolated, the Node tainted for it (the fallback) and it leaves Volcano's
#     cluster-info lists; the fault clears -> VALIDATING: still tainted, still
#     listed, Node condition AcceleratorValidation False/Validating, Event
#     ValidationStarted; the command passes -> back in the lists, untainted,
#     the condition True/Validated, Event ValidationPassed;
#  B. a failing validation command keeps the chip out (tainted, listed) with its
#     output as evidence (GetNode, the Event, the condition);
#  C. the chip fails again and again: held at the third flap (condition Held,
#     Event ValidationHeld), still out;
#  D. an operator's validation of a chip in service (out of the lists while it
#     runs), clusterd kill -9 mid-validation: the new clusterd asks again with
#     the same id, NodeD does not run it twice, it passes and the chip returns.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/k8s/lib.sh  # and test/e2e/lib.sh

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
CTL=("$BIN/clusterctl" --server "$ADDR")
on_cleanup() { k8s_stop; }
on_failure() {
  echo "--- clusterd.log"; grep -v "D \[engine\]" "$WORK/clusterd.log" | tail -60
  echo "--- noded-worker01.log"; tail -30 "$WORK/noded-worker01.log"
  echo "--- cluster-info-device-0"; k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-device-0 2>&1 | head -40 || true
  echo "--- worker01"; grpcurl -plaintext -d '{"name": "worker01"}' "$ADDR" clusterd.v1.ClusterService/GetNode 2>&1 | grep -v '"metrics"' | head -120 || true
  echo "--- validations"; grpcurl -plaintext -d '{}' "$ADDR" clusterd.v1.ClusterService/ListValidations 2>&1 | head -80 || true
}

k8s_start
k8s_create_namespace serve
k8s_create_namespace mindx-dl
for n in worker01 worker02; do
  k8s_api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$n\"}}" >/dev/null
  k8s_api PATCH "/api/v1/nodes/$n/status" \
    "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"test\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\",\"lastTransitionTime\":\"$(date -u +%FT%TZ)\"}]}}" \
    application/strategic-merge-patch+json >/dev/null
done
echo "-- API server ready at $K8S_API (no Volcano CRD, no DRA driver)"

# The command NodeD runs: waits for $WORK/go (a burn-in the test lets finish),
# prints $WORK/verdict and exits with its first word's status.
cat >"$WORK/commands.json" <<JSON
{"commands": [{"name": "loopback", "argv": ["/bin/sh", "-c",
  "while [ ! -f $WORK/go ]; do sleep 0.05; done; cat $WORK/verdict; exit \$(head -c 1 $WORK/verdict)"],
  "timeout_seconds": 120}]}
JSON
echo "0 loopback 8/8 UP" >"$WORK/verdict"

CLUSTERD_FLAGS=(--kubeconfig "$K8S_KUBECONFIG" --integrations kubernetes,mindcluster --actuator kubernetes
  --recovery-agent-attach-grace 1s --validation-enabled true --validation-stable-window 1s
  --validation-timeout 5m --log-level info)
start_clusterd "${CLUSTERD_FLAGS[@]}"
for n in worker01 worker02; do start_sim_noded "$n" --validation-commands-file "$WORK/commands.json" --log-level info; done
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == "$1" ]]
}
wait_until 30 connected 2

# pod STS DEVICES: the running pod STS-0 of StatefulSet STS on worker01 (no agent; each
# StatefulSet a job of its own, so that each chip's recovery is its own).
pod() {
  local uid
  uid=$(python3 -c 'import uuid; print(uuid.uuid4())')
  k8s_api POST /api/v1/namespaces/serve/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1-0\",
    \"labels\":{\"apps.kubernetes.io/pod-index\":\"0\"},
    \"annotations\":{\"huawei.com/AscendReal\":\"$2\"},
    \"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":\"StatefulSet\",\"name\":\"$1\",\"uid\":\"$uid\",\"controller\":true}]},
    \"spec\":{\"nodeName\":\"worker01\",\"containers\":[{\"name\":\"main\",\"image\":\"train:1\",
      \"resources\":{\"limits\":{\"huawei.com/Ascend910\":\"2\"}}}]}}" >/dev/null
  k8s_api PATCH "/api/v1/namespaces/serve/pods/$1-0/status" '{"status":{"phase":"Running"}}' >/dev/null
}
is() { [[ "$(eval "$1")" == "$2" ]]; }
# fallback_taints NODE: the clusterd.io/isolated-device-* taints of the Node, sorted.
fallback_taints() {
  k8s_api GET "/api/v1/nodes/$1" | python3 -c 'import json,sys; n=json.load(sys.stdin)
print(" ".join(sorted(t["key"] for t in n["spec"].get("taints", []) if t["key"].startswith("clusterd.io/isolated-device-"))))'
}
# unhealthy NODE: the chips Volcano's cluster-info-device-0 lists unhealthy on NODE.
unhealthy() {
  k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-device-0 2>/dev/null | python3 -c '
import json, sys
cm = json.load(sys.stdin)
e = json.loads(cm["data"]["cluster-info-device-0"]).get("mindx-dl-deviceinfo-" + sys.argv[1])
print(e["DeviceList"].get("huawei.com/Ascend910-Unhealthy", "") if e else "<none>")' "$1"
}
# condition NODE: "status reason" of the Node's AcceleratorValidation condition.
condition() {
  k8s_api GET "/api/v1/nodes/$1" | python3 -c 'import json,sys
for c in json.load(sys.stdin)["status"].get("conditions", []):
    if c["type"] == "AcceleratorValidation": print(c["status"], c["reason"])'
}
condition_message() {
  k8s_api GET "/api/v1/nodes/$1" | python3 -c 'import json,sys
for c in json.load(sys.stdin)["status"].get("conditions", []):
    if c["type"] == "AcceleratorValidation": print(c["message"])'
}
# events ACTION: the notes of the ClusterdValidation Events with that action, a line each.
events() {
  k8s_api GET /apis/events.k8s.io/v1/namespaces/default/events | python3 -c 'import json,sys
for e in json.load(sys.stdin)["items"]:
    if e.get("reason") == "ClusterdValidation" and e.get("action") == sys.argv[1]: print(e.get("note", ""))' "$1"
}
has_event() { events "$1" | grep -q -- "$2"; }
# validation DEV FIELD: a field of the chip's newest validation on worker01 (JSON).
validation() {
  grpcurl -plaintext -d "{\"node\": \"worker01\", \"deviceId\": $1}" "$ADDR" \
    clusterd.v1.ClusterService/ListValidations | python3 -c '
import json, sys
v = json.load(sys.stdin).get("validations", [])
print(json.dumps(v[0].get(sys.argv[1], "")) if v else "")' "$2"
}
state_is() { [[ $(validation "$1" state) == "\"VALIDATION_STATE_$2\"" ]]; }
device() {
  grpcurl -plaintext -d '{"name": "worker01"}' "$ADDR" clusterd.v1.ClusterService/GetNode | python3 -c '
import json, sys
for d in json.load(sys.stdin).get("devices", []):
    if d.get("id", 0) == int(sys.argv[1]): print(d.get(sys.argv[2], ""))' "$1" "$2"
}
tainted() { [[ " $(fallback_taints worker01) " == *" clusterd.io/isolated-device-$1 "* ]]; }
untainted() { ! tainted "$1"; }
listed() { [[ ",$(unhealthy worker01)," == *",Ascend910-$1,"* ]]; }
unlisted() { ! listed "$1"; }
# fault_on DEV: a SEPARATE chip fault raised on worker01's DEV, the chip isolated and tainted, then cleared.
fault_on() {
  inject_sim_fault worker01 "$1" 4C4BA00C raise
  wait_until 30 tainted "$1"
  wait_until 30 listed "$1"
  [[ $(device "$1" isolated) == True ]] || fail "chip $1 is not isolated after its fault"
  inject_sim_fault worker01 "$1" 4C4BA00C clear
}

pod llm Ascend910-0,Ascend910-1
pod chat Ascend910-2,Ascend910-3
wait_until 30 is 'unhealthy worker01' ""

echo "-- A: fault, clear -> VALIDATING (still out everywhere) -> pass -> back"
rm -f "$WORK/go"
fault_on 0
wait_until 30 state_is 0 RUNNING
expect_contains "$(validation 0 trigger)" "fault-cleared" "A: trigger"
tainted 0 || fail "A: the taint was lifted while the chip validates"
listed 0 || fail "A: the chip is back in Volcano's lists while it validates"
[[ $(device 0 service_phase) == SERVICE_PHASE_VALIDATING ]] || fail "A: phase $(device 0 service_phase)"
wait_until 30 is 'condition worker01' "False Validating"
expect_contains "$(condition_message worker01)" "device 0" "A: the condition names the chip"
wait_until 30 has_event ValidationStarted "device 0 started (fault-cleared)"
touch "$WORK/go"
wait_until 60 state_is 0 PASSED
wait_until 30 untainted 0
wait_until 30 unlisted 0
[[ $(device 0 isolated) == "" ]] || fail "A: the chip is still isolated after its pass"
wait_until 30 is 'condition worker01' "True Validated"
wait_until 30 has_event ValidationPassed "device 0 passed: back in service"
echo "   chip 0 VALIDATING while tainted and listed; passed: untainted, out of Volcano's unhealthy list"

echo "-- B: a failing validation command keeps the chip out, its output as evidence"
echo "3 loopback: port 7 DOWN" >"$WORK/verdict"
fault_on 2
wait_until 60 state_is 2 FAILED
expect_contains "$(validation 2 checks)" "loopback: port 7 DOWN" "B: evidence"
tainted 2 || fail "B: the taint was lifted after a failed validation"
listed 2 || fail "B: a chip that failed its validation is back in Volcano's lists"
[[ $(device 2 isolated) == True ]] || fail "B: the chip left isolation after a failed validation"
wait_until 30 is 'condition worker01' "False ValidationFailed"
expect_contains "$(condition_message worker01)" "exited with status 3" "B: the condition says why"
wait_until 30 has_event ValidationFailed "device 2 failed, kept out"
echo "   chip 2 FAILED: still tainted and listed; evidence in the validation, the condition and the Event"

echo "-- C: the chip keeps failing: held at the third flap"
for i in 2 3; do
  "${CTL[@]}" validate worker01 2 --reason "try $i" >/dev/null
  flaps() { [[ $(device 2 flap_times | python3 -c 'import ast,sys; print(len(ast.literal_eval(sys.stdin.read() or "[]")))') == "$1" ]]; }
  wait_until 60 flaps "$i"
done
wait_until 30 is 'device 2 service_phase' SERVICE_PHASE_HELD
wait_until 30 is 'condition worker01' "False Held"
wait_until 30 has_event ValidationHeld "device 2 held out of service"
tainted 2 || fail "C: a held chip lost its taint"
listed 2 || fail "C: a held chip is back in Volcano's lists"
"${CTL[@]}" validate worker01 2 --reason "once more" >/dev/null 2>&1 && fail "C: a held chip was validated without --force"
echo "   chip 2 HELD after 3 flaps: tainted, listed, condition Held, Event ValidationHeld"

echo "-- D: clusterd kill -9 mid-validation: resumed with the same id, run once"
echo "0 loopback 8/8 UP" >"$WORK/verdict"
rm -f "$WORK/go"
# An operator's validation of a chip in service: isolated (out of Volcano's lists) for it.
"${CTL[@]}" validate worker01 1 --reason "after the firmware update" >/dev/null
wait_until 30 state_is 1 RUNNING
wait_until 30 listed 1
id=$(validation 1 id)
id=${id//\"/}
kill_wait "$CLUSTERD_PID"
start_clusterd "${CLUSTERD_FLAGS[@]}"
wait_until 30 connected 2
resent() { curl -sf "http://127.0.0.1:${NODED_PORT[worker01]}/metrics" | awk '/^noded_validation_duplicates /{exit !($2 >= 1)}'; }
wait_until 30 resent
listed 1 || fail "D: the chip came back into Volcano's lists across the restart"
touch "$WORK/go"
wait_until 60 state_is 1 PASSED
[[ $(validation 1 id) == "\"$id\"" ]] || fail "D: a new validation instead of the resumed $id: $(validation 1 id)"
[[ $(grep -c "validation $id asked" "$WORK/noded-worker01.log") == 1 ]] || fail "D: NodeD ran $id more than once"
wait_until 30 unlisted 1
[[ $(device 1 isolated) == "" ]] || fail "D: the chip is still isolated after its pass"
echo "   $id resumed after kill -9, run once by NodeD, passed: chip 1 out of the unhealthy list again"
echo "validation k8s e2e: OK"
