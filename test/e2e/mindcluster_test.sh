#!/usr/bin/env bash
# MindCluster compatibility end to end (docs/mindcluster.md), with clients
# that are not ClusterD's C++ code: grpcurl reading proto/mindcluster (no
# reflection) and a Go program (test/e2e/mindcluster-client) whose stubs
# protoc-gen-go and protoc-gen-go-grpc generate here, from the same protos.
# A clusterd (--insecure) with two sim noded agents and a training job on
# worker01 devices 0 and 1:
#  1. reflection lists PubFault and fault.Fault;
#  2. fault.Fault/Register: an unknown job -> 402, no role -> 409;
#  3. a subscriber registered for the job; a public fault (pingmesh,
#     220001001 = SeparateNPU) on worker01 device 1 -> code 0, in ListFaults
#     and in a Watch from revision 0, a "fault" signal naming worker01 and
#     device 1, GetFaultMsgSignal lists it; an invalid request (version 2.0)
#     -> 409, an unknown resource -> 410; "recover" -> a "normal" signal once
#     its minimum visibility (5 s) has passed;
#  4. a sim fault on worker02 (not the job's) and one on worker01 device 0
#     -> a "fault" signal for device 0 only; cleared -> "normal";
#  5. TrainingDataTrace (profiling.proto): faultdiag-online's
#     ModifyTrainingDataTraceSwitch for a job by namespace/name -> code 200,
#     GetTrainingDataTraceSwitch says it; a switch that is not on/off ->
#     InvalidArgument and Get still says the first;
#  6. job.Job and config.Config through the Go stubs: faultdiag-online's
#     Register (role FdAgent) and SubscribeJobSummarySignalList get every job
#     at once (mc-job-0001 running), then a job made through JobService
#     (running, its HcclJson naming worker02's chips and ranks) and its
#     deletion (failed, operator delete); an unknown role is refused; MindIE's
#     config.Config gets a job's rank table at once and again when UpdateJob
#     moves its ranks.
#  7. Recover's NIC switch and stress test (the Go client as operator and
#     TaskD): the switch paused, notified, continued, "switch nic finish";
#     a stress test whose rank 1 finds a fault -> that chip a SEPARATE fault.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"
JOB=mc-job-0001

require_cmd go protoc grpcurl
require_built clusterd noded clusterctl

