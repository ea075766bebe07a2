#!/usr/bin/env bash
# Installs the chart (charts/clusterd) with `helm install` into a real kube-apiserver + etcd
# (test/k8s/lib.sh; no kubelet, so the pods stay Pending) and checks, with real requests made
# with a token of ClusterD's own ServiceAccount (TokenRequest API), that the rendered RBAC
# allows every call ClusterD makes (docs/deploy.md, "Kubernetes API access") and refuses
# what it does not need (403). Also: NodeD's ServiceAccount gets nothing from the API server,
# but its pod-bound token with audience clusterd passes ClusterD's TokenReview (the chart's
# tokenreviews rule) and names the node; the generated certificates survive `helm upgrade`.
# With the real binaries built, ClusterD runs on the installed config.json and Secrets (mutual
# TLS, TokenReview through the API server with its own token) and a NodeD with the installed
# client certificate and a pod-bound token connects as its node. `helm upgrade --set
# mindcluster.volcano.enabled=true` (publicFaultNamespaces [fd-online]): ClusterD's token reads
# ConfigMaps in kube-system and fd-online and writes them in mindx-dl (no patch, no other
# namespace, no secrets; with MindCluster's operators' ConfigMaps on, also get, list, watch,
# create, update and delete in cluster-system), and the real clusterd with the mindcluster
# integration writes mindx-dl/cluster-info-node-cm and the observability ConfigMaps with no
# refused call. `helm upgrade --set
# kubernetes.enabled=false` removes the integration's access (and, the value not set again,
# the mindcluster Roles), `--set auth.tokenReview=false` the rest. Then `helm upgrade --set ha.enabled=true` (integration and TokenReview still off): the
# leader label's Role lets ClusterD's token get and patch pods in the release namespace and
# nothing else (no other namespace, no list, delete or status), the StatefulSet mounts the
# token for it, and the real clusterd with the StatefulSet's flags labels its (stand-in) pod
# leader; the deployed etcd's generated TLS Secrets (ha.etcd.tls) are installed, kept by the
# next upgrade, and an upgrade that would switch the installed etcd to plaintext is refused;
# `--set ha.leaderLabel=false` takes the Role and the token away again. Last, a release
# installed with a plaintext etcd cannot be upgraded to TLS. Prints every check; exits 0 only
# if all passed.
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
# expect_no_refusal LOG PREFIX: no API call in LOG was refused. A refusal reads "403
# Forbidden"; a log line's timestamp may end in ".403" too.
expect_no_refusal() {
  if grep -qiE 'forbidden|[^.0-9]403\b' "$1"; then
    { grep -iE 'forbidden|[^.0-9]403\b' "$1" | head -5 >&2; } || true # head ends grep early (SIGPIPE)
    bad "${2}clusterd's log shows a refused API call"
  else
    ok "${2}no refused (403) API call in clusterd's log"
  fi
}
ok() { passed=$((passed + 1)); echo "  ok   $*"; }
bad() { failed=$((failed + 1)); echo "  FAIL $*" >&2; }
die() {
  echo "helm_rbac_test: $*" >&2
  exit 1
}

TMP=$(mktemp -d)
CLUSTERD_PID= NODED_PID=
cleanup() {
  if [[ -n $NODED_PID ]]; then k8s_kill_wait "$NODED_PID"; fi
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
  "/apis/apps/v1/namespaces/$NS/deployments/clusterd" "/apis/apps/v1/namespaces/$NS/daemonsets/clusterd-noded" \
  "/apis/rbac.authorization.k8s.io/v1/clusterroles/$CLUSTER_ROLE-tokenreview" \
  "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/$CLUSTER_ROLE-tokenreview" \
  "/api/v1/namespaces/$NS/secrets/clusterd-ca" "/api/v1/namespaces/$NS/secrets/clusterd-tls" \
  "/api/v1/namespaces/$NS/secrets/clusterd-noded-tls" \
  "/apis/networking.k8s.io/v1/namespaces/$NS/networkpolicies/clusterd" \
  "/apis/networking.k8s.io/v1/namespaces/$NS/networkpolicies/clusterd-noded"; do
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
DRA=/apis/resource.k8s.io/v1
check 200 "list a node's ResourceSlices (DRA)" GET "$DRA/resourceslices?fieldSelector=spec.nodeName%3Dworker-1"
check 200 "probe ResourceSlices (limit=1)" GET "$DRA/resourceslices?limit=1"
check 201 "create a DeviceTaintRule" POST "$DRA/devicetaintrules" \
  '{"apiVersion":"resource.k8s.io/v1","kind":"DeviceTaintRule","metadata":{"name":"clusterd-dra-worker-1-3","labels":{"clusterd.io/managed":"true"}},"spec":{"deviceSelector":{"driver":"npu.example.com","pool":"worker-1","device":"npu-3"},"taint":{"key":"clusterd.io/fault","value":"PRE_SEPARATE","effect":"NoSchedule"}}}'
check 200 "get the DeviceTaintRule" GET "$DRA/devicetaintrules/clusterd-dra-worker-1-3"
check 200 "list ClusterD's DeviceTaintRules" GET "$DRA/devicetaintrules?labelSelector=clusterd.io%2Fmanaged%3Dtrue"
check 200 "strengthen the DeviceTaintRule (merge patch)" PATCH "$DRA/devicetaintrules/clusterd-dra-worker-1-3" \
  '{"spec":{"taint":{"key":"clusterd.io/fault","value":"SEPARATE","effect":"NoExecute"}}}'
check 200 "delete the DeviceTaintRule" DELETE "$DRA/devicetaintrules/clusterd-dra-worker-1-3"
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
check 403 "create a ResourceSlice (the DRA driver's)" POST "$DRA/resourceslices" \
  '{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"rogue"},"spec":{"driver":"npu.example.com","nodeName":"worker-1","pool":{"name":"worker-1","generation":1,"resourceSliceCount":1},"devices":[]}}'
check 403 "watch ResourceSlices" GET "$DRA/resourceslices?watch=1&timeoutSeconds=1"
check 403 "list ResourceClaims" GET "$DRA/resourceclaims"
check 403 "update a DeviceTaintRule (PUT)" PUT "$DRA/devicetaintrules/clusterd-dra-worker-1-3" \
  '{"apiVersion":"resource.k8s.io/v1","kind":"DeviceTaintRule","metadata":{"name":"clusterd-dra-worker-1-3"},"spec":{"taint":{"key":"k","effect":"None"}}}'
check 403 "delete all DeviceTaintRules" DELETE "$DRA/devicetaintrules"
check 403 "request another token (serviceaccounts/token)" POST "/api/v1/namespaces/$NS/serviceaccounts/clusterd/token" \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}'
check 403 "bind itself a role (clusterrolebindings)" POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings \
  "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRoleBinding\",\"metadata\":{\"name\":\"rogue\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":\"cluster-admin\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"clusterd\",\"namespace\":\"$NS\"}]}"
