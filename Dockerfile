# syntax=docker/dockerfile:1
# The runtime image of ClusterD and NodeD (both binaries in one image; the Helm chart in
# charts/clusterd picks the command). Build from the repository root:
#
#   docker build -t clusterd:0.1.0 .
#
# scripts/check-image-libs.sh checks, without Docker, that the runtime stage's package list
# provides every shared library the binaries link; test/e2e/helm_test.sh runs it.

# ---- build: the toolchain and -dev packages of scripts/deps.sh --------------------------
FROM debian:12 AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git ca-certificates python3 \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      librocksdb-dev libzstd-dev libjemalloc-dev libboost-dev libspdlog-dev nlohmann-json3-dev \
      libssl-dev libyaml-cpp-dev \
      libgtest-dev libgmock-dev libbenchmark-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The test tree is configured too (it needs gtest), but only the two daemons are built.
RUN rm -rf build \
 && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build build --target clusterd noded \
 && strip --strip-debug build/bin/clusterd build/bin/noded

# ---- runtime: only the shared libraries the binaries link ------------------------------
FROM debian:12-slim AS runtime
# One package per line; scripts/check-image-libs.sh parses this list. libc6, libgcc-s1 and
# libstdc++6 come with debian:12-slim (apt needs them) and are not repeated here.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 \
      libgrpc29 \
      libprotobuf32 \
      libabsl20220623 \
      libre2-9 \
      libc-ares2 \
      libssl3 \
      zlib1g \
      libspdlog1.10 \
      libfmt9 \
      libsnappy1v5 \
      liblz4-1 \
      libzstd1 \
      libbz2-1.0 \
      libjemalloc2 \
      libyaml-cpp0.7 \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/clusterd /var/lib/noded \
 && chown 65532:65532 /var/lib/clusterd /var/lib/noded \
 && chmod 0700 /var/lib/clusterd /var/lib/noded
COPY --from=build /src/build/bin/clusterd /src/build/bin/noded /usr/local/bin/
# gRPC 8899 and HTTP 11253 (clusterd); HTTP 11255 (noded).
EXPOSE 8899 11253 11255
# Non-root (the "nonroot" id of distroless images); the chart runs NodeD as root only in
# its privileged mode.
USER 65532:65532
WORKDIR /var/lib/clusterd
CMD ["/usr/local/bin/clusterd", "--data-dir", "/var/lib/clusterd/data"]
