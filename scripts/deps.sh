#!/usr/bin/env bash
# Installs everything the build, the tests and the demo need on a fresh
# Debian 12 machine. Idempotent: installs only what is missing.
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake ninja-build ccache mold pkg-config git curl ca-certificates python3 python3-venv
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libzstd-dev libjemalloc-dev libboost-dev libspdlog-dev nlohmann-json3-dev
  libssl-dev libyaml-cpp-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  golang-go
  clang libclang-rt-14-dev clang-format clang-tidy
  chromium chromium-driver python3-selenium
)
GRPCURL_VERSION=v1.9.4

missing=()
for p in "${APT_PACKAGES[@]}"; do
  # golang-go is only needed when no go is on the PATH already.
  if [[ $p == golang-go ]] && command -v go >/dev/null 2>&1; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

export GOPATH="${GOPATH:-$HOME/go}"
export PATH="$GOPATH/bin:$PATH"
if ! command -v grpcurl >/dev/null 2>&1; then
  echo "deps: installing grpcurl ${GRPCURL_VERSION} into $GOPATH/bin"
  go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@${GRPCURL_VERSION}"
fi
echo "deps: ok"