check 403 "delete the PodGroup CRD" DELETE /apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.volcano.sh

echo "== NodeD's ServiceAccount has no API access (${SECONDS}s)"
TOKEN=$NODED_TOKEN check 403 "NodeD: list pods" GET /api/v1/pods
TOKEN=$NODED_TOKEN check 403 "NodeD: get its node" GET /api/v1/nodes/worker-1
TOKEN=$NODED_TOKEN check 403 "NodeD: patch a node" PATCH /api/v1/nodes/worker-1 '{"metadata":{"labels":{"x":"y"}}}'

echo "== TokenReview: NodeD's pod-bound token, checked with ClusterD's token (${SECONDS}s)"
# A NodeD pod on worker-1 (never started: no kubelet) and the token its projected volume would
# hold: audience clusterd, bound to the pod, so the API server adds the pod's node.
admin POST "/api/v1/namespaces/$NS/pods" \
  '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"noded-worker-1"},"spec":{"nodeName":"worker-1","serviceAccountName":"clusterd-noded","containers":[{"name":"noded","image":"clusterd"}]}}'
pod_uid=$(k8s_api GET "/api/v1/namespaces/$NS/pods/noded-worker-1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["uid"])') || pod_uid=
AGENT_TOKEN=$(K8S_TOKEN= k8s_api POST "/api/v1/namespaces/$NS/serviceaccounts/clusterd-noded/token" \
  "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenRequest\",\"spec\":{\"audiences\":[\"clusterd\"],\"expirationSeconds\":3600,\"boundObjectRef\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"name\":\"noded-worker-1\",\"uid\":\"$pod_uid\"}}}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["token"])') || die "TokenRequest for NodeD's pod"
review() { # review TOKEN_TO_CHECK: the TokenReview body for audience clusterd
  echo "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenReview\",\"spec\":{\"token\":\"$1\",\"audiences\":[\"clusterd\"]}}"
}
check 201 "create a TokenReview" POST /apis/authentication.k8s.io/v1/tokenreviews "$(review "$AGENT_TOKEN")"
got=$(K8S_TOKEN=$SA_TOKEN k8s_api POST /apis/authentication.k8s.io/v1/tokenreviews "$(review "$AGENT_TOKEN")" |
  python3 -c 'import json,sys; s=json.load(sys.stdin)["status"]; u=s.get("user",{}); print(s.get("authenticated"), u.get("username"), u.get("extra",{}).get("authentication.kubernetes.io/node-name"), s.get("audiences"))' 2>&1) || true
want="True system:serviceaccount:$NS:clusterd-noded ['worker-1'] ['clusterd']"
if [[ $got == "$want" ]]; then ok "NodeD's pod-bound token: $got"; else bad "TokenReview of NodeD's token: '$got', want '$want'"; fi
TOKEN=$AGENT_TOKEN check 401 "NodeD's clusterd-audience token is no API token" GET /api/v1/nodes/worker-1
TOKEN=$NODED_TOKEN check 403 "NodeD: create a TokenReview" POST /apis/authentication.k8s.io/v1/tokenreviews "$(review "$AGENT_TOKEN")"

echo "== helm upgrade keeps the generated certificates (${SECONDS}s)"
secret_json() { k8s_api GET "/api/v1/namespaces/$NS/secrets/$1" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["data"], sort_keys=True))'; }
before=$(for s in clusterd-ca clusterd-tls clusterd-noded-tls; do secret_json "$s"; done)
if out=$(helm_k upgrade "$RELEASE" "$CHART" -n "$NS" 2>&1); then ok "helm upgrade (same values)"; else echo "$out" >&2; bad "helm upgrade (same values)"; fi
after=$(for s in clusterd-ca clusterd-tls clusterd-noded-tls; do secret_json "$s"; done)
if [[ -n $before && $before == "$after" ]]; then ok "CA, server and agent certificates unchanged by the upgrade"; else bad "helm upgrade rotated the generated certificates"; fi
# A new name for the server certificate: re-issued by the same CA; the agents' kept.
if out=$(helm_k upgrade "$RELEASE" "$CHART" -n "$NS" --set 'tls.extraDnsNames={clusterd.example.com}' 2>&1); then
  ok "helm upgrade --set tls.extraDnsNames={clusterd.example.com}"
else
  echo "$out" >&2; bad "helm upgrade --set tls.extraDnsNames"
fi
if [[ $(secret_json clusterd-ca) == $(sed -n 1p <<<"$before") && $(secret_json clusterd-noded-tls) == $(sed -n 3p <<<"$before") &&
      $(secret_json clusterd-tls) != $(sed -n 2p <<<"$before") ]] &&
   k8s_api GET "/api/v1/namespaces/$NS/secrets/clusterd-tls" |
     python3 -c 'import base64,json,sys; sys.stdout.buffer.write(base64.b64decode(json.load(sys.stdin)["data"]["tls.crt"]))' |
     openssl x509 -noout -ext subjectAltName 2>/dev/null | grep -q 'DNS:clusterd.example.com'; then
  ok "a new name re-issues the server certificate only, from the same CA"
else
  bad "tls.extraDnsNames did not re-issue just the server certificate"
fi
helm_k upgrade "$RELEASE" "$CHART" -n "$NS" >/dev/null 2>&1 || bad "helm upgrade back to the defaults"

echo "== the real clusterd and noded on the installed configuration (${SECONDS}s)"
# The whole help is read before matching: grep -q in a pipe would end clusterd with SIGPIPE.
CLUSTERD=${CLUSTERD:-build/bin/clusterd}
NODED=${NODED:-build/bin/noded}
help=$("$CLUSTERD" --help 2>&1 || true)
noded_help=$("$NODED" --help 2>&1 || true)
# installed KIND NAME ROOT [DROP_KEY...]: lays out the pod's "config" volume of the installed
# Deployment/StatefulSet/DaemonSet NAME under ROOT as the kubelet projects it (ConfigMap and Secret items
# as installed; $PROJECTED_TOKEN for a serviceAccountToken source) and prints the path of its
# config.json with the paths into the volume moved under ROOT (DROP_KEYs left out).
installed() {
  local kind=$1 name=$2 root=$3 res
  shift 3
  mkdir -p "$root"
  res=$(case $kind in Deployment) echo deployments ;; StatefulSet) echo statefulsets ;; *) echo daemonsets ;; esac)
  k8s_api GET "/apis/apps/v1/namespaces/$NS/$res/$name" >"$root/workload.json" &&
    k8s_api GET "/api/v1/namespaces/$NS/configmaps" >"$root/configmaps.json" &&
    k8s_api GET "/api/v1/namespaces/$NS/secrets" >"$root/secrets.json" || return 1
  PROJECTED_TOKEN=${PROJECTED_TOKEN-} python3 - "$root" "$@" <<'PY'
