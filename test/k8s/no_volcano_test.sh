#!/usr/bin/env bash
# ClusterD on a Kubernetes cluster WITHOUT Volcano and a job WITHOUT an agent,
# against a REAL etcd + kube-apiserver on loopback (test/k8s/lib.sh; the test
# plays the controllers and the kubelet through the API):
#  A. the PodGroup resource is not served (no Volcano CRD) and k8s_podgroups is
#     on (the default): StatefulSet pods are still discovered as a job; the
#     absence is said in the log and in clusterd_k8s_resource_served;
#  B. a SEPARATE chip fault on that job, which has no JobService agent (the
#     common case): the agent's PAUSE is skipped after the attach grace, recorded
#     with its reason, and the chip is isolated and the pod evicted at once
#     (not after the rung's 10-minute timeout); the replacement ends the
#     recovery SUCCEEDED, RESUME skipped too;
#  C. Volcano's CRD is installed while ClusterD runs: PodGroups are picked up
#     (metric 1) and a job known only by its PodGroup is discovered.
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
  grpcurl -plaintext -d '{}' "$ADDR" clusterd.v1.ClusterService/ListRecoveries 2>&1 | head -80 || true
}

k8s_start
k8s_create_namespace serve
[[ $(k8s_code GET /apis/scheduling.volcano.sh/v1beta1/podgroups) == 404 ]] || fail "PodGroups are served before the test installs Volcano's CRD"
echo "-- API server ready at $K8S_API, no Volcano CRD"

for n in worker01 worker02 worker03; do
  k8s_api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$n\"}}" >/dev/null
  k8s_api PATCH "/api/v1/nodes/$n/status" \
    "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"test\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\",\"lastTransitionTime\":\"$(date -u +%FT%TZ)\"}]}}" \
    application/strategic-merge-patch+json >/dev/null
done
STS_UID=$(python3 -c 'import uuid; print(uuid.uuid4())')
# pod NAME NODE INDEX DEVICES: a running pod of StatefulSet "llm" (no PodGroup, no agent, the rank from
# the pod-index label Kubernetes gives it).
pod() {
  k8s_api POST /api/v1/namespaces/serve/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",
    \"labels\":{\"apps.kubernetes.io/pod-index\":\"$3\"},
    \"annotations\":{\"huawei.com/AscendReal\":\"$4\"},
    \"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":\"StatefulSet\",\"name\":\"llm\",\"uid\":\"$STS_UID\",\"controller\":true}]},
    \"spec\":{\"nodeName\":\"$2\",\"containers\":[{\"name\":\"main\",\"image\":\"train:1\",
      \"resources\":{\"limits\":{\"huawei.com/Ascend910\":\"2\"}}}]}}" >/dev/null
  k8s_api PATCH "/api/v1/namespaces/serve/pods/$1/status" '{"status":{"phase":"Running"}}' >/dev/null
}
pod llm-0 worker01 0 Ascend910-0,Ascend910-1
pod llm-1 worker02 1 Ascend910-0,Ascend910-1

placement() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.JobService/GetJob 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["job"]; print(" ".join("%d:%s:%d" % (p.get("rank",0), p["node"], p.get("device_id",0)) for p in j["placement"]))'
}
recovery() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/GetRecovery 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["recovery"]; print(eval(sys.argv[1]))' "$2"
}
is() { [[ "$(eval "$1")" == "$2" ]]; }
metric() { curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == "$1" ]]
}

# The defaults, k8s_podgroups on included; only the waits are shortened.
start_clusterd --kubeconfig "$K8S_KUBECONFIG" --integrations kubernetes --actuator kubernetes \
  --k8s-crd-recheck 1s --recovery-agent-attach-grace 3s --log-level info
for n in worker01 worker02 worker03; do start_sim_noded "$n"; done
wait_until 30 connected 3

