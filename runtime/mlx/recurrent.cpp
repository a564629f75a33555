// The gated delta rule (Qwen3-Next's and Qwen3.5's linear attention) as one
// op over all its time steps. Each value row of a head's state [Dv, Dk]
// evolves on its own: a step reads the row, the step's key, query and
// decay, and the row's value. So the kernel hands blocks of rows (8 on
// AVX2, 16 on AVX-512, one row per vector lane) to the cores, keeps each
// block's state transposed in registers' reach ([Dk][lanes] floats) for
// every step (moved there from the state's rows and back by vector
// transposes of 8 by 8 or 16 by 16 tiles), and does in each lane exactly
// the float32 operations libmlx's step graph does, in its order: products
// rounded, then summed in index order. Its results equal the composed ops
// bit for bit.
#include "recurrent.h"
#include "panel.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cpukern.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

// libmlx rounds every product before it adds it: no fused multiply-adds.
#pragma GCC optimize("fp-contract=off")

// The instruction level of the native kernels (qmm.cpp): 0 off, 1 AVX2,
// 2 AVX-512.
int archgen_isa_level();

namespace {

// The kernels here run unless a test turns them off.
std::atomic<int> recurrent_on{1};

using archgen::Kind;
using archgen::kind_of;
using archgen::Pool;

typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));

// DeltaGates are the gated delta rule's inputs as its projections give
// them (GatedDeltaGates): q, k and v side by side in one float32 row per
// step (qkv [B, T, 2 Hk Dk + Hv Dv], strides qs), q and k not yet scaled
// to unit length, and the write strength's and the decay's inputs b and a
// [B, T, Hv] (strides bs, as) with the decay's rate and bias per head.
//
// qn, kn, beta and gate hold what the steps [t0, t1) of the pass in hand
// (DeltaJob) make of them, computed once by delta_prep for every block of
// value rows to read: q and k at unit length [B, t1 - t0, Hk, Dk], the
// write strength and the decay [B, t1 - t0, Hv], float32, step t of batch
// row b at place b (t1 - t0) + t - t0.
struct DeltaGates {
  const float *b, *a, *rate, *dt_bias;
  int64_t qs[3], bs[3], as[3], rs, ds;
  float eps, inv;  // the unit norm's eps (on the mean square), Dk^-1/2
  bool neg;        // the write strength is 2 sigmoid(b)
  float *qn, *kn, *beta, *gate;
};

// delta_prep_floats bounds the floats of DeltaGates' per-step values held
// at once (4 MiB): a longer run goes through the steps in passes.
constexpr int64_t delta_prep_floats = int64_t{1} << 20;

struct DeltaJob {
  const void* q;
  const void* k;
  const void* v;
  const float* g;
  const void* beta;
  const float* s0;
  const bool* mask;  // nullptr: every step keeps its state
  Kind t, bt;        // q, k, v's kind; beta's kind
  int B, T, Hk, Hv, Dk, Dv;
  bool gvec;  // g per key channel [B, T, Hv, Dk], else per head [B, T, Hv]
  void* y;    // [B, T, Hv, Dv] of kind t
  float* s1;  // [B, Hv, Dv, Dk]
  // gates: q is qkv (k and v unused), and beta and g are made here
  // (DeltaGates); nullptr: the inputs as they are.
  const DeltaGates* gates;
  // The steps this pass runs: the state is read from s0 where t0 is 0 and
  // from s1 (the pass before's) otherwise, and written to s1.
  int t0, t1;
  // plain: each block's state goes into its lanes and back one float at a
  // time (load_lanes, store_lanes), the baseline of the vector transposes
  // (lanes_in8 and the rest) that run otherwise; both give the same bits.
  bool plain;
};

// unit_row scales the n float32 values src (stride st) to unit length as
// the composed form does, x / sqrt(mean(x²) + eps), then times scale (the
// sum of squares in eight running parts where the values are contiguous).
__attribute__((always_inline)) inline void unit_row(float* dst, const float* src, int64_t st,
                                                    int n, float eps, float scale) {
  float ss = 0;
  int c = 0;
  if (st == 1) {
    f32x8 acc = {};
    for (; c + 8 <= n; c += 8) {
      f32x8 x;
      std::memcpy(&x, src + c, sizeof x);
      acc = acc + x * x;
    }
    for (int i = 0; i < 8; i++) ss += acc[i];
  }
  for (; c < n; c++) {
    const float x = src[c * st];
    ss += x * x;
  }
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (c = 0; c < n; c++) dst[c] = (src[c * st] * r) * scale;
}

// load_lanes puts rows [r0, r0 + n) of the float32 matrix m (rows of w
// values) into lanes of sv[0..w): lane i of sv[c] is row r0 + i's value c.
// The lanes past n repeat the last row, so that they compute on real
// numbers; store_lanes writes back the first n.
template <typename V, int L>
__attribute__((always_inline)) inline void load_lanes(V* sv, const float* m, int r0, int n, int w) {
  for (int i = 0; i < L; i++) {
    const float* row = m + static_cast<size_t>(r0 + std::min(i, n - 1)) * w;
    for (int c = 0; c < w; c++) sv[c][i] = row[c];
  }
}

template <typename V>
__attribute__((always_inline)) inline void store_lanes(float* m, const V* sv, int r0, int n, int w) {
  for (int i = 0; i < n; i++) {
    float* row = m + static_cast<size_t>(r0 + i) * w;
    for (int c = 0; c < w; c++) row[c] = sv[c][i];
  }
}

// mask8 has the sign bit set in the first n of its 8 lanes (n at most 8).
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i mask8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// lanes_in8 and lanes_out8 do what load_lanes and store_lanes do, for 8
// lanes with AVX2, m the block's first row (its n rows of w values in
// turn; the lanes past n read row n - 1): 8 values of 8 rows at a time
// (masked past w) read as a tile, transposed, and written as 8 lanes'
// vectors, and the reverse. They only move floats, to the same places as
// the plain loops.
__attribute__((target("avx2,fma,f16c"))) void lanes_in8(f32x8* sv, const float* m, int n, int w) {
  const float* rows[8];
  for (int i = 0; i < 8; i++) rows[i] = m + static_cast<size_t>(std::min(i, n - 1)) * w;
  float* out = reinterpret_cast<float*>(sv);
  __m256 r[8];
  int c = 0;
  for (; c + 8 <= w; c += 8) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(rows[i] + c);
    archgen::transpose8_regs(r);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) _mm256_store_ps(out + static_cast<size_t>(c + i) * 8, r[i]);
  }
  if (c < w) {
    const __m256i k = mask8(w - c);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) r[i] = _mm256_maskload_ps(rows[i] + c, k);
    archgen::transpose8_regs(r);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
      if (c + i < w) _mm256_store_ps(out + static_cast<size_t>(c + i) * 8, r[i]);
    }
  }
}

__attribute__((target("avx2,fma,f16c"))) void lanes_out8(float* m, const f32x8* sv, int n, int w) {
  const float* in = reinterpret_cast<const float*>(sv);
  __m256 r[8];
  int c = 0;
  for (; c + 8 <= w; c += 8) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) r[i] = _mm256_load_ps(in + static_cast<size_t>(c + i) * 8);
    archgen::transpose8_regs(r);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
      if (i < n) _mm256_storeu_ps(m + static_cast<size_t>(i) * w + c, r[i]);
    }
  }
  if (c < w) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
      r[i] = c + i < w ? _mm256_load_ps(in + static_cast<size_t>(c + i) * 8) : _mm256_setzero_ps();
    }
    archgen::transpose8_regs(r);
    const __m256i k = mask8(w - c);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
      if (i < n) _mm256_maskstore_ps(m + static_cast<size_t>(i) * w + c, k, r[i]);
    }
  }
}

// transpose16 transposes the 16 by 16 tile r in place: unpacks of pairs of
// rows, of pairs of those pairs, then two rounds of 128-bit shuffles.
__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) inline void transpose16(__m512* r) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4 g + e] holds element e of each 128-bit lane of rows 4 g to 4 g + 3.
#pragma GCC unroll 4
  for (int g = 0; g < 4; g++) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // Value 4 q + e of the 16 rows: lane q of u[e], u[4 + e], u[8 + e] and
  // u[12 + e] in turn.
#pragma GCC unroll 4
  for (int e = 0; e < 4; e++) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xdd);
    r[e] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + e] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    r[4 + e] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + e] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

// lanes_in16 and lanes_out16 are lanes_in8 and lanes_out8 for 16 lanes
// with AVX-512, on 16 by 16 tiles.
__attribute__((target("avx512f,avx2,fma,f16c"))) void lanes_in16(f32x16* sv, const float* m, int n,
                                                                 int w) {
  const float* rows[16];
  for (int i = 0; i < 16; i++) rows[i] = m + static_cast<size_t>(std::min(i, n - 1)) * w;
  float* out = reinterpret_cast<float*>(sv);
  __m512 r[16];
  int c = 0;
  for (; c + 16 <= w; c += 16) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(rows[i] + c);
    transpose16(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_store_ps(out + static_cast<size_t>(c + i) * 16, r[i]);
  }
  if (c < w) {
    const __mmask16 k = static_cast<__mmask16>((1u << (w - c)) - 1);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_maskz_loadu_ps(k, rows[i] + c);
    transpose16(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
      if (c + i < w) _mm512_store_ps(out + static_cast<size_t>(c + i) * 16, r[i]);
    }
  }
}

__attribute__((target("avx512f,avx2,fma,f16c"))) void lanes_out16(float* m, const f32x16* sv, int n,
                                                                  int w) {
  const float* in = reinterpret_cast<const float*>(sv);
  __m512 r[16];
  int c = 0;
  for (; c + 16 <= w; c += 16) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_load_ps(in + static_cast<size_t>(c + i) * 16);
    transpose16(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
      if (i < n) _mm512_storeu_ps(m + static_cast<size_t>(i) * w + c, r[i]);
    }
  }
  if (c < w) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
      r[i] = c + i < w ? _mm512_load_ps(in + static_cast<size_t>(c + i) * 16) : _mm512_setzero_ps();
    }
    transpose16(r);
    const __mmask16 k = static_cast<__mmask16>((1u << (w - c)) - 1);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
      if (i < n) _mm512_mask_storeu_ps(m + static_cast<size_t>(i) * w + c, k, r[i]);
    }
  }
}

// run_items hands work items [0, items) to the pool's threads in a few
// parts each; f runs a range of them.
void run_items(int items, const std::function<void(int, int)>& f) {
  Pool& pool = Pool::get();
  const int parts = std::min(items, pool.threads() * 4);
  pool.run(parts, [&](int p) {
    f(static_cast<int>(static_cast<int64_t>(items) * p / parts),
      static_cast<int>(static_cast<int64_t>(items) * (p + 1) / parts));
  });
}

// outputs_ready allocates a primitive's outputs and tells the encoder of
// its arrays.
mx::cpu::CommandEncoder& outputs_ready(mx::Stream s, const std::vector<mx::array>& in,
                                       std::vector<mx::array>& outs) {
  auto& enc = mx::cpu::get_command_encoder(s);
  for (auto& a : in) enc.set_input_array(a);
  for (auto& o : outs) {
    o.set_data(mx::allocator::malloc(o.nbytes()));
    enc.set_output_array(o);
  }
  return enc;
}

