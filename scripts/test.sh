#!/usr/bin/env bash
# The project's tests, in two tiers (docs/testing.md says what each costs):
#
#   bash scripts/test.sh          # after a change: build, lint, the whole ctest suite, and the
#                                 # end-to-end checks that need no Go-built server (grpcurl,
#                                 # noded, recovery, helm render, status page)
#   bash scripts/test.sh --all    # everything (what .ci/run runs): the above, then the short
#                                 # benchmark, the Kubernetes (on a real control loop too), HA,
#                                 # MindCluster, API-tool and fault suites, the ASan+UBSan
#                                 # ctest run and the fuzzers
#
# Both install what is missing first (scripts/deps.sh). Every run ends with a table of its
# stages and their seconds, and says which caches were cold at the start.
# FUZZ_SECONDS (default 10 per target; 0 skips) and SANITIZE=0 shorten an --all run by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL=0
for arg in "$@"; do
  case $arg in
    --all) ALL=1 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

export GOPATH="${GOPATH:-$HOME/go}"
export PATH="$GOPATH/bin:$PATH"

# What was cached when the run began: a cold cache is what makes a run slow.
caches() {
  local files=0 k8s=cold go_tools=cold
  if command -v ccache >/dev/null 2>&1; then
    files=$(ccache --print-stats 2>/dev/null | awk '$1 == "files_in_cache" {print $2}')
  fi
  compgen -G "${CLUSTERD_K8S_CACHE:-$HOME/.cache/clusterd-k8s}/k8s-*/kube-apiserver" >/dev/null && k8s=warm
  [[ -x $GOPATH/bin/grpcurl && -x $GOPATH/bin/helm ]] && go_tools=warm
  echo "ccache: $([[ ${files:-0} -gt 0 ]] && echo "warm (${files} files)" || echo cold);" \
    "build/: $([[ -f build/build.ninja ]] && echo present || echo absent);" \
    "build-asan/: $([[ -f build-asan/build.ninja ]] && echo present || echo absent);" \
    "Go tools (grpcurl, helm): $go_tools; etcd + kube-apiserver: $k8s"
}
CACHES=$(caches)

# Free space: every test server refuses writes below its data dir's 256 MiB reserve, so a full
# disk fails hundreds of tests at once; say so once, before anything runs. The --all run needs
# about 12 GiB on a fresh machine (two build trees, the Go caches, etcd data of the suites).
free_gib() { df -Pk "$1" 2>/dev/null | awk 'NR == 2 {print int($4 / 1048576)}'; }
NEED_GIB=$([[ $ALL == 1 ]] && echo 12 || echo 6)
for dir in "${TMPDIR:-/tmp}" "$PWD"; do
  have=$(free_gib "$dir")
  if [[ -n $have && $have -lt $NEED_GIB ]]; then
    echo "test.sh: $dir has $have GiB free; this run needs about $NEED_GIB GiB" \
      "(tests and builds write there); free some space first" >&2
    exit 1
  fi
done

STAGES=()
SAN_PID="" SAN_LOG="" SAN_SECONDS="" SAN_WAITED=""
RUN_START=$(date +%s)
CURRENT=""
table() {
  local rc=$?
  echo
  echo "== stages ($([[ $ALL == 1 ]] && echo "scripts/test.sh --all" || echo "scripts/test.sh"))"
  printf '%-34s %8s\n' stage seconds
  local s
  for s in "${STAGES[@]}"; do printf '%-34s %8s\n' "${s%%=*}" "${s#*=}"; done
  [[ -n $CURRENT ]] && printf '%-34s %8s\n' "$CURRENT (FAILED)" "$(($(date +%s) - STAGE_START))"
  printf '%-34s %8s\n' total "$(($(date +%s) - RUN_START))"
  if [[ -n $SAN_PID ]]; then
    if kill -0 "$SAN_PID" 2>/dev/null; then
      kill -- -"$SAN_PID" 2>/dev/null || kill "$SAN_PID" 2>/dev/null || true
      echo "the background instrumented build was stopped unfinished (log: $SAN_LOG)"
    elif [[ -n $SAN_SECONDS ]]; then
      echo "the instrumented build ran in the background, niced, for $SAN_SECONDS s from the end of" \
        "the build stage; the run waited $SAN_WAITED s of that (sanitize/build)"
    fi
  fi
  echo "caches at the start: $CACHES"
  return $rc
}
trap table EXIT

# stage NAME COMMAND...: runs the command as one timed stage of the table.
stage() {
  local name=$1
  shift
  echo "== $name"
  CURRENT=$name
  STAGE_START=$(date +%s)
  "$@"
  STAGES+=("$name=$(($(date +%s) - STAGE_START))")
  CURRENT=""
}

ctest_main() { (cd build && ctest --output-on-failure -j2 --timeout 300); }

