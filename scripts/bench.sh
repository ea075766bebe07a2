#!/usr/bin/env bash
# Builds (scripts/build.sh) and runs the full benchmark against a real clusterd:
# prints the table and writes bench-results.json in the repository root.
# Installs ghz (scenario 9's load generator) into $GOPATH/bin (default
# $HOME/go/bin) when it is missing. Extra arguments go to clusterd-bench,
# e.g. scripts/bench.sh --duration 20 or scripts/bench.sh --only 5,6.
# See docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
export GOPATH="${GOPATH:-$HOME/go}"
export PATH="$GOPATH/bin:$PATH"
if ! command -v ghz >/dev/null 2>&1; then
  echo "bench: installing ghz into $GOPATH/bin"
  go install github.com/bojand/ghz/cmd/ghz@latest
fi
exec build/bin/clusterd-bench --json bench-results.json "$@"
