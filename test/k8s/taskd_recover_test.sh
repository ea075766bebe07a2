#!/usr/bin/env bash
# TaskD's Recover service end to end, against a REAL etcd + kube-apiserver on
# loopback (test/k8s/lib.sh), with TaskD played by grpcurl over the
# reference's proto (proto/mindcluster/recover.proto: no package, paths
# /Recover/<Method>), as an independent TaskD would behave: Init until 0,
# Register, Subscribe, then report back to each signal.
#  A. an AscendJob's PodGroup (process-recover-enable=pause, recover-strategy
#     retry,recover) and its two pods -> ClusterD's job carries the keys; Init
#     answers 0 with the strategies (402 for an unknown job), Register sets
#     the PodGroup's label to on;
#  B. an HBM UCE-like fault (RESTART_REQUEST) on one chip -> a STEP_RETRY
#     recovery carried out through TaskD: stopTrain (reset-config says
#     FaultFlushing), globalFault after ReportStopComplete (reset-config lists
#     the fault rank, its chip, its fault's level and code), changeStrategy "retry" after
#     ReportRecoverStrategy, and after ReportRecoverStatus 0 the recovery
#     SUCCEEDED, the PodGroup's ProcessRecoverStatus retry-success,
#     reset-config cleared (its RetryTime kept, checkCode its SHA-256), no pod
#     deleted, nothing signalled twice;
#     and meanwhile (the "mindcluster" integration runs too) Volcano's
#     cluster-info-device-0 keeps the chip available: the retry holds its fault;
#  C. a SEPARATE fault on another chip is not a retry's: that chip leaves
#     Volcano's available list; TaskD is told preExitProcess first (rank 0,
#     pod rank 0) and answers with ReportProcessFault, which labels the pod
#     on that node fault-type=software; then stopTrain, globalFault
#     fault_nodes_exit right after it (the pod moves while MindIO waits: the
#     exec actuator here answers true), changeStrategy recover ->
#     POD_RESCHEDULE SUCCEEDED, ProcessRecoverStatus
#     recover-success, the process fault TaskD reported cleared;
#  D. a SEPARATE fault whose recover fails (TaskD answers 406): the ladder
#     goes on to the job's restart, TaskD exits (changeStrategy exit), the
#     PodGroup says process-recover-enable=pause and ProcessRecoverStatus
#     exit-completed, reset-config's RetryTime goes up by one; the new
#     TaskD's Register sets the label on again (the reference's FaultRetry);
#  F. a retry TaskD answers 405 (MindIO: device clean failed): a new
#     globalFault with a new uuid and no pod leaving, reset-config's
#     RestartFaultProcess true, then recover in place as MindIO takes it:
#     changeStrategy recover, extraParams recover-in-place, fault_nodes_restart;
#     PROCESS_RESTART SUCCEEDED, recover-in-place-success;
#  G. scale-in (the PodGroup allows only SCALE_IN, recover-strategy
#     elastic-training): changeStrategy downgrade with the reference's
#     extraParams, TaskD's 201 (the ranks to isolate) answered with
#     faultNodesExit to their pod, then 0: SCALE_IN SUCCEEDED;
#  E. a stress test without chips is refused with the reference's code 413.
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
  echo "--- TaskD's stream"; cat "$WORK/signals.json" 2>/dev/null | tail -60
}

k8s_start
k8s_apply_podgroup_crd
k8s_create_namespace train
k8s_create_namespace mindx-dl
echo "-- API server ready at $K8S_API"

for n in worker01 worker02; do
  k8s_api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$n\"}}" >/dev/null
  # Ready (no node controller runs here): a Node without it is a fault of its own.
  k8s_api PATCH "/api/v1/nodes/$n/status" "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",
    \"reason\":\"KubeletReady\",\"lastHeartbeatTime\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}]}}" >/dev/null
