# Sourced by bench/setup-llama.sh and bench/setup-llama-tools.sh: the cmake
# flags both llama.cpp builds take, for what this machine runs. AVX, AVX2,
# FMA and F16C always (x86-64-v3), and AVX-512 (F, BW, VL, VBMI, VNNI, BF16)
# where a probe compiled and run here executes those instructions (the CPU
# lists them and the kernel saves their registers), so llama.cpp is
# measured at its best on this CPU, as archgen's kernels pick their path at
# run time. GGML_NATIVE=OFF keeps the set explicit; no GPU backends, no
# BLAS, no curl, no tests or examples. Sets avx512 (ON or OFF) and
# llama_cpu_args.
avx512=OFF
probe=$(mktemp -d)
cat >"$probe/p.c" <<'C'
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
C
if ${CC:-cc} -O1 -o "$probe/p" "$probe/p.c" 2>/dev/null && "$probe/p" 2>/dev/null; then
  avx512=ON
fi
rm -rf "$probe"
llama_cpu_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=$avx512 -DGGML_AVX512_VBMI=$avx512 -DGGML_AVX512_VNNI=$avx512 -DGGML_AVX512_BF16=$avx512 -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
