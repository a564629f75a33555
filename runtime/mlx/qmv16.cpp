// The AVX-512 integer paths of the native quantized linear layer: see
// qmv16.h.
#include "qmv16.h"

#include "avx512.h"
#include "blockq.h"

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

// x's grid: values within +-kQ16 steps (the group's largest magnitude over
// kQ16), so that each splits into two signed bytes (see dotb).
constexpr int kQ16 = 32639;

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
// W's scale (into dsc[r * groups + g]) and the bias term, the sum over
// groups of W's bias times x's sum, as lanes whose sum it is (into
// bias[r], where the row's dot product then adds its lanes).
template <int R>
ARCHGEN_AVX512 void group_factors(const XQ16& x, int m, const void* scales, const void* biases,
                                  Kind sk, size_t n, float* dsc, __m512* bias) {
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
    bias[r] = acc;
  }
}

// 16 values of x on the integer grid of their group (inv: 1 / its step),
// rounded to nearest even and held within kQ16.
ARCHGEN_AVX512 inline __m512i grid16(const float* x, float inv) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), _mm512_set1_ps(inv)));
  return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-kQ16)), _mm512_set1_epi32(kQ16));
}

// The grid of the n values of a group at x (n a multiple of 16): its
// step, the group's largest magnitude over kQ16, and inv, 1 / the step
// (0 for a group of zeros).
ARCHGEN_AVX512 inline void group_grid(const float* x, int n, float& step, float& inv) {
  __m512 mx = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  const float amax = _mm512_reduce_max_ps(mx);
  step = amax / static_cast<float>(kQ16);
  inv = amax > 0 ? static_cast<float>(kQ16) / amax : 0.0f;
}

// Values per chunk of W (one 64-byte load of a row): 128 at 4 bits, 64 at
// 8; and per 32-bit lane of vpdpbusd's sums, 8 and 4.
template <int BITS>
constexpr int kChunk = BITS == 4 ? 128 : 64;
template <int BITS>
constexpr int kPerLane = BITS == 4 ? 8 : 4;

// The sums of chunk c (64 bytes of each of R rows of W, or the last
// row_bytes % 64 of them and zeros where TAIL) against x's planes xc,
// scaled by each lane's group factor, added to tot: see dotb.
template <int R, int BITS, bool TAIL>
ARCHGEN_AVX512 inline void chunk_sums(const int8_t* xc, const uint8_t* w0, size_t row_bytes, int c,
                                      const float* dsc, int groups, int g0, __m512i idx,
                                      __m512* tot) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const size_t off = static_cast<size_t>(c) * 64;
  const __mmask64 tail = TAIL ? ~0ull >> (64 - (row_bytes - off)) : ~0ull;
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    const uint8_t* p = w0 + r * row_bytes + off;
    __m512i wv;
    if constexpr (TAIL) {
      wv = _mm512_maskz_loadu_epi8(tail, p);
    } else {
      _mm_prefetch(reinterpret_cast<const char*>(p + PF), _MM_HINT_T1);
      wv = _mm512_loadu_si512(p);
    }
    __m512i lo, hi;
    if constexpr (BITS == 4) {
      // Low nibbles: the even values of the chunk; high: the odd ones.
      const __m512i we = _mm512_and_si512(wv, m4);
      const __m512i wo = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
      lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), we, _mm512_loadu_si512(xc));
      lo = _mm512_dpbusd_epi32(lo, wo, _mm512_loadu_si512(xc + 128));
      hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), we, _mm512_loadu_si512(xc + 64));
      hi = _mm512_dpbusd_epi32(hi, wo, _mm512_loadu_si512(xc + 192));
    } else {
      lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, _mm512_loadu_si512(xc));
      hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, _mm512_loadu_si512(xc + 64));
    }
    const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo);
    const __m512 sv = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(dsc + r * groups + g0));
    tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sv, tot[r]);
  }
}