done
JOB_UID=$(python3 -c 'import uuid; print(uuid.uuid4())')
OWNER="[{\"apiVersion\":\"mindxdl.gitee.com/v1\",\"kind\":\"AscendJob\",\"name\":\"pretrain\",\"uid\":\"$JOB_UID\",\"controller\":true}]"
# As ascend-operator leaves them: the PodGroup with the job's keys, the pods with ranks and chips.
k8s_api POST /apis/scheduling.volcano.sh/v1beta1/namespaces/train/podgroups \
  "{\"apiVersion\":\"scheduling.volcano.sh/v1beta1\",\"kind\":\"PodGroup\",\"metadata\":{\"name\":\"pretrain-${JOB_UID:0:8}\",
    \"ownerReferences\":$OWNER,\"labels\":{\"process-recover-enable\":\"pause\",\"fault-scheduling\":\"grace\"},
    \"annotations\":{\"recover-strategy\":\"retry,recover\",\"clusterd.io/hold-down\":\"0s\"}},\"spec\":{\"minMember\":2}}" >/dev/null
pod() {  # pod NAME NODE RANK
  k8s_api POST /api/v1/namespaces/train/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",
    \"annotations\":{\"scheduling.k8s.io/group-name\":\"pretrain-${JOB_UID:0:8}\",\"hccl/rankIndex\":\"$3\",
      \"huawei.com/AscendReal\":\"Ascend910-0,Ascend910-1\"},\"ownerReferences\":$OWNER},
    \"spec\":{\"nodeName\":\"$2\",\"containers\":[{\"name\":\"main\",\"image\":\"train:1\"}]}}" >/dev/null
  k8s_api PATCH "/api/v1/namespaces/train/pods/$1/status" '{"status":{"phase":"Running"}}' >/dev/null
}
pod pretrain-worker-0 worker01 0
pod pretrain-worker-1 worker02 1
# The job's reset-config (its YAML makes it): RetryTime 2 must survive every update.
RESET='{"RankList":[],"UpdateTime":0,"RetryTime":2,"FaultFlushing":false,"GracefulExit":0,"RestartFaultProcess":false}'
k8s_api POST /api/v1/namespaces/train/configmaps "$(python3 - "$RESET" <<'EOF'
import hashlib, json, sys
v = sys.argv[1]
print(json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "reset-config-pretrain", "labels": {"reset": "true"}},
                  "data": {"reset.json": v, "checkCode": hashlib.sha256(v.encode()).hexdigest()}}))
EOF
)" >/dev/null

# Isolation and pod moves succeed without doing anything (exec true): the pods
# here have no controller to recreate them.
start_clusterd --kubeconfig "$K8S_KUBECONFIG" --integrations kubernetes,mindcluster --log-level info \
  --actuator exec --actuator-command true --max-isolated-node-percent 100
for n in worker01 worker02; do start_sim_noded $n; done
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == "$1" ]]
}
wait_until 30 connected 2
echo "-- clusterd (integrations kubernetes and mindcluster) and two sim agents up"

