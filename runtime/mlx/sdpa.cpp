// Scaled-dot-product attention (fastops.h): fused over the cache, with
// masks, sinks and grouped heads, in libmlx's order of operations.
#include "fastops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "fastkern.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace {

using namespace archgen::fast;

// ---- scaled-dot-product attention ----

struct Strided4 {
  const char* p;
  int64_t s[4];  // element strides of [B, H, L, D]
};

Strided4 strided4(const mx::array& a) {
  Strided4 v{static_cast<const char*>(a.data<void>()), {0, 0, 0, 0}};
  int nd = static_cast<int>(a.ndim());
  for (int i = 0; i < nd; i++) {
    int d = 4 - nd + i;
    v.s[d] = a.shape(i) == 1 ? 0 : static_cast<int64_t>(a.strides()[i]);
  }
  return v;
}

struct AttnJob {
  Strided4 q, k, v, mask;
  // t: the queries', the mask's, the sinks' and the output's kind; kv: the
  // keys' and values' (t, or a half kind under float32 queries: a cache
  // held at half width, widened exactly where it is read).
  Kind t, kv;
  bool has_mask, bool_mask, causal;
  const void* sinks;  // [Hq] of kind t, or nullptr
  int B, Hq, Hkv, L, S, D, Dv;
  float scale;  // rounded to t
  void* out;    // [B, Hq, L, Dv]
};

__attribute__((target("avx2,fma,f16c"))) inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma,f16c"))) inline float dot(const float* a, const float* b, int n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
  }
  float s = hsum8(_mm256_add_ps(a0, a1));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

// y += a * x over n floats.
__attribute__((target("avx2,fma,f16c"))) inline void axpy(float* y, float a, const float* x, int n) {
  __m256 av = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; i++) y[i] += a * x[i];
}

// exp(x) for 8 floats (range reduction to 2^n * exp(r), |r| <= ln2/2, and
// a degree-6 polynomial); 0 below the smallest normal result.
__attribute__((target("avx2,fma,f16c"))) inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365447504f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

// Rounds 8 floats to kind k and back.
__attribute__((target("avx2,fma,f16c"))) inline __m256 round8(__m256 v, Kind k) {
  if (k == Kind::f16) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  if (k == Kind::bf16) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    u = _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
    return _mm256_castsi256_ps(u);
  }
  return v;
}

// Softmax over n scores in place, with an optional sink logit taking part
// in the maximum and the sum, as libmlx's precise softmax does it: exp(s -
// max) summed in float32, times the reciprocal of the sum, rounded to t.
__attribute__((target("avx2,fma,f16c"))) void softmax_row(float* s, int n, const float* sink,
                                                          Kind t) {
  float m = sink != nullptr ? *sink : -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; j++) m = std::max(m, s[j]);
  __m256 mv = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum8(acc);
  for (; j < n; j++) {
    s[j] = mlx_exp(s[j] - m);
    sum += s[j];
  }
  if (sink != nullptr) sum += mlx_exp(*sink - m);
  float norm = 1.0f / sum;
  __m256 nv = _mm256_set1_ps(norm);
  for (j = 0; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(s + j, round8(_mm256_mul_ps(_mm256_loadu_ps(s + j), nv), t));
  }
  for (; j < n; j++) s[j] = round_to(s[j] * norm, t);
}

