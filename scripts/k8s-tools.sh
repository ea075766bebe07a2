#!/usr/bin/env bash
# Builds a real etcd and kube-apiserver from the Go module proxy for the
# Kubernetes end-to-end tests (docs/kubernetes.md, docs/testing.md) and prints
# the directory that holds them. Neither is packaged for Debian 12 at a version
# Kubernetes supports, and `go install` refuses both (their modules carry
# replace directives), so each is built from a scratch module. The binaries are
# cached under $HOME/.cache/clusterd-k8s/<version>: a second run takes a second.
#
#   scripts/k8s-tools.sh          build what is missing, print the bin directory
#   scripts/k8s-tools.sh --control-loop
#                                 also kube-scheduler, kube-controller-manager (the same
#                                 scratch module) and kwok (simulated kubelets): the rest of
#                                 a control loop for test/k8s/control_loop_test.sh
#   K8S_VERSION=1.37.2 ETCD_VERSION=3.6.16 KWOK_VERSION=0.8.0 override the versions
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
control_loop=false
case ${1-} in
  "") ;;
  --control-loop) control_loop=true ;;
  *) echo "usage: scripts/k8s-tools.sh [--control-loop]" >&2; exit 2 ;;
esac
export PATH=/usr/local/go/bin:$PATH
CACHE=${CLUSTERD_K8S_CACHE:-$HOME/.cache/clusterd-k8s}
BIN=$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION
mkdir -p "$BIN"
log() { echo "k8s-tools: $*" >&2; }
# kube-apiserver 1.37's go.mod needs Go 1.26 or newer; Debian 12's golang-go is 1.19.
gov=$(go env GOVERSION 2>/dev/null || echo go0)
if [[ ! $gov =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 26)); then
  log "Go 1.26 or newer is needed (found ${gov}); install it in /usr/local/go"
  exit 1
fi

# version_of BINARY: its --version output. Captured whole, not piped into `grep -q`: with
# pipefail, grep leaving early makes the binary die of SIGPIPE and the check fail (a rebuild).
version_of() { "$1" --version 2>/dev/null || true; }
if [[ $(version_of "$BIN/etcd") != *"etcd Version: $ETCD_VERSION"* ]]; then
  log "building etcd $ETCD_VERSION (about 1.5 min cold)"
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  (cd "$work" && go mod init clusterd.local/etcd >/dev/null 2>&1 &&
     go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1 &&
     go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3 &&
     mv "$BIN/etcd.tmp" "$BIN/etcd")
  rm -rf "$work"; trap - EXIT
fi

want="v$K8S_VERSION"
# build_kubernetes CMD...: builds k8s.io/kubernetes/cmd/CMD for each CMD in one scratch module
# (one `go build`, so the packages they share compile once) into $BIN.
build_kubernetes() {
  local work minor staging_version cmd
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  minor=${K8S_VERSION#*.}; minor=${minor%%.*}
  staging_version="v0.${K8S_VERSION#*.}"
  (
    cd "$work"
    go mod init clusterd.local/kubernetes >/dev/null 2>&1
    go mod download -json "k8s.io/kubernetes@$want" >/dev/null
    modfile=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$want.mod
    # Every staging module k8s.io/kubernetes replaces with ./staging/... is
    # replaced here with its published version of the same release.
    {
      echo "require k8s.io/kubernetes $want"
      grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$modfile" |
        awk -v v="$staging_version" '{print "replace " $1 " => " $1 " " v}'
    } >>go.mod
    pkg=k8s.io/component-base/version
    mkdir out
    GOFLAGS=-mod=mod go build -trimpath -o out/ \
      -ldflags "-s -w -X $pkg.gitVersion=$want -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor" \
      "${@/#/k8s.io/kubernetes/cmd/}"
    for cmd in "$@"; do mv "out/$cmd" "$BIN/$cmd"; done
  )
  rm -rf "$work"; trap - EXIT
}
has_version() { [[ $(version_of "$BIN/$1") == "Kubernetes $want" ]]; }

if ! has_version kube-apiserver; then
  log "building kube-apiserver $K8S_VERSION (5-11 min cold on 2 CPUs)"
  build_kubernetes kube-apiserver
fi
if $control_loop; then
  missing=()
  for cmd in kube-scheduler kube-controller-manager; do has_version "$cmd" || missing+=("$cmd"); done
  if ((${#missing[@]})); then
    log "building ${missing[*]} $K8S_VERSION (about 2 min each once kube-apiserver is built)"
    build_kubernetes "${missing[@]}"
  fi
  # kwok has no replace directives: `go install` builds it. Its stage manifests ship in its
  # module, which stays in the module cache: the harness reads them from there.
  kwok_dir=$CACHE/kwok-$KWOK_VERSION
  if [[ $(version_of "$kwok_dir/kwok") != *"kwok version v$KWOK_VERSION "* ]]; then
    log "building kwok $KWOK_VERSION (about 3 min cold)"
    mkdir -p "$kwok_dir"
    GOBIN=$kwok_dir GOFLAGS=-mod=mod go install "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  fi
  go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" >/dev/null 2>&1 || true
  ln -sf "$kwok_dir/kwok" "$BIN/kwok"
fi
echo "$BIN"