import base64, json, os, sys
root, drop = sys.argv[1], sys.argv[2:]
spec = json.load(open(os.path.join(root, "workload.json")))["spec"]["template"]["spec"]
items = {k: {o["metadata"]["name"]: o for o in json.load(open(os.path.join(root, f)))["items"]}
         for k, f in (("configMap", "configmaps.json"), ("secret", "secrets.json"))}
vol = next(v for v in spec["volumes"] if v["name"] == "config")
mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "config")["mountPath"]
def put(path, data, mode):
    p = os.path.join(root + mount, path)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)
    os.chmod(p, mode)
for src in vol["projected"]["sources"]:
    for k in ("configMap", "secret"):
        if k in src:
            o = items[k][src[k]["name"]]
            data = ({n: v.encode() for n, v in o["data"].items()} if k == "configMap"
                    else {n: base64.b64decode(v) for n, v in o["data"].items()})
            for it in src[k].get("items") or [{"key": n, "path": n} for n in data]:
                put(it["path"], data[it["key"]], it.get("mode", 0o644))
    if "serviceAccountToken" in src:
        put(src["serviceAccountToken"]["path"], os.environ["PROJECTED_TOKEN"].encode(), 0o600)
cfg = json.load(open(os.path.join(root + mount, "config.json")))
# A DROP_KEY ending in "_" drops every key with that prefix.
for k in [k for k in cfg if any(k == d or (d.endswith("_") and k.startswith(d)) for d in drop)]:
    cfg.pop(k)
for k, v in cfg.items():
    if isinstance(v, str) and v.startswith(mount + "/"):
        cfg[k] = root + v
out = os.path.join(root, "config.local.json")
json.dump(cfg, open(out, "w"), indent=2)
print(out)
PY
}
# probe_flags: with TLS the HTTP port is TLS and the installed probe_listen (0.0.0.0:11254) is
# where the probes go: moved to a local port, $ready (the port to probe; $http without TLS).
probe_flags() {
  probe_args=() ready=$http
  if [[ -n $tls ]]; then
    ready=$(free_port)
    probe_args=(--probe-listen "127.0.0.1:$ready")
  fi
}
# start_installed_clusterd DIR: the built clusterd in the background on the installed config
# (from the Deployment, written under DIR) with the ServiceAccount's token as its only
# credentials. Sets d, tls, conf, http, grpc and CLUSTERD_PID.
start_installed_clusterd() {
  d=$1
  tls=
  if [[ $help == *--tls-cert-file* ]]; then
    tls=1
    conf=$(installed Deployment clusterd "$d") || die "reading the installed Deployment"
  else
    # A clusterd from before TLS: the installed config without the security keys.
    conf=$(installed Deployment clusterd "$d" tls_ auth_ metrics_ insecure probe_listen) || die "reading the installed Deployment"
  fi
  k8s_write_kubeconfig "$d/kubeconfig" "$SA_TOKEN" "system:serviceaccount:$NS:clusterd" "$NS"
  http=$(free_port) grpc=$(free_port)
  probe_flags
  # The file as installed; flags move only the ports and the data directory off the image's
  # and give the out-of-cluster credentials (in a pod: the mounted token).
  "$CLUSTERD" --config "$conf" --kubeconfig "$d/kubeconfig" --listen "127.0.0.1:$grpc" \
    --http-listen "127.0.0.1:$http" "${probe_args[@]}" --data-dir "$d/data" >"$d/clusterd.log" 2>&1 &
  CLUSTERD_PID=$!
}
if [[ -x $CLUSTERD && $help == *--kubeconfig* ]]; then
  start_installed_clusterd "$TMP/clusterd"
  if k8s_wait 30 "clusterd /readyz" curl -fsS "http://127.0.0.1:$ready/readyz"; then
    ok "clusterd is ready with integrations [kubernetes], actuator kubernetes${tls:+, mutual TLS, TokenReview} and only its ServiceAccount's rights"
  else
    tail -20 "$d/clusterd.log" >&2
    bad "clusterd did not become ready with the installed config.json"
  fi
  if [[ -n $tls && -x $NODED && $noded_help == *--tls-ca-file* ]] && command -v grpcurl >/dev/null; then
    # NodeD as the DaemonSet installs it: its config.json, the shared client certificate and
    # the pod-bound token (here the one issued above for the pod on worker-1).
    n=$TMP/noded
    nconf=$(PROJECTED_TOKEN=$AGENT_TOKEN installed DaemonSet clusterd-noded "$n") || die "reading the installed DaemonSet"
    mkdir -p "$n/state"
    nhttp=$(free_port)
    # The Service name the pods use is checked against ClusterD's certificate.
    "$NODED" --config "$nconf" --node-name worker-1 --server "127.0.0.1:$grpc" --server-name "clusterd.$NS.svc" \
      --accelerator sim --root / --kmsg-path "" --state-dir "$n/state" --http-listen "127.0.0.1:$nhttp" >"$n/noded.log" 2>&1 &
    NODED_PID=$!
    # A viewer's client certificate from the generated CA (what NOTES.txt shows).
    c=$TMP/client
    mkdir -p "$c"
    k8s_api GET "/api/v1/namespaces/$NS/secrets/clusterd-ca" | python3 -c 'import base64,json,os,sys
