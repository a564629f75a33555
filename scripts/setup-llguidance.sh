#!/usr/bin/env bash
# Builds llguidance, the grammar matcher package constrain links, into
# .deps/ (git-ignored), pinned by constrain/llg/Cargo.lock:
#
#   .deps/cargo/                   CARGO_HOME: the crates.io index and sources
#   .deps/llguidance/target/       cargo's build tree
#   .deps/llguidance/lib/libarchgen_llg.a   llguidance's C API, one static archive
#   .deps/llguidance/include/llguidance.h   its header, from the crate's source
#
# The Rust toolchain is the one rustup installed (cargo on PATH or in
# ~/.cargo/bin); only crates.io is reached. Idempotent: a stamp records the
# inputs built (the crate's manifest, lock file and source, and this
# script); a second run returns at once. The first run takes about 30 s on
# 2 cores, fetching the crates included.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
crate="$root/constrain/llg"
deps="$root/.deps"
out="$deps/llguidance"

key=$(cat "$crate/Cargo.toml" "$crate/Cargo.lock" "$crate/src/lib.rs" "$0" | sha256sum | cut -c1-16)
stamp="$out/.setup-$key"
if [ -f "$stamp" ] && [ -f "$out/lib/libarchgen_llg.a" ] && [ -f "$out/include/llguidance.h" ]; then
  exit 0
fi

cargo=$(command -v cargo || true)
if [ -z "$cargo" ] && [ -x "${HOME:-/root}/.cargo/bin/cargo" ]; then
  cargo="${HOME:-/root}/.cargo/bin/cargo"
fi
if [ -z "$cargo" ] && [ -x /root/.cargo/bin/cargo ]; then
  cargo=/root/.cargo/bin/cargo
fi
if [ -z "$cargo" ]; then
  echo "setup-llguidance: cargo is not installed (Rust's toolchain builds llguidance, which package constrain links); install it with rustup" >&2
  exit 1
fi
# rustup's cargo finds its toolchain through RUSTUP_HOME, which a CARGO_HOME
# of our own must not hide.
if [ -z "${RUSTUP_HOME:-}" ] && [ -d "${HOME:-/root}/.rustup" ]; then
  export RUSTUP_HOME="${HOME:-/root}/.rustup"
fi
export PATH="$(dirname "$cargo"):$PATH"

version=$(awk '/^name = "llguidance"$/ { getline; gsub(/"/, "", $3); print $3; exit }' "$crate/Cargo.lock")
if [ -z "$version" ]; then
  echo "setup-llguidance: $crate/Cargo.lock pins no llguidance" >&2
  exit 1
fi

start=$(date +%s)
echo "setup: llguidance $version (cargo build --release --locked)" >&2
export CARGO_HOME="$deps/cargo"
export CARGO_TARGET_DIR="$out/target"
mkdir -p "$CARGO_HOME" "$CARGO_TARGET_DIR"
"$cargo" build --manifest-path "$crate/Cargo.toml" --release --locked -j 2 >&2

header=$(ls "$CARGO_HOME"/registry/src/*/llguidance-"$version"/llguidance.h 2>/dev/null | head -1 || true)
if [ -z "$header" ]; then
  echo "setup-llguidance: llguidance.h of llguidance $version is not in $CARGO_HOME/registry/src" >&2
  exit 1
fi
mkdir -p "$out/lib" "$out/include"
cp "$CARGO_TARGET_DIR/release/libarchgen_llg.a" "$out/lib/libarchgen_llg.a.tmp"
mv "$out/lib/libarchgen_llg.a.tmp" "$out/lib/libarchgen_llg.a"
cp "$header" "$out/include/llguidance.h.tmp"
mv "$out/include/llguidance.h.tmp" "$out/include/llguidance.h"
echo "$version" >"$out/VERSION"

rm -f "$out"/.setup-*
touch "$stamp"
echo "setup: llguidance done in $(( $(date +%s) - start ))s" >&2