// The rows [r0, r0 + L) of head (b, h) through the steps [j.t0, j.t1),
// lane i holding row r0 + i (sv, as the caller loaded it and stores it
// back); the lanes past n are computed on copies and not written. V is a
// vector of L floats; the body is the same for every width.
template <typename V, int L>
__attribute__((always_inline)) inline void delta_block(const DeltaJob& j, int b, int h, int r0,
                                                       int n, V* sv, float* kbuf,
                                                       float* qbuf, V* old) {
  const int Dk = j.Dk, Dv = j.Dv, hk = h / (j.Hv / j.Hk);
  const size_t ts = archgen::kind_size(j.t);
  const DeltaGates* G = j.gates;
  for (int t = j.t0; t < j.t1; t++) {
    const size_t bt = static_cast<size_t>(b) * j.T + t;
    const size_t gh = bt * j.Hv + h;
    float beta, gate = 0;
    const float* row = nullptr;
    const float *kf = kbuf, *qf = qbuf;  // the step's key and query, float32
    if (G != nullptr) {
      // q, k and the gates as delta_prep left them.
      row = static_cast<const float*>(j.q) + b * G->qs[0] + t * G->qs[1];
      const size_t at = static_cast<size_t>(b) * (j.t1 - j.t0) + (t - j.t0);
      qf = G->qn + (at * j.Hk + hk) * Dk;
      kf = G->kn + (at * j.Hk + hk) * Dk;
      beta = G->beta[at * j.Hv + h];
      gate = G->gate[at * j.Hv + h];
    } else {
      const size_t qk_at = (bt * j.Hk + hk) * Dk;
      archgen::to_f32(kbuf, static_cast<const char*>(j.k) + qk_at * ts, Dk, j.t);
      archgen::to_f32(qbuf, static_cast<const char*>(j.q) + qk_at * ts, Dk, j.t);
      beta = archgen::load1(j.beta, gh, j.bt);
      if (!j.gvec) gate = j.g[gh];
    }
    const bool keep = j.mask == nullptr || j.mask[bt];
    if (!keep) std::copy(sv, sv + Dk, old);
    V m = {};
    if (j.gvec) {
      const float* gp = j.g + gh * Dk;
      for (int c = 0; c < Dk; c++) {
        sv[c] = sv[c] * gp[c];
        V p = sv[c] * kf[c];
        m = m + p;
      }
    } else {
      const float gs = gate;
      for (int c = 0; c < Dk; c++) {
        sv[c] = sv[c] * gs;
        V p = sv[c] * kf[c];
        m = m + p;
      }
    }
    const size_t v_at = (bt * j.Hv + h) * Dv + r0;
    V vv = {};
    if (G != nullptr) {
      const float* vp = row + (static_cast<int64_t>(2 * j.Hk) * Dk + static_cast<int64_t>(h) * Dv + r0) * G->qs[2];
      for (int i = 0; i < n; i++) vv[i] = vp[i * G->qs[2]];
    } else {
      for (int i = 0; i < n; i++) vv[i] = archgen::load1(j.v, v_at + i, j.t);
    }
    V d = vv - m;
    d = d * beta;
    V o = {};
    for (int c = 0; c < Dk; c++) {
      V p = d * kf[c];
      sv[c] = sv[c] + p;
      V r = sv[c] * qf[c];
      o = o + r;
    }
    for (int i = 0; i < n; i++) archgen::store1(j.y, v_at + i, o[i], j.t);
    if (!keep) std::copy(old, old + Dk, sv);
  }
}

// delta_prep is GatedDeltaGates' first phase for the steps [j.t0, j.t1):
// items [i0, i1), item i the step j.t0 + i % (j.t1 - j.t0) of batch row i
// / (j.t1 - j.t0), each of the step's q and k heads to unit length and each
// value head's write strength and decay, into DeltaGates' qn, kn, beta and
// gate at place i, so that every block of value rows reads them made once.
__attribute__((target("avx2,fma,f16c"))) void delta_prep(const DeltaJob& j, int i0, int i1) {
  const DeltaGates* G = j.gates;
  const int n = j.t1 - j.t0, Dk = j.Dk;
  for (int i = i0; i < i1; i++) {
    const int b = i / n, t = j.t0 + i % n;
    const float* row = static_cast<const float*>(j.q) + b * G->qs[0] + t * G->qs[1];
    for (int hk = 0; hk < j.Hk; hk++) {
      const size_t at = (static_cast<size_t>(i) * j.Hk + hk) * Dk;
      unit_row(G->qn + at, row + static_cast<int64_t>(hk) * Dk * G->qs[2], G->qs[2], Dk, G->eps,
               G->inv * G->inv);
      unit_row(G->kn + at, row + static_cast<int64_t>(j.Hk + hk) * Dk * G->qs[2], G->qs[2], Dk,
               G->eps, G->inv);
    }
    for (int h = 0; h < j.Hv; h++) {
      const float bb = G->b[b * G->bs[0] + t * G->bs[1] + h * G->bs[2]];
      float beta = 1.0f / (1.0f + std::exp(-bb));
      if (G->neg) beta *= 2;
      const float x = G->a[b * G->as[0] + t * G->as[1] + h * G->as[2]] + G->dt_bias[h * G->ds];
      const float sp = x > 20.0f ? x : std::log1p(std::exp(x));
      G->beta[static_cast<size_t>(i) * j.Hv + h] = beta;
      G->gate[static_cast<size_t>(i) * j.Hv + h] = std::exp(G->rate[h * G->rs] * sp);
    }
  }
}

// Scratch is a worker's: a block's state, a saved copy for masked steps,
// and two float32 rows of a step's inputs (the delta rule's key and query,
// the scan's B and C), on 64-byte boundaries as the vector types want
// them.
template <typename V>
struct Scratch {
  float* mem;
  V *st, *old;
  float *kf, *qf;
  explicit Scratch(int Dk) {
    const size_t vs = sizeof(V) * Dk, fs = (sizeof(float) * Dk + 63) / 64 * 64;
    mem = static_cast<float*>(std::aligned_alloc(64, 2 * vs + 2 * fs));
    if (mem == nullptr) throw std::bad_alloc();
    char* p = reinterpret_cast<char*>(mem);
    st = reinterpret_cast<V*>(p);
    old = reinterpret_cast<V*>(p + vs);
    kf = reinterpret_cast<float*>(p + 2 * vs);
    qf = reinterpret_cast<float*>(p + 2 * vs + fs);
  }
  ~Scratch() { std::free(mem); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// block_floats is where work item i's rows start in the state (items of L
// rows, blocks of them per head) and how many floats they hold.
template <int L>
__attribute__((always_inline)) inline std::pair<size_t, size_t> block_floats(const DeltaJob& j,
                                                                             int i) {
  const int blocks = (j.Dv + L - 1) / L;
  const int bh = i / blocks, r0 = (i % blocks) * L, n = std::min(L, j.Dv - r0);
  return {(static_cast<size_t>(bh) * j.Dv + r0) * j.Dk, static_cast<size_t>(n) * j.Dk};
}

// prefetch_floats asks the caches for the lines of the n floats at p ahead
// of their use: a hint, which moves no value.
__attribute__((always_inline)) inline void prefetch_floats(const float* p, size_t n) {
  const char* b = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63});
  const char* e = reinterpret_cast<const char*>(p + n);
  for (; b < e; b += 64) __builtin_prefetch(b, 0, 3);
}

// delta_items runs work items [i0, i1) on vectors V of L floats
// (delta_items8 on AVX2, delta_items16 on AVX-512): item i is head i /
// blocks's block i % blocks of L rows, its state moved into the lanes
// before the steps and back after them by the vector transposes in and
// out, or by the plain loops where j.plain asks for them. With the
// transposes, each item first asks for the lines it writes and those the
// next item reads, so that they arrive while it runs: a short run (a
// decode step) is otherwise bound by the state's trips to and from memory.
template <typename V, int L, typename In, typename Out>
__attribute__((always_inline)) inline void delta_items(const DeltaJob& j, int i0, int i1, In in,
                                                       Out out) {
  const int blocks = (j.Dv + L - 1) / L;
  const float* from = j.t0 == 0 ? j.s0 : j.s1;
  Scratch<V> s(j.Dk);
  for (int i = i0; i < i1; i++) {
    const int bh = i / blocks, r0 = (i % blocks) * L, n = std::min(L, j.Dv - r0);
    const size_t head = static_cast<size_t>(bh) * j.Dv * j.Dk;
    const size_t at = head + static_cast<size_t>(r0) * j.Dk;
    if (j.plain) {
      load_lanes<V, L>(s.st, from + head, r0, n, j.Dk);
    } else {
      prefetch_floats(j.s1 + at, static_cast<size_t>(n) * j.Dk);
      if (i + 1 < i1) {
        const auto [next, count] = block_floats<L>(j, i + 1);
        prefetch_floats(from + next, count);
      }
      in(s.st, from + at, n, j.Dk);
    }
    delta_block<V, L>(j, bh / j.Hv, bh % j.Hv, r0, n, s.st, s.kf, s.qf, s.old);
    if (j.plain) {
      store_lanes(j.s1 + head, s.st, r0, n, j.Dk);
    } else {
      out(j.s1 + at, s.st, n, j.Dk);
    }
  }
}

__attribute__((target("avx2,fma,f16c"))) void delta_items8(const DeltaJob& j, int i0, int i1) {
  delta_items<f32x8, 8>(j, i0, i1, lanes_in8, lanes_out8);
}

__attribute__((target("avx512f,avx2,fma,f16c"))) void delta_items16(const DeltaJob& j, int i0,
                                                                     int i1) {
  delta_items<f32x16, 16>(j, i0, i1, lanes_in16, lanes_out16);
}

void run_delta(const DeltaJob& j, int isa) {
  const int L = isa == 2 ? 16 : 8;
  run_items(j.B * j.Hv * ((j.Dv + L - 1) / L), [&](int i0, int i1) {
    if (isa == 2) {
      delta_items16(j, i0, i1);
    } else {
      delta_items8(j, i0, i1);
    }
  });
}

// run_delta_gates runs GatedDeltaGates' job j (its gates' qn, kn, beta and
// gate unset) in passes over the steps, each as many as delta_prep_floats
// holds: the pass's q, k and gates first, then the rule over its steps.
void run_delta_gates(const DeltaJob& j, int isa) {
  const int64_t per = static_cast<int64_t>(j.B) * (2 * j.Hk * j.Dk + 2 * j.Hv);  // floats a step
  const int steps = static_cast<int>(std::clamp<int64_t>(delta_prep_floats / per, 1, j.T));
  const size_t n = static_cast<size_t>(steps) * j.B;
  std::unique_ptr<float[]> mem(new float[n * (2 * j.Hk * j.Dk + 2 * j.Hv)]);
  DeltaGates G = *j.gates;
  G.qn = mem.get();
  G.kn = G.qn + n * j.Hk * j.Dk;
  G.beta = G.kn + n * j.Hk * j.Dk;
  G.gate = G.beta + n * j.Hv;
  DeltaJob p = j;
  p.gates = &G;
  for (int t0 = 0; t0 < j.T; t0 += steps) {
    p.t0 = t0;
    p.t1 = std::min(j.T, t0 + steps);
    run_items(j.B * (p.t1 - p.t0), [&](int i0, int i1) { delta_prep(p, i0, i1); });
    run_delta(p, isa);
  }
}

// delta_plain_copy reports whether the environment holds
// ARCHGEN_MLX_DELTA_PLAIN_COPY=1 as a gated delta op is made: its kernel
// then moves the state in and out of its lanes with the plain loops
// (DeltaJob's plain), the baseline the tests compare the transposes with.
bool delta_plain_copy() {
  const char* e = std::getenv("ARCHGEN_MLX_DELTA_PLAIN_COPY");
  return e != nullptr && std::strcmp(e, "1") == 0;
}

