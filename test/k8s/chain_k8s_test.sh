#!/usr/bin/env bash
# The accelerator software chain as Kubernetes sees it, against a REAL etcd +
# kube-apiserver on loopback (test/k8s/lib.sh), with the "kubernetes"
# integration and a NodeD (sim, 8 chips) on node npu1:
#  A. the Node's status says the device plugin registered 8
#     huawei.com/Ascend910 and offers 8: nothing to say;
#  B. the kubelet offers 6 (two chips gone from the plugin's list while NodeD
#     sees all 8 usable) -> after k8s_allocatable_hold (1 s here)
#     NODE_ALLOCATABLE_MISMATCH on npu1 naming both numbers, and clusterctl
#     doctor / GET /api/v1/doctor name the kubelet_allocatable link SHORT;
#  C. the plugin offers 8 again -> the fault clears and the doctor is quiet;
#  D. Pending pods the scheduler gave up on (PodScheduled False,
#     Unschedulable, as kube-scheduler marks them): one asks for
#     huawei.com/Ascend910B where the nodes offer huawei.com/Ascend910 (a name
#     mismatch), one asks for 8 huawei.com/Ascend910 while npu1 carries a
#     taint it does not tolerate -> the doctor names the scheduler link for
#     each, with the evidence; the pod deleted and the taint removed -> quiet.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/k8s/lib.sh  # and test/e2e/lib.sh

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
on_cleanup() { k8s_stop; }
on_failure() { echo "--- clusterd.log"; grep -v "D \[engine\]" "$WORK/clusterd.log" | tail -40; }

k8s_start
echo "-- API server ready at $K8S_API"
k8s_api POST /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"npu1"}}' >/dev/null
# node_status ALLOCATABLE: Ready, and the device plugin's capacity 8 with ALLOCATABLE offered.
node_status() {
  k8s_api PATCH /api/v1/nodes/npu1/status "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",
    \"reason\":\"KubeletReady\",\"lastHeartbeatTime\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}],
    \"capacity\":{\"cpu\":\"192\",\"huawei.com/Ascend910\":\"8\"},
    \"allocatable\":{\"cpu\":\"190\",\"huawei.com/Ascend910\":\"$1\"}}}" >/dev/null
}
node_status 8
start_clusterd --kubeconfig "$K8S_KUBECONFIG" --integrations kubernetes --k8s-allocatable-hold 1s \
  --k8s-condition-interval 200ms --log-level info
start_sim_noded npu1
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == 1 ]]
}
wait_until 30 connected
echo "-- clusterd (integration kubernetes) and NodeD on npu1 up"

# mismatch: the state of npu1's NODE_ALLOCATABLE_MISMATCH fault and its message ("" when none).
mismatch() {
  grpcurl -plaintext -d '{"node": "npu1"}' "$ADDR" clusterd.v1.ClusterService/ListFaults | python3 -c '
import json, sys
for f in json.load(sys.stdin).get("faults", []):
    if f["code"] == "NODE_ALLOCATABLE_MISMATCH": print(f["state"], "|", f.get("message", ""))'
}
is() { [[ "$(eval "$1")" == "$2" ]]; }
doctor() {
  curl -sf "http://127.0.0.1:$HTTP_PORT/api/v1/doctor" |
    python3 -c 'import json,sys; print([(f["node"], f["link"], f["state"]) for f in json.load(sys.stdin)["findings"]])'
}

echo "-- A: the kubelet offers every chip NodeD sees"
# The integration's node pass ran with NodeD connected: it wrote the Node's health condition.
condition() {
  k8s_api GET /api/v1/nodes/npu1 | python3 -c '
import json, sys
print([c["status"] for c in json.load(sys.stdin)["status"].get("conditions", []) if c["type"] == "AcceleratorHealthy"])'
}
wait_until 30 is condition "['True']"
[[ -z $(mismatch) ]] || fail "A: a mismatch with 8 of 8 offered: $(mismatch)"
[[ $(doctor) == "[]" ]] || fail "A: doctor $(doctor)"
echo "   8 of 8 offered: no fault, the doctor is quiet"

