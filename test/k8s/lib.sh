# Test harness for the Kubernetes tests: a real etcd and kube-apiserver on
# loopback (no kubelet, no controller-manager, no containers), built from the Go
# module proxy by scripts/k8s-tools.sh. Source it from bash:
#
#   source test/k8s/lib.sh
#   trap k8s_stop EXIT
#   k8s_start                       # ~3-5 s once the binaries are cached
#   k8s_api GET /api/v1/nodes       # body on stdout; exit 0 only on 2xx
#   k8s_code GET /api/v1/secrets    # prints the HTTP status code only
#
# k8s_start exports:
#   K8S_DIR          temporary directory (certificates, data, logs, kubeconfig)
#   K8S_API          https://127.0.0.1:PORT (the API server)
#   K8S_CA           CA certificate (PEM) that signed the serving certificate (IP SAN 127.0.0.1)
#   K8S_ADMIN_TOKEN  bearer token of user "admin" in group system:masters
#   K8S_KUBECONFIG   admin kubeconfig (YAML: server, certificate-authority path, token)
#   K8S_ETCD         http://127.0.0.1:PORT (etcd's client URL and HTTP/JSON gateway)
#   K8S_BIN          directory with the etcd and kube-apiserver binaries
#   K8S_APISERVER_PID, K8S_ETCD_PID
# Logs: $K8S_DIR/etcd.log, $K8S_DIR/kube-apiserver.log.
#
# Functions: k8s_start, k8s_stop, k8s_api, k8s_code (K8S_TOKEN=... picks another token),
# k8s_restart_apiserver (or k8s_stop_apiserver + k8s_start_apiserver for an outage),
# k8s_compact_etcd, k8s_etcd_revision, k8s_create_namespace, k8s_sa_token,
# k8s_write_kubeconfig, k8s_apply_podgroup_crd, k8s_wait, k8s_free_port, k8s_kill_wait;
# k8s_start_control_loop (scheduler, controller-manager, kwok), k8s_add_kwok_node,
# k8s_node_ready, k8s_set_node_chips, k8s_lose_node.
# It sources test/e2e/lib.sh, the preamble every end-to-end test shares (e2e_setup,
# free_port, wait_until, start_clusterd, kill_wait, term_wait, ...): k8s_free_port and
# k8s_kill_wait are its free_port and term_wait under the names this library had.
# `bash test/k8s/lib.sh serve ENV_FILE` runs the cluster for a driver in another language.
#
# What the cluster lacks unless k8s_start_control_loop runs (scheduler, controllers, kwok's
# simulated kubelets): no kubelet, so pods stay Pending unless the test patches pods/status,
# and a deleted pod bound to a node stays Terminating until deleted with
# gracePeriodSeconds=0; no controllers, so nothing creates pods from Jobs and nothing is
# garbage collected; the ServiceAccount admission plugin is off, so a namespace needs no
# default ServiceAccount.
#
# k8s_start must run in the shell that later calls k8s_stop (not in a $(...) subshell): it
# keeps the process ids in shell variables. A guard process stops both servers if that shell
# dies without calling k8s_stop (kill -9, CI timeout).

K8S_LIB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
K8S_START_TIMEOUT=${K8S_START_TIMEOUT:-60}
# shellcheck source=../e2e/lib.sh
source "$K8S_LIB_ROOT/test/e2e/lib.sh"

k8s_log() { echo "k8s: $*" >&2; }

k8s_free_port() { free_port; }

# k8s_wait SECONDS DESCRIPTION CMD...: wait_until SECONDS CMD... that names DESCRIPTION
# when it times out; returns 1 on the deadline.
k8s_wait() {
  local seconds=$1 what=$2
  shift 2
  wait_until "$seconds" "$@" 2>/dev/null || {
    k8s_log "timed out after $seconds s waiting for: $what"
    return 1
  }
}