d = json.load(sys.stdin)["data"]
for k, f in (("ca.crt", "ca.crt"), ("tls.key", "ca.key")): open(os.path.join(sys.argv[1], f), "wb").write(base64.b64decode(d[k]))' "$c"
    (cd "$c" && openssl req -new -newkey rsa:2048 -nodes -keyout client.key -subj "/CN=rbac-test/O=clusterd:viewer" -out client.csr &&
      openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -out client.crt) >"$c/openssl.log" 2>&1 ||
      bad "a viewer certificate from the generated CA"
    viewer=(grpcurl -cacert "$c/ca.crt" -cert "$c/client.crt" -key "$c/client.key" -authority "clusterd.$NS.svc" "127.0.0.1:$grpc")
    # worker-1 with an agent stream (the integration alone would list the Kubernetes Node too,
    # without one).
    connected() {
      "${viewer[@]}" clusterd.v1.ClusterService/ListNodes 2>/dev/null |
        python3 -c 'import json,sys; sys.exit(not any(n.get("name") == "worker-1" and n.get("connected") for n in json.load(sys.stdin).get("nodes", [])))'
    }
    if k8s_wait 30 "NodeD worker-1 connected" connected; then
      ok "NodeD connects as worker-1 (client certificate + pod-bound token, TokenReview through the API server)"
    else
      tail -10 "$n/noded.log" >&2
      tail -10 "$d/clusterd.log" >&2
      bad "NodeD did not connect as worker-1"
    fi
    if timeout 10 grpcurl -cacert "$c/ca.crt" -authority "clusterd.$NS.svc" "127.0.0.1:$grpc" grpc.health.v1.Health/Check >/dev/null 2>&1; then
      bad "mutual TLS: a client without a certificate was let in"
    else
      ok "mutual TLS: a client without a certificate is refused"
    fi
    k8s_kill_wait "$NODED_PID"
    # The same token and certificate saying hello for another node: the token names worker-1.
    mkdir -p "$n/state2"
    "$NODED" --config "$nconf" --node-name worker-2 --server "127.0.0.1:$grpc" --server-name "clusterd.$NS.svc" \
      --accelerator sim --root / --kmsg-path "" --state-dir "$n/state2" --http-listen "127.0.0.1:$(free_port)" \
      >"$n/noded2.log" 2>&1 &
    NODED_PID=$!
    if k8s_wait 30 "hello for worker-2 refused" grep -q 'may say hello only for node "worker-1", not "worker-2"' "$d/clusterd.log"; then
      ok "worker-1's token cannot say hello for worker-2 (PERMISSION_DENIED, audited)"
    else
      tail -5 "$n/noded2.log" >&2
      bad "a hello for worker-2 with worker-1's token was not refused"
    fi
    k8s_kill_wait "$NODED_PID"
    NODED_PID=
  elif [[ -n $tls ]]; then
    echo "  skip NodeD not run ($NODED without --tls-ca-file, or no grpcurl)"
  fi
  expect_no_refusal "$d/clusterd.log" ""
  k8s_kill_wait "$CLUSTERD_PID"
  CLUSTERD_PID=
else
  echo "  skip $CLUSTERD missing or without --kubeconfig"
fi

echo "== helm upgrade --set mindcluster.volcano.enabled=true: configmaps in three namespaces (${SECONDS}s)"
# The mindcluster integration (docs/deploy.md, "Next to MindCluster's components"), next to the
# Kubernetes integration: ClusterD reads the device plugin's ConfigMaps in kube-system (get, list,
# watch) and writes Volcano's cluster-info ConfigMaps in mindx-dl (get, list, watch, create,
# update, delete), through two Roles, and reads the public-fault ConfigMaps of fd-online
# (publicFaultNamespaces; get, list, watch) through a third; configmaps in every other
# namespace, secrets there, patch and the plugin's ConfigMaps' writes stay refused.
PLUGIN_NS=kube-system MC_NS=mindx-dl PF_NS=fd-online SYS_NS=cluster-system
k8s_create_namespace "$SYS_NS" || die "namespace $SYS_NS"
k8s_create_namespace "$PLUGIN_NS" || die "namespace $PLUGIN_NS"
k8s_create_namespace "$MC_NS" || die "namespace $MC_NS"
k8s_create_namespace "$PF_NS" || die "namespace $PF_NS"
# With MindCluster's operators' ConfigMaps (all four on): a fourth Role in cluster-system.
if out=$(helm_k upgrade "$RELEASE" "$CHART" -n "$NS" --set mindcluster.volcano.enabled=true \
  --set mindcluster.volcano.separationPolicyConfigMap=true --set mindcluster.volcano.manualInfoConfigMap=true \
  --set mindcluster.volcano.statisticsConfigMaps=true --set mindcluster.volcano.schedulingExceptionConfigMap=true \
  --set-json "mindcluster.volcano.publicFaultNamespaces=[\"$PF_NS\"]" 2>&1); then
  ok "helm upgrade --set mindcluster.volcano.enabled=true, publicFaultNamespaces [$PF_NS]"
else
  echo "$out" >&2
  bad "helm upgrade --set mindcluster.volcano.enabled=true, publicFaultNamespaces [$PF_NS]"
fi
MC_READ_ROLE=/apis/rbac.authorization.k8s.io/v1/namespaces/$PLUGIN_NS/roles/clusterd-mindcluster-deviceinfo
MC_WRITE_ROLE=/apis/rbac.authorization.k8s.io/v1/namespaces/$MC_NS/roles/clusterd-mindcluster-clusterinfo
MC_PF_ROLE=/apis/rbac.authorization.k8s.io/v1/namespaces/$PF_NS/roles/clusterd-mindcluster-publicfault
for obj in "$MC_READ_ROLE" "$MC_WRITE_ROLE" "$MC_PF_ROLE" \
  "/apis/rbac.authorization.k8s.io/v1/namespaces/$PLUGIN_NS/rolebindings/clusterd-mindcluster-deviceinfo" \
  "/apis/rbac.authorization.k8s.io/v1/namespaces/$MC_NS/rolebindings/clusterd-mindcluster-clusterinfo" \
  "/apis/rbac.authorization.k8s.io/v1/namespaces/$PF_NS/rolebindings/clusterd-mindcluster-publicfault"; do
  if k8s_api GET "$obj" | name_of >/dev/null 2>&1; then ok "installed: $obj"; else bad "not installed: $obj"; fi
done
role_rules() { k8s_api GET "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rules"])'; }
got=$(role_rules "$MC_READ_ROLE" 2>&1) || true
want="[{'verbs': ['get', 'list', 'watch'], 'apiGroups': [''], 'resources': ['configmaps']}]"
if [[ $got == "$want" ]]; then ok "Role clusterd-mindcluster-deviceinfo: get, list, watch on configmaps"; else bad "Role clusterd-mindcluster-deviceinfo rules: '$got', want '$want'"; fi
got=$(role_rules "$MC_PF_ROLE" 2>&1) || true
if [[ $got == "$want" ]]; then ok "Role clusterd-mindcluster-publicfault: get, list, watch on configmaps"; else bad "Role clusterd-mindcluster-publicfault rules: '$got', want '$want'"; fi
got=$(role_rules "/apis/rbac.authorization.k8s.io/v1/namespaces/$SYS_NS/roles/clusterd-mindcluster-system" 2>&1) || true
want="[{'verbs': ['get', 'list', 'watch', 'create', 'update', 'delete'], 'apiGroups': [''], 'resources': ['configmaps']}]"
if [[ $got == "$want" ]]; then ok "Role clusterd-mindcluster-system: get, list, watch, create, update, delete on configmaps"; else bad "Role clusterd-mindcluster-system rules: '$got', want '$want'"; fi
got=$(role_rules "$MC_WRITE_ROLE" 2>&1) || true
want="[{'verbs': ['get', 'list', 'watch', 'create', 'update'], 'apiGroups': [''], 'resources': ['configmaps']}]"
if [[ $got == "$want" ]]; then ok "Role clusterd-mindcluster-clusterinfo: get, list, watch, create, update on configmaps"; else bad "Role clusterd-mindcluster-clusterinfo rules: '$got', want '$want'"; fi
got=$(k8s_api GET "/api/v1/namespaces/$NS/configmaps/clusterd" |
  python3 -c 'import json,sys; c=json.loads(json.load(sys.stdin)["data"]["config.json"]); print(c["integrations"], c["mindcluster_device_info_namespace"], c["mindcluster_cluster_info_namespace"], c.get("mindcluster_public_fault_namespaces"))' 2>&1) || true