class NativeGatedDelta : public mx::Primitive {
 public:
  NativeGatedDelta(mx::Stream s, bool gvec, bool masked, int isa, bool plain)
      : Primitive(s), gvec_(gvec), masked_(masked), isa_(isa), plain_(plain) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = outputs_ready(stream(), in, outs);
    const mx::array &q = in[0], &k = in[1], &v = in[2], &g = in[3], &beta = in[4], &s0 = in[5];
    DeltaJob j{q.data<void>(),
               k.data<void>(),
               v.data<void>(),
               g.data<float>(),
               beta.data<void>(),
               s0.data<float>(),
               masked_ ? in[6].data<bool>() : nullptr,
               kind_of(q.dtype()),
               kind_of(beta.dtype()),
               static_cast<int>(q.shape(0)),
               static_cast<int>(q.shape(1)),
               static_cast<int>(q.shape(2)),
               static_cast<int>(v.shape(2)),
               static_cast<int>(q.shape(3)),
               static_cast<int>(v.shape(3)),
               gvec_,
               outs[0].data<void>(),
               outs[1].data<float>(),
               nullptr,
               0,
               static_cast<int>(q.shape(1)),
               plain_};
    int isa = isa_;
    enc.dispatch([j, in, outs, isa]() { run_delta(j, isa); });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's gated delta kernel runs on the CPU only");
  }

  const char* name() const override { return "ArchgenGatedDelta"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeGatedDelta*>(&other);
    return o != nullptr && o->gvec_ == gvec_ && o->masked_ == masked_ && o->isa_ == isa_ &&
           o->plain_ == plain_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    const mx::array &q = in[0], &v = in[2];
    return {{q.shape(0), q.shape(1), v.shape(2), v.shape(3)}, in[5].shape()};
  }

 private:
  bool gvec_, masked_;
  int isa_;
  bool plain_;
};

// NativeGatedDeltaGates is the gated delta rule from its projections'
// outputs (DeltaGates): qkv, b, a, rate, dt_bias, state[, mask], float32.
class NativeGatedDeltaGates : public mx::Primitive {
 public:
  NativeGatedDeltaGates(mx::Stream s, int Hk, int Dk, int Hv, int Dv, bool neg, bool masked,
                        int isa, bool plain)
      : Primitive(s),
        Hk_(Hk),
        Dk_(Dk),
        Hv_(Hv),
        Dv_(Dv),
        neg_(neg),
        masked_(masked),
        isa_(isa),
        plain_(plain) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = outputs_ready(stream(), in, outs);
    const mx::array &qkv = in[0], &b = in[1], &a = in[2], &rate = in[3], &dtb = in[4];
    auto gates = std::make_shared<DeltaGates>();
    gates->b = b.data<float>();
    gates->a = a.data<float>();
    gates->rate = rate.data<float>();
    gates->dt_bias = dtb.data<float>();
    for (int i = 0; i < 3; i++) {
      gates->qs[i] = qkv.strides()[i];
      gates->bs[i] = b.strides()[i];
      gates->as[i] = a.strides()[i];
    }
    gates->rs = rate.strides()[0];
    gates->ds = dtb.strides()[0];
    const double inv = 1.0 / std::sqrt(static_cast<double>(Dk_));
    gates->inv = static_cast<float>(inv);
    gates->eps = static_cast<float>(1e-6 * inv * inv);
    gates->neg = neg_;
    DeltaJob j{qkv.data<void>(),
               nullptr,
               qkv.data<void>(),
               nullptr,
               nullptr,
               in[5].data<float>(),
               masked_ ? in[6].data<bool>() : nullptr,
               Kind::f32,
               Kind::f32,
               static_cast<int>(qkv.shape(0)),
               static_cast<int>(qkv.shape(1)),
               Hk_,
               Hv_,
               Dk_,
               Dv_,
               false,
               outs[0].data<void>(),
               outs[1].data<float>(),
               gates.get(),
               0,
               static_cast<int>(qkv.shape(1)),
               plain_};
    int isa = isa_;
    enc.dispatch([j, in, outs, isa, gates]() { run_delta_gates(j, isa); });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's gated delta kernel runs on the CPU only");
  }

  const char* name() const override { return "ArchgenGatedDeltaGates"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeGatedDeltaGates*>(&other);
    return o != nullptr && o->Hk_ == Hk_ && o->Dk_ == Dk_ && o->Hv_ == Hv_ && o->Dv_ == Dv_ &&
           o->neg_ == neg_ && o->masked_ == masked_ && o->isa_ == isa_ && o->plain_ == plain_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {{in[0].shape(0), in[0].shape(1), Hv_, Dv_}, in[5].shape()};
  }

 private:
  int Hk_, Dk_, Hv_, Dv_;
  bool neg_, masked_;
  int isa_;
  bool plain_;
};

// shapes_fit: the shapes the recurrence takes (what both forms check).
bool shapes_fit(const mx::array& q, const mx::array& k, const mx::array& v, const mx::array& g,
                const mx::array& beta, const mx::array& state,
                const std::optional<mx::array>& mask) {
  if (q.ndim() != 4 || k.shape() != q.shape() || v.ndim() != 4) return false;
  const int B = q.shape(0), T = q.shape(1), Hk = q.shape(2), Dk = q.shape(3);
  const int Hv = v.shape(2), Dv = v.shape(3);
  if (v.shape(0) != B || v.shape(1) != T || Hk <= 0 || Hv % Hk != 0 || Dk <= 0 || Dv <= 0) {
    return false;
  }
  const bool gvec = g.ndim() == 4;
  if (!(g.ndim() == 3 || gvec) || g.shape(0) != B || g.shape(1) != T || g.shape(2) != Hv ||
      (gvec && g.shape(3) != Dk)) {
    return false;
  }
  if (beta.shape() != mx::Shape{B, T, Hv}) return false;
  if (state.shape() != mx::Shape{B, Hv, Dv, Dk}) return false;
  if (mask && mask->shape() != mx::Shape{B, T}) return false;
  return true;
}

// ---- Mamba2's state-space scan ----

struct ScanJob {
  const void* x;   // [b, T, h, p] of kind t
  const float* dt;  // [b, T, h], after softplus and clip
  const float* A;   // [h], -exp(A_log)
  const void* B;    // [b, T, g, n] of kind bt
  const void* C;    // [b, T, g, n] of kind bt
  const float* s0;  // [b, h, p, n]
  Kind t, bt;
  int nb, T, H, P, G, N;
  void* y;    // [b, T, h, p] of kind t
  float* s1;  // [b, h, p, n]
};

// scan_block runs rows [r0, r0 + n) of head (b, h)'s state, one row (a
// channel p) per lane, through every step.
template <typename V, int L>
__attribute__((always_inline)) inline void scan_block(const ScanJob& j, int b, int h, int r0, int n,
                                                      V* sv, float* bf, float* cf) {
  const int N = j.N, P = j.P, grp = h / (j.H / j.G);
  const size_t ts = archgen::kind_size(j.t), bs = archgen::kind_size(j.bt);
  const size_t head = (static_cast<size_t>(b) * j.H + h) * P * N;
  load_lanes<V, L>(sv, j.s0 + head, r0, n, N);
  for (int t = 0; t < j.T; t++) {
    const size_t bt = static_cast<size_t>(b) * j.T + t;
    const size_t bc_at = (bt * j.G + grp) * N;
    archgen::to_f32(bf, static_cast<const char*>(j.B) + bc_at * bs, N, j.bt);
    archgen::to_f32(cf, static_cast<const char*>(j.C) + bc_at * bs, N, j.bt);
    const float dtv = j.dt[bt * j.H + h];
    const float dA = std::exp(dtv * j.A[h]);
    const size_t x_at = (bt * j.H + h) * P + r0;
    V xs = {};
    for (int i = 0; i < n; i++) xs[i] = archgen::load1(j.x, x_at + i, j.t);
    xs = xs * dtv;
    V acc = {};
    for (int c = 0; c < N; c++) {
      V a = sv[c] * dA;
      V u = xs * bf[c];
      sv[c] = a + u;
      V r = sv[c] * cf[c];
      acc = acc + r;
    }
    for (int i = 0; i < n; i++) archgen::store1(j.y, x_at + i, acc[i], j.t);
  }
  store_lanes(j.s1 + head, sv, r0, n, N);
}

template <typename V, int L>
__attribute__((always_inline)) inline void scan_items(const ScanJob& j, int i0, int i1) {
  const int blocks = (j.P + L - 1) / L;
  Scratch<V> s(j.N);
  for (int i = i0; i < i1; i++) {
    const int bh = i / blocks, r0 = (i % blocks) * L;
    scan_block<V, L>(j, bh / j.H, bh % j.H, r0, std::min(L, j.P - r0), s.st, s.kf, s.qf);
  }
}

__attribute__((target("avx2,fma,f16c"))) void scan_items8(const ScanJob& j, int i0, int i1) {
  scan_items<f32x8, 8>(j, i0, i1);
}

__attribute__((target("avx512f,avx2,fma,f16c"))) void scan_items16(const ScanJob& j, int i0, int i1) {
  scan_items<f32x16, 16>(j, i0, i1);
}

class NativeScan : public mx::Primitive {
 public:
  NativeScan(mx::Stream s, int isa) : Primitive(s), isa_(isa) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = outputs_ready(stream(), in, outs);
    const mx::array &x = in[0], &B = in[3];
    ScanJob j{x.data<void>(),
              in[1].data<float>(),
              in[2].data<float>(),
              B.data<void>(),
              in[4].data<void>(),
              in[5].data<float>(),
              kind_of(x.dtype()),
              kind_of(B.dtype()),
              static_cast<int>(x.shape(0)),
              static_cast<int>(x.shape(1)),
              static_cast<int>(x.shape(2)),
              static_cast<int>(x.shape(3)),
              static_cast<int>(B.shape(2)),
              static_cast<int>(B.shape(3)),
              outs[0].data<void>(),
              outs[1].data<float>()};
    int isa = isa_;
    enc.dispatch([j, in, outs, isa]() {
      const int L = isa == 2 ? 16 : 8;
      run_items(j.nb * j.H * ((j.P + L - 1) / L), [&](int i0, int i1) {
        if (isa == 2) {
          scan_items16(j, i0, i1);
        } else {
          scan_items8(j, i0, i1);
        }
      });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's state-space scan runs on the CPU only");
  }

  const char* name() const override { return "ArchgenSSMScan"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeScan*>(&other);
    return o != nullptr && o->isa_ == isa_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape(), in[5].shape()};
  }

 private:
  int isa_;
};

// ssm_fits: the shapes the scan takes.
bool ssm_fits(const mx::array& x, const mx::array& A_log, const mx::array& B, const mx::array& C,
              const mx::array& D, const mx::array& dt, const mx::array& dt_bias,
              const std::optional<mx::array>& state) {
  if (x.ndim() != 4 || B.ndim() != 4 || C.shape() != B.shape()) return false;
  const int b = x.shape(0), T = x.shape(1), h = x.shape(2), p = x.shape(3);
  const int g = B.shape(2), n = B.shape(3);
  if (B.shape(0) != b || B.shape(1) != T || g <= 0 || h % g != 0 || n <= 0 || p <= 0) return false;
  const mx::Shape heads = {h};
  if (A_log.shape() != heads || D.shape() != heads || dt_bias.shape() != heads) return false;
  if (dt.shape() != mx::Shape{b, T, h}) return false;
  if (state && state->shape() != mx::Shape{b, h, p, n}) return false;
  return true;
}