# recover METHOD JSON: a call as TaskD makes it.
recover() { grpcurl -plaintext -import-path proto -proto mindcluster/recover.proto -d "$2" "$ADDR" "Recover/$1"; }
code_of() { python3 -c 'import json,sys; print(json.load(sys.stdin).get("code", 0))'; }
init_ok() { [[ $(recover Init "{\"jobId\": \"$JOB_UID\", \"role\": \"taskd\"}" | code_of) == 0 ]]; }
job_label() {
  grpcurl -plaintext -d "{\"id\": \"$JOB_UID\"}" "$ADDR" clusterd.v1.JobService/GetJob 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["job"].get("labels", {}).get(sys.argv[1], ""))' "$1"
}
pg_meta() {  # pg_meta labels|annotations KEY
  k8s_api GET "/apis/scheduling.volcano.sh/v1beta1/namespaces/train/podgroups/pretrain-${JOB_UID:0:8}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"].get(sys.argv[1], {}).get(sys.argv[2], ""))' "$1" "$2"
}
reset_field() {  # reset_field PYEXPR over r (reset.json) and cm
  k8s_api GET /api/v1/namespaces/train/configmaps/reset-config-pretrain | python3 -c '
import hashlib, json, sys
cm = json.load(sys.stdin)
r = json.loads(cm["data"]["reset.json"])
assert cm["data"]["checkCode"] == hashlib.sha256(cm["data"]["reset.json"].encode()).hexdigest(), "checkCode"
print(eval(sys.argv[1]))' "$1"
}
# signals: TaskD's signal types so far, keep-alives left out.
signals() {
  python3 - "$WORK/signals.json" <<'EOF'
import json, sys
text, out, dec, i = open(sys.argv[1]).read(), [], json.JSONDecoder(), 0
while True:
    while i < len(text) and text[i].isspace(): i += 1
    if i >= len(text): break
    try:
        obj, i = dec.raw_decode(text, i)
    except ValueError:
        break  # a message still being written
    if obj.get("signalType") != "keep-alive": out.append(obj)
print(" ".join(o.get("signalType", "") for o in out))
EOF
}
is() { [[ "$(eval "$1")" == "$2" ]]; }
# signal_of TYPE PYEXPR: PYEXPR over g, the last signal of TYPE on TaskD's stream.
signal_of() {
  python3 - "$WORK/signals.json" "$1" "$2" <<'EOF'
import json, sys
text, dec, i, out = open(sys.argv[1]).read(), json.JSONDecoder(), 0, []
while i < len(text):
    while i < len(text) and text[i].isspace(): i += 1
    if i >= len(text): break
    obj, i = dec.raw_decode(text, i)
    if obj.get("signalType") == sys.argv[2]: out.append(obj)
g = out[-1]
print(eval(sys.argv[3]))
EOF
}
pod_label() {  # pod_label POD KEY
  k8s_api GET "/api/v1/namespaces/train/pods/$1" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"].get("labels", {}).get(sys.argv[1], ""))' "$2"
}
# volcano NODE SUFFIX: NODE's huawei.com/Ascend910<SUFFIX> list in cluster-info-device-0.
volcano() {
  k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-device-0 2>/dev/null | python3 -c '
import json, sys
v = json.load(sys.stdin)["data"]["cluster-info-device-0"]
e = json.loads(v).get("mindx-dl-deviceinfo-" + sys.argv[1]) if v else None
print(e["DeviceList"]["huawei.com/Ascend910" + sys.argv[2]] if e else "<none>")' "$1" "$2"
}

echo "-- A: the job opts in through its PodGroup; Init, Register"
wait_until 30 is 'job_label mindcluster/recover-strategy' "retry,recover"
[[ $(recover Init '{"jobId": "no-such-job", "role": "taskd"}' | code_of) == 402 ]] || fail "A: Init of an unknown job"
wait_until 15 init_ok
info=$(recover Init "{\"jobId\": \"$JOB_UID\", \"role\": \"taskd\"}")
expect_contains "$info" "retry,recover,job-rescheduling,exit" "A: Init's strategies"
[[ $(recover Register "{\"jobId\": \"$JOB_UID\", \"role\": \"taskd\"}" | code_of) == 0 ]] || fail "A: Register"
wait_until 15 is 'pg_meta labels process-recover-enable' on
grpcurl -plaintext -import-path proto -proto mindcluster/recover.proto -d "{\"jobId\": \"$JOB_UID\", \"role\": \"taskd\"}" \
  "$ADDR" Recover/SubscribeProcessManageSignal >"$WORK/signals.json" 2>"$WORK/subscribe.err" &
SUB_PID=$!
PIDS+=("$SUB_PID")
agents() { curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | awk '$1 == "clusterd_job_agents" {print $2}'; }
wait_until 15 is agents 1
echo "   job $JOB_UID: $(echo "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["info"])'); PodGroup process-recover-enable pause -> on; TaskD subscribed"