// res[r] = sum over groups of dsc[r][g] times the integer dot product of
// the group's weights in row r (of R, row_bytes apart from w0) with x's
// 16-bit values, each split as 256 h + l with h and l signed bytes (the
// planes of XQ16): vpdpbusd sums W's unsigned bytes (or nibbles) times
// each plane four at a time, exactly, and 256 times the h sums plus the
// l sums are the 16-bit products' sums. A 32-bit lane holds the sums of 8
// (4-bit) or 4 (8-bit) consecutive values, all of one group, whose factor
// the lane is multiplied by. x's planes are read once for all R rows.
template <int R, int BITS, int G>
ARCHGEN_AVX512 void dotb(const int8_t* xb, const uint8_t* w0, size_t row_bytes, const float* dsc,
                         int groups, int chunks, const __m512* init, float* res) {
  constexpr int C = kChunk<BITS>, P = BITS == 4 ? 4 : 2;
  // Lane l of a chunk belongs to group (chunk's first value + l * values
  // per lane) / G: an offset from the chunk's first group.
  alignas(64) int32_t lane_group[16];
  for (int l = 0; l < 16; l++) lane_group[l] = (G >= C) ? 0 : l * kPerLane<BITS> / G;
  const __m512i idx = _mm512_load_si512(lane_group);
  __m512 tot[R];
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) tot[r] = init[r];
  const int full = static_cast<int>(row_bytes / 64);
  for (int c = 0; c < full; c++) {
    chunk_sums<R, BITS, false>(xb + static_cast<size_t>(c) * P * 64, w0, row_bytes, c, dsc,
                               groups, c * C / G, idx, tot);
  }
  if (full < chunks) {
    chunk_sums<R, BITS, true>(xb + static_cast<size_t>(full) * P * 64, w0, row_bytes, full, dsc,
                              groups, full * C / G, idx, tot);
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) res[r] = _mm512_reduce_add_ps(tot[r]);
}

// Writes 16 values v of the grid as their two planes' bytes: h = (v + 128)
// >> 8 and l = v - 256 h, both in [-128, 127] for |v| <= kQ16.
ARCHGEN_AVX512 inline void split_planes(__m512i v, int8_t* l, int8_t* h) {
  const __m512i hv = _mm512_srai_epi32(_mm512_add_epi32(v, _mm512_set1_epi32(128)), 8);
  const __m512i lv = _mm512_sub_epi32(v, _mm512_slli_epi32(hv, 8));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(l), _mm512_cvtepi32_epi8(lv));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), _mm512_cvtepi32_epi8(hv));
}

template <int R>
ARCHGEN_AVX512 void dot_rows16(const int8_t* xb, const uint8_t* w0, size_t row_bytes,
                               const float* dsc, int groups, int chunks, int group, int bits,
                               const __m512* init, float* res) {
  if (bits == 4) {
    if (group == 32) dotb<R, 4, 32>(xb, w0, row_bytes, dsc, groups, chunks, init, res);
    else if (group == 64) dotb<R, 4, 64>(xb, w0, row_bytes, dsc, groups, chunks, init, res);
    else dotb<R, 4, 128>(xb, w0, row_bytes, dsc, groups, chunks, init, res);
  } else {
    if (group == 32) dotb<R, 8, 32>(xb, w0, row_bytes, dsc, groups, chunks, init, res);
    else if (group == 64) dotb<R, 8, 64>(xb, w0, row_bytes, dsc, groups, chunks, init, res);
    else dotb<R, 8, 128>(xb, w0, row_bytes, dsc, groups, chunks, init, res);
  }
}

}  // namespace

bool qmv16_fits(int bits, int group, int K) {
  return (bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128) && K > 0 &&
         K % 64 == 0 && K % group == 0;
}