std::string shape_of(const mx::array& a) {
  std::string out = "[";
  for (int i = 0; i < static_cast<int>(a.ndim()); i++) {
    out += (i > 0 ? ", " : "") + std::to_string(a.shape(i));
  }
  return out + "]";
}

[[noreturn]] void ssm_refuse(const mx::array& x, const mx::array& A_log, const mx::array& B, const mx::array& C,
                const mx::array& D, const mx::array& dt, const mx::array& dt_bias,
                const std::optional<mx::array>& state) {
  throw std::invalid_argument(
      "want x [b, T, h, p], B and C [b, T, g, n] with h a multiple of g, A_log, D and dt_bias "
      "[h], dt [b, T, h], state [b, h, p, n]; got x " +
      shape_of(x) + ", B " + shape_of(B) + ", C " + shape_of(C) + ", A_log " + shape_of(A_log) +
      ", D " + shape_of(D) + ", dt " + shape_of(dt) + ", dt_bias " + shape_of(dt_bias) +
      (state ? ", state " + shape_of(*state) : ""));
}

// compute_dt and A as mlx-lm computes them: dt' = clip(softplus(float32(dt)
// + dt_bias), lo, hi), A = float32(-exp(A_log)).
std::pair<mx::array, mx::array> ssm_dt_a(const mx::array& dt, const mx::array& dt_bias,
                                         const mx::array& A_log, float lo, float hi,
                                         mx::Stream s) {
  mx::array d = mx::add(mx::astype(dt, mx::float32, s), dt_bias, s);
  d = mx::logaddexp(d, mx::array(0.0f), s);
  d = mx::clip(d, mx::array(lo), mx::array(hi), s);
  mx::array A = mx::astype(mx::negative(mx::exp(A_log, s), s), d.dtype(), s);
  return {d, A};
}

// ---- depthwise causal convolution ----

struct ConvJob {
  const void* x;  // [B, L + K - 1, C]
  const float* w;  // [K, C], float32 values of the weight
  Kind t;
  int B, L, C, K;
  void* y;  // [B, L, C]
};

// conv_taps writes the depthwise kernel w [C, K] (MLX's [C, K, 1]) of kind
// t as float32 taps wt [K, C], each tap's row contiguous over the channels.
__attribute__((target("avx2,fma,f16c"))) void conv_taps(float* wt, const void* w, Kind t, int C,
                                                         int K) {
  for (int c = 0; c < C; c++) {
    for (int k = 0; k < K; k++) {
      wt[static_cast<size_t>(k) * C + c] = archgen::load1(w, static_cast<size_t>(c) * K + k, t);
    }
  }
}

// conv_rows computes outputs [r0, r1) of the B * L, all channels, lanes
// over channels.
template <typename V, int N>
__attribute__((always_inline)) inline void conv_rows(const ConvJob& j, int r0, int r1, float* xf) {
  const int C = j.C, K = j.K, Lin = j.L + j.K - 1;
  for (int r = r0; r < r1; r++) {
    const int b = r / j.L, l = r % j.L;
    const size_t x0 = (static_cast<size_t>(b) * Lin + l) * C;
    archgen::to_f32(xf, static_cast<const char*>(j.x) + x0 * archgen::kind_size(j.t),
                    static_cast<size_t>(K) * C, j.t);
    const size_t y0 = static_cast<size_t>(r) * C;
    int c = 0;
    for (; c + N <= C; c += N) {
      V acc = {};
      for (int k = 0; k < K; k++) {
        V xv, wv;
        std::memcpy(&xv, xf + static_cast<size_t>(k) * C + c, sizeof(V));
        std::memcpy(&wv, j.w + static_cast<size_t>(k) * C + c, sizeof(V));
        V p = xv * wv;
        acc = acc + p;
      }
      for (int i = 0; i < N; i++) archgen::store1(j.y, y0 + c + i, acc[i], j.t);
    }
    for (; c < C; c++) {
      float acc = 0;
      for (int k = 0; k < K; k++) {
        float p = xf[static_cast<size_t>(k) * C + c] * j.w[static_cast<size_t>(k) * C + c];
        acc = acc + p;
      }
      archgen::store1(j.y, y0 + c, acc, j.t);
    }
  }
}

__attribute__((target("avx2,fma,f16c"))) void conv_rows8(const ConvJob& j, int r0, int r1) {
  std::vector<float> xf(static_cast<size_t>(j.K) * j.C);
  conv_rows<f32x8, 8>(j, r0, r1, xf.data());
}

__attribute__((target("avx512f,avx2,fma,f16c"))) void conv_rows16(const ConvJob& j, int r0, int r1) {
  std::vector<float> xf(static_cast<size_t>(j.K) * j.C);
  conv_rows<f32x16, 16>(j, r0, r1, xf.data());
}