echo "-- B: a chip fault retried through TaskD"
inject_sim_fault worker02 1 80BB8000  # RESTART_REQUEST: a step retry of rank 3 (pod rank 1)
wait_until 30 is signals "stopTrain"
wait_until 15 is 'reset_field "r[\"FaultFlushing\"]"' True
wait_until 15 is 'volcano worker02 ""' "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3,Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7"
[[ $(volcano worker02 -Unhealthy) == "" ]] || fail "B: the retried chip left Volcano's list: $(volcano worker02 -Unhealthy)"
recover ReportStopComplete "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 0}}" >/dev/null
wait_until 15 is signals "stopTrain globalFault"
global=$(signal_of globalFault '[f["rankId"] for f in g["faultRanks"]], g.get("nodeRankIds"), g.get("actions")')
[[ $global == "(['3'], ['1'], ['on_global_rank'])" ]] || fail "B: globalFault $global"
wait_until 15 is 'reset_field "[(x[\"RankId\"], x[\"LogicId\"], x[\"Policy\"], x[\"ErrorCode\"], x[\"ErrorCodeHex\"]) for x in r[\"RankList\"]]"' \
  "[(3, 1, 'RestartRequest', [2159771648], '80BB8000')]"
recover ReportRecoverStrategy "{\"jobId\": \"$JOB_UID\", \"strategies\": [\"retry\", \"recover\"]}" >/dev/null
wait_until 15 is signals "stopTrain globalFault changeStrategy"
grep -q '"changeStrategy": "retry"' "$WORK/signals.json" || fail "B: changeStrategy is not retry"
recover ReportRecoverStatus "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 0}, \"strategy\": \"retry\"}" >/dev/null
last_recovery() {
  grpcurl -plaintext -d "{\"job\": \"$JOB_UID\"}" "$ADDR" clusterd.v1.ClusterService/ListRecoveries |
    python3 -c 'import json,sys; r=json.load(sys.stdin).get("recoveries",[{}])[0]; print(r.get("strategy",""), r.get("state",""))'
}
wait_until 30 is last_recovery "RECOVERY_STRATEGY_STEP_RETRY RECOVERY_STATE_SUCCEEDED"
wait_until 15 is 'pg_meta annotations ProcessRecoverStatus' retry-success
wait_until 15 is 'reset_field "(r[\"RankList\"], r[\"FaultFlushing\"], r[\"RetryTime\"])"' "([], False, 2)"
pods=$(k8s_api GET /api/v1/namespaces/train/pods | python3 -c 'import json,sys; print(" ".join(sorted(p["metadata"]["name"] for p in json.load(sys.stdin)["items"])))')
[[ $pods == "pretrain-worker-0 pretrain-worker-1" ]] || fail "B: pods changed: $pods"
[[ $(signals) == "stopTrain globalFault changeStrategy" ]] || fail "B: signalled twice: $(signals)"
[[ $(volcano worker02 -Unhealthy) == "" ]] || fail "B: the retried chip left Volcano's list after the retry"
echo "   stopTrain -> globalFault (rank 3, pod rank 1) -> changeStrategy retry -> SUCCEEDED; ProcessRecoverStatus retry-success; reset-config flushed, listed, cleared (RetryTime kept); no pod deleted; chip 1 stayed in Volcano's available list"

echo "-- C: a fault no retry handles: out of Volcano's list, preExitProcess, the pod's fault-type, recover"
inject_sim_fault worker01 0 80E18402  # SEPARATE
wait_until 15 is 'volcano worker01 -Unhealthy' "Ascend910-0"
B="stopTrain globalFault changeStrategy"
wait_until 30 is signals "$B preExitProcess"
pre=$(signal_of preExitProcess '[f["rankId"] + ":" + f["faultType"] for f in g["faultRanks"]], g.get("nodeRankIds"), g.get("actions")')
[[ $pre == "(['0:1'], ['0'], ['pre exit process'])" ]] || fail "C: preExitProcess $pre"
# TaskD stopped rank 0's workers and says so.
[[ $(recover ReportProcessFault "{\"jobId\": \"$JOB_UID\", \"faultRanks\": [{\"rankId\": \"0\", \"faultType\": \"1\"}]}" | code_of) == 0 ]] ||
  fail "C: ReportProcessFault"