stage deps bash scripts/deps.sh
stage build bash scripts/build.sh
# clang-format on the tree, clang-tidy on what the last commit changed (docs/testing.md).
# --all: the instrumented build (clang, the whole tree again) starts now in the background at the
# lowest CPU priority, in its own process group, and uses what the suites below leave idle (they
# wait on processes, sockets and disks much of the time); the suites keep their CPU. Its stage
# further down waits for it. Measured in docs/testing.md.
if [[ $ALL == 1 && ${SANITIZE:-1} != 0 ]]; then
  SAN_LOG=$(mktemp -t sanitize-build.XXXXXX.log)
  SAN_START=$(date +%s)
  setsid -w nice -n 19 bash scripts/sanitize.sh --build-only >"$SAN_LOG" 2>&1 &
  SAN_PID=$!
  echo "== sanitize/build started in the background (log: $SAN_LOG)"
fi
# sanitize_build: waits for the background build; its log on failure.
sanitize_build() {
  local rc=0 waited=$(date +%s)
  wait "$SAN_PID" || rc=$?
  SAN_SECONDS=$(($(date +%s) - SAN_START)) SAN_WAITED=$(($(date +%s) - waited))
  if ((rc != 0)); then
    tail -n 80 "$SAN_LOG"
    echo "test.sh: the instrumented build failed (exit $rc; whole log: $SAN_LOG)" >&2
    return "$rc"
  fi
  grep -E '^== sanitize: built' "$SAN_LOG" || true
}
stage lint bash scripts/lint.sh
stage ctest ctest_main
stage e2e/grpcurl bash test/e2e/grpcurl_test.sh
stage e2e/noded bash test/e2e/noded_test.sh
stage e2e/validation bash test/e2e/validation_test.sh
stage e2e/progress bash test/e2e/progress_test.sh
stage e2e/nvml bash test/e2e/nvml_test.sh
stage e2e/recovery bash test/e2e/recovery_test.sh
stage e2e/pingmesh bash test/e2e/pingmesh_test.sh
stage e2e/domains bash test/e2e/domains_test.sh
stage e2e/helm bash test/e2e/helm_test.sh
stage e2e/status_page bash test/e2e/status_page_test.sh

if [[ $ALL == 1 ]]; then
  # etcd and kube-apiserver (built once from Go modules, cached under ~/.cache) for the
  # benchmark's scenario 10 and the Kubernetes and HA suites; the client-go driver.
  stage build/bench bash scripts/build.sh clusterd-bench
  stage go/k8s-tools bash scripts/k8s-tools.sh
  stage go/kube-peer bash scripts/kube-peer.sh
  stage go/control-loop bash scripts/k8s-tools.sh --control-loop
  k8s_bin=$(bash scripts/k8s-tools.sh 2>/dev/null)
  kube_peer=$(bash scripts/kube-peer.sh 2>/dev/null)
  # Figures printed, not asserted: it proves every scenario still runs.
  stage bench/short build/bin/clusterd-bench --short --json "$(mktemp -d)/bench-short.json" \
    --etcd "$k8s_bin/etcd" --kube-apiserver "$k8s_bin/kube-apiserver" --kube-peer "$kube_peer"
  stage k8s/helm_rbac bash test/k8s/helm_rbac_test.sh
  stage k8s/kubernetes_e2e bash test/k8s/kubernetes_e2e_test.sh
  stage k8s/no_volcano bash test/k8s/no_volcano_test.sh
  stage k8s/control_loop bash test/k8s/control_loop_test.sh
  stage k8s/security_e2e bash test/k8s/security_e2e_test.sh
  stage e2e/api_tools bash test/e2e/api_tools_test.sh
  # A real Prometheus (built from Go modules) scraping ClusterD and NodeD over TLS with a token.
  stage e2e/metrics_tls bash test/e2e/metrics_tls_test.sh
  stage e2e/mindcluster bash test/e2e/mindcluster_test.sh
  stage k8s/mindcluster_stack bash test/k8s/mindcluster_stack_test.sh
  stage k8s/mindcluster_superpod bash test/k8s/mindcluster_superpod_test.sh
  stage k8s/taskd_recover bash test/k8s/taskd_recover_test.sh
  stage k8s/chain bash test/k8s/chain_k8s_test.sh
  stage k8s/gpu bash test/k8s/gpu_k8s_test.sh
  stage k8s/validation bash test/k8s/validation_k8s_test.sh
  # High availability: 3 etcd members (the binary built above) and 3 replicas; then with TLS
  # to etcd; then on Kubernetes (the replicas label their pods for the Service).
  stage ha/ha_test python3 test/e2e/ha_test.py --etcd "$k8s_bin/etcd" --bin build/bin \
    --grpcurl "$(command -v grpcurl)"
  stage ha/tls env ETCD="$k8s_bin/etcd" bash test/e2e/ha_tls_test.sh
  stage ha/k8s_label bash test/k8s/ha_label_test.sh
  stage faults bash test/faults/run.sh
  # One instrumented build (clang, ASan+UBSan, libFuzzer coverage) in build-asan/, started in
  # the background after the build stage: the ctest suite runs there, and the fuzz targets link
  # from the same objects.
  if [[ ${SANITIZE:-1} != 0 ]]; then
    stage sanitize/build sanitize_build
    stage sanitize/ctest bash scripts/sanitize.sh
  fi
  if [[ ${FUZZ_SECONDS:-10} != 0 ]]; then
    stage fuzz bash scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
  fi
fi
echo "== all tests passed$([[ $ALL == 1 ]] || echo " (the quick tier; scripts/test.sh --all runs every suite)")"
