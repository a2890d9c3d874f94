#!/usr/bin/env bash
# Peak RSS of `tandem serve --dev` idle: builds the release binary, starts it
# on free loopback ports with a fresh dev CA in a temporary directory, waits
# until /readyz answers 200, then reads VmHWM (peak) and VmRSS (now) from
# /proc/<pid>/status, once at ready and once after IDLE_SECONDS, and stops it
# with SIGTERM. Linux only (/proc).
#
# KUBECONFIG points at a file that does not exist, so serve finds no cluster
# and serves admission only: there are no kube-runtime caches in this
# measurement (serve without a cluster has none to fill). For caches and
# controllers see benches/cluster_scale.rs (cargo bench --bench cluster_scale).
#
# Usage: benches/memory.sh            (IDLE_SECONDS=5 by default)
set -euo pipefail

cd "$(dirname "$0")/.."
idle_seconds="${IDLE_SECONDS:-5}"

cargo build --release --quiet
binary=target/release/tandem
work="$(mktemp -d)"
source benches/memory_common.sh
trap 'stop_serve >/dev/null; rm -rf "$work"' EXIT

start_serve "$work/no-kubeconfig"
wait_ready 10 >/dev/null

echo "tandem serve --dev, no cluster (admission only, no caches), $(nproc) CPUs, threads: $(field Threads)"
report "ready:"
sleep "$idle_seconds"
report "idle ${idle_seconds} s:"
stop_serve