echo "-- A: no PodGroup CRD: the StatefulSet's pods are a job all the same"
wait_until 30 is 'placement "$STS_UID"' "0:worker01:0 1:worker01:1 2:worker02:0 3:worker02:1"
served='clusterd_k8s_resource_served{resource="podgroups"}'
[[ $(metric "$served") == 0 ]] || fail "A: $served is $(metric "$served"), want 0"
grep -q 'podgroups: not served by the API server (404' "$WORK/clusterd.log" || fail "A: the log does not say PodGroups are not served"
[[ $(grep -c 'podgroups: not served' "$WORK/clusterd.log") == 1 ]] || fail "A: said more than once"
echo "   job $STS_UID discovered; $served 0, said once in the log"

echo "-- B: SEPARATE on a chip of a job without an agent: the pod moves after the attach grace"
inject_sim_fault worker02 0 4C4BA00C
evicted() { k8s_api GET /api/v1/namespaces/serve/pods/llm-1 | grep -q deletionTimestamp; }
wait_until 30 evicted
pause=$(recovery "$STS_UID.1" '[s["state"] + " " + s.get("message","") for s in r["steps"] if s.get("command") == "JOB_COMMAND_PAUSE"][0]')
expect_contains "$pause" "STEP_STATE_SKIPPED" "B: PAUSE skipped"
expect_contains "$pause" "has no agent attached" "B: PAUSE says why"
[[ $(recovery "$STS_UID.1" 'r["strategy"]') == RECOVERY_STRATEGY_POD_RESCHEDULE ]] || fail "B: the rung changed"
# The controller's replacement on a healthy node.
k8s_api DELETE "/api/v1/namespaces/serve/pods/llm-1?gracePeriodSeconds=0" >/dev/null
gone() { [[ $(k8s_code GET /api/v1/namespaces/serve/pods/llm-1) == 404 ]]; }
wait_until 15 gone
pod llm-1 worker03 1 Ascend910-4,Ascend910-5
wait_until 30 is 'placement "$STS_UID"' "0:worker01:0 1:worker01:1 2:worker03:4 3:worker03:5"
wait_until 30 is 'recovery "$STS_UID.1" "r[\"state\"]"' RECOVERY_STATE_SUCCEEDED
[[ $(recovery "$STS_UID.1" '[s["state"] for s in r["steps"] if s.get("command") == "JOB_COMMAND_RESUME"][0]') == STEP_STATE_SKIPPED ]] ||
  fail "B: RESUME not skipped"
[[ $(metric clusterd_recovery_agent_steps_skipped_total) == 2 ]] || fail "B: skipped steps metric"
echo "   llm-1 evicted without waiting for an agent; recovery $STS_UID.1 SUCCEEDED, PAUSE and RESUME skipped"

echo "-- C: Volcano's CRD installed: PodGroups are picked up"
k8s_apply_podgroup_crd
wait_until 30 is 'metric "$served"' 1
grep -q 'podgroups: served now' "$WORK/clusterd.log" || fail "C: the log does not say PodGroups are served now"
k8s_api POST /apis/scheduling.volcano.sh/v1beta1/namespaces/serve/podgroups \
  '{"apiVersion":"scheduling.volcano.sh/v1beta1","kind":"PodGroup","metadata":{"name":"bare"},"spec":{"minMember":1}}' >/dev/null
PG_UID=$(k8s_api GET /apis/scheduling.volcano.sh/v1beta1/namespaces/serve/podgroups/bare |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["uid"])')
# A pod with no controller: only its PodGroup makes it a job's.
k8s_api POST /api/v1/namespaces/serve/pods '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bare-0",
  "annotations":{"scheduling.k8s.io/group-name":"bare","hccl/rankIndex":"0","huawei.com/AscendReal":"Ascend910-6"}},
  "spec":{"nodeName":"worker03","containers":[{"name":"main","image":"train:1"}]}}' >/dev/null
wait_until 30 is 'placement "$PG_UID"' "0:worker03:6"
echo "   $served 1; job $PG_UID found by its PodGroup"
echo "no-volcano e2e: OK"