# k8s_api METHOD PATH [BODY [CONTENT_TYPE]]: one request to the API server. PATH includes any
# query string. BODY is JSON text, or @FILE. CONTENT_TYPE defaults to
# application/merge-patch+json for PATCH (CRDs accept it; strategic merge patch they refuse)
# and application/json otherwise. Authenticates with $K8S_TOKEN when set, else the admin token.
# Prints the response body; returns 0 on 2xx, 1 on another status, 2 if no response came.
k8s_api() {
  local method=$1 path=$2 body=${3-} ctype=${4-} code out
  if [[ -z $ctype ]]; then
    if [[ $method == PATCH ]]; then ctype=application/merge-patch+json; else ctype=application/json; fi
  fi
  local args=(-sS --max-time "${K8S_API_TIMEOUT:-30}" --cacert "$K8S_CA" -X "$method"
    -H "Authorization: Bearer ${K8S_TOKEN:-$K8S_ADMIN_TOKEN}" -H "Accept: application/json")
  [[ -n $body ]] && args+=(-H "Content-Type: $ctype" --data-binary "$body")
  out=$(mktemp)
  if ! code=$(curl "${args[@]}" -o "$out" -w '%{http_code}' "$K8S_API$path"); then
    cat "$out"; rm -f "$out"
    return 2
  fi
  cat "$out"; rm -f "$out"
  [[ $code == 2?? ]]
}

# k8s_code METHOD PATH [BODY [CONTENT_TYPE]]: like k8s_api but prints only the HTTP status code
# (000 when no response came), e.g. [[ $(K8S_TOKEN=$t k8s_code GET /api/v1/secrets) == 403 ]].
k8s_code() {
  local method=$1 path=$2 body=${3-} ctype=${4-}
  if [[ -z $ctype ]]; then
    if [[ $method == PATCH ]]; then ctype=application/merge-patch+json; else ctype=application/json; fi
  fi
  local args=(-sS --max-time "${K8S_API_TIMEOUT:-30}" --cacert "$K8S_CA" -X "$method"
    -H "Authorization: Bearer ${K8S_TOKEN:-$K8S_ADMIN_TOKEN}" -H "Accept: application/json")
  [[ -n $body ]] && args+=(-H "Content-Type: $ctype" --data-binary "$body")
  curl "${args[@]}" -o /dev/null -w '%{http_code}' "$K8S_API$path" 2>/dev/null || true
}

