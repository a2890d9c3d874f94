#!/usr/bin/env bash
# Builds the endpoint pickers Tandem configures, from their released Go
# modules pinned beside this script, once, each in a module of its own (their
# k8s.io modules would move the control plane's and each other's):
# - epp: GIE's `cmd/epp` (epp/), the default picker;
# - llm-d-epp: llm-d-inference-scheduler's `cmd/epp` (pd/), the picker of
#   `strategy: pd-disaggregation`. It links three C libraries through cgo,
#   as its Makefile does: libzmq (Debian's libzmq3-dev) and an embedded
#   Python (Debian's python3-dev), both found with pkg-config, and the
#   tokenizers library, built here with cargo from the Rust sources (and
#   Cargo.lock) in the github.com/daulet/tokenizers module its go.sum pins.
# The binaries are cached under $CARGO_TARGET_DIR (default
# target/)/cluster-test/pickers-<key>/bin, keyed by a hash of this script and
# the modules' go.mod and go.sum, and reused until one of those changes.
# Prints that bin directory on stdout; progress goes to stderr. Concurrent
# callers wait for one build (flock). See tests/cluster/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target="$root/$target" ;; esac
key=$(cat "$here/build-pickers.sh" "$here"/epp/go.mod "$here"/epp/go.sum \
  "$here"/pd/go.mod "$here"/pd/go.sum | sha256sum | cut -c1-16)
out="$target/cluster-test/pickers-$key"
binaries=(epp llm-d-epp)

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
for library in libzmq:libzmq3-dev python3-embed:python3-dev; do
  if ! pkg-config --exists "${library%%:*}"; then
    echo "llm-d's endpoint picker links ${library%%:*}: install Debian's ${library#*:} (.ci/run does)" >&2
    exit 1
  fi
done
tokenizers=$(cd "$here/pd" && GOFLAGS=-mod=readonly go mod download -json github.com/daulet/tokenizers \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -f "$tokenizers/Cargo.toml" ] || { echo "no tokenizers sources in the module cache ($tokenizers)" >&2; exit 1; }
cargo build --release --locked --lib --manifest-path "$tokenizers/Cargo.toml" \
  --target-dir "$out/tokenizers" >&2
(cd "$here/pd" && CGO_ENABLED=1 CGO_CFLAGS="$(pkg-config --cflags python3-embed)" \
  CGO_LDFLAGS="$(pkg-config --libs python3-embed) -L$out/tokenizers/release" GOFLAGS=-mod=readonly \
  go build -trimpath -o "$out/partial/llm-d-epp" github.com/llm-d/llm-d-inference-scheduler/cmd/epp >&2)
rm -rf "$out/bin"
mv "$out/partial" "$out/bin"
# The tokenizers library is linked into llm-d-epp; its cargo target directory
# (its intermediates) is never read again, since a change of key
# builds in a new directory.
rm -rf "$out/tokenizers"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$out/bin"