ARCHGEN_AVX512 void qmv16_prepare(const float* x, int M, int K, int group, int bits, XQ16& out) {
  const int groups = K / group;
  const int C = bits == 4 ? kChunk<4> : kChunk<8>, P = bits == 4 ? 4 : 2;
  const int chunks = (K + C - 1) / C;
  out.M = M;
  out.K = K;
  out.group = group;
  out.bits = bits;
  out.chunks = chunks;
  out.planes.assign(static_cast<size_t>(M) * chunks * P * 64, 0);
  out.step.resize(static_cast<size_t>(M) * groups);
  out.sum.resize(static_cast<size_t>(M) * groups);
  thread_local std::vector<float> inv;
  inv.resize(static_cast<size_t>(groups));
  // Dword indices picking the even and the odd values of two zmm of 16.
  alignas(64) int32_t ev[16], od[16];
  for (int j = 0; j < 16; j++) {
    ev[j] = 2 * j;
    od[j] = 2 * j + 1;
  }
  const __m512i even = _mm512_load_si512(ev), odd = _mm512_load_si512(od);
  for (int m = 0; m < M; m++) {
    const float* xr = x + static_cast<size_t>(m) * K;
    float* step = out.step.data() + static_cast<size_t>(m) * groups;
    float* sum = out.sum.data() + static_cast<size_t>(m) * groups;
    for (int g = 0; g < groups; g++) {
      group_grid(xr + g * group, group, step[g], inv[g]);
      // The bias term's sum is of x as rounded, so that the product is
      // exactly that of the rounded x (qmv16_round's, for more rows).
      __m512i qs = _mm512_setzero_si512();
      for (int i = g * group; i < (g + 1) * group; i += 16) {
        qs = _mm512_add_epi32(qs, grid16(xr + i, inv[g]));
      }
      sum[g] = static_cast<float>(_mm512_reduce_add_epi32(qs)) * step[g];
    }
    int8_t* b = out.planes.data() + static_cast<size_t>(m) * chunks * P * 64;
    // K is a multiple of 64 (qmv16_fits) and of the group, so whole
    // groups of 16 values fill the planes; the rest stays zero.
    if (bits == 4) {
      // Chunk c's planes: l and h of its even values, then of its odd ones.
      for (int k = 0; k < K; k += 32) {
        const int c = k / 128, j = (k % 128) / 2;
        const __m512i a = grid16(xr + k, inv[k / group]), bb = grid16(xr + k + 16, inv[(k + 16) / group]);
        int8_t* p = b + static_cast<size_t>(c) * 256;
        split_planes(_mm512_permutex2var_epi32(a, even, bb), p + j, p + 64 + j);
        split_planes(_mm512_permutex2var_epi32(a, odd, bb), p + 128 + j, p + 192 + j);
      }
    } else {
      for (int k = 0; k < K; k += 16) {
        const int c = k / 64, j = k % 64;
        int8_t* p = b + static_cast<size_t>(c) * 128;
        split_planes(grid16(xr + k, inv[k / group]), p + j, p + 64 + j);
      }
    }
  }
}

