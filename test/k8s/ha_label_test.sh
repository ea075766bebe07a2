#!/usr/bin/env bash
# High availability on Kubernetes (docs/ha.md "On Kubernetes"), against a REAL
# kube-apiserver + etcd on loopback (test/k8s/lib.sh). The API server's etcd is
# also the replicas' etcd (its own key prefix). Two clusterd replicas run with
# --ha-pod NS/NAME and a ServiceAccount token allowed only to get and patch pods
# in their namespace (the chart's Role); their pods exist as objects (no kubelet).
# Checks:
#  - the leader labels its pod clusterd.io/ha-role=leader, the standby its own
#    =standby, and both answer /readyz/replica 200 (every replica Ready; the
#    Service selects the label), while only the leader answers /readyz 200;
#  - kill -9 of the leader: the standby takes over and labels its pod leader,
#    and marks the dead leader's pod standby while that process is still dead;
#    the restarted replica comes back labelled standby and Ready;
#  - a replica whose token may not patch pods is never Ready as a replica, and
#    /readyz/replica says why (403 from the API server).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/k8s/lib.sh  # and test/e2e/lib.sh
NS=ha

e2e_setup
declare -A HTTP PID
on_cleanup() { k8s_stop; }
on_failure() {
  for r in r1 r2 r3; do
    [[ -f $WORK/$r.log ]] && { echo "--- $r.log"; grep -v "D \[engine\]" "$WORK/$r.log" | tail -30; }
  done
}

k8s_start
k8s_create_namespace $NS
echo "-- API server ready at $K8S_API, etcd $K8S_ETCD"

# ServiceAccounts: clusterd (get + patch pods in $NS, as the chart's Role) and nobody.
for sa in clusterd nobody; do
  k8s_api POST /api/v1/namespaces/$NS/serviceaccounts \
    "{\"apiVersion\":\"v1\",\"kind\":\"ServiceAccount\",\"metadata\":{\"name\":\"$sa\"}}" >/dev/null
done
k8s_api POST /apis/rbac.authorization.k8s.io/v1/namespaces/$NS/roles \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"clusterd-ha"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","patch"]}]}' >/dev/null
k8s_api POST /apis/rbac.authorization.k8s.io/v1/namespaces/$NS/rolebindings \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"clusterd-ha"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"clusterd-ha"},"subjects":[{"kind":"ServiceAccount","name":"clusterd","namespace":"'$NS'"}]}' >/dev/null
k8s_write_kubeconfig "$WORK/clusterd.kubeconfig" "$(k8s_sa_token $NS clusterd)" clusterd $NS
k8s_write_kubeconfig "$WORK/nobody.kubeconfig" "$(k8s_sa_token $NS nobody)" nobody $NS
for r in r1 r2 r3; do
  k8s_api POST /api/v1/namespaces/$NS/pods \
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$r\",\"labels\":{\"app\":\"clusterd\"}},\"spec\":{\"containers\":[{\"name\":\"clusterd\",\"image\":\"clusterd\"}]}}" >/dev/null
done

start_replica() {  # start_replica ID KUBECONFIG
  HTTP[$1]=${HTTP[$1]:-$(free_port)}
  start_bg "PID[$1]" "$WORK/$1.log" "$BIN/clusterd" --insecure --etcd-endpoints "$K8S_ETCD" \
    --ha-key-prefix /clusterd-ha-test/ --ha-replica-id "$1" --ha-pod "$NS/$1" --kubeconfig "$2" \
    --data-dir "$WORK/data-$1" --listen "127.0.0.1:$(free_port)" --http-listen "127.0.0.1:${HTTP[$1]}" --ha-lease-ttl 2s
}
role_of() { k8s_api GET /api/v1/namespaces/$NS/pods/$1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"].get("labels",{}).get("clusterd.io/ha-role",""))'; }
code_of() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:${HTTP[$1]}$2" || true; }
is_role() { [[ $(role_of "$1") == "$2" ]]; }
is_code() { [[ $(code_of "$1" "$2") == "$3" ]]; }
leader() { for r in r1 r2; do is_code $r /readyz 200 && { echo $r; return 0; }; done; return 1; }

start_replica r1 "$WORK/clusterd.kubeconfig"
start_replica r2 "$WORK/clusterd.kubeconfig"
wait_until 60 leader
L=$(leader)
S=$([[ $L == r1 ]] && echo r2 || echo r1)
wait_until 30 is_role "$L" leader || fail "the leader's pod $L is not labelled leader (it is '$(role_of "$L")')"
wait_until 30 is_role "$S" standby || fail "the standby's pod $S is not labelled standby"
wait_until 30 is_code "$L" /readyz/replica 200 || fail "leader $L: /readyz/replica $(code_of "$L" /readyz/replica)"
wait_until 30 is_code "$S" /readyz/replica 200 || fail "standby $S: /readyz/replica $(code_of "$S" /readyz/replica)"
is_code "$S" /readyz 503 || fail "standby $S answers /readyz $(code_of "$S" /readyz), not 503"
echo "ok   leader $L labelled leader, standby $S labelled standby; both Ready as replicas, only $L on /readyz"

t0=$(date +%s.%N)
kill_wait "${PID[$L]}"
wait_until 30 is_role "$S" leader || fail "after kill -9 of $L, $S's pod is not labelled leader"
t1=$(date +%s.%N)
wait_until 30 is_role "$L" standby || fail "the dead leader $L's pod is still labelled '$(role_of "$L")'"
is_code "$S" /readyz/replica 200 || fail "new leader $S: /readyz/replica $(code_of "$S" /readyz/replica)"
echo "ok   kill -9 of $L: $S labelled leader $(python3 -c "print(round($t1 - $t0, 2))") s later; $L's pod marked standby while it was dead"
start_replica "$L" "$WORK/clusterd.kubeconfig"
wait_until 30 is_code "$L" /readyz/replica 200 || fail "restarted $L: /readyz/replica $(code_of "$L" /readyz/replica)"
is_role "$L" standby || fail "restarted $L is labelled '$(role_of "$L")'"
is_role "$S" leader || fail "$S lost its leader label"
echo "ok   $L restarted: standby, labelled standby, Ready as a replica"

start_replica r3 "$WORK/nobody.kubeconfig"
wait_until 30 grep -q "labelling pod" "$WORK/r3.log" || fail "r3 did not try to label its pod"
body=$(curl -s --max-time 2 "http://127.0.0.1:${HTTP[r3]}/readyz/replica")
[[ $(code_of r3 /readyz/replica) == 503 ]] || fail "r3, whose token may not patch pods, is Ready as a replica"
expect_contains "$body" "forbidden" "r3's /readyz/replica names the refusal"
is_role r3 "" || fail "r3's pod got a label without the right to patch it"
echo "ok   r3 without the right to patch pods: not Ready; /readyz/replica: $(head -c 160 <<<"$body")"
echo "PASS: high availability on Kubernetes (pod role labels)"
