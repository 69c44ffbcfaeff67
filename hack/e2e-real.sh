#!/usr/bin/env bash
# Runs the end-to-end suites (the binary-level tests in crates/metacontroller/tests, the
# controller tests in crates/controllers/tests and the testkit's own) against a real Kubernetes
# API server instead of the embedded one.
#
#   hack/e2e-real.sh                      start ../shared/k8s (kube-apiserver, etcd,
#                                         kube-controller-manager) in target/k8s-e2e and use it
#   hack/e2e-real.sh --kubeconfig PATH    use a cluster you have (e.g. kind); nothing is started
#
# Options: --jobs N (test binaries run at once in the parallel group, default 2),
# --only REGEX (test binaries whose name matches), --fresh (wipe the started cluster's etcd
# first), --keep (leave the started cluster running). Logs: target/e2e-real/.
#
# The tests build exactly as the README test command builds them (`cargo test --workspace`),
# so after that command nothing is compiled again.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

kubeconfig="" jobs=2 only="" fresh=0 keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kubeconfig) kubeconfig=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --fresh) fresh=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "e2e-real: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

logs=$root/target/e2e-real
mkdir -p "$logs"
cluster_dir=$root/target/k8s-e2e
kit=$root/../shared/k8s
started=0
kubelet_pid=""

cleanup() {
  [ -n "$kubelet_pid" ] && kill "$kubelet_pid" 2>/dev/null || true
  if [ "$started" = 1 ] && [ "$keep" = 0 ]; then
    bash "$kit/cluster.sh" down "$cluster_dir" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

echo "== e2e-real: building the tests (as the README test command does)"
cargo test --workspace --locked --no-run --message-format=json-render-diagnostics \
  >"$logs/artifacts.json"

if [ -z "$kubeconfig" ]; then
  if [ ! -f "$kit/cluster.sh" ]; then
    echo "e2e-real: no --kubeconfig and no $kit/cluster.sh: nothing to test against" >&2
    exit 2
  fi
  echo "== e2e-real: starting kube-apiserver + etcd + kube-controller-manager ($cluster_dir)"
  if [ "$fresh" = 1 ] && [ -d "$cluster_dir/data" ]; then
    kubeconfig=$(bash "$kit/cluster.sh" reset "$cluster_dir" | tail -1)
  else
    kubeconfig=$(bash "$kit/cluster.sh" up "$cluster_dir" | tail -1)
  fi
  started=1
  # Pods do not run without a kubelet; this stand-in binds them and reports them Running.
  python3 "$kit/fake-kubelet.py" --kubeconfig "$kubeconfig" --time-limit 5400 \
    >"$logs/fake-kubelet.log" 2>&1 &
  kubelet_pid=$!
fi
kubeconfig=$(cd "$(dirname "$kubeconfig")" && pwd)/$(basename "$kubeconfig")
echo "== e2e-real: server $(grep -m1 'server:' "$kubeconfig" | awk '{print $2}')"

exec_args=(--artifacts "$logs/artifacts.json" --kubeconfig "$kubeconfig" --logs "$logs"
  --jobs "$jobs")
[ -n "$only" ] && exec_args+=(--only "$only")
python3 "$root/hack/e2e_real_runner.py" "${exec_args[@]}"
