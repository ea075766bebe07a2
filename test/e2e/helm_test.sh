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
#      without it), and that a plain `helm template` (no --kube-version) works;
#   4. the rendered config.json / catalog.json files are accepted by the real clusterd and
#      noded binaries (when built); ClusterD's config without the Kubernetes keys here, as
#      those need an API server (test/k8s/helm_rbac_test.sh installs the chart into one);
#   5. values.schema.json rejects bad values: every test/helm/bad/*.yaml must make
#      `helm template` fail with the message its first line names;
#   6. scripts/check-image-libs.sh passes, and fails on a Dockerfile missing a library.
# Installs what is missing: helm (go install, into $GOPATH/bin) and kubernetes-validate
# (pip, into a venv under ~/.cache). Runs from any directory; exits 0 only if all passed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

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
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = {}
for d in docs:
    by.setdefault(d["kind"], []).append(d)
def pod(kind): return by[kind][0]["spec"]["template"]["spec"]
def cm(suffix): return next(d for d in by["ConfigMap"] if d["metadata"]["name"].endswith(suffix))["data"]
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
expect "default: kinds" "$D" "sorted(by)" "['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'Deployment', 'PersistentVolumeClaim', 'Role', 'RoleBinding', 'Service', 'ServiceAccount']"
expect "default: ClusterD on masterselector=dls-master-node" "$D" "pod('Deployment')['nodeSelector']" "{'masterselector': 'dls-master-node'}"
expect "default: NodeD on workerselector=dls-worker-node" "$D" "pod('DaemonSet')['nodeSelector']" "{'workerselector': 'dls-worker-node'}"
expect "default: Service ports grpc 8899, http 11253" "$D" "[(p['name'], p['port']) for p in by['Service'][0]['spec']['ports']]" "[('grpc', 8899), ('http', 11253)]"
expect "default: NodeD node name from spec.nodeName" "$D" "pod('DaemonSet')['containers'][0]['env'][0]['valueFrom']['fieldRef']['fieldPath']" "spec.nodeName"
expect "default: NodeD --node-name=\$(NODE_NAME)" "$D" "'--node-name=\$(NODE_NAME)' in pod('DaemonSet')['containers'][0]['args']" "True"
expect "default: NodeD privileged (kmsg + ascend)" "$D" "pod('DaemonSet')['containers'][0]['securityContext']['privileged']" "True"
expect "default: NodeD host mounts" "$D" "sorted((m['mountPath'], m.get('readOnly', False)) for m in pod('DaemonSet')['containers'][0]['volumeMounts'])" \
  "[('/dev/kmsg', True), ('/etc/noded', True), ('/host', True), ('/tmp', False), ('/usr/local/Ascend/driver', True), ('/var/lib/noded', False)]"
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
expect "sim: no kmsg/driver mounts" "$S" "sorted(v['name'] for v in pod('DaemonSet')['volumes'])" "['config', 'host-root', 'state', 'tmp']"
expect "sim: rules file and labels" "$S" "(lambda c: (c['rules_file'], c['labels'], c['kmsg_path'], c['sim_devices']))(__import__('json').loads(cm('-noded')['config.json']))" \
  "('/etc/noded/rules.json', 'pool=train,rack=r12', '', 16)"
expect "sim: emptyDir data" "$S" "[v for v in pod('Deployment')['volumes'] if v['name'] == 'data'][0]" "{'name': 'data', 'emptyDir': {}}"
# The Kubernetes integration (docs/deploy.md, "Kubernetes API access").
rules() { echo "sorted((g, r, ' '.join(x['verbs'])) for x in by['$1'][0]['rules'] for g in x['apiGroups'] for r in x['resources'])"; }
K=$TMP/values-kubernetes-$kv.yaml NK=$TMP/values-no-kubernetes-$kv.yaml R=$TMP/values-recovery-$kv.yaml
expect "default: ClusterRole rules" "$D" "$(rules ClusterRole)" \
  "[('', 'events', 'create patch get'), ('', 'nodes', 'get list watch patch'), ('', 'nodes/status', 'patch'), ('', 'pods', 'get list watch delete'), ('', 'pods/eviction', 'create'), ('events.k8s.io', 'events', 'create patch get'), ('scheduling.volcano.sh', 'podgroups', 'get list watch')]"
