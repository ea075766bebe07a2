#!/usr/bin/env bash
# ClusterD's authentication end to end, against a REAL etcd + kube-apiserver on
# loopback (test/k8s/lib.sh; no kubelet: the test creates the Nodes and the
# NodeD pods through the API) and the throw-away PKI of test/security/make_certs.sh:
#  1. clusterd serves gRPC over TLS (client certificates requested, not required),
#     with a token file and TokenReview; clusterd-system/noded is NodeD's account;
#  2. a sim noded with a pod-bound service-account token (pod on worker01) is
#     worker01's agent: it registers, and the token went through TokenReview;
#  3. the same token claiming worker02 is refused (audited), worker01 unharmed;
#  4. a token minted for another audience is UNAUTHENTICATED;
#  5. plaintext is refused; a viewer token reads but may not cordon; the
#     operator's client certificate cordons, recorded as its CN, not the claimed actor.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/k8s/lib.sh  # and test/e2e/lib.sh

e2e_setup
CERTS=$WORK/certs
declare -A NODED_PORT NODED_PID
on_cleanup() { k8s_stop; }
# Diagnostics on any failure: a failed command under set -e and fail() alike.
on_failure() {
  tail_logs 60 "$WORK/clusterd.log"
  tail_logs 20 "$WORK"/noded-*.log
  if declare -F nodes >/dev/null; then
    echo "--- nodes (name:connected:health, as the viewer)"
    nodes 2>&1 || true
    echo "--- auth metrics"
    curl -s --cacert "$CERTS/ca.crt" "https://127.0.0.1:$HTTP_PORT/metrics" | grep '^clusterd_auth_' || true
  fi
}

bash test/security/make_certs.sh "$CERTS"
k8s_start
echo "-- API server ready at $K8S_API"
# Picked once etcd and the API server listen: free_port could hand out theirs before.
clusterd_ports

# ---- the cluster as the kubelet and NodeD's DaemonSet would leave it ----
NS=clusterd-system
k8s_create_namespace $NS
k8s_api POST /api/v1/namespaces/$NS/serviceaccounts \
  '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"noded"}}' >/dev/null
for n in worker01 worker02; do
  k8s_api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$n\"}}" >/dev/null
