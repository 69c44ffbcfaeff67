#!/usr/bin/env bash
# Whole-system load figures of the CompositeController: the release binary as its own process
# against the embedded API server with a local 1 ms hook; 1,000 parents x 3 ConfigMaps by
# default. What it measures and prints: crates/testkit/examples/composite_load.rs (converge
# time, the bound — the same writes sent by the harness from 8 connections — and their ratio,
# API requests per parent by verb, hook calls per parent, writes in a 15 s quiet period,
# peak RSS, then a full resync that must write nothing).
#
# Flags (passed on):
#   --parents N              parents (default 1000)
#   --children N             ConfigMaps per parent (default 3)
#   --workers N              the controller's --workers (default 5, as upstream); pass
#                            --controller-arg --parents-in-flight=N for the parents in a sync
#   --realistic-latency      the embedded API server answers writes like kube-apiserver + etcd
#                            (about 5 ms per write alone, about 465 writes/s in total)
#   --status observed|desired  the hook's status counts observed children (default) or
#                            reports the desired count from the first sync
#   --hook-delay-ms N        hook answer delay (default 1)
#   --quiet-secs N           quiet period after convergence (default 15)
#   --controller-arg ARG     extra flag for the controller (repeatable)
#   --no-resync              skip the full-resync phase
#   --ignore-status-changes  set parentResource.ignoreStatusChanges (no sync for status writes)
#   --burst B                after cold start, create B parents at once in another namespace
#                            while the converged ones resync; report their convergence against
#                            their own bound
#   --resync-secs S          the CompositeController's resyncPeriodSeconds with --burst (30)
#   --hook webhook|wasm      the sync hook: the local webhook (default) or the same hook as a
#                            WASM module in a ConfigMap run by the controller
#                            (examples/load-hook-wasm; needs the wasm32-wasip1 target; no full
#                            resync or --burst then)
#   --kubeconfig PATH        run against that (real) API server instead of the embedded one;
#                            request counts then come from the controller's own /metrics (by
#                            verb and status code), and the CPU seconds of a kube-apiserver
#                            running on this machine are reported
#   --metrics-out FILE       write the controller's /metrics after the quiet period (with
#                            --kubeconfig/--real: the queue's and hooks' series behind the summary)
#   --real                   start a fresh ../shared/k8s cluster in target/k8s-load (etcd wiped)
#                            and run against it
#
# Examples: hack/load-composite.sh --parents 2000 --children 3 --realistic-latency
#           hack/load-composite.sh --real --parents 2000 --children 3
#           hack/load-composite.sh --real --parents 2000 --children 3 --hook wasm
set -euo pipefail
cd "$(dirname "$0")/.."
pass=()
real=0
for arg in "$@"; do
  if [ "$arg" = "--real" ]; then real=1; else pass+=("$arg"); fi
done
if [ "$real" = 1 ]; then
  dir=target/k8s-load
  ../shared/k8s/cluster.sh reset "$dir" >&2
  pass+=(--kubeconfig "$PWD/$dir/kubeconfig")
fi
# One cargo invocation for both: separate ones unify dependency features differently and
# rebuild kube and k8s-openapi in between.
cargo build --release -p metacontroller -p metacontroller-testkit --bin metacontroller --example composite_load
exec target/release/examples/composite_load --binary target/release/metacontroller "${pass[@]}"
