#!/usr/bin/env bash
# Builds (scripts/build.sh) and runs the full benchmark against a real clusterd:
# prints the table and writes bench-results.json in the repository root.
# Installs ghz (scenario 9's load generator) into $GOPATH/bin (default
# $HOME/go/bin) when it is missing, and builds scenario 10's peers (etcd and
# kube-apiserver: scripts/k8s-tools.sh; the client-go driver:
# scripts/kube-peer.sh). Extra arguments go to clusterd-bench,
# e.g. scripts/bench.sh --duration 20 or scripts/bench.sh --only 5,6.
# See docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh all clusterd-bench
export GOPATH="${GOPATH:-$HOME/go}"
export PATH="$GOPATH/bin:$PATH"
if ! command -v ghz >/dev/null 2>&1; then
  echo "bench: installing ghz into $GOPATH/bin"
  go install github.com/bojand/ghz/cmd/ghz@latest
fi
k8s_bin=$(bash scripts/k8s-tools.sh)
kube_peer=$(bash scripts/kube-peer.sh)
exec build/bin/clusterd-bench --json bench-results.json --etcd "$k8s_bin/etcd" \
  --kube-apiserver "$k8s_bin/kube-apiserver" --kube-peer "$kube_peer" "$@"
