# Helpers for the shell end-to-end tests and the demo: free ports, starting
# and stopping daemons, waiting on conditions with a deadline.

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_until DEADLINE_SECONDS CMD...: runs CMD until it succeeds or the deadline passes.
wait_until() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) >= deadline )); then echo "timed out waiting for: $*" >&2; return 1; fi
    sleep 0.1
  done
}

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_contains HAYSTACK NEEDLE DESCRIPTION
expect_contains() {
  grep -qF -- "$2" <<<"$1" || { echo "$1" >&2; fail "$3: expected to find '$2'"; }
}

# start_sim_noded NODE: a noded with 8 simulated devices reporting to $ADDR
# ($BIN/noded, state and log under $WORK). The caller declares the
# associative arrays NODED_PORT and NODED_PID and the array PIDS; this sets
# NODED_PORT[NODE] (its HTTP port) and NODED_PID[NODE] and appends to PIDS.
start_sim_noded() {
  NODED_PORT[$1]=$(free_port)
  "$BIN/noded" --server "$ADDR" --node-name "$1" --http-listen "127.0.0.1:${NODED_PORT[$1]}" \
    --state-dir "$WORK/noded-$1" --accelerator sim --sim-devices 8 --kmsg-path "" --poll-interval 200ms \
    --heartbeat-interval 500ms --log-level warn >>"$WORK/noded-$1.log" 2>&1 &
  NODED_PID[$1]=$!
  PIDS+=($!)
}

# inject_sim_fault NODE DEVICE CODE [raise|clear]: through that noded's sim API.
inject_sim_fault() {
  local code
  code=$(curl -s -o "$WORK/inject.out" -w '%{http_code}' -X POST "http://127.0.0.1:${NODED_PORT[$1]}/v1/sim/faults" \
    -d "{\"device\": $2, \"code\": \"$3\", \"state\": \"${4:-raise}\"}")
  [[ $code == 200 ]] || fail "inject on $1: HTTP $code $(cat "$WORK/inject.out")"
}
