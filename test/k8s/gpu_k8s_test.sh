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
#     -> NODE_ALLOCATABLE_MISMATCH naming both numbers;
#  D. two one-pod jobs share gpu03 with 4 GPUs each, neither naming them; gpu03's
#     kubelet (a stand-in serving the pod-resources API) says which GPU UUIDs each
#     holds, so the jobs are placed on GPUs 0-3 and 4-7, and Xid 79 on GPU 5
#     recovers the second job only.
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

echo "-- D: two jobs share gpu03; its kubelet says which GPUs each pod holds, so Xid 79 on GPU 5 hits one job"
k8s_api POST /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"gpu03"}}' >/dev/null
gpu_node_status gpu03 8
JOB_A=$(python3 -c 'import uuid; print(uuid.uuid4())')
JOB_B=$(python3 -c 'import uuid; print(uuid.uuid4())')
# gpu_pod NAME JOB_UID: a running pod on gpu03 of a one-pod Indexed Job, 4 GPUs, not naming them.
gpu_pod() {
  k8s_api POST /api/v1/namespaces/train/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",
    \"annotations\":{\"batch.kubernetes.io/job-completion-index\":\"0\"},
    \"ownerReferences\":[{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"$1\",\"uid\":\"$2\",\"controller\":true}]},
    \"spec\":{\"nodeName\":\"gpu03\",\"containers\":[{\"name\":\"main\",\"image\":\"train:1\",
      \"resources\":{\"limits\":{\"nvidia.com/gpu\":\"4\"}}}]}}" >/dev/null
  k8s_api PATCH "/api/v1/namespaces/train/pods/$1/status" '{"status":{"phase":"Running"}}' >/dev/null
}
gpu_pod tune-a "$JOB_A"
gpu_pod tune-b "$JOB_B"
# What the kubelet gave them: GPUs by UUID, NVIDIA's device plugin's default (the fake's UUIDs).
python3 - "$WORK/pods-gpu03.json" <<'PY'
import json, sys
uuid = lambda i: "GPU-00000000-0000-0000-0000-0000000000%02d" % i
pods = [("tune-a", [0, 1, 2, 3]), ("tune-b", [4, 5, 6, 7]), ("cpu-only", [])]
json.dump({"podResources": [{"namespace": "train", "name": n, "containers": [{"name": "main", "devices":
    [{"resourceName": "nvidia.com/gpu", "deviceIds": [uuid(i) for i in ids]}] if ids else []}]}
    for n, ids in pods]}, open(sys.argv[1], "w"))
PY
start_fake_kubelet gpu03
start_nvml_noded gpu03 --pod-resources-socket "$WORK/kubelet-gpu03.sock" --pod-resources-interval 1s
# devices JOB: the job's "rank@device" list (any: placed on any device of the node).
devices() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.JobService/GetJob 2>/dev/null |
    python3 -c '
import json, sys
print(" ".join("%d@%s" % (p.get("rank", 0), p["device_id"] if "device_id" in p else "any" if p.get("any_device") else "-")
               for p in json.load(sys.stdin)["job"]["placement"]))'
}
wait_until 30 is "devices $JOB_A" "0@0 1@1 2@2 3@3"
wait_until 30 is "devices $JOB_B" "0@4 1@5 2@6 3@7"
reported=$(grpcurl -plaintext -d '{"name": "gpu03"}' "$ADDR" clusterd.v1.ClusterService/GetNode |
  python3 -c 'import json,sys; print(len(json.load(sys.stdin)["node"]["inventory"]["pod_devices"]))')
[[ $reported == 2 ]] || fail "D: gpu03 should report 2 pods holding GPUs, not $reported"
metrics=$(curl -sf "http://127.0.0.1:${NODED_PORT[gpu03]}/metrics")  # whole: see mindcluster_stack_test.sh
grep -q '^noded_pod_resources_pods 2' <<<"$metrics" ||
  fail "D: noded_pod_resources_pods"
echo "   tune-a on GPUs 0-3, tune-b on GPUs 4-7 (from the kubelet, by UUID)"
echo "xid 5 79" >>"$WORK/nvml-gpu03"
wait_until 30 is 'active_faults gpu03 XID_79 | cut -d"|" -f1' "5 FAULT_LEVEL_SEPARATE "
evicted_pod() { k8s_api GET "/api/v1/namespaces/train/pods/$1" | grep -q deletionTimestamp; }
wait_until 30 evicted_pod tune-b
recoveries_of() {
  grpcurl -plaintext -d "{\"job\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/ListRecoveries |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("recoveries", [])))'
}
[[ $(recoveries_of "$JOB_B") -ge 1 ]] || fail "D: tune-b's job has no recovery"
[[ $(recoveries_of "$JOB_A") == 0 ]] || fail "D: tune-a's job was recovered for a GPU it does not hold"
evicted_pod tune-a && fail "D: tune-a was evicted for a GPU it does not hold"
echo "   Xid 79 on gpu03/5: tune-b's job recovered and its pod evicted; tune-a untouched"
echo "gpu k8s e2e: OK"
