#!/usr/bin/env bash
# ClusterD on Kubernetes, end to end, against a REAL etcd + kube-apiserver on
# loopback (test/k8s/lib.sh; no kubelet, no controllers: the test plays the
# Volcano controller and the kubelet through the API):
#  A. a Volcano job's pods (hccl/rankIndex, huawei.com/AscendReal) appear in
#     ClusterD as one job keyed by the owner's UID, with device ranks placed;
#  B. a SEPARATE fault on a rank's device: the device is marked isolated on
#     the Node and tainted through DRA (a DeviceTaintRule on the ResourceSlice
#     device npu-0: resource.k8s.io/v1, served by kube-apiserver 1.37 without
#     flags), the pod evicted through the Eviction API, Events posted, the
#     Node condition set; the replacement pod moves the ranks; once the chip
#     is back (fault cleared, UncordonNode) the DeviceTaintRule is deleted;
#  C. a lost node: cordon + taint through isolate_node; UncordonNode in
#     ClusterD undoes exactly that;
#  D. a Node whose Ready condition goes False is a fault, cleared when Ready;
#  E. kill -9 of clusterd and a restart of the API server: nothing repeated,
#     discovery carries on (a new job appears after the API server restart).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/k8s/lib.sh  # and test/e2e/lib.sh

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
on_cleanup() { k8s_stop; }
on_failure() {
  echo "--- clusterd.log"; grep -v "D \[engine\]" "$WORK/clusterd.log" | tail -60
  echo "--- recoveries"
  grpcurl -plaintext -d '{}' "$ADDR" clusterd.v1.ClusterService/ListRecoveries 2>&1 |
    python3 -c 'import json,sys; [print(r["id"], r["state"], [(s.get("action") or s.get("command"), s.get("node",""), s["state"], s.get("message","")) for s in r["steps"]]) for r in json.load(sys.stdin).get("recoveries",[])]' || true
  echo "--- nodes"
  for n in worker01 worker02 worker03; do
    k8s_api GET "/api/v1/nodes/$n" | python3 -c 'import json,sys; n=json.load(sys.stdin); print(n["metadata"]["name"], n["spec"], n["metadata"].get("annotations"))' || true
  done
}

k8s_start
k8s_apply_podgroup_crd
k8s_create_namespace train
echo "-- API server ready at $K8S_API"

# ---- the cluster as the kubelet and the Volcano controller would leave it ----
node_json() {
  echo "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$1\",\"labels\":{\"workerselector\":\"dls-worker-node\"}}}"
}
set_ready() {  # set_ready NODE True|False
  k8s_api PATCH "/api/v1/nodes/$1/status" \
    "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"$2\",\"reason\":\"KubeletReady\",\"message\":\"test\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\",\"lastTransitionTime\":\"$(date -u +%FT%TZ)\"}]}}" \
    application/strategic-merge-patch+json >/dev/null
}
for n in worker01 worker02 worker03; do
  k8s_api POST /api/v1/nodes "$(node_json $n)" >/dev/null
  set_ready $n True
done

VCJOB_UID=$(python3 -c 'import uuid; print(uuid.uuid4())')
VCJOB2_UID=$(python3 -c 'import uuid; print(uuid.uuid4())')
owner() {  # owner NAME UID
  echo "[{\"apiVersion\":\"batch.volcano.sh/v1alpha1\",\"kind\":\"Job\",\"name\":\"$1\",\"uid\":\"$2\",\"controller\":true}]"
}
k8s_api POST /apis/scheduling.volcano.sh/v1beta1/namespaces/train/podgroups \
  "{\"apiVersion\":\"scheduling.volcano.sh/v1beta1\",\"kind\":\"PodGroup\",\"metadata\":{\"name\":\"llm\",\"ownerReferences\":$(owner llm "$VCJOB_UID"),\"annotations\":{\"clusterd.io/max-retries-per-job\":\"5\"}},\"spec\":{\"minMember\":2}}" >/dev/null
