#!/usr/bin/env bash
# Return to service, proven (docs/validation.md), end to end: a real clusterd
# with validation on, a sim NodeD with a validation command, real gRPC.
#   - a separated chip released without --force is VALIDATING (still
#     separated) until NodeD's checks pass, then back in service;
#   - a failing command keeps the chip out, its output kept as evidence;
#   - clusterd kill -9 while a validation runs: the new clusterd asks again
#     with the same id, NodeD does not run it twice, and it passes.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
CTL=("$BIN/clusterctl" --server "$ADDR")
on_failure() { tail_logs 30 "$WORK/clusterd.log" "$WORK/noded-worker01.log"; }

# The command NodeD runs: waits for $WORK/go (a slow burn-in the test lets
# finish), prints $WORK/verdict and exits with its first word's status.
cat >"$WORK/commands.json" <<JSON
{"commands": [{"name": "loopback", "argv": ["/bin/sh", "-c",
  "while [ ! -f $WORK/go ]; do sleep 0.05; done; cat $WORK/verdict; exit \$(head -c 1 $WORK/verdict)"],
  "timeout_seconds": 120}]}
JSON
echo "0 link status: UP" >"$WORK/verdict"
touch "$WORK/go"

CLUSTERD_FLAGS=(--validation-enabled true --validation-stable-window 1s --validation-timeout 5m
  --separation-threshold 2 --separation-settle 0s)
start_clusterd "${CLUSTERD_FLAGS[@]}"
start_sim_noded worker01 --validation-commands-file "$WORK/commands.json"
wait_ready "${NODED_PORT[worker01]}"
connected() { grpcurl -plaintext -d '{"name": "worker01"}' "$ADDR" clusterd.v1.ClusterService/GetNode | grep -q '"connected": true'; }
wait_until 30 connected

# device DEV FIELD: a field of the device in GetNode (python's repr; "" when unset).
device() {
  grpcurl -plaintext -d '{"name": "worker01"}' "$ADDR" clusterd.v1.ClusterService/GetNode | python3 -c '
import json, sys
for d in json.load(sys.stdin).get("devices", []):
    if d.get("id", 0) == int(sys.argv[1]):
        print(d.get(sys.argv[2], ""))' "$1" "$2"
}
# validation DEV FIELD: a field of the device's newest validation.
validation() {
  grpcurl -plaintext -d "{\"node\": \"worker01\", \"deviceId\": $1}" "$ADDR" \
    clusterd.v1.ClusterService/ListValidations | python3 -c '
import json, sys
v = json.load(sys.stdin).get("validations", [])
print(json.dumps(v[0].get(sys.argv[1], "")) if v else "")' "$2"
}
# active DEV: the chip has an active 80E01801.
active() {
  grpcurl -plaintext -d '{"activeOnly": true, "node": "worker01"}' "$ADDR" clusterd.v1.ClusterService/ListFaults |
    python3 -c '
import json, sys
sys.exit(0 if any(f["code"] == "80E01801" and f.get("device_id") == int(sys.argv[1])
                  for f in json.load(sys.stdin).get("faults", [])) else 1)' "$1"
}
inactive() { ! active "$1"; }
is_separated() { [[ $(device "$1" separated) == True ]]; }
# separate DEV: two faults raised and cleared on the chip (threshold 2, no settle).
separate() {
  local i
  for i in 1 2; do
    inject_sim_fault worker01 "$1" 80E01801 raise
    wait_until 30 active "$1"
    inject_sim_fault worker01 "$1" 80E01801 clear
    wait_until 30 inactive "$1"
  done
  wait_until 30 is_separated "$1"
}
state_is() { [[ $(validation "$1" state) == "\"VALIDATION_STATE_$2\"" ]]; }

echo "-- a separated chip released without --force is VALIDATING, then passes and returns"
separate 3
"${CTL[@]}" release worker01 3 --reason "module reseated" --actor alice >"$WORK/release.out"
expect_contains "$(cat "$WORK/release.out")" "validating" "release without --force"
[[ $(device 3 separated) == True ]] || fail "the chip left separation before its validation"
wait_until 60 state_is 3 PASSED
[[ $(device 3 separated) == "" ]] || fail "a passed chip is still separated: $(device 3 separated)"
expect_contains "$(validation 3 trigger)" "operator" "trigger"
expect_contains "$("${CTL[@]}" get validations --node worker01)" "PASSED" "get validations"

echo "-- a failing validation command keeps the chip out, its output as evidence"
echo "3 link status: DOWN on port 7" >"$WORK/verdict"
separate 5
"${CTL[@]}" release worker01 5 --reason "try it" >/dev/null
wait_until 60 state_is 5 FAILED
[[ $(device 5 separated) == True ]] || fail "a chip that failed its validation is back in service"
checks=$(validation 5 checks)
expect_contains "$checks" "link status: DOWN on port 7" "evidence"
expect_contains "$checks" '"exit_code": 3' "exit code"
expect_contains "$("${CTL[@]}" describe node worker01)" "link status: DOWN on port 7" "describe node evidence"

echo "-- clusterd kill -9 mid-validation: resumed with the same id, run once"
echo "0 link status: UP" >"$WORK/verdict"
rm -f "$WORK/go"
separate 6
"${CTL[@]}" release worker01 6 --reason "again" >/dev/null
wait_until 30 state_is 6 RUNNING
id=$(validation 6 id)
asked() { grep -c "validation ${id//\"/} asked" "$WORK/noded-worker01.log"; }
kill_wait "$CLUSTERD_PID"
start_clusterd "${CLUSTERD_FLAGS[@]}"
wait_until 30 connected
resent() { curl -sf "http://127.0.0.1:${NODED_PORT[worker01]}/metrics" | awk '/^noded_validation_duplicates /{exit !($2 >= 1)}'; }
wait_until 30 resent
touch "$WORK/go"
wait_until 60 state_is 6 PASSED
[[ $(validation 6 id) == "$id" ]] || fail "a new validation instead of the resumed $id: $(validation 6 id)"
[[ $(device 6 separated) == "" ]] || fail "the resumed validation passed but the chip is still separated"
echo "PASS"
