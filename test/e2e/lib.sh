# The shell library of the end-to-end tests (test/e2e, test/k8s through
# test/k8s/lib.sh, test/faults) and the demos: the preamble a test shares
# (work directory, process list, cleanup and diagnostics at exit), free ports,
# waiting on a condition with a deadline, starting clusterd and sim noded
# agents. Source it from bash, then:
#
#   e2e_setup                       # WORK, PIDS, the EXIT trap
#   clusterd_ports                  # GRPC_PORT, HTTP_PORT, ADDR
#   start_clusterd --log-level info # $BIN/clusterd on them; ready on return
#   start_sim_noded worker01        # a noded with 8 simulated devices
#   wait_until 30 connected         # a command that succeeds once it holds
#
# At exit (any exit: the end, a failed command under set -e, fail) the trap
# calls the script's on_failure function first when the status is not 0
# (logs to show), then e2e_cleanup: every process in PIDS is killed (kill -9)
# and reaped, the script's on_cleanup function runs (k8s_stop, ...), and WORK
# is removed (KEEP_WORK=1 keeps it and says where).
#
# Variables: ROOT (the source tree, unless the script set it) and BIN (its
# build/bin: the binaries under test); $GOPATH/bin (grpcurl, helm, ...) goes
# first on PATH.

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BIN=$ROOT/build/bin
export PATH="${GOPATH:-$HOME/go}/bin:$PATH"
[[ -v PIDS ]] || PIDS=()

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_contains HAYSTACK NEEDLE DESCRIPTION
expect_contains() {
  grep -qF -- "$2" <<<"$1" || { echo "$1" >&2; fail "$3: expected to find '$2'"; }
}

# require_cmd CMD...: fails unless each CMD is on PATH.
require_cmd() {
  local c
  for c in "$@"; do command -v "$c" >/dev/null || fail "$c not installed (run scripts/deps.sh)"; done
}

# require_built NAME...: fails unless each $BIN/NAME was built.
require_built() {
  local b
  for b in "$@"; do [[ -x $BIN/$b ]] || fail "$BIN/$b missing (build first: scripts/build.sh)"; done
}

# go_tool NAME PACKAGE VERSION [GO-INSTALL-FLAGS...]: installs PACKAGE@VERSION into
# $TOOLS_BIN (default $GOPATH/bin) unless the binary there was built from that version.
go_tool() {
  local name=$1 pkg=$2 version=$3 dir=${TOOLS_BIN:-${GOPATH:-$HOME/go}/bin} have
  shift 3
  have=$(go version -m "$dir/$name" 2>/dev/null | awk '$1 == "mod" {print $3; exit}' || true)
  [[ $have == "$version" ]] && return 0
  echo "-- installing $name $version into $dir (first run only; can take minutes)"
  GOBIN="$dir" go install "$@" "$pkg@$version" || fail "go install $pkg@$version"
}

# build_mcclient DIR: builds test/e2e/mindcluster-client (MindCluster's clients
# from stubs generated now from proto/mindcluster, with protoc-gen-go and
# protoc-gen-go-grpc at the versions test/e2e/api_tools_test.sh pins) into DIR;
# the binary is DIR/mcclient. Needs go and protoc.
build_mcclient() {
  local dir=$1 src=$ROOT/test/e2e/mindcluster-client
  export GOPATH="${GOPATH:-$HOME/go}"
  go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go v1.36.12
  go_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.1
  mkdir -p "$dir"
  cp "$src/main.go" "$src/om.go" "$src/go.mod" "$src/go.sum" "$dir/"
  bash "$src/generate.sh" "$dir" || fail "generating the Go stubs of proto/mindcluster"
  (cd "$dir" && go vet ./... && go build -buildvcs=false -o "$dir/mcclient" .) >"$dir/gobuild.log" 2>&1 ||
    fail "building test/e2e/mindcluster-client: $(cat "$dir/gobuild.log")"
}

# ---- ports and waits --------------------------------------------------------

# free_port: a loopback TCP port that was free a moment ago and that this script
# has not handed out before. The kernel readily gives a just-released port out
# again, so without the record two calls can return the same port (a clusterd once
# got the port the API server had been given a moment later). The record is a file
# named after the script's shell ($$ is the same in every $(...) subshell);
# e2e_cleanup removes it.
FREE_PORTS_GIVEN=${FREE_PORTS_GIVEN:-${TMPDIR:-/tmp}/clusterd-ports.$$}
free_port() {
  python3 - "$FREE_PORTS_GIVEN" <<'PY'
import socket, sys
path = sys.argv[1]
try:
    with open(path) as f:
        given = set(f.read().split())
except OSError:
    given = set()
for _ in range(1000):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if str(port) not in given:
        break
else:
    sys.exit("free_port: no port that was not handed out already")
with open(path, "a") as f:
    f.write("%d\n" % port)
print(port)
PY
}