// 16 values of kind KV at p, widened to float32 (exactly).
template <Kind KV>
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) inline __m512 load16(
    const char* p) {
  if constexpr (KV == Kind::f32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (KV == Kind::f16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
}

// attend for float32 queries without a mask array, on AVX-512: the REP
// query heads of one KV head's group together, so that each key and value
// row (of kind KV, widened in registers) is read once for all of them, and
// each head's output (NV vectors of 16) is kept in registers across the
// keys. The scores and the softmax are
// attend's; the weighted sum adds the same products per key in the same
// order, in lanes of 16 rather than 8.
template <int REP, int NV, Kind KV>
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void attend_group512(
    const AttnJob& j, int b, int h0, int l0, int l1, const char* kp, size_t kld, const char* vp,
    size_t vld) {
  constexpr size_t esz = KV == Kind::f32 ? 4 : 2;
  thread_local std::vector<float> qf, sc;
  qf.resize(static_cast<size_t>(REP) * j.D);
  sc.resize(static_cast<size_t>(REP) * j.S);
  for (int l = l0; l < l1; l++) {
    int n = j.S;
    if (j.causal) n = std::min(l + j.S - j.L + 1, j.S);
    for (int r = 0; r < REP; r++) {
      float* q = qf.data() + r * j.D;
      gather_f32(q, j.q.p + (b * j.q.s[0] + (h0 + r) * j.q.s[1] + l * j.q.s[2]) * 4, j.q.s[3],
                 j.D, Kind::f32);
      for (int d = 0; d < j.D; d += 16) {
        _mm512_storeu_ps(q + d, _mm512_mul_ps(_mm512_loadu_ps(q + d), _mm512_set1_ps(j.scale)));
      }
    }
    for (int s = 0; s < n; s++) {
      const char* k = kp + s * kld * esz;
      __m512 a[REP];
#pragma GCC unroll 4
      for (int r = 0; r < REP; r++) a[r] = _mm512_setzero_ps();
      for (int d = 0; d < j.D; d += 16) {
        const __m512 kv = load16<KV>(k + d * esz);
#pragma GCC unroll 4
        for (int r = 0; r < REP; r++) a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(qf.data() + r * j.D + d), kv, a[r]);
      }
#pragma GCC unroll 4
      for (int r = 0; r < REP; r++) sc[r * j.S + s] = _mm512_reduce_add_ps(a[r]);
    }
    __m512 acc[REP][NV];
#pragma GCC unroll 4
    for (int r = 0; r < REP; r++) {
      float sink = j.sinks != nullptr ? load1(j.sinks, h0 + r, Kind::f32) : 0.0f;
      softmax_row(sc.data() + r * j.S, n, j.sinks != nullptr ? &sink : nullptr, Kind::f32);
#pragma GCC unroll 8
      for (int c = 0; c < NV; c++) acc[r][c] = _mm512_setzero_ps();
    }
    for (int s = 0; s < n; s++) {
      const char* v = vp + s * vld * esz;
#pragma GCC unroll 8
      for (int c = 0; c < NV; c++) {
        const __m512 vv = load16<KV>(v + 16 * c * esz);
#pragma GCC unroll 4
        for (int r = 0; r < REP; r++) {
          acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(sc[r * j.S + s]), vv, acc[r][c]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < REP; r++) {
      float* o = static_cast<float*>(j.out) + ((static_cast<size_t>(b) * j.Hq + h0 + r) * j.L + l) * j.Dv;
#pragma GCC unroll 8
      for (int c = 0; c < NV; c++) _mm512_storeu_ps(o + 16 * c, acc[r][c]);
    }
  }
}

// Runs attend_group512 where it applies (true): value rows of 64 (in
// pieces of up to 4 heads of the group) or of 128 (up to 2 heads), each
// piece reading the group's keys and values once for its heads, as rows of
// kind kv (kld and vld elements apart).
bool attend_fast(const AttnJob& j, int b, int h0, int rep, int l0, int l1, Kind kv, const char* kp,
                 size_t kld, const char* vp, size_t vld) {
  if (archgen_isa_level() != 2 || j.t != Kind::f32 || j.has_mask || j.D % 16 != 0 ||
      (j.causal && l0 + j.S - j.L + 1 <= 0)) {
    return false;
  }
  const int piece = j.Dv == 64 ? 4 : j.Dv == 128 ? 2 : 0;
  if (piece == 0) {
    return false;
  }
  for (int h = 0; h < rep; h += piece) {
    const int r = std::min(piece, rep - h);
#define ARCHGEN_GROUP_KIND(R, V, K) \
  if (r == R && j.Dv == 16 * V && kv == K) attend_group512<R, V, K>(j, b, h0 + h, l0, l1, kp, kld, vp, vld);
#define ARCHGEN_GROUP(R, V)                  \
  ARCHGEN_GROUP_KIND(R, V, Kind::f32)        \
  ARCHGEN_GROUP_KIND(R, V, Kind::bf16)       \
  ARCHGEN_GROUP_KIND(R, V, Kind::f16)
    ARCHGEN_GROUP(1, 4) ARCHGEN_GROUP(2, 4) ARCHGEN_GROUP(3, 4) ARCHGEN_GROUP(4, 4)
    ARCHGEN_GROUP(1, 8) ARCHGEN_GROUP(2, 8)
#undef ARCHGEN_GROUP
#undef ARCHGEN_GROUP_KIND
  }
  return true;
}

// The rows [l0, l1) of queries of heads [h0, h1) (one KV head's group) of
// batch row b.
__attribute__((target("avx2,fma,f16c"))) void attend(const AttnJob& j, int b, int hkv, int l0,
                                                    int l1) {
  int rep = j.Hq / j.Hkv;
  int h0 = hkv * rep;
  size_t esz = archgen::kind_size(j.t), kvsz = archgen::kind_size(j.kv);
  thread_local std::vector<float> kf, vf, qf, sc, acc;
  // Rows of unit stride along D (a cache's buffer) are read in place by
  // the grouped kernel, whatever their kind.
  const bool unit = j.k.s[3] == 1 && j.v.s[3] == 1;
  const char* kb = j.k.p + (b * j.k.s[0] + hkv * j.k.s[1]) * kvsz;
  const char* vb = j.v.p + (b * j.v.s[0] + hkv * j.v.s[1]) * kvsz;
  if (unit && attend_fast(j, b, h0, rep, l0, l1, j.kv, kb, j.k.s[2], vb, j.v.s[2])) {
    return;
  }
  // Otherwise the group's keys and values as float32 rows: read in place
  // where they are float32 rows of unit stride, converted once otherwise
  // (they are read once per query row).
  int jend_all = j.S;
  if (j.causal) jend_all = std::max(0, std::min(j.S, (l1 - 1) + j.S - j.L + 1));
  // A row that sees no key (more queries than keys) reads all of them:
  // see below.
  if (j.causal && l0 + j.S - j.L + 1 <= 0) jend_all = j.S;
  const float *kp, *vp;
  size_t kld, vld;
  if (j.kv == Kind::f32 && unit) {
    kp = reinterpret_cast<const float*>(kb);
    vp = reinterpret_cast<const float*>(vb);
    kld = j.k.s[2];
    vld = j.v.s[2];
  } else {
    kf.resize(static_cast<size_t>(jend_all) * j.D);
    vf.resize(static_cast<size_t>(jend_all) * j.Dv);
    for (int s = 0; s < jend_all; s++) {
      gather_f32(kf.data() + static_cast<size_t>(s) * j.D, kb + s * j.k.s[2] * kvsz, j.k.s[3],
                 j.D, j.kv);
      gather_f32(vf.data() + static_cast<size_t>(s) * j.Dv, vb + s * j.v.s[2] * kvsz, j.v.s[3],
                 j.Dv, j.kv);
    }
    kp = kf.data();
    vp = vf.data();
    kld = j.D;
    vld = j.Dv;
    if (!unit && attend_fast(j, b, h0, rep, l0, l1, Kind::f32, reinterpret_cast<const char*>(kp),
                             kld, reinterpret_cast<const char*>(vp), vld)) {
      return;
    }
  }
  qf.resize(j.D);
  sc.resize(j.S);
  acc.resize(j.Dv);
  const float low = lowest(j.t);
  for (int h = h0; h < h0 + rep; h++) {
    float sink = j.sinks != nullptr ? load1(j.sinks, h, j.t) : 0.0f;
    for (int l = l0; l < l1; l++) {
      gather_f32(qf.data(), j.q.p + (b * j.q.s[0] + h * j.q.s[1] + l * j.q.s[2]) * esz,
                 j.q.s[3], j.D, j.t);
      for (int d = 0; d < j.D; d++) qf[d] = round_to(qf[d] * j.scale, j.t);
      // Keys past a causal row's last are masked to the lowest value,
      // whose exp is 0 beside any real score: they are left out. A row
      // with no key to see (more queries than keys) sees all of them
      // equally, as libmlx's softmax over lowest values gives.
      int n = j.S;
      bool none = false;
      if (j.causal) {
        n = l + j.S - j.L + 1;
        if (n <= 0) {
          n = j.S;
          none = true;
        }
        n = std::min(n, j.S);
      }
      for (int s = 0; s < n; s++) {
        float v = none ? low : round_to(dot(qf.data(), kp + s * kld, j.D), j.t);
        if (j.has_mask) {
          const char* mp = j.mask.p + (b * j.mask.s[0] + h * j.mask.s[1] + l * j.mask.s[2] +
                                       s * j.mask.s[3]) * (j.bool_mask ? 1 : esz);
          if (j.bool_mask) {
            if (*mp == 0) v = low;
          } else {
            v = round_to(v + load1(mp, 0, j.t), j.t);
          }
        }
        sc[s] = v;
      }
      softmax_row(sc.data(), n, j.sinks != nullptr ? &sink : nullptr, j.t);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int s = 0; s < n; s++) {
        if (sc[s] != 0.0f) axpy(acc.data(), sc[s], vp + s * vld, j.Dv);
      }
      from_f32(static_cast<char*>(j.out) +
                   ((static_cast<size_t>(b) * j.Hq + h) * j.L + l) * j.Dv * esz,
               acc.data(), j.Dv, j.t);
    }
  }
}

// ---- blocked float32 attention for prompts ----
//
// Many query rows (a prompt, or a chunk of one) against the keys, float32,
// causal or without a mask: a first pass packs each KV head's keys once,
// transposed, into panels of W keys (W the vector width) in groups of NR
// ([D][NR * W] floats a group), and then each task takes a block of query
// positions of one KV head's group of query heads, with the rep heads at
// each position as rows of the block (row i: position l0 + i / rep, head
// hkv * rep + i % rep), so every key panel and value row read serves all
// of them. A block's scores stay in memory (within kPrefillScores floats)
// between its three steps:
//
//   scores: tiles of MR rows by NR panels in registers, one panel vector
//     times one broadcast query value per multiply-add (16 scores each on
//     AVX-512), the running maximum of each row over its visible keys
//     kept beside them;
//   softmax: per row, exp(s - max) (exp_lanes, exp8's polynomial), its
//     float32 sum, and the products by 1 / sum, zeros past the row's keys;
//   weighted sum: tiles of MR rows by NV vectors of the value rows, one
//     value vector times one broadcast weight per multiply-add, the keys
//     in order (as attend_group512 adds them).
//
// The same templates make the AVX-512 (W = 16) and the AVX2 (W = 8)
// kernels: GCC's vector types, with the instructions chosen where they
// are inlined into the functions of each target.

// The helpers below return vectors by value: always inlined, they never
// pass one across a call, so the ABI GCC warns about is moot (and GCC
// reports it at the end of the file: ignored from here on).
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

#define ARCHGEN_INLINE __attribute__((always_inline)) inline

// The vector types and the register tiles of a width: MR rows by NR
// panels of scores, MR rows by NV vectors of outputs (24 accumulators of
// the 32 registers of AVX-512, 12 of AVX2's 16).
template <int W>
struct Lanes;
template <>
struct Lanes<8> {
  using F = f32x8;
  using I = i32x8;
  static constexpr int MR = 4, NR = 3, NV = 3;
};
template <>
struct Lanes<16> {
  using F = f32x16;
  using I = i32x16;
  static constexpr int MR = 6, NR = 4, NV = 4;
};

template <class F>
ARCHGEN_INLINE F vload(const float* p) {
  F v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class F>
ARCHGEN_INLINE void vstore(float* p, const F& v) {
  std::memcpy(p, &v, sizeof v);
}

template <class F>
ARCHGEN_INLINE F vsplat(float x) {
  return F{} + x;
}

// The lanes below n of v, the others fill.
template <class F, class I, int W>
ARCHGEN_INLINE F lanes_below(const F& v, int n, float fill) {
  I idx;
#pragma GCC unroll 16
  for (int i = 0; i < W; i++) idx[i] = i;
  return idx < n ? v : vsplat<F>(fill);
}

// exp8 for W lanes of softmax's s - max (at most 0, so without exp8's
// clamp at the top): the same range reduction (n rounded to the nearest,
// ties to even, by adding and taking away 1.5 * 2^23) and polynomial, and
// 0 below the smallest normal result (whatever the lanes made there).
template <class F, class I>
ARCHGEN_INLINE F exp_lanes(const F& x) {
  const auto under = x < -87.3365447504f;
  const F t = x * 1.44269504088896341f + 12582912.0f;
  const F n = t - 12582912.0f;
  F r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  F p = vsplat<F>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + (r + 1.0f);
  // t's low bits hold n (at least -126 here): 2^n from them directly.
  const I e = (__builtin_bit_cast(I, t) + 127) << 23;
  const F y = p * __builtin_bit_cast(F, e);
  return under ? F{} : y;
}

// The scores of MR rows (q: their scaled queries, D apart) against the
// first NP panels of a group of NR (kp: [D][NR * W] floats), keys key0
// on: into sc (rows ld apart), and the maximum over each row's visible
// keys (n: each row's count) into its vector of mx.
template <class F, class I, int W, int MR, int NR, int NP>
ARCHGEN_INLINE void score_tile(const float* q, int D, const float* kp, float* sc, size_t ld,
                               float* mx, const int* n, int key0) {
  F acc[MR][NP];
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; p++) acc[i][p] = F{};
  }
  for (int d = 0; d < D; d++) {
    F kv[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; p++) kv[p] = vload<F>(kp + static_cast<size_t>(d) * NR * W + p * W);
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
      const float qv = q[i * D + d];
#pragma GCC unroll 4
      for (int p = 0; p < NP; p++) acc[i][p] += kv[p] * qv;
    }
  }
  const float ninf = -std::numeric_limits<float>::infinity();
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++) {
    F m = vload<F>(mx + i * W);
#pragma GCC unroll 4
    for (int p = 0; p < NP; p++) {
      vstore(sc + i * ld + p * W, acc[i][p]);
      const int valid = n[i] - key0 - p * W;
      if (valid >= W) {
        m = m > acc[i][p] ? m : acc[i][p];
      } else if (valid > 0) {
        const F a = lanes_below<F, I, W>(acc[i][p], valid, ninf);
        m = m > a ? m : a;
      }
    }
    vstore(mx + i * W, m);
  }
}

