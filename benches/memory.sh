#!/usr/bin/env bash
# Peak RSS of `tandem serve --dev` idle: builds the release binary, starts it
# on free loopback ports with a fresh dev CA in a temporary directory, waits
# until /readyz answers 200, then reads VmHWM (peak) and VmRSS (now) from
# /proc/<pid>/status, once at ready and once after IDLE_SECONDS, and stops it
# with SIGTERM. Linux only (/proc).
#
# KUBECONFIG points at a file that does not exist, so serve finds no cluster
# and serves admission only: there are no kube-runtime caches in this
# measurement (serve without a cluster has none to fill).
#
# Usage: benches/memory.sh            (IDLE_SECONDS=5 by default)
set -euo pipefail

cd "$(dirname "$0")/.."
idle_seconds="${IDLE_SECONDS:-5}"

cargo build --release --quiet
binary=target/release/tandem

work="$(mktemp -d)"
pid=""
cleanup() {
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

KUBECONFIG="$work/no-kubeconfig" RUST_LOG=info "$binary" --log-format json serve --dev \
    --listen 127.0.0.1:0 --probe-listen 127.0.0.1:0 --cert-dir "$work/certs" \
    >"$work/stdout" 2>"$work/stderr" &
pid=$!

# The server logs its bound addresses once it serves.
probe=""
for _ in $(seq 1 100); do
    probe="$(grep -o '"probe_addr":"[^"]*"' "$work/stderr" 2>/dev/null | head -n1 | cut -d'"' -f4 || true)"
    [[ -n "$probe" ]] && break
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "tandem serve exited early:" >&2
        cat "$work/stderr" >&2
        exit 1
    fi
    sleep 0.1
done
if [[ -z "$probe" ]]; then
    echo "tandem serve did not report its probe address within 10 s:" >&2
    cat "$work/stderr" >&2
    exit 1
fi
ready=""
for _ in $(seq 1 100); do
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$probe/readyz")" == "200" ]]; then
        ready=yes
        break
    fi
    sleep 0.1
done
if [[ -z "$ready" ]]; then
    echo "tandem serve did not become ready within 10 s" >&2
    exit 1
fi

field() { awk -v key="$1:" '$1 == key {print $2}' "/proc/$pid/status"; }
report() {
    printf '%-28s VmHWM %6s KiB (%5.1f MiB)   VmRSS %6s KiB (%5.1f MiB)\n' "$1" \
        "$(field VmHWM)" "$(echo "$(field VmHWM) / 1024" | bc -l)" \
        "$(field VmRSS)" "$(echo "$(field VmRSS) / 1024" | bc -l)"
}

echo "tandem serve --dev, no cluster (admission only, no caches), $(nproc) CPUs, threads: $(field Threads)"
report "ready:"
sleep "$idle_seconds"
report "idle ${idle_seconds} s:"

kill -TERM "$pid"
if wait "$pid"; then
    echo "stopped by SIGTERM, exit status 0"
else
    echo "stopped by SIGTERM, exit status $?"
fi
pid=""
