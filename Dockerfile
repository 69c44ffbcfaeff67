# syntax=docker/dockerfile:1
# The metacontroller image: one static binary at /usr/bin/metacontroller (as upstream's image,
# so `command:` in existing manifests and Helm values keeps working) on an empty base,
# running as the non-root user 65532.
#
# Release build (compiles inside the builder image):
#   docker build -t ghcr.io/metacontroller-rs/metacontroller:v0.1.0 .
# From a binary built on the host (what hack/build-image.sh does, offline):
#   cargo build --profile dist --locked --target x86_64-unknown-linux-musl -p metacontroller \
#     --no-default-features
#   docker build --build-arg BINARY_SOURCE=prebuilt -t metacontroller:dev .
#
# Without the embedded API server (--no-default-features): `dev` and offline `render` refuse in
# the image; 30% smaller binary (docs/src/operations.md, "Container image").
#
# TLS roots: there is no CA bundle in the image; the API server's CA comes from the service
# account, and HTTPS hooks without a caBundle fall back to the bundled Mozilla roots.

# The toolchain the repository is tested with.
ARG RUST_VERSION=1.95
ARG TARGET=x86_64-unknown-linux-musl
# "build" compiles in the builder stage; "prebuilt" copies target/<TARGET>/dist/metacontroller
# (profile `dist`: whole-program optimisation for size, see Cargo.toml).
ARG BINARY_SOURCE=build

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
ARG TARGET
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add "${TARGET}"
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --target "${TARGET}" -p metacontroller --bin metacontroller \
      --no-default-features \
 && mkdir -p /out \
 && cp "target/${TARGET}/dist/metacontroller" /out/metacontroller

FROM scratch AS prebuilt
ARG TARGET
COPY target/${TARGET}/dist/metacontroller /out/metacontroller

FROM ${BINARY_SOURCE} AS binary

FROM scratch
LABEL org.opencontainers.image.title="metacontroller" \
      org.opencontainers.image.description="Metacontroller in Rust: lightweight Kubernetes controllers as a service" \
      org.opencontainers.image.source="https://github.com/metacontroller-rs/metacontroller-rs" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=binary /out/metacontroller /usr/bin/metacontroller
USER 65532:65532
ENTRYPOINT ["/usr/bin/metacontroller"]
