// The AVX2 form of qmv16 (qmv16.h): the decode products of a float32 x and
// a 4- or 8-bit W on CPUs without AVX-512's VNNI, on the same grid of x as
// the AVX-512 kernel, with AVX2's integer products in place of vpdpbusd.
//
// At 4 bits x is held in the AVX-512 kernel's planes. vpmaddubsw multiplies
// W's unsigned nibbles by a plane's signed bytes and adds adjacent pairs
// into 16-bit integers, exactly: a pair's sum is at most 2 * 15 * 128 in
// magnitude, and the even and the odd values' sums added together at most
// twice that, far inside 16 bits. vpmaddwd then widens them to 32 bits, by
// 1 for the l plane and by 256 for the h plane, so that a 32-bit lane holds
// the exact product of 8 consecutive values of x (on the grid) with their
// weights, all in one group, which the group's factor (x's step times W's
// scale) multiplies as in the AVX-512 kernel. That is 16 instructions for
// 64 weights where the float32 kernel (dot_rows, qmm.cpp) takes 28, and W
// is asked for ahead of the reads: on an AMD EPYC without AVX-512 the
// Llama-3.2-1B geometry in mlx's 4-bit g64 decodes at 24-28 tokens/s on it
// where the float32 kernel gave 12-13.
//
// At 8 bits W's bytes times a plane's bytes could overflow vpmaddubsw's
// pairs, so x is held as its 16-bit values in order, W's bytes are widened
// to 16 bits and vpmaddwd multiplies the two: a group's products are
// summed in 32-bit integers (at most 255 * 32639 * 16 a lane at groups of
// 128) and scaled once: the 1B geometry in mlx's 8-bit g64 decodes at 17-19
// tokens/s on it where the float32 kernel gave 11 (llama.cpp's Q8_0: 18).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "panel.h"
#include "qmv16.h"

#define ARCHGEN_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace archgen {

namespace {

// x's grid, as qmv16.cpp's (kQ16 there): values within +-32639 steps, so
// that each splits into two signed bytes.
constexpr int kGrid = 32639;

// W's bytes read this far ahead of the kernel, into L2, and a row's scales
// and biases an eighth as far: as qmv16.cpp, for the same reason (the
// hardware prefetchers alone leave the kernel waiting on memory).
constexpr int kAhead = 8192;
constexpr int kScaleAhead = kAhead / 8;

ARCHGEN_AVX2 inline int hsum8i(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// 8 values of kind k from p, widened to float32.
ARCHGEN_AVX2 inline __m256 load8(const void* p, Kind k) {
  switch (k) {
    case Kind::f16:
      return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    case Kind::bf16:
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))), 16));
    default:
      return _mm256_loadu_ps(static_cast<const float*>(p));
  }
}

// The grid of the n values of a group at x (n a multiple of 8): its step,
// the group's largest magnitude over kGrid, and inv, 1 / the step (0 for a
// group of zeros). The same operations as qmv16.cpp's group_grid, so the
// same values.
ARCHGEN_AVX2 inline void group_grid(const float* x, int n, float& step, float& inv) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 mx = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(x + i), absmask));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  step = amax / static_cast<float>(kGrid);
  inv = amax > 0 ? static_cast<float>(kGrid) / amax : 0.0f;
}

// 8 values of x on their group's grid (inv: 1 / its step), rounded to
// nearest even and held within kGrid.
ARCHGEN_AVX2 inline __m256i grid8(const float* x, float inv) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), _mm256_set1_ps(inv)));
  return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-kGrid)), _mm256_set1_epi32(kGrid));
}

// Writes 8 values v of the grid as their planes' bytes (h = (v + 128) >>
// 8, l = v - 256 h), 8 of each.
ARCHGEN_AVX2 inline void split_planes8(__m256i v, int8_t* l, int8_t* h) {
  const __m256i hv = _mm256_srai_epi32(_mm256_add_epi32(v, _mm256_set1_epi32(128)), 8);
  const __m256i lv = _mm256_sub_epi32(v, _mm256_slli_epi32(hv, 8));
  // The low byte of each 32-bit lane, packed into the first 4 bytes of
  // each 128-bit half, then the halves' 4 bytes side by side.
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i lb = _mm256_shuffle_epi8(lv, pick), hb = _mm256_shuffle_epi8(hv, pick);
  const __m128i l8 = _mm_unpacklo_epi32(_mm256_castsi256_si128(lb), _mm256_extracti128_si256(lb, 1));
  const __m128i h8 = _mm_unpacklo_epi32(_mm256_castsi256_si128(hb), _mm256_extracti128_si256(hb, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(l), l8);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(h), h8);
}