expect "default: Role: leases in the release namespace" "$D" "(by['Role'][0]['metadata']['namespace'], $(rules Role))" \
  "('fault-mgmt', [('coordination.k8s.io', 'leases', 'get create update')])"
expect "default: bindings name ClusterD's ServiceAccount only" "$D" "sorted((b['kind'], b['roleRef']['name'], str(b['subjects'])) for k in ('ClusterRoleBinding', 'RoleBinding') for b in by[k])" \
  "[('ClusterRoleBinding', 'fault-mgmt-clusterd', \"[{'kind': 'ServiceAccount', 'name': 'clusterd', 'namespace': 'fault-mgmt'}]\"), ('RoleBinding', 'clusterd', \"[{'kind': 'ServiceAccount', 'name': 'clusterd', 'namespace': 'fault-mgmt'}]\")]"
expect "default: token mounted into ClusterD only" "$D" "(pod('Deployment')['automountServiceAccountToken'], pod('DaemonSet')['automountServiceAccountToken'])" "(True, False)"
expect "default: config.json turns the integration and actuator on" "$D" "(lambda c: (c['integrations'], c['actuator'], 'kubeconfig' in c, {k: v for k, v in c.items() if k.startswith('k8s_')}))(__import__('json').loads(cm('clusterd')['config.json']))" \
  "(['kubernetes'], 'kubernetes', False, {'k8s_delete_fallback': False, 'k8s_devices_annotation': 'huawei.com/AscendReal', 'k8s_eviction_timeout': '60s', 'k8s_job_kind_label': 'clusterd.io/job-kind', 'k8s_namespace': '', 'k8s_node_condition': 'AcceleratorHealthy', 'k8s_node_not_ready_level': 'PRE_SEPARATE', 'k8s_rank_annotation': 'hccl/rankIndex', 'k8s_taint_effect': 'NoSchedule', 'k8s_taint_key': 'clusterd.io/fault'})"
expect "no-kubernetes: no RBAC objects" "$NK" "sorted(by)" "['ConfigMap', 'DaemonSet', 'Deployment', 'PersistentVolumeClaim', 'Service', 'ServiceAccount']"
expect "no-kubernetes: no token mounted" "$NK" "(pod('Deployment')['automountServiceAccountToken'], pod('DaemonSet')['automountServiceAccountToken'])" "(False, False)"
expect "no-kubernetes: no Kubernetes keys, no actuator (binary default none)" "$NK" "sorted(k for k in __import__('json').loads(cm('clusterd')['config.json']) if k.startswith(('k8s_', 'integrations', 'kubeconfig', 'actuator')))" "[]"
expect "kubernetes: tuned keys in config.json" "$K" "(lambda c: sorted((k, v) for k, v in c.items() if k.startswith('k8s_')))(__import__('json').loads(cm('clusterd')['config.json']))" \
  "[('k8s_delete_fallback', True), ('k8s_devices_annotation', 'example.com/devices'), ('k8s_eviction_timeout', '2m'), ('k8s_job_kind_label', 'example.com/kind'), ('k8s_namespace', 'training'), ('k8s_node_condition', 'GPUHealthy'), ('k8s_node_not_ready_level', 'SEPARATE'), ('k8s_rank_annotation', 'example.com/rank'), ('k8s_taint_effect', 'NoExecute'), ('k8s_taint_key', 'example.com/accelerator-fault')]"
