#!/usr/bin/env bash
# The Kubernetes act of the demo (docs/kubernetes.md): a real etcd +
# kube-apiserver on loopback (built once from the Go module proxy by
# scripts/k8s-tools.sh, 5-11 minutes the first time, cached after), two Nodes,
# a Volcano job's pods with Ascend annotations, clusterd with
# --integrations kubernetes --actuator kubernetes, and two sim noded agents.
# It shows the job discovered with its ranks, then a SEPARATE chip fault:
# the device marked on the Node, the pod evicted, the Event, the condition.
# There is no kubelet: the script plays it (pods Running, the eviction
# completed). Ends by itself; nothing is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh >/dev/null
bash scripts/build.sh >/dev/null
export PATH="${GOPATH:-$HOME/go}/bin:$PATH"
source test/k8s/lib.sh
source test/e2e/lib.sh

WORK=$(mktemp -d)
ADDR=127.0.0.1:$(free_port)
HTTP_PORT=$(free_port)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  k8s_stop || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "--- clusterd.log"; tail -n 20 "$WORK/clusterd.log"' ERR
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
CTL=(build/bin/clusterctl --server "$ADDR")

step "A real kube-apiserver + etcd on loopback (scripts/k8s-tools.sh builds them once)"
k8s_start
k8s_apply_podgroup_crd
k8s_create_namespace train
now=$(date -u +%FT%TZ)
for n in npu-node-1 npu-node-2; do
  k8s_api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$n\"}}" >/dev/null
  k8s_api PATCH "/api/v1/nodes/$n/status" "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",
    \"reason\":\"KubeletReady\",\"message\":\"demo\",\"lastHeartbeatTime\":\"$now\",\"lastTransitionTime\":\"$now\"}]}}" \
    application/strategic-merge-patch+json >/dev/null
done
JOB_UID=$(python3 -c 'import uuid; print(uuid.uuid4())')
# pod INDEX NODE DEVICES: worker INDEX of the Volcano job, Running on NODE with DEVICES.
pod() {
  k8s_api POST /api/v1/namespaces/train/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"llama-worker-$1\",
    \"labels\":{\"volcano.sh/job-name\":\"llama\"},
    \"annotations\":{\"hccl/rankIndex\":\"$1\",\"huawei.com/AscendReal\":\"$3\"},
    \"ownerReferences\":[{\"apiVersion\":\"batch.volcano.sh/v1alpha1\",\"kind\":\"Job\",\"name\":\"llama\",\"uid\":\"$JOB_UID\",\"controller\":true}]},
    \"spec\":{\"nodeName\":\"$2\",\"containers\":[{\"name\":\"main\",\"image\":\"llama:1\"}]}}" >/dev/null
  k8s_api PATCH "/api/v1/namespaces/train/pods/llama-worker-$1/status" '{"status":{"phase":"Running"}}' >/dev/null
}
pod 0 npu-node-1 Ascend910-0,Ascend910-1
pod 1 npu-node-2 Ascend910-0,Ascend910-1
echo "Nodes npu-node-1, npu-node-2; Volcano job train/llama (uid $JOB_UID): 2 pods x 2 NPUs"

step "clusterd --kubeconfig ... --integrations kubernetes --actuator kubernetes, two noded agents"
build/bin/clusterd --listen "$ADDR" --insecure --http-listen "127.0.0.1:$HTTP_PORT" --data-dir "$WORK/clusterd" \
  --kubeconfig "$K8S_KUBECONFIG" --integrations kubernetes --actuator kubernetes --k8s-condition-interval 1s \
  >"$WORK/clusterd.log" 2>&1 &
PIDS+=($!)
wait_until 30 curl -sf "http://127.0.0.1:$HTTP_PORT/readyz"
for i in 1 2; do
  port=$(free_port)
  eval "NODED_$i=$port"
  build/bin/noded --server "$ADDR" --node-name "npu-node-$i" --http-listen "127.0.0.1:$port" \
    --state-dir "$WORK/noded-$i" --accelerator sim --sim-devices 8 --kmsg-path "" --poll-interval 200ms \
    --log-level warn >"$WORK/noded-$i.log" 2>&1 &
  PIDS+=($!)
done
discovered() { "${CTL[@]}" get jobs | grep -q "$JOB_UID"; }
wait_until 30 discovered
"${CTL[@]}" get jobs
"${CTL[@]}" describe job "$JOB_UID" | sed -n '/Placement/,/^$/p'

step "A job agent attaches; a SEPARATE fault hits npu-node-2's NPU 0 (rank 2)"
build/bin/job-agent --server "$ADDR" --job "$JOB_UID" --no-register --hold-down 500ms --log "$WORK/agent.log" \
  >/dev/null 2>&1 &
PIDS+=($!)
wait_until 30 grep -q attached "$WORK/agent.log"
curl -sf -X POST "http://127.0.0.1:$NODED_2/v1/sim/faults" -d '{"device": 0, "code": "4C4BA00C", "state": "raise"}' >/dev/null
evicted() { k8s_api GET /api/v1/namespaces/train/pods/llama-worker-1 | grep -q deletionTimestamp; }
wait_until 30 evicted
# Volcano's controller recreates the evicted pod and the scheduler places it on the healthy node;
# this demo has neither and plays both (test/k8s/control_loop_test.sh runs the real ones). The
# recovery succeeds once the replacement runs.
k8s_api DELETE "/api/v1/namespaces/train/pods/llama-worker-1?gracePeriodSeconds=0" >/dev/null
gone() { ! k8s_api GET /api/v1/namespaces/train/pods/llama-worker-1 >/dev/null; }
wait_until 15 gone
pod 1 npu-node-1 Ascend910-2,Ascend910-3
recovered() { "${CTL[@]}" get recoveries | grep -q SUCCEEDED; }
wait_until 30 recovered
"${CTL[@]}" get recoveries

step "What Kubernetes shows (kubectl get node npu-node-2 -o yaml, kubectl get events -n train)"
condition() {
  k8s_api GET /api/v1/nodes/npu-node-2 | python3 -c '
import json, sys
n = json.load(sys.stdin)
print("annotations:", {k: v for k, v in n["metadata"].get("annotations", {}).items() if k.startswith("clusterd.io/")})
for c in n["status"].get("conditions", []):
    if c["type"] == "AcceleratorHealthy":
        print("condition:", c["type"], c["status"], c["reason"], "-", c["message"])
        sys.exit(0)
sys.exit(1)'
}
wait_until 15 condition
condition
k8s_api GET /apis/events.k8s.io/v1/namespaces/train/events | python3 -c '
import json, sys
for e in json.load(sys.stdin)["items"]:
    print("event:", e["reason"], e["action"], e["regarding"]["kind"] + "/" + e["regarding"]["name"], "-", e["note"])'
k8s_api GET /api/v1/namespaces/train/pods | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    print("pod:", p["metadata"]["namespace"] + "/" + p["metadata"]["name"], p["spec"].get("nodeName", ""),
          p["status"].get("phase", ""), p["metadata"]["annotations"].get("huawei.com/AscendReal", ""))'
echo "(llama-worker-1 was evicted from npu-node-2; its replacement runs on npu-node-1 on healthy chips)"
echo
echo "Kubernetes demo done (docs/kubernetes.md)."