// For rows n..n+R-1 of W against row m of x: each group's x step times W's
// scale, into dsc[r * groups + g], and the bias term, the sum over groups
// of W's bias times x's sum, into bias[r].
template <int R>
ARCHGEN_AVX2 void group_factors(const XQ16& x, int m, const void* scales, const void* biases, Kind sk,
                                size_t n, float* dsc, float* bias) {
  const int groups = x.K / x.group;
  const float* step = x.step.data() + static_cast<size_t>(m) * groups;
  const float* sum = x.sum.data() + static_cast<size_t>(m) * groups;
  const size_t es = kind_size(sk);
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    const char* s = static_cast<const char*>(scales) + (n + r) * groups * es;
    const char* b = static_cast<const char*>(biases) + (n + r) * groups * es;
    _mm_prefetch(s + kScaleAhead, _MM_HINT_T1);
    _mm_prefetch(b + kScaleAhead, _MM_HINT_T1);
    __m256 acc = _mm256_setzero_ps();
    int g = 0;
    for (; g + 8 <= groups; g += 8) {
      _mm256_storeu_ps(dsc + r * groups + g, _mm256_mul_ps(load8(s + g * es, sk), _mm256_loadu_ps(step + g)));
      acc = _mm256_fmadd_ps(load8(b + g * es, sk), _mm256_loadu_ps(sum + g), acc);
    }
    float tail = 0;
    for (; g < groups; g++) {
      dsc[r * groups + g] = load1(s, g, sk) * step[g];
      tail += load1(b, g, sk) * sum[g];
    }
    bias[r] = hsum(acc) + tail;
  }
}

// res[r] = init[r] plus the sum over groups of dsc[r][g] times the integer
// dot product of the group's 4-bit weights in row r (of R, row_bytes apart
// from w0) with x's values on the grid (the planes xb: see qmv16.h's XQ16).
// Each 32 bytes of a row (64 values) are one step: their low nibbles are
// the even values, at 32 bytes of the even planes, the high ones the odd
// values. x's bytes of a step are read once for all R rows.
template <int R, int G>
ARCHGEN_AVX2 void dot4(const int8_t* xb, const uint8_t* w0, size_t row_bytes, const float* dsc, int groups,
                       const float* init, float* res) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1), k256 = _mm256_set1_epi16(256);
  __m256 tot[R];
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) tot[r] = _mm256_setzero_ps();
  const int steps = static_cast<int>(row_bytes / 32);
  for (int h = 0; h < steps; h++) {
    // Step h: chunk h / 2 of the planes (256 bytes: l and h of the even
    // values, then of the odd), its half h % 2.
    const int8_t* xc = xb + static_cast<size_t>(h >> 1) * 256 + (h & 1) * 32;
    const __m256i xle = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc));
    const __m256i xhe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 64));
    const __m256i xlo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 128));
    const __m256i xho = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 192));
    const int g0 = h * 64 / G;  // the step's (first) group
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      const uint8_t* p = w0 + r * row_bytes + static_cast<size_t>(h) * 32;
      if ((h & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(p + kAhead), _MM_HINT_T1);
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i we = _mm256_and_si256(wv, m4);
      const __m256i wo = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
      const __m256i l16 = _mm256_add_epi16(_mm256_maddubs_epi16(we, xle), _mm256_maddubs_epi16(wo, xlo));
      const __m256i h16 = _mm256_add_epi16(_mm256_maddubs_epi16(we, xhe), _mm256_maddubs_epi16(wo, xho));
      const __m256i s32 = _mm256_add_epi32(_mm256_madd_epi16(l16, ones), _mm256_madd_epi16(h16, k256));
      // Lane i holds values 8i..8i+7 of the step: one group for G >= 64,
      // the first four lanes' and the last four's for G == 32.
      const float* f = dsc + r * groups + g0;
      __m256 fv;
      if constexpr (G == 32) {
        fv = _mm256_set_m128(_mm_broadcast_ss(f + 1), _mm_broadcast_ss(f));
      } else {
        fv = _mm256_broadcast_ss(f);
      }
      tot[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), fv, tot[r]);
    }
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) res[r] = hsum(tot[r]) + init[r];
}