# pod NAME NODE RANK DEVICES [JOB UID]: a bound, running pod of the job.
pod() {
  local job=${5:-llm} uid=${6:-$VCJOB_UID}
  k8s_api POST /api/v1/namespaces/train/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",
    \"labels\":{\"volcano.sh/job-name\":\"$job\"},
    \"annotations\":{\"scheduling.k8s.io/group-name\":\"$job\",\"hccl/rankIndex\":\"$3\",\"huawei.com/AscendReal\":\"$4\"},
    \"ownerReferences\":$(owner "$job" "$uid")},
    \"spec\":{\"nodeName\":\"$2\",\"containers\":[{\"name\":\"main\",\"image\":\"train:1\",
      \"resources\":{\"limits\":{\"huawei.com/Ascend910\":\"2\"}}}]}}" >/dev/null
  k8s_api PATCH "/api/v1/namespaces/train/pods/$1/status" '{"status":{"phase":"Running"}}' >/dev/null
}
pod llm-worker-0 worker01 0 Ascend910-0,Ascend910-1
pod llm-worker-1 worker02 1 Ascend910-0,Ascend910-1
# A DRA driver's ResourceSlices (as Ascend's names chips: npu-<id>), and another driver's
# devices on worker02 that are no chip: ClusterD taints only the chip.
slice() {  # slice NODE DRIVER NAME...
  local node=$1 driver=$2 devices="" d
  shift 2
  for d in "$@"; do devices+="${devices:+,}{\"name\":\"$d\"}"; done
  k8s_api POST /apis/resource.k8s.io/v1/resourceslices "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceSlice\",
    \"metadata\":{\"name\":\"$node-${driver%%.*}\"},\"spec\":{\"driver\":\"$driver\",\"nodeName\":\"$node\",
    \"pool\":{\"name\":\"$node\",\"generation\":1,\"resourceSliceCount\":1},\"devices\":[$devices]}}" >/dev/null
}
for n in worker01 worker02 worker03; do slice $n npu.example.com npu-0 npu-1 npu-2 npu-3 npu-4 npu-5 npu-6 npu-7; done
slice worker02 nic.example.com eth0 eth1

# ---- clusterd with the integration and the actuator, three sim agents ----
CLUSTERD_FLAGS=(--kubeconfig "$K8S_KUBECONFIG" --integrations kubernetes --actuator kubernetes
  --k8s-condition-interval 1s --node-grace 3s --recovery-resume-grace 5s --log-level info)
start_noded() { start_sim_noded "$1"; }
inject() { inject_sim_fault "$@"; }
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == "$1" ]]
}
# placement JOB: "rank:node:device ..." of a job in ClusterD.
placement() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.JobService/GetJob 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["job"]; print(" ".join("%d:%s:%d" % (p.get("rank",0), p["node"], p.get("device_id",0)) for p in j["placement"]))'
}
job_field() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.JobService/GetJob 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["job"]; print(eval(sys.argv[1]))' "$2"
}
recovery() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/GetRecovery 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["recovery"]; print(eval(sys.argv[1]))' "$2"
}
# is 'CMD' WANT: CMD's output (evaluated at each try) equals WANT.
is() { [[ "$(eval "$1")" == "$2" ]]; }
# The Events in namespace train, as compact JSON.
train_events() {
  k8s_api GET /apis/events.k8s.io/v1/namespaces/train/events |
    python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["items"], separators=(",",":")))'
}
recovery_is() { [[ "$(recovery "$1" 'r["state"]')" == "$2" ]]; }
node_json_field() {  # node_json_field NODE PYEXPR (over n)
  k8s_api GET "/api/v1/nodes/$1" | python3 -c 'import json,sys; n=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2"
}
condition() {  # condition NODE: status/reason of the AcceleratorHealthy condition
  node_json_field "$1" '" ".join(c["status"]+"/"+c.get("reason","") for c in n["status"].get("conditions",[]) if c["type"]=="AcceleratorHealthy")'
}

start_clusterd "${CLUSTERD_FLAGS[@]}"
for n in worker01 worker02 worker03; do start_noded $n; done
wait_until 30 connected 3
echo "-- clusterd (kubeconfig, integration + actuator kubernetes) and three sim agents up"

echo "-- A: the Volcano job appears with its ranks placed"
want="0:worker01:0 1:worker01:1 2:worker02:0 3:worker02:1"
wait_until 30 is 'placement "$VCJOB_UID"' "$want"
[[ $(job_field "$VCJOB_UID" 'j["source"]') == kubernetes ]] || fail "A: source"
[[ $(job_field "$VCJOB_UID" 'j["labels"]["k8s.namespace"]+"/"+j["labels"]["k8s.name"]') == train/llm ]] || fail "A: labels"
[[ $(job_field "$VCJOB_UID" 'j["policy"].get("max_retries_per_job")') == 5 ]] || fail "A: policy from the PodGroup"
# A job made through the API is not the integration's to change.
out=$(grpcurl -plaintext -d "{\"job\": {\"id\": \"$VCJOB_UID\", \"placement\": [{\"rank\": 0, \"node\": \"worker03\"}]}}" \
  "$ADDR" clusterd.v1.JobService/UpdateJob 2>&1 || true)