wait_until 15 is signals "$B preExitProcess stopTrain"
wait_until 15 is 'pod_label pretrain-worker-0 fault-type' software
[[ $(pod_label pretrain-worker-1 fault-type) == "" ]] || fail "C: the pod on worker02 was labelled"
recover ReportStopComplete "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 0}}" >/dev/null
wait_until 30 is signals "$B preExitProcess stopTrain globalFault"
[[ $(signal_of globalFault 'g.get("actions")') == "['on_global_rank', 'fault_nodes_exit']" ]] || fail "C: globalFault"
recover ReportRecoverStrategy "{\"jobId\": \"$JOB_UID\", \"strategies\": [\"retry\", \"recover\", \"exit\"]}" >/dev/null
wait_until 15 is signals "$B preExitProcess stopTrain globalFault changeStrategy"
[[ $(signal_of changeStrategy 'g["changeStrategy"]') == recover ]] || fail "C: not recover"
recover ReportRecoverStatus "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 0}, \"strategy\": \"recover\"}" >/dev/null
wait_until 30 is last_recovery "RECOVERY_STRATEGY_POD_RESCHEDULE RECOVERY_STATE_SUCCEEDED"
wait_until 15 is 'pg_meta annotations ProcessRecoverStatus' recover-success
taskd_faults() {
  grpcurl -plaintext -d '{"page_size": 100}' "$ADDR" clusterd.v1.ClusterService/ListFaults |
    python3 -c 'import json,sys; print(sorted(f["state"] for f in json.load(sys.stdin).get("faults", []) if f.get("reporter") == "taskd"))'
}
wait_until 15 is taskd_faults "['FAULT_STATE_CLEARED']"
# Cleared in the same write as the recovery's end: no recovery of its own followed.
[[ $(last_recovery) == "RECOVERY_STRATEGY_POD_RESCHEDULE RECOVERY_STATE_SUCCEEDED" ]] ||
  fail "C: a recovery followed for TaskD's own process fault: $(last_recovery)"
echo "   worker01 chip 0 (SEPARATE): -Unhealthy for Volcano; preExitProcess (rank 0, pod rank 0) -> ReportProcessFault (pod labelled fault-type=software) -> stopTrain -> globalFault fault_nodes_exit -> (pod moved) -> changeStrategy recover -> SUCCEEDED, recover-success; TaskD's process fault cleared"

echo "-- D: a recover that fails: TaskD exits, the job restarts"
C="$B preExitProcess stopTrain globalFault changeStrategy"
inject_sim_fault worker02 0 80E18402  # SEPARATE, rank 2
wait_until 30 is signals "$C preExitProcess"
recover ReportProcessFault "{\"jobId\": \"$JOB_UID\", \"faultRanks\": [{\"rankId\": \"2\", \"faultType\": \"1\"}]}" >/dev/null
wait_until 15 is signals "$C preExitProcess stopTrain"
recover ReportStopComplete "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 0}}" >/dev/null
wait_until 30 is signals "$C preExitProcess stopTrain globalFault"
recover ReportRecoverStrategy "{\"jobId\": \"$JOB_UID\", \"strategies\": [\"recover\", \"dump\", \"exit\"]}" >/dev/null
wait_until 15 is signals "$C preExitProcess stopTrain globalFault changeStrategy"
recover ReportRecoverStatus "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 406}, \"strategy\": \"recover\"}" >/dev/null
# JOB_RESCHEDULE: TaskD still chooses, so only the exit goes out (the job lists no dump).
wait_until 30 is signals "$C preExitProcess stopTrain globalFault changeStrategy changeStrategy"
[[ $(signal_of changeStrategy 'g["changeStrategy"], g.get("extraParams", "")') == "('exit', '')" ]] || fail "D: not exit"
wait_until 30 is last_recovery "RECOVERY_STRATEGY_JOB_RESCHEDULE RECOVERY_STATE_SUCCEEDED"
wait_until 15 is 'pg_meta labels process-recover-enable' pause
wait_until 15 is 'pg_meta annotations ProcessRecoverStatus' exit-completed
wait_until 15 is 'reset_field "(r[\"RankList\"], r[\"RetryTime\"])"' "([], 3)"
# The job's new TaskD (the reference's FaultRetry): recovery is on again.
[[ $(recover Init "{\"jobId\": \"$JOB_UID\", \"role\": \"taskd\"}" | code_of) == 0 ]] || fail "D: Init while paused"
[[ $(recover Register "{\"jobId\": \"$JOB_UID\", \"role\": \"taskd\"}" | code_of) == 0 ]] || fail "D: Register again"
wait_until 15 is 'pg_meta labels process-recover-enable' on
echo "   worker02 chip 0 (SEPARATE): recover failed (406) -> JOB_RESCHEDULE: changeStrategy exit -> SUCCEEDED; PodGroup pause, exit-completed, RetryTime 2 -> 3; Register -> on"