// The weighted sums of MR rows (P: their softmax weights, ld apart) over
// the value rows [k0, k1) (v: row 0's first NV vectors, vld apart), added
// to the NV vectors of each row of o (oh apart; from zero where first).
template <class F, int W, int MR, int NV>
ARCHGEN_INLINE void value_tile(const float* P, size_t ld, const float* v, size_t vld, int k0,
                               int k1, float* o, int oh, bool first) {
  F acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; c++) acc[i][c] = first ? F{} : vload<F>(o + i * oh + c * W);
  }
  for (int k = k0; k < k1; k++) {
    F vv[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; c++) vv[c] = vload<F>(v + k * vld + c * W);
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
      const float pk = P[i * ld + k];
#pragma GCC unroll 4
      for (int c = 0; c < NV; c++) acc[i][c] += vv[c] * pk;
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; c++) vstore(o + i * oh + c * W, acc[i][c]);
  }
}

// score_tile and value_tile for a count of panels or vectors np known at
// run time (1 to N).
template <class F, class I, int W, int MR, int NR, int N>
ARCHGEN_INLINE void score_tile_n(int np, const float* q, int D, const float* kp, float* sc,
                                 size_t ld, float* mx, const int* n, int key0) {
  if constexpr (N > 1) {
    if (np < N) {
      score_tile_n<F, I, W, MR, NR, N - 1>(np, q, D, kp, sc, ld, mx, n, key0);
      return;
    }
  }
  score_tile<F, I, W, MR, NR, N>(q, D, kp, sc, ld, mx, n, key0);
}