template <int R>
ARCHGEN_AVX2 void dot4_rows(const int8_t* xb, const uint8_t* w0, size_t row_bytes, const float* dsc, int groups,
                            int group, const float* init, float* res) {
  if (group == 32) dot4<R, 32>(xb, w0, row_bytes, dsc, groups, init, res);
  else if (group == 64) dot4<R, 64>(xb, w0, row_bytes, dsc, groups, init, res);
  else dot4<R, 128>(xb, w0, row_bytes, dsc, groups, init, res);
}

// The same for 8-bit W against x's 16-bit values xv (in order): each 32
// values of a row two vpmaddwd, a group's sums kept in integers and scaled
// once.
template <int R, int G>
ARCHGEN_AVX2 void dot8(const int16_t* xv, const uint8_t* w0, size_t row_bytes, const float* dsc, int groups,
                       const float* init, float* res) {
  __m256 tot[R];
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) tot[r] = _mm256_setzero_ps();
  for (int g = 0; g < groups; g++) {
    __m256i s32[R];
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) s32[r] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int k = g * G; k < (g + 1) * G; k += 32) {
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xv + k));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xv + k + 16));
      #pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        const uint8_t* p = w0 + r * row_bytes + k;
        if ((k & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(p + kAhead), _MM_HINT_T1);
        const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
        s32[r] = _mm256_add_epi32(s32[r], _mm256_add_epi32(_mm256_madd_epi16(a, x0), _mm256_madd_epi16(b, x1)));
      }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      tot[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[r]), _mm256_broadcast_ss(dsc + r * groups + g), tot[r]);
    }
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) res[r] = hsum(tot[r]) + init[r];
}

template <int R>
ARCHGEN_AVX2 void dot8_rows(const int16_t* xv, const uint8_t* w0, size_t row_bytes, const float* dsc, int groups,
                            int group, const float* init, float* res) {
  if (group == 32) dot8<R, 32>(xv, w0, row_bytes, dsc, groups, init, res);
  else if (group == 64) dot8<R, 64>(xv, w0, row_bytes, dsc, groups, init, res);
  else dot8<R, 128>(xv, w0, row_bytes, dsc, groups, init, res);
}

}  // namespace

