#!/usr/bin/env bash
# ClusterD on a REAL control loop: etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager and kwok's simulated kubelets on loopback
# (test/k8s/lib.sh k8s_start_control_loop). Nothing here moves a pod by hand:
# the controllers recreate what ClusterD evicts, the scheduler places it, kwok
# runs it, and the test asserts what really happened (every pod change is
# recorded by test/k8s/watch_pods.py). Eight nodes of 8 chips
# (huawei.com/Ascend910), a sim NodeD on each; every pod asks for 8 chips.
#  1. A StatefulSet, no Volcano CRD, no job agent: a SEPARATE chip fault that
#     only NodeD sees (the node's allocatable unchanged, no DRA driver: no
#     scheduler sees the isolation, so ClusterD taints the node
#     clusterd.io/isolated-device-<id>:NoSchedule) ->
#     PAUSE skipped after the attach grace, the chip isolated, the pod's
#     eviction refused by a PodDisruptionBudget and retried; ClusterD is killed
#     -9 in the middle of that step, the budget removed, ClusterD restarted: the
#     repeated step evicts the pod it recorded, the StatefulSet's replacement is
#     scheduled on a healthy node, Running, and never evicted; the placement
#     follows; one recovery, SUCCEEDED.
#  1b. An Indexed Job, no PodGroup, no job agent: the same fault, the
#     allocatable unchanged: the replacement runs on a healthy node, SUCCEEDED.
#  1c. The chips of 1 and 1b replaced (faults cleared, UncordonNode): their
#     fallback taints are lifted. (2 and 4 lower the allocatable: no taint.)
#  2. An Indexed batch/v1 Job in a Volcano PodGroup (CRD installed), with a job
#     agent: the same fault, measured: fault -> replacement Running, split into
#     ClusterD's share, the controllers', the scheduler's and the kubelet's.
#  3. Another Indexed Job: its node is lost (its kubelet and NodeD stop) ->
#     ClusterD's HEARTBEAT_LOST and the node-lifecycle controller's NotReady
#     (NODE_NOT_READY) give one recovery; the node is cordoned and tainted
#     NoExecute, so the taint-eviction controller deletes the pod first: the
#     step is not failed for it; the replacement runs elsewhere.
#  4. A StatefulSet whose PodDisruptionBudget refuses the eviction, ClusterD
#     restarted with --k8s-eviction-timeout 3s --k8s-delete-fallback: refused
#     until the timeout, then deleted, and the step says so; the replacement
#     runs, the recovery SUCCEEDED.
# In every scenario no pod is ever bound to the faulty node after the fault.
# In 2 and 4 the test plays one part of the Ascend device plugin: when a chip
# fails, the node's allocatable huawei.com/Ascend910 drops by one
# (k8s_set_node_chips), as the plugin's ListAndWatch makes the kubelet do.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/k8s/lib.sh # and test/e2e/lib.sh

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
NODES=(worker01 worker02 worker03 worker04 worker05 worker06 worker07 worker08)
PODS_LOG=$WORK/pods.jsonl
on_cleanup() { k8s_stop; }
on_failure() {
  echo "--- clusterd.log"; grep -v "D \[engine\]" "$WORK/clusterd.log" | tail -60
  echo "--- recoveries"
  grpcurl -plaintext -d '{}' "$ADDR" clusterd.v1.ClusterService/ListRecoveries 2>&1 | head -120 || true
  echo "--- metrics"; curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | grep -E '^clusterd_(k8s|recovery)_' | head -40
  echo "--- pods"; tail -40 "$PODS_LOG"
  tail_logs 30 "$K8S_DIR/kube-controller-manager.log" "$K8S_DIR/kube-scheduler.log"
}

# ---- helpers -----------------------------------------------------------------

