#!/usr/bin/env bash
# Fault soak: replicas of the binary keep parents converged under a seeded schedule of hook,
# API link, watch, process and (real cluster) kube-apiserver faults; reports violations,
# convergence after each fault, API requests by status and RSS.
# What it does: crates/testkit/examples/soak/. Flags: --duration S (seconds), --seed N,
# --mode sharding|leader, --replicas N, --server embedded|real (real: $METACONTROLLER_E2E_KUBECONFIG,
# e.g. $(../shared/k8s/cluster.sh up target/k8s | tail -1)), --parents N, --bound-s S,
# --partition-s S, --hook-delay-ms MS, --cluster-dir DIR (real: kill -9 and restart that
# cluster.sh cluster's kube-apiserver), --cluster-sh PATH, --break overlap|lost|duplicate
# (break the system on purpose: the report must show violations).
set -euo pipefail
cd "$(dirname "$0")/.."
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) pass+=(--duration-s "$2"); shift 2 ;;
    *) pass+=("$1"); shift ;;
  esac
done
cargo build --release -p metacontroller -p metacontroller-testkit --bin metacontroller --example soak
exec target/release/examples/soak --binary target/release/metacontroller "${pass[@]}"
