#!/usr/bin/env bash
# Runs every test: installs what is missing, builds, runs the unit, gRPC and
# process tests through ctest, then the end-to-end checks against a real
# clusterd with grpcurl.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
export PATH="${GOPATH:-$HOME/go}/bin:$PATH"
bash scripts/build.sh
echo "== lint: clang-format on the tree, clang-tidy on what the last commit changed (docs/testing.md)"
bash scripts/lint.sh
echo "== ctest"
(cd build && ctest --output-on-failure -j2 --timeout 300)
echo "== benchmark, short mode (figures printed, not asserted)"
# Scenario 10's peers: etcd and kube-apiserver (built once, cached; the
# Kubernetes tests below use the same binaries) and the client-go driver.
k8s_bin=$(bash scripts/k8s-tools.sh)
kube_peer=$(bash scripts/kube-peer.sh)
build/bin/clusterd-bench --short --json "$(mktemp -d)/bench-short.json" --etcd "$k8s_bin/etcd" \
  --kube-apiserver "$k8s_bin/kube-apiserver" --kube-peer "$kube_peer"
echo "== end-to-end"
bash test/e2e/grpcurl_test.sh
bash test/e2e/noded_test.sh
bash test/e2e/recovery_test.sh
bash test/e2e/helm_test.sh
bash test/k8s/helm_rbac_test.sh
bash test/k8s/kubernetes_e2e_test.sh
bash test/k8s/security_e2e_test.sh
bash test/e2e/api_tools_test.sh
bash test/e2e/mindcluster_test.sh
bash test/e2e/status_page_test.sh
# High availability: 3 etcd members (the binary built above) and 3 replicas.
python3 test/e2e/ha_test.py --etcd "$k8s_bin/etcd" --bin build/bin --grpcurl "$(command -v grpcurl)"
# ... with TLS to etcd (client certificates both ways).
ETCD="$k8s_bin/etcd" bash test/e2e/ha_tls_test.sh
# ... and on Kubernetes: the replicas label their pods for the Service (real API server).
bash test/k8s/ha_label_test.sh
bash test/faults/run.sh
# The instrumented builds come last: each is a build of the tree of its own
# (ccache makes a rerun cheap). FUZZ_SECONDS=0 skips the fuzzers, SANITIZE=0
# the ASan+UBSan build and its ctest run (a quicker local run; CI runs both).
if [[ ${FUZZ_SECONDS:-20} != 0 ]]; then
  echo "== fuzzers: each libFuzzer target for a bounded time (docs/testing.md)"
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
if [[ ${SANITIZE:-1} != 0 ]]; then
  echo "== sanitizers: ASan+UBSan build in build-asan, ctest there (docs/testing.md)"
  bash scripts/sanitize.sh
fi
echo "== all tests passed"