expect_contains "$out" "FailedPrecondition" "A: the API may not change a discovered job"
wait_until 15 is 'condition worker01' "True/AcceleratorHealthy"
echo "   job $VCJOB_UID: $want; Node condition AcceleratorHealthy=True"

echo "-- B: SEPARATE on rank 2's device -> device isolated, pod evicted, Events, condition"
start_bg - "$WORK/agent.out" "$BIN/job-agent" --server "$ADDR" --job "$VCJOB_UID" --no-register --hold-down 500ms \
  --step-ms 50 --log "$WORK/agent.log"
wait_until 30 grep -q "attached: job $VCJOB_UID" "$WORK/agent.log"
inject worker02 0 4C4BA00C
evicted() { k8s_api GET /api/v1/namespaces/train/pods/llm-worker-1 | grep -q deletionTimestamp; }
wait_until 30 evicted
isolated_devices() { node_json_field "$1" 'n["metadata"].get("annotations",{}).get("clusterd.io/isolated-devices","")'; }
wait_until 15 is 'isolated_devices worker02' 0
# The DeviceTaintRule ClusterD wrote, as "node device driver/pool/device key=value:effect".
RULES='/apis/resource.k8s.io/v1/devicetaintrules?labelSelector=clusterd.io%2Fmanaged%3Dtrue'
rules() {
  k8s_api GET "$RULES" | python3 -c 'import json,sys
for r in json.load(sys.stdin)["items"]:
    a, s, t = r["metadata"]["annotations"], r["spec"]["deviceSelector"], r["spec"]["taint"]
    print(a["clusterd.io/node"], a["clusterd.io/device"], s["driver"] + "/" + s["pool"] + "/" + s["device"],
          t["key"] + "=" + t["value"] + ":" + t["effect"], "timeAdded" in t)'
}
wait_until 15 is 'rules' "worker02 0 npu.example.com/worker02/npu-0 clusterd.io/fault=SEPARATE:NoExecute True"
wait_until 15 is 'condition worker02' "False/AcceleratorFaulty"
events=$(train_events)
expect_contains "$events" '"action":"Evict"' "B: an Event for the eviction"
expect_contains "$events" "llm-worker-1" "B: the Event names the pod"
# The pod is Terminating (no kubelet): the ranks it held leave the placement.
wait_until 15 is 'placement "$VCJOB_UID"' "0:worker01:0 1:worker01:1"
# The controller's replacement on a healthy node: the ranks move there.
k8s_api DELETE "/api/v1/namespaces/train/pods/llm-worker-1?gracePeriodSeconds=0" >/dev/null
wait_until 15 sh -c "! curl -sf --cacert '$K8S_CA' -H 'Authorization: Bearer $K8S_ADMIN_TOKEN' '$K8S_API/api/v1/namespaces/train/pods/llm-worker-1' >/dev/null"
pod llm-worker-1 worker03 1 Ascend910-4,Ascend910-5
wait_until 30 is 'placement "$VCJOB_UID"' "0:worker01:0 1:worker01:1 2:worker03:4 3:worker03:5"
wait_until 30 recovery_is "$VCJOB_UID.1" RECOVERY_STATE_SUCCEEDED
[[ $(recovery "$VCJOB_UID.1" '[s["message"] for s in r["steps"] if s.get("action") == "CLUSTER_ACTION_ISOLATE_DEVICE"][0]') == *"DeviceTaintRule clusterd-dra-worker02-0-"* ]] ||
  fail "B: the isolate_device step names the DeviceTaintRule"
echo "   evicted llm-worker-1; ranks 2,3 now on worker03; recovery $VCJOB_UID.1 SUCCEEDED; npu-0 DRA-tainted NoExecute"
# The chip is replaced: the fault clears and UncordonNode returns worker02 and its devices to
# service; the integration deletes the DeviceTaintRule (after its grace) and the device mark.
inject worker02 0 4C4BA00C clear
grpcurl -plaintext -d '{"node": "worker02", "actor": "e2e", "reason": "chip replaced"}' "$ADDR" \
  clusterd.v1.AdminService/UncordonNode >/dev/null
wait_until 30 is 'rules' ""
wait_until 15 is 'isolated_devices worker02' ""
echo "   worker02 back in service: DeviceTaintRule and device mark gone"

