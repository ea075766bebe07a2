#!/usr/bin/env bash
# NVIDIA GPU jobs on Kubernetes, end to end, against a REAL etcd + kube-apiserver
# on loopback (test/k8s/lib.sh; no kubelet: the test plays it and the Job
# controller through the API), with the "kubernetes" integration and actuator
# and two NodeD on the fake libnvidia-ml.so.1 (8 H100s each, scripted through
# its control file):
#  A. a PyTorchJob-like Indexed Job's pods asking for 8 nvidia.com/gpu each
#     appear in ClusterD as one job, ranks index x 8 + k on the pod's node;
#  B. Xid 79 on gpu01's GPU 3 (an NVML event) -> XID_79 at the catalog's
#     SEPARATE -> the job's recovery marks GPU 3 isolated on the Node, taints
#     it through DRA (NVIDIA's driver names it gpu-3 in its ResourceSlice) and
#     evicts the pod on gpu01; the fault is in Watch;
#  C. the kubelet offers 6 nvidia.com/gpu on gpu02 while NodeD sees 8 usable
#     -> NODE_ALLOCATABLE_MISMATCH naming both numbers.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/k8s/lib.sh  # and test/e2e/lib.sh

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
on_cleanup() { k8s_stop; }
on_failure() {
  echo "--- clusterd.log"; grep -v "D \[engine\]" "$WORK/clusterd.log" | tail -40
  tail_logs 15 "$WORK/noded-gpu01.log"
  echo "--- recoveries"
  grpcurl -plaintext -d '{}' "$ADDR" clusterd.v1.ClusterService/ListRecoveries 2>&1 | head -60 || true
  echo "--- faults"
  grpcurl -plaintext -d '{"activeOnly": true}' "$ADDR" clusterd.v1.ClusterService/ListFaults 2>&1 | head -40 || true
}

k8s_start
k8s_create_namespace train
echo "-- API server ready at $K8S_API"
# gpu_node NAME ALLOCATABLE: a Ready Node whose NVIDIA device plugin registered 8 GPUs.
gpu_node_status() {
  k8s_api PATCH "/api/v1/nodes/$1/status" "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",
    \"reason\":\"KubeletReady\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\",\"lastTransitionTime\":\"$(date -u +%FT%TZ)\"}],
    \"capacity\":{\"cpu\":\"128\",\"nvidia.com/gpu\":\"8\"},\"allocatable\":{\"cpu\":\"126\",\"nvidia.com/gpu\":\"$2\"}}}" \
    application/strategic-merge-patch+json >/dev/null
}
GPU_DEVICES=$(python3 -c 'import json; print(json.dumps([{"name": "gpu-%d" % i} for i in range(8)]))')
for n in gpu01 gpu02; do
  k8s_api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$n\",
    \"labels\":{\"nvidia.com/gpu.present\":\"true\"}}}" >/dev/null
  gpu_node_status $n 8
  # NVIDIA's DRA driver publishes the GPUs as gpu-<index>.
  k8s_api POST /apis/resource.k8s.io/v1/resourceslices "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceSlice\",
    \"metadata\":{\"name\":\"$n-gpu\"},\"spec\":{\"driver\":\"gpu.nvidia.com\",\"nodeName\":\"$n\",
    \"pool\":{\"name\":\"$n\",\"generation\":1,\"resourceSliceCount\":1},
    \"devices\":$GPU_DEVICES}}" >/dev/null
done
JOB_UID=$(python3 -c 'import uuid; print(uuid.uuid4())')
# pod NAME NODE INDEX: a running pod of the Indexed Job "llm" with 8 GPUs.
pod() {
  k8s_api POST /api/v1/namespaces/train/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",
    \"labels\":{\"batch.kubernetes.io/job-completion-index\":\"$3\",\"training.kubeflow.org/replica-type\":\"worker\"},
    \"annotations\":{\"batch.kubernetes.io/job-completion-index\":\"$3\"},
    \"ownerReferences\":[{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"llm\",\"uid\":\"$JOB_UID\",\"controller\":true}]},
    \"spec\":{\"nodeName\":\"$2\",\"containers\":[{\"name\":\"pytorch\",\"image\":\"train:1\",
      \"env\":[{\"name\":\"RANK\",\"value\":\"$3\"}],\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"8\"}}}]}}" >/dev/null
  k8s_api PATCH "/api/v1/namespaces/train/pods/$1/status" '{"status":{"phase":"Running"}}' >/dev/null
}
pod llm-0 gpu01 0
pod llm-1 gpu02 1

