#!/usr/bin/env bash
# Style and static checks (docs/testing.md):
#   - clang-format: every C++ file of the tree formatted as .clang-format says
#     (fix with: clang-format -i FILE...);
#   - clang-tidy (.clang-tidy: bug patterns, needless copies, naming) on the
#     product's .cc files that changed since LINT_BASE (default: the previous
#     commit), or on all of them with LINT_TIDY=all; LINT_TIDY=off skips it.
#     Needs build/compile_commands.json (scripts/build.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in clang-format clang-tidy; do
  command -v "$tool" >/dev/null || { echo "lint: $tool missing (run scripts/deps.sh)" >&2; exit 1; }
done

mapfile -t cxx < <(git ls-files '*.cc' '*.h' | grep -v '^test/noded/fixtures/')
echo "lint: clang-format on ${#cxx[@]} files"
clang-format --dry-run --Werror "${cxx[@]}"

mode="${LINT_TIDY:-changed}"
[[ $mode == off ]] && exit 0
[[ -f build/compile_commands.json ]] || { echo "lint: build/compile_commands.json missing (run scripts/build.sh)" >&2; exit 1; }
product='^(clusterd|noded|common|clusterctl)/.*\.cc$'
if [[ $mode == all ]]; then
  mapfile -t tidy < <(git ls-files | grep -E "$product")
else
  base="${LINT_BASE:-HEAD~1}"
  git rev-parse -q --verify "$base^{commit}" >/dev/null || base=$(git rev-list --max-parents=0 HEAD | tail -n 1)
  mapfile -t tidy < <(git diff --name-only --diff-filter=d "$base" -- | grep -E "$product" || true)
fi
if ((${#tidy[@]} == 0)); then
  echo "lint: clang-tidy: no product .cc file changed"
  exit 0
fi
echo "lint: clang-tidy on ${#tidy[@]} files ($mode)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# One compile command per file, also for the unity build's batches (scripts/compile-db.py).
python3 scripts/compile-db.py build build/lint
run-clang-tidy -quiet -p build/lint -j "${JOBS:-2}" "${tidy[@]}" >"$log" 2>&1 || true
# Only findings in the tree's own files count (generated protos are not ours).
findings=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E "^$PWD/[^ ]+:[0-9]+:[0-9]+: (error|warning):" |
  grep -v "^$PWD/build" | sort -u || true)
if [[ -n $findings ]]; then
  echo "$findings" >&2
  echo "lint: clang-tidy found the problems above" >&2
  exit 1
fi
echo "lint: ok"
