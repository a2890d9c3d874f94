# Used by benches/memory.sh (sourced, not run):
# start `tandem serve --dev` on free loopback ports, wait until /readyz
# answers 200, read VmHWM (peak RSS) and VmRSS (now) from /proc/<pid>/status,
# stop it with SIGTERM. Linux only (/proc). Callers set `work` (a temporary
# directory) and `binary`, and call stop_serve from their EXIT trap; SERVE_LOG
# is serve's RUST_LOG (default info).

serve_pid=""

# start_serve KUBECONFIG_PATH: starts serve, sets serve_pid and probe (the
# plain-HTTP address of /readyz).
start_serve() {
    rm -f "$work/serve.stderr"
    KUBECONFIG="$1" RUST_LOG="${SERVE_LOG:-info}" "$binary" serve --log-format json --dev \
        --listen 127.0.0.1:0 --probe-listen 127.0.0.1:0 --cert-dir "$work/certs" \
        >"$work/serve.stdout" 2>"$work/serve.stderr" &
    serve_pid=$!
    probe=""
    # The server logs its bound addresses once it serves.
    for _ in $(seq 1 100); do
        probe="$(grep -o '"probe_addr":"[^"]*"' "$work/serve.stderr" 2>/dev/null | head -n1 | cut -d'"' -f4 || true)"
        [[ -n "$probe" ]] && return 0
        if ! kill -0 "$serve_pid" 2>/dev/null; then
            echo "tandem serve exited early:" >&2
            cat "$work/serve.stderr" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "tandem serve did not report its probe address within 10 s:" >&2
    cat "$work/serve.stderr" >&2
    exit 1
}

# wait_ready SECONDS: until /readyz answers 200 (with a cluster, readiness
# waits for the admission caches to have listed once). Prints the seconds it took.
wait_ready() {
    local started=$SECONDS
    for _ in $(seq 1 $(($1 * 10))); do
        if [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$probe/readyz")" == "200" ]]; then
            echo $((SECONDS - started))
            return 0
        fi
        sleep 0.1
    done
    echo "tandem serve did not become ready within $1 s" >&2
    tail -n 20 "$work/serve.stderr" >&2
    exit 1
}

field() { awk -v key="$1:" '$1 == key {print $2}' "/proc/$serve_pid/status"; }

report() {
    printf '%-34s VmHWM %7s KiB (%6.1f MiB)   VmRSS %7s KiB (%6.1f MiB)\n' "$1" \
        "$(field VmHWM)" "$(echo "$(field VmHWM) / 1024" | bc -l)" \
        "$(field VmRSS)" "$(echo "$(field VmRSS) / 1024" | bc -l)"
}

stop_serve() {
    if [[ -n "$serve_pid" ]] && kill -0 "$serve_pid" 2>/dev/null; then
        kill -TERM "$serve_pid"
        if wait "$serve_pid"; then
            echo "stopped by SIGTERM, exit status 0"
        else
            echo "stopped by SIGTERM, exit status $?"
        fi
    fi
    serve_pid=""
}
