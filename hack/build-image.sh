#!/usr/bin/env bash
# Builds the container image offline and proves it runs:
#   1. a static binary (x86_64-unknown-linux-musl, profile `dist`: fat LTO, opt-level s) with cargo,
#      without the embedded API server (--no-default-features: no `dev`, no offline `render`), checked to be a static position-independent executable (no interpreter, ASLR for its code),
#   2. the image from ./Dockerfile with buildah (BINARY_SOURCE=prebuilt: no base image to
#      pull, the builder stage is skipped), saved as an OCI layout,
#   3. the image unpacked with umoci and the binary started from its root filesystem with
#      `--version` (chroot: nothing but the binary is in there, so this only works if it is
#      really static), and its config checked (non-root user, entrypoint).
#
# Usage: hack/build-image.sh [TAG]      (default: v<workspace version>)
# Needs: cargo with the musl target (rustup target add x86_64-unknown-linux-musl), musl-tools,
#        buildah, umoci (Debian: apt-get install musl-tools buildah umoci). Run as root (or
#        adapt the chroot step). Output: target/image/metacontroller-oci (an OCI layout;
#        `skopeo copy oci:target/image/metacontroller-oci:TAG docker://REGISTRY/...` pushes it).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=x86_64-unknown-linux-musl
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
TAG=${1:-v${VERSION}}
IMAGE=localhost/metacontroller:${TAG}
OUT=target/image
LAYOUT=${OUT}/metacontroller-oci
BINARY=target/${TARGET}/dist/metacontroller
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs} BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}

for tool in cargo buildah umoci; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done

echo "== static binary ($TARGET)"
cargo build --profile dist --locked --target "$TARGET" -p metacontroller --bin metacontroller --no-default-features
# A static executable has no program interpreter (PT_INTERP) and needs no shared libraries.
if readelf -l "$BINARY" | grep -q 'Requesting program interpreter'; then
    echo "$BINARY is dynamically linked" >&2
    exit 1
fi
# A static PIE (Rust's default for the musl target): the kernel loads it at a random address.
if ! readelf -h "$BINARY" | grep -q 'Type:[[:space:]]*DYN'; then
    echo "$BINARY is not position-independent (does RUSTFLAGS set a relocation model?)" >&2
    exit 1
fi
ls -l "$BINARY"

echo "== image $IMAGE (Dockerfile, BINARY_SOURCE=prebuilt)"
buildah bud --build-arg BINARY_SOURCE=prebuilt --build-arg TARGET="$TARGET" -t "$IMAGE" -f Dockerfile .
rm -rf "$LAYOUT"
mkdir -p "$OUT"
buildah push "$IMAGE" "oci:${LAYOUT}:${TAG}"

echo "== smoke test: run the binary from the image's root filesystem"
BUNDLE=$(mktemp -d "${TMPDIR:-/tmp}/metacontroller-bundle.XXXXXX")
trap 'rm -rf "$BUNDLE"' EXIT
umoci unpack --rootless --image "${LAYOUT}:${TAG}" "$BUNDLE/b" >/dev/null
ROOTFS=$BUNDLE/b/rootfs
echo "root filesystem: $(cd "$ROOTFS" && find . -mindepth 1 | sort | tr '\n' ' ')"
VERSION_OUT=$(chroot --userspec=65532:65532 "$ROOTFS" /usr/bin/metacontroller --version)
echo "$VERSION_OUT"
[[ "$VERSION_OUT" == "metacontroller ${VERSION}"* ]] || { echo "unexpected --version output" >&2; exit 1; }
# Built without the embedded API server: dev mode is refused as a usage error.
DEV_RC=0
chroot --userspec=65532:65532 "$ROOTFS" /usr/bin/metacontroller dev 2>/dev/null || DEV_RC=$?
[[ $DEV_RC == 2 ]] || { echo "dev: expected exit 2 (no embedded API server), got $DEV_RC" >&2; exit 1; }
python3 - "$BUNDLE/b/config.json" <<'PY'
import json, sys
process = json.load(open(sys.argv[1]))["process"]
assert process["user"]["uid"] == 65532 and process["user"]["gid"] == 65532, process["user"]
assert process["args"] == ["/usr/bin/metacontroller"], process["args"]
print("image config: user 65532:65532, entrypoint /usr/bin/metacontroller")
PY
du -sh "$LAYOUT" | sed 's/^/OCI layout size: /'
echo "OK: ${LAYOUT}:${TAG}"
