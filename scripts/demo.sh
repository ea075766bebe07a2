#!/usr/bin/env bash
# A local cluster on loopback: one clusterd and three noded agents in sim mode
# (mgmt015, worker01, worker02; 8 simulated NPUs each). Injects a fault, shows
# it with grpcurl and a Watch stream, clears it, kill -9s clusterd and shows
# that state and revision survive the restart. Then a training job on worker01
# and worker02 with its recovery agent (build/bin/job-agent): a RESTART_BUSINESS
# fault on one of its devices -> the decision, the agent's acks, the job running
# again; a SEPARATE fault -> the device isolated through the exec actuator, the
# pod rescheduled, the rank moved. Then stops everything.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
source test/e2e/lib.sh

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Installing what is missing and building"
bash scripts/deps.sh
export PATH="${GOPATH:-$HOME/go}/bin:$PATH"
# Only the four binaries the demo runs, not the tests or the benchmark.
bash scripts/build.sh clusterd noded clusterctl job-agent >/dev/null

WORK=$(mktemp -d /tmp/clusterd-demo.XXXXXX)
GRPC_PORT=$(free_port)
HTTP_PORT=$(free_port)
ADDR=127.0.0.1:$GRPC_PORT
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "--- logs"; tail -n 20 "$WORK"/*.log' ERR

# The cluster actuator of this demo: prints the action it was asked for. A real
# one would cordon, taint or call the scheduler, idempotently by key.
cat >"$WORK/actuator.sh" <<EOF
#!/bin/sh
python3 -c 'import json,sys; a=json.load(sys.stdin); print("actuator:", a["action"], a["node"] or "-", a.get("device_id", "-"), "ranks", a["ranks"], "key", a["idempotency_key"])' >>"$WORK/actuator.out"
EOF
chmod +x "$WORK/actuator.sh"

start_clusterd() {
  build/bin/clusterd --listen "$ADDR" --insecure --http-listen "127.0.0.1:$HTTP_PORT" --data-dir "$WORK/clusterd" \
    --actuator exec --actuator-command "$WORK/actuator.sh" --log-level warn >>"$WORK/clusterd.log" 2>&1 &
  CLUSTERD_PID=$!
  PIDS+=("$CLUSTERD_PID")
  wait_until 30 curl -sf "http://127.0.0.1:$HTTP_PORT/readyz"
}

step "Starting clusterd on $ADDR (HTTP :$HTTP_PORT)"
start_clusterd
echo "live status page: http://127.0.0.1:$HTTP_PORT/ (open it in a browser to follow the demo)"

declare -A NODED_HTTP
for node in mgmt015 worker01 worker02; do
  port=$(free_port)
  NODED_HTTP[$node]=$port
  build/bin/noded --server "$ADDR" --node-name "$node" --http-listen "127.0.0.1:$port" \
    --state-dir "$WORK/noded-$node" --accelerator sim --sim-devices 8 --root / --kmsg-path "" \
    --labels "role=$([[ $node == mgmt* ]] && echo mgmt || echo worker)" \
    --log-level warn >>"$WORK/noded-$node.log" 2>&1 &
  PIDS+=("$!")
  echo "noded $node (HTTP :$port)"
done

registered() {
  grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary | grep -q '"connected_agents": 3'
}
wait_until 60 registered
step "All three agents registered"
grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/ListNodes | grep -E '"name"|"health"|"connected"'

REV=$(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary | python3 -c 'import json,sys; print(json.load(sys.stdin).get("revision","0"))')
step "Watching fault events after revision $REV (in the background)"
grpcurl -plaintext -max-time 10 -d "{\"fromRevision\": \"$REV\", \"types\": [\"EVENT_TYPE_FAULT_RAISED\", \"EVENT_TYPE_FAULT_CLEARED\"]}" \
  "$ADDR" clusterd.v1.ClusterService/Watch >"$WORK/watch.out" 2>&1 &
WATCH_PID=$!

step "Injecting fault 80E01801 on worker01 device 3"
curl -sf -X POST "http://127.0.0.1:${NODED_HTTP[worker01]}/v1/sim/faults" \
  -d '{"device": 3, "code": "80E01801", "state": "raise"}'
fault_visible() {
  grpcurl -plaintext -d '{"node": "worker01", "activeOnly": true}' "$ADDR" \
    clusterd.v1.ClusterService/ListFaults | grep -q 80E01801
}
wait_until 30 fault_visible

step "GetSummary"
grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary

step "GetNode worker01 (health and the active fault)"
grpcurl -plaintext -d '{"name": "worker01"}' "$ADDR" clusterd.v1.ClusterService/GetNode |
  python3 -c 'import json,sys; r=json.load(sys.stdin); n=r["node"]
print("node", n["name"], n["health"], "connected" if n.get("connected") else "")
[print("  device", d.get("id",0), d["model"], d["health"]) for d in r["devices"]]
[print("  fault", f["id"], f["level"], f["state"]) for f in r.get("active_faults",[])]'

step "ListFaults worker01 (the fault and its level)"
grpcurl -plaintext -d '{"node": "worker01"}' "$ADDR" clusterd.v1.ClusterService/ListFaults

step "Clearing the fault"
curl -sf -X POST "http://127.0.0.1:${NODED_HTTP[worker01]}/v1/sim/faults" \
  -d '{"device": 3, "code": "80E01801", "state": "clear"}'
fault_cleared() { ! fault_visible; }
wait_until 30 fault_cleared
watch_has_clear() { grep -q FAULT_CLEARED "$WORK/watch.out"; }
wait_until 30 watch_has_clear
kill "$WATCH_PID" 2>/dev/null || true
step "What the Watch stream received"
grep -E '"type"|"code"|"level"|"state"' "$WORK/watch.out"

BEFORE=$(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary)
REV_BEFORE=$(grep -o '"revision": "[0-9]*"' <<<"$BEFORE")
step "kill -9 clusterd (at $REV_BEFORE) and restart it"
kill -9 "$CLUSTERD_PID"
wait "$CLUSTERD_PID" 2>/dev/null || true
start_clusterd
AFTER=$(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary)
REV_AFTER=$(grep -o '"revision": "[0-9]*"' <<<"$AFTER")
echo "revision before: $REV_BEFORE  after restart: $REV_AFTER"
[[ "$REV_BEFORE" == "$REV_AFTER" ]] || fail "revision changed across the restart"
grpcurl -plaintext -d '{"node": "worker01"}' "$ADDR" clusterd.v1.ClusterService/ListFaults | grep -E '"id"|"state"|"count"'
wait_until 30 registered
echo "the three agents reconnected"

step "A training job on worker01 and worker02, with its recovery agent"
build/bin/job-agent --server "$ADDR" --job llama-pretrain --hold-down 1s --step-ms 100 \
  --placement 0=worker01:0,1=worker01:1,2=worker01:2,3=worker01:3,4=worker02:0,5=worker02:1,6=worker02:2,7=worker02:3 \
  --spares worker02:6,worker02:7 --log "$WORK/agent.log" >"$WORK/agent.out" 2>&1 &
PIDS+=("$!")
wait_until 30 grep -q attached "$WORK/agent.log"
build/bin/clusterctl --server "$ADDR" get jobs

recovery_done() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/GetRecovery |
    grep -q '"state": "RECOVERY_STATE_SUCCEEDED"'
}
step "Fault 80E01801 (RESTART_BUSINESS) on worker02 device 1, where rank 5 runs"
curl -sf -X POST "http://127.0.0.1:${NODED_HTTP[worker02]}/v1/sim/faults" \
  -d '{"device": 1, "code": "80E01801", "state": "raise"}'
echo
wait_until 30 recovery_done llama-pretrain.1
echo "the decision, its step and the agent's answer:"
build/bin/clusterctl --server "$ADDR" describe recovery llama-pretrain.1
echo "the agent's log:"
grep -E "command|->" "$WORK/agent.log"

step "Fault 4C4BA00C (SEPARATE) on worker01 device 2, where rank 2 runs"
curl -sf -X POST "http://127.0.0.1:${NODED_HTTP[worker01]}/v1/sim/faults" \
  -d '{"device": 2, "code": "4C4BA00C", "state": "raise"}'
echo
wait_until 30 recovery_done llama-pretrain.2
echo "what the exec actuator was asked to do:"
cat "$WORK/actuator.out"
echo "the agent's log:"
grep -E "command llama-pretrain.2|->" "$WORK/agent.log" | tail -4
job_running() { build/bin/clusterctl --server "$ADDR" get jobs | grep -q 'llama-pretrain.*RUNNING'; }
wait_until 10 job_running
step "Recoveries, and the job running again with rank 2 moved"
build/bin/clusterctl --server "$ADDR" get recoveries || true
build/bin/clusterctl --server "$ADDR" describe job llama-pretrain | sed -n '/Placement/,/^$/p'

step "Stopping everything"
for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
PIDS=()
echo "demo: ok"
