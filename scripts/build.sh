#!/usr/bin/env bash
# Configures (Ninja, ccache) and builds into build/; binaries land in build/bin.
#
#   scripts/build.sh                          # the whole tree (product, tests, benchmark)
#   scripts/build.sh clusterd noded           # only these targets (what the demo does)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}"
JOBS="${JOBS:-2}"
# ccache hits across checkouts in other folders (CI builds a fresh clone):
# paths under the tree are hashed relative to it.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE"
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j"$JOBS" "${targets[@]}"
