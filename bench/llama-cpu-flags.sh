# Sourced by bench/setup-llama.sh and bench/setup-llama-tools.sh: the cmake
# flags both llama.cpp builds take, for what this machine runs. AVX, AVX2,
# FMA and F16C always (x86-64-v3); AVX-512 (F, CD, VL, DQ, BW, as ggml's
# GGML_AVX512 compiles for) and each of its extensions ggml uses (VBMI,
# VNNI, BF16) where a probe compiled and run here executes its
# instructions (the CPU lists them and the kernel saves their registers),
# each on its own: a CPU with AVX-512 and VNNI but no BF16 (Intel's Ice
# Lake) gets the first two. So llama.cpp is measured at its best on this
# CPU, as archgen's kernels pick their path at run time. GGML_NATIVE=OFF
# keeps the set explicit; no GPU backends, no BLAS, no curl, no tests or
# examples. Sets avx512 (what it found, for messages) and llama_cpu_args.
probe=$(mktemp -d)

# runs TARGET BODY: whether a function compiled for TARGET and doing BODY
# (with a, an __m512i, and f, an __m512) runs here.
runs() {
  cat >"$probe/p.c" <<C
#include <immintrin.h>
__attribute__((target("$1")))
int main(void) {
  volatile int seed = 3;
  __m512i a = _mm512_set1_epi32(seed);
  __m512 f = _mm512_set1_ps((float)seed);
  $2
  return _mm512_reduce_add_epi32(a) + (int)_mm512_reduce_add_ps(f) > 0 ? 0 : 1;
}
C
  ${CC:-cc} -O1 -o "$probe/p" "$probe/p.c" && "$probe/p"
} 2>/dev/null

base=OFF vbmi=OFF vnni=OFF bf16=OFF
if runs "avx512f,avx512cd,avx512vl,avx512dq,avx512bw" \
  "a = _mm512_add_epi8(a, _mm512_maskz_mov_epi8(_mm512_movepi8_mask(a), a)); f = _mm512_and_ps(f, f);"; then
  base=ON
  runs "avx512f,avx512bw,avx512vbmi" "a = _mm512_permutexvar_epi8(a, a);" && vbmi=ON
  runs "avx512f,avx512bw,avx512vnni" "a = _mm512_dpbusd_epi32(a, a, a);" && vnni=ON
  runs "avx512f,avx512bw,avx512bf16" \
    "__m512bh h = _mm512_cvtne2ps_pbh(f, f); f = _mm512_dpbf16_ps(f, h, h);" && bf16=ON
fi
rm -rf "$probe"
avx512="$base (VBMI $vbmi, VNNI $vnni, BF16 $bf16)"
llama_cpu_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=$base -DGGML_AVX512_VBMI=$vbmi -DGGML_AVX512_VNNI=$vnni -DGGML_AVX512_BF16=$bf16 -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
