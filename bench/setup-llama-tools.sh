#!/usr/bin/env bash
# Builds llama.cpp's own command-line tools (llama-bench, llama-quantize,
# llama-server) from the llama.cpp tree that the pinned llama-cpp-python
# sdist vendors (bench/llama-requirements.lock), with cmake, into
# .deps/llama-tools (git-ignored), for `make bench` and the GGUF parity
# tests of `make test`: the tools people run llama.cpp with, beside the
# Python binding bench/setup-llama.sh builds.
#
# The CPU flags are bench/llama-cpu-flags.sh's, as bench/setup-llama.sh's
# (AVX-512 where this machine runs it), with the tools and the server on
# and everything linked statically. About 5
# minutes on two cores, once: a stamp records the pins and flags, and a
# second run with the same ones builds only the tools it lacks.
#
#   .deps/llama-tools/bin/llama-bench, llama-quantize, llama-server,
#                                llama-logits (ours, for the GGUF parity tests)
#   .deps/llama-tools/src/       the sdist's vendored llama.cpp tree (gguf-py too)
#
# LLAMA_TOOLS names the tools to build (all three by default): the tests
# need llama-quantize alone (and the libraries llama-logits links), which
# spares them the server's build.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dst="$root/.deps/llama-tools"
req="$root/bench/llama-requirements.lock"
cons="$root/bench/llama-build.lock"
python=${PYTHON:-python3}
version=$(sed -n 's/^llama-cpp-python==//p' "$req")

# shellcheck source=bench/llama-cpu-flags.sh
. "$root/bench/llama-cpu-flags.sh"
cmake_args="-DCMAKE_BUILD_TYPE=Release $llama_cpu_args -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF"
targets=${LLAMA_TOOLS:-llama-bench llama-quantize llama-server}

# llama-logits (bench/llama-logits/main.cpp): llama.cpp's logits for a
# sequence of ids, the reference of the GGUF parity tests; compiled against
# the built libraries (a second or two), again whenever its source changes.
logits_src="$root/bench/llama-logits/main.cpp"
build_logits() {
  local b="$dst/build"
  if [ "$dst/bin/llama-logits" -nt "$logits_src" ] && [ "$dst/bin/llama-logits" -nt "$stamp" ]; then
    return 0
  fi
  g++ -O2 -std=c++17 -I"$dst/src/include" -I"$dst/src/ggml/include" "$logits_src" \
    "$b/src/libllama.a" "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" "$b/ggml/src/libggml-base.a" \
    -lpthread -fopenmp -ldl -o "$dst/bin/llama-logits.tmp"
  mv "$dst/bin/llama-logits.tmp" "$dst/bin/llama-logits"
}

# the tools built for this stamp's pins and flags, and those still to build
key=$( (echo "$version"; cat "$cons" "$0" "$root/bench/llama-cpu-flags.sh"; echo "$cmake_args") | sha256sum | cut -c1-16)
stamp="$dst/.setup-$key"
missing() {
  local out="" t
  for t in $targets; do
    if [ ! -f "$stamp" ] || [ ! -f "$dst/bin/$t" ] || ! grep -qx "built $t" "$stamp"; then
      out="$out $t"
    fi
  done
  echo "$out"
}
todo=$(missing)
if [ -z "$todo" ]; then
  build_logits
  exit 0
fi
start=$(date +%s)
if [ -f "$stamp" ] && [ -d "$dst/build" ]; then
  echo "setup-llama-tools: building$todo" >&2
  # shellcheck disable=SC2086
  cmake --build "$dst/build" --parallel "$(nproc)" --target $todo >"$dst/build.log" 2>&1 ||
    { tail -30 "$dst/build.log" >&2; exit 1; }
  for t in $todo; do
    cp "$dst/build/bin/$t" "$dst/bin/$t"
    echo "built $t" >>"$stamp"
  done
  build_logits
  echo "setup-llama-tools: done in $(( $(date +%s) - start ))s" >&2
  exit 0
fi
echo "setup-llama-tools: llama.cpp from llama-cpp-python $version's sdist, AVX-512 $avx512 (about 5 minutes on 2 cores, once)" >&2
mkdir -p "$dst/dl"
sdist=$(ls "$dst/dl"/llama_cpp_python-"$version".tar.gz 2>/dev/null || true)
if [ -z "$sdist" ]; then
  # pip reads the sdist's metadata through its build backend (pinned by
  # the constraints file); nothing is compiled here
  PIP_CONSTRAINT="$cons" "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary=:all: -d "$dst/dl" "llama-cpp-python==$version"
  sdist=$(ls "$dst/dl"/llama_cpp_python-"$version".tar.gz)
fi
rm -rf "$dst/src" "$dst/src.tmp"
mkdir -p "$dst/src.tmp"
tar -xzf "$sdist" -C "$dst/src.tmp"
mv "$dst/src.tmp/llama_cpp_python-$version/vendor/llama.cpp" "$dst/src"
rm -rf "$dst/src.tmp"
if ! command -v cmake >/dev/null; then
  echo "setup-llama-tools: cmake is not installed" >&2
  exit 1
fi
# shellcheck disable=SC2086
cmake -S "$dst/src" -B "$dst/build" $cmake_args >"$dst/cmake.log" 2>&1 ||
  { tail -30 "$dst/cmake.log" >&2; exit 1; }
# shellcheck disable=SC2086
cmake --build "$dst/build" --parallel "$(nproc)" --target $targets >"$dst/build.log" 2>&1 ||
  { tail -30 "$dst/build.log" >&2; exit 1; }
rm -f "$dst"/.setup-*
echo "$cmake_args" >"$stamp"
rm -rf "$dst/bin"
mkdir -p "$dst/bin"
for t in $targets; do
  cp "$dst/build/bin/$t" "$dst/bin/$t"
  echo "built $t" >>"$stamp"
done
build_logits
echo "setup-llama-tools: done in $(( $(date +%s) - start ))s" >&2
