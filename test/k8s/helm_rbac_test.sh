#!/usr/bin/env bash
# Installs the chart (charts/clusterd) with `helm install` into a real kube-apiserver + etcd
# (test/k8s/lib.sh; no kubelet, so the pods stay Pending) and checks, with real requests made
# with a token of ClusterD's own ServiceAccount (TokenRequest API), that the rendered RBAC
# allows every call ClusterD makes (docs/deploy.md, "Kubernetes API access") and refuses
# what it does not need (403). Also: NodeD's ServiceAccount gets nothing; with the real
# clusterd binary built and knowing --kubeconfig, it runs on the installed config.json with
# that token and becomes ready; `helm upgrade --set kubernetes.enabled=false` removes the
# access again. Prints every check; exits 0 only if all passed.
#
# Needs: helm (test/e2e/helm_test.sh installs it), Go for scripts/k8s-tools.sh (the first run
# builds etcd and kube-apiserver: minutes; later runs start them in seconds).
# CHART=DIR checks another copy of the chart (a mutated one must fail); CLUSTERD=PATH another
# clusterd binary.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
# shellcheck source=lib.sh
source test/k8s/lib.sh

HELM_VERSION=v3.19.5
export GOPATH=${GOPATH:-$HOME/go}
export PATH="$GOPATH/bin:/usr/local/go/bin:$PATH"
HELM="$GOPATH/bin/helm"
NS=clusterd-system RELEASE=clusterd WORK=work
CHART=${CHART:-charts/clusterd} # another copy of the chart can be checked (e.g. a mutated one)

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok   $*"; }
bad() { failed=$((failed + 1)); echo "  FAIL $*" >&2; }
die() {
  echo "helm_rbac_test: $*" >&2
  exit 1
}

TMP=$(mktemp -d)
CLUSTERD_PID=
cleanup() {
  if [[ -n $CLUSTERD_PID ]]; then k8s_kill_wait "$CLUSTERD_PID"; fi
  k8s_stop
  rm -rf "$TMP"
}
trap cleanup EXIT

if [[ ! -x $HELM ]]; then
  echo "helm_rbac_test: installing helm $HELM_VERSION into $GOPATH/bin"
  go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" || die "go install helm failed"
fi

echo "== a real API server (${SECONDS}s)"
k8s_start || die "the API server did not start"
echo "  $K8S_API ($("$K8S_BIN/kube-apiserver" --version)), etcd $K8S_ETCD"
k8s_create_namespace "$NS" || die "namespace $NS"
k8s_create_namespace "$WORK" || die "namespace $WORK"
k8s_apply_podgroup_crd || die "PodGroup CRD"

echo "== helm install (${SECONDS}s)"
helm_k() { "$HELM" --kubeconfig "$K8S_KUBECONFIG" "$@"; }
if out=$(helm_k install "$RELEASE" "$CHART" -n "$NS" 2>&1); then
  ok "helm install $RELEASE $CHART -n $NS"
else
  echo "$out" >&2
  die "helm install failed"
fi
# The objects the chart rendered, as the API server stored them.
name_of() { python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["name"])'; }
CLUSTER_ROLE=$NS-clusterd
for obj in "/apis/rbac.authorization.k8s.io/v1/clusterroles/$CLUSTER_ROLE" \
  "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/$CLUSTER_ROLE" \
  "/apis/rbac.authorization.k8s.io/v1/namespaces/$NS/roles/clusterd" \
  "/apis/rbac.authorization.k8s.io/v1/namespaces/$NS/rolebindings/clusterd" \
  "/apis/apps/v1/namespaces/$NS/deployments/clusterd" "/apis/apps/v1/namespaces/$NS/daemonsets/clusterd-noded"; do
  if k8s_api GET "$obj" | name_of >/dev/null 2>&1; then ok "installed: $obj"; else bad "not installed: $obj"; fi
done

# Tokens of the two ServiceAccounts, as a pod would get them (TokenRequest).
SA_TOKEN=$(k8s_sa_token "$NS" clusterd) || die "TokenRequest for $NS/clusterd"
NODED_TOKEN=$(k8s_sa_token "$NS" clusterd-noded) || die "TokenRequest for $NS/clusterd-noded"
ok "TokenRequest issued tokens for $NS/clusterd and $NS/clusterd-noded"