ARCHGEN_AVX512 void qmv16_round(const float* x, int M, int K, int group, float* out) {
  for (int m = 0; m < M; m++) {
    const float* xr = x + static_cast<size_t>(m) * K;
    float* o = out + static_cast<size_t>(m) * K;
    for (int g0 = 0; g0 < K; g0 += group) {
      float step, inv;
      group_grid(xr + g0, group, step, inv);
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
  const size_t xrow = static_cast<size_t>(x.chunks) * (x.bits == 4 ? 4 : 2) * 64;
  // The kernel reads 16 factors from a chunk's first group on: zeros past
  // the last row's (their lanes' sums are zero).
  thread_local std::vector<float> dsc;
  dsc.assign(static_cast<size_t>(R) * groups + 16, 0.0f);
  __m512 bias[R];
  float res[R];
  int n = n_lo;
  // Blocks of R rows of W, each against every row of x while it is in
  // the L1 cache.
  for (; n + R <= n_hi; n += R) {
    for (int m = 0; m < x.M; m++) {
      group_factors<R>(x, m, scales, biases, sk, n, dsc.data(), bias);
      dot_rows16<R>(x.planes.data() + m * xrow, w + n * row_bytes, row_bytes, dsc.data(), groups,
                    x.chunks, x.group, x.bits, bias, res);
      #pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        store1(out, static_cast<size_t>(m) * N + n + r, res[r], ok);
      }
    }
  }
  for (; n < n_hi; n++) {
    for (int m = 0; m < x.M; m++) {
      group_factors<1>(x, m, scales, biases, sk, n, dsc.data(), bias);
      dot_rows16<1>(x.planes.data() + m * xrow, w + n * row_bytes, row_bytes, dsc.data(), groups,
                    x.chunks, x.group, x.bits, bias, res);
      store1(out, static_cast<size_t>(m) * N + n, res[0], ok);
    }
  }
}

namespace {

// The block of XI16 that row m of M rows lies in: its first row and its
// rows.
inline void qmm16_block(int M, int m, int& r0, int& rows) {
  const int full = M / kQmm16Rows * kQmm16Rows;
  if (m < full) {
    r0 = m / kQmm16Rows * kQmm16Rows;
    rows = kQmm16Rows;
    return;
  }
  r0 = full;
  for (int b = kQmm16Rows / 2;; b /= 2) {
    if (M - r0 >= b) {
      if (m < r0 + b) {
        rows = b;
        return;
      }
      r0 += b;
    }
  }
}

// W's packed bytes for 16 rows at a time, transposed per 32-bit word: a
// panel's entry u holds the u-th word of each of the 16 rows side by side
// (8 values of a row at 4 bits, 4 at 8), so that a load gives 16 rows'
// values for one unit of k. Rows past nb are zeros, and so are the words
// past a row's end in its last 64 bytes.
ARCHGEN_AVX512 void pack_panel16(const uint8_t* w, size_t row_bytes, int nb, uint8_t* panel) {
  __m512i r[16];
  for (size_t s = 0; s < row_bytes; s += 64) {
    const bool whole = row_bytes - s >= 64;
    const __mmask64 m = whole ? ~0ull : ~0ull >> (64 - (row_bytes - s));
    for (int i = 0; i < 16; i++) {
      const uint8_t* p = w + i * row_bytes + s;
      r[i] = i >= nb  ? _mm512_setzero_si512()
             : whole ? _mm512_loadu_si512(p)
                     : _mm512_maskz_loadu_epi8(m, p);
    }
    transpose16(r);
    for (int u = 0; u < 16; u++) _mm512_storeu_si512(panel + (s / 4 + u) * 64, r[u]);
  }
}

// Asks for n bytes from p into the L2 cache, a line at a time (a panel's
// scales and biases, a few lines).
ARCHGEN_AVX512 inline void prefetch_l2(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < n; i += 64) _mm_prefetch(c + i, _MM_HINT_T1);
}

// Lines of W still to ask for, from at to end, per lines at a time: the
// next panel's rows, asked for while the current panel is swept, a few
// lines a group (all at once they would fill the miss queue).
struct Ahead {
  const char* at = nullptr;
  const char* end = nullptr;
  int per = 0;

  ARCHGEN_AVX512 void step() {
    for (int l = 0; l < per && at < end; l++, at += 64) _mm_prefetch(at, _MM_HINT_T1);
  }
};

// dst[g * 16 + i] = the value of kind k at src[(i * groups + g)] for 16
// rows i (nb of them; zeros past nb) and every g < groups, as float32:
// 16 rows' scales or biases side by side, 16 groups at a time.
ARCHGEN_AVX512 void transpose_factors(const void* src, Kind k, int groups, int nb, float* dst) {
  const size_t es = kind_size(k);
  __m512i r[16];
  for (int g0 = 0; g0 < groups; g0 += 16) {
    const int c = std::min(16, groups - g0);
    for (int i = 0; i < 16; i++) {
      r[i] = i < nb ? _mm512_castps_si512(load16(static_cast<const char*>(src) + (static_cast<size_t>(i) * groups + g0) * es, c, k))
                    : _mm512_setzero_si512();
    }
    transpose16(r);
    for (int g = 0; g < c; g++) _mm512_storeu_si512(dst + (g0 + g) * 16, r[g]);
  }
}

// Four bytes as a 32-bit value broadcast to every lane.
ARCHGEN_AVX512 inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// x's bytes per row and unit of k (XI16): at 4 bits a unit is 8 values,
// the l bytes of the even ones (W's low nibbles), of the odd ones, then
// the h bytes of each; at 8 bits 4 values, l then h.
template <int BITS>
constexpr int kUnitBytes = BITS == 4 ? 16 : 8;
template <int BITS>
constexpr int kUnitValues = BITS == 4 ? 8 : 4;

// res[i * 16 + c] = the product of row i of the block of MB rows of x at
// xp (bytes), st and su (steps and sums) by row c of the panel's 16 rows
// of W (scales sc and biases bi [groups, 16] in float32): for each group
// of G values of W (R of them to a step of x), the exact 32-bit sums of
// W's unsigned values times x's l and h bytes (vpdpbusd: four of x's bytes
// broadcast against four values of each row), 256 times the h sums plus
// the l sums, scaled by x's step times W's scale, plus W's bias times the
// sum of x as rounded, summed over the groups in order.
template <int MB, int G, int BITS, int R>
ARCHGEN_AVX512 __attribute__((noinline)) void sweep_panel16(const int8_t* xp, const float* st, const float* su, int groups,
                                  const uint8_t* panel, const float* sc, const float* bi,
                                  float* res, Ahead* ahead) {
  constexpr int U = G / kUnitValues<BITS>, XB = kUnitBytes<BITS>;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  // The float32 totals stay in res, updated once a group; the registers
  // hold the group's integer sums.
  #pragma GCC unroll 16
  for (int i = 0; i < MB; i++) _mm512_storeu_ps(res + i * 16, _mm512_setzero_ps());
  for (int g = 0; g < groups; g++) {
    ahead->step();
    __m512i lo[MB], hi[MB];
    #pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      lo[i] = _mm512_setzero_si512();
      hi[i] = _mm512_setzero_si512();
    }
    const uint8_t* pg = panel + static_cast<size_t>(g) * U * 64;
    const int8_t* xg = xp + static_cast<size_t>(g) * U * MB * XB;
    #pragma GCC unroll 2
    for (int u = 0; u < U; u++) {
      const __m512i v = _mm512_loadu_si512(pg + u * 64);
      const int8_t* xu = xg + u * MB * XB;
      if constexpr (BITS == 4) {
        const __m512i we = _mm512_and_si512(v, m4);
        const __m512i wo = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        #pragma GCC unroll 16
        for (int i = 0; i < MB; i++) {
          lo[i] = _mm512_dpbusd_epi32(lo[i], we, bcast4(xu + i * XB));
          lo[i] = _mm512_dpbusd_epi32(lo[i], wo, bcast4(xu + i * XB + 4));
          hi[i] = _mm512_dpbusd_epi32(hi[i], we, bcast4(xu + i * XB + 8));
          hi[i] = _mm512_dpbusd_epi32(hi[i], wo, bcast4(xu + i * XB + 12));
        }
      } else {
        #pragma GCC unroll 16
        for (int i = 0; i < MB; i++) {
          lo[i] = _mm512_dpbusd_epi32(lo[i], v, bcast4(xu + i * XB));
          hi[i] = _mm512_dpbusd_epi32(hi[i], v, bcast4(xu + i * XB + 4));
        }
      }
    }
    const __m512 sv = _mm512_loadu_ps(sc + g * 16), bv = _mm512_loadu_ps(bi + g * 16);
    #pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(hi[i], 8), lo[i]);
      const __m512 f = _mm512_mul_ps(sv, _mm512_set1_ps(st[g / R * MB + i]));
      __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), f, _mm512_loadu_ps(res + i * 16));
      t = _mm512_fmadd_ps(bv, _mm512_set1_ps(su[g * MB + i]), t);
      _mm512_storeu_ps(res + i * 16, t);
    }
  }
}