ARCHGEN_AVX2 void qmv16_prepare_avx2(const float* x, int M, int K, int group, int bits, XQ16& out) {
  const int groups = K / group;
  const int chunks = (K + 127) / 128;
  out.M = M;
  out.K = K;
  out.group = group;
  out.bits = bits;
  out.chunks = chunks;
  if (bits == 4) {
    out.planes.assign(static_cast<size_t>(M) * chunks * 256, 0);
    out.values.clear();
  } else {
    out.values.resize(static_cast<size_t>(M) * K);
    out.planes.clear();
  }
  out.step.resize(static_cast<size_t>(M) * groups);
  out.sum.resize(static_cast<size_t>(M) * groups);
  thread_local std::vector<float> inv;
  inv.resize(static_cast<size_t>(groups));
  for (int m = 0; m < M; m++) {
    const float* xr = x + static_cast<size_t>(m) * K;
    float* step = out.step.data() + static_cast<size_t>(m) * groups;
    float* sum = out.sum.data() + static_cast<size_t>(m) * groups;
    for (int g = 0; g < groups; g++) {
      group_grid(xr + g * group, group, step[g], inv[g]);
      // The sum of x as rounded, so that the bias term is that of the
      // rounded x too.
      __m256i qs = _mm256_setzero_si256();
      for (int i = g * group; i < (g + 1) * group; i += 8) qs = _mm256_add_epi32(qs, grid8(xr + i, inv[g]));
      sum[g] = static_cast<float>(hsum8i(qs)) * step[g];
    }
    if (bits == 8) {
      int16_t* v = out.values.data() + static_cast<size_t>(m) * K;
      for (int k = 0; k < K; k += 16) {
        const float iv = inv[k / group];
        const __m256i a = grid8(xr + k, iv), c = grid8(xr + k + 8, iv);
        // packed within each 128-bit half (a0-3 c0-3 | a4-7 c4-7), then in order
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, c), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + k), p);
      }
      continue;
    }
    int8_t* b = out.planes.data() + static_cast<size_t>(m) * chunks * 256;
    // 16 values at a time (groups are multiples of 32, so one group): the
    // even ones to 8 bytes of the even planes, the odd ones to the odd.
    for (int k = 0; k < K; k += 16) {
      const float iv = inv[k / group];
      const __m256 a = _mm256_castsi256_ps(grid8(xr + k, iv));
      const __m256 c = _mm256_castsi256_ps(grid8(xr + k + 8, iv));
      // Within each 128-bit half, a's and c's even (odd) lanes; then the
      // 64-bit quarters in order: a0 a2 a4 a6 c0 c2 c4 c6.
      const __m256i ev = _mm256_permute4x64_epi64(
          _mm256_castps_si256(_mm256_shuffle_ps(a, c, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0));
      const __m256i od = _mm256_permute4x64_epi64(
          _mm256_castps_si256(_mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0));
      const int j = (k % 128) / 2;
      int8_t* p = b + static_cast<size_t>(k / 128) * 256;
      split_planes8(ev, p + j, p + 64 + j);
      split_planes8(od, p + 128 + j, p + 192 + j);
    }
  }
}

ARCHGEN_AVX2 void qmv16_round_avx2(const float* x, int M, int K, int group, float* out) {
  for (int m = 0; m < M; m++) {
    const float* xr = x + static_cast<size_t>(m) * K;
    float* o = out + static_cast<size_t>(m) * K;
    for (int g0 = 0; g0 < K; g0 += group) {
      float step, inv;
      group_grid(xr + g0, group, step, inv);
      for (int i = g0; i < g0 + group; i += 8) {
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_cvtepi32_ps(grid8(xr + i, inv)), _mm256_set1_ps(step)));
      }
    }
  }
}

ARCHGEN_AVX2 void qmv16_rows_avx2(const XQ16& x, const uint8_t* w, const void* scales, const void* biases,
                                  Kind sk, void* out, Kind ok, int N, int n_lo, int n_hi) {
  constexpr int R = 4;
  const int K = x.K, groups = K / x.group;
  const size_t row_bytes = static_cast<size_t>(K) * x.bits / 8;
  const size_t xrow = static_cast<size_t>(x.chunks) * 256;
  thread_local std::vector<float> dsc;
  dsc.resize(static_cast<size_t>(R) * groups);
  // Row m of x against rows n.. of W, B of them.
  auto dot = [&]<int B>(int m, int n, const float* init, float* out) {
    if (x.bits == 8) {
      dot8_rows<B>(x.values.data() + static_cast<size_t>(m) * K, w + n * row_bytes, row_bytes, dsc.data(),
                   groups, x.group, init, out);
    } else {
      dot4_rows<B>(x.planes.data() + m * xrow, w + n * row_bytes, row_bytes, dsc.data(), groups, x.group, init,
                   out);
    }
  };
  float bias[R], res[R];
  int n = n_lo;
  // Blocks of R rows of W, each against every row of x while it is in the
  // L1 cache.
  for (; n + R <= n_hi; n += R) {
    for (int m = 0; m < x.M; m++) {
      group_factors<R>(x, m, scales, biases, sk, n, dsc.data(), bias);
      dot.template operator()<R>(m, n, bias, res);
      #pragma GCC unroll 4
      for (int r = 0; r < R; r++) store1(out, static_cast<size_t>(m) * N + n + r, res[r], ok);
    }
  }
  for (; n < n_hi; n++) {
    for (int m = 0; m < x.M; m++) {
      group_factors<1>(x, m, scales, biases, sk, n, dsc.data(), bias);
      dot.template operator()<1>(m, n, bias, res);
      store1(out, static_cast<size_t>(m) * N + n, res[0], ok);
    }
  }
}

}  // namespace archgen