if [[ $got == "['kubernetes', 'mindcluster'] $PLUGIN_NS $MC_NS ['$PF_NS']" ]]; then ok "installed config.json: $got"; else bad "installed config.json: '$got'"; fi
# The device plugin's ConfigMap for worker-1, as the plugin writes it (the admin stands in for it).
PLUGIN_CMS=/api/v1/namespaces/$PLUGIN_NS/configmaps MC_CMS=/api/v1/namespaces/$MC_NS/configmaps
admin POST "$PLUGIN_CMS" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"mindx-dl-deviceinfo-worker-1","labels":{"mx-consumer-cim":"true"}},"data":{"DeviceInfoCfg":"{}"}}'
check 200 "mindcluster: list the plugin's ConfigMaps (mx-consumer-cim=true)" GET "$PLUGIN_CMS?labelSelector=mx-consumer-cim%3Dtrue"
check 200 "mindcluster: watch them" GET "$PLUGIN_CMS?labelSelector=mx-consumer-cim%3Dtrue&watch=1&timeoutSeconds=1"
check 200 "mindcluster: get one" GET "$PLUGIN_CMS/mindx-dl-deviceinfo-worker-1"
check 200 "mindcluster: list the cluster-info ConfigMaps (mx-consumer-volcano=true)" GET "$MC_CMS?labelSelector=mx-consumer-volcano%3Dtrue"
cluster_info() { # cluster_info NAME VALUE [RESOURCE_VERSION]
  echo "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"$1\",\"namespace\":\"$MC_NS\",\"labels\":{\"mx-consumer-volcano\":\"true\"}${3:+,\"resourceVersion\":\"$3\"}},\"data\":{\"$1\":\"$2\"}}"
}
check 201 "mindcluster: create cluster-info-device-0 (POST to the collection)" POST "$MC_CMS" "$(cluster_info cluster-info-device-0 1)"
check 200 "mindcluster: get it" GET "$MC_CMS/cluster-info-device-0"
rv=$(K8S_TOKEN=$SA_TOKEN k8s_api GET "$MC_CMS/cluster-info-device-0" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])') || rv=0
# A changed value each time: an update that changes nothing keeps the resourceVersion.
check 200 "mindcluster: update it (PUT with resourceVersion)" PUT "$MC_CMS/cluster-info-device-0" "$(cluster_info cluster-info-device-0 2 "$rv")"
check 409 "mindcluster: a stale update is a conflict, not a permission error" PUT "$MC_CMS/cluster-info-device-0" "$(cluster_info cluster-info-device-0 3 "$rv")"
check 403 "mindcluster: patch a cluster-info ConfigMap" PATCH "$MC_CMS/cluster-info-device-0" '{"data":{"x":"y"}}'
check 403 "mindcluster: delete it (never: a deleted one loses Volcano its nodes)" DELETE "$MC_CMS/cluster-info-device-0"
check 403 "mindcluster: delete every ConfigMap of $MC_NS (deletecollection)" DELETE "$MC_CMS"
check 403 "mindcluster: create a ConfigMap in $PLUGIN_NS" POST "$PLUGIN_CMS" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"rogue"}}'
check 403 "mindcluster: update the plugin's ConfigMap" PUT "$PLUGIN_CMS/mindx-dl-deviceinfo-worker-1" \
  '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"mindx-dl-deviceinfo-worker-1"},"data":{}}'
check 403 "mindcluster: delete the plugin's ConfigMap" DELETE "$PLUGIN_CMS/mindx-dl-deviceinfo-worker-1"
PF_CMS=/api/v1/namespaces/$PF_NS/configmaps
check 200 "mindcluster: list the public-fault ConfigMaps of $PF_NS (mc-consumer-publicfault=true)" GET "$PF_CMS?labelSelector=mc-consumer-publicfault%3Dtrue"
check 200 "mindcluster: watch them" GET "$PF_CMS?labelSelector=mc-consumer-publicfault%3Dtrue&watch=1&timeoutSeconds=1"
check 403 "mindcluster: create a ConfigMap in $PF_NS" POST "$PF_CMS" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"rogue"}}'
check 403 "mindcluster: list the public-fault ConfigMaps of $WORK (not listed)" GET "/api/v1/namespaces/$WORK/configmaps?labelSelector=mc-consumer-publicfault%3Dtrue"
check 403 "mindcluster: list configmaps in $WORK" GET "/api/v1/namespaces/$WORK/configmaps"
check 403 "mindcluster: list configmaps, all namespaces" GET /api/v1/configmaps
check 403 "mindcluster: list secrets in $MC_NS" GET "/api/v1/namespaces/$MC_NS/secrets"
check 403 "mindcluster: list secrets in $PLUGIN_NS" GET "/api/v1/namespaces/$PLUGIN_NS/secrets"
SYS_CMS=/api/v1/namespaces/$SYS_NS/configmaps
check 200 "mindcluster: list and watch $SYS_NS's ConfigMaps (clusterd-config-cm, clusterd-manual-info-cm)" GET "$SYS_CMS?watch=1&timeoutSeconds=1"
check 201 "mindcluster: create clusterd-manual-info-cm" POST "$SYS_CMS" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"clusterd-manual-info-cm"},"data":{}}'
check 200 "mindcluster: delete it (nothing separated)" DELETE "$SYS_CMS/clusterd-manual-info-cm"
check 403 "mindcluster: patch a ConfigMap of $SYS_NS" PATCH "$SYS_CMS/clusterd-config-cm" '{"data":{"x":"y"}}'
check 403 "mindcluster: list secrets in $SYS_NS" GET "/api/v1/namespaces/$SYS_NS/secrets"
TOKEN=$NODED_TOKEN check 403 "NodeD: list the cluster-info ConfigMaps" GET "$MC_CMS"
# The real clusterd with both integrations on the installed config.json: it lists and watches the
# plugin's ConfigMaps, MindCluster NodeD's and the public-fault ConfigMaps of fd-online, takes
# over the cluster-info ConfigMaps and writes cluster-info-node-cm (always written on its first
# pass) with its ServiceAccount's rights alone.
if [[ -x $CLUSTERD && $help == *--kubeconfig* && $help == *--mindcluster-public-fault-namespaces* ]]; then
  start_installed_clusterd "$TMP/clusterd-mindcluster"
  node_cm() { [[ $(k8s_code GET "$MC_CMS/cluster-info-node-cm") == 200 ]]; }
  stat_cms() { [[ $(k8s_code GET "$SYS_CMS/statistic-fault-info") == 200 && $(k8s_code GET "$MC_CMS/current-job-statistic") == 200 ]]; }
  if k8s_wait 30 "clusterd /readyz" curl -fsS "http://127.0.0.1:$ready/readyz" &&
     k8s_wait 30 "$MC_NS/cluster-info-node-cm written" node_cm &&
     k8s_wait 30 "$SYS_NS/statistic-fault-info and $MC_NS/current-job-statistic written" stat_cms; then
    ok "clusterd with integrations [kubernetes, mindcluster] writes $MC_NS/cluster-info-node-cm, $SYS_NS/statistic-fault-info and $MC_NS/current-job-statistic with only its ServiceAccount's rights"
  else
    tail -20 "$d/clusterd.log" >&2
    bad "clusterd with the mindcluster integration did not write $MC_NS/cluster-info-node-cm"
  fi
  expect_no_refusal "$d/clusterd.log" "mindcluster: "
  k8s_kill_wait "$CLUSTERD_PID"
  CLUSTERD_PID=