template <int MB, int BITS>
ARCHGEN_AVX512 void sweep_group16(const XI16& x, int r0, const uint8_t* panel, const float* sc,
                                  const float* bi, float* res, Ahead* ahead) {
  const int groups = x.K / x.wgroup;
  const int8_t* xp = x.v.data() + static_cast<size_t>(r0) * x.K * 2;
  const float* st = x.step.data() + static_cast<size_t>(r0) * (x.K / x.group);
  const float* su = x.sum.data() + static_cast<size_t>(r0) * groups;
  if (x.wgroup != x.group) {
    // Groups of 16 of W under x's steps of 32 (block-quantized W).
    sweep_panel16<MB, 16, BITS, 2>(xp, st, su, groups, panel, sc, bi, res, ahead);
    return;
  }
  switch (x.group) {
    case 32:
      sweep_panel16<MB, 32, BITS, 1>(xp, st, su, groups, panel, sc, bi, res, ahead);
      break;
    case 64:
      sweep_panel16<MB, 64, BITS, 1>(xp, st, su, groups, panel, sc, bi, res, ahead);
      break;
    default:
      sweep_panel16<MB, 128, BITS, 1>(xp, st, su, groups, panel, sc, bi, res, ahead);
  }
}

template <int MB>
ARCHGEN_AVX512 void sweep_rows16(const XI16& x, int r0, const uint8_t* panel, const float* sc,
                                 const float* bi, float* res, Ahead* ahead) {
  if (x.bits == 4) {
    sweep_group16<MB, 4>(x, r0, panel, sc, bi, res, ahead);
  } else {
    sweep_group16<MB, 8>(x, r0, panel, sc, bi, res, ahead);
  }
}

