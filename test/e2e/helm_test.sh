#!/usr/bin/env bash
# Tests the Helm chart (charts/clusterd) and the image's library list, offline:
#   1. `helm lint --strict` with the default values and every test value set;
#   2. `helm template` with the default values and test/helm/values-*.yaml, for the oldest
#      Kubernetes the chart supports and a recent one; every rendered object is validated
#      against the Kubernetes OpenAPI schemas (kubernetes-validate, strict, offline), the
#      Prometheus Operator CRDs structurally, plus the chart's own security promises
#      (test/helm/validate.py);
#   3. what each value set promises (selectors, claims, monitoring objects, privilege mode,
#      the Kubernetes RBAC objects and config keys rendered with kubernetes.enabled and gone
#      without it; TLS from each tls.source, mutual TLS by default, insecure without TLS, the
#      generated certificates, NodeD's projected token, the TokenReview role, NetworkPolicies;
#      MindCluster's clusterd-grpc-svc Service and pubfault_* keys; mindcluster.volcano.enabled:
#      the two configmaps Roles, "mindcluster" in integrations and its keys, and with
#      publicFaultNamespaces a read-only Role per namespace or (["*"]) ClusterRole; ha.enabled: ClusterD's
#      StatefulSet with a volume per replica, etcd deployed or given, PodDisruptionBudgets,
#      anti-affinity, the etcd keys, --ha-replica-id and --ha-advertise-address, and with
#      ha.leaderLabel the pod label (--ha-pod, its Role, the Services selecting the leader,
#      /readyz/replica, RollingUpdate) or without it the leader-only readiness; TLS to etcd:
#      the deployed etcd's TLS flags, generated Secrets (SANs of every member, one etcd CA)
#      and mounts, https endpoints and etcd_* files in config.json, an existing etcd's
#      existingSecret, and the plaintext etcd of before with ha.etcd.tls.enabled=false), and
#      that a plain `helm template` (no --kube-version) works;
#   4. the rendered config.json / catalog.json files, laid out as the kubelet projects the
#      pods' volumes, are accepted by the real clusterd and noded binaries (when built):
#      plaintext, and with the generated certificates when the binaries know the TLS flags
#      (mutual TLS checked with grpcurl); ClusterD's config without the Kubernetes keys and
#      TokenReview here, as those need an API server (test/k8s/helm_rbac_test.sh installs the
#      chart into one); values-ha's etcd members (TLS, client certificates required) and two
#      ClusterD replicas with the generated certificates, leading, standing by, failing over;
#      values-mindcluster's public-fault settings and code table are in force
#      (public faults sent with grpcurl); NOTES.txt's openssl and grpcurl commands against a
#      live clusterd;
#   5. values.schema.json rejects bad values: every test/helm/bad/*.yaml must make
#      `helm template` fail with the message its first line names;
#   6. scripts/check-image-libs.sh passes, and fails on a Dockerfile missing a library.
# Installs what is missing: helm (go install, into $GOPATH/bin) and kubernetes-validate
# (pip, into a venv under ~/.cache). Runs from any directory; exits 0 only if all passed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
source test/e2e/lib.sh  # free_port

HELM_VERSION=v3.19.5               # served by the Go module proxy; needs Go >= 1.24
KUBERNETES_VALIDATE_VERSION=1.37.0 # bundles schemas up to Kubernetes 1.37
KUBE_VERSIONS=(1.25.0 1.33.0)      # the oldest supported Kubernetes (docs/deploy.md), and a recent release
VENV=${CLUSTERD_HELM_VENV:-$HOME/.cache/clusterd-venv}
CHART=charts/clusterd
export GOPATH=${GOPATH:-$HOME/go}
export PATH="$GOPATH/bin:$PATH"

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok   $*"; }
bad() { failed=$((failed + 1)); echo "  FAIL $*" >&2; }
die() { echo "helm_test: $*" >&2; exit 1; }

