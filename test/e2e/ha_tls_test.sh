#!/usr/bin/env bash
# High availability with TLS to etcd (docs/ha.md), real processes on loopback: one etcd
# member serving https with --client-cert-auth (certificates from test/security/make_certs.sh),
# two clusterd replicas with --etcd-endpoints https://..., --etcd-ca-file, --etcd-cert-file and
# --etcd-key-file. Checks: a leader is elected and acknowledges a write; kill -9 of it, the
# other takes over with the write in its store; a replica whose client certificate etcd does
# not trust never gets a lease (it says why in its log) and is never Ready; one that does not
# trust etcd's certificate neither.
# usage: ETCD=path/to/etcd bash test/e2e/ha_tls_test.sh (default: scripts/k8s-tools.sh's etcd)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/e2e/lib.sh
ETCD=${ETCD:-$(bash scripts/k8s-tools.sh)/etcd}

e2e_setup
CERTS=$WORK/certs
declare -A HTTP GRPC PID
on_failure() {
  for f in "$WORK"/*.log; do
    [[ -e $f ]] || continue
    echo "--- $(basename "$f")"; grep -v "D \[engine\]" "$f" | tail -20
  done
}

bash test/security/make_certs.sh "$CERTS"
CLIENT_PORT=$(free_port) PEER_PORT=$(free_port)
start_bg "PID[etcd]" "$WORK/etcd.log" "$ETCD" --name e0 --data-dir "$WORK/etcd" \
  --listen-client-urls "https://127.0.0.1:$CLIENT_PORT" --advertise-client-urls "https://127.0.0.1:$CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-cluster "e0=http://127.0.0.1:$PEER_PORT" --cert-file "$CERTS/server.crt" --key-file "$CERTS/server.key" \
  --trusted-ca-file "$CERTS/ca.crt" --client-cert-auth --log-level warn
etcd_up() { curl -fsS --max-time 2 --cacert "$CERTS/ca.crt" --cert "$CERTS/admin.crt" --key "$CERTS/admin.key" "https://127.0.0.1:$CLIENT_PORT/health"; }
wait_until 30 etcd_up || fail "etcd with TLS did not start"
[[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$CERTS/ca.crt" "https://127.0.0.1:$CLIENT_PORT/health" || true) != 200 ]] ||
  fail "etcd answers without a client certificate"
echo "ok   etcd serving https with client certificate authentication"

start_replica() {  # start_replica ID CA CERT KEY
  HTTP[$1]=$(free_port)
  GRPC[$1]=$(free_port)
  start_bg "PID[$1]" "$WORK/$1.log" "$BIN/clusterd" --insecure --etcd-endpoints "https://127.0.0.1:$CLIENT_PORT" \
    --etcd-ca-file "$2" --etcd-cert-file "$3" --etcd-key-file "$4" --ha-replica-id "$1" --data-dir "$WORK/data-$1" \
    --listen "127.0.0.1:${GRPC[$1]}" --http-listen "127.0.0.1:${HTTP[$1]}" --ha-lease-ttl 2s
}
code_of() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:${HTTP[$1]}$2" || true; }
leader() { for r in r1 r2; do [[ -n ${PID[$r]:-} && $(code_of $r /readyz) == 200 ]] && { echo $r; return 0; }; done; return 1; }

start_replica r1 "$CERTS/ca.crt" "$CERTS/admin.crt" "$CERTS/admin.key"
start_replica r2 "$CERTS/ca.crt" "$CERTS/admin.crt" "$CERTS/admin.key"
wait_until 60 leader || fail "no leader over TLS"
L=$(leader)
S=$([[ $L == r1 ]] && echo r2 || echo r1)
out=$(grpcurl -plaintext -d '{"recovery_paused":true,"actor":"tlstest","reason":"tls-1"}' \
  "127.0.0.1:${GRPC[$L]}" clusterd.v1.AdminService/SetRecoveryMode)
rev=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["state"]["revision"])' "$out")
echo "ok   $L leads over TLS; a write (recovery paused) acknowledged at revision $rev"

kill_wait "${PID[$L]}"
unset "PID[$L]"
new_leader() { [[ $(code_of "$S" /readyz) == 200 ]]; }
wait_until 30 new_leader || fail "$S did not take over after kill -9 of $L"
out=$(grpcurl -plaintext -d '{}' "127.0.0.1:${GRPC[$S]}" clusterd.v1.AdminService/GetAdminState)
expect_contains "$out" '"reason": "tls-1"' "the acknowledged write on the new leader"
echo "ok   kill -9 of $L: $S leads, with the acknowledged write"

start_replica r3 "$CERTS/ca.crt" "$CERTS/wrongca.crt" "$CERTS/wrongca.key"
start_replica r4 "$CERTS/other-ca.crt" "$CERTS/admin.crt" "$CERTS/admin.key"
refused() { grep -q "cannot get a lease" "$WORK/$1.log"; }
wait_until 30 refused r3 || fail "r3 (client certificate from another CA) did not report its refusal"
wait_until 30 refused r4 || fail "r4 (does not trust etcd's certificate) did not report its refusal"
for r in r3 r4; do
  [[ $(code_of $r /readyz) != 200 ]] || fail "$r is Ready without a working etcd connection"
done
echo "ok   r3 (untrusted client certificate) and r4 (untrusted etcd certificate): no lease, never Ready:"
grep -h "cannot get a lease" "$WORK/r3.log" "$WORK/r4.log" | head -2 | cut -c1-200
echo "PASS: high availability with TLS to etcd"
