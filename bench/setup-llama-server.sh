#!/usr/bin/env bash
# Adds llama-cpp-python's server extra (bench/llama-server-requirements.lock,
# pure-Python wheels) to the .deps/llama venv that bench/setup-llama.sh
# builds, for the server benchmark (bench/serve_bench.py). Seconds, once; a
# stamp records the pins, and a second run with the same ones returns at
# once.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.deps/llama"
req="$root/bench/llama-server-requirements.lock"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup-llama-server: $venv has no python: run bench/setup-llama.sh first" >&2
  exit 1
fi
key=$( (cat "$req" "$0") | sha256sum | cut -c1-16)
stamp="$venv/.server-$key"
if [ -f "$stamp" ]; then
  exit 0
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: -r "$req"
"$venv/bin/python" -c "import uvicorn, llama_cpp.server.app"
rm -f "$venv"/.server-*
touch "$stamp"
echo "setup-llama-server: llama_cpp.server ready in $venv" >&2