# pods_py EXPR: evaluates a Python expression over `events` (the recorded pod changes, oldest
# first, each a dict as watch_pods.py writes it).
pods_py() {
  python3 - "$PODS_LOG" "$@" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def live(ns):  # the newest state of each pod of ns that is not deleted
    last = {}
    for e in events:
        if e["ns"] == ns:
            last[e["uid"]] = e
    return [e for e in last.values() if e["type"] != "DELETED"]
print(eval(sys.argv[2]))
PY
}
# running NS COUNT: COUNT pods of NS Running and not terminating, and no other pod of NS that is
# not terminating (a pod stuck terminating on a lost node is left out).
running() {
  [[ $(pods_py "sum(1 for e in live('$1') if e['phase'] == 'Running' and not e['deleting'])") == "$2" &&
    $(pods_py "sum(1 for e in live('$1') if not e['deleting'])") == "$2" ]]
}
# pod_of NS INDEX: "NAME UID NODE" of the live, not terminating pod with that index.
pod_of() {
  pods_py "' '.join([(e['name'] + ' ' + e['uid'] + ' ' + e['node']) for e in live('$1') if e['index'] == '$2' and not e['deleting']][:1])"
}
replaced() { # NS INDEX OLD_UID: the pod of that index is another one, Running
  local name uid node
  read -r name uid node < <(pod_of "$1" "$2")
  [[ -n $uid && $uid != "$3" && $(pods_py "[e['phase'] for e in live('$1') if e['uid'] == '$uid'][0]") == Running ]]
}
# nodes_bound_since NS T: every node a pod of NS was bound to after T (the first change of each
# pod that names a node: its binding).
nodes_bound_since() {
  pods_py "' '.join(sorted({b['node'] for b in {e['uid']: e for e in reversed(events) if e['ns'] == '$1' and e['node']}.values() if b['t'] > $2}))"
}
placement_nodes() { # JOB: the node of each rank, in rank order
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.JobService/GetJob 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["job"]
p=sorted(j["placement"], key=lambda p: p.get("rank",0)); print(" ".join(sorted({x["node"] for x in p})), len(p))'
}
recovery() { # ID EXPR over r (the recovery)
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/GetRecovery 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["recovery"]; print(eval(sys.argv[1]))' "$2"
}
recoveries_of() { # JOB: the ids of its recoveries
  grpcurl -plaintext -d "{\"job\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/ListRecoveries 2>/dev/null |
    python3 -c 'import json,sys; print(" ".join(r["id"] for r in json.load(sys.stdin).get("recoveries", [])))'
}
is() { [[ "$(eval "$1")" == "$2" ]]; }
metric() { curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
uid_of() { k8s_api GET "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["uid"])'; }
now() { date +%s.%N; }
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == "$1" ]]
}
# pod_template INDEX_HINT: a pod of 8 chips; the device plugin's annotation names all 8 (a pod
# that asks for a whole node gets every chip of it).
CHIPS_ANNOTATION='"huawei.com/AscendReal":"Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3,Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7"'
CONTAINER='"containers":[{"name":"main","image":"train:1","resources":{"limits":{"huawei.com/Ascend910":"8"}}}]'
statefulset() { # NS NAME
  k8s_api POST "/apis/apps/v1/namespaces/$1/statefulsets" "{\"apiVersion\":\"apps/v1\",\"kind\":\"StatefulSet\",
    \"metadata\":{\"name\":\"$2\"},\"spec\":{\"replicas\":2,\"podManagementPolicy\":\"Parallel\",
    \"serviceName\":\"$2\",\"selector\":{\"matchLabels\":{\"app\":\"$2\"}},
    \"template\":{\"metadata\":{\"labels\":{\"app\":\"$2\"},\"annotations\":{$CHIPS_ANNOTATION}},
      \"spec\":{$CONTAINER}}}}" >/dev/null
}
indexed_job() { # NS NAME PODGROUP
  k8s_api POST "/apis/scheduling.volcano.sh/v1beta1/namespaces/$1/podgroups" \
    "{\"apiVersion\":\"scheduling.volcano.sh/v1beta1\",\"kind\":\"PodGroup\",\"metadata\":{\"name\":\"$3\"},
      \"spec\":{\"minMember\":2}}" >/dev/null
  k8s_api POST "/apis/batch/v1/namespaces/$1/jobs" "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",
    \"metadata\":{\"name\":\"$2\"},\"spec\":{\"completionMode\":\"Indexed\",\"completions\":2,\"parallelism\":2,
    \"template\":{\"metadata\":{\"annotations\":{$CHIPS_ANNOTATION,\"scheduling.k8s.io/group-name\":\"$3\"}},
      \"spec\":{\"restartPolicy\":\"Never\",$CONTAINER}}}}" >/dev/null
}
delete_all() { # NS PATH: deletes the workload (its pods through the garbage collector) and waits
  k8s_api DELETE "$2?propagationPolicy=Background" >/dev/null
  wait_until 60 is "pods_py \"len(live('$1'))\"" 0
}
# lose_chip NODE CHIP: a SEPARATE fault (a code the catalog rates SEPARATE) through the node's NodeD, and the
# device plugin's part: the chip leaves the node's allocatable.
# The kubelet keeps the capacity (every chip the plugin registered) and lowers the allocatable.
lose_chip() {
  inject_sim_fault "$1" "$2" 4C4BA00C
  k8s_api PATCH "/api/v1/nodes/$1/status" '{"status":{"allocatable":{"huawei.com/Ascend910":"7"}}}' \
    application/strategic-merge-patch+json >/dev/null
}