// NativeDepthwiseConv is conv1d's depthwise causal form: x [B, L + K - 1,
// C] and the kernel w [C, K, 1] of x's dtype in, y [B, L, C] out.
class NativeDepthwiseConv : public mx::UnaryPrimitive {
 public:
  NativeDepthwiseConv(mx::Stream s, int isa) : UnaryPrimitive(s), isa_(isa) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    const mx::array &x = in[0], &w = in[1];
    const int C = x.shape(2), K = w.shape(1);
    auto wt = std::make_shared<std::vector<float>>(static_cast<size_t>(K) * C);
    ConvJob j{x.data<void>(), wt->data(), kind_of(x.dtype()), static_cast<int>(x.shape(0)),
              static_cast<int>(out.shape(1)), C, K, out.data<void>()};
    int isa = isa_;
    const void* stored = w.data<void>();
    enc.dispatch([j, in, out, isa, wt, stored]() {
      conv_taps(wt->data(), stored, j.t, j.C, j.K);
      run_items(j.B * j.L, [&](int r0, int r1) {
        if (isa == 2) {
          conv_rows16(j, r0, r1);
        } else {
          conv_rows8(j, r0, r1);
        }
      });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's depthwise convolution runs on the CPU only");
  }

  const char* name() const override { return "ArchgenDepthwiseConv1d"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeDepthwiseConv*>(&other);
    return o != nullptr && o->isa_ == isa_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {{in[0].shape(0), in[0].shape(1) - in[1].shape(1) + 1, in[0].shape(2)}};
  }

 private:
  int isa_;
};

// ConvStepJob is a short convolution's step over new inputs x [B, L, C]
// after the state [B, K - 1, C] (the inputs before them), float32: y [B,
// L, C] (plus the bias, then silu where asked) and the next state, the
// last K - 1 of the state and x side by side.
struct ConvStepJob {
  const float *x, *state, *bias;  // bias may be null
  const float* wt;                // [K, C]: the taps, each over the channels
  int B, L, C, K;
  bool silu;
  float *y, *next;
  // input i of row b: the state's before the new inputs.
  const float* in(int b, int i) const {
    const int keep = K - 1;
    return i < keep ? state + (static_cast<size_t>(b) * keep + i) * C
                    : x + (static_cast<size_t>(b) * L + (i - keep)) * C;
  }
};

template <typename V, int N>
__attribute__((always_inline)) inline void conv_step_rows(const ConvStepJob& j, int r0, int r1) {
  const int C = j.C, K = j.K;
  for (int r = r0; r < r1; r++) {
    const int b = r / j.L, l = r % j.L;
    float* y = j.y + static_cast<size_t>(r) * C;
    int c = 0;
    for (; c + N <= C; c += N) {
      V acc = {};
      for (int k = 0; k < K; k++) {
        V xv, wv;
        std::memcpy(&xv, j.in(b, l + k) + c, sizeof(V));
        std::memcpy(&wv, j.wt + static_cast<size_t>(k) * C + c, sizeof(V));
        V p = xv * wv;
        acc = acc + p;
      }
      std::memcpy(y + c, &acc, sizeof(V));
    }
    for (; c < C; c++) {
      float acc = 0;
      for (int k = 0; k < K; k++) {
        float p = j.in(b, l + k)[c] * j.wt[static_cast<size_t>(k) * C + c];
        acc = acc + p;
      }
      y[c] = acc;
    }
    for (c = 0; c < C; c++) {
      float v = y[c];
      if (j.bias != nullptr) v = v + j.bias[c];
      if (j.silu) v = v / (1.0f + std::exp(-v));
      y[c] = v;
    }
  }
}

__attribute__((target("avx2,fma,f16c"))) void conv_step_rows8(const ConvStepJob& j, int r0, int r1) {
  conv_step_rows<f32x8, 8>(j, r0, r1);
}

__attribute__((target("avx512f,avx2,fma,f16c"))) void conv_step_rows16(const ConvStepJob& j,
                                                                        int r0, int r1) {
  conv_step_rows<f32x16, 16>(j, r0, r1);
}

// NativeConvStep is the short convolution's step: x, state, w[, bias] in,
// y and the next state out, float32. w is the taps [K, C] where taps is
// set, and otherwise [C, K, 1] as MLX stores a depthwise kernel, moved to
// [K, C] in scratch on each call.
class NativeConvStep : public mx::Primitive {
 public:
  NativeConvStep(mx::Stream s, bool silu, bool bias, bool taps, int isa)
      : Primitive(s), silu_(silu), bias_(bias), taps_(taps), isa_(isa) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = outputs_ready(stream(), in, outs);
    const mx::array &x = in[0], &st = in[1], &w = in[2];
    const int C = x.shape(2), K = st.shape(1) + 1;
    std::shared_ptr<std::vector<float>> wt;
    if (!taps_) wt = std::make_shared<std::vector<float>>(static_cast<size_t>(K) * C);
    ConvStepJob j{x.data<float>(), st.data<float>(), bias_ ? in[3].data<float>() : nullptr,
                  taps_ ? w.data<float>() : wt->data(),
                  static_cast<int>(x.shape(0)), static_cast<int>(x.shape(1)), C, K, silu_,
                  outs[0].data<float>(), outs[1].data<float>()};
    int isa = isa_;
    const float* stored = taps_ ? nullptr : w.data<float>();
    enc.dispatch([j, in, outs, isa, wt, stored]() {
      if (stored != nullptr) {
        for (int c = 0; c < j.C; c++) {
          for (int k = 0; k < j.K; k++) {
            (*wt)[static_cast<size_t>(k) * j.C + c] = stored[static_cast<size_t>(c) * j.K + k];
          }
        }
      }
      run_items(j.B * j.L, [&](int r0, int r1) {
        if (isa == 2) {
          conv_step_rows16(j, r0, r1);
        } else {
          conv_step_rows8(j, r0, r1);
        }
      });
      // The next state: the last K - 1 inputs of the state and x side by side.
      const int keep = j.K - 1;
      for (int b = 0; b < j.B; b++) {
        for (int i = 0; i < keep; i++) {
          std::memcpy(j.next + (static_cast<size_t>(b) * keep + i) * j.C, j.in(b, j.L + i),
                      sizeof(float) * j.C);
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's short convolution runs on the CPU only");
  }

  const char* name() const override { return "ArchgenConvStep"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeConvStep*>(&other);
    return o != nullptr && o->silu_ == silu_ && o->bias_ == bias_ && o->taps_ == taps_ &&
           o->isa_ == isa_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape(), in[1].shape()};
  }

 private:
  bool silu_, bias_, taps_;
  int isa_;
};

}  // namespace

std::optional<std::vector<mx::array>> archgen_native_gated_delta(
    const mx::array& q, const mx::array& k, const mx::array& v, const mx::array& g,
    const mx::array& beta, const mx::array& state, const std::optional<mx::array>& mask,
    mx::Stream s) {
  const int isa = recurrent_on.load() != 0 ? archgen_isa_level() : 0;
  if (isa == 0 || s.device != mx::Device::cpu || !archgen::kernel_float(q.dtype()) ||
      k.dtype() != q.dtype() || v.dtype() != q.dtype() || !archgen::kernel_float(beta.dtype()) ||
      g.dtype() != mx::float32 || state.dtype() != mx::float32 ||
      (mask && mask->dtype() != mx::bool_) || !shapes_fit(q, k, v, g, beta, state, mask) ||
      q.shape(1) == 0) {
    return std::nullopt;
  }
  std::vector<mx::array> in;
  for (const mx::array* a : {&q, &k, &v, &g, &beta, &state}) {
    in.push_back(mx::contiguous(*a, false, s));
  }
  if (mask) in.push_back(mx::contiguous(*mask, false, s));
  const mx::Shape y = {q.shape(0), q.shape(1), v.shape(2), v.shape(3)};
  return mx::array::make_arrays(
      {y, state.shape()}, {q.dtype(), mx::float32},
      std::make_shared<NativeGatedDelta>(s, g.ndim() == 4, mask.has_value(), isa,
                                         delta_plain_copy()),
      std::move(in));
}

std::vector<mx::array> archgen_gated_delta_ops(const mx::array& q, const mx::array& k,
                                               const mx::array& v, const mx::array& g,
                                               const mx::array& beta, const mx::array& state,
                                               const std::optional<mx::array>& mask,
                                               mx::Stream s) {
  if (!shapes_fit(q, k, v, g, beta, state, mask)) {
    throw std::invalid_argument(
        "want q, k [B, T, Hk, Dk], v [B, T, Hv, Dv] with Hv a multiple of Hk, g [B, T, Hv] or "
        "[B, T, Hv, Dk], beta [B, T, Hv], state [B, Hv, Dv, Dk], mask [B, T]; got q " +
        shape_of(q) + ", k " + shape_of(k) + ", v " + shape_of(v) + ", g " + shape_of(g) +
        ", beta " + shape_of(beta) + ", state " + shape_of(state) +
        (mask ? ", mask " + shape_of(*mask) : ""));
  }
  const int T = q.shape(1), Hk = q.shape(2), Hv = v.shape(2);
  mx::array qq = q, kk = k;
  if (Hv / Hk > 1) {
    qq = mx::repeat(q, Hv / Hk, -2, s);
    kk = mx::repeat(k, Hv / Hk, -2, s);
  }
  auto at = [&](const mx::array& a, int t) {
    mx::Shape start(a.ndim(), 0), stop = a.shape();
    start[1] = t;
    stop[1] = t + 1;
    return mx::squeeze(mx::slice(a, start, stop, s), 1, s);
  };
  mx::array st = state;
  std::vector<mx::array> ys;
  for (int t = 0; t < T; t++) {
    mx::array qt = at(qq, t), kt = at(kk, t), vt = at(v, t), gt = at(g, t), bt = at(beta, t);
    mx::array old = st;
    mx::array decay = g.ndim() == 3 ? mx::expand_dims(gt, {-2, -1}, s) : mx::expand_dims(gt, -2, s);
    st = mx::multiply(st, decay, s);
    mx::array ke = mx::expand_dims(kt, -2, s);
    mx::array m = mx::sum(mx::multiply(st, ke, s), -1, false, s);
    mx::array d = mx::multiply(mx::subtract(vt, m, s), mx::expand_dims(bt, -1, s), s);
    st = mx::add(st, mx::multiply(ke, mx::expand_dims(d, -1, s), s), s);
    mx::array y = mx::sum(mx::multiply(st, mx::expand_dims(qt, -2, s), s), -1, false, s);
    if (mask) {
      st = mx::where(mx::expand_dims(at(*mask, t), {1, 2, 3}, s), st, old, s);
    }
    ys.push_back(mx::astype(y, q.dtype(), s));
  }
  return {mx::stack(ys, 1, s), st};
}

std::vector<mx::array> archgen_gated_delta_gates(const mx::array& qkv, const mx::array& b,
                                                 const mx::array& a, const mx::array& rate,
                                                 const mx::array& dt_bias, const mx::array& state,
                                                 const std::optional<mx::array>& mask, int Hk,
                                                 int Dk, int Hv, int Dv, bool neg, mx::Stream s) {
  const bool dims = qkv.ndim() == 3 && Hk > 0 && Dk > 0 && Hv > 0 && Dv > 0 && Hv % Hk == 0;
  const int B = dims ? qkv.shape(0) : 0, T = dims ? qkv.shape(1) : 0;
  const mx::Shape bt = {B, T, Hv};
  if (!dims || qkv.shape(2) != 2 * Hk * Dk + Hv * Dv || b.shape() != bt || a.shape() != bt ||
      rate.shape() != mx::Shape{Hv} || dt_bias.shape() != mx::Shape{Hv} ||
      state.shape() != mx::Shape{B, Hv, Dv, Dk} || (mask && mask->shape() != mx::Shape{B, T})) {
    throw std::invalid_argument(
        "want qkv [B, T, 2 Hk Dk + Hv Dv] (Hk " + std::to_string(Hk) + ", Dk " +
        std::to_string(Dk) + ", Hv " + std::to_string(Hv) + ", Dv " + std::to_string(Dv) +
        ", Hv a multiple of Hk), b and a [B, T, Hv], rate and dt_bias [Hv], state [B, Hv, Dv, "
        "Dk], mask [B, T]; got qkv " +
        shape_of(qkv) + ", b " + shape_of(b) + ", a " + shape_of(a) + ", rate " + shape_of(rate) +
        ", dt_bias " + shape_of(dt_bias) + ", state " + shape_of(state) +
        (mask ? ", mask " + shape_of(*mask) : ""));
  }
  for (const mx::array* x : {&qkv, &b, &a, &rate, &dt_bias, &state}) {
    if (x->dtype() != mx::float32) {
      throw std::invalid_argument("the gated delta rule from its projections takes float32 arrays");
    }
  }
  if (mask && mask->dtype() != mx::bool_) {
    throw std::invalid_argument("the gated delta rule's mask is bool");
  }
  const int isa = recurrent_on.load() != 0 ? archgen_isa_level() : 0;
  if (isa != 0 && s.device == mx::Device::cpu && T > 0) {
    std::vector<mx::array> in = {qkv, b, a, rate, dt_bias, mx::contiguous(state, false, s)};
    if (mask) in.push_back(mx::contiguous(*mask, false, s));
    return mx::array::make_arrays(
        {{B, T, Hv, Dv}, state.shape()}, {mx::float32, mx::float32},
        std::make_shared<NativeGatedDeltaGates>(s, Hk, Dk, Hv, Dv, neg, mask.has_value(), isa,
                                                delta_plain_copy()),
        std::move(in));
  }
  // The same from libmlx's ops: q and k to unit length (q also times
  // Dk^-1/2), beta = sigmoid(b), g = exp(rate softplus(a + dt_bias)).
  const int kd = Hk * Dk;
  auto part = [&](int lo, int hi) { return mx::slice(qkv, {0, 0, lo}, {B, T, hi}, s); };
  const double inv = 1.0 / std::sqrt(static_cast<double>(Dk));
  const float eps = static_cast<float>(1e-6 * inv * inv);
  mx::array q = mx::multiply(mx::fast::rms_norm(mx::reshape(part(0, kd), {B, T, Hk, Dk}, s),
                                                std::nullopt, eps, s),
                             mx::array(static_cast<float>(inv * inv)), s);
  mx::array k = mx::multiply(mx::fast::rms_norm(mx::reshape(part(kd, 2 * kd), {B, T, Hk, Dk}, s),
                                                std::nullopt, eps, s),
                             mx::array(static_cast<float>(inv)), s);
  mx::array v = mx::reshape(part(2 * kd, 2 * kd + Hv * Dv), {B, T, Hv, Dv}, s);
  mx::array beta = mx::sigmoid(b, s);
  if (neg) beta = mx::multiply(beta, mx::array(2.0f), s);
  mx::array sp = mx::logaddexp(mx::add(a, dt_bias, s), mx::array(0.0f), s);
  mx::array g = mx::exp(mx::multiply(rate, sp, s), s);
  return archgen_gated_delta_ops(q, k, v, g, beta, state, mask, s);
}

std::vector<mx::array> archgen_conv_step(const mx::array& x, const mx::array& state,
                                         const mx::array& w, const std::optional<mx::array>& bias,
                                         bool silu, mx::Stream s) {
  // w is the taps [K, C] (2 dimensions) or MLX's depthwise kernel [C, K, 1].
  const bool taps = w.ndim() == 2;
  const bool dims = x.ndim() == 3 && state.ndim() == 3 && (taps || w.ndim() == 3);
  const int B = dims ? x.shape(0) : 0, L = dims ? x.shape(1) : 0, C = dims ? x.shape(2) : 0;
  const int K = !dims ? 0 : taps ? w.shape(0) : w.shape(1);
  if (!dims || K < 2 || w.shape(taps ? 1 : 0) != C || (!taps && w.shape(2) != 1) ||
      state.shape() != mx::Shape{B, K - 1, C} || (bias && bias->shape() != mx::Shape{C})) {
    throw std::invalid_argument("want x [B, L, C], state [B, K - 1, C], w [K, C] or [C, K, 1] (K at "
                                "least 2), bias [C]; got x " + shape_of(x) + ", state " +
                                shape_of(state) + ", w " + shape_of(w) +
                                (bias ? ", bias " + shape_of(*bias) : ""));
  }
  for (const mx::array* a : {&x, &state, &w}) {
    if (a->dtype() != mx::float32) {
      throw std::invalid_argument("the short convolution's step takes float32 arrays");
    }
  }
  if (bias && bias->dtype() != mx::float32) {
    throw std::invalid_argument("the short convolution's step takes float32 arrays");
  }
  const int isa = recurrent_on.load() != 0 ? archgen_isa_level() : 0;
  if (isa != 0 && s.device == mx::Device::cpu && L > 0) {
    std::vector<mx::array> in = {mx::contiguous(x, false, s), mx::contiguous(state, false, s),
                                 mx::contiguous(w, false, s)};
    if (bias) in.push_back(mx::contiguous(*bias, false, s));
    return mx::array::make_arrays(
        {x.shape(), state.shape()}, {mx::float32, mx::float32},
        std::make_shared<NativeConvStep>(s, silu, bias.has_value(), taps, isa), std::move(in));
  }
  // libmlx's ops: the state and x side by side, conv1d (taps moved back
  // to MLX's depthwise layout), the bias, silu.
  mx::array all = mx::concatenate({state, x}, 1, s);
  mx::array kernel = taps ? mx::reshape(mx::transpose(w, {1, 0}, s), {C, K, 1}, s) : w;
  mx::array y = mx::conv1d(all, kernel, 1, 0, 1, C, s);
  if (bias) y = mx::add(y, *bias, s);
  if (silu) y = mx::multiply(y, mx::sigmoid(y, s), s);
  mx::array next = mx::contiguous(mx::slice(all, {0, L, 0}, {B, L + K - 1, C}, s), false, s);
  return {y, next};
}

std::optional<mx::array> archgen_native_depthwise_conv1d(const mx::array& x, const mx::array& w,
                                                         int stride, int padding, int dilation,
                                                         int groups, mx::Stream s) {
  const int isa = recurrent_on.load() != 0 ? archgen_isa_level() : 0;
  if (isa == 0 || s.device != mx::Device::cpu || stride != 1 || padding != 0 || dilation != 1 ||
      !archgen::kernel_float(x.dtype()) || w.dtype() != x.dtype() || x.ndim() != 3 ||
      w.ndim() != 3) {
    return std::nullopt;
  }
  const int C = x.shape(2), K = w.shape(1);
  if (groups != C || w.shape(0) != C || w.shape(2) != 1 || K < 1 || x.shape(1) < K ||
      x.shape(0) < 1 || C < 1) {
    return std::nullopt;
  }
  // The kernel widens the weight to float32 taps [K, C] as it runs, so
  // that each tap's row is contiguous over the channels.
  return mx::array({x.shape(0), x.shape(1) - K + 1, C}, x.dtype(),
                   std::make_shared<NativeDepthwiseConv>(s, isa),
                   {mx::contiguous(x, false, s), mx::contiguous(w, false, s)});
}

extern "C" int mlxg_set_native_recurrent(int on) { return recurrent_on.exchange(on != 0 ? 1 : 0); }

std::vector<mx::array> archgen_ssm_ops(const mx::array& x, const mx::array& A_log,
                                       const mx::array& B, const mx::array& C, const mx::array& D,
                                       const mx::array& dt, const mx::array& dt_bias,
                                       const std::optional<mx::array>& state, float lo, float hi,
                                       mx::Stream s) {
  if (!ssm_fits(x, A_log, B, C, D, dt, dt_bias, state)) {
    ssm_refuse(x, A_log, B, C, D, dt, dt_bias, state);
  }
  const int b = x.shape(0), l = x.shape(1), h = x.shape(2), dh = x.shape(3);
  const int g = B.shape(2), d = B.shape(3), repeats = h / g;
  constexpr int step = 256;
  auto [dtf, A] = ssm_dt_a(dt, dt_bias, A_log, lo, hi, s);
  mx::array dtA = mx::multiply(dtf, mx::reshape(A, {1, 1, -1}, s), s);
  mx::array dtx = mx::multiply(mx::reshape(dtf, {b, l, h, 1}, s), x, s);
  auto chunk = [&](const mx::array& a, int i0, int i1) {
    mx::Shape start(a.ndim(), 0), stop = a.shape();
    start[1] = i0;
    stop[1] = i1;
    return mx::slice(a, start, stop, s);
  };
  std::optional<mx::array> st = state;
  std::vector<mx::array> ys;
  for (int i = 0; i < l; i += step) {
    const int e = std::min(i + step, l);
    mx::array cx = chunk(dtx, i, e), cA = chunk(dtA, i, e), cB = chunk(B, i, e), cC = chunk(C, i, e);
    const int sl = e - i;
    mx::array Bt = mx::transpose(cB, {0, 2, 3, 1}, s);
    mx::array CB = mx::matmul(mx::swapaxes(cC, 1, 2, s), Bt, s);
    CB = mx::repeat(CB, repeats, 1, s);
    // segsum over the chunk's steps, then its exponential.
    mx::array seg = mx::swapaxes(cA, 1, 2, s);
    seg = mx::repeat(mx::expand_dims(seg, -1, s), sl, -1, s);
    seg = mx::tril(seg, -1, s);
    seg = mx::cumsum(seg, -2, false, true, s);
    mx::array decay = mx::exp(seg, s);
    mx::array att = mx::tril(mx::multiply(CB, decay, s), 0, s);
    mx::array y = mx::swapaxes(mx::matmul(att, mx::swapaxes(cx, 1, 2, s), s), 1, 2, s);
    mx::Shape ds = decay.shape();
    mx::array last = mx::slice(decay, {0, 0, ds[2] - 1, 0}, ds, s);
    last = mx::transpose(last, {0, 3, 1, 2}, s);
    mx::array Bh = mx::swapaxes(mx::repeat(Bt, h / g, 1, s), 2, 3, s);
    mx::array dxd = mx::multiply(cx, last, s);
    dxd = mx::swapaxes(mx::swapaxes(dxd, 1, 2, s), 2, 3, s);
    mx::array next = mx::matmul(dxd, Bh, s);
    if (st) {
      mx::array ecs = mx::exp(mx::cumsum(cA, -2, false, true, s), s);
      mx::Shape es = ecs.shape();
      mx::array tail = mx::slice(ecs, {0, es[1] - 1, 0}, es, s);  // [b, 1, h]
      tail = mx::reshape(tail, {b, h, 1, 1}, s);
      next = mx::add(next, mx::multiply(tail, *st, s), s);
      mx::array Cr = mx::reshape(cC, {b, sl, g, 1, d, 1}, s);
      mx::array yp = mx::matmul(mx::reshape(*st, {b, 1, g, repeats, dh, d}, s), Cr, s);
      yp = mx::flatten(mx::squeeze(yp, -1, s), 2, 3, s);
      y = mx::add(y, mx::multiply(mx::expand_dims(ecs, -1, s), yp, s), s);
    }
    ys.push_back(mx::astype(y, x.dtype(), s));
    st = next;
  }
  if (!st) {  // no steps, no state given
    st = mx::zeros({b, h, dh, d}, mx::float32, s);
  }
  mx::array ysd = ys.empty() ? mx::zeros(x.shape(), x.dtype(), s) : mx::concatenate(ys, 1, s);
  mx::array y = mx::add(ysd, mx::multiply(x, mx::reshape(D, {1, 1, h, 1}, s), s), s);
  return {y, *st};
}

std::optional<std::vector<mx::array>> archgen_native_ssm(
    const mx::array& x, const mx::array& A_log, const mx::array& B, const mx::array& C,
    const mx::array& D, const mx::array& dt, const mx::array& dt_bias,
    const std::optional<mx::array>& state, float lo, float hi, mx::Stream s) {
  const int isa = recurrent_on.load() != 0 ? archgen_isa_level() : 0;
  if (isa == 0 || s.device != mx::Device::cpu || !archgen::kernel_float(x.dtype()) ||
      !archgen::kernel_float(B.dtype()) || C.dtype() != B.dtype() ||
      !ssm_fits(x, A_log, B, C, D, dt, dt_bias, state) || x.shape(1) == 0 ||
      (state && state->dtype() != mx::float32)) {
    return std::nullopt;
  }
  auto [dtf, A] = ssm_dt_a(dt, dt_bias, A_log, lo, hi, s);
  if (dtf.dtype() != mx::float32 || A.dtype() != mx::float32) return std::nullopt;
  const int b = x.shape(0), h = x.shape(2), p = x.shape(3), n = B.shape(3);
  mx::array s0 = state ? mx::contiguous(*state, false, s) : mx::zeros({b, h, p, n}, mx::float32, s);
  auto outs = mx::array::make_arrays(
      {x.shape(), {b, h, p, n}}, {x.dtype(), mx::float32}, std::make_shared<NativeScan>(s, isa),
      {mx::contiguous(x, false, s), mx::contiguous(dtf, false, s), mx::contiguous(A, false, s),
       mx::contiguous(B, false, s), mx::contiguous(C, false, s), s0});
  mx::array y = mx::add(outs[0], mx::multiply(x, mx::reshape(D, {1, 1, h, 1}, s), s), s);
  return std::vector<mx::array>{y, outs[1]};
}

// ---- Mamba's selective scan ----

// SelJob is one selective scan: x and dt [b, T, d], A [d, n], B and C
// [b, T, n], D [d], the state s0 [b, d, n] in, y [b, T, d] and s1 out, all
// float32.
struct SelJob {
  const float *x, *dt, *A, *B, *C, *D, *s0;
  int nb, T, Dn, N;
  float *y, *s1;
};

// NativeSelective runs each channel's state through every step, parallel
// over (batch, channel): S = S exp(dt A) + dt x B; y = S · C + D x.
class NativeSelective : public mx::Primitive {
 public:
  explicit NativeSelective(mx::Stream s) : Primitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = outputs_ready(stream(), in, outs);
    SelJob j{in[0].data<float>(),
             in[1].data<float>(),
             in[2].data<float>(),
             in[3].data<float>(),
             in[4].data<float>(),
             in[5].data<float>(),
             in[6].data<float>(),
             static_cast<int>(in[0].shape(0)),
             static_cast<int>(in[0].shape(1)),
             static_cast<int>(in[0].shape(2)),
             static_cast<int>(in[2].shape(1)),
             outs[0].data<float>(),
             outs[1].data<float>()};
    enc.dispatch([j, in, outs]() {
      run_items(j.nb * j.Dn, [&](int i0, int i1) {
        std::vector<float> s(j.N), decay(j.N);
        for (int i = i0; i < i1; i++) {
          const int b = i / j.Dn, d = i % j.Dn;
          const float* a = j.A + static_cast<size_t>(d) * j.N;
          const size_t si = (static_cast<size_t>(b) * j.Dn + d) * j.N;
          std::copy(j.s0 + si, j.s0 + si + j.N, s.begin());
          for (int t = 0; t < j.T; t++) {
            const size_t row = static_cast<size_t>(b) * j.T + t;
            const size_t xi = row * j.Dn + d;
            const float dt = j.dt[xi], xv = j.x[xi], u = dt * xv;
            const float* Bt = j.B + row * j.N;
            const float* Ct = j.C + row * j.N;
            for (int n = 0; n < j.N; n++) decay[n] = std::exp(dt * a[n]);
            float acc = 0;
            for (int n = 0; n < j.N; n++) {
              s[n] = s[n] * decay[n] + u * Bt[n];
              acc += s[n] * Ct[n];
            }
            j.y[xi] = acc + j.D[d] * xv;
          }
          std::copy(s.begin(), s.end(), j.s1 + si);
        }
      });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's selective scan runs on the CPU only");
  }

  const char* name() const override { return "ArchgenSelectiveScan"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return dynamic_cast<const NativeSelective*>(&other) != nullptr;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape(), in[6].shape()};
  }
};

std::vector<mx::array> archgen_selective_scan(const mx::array& x, const mx::array& dt,
                                              const mx::array& A, const mx::array& B,
                                              const mx::array& C, const mx::array& D,
                                              const std::optional<mx::array>& state,
                                              mx::Stream s) {
  const bool shapes = x.ndim() == 3 && dt.shape() == x.shape() && A.ndim() == 2 &&
                      A.shape(0) == x.shape(2) && B.ndim() == 3 && C.shape() == B.shape() &&
                      B.shape(0) == x.shape(0) && B.shape(1) == x.shape(1) &&
                      B.shape(2) == A.shape(1) && D.shape() == mx::Shape{x.shape(2)} &&
                      (!state || state->shape() == mx::Shape{x.shape(0), x.shape(2), A.shape(1)});
  if (!shapes) {
    throw std::invalid_argument("want x and dt [b, T, d], A [d, n], B and C [b, T, n], D [d], state [b, d, n]; got x " +
                                shape_of(x) + ", dt " + shape_of(dt) + ", A " + shape_of(A) + ", B " +
                                shape_of(B) + ", C " + shape_of(C) + ", D " + shape_of(D) +
                                (state ? ", state " + shape_of(*state) : ""));
  }
  for (const mx::array* a : {&x, &dt, &A, &B, &C, &D}) {
    if (a->dtype() != mx::float32) {
      throw std::invalid_argument("the selective scan takes float32 arrays");
    }
  }
  if (s.device != mx::Device::cpu) {
    throw std::invalid_argument("the selective scan runs on the CPU only");
  }
  const int b = x.shape(0), d = x.shape(2), n = A.shape(1);
  mx::array s0 = state ? mx::contiguous(mx::astype(*state, mx::float32, s), false, s)
                       : mx::zeros({b, d, n}, mx::float32, s);
  auto c = [&](const mx::array& a) { return mx::contiguous(a, false, s); };
  return mx::array::make_arrays({x.shape(), {b, d, n}}, {mx::float32, mx::float32},
                                std::make_shared<NativeSelective>(s),
                                {c(x), c(dt), c(A), c(B), c(C), c(D), s0});
}

// ---- the diagonal linear recurrence (the RG-LRU's) ----

// LinRecJob is one diagonal recurrence: a and u [b, T, d], the state h0
// [b, d] in, y [b, T, d] and h1 out, all float32.
struct LinRecJob {
  const float *a, *u, *h0;
  int nb, T, Dn;
  float *y, *h1;
};

// NativeLinearRecurrence steps each channel's state h = a h + u through
// every position, parallel over (batch, block of channels); the product
// and the sum are rounded apart, as the composed ops round them.
class NativeLinearRecurrence : public mx::Primitive {
 public:
  explicit NativeLinearRecurrence(mx::Stream s) : Primitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = outputs_ready(stream(), in, outs);
    LinRecJob j{in[0].data<float>(),
                in[1].data<float>(),
                in[2].data<float>(),
                static_cast<int>(in[0].shape(0)),
                static_cast<int>(in[0].shape(1)),
                static_cast<int>(in[0].shape(2)),
                outs[0].data<float>(),
                outs[1].data<float>()};
    enc.dispatch([j, in, outs]() {
      constexpr int L = 64;  // channels a work item steps together
      const int blocks = (j.Dn + L - 1) / L;
      run_items(j.nb * blocks, [&](int i0, int i1) {
        float h[L];
        for (int i = i0; i < i1; i++) {
          const int b = i / blocks, c0 = (i % blocks) * L, n = std::min(L, j.Dn - c0);
          const size_t si = static_cast<size_t>(b) * j.Dn + c0;
          std::copy(j.h0 + si, j.h0 + si + n, h);
          for (int t = 0; t < j.T; t++) {
            const size_t xi = (static_cast<size_t>(b) * j.T + t) * j.Dn + c0;
            const float* a = j.a + xi;
            const float* u = j.u + xi;
            float* y = j.y + xi;
            for (int c = 0; c < n; c++) {
              const float p = a[c] * h[c];
              h[c] = p + u[c];
              y[c] = h[c];
            }
          }
          std::copy(h, h + n, j.h1 + si);
        }
      });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's linear recurrence runs on the CPU only");
  }

  const char* name() const override { return "ArchgenLinearRecurrence"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return dynamic_cast<const NativeLinearRecurrence*>(&other) != nullptr;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape(), in[2].shape()};
  }
};

std::vector<mx::array> archgen_linear_recurrence(const mx::array& a, const mx::array& u,
                                                 const std::optional<mx::array>& state,
                                                 mx::Stream s) {
  const bool shapes = a.ndim() == 3 && u.shape() == a.shape() &&
                      (!state || state->shape() == mx::Shape{a.shape(0), a.shape(2)});
  if (!shapes) {
    throw std::invalid_argument("want a and u [b, T, d], state [b, d]; got a " + shape_of(a) +
                                ", u " + shape_of(u) + (state ? ", state " + shape_of(*state) : ""));
  }
  if (a.dtype() != mx::float32 || u.dtype() != mx::float32 || (state && state->dtype() != mx::float32)) {
    throw std::invalid_argument("the linear recurrence takes float32 arrays");
  }
  if (s.device != mx::Device::cpu) {
    throw std::invalid_argument("the linear recurrence runs on the CPU only");
  }
  const int b = a.shape(0), d = a.shape(2);
  mx::array h0 = state ? mx::contiguous(*state, false, s) : mx::zeros({b, d}, mx::float32, s);
  auto c = [&](const mx::array& x) { return mx::contiguous(x, false, s); };
  return mx::array::make_arrays({a.shape(), {b, d}}, {mx::float32, mx::float32},
                                std::make_shared<NativeLinearRecurrence>(s), {c(a), c(u), h0});
}

// ---- RWKV-7's WKV-7 recurrence ----

// WkvJob is one WKV-7 recurrence: r, w, k, v, a, b [nb, T, H, D], the
// state s0 [nb, H, D, D] in, y [nb, T, H, D] and s1 out, all float32.
struct WkvJob {
  const float *r, *w, *k, *v, *a, *b, *s0;
  int nb, T, H, D;
  float *y, *s1;
};

// NativeWkv7 runs each row of each head's state through every step,
// parallel over (batch, head, row i): with sa = S_i · a (the row before
// the step), S_i = S_i ⊙ w + v_i k + sa b; y_i = S_i · r.
class NativeWkv7 : public mx::Primitive {
 public:
  explicit NativeWkv7(mx::Stream s) : Primitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = outputs_ready(stream(), in, outs);
    WkvJob j{in[0].data<float>(),
             in[1].data<float>(),
             in[2].data<float>(),
             in[3].data<float>(),
             in[4].data<float>(),
             in[5].data<float>(),
             in[6].data<float>(),
             static_cast<int>(in[0].shape(0)),
             static_cast<int>(in[0].shape(1)),
             static_cast<int>(in[0].shape(2)),
             static_cast<int>(in[0].shape(3)),
             outs[0].data<float>(),
             outs[1].data<float>()};
    enc.dispatch([j, in, outs]() {
      run_items(j.nb * j.H * j.D, [&](int i0, int i1) {
        std::vector<float> s(j.D);
        for (int item = i0; item < i1; item++) {
          const int row = item % j.D, bh = item / j.D;
          const int b = bh / j.H, h = bh % j.H;
          const size_t si = static_cast<size_t>(item) * j.D;
          std::copy(j.s0 + si, j.s0 + si + j.D, s.begin());
          for (int t = 0; t < j.T; t++) {
            const size_t off = ((static_cast<size_t>(b) * j.T + t) * j.H + h) * j.D;
            const float *rt = j.r + off, *wt = j.w + off, *kt = j.k + off, *at = j.a + off,
                        *bt = j.b + off;
            const float vi = j.v[off + row];
            float sa = 0;
            for (int c = 0; c < j.D; c++) sa += s[c] * at[c];
            float acc = 0;
            for (int c = 0; c < j.D; c++) {
              s[c] = s[c] * wt[c] + vi * kt[c] + sa * bt[c];
              acc += s[c] * rt[c];
            }
            j.y[off + row] = acc;
          }
          std::copy(s.begin(), s.end(), j.s1 + si);
        }
      });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's WKV-7 recurrence runs on the CPU only");
  }

  const char* name() const override { return "ArchgenWKV7"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return dynamic_cast<const NativeWkv7*>(&other) != nullptr;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape(), in[6].shape()};
  }
};

std::vector<mx::array> archgen_wkv7(const mx::array& r, const mx::array& w, const mx::array& k,
                                    const mx::array& v, const mx::array& a, const mx::array& b,
                                    const std::optional<mx::array>& state, mx::Stream s) {
  bool shapes = r.ndim() == 4;
  for (const mx::array* x : {&w, &k, &v, &a, &b}) {
    shapes = shapes && x->shape() == r.shape();
  }
  shapes = shapes &&
           (!state || state->shape() == mx::Shape{r.shape(0), r.shape(2), r.shape(3), r.shape(3)});
  if (!shapes) {
    throw std::invalid_argument("want r, w, k, v, a and b [b, T, H, D], state [b, H, D, D]; got r " +
                                shape_of(r) + ", w " + shape_of(w) + ", k " + shape_of(k) + ", v " +
                                shape_of(v) + ", a " + shape_of(a) + ", b " + shape_of(b) +
                                (state ? ", state " + shape_of(*state) : ""));
  }
  for (const mx::array* x : {&r, &w, &k, &v, &a, &b}) {
    if (x->dtype() != mx::float32) {
      throw std::invalid_argument("the WKV-7 recurrence takes float32 arrays");
    }
  }
  if (state && state->dtype() != mx::float32) {
    throw std::invalid_argument("the WKV-7 recurrence takes float32 arrays");
  }
  if (s.device != mx::Device::cpu) {
    throw std::invalid_argument("the WKV-7 recurrence runs on the CPU only");
  }
  const int nb = r.shape(0), h = r.shape(2), d = r.shape(3);
  mx::array s0 = state ? mx::contiguous(*state, false, s) : mx::zeros({nb, h, d, d}, mx::float32, s);
  auto c = [&](const mx::array& x) { return mx::contiguous(x, false, s); };
  return mx::array::make_arrays({r.shape(), {nb, h, d, d}}, {mx::float32, mx::float32},
                                std::make_shared<NativeWkv7>(s),
                                {c(r), c(w), c(k), c(v), c(a), c(b), s0});
}

// ---- lightning attention's constant-decay recurrence ----

namespace {

typedef float f32x4 __attribute__((vector_size(16)));

// LightningJob is one constant-decay recurrence: q and k [B, T, H, Dk], v
// [B, T, H, Dv], the decay per head [H] and the state s0 [B, H, Dk, Dv]
// in (nullptr: zeros), y [B, T, H, Dv] and s1 out, all float32; scale
// multiplies q.
struct LightningJob {
  const float *q, *k, *v, *decay, *s0;
  float scale;
  int B, T, H, Dk, Dv;
  float *y, *s1;
};

// LightningScratch is a worker's: a block's state (Dk rows of w columns,
// from a 64-byte boundary) and a step's scaled query (Dk values).
struct LightningScratch {
  float *mem, *st, *qs;
  LightningScratch(int Dk, int w) {
    const size_t sn = static_cast<size_t>(Dk) * w, qn = (static_cast<size_t>(Dk) + 15) / 16 * 16;
    const size_t bytes = std::max<size_t>(64, (sizeof(float) * (sn + qn) + 63) / 64 * 64);
    mem = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (mem == nullptr) throw std::bad_alloc();
    st = mem;
    qs = mem + sn;
  }
  ~LightningScratch() { std::free(mem); }
  LightningScratch(const LightningScratch&) = delete;
  LightningScratch& operator=(const LightningScratch&) = delete;
};

// lightning_block runs columns [c0, c0 + n) of head (b, h)'s state through
// every step, NV vectors of L columns a row; the columns of the block past
// n hold zeros and are not written. Each step and state row i: S_i = a S_i
// + k_i v (each product rounded before the sum, as the composed ops round
// them), then y += (scale q_i) S_i, the rows added in order.
template <typename V, int L, int NV>
__attribute__((always_inline)) inline void lightning_block(const LightningJob& j, int b, int h,
                                                           int c0, int n, float* st, float* qs) {
  constexpr int W = L * NV;
  const int Dk = j.Dk, Dv = j.Dv;
  const float a = j.decay[h];
  const size_t head = (static_cast<size_t>(b) * j.H + h) * Dk * Dv + c0;
  for (int i = 0; i < Dk; i++) {
    float* row = st + static_cast<size_t>(i) * W;
    std::fill(row, row + W, 0.0f);
    if (j.s0 != nullptr) {
      std::memcpy(row, j.s0 + head + static_cast<size_t>(i) * Dv, sizeof(float) * n);
    }
  }
  // A partial block's v and y pass through these, v zero past n.
  alignas(64) float vb[W] = {};
  alignas(64) float yb[W];
  for (int t = 0; t < j.T; t++) {
    const size_t at = (static_cast<size_t>(b) * j.T + t) * j.H + h;
    const float* kt = j.k + at * Dk;
    const float* qt = j.q + at * Dk;
    for (int i = 0; i < Dk; i++) qs[i] = j.scale * qt[i];
    const float* vt = j.v + at * Dv + c0;
    if (n < W) {
      std::memcpy(vb, vt, sizeof(float) * n);
      vt = vb;
    }
    V vv[NV], yv[NV];
    for (int c = 0; c < NV; c++) {
      std::memcpy(&vv[c], vt + c * L, sizeof(V));
      yv[c] = V{};
    }
    for (int i = 0; i < Dk; i++) {
      const float ki = kt[i], qi = qs[i];
      float* row = st + static_cast<size_t>(i) * W;
#pragma GCC unroll 4
      for (int c = 0; c < NV; c++) {
        V s;
        std::memcpy(&s, row + c * L, sizeof(V));
        V p = s * a;
        V u = vv[c] * ki;
        s = p + u;
        std::memcpy(row + c * L, &s, sizeof(V));
        V r = s * qi;
        yv[c] = yv[c] + r;
      }
    }
    float* yt = j.y + at * Dv + c0;
    if (n < W) {
      std::memcpy(yb, yv, sizeof yb);
      std::memcpy(yt, yb, sizeof(float) * n);
    } else {
      std::memcpy(yt, yv, sizeof yv);
    }
  }
  for (int i = 0; i < Dk; i++) {
    std::memcpy(j.s1 + head + static_cast<size_t>(i) * Dv, st + static_cast<size_t>(i) * W,
                sizeof(float) * n);
  }
}

// lightning_items runs work items [i0, i1): item i is head i / blocks's
// block i % blocks of NV vectors of L columns.
template <typename V, int L, int NV>
__attribute__((always_inline)) inline void lightning_items(const LightningJob& j, int i0, int i1) {
  constexpr int W = L * NV;
  const int blocks = (j.Dv + W - 1) / W;
  LightningScratch s(j.Dk, W);
  for (int i = i0; i < i1; i++) {
    const int bh = i / blocks, c0 = (i % blocks) * W;
    lightning_block<V, L, NV>(j, bh / j.H, bh % j.H, c0, std::min(W, j.Dv - c0), s.st, s.qs);
  }
}

// lightning_vectors is how many vectors of L columns a work item steps
// together: four, or fewer where Dv is narrower.
int lightning_vectors(int Dv, int L) { return std::max(1, std::min(4, (Dv + L - 1) / L)); }

template <typename V, int L>
__attribute__((always_inline)) inline void lightning_width(const LightningJob& j, int i0, int i1) {
  switch (lightning_vectors(j.Dv, L)) {
    case 1:
      lightning_items<V, L, 1>(j, i0, i1);
      break;
    case 2:
      lightning_items<V, L, 2>(j, i0, i1);
      break;
    case 3:
      lightning_items<V, L, 3>(j, i0, i1);
      break;
    default:
      lightning_items<V, L, 4>(j, i0, i1);
  }
}

// lightning_items4 runs work items on the CPU's baseline vectors (four
// floats), lightning_items8 and lightning_items16 on AVX2's and AVX-512's.
// All three do the same float32 operations in each column, so their
// results are the same bits.
void lightning_items4(const LightningJob& j, int i0, int i1) {
  lightning_width<f32x4, 4>(j, i0, i1);
}

__attribute__((target("avx2,fma,f16c"))) void lightning_items8(const LightningJob& j, int i0,
                                                                 int i1) {
  lightning_width<f32x8, 8>(j, i0, i1);
}

__attribute__((target("avx512f,avx2,fma,f16c"))) void lightning_items16(const LightningJob& j,
                                                                         int i0, int i1) {
  lightning_width<f32x16, 16>(j, i0, i1);
}

void run_lightning(const LightningJob& j, int isa) {
  const int L = isa == 2 ? 16 : isa == 1 ? 8 : 4;
  const int W = L * lightning_vectors(j.Dv, L);
  run_items(j.B * j.H * ((j.Dv + W - 1) / W), [&](int i0, int i1) {
    if (isa == 2) {
      lightning_items16(j, i0, i1);
    } else if (isa == 1) {
      lightning_items8(j, i0, i1);
    } else {
      lightning_items4(j, i0, i1);
    }
  });
}

// NativeLightning is the recurrence over every step: q, k, v, decay[,
// state] in, y and the last state out, float32.
class NativeLightning : public mx::Primitive {
 public:
  NativeLightning(mx::Stream s, float scale, bool has_state, int isa)
      : Primitive(s), scale_(scale), has_state_(has_state), isa_(isa) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = outputs_ready(stream(), in, outs);
    const mx::array &q = in[0], &v = in[2];
    LightningJob j{q.data<float>(),
                   in[1].data<float>(),
                   v.data<float>(),
                   in[3].data<float>(),
                   has_state_ ? in[4].data<float>() : nullptr,
                   scale_,
                   static_cast<int>(q.shape(0)),
                   static_cast<int>(q.shape(1)),
                   static_cast<int>(q.shape(2)),
                   static_cast<int>(q.shape(3)),
                   static_cast<int>(v.shape(3)),
                   outs[0].data<float>(),
                   outs[1].data<float>()};
    int isa = isa_;
    enc.dispatch([j, in, outs, isa]() { run_lightning(j, isa); });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's lightning recurrence runs on the CPU only");
  }

