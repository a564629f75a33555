// The AVX-512 integer path of the native quantized linear layer: see
// qmv16.h.
#include "qmv16.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define ARCHGEN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace archgen {

namespace {

// How far ahead of its reads the kernels ask for W, into the L2 cache
// (software prefetch): W streams from memory once per step, and with the
// hardware prefetchers alone the kernel waited on memory, reading the 8-bit
// head of SmolLM2-135M (49152 x 576) at 5-8 GB/s on one core; 8 KiB ahead
// into L2 it reads it at 22-24, the rate of the kernel on a W already in
// L2 (prefetching into L1, or 2-4 KiB ahead, gave 8-16).
#ifndef ARCHGEN_QMV16_PREFETCH
#define ARCHGEN_QMV16_PREFETCH 8192
#endif
constexpr int PF = ARCHGEN_QMV16_PREFETCH;
// The same for the scales and biases, a row's worth per row: at 4 bits in
// groups of 32 with half-precision scales, W's 8 KiB ahead is 1 KiB of them.
constexpr int kScalePrefetch = PF / 8;

// n (at most 16) values of kind k from p, widened to float32; the lanes
// past n read as zero.
ARCHGEN_AVX512 inline __m512 load16(const void* p, int n, Kind k) {
  const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
  switch (k) {
    case Kind::f16:
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    case Kind::bf16:
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    default:
      return _mm512_maskz_loadu_ps(m, p);
  }
}

// For rows n..n+R-1 of W against one row of x: each group's x step times
// W's scale (into dsc[r * groups + g]) and the bias term, sum over groups
// of W's bias times x's sum (into bias[r]).
template <int R>
ARCHGEN_AVX512 void group_factors(const XQ16& x, int m, const void* scales, const void* biases,
                                  Kind sk, size_t n, float* dsc, float* bias) {
  const int groups = x.K / x.group;
  const float* step = x.step.data() + static_cast<size_t>(m) * groups;
  const float* sum = x.sum.data() + static_cast<size_t>(m) * groups;
  const size_t es = kind_size(sk);
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    const char* s = static_cast<const char*>(scales) + (n + r) * groups * es;
    const char* b = static_cast<const char*>(biases) + (n + r) * groups * es;
    _mm_prefetch(s + kScalePrefetch, _MM_HINT_T1);
    _mm_prefetch(b + kScalePrefetch, _MM_HINT_T1);
    __m512 acc = _mm512_setzero_ps();
    for (int g = 0; g < groups; g += 16) {
      const int c = std::min(16, groups - g);
      const __mmask16 mk = static_cast<__mmask16>((1u << c) - 1);
      const __m512 sv = load16(s + g * es, c, sk);
      _mm512_mask_storeu_ps(dsc + r * groups + g, mk,
                            _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(mk, step + g)));
      acc = _mm512_fmadd_ps(load16(b + g * es, c, sk), _mm512_maskz_loadu_ps(mk, sum + g), acc);
    }
    bias[r] = _mm512_reduce_add_ps(acc);
  }
}

// The 32 bytes of chunk c of row r of W widened to 16-bit words; on even
// chunks it also asks for the bytes PF ahead (a 64-byte line holds two
// chunks).
ARCHGEN_AVX512 inline __m512i chunk_words(const uint8_t* w0, size_t row_bytes, int r, int c) {
  const uint8_t* p = w0 + r * row_bytes + c * 32;
  if (c % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(p + PF), _MM_HINT_T1);
  return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// res[r] = sum over groups of dsc[r][g] times the integer dot product of
// the group's 4-bit weights in row n + r with x's 16-bit values, for R rows
// of W (row_bytes apart from w0) at once: x's values are loaded once for
// all of them, and each row keeps accumulators of its own.
template <int R, int G>
ARCHGEN_AVX512 void dot4(const int16_t* xq, const uint8_t* w0, size_t row_bytes, const float* dsc,
                         int K, float* res) {
  const int groups = K / G;
  const __m512i m4 = _mm512_set1_epi16(0x0f);
  __m512 tot[R];
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) tot[r] = _mm512_setzero_ps();
  if constexpr (G == 32) {
    // A chunk of 64 values holds two groups: its 32 bytes widen to 32
    // words, the first 16 of them (lanes 0-7 of the sums) from the first
    // group and the rest (lanes 8-15) from the second.
    const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int c = 0; c < K / 64; c++) {
      const __m512i xl = _mm512_loadu_si512(xq + c * 64);
      const __m512i xh = _mm512_loadu_si512(xq + c * 64 + 32);
      #pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        const __m512i wv = chunk_words(w0, row_bytes, r, c);
        __m512i acc = _mm512_madd_epi16(_mm512_and_si512(wv, m4), xl);
        acc = _mm512_dpwssd_epi32(acc, _mm512_srli_epi16(wv, 4), xh);
        double pair;
        std::memcpy(&pair, dsc + r * groups + 2 * c, sizeof pair);
        const __m512 sv = _mm512_permutexvar_ps(
            halves, _mm512_castps128_ps512(_mm_castpd_ps(_mm_set_sd(pair))));
        tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), sv, tot[r]);
      }
    }
  } else {
    for (int g = 0; g < groups; g++) {
      __m512i a0[R], a1[R];
      #pragma GCC unroll 4
      for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm512_setzero_si512();
      #pragma GCC unroll 4
      for (int c = g * (G / 64); c < (g + 1) * (G / 64); c++) {
        const __m512i xl = _mm512_loadu_si512(xq + c * 64);
        const __m512i xh = _mm512_loadu_si512(xq + c * 64 + 32);
        #pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
          const __m512i wv = chunk_words(w0, row_bytes, r, c);
          a0[r] = _mm512_dpwssd_epi32(a0[r], _mm512_and_si512(wv, m4), xl);
          a1[r] = _mm512_dpwssd_epi32(a1[r], _mm512_srli_epi16(wv, 4), xh);
        }
      }
      #pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0[r], a1[r])),
                                 _mm512_set1_ps(dsc[r * groups + g]), tot[r]);
      }
    }
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) res[r] = _mm512_reduce_add_ps(tot[r]);
}