// Every row of x against rows [n_lo, n_hi) of W, 16 rows of W at a time:
// fill(n0, nb, panel, sc, bi) packs rows [n0, n0 + nb) into the panel and
// their scales and biases ([K / x.wgroup, 16] float32, zeros past nb); the
// rows of W (w, rows of row_bytes) of the next panel are asked for while a
// panel is swept.
template <typename Fill>
ARCHGEN_AVX512 void sweep_panels(const XI16& x, const uint8_t* w, size_t w_row_bytes, void* out,
                                 Kind ok, int N, int n_lo, int n_hi, Fill fill) {
  const int groups = x.K / x.wgroup;
  const size_t row_bytes = static_cast<size_t>(x.K) * x.bits / 8;  // a row's bytes in the panel
  thread_local std::vector<uint8_t> panel;
  thread_local std::vector<float> sc, bi;
  panel.resize((row_bytes + 63) / 64 * 64 * 16);
  sc.resize(static_cast<size_t>(groups) * 16);
  bi.resize(static_cast<size_t>(groups) * 16);
  alignas(64) float res[kQmm16Rows * 16];
  for (int n0 = n_lo; n0 < n_hi; n0 += 16) {
    const int nb = std::min(16, n_hi - n0);
    fill(n0, nb, panel.data(), sc.data(), bi.data());
    Ahead ahead;
    if (n0 + 16 < n_hi) {
      ahead.at = reinterpret_cast<const char*>(w + (n0 + 16) * w_row_bytes);
      ahead.end = ahead.at + std::min(16, n_hi - n0 - 16) * w_row_bytes;
      ahead.per = static_cast<int>((ahead.end - ahead.at) / 64 / groups) + 1;
    }
    for (int m0 = 0; m0 < x.M;) {
      int r0 = 0, mb = 1;
      qmm16_block(x.M, m0, r0, mb);
      switch (mb) {
        case kQmm16Rows:
          sweep_rows16<kQmm16Rows>(x, m0, panel.data(), sc.data(), bi.data(), res, &ahead);
          break;
        case 4:
          sweep_rows16<4>(x, m0, panel.data(), sc.data(), bi.data(), res, &ahead);
          break;
        case 2:
          sweep_rows16<2>(x, m0, panel.data(), sc.data(), bi.data(), res, &ahead);
          break;
        default:
          sweep_rows16<1>(x, m0, panel.data(), sc.data(), bi.data(), res, &ahead);
      }
      for (int i = 0; i < mb; i++) {
        const size_t at = static_cast<size_t>(m0 + i) * N + n0;
        if (ok == Kind::f32 && nb == 16) {
          _mm512_storeu_ps(static_cast<float*>(out) + at, _mm512_load_ps(res + i * 16));
        } else {
          for (int c = 0; c < nb; c++) store1(out, at + c, res[i * 16 + c], ok);
        }
      }
      m0 += mb;
    }
  }
}

}  // namespace

bool qmm16_fits(int bits, int group, int K) {
  return (bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128) && K > 0 &&
         K % group == 0;
}

void qmm16_shape(int M, int K, int group, int wgroup, int bits, XI16& out) {
  out.M = M;
  out.K = K;
  out.group = group;
  out.wgroup = wgroup;
  out.bits = bits;
  out.v.resize(static_cast<size_t>(M) * K * 2);
  out.step.resize(static_cast<size_t>(M) * (K / group));
  out.sum.resize(static_cast<size_t>(M) * (K / wgroup));
}

