#!/usr/bin/env bash
# Builds KEDA's operator (`cmd/operator`) from its released Go module, in the
# module's own directory so that its go.mod (and its replace directive) is the
# one that decides, once. Arguments: the module version and its checksum as
# the Go checksum database records it (the harness's `modules::KEDA`, the
# same pin the recipes' CRDs come from); the download is refused when the
# checksum differs. The binary is cached under $CARGO_TARGET_DIR (default
# target/)/cluster-test/keda-<key>/bin, keyed by this script and the pin.
# Prints that bin directory on stdout; progress goes to stderr. Concurrent
# callers wait for one build (flock). The first build downloads about 250
# modules (every scaler's SDK): 350 s here with an empty module cache.
set -euo pipefail
version=$1
sum=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target="$root/$target" ;; esac
key=$({ cat "$here/build-keda.sh"; echo "$version $sum"; } | sha256sum | cut -c1-16)
out="$target/cluster-test/keda-$key"

if [ -x "$out/bin/keda-operator" ]; then echo "$out/bin"; exit 0; fi
mkdir -p "$target/cluster-test"
exec 9>"$target/cluster-test/.keda-lock"
flock 9
if [ -x "$out/bin/keda-operator" ]; then echo "$out/bin"; exit 0; fi

echo "building KEDA's operator $version, once; cached in $out" >&2
start=$(date +%s)
answer=$(cd "${TMPDIR:-/tmp}" && go mod download -json "github.com/kedacore/keda/v2@$version")
dir=$(printf '%s\n' "$answer" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
got=$(printf '%s\n' "$answer" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p')
if [ "$got" != "$sum" ]; then
  echo "github.com/kedacore/keda/v2@$version has checksum $got, not the pinned $sum" >&2
  exit 1
fi
rm -rf "$out/partial"
mkdir -p "$out/partial"
(cd "$dir" && GOFLAGS=-mod=readonly go build -trimpath -o "$out/partial/keda-operator" ./cmd/operator >&2)
rm -rf "$out/bin"
mv "$out/partial" "$out/bin"
echo "built KEDA's operator in $(( $(date +%s) - start )) s" >&2
echo "$out/bin"