expect "kubernetes: bindings follow the named ServiceAccount" "$K" "sorted({s['name'] for k in ('ClusterRoleBinding', 'RoleBinding') for b in by[k] for s in b['subjects']} | {pod('Deployment')['serviceAccountName']})" "['fault-sa']"
expect "recovery: an explicit actuator wins over kubernetes" "$R" "__import__('json').loads(cm('clusterd')['config.json'])['actuator']" "webhook"
expect "recovery: without the kubernetes actuator no eviction or pod delete" "$R" "$(rules ClusterRole)" \
  "[('', 'events', 'create patch get'), ('', 'nodes', 'get list watch patch'), ('', 'nodes/status', 'patch'), ('', 'pods', 'get list watch'), ('events.k8s.io', 'events', 'create patch get'), ('scheduling.volcano.sh', 'podgroups', 'get list watch')]"
if out=$("$HELM" template "$CHART" 2>&1 >"$TMP/plain.yaml"); then
  ok "plain \`helm template $CHART\` (no --kube-version) renders $(grep -c '^kind:' "$TMP/plain.yaml") objects"
else
  echo "$out" >&2; bad "plain \`helm template $CHART\` fails"
fi
expect "npu-smi: pod network, custom ports" "$N" "(pod('DaemonSet').get('hostNetwork'), pod('DaemonSet')['containers'][0]['ports'][0]['containerPort'], by['Service'][0]['spec']['ports'][0]['port'])" "(None, 21255, 18899)"
expect "npu-smi: npu-smi binary mounted read-only" "$N" "[(m['mountPath'], m['readOnly']) for m in pod('DaemonSet')['containers'][0]['volumeMounts'] if m['name'] == 'npu-smi']" "[('/usr/local/bin/npu-smi', True)]"

