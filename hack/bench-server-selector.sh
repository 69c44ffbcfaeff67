#!/usr/bin/env bash
# Benchmark (not a test): what a label-selected parent type costs the controller among many
# objects of the same kind. A DecoratorController targets the ConfigMaps labelled
# `bench-parent=yes` (PARENTS of them) among TOTAL ConfigMaps in one namespace of a real API
# server (../shared/k8s). Two runs of the same binary, same session:
#   selected    the rule's labelSelector is sent to the API server (no finalize hook);
#   unfiltered  the same rule plus a finalize hook: the informer lists every ConfigMap and the
#               selector is applied in the controller, as before server-side selection.
#   sweep-only  no controller: what every start costs anyway (the binary lists every object
#               of every resource once for finalizers of deleted controller objects).
# Prints per run: objects the ConfigMap informers listed and cached (their metrics), bytes the
# API server answered to ConfigMap LISTs (apiserver_response_sizes_sum delta, the start sweep
# included) and the controller's peak RSS (VmHWM) once every selected ConfigMap was synced.
#
# Usage: hack/bench-server-selector.sh [K8S_DIR] (default target/k8s; started if not running)
# Env: TOTAL (50000), PARENTS (100), BIN (target/debug/metacontroller), NS (bench-selector).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-target/k8s}
TOTAL=${TOTAL:-50000}
PARENTS=${PARENTS:-100}
BIN=${BIN:-target/debug/metacontroller}
NS=${NS:-bench-selector}
export KUBECONFIG
KUBECONFIG=$(bash ../shared/k8s/cluster.sh up "$DIR" | tail -1)
export NO_PROXY=127.0.0.1
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

kubectl apply -f deploy/crds/metacontroller-crds-v1.yaml >/dev/null
kubectl create namespace "$NS" >/dev/null 2>&1 || true

# --- the ConfigMaps: small, PARENTS of them labelled; lists of 1,000 created 4 at a time. --
create_configmaps() {
  python3 - "$WORK" "$TOTAL" "$PARENTS" "$NS" <<'PY'
import json, sys
work, total, parents, ns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
per = 1000
for start in range(0, total, per):
    items = []
    for i in range(start, min(total, start + per)):
        labels = {"bench": "selector"}
        if i < parents:
            labels["bench-parent"] = "yes"
        items.append({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": f"cm-{i:05d}", "namespace": ns, "labels": labels},
                      "data": {"k": "v"}})
    with open(f"{work}/list-{start // per:03d}.json", "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)
PY
  ls "$WORK"/list-*.json | xargs -P 4 -I{} sh -c 'kubectl create -f {} -o name >/dev/null 2>&1 || true'
  kubectl create configmap bench-complete -n "$NS" --from-literal=total="$TOTAL" >/dev/null
}
if ! kubectl get configmap bench-complete -n "$NS" >/dev/null 2>&1; then
  t0=$(date +%s)
  create_configmaps
  echo "created $TOTAL ConfigMaps in $(( $(date +%s) - t0 )) s"
fi
[ "${CREATE_ONLY:-}" = 1 ] && exit 0

# --- a hook that records which targets it saw ------------------------------------------------
HOOK_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$WORK/hook.py" <<'PY'
import http.server, json, sys
seen = set()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        obj = body.get("object", {})
        seen.add(obj.get("metadata", {}).get("name"))
        out = {"labels": {}, "annotations": {}, "attachments": []}
        if self.path == "/finalize":
            out["finalized"] = True
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        data = str(len(seen)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY

decorator() { # $1: with a finalize hook (1) or not (0)
  local finalize=""
  [ "$1" = 1 ] && finalize="
    finalize:
      webhook:
        url: http://127.0.0.1:$HOOK_PORT/finalize"
  cat <<YAML
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata:
  name: bench-selector
  labels:
    team: bench-selector
spec:
  resources:
  - apiVersion: v1
    resource: configmaps
    labelSelector:
      matchLabels:
        bench-parent: "yes"
  hooks:
    sync:
      webhook:
        url: http://127.0.0.1:$HOOK_PORT/sync$finalize
YAML
}

list_bytes() { # bytes the API server answered to ConfigMap LISTs so far
  kubectl get --raw /metrics | awk '/^apiserver_response_sizes_sum/ && /resource="configmaps"/ && /verb="LIST"/ {s += $2} END {printf "%.0f\n", s}'
}

metric() { # $1: metric name, $2: metrics port
  curl -s "http://127.0.0.1:$2/metrics" | awk -v m="$1" '$1 ~ "^"m"\\{" && /resource="configmaps"/ {s += $2} END {printf "%.0f\n", s}'
}

run() { # $1: name, $2: finalize hook 0/1, or "none": no controller (the start sweep alone)
  local name=$1 port hook_pid pid before after deadline team=bench-selector
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  python3 "$WORK/hook.py" "$HOOK_PORT" & hook_pid=$!; PIDS+=("$hook_pid")
  kubectl delete decoratorcontroller bench-selector --ignore-not-found >/dev/null
  if [ "$2" = none ]; then team=nobody; else decorator "$2" | kubectl apply -f - >/dev/null; fi
  sleep 1 # the hook server binds
  before=$(list_bytes)
  "$BIN" --target-label-selector "team=$team" --metrics-address "127.0.0.1:$port" --health-probe-bind-address 0 >"$WORK/$name.log" 2>&1 & pid=$!; PIDS+=("$pid")
  deadline=$(( $(date +%s) + 600 ))
  # At start the binary lists every object of every resource once (finalizers of deleted
  # controller objects) before it starts the controllers: the "none" run measures that alone.
  until grep -q "swept finalizers" "$WORK/$name.log"; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "$name: no sweep"; tail -20 "$WORK/$name.log"; exit 1; }
    sleep 0.2
  done
  if [ "$2" != none ]; then
    until [ "$(curl -s "http://127.0.0.1:$HOOK_PORT/" || echo 0)" -ge "$PARENTS" ]; do
      [ "$(date +%s)" -lt "$deadline" ] || { echo "$name: timed out"; tail -20 "$WORK/$name.log"; exit 1; }
      sleep 1
    done
  fi
  after=$(list_bytes)
  printf '%-11s informer_listed=%s cached=%s list_bytes=%s peak_rss_kib=%s\n' "$name" \
    "$(metric metacontroller_informer_listed_objects_total "$port")" \
    "$(metric metacontroller_informer_cached_objects "$port")" \
    "$(( after - before ))" "$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  kill "$hook_pid"; wait "$hook_pid" 2>/dev/null || true
}

echo "$(date -u +%F) $TOTAL ConfigMaps, $PARENTS selected; binary $BIN; kube-apiserver $(kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
run sweep-only none
run selected 0
run unfiltered 1
# The finalize hook run left its finalizer on the selected ConfigMaps: the controller removes
# it when the DecoratorController goes without a finalize hook; here the namespace stays.
kubectl delete decoratorcontroller bench-selector --ignore-not-found >/dev/null
