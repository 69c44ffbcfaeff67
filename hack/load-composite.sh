#!/usr/bin/env bash
# Whole-system load figures of the CompositeController: the release binary against the
# embedded API server with a local 1 ms hook; 1,000 parents x 3 ConfigMaps by default.
# What it measures: crates/testkit/examples/composite_load.rs. Extra flags are passed on
# (--parents N, --workers N, --hook-delay-ms N).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p metacontroller
exec cargo run --release -p metacontroller-testkit --example composite_load -- \
  --binary target/release/metacontroller "$@"