# fail_chip NODE CHIP: the same fault where the device plugin sees nothing (the allocatable unchanged).
fail_chip() { inject_sim_fault "$1" "$2" 4C4BA00C; }
# fallback_taints NODE: the node's fallback device taints, "key=value:effect" sorted.
fallback_taints() {
  k8s_api GET "/api/v1/nodes/$1" | python3 -c 'import json,sys; n=json.load(sys.stdin)
print(" ".join(sorted(t["key"] + "=" + t.get("value","") + ":" + t["effect"] for t in n["spec"].get("taints", []) if t["key"].startswith("clusterd.io/isolated-device-"))))'
}
step_message() { # RECOVERY ACTION: the message of the recovery's first step of that action
  recovery "$1" "[s.get('message','') for s in r['steps'] if s.get('action') == '$2'][0]"
}

# ---- the cluster -------------------------------------------------------------

k8s_start
k8s_start_control_loop
python3 test/k8s/watch_pods.py "$K8S_API" "$K8S_CA" "$K8S_ADMIN_TOKEN" "$PODS_LOG" >"$WORK/watch.log" 2>&1 &
PIDS+=("$!")
for n in "${NODES[@]}"; do k8s_add_kwok_node "$n"; done
for ns in s1 s2 s3 s4; do k8s_create_namespace "$ns"; done
[[ $(k8s_code GET /apis/scheduling.volcano.sh/v1beta1/podgroups) == 404 ]] || fail "PodGroups are served before the test installs Volcano's CRD"
echo "-- a control loop: ${#NODES[@]} kwok nodes Ready, scheduler and controllers running"

CLUSTERD_FLAGS=(--kubeconfig "$K8S_KUBECONFIG" --integrations kubernetes --actuator kubernetes
  --k8s-crd-recheck 1s --recovery-agent-attach-grace 2s --node-grace 3s --k8s-taint-effect NoExecute
  --log-level info)
