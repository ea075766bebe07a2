#!/usr/bin/env bash
# NodeD end to end with a real clusterd: an injected fault appears in
# ListFaults and in a Watch; clusterd down -> noded keeps faults -> clusterd up
# -> every fault arrives once; kill -9 noded after a raise -> restart -> the
# fault arrives once; the sim endpoint refuses bad bodies.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
# Its state (the outbox) in $WORK/noded-worker01 survives a restart; its HTTP port is new.
start_noded() {
  start_sim_noded worker01
  wait_ready "${NODED_PORT[worker01]}"
}
inject() {
  curl -s -o "$WORK/inject.out" -w '%{http_code}' -X POST "http://127.0.0.1:${NODED_PORT[worker01]}/v1/sim/faults" -d "$1"
}
faults() { grpcurl -plaintext -d "$1" "$ADDR" clusterd.v1.ClusterService/ListFaults; }
connected() { grpcurl -plaintext -d '{"name": "worker01"}' "$ADDR" clusterd.v1.ClusterService/GetNode | grep -q '"connected": true'; }
# fault_count ID: the stored raise count of one fault ("" when absent).
fault_count() {
  faults '{"node": "worker01", "pageSize": 1000}' | python3 -c '
import json, sys
want = sys.argv[1]
for f in json.load(sys.stdin).get("faults", []):
    if f["id"] == want:
        print(f.get("count", "0"), f["state"])' "$1"
}
pending() { curl -sf "http://127.0.0.1:${NODED_PORT[worker01]}/metrics" | awk '/^noded_outbox_pending /{print $2}'; }
on_failure() { tail_logs 20 "$WORK/clusterd.log" "$WORK/noded-worker01.log"; }

start_clusterd
start_noded
wait_until 30 connected
echo "-- noded registered with 8 simulated devices"
devices=$(grpcurl -plaintext -d '{"name": "worker01"}' "$ADDR" clusterd.v1.ClusterService/GetNode |
  python3 -c 'import json,sys; print(sum(d["model"] == "SIM-910B" for d in json.load(sys.stdin)["devices"]))')
[[ $devices == 8 ]] || fail "expected 8 simulated devices, got $devices"

echo "-- an injected fault appears in ListFaults and in a Watch"
REV=$(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary | python3 -c 'import json,sys; print(json.load(sys.stdin).get("revision","0"))')
[[ $(inject '{"device": 3, "code": "80E01801", "state": "raise"}') == 200 ]] || fail "inject: $(cat "$WORK/inject.out")"
raised() { [[ "$(fault_count worker01/3/accelerator/80E01801)" == "1 FAULT_STATE_ACTIVE" ]]; }
wait_until 30 raised
watch=$(grpcurl -plaintext -max-time 3 -d "{\"fromRevision\": \"$REV\", \"types\": [\"EVENT_TYPE_FAULT_RAISED\"]}" \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>&1 || true)
expect_contains "$watch" '"id": "worker01/3/accelerator/80E01801"' "Watch"
expect_contains "$watch" '"level": "FAULT_LEVEL_RESTART_BUSINESS"' "Watch level"

echo "-- the sim endpoint refuses bad bodies"
for body in 'not json' '{"code": "80E01801"}' '{"device": 99, "code": "80E01801", "state": "raise"}' \
            '{"device": 1, "code": "bad code!", "state": "raise"}' '{"device": -1, "code": "X", "state": "raise"}' \
            '{"device": 1, "code": "X", "state": "maybe"}' '{"device": 1, "code": "X", "state": "raise", "extra": 1}' \
            '{"device": 4294967299, "code": "80E01801", "state": "raise"}' '{"device": 1e30, "code": "X", "state": "raise"}'; do
  code=$(inject "$body")
  [[ $code == 400 ]] || fail "body $body: HTTP $code"
  grep -q '"error"' "$WORK/inject.out" || fail "body $body: no reason given"
done

echo "-- clusterd down: noded keeps its faults; clusterd up: each arrives once"
kill_wait "$CLUSTERD_PID"
[[ $(inject '{"device": 5, "code": "80E01801", "state": "raise"}') == 200 ]]
[[ $(inject '{"code": "NODE_DISK_FULL", "state": "raise"}') == 200 ]]
[[ $(inject '{"device": 3, "code": "80E01801", "state": "clear"}') == 200 ]]
three_pending() { [[ "$(pending)" -ge 3 ]]; }
wait_until 30 three_pending
start_clusterd
arrived() {
  [[ "$(fault_count worker01/5/accelerator/80E01801)" == "1 FAULT_STATE_ACTIVE" ]] &&
  [[ "$(fault_count worker01/-/disk/NODE_DISK_FULL)" == "1 FAULT_STATE_ACTIVE" ]] &&
  [[ "$(fault_count worker01/3/accelerator/80E01801)" == "1 FAULT_STATE_CLEARED" ]]
}
wait_until 60 arrived
drained() { [[ "$(pending)" == 0 ]]; }
wait_until 30 drained