// dot4 for 8-bit weights: a chunk of 32 values is one zmm of words.
template <int R, int G>
ARCHGEN_AVX512 void dot8(const int16_t* xq, const uint8_t* w0, size_t row_bytes, const float* dsc,
                         int K, float* res) {
  const int groups = K / G;
  __m512 tot[R];
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) tot[r] = _mm512_setzero_ps();
  for (int g = 0; g < groups; g++) {
    __m512i a[R];
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) a[r] = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int c = g * (G / 32); c < (g + 1) * (G / 32); c++) {
      const __m512i xv = _mm512_loadu_si512(xq + c * 32);
      #pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        const __m512i wv = chunk_words(w0, row_bytes, r, c);
        a[r] = _mm512_dpwssd_epi32(a[r], wv, xv);
      }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[r]), _mm512_set1_ps(dsc[r * groups + g]),
                               tot[r]);
    }
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) res[r] = _mm512_reduce_add_ps(tot[r]);
}

// 16 values of x on the integer grid of their group (inv: 1 / its step),
// rounded to nearest even and held within 16 bits.
ARCHGEN_AVX512 inline __m512i grid16(const float* x, float inv) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), _mm512_set1_ps(inv)));
  return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-32768)), _mm512_set1_epi32(32767));
}

// Values k0..k0+31 of a row of x rounded to the nearest step of their
// group (inv: each group's 1 / step), as 16-bit integers in order
// (saturating, though |x| / step <= 32767).
ARCHGEN_AVX512 inline __m512i words32(const float* xr, int k0, const float* inv, int group) {
  __m256i h[2];
  for (int i = 0; i < 2; i++) {
    const int k = k0 + 16 * i;
    h[i] = _mm512_cvtsepi32_epi16(grid16(xr + k, inv[k / group]));
  }
  return _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);
}

template <int R>
ARCHGEN_AVX512 void dot_rows16(const int16_t* xq, const uint8_t* w0, size_t row_bytes,
                               const float* dsc, int K, int group, int bits, float* res) {
  if (bits == 4) {
    if (group == 32) dot4<R, 32>(xq, w0, row_bytes, dsc, K, res);
    else if (group == 64) dot4<R, 64>(xq, w0, row_bytes, dsc, K, res);
    else dot4<R, 128>(xq, w0, row_bytes, dsc, K, res);
  } else {
    if (group == 32) dot8<R, 32>(xq, w0, row_bytes, dsc, K, res);
    else if (group == 64) dot8<R, 64>(xq, w0, row_bytes, dsc, K, res);
    else dot8<R, 128>(xq, w0, row_bytes, dsc, K, res);
  }
}

}  // namespace

bool qmv16_fits(int bits, int group, int K) {
  return (bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128) && K > 0 &&
         K % 64 == 0 && K % group == 0;
}

