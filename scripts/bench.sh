#!/usr/bin/env bash
# Builds (scripts/build.sh) and runs the full benchmark against a real clusterd:
# prints the table and writes bench-results.json in the repository root.
# Extra arguments go to clusterd-bench, e.g. scripts/bench.sh --duration 20.
# See docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec build/bin/clusterd-bench --json bench-results.json "$@"
