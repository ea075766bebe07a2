#!/usr/bin/env bash
# generate.sh [DIR]: generates the Go stubs of proto/mindcluster into DIR/gen
# (DIR defaults to this directory; gen/ is never committed):
#   gen/fault     package faultpb     (fault.proto, package fault)
#   gen/pubfault  package pubfaultpb  (pubfault.proto, no package)
#   gen/job       package jobpb       (job.proto, package job)
#   gen/config    package configpb    (config.proto, package config)
#   gen/recover   package recoverpb   (recover.proto, no package: om.go)
# The protos name no go_package (they are MindCluster's, unchanged), so each
# file is mapped to its import path with protoc's M flags. Needs protoc and,
# on PATH, protoc-gen-go and protoc-gen-go-grpc.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="$(cd "${1:-$HERE}" && pwd)"
PROTO="$(cd "$HERE/../../../proto" && pwd)"
MODULE=clusterd.test/mcclient
export PATH="${GOPATH:-$HOME/go}/bin:$PATH"
for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "generate.sh: $tool not found on PATH" >&2; exit 1; }
done
maps=("Mmindcluster/fault.proto=$MODULE/gen/fault;faultpb" "Mmindcluster/pubfault.proto=$MODULE/gen/pubfault;pubfaultpb"
  "Mmindcluster/job.proto=$MODULE/gen/job;jobpb" "Mmindcluster/config.proto=$MODULE/gen/config;configpb"
  "Mmindcluster/recover.proto=$MODULE/gen/recover;recoverpb")
go_opts=(--go_opt=module="$MODULE"); grpc_opts=(--go-grpc_opt=module="$MODULE")
for m in "${maps[@]}"; do go_opts+=(--go_opt="$m"); grpc_opts+=(--go-grpc_opt="$m"); done
rm -rf "$OUT/gen"
mkdir -p "$OUT/gen"
protoc -I "$PROTO" --go_out="$OUT" "${go_opts[@]}" --go-grpc_out="$OUT" "${grpc_opts[@]}" \
  mindcluster/fault.proto mindcluster/pubfault.proto mindcluster/job.proto mindcluster/config.proto \
  mindcluster/recover.proto