else
  echo "  skip $CLUSTERD missing or without --kubeconfig/--mindcluster-public-fault-namespaces"
fi

echo "== helm upgrade --set kubernetes.enabled=false takes the integration's access away (${SECONDS}s)"
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
# mindcluster.volcano.enabled is not set again: its Roles go with the upgrade.
for obj in "$MC_READ_ROLE" "$MC_WRITE_ROLE" "$MC_PF_ROLE"; do
  gone=$(k8s_code GET "$obj")
  if [[ $gone == 404 ]]; then ok "mindcluster off: $obj removed"; else bad "mindcluster off: $obj: GET -> $gone, want 404"; fi
done
check 403 "mindcluster off: list the plugin's ConfigMaps" GET "$PLUGIN_CMS?labelSelector=mx-consumer-cim%3Dtrue"
check 403 "mindcluster off: list the cluster-info ConfigMaps" GET "$MC_CMS?labelSelector=mx-consumer-volcano%3Dtrue"
check 403 "mindcluster off: list the public-fault ConfigMaps of $PF_NS" GET "$PF_CMS?labelSelector=mc-consumer-publicfault%3Dtrue"
check 201 "TokenReview stays (auth.tokenReview)" POST /apis/authentication.k8s.io/v1/tokenreviews "$(review "$AGENT_TOKEN")"
automount() {
  k8s_api GET "/apis/apps/v1/namespaces/$NS/deployments/clusterd" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["spec"]["template"]["spec"].get("automountServiceAccountToken"))'
}
mount=$(automount)
if [[ $mount == True ]]; then ok "integration off: the token stays mounted for TokenReview"; else bad "integration off: automountServiceAccountToken is $mount, want True"; fi

echo "== helm upgrade --set auth.tokenReview=false takes the rest away (${SECONDS}s)"
if out=$(helm_k upgrade "$RELEASE" "$CHART" -n "$NS" --set kubernetes.enabled=false --set auth.tokenReview=false 2>&1); then
  ok "helm upgrade --set kubernetes.enabled=false --set auth.tokenReview=false"
else
  echo "$out" >&2
  bad "helm upgrade --set auth.tokenReview=false"
fi
gone=$(k8s_code GET "/apis/rbac.authorization.k8s.io/v1/clusterroles/$CLUSTER_ROLE-tokenreview")
if [[ $gone == 404 ]]; then ok "ClusterRole $CLUSTER_ROLE-tokenreview removed"; else bad "ClusterRole $CLUSTER_ROLE-tokenreview: GET -> $gone, want 404"; fi
check 403 "disabled: create a TokenReview" POST /apis/authentication.k8s.io/v1/tokenreviews "$(review "$AGENT_TOKEN")"
mount=$(automount)
if [[ $mount == False ]]; then ok "disabled: no token mounted into ClusterD"; else bad "disabled: automountServiceAccountToken is $mount"; fi
projected=$(k8s_api GET "/apis/apps/v1/namespaces/$NS/daemonsets/clusterd-noded" |
  python3 -c 'import json,sys; print([k for v in json.load(sys.stdin)["spec"]["template"]["spec"]["volumes"] for s in v.get("projected", {}).get("sources", []) for k in s])')
if [[ $projected == "['configMap', 'secret']" ]]; then ok "disabled: NodeD has no projected token"; else bad "disabled: NodeD's projected sources are $projected"; fi
echo "== helm upgrade --set ha.enabled=true: the leader label's Role alone, pods in $NS only (${SECONDS}s)"
# ha.enabled (ha.leaderLabel by default) with the integration and TokenReview still off: the
# replicas label their own pods (get and patch on pods in the release namespace, a Role of its
# own), so ClusterD's token is mounted again, for that alone. A stand-in for a replica's pod
# (no kubelet: it stays Pending) to act on.
HA_SET=(--set kubernetes.enabled=false --set auth.tokenReview=false --set ha.enabled=true)
if out=$(helm_k upgrade "$RELEASE" "$CHART" -n "$NS" "${HA_SET[@]}" 2>&1); then
  ok "helm upgrade --set ha.enabled=true (kubernetes.enabled=false, auth.tokenReview=false)"
else
  echo "$out" >&2
  bad "helm upgrade --set ha.enabled=true"
fi
HA_ROLE=/apis/rbac.authorization.k8s.io/v1/namespaces/$NS/roles/clusterd-ha
for obj in "$HA_ROLE" "/apis/rbac.authorization.k8s.io/v1/namespaces/$NS/rolebindings/clusterd-ha" \
  "/apis/apps/v1/namespaces/$NS/statefulsets/clusterd" "/apis/apps/v1/namespaces/$NS/statefulsets/clusterd-etcd"; do
  if k8s_api GET "$obj" | name_of >/dev/null 2>&1; then ok "installed: $obj"; else bad "not installed: $obj"; fi
