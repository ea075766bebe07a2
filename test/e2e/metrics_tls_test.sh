#!/usr/bin/env bash
# A real Prometheus scrapes ClusterD's and NodeD's /metrics over TLS with a bearer token
# (docs/security.md, "What protects each port"):
#   - clusterd with TLS (the test PKI of test/security/make_certs.sh, client certificates
#     verified when sent), metrics_auth and a token file; noded serving HTTPS with a token file;
#   - Prometheus with four scrape jobs: clusterd and noded with the viewer's token, the CA and
#     the server name checked (both up, samples stored), and clusterd and noded with a wrong
#     token (both down with a 401, the refusals on each daemon's audit log);
#   - a scrape over plaintext is refused by both (no answer).
# Builds Prometheus (the Go module the promtool of api_tools_test.sh comes from) into
# $GOPATH/bin the first time. Exits 0 only if all held.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PROMETHEUS_VERSION=v0.316.0 # Prometheus 3.x, the same module version as api_tools_test.sh's promtool
require_cmd go curl python3 openssl
require_built clusterd noded
e2e_setup
on_failure() { tail_logs 30 "$WORK/clusterd.log" "$WORK/noded.log" "$WORK/prometheus.log"; }
# remove_all_sd: no cloud service discovery (static targets only), half the packages to build.
go_tool prometheus github.com/prometheus/prometheus/cmd/prometheus "$PROMETHEUS_VERSION" -tags remove_all_sd

PKI=$WORK/pki
bash "$ROOT/test/security/make_certs.sh" "$PKI"
clusterd_ports
start_bg CLUSTERD_PID "$WORK/clusterd.log" "$BIN/clusterd" --listen "$ADDR" --http-listen "127.0.0.1:$HTTP_PORT" \
  --data-dir "$WORK/clusterd" --tls-cert-file "$PKI/server.crt" --tls-key-file "$PKI/server.key" \
  --tls-client-ca-file "$PKI/ca.crt" --tls-client-auth request --auth-token-file "$PKI/tokens.csv" --metrics-auth
wait_until 30 curl -sf --cacert "$PKI/ca.crt" "https://127.0.0.1:$HTTP_PORT/readyz" || fail "clusterd over TLS not ready"

NODED_HTTP=$(free_port)
start_bg NODED_PID "$WORK/noded.log" "$BIN/noded" --server "$ADDR" --node-name worker01 \
  --http-listen "127.0.0.1:$NODED_HTTP" --state-dir "$WORK/noded" --accelerator sim --sim-devices 2 \
  --kmsg-path "" --progress-dir "" --pod-resources-socket "" \
  --http-tls-cert-file "$PKI/server.crt" --http-tls-key-file "$PKI/server.key" \
  --http-token-file "$PKI/token-viewer"
wait_until 30 curl -sf --cacert "$PKI/ca.crt" "https://127.0.0.1:$NODED_HTTP/healthz" || fail "noded over TLS not up"

echo "== plaintext is refused on both ports"
for port in "$HTTP_PORT" "$NODED_HTTP"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/metrics" 2>/dev/null || true)
  [[ $code == 000 ]] || fail "plaintext /metrics on port $port answered $code"
done

echo "== Prometheus scrapes both over TLS"
printf 'not-the-token' >"$WORK/wrong-token"
job() { # job NAME PORT TOKEN_FILE
  cat <<YAML
  - job_name: $1
    scheme: https
    tls_config:
      ca_file: $PKI/ca.crt
      server_name: localhost
    authorization:
      type: Bearer
      credentials_file: $3
    static_configs:
      - targets: ["127.0.0.1:$2"]
YAML
}
{
  echo "global: {scrape_interval: 1s, scrape_timeout: 1s}"
  echo "scrape_configs:"
  job clusterd "$HTTP_PORT" "$PKI/token-viewer"
  job noded "$NODED_HTTP" "$PKI/token-viewer"
  job clusterd-wrong-token "$HTTP_PORT" "$WORK/wrong-token"
  job noded-wrong-token "$NODED_HTTP" "$WORK/wrong-token"
} >"$WORK/prometheus.yml"
PROM=$(free_port)
start_bg - "$WORK/prometheus.log" prometheus --config.file "$WORK/prometheus.yml" \
  --storage.tsdb.path "$WORK/tsdb" --web.listen-address "127.0.0.1:$PROM"
wait_until 60 curl -sf "http://127.0.0.1:$PROM/-/ready" || fail "prometheus not ready"

# targets_ok: every target scraped at least once, the token jobs up, the wrong-token jobs down
# with a 401.
targets_ok() {
  curl -sf "http://127.0.0.1:$PROM/api/v1/targets" | python3 -c '
import json, sys
t = {x["labels"]["job"]: x for x in json.load(sys.stdin)["data"]["activeTargets"]}
ok = (t["clusterd"]["health"] == "up" and t["noded"]["health"] == "up"
      and all(t[j]["health"] == "down" and "401" in t[j]["lastError"] for j in ("clusterd-wrong-token", "noded-wrong-token")))
sys.exit(0 if ok else 1)'
}
if ! wait_until 60 targets_ok; then
  curl -s "http://127.0.0.1:$PROM/api/v1/targets" >&2 || true
  fail "the targets are not as expected (token jobs up, wrong-token jobs down with 401)"
fi
echo "-- clusterd and noded up with the viewer's token; down with 401 with a wrong one"

# Samples of each daemon are stored: a metric only ClusterD has, and one only NodeD has.
query() { curl -sf "http://127.0.0.1:$PROM/api/v1/query" --data-urlencode "query=$1" |
  python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(len(r))'; }
wait_until 30 test "$(query 'clusterd_revision{job="clusterd"}')" -ge 1 || fail "no clusterd_revision sample from clusterd"
wait_until 30 test "$(query 'noded_polls_total{job="noded"}')" -ge 1 || fail "no noded_polls_total sample from noded"
echo "-- samples stored from both"

# The refusals are audited on both daemons.
grep -q 'deny principal=- method=GET /metrics' "$WORK/clusterd.log" || fail "clusterd's audit log has no /metrics refusal"
grep -q 'deny principal=- method="GET /metrics".*not the one of http_token_file' "$WORK/noded.log" ||
  fail "noded's audit log has no /metrics refusal"
echo "-- the wrong-token scrapes are on both audit logs"
echo "PASS metrics_tls_test"