# since N: TaskD's signal types after the first N.
since() { local all; read -r -a all <<<"$(signals)"; echo "${all[*]:$1}"; }
count() { local all; read -r -a all <<<"$(signals)"; echo "${#all[@]}"; }
PG_PATH="/apis/scheduling.volcano.sh/v1beta1/namespaces/train/podgroups/pretrain-${JOB_UID:0:8}"

echo "-- F: a retry MindIO answers 405: a new globalFault, then recover in place as MindIO takes it"
inject_sim_fault worker01 0 80E18402 clear
inject_sim_fault worker02 0 80E18402 clear
k8s_api PATCH "$PG_PATH" '{"metadata":{"annotations":{"recover-strategy":"retry,recover-in-place,recover"}}}' >/dev/null
wait_until 30 is 'job_label mindcluster/recover-strategy' "retry,recover-in-place,recover"
expect_contains "$(recover Init "{\"jobId\": \"$JOB_UID\", \"role\": \"taskd\"}")" "retry,recover-in-place,recover" "F: Init"
N=$(count)
inject_sim_fault worker01 1 80BB8000  # RESTART_REQUEST: a step retry of rank 1 (pod rank 0)
wait_until 30 is "since $N" "stopTrain"
recover ReportStopComplete "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 0}}" >/dev/null
wait_until 15 is "since $N" "stopTrain globalFault"
first_global=$(signal_of globalFault 'g["uuid"]')
# MindIO's offer for a UCE with its ARF switch on.
recover ReportRecoverStrategy "{\"jobId\": \"$JOB_UID\", \"strategies\": [\"exit\", \"dump\", \"retry\", \"recover\"]}" >/dev/null
wait_until 15 is "since $N" "stopTrain globalFault changeStrategy"
[[ $(signal_of changeStrategy 'g["changeStrategy"]') == retry ]] || fail "F: not retry"
recover ReportRecoverStatus "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 405}, \"strategy\": \"retry\"}" >/dev/null
# 405: MindIO waits for a new globalFault; the escalated rung (PROCESS_RESTART) sends one.
wait_until 30 is "since $N" "stopTrain globalFault changeStrategy globalFault"
global=$(signal_of globalFault 'g["uuid"] != "'"$first_global"'", g.get("actions"), g.get("nodeRankIds", [])')
[[ $global == "(True, ['on_global_rank', 'fault_nodes_exit'], [])" ]] || fail "F: the second globalFault $global"
wait_until 15 is 'reset_field "(r[\"RestartFaultProcess\"], [x[\"RankId\"] for x in r[\"RankList\"]])"' "(True, [1])"
recover ReportRecoverStrategy "{\"jobId\": \"$JOB_UID\", \"strategies\": [\"exit\", \"dump\", \"retry\", \"recover\"]}" >/dev/null
wait_until 15 is "since $N" "stopTrain globalFault changeStrategy globalFault changeStrategy"
change=$(signal_of changeStrategy 'g["changeStrategy"], g.get("extraParams"), g.get("actions"), g.get("nodeRankIds")')
[[ $change == "('recover', 'recover-in-place', ['change_strategy', 'fault_nodes_restart'], ['0'])" ]] ||
  fail "F: recover in place is $change"
recover ReportRecoverStatus "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 0}, \"strategy\": \"recover\"}" >/dev/null
wait_until 30 is last_recovery "RECOVERY_STRATEGY_PROCESS_RESTART RECOVERY_STATE_SUCCEEDED"
wait_until 15 is 'pg_meta annotations ProcessRecoverStatus' recover-in-place-success
echo "   retry -> 405 -> a new globalFault (no pod leaves, RestartFaultProcess true) -> changeStrategy recover, extraParams recover-in-place, fault_nodes_restart, pod rank 0 -> SUCCEEDED, recover-in-place-success"

