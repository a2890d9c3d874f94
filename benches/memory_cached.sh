#!/usr/bin/env bash
# Memory of `tandem serve` with a cluster holding COUNT InferenceServices,
# ScaleViews and ResourceScalingGroups each, for every COUNT in COUNTS
# (default "0 1000"). There is no cluster here, so the cluster is
# benches/memory_api.py, a fake API server on loopback (plain HTTP) that
# serves lists in pages, watches that only send bookmarks, gets and patches.
#
# For each COUNT: render the template objects once with `tandem render`
# (story 4, a ScaleView on its decode role, the seed's InplaceScaling RSG, all
# in namespace ai), start the fake API with COUNT copies of each (with
# managedFields and kubectl's last-applied-configuration, as a real API
# server holds them), start `tandem serve --dev` with a kubeconfig pointing
# at it, and read VmHWM (peak RSS) and VmRSS:
#   ready     /readyz answers 200: the three admission caches have listed;
#   settled   the controllers have reconciled every object once: the fake
#             has seen no request for SETTLE_SECONDS (default 3);
#   idle      IDLE_SECONDS (default 5) later.
# What serve holds: the admission caches (InferenceServices, ScaleViews,
# ResourceScalingGroups), the InferenceService controller's store and the
# ScaleView controller's store (the services and views a second time), and
# the watches of LeaderWorkerSets, Deployments, Pods, ScaleViews and
# InferenceServices that trigger reconciles. Every other list is empty:
# the services have no LeaderWorkerSets, PodGroups or pods yet, so the first
# reconcile of each service applies its children (answered and kept by the
# fake, never sent back through a watch); the peak includes that.
#
# Usage: benches/memory_cached.sh   (COUNTS, NAMESPACES, SETTLE_SECONDS, IDLE_SECONDS)
# NAMESPACES (default 1) spreads the objects round robin over that many
# namespaces.
set -euo pipefail

cd "$(dirname "$0")/.."
counts="${COUNTS:-0 1000}"
namespaces="${NAMESPACES:-1}"
settle_seconds="${SETTLE_SECONDS:-3}"
idle_seconds="${IDLE_SECONDS:-5}"

cargo build --release --quiet
binary=target/release/tandem
work="$(mktemp -d)"
source benches/memory_common.sh
# Each reconcile is logged at debug level: count them.
SERVE_LOG="info,tandem::reconcile=debug"
api_pid=""
stop_api() {
    if [[ -n "$api_pid" ]] && kill -0 "$api_pid" 2>/dev/null; then
        kill -TERM "$api_pid"
        wait "$api_pid" 2>/dev/null || true
    fi
    api_pid=""
}
trap 'stop_serve >/dev/null; stop_api; rm -rf "$work"' EXIT

cat >"$work/view.yaml" <<'EOF'
apiVersion: fusioninfer.io/v1alpha1
kind: ScaleView
metadata:
  name: deepseek-r1-disagg-decode
spec:
  targetRef:
    name: deepseek-r1-disagg
    componentType: decoder
  replicas: 3
  scalePolicy:
    - group: decode
      priority: 1
      constraints:
        min: 1
        max: 8
EOF
"$binary" render -n ai -o json \
    -f examples/inferenceservice/story4-prefill-decode-multinode.yaml \
    -f "$work/view.yaml" \
    -f examples/resourcescalinggroup/inplace-scaling.yaml \
    >"$work/world.json" 2>/dev/null

stats() { curl -s "http://127.0.0.1:$api_port/fake/stats"; }
requests() { stats | python3 -c 'import json,sys; print(sum(json.load(sys.stdin)["requests"].values()))'; }

echo "tandem serve --dev against benches/memory_api.py, $(nproc) CPUs"
for count in $counts; do
    rm -f "$work/port"
    python3 benches/memory_api.py "$work/world.json" "$count" "$work/port" --namespaces "$namespaces" &
    api_pid=$!
    for _ in $(seq 1 300); do
        [[ -s "$work/port" ]] && break
        sleep 0.1
    done
    api_port="$(cat "$work/port")"
    cat >"$work/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: "http://127.0.0.1:$api_port"}
users:
- name: fake
  user: {token: fake}
contexts:
- name: fake
  context: {cluster: fake, user: fake, namespace: ai}
current-context: fake
EOF
    start_serve "$work/kubeconfig"
    took="$(wait_ready 120)"
    echo
    echo "$count InferenceServices, $count ScaleViews, $count ResourceScalingGroups in $namespaces namespace(s) (ready after ${took} s, threads: $(field Threads))"
    report "ready:"
    # Settled: no request for settle_seconds.
    last=-1
    quiet=0
    started=$SECONDS
    while ((quiet < settle_seconds && SECONDS - started < 300)); do
        now="$(requests)"
        if [[ "$now" == "$last" ]]; then quiet=$((quiet + 1)); else quiet=0; fi
        last="$now"
        sleep 1
    done
    if ((quiet >= settle_seconds)); then
        report "settled ($((SECONDS - started)) s after ready):"
    else
        report "NOT settled, still busy at $((SECONDS - started)) s:"
    fi
    sleep "$idle_seconds"
    report "idle ${idle_seconds} s more:"
    stats | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("requests answered by the fake API:", ", ".join(f"{k} {v}" for k, v in sorted(s["requests"].items())),
      "| watches open", s["watches_open"])
for line in s["failures"][:5]:
    print("  not 2xx:", line)
'
    echo "serve logged: $(grep -c '"reconciled"' "$work/serve.stderr" || true) reconciles, $(grep -c 'reconcile failed' "$work/serve.stderr" || true) failed reconciles"
    grep 'reconcile failed' "$work/serve.stderr" | head -n 3 | cut -c1-300 || true
    stop_serve
    stop_api
done
