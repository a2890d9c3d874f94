#!/usr/bin/env bash
# Builds the tests' control plane from the upstream Go modules pinned in
# go.mod beside this script (etcd around its embed package, kube-apiserver,
# kube-controller-manager, the LeaderWorkerSet manager) and kustomize's
# krusty (kustomize/, a module of its own: `kubectl apply -k` without
# kubectl), once: the binaries are cached under $CARGO_TARGET_DIR (default
# target/)/cluster-test/<key>/bin, keyed by a hash of both modules' go.mod,
# go.sum and sources, and reused until one of those changes. Prints that bin directory on stdout; progress goes to stderr.
# Concurrent callers wait for one build (flock).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target="$root/$target" ;; esac
key=$(cat "$here/go.mod" "$here/go.sum" "$here"/etcd/*.go \
  "$here"/kustomize/go.mod "$here"/kustomize/go.sum "$here"/kustomize/*.go | sha256sum | cut -c1-16)
out="$target/cluster-test/$key"
binaries=(etcd kube-apiserver kube-controller-manager lws-manager kustomize)

built() {
  for b in "${binaries[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
}

if built; then echo "$out/bin"; exit 0; fi
mkdir -p "$target/cluster-test"
exec 9>"$target/cluster-test/.lock"
flock 9
if built; then echo "$out/bin"; exit 0; fi

echo "building the tests' control plane (Kubernetes $(sed -n 's/^\tk8s.io\/kubernetes \(v[^ ]*\)$/\1/p' "$here/go.mod"), once; cached in $out)" >&2
rm -rf "$out/partial"
mkdir -p "$out/partial"
cd "$here"
start=$(date +%s)
GOFLAGS=-mod=readonly go build -trimpath -o "$out/partial/" \
  ./etcd \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  sigs.k8s.io/lws/cmd >&2
mv "$out/partial/cmd" "$out/partial/lws-manager"
(cd "$here/kustomize" && GOFLAGS=-mod=readonly go build -trimpath -o "$out/partial/kustomize" . >&2)
rm -rf "$out/bin"
mv "$out/partial" "$out/bin"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$out/bin"
