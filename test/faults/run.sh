#!/usr/bin/env bash
# The fault-injection suite: real clusterd and noded processes, real gRPC,
# real RocksDB, and the faults they must survive -- kill -9 of clusterd under
# load, kill -9 of noded, a wiped noded state directory, a network partition
# (network namespaces), a full disk (tmpfs), file-descriptor exhaustion,
# Connect streams that never say hello and hostile agents (a progress flood,
# inventory churn). build/test-bin/fault_driver generates
# the load and checks, independently of clusterd's own counters, that every
# acknowledged change is stored exactly once and that Watch has no gap or
# duplicate (see test/faults/fault_driver.cc).
#
# Usage: test/faults/run.sh [CASE ...]   (default: every case)
# Cases: checker_detects_loss kill_clusterd kill_noded wiped_state partition disk_full fd_exhaustion
#        helloless hostile_progress hostile_inventory
# Needs root for the partition (ip netns) and disk (tmpfs) cases; without it
# they are skipped with a message. FAULTS_SEED fixes the random kill points.
# Prints one line per case and exits non-zero if any case failed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"
export PATH="${GOPATH:-$HOME/go}/bin:$PATH"

CLUSTERD="$ROOT/build/bin/clusterd"
NODED="$ROOT/build/bin/noded"
DRIVER="$ROOT/build/test-bin/fault_driver"
for bin in "$CLUSTERD" "$NODED" "$DRIVER"; do
  [[ -x $bin ]] || { echo "faults: $bin is missing: build first (scripts/build.sh)" >&2; exit 1; }
done
for tool in grpcurl curl python3; do
  command -v "$tool" >/dev/null || { echo "faults: $tool is missing (scripts/deps.sh installs it)" >&2; exit 1; }
done

SEED="${FAULTS_SEED:-$RANDOM}"
LOG_LEVEL="${FAULTS_LOG_LEVEL:-warn}"  # of clusterd and noded, in each case's work dir
RANDOM=$SEED
SUITE_WORK=$(mktemp -d /tmp/clusterd-faults-XXXXXX)
ALL_CASES=(checker_detects_loss kill_clusterd kill_noded wiped_state partition disk_full fd_exhaustion helloless
  hostile_progress hostile_inventory)
