#!/usr/bin/env bash
# The live status page at "/" in a real headless Chromium (Debian's chromium,
# chromium-driver, python3-selenium; scripts/deps.sh): clusterd with the exec
# actuator, two sim noded agents with 8 devices each, a job with its recovery
# agent. test/e2e/status_page_test.py loads the page, injects a fault and
# follows it, without reloading, until the recovery SUCCEEDED, then pauses
# recovery and cordons a node with clusterctl and waits for the banner and the
# mark; worker02 reads a host tree (--root) whose kubelet has no Ascend device
# plugin registered: the "Software chain" panel and worker02's detail pane
# show that link BROKEN, coloured. A second job, om-a, gets a NIC switch and a
# stress test from the Go client of test/e2e/mindcluster-client (the
# reference's Recover stubs, as operator and TaskD): the page shows both in
# its MindCluster view, with train-a's summary, servers and rank table.
# Screenshots go to ${ARTIFACT_DIR:-build/test-artifacts/status-page}/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"

# Debian's python3-selenium lives in the system interpreter (not a pyenv one).
PY=${STATUS_PAGE_PYTHON:-/usr/bin/python3}
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
"$PY" -c 'import selenium' 2>/dev/null || missing+=(python3-selenium)

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
on_failure() { tail_logs 30 "$WORK/clusterd.log"; tail_logs 15 "$WORK"/agent.*; }

# The actuator: succeeds at everything, so that a recovery can finish.
cat >"$WORK/actuator.sh" <<'SH'
#!/bin/sh
cat >/dev/null
echo "$CLUSTERD_ACTION done"
SH
chmod +x "$WORK/actuator.sh"

start_clusterd --actuator exec --actuator-command "$WORK/actuator.sh" --log-level info

echo "-- the page is served at / and /index.html, without a token, as text/html"
for path in / /index.html; do
  ctype=$(curl -sf -o "$WORK/page.html" -w '%{content_type}' "http://127.0.0.1:$HTTP_PORT$path")
  [[ $ctype == text/html* ]] || fail "$path: content type $ctype"
  grep -q 'window.clusterdStatus' "$WORK/page.html" || fail "$path: not the status page"
done
# Nothing is fetched from elsewhere: no http(s) URL in a src= or href=.
! grep -Eq '(src|href)="(https?:)?//' "$WORK/page.html" || fail "the page loads something from another site"