# clusterd_ports: GRPC_PORT, HTTP_PORT and ADDR (127.0.0.1:GRPC_PORT) for a clusterd.
clusterd_ports() {
  GRPC_PORT=$(free_port)
  HTTP_PORT=$(free_port)
  ADDR=127.0.0.1:$GRPC_PORT
}

# wait_until SECONDS CMD...: runs CMD (output discarded) every 0.1 s until it
# succeeds; returns 1, and says so, once SECONDS have passed (a failure bound).
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "timed out waiting for: $*" >&2
      return 1
    fi
    sleep 0.1
  done
}

# wait_ready PORT [SECONDS]: until http://127.0.0.1:PORT/readyz answers 2xx (default 30 s).
wait_ready() { wait_until "${2:-30}" curl -sf "http://127.0.0.1:$1/readyz"; }

# ---- processes --------------------------------------------------------------

# start_bg VAR LOG CMD...: runs CMD in the background, its output appended to
# LOG; sets VAR (a name: CLUSTERD_PID, NODED_PID[worker01]; - for none) to its
# pid and adds it to PIDS.
start_bg() {
  local var=$1 log=$2
  shift 2
  "$@" >>"$log" 2>&1 &
  PIDS+=("$!")
  [[ $var == - ]] || printf -v "$var" '%s' "$!"
}

# e2e_forget PID: takes PID off PIDS (it has been reaped).
e2e_forget() {
  local p keep=()
  for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# kill_wait PID: kill -9, then waits for the process (reaped: no "Killed"
# line) and takes it off PIDS.
kill_wait() {
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  e2e_forget "$1"
}

# term_wait PID [SECONDS]: SIGTERM, then SIGKILL if it is still there after
# SECONDS (default 20); reaps it and takes it off PIDS. Returns its exit
# status: term_wait "$CLUSTERD_PID" || fail "clusterd exited with $?".
term_wait() {
  local pid=$1 deadline=$((SECONDS + ${2:-20})) rc=0
  if kill "$pid" 2>/dev/null; then
    while kill -0 "$pid" 2>/dev/null; do
      if ((SECONDS >= deadline)); then kill -9 "$pid" 2>/dev/null || true; fi
      sleep 0.05
    done
  fi
  wait "$pid" 2>/dev/null || rc=$?
  e2e_forget "$pid"
  return "$rc"
}

# ---- the preamble -----------------------------------------------------------

# e2e_setup: WORK (a fresh directory), PIDS (empty), and the EXIT trap
# (e2e_exit) described at the top.
e2e_setup() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/clusterd-e2e.XXXXXX")
  PIDS=()
  trap e2e_exit EXIT
}

