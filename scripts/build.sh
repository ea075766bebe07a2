#!/usr/bin/env bash
# Configures (Ninja, ccache) and builds into build/; binaries land in build/bin.
#
#   scripts/build.sh                          # the whole tree (product, tests, benchmark)
#   scripts/build.sh clusterd noded           # only these targets (what the demo does)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}"
# -g1 (line tables and function names: what a backtrace or a profile needs) costs a
# fraction of full -g: a Boost.Beast translation unit compiles in 24 s instead of 63,
# and its object is 10 MB instead of 23, which the linker feels too (docs/testing.md).
# DEBUG_INFO=-g for gdb's variables; it applies when build/ is configured.
DEBUG_INFO="${DEBUG_INFO:--g1}"
JOBS="${JOBS:-2}"
# ccache hits across checkouts in other folders (CI builds a fresh clone):
# paths under the tree are hashed relative to it.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# Depend mode: on a miss the compiler runs once (its -MD output names the headers), not
# the preprocessor first and then the compiler (about 0.5 s less per translation unit cold).
export CCACHE_DEPEND="${CCACHE_DEPEND:-1}"
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $DEBUG_INFO -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 $DEBUG_INFO -DNDEBUG"
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j"$JOBS" "${targets[@]}"