template <class F, int W, int MR, int N>
ARCHGEN_INLINE void value_tile_n(int nv, const float* P, size_t ld, const float* v, size_t vld,
                                 int k0, int k1, float* o, int oh, bool first) {
  if constexpr (N > 1) {
    if (nv < N) {
      value_tile_n<F, W, MR, N - 1>(nv, P, ld, v, vld, k0, k1, o, oh, first);
      return;
    }
  }
  value_tile<F, W, MR, N>(P, ld, v, vld, k0, k1, o, oh, first);
}

// What the blocked path's passes share.
struct PrefillJob {
  const AttnJob* j;
  int W;       // the vector width: 16 (AVX-512) or 8 (AVX2)
  int G;       // keys per group of panels: NR * W
  int rep;     // query heads per KV head
  int Sp;      // the keys rounded up to G
  int lb;      // query positions per block
  int blocks;  // blocks per KV head: ceil(L / lb)
  float* kpack;  // [B * Hkv][Sp / G][D][G]: the keys' panels, zeros past S
  float* vpack;  // [B * Hkv][S][Dv], or nullptr where float32 values are read in place
};

// One task's scratch, per thread.
struct PrefillScratch {
  std::vector<float> q, sc, o, mx;
  std::vector<int> n, tn;
};

PrefillScratch& prefill_scratch() {
  thread_local PrefillScratch s;
  return s;
}