echo "-- C: a lost node -> cordon + taint; UncordonNode in ClusterD undoes it"
kill_wait "${NODED_PID[worker01]}"
# The API server's admission adds node.kubernetes.io/not-ready itself: only ClusterD's taint counts.
our_taints() { node_json_field "$1" '[t["key"]+"="+t.get("value","")+":"+t["effect"] for t in n["spec"].get("taints",[]) if t["key"].startswith("clusterd.io/")]'; }
tainted() { [[ $(our_taints worker01) == "['clusterd.io/fault=SEPARATE:NoSchedule']" ]]; }
wait_until 40 tainted
[[ $(node_json_field worker01 'n["spec"].get("unschedulable", False)') == True ]] || fail "C: worker01 not cordoned"
# Its pod was evicted too; the controller places the replacement elsewhere.
evicted0() { k8s_api GET /api/v1/namespaces/train/pods/llm-worker-0 | grep -q deletionTimestamp; }
wait_until 30 evicted0
k8s_api DELETE "/api/v1/namespaces/train/pods/llm-worker-0?gracePeriodSeconds=0" >/dev/null
pod_gone0() { ! k8s_api GET /api/v1/namespaces/train/pods/llm-worker-0 >/dev/null; }
wait_until 15 pod_gone0
pod llm-worker-0 worker02 0 Ascend910-2,Ascend910-3
FINAL="0:worker02:2 1:worker02:3 2:worker03:4 3:worker03:5"
wait_until 30 is 'placement "$VCJOB_UID"' "$FINAL"
start_noded worker01
wait_until 30 connected 3
grpcurl -plaintext -d '{"node": "worker01", "actor": "e2e", "reason": "checked by the test"}' "$ADDR" \
  clusterd.v1.AdminService/UncordonNode >/dev/null
untainted() { [[ $(our_taints worker01) == "[]" ]]; }
wait_until 30 untainted
[[ $(node_json_field worker01 'n["spec"].get("unschedulable", False)') == False ]] || fail "C: worker01 still cordoned"
echo "   worker01 cordoned and tainted while lost, returned to service after UncordonNode"

echo "-- D: Node Ready=False is a fault; Ready again clears it"
not_ready_fault() {
  grpcurl -plaintext -d '{"node": "worker03", "active_only": true}' "$ADDR" clusterd.v1.ClusterService/ListFaults |
    grep -q NODE_NOT_READY
}
set_ready worker03 False
wait_until 30 not_ready_fault
set_ready worker03 True
wait_until 30 sh -c "! grpcurl -plaintext -d '{\"node\": \"worker03\", \"active_only\": true}' $ADDR clusterd.v1.ClusterService/ListFaults | grep -q NODE_NOT_READY"
echo "   NODE_NOT_READY raised and cleared on worker03"

echo "-- E: kill -9 of clusterd and an API server restart: nothing repeated, discovery goes on"
evictions_before=$(train_events | grep -o '"action":"Evict"' | wc -l)
kill_wait "$CLUSTERD_PID"
start_clusterd "${CLUSTERD_FLAGS[@]}"
wait_until 30 connected 3
k8s_restart_apiserver
pod other-0 worker02 0 Ascend910-6 other "$VCJOB2_UID"
wait_until 60 is 'placement "$VCJOB2_UID"' "0:worker02:6"
wait_until 15 is 'placement "$VCJOB_UID"' "$FINAL"
evictions_after=$(train_events | grep -o '"action":"Evict"' | wc -l)
[[ $evictions_after == "$evictions_before" ]] || fail "E: evictions $evictions_before -> $evictions_after"
for p in llm-worker-0 llm-worker-1; do
  k8s_api GET "/api/v1/namespaces/train/pods/$p" | grep -q deletionTimestamp && fail "E: the replacement pod $p was evicted"
done
# Deleting a job's pods deletes the job.
k8s_api DELETE "/api/v1/namespaces/train/pods/other-0?gracePeriodSeconds=0" >/dev/null
gone() { ! grpcurl -plaintext -d "{\"id\": \"$VCJOB2_UID\"}" "$ADDR" clusterd.v1.JobService/GetJob >/dev/null 2>&1; }
wait_until 30 gone
metrics=$(curl -sf "http://127.0.0.1:$HTTP_PORT/metrics")
grep -q '^clusterd_k8s_watches_total{resource="pods"} [1-9]' <<<"$metrics" || fail "E: watch metric"
echo "kubernetes e2e: OK"