# Objects to act on, created by the admin: a node, pods, a PodGroup, an Event.
admin() { k8s_api "$@" >/dev/null || bad "admin setup: $1 $2"; }
admin POST /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"worker-1","labels":{"workerselector":"dls-worker-node"}}}'
pod_json() { echo "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",\"annotations\":{\"hccl/rankIndex\":\"0\"}},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"train\"}]}}"; }
for p in rank-0 rank-1 rank-2; do admin POST "/api/v1/namespaces/$WORK/pods" "$(pod_json "$p")"; done
admin POST "/apis/scheduling.volcano.sh/v1beta1/namespaces/$WORK/podgroups" \
  '{"apiVersion":"scheduling.volcano.sh/v1beta1","kind":"PodGroup","metadata":{"name":"job-a"},"spec":{"minMember":3}}'

# check WANT DESCRIPTION METHOD PATH [BODY [CONTENT_TYPE]]: the request with TOKEN (default:
# ClusterD's) must get HTTP status WANT.
check() {
  local want=$1 what=$2 got
  shift 2
  got=$(K8S_TOKEN=${TOKEN:-$SA_TOKEN} k8s_code "$@")
  if [[ $got == "$want" ]]; then ok "$what: $1 $2 -> $got"; else bad "$what: $1 $2 -> $got, want $want"; fi
}
SMP=application/strategic-merge-patch+json
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
micro=$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)

echo "== allowed with ClusterD's token (${SECONDS}s)"
check 200 "list pods, all namespaces" GET /api/v1/pods
check 200 "watch pods, all namespaces" GET "/api/v1/pods?watch=1&timeoutSeconds=1"
check 200 "list pods, one namespace" GET "/api/v1/namespaces/$WORK/pods?labelSelector=job-name%3Da"
check 200 "get a pod" GET "/api/v1/namespaces/$WORK/pods/rank-0"
check 200 "list nodes" GET /api/v1/nodes
check 200 "watch nodes" GET "/api/v1/nodes?watch=1&timeoutSeconds=1"
check 200 "get a node" GET /api/v1/nodes/worker-1
check 200 "cordon + taint + annotate a node" PATCH /api/v1/nodes/worker-1 \
  "{\"metadata\":{\"annotations\":{\"clusterd.io/isolated-devices\":\"Ascend910-3\"}},\"spec\":{\"unschedulable\":true,\"taints\":[{\"key\":\"clusterd.io/fault\",\"value\":\"SEPARATE\",\"effect\":\"NoSchedule\"}]}}" $SMP
check 200 "label a node" PATCH /api/v1/nodes/worker-1 '{"metadata":{"labels":{"clusterd.io/health":"unhealthy"}}}'
check 200 "JSON-patch a node" PATCH /api/v1/nodes/worker-1 '[{"op":"test","path":"/spec/unschedulable","value":true},{"op":"replace","path":"/spec/unschedulable","value":false}]' application/json-patch+json
check 200 "set a Node condition (nodes/status)" PATCH /api/v1/nodes/worker-1/status \
  "{\"status\":{\"conditions\":[{\"type\":\"AcceleratorHealthy\",\"status\":\"False\",\"reason\":\"SEPARATE\",\"message\":\"80E01801 on Ascend910-3\",\"lastHeartbeatTime\":\"$now\",\"lastTransitionTime\":\"$now\"}]}}" $SMP
check 201 "evict a pod (pods/eviction)" POST "/api/v1/namespaces/$WORK/pods/rank-1/eviction" \
  "{\"apiVersion\":\"policy/v1\",\"kind\":\"Eviction\",\"metadata\":{\"name\":\"rank-1\",\"namespace\":\"$WORK\"}}"