  const char* name() const override { return "ArchgenLightning"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeLightning*>(&other);
    return o != nullptr && o->scale_ == scale_ && o->has_state_ == has_state_ && o->isa_ == isa_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    const mx::array &q = in[0], &v = in[2];
    return {{q.shape(0), q.shape(1), v.shape(2), v.shape(3)},
            {q.shape(0), q.shape(2), q.shape(3), v.shape(3)}};
  }

 private:
  float scale_;
  bool has_state_;
  int isa_;
};

// lightning_check refuses the shapes the recurrence does not take (what
// both forms check), naming every shape.
void lightning_check(const mx::array& q, const mx::array& k, const mx::array& v,
                     const mx::array& decay, const std::optional<mx::array>& state) {
  bool fits = q.ndim() == 4 && k.shape() == q.shape() && v.ndim() == 4;
  if (fits) {
    const int B = q.shape(0), T = q.shape(1), H = q.shape(2), Dk = q.shape(3), Dv = v.shape(3);
    fits = v.shape(0) == B && v.shape(1) == T && v.shape(2) == H && decay.shape() == mx::Shape{H} &&
           (!state || state->shape() == mx::Shape{B, H, Dk, Dv});
  }
  if (!fits) {
    throw std::invalid_argument(
        "want q and k [B, T, H, Dk], v [B, T, H, Dv], decay [H], state [B, H, Dk, Dv]; got q " +
        shape_of(q) + ", k " + shape_of(k) + ", v " + shape_of(v) + ", decay " +
        shape_of(decay) + (state ? ", state " + shape_of(*state) : ""));
  }
}

// lightning_dtypes names the inputs' dtypes, for the refusals.
std::string lightning_dtypes(const mx::array& q, const mx::array& k, const mx::array& v,
                             const mx::array& decay, const std::optional<mx::array>& state) {
  std::ostringstream out;
  out << "q " << q.dtype() << ", k " << k.dtype() << ", v " << v.dtype() << ", decay "
      << decay.dtype();
  if (state) out << ", state " << state->dtype();
  return out.str();
}

}  // namespace

std::vector<mx::array> archgen_lightning(const mx::array& q, const mx::array& k,
                                         const mx::array& v, const mx::array& decay,
                                         const std::optional<mx::array>& state, double scale,
                                         mx::Stream s) {
  lightning_check(q, k, v, decay, state);
  for (const mx::array* a : {&q, &k, &v, &decay}) {
    if (a->dtype() != mx::float32) {
      throw std::invalid_argument("the lightning recurrence's kernel takes float32 arrays; got " +
                                  lightning_dtypes(q, k, v, decay, state));
    }
  }
  if (state && state->dtype() != mx::float32) {
    throw std::invalid_argument("the lightning recurrence's kernel takes float32 arrays; got " +
                                lightning_dtypes(q, k, v, decay, state));
  }
  if (s.device != mx::Device::cpu) {
    throw std::invalid_argument("the lightning recurrence's kernel runs on the CPU only");
  }
  const int isa = recurrent_on.load() != 0 ? archgen_isa_level() : 0;
  const int B = q.shape(0), H = q.shape(2), Dk = q.shape(3), Dv = v.shape(3);
  auto c = [&](const mx::array& x) { return mx::contiguous(x, false, s); };
  std::vector<mx::array> in = {c(q), c(k), c(v), c(decay)};
  if (state) in.push_back(c(*state));
  return mx::array::make_arrays(
      {{B, q.shape(1), H, Dv}, {B, H, Dk, Dv}}, {mx::float32, mx::float32},
      std::make_shared<NativeLightning>(s, static_cast<float>(scale), state.has_value(), isa),
      std::move(in));
}

std::vector<mx::array> archgen_lightning_ops(const mx::array& q, const mx::array& k,
                                             const mx::array& v, const mx::array& decay,
                                             const std::optional<mx::array>& state, double scale,
                                             mx::Stream s) {
  lightning_check(q, k, v, decay, state);
  if (!mx::issubdtype(q.dtype(), mx::floating) || k.dtype() != q.dtype() ||
      v.dtype() != q.dtype() || !mx::issubdtype(decay.dtype(), mx::floating) ||
      (state && !mx::issubdtype(state->dtype(), mx::floating))) {
    throw std::invalid_argument(
        "the lightning recurrence's ops take q, k and v of one float dtype, a float decay and "
        "state; got " +
        lightning_dtypes(q, k, v, decay, state));
  }
  const int B = q.shape(0), T = q.shape(1), H = q.shape(2), Dk = q.shape(3), Dv = v.shape(3);
  if (T == 0) {
    return {mx::zeros({B, 0, H, Dv}, q.dtype(), s),
            state ? *state : mx::zeros({B, H, Dk, Dv}, q.dtype(), s)};
  }
  // [B, H, T, D], the decay [H, 1, 1] in q's dtype, q times scale (a
  // scalar of q's dtype); then a step at a time, k_tᵀ v_t and q_t S as
  // matrix products of one row.
  const std::vector<int> heads_first = {0, 2, 1, 3};
  mx::array qh = mx::transpose(q, heads_first, s), kh = mx::transpose(k, heads_first, s),
            vh = mx::transpose(v, heads_first, s);
  mx::array a = mx::astype(mx::reshape(decay, {H, 1, 1}, s), q.dtype(), s);
  qh = mx::multiply(qh, mx::array(static_cast<float>(scale), q.dtype()), s);
  auto at = [&](const mx::array& x, int t) {
    return mx::slice(x, {0, 0, t, 0}, {B, H, t + 1, x.shape(3)}, s);
  };
  std::optional<mx::array> st = state;
  std::vector<mx::array> ys;
  for (int t = 0; t < T; t++) {
    mx::array kv = mx::matmul(mx::transpose(at(kh, t), {0, 1, 3, 2}, s), at(vh, t), s);
    st = st ? mx::add(mx::multiply(*st, a, s), kv, s) : kv;
    ys.push_back(mx::matmul(at(qh, t), *st, s));
  }
  return {mx::transpose(mx::concatenate(ys, 2, s), heads_first, s), *st};
}