echo "-- B: the kubelet offers 6 of the 8 chips NodeD sees usable"
node_status 6
active() { [[ $(mismatch) == FAULT_STATE_ACTIVE* ]]; }
wait_until 30 active
msg=$(mismatch)
expect_contains "$msg" "NodeD sees 8 usable NPU(s) (8 in all) while the kubelet offers 6 huawei.com/Ascend910 (capacity 8)" "B: message"
[[ $(doctor) == "[('npu1', 'kubelet_allocatable', 'SHORT')]" ]] || fail "B: doctor $(doctor)"
out=$("$BIN/clusterctl" --server "$ADDR" doctor)
expect_contains "$out" "kubelet_allocatable" "B: clusterctl doctor"
expect_contains "$out" "SHORT" "B: clusterctl doctor"
echo "   NODE_ALLOCATABLE_MISMATCH: $(cut -d'|' -f2 <<<"$msg" | cut -c1-100)...; doctor: kubelet_allocatable SHORT"

echo "-- C: the plugin offers 8 again"
node_status 8
cleared() { [[ $(mismatch) == FAULT_STATE_CLEARED* ]]; }
wait_until 30 cleared
[[ $(doctor) == "[]" ]] || fail "C: doctor $(doctor)"
echo "   cleared; the doctor is quiet"

echo "-- D: Pending pods no node can take"
k8s_create_namespace train
pending_pod() {  # pending_pod NAME RESOURCE: a pod asking for 8 of RESOURCE, which the scheduler gave up on
  k8s_api POST /api/v1/namespaces/train/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\"},
    \"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"train:1\",\"resources\":{\"limits\":{\"$2\":\"8\"}}}]}}" >/dev/null
  k8s_api PATCH "/api/v1/namespaces/train/pods/$1/status" '{"status":{"conditions":[{"type":"PodScheduled",
    "status":"False","reason":"Unschedulable","message":"0/1 nodes are available"}]}}' >/dev/null
}
k8s_api PATCH /api/v1/nodes/npu1 '{"spec":{"taints":[{"key":"maintenance","value":"true","effect":"NoSchedule"}]}}' >/dev/null
pending_pod wrong-name huawei.com/Ascend910B
pending_pod tainted huawei.com/Ascend910
scheduler() {
  curl -sf "http://127.0.0.1:$HTTP_PORT/api/v1/doctor" | python3 -c '
import json, sys
print(sorted((f["node"], f["link"], f["state"], f["evidence"]) for f in json.load(sys.stdin)["findings"] if f["link"] == "scheduler"))'
}
want="[('pod train/tainted', 'scheduler', 'PENDING', 'the 1 node(s) with 8 huawei.com/Ascend910 all carry a taint the pod does not tolerate: maintenance=true:NoSchedule (1 nodes)'), ('pod train/wrong-name', 'scheduler', 'PENDING', 'no node offers huawei.com/Ascend910B; nodes offer huawei.com/Ascend910 (1 nodes)')]"
wait_until 30 is scheduler "$want"
out=$("$BIN/clusterctl" --server "$ADDR" doctor)
expect_contains "$out" "pod train/wrong-name" "D: clusterctl doctor"
expect_contains "$out" "no node offers huawei.com/Ascend910B" "D: clusterctl doctor"
expect_contains "$out" "ask for the resource name the device plugin registers" "D: clusterctl doctor's fix"
echo "   pod train/wrong-name: no node offers huawei.com/Ascend910B (npu1 offers huawei.com/Ascend910); pod train/tainted: npu1's taint maintenance=true:NoSchedule"
k8s_api DELETE /api/v1/namespaces/train/pods/wrong-name?gracePeriodSeconds=0 >/dev/null
k8s_api PATCH /api/v1/nodes/npu1 '{"spec":{"taints":null}}' >/dev/null
wait_until 30 is scheduler "[]"
echo "   the pod deleted, the taint removed: nothing to say"

echo "PASS: the software chain as Kubernetes sees it"
