#!/usr/bin/env bash
# ASan + UBSan build of the whole tree in build-asan/ (clang, Ninja, ccache) and
# the ctest suite run in it. Any sanitizer report fails the test that hit it:
# ASan and LSan stop the process, UBSan is built without recovery.
#
# The one instrumented build of the tree: it is configured with CLUSTERD_FUZZ,
# so every library also carries libFuzzer's coverage instrumentation
# (-fsanitize=fuzzer-no-link) and the same build links the libFuzzer targets
# that scripts/fuzz.sh runs (its default build dir is this one). The ctest
# suite, the process tests' clusterd and noded included, runs on that code.
# SANITIZE_COMPILER=gcc builds with g++ instead (no fuzz targets then; its own
# default dir build-asan-gcc).
#
#   scripts/sanitize.sh                 # configure if needed, build, run every test
#   scripts/sanitize.sh -R Outbox       # extra arguments go to ctest
#   JOBS=4 scripts/sanitize.sh          # build parallelism (default 2)
#   scripts/sanitize.sh --configure-only  # configure build-asan/ and stop (scripts/fuzz.sh uses it)
#   scripts/sanitize.sh --build-only      # configure and build, run nothing (scripts/test.sh --all
#                                         # builds in the background while other suites run)
#
# jemalloc is off here (CLUSTERD_USE_JEMALLOC=OFF): ASan must own malloc.
# Tests excluded, each with its reason, are listed in SANITIZE_EXCLUDE below and
# in docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-2}"
COMPILER="${SANITIZE_COMPILER:-clang}"
if [[ $COMPILER == gcc ]]; then
  BUILD_DIR="${SANITIZE_BUILD_DIR:-build-asan-gcc}"
  SAN_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
  DEBUG_INFO="-g"
  config=(-DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc
          -DCMAKE_CXX_FLAGS="$SAN_FLAGS" -DCMAKE_C_FLAGS="$SAN_FLAGS")
else
  BUILD_DIR="${SANITIZE_BUILD_DIR:-build-asan}"
  # CLUSTERD_FUZZ adds -fsanitize=fuzzer-no-link,address,undefined
  # -fno-sanitize-recover=undefined -fno-omit-frame-pointer everywhere.
  # Line tables are all a sanitizer report's stack trace needs, at a fraction
  # of full debug info's compile time (use -g by hand for gdb).
  DEBUG_INFO="${SANITIZE_DEBUG_INFO:--gline-tables-only}"
  config=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCLUSTERD_FUZZ=ON)
fi

# Tests that cannot run under the sanitizers, as a ctest -E regex. Empty: every
# test runs. Add one only with the reason next to it.
SANITIZE_EXCLUDE=""
# Tests that run the process out of file descriptors on purpose. UBSan's vptr
# check needs two free descriptors (a pipe) to look at a vtable it has not seen
# before, and without them reports a sound object as having an invalid vptr
# (test/ubsan-fd-exhaustion.supp says when it happened). They run on their own
# after the rest, with that check's reports suppressed; every other check stays on.
FD_EXHAUSTION_TESTS='^(HttpServerTest\.AcceptRecoversFromEmfile|FdExhaustionTest\..*)$'

# halt_on_error: the first error ends the process (the default for ASan, said
# for clarity). detect_leaks: gRPC, protobuf and RocksDB free what they own at
# exit or keep it reachable from globals, so leak checking works and stays on.
# strict_string_checks/check_initialization_order/detect_stack_use_after_return
# catch more at a modest cost. abort_on_error=0 keeps the exit code (1) and the
# report instead of a core dump.
export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1:print_summary=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:print_summary=1}"
# Leaks that are not ours, each with its reason: test/lsan.supp.
export LSAN_OPTIONS="${LSAN_OPTIONS:-print_suppressions=0:suppressions=$PWD/test/lsan.supp}"

# ccache hits across checkouts in other folders (CI builds a fresh clone):
# paths under the tree are hashed relative to it.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# Depend mode: on a miss the compiler runs once (its -MD output names the headers), not
# the preprocessor first and then the compiler (about 0.5 s less per translation unit cold).
export CCACHE_DEPEND="${CCACHE_DEPEND:-1}"
start=$(date +%s)
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  # Debug keeps assertions on; -O1 keeps the instrumented tests fast enough.
  cmake -S . -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 $DEBUG_INFO" -DCMAKE_C_FLAGS_DEBUG="-O1 $DEBUG_INFO" \
    "${config[@]}" -DCLUSTERD_USE_JEMALLOC=OFF -DCLUSTERD_BUILD_BENCH=OFF
fi
[[ ${1:-} == --configure-only ]] && exit 0
# ctest lists each test binary's cases before it runs them (gtest discovery,
# PRE_TEST), with the sanitizer options above in force.
cmake --build "$BUILD_DIR" -j"$JOBS"
built=$(date +%s)
echo "== sanitize: built in $((built - start)) s"
[[ ${1:-} == --build-only ]] && exit 0

ctest_args=(--output-on-failure -j2 --timeout 900)
exclude=$FD_EXHAUSTION_TESTS
[[ -n $SANITIZE_EXCLUDE ]] && exclude+="|$SANITIZE_EXCLUDE"
(cd "$BUILD_DIR" && ctest "${ctest_args[@]}" -E "$exclude" "$@")
# With a selection of its own (extra arguments) the caller runs what it chose.
if (($# == 0)); then
  fd_supp=$PWD/test/ubsan-fd-exhaustion.supp
  (cd "$BUILD_DIR" && UBSAN_OPTIONS="$UBSAN_OPTIONS:suppressions=$fd_supp" \
    ctest "${ctest_args[@]}" -R "$FD_EXHAUSTION_TESTS")
fi
echo "== sanitize: tests in $(($(date +%s) - built)) s, $(($(date +%s) - start)) s in all"