# e2e_cleanup: kills and reaps every process in PIDS (SIGCONT first, for a
# stopped one), runs on_cleanup when the script defines it, removes WORK
# (KEEP_WORK=1: keeps it). Safe to call twice.
e2e_cleanup() {
  local p
  for p in "${PIDS[@]}"; do
    kill -CONT "$p" 2>/dev/null || true
    kill -9 "$p" 2>/dev/null || true
  done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
  if declare -F on_cleanup >/dev/null; then on_cleanup || true; fi
  rm -f "$FREE_PORTS_GIVEN"
  if [[ -n ${WORK-} && -d $WORK ]]; then
    if [[ -n ${KEEP_WORK-} ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
  fi
}

e2e_exit() {
  local rc=$?
  set +eu
  if ((rc != 0)) && declare -F on_failure >/dev/null; then on_failure; fi
  e2e_cleanup
  exit "$rc"
}

# tail_logs N FILE...: the last N lines of each FILE that exists, under its name.
tail_logs() {
  local n=$1 f
  shift
  for f in "$@"; do [[ -f $f ]] && { echo "--- $(basename "$f")"; tail -n "$n" "$f"; }; done
  return 0
}

# ---- clusterd and noded -----------------------------------------------------

# start_clusterd [FLAG...]: $BIN/clusterd on $ADDR and $HTTP_PORT (clusterd_ports),
# plaintext, its data in $WORK/clusterd, its log appended to $WORK/clusterd.log,
# --log-level warn unless a FLAG sets it; FLAGs are added. Sets CLUSTERD_PID (in
# PIDS) and returns once /readyz answers (30 s at most).
start_clusterd() {
  local level=(--log-level warn) f
  for f in "$@"; do [[ $f == --log-level || $f == --log-level=* ]] && level=(); done
  start_bg CLUSTERD_PID "$WORK/clusterd.log" "$BIN/clusterd" --listen "$ADDR" --insecure \
    --http-listen "127.0.0.1:$HTTP_PORT" --data-dir "$WORK/clusterd" "${level[@]}" "$@"
  wait_ready "$HTTP_PORT"
}

# start_sim_noded NODE [FLAG...]: a noded with 8 simulated devices reporting to $ADDR
# ($BIN/noded, state in $WORK/noded-NODE, log $WORK/noded-NODE.log), on a new HTTP
# port; FLAGs are added. The caller declares the associative arrays NODED_PORT and
# NODED_PID; this sets NODED_PORT[NODE] and NODED_PID[NODE] (in PIDS). It does not
# wait: wait_ready "${NODED_PORT[NODE]}" does.
start_sim_noded() {
  local node=$1
  shift
  NODED_PORT[$node]=$(free_port)
  start_bg "NODED_PID[$node]" "$WORK/noded-$node.log" "$BIN/noded" --server "$ADDR" --node-name "$node" \
    --http-listen "127.0.0.1:${NODED_PORT[$node]}" --state-dir "$WORK/noded-$node" --accelerator sim \
    --sim-devices 8 --kmsg-path "" --poll-interval 200ms --heartbeat-interval 500ms --log-level warn "$@"
}

# start_nvml_noded NODE [FLAG...]: a noded with the nvml backend on the tests' fake
# libnvidia-ml.so.1 (build/test-lib/fake_nvml: 8 H100s), scripted through $WORK/nvml-NODE (the
# fake's control file: lines "xid DEV N", "set DEV FIELD VALUE") and following the kernel log
# $WORK/kmsg-NODE; as start_sim_noded otherwise.
start_nvml_noded() {
  local node=$1 lib=$ROOT/build/test-lib/fake_nvml/libnvidia-ml.so.1
  shift
  [[ -f $lib ]] || fail "$lib is not built"
  : >"$WORK/nvml-$node"
  : >"$WORK/kmsg-$node"
  NODED_PORT[$node]=$(free_port)
  FAKE_NVML_DEVICES=8 FAKE_NVML_CONTROL="$WORK/nvml-$node" start_bg "NODED_PID[$node]" "$WORK/noded-$node.log" \
    "$BIN/noded" --server "$ADDR" --node-name "$node" --http-listen "127.0.0.1:${NODED_PORT[$node]}" \
    --state-dir "$WORK/noded-$node" --accelerator nvml --nvml-path "$lib" --kmsg-path "$WORK/kmsg-$node" \
    --poll-interval 200ms --heartbeat-interval 500ms --log-level info "$@"
}

# start_fake_kubelet NODE: the kubelet's pod-resources API for NODE's noded (test-bin/fake_kubelet)
# on $WORK/kubelet-NODE.sock, answering with $WORK/pods-NODE.json as it is at each call (the
# API's JSON: {"podResources": [{"namespace", "name", "containers": [{"name", "devices":
# [{"resourceName", "deviceIds": [...]}]}]}]}); no file yet: no pods. Give the noded
# --pod-resources-socket "$WORK/kubelet-NODE.sock".
start_fake_kubelet() {
  local node=$1
  [[ -x $ROOT/build/test-bin/fake_kubelet ]] || fail "build/test-bin/fake_kubelet is not built"
  start_bg - "$WORK/kubelet-$node.log" "$ROOT/build/test-bin/fake_kubelet" \
    "$WORK/kubelet-$node.sock" "$WORK/pods-$node.json"
  wait_until 10 test -S "$WORK/kubelet-$node.sock" || fail "the fake kubelet of $node did not start"
}

# active_faults NODE CODE: "device level | message" of NODE's active faults with CODE, a line each.
active_faults() {
  grpcurl -plaintext -d "{\"activeOnly\": true, \"node\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/ListFaults |
    python3 -c '
import json, sys
for f in json.load(sys.stdin).get("faults", []):
    if f["code"] == sys.argv[1]:
        print(f.get("device_id", "-"), f["level"], "|", f.get("message", ""))' "$2"
}

# inject_sim_fault NODE DEVICE CODE [raise|clear]: through that noded's sim API.
inject_sim_fault() {
  local code
  code=$(curl -s -o "$WORK/inject.out" -w '%{http_code}' -X POST "http://127.0.0.1:${NODED_PORT[$1]}/v1/sim/faults" \
    -d "{\"device\": $2, \"code\": \"$3\", \"state\": \"${4:-raise}\"}")
  [[ $code == 200 ]] || fail "inject on $1: HTTP $code $(cat "$WORK/inject.out")"
}