# ---- tools --------------------------------------------------------------------------------
apt_install() {
  local SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
missing=()
command -v python3 >/dev/null || missing+=(python3)
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v curl >/dev/null || missing+=(curl)
command -v go >/dev/null || missing+=(golang-go)
if ((${#missing[@]})); then
  echo "helm_test: installing ${missing[*]}"
  apt_install "${missing[@]}"
fi

HELM="$GOPATH/bin/helm"
if ! { [[ -x $HELM ]] && go version -m "$HELM" 2>/dev/null | grep -Eq "mod[[:space:]]+helm.sh/helm/v3[[:space:]]+$HELM_VERSION\b"; }; then
  echo "helm_test: installing helm $HELM_VERSION into $GOPATH/bin (go install; a few minutes the first time)"
  go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ||
    die "go install helm@$HELM_VERSION failed (it needs Go >= 1.24; this is $(go version))"
fi
PY="$VENV/bin/python"
if ! "$PY" -c "import kubernetes_validate.version as v, sys; sys.exit(v.__version__ != '$KUBERNETES_VALIDATE_VERSION')" 2>/dev/null; then
  echo "helm_test: installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi
echo "helm_test: $("$HELM" version --template 'helm {{.Version}}') ($HELM_VERSION), kubernetes-validate $("$PY" -c 'import kubernetes_validate.version as v; print(v.__version__)')"

TMP=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# ---- 1. lint ------------------------------------------------------------------------------
echo "== helm lint (${SECONDS}s)"
value_sets=(default)
for f in test/helm/values-*.yaml; do value_sets+=("$f"); done
values_args() { [[ $1 == default ]] || echo "-f $1"; }
set_name() { [[ $1 == default ]] && echo default || basename "$1" .yaml; }
for vs in "${value_sets[@]}"; do
  # shellcheck disable=SC2046
  if out=$("$HELM" lint --strict "$CHART" $(values_args "$vs") 2>&1); then
    ok "helm lint --strict ($(set_name "$vs"))"
  else
    echo "$out" >&2; bad "helm lint --strict ($(set_name "$vs"))"
  fi
done

# ---- 2. render and validate -----------------------------------------------------------------
echo "== helm template + Kubernetes schema validation (${SECONDS}s)"
render() { # render NAME VALUES KUBE_VERSION [HELM ARGS...] -> $TMP/NAME-KUBE_VERSION.yaml
  # shellcheck disable=SC2046
  "$HELM" template clusterd "$CHART" --namespace fault-mgmt --kube-version "$3" \
    $(values_args "$2") "${@:4}" >"$TMP/$1-$3.yaml"
}
for vs in "${value_sets[@]}"; do
  name=$(set_name "$vs")
  for kv in "${KUBE_VERSIONS[@]}"; do
    if ! err=$(render "$name" "$vs" "$kv" 2>&1); then
      echo "$err" >&2; bad "helm template ($name, Kubernetes $kv)"; continue
    fi
    if "$PY" test/helm/validate.py "$kv" "$TMP/$name-$kv.yaml"; then
      ok "rendered objects valid ($name, Kubernetes $kv)"
    else
      bad "rendered objects invalid ($name, Kubernetes $kv)"
    fi
  done
done

# ---- 3. what each value set promises ----------------------------------------------------
echo "== rendered content (${SECONDS}s)"
# q FILE EXPR: evaluates a Python expression over `docs` (the rendered objects) and `by`
# (kind -> list of objects); prints it.
q() {
  "$PY" - "$1" "$2" <<'PY'
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = {}
for d in docs:
    by.setdefault(d["kind"], []).append(d)
def pod(kind): return by[kind][0]["spec"]["template"]["spec"]
def cm(suffix): return next(d for d in by["ConfigMap"] if d["metadata"]["name"].endswith(suffix))["data"]
def cfg(suffix): return json.loads(cm(suffix)["config.json"])
def sources(kind): return next(v for v in pod(kind)["volumes"] if v["name"] == "config")["projected"]["sources"]
def proj(kind): return [(k, s[k].get("name", s[k].get("audience")), sorted((i["key"], i["path"], i.get("mode")) for i in s[k].get("items", []))) for s in sources(kind) for k in s]
def npol(name): return next(d for d in by["NetworkPolicy"] if d["metadata"]["name"] == name)["spec"]
def rules_of(name): return [([p["port"] for p in r.get("ports", [])], r.get("from")) for r in npol(name).get("ingress", [])]
def sts(component): return next(d for d in by["StatefulSet"] if d["metadata"]["labels"]["app.kubernetes.io/component"] == component)
def spod(component): return sts(component)["spec"]["template"]["spec"]
def ssources(component): return next(v for v in spod(component)["volumes"] if v["name"] == "config")["projected"]["sources"]
def sproj(component): return [(k, s[k].get("name", s[k].get("audience")), sorted((i["key"], i["path"], i.get("mode")) for i in s[k].get("items", []))) for s in ssources(component) for k in s]
def secrets(): return sorted((d["metadata"]["name"], d["metadata"]["labels"]["app.kubernetes.io/component"], d["type"], sorted(d["data"])) for d in by.get("Secret", []))
def etcd_args(): return spod("etcd")["containers"][0]["args"]
def other_pod(path, kind): return next(d for d in yaml.safe_load_all(open(path)) if d and d["kind"] == kind)["spec"]["template"]["spec"]
def same(p):
    # A pod spec less what ha.enabled changes (affinity, readiness, the downward-API env, the --ha-* flags, the data volume,
    # the etcd TLS files in the config volume).
    p = json.loads(json.dumps(p))
    p.pop("affinity", None)
    p["volumes"] = [v for v in p["volumes"] if v["name"] != "data"]
    for v in p["volumes"]:
        if "projected" in v:
            v["projected"]["sources"] = [s for s in v["projected"]["sources"]
                                         if not any(i["path"].startswith("etcd-tls/") for i in s.get("secret", {}).get("items", []))]
    for c in p["containers"]:
        c.pop("readinessProbe", None)
        c.pop("env", None)
        c["args"] = [a for a in c["args"] if not a.startswith("--ha-")]
    return p
print(eval(sys.argv[2]))
PY
}
expect() { # expect DESCRIPTION FILE EXPR WANT
  local got
  got=$(q "$2" "$3" 2>&1) || true
  if [[ $got == "$4" ]]; then ok "$1"; else bad "$1: $3 is '$got', want '$4'"; fi
}
kv=${KUBE_VERSIONS[-1]}
D=$TMP/default-$kv.yaml M=$TMP/values-monitoring-$kv.yaml
E=$TMP/values-existing-claim-$kv.yaml S=$TMP/values-sim-$kv.yaml N=$TMP/values-npu-smi-$kv.yaml
G=$TMP/values-gpu-$kv.yaml
expect "default: kinds" "$D" "sorted(by)" "['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'Deployment', 'NetworkPolicy', 'PersistentVolumeClaim', 'Role', 'RoleBinding', 'Secret', 'Service', 'ServiceAccount']"
expect "default: ClusterD on masterselector=dls-master-node" "$D" "pod('Deployment')['nodeSelector']" "{'masterselector': 'dls-master-node'}"
expect "default: NodeD on workerselector=dls-worker-node" "$D" "pod('DaemonSet')['nodeSelector']" "{'workerselector': 'dls-worker-node'}"
expect "default: Service ports grpc 8899, http 11253" "$D" "[(p['name'], p['port']) for p in by['Service'][0]['spec']['ports']]" "[('grpc', 8899), ('http', 11253)]"
expect "default: NodeD node name from spec.nodeName" "$D" "pod('DaemonSet')['containers'][0]['env'][0]['valueFrom']['fieldRef']['fieldPath']" "spec.nodeName"
expect "default: NodeD --node-name=\$(NODE_NAME)" "$D" "'--node-name=\$(NODE_NAME)' in pod('DaemonSet')['containers'][0]['args']" "True"
expect "default: NodeD privileged (kmsg + ascend)" "$D" "pod('DaemonSet')['containers'][0]['securityContext']['privileged']" "True"
expect "default: NodeD host mounts" "$D" "sorted((m['mountPath'], m.get('readOnly', False)) for m in pod('DaemonSet')['containers'][0]['volumeMounts'])" \
  "[('/dev/kmsg', True), ('/etc/noded', True), ('/host', True), ('/run/clusterd/progress', True), ('/tmp', False), ('/usr/local/Ascend/driver', True), ('/var/lib/kubelet/pod-resources', True), ('/var/lib/noded', False)]"
expect "default: PVC kept on uninstall" "$D" "by['PersistentVolumeClaim'][0]['metadata']['annotations']['helm.sh/resource-policy']" "keep"
expect "default: NodeD reaches the ClusterD Service" "$D" "__import__('json').loads(cm('-noded')['config.json'])['server']" "clusterd.fault-mgmt.svc:8899"
expect "default: no catalog override" "$D" "sorted(cm('clusterd')) " "['config.json']"
expect "monitoring: CRD objects" "$M" "sorted(d['metadata']['name'] for k in ('ServiceMonitor', 'PrometheusRule') for d in by[k])" "['clusterd', 'clusterd', 'clusterd-noded']"
expect "monitoring: alerts" "$M" "sorted(r['alert'] for r in by['PrometheusRule'][0]['spec']['groups'][0]['rules'])" \
  "['ClusterdAgentStreamsRejected', 'ClusterdCommitLatencyHigh', 'ClusterdDataDirLowSpace', 'ClusterdDevicesUnhealthy', 'ClusterdDown', 'ClusterdGrpcNotAccepting', 'ClusterdIngestQueueHigh', 'ClusterdIngestStalled', 'ClusterdNodeLost', 'ClusterdNodesUnknown', 'ClusterdRecoveriesWaiting', 'ClusterdRecoveryFailed', 'ClusterdWatchersLagging', 'ClusterdWritesRefused', 'NodedDisconnected', 'NodedOutboxBacklog']"
expect "monitoring: dashboard ConfigMap in its namespace" "$M" "[(d['metadata']['namespace'], d['metadata']['labels']['grafana_dashboard']) for d in by['ConfigMap'] if d['metadata']['name'].endswith('dashboard')]" "[('monitoring', '1')]"
expect "monitoring: NodeD metrics Service is headless" "$M" "[s['spec'].get('clusterIP') for s in by['Service'] if s['metadata']['name'].endswith('-metrics')]" "['None']"
expect "existing-claim: no PVC created" "$E" "'PersistentVolumeClaim' in by" "False"
expect "existing-claim: uses the claim" "$E" "[v['persistentVolumeClaim']['claimName'] for v in pod('Deployment')['volumes'] if v['name'] == 'data']" "['clusterd-rocksdb']"
expect "existing-claim: image by digest" "$E" "pod('Deployment')['containers'][0]['image']" "registry.example.com/ai/clusterd@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
expect "existing-claim: NPU taint tolerated" "$E" "[t['key'] for t in pod('DaemonSet')['tolerations']][0]" "huawei.com/Ascend910"
expect "existing-claim: catalog override" "$E" "__import__('json').loads(cm('fault-center')['catalog.json'])" \
  "{'codes': [{'code': '80E01801', 'level': 'SEPARATE'}, {'code': 'NODE_DISK_FULL', 'level': 'PRE_SEPARATE'}], 'default_level': 'FAULT_LEVEL_SUB_HEALTH'}"
expect "existing-claim: null config key left out" "$E" "'max_streams' in __import__('json').loads(cm('fault-center')['config.json'])" "False"
expect "sim: NodeD restricted (non-root, no privilege)" "$S" "(pod('DaemonSet')['containers'][0]['securityContext'].get('privileged'), pod('DaemonSet')['containers'][0]['securityContext']['runAsUser'])" "(None, 65532)"
expect "sim: state dir chowned by an init container" "$S" "[c['securityContext']['capabilities']['add'] for c in pod('DaemonSet')['initContainers']]" "[['CHOWN']]"
expect "sim: no kmsg/driver mounts" "$S" "sorted(v['name'] for v in pod('DaemonSet')['volumes'])" "['config', 'host-root', 'progress', 'state', 'tmp']"
expect "sim: rules file and labels" "$S" "(lambda c: (c['rules_file'], c['labels'], c['kmsg_path'], c['sim_devices']))(__import__('json').loads(cm('-noded')['config.json']))" \
  "('/etc/noded/rules.json', 'pool=train,rack=r12', '', 16)"
expect "sim: emptyDir data" "$S" "[v for v in pod('Deployment')['volumes'] if v['name'] == 'data'][0]" "{'name': 'data', 'emptyDir': {}}"
# The Kubernetes integration (docs/deploy.md, "Kubernetes API access").
# rules KIND [NAME_SUFFIX]: the rules of the KIND object whose name ends with NAME_SUFFIX (default:
# the one not ending with -tokenreview), as sorted (group, resource, verbs).
rules() {
  local pick="[d for d in by['$1'] if not d['metadata']['name'].endswith('-tokenreview')][0]"
  [[ -n ${2-} ]] && pick="[d for d in by['$1'] if d['metadata']['name'].endswith('$2')][0]"
  echo "sorted((g, r, ' '.join(x['verbs'])) for x in $pick['rules'] for g in x['apiGroups'] for r in x['resources'])"
}
K=$TMP/values-kubernetes-$kv.yaml NK=$TMP/values-no-kubernetes-$kv.yaml R=$TMP/values-recovery-$kv.yaml
expect "default: ClusterRole rules" "$D" "$(rules ClusterRole)" \
  "[('', 'events', 'create patch get'), ('', 'nodes', 'get list watch patch'), ('', 'nodes/status', 'patch'), ('', 'pods', 'get list watch delete'), ('', 'pods/eviction', 'create'), ('events.k8s.io', 'events', 'create patch get'), ('resource.k8s.io', 'devicetaintrules', 'get list create patch delete'), ('resource.k8s.io', 'resourceslices', 'list'), ('scheduling.volcano.sh', 'podgroups', 'get list watch')]"
expect "default: Role: leases in the release namespace" "$D" "(by['Role'][0]['metadata']['namespace'], $(rules Role))" \
  "('fault-mgmt', [('coordination.k8s.io', 'leases', 'get create update')])"
expect "default: bindings name ClusterD's ServiceAccount only" "$D" "sorted((b['kind'], b['roleRef']['name'], str(b['subjects'])) for k in ('ClusterRoleBinding', 'RoleBinding') for b in by[k])" \
  "[('ClusterRoleBinding', 'fault-mgmt-clusterd', \"[{'kind': 'ServiceAccount', 'name': 'clusterd', 'namespace': 'fault-mgmt'}]\"), ('ClusterRoleBinding', 'fault-mgmt-clusterd-tokenreview', \"[{'kind': 'ServiceAccount', 'name': 'clusterd', 'namespace': 'fault-mgmt'}]\"), ('RoleBinding', 'clusterd', \"[{'kind': 'ServiceAccount', 'name': 'clusterd', 'namespace': 'fault-mgmt'}]\")]"
expect "default: token mounted into ClusterD only" "$D" "(pod('Deployment')['automountServiceAccountToken'], pod('DaemonSet')['automountServiceAccountToken'])" "(True, False)"
expect "default: config.json turns the integration and actuator on" "$D" "(lambda c: (c['integrations'], c['actuator'], 'kubeconfig' in c, {k: v for k, v in c.items() if k.startswith('k8s_')}))(__import__('json').loads(cm('clusterd')['config.json']))" \
  "(['kubernetes'], 'kubernetes', False, {'k8s_delete_fallback': False, 'k8s_device_fallback_taint': True, 'k8s_devices_annotation': 'huawei.com/AscendReal', 'k8s_eviction_timeout': '60s', 'k8s_job_kind_label': 'clusterd.io/job-kind', 'k8s_namespace': '', 'k8s_node_condition': 'AcceleratorHealthy', 'k8s_node_not_ready_level': 'PRE_SEPARATE', 'k8s_rank_annotation': 'hccl/rankIndex', 'k8s_taint_effect': 'NoSchedule', 'k8s_taint_key': 'clusterd.io/fault'})"
expect "no-kubernetes: no RBAC objects" "$NK" "sorted(by)" "['ConfigMap', 'DaemonSet', 'Deployment', 'NetworkPolicy', 'PersistentVolumeClaim', 'Secret', 'Service', 'ServiceAccount']"
expect "no-kubernetes: no token mounted" "$NK" "(pod('Deployment')['automountServiceAccountToken'], pod('DaemonSet')['automountServiceAccountToken'])" "(False, False)"
expect "no-kubernetes: no Kubernetes keys, no actuator (binary default none)" "$NK" "sorted(k for k in __import__('json').loads(cm('clusterd')['config.json']) if k.startswith(('k8s_', 'integrations', 'kubeconfig', 'actuator')))" "[]"
expect "kubernetes: tuned keys in config.json" "$K" "(lambda c: sorted((k, v) for k, v in c.items() if k.startswith('k8s_')))(__import__('json').loads(cm('clusterd')['config.json']))" \
  "[('k8s_delete_fallback', True), ('k8s_device_fallback_taint', False), ('k8s_devices_annotation', 'example.com/devices'), ('k8s_eviction_timeout', '2m'), ('k8s_job_kind_label', 'example.com/kind'), ('k8s_namespace', 'training'), ('k8s_node_condition', 'GPUHealthy'), ('k8s_node_not_ready_level', 'SEPARATE'), ('k8s_rank_annotation', 'example.com/rank'), ('k8s_taint_effect', 'NoExecute'), ('k8s_taint_key', 'example.com/accelerator-fault')]"
expect "kubernetes: bindings follow the named ServiceAccount" "$K" "sorted({s['name'] for k in ('ClusterRoleBinding', 'RoleBinding') for b in by[k] for s in b['subjects']} | {pod('Deployment')['serviceAccountName']})" "['fault-sa']"
expect "recovery: an explicit actuator wins over kubernetes" "$R" "__import__('json').loads(cm('clusterd')['config.json'])['actuator']" "webhook"
expect "recovery: without the kubernetes actuator no eviction, pod delete or DRA device taints; TaskD's marks (mindcluster.taskd.objects)" "$R" "$(rules ClusterRole)" \
  "[('', 'configmaps', 'get update'), ('', 'events', 'create patch get'), ('', 'nodes', 'get list watch patch'), ('', 'nodes/status', 'patch'), ('', 'pods', 'get list watch patch'), ('events.k8s.io', 'events', 'create patch get'), ('scheduling.volcano.sh', 'podgroups', 'get list watch patch')]"
if out=$("$HELM" template "$CHART" 2>&1 >"$TMP/plain.yaml"); then
  ok "plain \`helm template $CHART\` (no --kube-version) renders $(grep -c '^kind:' "$TMP/plain.yaml") objects"
else
  echo "$out" >&2; bad "plain \`helm template $CHART\` fails"
fi
expect "npu-smi: pod network, custom ports" "$N" "(pod('DaemonSet').get('hostNetwork'), pod('DaemonSet')['containers'][0]['ports'][0]['containerPort'], by['Service'][0]['spec']['ports'][0]['port'])" "(None, 21255, 18899)"
expect "npu-smi: the host's hccn.conf mounted read-only as a file, and NodeD told" "$N" "([(m['mountPath'], m['readOnly']) for m in pod('DaemonSet')['containers'][0]['volumeMounts'] if m['name'] == 'hccn-conf'], [(v['hostPath']['path'], v['hostPath']['type']) for v in pod('DaemonSet')['volumes'] if v['name'] == 'hccn-conf'], cfg('-noded').get('hccn_conf'))" "([('/etc/hccn.conf', True)], [('/etc/hccn.conf', 'File')], '/etc/hccn.conf')"
expect "default: no hccn.conf (the device plane is opt-in)" "$D" "cfg('-noded').get('hccn_conf')" "None"
expect "npu-smi: npu-smi binary mounted read-only" "$N" "[(m['mountPath'], m['readOnly']) for m in pod('DaemonSet')['containers'][0]['volumeMounts'] if m['name'] == 'npu-smi']" "[('/usr/local/bin/npu-smi', True)]"
expect "gpu: NodeD config accelerator nvml" "$G" "__import__('json').loads(cm('-noded')['config.json'])['accelerator']" "nvml"
expect "gpu: NodeD privileged (the NVIDIA device nodes)" "$G" "pod('DaemonSet')['containers'][0]['securityContext']['privileged']" "True"
expect "gpu: the driver root mounted read-only with propagation" "$G" "[(m['mountPath'], m['readOnly'], m['mountPropagation']) for m in pod('DaemonSet')['containers'][0]['volumeMounts'] if m['name'] == 'nvidia-driver']" "[('/run/nvidia/driver', True, 'HostToContainer')]"
expect "gpu: from the host's /run/nvidia/driver, no Ascend driver" "$G" "([v['hostPath']['path'] for v in pod('DaemonSet')['volumes'] if v['name'] == 'nvidia-driver'], [v for v in pod('DaemonSet')['volumes'] if v['name'] == 'ascend-driver'])" "(['/run/nvidia/driver'], [])"
expect "gpu: NodeD asks the kubelet's pod-resources socket, mounted read-only" "$G" "(__import__('json').loads(cm('-noded')['config.json'])['pod_resources_socket'], [(m['mountPath'], m['readOnly']) for m in pod('DaemonSet')['containers'][0]['volumeMounts'] if m['name'] == 'pod-resources'], [v['hostPath']['path'] for v in pod('DaemonSet')['volumes'] if v['name'] == 'pod-resources'])" \
  "('/var/lib/kubelet/pod-resources/kubelet.sock', [('/var/lib/kubelet/pod-resources', True)], ['/var/lib/kubelet/pod-resources'])"
expect "sim: restricted NodeD does not ask the kubelet (root only)" "$S" "__import__('json').loads(cm('-noded')['config.json'])['pod_resources_socket']" ""
expect "gpu: NodeD on the GPU nodes" "$G" "pod('DaemonSet')['nodeSelector']" "{'nvidia.com/gpu.present': 'true'}"

# MindCluster compatibility (docs/deploy.md, "MindCluster clients"): the Service MindCluster's
# clients dial (name and port fixed), and the pubfault_* / mindcluster_* keys of config.json.
MC=$TMP/values-mindcluster-$kv.yaml
mc_keys="sorted((k, v) for k, v in cfg('clusterd').items() if k.startswith(('pubfault_', 'mindcluster_')))"
mc_svc="[s for s in by['Service'] if s['metadata']['name'] == 'clusterd-grpc-svc']"
expect "default: MindCluster keys at the binary's defaults, no code table, no clusterd-grpc-svc" "$D" "($mc_keys, [s['metadata']['name'] for s in by['Service']])" \
  "([('mindcluster_max_registrations_per_principal', 100), ('mindcluster_max_subscribers', 1000), ('pubfault_burst', 100), ('pubfault_max_faults', 50000), ('pubfault_rate', 1), ('pubfault_resources', ['CCAE', 'fd-online', 'pingmesh', 'Netmind', 'dpcStorage', 'dtfsStorage'])], ['clusterd'])"
expect "mindcluster: Service clusterd-grpc-svc, ClusterIP, one port 8899 -> grpc" "$MC" "[(s['metadata']['namespace'], s['spec']['type'], [(p['name'], p['port'], p['targetPort'], p['protocol'], p['appProtocol']) for p in s['spec']['ports']]) for s in $mc_svc]" \
  "[('fault-mgmt', 'ClusterIP', [('grpc', 8899, 'grpc', 'TCP', 'grpc')])]"
expect "mindcluster: clusterd-grpc-svc selects the ClusterD pods, and no ServiceMonitor selects it" "$MC" "[(s['spec']['selector'] == by['Deployment'][0]['spec']['selector']['matchLabels'], s['metadata']['labels']['app.kubernetes.io/component']) for s in $mc_svc]" \
  "[(True, 'mindcluster')]"
expect "mindcluster: config.json keys" "$MC" "$mc_keys" \
  "[('mindcluster_max_registrations_per_principal', 16), ('mindcluster_max_subscribers', 64), ('mindcluster_taskd_wait_seconds', 45), ('pubfault_burst', 3), ('pubfault_code_table', '/etc/clusterd/pubfault-codes.json'), ('pubfault_max_faults', 1000), ('pubfault_rate', '0.001'), ('pubfault_resources', ['CCAE', 'helm-test-probe'])]"
expect "mindcluster: the code table in the ConfigMap" "$MC" "(sorted(cm('clusterd')), json.loads(cm('clusterd')['pubfault-codes.json']))" \
  "(['config.json', 'pubfault-codes.json'], {'SeparateNPU': ['A00000001', '220001099'], 'SubHealthFault': ['010001099']})"
expect "mindcluster: pubfault_code_table is the file's path in ClusterD's config volume" "$MC" "(next(m['mountPath'] for m in pod('Deployment')['containers'][0]['volumeMounts'] if m['name'] == 'config') + '/pubfault-codes.json' == cfg('clusterd')['pubfault_code_table'], proj('Deployment')[0])" \
  "(True, ('configMap', 'clusterd', []))"
# The name and the port stay MindCluster's whatever the release name, fullnameOverride or gRPC port.
if "$HELM" template other "$CHART" --namespace mindx-dl --kube-version "$kv" --set mindcluster.service.enabled=true \
  --set clusterd.ports.grpc=18899 >"$TMP/mindcluster-other.yaml" 2>"$TMP/mindcluster-other.err" &&
  "$HELM" template clusterd "$CHART" --namespace mindx-dl --kube-version "$kv" --set mindcluster.service.enabled=true \
    --set fullnameOverride=fc >"$TMP/mindcluster-fc.yaml" 2>>"$TMP/mindcluster-other.err"; then
  expect "mindcluster: fixed name and port 8899 -> a moved gRPC port (release other)" "$TMP/mindcluster-other.yaml" \
    "(sorted((s['metadata']['name'], s['metadata']['namespace'], [(p['port'], p['targetPort']) for p in s['spec']['ports']]) for s in by['Service']), pod('Deployment')['containers'][0]['ports'][0])" \
    "([('clusterd-grpc-svc', 'mindx-dl', [(8899, 'grpc')]), ('other-clusterd', 'mindx-dl', [(18899, 'grpc'), (11253, 'http')])], {'name': 'grpc', 'containerPort': 18899, 'protocol': 'TCP'})"
  expect "mindcluster: fixed name with fullnameOverride" "$TMP/mindcluster-fc.yaml" "sorted(s['metadata']['name'] for s in by['Service'])" "['clusterd-grpc-svc', 'fc']"
else
  cat "$TMP/mindcluster-other.err" >&2; bad "mindcluster: helm template with another release name / fullnameOverride"
fi
if out=$("$HELM" template clusterd-grpc-svc "$CHART" --kube-version "$kv" --set mindcluster.service.enabled=true 2>&1 >/dev/null); then
  bad "mindcluster: a release whose own Service is named clusterd-grpc-svc was accepted"
elif grep -qF "already named clusterd-grpc-svc" <<<"$out"; then
  ok "mindcluster: a release whose own Service would be clusterd-grpc-svc is refused"
else
  echo "$out" >&2; bad "mindcluster: release clusterd-grpc-svc failed without naming the clash"
fi

# The "mindcluster" integration (docs/deploy.md, "Next to MindCluster's components"): with
# mindcluster.volcano.enabled two Roles on configmaps and their bindings (get, list and watch in
# the device plugin's namespace; get, list, watch, create and update in the cluster-info
# namespace), nothing cluster-wide, ClusterD's token mounted for them, "mindcluster" once in
# integrations (next to "kubernetes" or alone) and its five keys; none of it by default.
MV=$TMP/values-mindcluster-volcano-$kv.yaml MVK=$TMP/mindcluster-volcano-k8s-$kv.yaml
MVN=$TMP/mindcluster-volcano-mindx-dl-$kv.yaml MVH=$TMP/mindcluster-volcano-ha-$kv.yaml
mv_roles="sorted((d['metadata']['namespace'], d['metadata']['name'], [(g, r, ' '.join(x['verbs'])) for x in d['rules'] for g in x['apiGroups'] for r in x['resources']]) for d in by.get('Role', []) if '-mindcluster-' in d['metadata']['name'])"
mv_bindings="sorted((b['metadata']['namespace'], b['metadata']['name'], b['roleRef']['kind'], b['roleRef']['name'], str(b['subjects'])) for b in by.get('RoleBinding', []) if '-mindcluster-' in b['metadata']['name'])"
mv_keys="sorted((k, v) for k, v in cfg('clusterd').items() if k.startswith('mindcluster_') and not k.startswith('mindcluster_max_'))"
MV_READ="[('', 'configmaps', 'get list watch')]" MV_WRITE="[('', 'configmaps', 'get list watch create update')]"
MV_SA="\"[{'kind': 'ServiceAccount', 'name': 'clusterd', 'namespace': 'fault-mgmt'}]\""
MV_DEFAULT_KEYS="[('mindcluster_cluster_info_chunk_bytes', 204800), ('mindcluster_cluster_info_namespace', 'mindx-dl'), ('mindcluster_cluster_info_refresh', '45s'), ('mindcluster_cluster_info_writes_per_second', 5), ('mindcluster_device_info_namespace', 'kube-system')]"
expect "default: no mindcluster integration (integrations, keys, configmaps Roles)" "$D" "(cfg('clusterd')['integrations'], $mv_keys, $mv_roles, $mv_bindings, [d['metadata']['name'] for d in by['Role']])" \
  "(['kubernetes'], [], [], [], ['clusterd'])"
expect "no-kubernetes: no mindcluster integration either" "$NK" "('integrations' in cfg('clusterd'), $mv_keys, 'Role' in by)" "(False, [], False)"
expect "mindcluster-volcano: kinds (two Roles and their bindings, nothing cluster-wide)" "$MV" "sorted(by)" \
  "['ConfigMap', 'DaemonSet', 'Deployment', 'NetworkPolicy', 'PersistentVolumeClaim', 'Role', 'RoleBinding', 'Secret', 'Service', 'ServiceAccount']"
expect "mindcluster-volcano: read Role in the plugin's namespace, write Role in mindx-dl" "$MV" "$mv_roles" \
  "[('mindx-dl', 'clusterd-mindcluster-clusterinfo', $MV_WRITE), ('npu-plugin', 'clusterd-mindcluster-deviceinfo', $MV_READ)]"
expect "mindcluster-volcano: each Role bound to ClusterD's ServiceAccount, in its namespace" "$MV" "$mv_bindings" \
  "[('mindx-dl', 'clusterd-mindcluster-clusterinfo', 'Role', 'clusterd-mindcluster-clusterinfo', $MV_SA), ('npu-plugin', 'clusterd-mindcluster-deviceinfo', 'Role', 'clusterd-mindcluster-deviceinfo', $MV_SA)]"
expect "mindcluster-volcano: integrations [mindcluster] and the tuned keys; no k8s_* keys, no actuator" "$MV" \
  "(cfg('clusterd')['integrations'], $mv_keys, sorted(k for k in cfg('clusterd') if k.startswith(('k8s_', 'actuator', 'kubeconfig'))))" \
  "(['mindcluster'], [('mindcluster_cluster_info_chunk_bytes', 65536), ('mindcluster_cluster_info_namespace', 'mindx-dl'), ('mindcluster_cluster_info_refresh', '30s'), ('mindcluster_cluster_info_writes_per_second', 20), ('mindcluster_device_info_namespace', 'npu-plugin')], [])"
expect "mindcluster-volcano: the token mounted into ClusterD (only)" "$MV" "(pod('Deployment')['automountServiceAccountToken'], pod('DaemonSet')['automountServiceAccountToken'])" "(True, False)"
if render mindcluster-volcano-k8s default "$kv" --set mindcluster.volcano.enabled=true 2>"$TMP/mindcluster-volcano.err" &&
   "$HELM" template clusterd "$CHART" --namespace mindx-dl --kube-version "$kv" --set mindcluster.volcano.enabled=true >"$MVN" 2>>"$TMP/mindcluster-volcano.err" &&
   render mindcluster-volcano-ha default "$kv" --set mindcluster.volcano.enabled=true --set ha.enabled=true --set ha.leaderLabel=false \
     --set kubernetes.enabled=false --set auth.tokenReview=false 2>>"$TMP/mindcluster-volcano.err"; then
  for f in "$MVK" "$MVN" "$MVH"; do
    if "$PY" test/helm/validate.py "$kv" "$f"; then ok "rendered objects valid ($(basename "$f" .yaml))"; else bad "rendered objects invalid ($(basename "$f" .yaml))"; fi
  done
  expect "mindcluster.volcano.enabled: integrations kubernetes and mindcluster, each once; the default keys" "$MVK" "(cfg('clusterd')['integrations'], $mv_keys)" \
    "(['kubernetes', 'mindcluster'], $MV_DEFAULT_KEYS)"
  expect "mindcluster.volcano.enabled: the Roles in kube-system and mindx-dl, bound" "$MVK" "($mv_roles, [(ns, n, r) for ns, n, _, r, _ in $mv_bindings])" \
    "([('kube-system', 'clusterd-mindcluster-deviceinfo', $MV_READ), ('mindx-dl', 'clusterd-mindcluster-clusterinfo', $MV_WRITE)], [('kube-system', 'clusterd-mindcluster-deviceinfo', 'clusterd-mindcluster-deviceinfo'), ('mindx-dl', 'clusterd-mindcluster-clusterinfo', 'clusterd-mindcluster-clusterinfo')])"
  expect "mindcluster.volcano.enabled: the Kubernetes integration's ClusterRole unchanged (no configmaps)" "$MVK" "$(rules ClusterRole)" \
    "[('', 'events', 'create patch get'), ('', 'nodes', 'get list watch patch'), ('', 'nodes/status', 'patch'), ('', 'pods', 'get list watch delete'), ('', 'pods/eviction', 'create'), ('events.k8s.io', 'events', 'create patch get'), ('resource.k8s.io', 'devicetaintrules', 'get list create patch delete'), ('resource.k8s.io', 'resourceslices', 'list'), ('scheduling.volcano.sh', 'podgroups', 'get list watch')]"
  expect "mindcluster.volcano.enabled, release in mindx-dl: the write Role next to the leases Role" "$MVN" \
    "sorted((d['metadata']['namespace'], d['metadata']['name']) for d in by['Role'])" \
    "[('kube-system', 'clusterd-mindcluster-deviceinfo'), ('mindx-dl', 'clusterd'), ('mindx-dl', 'clusterd-mindcluster-clusterinfo')]"
  expect "mindcluster.volcano.enabled, ha, nothing else: the StatefulSet mounts the token for the two Roles alone" "$MVH" \
    "(spod('clusterd')['automountServiceAccountToken'], sorted((d['kind'], d['metadata']['name']) for k in ('Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding') for d in by.get(k, [])), cfg('clusterd')['integrations'])" \
    "(True, [('Role', 'clusterd-mindcluster-clusterinfo'), ('Role', 'clusterd-mindcluster-deviceinfo'), ('RoleBinding', 'clusterd-mindcluster-clusterinfo'), ('RoleBinding', 'clusterd-mindcluster-deviceinfo')], ['mindcluster'])"
  # MindCluster's operators' ConfigMaps (docs/mindcluster.md, "Separation and observability
  # through ConfigMaps"): a Role in systemNamespace with only the verbs needed, and the keys.
  MVS=$TMP/mindcluster-volcano-system-$kv.yaml MVP=$TMP/mindcluster-volcano-policy-$kv.yaml
  if render mindcluster-volcano-system default "$kv" --set mindcluster.volcano.enabled=true \
       --set mindcluster.volcano.separationPolicyConfigMap=true --set mindcluster.volcano.manualInfoConfigMap=true \
       --set mindcluster.volcano.statisticsConfigMaps=true --set mindcluster.volcano.schedulingExceptionConfigMap=true \
       --set mindcluster.volcano.manualInfoInterval=5s --set mindcluster.volcano.systemNamespace=ops-system 2>>"$TMP/mindcluster-volcano.err" &&
     render mindcluster-volcano-policy default "$kv" --set mindcluster.volcano.enabled=true \
       --set mindcluster.volcano.separationPolicyConfigMap=true 2>>"$TMP/mindcluster-volcano.err"; then
    if "$PY" test/helm/validate.py "$kv" "$MVS"; then ok "rendered objects valid (mindcluster-volcano-system)"; else bad "rendered objects invalid (mindcluster-volcano-system)"; fi
    expect "mindcluster operators' ConfigMaps: a Role in the system namespace with delete (manual info), bound" "$MVS" \
      "([r for r in $mv_roles if r[0] == 'ops-system'], [(ns, n, r) for ns, n, _, r, _ in $mv_bindings if ns == 'ops-system'])" \
      "([('ops-system', 'clusterd-mindcluster-system', [('', 'configmaps', 'get list watch create update delete')])], [('ops-system', 'clusterd-mindcluster-system', 'clusterd-mindcluster-system')])"
    expect "mindcluster operators' ConfigMaps: the keys" "$MVS" "[kv for kv in $mv_keys if kv[0] not in dict($MV_DEFAULT_KEYS)]" \
      "[('mindcluster_manual_info_cm', True), ('mindcluster_manual_info_interval', '5s'), ('mindcluster_scheduling_exception_cm', True), ('mindcluster_separation_policy_cm', True), ('mindcluster_statistics_cms', True), ('mindcluster_statistics_interval', '60s'), ('mindcluster_system_namespace', 'ops-system')]"
    expect "mindcluster operators' ConfigMaps: the policy alone reads (get, list, watch)" "$MVP" \
      "([r for r in $mv_roles if r[1] == 'clusterd-mindcluster-system'], [kv for kv in $mv_keys if kv[0] not in dict($MV_DEFAULT_KEYS)])" \
      "([('cluster-system', 'clusterd-mindcluster-system', $MV_READ)], [('mindcluster_separation_policy_cm', True), ('mindcluster_system_namespace', 'cluster-system')])"
  else
    cat "$TMP/mindcluster-volcano.err" >&2; bad "mindcluster: helm template with the operators' ConfigMaps"
  fi
else
  cat "$TMP/mindcluster-volcano.err" >&2; bad "mindcluster: helm template with mindcluster.volcano.enabled"
fi
# mindcluster.jobSummary.enabled (the "mindcluster-jobs" integration): one ClusterRole on ConfigMaps
# (list, create, update, delete: job-summary-<job> in every job's namespace), bound to ClusterD's
# ServiceAccount, the token mounted; nothing of it by default.
MJ=$TMP/mindcluster-jobs-$kv.yaml
expect "default: no mindcluster-jobs ClusterRole" "$D" "[d['metadata']['name'] for d in by['ClusterRole'] if d['metadata']['name'].endswith('-mindcluster-jobs')]" "[]"
if render mindcluster-jobs default "$kv" --set mindcluster.jobSummary.enabled=true --set kubernetes.enabled=false \
     --set auth.tokenReview=false 2>"$TMP/mindcluster-jobs.err"; then
  if "$PY" test/helm/validate.py "$kv" "$MJ"; then ok "rendered objects valid (mindcluster-jobs)"; else bad "rendered objects invalid (mindcluster-jobs)"; fi
  expect "mindcluster.jobSummary.enabled: integrations, the ClusterRole's rules, its binding, the token mounted" "$MJ" \
    "(cfg('clusterd')['integrations'], $(rules ClusterRole -mindcluster-jobs), [(b['roleRef']['name'], str(b['subjects'])) for b in by['ClusterRoleBinding']], pod('Deployment')['automountServiceAccountToken'])" \
    "(['mindcluster-jobs'], [('', 'configmaps', 'list create update delete')], [('clusterd-mindcluster-jobs', $MV_SA)], True)"
else
  cat "$TMP/mindcluster-jobs.err" >&2; bad "mindcluster: helm template with mindcluster.jobSummary.enabled"
fi
# `helm upgrade --reuse-values` from a chart without mindcluster.volcano keeps the old chart's
# values: a copy of the chart without it renders no mindcluster integration.
cp -r "$CHART" "$TMP/chart-no-volcano"
"$PY" -c 'import sys, yaml
v = yaml.safe_load(open(sys.argv[1])); del v["mindcluster"]["volcano"]
yaml.safe_dump(v, open(sys.argv[1], "w"))' "$TMP/chart-no-volcano/values.yaml"
if "$HELM" template clusterd "$TMP/chart-no-volcano" --namespace fault-mgmt --kube-version "$kv" >"$TMP/no-volcano.yaml" 2>"$TMP/no-volcano.err"; then
  expect "values without mindcluster.volcano (--reuse-values from an older chart): no mindcluster integration" "$TMP/no-volcano.yaml" \
    "(cfg('clusterd')['integrations'], $mv_keys, $mv_roles)" "(['kubernetes'], [], [])"
else
  cat "$TMP/no-volcano.err" >&2; bad "mindcluster: helm template of the chart without mindcluster.volcano"
fi
# Likewise from a chart with mindcluster.volcano but without publicFaultNamespaces: none read.
cp -r "$CHART" "$TMP/chart-no-public-faults"
"$PY" -c 'import sys, yaml
v = yaml.safe_load(open(sys.argv[1])); del v["mindcluster"]["volcano"]["publicFaultNamespaces"]
yaml.safe_dump(v, open(sys.argv[1], "w"))' "$TMP/chart-no-public-faults/values.yaml"
if "$HELM" template clusterd "$TMP/chart-no-public-faults" --namespace fault-mgmt --kube-version "$kv" \
  --set mindcluster.volcano.enabled=true >"$TMP/no-public-faults.yaml" 2>"$TMP/no-public-faults.err"; then
  expect "values without mindcluster.volcano.publicFaultNamespaces (--reuse-values): no key, the two Roles only" "$TMP/no-public-faults.yaml" \
    "('mindcluster_public_fault_namespaces' in cfg('clusterd'), [n for _, n, _ in $mv_roles])" "(False, ['clusterd-mindcluster-deviceinfo', 'clusterd-mindcluster-clusterinfo'])"
else
  cat "$TMP/no-public-faults.err" >&2; bad "mindcluster: helm template of the chart without mindcluster.volcano.publicFaultNamespaces"
fi

# Public-fault ConfigMaps (mindcluster.volcano.publicFaultNamespaces): none by default (no key,
# no Role); a list: a read-only <fullname>-mindcluster-publicfault Role bound in each namespace
# and the list in config.json; ["*"]: a read-only ClusterRole (and binding) on configmaps instead,
# and no Role; without mindcluster.volcano.enabled nothing at all.
PF=$TMP/values-mindcluster-public-faults-$kv.yaml PFS=$TMP/mindcluster-public-faults-all-$kv.yaml
PFO=$TMP/mindcluster-public-faults-off-$kv.yaml
pf_roles="sorted((d['kind'], d['metadata'].get('namespace'), d['metadata']['name'], [(g, r, ' '.join(x['verbs'])) for x in d['rules'] for g in x['apiGroups'] for r in x['resources']]) for k in ('Role', 'ClusterRole') for d in by.get(k, []) if d['metadata']['name'].endswith('-mindcluster-publicfault'))"
pf_bindings="sorted((b['kind'], b['metadata'].get('namespace'), b['metadata']['name'], b['roleRef']['kind'], b['roleRef']['name'], str(b['subjects'])) for k in ('RoleBinding', 'ClusterRoleBinding') for b in by.get(k, []) if b['metadata']['name'].endswith('-mindcluster-publicfault'))"
pf_configmaps="sorted((d['kind'], d['metadata']['name']) for k in ('Role', 'ClusterRole') for d in by.get(k, []) for x in d['rules'] if 'configmaps' in x['resources'])"
pf_key="cfg('clusterd').get('mindcluster_public_fault_namespaces')"
expect "mindcluster.volcano.enabled, publicFaultNamespaces [] (default): no key, only the two configmaps Roles" "$MVK" "($pf_key, $pf_configmaps)" \
  "(None, [('Role', 'clusterd-mindcluster-clusterinfo'), ('Role', 'clusterd-mindcluster-deviceinfo')])"
expect "mindcluster-public-faults: a read-only Role in each listed namespace" "$PF" "$pf_roles" \
  "[('Role', 'fd-online', 'clusterd-mindcluster-publicfault', $MV_READ), ('Role', 'kube-system', 'clusterd-mindcluster-publicfault', $MV_READ)]"
expect "mindcluster-public-faults: each bound to ClusterD's ServiceAccount, in its namespace" "$PF" "$pf_bindings" \
  "[('RoleBinding', 'fd-online', 'clusterd-mindcluster-publicfault', 'Role', 'clusterd-mindcluster-publicfault', $MV_SA), ('RoleBinding', 'kube-system', 'clusterd-mindcluster-publicfault', 'Role', 'clusterd-mindcluster-publicfault', $MV_SA)]"
expect "mindcluster-public-faults: the list in config.json; no ClusterRole on configmaps; the device plugin's Role unchanged" "$PF" \
  "($pf_key, [k for k, _ in $pf_configmaps], $mv_roles[1:2])" \
  "(['fd-online', 'kube-system'], ['Role', 'Role', 'Role', 'Role'], [('kube-system', 'clusterd-mindcluster-deviceinfo', $MV_READ)])"
if render mindcluster-public-faults-all default "$kv" --set mindcluster.volcano.enabled=true --set-json 'mindcluster.volcano.publicFaultNamespaces=["*"]' 2>"$TMP/public-faults.err" &&
   render mindcluster-public-faults-off default "$kv" --set-json 'mindcluster.volcano.publicFaultNamespaces=["fd-online"]' 2>>"$TMP/public-faults.err"; then
  for f in "$PFS" "$PFO"; do
    if "$PY" test/helm/validate.py "$kv" "$f"; then ok "rendered objects valid ($(basename "$f" .yaml))"; else bad "rendered objects invalid ($(basename "$f" .yaml))"; fi
  done
  expect "publicFaultNamespaces [\"*\"]: a read-only ClusterRole on configmaps, no Role" "$PFS" "$pf_roles" \
    "[('ClusterRole', None, 'fault-mgmt-clusterd-mindcluster-publicfault', $MV_READ)]"
  expect "publicFaultNamespaces [\"*\"]: bound by a ClusterRoleBinding to ClusterD's ServiceAccount" "$PFS" "$pf_bindings" \
    "[('ClusterRoleBinding', None, 'fault-mgmt-clusterd-mindcluster-publicfault', 'ClusterRole', 'fault-mgmt-clusterd-mindcluster-publicfault', $MV_SA)]"
  expect "publicFaultNamespaces [\"*\"]: [\"*\"] in config.json, the two Roles unchanged" "$PFS" "($pf_key, [n for _, n, _ in $mv_roles])" \
    "(['*'], ['clusterd-mindcluster-deviceinfo', 'clusterd-mindcluster-clusterinfo'])"
  expect "publicFaultNamespaces without mindcluster.volcano.enabled: no key, no Role, no ClusterRole on configmaps" "$PFO" "($pf_key, $pf_roles, $pf_configmaps)" \
    "(None, [], [])"
else
  cat "$TMP/public-faults.err" >&2; bad "mindcluster: helm template with mindcluster.volcano.publicFaultNamespaces"
fi

# TLS, authentication and NetworkPolicies (docs/deploy.md, "TLS and authentication").
X=$TMP/values-tls-existing-secret-$kv.yaml C=$TMP/values-tls-cert-manager-$kv.yaml I=$TMP/values-insecure-$kv.yaml
NODED_SEL="{'matchLabels': {'app.kubernetes.io/name': 'clusterd', 'app.kubernetes.io/instance': 'clusterd', 'app.kubernetes.io/component': 'noded'}}"
PROM="[{'namespaceSelector': {}, 'podSelector': {'matchLabels': {'app.kubernetes.io/name': 'prometheus'}}}]"
expect "default: mutual TLS (client certificate required)" "$D" "(lambda c: (c['tls_cert_file'], c['tls_key_file'], c['tls_client_ca_file'], c['tls_client_auth'], 'insecure' in c))(cfg('clusterd'))" \
  "('/etc/clusterd/tls/tls.crt', '/etc/clusterd/tls/tls.key', '/etc/clusterd/tls/ca.crt', 'require', False)"
expect "default: TokenReview for NodeD's ServiceAccount" "$D" "(lambda c: (c['auth_token_review'], c['auth_token_audience'], c['auth_agent_service_accounts']))(cfg('clusterd'))" \
  "(True, 'clusterd', ['fault-mgmt/clusterd-noded'])"
expect "default: no token file or bindings; metrics auth on with TLS" "$D" "sorted(k for k in cfg('clusterd') if k in ('auth_token_file', 'auth_bindings', 'metrics_auth'))" "['metrics_auth']"
expect "default: NodeD's HTTPS port with its certificate, client certificates verified against the CA, no token, not insecure" "$D" "(lambda c: (c['http_tls_cert_file'], c['http_tls_key_file'], c['http_tls_client_ca_file'], 'http_token_file' in c, 'http_insecure' in c))(cfg('-noded'))" \
  "('/etc/noded/tls/tls.crt', '/etc/noded/tls/tls.key', '/etc/noded/tls/ca.crt', False, False)"
expect "default: NodeD's probes over HTTPS" "$D" "[pod('DaemonSet')['containers'][0][k]['httpGet'].get('scheme') for k in ('readinessProbe', 'livenessProbe')]" "['HTTPS', 'HTTPS']"
expect "default: NodeD's TLS files and token" "$D" "(lambda c: (c['tls_ca_file'], c['tls_cert_file'], c['tls_key_file'], c['token_file']))(cfg('-noded'))" \
  "('/etc/noded/tls/ca.crt', '/etc/noded/tls/tls.crt', '/etc/noded/tls/tls.key', '/etc/noded/token/token')"
expect "default: generated Secrets (CA, server, agents)" "$D" "sorted((d['metadata']['name'], d['type'], sorted(d['data'])) for d in by['Secret'])" \
  "[('clusterd-ca', 'kubernetes.io/tls', ['ca.crt', 'tls.crt', 'tls.key']), ('clusterd-noded-tls', 'kubernetes.io/tls', ['ca.crt', 'tls.crt', 'tls.key']), ('clusterd-tls', 'kubernetes.io/tls', ['ca.crt', 'tls.crt', 'tls.key'])]"
expect "default: ClusterD's projected config volume" "$D" "proj('Deployment')" \
  "[('configMap', 'clusterd', []), ('secret', 'clusterd-tls', [('ca.crt', 'tls/ca.crt', None), ('tls.crt', 'tls/tls.crt', None), ('tls.key', 'tls/tls.key', 288)])]"
expect "default: NodeD's projected config volume" "$D" "proj('DaemonSet')" \
  "[('configMap', 'clusterd-noded', []), ('secret', 'clusterd-noded-tls', [('ca.crt', 'tls/ca.crt', None), ('tls.crt', 'tls/tls.crt', None), ('tls.key', 'tls/tls.key', 288)]), ('serviceAccountToken', 'clusterd', [])]"
expect "default: NodeD's token: audience clusterd, 1 h, own ServiceAccount, no API token" "$D" \
  "([s['serviceAccountToken'] for s in sources('DaemonSet') if 'serviceAccountToken' in s], pod('DaemonSet')['serviceAccountName'], pod('DaemonSet')['automountServiceAccountToken'], [a['automountServiceAccountToken'] for a in by['ServiceAccount'] if a['metadata']['name'] == 'clusterd-noded'])" \
  "([{'audience': 'clusterd', 'expirationSeconds': 3600, 'path': 'token/token'}], 'clusterd-noded', False, [False])"
expect "default: TokenReview ClusterRole" "$D" "$(rules ClusterRole -tokenreview)" "[('authentication.k8s.io', 'tokenreviews', 'create')]"
expect "default: ClusterD NetworkPolicy (host-network agents, no CIDRs: gRPC and the probe port open; HTTP Prometheus)" "$D" "(npol('clusterd')['podSelector']['matchLabels']['app.kubernetes.io/component'], npol('clusterd')['policyTypes'], rules_of('clusterd'))" \
  "('clusterd', ['Ingress'], [(['grpc'], None), (['http'], $PROM), (['probe'], None)])"
expect "default: the HTTP port is TLS, the probes go to the plaintext probe-only port" "$D" "(cfg('clusterd')['probe_listen'], [(p['name'], p['containerPort']) for p in pod('Deployment')['containers'][0]['ports']], sorted({pod('Deployment')['containers'][0][k]['httpGet']['port'] for k in ('startupProbe', 'livenessProbe', 'readinessProbe')}))" \
  "('0.0.0.0:11254', [('grpc', 8899), ('http', 11253), ('probe', 11254)], ['probe'])"
expect "default: NodeD NetworkPolicy (HTTP from Prometheus only)" "$D" "(npol('clusterd-noded')['podSelector'], rules_of('clusterd-noded'))" "($NODED_SEL, [(['http'], $PROM)])"
expect "existing-secret: nothing generated" "$X" "sorted(k for k in by if k in ('Secret', 'Certificate'))" "[]"
expect "existing-secret: the named Secrets and the token file mounted" "$X" "[(k, n) for k, n, _ in proj('Deployment') + proj('DaemonSet')]" \
  "[('configMap', 'clusterd'), ('secret', 'clusterd-server-cert'), ('secret', 'clusterd-tokens'), ('configMap', 'clusterd-noded'), ('secret', 'clusterd-agent-cert'), ('serviceAccountToken', 'clusterd')]"
expect "existing-secret: request mode, token file, bindings, metrics auth" "$X" "(lambda c: (c['tls_client_auth'], c['auth_token_file'], c['auth_bindings'], c['metrics_auth']))(cfg('clusterd'))" \
  "('request', '/etc/clusterd/auth/tokens.csv', ['operator=group:sre', 'viewer=user:system:serviceaccount:monitoring:prometheus'], True)"
expect "existing-secret: tokens.csv at auth/, group-readable only" "$X" "[i for k, n, i in proj('Deployment') if n == 'clusterd-tokens']" "[[('tokens.csv', 'auth/tokens.csv', 288)]]"
expect "existing-secret: both ServiceMonitors scrape https, check the server certificates against the CA, present the client certificate" "$X" "[(d['metadata']['name'], d['spec']['endpoints'][0]['scheme'], d['spec']['endpoints'][0].get('tlsConfig')) for d in by['ServiceMonitor']]" \
  "[('clusterd', 'https', {'serverName': 'clusterd', 'ca': {'secret': {'name': 'clusterd-agent-cert', 'key': 'ca.crt'}}, 'cert': {'secret': {'name': 'prometheus-clusterd-client', 'key': 'tls.crt'}}, 'keySecret': {'name': 'prometheus-clusterd-client', 'key': 'tls.key'}}), ('clusterd-noded', 'https', {'serverName': 'clusterd-agents', 'ca': {'secret': {'name': 'clusterd-agent-cert', 'key': 'ca.crt'}}, 'cert': {'secret': {'name': 'prometheus-clusterd-client', 'key': 'tls.crt'}}, 'keySecret': {'name': 'prometheus-clusterd-client', 'key': 'tls.key'}})]"
expect "existing-secret: metrics.role operator" "$X" "cfg('clusterd')['metrics_role']" "operator"
expect "existing-secret: the ServiceMonitor sends the scrape token to ClusterD only" "$X" "[(d['metadata']['name'], d['spec']['endpoints'][0].get('authorization')) for d in by['ServiceMonitor']]" \
  "[('clusterd', {'type': 'Bearer', 'credentials': {'name': 'clusterd-scrape-token', 'key': 'token'}}), ('clusterd-noded', None)]"
expect "existing-secret: gRPC from NodeD pods and the listed clients; extra rule" "$X" "rules_of('clusterd')" \
  "[(['grpc'], [{'podSelector': $NODED_SEL}, {'podSelector': {'matchLabels': {'app': 'clusterctl'}}}, {'namespaceSelector': {'matchLabels': {'kubernetes.io/metadata.name': 'training'}}, 'podSelector': {'matchLabels': {'clusterd.io/job-agent': 'true'}}}]), (['http'], $PROM), (['probe'], None), (['grpc'], [{'ipBlock': {'cidr': '10.20.0.0/16'}}])]"
expect "existing-secret: NodeD extra rule" "$X" "rules_of('clusterd-noded')" "[(['http'], $PROM), (['http'], [{'ipBlock': {'cidr': '10.30.0.0/16'}}])]"
expect "cert-manager: Certificates for server and agents" "$C" "sorted((c['metadata']['name'], c['spec']['secretName'], c['spec']['commonName'], c['spec'].get('dnsNames'), c['spec'].get('ipAddresses'), c['spec']['issuerRef'], c['spec']['duration']) for c in by['Certificate'])" \
  "[('clusterd-noded-tls', 'clusterd-noded-tls', 'clusterd-agents', ['clusterd-agents'], None, {'name': 'cluster-ca', 'kind': 'ClusterIssuer', 'group': 'cert-manager.io'}, '720h'), ('clusterd-tls', 'clusterd-tls', 'clusterd', ['clusterd', 'clusterd.fault-mgmt', 'clusterd.fault-mgmt.svc', 'clusterd.fault-mgmt.svc.cluster.local', 'localhost', 'clusterd.example.com'], ['127.0.0.1', '192.0.2.10'], {'name': 'cluster-ca', 'kind': 'ClusterIssuer', 'group': 'cert-manager.io'}, '720h')]"
expect "cert-manager: NodeD's certificate serves its HTTPS port too (server auth)" "$C" "[c['spec']['usages'] for c in by['Certificate'] if c['metadata']['name'] == 'clusterd-noded-tls']" \
  "[['digital signature', 'key encipherment', 'client auth', 'server auth']]"
expect "cert-manager: the pods mount the Certificates' Secrets" "$C" "sorted(n for k, n, _ in proj('Deployment') + proj('DaemonSet') if k == 'secret') == sorted(c['spec']['secretName'] for c in by['Certificate']) and 'Secret' not in by" "True"
expect "cert-manager: integration off, TokenReview alone (its role, token mounted)" "$C" "(sorted(d['metadata']['name'] for k in ('ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding') for d in by.get(k, [])), pod('Deployment')['automountServiceAccountToken'], 'integrations' in cfg('clusterd'))" \
  "(['fault-mgmt-clusterd-tokenreview', 'fault-mgmt-clusterd-tokenreview'], True, False)"
expect "cert-manager: another audience on both sides" "$C" "(cfg('clusterd')['auth_token_audience'], [(s['serviceAccountToken']['audience'], s['serviceAccountToken']['expirationSeconds']) for s in sources('DaemonSet') if 'serviceAccountToken' in s], cfg('clusterd')['tls_reload_interval'])" \
  "('clusterd.example.com', [('clusterd.example.com', 7200)], '30s')"
expect "cert-manager: gRPC from the node CIDRs; no Prometheus rule" "$C" "(rules_of('clusterd'), rules_of('clusterd-noded'))" \
  "([(['grpc'], [{'podSelector': $NODED_SEL}, {'ipBlock': {'cidr': '10.0.0.0/24'}}, {'ipBlock': {'cidr': '10.0.1.0/24'}}]), (['probe'], [{'ipBlock': {'cidr': '10.0.0.0/24'}}, {'ipBlock': {'cidr': '10.0.1.0/24'}}])], [])"
expect "insecure: config.json says insecure, no TLS or auth keys" "$I" "(lambda c: (c.get('insecure'), sorted(k for k in c if k.startswith(('tls_', 'auth_', 'metrics_')))))(cfg('clusterd'))" "(True, [])"
# tls.source=certManager without an issuerRef: the chart's own CA (a self-signed Issuer signs a
# CA Certificate, a ca Issuer of its Secret signs the server's and the agents' certificates).
if render cert-manager-own-ca default "$kv" --set tls.source=certManager 2>"$TMP/cert-manager-own-ca.err"; then
  OWN=$TMP/cert-manager-own-ca-$kv.yaml
  if "$PY" test/helm/validate.py "$kv" "$OWN"; then ok "rendered objects valid (cert-manager-own-ca)"; else bad "rendered objects invalid (cert-manager-own-ca)"; fi
  expect "cert-manager without an issuer: a self-signed Issuer, the CA Certificate, a ca Issuer" "$OWN" \
    "sorted((d['kind'], d['metadata']['name'], d['spec'].get('issuerRef', {}).get('name'), d['spec'].get('isCA'), d['spec'].get('ca')) for k in ('Issuer', 'Certificate') for d in by[k])" \
    "[('Certificate', 'clusterd-ca', 'clusterd-selfsigned', True, None), ('Certificate', 'clusterd-noded-tls', 'clusterd-ca', None, None), ('Certificate', 'clusterd-tls', 'clusterd-ca', None, None), ('Issuer', 'clusterd-ca', None, None, {'secretName': 'clusterd-ca'}), ('Issuer', 'clusterd-selfsigned', None, None, None)]"
else
  cat "$TMP/cert-manager-own-ca.err" >&2; bad "cert-manager: helm template without an issuer"
fi
expect "insecure: NodeD's HTTP port plaintext by the explicit switch, probes over http" "$I" "(cfg('-noded').get('http_insecure'), sorted(k for k in cfg('-noded') if k.startswith('http_tls')), [pod('DaemonSet')['containers'][0][k]['httpGet'].get('scheme') for k in ('readinessProbe', 'livenessProbe')])" "(True, [], [None, None])"
expect "insecure: NodeD without TLS keys or token" "$I" "(sorted(k for k in cfg('-noded') if k.startswith(('tls_', 'token', 'server_name'))), proj('DaemonSet'))" "([], [('configMap', 'clusterd-noded', [])])"
expect "insecure: no probe-only port, the probes on the HTTP port" "$I" "('probe_listen' in cfg('clusterd'), [p['name'] for p in pod('Deployment')['containers'][0]['ports']], sorted({pod('Deployment')['containers'][0][k]['httpGet']['port'] for k in ('startupProbe', 'livenessProbe', 'readinessProbe')}))" \
  "(False, ['grpc', 'http'], ['http'])"
expect "insecure: no Secrets, NetworkPolicies or TokenReview role" "$I" "(sorted(k for k in by if k in ('Secret', 'Certificate', 'NetworkPolicy')), [d['metadata']['name'] for d in by['ClusterRole']])" "([], ['fault-mgmt-clusterd'])"
# The generated certificates: one CA signs both; the server's names; the agents' CN and no group.
secret_data() { # secret_data RENDERED NAME KEY OUT
  "$PY" -c 'import base64, sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Secret" and d["metadata"]["name"] == sys.argv[2]:
        open(sys.argv[4], "wb").write(base64.b64decode(d["data"][sys.argv[3]])); break
else: sys.exit("no Secret " + sys.argv[2])' "$@"
}
gen=$TMP/gen && mkdir -p "$gen"
for sk in clusterd-ca:ca.crt clusterd-ca:tls.key clusterd-tls:tls.crt clusterd-tls:ca.crt clusterd-noded-tls:tls.crt clusterd-noded-tls:ca.crt clusterd-noded-tls:tls.key; do
  secret_data "$D" "${sk%%:*}" "${sk#*:}" "$gen/${sk%%:*}-${sk#*:}"
done
if openssl verify -CAfile "$gen/clusterd-ca-ca.crt" "$gen/clusterd-tls-tls.crt" "$gen/clusterd-noded-tls-tls.crt" >/dev/null 2>&1 &&
   cmp -s "$gen/clusterd-ca-ca.crt" "$gen/clusterd-tls-ca.crt" && cmp -s "$gen/clusterd-ca-ca.crt" "$gen/clusterd-noded-tls-ca.crt"; then
  ok "generated: one CA signs both certificates and is each Secret's ca.crt"
else
  bad "generated: the certificates do not chain to the CA in clusterd-ca"
fi
sans=$(openssl x509 -in "$gen/clusterd-tls-tls.crt" -noout -ext subjectAltName 2>/dev/null | tail -1 | tr -d ' ')
want_sans="DNS:clusterd,DNS:clusterd.fault-mgmt,DNS:clusterd.fault-mgmt.svc,DNS:clusterd.fault-mgmt.svc.cluster.local,DNS:localhost,IPAddress:127.0.0.1"
if [[ $sans == "$want_sans" ]]; then ok "generated: server certificate names ($sans)"; else bad "generated: server SANs '$sans', want '$want_sans'"; fi
subj=$(openssl x509 -in "$gen/clusterd-noded-tls-tls.crt" -noout -subject -nameopt RFC2253 2>/dev/null)
if [[ $subj == "subject=CN=clusterd-agents" ]]; then ok "generated: agents' certificate CN=clusterd-agents, no O (no role)"; else bad "generated: agents' subject '$subj'"; fi
agent_sans=$(openssl x509 -in "$gen/clusterd-noded-tls-tls.crt" -noout -ext subjectAltName,extendedKeyUsage 2>/dev/null | tr -d ' ')
if [[ $agent_sans == *$'\n'DNS:clusterd-agents* && $agent_sans == *TLSWebServerAuthentication* && $agent_sans == *TLSWebClientAuthentication* ]]; then
  ok "generated: agents' certificate names clusterd-agents, for server and client auth (NodeD's HTTPS port)"
else
  bad "generated: agents' SANs and usages '$agent_sans'"
fi
if [[ $(openssl x509 -in "$gen/clusterd-noded-tls-tls.crt" -noout -pubkey | openssl sha256) == \
      $(openssl pkey -in "$gen/clusterd-noded-tls-tls.key" -pubout | openssl sha256) ]]; then
  ok "generated: agents' key matches its certificate"
else
  bad "generated: agents' key does not match its certificate"
fi

# High availability (ha.enabled): ClusterD as a StatefulSet, a RocksDB volume per replica;
# etcd deployed by the chart (values-ha) or given (values-ha-external-etcd). With ha.leaderLabel
# (the default) every healthy replica is Ready (/readyz/replica) and the Services select the pod
# label the leader writes (--ha-pod, a Role for pods); with ha.leaderLabel=false only the
# leader is Ready and the Services select Ready pods.
HA=$TMP/values-ha-$kv.yaml HX=$TMP/values-ha-external-etcd-$kv.yaml HA_OLD=$TMP/values-ha-${KUBE_VERSIONS[0]}.yaml
CLUSTERD_SEL="{'matchLabels': {'app.kubernetes.io/name': 'clusterd', 'app.kubernetes.io/instance': 'clusterd', 'app.kubernetes.io/component': 'clusterd'}}"
ETCD_SEL="{'matchLabels': {'app.kubernetes.io/name': 'clusterd', 'app.kubernetes.io/instance': 'clusterd', 'app.kubernetes.io/component': 'etcd'}}"
HA_ENV="{'name': 'POD_NAME', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.name'}}}, {'name': 'POD_NAMESPACE', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.namespace'}}}, {'name': 'POD_IP', 'valueFrom': {'fieldRef': {'fieldPath': 'status.podIP'}}}"
HA_ENV_NOLABEL="{'name': 'POD_NAME', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.name'}}}, {'name': 'POD_IP', 'valueFrom': {'fieldRef': {'fieldPath': 'status.podIP'}}}"
# The Services and what their selectors say about the leader label: (name, clusterIP, publishNotReadyAddresses, component, own component, ha-role).
HA_SVCS="sorted((s['metadata']['name'], s['spec'].get('clusterIP'), s['spec'].get('publishNotReadyAddresses'), s['spec']['selector']['app.kubernetes.io/component'], s['metadata']['labels']['app.kubernetes.io/component'], s['spec']['selector'].get('clusterd.io/ha-role')) for s in by['Service'] if not s['metadata']['name'].endswith('-metrics'))"
# The Role(s) granting pods, with their namespaces, rules and bound subjects.
HA_PODS_ROLE="[(r['metadata']['name'], r['metadata']['namespace'], r['rules'], [(b['metadata']['namespace'], b['roleRef'], b['subjects']) for b in by.get('RoleBinding', []) if b['roleRef']['name'] == r['metadata']['name']]) for r in by.get('Role', []) if any('pods' in x['resources'] for x in r['rules'])]"
# Which Services the ClusterD ServiceMonitor selects, and the job its relabelings set.
HA_SM="([s['metadata']['name'] for s in by['Service'] if all(s['metadata']['labels'].get(k) == v for k, v in by['ServiceMonitor'][0]['spec']['selector']['matchLabels'].items())], [(r.get('targetLabel'), r.get('replacement')) for e in by['ServiceMonitor'][0]['spec']['endpoints'] for r in e.get('relabelings', [])])"
expect "default: no HA keys, no StatefulSet or PodDisruptionBudget" "$D" "([k for k in cfg('clusterd') if k.startswith(('etcd_', 'ha_'))], 'StatefulSet' in by, 'PodDisruptionBudget' in by)" "([], False, False)"
expect "default: no leader label, no --ha-* flag, no pods Role" "$D" "([a for a in pod('Deployment')['containers'][0]['args'] if a.startswith('--ha-')], [s['spec']['selector'].get('clusterd.io/ha-role') for s in by['Service']], $HA_PODS_ROLE, pod('Deployment')['containers'][0]['readinessProbe']['httpGet']['path'])" "([], [None], [], '/readyz')"
expect "ha: kinds (no Deployment, no lone PVC)" "$HA" "sorted(by)" \
  "['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'NetworkPolicy', 'PodDisruptionBudget', 'Role', 'RoleBinding', 'Secret', 'Service', 'ServiceAccount', 'ServiceMonitor', 'StatefulSet']"
expect "ha: ClusterD StatefulSet: 3 replicas, Parallel, headless serviceName, RollingUpdate (leaderLabel), a data PVC per replica" "$HA" \
  "(lambda s: (s['metadata']['name'], s['spec']['replicas'], s['spec']['podManagementPolicy'], s['spec']['serviceName'], s['spec']['updateStrategy'], [(v['metadata']['name'], v['metadata']['labels'] == s['spec']['selector']['matchLabels'], v['spec']['accessModes'], v['spec']['resources']['requests']['storage'], v['spec'].get('storageClassName'), v['metadata'].get('annotations')) for v in s['spec']['volumeClaimTemplates']], sorted(v['name'] for v in spod('clusterd')['volumes'])))(sts('clusterd'))" \
  "('clusterd', 3, 'Parallel', 'clusterd-headless', {'type': 'RollingUpdate'}, [('data', True, ['ReadWriteOnce'], '50Gi', 'local-nvme', {'backup.example.com/enabled': 'true'})], ['config', 'tmp'])"
expect "ha: --ha-replica-id=\$(POD_NAME), --ha-advertise-address=\$(POD_IP):11253, --ha-pod=\$(POD_NAMESPACE)/\$(POD_NAME) from the downward API; extraEnv kept" "$HA" "(spod('clusterd')['containers'][0]['args'], spod('clusterd')['containers'][0]['env'])" \
  "(['--config=/etc/clusterd/config.json', '--ha-replica-id=\$(POD_NAME)', '--ha-advertise-address=\$(POD_IP):11253', '--ha-pod=\$(POD_NAMESPACE)/\$(POD_NAME)'], [$HA_ENV, {'name': 'TZ', 'value': 'UTC'}])"
expect "ha: config.json: https etcd_endpoints (the deployed members), the etcd TLS files, lease TTL, key prefix" "$HA" "sorted((k, v) for k, v in cfg('clusterd').items() if k.startswith(('etcd_', 'ha_')))" \
  "[('etcd_ca_file', '/etc/clusterd/etcd-tls/ca.crt'), ('etcd_cert_file', '/etc/clusterd/etcd-tls/tls.crt'), ('etcd_endpoints', ['https://clusterd-etcd-0.clusterd-etcd.fault-mgmt.svc:2379', 'https://clusterd-etcd-1.clusterd-etcd.fault-mgmt.svc:2379', 'https://clusterd-etcd-2.clusterd-etcd.fault-mgmt.svc:2379']), ('etcd_key_file', '/etc/clusterd/etcd-tls/tls.key'), ('ha_key_prefix', '/clusterd/'), ('ha_lease_ttl', '2s')]"
expect "ha: tight readiness on /readyz/replica (every healthy replica is Ready), on the probe-only port (TLS)" "$HA" "spod('clusterd')['containers'][0]['readinessProbe']" \
  "{'httpGet': {'path': '/readyz/replica', 'port': 'probe'}, 'failureThreshold': 1, 'periodSeconds': 1, 'successThreshold': 1, 'timeoutSeconds': 1}"
expect "ha: the advertised port is ClusterD's HTTP container port" "$HA" "[p['containerPort'] for p in spod('clusterd')['containers'][0]['ports'] if p['name'] == 'http']" "[11253]"
expect "ha: required anti-affinity over hostnames, for ClusterD and etcd" "$HA" "[spod(c)['affinity'] == {'podAntiAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': [{'labelSelector': sts(c)['spec']['selector'], 'topologyKey': 'kubernetes.io/hostname'}]}} for c in ('clusterd', 'etcd')]" "[True, True]"
expect "ha: PodDisruptionBudgets (ClusterD: maxUnavailable 1, unready replicas always evictable)" "$HA" "sorted((d['metadata']['name'], d['spec']['maxUnavailable'], d['spec'].get('unhealthyPodEvictionPolicy'), d['spec']['selector']['matchLabels']['app.kubernetes.io/component']) for d in by['PodDisruptionBudget'])" \
  "[('clusterd', 1, 'AlwaysAllow', 'clusterd'), ('clusterd-etcd', 1, None, 'etcd')]"
expect "ha: no unhealthyPodEvictionPolicy before Kubernetes 1.27" "$HA_OLD" "[d['spec'].get('unhealthyPodEvictionPolicy') for d in by['PodDisruptionBudget']]" "[None, None]"
expect "ha: Services: clusterd selects clusterd.io/ha-role=leader, the headless per-replica one and etcd's do not" "$HA" "$HA_SVCS" \
  "[('clusterd', None, None, 'clusterd', 'clusterd', 'leader'), ('clusterd-etcd', 'None', True, 'etcd', 'etcd', None), ('clusterd-headless', 'None', True, 'clusterd', 'clusterd-headless', None)]"
expect "ha: the ClusterD ServiceMonitor selects the headless Service alone (every replica), the job named after the clusterd Service" "$HA" "$HA_SM" "(['clusterd-headless'], [('job', 'clusterd')])"
expect "ha: a Role with exactly get and patch on pods in the release namespace, bound to ClusterD's ServiceAccount" "$HA" "$HA_PODS_ROLE" \
  "[('clusterd-ha', 'fault-mgmt', [{'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'patch']}], [('fault-mgmt', {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'Role', 'name': 'clusterd-ha'}, [{'kind': 'ServiceAccount', 'name': 'clusterd', 'namespace': 'fault-mgmt'}])])]"
expect "ha: the integration's RBAC unchanged beside it (ClusterRole pods rules, leases Role)" "$HA" "($(rules ClusterRole), $(rules Role clusterd))" \
  "([('', 'events', 'create patch get'), ('', 'nodes', 'get list watch patch'), ('', 'nodes/status', 'patch'), ('', 'pods', 'get list watch delete'), ('', 'pods/eviction', 'create'), ('events.k8s.io', 'events', 'create patch get'), ('resource.k8s.io', 'devicetaintrules', 'get list create patch delete'), ('resource.k8s.io', 'resourceslices', 'list'), ('scheduling.volcano.sh', 'podgroups', 'get list watch')], [('coordination.k8s.io', 'leases', 'get create update')])"
expect "ha: ClusterD NetworkPolicy: HTTP from the other replicas (checkpoints) beside Prometheus" "$HA" "rules_of('clusterd')[1:]" \
  "[(['http'], $PROM), (['probe'], None), (['http'], [{'podSelector': $CLUSTERD_SEL}])]"
expect "ha: etcd StatefulSet: 3 members, image, static cluster, ClusterD's flags" "$HA" \
  "(lambda s: (s['spec']['replicas'], s['spec']['podManagementPolicy'], s['spec']['serviceName'], spod('etcd')['containers'][0]['image'], [a for a in spod('etcd')['containers'][0]['args'] if a.startswith(('--initial-cluster=', '--max-', '--auto-', '--quota-', '--heartbeat-', '--election-', '--snapshot-'))], [(v['spec']['resources']['requests']['storage'], v['spec'].get('storageClassName')) for v in s['spec']['volumeClaimTemplates']]))(sts('etcd'))" \
  "(3, 'Parallel', 'clusterd-etcd', 'quay.io/coreos/etcd:v3.6.16', ['--initial-cluster=clusterd-etcd-0=https://clusterd-etcd-0.clusterd-etcd.fault-mgmt.svc:2380,clusterd-etcd-1=https://clusterd-etcd-1.clusterd-etcd.fault-mgmt.svc:2380,clusterd-etcd-2=https://clusterd-etcd-2.clusterd-etcd.fault-mgmt.svc:2380', '--max-request-bytes=8388608', '--max-txn-ops=1024', '--auto-compaction-mode=revision', '--auto-compaction-retention=100000', '--quota-backend-bytes=8589934592', '--heartbeat-interval=100', '--election-timeout=1000', '--snapshot-count=20000'], [('20Gi', 'local-nvme')])"
expect "ha: etcd on ClusterD's nodes, no API token" "$HA" "(spod('etcd')['nodeSelector'], spod('etcd')['tolerations'] == spod('clusterd')['tolerations'], spod('etcd')['automountServiceAccountToken'])" "({'masterselector': 'dls-master-node'}, True, False)"
expect "ha: etcd NetworkPolicy: client port from ClusterD, peer port from the members, nothing else" "$HA" "(npol('clusterd-etcd')['podSelector'], npol('clusterd-etcd')['policyTypes'], rules_of('clusterd-etcd'))" \
  "($ETCD_SEL, ['Ingress'], [(['client'], [{'podSelector': $CLUSTERD_SEL}]), (['peer'], [{'podSelector': $ETCD_SEL}])])"
# TLS to the deployed etcd (ha.etcd.tls.enabled, the default): https client and peer URLs, client
# certificates required, the members' certificate for peers too (only its CN admitted), the
# probes on the plaintext metrics port; the generated Secrets and their mounts.
expect "ha: etcd TLS flags: https client and peer URLs, client-cert-auth, peer TLS with the members' CN; metrics port plaintext" "$HA" \
  "[a for a in etcd_args() if a.startswith(('--listen-', '--advertise-', '--initial-advertise-', '--cert-', '--key-', '--trusted-', '--client-cert', '--peer-'))]" \
  "['--listen-client-urls=https://0.0.0.0:2379', '--advertise-client-urls=https://\$(POD_NAME).clusterd-etcd.fault-mgmt.svc:2379', '--listen-peer-urls=https://0.0.0.0:2380', '--initial-advertise-peer-urls=https://\$(POD_NAME).clusterd-etcd.fault-mgmt.svc:2380', '--listen-metrics-urls=http://0.0.0.0:2381', '--cert-file=/etc/etcd/tls/tls.crt', '--key-file=/etc/etcd/tls/tls.key', '--trusted-ca-file=/etc/etcd/tls/ca.crt', '--client-cert-auth', '--peer-cert-file=/etc/etcd/tls/tls.crt', '--peer-key-file=/etc/etcd/tls/tls.key', '--peer-trusted-ca-file=/etc/etcd/tls/ca.crt', '--peer-client-cert-auth', '--peer-cert-allowed-cn=clusterd-etcd']"
expect "ha: etcd probes stay on the plaintext metrics port (2381)" "$HA" \
  "[(p, c[p]['httpGet']['path'], c[p]['httpGet']['port'], c[p]['httpGet'].get('scheme')) for c in [spod('etcd')['containers'][0]] for p in ('startupProbe', 'livenessProbe', 'readinessProbe')] + [(p['name'], p['containerPort']) for p in spod('etcd')['containers'][0]['ports'] if p['name'] == 'metrics']" \
  "[('startupProbe', '/livez', 'metrics', None), ('livenessProbe', '/livez', 'metrics', None), ('readinessProbe', '/readyz', 'metrics', None), ('metrics', 2381)]"
expect "ha: etcd mounts the members' certificate Secret read-only, the key group-readable only" "$HA" \
  "(spod('etcd')['volumes'], [(m['name'], m['mountPath'], m.get('readOnly')) for m in spod('etcd')['containers'][0]['volumeMounts']])" \
  "([{'name': 'tls', 'secret': {'secretName': 'clusterd-etcd-tls', 'items': [{'key': 'tls.crt', 'path': 'tls.crt'}, {'key': 'tls.key', 'path': 'tls.key', 'mode': 288}, {'key': 'ca.crt', 'path': 'ca.crt'}]}}], [('data', '/var/lib/etcd', None), ('tls', '/etc/etcd/tls', True)])"
TLS_KEYS="'kubernetes.io/tls', ['ca.crt', 'tls.crt', 'tls.key']"
expect "ha: generated Secrets: ClusterD's (CA, server, agents) and etcd's (CA, members, ClusterD's client certificate)" "$HA" "secrets()" \
  "[('clusterd-ca', 'clusterd', $TLS_KEYS), ('clusterd-etcd-ca', 'etcd', $TLS_KEYS), ('clusterd-etcd-client-tls', 'clusterd', $TLS_KEYS), ('clusterd-etcd-tls', 'etcd', $TLS_KEYS), ('clusterd-noded-tls', 'noded', $TLS_KEYS), ('clusterd-tls', 'clusterd', $TLS_KEYS)]"
expect "ha: ClusterD's read-only config volume has the etcd CA and its client certificate at etcd-tls/ (key group-readable only), where config.json points" "$HA" \
  "([x for x in sproj('clusterd') if x[1] == 'clusterd-etcd-client-tls'], [m['mountPath'] + '/etcd-tls/' + f for m in spod('clusterd')['containers'][0]['volumeMounts'] if m['name'] == 'config' and m['readOnly'] for f in ('ca.crt', 'tls.crt', 'tls.key')] == [cfg('clusterd')[k] for k in ('etcd_ca_file', 'etcd_cert_file', 'etcd_key_file')])" \
  "([('secret', 'clusterd-etcd-client-tls', [('ca.crt', 'etcd-tls/ca.crt', None), ('tls.crt', 'etcd-tls/tls.crt', None), ('tls.key', 'etcd-tls/tls.key', 288)])], True)"
expect "ha-external-etcd: no etcd objects; one StatefulSet of 5; the given OnDelete wins over the leaderLabel default" "$HX" "(sorted(d['kind'] for d in docs if d['metadata'].get('labels', {}).get('app.kubernetes.io/component') == 'etcd'), [(s['metadata']['name'], s['spec']['replicas'], s['spec']['updateStrategy']['type']) for s in by['StatefulSet']], 'Deployment' in by, 'PersistentVolumeClaim' in by)" \
  "([], [('fault-center', 5, 'OnDelete')], False, False)"
expect "ha-external-etcd: config.json: the given endpoints and HA keys" "$HX" "sorted((k, v) for k, v in cfg('fault-center').items() if k.startswith(('etcd_', 'ha_')))" \
  "[('etcd_endpoints', ['http://etcd-0.etcd.infra.svc:2379', 'http://etcd-1.etcd.infra.svc:2379', 'etcd-2.etcd.infra.svc:2379']), ('ha_key_prefix', '/clusterd-prod/'), ('ha_lease_ttl', '3s'), ('ha_log_retain_entries', 50000), ('ha_max_entry_bytes', 2097152), ('ha_request_timeout', '1500ms')]"
expect "ha-external-etcd: preferred anti-affinity merged into the given nodeAffinity" "$HX" "(sorted(spod('clusterd')['affinity']), spod('clusterd')['affinity']['podAntiAffinity'])" \
  "(['nodeAffinity', 'podAntiAffinity'], {'preferredDuringSchedulingIgnoredDuringExecution': [{'podAffinityTerm': {'labelSelector': {'matchLabels': {'app.kubernetes.io/component': 'clusterd', 'app.kubernetes.io/instance': 'clusterd', 'app.kubernetes.io/name': 'clusterd'}}, 'topologyKey': 'kubernetes.io/hostname'}, 'weight': 100}]})"
expect "ha-external-etcd: ha.readinessProbe on /readyz/replica" "$HX" "(spod('clusterd')['containers'][0]['readinessProbe']['periodSeconds'], spod('clusterd')['containers'][0]['readinessProbe']['httpGet']['path'])" "(2, '/readyz/replica')"
expect "ha-external-etcd: the pods Role in the release namespace, for fault-center's ServiceAccount" "$HX" "[(n, ns, [(b_ns, s) for b_ns, _, s in b]) for n, ns, _, b in $HA_PODS_ROLE]" \
  "[('fault-center-ha', 'fault-mgmt', [('fault-mgmt', [{'kind': 'ServiceAccount', 'name': 'fault-center', 'namespace': 'fault-mgmt'}])])]"
# Under ha the pod is the Deployment's but for what HA changes; a podAntiAffinity of the user's is kept as given.
if render ha-default default "$kv" --set ha.enabled=true 2>"$TMP/ha-default.err" &&
   render ha-own-affinity default "$kv" --set ha.enabled=true \
     --set-json 'clusterd.affinity={"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":"topology.kubernetes.io/zone","labelSelector":{"matchLabels":{"app.kubernetes.io/component":"clusterd"}}}}]}}' 2>>"$TMP/ha-default.err"; then
  expect "ha: the StatefulSet's pod is the Deployment's but for affinity, readiness, the downward-API env, the --ha-* flags, the data volume, the etcd TLS files" "$TMP/ha-default-$kv.yaml" \
    "[k for k in sorted(set(same(pod('StatefulSet'))) | set(same(other_pod('$D', 'Deployment')))) if same(pod('StatefulSet')).get(k) != same(other_pod('$D', 'Deployment')).get(k)]" "[]"
  expect "ha: a podAntiAffinity in clusterd.affinity is used as given" "$TMP/ha-own-affinity-$kv.yaml" "pod('StatefulSet')['affinity']['podAntiAffinity']['preferredDuringSchedulingIgnoredDuringExecution'][0]['podAffinityTerm']['topologyKey']" "topology.kubernetes.io/zone"
else
  cat "$TMP/ha-default.err" >&2; bad "ha: helm template --set ha.enabled=true"
fi
# ha.leaderLabel=false: the leader alone is Ready, as before the label (plus the advertised
# address); ha.leaderLabel with kubernetes.enabled=false: the pods Role alone, and the token
# mounted for it. These renders are validated like the value sets.
HA_NOLABEL=$TMP/ha-nolabel-$kv.yaml HA_NOK=$TMP/ha-nok-$kv.yaml HA_NOK_NOLABEL=$TMP/ha-nok-nolabel-$kv.yaml HA_MC=$TMP/ha-mindcluster-$kv.yaml
if render ha-nolabel test/helm/values-ha.yaml "$kv" --set ha.leaderLabel=false 2>"$TMP/ha-variants.err" &&
   render ha-nok default "$kv" --set ha.enabled=true --set kubernetes.enabled=false --set auth.tokenReview=false 2>>"$TMP/ha-variants.err" &&
   render ha-nok-nolabel default "$kv" --set ha.enabled=true --set ha.leaderLabel=false --set kubernetes.enabled=false --set auth.tokenReview=false 2>>"$TMP/ha-variants.err" &&
   render ha-mindcluster default "$kv" --set ha.enabled=true --set mindcluster.service.enabled=true 2>>"$TMP/ha-variants.err"; then
  for f in "$HA_NOLABEL" "$HA_NOK" "$HA_NOK_NOLABEL" "$HA_MC"; do
    if "$PY" test/helm/validate.py "$kv" "$f"; then ok "rendered objects valid ($(basename "$f" .yaml))"; else bad "rendered objects invalid ($(basename "$f" .yaml))"; fi
  done
  expect "ha, leaderLabel=false: no --ha-pod nor POD_NAMESPACE; --ha-advertise-address kept" "$HA_NOLABEL" "(spod('clusterd')['containers'][0]['args'], spod('clusterd')['containers'][0]['env'])" \
    "(['--config=/etc/clusterd/config.json', '--ha-replica-id=\$(POD_NAME)', '--ha-advertise-address=\$(POD_IP):11253'], [$HA_ENV_NOLABEL, {'name': 'TZ', 'value': 'UTC'}])"
  expect "ha, leaderLabel=false: readiness on /readyz (only the leader is Ready), OnDelete" "$HA_NOLABEL" "(spod('clusterd')['containers'][0]['readinessProbe']['httpGet']['path'], sts('clusterd')['spec']['updateStrategy'])" "('/readyz', {'type': 'OnDelete'})"
  expect "ha, leaderLabel=false: no leader label in any Service selector (clusterd selects Ready pods)" "$HA_NOLABEL" "$HA_SVCS" \
    "[('clusterd', None, None, 'clusterd', 'clusterd', None), ('clusterd-etcd', 'None', True, 'etcd', 'etcd', None), ('clusterd-headless', 'None', True, 'clusterd', 'clusterd-headless', None)]"
  expect "ha, leaderLabel=false: no Role for pods (the leases Role alone)" "$HA_NOLABEL" "($HA_PODS_ROLE, sorted(r['metadata']['name'] for r in by['Role']))" "([], ['clusterd'])"
  expect "ha, leaderLabel=false: the ServiceMonitor selects the clusterd Service alone, no relabeling" "$HA_NOLABEL" "$HA_SM" "(['clusterd'], [])"
  expect "ha, leaderLabel=false: HTTP from the other replicas still open (checkpoints)" "$HA_NOLABEL" "rules_of('clusterd')[-1]" "(['http'], [{'podSelector': $CLUSTERD_SEL}])"
  expect "ha, kubernetes.enabled=false: the pods Role and its binding alone, the token mounted for it" "$HA_NOK" "(sorted((d['kind'], d['metadata']['name']) for k in ('Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding') for d in by.get(k, [])), spod('clusterd')['automountServiceAccountToken'], [a for a in spod('clusterd')['containers'][0]['args'] if a.startswith('--ha-pod')])" \
    "([('Role', 'clusterd-ha'), ('RoleBinding', 'clusterd-ha')], True, ['--ha-pod=\$(POD_NAMESPACE)/\$(POD_NAME)'])"
  expect "ha, kubernetes.enabled=false, leaderLabel=false: no RBAC, no token" "$HA_NOK_NOLABEL" "(sorted(k for k in by if 'Role' in k), spod('clusterd')['automountServiceAccountToken'])" "([], False)"
  expect "ha: MindCluster's clusterd-grpc-svc selects the leader too" "$HA_MC" "[s['spec']['selector'].get('clusterd.io/ha-role') for s in by['Service'] if s['metadata']['name'] in ('clusterd', 'clusterd-grpc-svc')]" "['leader', 'leader']"
else
  cat "$TMP/ha-variants.err" >&2; bad "ha: helm template with ha.leaderLabel=false / kubernetes.enabled=false / mindcluster"
fi
# ha.etcd.tls: with ha.etcd.tls.enabled=false the deployed etcd is the plaintext one of before
# (its exact flags, no Secrets or volume, http endpoints); an existing etcd over https with
# ha.etcd.tls.existingSecret (values-ha-external-etcd-tls), with a CA alone
# (clientCertificate=false), or with no Secret (the system's roots).
HXT=$TMP/values-ha-external-etcd-tls-$kv.yaml HA_PLAIN_ETCD=$TMP/ha-etcd-plain-$kv.yaml HXT_CA=$TMP/ha-etcd-ca-only-$kv.yaml HXT_ROOTS=$TMP/ha-etcd-roots-$kv.yaml
if render ha-etcd-plain test/helm/values-ha.yaml "$kv" --set ha.etcd.tls.enabled=false 2>"$TMP/ha-etcd.err" &&
   render ha-etcd-ca-only test/helm/values-ha-external-etcd-tls.yaml "$kv" --set ha.etcd.tls.clientCertificate=false 2>>"$TMP/ha-etcd.err" &&
   render ha-etcd-roots test/helm/values-ha-external-etcd-tls.yaml "$kv" --set ha.etcd.tls.existingSecret= 2>>"$TMP/ha-etcd.err"; then
  for f in "$HA_PLAIN_ETCD" "$HXT_CA" "$HXT_ROOTS"; do
    if "$PY" test/helm/validate.py "$kv" "$f"; then ok "rendered objects valid ($(basename "$f" .yaml))"; else bad "rendered objects invalid ($(basename "$f" .yaml))"; fi
  done
  expect "ha, etcd.tls.enabled=false: the plaintext etcd flags of before, no volume but data" "$HA_PLAIN_ETCD" "(etcd_args(), spod('etcd').get('volumes'), [m['name'] for m in spod('etcd')['containers'][0]['volumeMounts']])" \
    "(['--name=\$(POD_NAME)', '--data-dir=/var/lib/etcd/data', '--listen-client-urls=http://0.0.0.0:2379', '--advertise-client-urls=http://\$(POD_NAME).clusterd-etcd.fault-mgmt.svc:2379', '--listen-peer-urls=http://0.0.0.0:2380', '--initial-advertise-peer-urls=http://\$(POD_NAME).clusterd-etcd.fault-mgmt.svc:2380', '--listen-metrics-urls=http://0.0.0.0:2381', '--initial-cluster=clusterd-etcd-0=http://clusterd-etcd-0.clusterd-etcd.fault-mgmt.svc:2380,clusterd-etcd-1=http://clusterd-etcd-1.clusterd-etcd.fault-mgmt.svc:2380,clusterd-etcd-2=http://clusterd-etcd-2.clusterd-etcd.fault-mgmt.svc:2380', '--initial-cluster-state=new', '--initial-cluster-token=fault-mgmt-clusterd-etcd', '--max-request-bytes=8388608', '--max-txn-ops=1024', '--auto-compaction-mode=revision', '--auto-compaction-retention=100000', '--quota-backend-bytes=8589934592', '--heartbeat-interval=100', '--election-timeout=1000', '--snapshot-count=20000'], None, ['data'])"
  expect "ha, etcd.tls.enabled=false: http endpoints, no etcd TLS keys, Secrets or mount; the same NetworkPolicy" "$HA_PLAIN_ETCD" \
    "(sorted((k, v) for k, v in cfg('clusterd').items() if k.startswith('etcd_')), [n for n, *_ in secrets() if 'etcd' in n], [x[1] for x in sproj('clusterd')], rules_of('clusterd-etcd'))" \
    "([('etcd_endpoints', ['http://clusterd-etcd-0.clusterd-etcd.fault-mgmt.svc:2379', 'http://clusterd-etcd-1.clusterd-etcd.fault-mgmt.svc:2379', 'http://clusterd-etcd-2.clusterd-etcd.fault-mgmt.svc:2379'])], [], ['clusterd', 'clusterd-tls'], [(['client'], [{'podSelector': $CLUSTERD_SEL}]), (['peer'], [{'podSelector': $ETCD_SEL}])])"
  expect "ha-external-etcd-tls: https endpoints and the existingSecret's files in config.json" "$HXT" "sorted((k, v) for k, v in cfg('clusterd').items() if k.startswith('etcd_'))" \
    "[('etcd_ca_file', '/etc/clusterd/etcd-tls/ca.crt'), ('etcd_cert_file', '/etc/clusterd/etcd-tls/tls.crt'), ('etcd_endpoints', ['https://etcd-0.etcd.infra.svc:2379', 'https://etcd-1.etcd.infra.svc:2379', 'https://etcd-2.etcd.infra.svc:2379']), ('etcd_key_file', '/etc/clusterd/etcd-tls/tls.key')]"
  expect "ha-external-etcd-tls: the existingSecret mounted at etcd-tls/; no etcd objects, no etcd certificates generated" "$HXT" \
    "([x for x in sproj('clusterd') if x[1] == 'clusterd-etcd-client'], [d['kind'] for d in docs if d['metadata'].get('labels', {}).get('app.kubernetes.io/component') == 'etcd'], [n for n, *_ in secrets()])" \
    "([('secret', 'clusterd-etcd-client', [('ca.crt', 'etcd-tls/ca.crt', None), ('tls.crt', 'etcd-tls/tls.crt', None), ('tls.key', 'etcd-tls/tls.key', 288)])], [], ['clusterd-ca', 'clusterd-noded-tls', 'clusterd-tls'])"
  expect "ha-external-etcd-tls, clientCertificate=false: ca.crt alone, etcd_ca_file alone" "$HXT_CA" \
    "([x for x in sproj('clusterd') if x[1] == 'clusterd-etcd-client'], sorted(k for k in cfg('clusterd') if k.startswith('etcd_')))" \
    "([('secret', 'clusterd-etcd-client', [('ca.crt', 'etcd-tls/ca.crt', None)])], ['etcd_ca_file', 'etcd_endpoints'])"
  expect "ha-external-etcd-tls, no existingSecret: https endpoints, the system's roots (no files, no mount)" "$HXT_ROOTS" \
    "(sorted(k for k in cfg('clusterd') if k.startswith('etcd_')), cfg('clusterd')['etcd_endpoints'][0], [x[1] for x in sproj('clusterd')])" \
    "(['etcd_endpoints'], 'https://etcd-0.etcd.infra.svc:2379', ['clusterd', 'clusterd-tls'])"
else
  cat "$TMP/ha-etcd.err" >&2; bad "ha: helm template with ha.etcd.tls.enabled=false / clientCertificate=false / no existingSecret"
fi
# `helm upgrade --reuse-values` from a chart without ha.etcd.tls keeps the old chart's values:
# a copy of the chart without the value renders the plaintext etcd it installed.
cp -r "$CHART" "$TMP/chart-no-etcd-tls"
"$PY" -c 'import sys, yaml
v = yaml.safe_load(open(sys.argv[1])); del v["ha"]["etcd"]["tls"]
yaml.safe_dump(v, open(sys.argv[1], "w"))' "$TMP/chart-no-etcd-tls/values.yaml"
if "$HELM" template clusterd "$TMP/chart-no-etcd-tls" --namespace fault-mgmt --kube-version "$kv" --set ha.enabled=true >"$TMP/ha-no-etcd-tls.yaml" 2>"$TMP/ha-no-etcd-tls.err"; then
  expect "ha, values without ha.etcd.tls (--reuse-values from an older chart): the plaintext etcd" "$TMP/ha-no-etcd-tls.yaml" \
    "([a for a in etcd_args() if a.startswith('--listen-client-urls')], [n for n, *_ in secrets() if 'etcd' in n], sorted(k for k in cfg('clusterd') if k.startswith('etcd_')))" \
    "(['--listen-client-urls=http://0.0.0.0:2379'], [], ['etcd_endpoints'])"
else
  cat "$TMP/ha-no-etcd-tls.err" >&2; bad "ha: helm template of the chart without ha.etcd.tls"
fi
# The generated etcd certificates: one etcd CA (not ClusterD's) signs the members' certificate,
# which names every member, the headless Service, localhost and 127.0.0.1 and is good for
# server and client (peer) use, and ClusterD's client certificate.
for sk in clusterd-ca:ca.crt clusterd-etcd-ca:ca.crt clusterd-etcd-tls:ca.crt clusterd-etcd-tls:tls.crt clusterd-etcd-client-tls:ca.crt clusterd-etcd-client-tls:tls.crt clusterd-etcd-client-tls:tls.key; do
  secret_data "$HA" "${sk%%:*}" "${sk#*:}" "$gen/ha-${sk%%:*}-${sk#*:}"
done
if openssl verify -CAfile "$gen/ha-clusterd-etcd-ca-ca.crt" "$gen/ha-clusterd-etcd-tls-tls.crt" "$gen/ha-clusterd-etcd-client-tls-tls.crt" >/dev/null 2>&1 &&
   cmp -s "$gen/ha-clusterd-etcd-ca-ca.crt" "$gen/ha-clusterd-etcd-tls-ca.crt" && cmp -s "$gen/ha-clusterd-etcd-ca-ca.crt" "$gen/ha-clusterd-etcd-client-tls-ca.crt" &&
   ! cmp -s "$gen/ha-clusterd-etcd-ca-ca.crt" "$gen/ha-clusterd-ca-ca.crt" &&
   ! openssl verify -CAfile "$gen/ha-clusterd-ca-ca.crt" "$gen/ha-clusterd-etcd-client-tls-tls.crt" >/dev/null 2>&1; then
  ok "generated etcd: the etcd CA (not ClusterD's) signs the members' and ClusterD's client certificate and is each Secret's ca.crt"
else
  bad "generated etcd: the certificates do not chain to the CA in clusterd-etcd-ca (or it is ClusterD's CA)"
fi
sans=$(openssl x509 -in "$gen/ha-clusterd-etcd-tls-tls.crt" -noout -ext subjectAltName 2>/dev/null | tail -1 | tr -d ' ')
want_sans=""
for i in 0 1 2; do want_sans+="DNS:clusterd-etcd-$i.clusterd-etcd.fault-mgmt.svc,DNS:clusterd-etcd-$i.clusterd-etcd.fault-mgmt.svc.cluster.local,"; done
want_sans+="DNS:clusterd-etcd,DNS:clusterd-etcd.fault-mgmt,DNS:clusterd-etcd.fault-mgmt.svc,DNS:clusterd-etcd.fault-mgmt.svc.cluster.local,DNS:localhost,IPAddress:127.0.0.1"
if [[ $sans == "$want_sans" ]]; then ok "generated etcd: the members' certificate names every member ($sans)"; else bad "generated etcd: members' SANs '$sans', want '$want_sans'"; fi
# Every endpoint ClusterD is given is a name of the certificate.
hosts=$(q "$HA" "','.join(sorted(e.split('//')[1].rsplit(':', 1)[0] for e in cfg('clusterd')['etcd_endpoints']))")
missing=""
for h in ${hosts//,/ }; do [[ ,$sans, == *",DNS:$h,"* ]] || missing+=" $h"; done
if [[ -n $hosts && -z $missing ]]; then ok "generated etcd: every endpoint in config.json is covered ($hosts)"; else bad "generated etcd: endpoints not covered:$missing"; fi
subj=$(openssl x509 -in "$gen/ha-clusterd-etcd-tls-tls.crt" -noout -subject -nameopt RFC2253 2>/dev/null)
eku=$(openssl x509 -in "$gen/ha-clusterd-etcd-tls-tls.crt" -noout -ext extendedKeyUsage 2>/dev/null | tail -1 | sed 's/^ *//')
if [[ $subj == "subject=CN=clusterd-etcd" && $eku == "TLS Web Server Authentication, TLS Web Client Authentication" ]]; then
  ok "generated etcd: the members' certificate is CN=clusterd-etcd (--peer-cert-allowed-cn), for server and client (peer) use"
else
  bad "generated etcd: the members' certificate is '$subj', '$eku'"
fi
subj=$(openssl x509 -in "$gen/ha-clusterd-etcd-client-tls-tls.crt" -noout -subject -nameopt RFC2253 2>/dev/null)
if [[ $subj == "subject=CN=clusterd" &&
      $(openssl x509 -in "$gen/ha-clusterd-etcd-client-tls-tls.crt" -noout -pubkey | openssl sha256) == \
      $(openssl pkey -in "$gen/ha-clusterd-etcd-client-tls-tls.key" -pubout | openssl sha256) ]]; then
  ok "generated etcd: ClusterD's client certificate CN=clusterd (not the members' CN), its key matches"
else
  bad "generated etcd: ClusterD's client certificate '$subj' or its key"
fi

# ---- 4. the binaries accept the rendered config files ----------------------------------------
echo "== rendered config files against the real binaries (${SECONDS}s)"
# Each daemon runs on its config volume laid out as the kubelet projects it (materialize): the
# ConfigMap, the rendered Secrets' items and a stand-in for NodeD's projected token, under a temp
# directory, with config.json's paths into the volume moved there. ClusterD's config.json is
# rendered with kubernetes.enabled=false and auth.tokenReview=false here, as both need an API
# server (test/k8s/helm_rbac_test.sh runs the installed config against a real one).
# Plaintext (tls.enabled=false: config.json says insecure) always; the TLS configs (the default:
# mutual TLS) only with binaries that know the TLS flags.
extract() { # extract RENDERED CONFIGMAP_SUFFIX KEY OUT
  "$PY" -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith(sys.argv[2]):
        open(sys.argv[4], "w").write(d["data"][sys.argv[3]]); break
else: sys.exit("no " + sys.argv[3])' "$@"
}
materialize() { # materialize RENDERED KIND ROOT [DROP_KEY...]: prints the path of the moved config
  "$PY" - "$@" <<'PY'
import base64, json, os, sys, yaml
rendered, kind, root, drop = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
# ClusterD's or NodeD's workload of that kind (not the etcd StatefulSet).
spec = next(d for d in docs if d["kind"] == kind and d["metadata"]["labels"]["app.kubernetes.io/component"] != "etcd")["spec"]["template"]["spec"]
vol = next(v for v in spec["volumes"] if v["name"] == "config")
mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "config")["mountPath"]
base = root + mount
def obj(k, name):
    return next(d for d in docs if d["kind"] == k and d["metadata"]["name"] == name)
def put(path, data, mode):
    p = os.path.join(base, path)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)
    os.chmod(p, mode)
for src in vol["projected"]["sources"]:
    if "configMap" in src or "secret" in src:
        k = "configMap" if "configMap" in src else "secret"
        o = obj("ConfigMap" if k == "configMap" else "Secret", src[k]["name"])
        data = ({n: v.encode() for n, v in o["data"].items()} if k == "configMap"
                else {n: base64.b64decode(v) for n, v in o["data"].items()})
        for item in src[k].get("items") or [{"key": n, "path": n} for n in data]:
            put(item["path"], data[item["key"]], item.get("mode", 0o644))
    elif "serviceAccountToken" in src:
        put(src["serviceAccountToken"]["path"], b"stand-in-for-the-projected-token\n", 0o600)
cfg = json.load(open(os.path.join(base, "config.json")))
for k in drop:
    cfg.pop(k, None)
for k, v in cfg.items():
    if isinstance(v, str) and v.startswith(mount + "/"):
        cfg[k] = root + v
out = os.path.join(root, "config.local.json")
json.dump(cfg, open(out, "w"), indent=2)
print(out)
PY
}
wait_http() { # wait_http URL SECONDS PID [CURL_ARG...]
  local deadline=$(($(date +%s) + $2))
  while (($(date +%s) < deadline)); do
    kill -0 "$3" 2>/dev/null || return 1
    curl -fsS -o /dev/null "${@:4}" "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
run_daemon() { # run_daemon NAME URL_PATH -- COMMAND...: starts it, waits for URL_PATH, stops it
  local name=$1 path=$2 http log pid; shift 3
  http=$(free_port); log="$TMP/$name.log"
  "$@" --http-listen "127.0.0.1:$http" >"$log" 2>&1 &
  pid=$!; pids+=("$pid")
  if wait_http "http://127.0.0.1:$http$path" 20 "$pid"; then ok "$name"; else tail -5 "$log" >&2; bad "$name"; fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
# The whole help is read before matching: grep -q in a pipe would end the binary with SIGPIPE.
clusterd_help=$(build/bin/clusterd --help 2>&1 || true)
noded_help=$(build/bin/noded --help 2>&1 || true)
clusterd_tls= noded_tls= insecure_flag=() plain_drop=()
[[ $clusterd_help == *--tls-cert-file* ]] && clusterd_tls=1
[[ $noded_help == *--tls-ca-file* ]] && noded_tls=1
# A clusterd from before TLS knows neither the flag nor the key.
if [[ $clusterd_help == *--insecure* ]]; then insecure_flag=(--insecure); else plain_drop=(insecure); fi
NOK=(--set kubernetes.enabled=false --set auth.tokenReview=false)
if [[ -x build/bin/clusterd && -x build/bin/noded ]]; then
  for vs in default values-existing-claim values-mindcluster; do
    vf=default
    [[ $vs == default ]] || vf=test/helm/$vs.yaml
    render "$vs-plain" "$vf" "$kv" "${NOK[@]}" --set tls.enabled=false
    d="$TMP/run-$vs"
    conf=$(materialize "$TMP/$vs-plain-$kv.yaml" Deployment "$d" "${plain_drop[@]}")
    catalog=$(grep -q '"catalog_file"' "$conf" && echo " and catalog.json" || true)
    catalog+=$(grep -q '"pubfault_code_table"' "$conf" && echo " and pubfault-codes.json" || true)
    # The file is parsed and checked whole; the flags only move ports and paths off the image's.
    run_daemon "clusterd starts with the $vs config.json$catalog (plaintext: insecure)" /readyz -- \
      build/bin/clusterd --config "$conf" --listen "127.0.0.1:$(free_port)" --data-dir "$d/data" "${insecure_flag[@]}"
  done
  # MindCluster: the rendered pubfault_* keys and code table are the ones ClusterD enforces. Public
  # faults are sent (plaintext, as MindCluster's clients do) to a clusterd on values-mindcluster's
  # config: no node is registered, so a valid fault ends "not registered" (409) after passing the
  # resource check, the code table and the rate limiter, which runs before the node lookup.
  if command -v grpcurl >/dev/null; then
    d="$TMP/run-values-mindcluster"
    conf=$(materialize "$TMP/values-mindcluster-plain-$kv.yaml" Deployment "$d" "${plain_drop[@]}")
    g=$(free_port) h=$(free_port)
    build/bin/clusterd --config "$conf" --listen "127.0.0.1:$g" --http-listen "127.0.0.1:$h" --data-dir "$d/data2" \
      "${insecure_flag[@]}" >"$d/clusterd.log" 2>&1 &
    cpid=$!; pids+=("$cpid")
    if wait_http "http://127.0.0.1:$h/readyz" 20 "$cpid"; then
      n=0
      pubfault() { # pubfault RESOURCE CODE: SendPublicFault (ids unique per call); the reply in $reply
        n=$((n + 1))
        local ms
        ms=$(($(date +%s) * 1000))
        reply=$(timeout 10 grpcurl -plaintext -import-path proto -proto mindcluster/pubfault.proto -d "{\"id\": \"helm-test-$n\", \"timestamp\": $ms,
          \"version\": \"1.0\", \"resource\": \"$1\", \"faults\": [{\"faultId\": \"helm-fault-$n\", \"faultType\": \"NPU\",
          \"faultCode\": \"$2\", \"faultTime\": $ms, \"assertion\": \"occur\",
          \"influence\": [{\"nodeName\": \"helm-node\", \"deviceIds\": [0]}]}]}" "127.0.0.1:$g" PubFault/SendPublicFault 2>&1) || true
      }
      reply_is() { # reply_is RESOURCE CODE DESCRIPTION PATTERN: sends one, the reply holds the fixed string
        pubfault "$1" "$2"
        if grep -qF -- "$4" <<<"$reply"; then ok "MindCluster config in force: $3"; else echo "$reply" >&2; bad "MindCluster config: $3: reply lacks '$4'"; fi
      }
      # Three valid requests from helm-test-probe: its whole burst (rate 0.001/s refills none meanwhile).
      reply_is helm-test-probe A00000001 "code from codeTable (SeparateNPU) known" "node helm-node is not registered"
      reply_is helm-test-probe 010001099 "code from codeTable (SubHealthFault) known" "node helm-node is not registered"
      reply_is helm-test-probe 220001001 "built-in code still known (merged, not replaced)" "node helm-node is not registered"
      reply_is CCAE Z99999999 "a code in neither table refused" "is not in the public-fault code table"
      reply_is pingmesh 220001001 "a default resource left out of resources refused" 'pingmesh\" is not allowed' # JSON-escaped
      reply_is helm-test-probe A00000001 "burst 3 used up: the fourth valid request is rate-limited" "over its rate limit"
      reply_is CCAE A00000001 "another listed resource has a burst of its own" "node helm-node is not registered"
      # Every request of a listed resource takes a token, a refused one too: CCAE's third.
      reply_is CCAE Z99999999 "an invalid request is refused" "is not in the public-fault code table"
      reply_is CCAE A00000001 "burst 3 used up by two invalid requests and a valid one" "over its rate limit"
    else
      tail -5 "$d/clusterd.log" >&2; bad "clusterd on the values-mindcluster config.json did not start"
    fi
    kill "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
  else
    echo "  skip grpcurl not installed: public faults not sent to the values-mindcluster clusterd"
  fi
  for vs in default values-sim; do
    vf=default
    [[ $vs == default ]] || vf=test/helm/$vs.yaml
    render "$vs-plain" "$vf" "$kv" --set tls.enabled=false
    d="$TMP/run-noded-$vs"
    mkdir -p "$d/state"
    conf=$(materialize "$TMP/$vs-plain-$kv.yaml" DaemonSet "$d")
    rules=$(grep -q '"rules_file"' "$conf" && echo " and rules.json" || true)
    run_daemon "noded starts with the $vs config.json$rules (plaintext)" /healthz -- \
      build/bin/noded --config "$conf" --node-name helm-test --accelerator sim --root / --kmsg-path "" \
      --state-dir "$d/state" --server "127.0.0.1:$(free_port)"
  done
  if [[ -n $clusterd_tls ]]; then
    render default-tls default "$kv" "${NOK[@]}"
    d="$TMP/run-default-tls"
    conf=$(materialize "$TMP/default-tls-$kv.yaml" Deployment "$d")
    tls=$d/etc/clusterd/tls
    g=$(free_port) h=$(free_port) pp=$(free_port)
    # The probe-only port as the rendered probes use it (config.json's probe_listen, on loopback).
    build/bin/clusterd --config "$conf" --listen "127.0.0.1:$g" --http-listen "127.0.0.1:$h" --data-dir "$d/data" \
      --probe-listen "127.0.0.1:$pp" >"$d/clusterd.log" 2>&1 &
    cpid=$!; pids+=("$cpid")
    if wait_http "http://127.0.0.1:$pp/readyz" 20 "$cpid"; then
      ok "clusterd starts with the default config.json and the generated Secrets (mutual TLS); the probe port answers"
      # NodeD's certificate from its Secret: the transport only, no role.
      agent=(-cacert "$tls/ca.crt" -cert "$TMP/gen-agent.crt" -key "$TMP/gen-agent.key")
      secret_data "$TMP/default-tls-$kv.yaml" clusterd-noded-tls tls.crt "$TMP/gen-agent.crt"
      secret_data "$TMP/default-tls-$kv.yaml" clusterd-noded-tls tls.key "$TMP/gen-agent.key"
      # The HTTP port: TLS with the generated certificate, mutual; probes open, the API by role.
      codes=$(for a in "http://127.0.0.1:$h/readyz" "https://127.0.0.1:$h/readyz"; do
                curl -s -o /dev/null -w '%{http_code} ' --cacert "$tls/ca.crt" "$a" 2>/dev/null || true; done
              for a in /readyz /api/v1/summary; do
                curl -s -o /dev/null -w '%{http_code} ' --cacert "$tls/ca.crt" --cert "$TMP/gen-agent.crt" \
                  --key "$TMP/gen-agent.key" "https://127.0.0.1:$h$a" 2>/dev/null || true; done)
      if [[ $codes == "000 000 200 403 " ]]; then
        ok "HTTP port: no plaintext, no TLS without a client certificate; /readyz 200 and the API 403 for NodeD's certificate"
      else
        bad "HTTP port answers '$codes', want '000 000 200 403 ' (plaintext, no certificate, /readyz and /api/v1/summary with NodeD's)"
      fi
      out=$(timeout 10 grpcurl "${agent[@]}" "127.0.0.1:$g" grpc.health.v1.Health/Check 2>&1) || true
      if [[ $out == *SERVING* ]]; then ok "mTLS: NodeD's certificate reaches Health"; else echo "$out" >&2; bad "mTLS: Health with NodeD's certificate"; fi
      out=$(timeout 10 grpcurl "${agent[@]}" "127.0.0.1:$g" clusterd.v1.ClusterService/GetSummary 2>&1) || true
      if [[ $out == *PermissionDenied* ]]; then ok "mTLS: NodeD's transport certificate grants no role (GetSummary PermissionDenied)"; else echo "$out" >&2; bad "mTLS: GetSummary with the transport certificate: want PermissionDenied"; fi
      if timeout 10 grpcurl -cacert "$tls/ca.crt" "127.0.0.1:$g" grpc.health.v1.Health/Check >/dev/null 2>&1; then
        bad "mTLS: a client without a certificate was let in"
      else
        ok "mTLS: a client without a certificate is refused"
      fi
      if timeout 10 grpcurl -plaintext "127.0.0.1:$g" grpc.health.v1.Health/Check >/dev/null 2>&1; then
        bad "mTLS: a plaintext client was let in"
      else
        ok "mTLS: a plaintext client is refused"
      fi
    else
      tail -5 "$d/clusterd.log" >&2; bad "clusterd with the default config.json and the generated Secrets (mutual TLS)"
    fi
    kill "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
  else
    echo "  skip build/bin/clusterd has no --tls-cert-file: the TLS config is not run"
  fi
  if [[ -n $noded_tls ]]; then
    render noded-tls default "$kv"
    d="$TMP/run-noded-tls"
    mkdir -p "$d/state"
    conf=$(materialize "$TMP/noded-tls-$kv.yaml" DaemonSet "$d")
    # NodeD's HTTPS port as the chart sets it (its certificate, DNS name clusterd-agents; the
    # Secret's ca.crt as the client CA): no plaintext, the probes open, /metrics only with a
    # client certificate of the CA.
    ntls=$d/etc/noded/tls nh=$(free_port)
    build/bin/noded --config "$conf" --node-name helm-test --accelerator sim --root / --kmsg-path "" \
      --state-dir "$d/state" --server "127.0.0.1:$(free_port)" --http-listen "127.0.0.1:$nh" >"$d/noded.log" 2>&1 &
    npid=$!; pids+=("$npid")
    via=(--cacert "$ntls/ca.crt" --resolve "clusterd-agents:$nh:127.0.0.1")
    if wait_http "https://clusterd-agents:$nh/healthz" 20 "$npid" "${via[@]}"; then
      ok "noded starts with the default config.json, its certificate and a token file (TLS); HTTPS verified for clusterd-agents"
      codes=$(curl -s -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$nh/healthz" 2>/dev/null || true
              for a in /readyz /metrics; do
                curl -s -o /dev/null -w '%{http_code} ' "${via[@]}" "https://clusterd-agents:$nh$a" 2>/dev/null || true; done
              curl -s -o /dev/null -w '%{http_code} ' "${via[@]}" --cert "$ntls/tls.crt" --key "$ntls/tls.key" \
                "https://clusterd-agents:$nh/metrics" 2>/dev/null || true)
      if [[ $codes =~ ^000\ (200|503)\ 401\ 200\ $ ]]; then
        ok "NodeD's HTTP port: no plaintext; /readyz open; /metrics 401 without a credential, 200 with a certificate of the CA"
      else
        bad "NodeD's HTTP port answers '$codes', want '000 200|503 401 200 ' (plaintext, /readyz, /metrics without and with a certificate)"
      fi
    else
      tail -5 "$d/noded.log" >&2; bad "noded with the default config.json, its certificate and a token file (TLS)"
    fi
    kill "$npid" 2>/dev/null || true
    wait "$npid" 2>/dev/null || true
  else
    echo "  skip build/bin/noded has no --tls-ca-file: its TLS config is not run"
  fi
  # ha.enabled: a real etcd runs with the flags the chart renders for its members (the three
  # members on local ports, each under its own name, with TLS (ha.etcd.tls, the default): the
  # generated members' certificate from the rendered Secret as the pods mount it, https client
  # and peer URLs on 127.0.0.1, which the certificate names, client and peer certificates
  # required), and two clusterd replicas run on values-ha's config.json, its etcd TLS files laid
  # out as the replicas' config volume projects them (the generated client certificate), with
  # the StatefulSet's --ha-* flags (--ha-replica-id and --ha-advertise-address with the pod's
  # name and IP as the downward API would give them, the IP 127.0.0.1 and the advertised port the
  # local HTTP port; not --ha-pod, which needs the Kubernetes API: test/k8s/ha_label_test.sh):
  # the first leads (/readyz 200), the second stands by (/readyz 503, the readiness path
  # /readyz/replica 200 on both) and takes over when the leader stops. ha.logRetainEntries=0
  # makes the new leader trim its log at once, so the first replica, restarted on a new
  # volume, must rebuild from a checkpoint it fetches at the other's advertised address. The
  # etcd binary: etcd on PATH, ETCD_BIN, or the one test/k8s/helm_rbac_test.sh builds.
  etcd_bin=${ETCD_BIN:-$(command -v etcd || ls "$HOME"/.cache/clusterd-k8s/*/etcd 2>/dev/null | tail -1 || true)}
  if [[ $clusterd_help != *--etcd-endpoints* ]]; then
    echo "  skip build/bin/clusterd has no --etcd-endpoints: the HA config is not run"
  elif [[ $clusterd_help != *--ha-advertise-address* ]]; then
    echo "  skip build/bin/clusterd has no --ha-advertise-address: the HA config is not run"
  elif [[ ! -x $etcd_bin ]]; then
    echo "  skip no etcd binary (PATH, ETCD_BIN or ~/.cache/clusterd-k8s): the HA config is not run"
  else
    etcd_plain=()
    if [[ $clusterd_help != *--etcd-ca-file* ]]; then
      echo "  note build/bin/clusterd has no --etcd-ca-file: the HA config runs with ha.etcd.tls.enabled=false"
      etcd_plain=(--set ha.etcd.tls.enabled=false)
    fi
    render values-ha-run test/helm/values-ha.yaml "$kv" "${NOK[@]}" --set tls.enabled=false --set ha.logRetainEntries=0 "${etcd_plain[@]}"
    HP=$TMP/values-ha-run-$kv.yaml
    d="$TMP/run-ha" && mkdir -p "$d"
    members=$(q "$HP" "sts('etcd')['spec']['replicas']")
    ec=() ep=() em=() epids=()
    for ((i = 0; i < members; i++)); do ec+=("$(free_port)"); ep+=("$(free_port)"); em+=("$(free_port)"); done
    etcd_member_args() { # etcd_member_args I: member I's rendered args, its name, URLs (scheme kept) and files moved to local ones
      "$PY" - "$HP" "$d" "$1" "${ec[*]}" "${ep[*]}" "${em[*]}" <<'PY'
import base64, os, sys, yaml
path, d, i, ec, ep, em = sys.argv[1:]
i, ec, ep, em = int(i), ec.split(), ep.split(), em.split()
docs = [x for x in yaml.safe_load_all(open(path)) if x]
s = next(x for x in docs if x["kind"] == "StatefulSet" and x["metadata"]["labels"]["app.kubernetes.io/component"] == "etcd")
pod, name = s["spec"]["template"]["spec"], s["metadata"]["name"]
c = pod["containers"][0]
# The Secret volumes as the kubelet mounts them, under d/etcd-files.
files, secret_mounts = d + "/etcd-files", []
for v in pod.get("volumes") or []:
    if "secret" in v:
        mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == v["name"])
        secret_mounts.append(mount + "/")
        sec = next(x for x in docs if x["kind"] == "Secret" and x["metadata"]["name"] == v["secret"]["secretName"])
        for it in v["secret"]["items"]:
            p = files + mount + "/" + it["path"]
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(base64.b64decode(sec["data"][it["key"]]))
            os.chmod(p, it.get("mode", 0o644))
urls = {"--listen-client-urls": ec[i], "--advertise-client-urls": ec[i], "--listen-peer-urls": ep[i],
        "--initial-advertise-peer-urls": ep[i], "--listen-metrics-urls": em[i]}
for a in c["args"]:
    k, _, v = a.partition("=")
    if k == "--name":
        a = f"{k}={name}-{i}"
    elif k == "--data-dir":
        a = f"{k}={d}/etcd-{i}"
    elif k in urls:
        a = f"{k}={v.split('://')[0]}://127.0.0.1:{urls[k]}"
    elif k == "--initial-cluster":
        a = k + "=" + ",".join(f"{n}={u.split('://')[0]}://127.0.0.1:{ep[int(n.rsplit('-', 1)[1])]}"
                               for n, u in (m.split("=", 1) for m in v.split(",")))
    elif any(v.startswith(m) for m in secret_mounts):
        a = f"{k}={files}{v}"
    print(a)
PY
    }
    for ((i = 0; i < members; i++)); do
      mapfile -t etcd_args < <(etcd_member_args "$i")
      "$etcd_bin" "${etcd_args[@]}" >"$d/etcd-$i.log" 2>&1 &
      epids+=($!); pids+=($!)
    done
    etcd_ready=1
    for ((i = 0; i < members; i++)); do wait_http "http://127.0.0.1:${em[$i]}/readyz" 30 "${epids[$i]}" || etcd_ready=; done
    if [[ -n $etcd_ready ]]; then
      scheme=$(q "$HP" "cfg('clusterd')['etcd_endpoints'][0].split('://')[0]")
      ok "etcd $("$etcd_bin" --version | sed -n 's/^etcd Version: //p'): $members members run with the rendered member flags ($scheme; readiness probe /readyz answers on the metrics port)"
      # ClusterD's config volume as the replicas get it (the etcd TLS files at etcd-tls/), the
      # endpoints moved to the local members (same scheme: 127.0.0.1 is a name of the certificate).
      conf=$(materialize "$HP" StatefulSet "$d/clusterd")
      "$PY" -c 'import json, sys
c = json.load(open(sys.argv[1])); s = c["etcd_endpoints"][0].split("://")[0]
c["etcd_endpoints"] = [s + "://127.0.0.1:" + p for p in sys.argv[2:]]
json.dump(c, open(sys.argv[1], "w"), indent=2)' "$conf" "${ec[@]}"
      if [[ $scheme == https ]]; then
        et="$d/clusterd/etc/clusterd/etcd-tls"
        out=$(curl -sS --max-time 5 --cacert "$et/ca.crt" --cert "$et/tls.crt" --key "$et/tls.key" "https://127.0.0.1:${ec[0]}/health" 2>&1) || true
        if [[ $out == *'"health":"true"'* ]]; then
          ok "etcd TLS: ClusterD's mounted client certificate and CA reach the client port (https://127.0.0.1, a name of the members' certificate)"
        else
          bad "etcd TLS: /health with ClusterD's mounted files: '$out'"
        fi
        nocert=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$et/ca.crt" "https://127.0.0.1:${ec[0]}/health" 2>/dev/null || true)
        plain=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:${ec[0]}/health" 2>/dev/null || true)
        if [[ $nocert != 200 && $plain != 200 ]]; then
          ok "etcd TLS: a client without a certificate ($nocert) and a plaintext one ($plain) are refused (--client-cert-auth)"
        else
          bad "etcd TLS: without a certificate: $nocert, plaintext: $plain (want refused)"
        fi
        api=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST -d '{"key":"Zg=="}' "http://127.0.0.1:${em[0]}/v3/kv/range" 2>/dev/null || true)
        if [[ $api == 404 ]]; then ok "etcd TLS: the plaintext metrics port (probes) does not serve etcd's API (/v3/kv/range: 404)"; else bad "etcd TLS: /v3/kv/range on the metrics port: $api, want 404"; fi
      fi
      # The StatefulSet's --ha-* flags but --ha-pod, its readiness path and HTTP container port.
      mapfile -t ha_flags < <(q "$HP" "'\n'.join(a for a in spod('clusterd')['containers'][0]['args'] if a.startswith('--ha-') and not a.startswith('--ha-pod='))")
      probe=$(q "$HP" "spod('clusterd')['containers'][0]['readinessProbe']['httpGet']['path']")
      http_port=$(q "$HP" "[p['containerPort'] for p in spod('clusterd')['containers'][0]['ports'] if p['name'] == 'http'][0]")
      hp=() gp=() rpids=()
      for i in 0 1; do hp+=("$(free_port)"); gp+=("$(free_port)"); done
      replica_flags() { # replica_flags I: the rendered --ha-* flags as pod clusterd-I would expand them, on local ports
        local a
        for a in "${ha_flags[@]}"; do
          a=${a//\$(POD_NAME)/clusterd-$1}
          printf '%s\n' "${a//\$(POD_IP):$http_port/127.0.0.1:${hp[$1]}}"
        done
      }
      start_replica() { # start_replica I DATA_DIR
        local flags
        mapfile -t flags < <(replica_flags "$1")
        build/bin/clusterd --config "$conf" "${flags[@]}" --listen "127.0.0.1:${gp[$1]}" \
          --http-listen "127.0.0.1:${hp[$1]}" --data-dir "$2" "${insecure_flag[@]}" >>"$d/clusterd-$1.log" 2>&1 &
        rpids+=($!); pids+=($!)
      }
      flags0=$(replica_flags 0 | tr '\n' ' ')
      if [[ $flags0 == "--ha-replica-id=clusterd-0 --ha-advertise-address=127.0.0.1:${hp[0]} " && $probe == /readyz/replica ]]; then
        ok "the StatefulSet's flags as replica clusterd-0 runs them: $flags0(--ha-pod left out), readiness $probe"
      else
        bad "rendered --ha-* flags '$flags0' (from ${ha_flags[*]}), readiness '$probe'"
      fi
      for i in 0 1; do
        start_replica "$i" "$d/data-$i"
        # The first replica leads before the second starts.
        if ((i == 0)) && ! wait_http "http://127.0.0.1:${hp[0]}/readyz" 20 "${rpids[0]}"; then
          tail -5 "$d/clusterd-0.log" >&2; bad "clusterd replica clusterd-0 on the values-ha config.json did not become the Ready leader"
          break
        fi
      done
      if ((${#rpids[@]} == 2)); then
        ok "clusterd replica clusterd-0 on the values-ha config.json leads ($scheme to etcd, with its mounted files): /readyz 200"
        # The second replica up, in its standby role (a bounded wait, not a fixed one).
        for _ in $(seq 1 100); do
          out=$(curl -s -w ' %{http_code}' "http://127.0.0.1:${hp[1]}/readyz" 2>&1) || true
          [[ $out == *standby*503 ]] && break
          sleep 0.2
        done
        if [[ $out == *standby*503 ]] && curl -fsS -o /dev/null "http://127.0.0.1:${hp[1]}/healthz"; then
          ok "clusterd replica clusterd-1 stands by: /readyz 503 (no Service traffic), /healthz 200"
        else
          tail -5 "$d/clusterd-1.log" >&2; bad "clusterd replica clusterd-1: /readyz '$out', want 503 standby"
        fi
        out=$(for i in 0 1; do curl -s -o /dev/null -w '%{http_code} ' "http://127.0.0.1:${hp[$i]}$probe" 2>&1 || true; done)
        if [[ $out == "200 200 " ]]; then
          ok "both replicas are Ready on the rendered readiness path $probe (leader and standby)"
        else
          bad "readiness $probe of clusterd-0 and clusterd-1: '$out', want '200 200 '"
        fi
        kill "${rpids[0]}" 2>/dev/null || true
        wait "${rpids[0]}" 2>/dev/null || true
        if wait_http "http://127.0.0.1:${hp[1]}/readyz" 15 "${rpids[1]}"; then
          ok "clusterd-1 takes over once the leader stops: /readyz 200"
          if [[ -x build/bin/clusterctl ]]; then
            ctl() { build/bin/clusterctl --server "127.0.0.1:${gp[1]}" "$@" >>"$d/clusterctl.log" 2>&1; }
            trimmed() { curl -fsS "http://127.0.0.1:${hp[1]}/metrics" 2>/dev/null | awk '$1 == "clusterd_ha_log_truncated_index" { print $2 }'; }
            # Two log entries, trimmed by the leader (every 5 s, ha.logRetainEntries=0).
            ctl pause --reason helm-test && ctl resume --reason helm-test || bad "clusterctl pause/resume against clusterd-1"
            for _ in $(seq 1 40); do t=$(trimmed) || t=0; ((${t:-0} >= 2)) && break; sleep 0.5; done
            start_replica 0 "$d/data-0-new"
            if wait_http "http://127.0.0.1:${hp[0]}$probe" 20 "${rpids[-1]}"; then
              # The next entry shows clusterd-0 the log no longer reaches back to its empty store.
              ctl pause --reason helm-test || bad "clusterctl pause against clusterd-1"
              for _ in $(seq 1 40); do grep -q "rebuilt from clusterd-1's checkpoint" "$d/clusterd-0.log" && break; sleep 0.5; done
              if grep -qF "rebuilding from a checkpoint of clusterd-1 (127.0.0.1:${hp[1]})" "$d/clusterd-0.log" &&
                 grep -q "rebuilt from clusterd-1's checkpoint" "$d/clusterd-0.log" &&
                 curl -fsS -o /dev/null "http://127.0.0.1:${hp[0]}$probe"; then
                ok "clusterd-0 on a new volume, past the trimmed log (trimmed to $(trimmed)), rebuilds from clusterd-1's checkpoint at its --ha-advertise-address and is Ready"
              else
                grep -v ' D \[' "$d/clusterd-0.log" | tail -8 >&2; bad "clusterd-0 on a new volume did not rebuild from clusterd-1's advertised checkpoint"
              fi
            else
              tail -5 "$d/clusterd-0.log" >&2; bad "clusterd-0 on a new volume did not become Ready ($probe)"
            fi
          else
            echo "  skip build/bin/clusterctl missing: the checkpoint transfer is not run"
          fi
        else
          tail -5 "$d/clusterd-1.log" >&2; bad "clusterd-1 did not take over after the leader stopped"
        fi
      fi
      for p in "${rpids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    else
      tail -5 "$d"/etcd-*.log >&2; bad "etcd with the rendered member flags did not become ready"
    fi
    for p in "${epids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  fi
else
  echo "  skip binaries not built (scripts/build.sh); config files not run"
fi

# ---- 4b. NOTES.txt: rendered, and its commands work against a live clusterd ------------------
echo "== NOTES.txt (${SECONDS}s)"
# `helm template` does not render NOTES.txt; a copy of the chart renders it into a ConfigMap,
# next to everything else (the generated Secrets the commands need come from the same render).
cp -r "$CHART" "$TMP/notes-chart"
mkdir -p "$TMP/notes-chart/files"
mv "$TMP/notes-chart/templates/NOTES.txt" "$TMP/notes-chart/files/NOTES.txt"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  NOTES.txt: |-\n{{ tpl (.Files.Get "files/NOTES.txt") . | indent 4 }}\n' \
  >"$TMP/notes-chart/templates/zz-notes.yaml"
notes() { # notes NAME [HELM ARGS...]: renders the notes chart into $TMP/NAME.yaml and $TMP/NAME.txt
  local name=$1
  shift
  "$HELM" template clusterd "$TMP/notes-chart" --namespace fault-mgmt --kube-version "$kv" "$@" \
    >"$TMP/$name.yaml" 2>"$TMP/$name.err" && extract "$TMP/$name.yaml" notes NOTES.txt "$TMP/$name.txt"
}
notes_has() { # notes_has NAME DESCRIPTION PATTERN...: every fixed string appears in the notes
  local name=$1 what=$2 p
  shift 2
  for p in "$@"; do
    grep -qF -- "$p" "$TMP/$name.txt" || { cat "$TMP/$name.txt" >&2; bad "NOTES.txt ($what) lacks: $p"; return; }
  done
  ok "NOTES.txt ($what) renders: ${*:1:3} ..."
}
notes_lacks() { # notes_lacks NAME DESCRIPTION PATTERN...: no fixed string appears in the notes
  local name=$1 what=$2 p
  shift 2
  for p in "$@"; do
    if grep -qF -- "$p" "$TMP/$name.txt"; then cat "$TMP/$name.txt" >&2; bad "NOTES.txt ($what) has: $p"; return; fi
  done
  ok "NOTES.txt ($what) leaves out: ${*:1:3}"
}
if notes notes-tls "${NOK[@]}" && notes notes-plain --set tls.enabled=false "${NOK[@]}" &&
   notes notes-existing --set tls.source=existingSecret --set tls.existingSecret.server=srv --set tls.existingSecret.agents=agt &&
   notes notes-mindcluster -f test/helm/values-mindcluster.yaml &&
   notes notes-mindcluster-ok --namespace mindx-dl --set mindcluster.service.enabled=true --set tls.enabled=false "${NOK[@]}" &&
   notes notes-mindcluster-np --set mindcluster.service.enabled=true --set-json 'networkPolicy.nodeCIDRs=["10.0.0.0/24"]' &&
   notes notes-ha -f test/helm/values-ha.yaml && notes notes-ha-external -f test/helm/values-ha-external-etcd.yaml &&
   notes notes-ha-external-tls -f test/helm/values-ha-external-etcd-tls.yaml && notes notes-ha-plain-etcd -f test/helm/values-ha.yaml --set ha.etcd.tls.enabled=false &&
   notes notes-ha-nolabel -f test/helm/values-ha.yaml --set ha.leaderLabel=false && notes notes-ha-nok --set ha.enabled=true "${NOK[@]}" &&
   notes notes-volcano -f test/helm/values-mindcluster-volcano.yaml && notes notes-volcano-k8s --set mindcluster.volcano.enabled=true &&
   notes notes-volcano-ha -f test/helm/values-mindcluster-volcano.yaml --set ha.enabled=true &&
   notes notes-volcano-pf -f test/helm/values-mindcluster-public-faults.yaml &&
   notes notes-volcano-pf-all --set mindcluster.volcano.enabled=true --set-json 'mindcluster.volcano.publicFaultNamespaces=["*"]'; then
  notes_has notes-tls "mutual TLS, generated CA" "port-forward svc/clusterd 8899:8899" "get secret clusterd-ca" \
    "openssl req -new" "/O=clusterd:viewer" "grpcurl -cacert ca.crt -cert client.crt -key client.key localhost:8899 clusterd.v1.ClusterService/GetSummary"
  notes_has notes-plain "tls.enabled=false" "port-forward svc/clusterd 8899:8899" "grpcurl -plaintext localhost:8899 clusterd.v1.ClusterService/GetSummary" "unauthenticated"
  notes_has notes-existing "existingSecret, TokenReview" "get secret srv" "-authority clusterd.fault-mgmt.svc" "create token SERVICEACCOUNT --audience clusterd"
  notes_has notes-mindcluster "MindCluster Service, TLS, wrong namespace" "clusterd-grpc-svc.mindx-dl.svc.cluster.local:8899" \
    "must be mindx-dl, and they speak plaintext gRPC" "WARNING: this release is in namespace \"fault-mgmt\", not \"mindx-dl\"" \
    "WARNING: tls.enabled=true" "CANNOT connect" "docs/deploy.md, \"MindCluster clients\""
  notes_has notes-mindcluster-ok "MindCluster Service, plaintext, mindx-dl" "clusterd-grpc-svc.mindx-dl.svc.cluster.local:8899" "speak plaintext gRPC"
  notes_lacks notes-mindcluster-ok "MindCluster Service, plaintext, mindx-dl" "WARNING: this release is in namespace" "WARNING: tls.enabled=true"
  notes_has notes-mindcluster-np "MindCluster Service behind a closed NetworkPolicy" "add MindCluster's client pods"
  notes_lacks notes-tls "default: no MindCluster Service" "clusterd-grpc-svc"
  notes_lacks notes-tls "default: no HA" "High availability" "get pods -l app.kubernetes.io/instance=clusterd,app.kubernetes.io/component=clusterd"
  notes_has notes-ha "ha, deployed etcd, leader label" "High availability: 3 ClusterD replicas (StatefulSet clusterd)" "StatefulSet clusterd-etcd, 3 members" \
    "TLS: client and peer certificates of the etcd CA, Secrets clusterd-etcd-ca, clusterd-etcd-tls, clusterd-etcd-client-tls" \
    "kubectl -n fault-mgmt get pods -l app.kubernetes.io/instance=clusterd,app.kubernetes.io/component=clusterd -L clusterd.io/ha-role" \
    "labels its pod clusterd.io/ha-role=leader" "Every healthy replica is Ready (/readyz/replica)" "rollout status statefulset/clusterd" \
    "the RollingUpdate of new versions work" "PodDisruptionBudget maxUnavailable 1" "resigns on SIGTERM" "PVC data-<pod>"
  notes_lacks notes-ha "ha: no Deployment, not leader-only" "rollout status deployment/" "READY column" "Only the leader is Ready"
  notes_has notes-ha-external "ha, external etcd" "High availability: 5 ClusterD replicas (StatefulSet fault-center)" "http://etcd-0.etcd.infra.svc:2379, http://etcd-1.etcd.infra.svc:2379" \
    "a RollingUpdate (updateStrategy is OnDelete here)"
  notes_lacks notes-ha "ha, deployed etcd with TLS" "plaintext"
  notes_has notes-ha-external "ha, external etcd over http" "etcd-2.etcd.infra.svc:2379; plaintext)."
  notes_has notes-ha-external-tls "ha, external etcd over https" "https://etcd-0.etcd.infra.svc:2379" "TLS: CA and client certificate from Secret clusterd-etcd-client)."
  notes_has notes-ha-plain-etcd "ha, deployed etcd, ha.etcd.tls.enabled=false" "StatefulSet clusterd-etcd, 3 members, deployed with the release; plaintext)."
  notes_has notes-ha-nolabel "ha, leaderLabel=false" "Only the leader is Ready" "READY column" "never see every replica Ready"
  notes_lacks notes-ha-nolabel "ha, leaderLabel=false" "clusterd.io/ha-role" "/readyz/replica"
  notes_has notes-ha-nok "ha, kubernetes.enabled=false" "only Kubernetes access is get and patch on pods" "in fault-mgmt, for the leader label (Role clusterd-ha)"
  notes_has notes-volcano "mindcluster integration alone" "Kubernetes integration off (actuator: none): ClusterD's Kubernetes access is the mindcluster integration's (below)." \
    "npu-plugin/mindx-dl-deviceinfo-<node> (Role clusterd-mindcluster-deviceinfo: get, list, watch)" \
    "mindx-dl/cluster-info-device-<i> and cluster-info-node-cm (Role clusterd-mindcluster-clusterinfo:" \
    "MindCluster's own ClusterD must not run next to it" "kubectl -n mindx-dl get configmaps -l mx-consumer-volcano=true"
  notes_lacks notes-volcano "mindcluster integration alone" "holds no Kubernetes credentials" "leader label"
  notes_has notes-volcano-k8s "mindcluster and Kubernetes integrations" "Kubernetes integration on (actuator: kubernetes)" \
    "kube-system/mindx-dl-deviceinfo-<node> (Role clusterd-mindcluster-deviceinfo"
  notes_has notes-volcano-ha "mindcluster integration, ha" "the mindcluster integration's (below)," \
    "and get and patch on pods in fault-mgmt for the leader label (Role clusterd-ha)."
  notes_lacks notes-tls "default: no mindcluster integration" "mindcluster integration on" "mx-consumer-volcano"
  notes_lacks notes-volcano "mindcluster integration, no public faults" "mc-consumer-publicfault" "-mindcluster-publicfault"
  notes_has notes-volcano-pf "mindcluster integration, public faults in two namespaces" \
    "public faults of ConfigMaps labelled mc-consumer-publicfault=true in fd-online, kube-system" \
    "(Role clusterd-mindcluster-publicfault in each: get, list, watch)" "MindCluster's own ClusterD must not run next to it"
  notes_has notes-volcano-pf-all "mindcluster integration, public faults everywhere" \
    "public faults of ConfigMaps labelled mc-consumer-publicfault=true in every namespace" \
    "(ClusterRole fault-mgmt-clusterd-mindcluster-publicfault: get, list, watch on every ConfigMap of the cluster)"
else
  cat "$TMP"/notes-*.err >&2; bad "NOTES.txt does not render"
fi
if [[ -x build/bin/clusterd && -s $TMP/notes-plain.txt ]] && command -v grpcurl >/dev/null; then
  # The TLS notes with a clusterd that serves TLS, else the plaintext ones.
  mode=plain
  [[ -n $clusterd_tls ]] && mode=tls
  # The commands, continuation lines joined (the kubectl ones are done below by hand).
  mapfile -t cmds < <("$PY" - "$TMP/notes-$mode.txt" <<'PY'
import sys
cur = ""
for line in open(sys.argv[1]).read().split("\n"):
    s = line.strip()
    if cur or s.startswith(("grpcurl ", "REV=", "openssl ", "rm ")):
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        print(cur + s)
        cur = ""
PY
  )
  g=$(free_port) h=$(free_port) d="$TMP/run-notes" w="$TMP/notes-cwd"
  ready=$h
  mkdir -p "$d" "$w"
  if [[ $mode == tls ]]; then
    conf=$(materialize "$TMP/notes-tls.yaml" Deployment "$d")
    # What the notes' two kubectl commands fetch from the CA Secret.
    secret_data "$TMP/notes-tls.yaml" clusterd-ca ca.crt "$w/ca.crt"
    secret_data "$TMP/notes-tls.yaml" clusterd-ca tls.key "$w/ca.key"
    # The HTTP port speaks TLS: readiness from the probe-only port, as the kubelet asks.
    ready=$(free_port)
    flags=(--probe-listen "127.0.0.1:$ready")
  else
    conf=$(materialize "$TMP/notes-plain.yaml" Deployment "$d" "${plain_drop[@]}")
    flags=("${insecure_flag[@]}")
  fi
  build/bin/clusterd --config "$conf" --listen "127.0.0.1:$g" --http-listen "127.0.0.1:$h" \
    --data-dir "$d/data" "${flags[@]}" >"$d/clusterd.log" 2>&1 &
  cpid=$!; pids+=("$cpid")
  if wait_http "http://127.0.0.1:$ready/readyz" 20 "$cpid"; then
    cd "$w"
    for cmd in "${cmds[@]}"; do
      cmd=${cmd//localhost:8899/127.0.0.1:$g}
      rc=0 out=""
      if [[ $cmd == REV=* ]]; then
        eval "$cmd" || rc=$?
      elif [[ $cmd == grpcurl* ]]; then
        out=$(eval "timeout 5 $cmd" 2>&1) || rc=$?
        # Watch streams until stopped: ended by the timeout (124) is success.
        [[ $cmd == *ClusterService/Watch* && $rc == 124 ]] && rc=0
      else
        out=$(eval "$cmd" 2>&1) || rc=$?
      fi
      if ((rc == 0)); then ok "NOTES ($mode): ${cmd:0:90}"; else echo "$out" >&2; bad "NOTES ($mode): $cmd (exit $rc)"; fi
    done
    cd "$ROOT"
    if [[ $mode == tls && -e $w/ca.key ]]; then bad "NOTES (tls): the CA key is left behind"; fi
  else
    tail -5 "$d/clusterd.log" >&2; bad "clusterd for the NOTES commands did not start"
  fi
  kill "$cpid" 2>/dev/null || true
  wait "$cpid" 2>/dev/null || true
else
  echo "  skip NOTES commands not run (needs build/bin/clusterd and grpcurl)"
fi

# ---- 5. the schema rejects bad values -------------------------------------------------------
echo "== values.schema.json rejects bad values (${SECONDS}s)"
for f in test/helm/bad/*.yaml; do
  want=$(sed -n '1s/^# expect: //p' "$f")
  [[ -n $want ]] || { bad "$f: first line must be '# expect: TEXT'"; continue; }
  if out=$("$HELM" template clusterd "$CHART" --kube-version "$kv" -f "$f" 2>&1 >/dev/null); then
    bad "$(basename "$f"): helm template accepted it"
  elif grep -qF -- "$want" <<<"$out"; then
    ok "$(basename "$f") rejected: $(grep -m1 -E "^- at|execution error" <<<"$out" | cut -c1-110)"
  else
    echo "$out" >&2; bad "$(basename "$f"): failed without naming '$want'"
  fi
done
# ha.leaderLabel is a boolean (a string "true" would be truthy in the templates, "false" too).
for set in ha.leaderLabel=yes ha.leaderLabel=false; do
  if out=$("$HELM" template clusterd "$CHART" --kube-version "$kv" --set ha.enabled=true --set-string "$set" 2>&1 >/dev/null); then
    bad "--set-string $set accepted"
  elif grep -qF -- "/ha/leaderLabel" <<<"$out"; then
    ok "--set-string $set rejected: $(grep -m1 -E "^- at|execution error" <<<"$out" | cut -c1-110)"
  else
    echo "$out" >&2; bad "--set-string $set: failed without naming /ha/leaderLabel"
  fi
done
for set in clusterd.ports.grpc=-1 clusterd.ports.http=70000 noded.accelerator=cuda clusterd.config.retention_age=1w ha.updateStrategy.type=Recreate; do
  if "$HELM" template clusterd "$CHART" --kube-version "$kv" --set "$set" >/dev/null 2>&1; then
    bad "--set $set accepted"
  else
    ok "--set $set rejected"
  fi
done

# ---- 6. the image's runtime libraries ---------------------------------------------------------
echo "== Dockerfile runtime libraries (${SECONDS}s)"
if [[ -x build/bin/clusterd && -x build/bin/noded ]]; then
  if bash scripts/check-image-libs.sh >"$TMP/libs.log" 2>&1; then
    ok "scripts/check-image-libs.sh: $(tail -1 "$TMP/libs.log")"
  else
    cat "$TMP/libs.log" >&2; bad "scripts/check-image-libs.sh"
  fi
  # The check must catch a missing package: drop libprotobuf32 from a copy of the Dockerfile.
  mkdir -p "$TMP/mut/scripts" "$TMP/mut/build"
  grep -v '^ *libprotobuf32 \\$' Dockerfile >"$TMP/mut/Dockerfile"
  cp scripts/check-image-libs.sh scripts/deps.sh "$TMP/mut/scripts/"
  ln -s "$ROOT/build/bin" "$TMP/mut/build/bin"
  if out=$(bash "$TMP/mut/scripts/check-image-libs.sh" 2>&1); then
    bad "check-image-libs.sh passed a Dockerfile without libprotobuf32"
  elif grep -q "libprotobuf32.*missing from the runtime stage" <<<"$out"; then
    ok "check-image-libs.sh names a missing runtime package (libprotobuf32)"
  else
    echo "$out" >&2; bad "check-image-libs.sh failed without naming libprotobuf32"
  fi
else
  echo "  skip binaries not built (scripts/build.sh); library check not run"
fi

# ---- optional: promtool --------------------------------------------------------------------
if command -v promtool >/dev/null; then
  "$PY" -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "PrometheusRule": yaml.safe_dump(d["spec"], open(sys.argv[2], "w"))' "$M" "$TMP/rules.yaml"
  if promtool check rules "$TMP/rules.yaml" >"$TMP/promtool.log" 2>&1; then ok "promtool check rules"; else cat "$TMP/promtool.log" >&2; bad "promtool check rules"; fi
else
  echo "  skip promtool not installed; alert rules checked structurally only"
fi

echo "helm_test: $passed passed, $failed failed"
((failed == 0))
