#!/usr/bin/env bash
# Sharding figures: one replica vs. several --sharding replicas of the release binary against
# the embedded API server; 6,000 parents x 3 ConfigMaps and a 20 ms hook by default.
# What it measures: crates/testkit/examples/shard_load.rs. Extra flags are passed on
# (--parents N, --replicas 1,3, --workers N, --hook-delay-ms N, --shards N, --kill-after-s S:
# SIGKILL one replica S seconds into each multi-replica run and report the handoff;
# --scale S1,S2: start with one replica, start the others at S1 s, SIGTERM one at S2 s).
set -euo pipefail
cd "$(dirname "$0")/.."
# One cargo invocation for both: separate ones unify dependency features differently and
# rebuild kube and k8s-openapi in between.
cargo build --release -p metacontroller -p metacontroller-testkit --bin metacontroller --example shard_load
exec target/release/examples/shard_load --binary target/release/metacontroller "$@"
