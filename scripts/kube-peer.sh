#!/usr/bin/env bash
# Builds bench/kube-peer (the benchmark's Kubernetes API server peer) into
# build/bin/clusterd-kube-peer unless that is newer than every file there, and
# prints the binary's path on stdout; logs go to stderr.
#
#   tools=$(scripts/k8s-tools.sh); bin=$(scripts/kube-peer.sh)
#   "$bin" --etcd "$tools/etcd" --kube-apiserver "$tools/kube-apiserver" \
#     --workdir /tmp/kube-peer --json kube-peer.json [--short]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
SRC=bench/kube-peer
BIN=build/bin/clusterd-kube-peer
log() { echo "kube-peer: $*" >&2; }

if [[ -x $BIN && -z $(find "$SRC" -newer "$BIN" -print -quit) ]]; then
  log "$BIN is up to date"
else
  # client-go v0.37's go.mod needs Go 1.26 or newer; Debian 12's golang-go is 1.19.
  gov=$(go env GOVERSION 2>/dev/null || echo go0)
  if [[ ! $gov =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 26)); then
    log "Go 1.26 or newer is needed (found ${gov}); install it in /usr/local/go"
    exit 1
  fi
  log "building $BIN (about 3 min cold on 2 CPUs)"
  mkdir -p build/bin
  (cd "$SRC" && go build -trimpath -o "../../$BIN.tmp" .)
  mv "$BIN.tmp" "$BIN"
fi
echo "$PWD/$BIN"