done
declare -A POD_UID
# noded_pod NAME NODE: a NodeD pod bound to NODE running as clusterd-system/noded.
noded_pod() {
  POD_UID[$1]=$(k8s_api POST /api/v1/namespaces/$NS/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",
    \"metadata\":{\"name\":\"$1\"},\"spec\":{\"nodeName\":\"$2\",\"serviceAccountName\":\"noded\",
    \"containers\":[{\"name\":\"noded\",\"image\":\"noded:1\"}]}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["uid"])')
}
noded_pod noded-a worker01
noded_pod noded-b worker02
# mint_token POD AUDIENCE FILE: a TokenRequest for clusterd-system/noded bound to POD.
mint_token() {
  k8s_api POST /api/v1/namespaces/$NS/serviceaccounts/noded/token \
    "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenRequest\",\"spec\":{\"audiences\":[\"$2\"],
      \"expirationSeconds\":3600,\"boundObjectRef\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"name\":\"$1\",
      \"uid\":\"${POD_UID[$1]}\"}}}" |
    python3 -c 'import json,sys; sys.stdout.write(json.load(sys.stdin)["status"]["token"])' >"$3"
  chmod 600 "$3"
}
TOKEN_A=$WORK/token-a
mint_token noded-a clusterd "$TOKEN_A"

# ---- 1. clusterd over TLS with the token file and TokenReview ----
# The HTTP port speaks TLS too; the probe-only port answers wait_ready in plaintext.
PROBE_PORT=$(free_port)
start_bg - "$WORK/clusterd.log" "$BIN/clusterd" --listen "$ADDR" --http-listen "127.0.0.1:$HTTP_PORT" \
  --probe-listen "127.0.0.1:$PROBE_PORT" \
  --data-dir "$WORK/clusterd" --tls-cert-file "$CERTS/server.crt" --tls-key-file "$CERTS/server.key" \
  --tls-client-ca-file "$CERTS/ca.crt" --tls-client-auth request \
  --auth-token-file "$CERTS/tokens.csv" --auth-token-review true \
  --auth-agent-service-accounts $NS/noded --kubeconfig "$K8S_KUBECONFIG" \
  --node-grace 10s --log-level info
wait_ready "$PROBE_PORT"
echo "-- 1: clusterd over TLS (client certs requested, token file, TokenReview) ready"

# rpc CRED SERVICE/METHOD [JSON]: one call over TLS. CRED: token:FILE (a bearer token on the
# call itself; reflection stays anonymous, which anyone may use), cert:NAME (NAME.crt/.key) or none.
rpc() {
  local cred=$1 method=$2 data=${3:-'{}'}
  local args=(-cacert "$CERTS/ca.crt" -connect-timeout 5 -max-time 10)
  case $cred in
    token:*) args+=(-rpc-header "authorization: Bearer $(cat "${cred#token:}")") ;;
    cert:*) args+=(-cert "$CERTS/${cred#cert:}.crt" -key "$CERTS/${cred#cert:}.key") ;;
  esac
  grpcurl "${args[@]}" -d "$data" "$ADDR" "clusterd.v1.$method"
}
VIEWER=token:$CERTS/token-viewer
# nodes: "name:connected:health" of every node ClusterD lists, as the viewer.
nodes() {
  rpc "$VIEWER" ClusterService/ListNodes |
    python3 -c 'import json,sys; print(" ".join("%s:%s:%s" % (n["name"], n.get("connected", False), n.get("health", "HEALTH_UNKNOWN")) for n in sorted(json.load(sys.stdin).get("nodes", []), key=lambda n: n["name"])))'
}
node_names() { nodes | python3 -c 'import sys; print(" ".join(n.split(":")[0] for n in sys.stdin.read().split()))'; }
# worker01_ok: listed, connected, and its health known (not UNKNOWN, as a lost node's is).
worker01_ok() {
  local n
  n=$(nodes)
  [[ " $n " =~ \ worker01:True:HEALTH_[A-Z_]+\  && ! " $n " =~ \ worker01:True:HEALTH_UNKNOWN\  ]]
}
# is 'CMD' WANT: CMD's output (evaluated at each try) equals WANT.
is() { [[ "$(eval "$1")" == "$2" ]]; }
# noded_as NODE TOKEN_FILE: a sim noded for NODE over TLS with that bearer token.
noded_as() { start_sim_noded "$1" --tls-ca-file "$CERTS/ca.crt" --token-file "$2"; }

echo "-- 2: NodeD with the token of pod noded-a (on worker01) is worker01's agent"
noded_as worker01 "$TOKEN_A"
wait_until 30 worker01_ok
wait_until 15 is 'node_names' worker01
metrics=$(curl -sf --cacert "$CERTS/ca.crt" "https://127.0.0.1:$HTTP_PORT/metrics")
grep -Eq '^clusterd_auth_token_reviews_total [1-9]' <<<"$metrics" ||
  fail "2: clusterd_auth_token_reviews_total is not > 0: $(grep '^clusterd_auth_token_review' <<<"$metrics")"
grep -Eq '^clusterd_auth_token_review_errors_total 0$' <<<"$metrics" || fail "2: TokenReview errors"
echo "   $(nodes); $(grep '^clusterd_auth_token_reviews_total' <<<"$metrics")"

echo "-- 3: the same token claiming worker02 is refused"
noded_as worker02 "$TOKEN_A"
deny="deny principal=system:serviceaccount:$NS:noded method=/clusterd.v1.NodeAgentService/Connect .*\"worker02\""
# Twice: the first hello and NodeD's retry after its backoff are both refused.
refused_twice() { (($(grep -Ec "$deny" "$WORK/clusterd.log") >= 2)); }
wait_until 30 refused_twice
# Each hello was refused before it was applied: nothing of worker02 exists, and
# worker01's stream (the same service account) carries on.
[[ $(node_names) == worker01 ]] || fail "3: nodes after the refused hello: $(nodes)"
worker01_ok || fail "3: worker01 after the refused hello: $(nodes)"
kill -0 "${NODED_PID[worker01]}" || fail "3: worker01's noded exited"
echo "   $(grep -Eo "$deny" "$WORK/clusterd.log" | head -1)"

echo "-- 4: a token for another audience is UNAUTHENTICATED"
mint_token noded-a other "$WORK/token-other"
if out=$(rpc "token:$WORK/token-other" ClusterService/GetSummary 2>&1); then
  fail "4: GetSummary with the audience \"other\" token answered: $out"
fi
expect_contains "$out" "Code: Unauthenticated" "4: wrong audience"
# The clusterd-audience token of the same pod authenticates (an agent, no viewer role).
if out=$(rpc "token:$TOKEN_A" ClusterService/GetSummary 2>&1); then
  fail "4: GetSummary as NodeD's service account answered: $out"
fi
expect_contains "$out" "Code: PermissionDenied" "4: the right audience authenticates"

echo "-- 5: plaintext refused; viewer reads, may not cordon; the operator's certificate cordons"
# With the viewer's token, so that only the missing TLS can make it fail.
if out=$(grpcurl -plaintext -rpc-header "authorization: Bearer $(cat "$CERTS/token-viewer")" \
  -connect-timeout 3 -max-time 5 -d '{}' "$ADDR" clusterd.v1.ClusterService/GetSummary 2>&1); then
  fail "5: plaintext GetSummary answered: $out"
fi
echo "   plaintext: $(tr '\n' ' ' <<<"$out")"
summary=$(rpc "$VIEWER" ClusterService/GetSummary)
[[ $(python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))' <<<"$summary") == 1 ]] ||
  fail "5: GetSummary as the viewer: $summary"
if out=$(rpc "$VIEWER" AdminService/CordonNode '{"node": "worker01", "reason": "viewer"}' 2>&1); then
  fail "5: CordonNode as the viewer answered: $out"
fi
expect_contains "$out" "Code: PermissionDenied" "5: CordonNode as the viewer"
cordoned() {
  rpc "$VIEWER" ClusterService/GetNode '{"name": "worker01"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["node"].get("cordoned", False))'
}
[[ $(cordoned) == False ]] || fail "5: worker01 cordoned after the viewer's refused call"
out=$(rpc cert:operator AdminService/CordonNode '{"node": "worker01", "actor": "mallory", "reason": "security e2e"}')
expect_contains "$out" '"cordoned": true' "5: CordonNode with the operator certificate"
[[ $(cordoned) == True ]] || fail "5: worker01 not cordoned"
# cordon_actors: actor of each NODE_CORDONED event. Watch from revision 0 replays the history,
# then follows until -max-time ends it (a slow replay is retried by wait_until).
cordon_actors() {
  grpcurl -cacert "$CERTS/ca.crt" -rpc-header "authorization: Bearer $(cat "$CERTS/token-viewer")" -max-time 2 \
    -d '{"from_revision": "0", "types": ["EVENT_TYPE_NODE_CORDONED"]}' "$ADDR" clusterd.v1.ClusterService/Watch \
    2>/dev/null | python3 -c '
import json, sys
text, dec, i, actors = sys.stdin.read(), json.JSONDecoder(), 0, []
while (i := text.find("{", i)) >= 0:
    msg, i = dec.raw_decode(text, i)
    actors += [e.get("actor", "") for e in msg.get("events", []) if e["type"] == "EVENT_TYPE_NODE_CORDONED"]
print(" ".join(actors))'
}
wait_until 15 is 'cordon_actors' bob || fail "5: NODE_CORDONED actors \"$(cordon_actors)\" (want bob)"
grep -q 'allow principal=bob method=/clusterd.v1.AdminService/CordonNode .*claimed actor "mallory"' \
  "$WORK/clusterd.log" || fail "5: no audit line for bob's CordonNode"
echo "   viewer refused, bob (operator certificate, claimed \"mallory\") cordoned worker01"
echo "security e2e: OK"