# ---- 4. the binaries accept the rendered config files ----------------------------------------
echo "== rendered config files against the real binaries (${SECONDS}s)"
# ClusterD's config.json rendered with kubernetes.enabled=false: the Kubernetes integration needs
# an API server, and test/k8s/helm_rbac_test.sh runs that config against a real one.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
extract() { # extract RENDERED CONFIGMAP_SUFFIX KEY OUT
  "$PY" -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith(sys.argv[2]):
        open(sys.argv[4], "w").write(d["data"][sys.argv[3]]); break
else: sys.exit("no " + sys.argv[3])' "$@"
}
wait_http() { # wait_http URL SECONDS PID
  local deadline=$(($(date +%s) + $2))
  while (($(date +%s) < deadline)); do
    kill -0 "$3" 2>/dev/null || return 1
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
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
if [[ -x build/bin/clusterd && -x build/bin/noded ]]; then
  for vs in default values-existing-claim; do
    vf=default
    [[ $vs == default ]] || vf=test/helm/$vs.yaml
    render "$vs-no-k8s" "$vf" "$kv" --set kubernetes.enabled=false
    r="$TMP/$vs-no-k8s-$kv.yaml" d="$TMP/run-$vs"
    mkdir -p "$d"
    if [[ $vs == default ]]; then sfx=clusterd; else sfx=fault-center; fi
    extract "$r" "$sfx" config.json "$d/config.json"
    catalog=()
    if extract "$r" "$sfx" catalog.json "$d/catalog.json" 2>/dev/null; then catalog=(--catalog "$d/catalog.json"); fi
    # The file is parsed and checked whole; the flags only move ports and paths off the image's.
    run_daemon "clusterd starts with the $vs config.json${catalog:+ and catalog.json}" /readyz -- \
      build/bin/clusterd --config "$d/config.json" --listen "127.0.0.1:$(free_port)" --data-dir "$d/data" "${catalog[@]}"
  done
  for vs in default values-sim; do
    r="$TMP/$vs-$kv.yaml" d="$TMP/run-noded-$vs"
    mkdir -p "$d/state"
    extract "$r" -noded config.json "$d/config.json"
    rules=()
    if extract "$r" -noded rules.json "$d/rules.json" 2>/dev/null; then rules=(--rules-file "$d/rules.json"); fi
    run_daemon "noded starts with the $vs config.json${rules:+ and rules.json}" /healthz -- \
      build/bin/noded --config "$d/config.json" --node-name helm-test --accelerator sim --root / --kmsg-path "" \
      --state-dir "$d/state" --server "127.0.0.1:$(free_port)" "${rules[@]}"
  done
else
  echo "  skip binaries not built (scripts/build.sh); config files not run"
fi

# ---- 4b. NOTES.txt: rendered, and its grpcurl commands work against a live clusterd -------
echo "== NOTES.txt (${SECONDS}s)"
# `helm template` does not render NOTES.txt; a copy of the chart renders it into a ConfigMap.
cp -r "$CHART" "$TMP/notes-chart"
mkdir -p "$TMP/notes-chart/files"
mv "$TMP/notes-chart/templates/NOTES.txt" "$TMP/notes-chart/files/NOTES.txt"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  NOTES.txt: |-\n{{ tpl (.Files.Get "files/NOTES.txt") . | indent 4 }}\n' \
  >"$TMP/notes-chart/templates/zz-notes.yaml"
if "$HELM" template clusterd "$TMP/notes-chart" --namespace fault-mgmt --kube-version "$kv" \
     -s templates/zz-notes.yaml >"$TMP/notes.yaml" 2>"$TMP/notes.err" &&
   extract "$TMP/notes.yaml" notes NOTES.txt "$TMP/NOTES.txt"; then
  if grep -q "port-forward svc/clusterd 8899:8899" "$TMP/NOTES.txt" &&
     grep -q "clusterd.v1.ClusterService/GetSummary" "$TMP/NOTES.txt"; then
    ok "NOTES.txt renders the port-forward and grpcurl commands"
  else
    cat "$TMP/NOTES.txt" >&2; bad "NOTES.txt lacks the port-forward or GetSummary command"
  fi
else
  cat "$TMP/notes.err" >&2; bad "NOTES.txt does not render"
fi
if [[ -x build/bin/clusterd && -s $TMP/NOTES.txt ]] && command -v grpcurl >/dev/null; then
  # The commands, continuation lines joined, pointed at a clusterd on free ports.
  mapfile -t cmds < <("$PY" - "$TMP/NOTES.txt" <<'PY'
import sys
cur = ""
for line in open(sys.argv[1]).read().split("\n"):
    s = line.strip()
    if cur or s.startswith(("grpcurl ", "REV=")):
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        print(cur + s)
        cur = ""
PY
  )
  g=$(free_port) h=$(free_port) d="$TMP/run-notes"
  mkdir -p "$d"
  build/bin/clusterd --config "$d/../run-default/config.json" --listen "127.0.0.1:$g" --http-listen "127.0.0.1:$h" \
    --data-dir "$d/data" >"$d/clusterd.log" 2>&1 &
  cpid=$!; pids+=("$cpid")
  if wait_http "http://127.0.0.1:$h/readyz" 20 "$cpid"; then
    for cmd in "${cmds[@]}"; do
      cmd=${cmd//localhost:8899/127.0.0.1:$g}
      rc=0 out=""
      if [[ $cmd == REV=* ]]; then
        eval "$cmd" || rc=$?
      else
        out=$(eval "timeout 5 $cmd" 2>&1) || rc=$?
        # Watch streams until stopped: ended by the timeout (124) is success.
        [[ $cmd == *ClusterService/Watch* && $rc == 124 ]] && rc=0
      fi
      if ((rc == 0)); then ok "NOTES: ${cmd:0:90}"; else echo "$out" >&2; bad "NOTES: $cmd (exit $rc)"; fi
    done
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
for set in clusterd.ports.grpc=-1 clusterd.ports.http=70000 noded.accelerator=cuda clusterd.config.retention_age=1w; do
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
