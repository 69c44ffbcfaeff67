# Sourced by the profiling wrappers of hack/profile-text-order.sh and
# hack/profile-rodata-order.sh, which the load harness starts in place of the controller. The
# harness turns the metrics and probe servers off (`--metrics-address=0`,
# `--health-probe-bind-address=0`); a Deployment has both scraped and probed, so a profile
# must run them too.
#
# probed_args ARGS...: sets `args` to ARGS with both servers on free local ports.
# poll_probes: scrapes the metrics and polls both probes once.

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

probed_args() {
    probe_metrics=$(free_port)
    probe_health=$(free_port)
    args=()
    local a
    for a in "$@"; do
        case $a in
            --metrics-address=0) args+=("--metrics-address=127.0.0.1:$probe_metrics") ;;
            --health-probe-bind-address=0) args+=("--health-probe-bind-address=127.0.0.1:$probe_health") ;;
            *) args+=("$a") ;;
        esac
    done
}

poll_probes() {
    local path
    for path in "$probe_metrics/metrics" "$probe_health/healthz" "$probe_health/readyz"; do
        curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$path" || true
    done
}