start_clusterd "${CLUSTERD_FLAGS[@]}"
for n in "${NODES[@]}"; do start_sim_noded "$n"; done
wait_until 30 connected ${#NODES[@]}

# ---- 1 -----------------------------------------------------------------------
echo "-- 1: StatefulSet, no PodGroup CRD, no agent: chip fault; kill -9 while the eviction is in flight"
statefulset s1 llm
# budget NS NAME MIN_AVAILABLE: a PodDisruptionBudget over the workload's pods, once the
# disruption controller has computed it.
budget() {
  k8s_api POST "/apis/policy/v1/namespaces/$1/poddisruptionbudgets" "{\"apiVersion\":\"policy/v1\",
    \"kind\":\"PodDisruptionBudget\",\"metadata\":{\"name\":\"$2\"},
    \"spec\":{\"minAvailable\":$3,\"selector\":{\"matchLabels\":{\"app\":\"$2\"}}}}" >/dev/null
}
budget_blocks() { # NS NAME: the controller counts every pod healthy and allows no disruption
  k8s_api GET "/apis/policy/v1/namespaces/$1/poddisruptionbudgets/$2" |
    python3 -c 'import json,sys; s=json.load(sys.stdin).get("status",{}); sys.exit(0 if s.get("currentHealthy") == 2 and s.get("disruptionsAllowed") == 0 else 1)'
}
# A budget holds the eviction back, so that ClusterD can be killed while the step is in flight.
budget s1 llm 2
wait_until 60 running s1 2
wait_until 30 budget_blocks s1 llm
STS=$(uid_of /apis/apps/v1/namespaces/s1/statefulsets/llm)
read -r _ OLD_UID FAULTY < <(pod_of s1 1)
wait_until 30 is 'placement_nodes "$STS"' "$(pods_py "' '.join(sorted(e['node'] for e in live('s1')))") 16"
T1=$(now)
fail_chip "$FAULTY" 3
FAULTY1=$FAULTY
# The pod-removing step records the pods it chose (an Event named after its idempotency key)
# before it evicts them: once it is there, the eviction is being refused and retried.
recorded() { k8s_api GET /apis/events.k8s.io/v1/namespaces/s1/events | grep -q '"action": *"Evict"'; }
wait_until 30 recorded
[[ $(recovery "$STS.1" '[s["state"] for s in r["steps"] if s.get("action") == "CLUSTER_ACTION_RESCHEDULE_PODS"][0]') == STEP_STATE_RUNNING ]] ||
  fail "1: the pods' step is not in flight"
kill_wait "$CLUSTERD_PID"
echo "   llm-1's eviction refused by its budget; clusterd killed -9 in the middle of the step"
k8s_api DELETE /apis/policy/v1/namespaces/s1/poddisruptionbudgets/llm >/dev/null
start_clusterd "${CLUSTERD_FLAGS[@]}"
wait_until 60 replaced s1 1 "$OLD_UID"
wait_until 60 is 'recovery "$STS.1" "r[\"state\"]"' RECOVERY_STATE_SUCCEEDED
read -r _ NEW_UID NEW_NODE < <(pod_of s1 1)
pause=$(recovery "$STS.1" '[s["state"] + " " + s.get("message","") for s in r["steps"] if s.get("command") == "JOB_COMMAND_PAUSE"][0]')
expect_contains "$pause" "STEP_STATE_SKIPPED" "1: PAUSE skipped"
wait_until 30 is 'placement_nodes "$STS"' "$(pods_py "' '.join(sorted(e['node'] for e in live('s1')))") 16"
[[ $(pods_py "sum(1 for e in events if e['uid'] == '$NEW_UID' and e['deleting'])") == 0 ]] ||
  fail "1: the replacement was evicted after the restart"
# The only running pod removed is the one the step recorded (the StatefulSet controller may
# delete a replacement of its own before it runs, even once it is bound: that one never ran).
ran="{e['uid'] for e in events if e['ns'] == 's1' and e['phase'] == 'Running'}"
[[ $(pods_py "sorted({e['uid'] for e in events if e['ns'] == 's1' and e['deleting'] and e['uid'] in $ran})") == "['$OLD_UID']" ]] ||
  fail "1: a pod other than the recorded one was removed"
[[ " $(nodes_bound_since s1 "$T1") " != *" $FAULTY "* ]] || fail "1: a pod was bound to $FAULTY after its chip failed"
[[ $(recoveries_of "$STS") == "$STS.1" ]] || fail "1: recoveries $(recoveries_of "$STS")"
[[ $(fallback_taints "$FAULTY") == "clusterd.io/isolated-device-3=SEPARATE:NoSchedule" ]] ||
  fail "1: $FAULTY's fallback taints: $(fallback_taints "$FAULTY")"
expect_contains "$(step_message "$STS.1" CLUSTER_ACTION_ISOLATE_DEVICE)" \
  "no scheduler of the job sees the isolation (no Volcano cluster-info, no DRA device, huawei.com/Ascend910 allocatable 8 of 8): tainted node $FAULTY clusterd.io/isolated-device-3=SEPARATE:NoSchedule" \
  "1: the isolate step says why it tainted the node"
k8s_api GET /apis/events.k8s.io/v1/namespaces/default/events | grep -q "tainted node $FAULTY clusterd.io/isolated-device-3" ||
  fail "1: no Event says the node was tainted for the device"
echo "   after the restart the step evicted the recorded pod only; replacement on $NEW_NODE; $STS.1 SUCCEEDED"
echo "   $FAULTY tainted clusterd.io/isolated-device-3:NoSchedule (no scheduler saw the isolation)"
delete_all s1 /apis/apps/v1/namespaces/s1/statefulsets/llm

# ---- 1b ----------------------------------------------------------------------
echo "-- 1b: Indexed Job, no PodGroup, no agent: chip fault, the allocatable unchanged"
k8s_api POST "/apis/batch/v1/namespaces/s1/jobs" "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",
  \"metadata\":{\"name\":\"solo\"},\"spec\":{\"completionMode\":\"Indexed\",\"completions\":2,\"parallelism\":2,
  \"template\":{\"metadata\":{\"annotations\":{$CHIPS_ANNOTATION}},
    \"spec\":{\"restartPolicy\":\"Never\",$CONTAINER}}}}" >/dev/null
wait_until 60 running s1 2
JOB1B=$(uid_of /apis/batch/v1/namespaces/s1/jobs/solo)
wait_until 30 is 'placement_nodes "$JOB1B"' "$(pods_py "' '.join(sorted(e['node'] for e in live('s1')))") 16"
read -r _ OLD_UID FAULTY < <(pod_of s1 0)
T1B=$(now)
fail_chip "$FAULTY" 6
FAULTY1B=$FAULTY
wait_until 60 replaced s1 0 "$OLD_UID"
wait_until 30 is 'recovery "$JOB1B.1" "r[\"state\"]"' RECOVERY_STATE_SUCCEEDED
read -r _ _ NEW_NODE < <(pod_of s1 0)
[[ " $(nodes_bound_since s1 "$T1B") " != *" $FAULTY "* ]] || fail "1b: a pod was bound to $FAULTY after its chip failed"
[[ $(fallback_taints "$FAULTY") == "clusterd.io/isolated-device-6=SEPARATE:NoSchedule" ]] ||
  fail "1b: $FAULTY's fallback taints: $(fallback_taints "$FAULTY")"
expect_contains "$(step_message "$JOB1B.1" CLUSTER_ACTION_RESCHEDULE_PODS)" "on $NEW_NODE Running" "1b: the replacement"
echo "   index 0 moved $FAULTY -> $NEW_NODE (tainted for chip 6); $JOB1B.1 SUCCEEDED"
delete_all s1 /apis/batch/v1/namespaces/s1/jobs/solo

# ---- 1c ----------------------------------------------------------------------
echo "-- 1c: the chips of 1 and 1b replaced (faults cleared, UncordonNode): their fallback taints lifted"
for pair in "$FAULTY1 3" "$FAULTY1B 6"; do
  read -r n chip <<<"$pair"
  inject_sim_fault "$n" "$chip" 4C4BA00C clear
  grpcurl -plaintext -d "{\"node\": \"$n\", \"actor\": \"e2e\", \"reason\": \"chip replaced\"}" "$ADDR" \
    clusterd.v1.AdminService/UncordonNode >/dev/null
done
wait_until 60 is 'fallback_taints "$FAULTY1"' ""
wait_until 60 is 'fallback_taints "$FAULTY1B"' ""
echo "   $FAULTY1 and $FAULTY1B untainted, back in service"

# ---- 2 -----------------------------------------------------------------------
echo "-- 2: Indexed Job in a PodGroup (Volcano's CRD installed), with an agent: chip fault, measured"
k8s_apply_podgroup_crd
wait_until 30 is 'metric "clusterd_k8s_resource_served{resource=\"podgroups\"}"' 1
indexed_job s2 train pg-train
wait_until 60 running s2 2
PG2=$(uid_of /apis/scheduling.volcano.sh/v1beta1/namespaces/s2/podgroups/pg-train)
wait_until 30 is 'placement_nodes "$PG2"' "$(pods_py "' '.join(sorted(e['node'] for e in live('s2')))") 16"
# attach_agent JOB LOG: the example job agent, attached to the discovered job.
attach_agent() {
  start_bg - "$2" "$BIN/job-agent" --server "$ADDR" --job "$1" --no-register --step-ms 100
  wait_until 30 grep -q "attached" "$2"
}
attach_agent "$PG2" "$WORK/agent-train.log"
read -r _ OLD_UID FAULTY < <(pod_of s2 1)
T2=$(now)
lose_chip "$FAULTY" 5
wait_until 60 replaced s2 1 "$OLD_UID"
wait_until 30 is 'recovery "$PG2.1" "r[\"state\"]"' RECOVERY_STATE_SUCCEEDED
T2_FOLLOWED=$(now)
wait_until 30 is 'placement_nodes "$PG2"' "$(pods_py "' '.join(sorted(e['node'] for e in live('s2') if not e['deleting']))") 16"
read -r _ NEW_UID NEW_NODE < <(pod_of s2 1)
[[ $(recovery "$PG2.1" '[s["state"] for s in r["steps"] if s.get("command") == "JOB_COMMAND_PAUSE"][0]') == STEP_STATE_SUCCEEDED ]] ||
  fail "2: the agent's PAUSE did not succeed"
[[ " $(nodes_bound_since s2 "$T2") " != *" $FAULTY "* ]] || fail "2: a pod was bound to $FAULTY after its chip failed"
echo "   index 1 moved $FAULTY -> $NEW_NODE; PAUSE and RESUME answered by the agent; $PG2.1 SUCCEEDED"
# The API server's own share: a write, until its watch event arrives.
T_PROBE=$(now)
k8s_api PATCH "/api/v1/namespaces/s2/pods/$(pod_of s2 0 | cut -d' ' -f1)" '{"metadata":{"labels":{"probe":"1"}}}' >/dev/null
PROBE_UID=$(pod_of s2 0 | cut -d' ' -f2)
wait_until 10 is "pods_py \"any(e['uid'] == '$PROBE_UID' and e['t'] > $T_PROBE for e in events)\"" True
grpcurl -plaintext -d "{\"id\": \"$PG2.1\"}" "$ADDR" clusterd.v1.ClusterService/GetRecovery >"$WORK/recovery2.json"
python3 - "$PODS_LOG" "$WORK/recovery2.json" "$T2" "$OLD_UID" "$NEW_UID" "$T_PROBE" "$PROBE_UID" <<'PY'
import datetime, json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rec = json.load(open(sys.argv[2]))["recovery"]
t_fault, old, new, t_probe, probe = float(sys.argv[3]), sys.argv[4], sys.argv[5], float(sys.argv[6]), sys.argv[7]
def ts(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
def first(pred):
    return min(e["t"] for e in events if pred(e))
decided = ts(rec["create_time"])
evicted = first(lambda e: e["uid"] == old and e["deleting"])
created = first(lambda e: e["uid"] == new)
scheduled = first(lambda e: e["uid"] == new and e["node"])
running = first(lambda e: e["uid"] == new and e["phase"] == "Running")
done = ts(rec["end_time"])
api = first(lambda e: e["uid"] == probe and e["t"] > t_probe) - t_probe
rows = [("fault -> recovery decided", "ClusterD (NodeD poll, ingest; the 10 s hold-down)", decided - t_fault),
        ("decided -> pod evicted", "ClusterD + agent (PAUSE answered, chip isolated, eviction)", evicted - decided),
        ("evicted -> replacement created", "Job controller (its failure backoff included)", created - evicted),
        ("created -> scheduled", "kube-scheduler", scheduled - created),
        ("scheduled -> Running", "kwok (the kubelet's part)", running - scheduled),
        ("Running -> recovery SUCCEEDED", "ClusterD (the step sees it run, RESUME answered)", done - running)]
print("   measured (one run; every hop includes API-server writes and watch delivery):")
for what, who, sec in rows:
    print("     %-32s %-58s %7.0f ms" % (what, who, sec * 1000))
print("     %-32s %-58s %7.0f ms" % ("fault -> replacement Running", "", (running - t_fault) * 1000))
print("     %-32s %-58s %7.0f ms" % ("API server: a write -> its watch event", "", api * 1000))
clusterd = (evicted - t_fault) + (done - running)
print("     ClusterD's share %.0f ms (%.0f ms without the 10 s hold-down), the control loop's %.0f ms" %
      (clusterd * 1000, (clusterd - 10) * 1000, (running - evicted) * 1000))
PY
delete_all s2 /apis/batch/v1/namespaces/s2/jobs/train

# ---- 3 -----------------------------------------------------------------------
echo "-- 3: Indexed Job, its node lost (its kubelet and NodeD stop): one recovery, NoExecute taint"
indexed_job s3 pretrain pg-pretrain
wait_until 60 running s3 2
PG3=$(uid_of /apis/scheduling.volcano.sh/v1beta1/namespaces/s3/podgroups/pg-pretrain)
wait_until 30 is 'placement_nodes "$PG3"' "$(pods_py "' '.join(sorted(e['node'] for e in live('s3')))") 16"
attach_agent "$PG3" "$WORK/agent-pretrain.log"
read -r _ OLD_UID LOST < <(pod_of s3 0)
T3=$(now)
k8s_lose_node "$LOST"
kill_wait "${NODED_PID[$LOST]}"
wait_until 60 replaced s3 0 "$OLD_UID"
wait_until 60 is 'recovery "$PG3.1" "r[\"state\"]"' RECOVERY_STATE_SUCCEEDED
node_state() {
  k8s_api GET "/api/v1/nodes/$LOST" | python3 -c '
import json, sys
n = json.load(sys.stdin)
ready = [c["status"] for c in n["status"].get("conditions", []) if c["type"] == "Ready"]
taints = sorted(t["key"] + ":" + t["effect"] for t in n["spec"].get("taints", []) if t["key"].startswith("clusterd.io/"))
print(ready[0] if ready else "", n["spec"].get("unschedulable", False), " ".join(taints))'
}
wait_until 60 is node_state "Unknown True clusterd.io/fault:NoExecute"
faults_on() {
  grpcurl -plaintext -d "{\"node\": \"$1\", \"active_only\": true}" "$ADDR" clusterd.v1.ClusterService/ListFaults 2>/dev/null |
    python3 -c 'import json,sys; print(" ".join(sorted({f["code"] for f in json.load(sys.stdin).get("faults", []) if f.get("state") == "FAULT_STATE_ACTIVE"})))'
}
wait_until 30 is 'faults_on "$LOST"' "HEARTBEAT_LOST NODE_NOT_READY"
[[ $(recoveries_of "$PG3") == "$PG3.1" ]] || fail "3: recoveries $(recoveries_of "$PG3"), want one"
step=$(recovery "$PG3.1" '[s["state"] + " " + s.get("message","") for s in r["steps"] if s.get("action") == "CLUSTER_ACTION_RESCHEDULE_PODS"][0]')
expect_contains "$step" "STEP_STATE_SUCCEEDED" "3: the pods' step, after the taint-eviction controller deleted the pod"
[[ $(pods_py "any(e['uid'] == '$OLD_UID' and e['deleting'] for e in events)") == True ]] || fail "3: the lost pod was never deleted"
[[ " $(nodes_bound_since s3 "$T3") " != *" $LOST "* ]] || fail "3: a pod was bound to $LOST after it was lost"
wait_until 30 is 'placement_nodes "$PG3"' "$(pods_py "' '.join(sorted(e['node'] for e in live('s3') if not e['deleting']))") 16"
echo "   $LOST NotReady, cordoned, tainted NoExecute; HEARTBEAT_LOST + NODE_NOT_READY -> one recovery $PG3.1 SUCCEEDED ($step)"

# ---- 4 -----------------------------------------------------------------------
echo "-- 4: StatefulSet whose PodDisruptionBudget refuses the eviction: the timeout, then the delete fallback"
term_wait "$CLUSTERD_PID" || fail "clusterd exited with $?"
start_clusterd "${CLUSTERD_FLAGS[@]}" --k8s-eviction-timeout 3s --k8s-delete-fallback true
statefulset s4 web
budget s4 web 2
wait_until 60 running s4 2
wait_until 30 budget_blocks s4 web
STS4=$(uid_of /apis/apps/v1/namespaces/s4/statefulsets/web)
wait_until 30 is 'placement_nodes "$STS4"' "$(pods_py "' '.join(sorted(e['node'] for e in live('s4')))") 16"
read -r _ OLD_UID FAULTY < <(pod_of s4 0)
T4=$(now)
lose_chip "$FAULTY" 1
wait_until 60 replaced s4 0 "$OLD_UID"
wait_until 30 is 'recovery "$STS4.1" "r[\"state\"]"' RECOVERY_STATE_SUCCEEDED
step=$(recovery "$STS4.1" '[s.get("message","") for s in r["steps"] if s.get("action") == "CLUSTER_ACTION_RESCHEDULE_PODS"][0]')
expect_contains "$step" "deleted web-0 after its eviction was refused" "4: the step says the eviction fell back to a delete"
[[ " $(nodes_bound_since s4 "$T4") " != *" $FAULTY "* ]] || fail "4: a pod was bound to $FAULTY after its chip failed"
echo "   web-0: eviction refused by the budget for 3 s, then deleted; replaced; $STS4.1 SUCCEEDED"
[[ -z $(fallback_taints "$FAULTY") ]] || fail "4: a fallback taint where the allocatable showed the chip gone"
expect_contains "$(step_message "$STS4.1" CLUSTER_ACTION_ISOLATE_DEVICE)" "the device plugin left it out" \
  "4: the isolate step says the allocatable shows it"

echo "control-loop e2e: OK"