done
got=$(k8s_api GET "$HA_ROLE" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rules"])' 2>&1) || true
want="[{'verbs': ['get', 'patch'], 'apiGroups': [''], 'resources': ['pods']}]"
if [[ $got == "$want" ]]; then ok "Role clusterd-ha: get and patch on pods, nothing else"; else bad "Role clusterd-ha rules: '$got', want '$want'"; fi
for obj in "/apis/rbac.authorization.k8s.io/v1/clusterroles/$CLUSTER_ROLE" "/apis/rbac.authorization.k8s.io/v1/namespaces/$NS/roles/clusterd" \
  "/apis/apps/v1/namespaces/$NS/deployments/clusterd"; do
  gone=$(k8s_code GET "$obj")
  if [[ $gone == 404 ]]; then ok "ha: $obj not installed"; else bad "ha: $obj: GET -> $gone, want 404"; fi
done
sts_spec() {
  k8s_api GET "/apis/apps/v1/namespaces/$NS/statefulsets/clusterd" |
    python3 -c 'import json,sys; s=json.load(sys.stdin)["spec"]; p=s["template"]["spec"]; c=p["containers"][0]; print(p.get("automountServiceAccountToken"), s["updateStrategy"]["type"], c["readinessProbe"]["httpGet"]["path"], [a for a in c["args"] if a.startswith("--ha-pod")])'
}
got=$(sts_spec 2>&1) || true
want="True RollingUpdate /readyz/replica ['--ha-pod=\$(POD_NAMESPACE)/\$(POD_NAME)']"
if [[ $got == "$want" ]]; then ok "ha: the StatefulSet mounts the token (leader label alone), RollingUpdate, /readyz/replica, --ha-pod"; else bad "ha: StatefulSet '$got', want '$want'"; fi
admin POST "/api/v1/namespaces/$NS/pods" \
  '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"clusterd-0","labels":{"app.kubernetes.io/component":"clusterd"}},"spec":{"serviceAccountName":"clusterd","containers":[{"name":"clusterd","image":"clusterd"}]}}'
PODS=/api/v1/namespaces/$NS/pods
check 200 "ha: get a replica's pod in $NS" GET "$PODS/clusterd-0"
check 200 "ha: label a replica's pod leader (merge patch, as ClusterD)" PATCH "$PODS/clusterd-0" '{"metadata":{"labels":{"clusterd.io/ha-role":"leader"}}}'
role_label() { k8s_api GET "$PODS/$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"].get("labels", {}).get("clusterd.io/ha-role"))'; }
got=$(role_label clusterd-0 2>&1) || true
if [[ $got == leader ]]; then ok "ha: the pod carries clusterd.io/ha-role=leader"; else bad "ha: clusterd.io/ha-role is '$got', want leader"; fi
check 200 "ha: relabel the replaced leader's pod standby" PATCH "$PODS/clusterd-0" '{"metadata":{"labels":{"clusterd.io/ha-role":"standby"}}}'
check 403 "ha: patch a pod in another namespace" PATCH "/api/v1/namespaces/$WORK/pods/rank-0" '{"metadata":{"labels":{"clusterd.io/ha-role":"leader"}}}'
check 403 "ha: get a pod in another namespace" GET "/api/v1/namespaces/$WORK/pods/rank-0"
check 403 "ha: list pods in $NS" GET "$PODS"
check 403 "ha: watch pods in $NS" GET "$PODS?watch=1&timeoutSeconds=1"
check 403 "ha: create a pod in $NS" POST "$PODS" "$(pod_json rogue)"
check 403 "ha: delete a replica's pod" DELETE "$PODS/clusterd-0"
check 403 "ha: update a replica's pod (PUT)" PUT "$PODS/clusterd-0" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"clusterd-0"}}'
check 403 "ha: patch pods/status" PATCH "$PODS/clusterd-0/status" '{"status":{"phase":"Failed"}}'
check 403 "ha: exec into a replica's pod" POST "$PODS/clusterd-0/exec?command=sh&stdout=true"
check 403 "ha: list pods, all namespaces" GET /api/v1/pods
check 403 "ha: get secrets in $NS" GET "/api/v1/namespaces/$NS/secrets"
check 403 "ha: get the Lease" GET "$LEASES/clusterd"
# ha.etcd.tls (the default): the deployed etcd's CA, members' and ClusterD's client certificate.
ETCD_SECRETS=(clusterd-etcd-ca clusterd-etcd-tls clusterd-etcd-client-tls)
etcd_before=$(for s in "${ETCD_SECRETS[@]}"; do secret_json "$s"; done 2>/dev/null) || true
if [[ $(grep -c 'tls.key' <<<"$etcd_before") == 3 ]]; then ok "ha: the etcd TLS Secrets installed (${ETCD_SECRETS[*]})"; else bad "ha: etcd TLS Secrets missing: '$etcd_before'"; fi
# The real clusterd as the StatefulSet runs it: the installed config.json (etcd: the API
# server's, under the chart's key prefix) and the pod's args as the kubelet expands them
# for pod clusterd-0 (POD_IP 127.0.0.1, ports moved to local ones), ClusterD's token in a
# kubeconfig: it labels its pod leader and is Ready (/readyz/replica).
if [[ -x $CLUSTERD && $help == *--ha-pod* && $help == *--kubeconfig* ]]; then
  d=$TMP/clusterd-ha
  tls=
  if [[ $help == *--tls-cert-file* ]]; then
    tls=1
    conf=$(installed StatefulSet clusterd "$d") || die "reading the installed StatefulSet"
  else
    conf=$(installed StatefulSet clusterd "$d" tls_ auth_ metrics_ insecure probe_listen) || die "reading the installed StatefulSet"
  fi
  # The API server's etcd instead of the deployed one (pods stay Pending): plaintext, so the
  # installed etcd TLS files (etcd_ca_file, etcd_cert_file, etcd_key_file) are left out.
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["etcd_endpoints"]=[sys.argv[2]]
for k in ("etcd_ca_file", "etcd_cert_file", "etcd_key_file"): c.pop(k, None)
json.dump(c, open(sys.argv[1], "w"), indent=2)' "$conf" "$K8S_ETCD"
  k8s_write_kubeconfig "$d/kubeconfig" "$SA_TOKEN" "system:serviceaccount:$NS:clusterd" "$NS"
  http=$(free_port) grpc=$(free_port)
  probe_flags
  mapfile -t ha_args < <(python3 - "$d/workload.json" "$NS" "$http" <<'PY'
import json, sys
spec, ns, http = json.load(open(sys.argv[1]))["spec"]["template"]["spec"], sys.argv[2], sys.argv[3]
c = spec["containers"][0]
port = next(p["containerPort"] for p in c["ports"] if p["name"] == "http")
env = {"POD_NAME": "clusterd-0", "POD_NAMESPACE": ns, "POD_IP": "127.0.0.1"}
for a in c["args"]:
    if a.startswith("--ha-"):
        a = a.replace(f"$(POD_IP):{port}", f"$(POD_IP):{http}")
        for k, v in env.items():
            a = a.replace(f"$({k})", v)
        print(a)
PY
  )
  "$CLUSTERD" --config "$conf" --kubeconfig "$d/kubeconfig" "${ha_args[@]}" --listen "127.0.0.1:$grpc" \
    --http-listen "127.0.0.1:$http" "${probe_args[@]}" --data-dir "$d/data" >"$d/clusterd.log" 2>&1 &
  CLUSTERD_PID=$!
  # /readyz/replica is 200 on a healthy standby too: a lone replica first labels its pod
  # standby and is Ready, then wins the election and relabels it; wait for both.
  leads() { curl -fsS -o /dev/null "http://127.0.0.1:$ready/readyz/replica" && [[ $(role_label clusterd-0 2>&1) == leader ]]; }
  if k8s_wait 30 "clusterd /readyz/replica and its pod labelled leader" leads; then
    ok "clusterd with the StatefulSet's flags (${ha_args[*]}) leads and labels its pod leader with only the Role's rights"
  else
    tail -20 "$d/clusterd.log" >&2
    bad "clusterd with the StatefulSet's flags did not label its pod leader (/readyz/replica)"
  fi
  expect_no_refusal "$d/clusterd.log" "ha: "
  k8s_kill_wait "$CLUSTERD_PID"
  CLUSTERD_PID=
