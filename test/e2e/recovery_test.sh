#!/usr/bin/env bash
# Recovery end to end with real processes: clusterd with the exec actuator,
# three noded agents (sim devices), and example job agents (build/bin/job-agent).
#  A. a RESTART_BUSINESS fault -> PROCESS_RESTART acknowledged by the agent;
#  B. a SEPARATE fault -> the device isolated through the exec actuator, the
#     pod rescheduled, the rank moved to a spare, the job running again;
#  C. an agent that never answers -> the step times out and the recovery
#     escalates to POD_RESCHEDULE;
#  D. kill -9 of clusterd mid-recovery -> the restarted clusterd resumes it,
#     and the actuator's log shows every action exactly once.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID AGENT_PID
on_failure() {
  tail_logs 30 "$WORK/clusterd.log"
  tail_logs 15 "$WORK"/agent-*.out
  echo "--- actuator invocations"; cat "$WORK/invocations.log" 2>/dev/null || true
}

# The actuator: logs every invocation, and performs (logs to actions.log) each
# idempotency key once, as a real actuator must.
cat >"$WORK/actuator.sh" <<EOF
#!/bin/sh
json=\$(cat)
echo "\$json" >>"$WORK/invocations.log"
grep -qF "\"idempotency_key\":\"\$CLUSTERD_IDEMPOTENCY_KEY\"" "$WORK/actions.log" 2>/dev/null ||
  echo "\$json" >>"$WORK/actions.log"
echo "\$CLUSTERD_ACTION done"
EOF
chmod +x "$WORK/actuator.sh"

CLUSTERD_FLAGS=(--actuator exec --actuator-command "$WORK/actuator.sh" --recovery-resume-grace 5s --log-level info)
start_noded() { start_sim_noded "$1"; }
# start_agent JOB ARGS...: an example job agent, hold-down 500ms.
start_agent() {
  local job=$1; shift
  start_bg "AGENT_PID[$job]" "$WORK/agent-$job.out" "$BIN/job-agent" --server "$ADDR" --job "$job" --hold-down 500ms \
    --step-ms 50 --log "$WORK/agent-$job.log" "$@"
  wait_until 30 grep -q "attached: job $job" "$WORK/agent-$job.log"
}
inject() { inject_sim_fault "$@"; }
# recovery ID EXPR: evaluates a Python expression over the recovery `r` (JSON).
recovery() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/GetRecovery 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["recovery"]; print(eval(sys.argv[1]))' "$2"
}
recovery_is() { [[ "$(recovery "$1" 'r["state"]')" == "$2" ]]; }
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == 3 ]]
}

start_clusterd "${CLUSTERD_FLAGS[@]}"
for n in worker01 worker02 worker03; do start_noded "$n"; done
wait_until 30 connected
echo "-- three nodes registered"

echo "-- A: RESTART_BUSINESS -> the agent restarts the hit rank's processes"
start_agent train-a --placement 0=worker01:0,1=worker01:1,2=worker02:0,3=worker02:1 --spares worker03:0,worker03:1
inject worker01 1 80E01801
wait_until 30 recovery_is train-a.1 RECOVERY_STATE_SUCCEEDED
[[ $(recovery train-a.1 'r["strategy"]') == RECOVERY_STRATEGY_PROCESS_RESTART ]] || fail "A: strategy"
[[ $(recovery train-a.1 '[s.get("command") for s in r["steps"]]') == "['JOB_COMMAND_RESTART_PROCESSES']" ]] ||
  fail "A: steps $(recovery train-a.1 'r["steps"]')"
grep -q "command train-a.1/0 RESTART_PROCESSES ranks=\[1\]" "$WORK/agent-train-a.log" || fail "A: agent never got the command"
job_state() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.JobService/GetJob |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["state"])'
}
wait_until 10 test "$(job_state train-a)" = JOB_STATE_RUNNING

echo "-- B: SEPARATE -> device isolated by the exec actuator, pod rescheduled, rank moved"
inject worker02 0 4C4BA00C
wait_until 30 recovery_is train-a.2 RECOVERY_STATE_SUCCEEDED
[[ $(recovery train-a.2 'r["strategy"]') == RECOVERY_STRATEGY_POD_RESCHEDULE ]] || fail "B: strategy"
grep -q '"idempotency_key":"train-a.2/1".*"action":"isolate_device".*"node":"worker02","device_id":0' \
  "$WORK/actions.log" || fail "B: no isolate_device for worker02/0"
