#!/usr/bin/env bash
# Installs llama.cpp, as llama-cpp-python (pinned in bench/llama-requirements.lock),
# into a venv of its own, .deps/llama (git-ignored), for `make bench` only.
#
# PyPI has only the sdist, so pip builds llama.cpp here: 7-13 minutes on two
# cores, once. The build uses what this machine runs (bench/llama-cpu-flags.sh:
# AVX-512 where a probe runs it), OpenMP threads. A stamp records the pins and flags; a second run with the same
# ones returns at once, and a machine with another set rebuilds.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.deps/llama"
req="$root/bench/llama-requirements.lock"
cons="$root/bench/llama-build.lock"
python=${PYTHON:-python3}
# shellcheck source=bench/llama-cpu-flags.sh
. "$root/bench/llama-cpu-flags.sh"
cmake_args="$llama_cpu_args -DLLAMA_BUILD_SERVER=OFF"

key=$( (cat "$req" "$cons" "$0" "$root/bench/llama-cpu-flags.sh"; echo "$cmake_args") | sha256sum | cut -c1-16)
stamp="$venv/.setup-$key"
if [ -f "$stamp" ]; then
  exit 0
fi
start=$(date +%s)
echo "setup-llama: building llama-cpp-python from source, AVX-512 $avx512 (7-13 minutes on 2 cores, once)" >&2
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
CMAKE_ARGS="$cmake_args" PIP_CONSTRAINT="$cons" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  --no-cache-dir -r "$req"
"$venv/bin/python" -c 'import llama_cpp; print("setup-llama: llama-cpp-python", llama_cpp.__version__)' >&2
rm -f "$venv"/.setup-*
echo "$cmake_args" >"$stamp"
echo "setup-llama: done in $(( $(date +%s) - start ))s" >&2