echo "-- G: scale-in is MindIO's downgrade: 201 (the ranks to isolate), faultNodesExit, 0"
inject_sim_fault worker01 1 80BB8000 clear
k8s_api PATCH "$PG_PATH" '{"metadata":{"annotations":{"recover-strategy":"elastic-training",
  "clusterd.io/allowed-strategies":"scale_in","clusterd.io/ranks-per-replica":"2","clusterd.io/min-replicas":"1"}}}' >/dev/null
wait_until 30 is 'job_label mindcluster/recover-strategy' "elastic-training"
expect_contains "$(recover Init "{\"jobId\": \"$JOB_UID\", \"role\": \"taskd\"}")" "elastic-training" "G: Init"
N=$(count)
inject_sim_fault worker02 1 80E18402  # SEPARATE, rank 3 (pod rank 1)
wait_until 30 is "since $N" "preExitProcess"
recover ReportProcessFault "{\"jobId\": \"$JOB_UID\", \"faultRanks\": [{\"rankId\": \"3\", \"faultType\": \"1\"}]}" >/dev/null
wait_until 15 is "since $N" "preExitProcess stopTrain"
recover ReportStopComplete "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 0}}" >/dev/null
wait_until 30 is "since $N" "preExitProcess stopTrain globalFault"
# MindIO's offer for a fault no retry handles, with its ARF and ZIT switches on.
recover ReportRecoverStrategy "{\"jobId\": \"$JOB_UID\", \"strategies\": [\"exit\", \"dump\", \"recover\", \"downgrade\", \"upgrade\"]}" >/dev/null
wait_until 15 is "since $N" "preExitProcess stopTrain globalFault changeStrategy"
down=$(signal_of changeStrategy 'g["changeStrategy"], g.get("extraParams"), g.get("nodeRankIds")')
[[ $down == "('downgrade', '{\"scale-in-strategy\": \"DP\"}', ['1'])" ]] || fail "G: downgrade is $down"
recover ReportRecoverStatus "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 201}, \"strategy\": \"downgrade\", \"isolateRankIds\": [\"2\", \"3\"]}" >/dev/null
wait_until 15 is "since $N" "preExitProcess stopTrain globalFault changeStrategy faultNodesExit"
[[ $(signal_of faultNodesExit 'g.get("actions"), g.get("nodeRankIds")') == "(['fault_nodes_exit'], ['1'])" ]] ||
  fail "G: faultNodesExit $(signal_of faultNodesExit 'g')"
[[ $(last_recovery) == "RECOVERY_STRATEGY_SCALE_IN RECOVERY_STATE_RUNNING" ]] || fail "G: 201 ended the step: $(last_recovery)"
recover ReportRecoverStatus "{\"jobId\": \"$JOB_UID\", \"status\": {\"code\": 0}, \"strategy\": \"downgrade\"}" >/dev/null
wait_until 30 is last_recovery "RECOVERY_STRATEGY_SCALE_IN RECOVERY_STATE_SUCCEEDED"
echo "   worker02 chip 1 (SEPARATE): changeStrategy downgrade {\"scale-in-strategy\": \"DP\"} -> 201 -> faultNodesExit pod rank 1 -> 0 -> SCALE_IN SUCCEEDED"

echo "-- E: an operator's stress test without chips is refused as the reference refuses it, and changes nothing"
# (The NIC switch and the stress test themselves: test/e2e/mindcluster_test.sh part 7.)
out=$(recover StressTest "{\"jobID\": \"$JOB_UID\"}")
[[ $(echo "$out" | code_of) == 413 ]] || fail "E: StressTest: $out"
expect_contains "$out" "stress test node is nil" "E: StressTest's info"
echo "   StressTest without stressParam: code 413, stress test node is nil"

echo "PASS: TaskD's Recover service on a real API server"