// Packs the key groups [g0, g1) of KV head bh (b * Hkv + hkv), and
// where the values are not read in place, their rows.
__attribute__((target("avx2,fma,f16c"))) void prefill_pack(const PrefillJob& p, int bh, int g0,
                                                           int g1) {
  const AttnJob& j = *p.j;
  const int b = bh / j.Hkv, hkv = bh % j.Hkv, G = p.G;
  const size_t kvsz = archgen::kind_size(j.kv);
  const char* kb = j.k.p + (b * j.k.s[0] + hkv * j.k.s[1]) * kvsz;
  float* dst = p.kpack + static_cast<size_t>(bh) * p.Sp * j.D;
  for (int s = g0 * G; s < g1 * G; s++) {
    float* col = dst + static_cast<size_t>(s / G) * j.D * G + s % G;
    if (s >= j.S) {
      for (int d = 0; d < j.D; d++) col[d * G] = 0.0f;
      continue;
    }
    const char* kr = kb + s * j.k.s[2] * kvsz;
    if (j.kv == Kind::f32 && j.k.s[3] == 1) {
      const float* kf = reinterpret_cast<const float*>(kr);
      for (int d = 0; d < j.D; d++) col[d * G] = kf[d];
    } else {
      for (int d = 0; d < j.D; d++) col[d * G] = load1(kr, static_cast<size_t>(d * j.k.s[3]), j.kv);
    }
  }
  if (p.vpack != nullptr) {
    for (int s = g0 * G; s < std::min(g1 * G, j.S); s++) {
      gather_f32(p.vpack + (static_cast<size_t>(bh) * j.S + s) * j.Dv,
                 j.v.p + (b * j.v.s[0] + hkv * j.v.s[1] + s * j.v.s[2]) * kvsz, j.v.s[3], j.Dv,
                 j.kv);
    }
  }
}