ARCHGEN_AVX512 void qmm16_prepare(const float* x, int m_lo, int m_hi, XI16& out) {
  const int K = out.K, group = out.group, groups = K / group, wgroup = out.wgroup;
  thread_local std::vector<int8_t> lh;  // a row's l bytes, then its h bytes
  lh.resize(static_cast<size_t>(K) * 2);
  int8_t* l = lh.data();
  int8_t* h = lh.data() + K;
  // A unit's 8 l bytes then 8 h bytes, reordered as XI16 holds them at 4
  // bits: the even values' l bytes, the odd ones', then the same of h.
  const __m128i order4 = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  for (int m = m_lo; m < m_hi; m++) {
    int r0 = 0, rows = 1;
    qmm16_block(out.M, m, r0, rows);
    const int i = m - r0;
    const float* xr = x + static_cast<size_t>(m) * K;
    float* step = out.step.data() + static_cast<size_t>(r0) * groups + i;
    float* sum = out.sum.data() + static_cast<size_t>(r0) * (K / wgroup) + i;
    for (int g = 0; g < groups; g++) {
      float st, inv;
      group_grid(xr + g * group, group, st, inv);
      // The sums of the rounded values per group of W (wgroup divides
      // group, at least 16).
      __m512i qs = _mm512_setzero_si512();
      for (int k = g * group; k < (g + 1) * group; k += 16) {
        const __m512i q = grid16(xr + k, inv);
        qs = _mm512_add_epi32(qs, q);
        split_planes(q, l + k, h + k);
        if ((k + 16) % wgroup == 0) {
          sum[static_cast<size_t>(k / wgroup) * rows] = static_cast<float>(_mm512_reduce_add_epi32(qs)) * st;
          qs = _mm512_setzero_si512();
        }
      }
      step[static_cast<size_t>(g) * rows] = st;
    }
    int8_t* v = out.v.data() + static_cast<size_t>(r0) * K * 2 + static_cast<size_t>(i) * (out.bits == 4 ? 16 : 8);
    if (out.bits == 4) {
      for (int u = 0; u < K / 8; u++) {
        const __m128i lhu = _mm_set_epi64x(*reinterpret_cast<const int64_t*>(h + u * 8),
                                           *reinterpret_cast<const int64_t*>(l + u * 8));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(v + static_cast<size_t>(u) * rows * 16),
                         _mm_shuffle_epi8(lhu, order4));
      }
    } else {
      for (int u = 0; u < K / 4; u++) {
        int8_t* d = v + static_cast<size_t>(u) * rows * 8;
        std::memcpy(d, l + u * 4, 4);
        std::memcpy(d + 4, h + u * 4, 4);
      }
    }
  }
}

ARCHGEN_AVX512 void qmm16_rows(const XI16& x, const uint8_t* w, const void* scales,
                               const void* biases, Kind sk, void* out, Kind ok, int N, int n_lo,
                               int n_hi) {
  const int groups = x.K / x.wgroup;
  const size_t row_bytes = static_cast<size_t>(x.K) * x.bits / 8;
  const size_t fbytes = static_cast<size_t>(groups) * kind_size(sk);
  sweep_panels(x, w, row_bytes, out, ok, N, n_lo, n_hi, [&](int n0, int nb, uint8_t* panel, float* sc, float* bi) {
    if (n0 + 16 < n_hi) {
      const int next = std::min(16, n_hi - n0 - 16);
      prefetch_l2(static_cast<const char*>(scales) + (n0 + 16) * fbytes, next * fbytes);
      prefetch_l2(static_cast<const char*>(biases) + (n0 + 16) * fbytes, next * fbytes);
    }
    pack_panel16(w + n0 * row_bytes, row_bytes, nb, panel);
    transpose_factors(static_cast<const char*>(scales) + n0 * fbytes, sk, groups, nb, sc);
    transpose_factors(static_cast<const char*>(biases) + n0 * fbytes, sk, groups, nb, bi);
  });
}

ARCHGEN_AVX512 void qmm16_block_rows(int code, const XI16& x, const uint8_t* w, int64_t row_bytes,
                                     void* out, Kind ok, int N, int n_lo, int n_hi) {
  const int K = x.K, groups = K / x.wgroup;
  // The panel's rows decoded: their codes, scales and offsets row by row.
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<float> s, o;
  codes.resize(static_cast<size_t>(16) * K);
  s.resize(static_cast<size_t>(16) * groups);
  o.resize(static_cast<size_t>(16) * groups);
  sweep_panels(x, w, static_cast<size_t>(row_bytes), out, ok, N, n_lo, n_hi, [&](int n0, int nb, uint8_t* panel, float* sc, float* bi) {
    for (int i = 0; i < nb; i++) {
      const size_t r = static_cast<size_t>(i);
      block_codes_row(code, w + (n0 + i) * row_bytes, K, codes.data() + r * K, s.data() + r * groups,
                      o.data() + r * groups);
    }
    pack_panel16(codes.data(), static_cast<size_t>(K), nb, panel);
    transpose_factors(s.data(), Kind::f32, groups, nb, sc);
    transpose_factors(o.data(), Kind::f32, groups, nb, bi);
  });
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