e2e_setup
clusterd_ports
SUB_PID=""
declare -A NODED_PORT NODED_PID
on_failure() { tail_logs 20 "$WORK"/*.log "$WORK"/*.out; }

echo "== build the Go client (stubs generated now, into $WORK)"
build_mcclient "$WORK/mcclient"
MC="$WORK/mcclient/mcclient"

echo "== clusterd and two sim noded agents"
start_clusterd
start_sim_noded worker01
start_sim_noded worker02
connected_agents() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == 2 ]]
}
wait_until 30 connected_agents
grpcurl -plaintext -d "{\"job\": {\"id\": \"$JOB\", \"kind\": \"JOB_KIND_TRAINING\", \"placement\": [
    {\"rank\": 0, \"node\": \"worker01\", \"device_id\": 0}, {\"rank\": 1, \"node\": \"worker01\", \"device_id\": 1}]}}" \
  "$ADDR" clusterd.v1.JobService/CreateJob >/dev/null || fail "CreateJob $JOB"

# json_field FIELD: a top-level field of the JSON object on stdin ("" if absent).
json_field() { python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$1"; }
# mc_reply KIND FIELD: FIELD of the {"KIND": {...}} line that mcclient printed on stdin.
mc_reply() {
  python3 -c '
import json, sys
for line in sys.stdin:
    msg = json.loads(line).get(sys.argv[1])
    if msg is not None:
        print(msg.get(sys.argv[2], ""))
        break' "$1" "$2"
}
# pubfault_grpcurl JSON: PubFault/SendPublicFault through grpcurl with the
# proto file (no reflection); prints the RespStatus.
pubfault_grpcurl() {
  grpcurl -plaintext -emit-defaults -import-path "$ROOT/proto" -proto mindcluster/pubfault.proto -d "$1" \
    "$ADDR" PubFault/SendPublicFault
}
# pubfault_request VERSION RESOURCE FAULT-ID ASSERTION: a request for worker01 device 1, code 220001001.
pubfault_request() {
  local now
  now=$(date +%s%3N)
  cat <<JSON
{"id": "req-$3-$4-$now", "timestamp": $now, "version": "$1", "resource": "$2",
 "faults": [{"faultId": "$3", "faultType": "NPU", "faultCode": "220001001", "faultTime": $now,
             "assertion": "$4", "faultLocation": {"chip": "1"}, "description": "link down",
             "influence": [{"nodeName": "worker01", "deviceIds": [1]}]}]}
JSON
}
# signals FILE: one line per signal mcclient printed:
#   "<signalType> <jobId> [node:deviceId:deviceType:codes:levels:faultLevel ...]",
# and a line "NO-UUID" for a message without a uuid.
signals() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    sig = json.loads(line).get("signal")
    if sig is None:
        continue
    if not sig.get("uuid"):
        print("NO-UUID")
    devs = []
    for n in sig.get("nodeFaultInfo") or []:
        for d in n.get("faultDevice") or []:
            devs.append(":".join([n["nodeName"], d["deviceId"], d["deviceType"], ",".join(d["faultCodes"]),
                                  ",".join(d["faultLevels"]), d["faultLevel"]]))
    print(" ".join([sig["signalType"], sig["jobId"]] + devs))
PY
}
has_signal() { signals "$1" | grep -q "^$2"; }
live_subscribers() {
  [[ $(curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk '$1 == "clusterd_mindcluster_fault_subscribers" {print $2}') == "$1" ]]
}
# subscribe NAME: mcclient subscribe in the background (stdout in $WORK/NAME.out),
# once clusterd counts its stream as live (changes from then on are told).
subscribe() {
  "$MC" subscribe -server "$ADDR" -job "$JOB" -role mindie -deadline 60s >"$WORK/$1.out" 2>"$WORK/$1.log" &
  SUB_PID=$!
  PIDS+=("$SUB_PID")
  wait_until 30 live_subscribers 1 || fail "the $1 subscription never went live: $(cat "$WORK/$1.log")"
  [[ $(mc_reply register code <"$WORK/$1.out") == 0 ]] || fail "Register $JOB: $(cat "$WORK/$1.out")"
}
# subscriber_done NAME: the subscriber exited 0 (after "normal").
subscriber_done() {
  local rc=0
  timeout 30 tail --pid="$SUB_PID" -f /dev/null || fail "$1: mcclient still running: $(cat "$WORK/$1.out")"
  wait "$SUB_PID" || rc=$?
  e2e_forget "$SUB_PID"
  SUB_PID=""
  [[ $rc == 0 ]] || fail "$1: mcclient exit $rc: $(cat "$WORK/$1.log")"
}

echo "== 1. reflection lists the MindCluster services"
services=$(grpcurl -plaintext "$ADDR" list)
for s in PubFault fault.Fault job.Job config.Config; do expect_contains "$services" "$s" "grpcurl list"; done
methods=$(grpcurl -plaintext "$ADDR" list fault.Fault)
for m in Register SubscribeFaultMsgSignal GetFaultMsgSignal; do expect_contains "$methods" "fault.Fault.$m" "grpcurl list fault.Fault"; done

echo "== 2. Register: unknown job -> 402, no role -> 409"
out=$("$MC" register -server "$ADDR" -job mc-job-unknown -role mindie) || fail "mcclient register: $out"
[[ $(mc_reply register code <<<"$out") == 402 ]] || fail "Register for an unknown job: $out (expected code 402)"
out=$(grpcurl -plaintext -emit-defaults -import-path "$ROOT/proto" -proto mindcluster/fault.proto \
  -d "{\"jobId\": \"$JOB\", \"role\": \"\"}" "$ADDR" fault.Fault/Register) || fail "grpcurl Register: $out"
[[ $(json_field code <<<"$out") == 409 ]] || fail "Register with no role: $out (expected code 409)"

echo "== 3. a public fault -> ListFaults, Watch, a \"fault\" signal; recover -> \"normal\""
subscribe sub1
out=$(pubfault_grpcurl "$(pubfault_request 1.0 pingmesh pingmesh-link-0001 occur)") || fail "SendPublicFault: $out"
[[ $(json_field code <<<"$out") == 0 ]] || fail "SendPublicFault: $out (expected code 0)"
# The stored fault, as the clusterd.v1 API shows it.
pubfault_listed() {
  grpcurl -plaintext -d '{"node": "worker01", "active_only": true}' "$ADDR" clusterd.v1.ClusterService/ListFaults |
    python3 -c '
import json, sys
for f in json.load(sys.stdin).get("faults", []):
    if f.get("reporter") == "pubfault/pingmesh" and f.get("external_id") == "pingmesh-link-0001":
        print(f["code"], f["level"], f.get("device_id"), f["state"])'
}
listed=$(pubfault_listed)
[[ $listed == "220001001 FAULT_LEVEL_SEPARATE 1 FAULT_STATE_ACTIVE" ]] ||
  fail "ListFaults after SendPublicFault: '$listed' (expected 220001001 FAULT_LEVEL_SEPARATE 1 FAULT_STATE_ACTIVE)"
# A Watch from revision 0 replays the history, the raise included; grpcurl
# ends it after a second (the replay comes at once).
watch_has_pubfault() {
  { grpcurl -plaintext -max-time 1 -d '{"from_revision": "0", "types": ["EVENT_TYPE_FAULT_RAISED"]}' "$ADDR" \
      clusterd.v1.ClusterService/Watch 2>/dev/null || true; } |
    python3 -c '
import json, sys
text, dec, pos = sys.stdin.read(), json.JSONDecoder(), 0
found = False
while True:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        break
    msg, pos = dec.raw_decode(text, pos)
    for ev in msg.get("events", []):
        f = ev.get("fault") or {}
        found |= (f.get("reporter") == "pubfault/pingmesh" and f.get("device_id") == 1 and
                  f.get("level") == "FAULT_LEVEL_SEPARATE" and f.get("code") == "220001001" and
                  ev.get("job_ids") == ["mc-job-0001"])
sys.exit(0 if found else 1)'
}
wait_until 20 watch_has_pubfault || fail "no FAULT_RAISED event of the public fault in a Watch from revision 0"
echo "-- SendPublicFault: code 0; in ListFaults and in the Watch (reporter pubfault/pingmesh, SEPARATE, device 1)"

wait_until 20 has_signal "$WORK/sub1.out" fault || fail "no \"fault\" signal: $(cat "$WORK/sub1.out")"
first=$(signals "$WORK/sub1.out" | grep -m1 '^fault')
[[ $first == "fault $JOB worker01:1:NPU:220001001:SeparateNPU:UnHealthy" ]] ||
  fail "the first fault signal says '$first' (expected worker01 device 1, NPU, 220001001, SeparateNPU, UnHealthy)"
echo "-- subscriber: $first"
out=$("$MC" query -server "$ADDR" -job "$JOB" -role mindie) || fail "mcclient query: $out"
[[ $(mc_reply query code <<<"$out") == 200 ]] || fail "GetFaultMsgSignal: $out (expected code 200)"
grep -q '"worker01"' <<<"$out" && grep -q '"220001001"' <<<"$out" || fail "GetFaultMsgSignal does not list the fault: $out"

out=$(pubfault_grpcurl "$(pubfault_request 2.0 pingmesh pingmesh-link-0002 occur)") || fail "SendPublicFault: $out"
[[ $(json_field code <<<"$out") == 409 ]] || fail "SendPublicFault version 2.0: $out (expected code 409)"
out=$(pubfault_grpcurl "$(pubfault_request 1.0 no-such-system pingmesh-link-0003 occur)") || fail "SendPublicFault: $out"
[[ $(json_field code <<<"$out") == 410 ]] || fail "SendPublicFault from an unknown resource: $out (expected code 410)"
echo "-- version 2.0 -> 409, resource no-such-system -> 410"

# Recover, through the Go client's PubFault stub this time.
out=$("$MC" pubfault -server "$ADDR" -resource pingmesh -fault-id pingmesh-link-0001 -code 220001001 \
  -assertion recover -node worker01 -devices 1) || fail "mcclient pubfault: $out"
[[ $(mc_reply pubfault code <<<"$out") == 0 ]] || fail "recover: $out (expected code 0)"
subscriber_done sub1
last=$(signals "$WORK/sub1.out" | tail -1)
[[ $last == "normal $JOB" ]] || fail "the last signal says '$last', not 'normal $JOB'"
! signals "$WORK/sub1.out" | grep -q NO-UUID || fail "a signal without a uuid: $(cat "$WORK/sub1.out")"
[[ -z $(pubfault_listed) ]] || fail "the public fault is still active after the normal signal"
echo "-- recover -> code 0; subscriber: $(signals "$WORK/sub1.out" | cut -d' ' -f1 | paste -sd' ')"

echo "== 4. sim faults: worker02 (not the job's) and worker01 device 0 -> \"fault\"; cleared -> \"normal\""
wait_until 30 live_subscribers 0 || fail "the first subscription is still counted live"
subscribe sub2
sim_fault_active() {
  grpcurl -plaintext -d "{\"node\": \"$1\", \"active_only\": true}" "$ADDR" clusterd.v1.ClusterService/ListFaults |
    grep -q 80E01801
}
inject_sim_fault worker02 0 80E01801
wait_until 30 sim_fault_active worker02
inject_sim_fault worker01 0 80E01801
wait_until 30 has_signal "$WORK/sub2.out" fault || fail "no \"fault\" signal for the sim fault: $(cat "$WORK/sub2.out")"
first=$(signals "$WORK/sub2.out" | grep -m1 '^fault')
[[ $first == "fault $JOB worker01:0:NPU:80E01801:"* ]] || fail "the sim fault's signal says '$first' (expected worker01 device 0)"
echo "-- subscriber: $first"
inject_sim_fault worker01 0 80E01801 clear
subscriber_done sub2
[[ $(signals "$WORK/sub2.out" | tail -1) == "normal $JOB" ]] || fail "no normal signal last: $(cat "$WORK/sub2.out")"
! grep -q worker02 "$WORK/sub2.out" || fail "a signal of $JOB names worker02: $(cat "$WORK/sub2.out")"

echo "== 5. TrainingDataTrace: Modify then Get a job's profiling switch, through grpcurl"
grpcurl -plaintext -d '{"job": {"id": "trace-uid-0001", "kind": "JOB_KIND_TRAINING",
    "labels": {"k8s.namespace": "default", "k8s.name": "trace-job"},
    "placement": [{"rank": 0, "node": "worker02", "device_id": 0}]}}' \
  "$ADDR" clusterd.v1.JobService/CreateJob >/dev/null || fail "CreateJob trace-uid-0001"
trace_grpcurl() {
  grpcurl -plaintext -emit-defaults -import-path "$ROOT/proto" -proto mindcluster/profiling.proto -d "$1" \
    "$ADDR" "TrainingDataTrace/$2"
}
light='{"CommunicationOperator": "off", "Step": "on", "SaveCheckpoint": "on", "FP": "on", "DataLoader": "on"}'
out=$(trace_grpcurl "{\"jobNsName\": \"default/trace-job\", \"profilingSwitch\": $light}" \
  ModifyTrainingDataTraceSwitch) || fail "ModifyTrainingDataTraceSwitch: $out"
[[ $(json_field code <<<"$out") == 200 ]] || fail "Modify: $out (expected code 200)"
out=$(trace_grpcurl '{"jobNsName": "default/trace-job", "profilingSwitch": {"CommunicationOperator": "maybe",
  "Step": "on", "SaveCheckpoint": "on", "FP": "on", "DataLoader": "on"}}' ModifyTrainingDataTraceSwitch 2>&1) &&
  fail "a switch \"maybe\" was accepted: $out"
expect_contains "$out" "InvalidArgument" "Modify with a bad switch"
out=$(trace_grpcurl '{"jobNsName": "default/trace-job"}' GetTrainingDataTraceSwitch) ||
  fail "GetTrainingDataTraceSwitch: $out"
[[ $(json_field code <<<"$out") == 200 ]] || fail "Get: $out (expected code 200)"
got=$(python3 -c 'import json,sys; s=json.load(sys.stdin)["profilingSwitch"]; print(s["CommunicationOperator"], s["Step"])' <<<"$out")
[[ $got == "off on" ]] || fail "Get says '$got' (expected 'off on'): $out"
echo "-- Modify -> 200; Get -> CommunicationOperator off, Step on"

echo "== 6. job.Job summaries and config.Config rank tables, through the Go stubs"
job_subscribers() {
  [[ $(curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk '$1 == "clusterd_mindcluster_job_subscribers" {print $2}') == "$1" ]]
}
# summaries FILE: one line per summary mcclient printed: "<message#> <jobId> <jobStatus> <operator> <total> <hccl>",
# hccl being "node:device:rank,..." of its HcclJson (or its status while initializing).
summaries() {
  python3 - "$1" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    msg = json.loads(line).get("summaries")
    if msg is None:
        continue
    n += 1
    for s in msg.get("jobSummarySignals") or []:
        h = json.loads(s["HcclJson"]) if s["HcclJson"] else {}
        devs = [f'{srv["server_name"]}:{d["device_id"]}:{d["rank_id"]}' for srv in h.get("server_list") or []
                for d in srv["device"]]
        print(n, s["jobId"], s["jobStatus"], s["operator"], msg["JobTotalNum"], ",".join(devs) or h.get("status", "-"))
PY
}
out=$(grpcurl -plaintext -import-path "$ROOT/proto" -proto mindcluster/job.proto -d '{"role": "Mallory"}' \
  "$ADDR" job.Job/Register 2>&1) && fail "job.Job/Register with an unknown role: $out"
expect_contains "$out" "InvalidArgument" "job.Job/Register with an unknown role"
"$MC" jobs -server "$ADDR" -role FdAgent -job summary-uid-0001 -operator delete -deadline 60s \
  >"$WORK/jobs.out" 2>"$WORK/jobs.log" &
SUB_PID=$!
PIDS+=("$SUB_PID")
wait_until 30 job_subscribers 1 || fail "the job summary subscription never opened: $(cat "$WORK/jobs.log")"
[[ $(mc_reply jobregister code <"$WORK/jobs.out") == 0 ]] || fail "job.Job/Register: $(cat "$WORK/jobs.out")"
grpcurl -plaintext -d '{"job": {"id": "summary-uid-0001", "kind": "JOB_KIND_TRAINING",
    "labels": {"k8s.namespace": "default", "k8s.name": "summary-job"},
    "placement": [{"rank": 0, "node": "worker02", "device_id": 0}, {"rank": 1, "node": "worker02", "device_id": 1}]}}' \
  "$ADDR" clusterd.v1.JobService/CreateJob >/dev/null || fail "CreateJob summary-uid-0001"
grpcurl -plaintext -d '{"id": "summary-uid-0001"}' "$ADDR" clusterd.v1.JobService/DeleteJob >/dev/null ||
  fail "DeleteJob summary-uid-0001"
subscriber_done "job summaries"
summaries "$WORK/jobs.out" >"$WORK/jobs.txt"
grep -q "^1 $JOB running add [0-9]* worker01:0:0,worker01:1:1$" "$WORK/jobs.txt" ||
  fail "the first message does not list $JOB running on worker01's chips 0 and 1: $(cat "$WORK/jobs.txt")"
grep -q " summary-uid-0001 running add 1 worker02:0:0,worker02:1:1$" "$WORK/jobs.txt" ||
  fail "no running summary of summary-uid-0001 with worker02's chips: $(cat "$WORK/jobs.txt")"
[[ $(tail -1 "$WORK/jobs.txt" | cut -d' ' -f2-4) == "summary-uid-0001 failed delete" ]] ||
  fail "the last summary is not summary-uid-0001's deletion: $(cat "$WORK/jobs.txt")"
echo "-- faultdiag-online's stream: $(cut -d' ' -f2-4 "$WORK/jobs.txt" | paste -sd';')"

grpcurl -plaintext -d '{"job": {"id": "ranktable-uid-0001", "kind": "JOB_KIND_INFERENCE",
    "placement": [{"rank": 0, "node": "worker01", "device_id": 2}]}}' \
  "$ADDR" clusterd.v1.JobService/CreateJob >/dev/null || fail "CreateJob ranktable-uid-0001"
"$MC" ranktable -server "$ADDR" -job ranktable-uid-0001 -role mindie -count 2 -deadline 60s \
  >"$WORK/ranktable.out" 2>"$WORK/ranktable.log" &
SUB_PID=$!
PIDS+=("$SUB_PID")
has_ranktable() { grep -q '"ranktable"' "$WORK/ranktable.out"; }
wait_until 30 has_ranktable || fail "no rank table at subscription: $(cat "$WORK/ranktable.out" "$WORK/ranktable.log")"
grpcurl -plaintext -d '{"job": {"id": "ranktable-uid-0001", "kind": "JOB_KIND_INFERENCE",
    "placement": [{"rank": 0, "node": "worker02", "device_id": 3}]}}' \
  "$ADDR" clusterd.v1.JobService/UpdateJob >/dev/null || fail "UpdateJob ranktable-uid-0001"
subscriber_done "rank tables"
tables=$(python3 - "$WORK/ranktable.out" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line).get("ranktable")
    if m:
        t = json.loads(m["rankTable"])
        print(m["jobId"], ",".join(s["server_name"] + ":" + d["device_id"] + ":" + d["rank_id"]
                                   for s in t["server_list"] for d in s["device"]))
PY
)
[[ $tables == $'ranktable-uid-0001 worker01:2:0\nranktable-uid-0001 worker02:3:0' ]] ||
  fail "the rank tables say '$tables' (expected worker01 chip 2, then worker02 chip 3)"
echo "-- MindIE's rank tables: $(paste -sd';' <<<"$tables")"
grpcurl -plaintext -d '{"id": "ranktable-uid-0001"}' "$ADDR" clusterd.v1.JobService/DeleteJob >/dev/null ||
  fail "DeleteJob ranktable-uid-0001"  # off worker02 chip 3, which part 7's stress test takes out

echo "== 7. Recover: an operator's NIC switch and stress test, TaskD played by the Go client (om.go)"
OM_JOB=om-uid-0001
grpcurl -plaintext -d "{\"job\": {\"id\": \"$OM_JOB\", \"kind\": \"JOB_KIND_TRAINING\",
    \"labels\": {\"mindcluster/process-recover-enable\": \"on\", \"mindcluster/recover-strategy\": \"recover\"},
    \"placement\": [{\"rank\": 0, \"node\": \"worker02\", \"device_id\": 2},
                    {\"rank\": 1, \"node\": \"worker02\", \"device_id\": 3}]}}" \
  "$ADDR" clusterd.v1.JobService/CreateJob >/dev/null || fail "CreateJob $OM_JOB"
# om_lines KIND FIELD: FIELD of each {"KIND": {...}} line on stdin, one per line.
om_lines() {
  python3 -c 'import json,sys
for line in sys.stdin:
    d = json.loads(line)
    if sys.argv[1] in d: print(json.dumps(d[sys.argv[1]].get(sys.argv[2])).strip("\""))' "$1" "$2"
}
out=$("$MC" nicswitch -server "$ADDR" -job "$OM_JOB" -switch-node worker02 -switch-devs 3 -deadline 60s 2>"$WORK/om-nic.log") ||
  fail "mcclient nicswitch: $out $(cat "$WORK/om-nic.log")"
[[ $(om_lines om_signal signalType <<<"$out" | paste -sd' ') == "stopTrain changeStrategy" ]] ||
  fail "TaskD's signals of the NIC switch: $out (expected stopTrain, then changeStrategy continue)"
[[ $(om_lines om_switch rankID <<<"$out") == '["1"]' ]] || fail "the switch notice: $out (expected rank 1)"
[[ $(om_lines om_result msg <<<"$out" | tail -1) == "switch nic finish" ]] || fail "the operator's outcome: $out"
echo "-- SwitchNicTrack worker02 chip 3: stopTrain [pause_train], SwitchRankList [1], continue; \"switch nic finish\""
out=$("$MC" stresstest -server "$ADDR" -job "$OM_JOB" -ops 0,1 -fault-rank 1 -deadline 60s 2>"$WORK/om-stress.log") ||
  fail "mcclient stresstest: $out $(cat "$WORK/om-stress.log")"
last=$(om_lines om_result msg <<<"$out" | tail -1)
[[ $last == "stress test find fault, chips worker02/3 SEPARATE"* ]] || fail "the stress test's outcome: $out"
stress_fault_active() {
  grpcurl -plaintext -d '{"node": "worker02", "active_only": true}' "$ADDR" clusterd.v1.ClusterService/ListFaults |
    python3 -c 'import json,sys
fs = json.load(sys.stdin).get("faults", [])
sys.exit(0 if any(f.get("reporter") == "stresstest" and f.get("code") == "STRESS_TEST_FAULT" and
                  f.get("device_id") == 3 and f.get("level") == "FAULT_LEVEL_SEPARATE" for f in fs) else 1)'
}
wait_until 20 stress_fault_active || fail "no SEPARATE fault of the reporter stresstest on worker02 chip 3"
echo "-- StressTest AIC+P2P, rank 1 finds a fault: worker02 chip 3 is a SEPARATE fault of the reporter stresstest"
# The job's MindCluster view: clusterctl and the HTTP API show both operations,
# newest first, with what was asked, each step and the per-chip results.
view=$("$BIN/clusterctl" --server "$ADDR" describe mindcluster "$OM_JOB") || fail "clusterctl describe mindcluster: $view"
grep -q "^Status: *running" <<<"$view" || fail "the view's summary: $view"
# (rank 1's chip may have moved by now: the recovery of the stress test's fault)
grep -Eq "^  worker02 .* +- +[01]$" <<<"$view" || fail "the view's hccl.json servers (worker02's chips): $view"
grep -q "^NIC switch $OM_JOB/nic-switch/1:" <<<"$view" || fail "the view's NIC switch: $view"
grep -q "Request: *rank 1 -> backup" <<<"$view" || fail "the NIC switch's request: $view"
grep -q "^Stress test $OM_JOB/stress-test/2:" <<<"$view" || fail "the view's stress test: $view"
grep -Eq "^    worker02 +3 +(AIC|P2P) +2 " <<<"$view" || fail "the stress test's per-chip result (worker02 chip 3 code 2): $view"
[[ $(grep -E "^(Stress test|NIC switch) " <<<"$view" | awk '{print $1}' | paste -sd' ') == "Stress NIC" ]] ||
  fail "the operations are not newest first: $view"
curl -sf "http://127.0.0.1:$HTTP_PORT/api/v1/mindcluster/jobs/$OM_JOB" | python3 -c 'import json,sys
v = json.load(sys.stdin)
h = v["history"]
assert [o["kind"] for o in h] == ["stress-test", "nic-switch"], h
assert any(c["code"] == "2" and c["node"] == "worker02" and c["device"] == "3" for c in h[0]["chipResults"]), h[0]
assert v["summary"]["jobStatus"] == "running" and v["totalServers"] >= 1, v' ||
  fail "GET /api/v1/mindcluster/jobs/$OM_JOB"
echo "-- clusterctl describe mindcluster and /api/v1/mindcluster/jobs: the summary, servers, both operations and the chip's result"

echo "-- SIGTERM stops clusterd cleanly"
term_wait "$CLUSTERD_PID" || fail "clusterd exit $?"
echo "e2e mindcluster: ok"