CASES=("$@")
(( ${#CASES[@]} )) || CASES=("${ALL_CASES[@]}")

# ---- helpers shared by the cases (each case runs in its own subshell) ----

# Processes, namespaces and mounts a case created; its EXIT trap removes them.
CASE_PIDS=()
CASE_NETNS=()
CASE_MOUNTS=()
case_cleanup() {
  local pid ns m
  for pid in "${CASE_PIDS[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${CASE_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${CASE_NETNS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  for m in "${CASE_MOUNTS[@]}"; do umount -l "$m" 2>/dev/null || true; done
}

# random_ms LO HI: sleeps a random time in [LO, HI] ms -- the moment of a
# fault, never a wait for something to happen.
random_sleep() { local ms=$(( $1 + RANDOM % ($2 - $1 + 1) )); sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"; }

alive() { kill -0 "$1" 2>/dev/null; }

# start_clusterd DIR [FLAG...]: starts clusterd on $GRPC_ADDR / $HTTP_ADDR
# (fixed for the case, so agents reconnect to the same place) in $NETNS_EXEC.
start_clusterd() {
  local dir=$1; shift
  $NETNS_EXEC "$CLUSTERD" --listen "$GRPC_ADDR" --insecure --http-listen "$HTTP_ADDR" --data-dir "$dir" --log-level "$LOG_LEVEL" \
    "$@" >>"$W/clusterd.log" 2>&1 &
  CLUSTERD_PID=$!
  CASE_PIDS+=("$CLUSTERD_PID")
  wait_until 30 clusterd_ready || { tail -20 "$W/clusterd.log" >&2; fail "clusterd did not become ready"; }
}
clusterd_ready() { alive "$CLUSTERD_PID" && $NETNS_EXEC curl -sf --max-time 2 "http://$HTTP_ADDR/readyz" >/dev/null; }
kill9_clusterd() { kill -9 "$CLUSTERD_PID" 2>/dev/null || true; wait "$CLUSTERD_PID" 2>/dev/null || true; }

grpc() { $NETNS_EXEC grpcurl -plaintext -connect-timeout 2 -max-time 5 ${2:+-d "$2"} "$GRPC_ADDR" "$1"; }

# The driver's progress file: "total transitions+reports acknowledged".
progress() { cut -d' ' -f1 "$W/progress" 2>/dev/null || echo 0; }
progressed_past() { alive "$DRIVER_PID" && (( $(progress) > $1 )); }
# wait_ingest N: the driver has N more acknowledgements than now (it is
# running against the current clusterd).
wait_ingest() {
  local base; base=$(progress)
  wait_until 60 progressed_past $((base + $1)) || driver_died_or "no ingest progress for 60 s"
}
driver_died_or() {
  if ! alive "$DRIVER_PID"; then
    tail -30 "$W/driver.out" >&2
    fail "the driver stopped early"
  fi
  tail -20 "$W/clusterd.log" >&2
  fail "$1"
}
start_driver() {
  $NETNS_DRIVER "$DRIVER" --target "$GRPC_ADDR" --stop-file "$W/stop" --progress-file "$W/progress" \
    --seed $((SEED + RANDOM)) "$@" >"$W/driver.out" 2>&1 &
  DRIVER_PID=$!
  CASE_PIDS+=("$DRIVER_PID")
}
# finish_driver: stops new load, waits for every acknowledgement and the
# checker's verdict; prints the verdict line.
finish_driver() {
  touch "$W/stop"
  local rc=0
  wait "$DRIVER_PID" || rc=$?
  if (( rc != 0 )); then
    grep -E 'VIOLATION|DEADLINE|FAILED' "$W/driver.out" | head -20 >&2 || tail -20 "$W/driver.out" >&2
    fail "checker (exit $rc)"
  fi
  CHECK_LINE=$(tail -1 "$W/driver.out")
}

# noded helpers: one noded per case, node name $NODE, HTTP on $NODED_HTTP.
start_noded() {
  "$NODED" --server "$GRPC_ADDR" --node-name "$NODE" --http-listen "127.0.0.1:$NODED_PORT" --state-dir "$1" \
    --accelerator sim --sim-devices 8 --kmsg-path "" --poll-interval 100ms --heartbeat-interval 500ms \
    --log-level "$LOG_LEVEL" >>"$W/noded.log" 2>&1 &
  NODED_PID=$!
  CASE_PIDS+=("$NODED_PID")
  wait_until 30 noded_connected || {
    alive "$CLUSTERD_PID" || { tail -5 "$W/clusterd.log" >&2; fail "clusterd died (noded $NODE could not connect)"; }
    tail -20 "$W/noded.log" >&2
    fail "noded did not connect"
  }
}
noded_metric() { curl -sf --max-time 2 "http://127.0.0.1:$NODED_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# Connected: the stream got its Welcome, so clusterd stored this epoch's Hello.
noded_connected() { [[ "$(noded_metric noded_stream_connected)" == 1 ]]; }
kill9_noded() { kill -9 "$NODED_PID" 2>/dev/null || true; wait "$NODED_PID" 2>/dev/null || true; }
inject() {
  local code
  code=$(curl -s -o "$W/inject.out" -w '%{http_code}' --max-time 5 -X POST "http://127.0.0.1:$NODED_PORT/v1/sim/faults" -d "$1")
  [[ $code == 200 ]] || fail "inject $1: HTTP $code $(cat "$W/inject.out")"
}

# fault_states NODE: "id count state" per fault of NODE, from ListFaults.
fault_states() {
  grpc clusterd.v1.ClusterService/ListFaults "{\"node\": \"$1\", \"pageSize\": 1000}" | python3 -c '
import json, sys
for f in json.load(sys.stdin).get("faults", []):
    print(f["id"], f.get("count", "0"), f["state"])'
}
# raised_events: "id" once per FAULT_RAISED in the whole Watch history.
raised_events() {
  $NETNS_EXEC grpcurl -plaintext -max-time 3 -d '{"types": ["EVENT_TYPE_FAULT_RAISED"]}' "$GRPC_ADDR" \
    clusterd.v1.ClusterService/Watch 2>/dev/null | python3 -c '
import json, sys
dec, buf = json.JSONDecoder(), sys.stdin.read()
i = 0
while True:
    while i < len(buf) and buf[i].isspace(): i += 1
    if i >= len(buf): break
    obj, i = dec.raw_decode(buf, i)
    for e in obj.get("events", []): print(e["fault"]["id"])' || true
}
node_health() { grpc clusterd.v1.ClusterService/GetNode "{\"name\": \"$1\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["node"].get("health",""))'; }

# Uses a clusterd flag only if this build has it (the suite runs against
# older builds too, where the case then shows what is missing).
# The whole help first: `grep -q` in a pipe would stop reading early, clusterd
# would get SIGPIPE, and pipefail would turn a match into a failure.
has_flag() {
  local help
  help=$("$CLUSTERD" --help 2>&1 || true)
  grep -q -- "$1 " <<<"$help"
}

# ---- the cases ----

# kill -9 of clusterd at random points while 4 agents and 2 external
# reporters write and a watcher follows; the driver checks every
# acknowledged change is stored once and Watch has no gap or duplicate.
case_kill_clusterd() {
  GRPC_ADDR=127.0.0.1:$(free_port); HTTP_ADDR=127.0.0.1:$(free_port)
  start_clusterd "$W/data"
  start_driver --agents 4 --reporters 2 --rate 150 --report-rate 25 --deadline 150
  local kills=$((5 + RANDOM % 4)) k
  for ((k = 1; k <= kills; k++)); do
    wait_ingest 50
    random_sleep 50 1500
    kill9_clusterd
    alive "$DRIVER_PID" || driver_died_or "driver exited"
    start_clusterd "$W/data"
  done
  wait_ingest 50
  finish_driver
  SUMMARY="$kills kills of clusterd under load; $CHECK_LINE"
}

# kill -9 of noded at random points after injecting new faults, in three
# kinds of round: (pending) clusterd frozen with SIGSTOP, so the faults are in
# noded's outbox and unacknowledged at the kill; (delivered) the faults are
# stored before the kill, so the restart must not raise them again; (racing)
# the kill comes 0-300 ms after the injection, when a fault may not have been
# recorded yet. Pending and delivered faults arrive exactly once, racing ones
# at most once.
case_kill_noded() {
  GRPC_ADDR=127.0.0.1:$(free_port); HTTP_ADDR=127.0.0.1:$(free_port); NODED_PORT=$(free_port)
  NODE=fi-noded
  start_clusterd "$W/data"
  start_noded "$W/noded"
  local rounds=6 r i kind exact=() racing=() round_ids base
  for ((r = 1; r <= rounds; r++)); do
    kind=$(( r % 3 ))  # 0 pending, 1 delivered, 2 racing
    round_ids=()
    if (( kind == 0 )); then
      kill -STOP "$CLUSTERD_PID"
      # Frozen clusterd: nothing is acknowledged, so the gauge only grows.
      base=$(noded_metric noded_outbox_pending)
    fi
    for ((i = 0; i < 3; i++)); do
      local dev=$(( (r * 3 + i) % 8 )) code
      code=$(printf 'FIN%02d%02d' "$r" "$i")
      inject "{\"device\": $dev, \"code\": \"$code\", \"state\": \"raise\"}"
      round_ids+=("$NODE/$dev/accelerator/$code")
    done
    case $kind in
      0) pending_grew() { (( $(noded_metric noded_outbox_pending) >= base + 3 )); }
         wait_until 20 pending_grew || fail "noded did not record 3 injected faults in its outbox"
         exact+=("${round_ids[@]}") ;;
      1) stored() { local st id; st=$(fault_states "$NODE") || return 1
                    for id in "${round_ids[@]}"; do grep -q "^$id 1 FAULT_STATE_ACTIVE" <<<"$st" || return 1; done; }
         wait_until 20 stored || fail "3 injected faults did not reach clusterd"
         exact+=("${round_ids[@]}") ;;
      2) racing+=("${round_ids[@]}") ;;
    esac
    random_sleep 0 300
    kill9_noded
    (( kind == 0 )) && kill -CONT "$CLUSTERD_PID"
    start_noded "$W/noded"
  done
  all_arrived() {
    local states id; states=$(fault_states "$NODE") || return 1
    for id in "${exact[@]}"; do grep -q "^$id 1 " <<<"$states" || return 1; done
  }
  wait_until 60 all_arrived || { fault_states "$NODE" >&2; fail "not every fault recorded before a kill arrived with count 1"; }
  drained() { [[ "$(noded_metric noded_outbox_pending)" == 0 ]]; }
  wait_until 30 drained || fail "noded's outbox did not drain"
  local events id n states arrived_racing=0
  states=$(fault_states "$NODE")
  for id in "${racing[@]}"; do
    n=$(grep "^$id " <<<"$states" | cut -d' ' -f2 || true)
    [[ -z $n || $n == 1 ]] || fail "$id (killed while racing): count $n, expected at most 1"
    [[ -n $n ]] && arrived_racing=$((arrived_racing + 1))
  done
  events=$(raised_events)
  for id in "${exact[@]}"; do
    n=$(grep -cxF "$id" <<<"$events" || true)
    [[ $n == 1 ]] || fail "$id: $n FAULT_RAISED events in the Watch history, expected 1"
  done
  for id in "${racing[@]}"; do
    n=$(grep -cxF "$id" <<<"$events" || true)
    (( n <= 1 )) || fail "$id: $n FAULT_RAISED events in the Watch history, expected at most 1"
  done
  alive "$CLUSTERD_PID" || fail "clusterd died"
  SUMMARY="$rounds kills of noded: ${#exact[@]} faults pending or delivered at the kill each stored once, $arrived_racing of ${#racing[@]} racing the kill stored once, none twice"
}

# A wiped noded state directory: its epochs start again at 1. (a) after one
# incarnation's transitions were applied; (b) after 9 restarts, when clusterd
# has evicted epoch 1. A fault raised after the wipe must reach clusterd and
# clusterd must stay up.
case_wiped_state() {
  GRPC_ADDR=127.0.0.1:$(free_port); HTTP_ADDR=127.0.0.1:$(free_port); NODED_PORT=$(free_port)
  start_clusterd "$W/data"

  # (a) the first incarnation applies 12 transitions in epoch 1, then the
  # wipe: the new incarnation's first sequence numbers are all "applied".
  NODE=fi-wipe-a
  start_noded "$W/noded-a"
  local d
  for d in 0 1 2 3 4 5; do
    # A poll must see each state: wait until each is stored.
    state_a() { fault_states "$NODE" | grep -q "^$NODE/$d/accelerator/FIWIPE$d 1 FAULT_STATE_$1"; }
    inject "{\"device\": $d, \"code\": \"FIWIPE$d\", \"state\": \"raise\"}"
    wait_until 30 state_a ACTIVE || fail "(a) the first incarnation's raise did not arrive"
    inject "{\"device\": $d, \"code\": \"FIWIPE$d\", \"state\": \"clear\"}"
    wait_until 30 state_a CLEARED || fail "(a) the first incarnation's clear did not arrive"
  done
  kill9_noded
  rm -rf "$W/noded-a"
  start_noded "$W/noded-a"
  inject '{"device": 3, "code": "80E01801", "state": "raise"}'
  # arrived DEVICE: the fault raised after the wipe is stored and counts.
  arrived() {
    fault_states "$NODE" | grep -q "^$NODE/$1/accelerator/80E01801 1 FAULT_STATE_ACTIVE" &&
      [[ "$(node_health "$NODE")" == HEALTH_UNHEALTHY ]]
  }
  wait_until 30 arrived 3 || {
    alive "$CLUSTERD_PID" || { tail -5 "$W/clusterd.log" >&2; fail "(a) clusterd died after the wipe"; }
    fault_states "$NODE" >&2
    fail "(a) a fault raised after the state dir was wiped never reached clusterd (dropped as already applied)"
  }
  kill9_noded

  # (b) 9 restarts (epochs 1..10; clusterd keeps 8), then the wipe.
  NODE=fi-wipe-b
  local k
  for ((k = 1; k <= 10; k++)); do
    start_noded "$W/noded-b"
    [[ "$(noded_metric noded_agent_epoch)" == "$k" ]] || fail "(b) expected epoch $k, noded says $(noded_metric noded_agent_epoch)"
    if (( k == 1 )); then
      inject '{"device": 4, "code": "FIWIPE3", "state": "raise"}'
      stored_b() { fault_states "$NODE" | grep -q "^$NODE/4/accelerator/FIWIPE3 1 FAULT_STATE_ACTIVE"; }
      wait_until 30 stored_b || fail "(b) the first incarnation's fault did not arrive"
    fi
    kill9_noded
  done
  rm -rf "$W/noded-b"
  start_noded "$W/noded-b"
  alive "$CLUSTERD_PID" || { tail -5 "$W/clusterd.log" >&2; fail "(b) clusterd died when the wiped noded said hello"; }
  inject '{"device": 5, "code": "80E01801", "state": "raise"}'
  wait_until 30 arrived 5 || {
    alive "$CLUSTERD_PID" || { tail -5 "$W/clusterd.log" >&2; fail "(b) clusterd died after the wipe"; }
    fault_states "$NODE" >&2
    fail "(b) a fault raised after the wipe (following 9 restarts) never reached clusterd"
  }
  alive "$CLUSTERD_PID" || fail "(b) clusterd died"
  SUMMARY="wipe after 1 incarnation and after 10 epochs: the new faults arrived, node UNHEALTHY, clusterd up"
}

# A partition between two network namespaces (veth, 10.200.0.0/24 only
# inside them): the link is cut (down; netem 100% loss or, without netem,
# blackhole routes both ways) for 1-8 s while agents and
# reporters write, then healed; every change is delivered exactly once.
case_partition() {
  if ! ip netns add "fi-probe-$$" 2>/dev/null; then
    SKIPPED="ip netns is not permitted here (needs root / CAP_SYS_ADMIN)"
    return 0
  fi
  ip netns del "fi-probe-$$"
  local srv="fi-srv-$$" cli="fi-cli-$$" vs="fis$$" vc="fic$$"
  vs=${vs:0:15}; vc=${vc:0:15}
  ip netns add "$srv"; CASE_NETNS+=("$srv")
  ip netns add "$cli"; CASE_NETNS+=("$cli")
  ip link add "$vs" netns "$srv" type veth peer name "$vc" netns "$cli"
  ip -n "$srv" addr add 10.200.0.1/24 dev "$vs"
  ip -n "$cli" addr add 10.200.0.2/24 dev "$vc"
  for ns in "$srv" "$cli"; do ip -n "$ns" link set lo up; done
  ip -n "$srv" link set "$vs" up
  ip -n "$cli" link set "$vc" up
  # netem may be missing (a kernel without sch_netem): blackhole routes then.
  local netem=0
  if ip netns exec "$cli" tc qdisc add dev lo root netem loss 0% 2>/dev/null; then
    netem=1
    ip netns exec "$cli" tc qdisc del dev lo root
  fi
  NETNS_EXEC="ip netns exec $srv"
  NETNS_DRIVER="ip netns exec $cli"
  GRPC_ADDR=10.200.0.1:8899; HTTP_ADDR=10.200.0.1:11253
  start_clusterd "$W/data"
  start_driver --agents 3 --reporters 2 --rate 150 --report-rate 25 --deadline 150
  local cuts=3 k hold how=()
  for ((k = 1; k <= cuts; k++)); do
    wait_ingest 50
    random_sleep 100 800
    if (( k % 2 )); then
      ip -n "$cli" link set "$vc" down; how+=("link down")
    elif (( netem )); then
      ip netns exec "$cli" tc qdisc add dev "$vc" root netem loss 100%; how+=("netem loss 100%")
    else
      # Both directions silently dropped (no netem in this kernel).
      ip -n "$cli" route add blackhole 10.200.0.1/32
      ip -n "$srv" route add blackhole 10.200.0.2/32
      how+=("blackhole routes")
    fi
    # The second cut outlasts the agents' stall timeout (5 s): they give up
    # on the stream, reconnect and resend; the others heal under live streams.
    if (( k == 2 )); then hold=$((6000 + RANDOM % 2000)); else hold=$((1000 + RANDOM % 3000)); fi
    random_sleep "$hold" "$hold"
    if (( k % 2 )); then
      ip -n "$cli" link set "$vc" up
    elif (( netem )); then
      ip netns exec "$cli" tc qdisc del dev "$vc" root
    else
      ip -n "$cli" route del blackhole 10.200.0.1/32
      ip -n "$srv" route del blackhole 10.200.0.2/32
    fi
    how[-1]="${how[-1]} ${hold}ms"
  done
  wait_ingest 50
  finish_driver
  alive "$CLUSTERD_PID" || fail "clusterd died"
  SUMMARY="$cuts cuts ($(IFS=,; echo "${how[*]}")); $CHECK_LINE"
}

# A small tmpfs data directory filled up under load, then freed: writes are
# refused (UNAVAILABLE) while reads keep working and clusterd stays up;
# writes resume by themselves after freeing; nothing acknowledged is lost.
# Then a restart on a full disk must start and serve reads.
case_disk_full() {
  mkdir -p "$W/disk"
  if ! mount -t tmpfs -o size=192m tmpfs "$W/disk" 2>/dev/null; then
    SKIPPED="cannot mount a tmpfs here (needs root)"
    return 0
  fi
  CASE_MOUNTS+=("$W/disk")
  GRPC_ADDR=127.0.0.1:$(free_port); HTTP_ADDR=127.0.0.1:$(free_port)
  local flags=()
  # A 32 MiB free-space reserve on the 192 MiB disk, if this build has one.
  has_flag --min-free-bytes && flags+=(--min-free-bytes 33554432)
  start_clusterd "$W/disk/data" "${flags[@]}"
  start_driver --agents 2 --reporters 1 --rate 100 --report-rate 20 --deadline 200 --stall-ms 3000
  wait_ingest 100
  fill_disk() {  # fill_disk MIB_LEFT: a filler file leaves about MIB_LEFT MiB free (dd stops at ENOSPC)
    local avail_mib=$(( $(stat -f -c '%a * %S' "$W/disk") / 1048576 ))
    (( avail_mib > $1 )) || return 0
    dd if=/dev/zero of="$W/disk/filler.$1" bs=1M count=$((avail_mib - $1)) status=none 2>/dev/null || true
  }
  # First inside the reserve (8 MiB left), then completely.
  fill_disk 8
  write_refused() {
    local out
    out=$(grpc clusterd.v1.FaultService/Report \
      '{"reporter": "fi-disk", "id": "probe", "node": "fi-node-0", "code": "FIDISK", "action": "TRANSITION_ACTION_RAISE"}' 2>&1) && return 1
    grep -q "Unavailable" <<<"$out"
  }
  wait_until 30 write_refused || {
    alive "$CLUSTERD_PID" || { tail -5 "$W/clusterd.log" >&2; fail "clusterd exited when the disk filled"; }
    fail "with the disk full a write was not refused with UNAVAILABLE"
  }
  fill_disk 0
  alive "$CLUSTERD_PID" || { tail -5 "$W/clusterd.log" >&2; fail "clusterd exited when the disk filled"; }
  write_refused || fail "with the disk full a write was not refused with UNAVAILABLE"
  grpc clusterd.v1.ClusterService/GetSummary >/dev/null || fail "GetSummary failed while the disk is full"
  grpc clusterd.v1.ClusterService/ListFaults '{"pageSize": 10}' >/dev/null || fail "ListFaults failed while the disk is full"
  local rev_full; rev_full=$(grpc clusterd.v1.ClusterService/GetSummary | python3 -c 'import json,sys; print(json.load(sys.stdin).get("revision","0"))')
  local watched  # grpcurl ends the live stream at -max-time, with an error status
  watched=$($NETNS_EXEC grpcurl -plaintext -max-time 2 -d "{\"fromRevision\": \"$((rev_full > 5 ? rev_full - 5 : 0))\"}" \
    "$GRPC_ADDR" clusterd.v1.ClusterService/Watch 2>/dev/null || true)
  grep -q "\"revision\": \"$rev_full\"" <<<"$watched" || fail "Watch failed while the disk is full"
  # Free the space: writes resume by themselves.
  rm -f "$W/disk"/filler.*
  write_accepted() {
    grpc clusterd.v1.FaultService/Report \
      '{"reporter": "fi-disk", "id": "probe", "node": "fi-node-0", "code": "FIDISK", "action": "TRANSITION_ACTION_RAISE"}' >/dev/null 2>&1
  }
  wait_until 60 write_accepted || fail "writes did not resume after the space was freed"
  wait_ingest 100
  alive "$CLUSTERD_PID" || fail "clusterd died"
  # The driver's reporter and the probe both write; stop the driver first.
  finish_driver
  # A restart on a full disk: clusterd starts and serves reads.
  kill9_clusterd
  fill_disk 0
  $CLUSTERD --listen "$GRPC_ADDR" --insecure --http-listen "$HTTP_ADDR" --data-dir "$W/disk/data" --log-level warn "${flags[@]}" \
    >>"$W/clusterd.log" 2>&1 &
  CLUSTERD_PID=$!; CASE_PIDS+=("$CLUSTERD_PID")
  serves_reads() { alive "$CLUSTERD_PID" && grpc clusterd.v1.ClusterService/GetSummary >/dev/null 2>&1; }
  wait_until 30 serves_reads || { tail -5 "$W/clusterd.log" >&2; fail "clusterd did not start and serve reads on a full disk"; }
  rm -f "$W/disk"/filler.*
  wait_until 60 write_accepted || fail "writes did not resume after a restart on a full disk once space was freed"
  SUMMARY="disk filled under load: writes refused, reads and Watch served, writes resumed after freeing; restart on a full disk served reads; $CHECK_LINE"
}

# clusterd under `ulimit -n 1024` with 1,100 slow HTTP connections to its
# HTTP port: new gRPC connections are still accepted, during and after, and
# /readyz never says 200 while gRPC cannot accept.
case_fd_exhaustion() {
  GRPC_ADDR=127.0.0.1:$(free_port); HTTP_ADDR=127.0.0.1:$(free_port)
  (ulimit -n 1024; exec "$CLUSTERD" --listen "$GRPC_ADDR" --insecure --http-listen "$HTTP_ADDR" --data-dir "$W/data" \
    --log-level warn >>"$W/clusterd.log" 2>&1) &
  CLUSTERD_PID=$!; CASE_PIDS+=("$CLUSTERD_PID")
  wait_until 30 clusterd_ready || fail "clusterd did not become ready"
  python3 - "${HTTP_ADDR%:*}" "${HTTP_ADDR#*:}" 1100 "$W/slow.opened" "$W/slow.release" >"$W/slow.log" 2>&1 <<'EOF' &
import socket, sys, time, os
host, port, n, opened, release = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
socks, failed = [], 0
give_up = time.time() + 30  # a server that stopped accepting leaves connects hanging
for _ in range(n):
    if time.time() > give_up:
        failed += 1
        continue
    s = socket.socket()
    s.settimeout(1.0)
    try:
        s.connect((host, port))
        s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        socks.append(s)
    except OSError:
        failed += 1
        s.close()
with open(opened, "w") as f:
    f.write(f"{len(socks)} {failed}\n")
deadline = time.time() + 120
while not os.path.exists(release) and time.time() < deadline:
    time.sleep(0.1)
for s in socks:
    s.close()
EOF
  local slow=$!; CASE_PIDS+=("$slow")
  wait_until 120 test -s "$W/slow.opened" || fail "the slow clients did not finish connecting"
  alive "$CLUSTERD_PID" || fail "clusterd died under 1,100 HTTP connections"
  grpc_accepts() { grpc clusterd.v1.ClusterService/GetSummary >/dev/null 2>&1; }
  readyz_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$HTTP_ADDR/readyz" || true; }
  if ! wait_until 20 grpc_accepts; then
    local code; code=$(readyz_code)
    [[ $code == 200 ]] && fail "gRPC refuses new connections while /readyz says 200 (slow HTTP connections held)"
    fail "gRPC refuses new connections while 1,100 slow HTTP connections are held (/readyz: $code)"
  fi
  local held_code; held_code=$(readyz_code)
  touch "$W/slow.release"; wait "$slow" || true
  if ! wait_until 30 grpc_accepts; then
    local code; code=$(readyz_code)
    [[ $code == 200 ]] && fail "gRPC accept loop dead after the slow connections closed while /readyz says 200"
    fail "gRPC accept loop dead after the slow connections closed (/readyz: $code)"
  fi
  wait_until 30 clusterd_ready || fail "/readyz not 200 once the slow connections closed although gRPC accepts"
  SUMMARY="1,100 slow HTTP connections under ulimit -n 1024 ($(cut -d' ' -f1 "$W/slow.opened") opened): gRPC accepted during (/readyz $held_code) and after, /readyz 200 after"
}

# Many Connect streams that never send a Hello must not lock a real agent out.
case_helloless() {
  GRPC_ADDR=127.0.0.1:$(free_port); HTTP_ADDR=127.0.0.1:$(free_port)
  local flags=(--max-streams 256)
  has_flag --hello-timeout && flags+=(--hello-timeout 1s)
  start_clusterd "$W/data" "${flags[@]}"
  local out rc=0
  out=$($NETNS_DRIVER "$DRIVER" --mode helloless --target "$GRPC_ADDR" --streams 400 --channels 8 \
    --agent-deadline 20 2>&1) || rc=$?
  alive "$CLUSTERD_PID" || fail "clusterd died"
  (( rc == 0 )) || fail "$(tail -1 <<<"$out")$(has_flag --hello-timeout || echo ' (this clusterd has no --hello-timeout)')"
  local metrics ended refused
  metrics=$(curl -sf --max-time 2 "http://$HTTP_ADDR/metrics" || true)
  ended=$(awk '$1 == "clusterd_agent_hello_timeouts_total" {print $2}' <<<"$metrics")
  refused=$(awk '$1 ~ /^clusterd_agent_streams_rejected(_per_peer)?_total$/ {n += $2} END {print n + 0}' <<<"$metrics")
  SUMMARY="${flags[*]}: $(tail -1 <<<"$out" | sed 's/^ok: //'); clusterd ended ${ended:-?} for want of a hello and refused $refused"
}

# clusterd's own metric, from its /metrics page (read whole: see has_flag).
clusterd_metric() {
  local page
  page=$($NETNS_EXEC curl -sf --max-time 5 "http://$HTTP_ADDR/metrics" || true)
  awk -v m="$1" '$1 == m {print $2}' <<<"$page"
}
rss_mib() { awk '$1 == "VmRSS:" {printf "%d", $2 / 1024}' "/proc/$1/status"; }

# Issue 51 item 1: one node's agent floods progress reports for its own ranks
# (1,000 steps ahead of the others) while another node's agent reports its
# ranks honestly, for 10 s with a 3 s hang timeout. Each sender has its own
# budget: none of the honest node's reports is refused (clusterd logs each
# stream's first refusal: the hostile one's must be there, the honest one's
# not) and its ranks get no JOB_HANG.
case_hostile_progress() {
  GRPC_ADDR=127.0.0.1:$(free_port); HTTP_ADDR=127.0.0.1:$(free_port)
  start_clusterd "$W/data"
  local out rc=0
  out=$($NETNS_DRIVER "$DRIVER" --mode progress-flood --target "$GRPC_ADDR" --node-prefix hp --seconds 10 \
    --hang-timeout 3 2>&1) || rc=$?
  alive "$CLUSTERD_PID" || fail "clusterd died under the progress flood"
  (( rc == 0 )) || fail "$(tail -1 <<<"$out")"
  grep -q "job progress from node hp-hostile refused" "$W/clusterd.log" ||
    fail "the flood was never refused (or its refusal not logged): $(tail -1 <<<"$out")"
  local honest_refused
  honest_refused=$(grep -c "job progress from node hp-honest refused" "$W/clusterd.log" || true)
  (( honest_refused == 0 )) || fail "the honest node's reports were refused: $(grep -m1 'node hp-honest refused' "$W/clusterd.log")"
  local hangs
  hangs=$(grpc clusterd.v1.ClusterService/ListFaults '{"node": "hp-honest", "pageSize": 1000}' | python3 -c '
import json, sys
print(sum(1 for f in json.load(sys.stdin).get("faults", []) if f["code"] == "JOB_HANG"))')
  (( hangs == 0 )) || fail "JOB_HANG raised on $hangs of the honest node's ranks"
  SUMMARY="$(tail -1 <<<"$out" | sed 's/^ok: //;s/; the hostile stream.*//'); refused: $(clusterd_metric 'clusterd_progress_refused_total{reason="rate"}') (all the hostile node's; 0 of the honest node's), taken: $(clusterd_metric clusterd_progress_reports_total); JOB_HANG on the honest node: 0"
}

# Issue 51 item 2: an agent alternating two large valid PodDevicesUpdates
# (about 140 KB each) as fast as its stream takes them, 5,000 of them.
# Updates that come faster than inventory_update_interval replace the one
# waiting (counted); then again with coalescing off (each update stored, a
# NODE_UPDATED event of its own), where the watch cache's watch_cache_bytes
# alone bounds what is kept. clusterd's RSS stays bounded either way (it
# reached 1.49 GB before both).
HOSTILE_RSS_LIMIT_MIB=${HOSTILE_RSS_LIMIT_MIB:-400}              # coalescing on (the default)
HOSTILE_RSS_LIMIT_UNCOALESCED_MIB=${HOSTILE_RSS_LIMIT_UNCOALESCED_MIB:-800}  # every update stored
# inventory_churn LIMIT_MIB [CLUSTERD_FLAG...]: one run on a fresh clusterd;
# appends its figures to SUMMARY.
inventory_churn() {
  local limit=$1; shift
  GRPC_ADDR=127.0.0.1:$(free_port); HTTP_ADDR=127.0.0.1:$(free_port)
  local data="$W/data-$#"
  start_clusterd "$data" "$@"
  local before after coalesced cache rc=0
  before=$(rss_mib "$CLUSTERD_PID")
  rm -f "$W/stop"
  $NETNS_DRIVER "$DRIVER" --mode inventory-churn --target "$GRPC_ADDR" --node-prefix hi --updates 5000 \
    --stop-file "$W/stop" --deadline 300 >"$W/driver.out" 2>&1 &
  DRIVER_PID=$!
  CASE_PIDS+=("$DRIVER_PID")
  read_all() { grep -q '^ok:' "$W/driver.out" || ! alive "$DRIVER_PID"; }
  wait_until 300 read_all || fail "the updates were not all read within 300 s"
  if ! grep -q '^ok:' "$W/driver.out"; then
    # Its last line says why; a driver that died without one gets its exit
    # status named (over 128: the signal's number + 128).
    local drc=0
    wait "$DRIVER_PID" || drc=$?
    fail "the driver ended (exit status $drc, clusterd $(alive "$CLUSTERD_PID" && echo alive || echo dead)): $(tail -1 "$W/driver.out")"
  fi
  alive "$CLUSTERD_PID" || fail "clusterd died under the inventory churn"
  after=$(rss_mib "$CLUSTERD_PID")
  coalesced=$(clusterd_metric clusterd_agent_inventory_updates_coalesced_total)
  cache=$(clusterd_metric clusterd_watch_cache_bytes)
  touch "$W/stop"
  wait "$DRIVER_PID" || rc=$?
  (( rc == 0 )) || fail "$(tail -1 "$W/driver.out")"
  (( after <= limit )) || fail "clusterd's RSS grew from $before MiB to $after MiB (limit $limit MiB; ${*:-defaults})"
  SUMMARY+="${SUMMARY:+; }${*:-defaults}: RSS $before -> $after MiB (limit $limit), ${coalesced:-0} coalesced, watch cache ${cache:-?} bytes"
  COALESCED=${coalesced:-0}
  kill -TERM "$CLUSTERD_PID" 2>/dev/null || true
  wait "$CLUSTERD_PID" 2>/dev/null || true
}
case_hostile_inventory() {
  inventory_churn "$HOSTILE_RSS_LIMIT_MIB"
  (( COALESCED > 0 )) || fail "no inventory update was coalesced (clusterd_agent_inventory_updates_coalesced_total)"
  local sent; sent=$(sed -n 's/^ok: //p' "$W/driver.out")
  inventory_churn "$HOSTILE_RSS_LIMIT_UNCOALESCED_MIB" --inventory-update-interval 0s
  SUMMARY="$sent; $SUMMARY"
}

# The checker is not vacuous: clusterd loses its data directory under load
# (kill -9, wipe, restart), and the driver must report the loss.
case_checker_detects_loss() {
  GRPC_ADDR=127.0.0.1:$(free_port); HTTP_ADDR=127.0.0.1:$(free_port)
  start_clusterd "$W/data"
  start_driver --agents 2 --reporters 1 --rate 100 --report-rate 20 --deadline 60
  wait_ingest 200
  kill9_clusterd
  rm -rf "$W/data"
  start_clusterd "$W/data"
  wait_ingest 50
  touch "$W/stop"
  local rc=0
  wait "$DRIVER_PID" || rc=$?
  (( rc == 1 )) || { tail -20 "$W/driver.out" >&2; fail "the checker did not report the lost data (exit $rc, expected 1)"; }
  local n; n=$(grep -c '^VIOLATION' "$W/driver.out" || true)
  SUMMARY="a wiped data dir under load: the checker reported $n violations, e.g. $( (grep -m1 'Welcome says' "$W/driver.out" || grep -m1 '^VIOLATION' "$W/driver.out") | cut -c1-110)"
}

# ---- runner ----

run_case() {
  local name=$1 start rc=0
  start=$(date +%s)
  local cw="$SUITE_WORK/$name"
  mkdir -p "$cw"
  # In the background and waited for: a subshell on the left of || would
  # run without errexit.
  (
    W=$cw NETNS_EXEC="" NETNS_DRIVER="" SUMMARY="" SKIPPED="" CHECK_LINE=""
    trap case_cleanup EXIT
    trap 'exit 143' TERM INT
    "case_$name"
    if [[ -n $SKIPPED ]]; then echo "SKIP $SKIPPED" >"$cw/result"; else echo "$SUMMARY" >"$cw/result"; fi
  ) >"$cw/case.out" 2>&1 &
  CASE_PID=$!
  wait "$CASE_PID" || rc=$?
  CASE_PID=""
  local secs=$(( $(date +%s) - start ))
  if (( rc == 0 )) && grep -q '^SKIP ' "$cw/result" 2>/dev/null; then
    printf 'faults: %-20s SKIP (%ds): %s\n' "$name" "$secs" "$(sed 's/^SKIP //' "$cw/result")"
  elif (( rc == 0 )); then
    printf 'faults: %-20s ok   (%ds): %s\n' "$name" "$secs" "$(cat "$cw/result")"
  else
    printf 'faults: %-20s FAIL (%ds): %s\n' "$name" "$secs" "$(grep -h '^FAIL: ' "$cw/case.out" | tail -1 | sed 's/^FAIL: //')"
    sed 's/^/    /' "$cw/case.out" | tail -40
    FAILED+=("$name")
  fi
}

FAILED=()
CASE_PID=""
# Interrupted: the running case removes its processes, namespaces and mounts.
trap '[[ -n $CASE_PID ]] && { kill -TERM "$CASE_PID" 2>/dev/null; wait "$CASE_PID" 2>/dev/null; }; exit 130' INT TERM
SUITE_START=$(date +%s)
echo "faults: seed $SEED (FAULTS_SEED=$SEED reproduces the kill points), work dir $SUITE_WORK"
for c in "${CASES[@]}"; do
  declare -F "case_$c" >/dev/null || { echo "faults: unknown case $c (cases: ${ALL_CASES[*]})" >&2; exit 2; }
  run_case "$c"
done
echo "faults: ${#CASES[@]} cases in $(( $(date +%s) - SUITE_START ))s, ${#FAILED[@]} failed${FAILED[*]:+: ${FAILED[*]}}"
if (( ${#FAILED[@]} )); then
  echo "faults: logs kept in $SUITE_WORK" >&2
  exit 1
fi
rm -rf "$SUITE_WORK"
