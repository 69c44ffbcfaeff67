#!/usr/bin/env bash
# Regenerates the CRDs in deploy/crds/ and charts/metacontroller/crds/ from the Rust
# types in crates/api (the CRD-drift test compares against the same output).
set -euo pipefail
cd "$(dirname "$0")/.."
METACONTROLLER_UPDATE_CRDS=1 cargo test -q -p metacontroller-api --test crds -- committed_crds_match_generated
echo "wrote deploy/crds/metacontroller-crds-v1.yaml and charts/metacontroller/crds/metacontroller-crds-v1.yaml"
