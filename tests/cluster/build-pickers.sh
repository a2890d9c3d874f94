#!/usr/bin/env bash
# Builds the endpoint pickers Tandem configures, from their released Go
# modules pinned beside this script, once: GIE's `cmd/epp` (epp/, a module of
# its own, since its k8s.io modules would move the control plane's). The
# binaries are cached under $CARGO_TARGET_DIR (default
# target/)/cluster-test/pickers-<key>/bin, keyed by a hash of this script and
# the modules' go.mod and go.sum, and reused until one of those changes.
# Prints that bin directory on stdout; progress goes to stderr. Concurrent
# callers wait for one build (flock). See tests/cluster/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target="$root/$target" ;; esac
key=$(cat "$here/build-pickers.sh" "$here"/epp/go.mod "$here"/epp/go.sum | sha256sum | cut -c1-16)
out="$target/cluster-test/pickers-$key"
binaries=(epp)

built() {
  for b in "${binaries[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
}

if built; then echo "$out/bin"; exit 0; fi
mkdir -p "$target/cluster-test"
exec 9>"$target/cluster-test/.pickers-lock"
flock 9
if built; then echo "$out/bin"; exit 0; fi

echo "building the endpoint pickers, once; cached in $out" >&2
rm -rf "$out/partial"
mkdir -p "$out/partial"
start=$(date +%s)
(cd "$here/epp" && GOFLAGS=-mod=readonly go build -trimpath -o "$out/partial/epp" \
  sigs.k8s.io/gateway-api-inference-extension/cmd/epp >&2)
rm -rf "$out/bin"
mv "$out/partial" "$out/bin"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$out/bin"