if ((${#missing[@]})); then
  echo "skip: status page browser test (missing ${missing[*]}; scripts/deps.sh installs them)"
  exit 0
fi

# worker02's host: the driver installed and loaded, a kubelet, no Ascend device plugin.
CHAIN=$WORK/chain-root
mkdir -p "$CHAIN/usr/local/Ascend/driver" "$CHAIN/dev" "$CHAIN/var/lib/kubelet/device-plugins"
printf 'Version=24.1.rc3\n' >"$CHAIN/usr/local/Ascend/driver/version.info"
for f in null davinci_manager davinci0 davinci1 davinci2 davinci3 davinci4 davinci5 davinci6 davinci7; do
  : >"$CHAIN/dev/$f"
done
: >"$CHAIN/var/lib/kubelet/device-plugins/kubelet.sock"
# Both in SuperPoD 1 (docs/domains.md): the page's domain view shows it degraded.
start_sim_noded worker01 --labels huawei.com/topotree.superpodid=1
start_sim_noded worker02 --root "$CHAIN" --mounts-file /proc/mounts --labels huawei.com/topotree.superpodid=1
connected() {
  curl -sf "http://127.0.0.1:$HTTP_PORT/api/v1/summary" |
    python3 -c 'import json,sys; sys.exit(0 if int(json.load(sys.stdin).get("connectedAgents", 0)) == 2 else 1)'
}
wait_until 30 connected
echo "-- two nodes registered"

start_bg - "$WORK/agent.out" "$BIN/job-agent" --server "$ADDR" --job train-a --hold-down 500ms --step-ms 50 \
  --log "$WORK/agent.log" --placement 0=worker01:0,1=worker01:1,2=worker02:0,3=worker02:1 --spares worker02:6,worker02:7
wait_until 30 grep -q "attached: job train-a" "$WORK/agent.log"
echo "-- job train-a and its agent attached"

# om-a: a NIC switch (worker02 chip 5, rank 1) and an AIC stress test, TaskD
# answering each step with success.
cat >"$WORK/om-a.json" <<'JSON'
{"id": "om-a", "kind": "JOB_KIND_TRAINING",
 "labels": {"mindcluster/process-recover-enable": "on", "mindcluster/recover-strategy": "recover"},
 "placement": [{"rank": 0, "node": "worker02", "device_id": 4}, {"rank": 1, "node": "worker02", "device_id": 5}]}
JSON
"$BIN/clusterctl" --server "$ADDR" create-job -f "$WORK/om-a.json" >/dev/null || fail "create-job om-a"
OM_ARGS=()
if command -v go >/dev/null 2>&1 && command -v protoc >/dev/null 2>&1; then
  build_mcclient "$WORK/mcclient"
  "$WORK/mcclient/mcclient" nicswitch -server "$ADDR" -job om-a -switch-node worker02 -switch-devs 5 -deadline 60s \
    >"$WORK/om-nic.out" 2>&1 || fail "mcclient nicswitch: $(cat "$WORK/om-nic.out")"
  "$WORK/mcclient/mcclient" stresstest -server "$ADDR" -job om-a -ops 0 -deadline 60s \
    >"$WORK/om-stress.out" 2>&1 || fail "mcclient stresstest: $(cat "$WORK/om-stress.out")"
  echo "-- job om-a: a NIC switch and a stress test done"
  OM_ARGS=(--om-job om-a)
else
  echo "skip: om-a's NIC switch and stress test in the page (needs go and protoc; scripts/deps.sh installs them)"
fi

ARTIFACT_DIR="${ARTIFACT_DIR:-$ROOT/build/test-artifacts/status-page}"
mkdir -p "$ARTIFACT_DIR"
"$PY" "$ROOT/test/e2e/status_page_test.py" --url "http://127.0.0.1:$HTTP_PORT/" \
  --inject "http://127.0.0.1:${NODED_PORT[worker01]}/v1/sim/faults" --node worker01 --device 1 --code 80E01801 \
  --artifacts "$ARTIFACT_DIR" --clusterctl "$BIN/clusterctl" --server "$ADDR" "${OM_ARGS[@]}"

# ---- over TLS with a token: a second clusterd serving its HTTP port over TLS (the test CA,
# client certificates requested, not required, so that a browser with a token gets in) ----
echo "-- the page over TLS with a viewer's token"
CERTS=$WORK/certs
bash "$ROOT/test/security/make_certs.sh" "$CERTS"
TLS_HTTP=$(free_port) TLS_PROBE=$(free_port)
start_bg - "$WORK/clusterd-tls.log" "$BIN/clusterd" --listen "127.0.0.1:$(free_port)" \
  --http-listen "127.0.0.1:$TLS_HTTP" --probe-listen "127.0.0.1:$TLS_PROBE" --data-dir "$WORK/clusterd-tls" \
  --tls-cert-file "$CERTS/server.crt" --tls-key-file "$CERTS/server.key" --tls-client-ca-file "$CERTS/ca.crt" \
  --tls-client-auth request --auth-token-file "$CERTS/tokens.csv" --log-level debug
wait_ready "$TLS_PROBE"
curl -s -o /dev/null "http://127.0.0.1:$TLS_HTTP/" && fail "the TLS port answered plaintext HTTP"
"$PY" "$ROOT/test/e2e/status_page_tls_test.py" --url "https://127.0.0.1:$TLS_HTTP/" \
  --token-file "$CERTS/token-viewer" --artifacts "$ARTIFACT_DIR"
# Nor in ClusterD's log (debug level): the audit lines name the principal, never the token.
! grep -qF "$(cat "$CERTS/token-viewer")" "$WORK/clusterd-tls.log" || fail "the viewer's token is in clusterd's log"
grep -q 'deny principal=- method=GET /api/v1/' "$WORK/clusterd-tls.log" ||
  fail "the page's refused API calls are not in the audit log"
echo "PASS: status page"