check 200 "delete a pod (restart a job)" DELETE "/api/v1/namespaces/$WORK/pods/rank-2"
check 200 "list PodGroups, all namespaces" GET /apis/scheduling.volcano.sh/v1beta1/podgroups
check 200 "watch PodGroups" GET "/apis/scheduling.volcano.sh/v1beta1/podgroups?watch=1&timeoutSeconds=1"
check 200 "get a PodGroup" GET "/apis/scheduling.volcano.sh/v1beta1/namespaces/$WORK/podgroups/job-a"
core_event() { # core_event NAMESPACE NAME KIND OBJECT_NAMESPACE OBJECT_NAME
  echo "{\"apiVersion\":\"v1\",\"kind\":\"Event\",\"metadata\":{\"name\":\"$2\"},\"involvedObject\":{\"kind\":\"$3\",\"name\":\"$5\"$([[ -n $4 ]] && echo ",\"namespace\":\"$4\"")},\"reason\":\"RecoveryStep\",\"message\":\"evict rank 1\",\"type\":\"Warning\",\"source\":{\"component\":\"clusterd\"},\"firstTimestamp\":\"$now\",\"lastTimestamp\":\"$now\",\"count\":1}"
}
check 201 "create a core/v1 Event on a pod" POST "/api/v1/namespaces/$WORK/events" "$(core_event "$WORK" clusterd.step-1 Pod "$WORK" rank-1)"
check 200 "patch a core/v1 Event (count)" PATCH "/api/v1/namespaces/$WORK/events/clusterd.step-1" '{"count":2}'
check 201 "create a core/v1 Event on a node (namespace default)" POST /api/v1/namespaces/default/events "$(core_event default clusterd.node-1 Node "" worker-1)"
check 201 "create an events.k8s.io/v1 Event" POST "/apis/events.k8s.io/v1/namespaces/$WORK/events" \
  "{\"apiVersion\":\"events.k8s.io/v1\",\"kind\":\"Event\",\"metadata\":{\"name\":\"clusterd.step-2\"},\"eventTime\":\"$micro\",\"reportingController\":\"clusterd.io/clusterd\",\"reportingInstance\":\"clusterd-0\",\"action\":\"Evict\",\"reason\":\"RecoveryStep\",\"note\":\"evict rank 1\",\"type\":\"Warning\",\"regarding\":{\"kind\":\"PodGroup\",\"apiVersion\":\"scheduling.volcano.sh/v1beta1\",\"namespace\":\"$WORK\",\"name\":\"job-a\"}}"
check 200 "patch an events.k8s.io/v1 Event (series)" PATCH "/apis/events.k8s.io/v1/namespaces/$WORK/events/clusterd.step-2" \
  "{\"series\":{\"count\":2,\"lastObservedTime\":\"$micro\"}}"
LEASES=/apis/coordination.k8s.io/v1/namespaces/$NS/leases
check 201 "create a Lease in $NS" POST "$LEASES" \
  '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"clusterd"},"spec":{"holderIdentity":"clusterd-0","leaseDurationSeconds":15}}'
check 200 "get the Lease" GET "$LEASES/clusterd"
lease=$(K8S_TOKEN=$SA_TOKEN k8s_api GET "$LEASES/clusterd" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); d["spec"]["leaseTransitions"]=1; print(json.dumps(d))') || lease='{}'
check 200 "update the Lease (PUT with resourceVersion)" PUT "$LEASES/clusterd" "$lease"
check 409 "a stale Lease update is a conflict, not a permission error" PUT "$LEASES/clusterd" "$lease"

echo "== refused with ClusterD's token (${SECONDS}s)"
check 403 "list secrets, all namespaces" GET /api/v1/secrets
check 403 "get secrets in its own namespace" GET "/api/v1/namespaces/$NS/secrets"
check 403 "list configmaps" GET /api/v1/configmaps
check 403 "create a pod" POST "/api/v1/namespaces/$WORK/pods" "$(pod_json rogue)"
check 403 "patch a pod" PATCH "/api/v1/namespaces/$WORK/pods/rank-0" '{"metadata":{"labels":{"x":"y"}}}'
check 403 "patch pods/status" PATCH "/api/v1/namespaces/$WORK/pods/rank-0/status" '{"status":{"phase":"Failed"}}'
check 403 "exec into a pod" POST "/api/v1/namespaces/$WORK/pods/rank-0/exec?command=sh&stdout=true"
check 403 "create a node" POST /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"rogue"}}'
check 403 "delete a node" DELETE /api/v1/nodes/worker-1
check 403 "update a node (PUT)" PUT /api/v1/nodes/worker-1 '{"apiVersion":"v1","kind":"Node","metadata":{"name":"worker-1"}}'
check 403 "create a PodGroup" POST "/apis/scheduling.volcano.sh/v1beta1/namespaces/$WORK/podgroups" \
  '{"apiVersion":"scheduling.volcano.sh/v1beta1","kind":"PodGroup","metadata":{"name":"rogue"},"spec":{}}'
check 403 "patch a PodGroup" PATCH "/apis/scheduling.volcano.sh/v1beta1/namespaces/$WORK/podgroups/job-a" '{"spec":{"minMember":1}}'
check 403 "delete an Event" DELETE "/api/v1/namespaces/$WORK/events/clusterd.step-1"
check 403 "list Leases in $NS" GET "$LEASES"
check 403 "delete the Lease" DELETE "$LEASES/clusterd"
check 403 "create a Lease in another namespace" POST "/apis/coordination.k8s.io/v1/namespaces/$WORK/leases" \
  '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"clusterd"},"spec":{}}'
