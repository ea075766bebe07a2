#!/usr/bin/env bash
# End to end with the real tools: clusterd on free loopback ports, driven with
# grpcurl (reflection, the agent stream, queries, Watch, FaultService, health)
# and curl (HTTP endpoints), then a clean SIGTERM.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"
require_cmd grpcurl

e2e_setup
clusterd_ports
start_clusterd

echo "-- reflection lists every service"
services=$(grpcurl -plaintext "$ADDR" list)
for s in clusterd.v1.ClusterService clusterd.v1.FaultService clusterd.v1.JobService clusterd.v1.AdminService clusterd.v1.NodeAgentService \
         grpc.health.v1.Health; do
  expect_contains "$services" "$s" "grpcurl list"
done

echo "-- health"
expect_contains "$(grpcurl -plaintext "$ADDR" grpc.health.v1.Health/Check)" SERVING "health check"

echo "-- an agent stream: hello, heartbeat, a fault transition"
out=$(grpcurl -plaintext -d @ "$ADDR" clusterd.v1.NodeAgentService/Connect <<'JSON'
{"hello": {"nodeName": "worker01", "bootId": "b1", "agentVersion": "grpcurl", "epoch": "1",
           "labels": {"pool": "train"},
           "inventory": {"devices": [{"id": 0, "vendor": "huawei", "model": "910B3"},
                                     {"id": 3, "vendor": "huawei", "model": "910B3"}]}}}
{"heartbeat": {}}
{"transition": {"id": {"epoch": "1", "seq": "1"}, "action": "TRANSITION_ACTION_RAISE",
                "fault": {"deviceId": 3, "source": "FAULT_SOURCE_ACCELERATOR", "code": "80E01801"}}}
JSON
)
expect_contains "$out" '"welcome"' "Connect welcome"
expect_contains "$out" '"seq": "1"' "Connect ack"

echo "-- queries"
summary=$(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary)
expect_contains "$summary" '"FAULT_LEVEL_RESTART_BUSINESS": 1' "summary levels"
expect_contains "$summary" '"revision": "4"' "summary revision"
node=$(grpcurl -plaintext -d '{"name": "worker01"}' "$ADDR" clusterd.v1.ClusterService/GetNode)
expect_contains "$node" '"health": "HEALTH_UNHEALTHY"' "node health"
expect_contains "$node" '"code": "80E01801"' "node active fault"
faults=$(grpcurl -plaintext -d '{"minLevel": "FAULT_LEVEL_RESTART_REQUEST", "activeOnly": true}' "$ADDR" \
  clusterd.v1.ClusterService/ListFaults)
expect_contains "$faults" '"id": "worker01/3/accelerator/80E01801"' "ListFaults"
nodes=$(grpcurl -plaintext -d '{"labelSelector": "pool=train"}' "$ADDR" clusterd.v1.ClusterService/ListNodes)
expect_contains "$nodes" '"name": "worker01"' "ListNodes by label"

echo "-- external fault report, idempotent"
report='{"reporter": "netprobe", "id": "roce-3", "node": "worker01", "deviceId": 3, "code": "ROCE_LINK_DOWN",
         "level": "FAULT_LEVEL_RESTART_REQUEST", "action": "TRANSITION_ACTION_RAISE"}'
grpcurl -plaintext -d "$report" "$ADDR" clusterd.v1.FaultService/Report >/dev/null
again=$(grpcurl -plaintext -d "$report" "$ADDR" clusterd.v1.FaultService/Report)
expect_contains "$again" '"unchanged": true' "Report idempotent"

echo "-- jobs: the active fault hits rank 1"
grpcurl -plaintext -d '{"job": {"id": "llm-7b", "kind": "JOB_KIND_TRAINING", "placement": [
    {"rank": 0, "node": "worker01", "deviceId": 0}, {"rank": 1, "node": "worker01", "deviceId": 3}],
    "policy": {"holdDown": "1s"}}}' \
  "$ADDR" clusterd.v1.JobService/CreateJob >/dev/null
job=$(grpcurl -plaintext -d '{"id": "llm-7b"}' "$ADDR" clusterd.v1.JobService/GetJob)
expect_contains "$job" '"fault_id": "worker01/3/accelerator/80E01801"' "GetJob impacts"
expect_contains "$(grpcurl -plaintext -d '{"job": "llm-7b"}' "$ADDR" clusterd.v1.ClusterService/ListFaults)" \
  '"code": "80E01801"' "ListFaults by job"