else
  echo "  skip $CLUSTERD missing or without --ha-pod/--kubeconfig"
fi

echo "== the installed etcd keeps TLS (${SECONDS}s)"
# Its members keep their peer URLs: an upgrade must not switch it to plaintext (lookup of the
# installed StatefulSet), and nothing is changed by the refused upgrade.
if out=$(helm_k upgrade "$RELEASE" "$CHART" -n "$NS" "${HA_SET[@]}" --set ha.etcd.tls.enabled=false 2>&1); then
  bad "helm upgrade --set ha.etcd.tls.enabled=false switched the installed etcd to plaintext"
elif grep -qF "the deployed etcd (StatefulSet clusterd-etcd) runs with TLS" <<<"$out"; then
  ok "helm upgrade --set ha.etcd.tls.enabled=false refused: $(grep -o 'runs with TLS.*cannot switch it' <<<"$out")"
else
  echo "$out" >&2; bad "helm upgrade --set ha.etcd.tls.enabled=false failed without naming the installed etcd's TLS"
fi
got=$(k8s_api GET "/apis/apps/v1/namespaces/$NS/statefulsets/clusterd-etcd" |
  python3 -c 'import json,sys; print([a for a in json.load(sys.stdin)["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith(("--listen-client-urls", "--client-cert-auth"))])' 2>&1) || true
if [[ $got == "['--listen-client-urls=https://0.0.0.0:2379', '--client-cert-auth']" ]]; then ok "the installed etcd still serves TLS: $got"; else bad "the installed etcd's args: $got"; fi

echo "== helm upgrade --set ha.leaderLabel=false takes the pods Role away (${SECONDS}s)"
if out=$(helm_k upgrade "$RELEASE" "$CHART" -n "$NS" "${HA_SET[@]}" --set ha.leaderLabel=false 2>&1); then
  ok "helm upgrade --set ha.leaderLabel=false"
else
  echo "$out" >&2
  bad "helm upgrade --set ha.leaderLabel=false"
fi
gone=$(k8s_code GET "$HA_ROLE")
if [[ $gone == 404 ]]; then ok "Role clusterd-ha removed"; else bad "Role clusterd-ha: GET -> $gone, want 404"; fi
check 403 "leaderLabel=false: patch a replica's pod" PATCH "$PODS/clusterd-0" '{"metadata":{"labels":{"clusterd.io/ha-role":"leader"}}}'
check 403 "leaderLabel=false: get a replica's pod" GET "$PODS/clusterd-0"
got=$(sts_spec 2>&1) || true
want="False OnDelete /readyz []"
if [[ $got == "$want" ]]; then ok "leaderLabel=false: no token mounted, OnDelete, /readyz, no --ha-pod"; else bad "leaderLabel=false: StatefulSet '$got', want '$want'"; fi
etcd_after=$(for s in "${ETCD_SECRETS[@]}"; do secret_json "$s"; done 2>/dev/null) || true
if [[ -n $etcd_before && $etcd_after == "$etcd_before" ]]; then ok "helm upgrade keeps the generated etcd CA and certificates"; else bad "helm upgrade changed the generated etcd certificates"; fi
if out=$(helm_k uninstall "$RELEASE" -n "$NS" 2>&1); then ok "helm uninstall"; else echo "$out" >&2; bad "helm uninstall"; fi

echo "== an installed plaintext etcd stays plaintext (${SECONDS}s)"
# A release whose etcd was installed without TLS (ha.etcd.tls.enabled=false, or a chart before
# it): an upgrade to the default (TLS) is refused, naming the value to keep.
if out=$(helm_k install "$RELEASE" "$CHART" -n "$NS" "${HA_SET[@]}" --set ha.etcd.tls.enabled=false 2>&1); then
  ok "helm install --set ha.enabled=true --set ha.etcd.tls.enabled=false"
else
  echo "$out" >&2; bad "helm install with a plaintext etcd"
fi
if out=$(helm_k upgrade "$RELEASE" "$CHART" -n "$NS" "${HA_SET[@]}" 2>&1); then
  bad "helm upgrade switched the installed plaintext etcd to TLS"
elif grep -qF "the deployed etcd (StatefulSet clusterd-etcd) runs plaintext" <<<"$out" && grep -qF "Set ha.etcd.tls.enabled=false" <<<"$out"; then
  ok "helm upgrade to ha.etcd.tls.enabled=true refused: $(grep -o 'runs plaintext.*enabled=false' <<<"$out")"
else
  echo "$out" >&2; bad "helm upgrade of a plaintext etcd to TLS failed without naming it"
fi
gone=$(k8s_code GET "/api/v1/namespaces/$NS/secrets/clusterd-etcd-ca")
if [[ $gone == 404 ]]; then ok "no etcd certificates generated by the refused upgrade"; else bad "clusterd-etcd-ca: GET -> $gone, want 404"; fi
if out=$(helm_k uninstall "$RELEASE" -n "$NS" 2>&1); then ok "helm uninstall"; else echo "$out" >&2; bad "helm uninstall"; fi

echo "helm_rbac_test: $passed passed, $failed failed (${SECONDS}s)"
((failed == 0))