check 403 "get a Lease in kube-system" GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager
check 403 "list Deployments" GET /apis/apps/v1/deployments
check 403 "request another token (serviceaccounts/token)" POST "/api/v1/namespaces/$NS/serviceaccounts/clusterd/token" \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}'
check 403 "bind itself a role (clusterrolebindings)" POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings \
  "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRoleBinding\",\"metadata\":{\"name\":\"rogue\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":\"cluster-admin\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"clusterd\",\"namespace\":\"$NS\"}]}"
check 403 "delete the PodGroup CRD" DELETE /apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.volcano.sh

echo "== NodeD's ServiceAccount has no API access (${SECONDS}s)"
TOKEN=$NODED_TOKEN check 403 "NodeD: list pods" GET /api/v1/pods
TOKEN=$NODED_TOKEN check 403 "NodeD: get its node" GET /api/v1/nodes/worker-1
TOKEN=$NODED_TOKEN check 403 "NodeD: patch a node" PATCH /api/v1/nodes/worker-1 '{"metadata":{"labels":{"x":"y"}}}'

echo "== the real clusterd on the installed config.json with its own token (${SECONDS}s)"
# The whole help is read before matching: grep -q in a pipe would end clusterd with SIGPIPE.
CLUSTERD=${CLUSTERD:-build/bin/clusterd}
help=$("$CLUSTERD" --help 2>&1 || true)
if [[ -x $CLUSTERD && $help == *--kubeconfig* ]]; then
  d=$TMP/clusterd
  mkdir -p "$d"
  k8s_api GET "/api/v1/namespaces/$NS/configmaps/clusterd" |
    python3 -c 'import json,sys; sys.stdout.write(json.load(sys.stdin)["data"]["config.json"])' >"$d/config.json"
  k8s_write_kubeconfig "$d/kubeconfig" "$SA_TOKEN" "system:serviceaccount:$NS:clusterd" "$NS"
  http=$(k8s_free_port)
  # The file as installed; flags move only the ports and the data directory off the image's
  # and give the out-of-cluster credentials (in a pod: the mounted token).
  "$CLUSTERD" --config "$d/config.json" --kubeconfig "$d/kubeconfig" --listen "127.0.0.1:$(k8s_free_port)" \
    --http-listen "127.0.0.1:$http" --data-dir "$d/data" >"$d/clusterd.log" 2>&1 &
  CLUSTERD_PID=$!
  if k8s_wait 30 "clusterd /readyz" curl -fsS "http://127.0.0.1:$http/readyz"; then
    ok "clusterd is ready with integrations [kubernetes], actuator kubernetes and only its ServiceAccount's rights"
  else
    tail -20 "$d/clusterd.log" >&2
    bad "clusterd did not become ready with the installed config.json"
  fi
  if grep -qiE 'forbidden|\b403\b' "$d/clusterd.log"; then
    grep -iE 'forbidden|\b403\b' "$d/clusterd.log" | head -5 >&2
    bad "clusterd's log shows a refused API call"
  else
    ok "no refused (403) API call in clusterd's log"
  fi
  k8s_kill_wait "$CLUSTERD_PID"
  CLUSTERD_PID=
else
  echo "  skip $CLUSTERD missing or without --kubeconfig"
fi

echo "== helm upgrade --set kubernetes.enabled=false takes the access away (${SECONDS}s)"
if out=$(helm_k upgrade "$RELEASE" "$CHART" -n "$NS" --set kubernetes.enabled=false 2>&1); then
  ok "helm upgrade --set kubernetes.enabled=false"
else
  echo "$out" >&2
  bad "helm upgrade --set kubernetes.enabled=false"
fi
gone=$(k8s_code GET "/apis/rbac.authorization.k8s.io/v1/clusterroles/$CLUSTER_ROLE")
if [[ $gone == 404 ]]; then ok "ClusterRole $CLUSTER_ROLE removed"; else bad "ClusterRole $CLUSTER_ROLE: GET -> $gone, want 404"; fi
check 403 "disabled: list pods" GET /api/v1/pods
check 403 "disabled: get the Lease" GET "$LEASES/clusterd"
mount=$(k8s_api GET "/apis/apps/v1/namespaces/$NS/deployments/clusterd" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["spec"]["template"]["spec"].get("automountServiceAccountToken"))')
if [[ $mount == False ]]; then ok "disabled: no token mounted into ClusterD"; else bad "disabled: automountServiceAccountToken is $mount"; fi
if out=$(helm_k uninstall "$RELEASE" -n "$NS" 2>&1); then ok "helm uninstall"; else echo "$out" >&2; bad "helm uninstall"; fi

echo "helm_rbac_test: $passed passed, $failed failed (${SECONDS}s)"
((failed == 0))