echo "-- recovery: after the hold-down a PROCESS_RESTART waits for the agent; grpcurl acks it"
recovery_running() {
  grpcurl -plaintext -d '{"job": "llm-7b"}' "$ADDR" clusterd.v1.ClusterService/ListRecoveries |
    grep -q '"state": "RECOVERY_STATE_RUNNING"'
}
wait_until 30 recovery_running
attach=$(grpcurl -plaintext -d @ "$ADDR" clusterd.v1.JobService/Attach <<'JSON'
{"hello": {"jobId": "llm-7b", "agent": "grpcurl"}}
{"ack": {"commandId": "llm-7b.1/0", "success": true, "message": "processes restarted"}}
JSON
)
expect_contains "$attach" '"attached"' "Attach answers with the job"
expect_contains "$attach" '"kind": "JOB_COMMAND_RESTART_PROCESSES"' "Attach delivers the command"
recovery=$(grpcurl -plaintext -d '{"id": "llm-7b.1"}' "$ADDR" clusterd.v1.ClusterService/GetRecovery)
expect_contains "$recovery" '"state": "RECOVERY_STATE_SUCCEEDED"' "GetRecovery after the ack"
expect_contains "$recovery" '"message": "processes restarted"' "GetRecovery step message"
unknown=$(grpcurl -plaintext -d '{"hello": {"jobId": "ghost"}}' "$ADDR" clusterd.v1.JobService/Attach 2>&1 || true)
expect_contains "$unknown" "NotFound" "Attach for an unknown job"

echo "-- admin: cordon, manual clear, pause; each is an event"
grpcurl -plaintext -d '{"node": "worker01", "actor": "e2e", "reason": "maintenance"}' "$ADDR" \
  clusterd.v1.AdminService/CordonNode >/dev/null
expect_contains "$(grpcurl -plaintext -d '{"name": "worker01"}' "$ADDR" clusterd.v1.ClusterService/GetNode)" \
  '"cordoned": true' "CordonNode"
grpcurl -plaintext -d '{"recoveryPaused": true, "actor": "e2e", "reason": "test"}' "$ADDR" \
  clusterd.v1.AdminService/SetRecoveryMode >/dev/null
expect_contains "$(grpcurl -plaintext "$ADDR" clusterd.v1.AdminService/GetAdminState)" '"recovery_paused": true' \
  "SetRecoveryMode"
admin_events=$(grpcurl -plaintext -max-time 2 -d '{"types": ["EVENT_TYPE_NODE_CORDONED", "EVENT_TYPE_RECOVERY_MODE_CHANGED"]}' \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>&1 || true)
expect_contains "$admin_events" '"actor": "e2e"' "admin events in Watch"
expect_contains "$admin_events" "EVENT_TYPE_RECOVERY_MODE_CHANGED" "admin events in Watch"

echo "-- watch replays history from a revision"
watch=$(grpcurl -plaintext -max-time 2 -d '{"fromRevision": "1", "types": ["EVENT_TYPE_FAULT_RAISED"]}' "$ADDR" \
  clusterd.v1.ClusterService/Watch 2>&1 || true)
expect_contains "$watch" '"code": "80E01801"' "Watch replay"
expect_contains "$watch" '"code": "ROCE_LINK_DOWN"' "Watch replay (external)"

echo "-- bad input is refused"
bad=$(grpcurl -plaintext -d '{"name": "no such/node"}' "$ADDR" clusterd.v1.ClusterService/GetNode 2>&1 || true)
expect_contains "$bad" "InvalidArgument" "GetNode bad name"
missing=$(grpcurl -plaintext -d '{"name": "ghost"}' "$ADDR" clusterd.v1.ClusterService/GetNode 2>&1 || true)
expect_contains "$missing" "NotFound" "GetNode unknown node"

echo "-- HTTP endpoints"
expect_contains "$(curl -sf "http://127.0.0.1:$HTTP_PORT/healthz")" ok "healthz"
metrics=$(curl -sf "http://127.0.0.1:$HTTP_PORT/metrics")
expect_contains "$metrics" "clusterd_revision " "metrics revision"
expect_contains "$metrics" "clusterd_store_commit_duration_seconds_bucket" "metrics commit histogram"
expect_contains "$metrics" 'clusterd_devices_by_health{health="unhealthy"} 1' "metrics devices by health"
expect_contains "$metrics" 'clusterd_active_faults{level="RESTART_BUSINESS"} 1' "metrics active faults by level"

echo "-- SIGTERM drains and exits 0"
term_wait "$CLUSTERD_PID" || fail "clusterd exited with $?"
echo "e2e grpcurl: ok"
