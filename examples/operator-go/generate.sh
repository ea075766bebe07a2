#!/usr/bin/env bash
# Generates the Go code for the clusterd.v1 protos into gen/clusterd/v1
# (package clusterdv1, import path clusterd.dev/examples/operator/gen/clusterd/v1).
# Needs protoc (Debian: apt-get install protobuf-compiler) and, on PATH,
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.1
# gen/ is not committed: run this before `go build`.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PROTO="$(cd "$HERE/../../proto" && pwd)"
MODULE=clusterd.dev/examples/operator
export PATH="${GOPATH:-$HOME/go}/bin:$PATH"
for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "generate.sh: $tool not found on PATH" >&2; exit 1; }
done

cd "$PROTO"
files=(clusterd/v1/*.proto)
# The protos say go_package "clusterd.dev/gen/go/clusterd/v1"; map each file into
# this module instead so that the example builds on its own.
maps=()
for f in "${files[@]}"; do maps+=("M$f=$MODULE/gen/clusterd/v1;clusterdv1"); done
go_opts=(--go_opt=module="$MODULE"); grpc_opts=(--go-grpc_opt=module="$MODULE")
for m in "${maps[@]}"; do go_opts+=(--go_opt="$m"); grpc_opts+=(--go-grpc_opt="$m"); done

rm -rf "$HERE/gen"
mkdir -p "$HERE/gen"
# Well-known types (google/protobuf/*.proto) come from protoc's own include dir.
protoc -I "$PROTO" --go_out="$HERE" "${go_opts[@]}" --go-grpc_out="$HERE" "${grpc_opts[@]}" "${files[@]}"
echo "generated $(ls "$HERE/gen/clusterd/v1" | wc -l) files in $HERE/gen/clusterd/v1"