ARCHGEN_AVX512 void qmv16_prepare(const float* x, int M, int K, int group, int bits, XQ16& out) {
  const int groups = K / group;
  out.M = M;
  out.K = K;
  out.group = group;
  out.bits = bits;
  out.q.resize(static_cast<size_t>(M) * K);
  out.step.resize(static_cast<size_t>(M) * groups);
  out.sum.resize(static_cast<size_t>(M) * groups);
  thread_local std::vector<float> inv;
  inv.resize(static_cast<size_t>(groups));
  // Word indices picking the even and the odd values of two zmm of 32
  // words (values 0-31 and 32-63 of a chunk).
  alignas(64) int16_t ev[32], od[32];
  for (int j = 0; j < 32; j++) {
    ev[j] = static_cast<int16_t>(2 * j);
    od[j] = static_cast<int16_t>(2 * j + 1);
  }
  const __m512i even = _mm512_load_si512(ev), odd = _mm512_load_si512(od);
  for (int m = 0; m < M; m++) {
    const float* xr = x + static_cast<size_t>(m) * K;
    float* step = out.step.data() + static_cast<size_t>(m) * groups;
    float* sum = out.sum.data() + static_cast<size_t>(m) * groups;
    for (int g = 0; g < groups; g++) {
      __m512 mx = _mm512_setzero_ps();
      for (int i = g * group; i < (g + 1) * group; i += 16) {
        mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(xr + i)));
      }
      const float amax = _mm512_reduce_max_ps(mx);
      step[g] = amax / 32767.0f;
      inv[g] = amax > 0 ? 32767.0f / amax : 0.0f;
      // The bias term's sum is of x as rounded, so that the product is
      // exactly that of the rounded x (qmv16_round's, for more rows).
      __m512i qs = _mm512_setzero_si512();
      for (int i = g * group; i < (g + 1) * group; i += 16) {
        qs = _mm512_add_epi32(qs, grid16(xr + i, inv[g]));
      }
      sum[g] = static_cast<float>(_mm512_reduce_add_epi32(qs)) * step[g];
    }
    int16_t* q = out.q.data() + static_cast<size_t>(m) * K;
    if (bits == 4) {
      for (int c = 0; c < K; c += 64) {
        const __m512i a = words32(xr, c, inv.data(), group), b = words32(xr, c + 32, inv.data(), group);
        _mm512_storeu_si512(q + c, _mm512_permutex2var_epi16(a, even, b));
        _mm512_storeu_si512(q + c + 32, _mm512_permutex2var_epi16(a, odd, b));
      }
    } else {
      for (int c = 0; c < K; c += 32) _mm512_storeu_si512(q + c, words32(xr, c, inv.data(), group));
    }
  }
}

ARCHGEN_AVX512 void qmv16_round(const float* x, int M, int K, int group, float* out) {
  for (int m = 0; m < M; m++) {
    const float* xr = x + static_cast<size_t>(m) * K;
    float* o = out + static_cast<size_t>(m) * K;
    for (int g0 = 0; g0 < K; g0 += group) {
      __m512 mx = _mm512_setzero_ps();
      for (int i = g0; i < g0 + group; i += 16) {
        mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(xr + i)));
      }
      const float amax = _mm512_reduce_max_ps(mx);
      const float step = amax / 32767.0f, inv = amax > 0 ? 32767.0f / amax : 0.0f;
      for (int i = g0; i < g0 + group; i += 16) {
        _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_cvtepi32_ps(grid16(xr + i, inv)),
                                              _mm512_set1_ps(step)));
      }
    }
  }
}

ARCHGEN_AVX512 void qmv16_rows(const XQ16& x, const uint8_t* w, const void* scales,
                               const void* biases, Kind sk, void* out, Kind ok, int N, int n_lo,
                               int n_hi) {
  constexpr int R = 4;
  const int K = x.K, groups = K / x.group;
  const size_t row_bytes = static_cast<size_t>(K) * x.bits / 8;
  thread_local std::vector<float> dsc;
  dsc.resize(static_cast<size_t>(R) * groups);
  float bias[R], res[R];
  int n = n_lo;
  // Blocks of R rows of W, each against every row of x while it is in
  // the L1 cache.
  for (; n + R <= n_hi; n += R) {
    for (int m = 0; m < x.M; m++) {
      group_factors<R>(x, m, scales, biases, sk, n, dsc.data(), bias);
      dot_rows16<R>(x.q.data() + static_cast<size_t>(m) * K, w + n * row_bytes, row_bytes,
                    dsc.data(), K, x.group, x.bits, res);
      #pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        store1(out, static_cast<size_t>(m) * N + n + r, res[r] + bias[r], ok);
      }
    }
  }
  for (; n < n_hi; n++) {
    for (int m = 0; m < x.M; m++) {
      group_factors<1>(x, m, scales, biases, sk, n, dsc.data(), bias);
      dot_rows16<1>(x.q.data() + static_cast<size_t>(m) * K, w + n * row_bytes, row_bytes,
                    dsc.data(), K, x.group, x.bits, res);
      store1(out, static_cast<size_t>(m) * N + n, res[0] + bias[0], ok);
    }
  }
}

bool cpu_has_avx512_vnni() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("avx512f") ||
      !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
      !__builtin_cpu_supports("avx512vnni")) {
    return false;
  }
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0) {
    return false;
  }
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  // SSE, AVX, the opmask registers and both halves of the zmm state.
  return (lo & 0xe6) == 0xe6;
}

}  // namespace archgen