echo "-- kill -9 noded right after a raise: after restart the fault arrives once"
kill_wait "$CLUSTERD_PID"
[[ $(inject '{"device": 6, "code": "80E01801", "state": "raise"}') == 200 ]]
one_pending() { [[ "$(pending)" -ge 1 ]]; }
wait_until 30 one_pending
kill_wait "${NODED_PID[worker01]}"
start_clusterd
start_noded
# The simulator's state is memory: after the restart device 6 is healthy again,
# so the fault arrives once and is then cleared.
stored_once() { [[ "$(fault_count worker01/6/accelerator/80E01801)" =~ ^1\  ]]; }
wait_until 60 stored_once
wait_until 30 drained
[[ "$(fault_count worker01/5/accelerator/80E01801)" =~ ^1\  ]] || fail "device 5 fault duplicated"
history=$(grpcurl -plaintext -max-time 3 -d '{"types": ["EVENT_TYPE_FAULT_RAISED"]}' "$ADDR" \
  clusterd.v1.ClusterService/Watch 2>&1 || true)
[[ $(grep -c '"id": "worker01/6/accelerator/80E01801"' <<<"$history") == 1 ]] || fail "device 6 raised more than once"

echo "-- the software chain: a driver installed but not loaded is a node fault, cleared once loaded"
# worker02 reads a host tree of its own (--root): the driver's version.info
# and a /dev without davinci_manager.
CHAIN=$WORK/chain-root
mkdir -p "$CHAIN/usr/local/Ascend/driver" "$CHAIN/dev"
printf 'Version=24.1.rc3\n' >"$CHAIN/usr/local/Ascend/driver/version.info"
: >"$CHAIN/dev/null"
start_sim_noded worker02 --root "$CHAIN" --mounts-file /proc/mounts --chain-interval 1s
wait_ready "${NODED_PORT[worker02]}"
node2() { grpcurl -plaintext -d '{"name": "worker02"}' "$ADDR" clusterd.v1.ClusterService/GetNode; }
chain_fault() { grpcurl -plaintext -d '{"node": "worker02"}' "$ADDR" clusterd.v1.ClusterService/ListFaults |
  python3 -c '
import json, sys
for f in json.load(sys.stdin).get("faults", []):
    if f["id"] == "worker02/-/accelerator/NODE_CHAIN_DRIVER_NOT_LOADED":
        print(f["state"], f["level"])'; }
not_loaded() { [[ "$(chain_fault)" == "FAULT_STATE_ACTIVE FAULT_LEVEL_SEPARATE" ]]; }
wait_until 30 not_loaded
chain=$(node2 | python3 -c '
import json, sys
for l in json.load(sys.stdin)["node"]["inventory"]["chain"]:
    print(l["name"], l.get("state"), l.get("version", ""))')
expect_contains "$chain" "driver CHAIN_LINK_STATE_OK 24.1.rc3" "GetNode chain"
expect_contains "$chain" "device_files CHAIN_LINK_STATE_BROKEN" "GetNode chain"
: >"$CHAIN/dev/davinci_manager"
for i in 0 1 2 3 4 5 6 7; do : >"$CHAIN/dev/davinci$i"; done
loaded() { [[ "$(chain_fault)" == "FAULT_STATE_CLEARED FAULT_LEVEL_SEPARATE" ]]; }
wait_until 30 loaded
# The chain in ClusterD follows without a reconnect (ChainUpdate on the open stream).
device_files() { node2 | python3 -c '
import json, sys
print([l.get("state") for l in json.load(sys.stdin)["node"]["inventory"]["chain"] if l["name"] == "device_files"])'; }
files_ok() { [[ "$(device_files)" == "['CHAIN_LINK_STATE_OK']" ]]; }
wait_until 30 files_ok
! grep -q "ended" "$WORK/noded-worker02.log" || fail "worker02's stream ended: $(grep ended "$WORK/noded-worker02.log" | head -1)"
term_wait "${NODED_PID[worker02]}" || fail "noded worker02 exit $?"

echo "-- SIGTERM stops both cleanly"
term_wait "${NODED_PID[worker01]}" || fail "noded exit $?"
term_wait "$CLUSTERD_PID" || fail "clusterd exit $?"
echo "e2e noded: ok"
