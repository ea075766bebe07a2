#!/usr/bin/env bash
# Builds the libFuzzer targets (test/fuzz, clang, ASan+UBSan) in build-asan/
# (the instrumented build scripts/sanitize.sh runs the ctest suite in) and runs each for a bounded time, starting from its seed corpus in
# test/fuzz/corpus/<target>. Fails on the first crash, sanitizer report, leak,
# timeout or failed property check, and says where the input that did it is.
#
#   scripts/fuzz.sh                  # every target, 20 s each
#   scripts/fuzz.sh 10               # every target, 10 s each (what scripts/test.sh --all runs)
#   scripts/fuzz.sh 600              # every target, 10 minutes each
#   scripts/fuzz.sh 3600 outbox      # one target (or several), an hour
#   FUZZ_JOBS=2 scripts/fuzz.sh 600  # parallel fuzzing processes per target
#   FUZZ_PARALLEL=1 scripts/fuzz.sh  # one target at a time (default: one per core)
#
# Inputs a run finds that add coverage are kept in build-fuzz/corpus/<target>
# (not in the tree); crashing inputs in build-fuzz/artifacts/<target>/. The
# corpora stay in build-fuzz/ (FUZZ_WORK_DIR) whichever build the binaries come from.
# docs/testing.md says how to add a target and how to keep a new seed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-${FUZZ_SECONDS:-20}}"
shift || true
JOBS="${JOBS:-2}"
FUZZ_JOBS="${FUZZ_JOBS:-1}"
BUILD_DIR="${FUZZ_BUILD_DIR:-build-asan}"
WORK_DIR="${FUZZ_WORK_DIR:-build-fuzz}"
ALL_TARGETS=(npu_smi sim_http rules_config noded_config clusterd_config catalog label_selector page_token key_codec outbox pubfault checkpoint_manifest device_info)
JSON_TARGETS=" sim_http rules_config noded_config clusterd_config catalog device_info "
targets=("$@")
((${#targets[@]})) || targets=("${ALL_TARGETS[@]}")

# ccache hits across checkouts in other folders (CI builds a fresh clone):
# paths under the tree are hashed relative to it.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
start=$(date +%s)
# One instrumented build for the sanitizer ctest run and the fuzzers: the same
# configuration as scripts/sanitize.sh (clang, CLUSTERD_FUZZ, -O1, assertions on).
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  SANITIZE_BUILD_DIR="$BUILD_DIR" bash scripts/sanitize.sh --configure-only
fi
cmake --build "$BUILD_DIR" -j"$JOBS" --target fuzzers
echo "== fuzz: built in $(($(date +%s) - start)) s; ${SECONDS_PER_TARGET} s per target"

export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
# run_target <t>: one target for its time; its summary goes to $WORK_DIR/logs/<t>.result
# (first line "ok" or "FAILED"), its whole output to <t>.log.
run_target() {
  local t=$1 bin="$BUILD_DIR/fuzz-bin/fuzz_$1" seeds="test/fuzz/corpus/$1"
  local work="$WORK_DIR/corpus/$t" artifacts="$WORK_DIR/artifacts/$t" log="$WORK_DIR/logs/$t.log"
  local result="$WORK_DIR/logs/$t.result" t0 execs cov
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  local args=(-max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2560 -max_len=8192
              -print_final_stats=1 -artifact_prefix="$artifacts/")
  [[ $JSON_TARGETS == *" $t "* ]] && args+=(-dict=test/fuzz/json.dict)
  ((FUZZ_JOBS > 1)) && args+=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
  t0=$(date +%s)
  # The working corpus first: libFuzzer adds what it finds there, never to the seeds.
  if "$bin" "${args[@]}" "$work" "$seeds" >"$log" 2>&1; then
    execs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "ok: $t in $(($(date +%s) - t0)) s ($execs inputs, $cov, corpus $(ls "$work" | wc -l) + $(ls "$seeds" | wc -l) seeds)" >"$result"
  else
    { echo "FAILED: $t; the end of $log:"
      tail -60 "$log"
      echo "fuzz: the input is in $artifacts/ (replay: $bin <file>; keep it as a regression seed in $seeds/)"
    } >"$result"
  fi
}

for t in "${targets[@]}"; do
  [[ -x $BUILD_DIR/fuzz-bin/fuzz_$t ]] || { echo "fuzz: no target $t ($BUILD_DIR/fuzz-bin/fuzz_$t)"; exit 2; }
  rm -f "$WORK_DIR/logs/$t.result"
done
# FUZZ_PARALLEL targets at a time (default: one per core, at most 2 here): each target still
# fuzzes for its own time on a core of its own, so the stage takes half as long on 2 cores.
# With FUZZ_JOBS > 1 a target already uses several cores: one target at a time then.
parallel="${FUZZ_PARALLEL:-$(( FUZZ_JOBS > 1 ? 1 : $(nproc) ))}"
((parallel >= 1)) || parallel=1
running=0
for t in "${targets[@]}"; do
  if ((running >= parallel)); then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait || true
failed=()
for t in "${targets[@]}"; do
  result="$WORK_DIR/logs/$t.result"
  if [[ -f $result ]] && head -1 "$result" | grep -q '^ok: '; then
    echo "fuzz: $(sed 's/^ok: //' "$result")"
  else
    if [[ -f $result ]]; then echo "fuzz: $(cat "$result")"; else echo "fuzz: $t FAILED (no result; see $WORK_DIR/logs/$t.log)"; fi
    failed+=("$t")
  fi
done
echo "== fuzz: $(($(date +%s) - start)) s in all"
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