// The task's block of query positions: blk of KV head bh.
template <int W>
ARCHGEN_INLINE void prefill_block(const PrefillJob& p, int bh, int blk) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  constexpr int MR = Lanes<W>::MR, NR = Lanes<W>::NR, NV = Lanes<W>::NV;
  // Value rows are read in blocks of KB keys by every tile of rows.
  constexpr int KB = 64;
  const AttnJob& j = *p.j;
  const int b = bh / j.Hkv, hkv = bh % j.Hkv, rep = p.rep, D = j.D, Dv = j.Dv;
  const int l0 = blk * p.lb, l1 = std::min(j.L, l0 + p.lb);
  const int M = (l1 - l0) * rep, tiles = (M + MR - 1) / MR, Mp = tiles * MR;
  const size_t ld = static_cast<size_t>(p.Sp) + W;
  PrefillScratch& s = prefill_scratch();
  s.q.resize(static_cast<size_t>(Mp) * D);
  s.sc.resize(Mp * ld);
  s.o.resize(static_cast<size_t>(Mp) * Dv);
  s.mx.resize(static_cast<size_t>(Mp) * W);
  s.n.resize(Mp);
  s.tn.resize(tiles);
  float *qb = s.q.data(), *sc = s.sc.data(), *ob = s.o.data(), *mx = s.mx.data();
  int *n = s.n.data(), *tn = s.tn.data();
  // The rows' scaled queries and counts of visible keys (at least 1: the
  // caller sends causal jobs with more queries than keys elsewhere).
  const F scale = vsplat<F>(j.scale);
  for (int i = 0; i < Mp; i++) {
    float* q = qb + static_cast<size_t>(i) * D;
    if (i >= M) {
      std::fill(q, q + D, 0.0f);
      n[i] = 0;
      continue;
    }
    const int l = l0 + i / rep, h = hkv * rep + i % rep;
    gather_f32(q, j.q.p + (b * j.q.s[0] + h * j.q.s[1] + l * j.q.s[2]) * 4, j.q.s[3], D,
               Kind::f32);
    for (int d = 0; d < D; d += W) vstore(q + d, vload<F>(q + d) * scale);
    n[i] = j.causal ? std::min(l + j.S - j.L + 1, j.S) : j.S;
  }
  std::fill(mx, mx + static_cast<size_t>(Mp) * W, -std::numeric_limits<float>::infinity());
  int reach = 0;
  for (int t = 0; t < tiles; t++) {
    tn[t] = *std::max_element(n + t * MR, n + (t + 1) * MR);
    reach = std::max(reach, tn[t]);
  }
  // Scores: a group of NR panels at a time (in L1 for every tile), the
  // tiles that see it in turn.
  const float* kp = p.kpack + static_cast<size_t>(bh) * p.Sp * D;
  for (int k0 = 0; k0 < reach; k0 += NR * W) {
    const float* grp = kp + static_cast<size_t>(k0) * D;
    for (int t = 0; t < tiles; t++) {
      const int np = std::min(NR, (tn[t] - k0 + W - 1) / W);
      if (np <= 0) continue;
      const int r = t * MR;
      score_tile_n<F, I, W, MR, NR, NR>(np, qb + static_cast<size_t>(r) * D, D, grp,
                                        sc + r * ld + k0, ld, mx + r * W, n + r, k0);
    }
  }
  // Softmax per row, with zeros past its keys up to its tile's reach.
  for (int i = 0; i < Mp; i++) {
    float* row = sc + i * ld;
    const int cnt = n[i], end = (tn[i / MR] + W - 1) / W * W;
    int k = 0;
    if (cnt > 0) {
      const F mv = vload<F>(mx + i * W);
      float m = mv[0];
#pragma GCC unroll 16
      for (int c = 1; c < W; c++) m = std::max(m, mv[c]);
      const F ms = vsplat<F>(m);
      F sum = F{};
      for (; k + W <= cnt; k += W) {
        const F e = exp_lanes<F, I>(vload<F>(row + k) - ms);
        vstore(row + k, e);
        sum += e;
      }
      if (k < cnt) {
        const F e = lanes_below<F, I, W>(exp_lanes<F, I>(vload<F>(row + k) - ms), cnt - k, 0.0f);
        vstore(row + k, e);
        sum += e;
        k += W;
      }
      float total = 0.0f;
#pragma GCC unroll 16
      for (int c = 0; c < W; c++) total += sum[c];
      const F norm = vsplat<F>(1.0f / total);
      for (int c = 0; c < k; c += W) vstore(row + c, vload<F>(row + c) * norm);
    }
    for (; k < end; k += W) vstore(row + k, F{});
  }
  // Weighted sums: value rows KB at a time, NV vectors of them at a time,
  // for every tile that sees them.
  const float* vp;
  size_t vld;
  if (p.vpack != nullptr) {
    vp = p.vpack + static_cast<size_t>(bh) * j.S * Dv;
    vld = Dv;
  } else {
    vp = reinterpret_cast<const float*>(j.v.p) + b * j.v.s[0] + hkv * j.v.s[1];
    vld = j.v.s[2];
  }
  for (int k0 = 0; k0 < reach; k0 += KB) {
    for (int c0 = 0; c0 < Dv; c0 += NV * W) {
      const int nv = std::min(NV, (Dv - c0) / W);
      for (int t = 0; t < tiles; t++) {
        if (tn[t] <= k0) continue;
        const int r = t * MR;
        value_tile_n<F, W, MR, NV>(nv, sc + r * ld, ld, vp + c0, vld, k0,
                                   std::min(k0 + KB, tn[t]), ob + static_cast<size_t>(r) * Dv + c0,
                                   Dv, k0 == 0);
      }
    }
  }
  for (int i = 0; i < M; i++) {
    const int l = l0 + i / rep, h = hkv * rep + i % rep;
    float* o = static_cast<float*>(j.out) + ((static_cast<size_t>(b) * j.Hq + h) * j.L + l) * Dv;
    std::copy(ob + static_cast<size_t>(i) * Dv, ob + static_cast<size_t>(i + 1) * Dv, o);
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void prefill_block16(
    const PrefillJob& p, int bh, int blk) {
  prefill_block<16>(p, bh, blk);
}

__attribute__((target("avx2,fma,f16c"))) void prefill_block8(const PrefillJob& p, int bh,
                                                             int blk) {
  prefill_block<8>(p, bh, blk);
}

// Query positions from which a job takes the blocked path, and the floats
// of scores a block keeps at once (in the core's L2).
constexpr int kPrefillRows = 16;
constexpr size_t kPrefillScores = size_t{1} << 17;
// The bytes of packed keys and values a thread keeps between calls.
constexpr size_t kPrefillKeep = size_t{64} << 20;

// Runs the job on the blocked path where it applies (true).
bool run_prefill(const AttnJob& j, bool parallel) {
  const int isa = archgen_isa_level();
  const int W = isa == 2 ? 16 : isa == 1 ? 8 : 0;
  if (W == 0 || j.t != Kind::f32 || j.has_mask || j.sinks != nullptr || j.L < kPrefillRows ||
      (j.causal && j.L > j.S) || j.D % W != 0 || j.Dv % W != 0 || j.D > 256 || j.Dv > 256) {
    return false;
  }
  const int G = W * (W == 16 ? Lanes<16>::NR : Lanes<8>::NR);
  PrefillJob p{&j, W, G, j.Hq / j.Hkv, (j.S + G - 1) / G * G, 0, 0, nullptr, nullptr};
  // Positions per block: the scores of its rows within kPrefillScores,
  // at most 192 rows, in whole tiles of rows where that leaves some, and
  // blocks enough for every core a few times over.
  const int MR = W == 16 ? Lanes<16>::MR : Lanes<8>::MR;
  const int unit = MR / std::gcd(p.rep, MR);
  const size_t ld = static_cast<size_t>(p.Sp) + W;
  int lb = static_cast<int>(std::max<size_t>(1, kPrefillScores / (ld * p.rep)));
  lb = std::min({lb, j.L, std::max(1, 192 / p.rep)});
  auto& pool = Pool::get();
  while (parallel && lb > unit &&
         static_cast<int64_t>(j.B) * j.Hkv * ((j.L + lb - 1) / lb) < 4 * pool.threads()) {
    lb = (lb + 1) / 2;
  }
  if (lb > unit) lb -= lb % unit;
  p.lb = lb;
  p.blocks = (j.L + lb - 1) / lb;
  // The keys in panels (and the values where not float32 rows of unit
  // stride: a half-width cache's, widened), once per call, in the calling thread's buffers.
  thread_local std::vector<float> kpack, vpack;
  const int heads = j.B * j.Hkv;
  kpack.resize(static_cast<size_t>(heads) * p.Sp * j.D);
  p.kpack = kpack.data();
  if (j.v.s[3] != 1 || j.kv != Kind::f32) {
    vpack.resize(static_cast<size_t>(heads) * j.S * j.Dv);
    p.vpack = vpack.data();
  }
  const int groups = p.Sp / G, chunk = 16;
  const int pieces = (groups + chunk - 1) / chunk, packs = heads * pieces;
  auto pack = [&](int t) {
    const int bh = t / pieces, c = t % pieces;
    prefill_pack(p, bh, c * chunk, std::min(groups, (c + 1) * chunk));
  };
  // Blocks, one KV head's after another (the cores read the same keys
  // and values, in the cache they share), the last first (causal blocks
  // near the end see the most keys).
  const int tasks = heads * p.blocks;
  auto block = [&](int t) {
    const int u = tasks - 1 - t, bh = u / p.blocks, blk = u % p.blocks;
    if (W == 16) {
      prefill_block16(p, bh, blk);
    } else {
      prefill_block8(p, bh, blk);
    }
  };
  if (!parallel) {
    for (int t = 0; t < packs; t++) pack(t);
    for (int t = 0; t < tasks; t++) block(t);
  } else {
    pool.run(packs, pack);
    pool.run(tasks, block);
  }
  // Buffers past kPrefillKeep bytes go back rather than stay for the next
  // call (whose packing would cost little beside its work).
  for (auto* buf : {&kpack, &vpack}) {
    if (buf->capacity() * sizeof(float) > kPrefillKeep) std::vector<float>().swap(*buf);
  }
  return true;
}

void run_attention(const AttnJob& j) {
  // Tasks: (batch row, KV head, a block of query rows).
  int lb = j.L <= 16 ? j.L : 16;
  int lblocks = (j.L + lb - 1) / lb;
  int tasks = j.B * j.Hkv * lblocks;
  double work = static_cast<double>(j.B) * j.Hq * j.L * j.S * (j.D + j.Dv);
  auto& pool = Pool::get();
  if (run_prefill(j, work >= (1 << 18) && pool.threads() > 1)) {
    return;
  }
  auto body = [&](int t) {
    int lbk = t % lblocks, rest = t / lblocks;
    int hkv = rest % j.Hkv, b = rest / j.Hkv;
    int l0 = lbk * lb, l1 = std::min(j.L, l0 + lb);
    attend(j, b, hkv, l0, l1);
  };
  if (work < (1 << 18) || pool.threads() == 1) {
    for (int t = 0; t < tasks; t++) body(t);
    return;
  }
  // Causal blocks near the end see more keys: hand them out first.
  pool.run(tasks, [&](int t) { body(j.causal ? tasks - 1 - t : t); });
}

class NativeSDPA : public mx::UnaryPrimitive {
 public:
  NativeSDPA(mx::Stream s, float scale, bool causal, bool has_mask, bool has_sinks)
      : UnaryPrimitive(s),
        scale_(scale),
        causal_(causal),
        has_mask_(has_mask),
        has_sinks_(has_sinks) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    auto& enc = begin(stream(), in, out);
    const mx::array &q = in[0], &k = in[1], &v = in[2];
    Kind t = kind_of(q.dtype());
    AttnJob j{strided4(q), strided4(k), strided4(v), {nullptr, {0, 0, 0, 0}}, t,
              kind_of(k.dtype()), has_mask_,
              false, causal_, nullptr, q.shape(0), q.shape(1), k.shape(1), q.shape(2),
              k.shape(2), q.shape(3), v.shape(3), round_to(scale_, t), out.data<void>()};
    int i = 3;
    if (has_mask_) {
      j.mask = strided4(in[i]);
      j.bool_mask = in[i].dtype() == mx::bool_;
      i++;
    }
    if (has_sinks_) {
      j.sinks = in[i].data<void>();
    }
    enc.dispatch([j, in, out]() { run_attention(j); });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's native attention runs on the CPU only");
  }

  const char* name() const override { return "ArchgenSDPA"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeSDPA*>(&other);
    return o != nullptr && o->scale_ == scale_ && o->causal_ == causal_ &&
           o->has_mask_ == has_mask_ && o->has_sinks_ == has_sinks_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {{in[0].shape(0), in[0].shape(1), in[0].shape(2), in[2].shape(3)}};
  }

 private:
  float scale_;
  bool causal_, has_mask_, has_sinks_;
};

}  // namespace

