#!/usr/bin/env bash
# Regenerates hack/text-order.txt, the function order hack/link-musl.sh links the image's binary
# with: builds the static dist binary, runs hack/load-shards.sh's harness with that binary under
# valgrind's callgrind (an idle process, one replica without sharding, then 3 --sharding
# replicas, each time converging 300 parents x 3 ConfigMaps through a sync hook), and lists
# every function the processes executed.
#
# Usage: hack/profile-text-order.sh [extra shard_load flags]
# Needs: valgrind, python3, the musl target and musl-tools (see hack/build-image.sh).
# Takes ~6 min plus a dist build (~7 min). Re-run it after large changes to what `run` does;
# a stale list still works (see hack/link-musl.sh), it is just less tight.
set -euo pipefail
cd "$(dirname "$0")/.."
# A Deployment sets no RUST_BACKTRACE: with it, every error would also profile the unwinder.
unset RUST_BACKTRACE RUST_LIB_BACKTRACE
TARGET=x86_64-unknown-linux-musl
BINARY=$PWD/target/${TARGET}/dist/metacontroller
command -v valgrind >/dev/null || { echo "missing: valgrind" >&2; exit 1; }

cargo build --profile dist --locked --target "$TARGET" -p metacontroller --bin metacontroller
cargo build --release -p metacontroller -p metacontroller-testkit --bin metacontroller --example shard_load

WORK=$(mktemp -d "${TMPDIR:-/tmp}/text-order.XXXXXX")
cleanup() {
    # The harness SIGKILLs what it started: that is the wrapper below, not valgrind. SIGTERM
    # lets each controller shut down and callgrind write its profile.
    if [[ -f $WORK/pids ]]; then
        while read -r pid; do kill -TERM "$pid" 2>/dev/null || true; done <"$WORK/pids"
        while read -r pid; do
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        done <"$WORK/pids"
    fi
}
trap 'cleanup; rm -rf "$WORK"' EXIT
# The harness turns the metrics and probe servers off; a Deployment has both scraped and probed,
# so the wrapper serves them on free ports and polls them while the controller runs.
cat >"$WORK/wrapper" <<WRAPPER
#!/usr/bin/env bash
source "$PWD/hack/probed-args.sh"
probed_args "\$@"
valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.%p" --compress-strings=no \\
    --compress-pos=no --demangle=no "$BINARY" "\${args[@]}" 2>>"$WORK/valgrind.log" &
pid=\$!
echo \$pid >>"$WORK/pids"
while kill -0 \$pid 2>/dev/null; do
    poll_probes
    sleep 2
done
WRAPPER
chmod +x "$WORK/wrapper"

target/release/examples/shard_load --binary "$WORK/wrapper" --parents 300 --replicas 1,3 \
    --hook-delay-ms 5 "$@"
cleanup
python3 hack/text-order.py --binary "$BINARY" --keep hack/text-order.txt hack/text-order.txt \
    "$WORK"/callgrind.*
