#!/usr/bin/env bash
# Builds the tests' control plane from the upstream Go modules pinned in
# go.mod beside this script (etcd around its embed package, kube-apiserver,
# kube-controller-manager, kube-scheduler, the LeaderWorkerSet manager), kwok
# (kwok/, a module of its own: the nodes and the pods' lifecycles), kustomize's
# krusty (kustomize/, a module of its own: `kubectl apply -k` without
# kubectl), Helm's own command (helm/, a module of its own) and
# custom-metrics-apiserver's test adapter (metrics/, a module of its own: the
# custom metrics API the HPA controller reads), once: the
# binaries are cached under $CARGO_TARGET_DIR (default
# target/)/cluster-test/<key>/bin, keyed by a hash of this script and the
# five modules' go.mod, go.sum and sources, and reused until one of those
# changes. Prints that bin directory on stdout; progress goes to stderr.
# Concurrent callers wait for one build (flock).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target="$root/$target" ;; esac
key=$(cat "$here/build.sh" "$here/go.mod" "$here/go.sum" "$here"/etcd/*.go \
  "$here"/kustomize/go.mod "$here"/kustomize/go.sum "$here"/kustomize/*.go \
  "$here"/helm/go.mod "$here"/helm/go.sum "$here"/kwok/go.mod "$here"/kwok/go.sum \
  "$here"/metrics/go.mod "$here"/metrics/go.sum | sha256sum | cut -c1-16)
out="$target/cluster-test/$key"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler lws-manager kwok kustomize helm metrics-adapter)

built() {
  for b in "${binaries[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
}

if built; then echo "$out/bin"; exit 0; fi
mkdir -p "$target/cluster-test"
exec 9>"$target/cluster-test/.lock"
flock 9
if built; then echo "$out/bin"; exit 0; fi

kubernetes=$(sed -n 's/^\tk8s.io\/kubernetes \(v[^ ]*\).*$/\1/p' "$here/go.mod")
[ -n "$kubernetes" ] || { echo "no k8s.io/kubernetes version in $here/go.mod" >&2; exit 1; }
echo "building the tests' control plane (Kubernetes $kubernetes), once; cached in $out" >&2
rm -rf "$out/partial"
mkdir -p "$out/partial"
cd "$here"
start=$(date +%s)
# The version stamped as Kubernetes' own build stamps it (hack/lib/version.sh):
# without it the API server reports v0.0.0-master, which clients that check
# the version (Helm's kubeVersion, say) refuse.
major=${kubernetes#v}; major=${major%%.*}
minor=${kubernetes#v*.}; minor=${minor%%.*}
stamp="-X k8s.io/component-base/version.gitVersion=$kubernetes"
stamp+=" -X k8s.io/component-base/version.gitMajor=$major"
stamp+=" -X k8s.io/component-base/version.gitMinor=$minor"
stamp+=" -X k8s.io/component-base/version.gitTreeState=clean"
GOFLAGS=-mod=readonly go build -trimpath -ldflags "$stamp" -o "$out/partial/" \
  ./etcd \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  sigs.k8s.io/lws/cmd >&2
mv "$out/partial/cmd" "$out/partial/lws-manager"
(cd "$here/kustomize" && GOFLAGS=-mod=readonly go build -trimpath -o "$out/partial/kustomize" . >&2)
(cd "$here/kwok" && GOFLAGS=-mod=readonly go build -trimpath -o "$out/partial/kwok" sigs.k8s.io/kwok/cmd/kwok >&2)
(cd "$here/helm" && GOFLAGS=-mod=readonly go build -trimpath -o "$out/partial/helm" helm.sh/helm/v3/cmd/helm >&2)
(cd "$here/metrics" && GOFLAGS=-mod=readonly go build -trimpath -o "$out/partial/metrics-adapter" \
  sigs.k8s.io/custom-metrics-apiserver/test-adapter >&2)
rm -rf "$out/bin"
mv "$out/partial" "$out/bin"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$out/bin"