grep -q '"idempotency_key":"train-a.2/2".*"action":"reschedule_pods".*"ranks":\[2\]' "$WORK/actions.log" ||
  fail "B: no reschedule_pods for rank 2"
isolated=$(grpcurl -plaintext -d '{"name": "worker02"}' "$ADDR" clusterd.v1.ClusterService/GetNode |
  python3 -c 'import json,sys; print([d.get("id", 0) for d in json.load(sys.stdin)["devices"] if d.get("isolated")])')
[[ $isolated == "[0]" ]] || fail "B: isolated devices on worker02: $isolated"
placement=$(grpcurl -plaintext -d '{"id": "train-a"}' "$ADDR" clusterd.v1.JobService/GetJob |
  python3 -c 'import json,sys; print([(p.get("rank",0), p["node"], p.get("device_id",0)) for p in json.load(sys.stdin)["job"]["placement"]])')
expect_contains "$placement" "(2, 'worker03', 0)" "B: rank 2 moved to the spare"
wait_until 10 test "$(job_state train-a)" = JOB_STATE_RUNNING

echo "-- C: an agent that misses its deadline -> escalation"
start_agent train-c --placement 0=worker01:4,1=worker01:5 --ignore RESTART_PROCESSES --step-timeout 2s
inject worker01 4 80E01801
escalated() { [[ $(recovery train-c.1 'r["strategy"]') == RECOVERY_STRATEGY_POD_RESCHEDULE ]]; }
wait_until 30 escalated
[[ $(recovery train-c.1 'r["steps"][0]["state"]') == STEP_STATE_TIMED_OUT ]] || fail "C: first step not timed out"
[[ $(recovery train-c.1 'r["initial_strategy"]') == RECOVERY_STRATEGY_PROCESS_RESTART ]] || fail "C: initial strategy"
wait_until 30 recovery_is train-c.1 RECOVERY_STATE_SUCCEEDED
expect_contains "$(recovery train-c.1 'r["reasons"][-1]')" "timed out" "C: escalation reason"
metrics=$(curl -sf "http://127.0.0.1:$HTTP_PORT/metrics")
grep -q '^clusterd_recovery_escalations_total [1-9]' <<<"$metrics" || fail "C: escalations metric"

echo "-- D: kill -9 of clusterd mid-recovery -> resumed, each action exactly once"
start_agent train-d --placement 0=worker03:4,1=worker03:5 --spares worker03:6 --ignore RESUME
inject worker03 4 4C4BA00C
waiting_for_resume() {
  [[ $(recovery train-d.1 '[s["state"] for s in r["steps"]]') == \
    "['STEP_STATE_SUCCEEDED', 'STEP_STATE_SUCCEEDED', 'STEP_STATE_SUCCEEDED', 'STEP_STATE_RUNNING']" ]]
}
wait_until 30 waiting_for_resume
kill_wait "$CLUSTERD_PID"
kill_wait "${AGENT_PID[train-d]}"
start_clusterd "${CLUSTERD_FLAGS[@]}"
echo "   clusterd restarted; the agent comes back and answers the resent RESUME"
start_agent train-d --no-register --spares worker03:6
wait_until 30 recovery_is train-d.1 RECOVERY_STATE_SUCCEEDED
grep -c "command train-d.1/3 RESUME" "$WORK/agent-train-d.log" | grep -qx 2 ||
  fail "D: RESUME should reach the first agent (ignored) and the second (answered)"
for key in train-d.1/1 train-d.1/2; do
  n=$(grep -c "\"idempotency_key\":\"$key\"" "$WORK/invocations.log")
  [[ $n == 1 ]] || fail "D: actuator ran $key $n times"
done
dups=$(python3 -c '
import collections, json, sys
keys = [json.loads(l)["idempotency_key"] for l in open(sys.argv[1])]
print([k for k, n in collections.Counter(keys).items() if n > 1])' "$WORK/invocations.log")
[[ $dups == "[]" ]] || fail "actions repeated: $dups"

echo "-- ListRecoveries and Watch show them"
listed=$(grpcurl -plaintext -d '{"job": "train-a"}' "$ADDR" clusterd.v1.ClusterService/ListRecoveries)
expect_contains "$listed" '"total_size": 2' "ListRecoveries by job"
events=$(grpcurl -plaintext -max-time 3 -d '{"fromRevision": "0", "jobs": ["train-c"], "types": ["EVENT_TYPE_RECOVERY_FINISHED"]}' \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>&1 || true)
expect_contains "$events" '"id": "train-c.1"' "Watch of recovery events"
echo "recovery e2e: OK"
