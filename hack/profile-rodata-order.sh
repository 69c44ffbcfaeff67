#!/usr/bin/env bash
# Regenerates hack/rodata-order.txt, the read-only data hack/link-musl.sh lays out first, and
# completes hack/text-order.txt with the functions only a native run at full scale executes.
#
# 1. Links the static dist binary with a link map and runs hack/load-shards.sh's harness with it
#    under valgrind's lackey (an idle process, one replica without sharding, then 3 --sharding
#    replicas, each converging 30 parents x 3 ConfigMaps; metrics and probes polled):
#    hack/rodata-trace.c records every word of the binary the processes loaded.
# 2. Relinks with that list and runs the harness natively at full scale (6,000 parents) under
#    `perf record -e page-faults -d`, ROUNDS times (default 2): each page fault in .rodata
#    outside the listed region names a section the controller reads natively that the lackey
#    run did not (see hack/rodata-order.py), and the next link lists it too. The same faults
#    in .text name the functions hack/text-order.txt lacks (callgrind's small run did not
#    execute them): hack/text-order.py --faults appends them.
# hack/rodata-order.py keeps what the list already names (if still defined) and adds the rest.
#
# Usage: ROUNDS=2 hack/profile-rodata-order.sh
# Needs: valgrind, perf, a C compiler, python3, the musl target and musl-tools (see
# hack/build-image.sh). Takes ~25 min with two rounds. Re-run it with
# hack/profile-text-order.sh; a stale list still links (names it no longer matches are
# skipped), it is just less tight.
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUST_BACKTRACE RUST_LIB_BACKTRACE
TARGET=x86_64-unknown-linux-musl
BINARY=$PWD/target/${TARGET}/dist/metacontroller
for tool in valgrind perf setpriv cc; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rodata-order.XXXXXX")
trap 'pkill -TERM -f "$WORK/" 2>/dev/null || true; rm -rf "$WORK"' EXIT
cc -O2 -o "$WORK/rodata-trace" hack/rodata-trace.c
cargo build --release -p metacontroller -p metacontroller-testkit --bin metacontroller --example shard_load

# Links the binary (the map must describe this very link) and copies both into $WORK.
link() {
    touch crates/metacontroller/src/main.rs
    LINK_MUSL_MAP=$WORK/link.map cargo build --profile dist --locked --target "$TARGET" \
        -p metacontroller --bin metacontroller
    cp "$BINARY" "$WORK/metacontroller"
}

# The controller with its metrics and probe servers on and polled (see hack/probed-args.sh),
# under the command $1 (which ends with the controller's arguments, "${args[@]}").
wrapper() {
    cat <<WRAPPER
#!/usr/bin/env bash
source "$PWD/hack/probed-args.sh"
probed_args "\$@"
(sleep 5; while :; do poll_probes; sleep 2; done) &
$1
WRAPPER
}

# Ends what the harness left (controllers under perf, the wrappers' polling loops) and waits
# for every process of $WORK: perf and the lackey filters write their files as they end.
settle() {
    pkill -TERM -f "$WORK/(metacontroller|lackey|perf)" 2>/dev/null || true
    for _ in $(seq 150); do pgrep -f "$WORK/" >/dev/null || return 0; sleep 0.2; done
}

link
# Where the traced process has the binary's file offset 0 (hack/rodata-trace.c): the image's
# build is position-dependent and loads where its first segment says; valgrind maps a PIE at
# 0x108000.
first_load=$(readelf -lW "$WORK/metacontroller" | awk '$1 == "LOAD" { print $2, $3; exit }')
read -r load_offset load_address <<<"$first_load"
trace_base=$(( load_address - load_offset ))
readelf -h "$WORK/metacontroller" | grep -q 'Type:[[:space:]]*EXEC' || trace_base=$(( trace_base + 0x108000 ))
trace_base=$(printf '%x' "$trace_base")
# The harness SIGKILLs what it starts; with exec that is valgrind itself, and the filter then
# sees the end of its input and writes what it recorded. Under lackey a replica runs ~100
# times slower: with the default shard Lease timings its renewals miss their deadline, the
# others take its shards over and the harness sees handoff writes in its quiet period (and
# stops). Timings scaled up keep the slow replicas members; the paths run are the same.
wrapper "exec valgrind --tool=lackey --trace-mem=yes --log-fd=9 \"$WORK/metacontroller\" \"\${args[@]}\" --shard-lease-duration=10m --shard-renew-deadline=8m --shard-retry-period=10s 9> >(\"$WORK/rodata-trace\" \"$WORK/reads.\$\$\" $trace_base)" >"$WORK/lackey"
chmod +x "$WORK/lackey"
target/release/examples/shard_load --binary "$WORK/lackey" --parents 30 --replicas 1,3 --hook-delay-ms 5
settle
python3 hack/rodata-order.py --binary "$WORK/metacontroller" hack/rodata-order.txt "$WORK/link.map" --reads "$WORK"/reads.*

# perf runs the controller as its child. The harness SIGKILLs the wrapper when it is done with
# a process; perf then gets SIGTERM (its parent-death signal), ends the controller and writes
# its file. Without that the controller would run on, its API server gone, and add its
# retry paths to the profile.
wrapper "setpriv --pdeathsig TERM perf record -q -e page-faults -c 1 -d -o \"$WORK/faults.\$\$\" -- \"$WORK/metacontroller\" \"\${args[@]}\"" >"$WORK/perf"
chmod +x "$WORK/perf"
for round in $(seq "${ROUNDS:-2}"); do
    link
    rm -f "$WORK"/faults.*
    target/release/examples/shard_load --binary "$WORK/perf" --parents 6000 --replicas 1,3
    settle
    for f in "$WORK"/faults.*; do
        perf script -i "$f" --show-mmap-events -F addr >"$f.txt" 2>/dev/null || true
    done
    echo "== round $round"
    python3 hack/rodata-order.py --binary "$WORK/metacontroller" hack/rodata-order.txt "$WORK/link.map" --faults "$WORK"/faults.*.txt
    python3 hack/text-order.py --binary "$WORK/metacontroller" --faults hack/text-order.txt "$WORK"/faults.*.txt
done