start_clusterd --kubeconfig "$K8S_KUBECONFIG" --integrations kubernetes --actuator kubernetes \
  --k8s-condition-interval 200ms --k8s-allocatable-hold 1s --recovery-agent-attach-grace 0s --log-level info
start_nvml_noded gpu01
start_nvml_noded gpu02
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == 2 ]]
}
wait_until 30 connected
echo "-- clusterd (integration + actuator kubernetes) and two GPU nodes up"

echo "-- A: the Indexed Job's GPU pods are one job, a rank per GPU (pod index x 8 + k)"
# ranks: "node:first-last" of the job's placement.
ranks() {
  grpcurl -plaintext -d "{\"id\": \"$JOB_UID\"}" "$ADDR" clusterd.v1.JobService/GetJob 2>/dev/null |
    python3 -c '
import json, sys
by = {}
for p in json.load(sys.stdin)["job"]["placement"]:
    by.setdefault(p["node"], []).append(p.get("rank", 0))
print(" ".join("%s:%d-%d" % (n, min(r), max(r)) for n, r in sorted(by.items())))'
}
is() { [[ "$(eval "$1")" == "$2" ]]; }
wait_until 30 is ranks "gpu01:0-7 gpu02:8-15"

echo "-- B: Xid 79 on gpu01's GPU 3 -> SEPARATE, GPU 3 isolated and DRA-tainted, the pod evicted"
echo "xid 3 79" >>"$WORK/nvml-gpu01"
wait_until 30 is 'active_faults gpu01 XID_79 | cut -d"|" -f1' "3 FAULT_LEVEL_SEPARATE "
node_field() {
  k8s_api GET "/api/v1/nodes/$1" | python3 -c 'import json,sys; n=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2"
}
wait_until 30 is 'node_field gpu01 "n[\"metadata\"].get(\"annotations\",{}).get(\"clusterd.io/isolated-devices\",\"\")"' 3
RULES='/apis/resource.k8s.io/v1/devicetaintrules?labelSelector=clusterd.io%2Fmanaged%3Dtrue'
rules() {
  k8s_api GET "$RULES" | python3 -c 'import json,sys
for r in json.load(sys.stdin)["items"]:
    s, t = r["spec"]["deviceSelector"], r["spec"]["taint"]
    print(s["driver"] + "/" + s["pool"] + "/" + s["device"], t["key"] + "=" + t["value"] + ":" + t["effect"])'
}
wait_until 30 is rules "gpu.nvidia.com/gpu01/gpu-3 clusterd.io/fault=SEPARATE:NoExecute"
evicted() { k8s_api GET /api/v1/namespaces/train/pods/llm-0 | grep -q deletionTimestamp; }
wait_until 30 evicted
k8s_api GET /api/v1/namespaces/train/pods/llm-1 | grep -q deletionTimestamp && fail "B: the pod on gpu02 was evicted too"
events=$(grpcurl -plaintext -max-time 3 -d '{"fromRevision": "0", "nodes": ["gpu01"], "types": ["EVENT_TYPE_FAULT_RAISED"]}' \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>&1 || true)
expect_contains "$events" '"code": "XID_79"' "B: the fault in Watch"
echo "   XID_79 on gpu01/3: GPU isolated (annotation, DeviceTaintRule gpu-3), llm-0 evicted"

echo "-- C: gpu02's kubelet offers 6 of the 8 GPUs NodeD sees usable"
gpu_node_status gpu02 6
mismatch() { active_faults gpu02 NODE_ALLOCATABLE_MISMATCH | cut -d"|" -f2; }
raised() { [[ -n $(mismatch) ]]; }
wait_until 30 raised
expect_contains "$(mismatch)" "NodeD sees 8 usable GPU(s) (8 in all) while the kubelet offers 6 nvidia.com/gpu (capacity 8)" \
  "C: the message"
echo "gpu k8s e2e: OK"