std::optional<mx::array> archgen_native_sdpa(const mx::array& q, const mx::array& k,
                                             const mx::array& v, float scale,
                                             const std::string& mask_mode,
                                             const std::optional<mx::array>& mask,
                                             const std::optional<mx::array>& sinks,
                                             mx::Stream s) {
  if (!fast_enabled() || s.device != mx::Device::cpu || q.ndim() != 4 || k.ndim() != 4 ||
      v.ndim() != 4 || k.dtype() != v.dtype() || !archgen::kernel_float(q.dtype()) ||
      !archgen::kernel_float(k.dtype()) || (q.dtype() != k.dtype() && q.dtype() != mx::float32) ||
      q.size() == 0 || k.shape(2) == 0) {
    return std::nullopt;
  }
  int B = q.shape(0), Hq = q.shape(1), L = q.shape(2), S = k.shape(2);
  if (k.shape(0) != B || v.shape(0) != B || k.shape(3) != q.shape(3) ||
      v.shape(1) != k.shape(1) || v.shape(2) != S || k.shape(1) == 0 ||
      Hq % k.shape(1) != 0) {
    return std::nullopt;
  }
  bool causal = mask_mode == "causal";
  if (!(mask_mode.empty() || causal || mask_mode == "array") || (causal && mask) ||
      (mask_mode == "array" && !mask)) {
    return std::nullopt;
  }
  std::vector<mx::array> in = {q, k, v};
  if (mask) {
    const int want[4] = {B, Hq, L, S};
    int nd = static_cast<int>(mask->ndim());
    if (nd > 4 || mx::promote_types(mask->dtype(), q.dtype()) != q.dtype()) {
      return std::nullopt;
    }
    for (int i = 0; i < nd; i++) {
      int d = mask->shape(i), w = want[4 - nd + i];
      if (d != 1 && d != w) return std::nullopt;
    }
    in.push_back(mask->dtype() == mx::bool_ ? *mask : mx::astype(*mask, q.dtype(), s));
  }
  if (sinks) {
    if (sinks->ndim() != 1 || sinks->shape(0) != Hq ||
        mx::promote_types(sinks->dtype(), q.dtype()) != q.dtype()) {
      return std::nullopt;
    }
    in.push_back(mx::astype(*sinks, q.dtype(), s));
  }
  mx::Shape out_shape{B, Hq, L, v.shape(3)};
  return mx::array(std::move(out_shape), q.dtype(),
                   std::make_shared<NativeSDPA>(s, scale, causal, mask.has_value(),
                                                sinks.has_value()),
                   std::move(in));
}