# Writes the certificates, keys and token file into $K8S_DIR.
k8s_gen_certs() {
  local d=$K8S_DIR
  (
    set -e
    cd "$d"
    openssl req -x509 -new -nodes -newkey rsa:2048 -sha256 -days 2 -keyout ca.key -out ca.crt \
      -subj /CN=clusterd-test-ca -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -new -nodes -newkey rsa:2048 -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver
    printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature,keyEncipherment' \
      'extendedKeyUsage=serverAuth' 'subjectAltName=IP:127.0.0.1' >apiserver.ext
    openssl x509 -req -sha256 -days 2 -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -extfile apiserver.ext -out apiserver.crt
    # Signs and verifies service-account tokens (TokenRequest).
    openssl genrsa -out sa.key 2048
    openssl rand -hex 32 >admin.token
    printf '%s,admin,admin-uid,"system:masters"\n' "$(cat admin.token)" >tokens.csv
    chmod 600 ./*.key admin.token tokens.csv
  ) >"$d/openssl.log" 2>&1 || { cat "$d/openssl.log" >&2; return 1; }
}

k8s_readyz() { [[ $(K8S_TOKEN= K8S_API_TIMEOUT=2 k8s_code GET /readyz) == 200 ]]; }
# k8s_answers_ok URL: the component's health check (TLS, not verified) says ok.
k8s_answers_ok() { [[ $(curl -sk --max-time 2 "$1" 2>/dev/null) == ok ]]; }
# k8s_wait_up PID LOG WHAT CMD...: waits until CMD succeeds; fails with LOG's
# last lines when PID exits first or K8S_START_TIMEOUT passes.
k8s_wait_up() {
  local pid=$1 log=$2 what=$3 deadline=$((SECONDS + K8S_START_TIMEOUT))
  shift 3
  until "$@"; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
      k8s_log "$what exited or was not up within $K8S_START_TIMEOUT s; last lines of $log:"
      tail -20 "$log" >&2
      return 1
    fi
    sleep 0.1
  done
}
k8s_etcd_healthy() { curl -fsS --max-time 2 "$K8S_ETCD/health" 2>/dev/null | grep -q '"health":"true"'; }

# Starts kube-apiserver (again) with the arguments k8s_start chose, and waits for /readyz.
k8s_start_apiserver() {
  "$K8S_BIN/kube-apiserver" "${K8S_APISERVER_ARGS[@]}" >>"$K8S_DIR/kube-apiserver.log" 2>&1 &
  K8S_APISERVER_PID=$!
  export K8S_APISERVER_PID
  echo "$K8S_APISERVER_PID" >"$K8S_DIR/apiserver.pid"
  local deadline=$((SECONDS + K8S_START_TIMEOUT))
  until k8s_readyz; do
    if ! kill -0 "$K8S_APISERVER_PID" 2>/dev/null; then
      k8s_log "kube-apiserver exited; last lines of $K8S_DIR/kube-apiserver.log:"
      tail -20 "$K8S_DIR/kube-apiserver.log" >&2
      return 1
    fi
    if ((SECONDS >= deadline)); then
      k8s_log "kube-apiserver not ready after $K8S_START_TIMEOUT s; last lines of its log:"
      tail -20 "$K8S_DIR/kube-apiserver.log" >&2
      return 1
    fi
    sleep 0.1
  done
}

# Stops kube-apiserver (SIGTERM, SIGKILL after 20 s) and waits until it has exited.
k8s_stop_apiserver() {
  [[ -n ${K8S_APISERVER_PID-} ]] || return 0
  k8s_kill_wait "$K8S_APISERVER_PID"
  K8S_APISERVER_PID=
}

# k8s_restart_apiserver: stop and start on the same port with the same flags; ready on return.
# Its watch cache is rebuilt from etcd, so after k8s_compact_etcd a watch from an older
# resourceVersion gets 410 Gone.
k8s_restart_apiserver() {
  k8s_stop_apiserver && k8s_start_apiserver
}

# k8s_kill_wait PID: SIGTERM, then SIGKILL if it is still there after 20 s; reaps it
# (term_wait, whatever the exit status).
k8s_kill_wait() { term_wait "$1" || true; }

# k8s_start: builds or reuses the binaries, generates certificates, starts etcd and
# kube-apiserver on free loopback ports, waits for /readyz and exports the K8S_* variables.
k8s_start() {
  local bin
  bin=$(bash "$K8S_LIB_ROOT/scripts/k8s-tools.sh") || {
    k8s_log "scripts/k8s-tools.sh failed"
    return 1
  }
  export K8S_BIN=$bin
  local t0=$SECONDS
  K8S_DIR=$(mktemp -d "${TMPDIR:-/tmp}/clusterd-k8s.XXXXXX")
  export K8S_DIR
  k8s_gen_certs || return 1
  export K8S_CA=$K8S_DIR/ca.crt
  export K8S_ADMIN_TOKEN
  K8S_ADMIN_TOKEN=$(cat "$K8S_DIR/admin.token")

  local etcd_port
  etcd_port=$(free_port)
  export K8S_ETCD=http://127.0.0.1:$etcd_port
  # The peer port is never used (one member): port 0.
  "$K8S_BIN/etcd" --data-dir "$K8S_DIR/etcd" \
    --listen-client-urls "$K8S_ETCD" --advertise-client-urls "$K8S_ETCD" \
    --listen-peer-urls http://127.0.0.1:0 --unsafe-no-fsync --log-level warn >"$K8S_DIR/etcd.log" 2>&1 &
  export K8S_ETCD_PID=$!
  # A guard: if the shell that started the servers dies without k8s_stop, stop them anyway.
  # tail --pid returns when that shell is gone; k8s_stop kills the guard first.
  local owner=$BASHPID
  (
    tail --pid="$owner" -f /dev/null
    # The control loop's processes (k8s_start_control_loop) first, then the API server:
    # without etcd its graceful shutdown hangs.
    for f in "$K8S_DIR"/loop-*.pid; do [[ -f $f ]] && kill -9 "$(cat "$f")" 2>/dev/null; done
    api=$(cat "$K8S_DIR/apiserver.pid" 2>/dev/null)
    if [[ -n $api ]] && kill "$api" 2>/dev/null; then
      for _ in $(seq 200); do kill -0 "$api" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$api" 2>/dev/null && kill -9 "$api"
    fi
    kill "$K8S_ETCD_PID" 2>/dev/null
    rm -rf "$K8S_DIR"
  ) </dev/null >/dev/null 2>&1 &
  K8S_GUARD_PID=$!
  k8s_wait_up "$K8S_ETCD_PID" "$K8S_DIR/etcd.log" etcd k8s_etcd_healthy || return 1

  local port
  port=$(free_port)
  export K8S_API=https://127.0.0.1:$port
  # Pitfalls (docs/testing.md): --advertise-address 127.0.0.1 is fatal with the default
  # endpoint reconciler; without a controller-manager no namespace gets a default
  # ServiceAccount, so the ServiceAccount admission plugin would refuse every pod.
  # --allow-privileged: the chart's NodeD DaemonSet is privileged by default (as RKE2 allows).
  K8S_APISERVER_ARGS=(
    --etcd-servers "$K8S_ETCD"
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port"
    --cert-dir "$K8S_DIR/certs"
    --tls-cert-file "$K8S_DIR/apiserver.crt" --tls-private-key-file "$K8S_DIR/apiserver.key"
    --client-ca-file "$K8S_CA" --token-auth-file "$K8S_DIR/tokens.csv"
    --service-account-issuer https://kubernetes.default.svc
    --service-account-key-file "$K8S_DIR/sa.key" --service-account-signing-key-file "$K8S_DIR/sa.key"
    --service-cluster-ip-range 10.0.0.0/24 --endpoint-reconciler-type none
    --authorization-mode Node,RBAC --enable-priority-and-fairness=false
    --disable-admission-plugins ServiceAccount
    --allow-privileged=true
    --profiling=false
  )
  k8s_start_apiserver || return 1

  export K8S_KUBECONFIG=$K8S_DIR/kubeconfig
  k8s_write_kubeconfig "$K8S_KUBECONFIG" "$K8S_ADMIN_TOKEN" admin
  k8s_log "etcd $K8S_ETCD and kube-apiserver $K8S_API ready in $((SECONDS - t0)) s (dir $K8S_DIR)"
}

# k8s_write_kubeconfig FILE TOKEN [USER [NAMESPACE]]: a kubeconfig for this API server that
# authenticates with TOKEN (e.g. a ServiceAccount token from k8s_sa_token).
k8s_write_kubeconfig() {
  local file=$1 token=$2 user=${3:-user} ns=${4:-default}
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: clusterd-test
    cluster:
      server: $K8S_API
      certificate-authority: $K8S_CA
users:
  - name: $user
    user:
      token: $token
contexts:
  - name: $user@clusterd-test
    context:
      cluster: clusterd-test
      user: $user
      namespace: $ns
current-context: $user@clusterd-test
EOF
  chmod 600 "$file"
}

# k8s_stop: stops both servers and removes $K8S_DIR. Safe to call twice, or after a failed start.
k8s_stop() {
  if [[ -n ${K8S_GUARD_PID-} ]]; then
    kill "$K8S_GUARD_PID" 2>/dev/null || true
    wait "$K8S_GUARD_PID" 2>/dev/null || true
    K8S_GUARD_PID=
  fi
  k8s_stop_control_loop
  k8s_stop_apiserver
  if [[ -n ${K8S_ETCD_PID-} ]]; then
    k8s_kill_wait "$K8S_ETCD_PID"
    K8S_ETCD_PID=
  fi
  if [[ -n ${K8S_DIR-} && -d $K8S_DIR ]]; then
    if [[ -n ${K8S_KEEP_DIR-} ]]; then k8s_log "kept $K8S_DIR"; else rm -rf "$K8S_DIR"; fi
  fi
}

# k8s_etcd_revision: etcd's current revision (the API server's newest resourceVersion).
k8s_etcd_revision() {
  curl -fsS --max-time 5 -X POST "$K8S_ETCD/v3/kv/range" -d '{"key":"AA=="}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])'
}

# k8s_compact_etcd: compacts etcd's history up to its current revision (printed), through its
# HTTP/JSON gateway. The API server's watch cache still serves older resourceVersions until
# k8s_restart_apiserver; after that, a watch from before the revision gets a 410 Gone
# (an ERROR event with code 410) and a list with such a resourceVersion is refused.
k8s_compact_etcd() {
  local rev
  rev=$(k8s_etcd_revision) || return 1
  curl -fsS --max-time 30 -X POST "$K8S_ETCD/v3/kv/compaction" \
    -d "{\"revision\": \"$rev\", \"physical\": true}" >/dev/null || return 1
  echo "$rev"
}

# k8s_create_namespace NAME: creates it (an existing one is fine).
k8s_create_namespace() {
  local code
  code=$(k8s_code POST /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$1\"}}")
  [[ $code == 201 || $code == 409 ]] || {
    k8s_log "creating namespace $1: HTTP $code"
    return 1
  }
}

# k8s_sa_token NAMESPACE SERVICEACCOUNT [SECONDS]: prints a token for the ServiceAccount,
# issued through the TokenRequest API (default lifetime 3600 s).
k8s_sa_token() {
  local body
  body="{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenRequest\",\"spec\":{\"expirationSeconds\":${3:-3600}}}"
  K8S_TOKEN= k8s_api POST "/api/v1/namespaces/$1/serviceaccounts/$2/token" "$body" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["token"])'
}

# k8s_apply_podgroup_crd: creates the Volcano PodGroup CRD (test/k8s/podgroup-crd.json,
# scheduling.volcano.sh/v1beta1) and waits until podgroups are served.
k8s_apply_podgroup_crd() {
  local code
  code=$(k8s_code POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions "@$K8S_LIB_ROOT/test/k8s/podgroup-crd.json")
  [[ $code == 201 || $code == 409 ]] || {
    k8s_log "creating the PodGroup CRD: HTTP $code"
    return 1
  }
  k8s_wait 30 "podgroups.scheduling.volcano.sh served" k8s_api GET /apis/scheduling.volcano.sh/v1beta1/podgroups
}

# k8s_start_control_loop: the rest of a cluster's control loop next to the API server that
# k8s_start started, from scripts/k8s-tools.sh --control-loop (cached like the API server):
#  - kube-scheduler (default profile);
#  - kube-controller-manager with the controllers a workload needs (job, replicaset,
#    deployment, statefulset, garbage collector, node lifecycle with taint-based eviction,
#    pod GC, disruption, namespace, serviceaccount), its node monitor fast: a node whose
#    lease is not renewed for $K8S_NODE_GRACE (default 8s) is NotReady / Unknown;
#  - and gets kwok ready: k8s_add_kwok_node adds a node with a simulated kubelet of its own (one
#    kwok process per node, so that one node can be lost): the node becomes Ready and renews
#    its Lease every second; a pod bound to it becomes Running; a deleted one is removed.
#    kwok's own stage manifests (node-initialize, node-heartbeat-with-lease, pod-ready,
#    pod-delete; not pod-complete), read from its module.
# Logs: $K8S_DIR/kube-scheduler.log, kube-controller-manager.log, kwok-NODE.log. k8s_stop stops
# them all. Exports K8S_SCHEDULER_PID, K8S_CONTROLLER_MANAGER_PID, K8S_KWOK (the binary).
K8S_CONTROLLERS=job-controller,replicaset-controller,deployment-controller,statefulset-controller
K8S_CONTROLLERS+=,garbage-collector-controller,node-lifecycle-controller,taint-eviction-controller
K8S_CONTROLLERS+=,pod-garbage-collector-controller,disruption-controller,namespace-controller
K8S_CONTROLLERS+=,serviceaccount-controller,serviceaccount-token-controller
k8s_start_control_loop() {
  local bin stages t0=$SECONDS
  bin=$(bash "$K8S_LIB_ROOT/scripts/k8s-tools.sh" --control-loop) || {
    k8s_log "scripts/k8s-tools.sh --control-loop failed"
    return 1
  }
  stages=$(PATH=/usr/local/go/bin:$PATH go env GOMODCACHE)/sigs.k8s.io/kwok@v${KWOK_VERSION:-0.8.0}/kustomize/stage
  local f
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/fast/pod-ready \
    pod/fast/pod-delete; do
    [[ -f $stages/$f.yaml ]] || {
      k8s_log "kwok's stage $stages/$f.yaml is missing (scripts/k8s-tools.sh --control-loop downloads it)"
      return 1
    }
    cat "$stages/$f.yaml"
    echo ---
  done >"$K8S_DIR/kwok-stages.yaml"
  # Each serves its health checks on a free port (TLS, self-signed): the
  # start waits for them below.
  local sched_port cm_port
  sched_port=$(k8s_free_port)
  cm_port=$(k8s_free_port)
  "$bin/kube-scheduler" --kubeconfig "$K8S_KUBECONFIG" --leader-elect=false --bind-address 127.0.0.1 \
    --secure-port "$sched_port" \
    >"$K8S_DIR/kube-scheduler.log" 2>&1 &
  K8S_SCHEDULER_PID=$!
  echo "$K8S_SCHEDULER_PID" >"$K8S_DIR/loop-scheduler.pid"
  "$bin/kube-controller-manager" --kubeconfig "$K8S_KUBECONFIG" --leader-elect=false --bind-address 127.0.0.1 \
    --secure-port "$cm_port" \
    --use-service-account-credentials=false --service-account-private-key-file "$K8S_DIR/sa.key" \
    --root-ca-file "$K8S_CA" --controllers "$K8S_CONTROLLERS" \
    --node-monitor-period 1s --node-monitor-grace-period "${K8S_NODE_GRACE:-8s}" \
    --concurrent-job-syncs 2 >"$K8S_DIR/kube-controller-manager.log" 2>&1 &
  K8S_CONTROLLER_MANAGER_PID=$!
  echo "$K8S_CONTROLLER_MANAGER_PID" >"$K8S_DIR/loop-controller-manager.pid"
  K8S_KWOK=$bin/kwok
  export K8S_SCHEDULER_PID K8S_CONTROLLER_MANAGER_PID K8S_KWOK
  # Each is up once its check answers ok (the scheduler's /readyz: its
  # informers synced from the API server; the controller manager's
  # /healthz: it serves no /readyz); one that exits first, or is not up
  # within K8S_START_TIMEOUT, fails the start with its log.
  k8s_wait_up "$K8S_SCHEDULER_PID" "$K8S_DIR/kube-scheduler.log" kube-scheduler \
    k8s_answers_ok "https://127.0.0.1:$sched_port/readyz" || return 1
  k8s_wait_up "$K8S_CONTROLLER_MANAGER_PID" "$K8S_DIR/kube-controller-manager.log" kube-controller-manager \
    k8s_answers_ok "https://127.0.0.1:$cm_port/healthz" || return 1
  k8s_log "kube-scheduler and kube-controller-manager started in $((SECONDS - t0)) s"
}

k8s_stop_control_loop() {
  local f
  [[ -n ${K8S_DIR-} ]] || return 0
  for f in "$K8S_DIR"/loop-*.pid; do
    [[ -f $f ]] || continue
    k8s_kill_wait "$(cat "$f")"
    rm -f "$f"
  done
}

# k8s_add_kwok_node NAME [CHIPS [RESOURCE]]: a node with a simulated kubelet of its own (a kwok
# process that manages this node alone, log $K8S_DIR/kwok-NAME.log), with CHIPS (default 8) of
# RESOURCE (default huawei.com/Ascend910) in its capacity and allocatable, as the Ascend device
# plugin would report them; returns once it is Ready.
k8s_add_kwok_node() {
  local name=$1 chips=${2:-8} resource=${3:-huawei.com/Ascend910}
  local res="{\"cpu\":\"64\",\"memory\":\"512Gi\",\"pods\":\"110\",\"$resource\":\"$chips\"}"
  k8s_api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$name\",
    \"annotations\":{\"kwok.x-k8s.io/node\":\"fake\"},\"labels\":{\"kubernetes.io/hostname\":\"$name\",
    \"type\":\"kwok\"}},\"status\":{\"capacity\":$res,\"allocatable\":$res}}" >/dev/null || return 1
  "$K8S_KWOK" --kubeconfig "$K8S_KUBECONFIG" --config "$K8S_DIR/kwok-stages.yaml" --manage-single-node "$name" \
    --node-lease-duration-seconds 4 --server-address "127.0.0.1:$(free_port)" >"$K8S_DIR/kwok-$name.log" 2>&1 &
  echo "$!" >"$K8S_DIR/loop-kwok-$name.pid"
  k8s_wait 60 "node $name Ready (kwok)" k8s_node_ready "$name"
}

# k8s_node_ready NAME: its Ready condition is True.
k8s_node_ready() {
  k8s_api GET "/api/v1/nodes/$1" | python3 -c '
import json, sys
c = [c for c in json.load(sys.stdin).get("status", {}).get("conditions", []) if c["type"] == "Ready"]
sys.exit(0 if c and c[0]["status"] == "True" else 1)'
}

# k8s_set_node_chips NAME CHIPS [RESOURCE]: capacity and allocatable of RESOURCE, as the device
# plugin reports them to the kubelet (an unhealthy chip leaves the count).
k8s_set_node_chips() {
  local resource=${3:-huawei.com/Ascend910}
  k8s_api PATCH "/api/v1/nodes/$1/status" \
    "{\"status\":{\"capacity\":{\"$resource\":\"$2\"},\"allocatable\":{\"$resource\":\"$2\"}}}" \
    application/strategic-merge-patch+json >/dev/null
}

# k8s_lose_node NAME: its simulated kubelet dies (kill -9, as when the machine loses power): its
# Lease is no longer renewed, after $K8S_NODE_GRACE the node-lifecycle controller marks it
# Unknown, and its pods stay where they are (a deleted one stays Terminating).
k8s_lose_node() {
  local f=$K8S_DIR/loop-kwok-$1.pid pid
  pid=$(cat "$f")
  { kill -9 "$pid" && wait "$pid"; } 2>/dev/null || true  # its status is 137
  rm -f "$f"
}

# Run as a program (not sourced), for a test driver in another language (a GoogleTest fixture):
#   bash test/k8s/lib.sh serve ENV_FILE
# starts the cluster, writes KEY=VALUE lines (the K8S_* variables above) to ENV_FILE once it is
# ready (atomically: wait for the file), and keeps it running until SIGTERM or SIGINT, then
# stops it and removes ENV_FILE. SIGUSR1 restarts the API server; ENV_FILE is rewritten with
# the new K8S_APISERVER_PID and K8S_RESTARTS incremented once it is ready again.
k8s_write_env() {
  local v
  for v in K8S_DIR K8S_API K8S_CA K8S_ADMIN_TOKEN K8S_KUBECONFIG K8S_ETCD K8S_BIN K8S_APISERVER_PID K8S_ETCD_PID K8S_RESTARTS; do
    echo "$v=${!v-}"
  done >"$1.tmp" && mv "$1.tmp" "$1"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  if [[ ${1-} != serve || -z ${2-} ]]; then
    echo "usage: bash test/k8s/lib.sh serve ENV_FILE" >&2
    exit 2
  fi
  K8S_ENV_FILE=$2 K8S_RESTARTS=0 K8S_SERVE_STOP=
  trap 'k8s_stop; rm -f "$K8S_ENV_FILE"' EXIT
  trap 'K8S_SERVE_STOP=1' TERM INT
  trap 'k8s_restart_apiserver && K8S_RESTARTS=$((K8S_RESTARTS + 1)) && k8s_write_env "$K8S_ENV_FILE"' USR1
  k8s_start || exit 1
  k8s_write_env "$K8S_ENV_FILE"
  # wait returns early whenever a trapped signal arrives; the loop resumes after USR1.
  tail -f /dev/null &
  K8S_SERVE_TAIL=$!
  until [[ -n $K8S_SERVE_STOP ]]; do wait "$K8S_SERVE_TAIL" || true; done
  kill "$K8S_SERVE_TAIL" 2>/dev/null
  wait "$K8S_SERVE_TAIL" 2>/dev/null
  exit 0
fi
