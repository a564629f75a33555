#!/usr/bin/env bash
# Installs llama.cpp, as llama-cpp-python (pinned in bench/llama-requirements.lock),
# into a venv of its own, .deps/llama (git-ignored), for `make bench` only.
#
# PyPI has only the sdist, so pip builds llama.cpp here: 7-13 minutes on two
# cores, once. The build uses what this machine runs: AVX, AVX2, FMA and
# F16C always (x86-64-v3), and AVX-512 (F, BW, VL, VBMI, VNNI, BF16) where a
# probe compiled and run here executes those instructions (the CPU lists
# them and the kernel saves their registers), so llama.cpp is measured at
# its best on this CPU, as archgen's kernels pick their path at run time.
# GGML_NATIVE=OFF keeps the set explicit. OpenMP threads, no GPU backends,
# no BLAS. A stamp records the pins and flags; a second run with the same
# ones returns at once, and a machine with another set rebuilds.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.deps/llama"
req="$root/bench/llama-requirements.lock"
cons="$root/bench/llama-build.lock"
python=${PYTHON:-python3}
avx512=OFF
probe=$(mktemp -d)
cat >"$probe/p.c" <<'EOF'
#include <immintrin.h>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,avx512bf16")))
int main(void) {
  volatile int seed = 3;
  __m512i a = _mm512_set1_epi32(seed), b = _mm512_dpbusd_epi32(a, a, a);
  __m512 f = _mm512_set1_ps((float)seed);
  __m512bh h = _mm512_cvtne2ps_pbh(f, f);
  __m512 g = _mm512_dpbf16_ps(f, h, h);
  return _mm512_reduce_add_epi32(b) + (int)_mm512_reduce_add_ps(g) > 0 ? 0 : 1;
}
EOF
if ${CC:-cc} -O1 -o "$probe/p" "$probe/p.c" 2>/dev/null && "$probe/p" 2>/dev/null; then
  avx512=ON
fi
rm -rf "$probe"
cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=$avx512 -DGGML_AVX512_VBMI=$avx512 -DGGML_AVX512_VNNI=$avx512 -DGGML_AVX512_BF16=$avx512 -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF"

key=$( (cat "$req" "$cons" "$0"; echo "$cmake_args") | sha256sum | cut -c1-16)
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
