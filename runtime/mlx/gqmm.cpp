// A CPU kernel for the expert layers of mixtures of experts: gather_qmm,
// the products of input rows with quantized matrices picked per row from a
// stack (one matrix per expert), run as an MLX primitive of its own on
// x86-64 CPUs with AVX2, FMA, F16C and BMI2. libmlx's own CPU kernel for
// this op is scalar and single threaded. This one groups the rows by
// expert; an expert with one or two rows is multiplied straight from its
// packed values (8 codes at a time spread into bytes by one pdep, widened
// and converted to float32, 8-wide fused multiply-adds); one with more
// rows has its matrix dequantized a panel at a time and swept with the
// register-blocked product of panel.h, or, past 8 rows of a 4- or 8-bit
// or block-quantized stack on AVX-512 with VNNI, packed into the 16-bit
// integer panels of qmv16.h. The experts' columns are split
// over the cores. Affine quantization at 2, 3, 4, 5, 6 and 8 bits and
// mxfp4 (E2M1 values, power-of-two scales), as mlx packs them: a row's
// codes form one little-endian bit stream. Where mlx computes in bfloat16
// or float16 (half-precision input and scales), the kernel does libmlx's
// arithmetic in that type exactly (half_sweep), so its results equal
// libmlx's bit for bit.
#include "qmm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "blockq.h"
#include "cpukern.h"
#include "panel.h"
#include "qmv16.h"
#include "tiles.h"

#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace {

using archgen::hsum;
using archgen::Kind;
using archgen::kind_of;
using archgen::load1;
using archgen::micro;
using archgen::MR;
using archgen::NR;
using archgen::pack_panel;
using archgen::round_half;

// A stack of quantized matrices [E, N, K]: packed codes [E, N, K * bits /
// 8 bytes], and per group of each row a scale (of kind sk, or an E8M0
// exponent byte for mxfp4) and, for affine, a bias of kind sk.
struct Experts {
  const uint8_t* w;
  const void* scales;
  const void* biases;
  Kind sk;
  int E, N, K, group, bits;
  bool fp4;
  // llama.cpp's block type (blockq.h) of a stack of uint8 rows of blocks
  // [E, N, row bytes], with no scales or biases beside them; 0 otherwise
  int code = 0;

  size_t row_bytes() const {
    return code != 0 ? static_cast<size_t>(archgen::block_row_bytes(code, K))
                     : static_cast<size_t>(K) * bits / 8;
  }
  int groups() const { return K / group; }

  // The scale of group gi (counted over every row of every expert).
  float scale(size_t gi) const {
    if (!fp4) {
      return load1(scales, gi, sk);
    }
    uint32_t e = static_cast<const uint8_t*>(scales)[gi];
    uint32_t u = e == 0 ? 0x00400000u : e << 23;  // 2^(e - 127)
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// The low `bits` bits of each of 8 bytes.
template <int bits>
constexpr uint64_t kByteMask = 0x0101010101010101ull * ((1ull << bits) - 1);

// The codes of elements k..k+7 (k a multiple of 8) of a packed row, as
// eight 32-bit integers: 8 codes take exactly `bits` bytes, which pdep
// spreads one code to a byte.
template <int bits>
__attribute__((target("avx2,fma,f16c,bmi2"))) inline __m256i codes8(const uint8_t* row, int k) {
  uint64_t v = 0;
  std::memcpy(&v, row + static_cast<size_t>(k) / 8 * bits, bits);
  if constexpr (bits != 8) {
    v = _pdep_u64(v, kByteMask<bits>);
  }
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(v)));
}

// E2M1 codes as their values: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 by the
// low 3 bits, the sign by the fourth.
__attribute__((target("avx2,fma,f16c"))) inline __m256 fp4_values(__m256i c) {
  const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  __m256 mag = _mm256_permutevar8x32_ps(lut, c);
  __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(c, 3), 31);
  return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}

// Elements k..k+7 of a packed row as float32: the codes themselves
// (affine: scale and bias are applied per group) or E2M1 values.
template <int bits, bool fp4>
__attribute__((target("avx2,fma,f16c,bmi2"))) inline __m256 elems8(const uint8_t* row, int k) {
  __m256i c = codes8<bits>(row, k);
  if constexpr (fp4) {
    return fp4_values(c);
  } else {
    return _mm256_cvtepi32_ps(c);
  }
}

// res[r] = sum_k x[k] * W[row + r, k] for R rows of the stack (row counts
// over every expert's rows), from their packed values: per group, (codes .
// x) * scale, plus bias * (the group's sum of x, in xsum) for affine.
template <int bits, bool fp4, int R>
__attribute__((target("avx2,fma,f16c,bmi2"))) void dot_rows(const Experts& q, const float* x,
                                                            const float* xsum, size_t row,
                                                            float* res) {
  const int groups = q.groups();
  const size_t rb = q.row_bytes();
  __m256 total[R];
  float bsum[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    total[r] = _mm256_setzero_ps();
    bsum[r] = 0;
  }
  for (int g = 0; g < groups; g++) {
    __m256 acc0[R], acc1[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    for (int k = g * q.group; k < (g + 1) * q.group; k += 16) {
      __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        const uint8_t* w = q.w + (row + r) * rb;
        acc0[r] = _mm256_fmadd_ps(elems8<bits, fp4>(w, k), x0, acc0[r]);
        acc1[r] = _mm256_fmadd_ps(elems8<bits, fp4>(w, k + 8), x1, acc1[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      size_t gi = (row + r) * groups + g;
      total[r] = _mm256_fmadd_ps(_mm256_add_ps(acc0[r], acc1[r]), _mm256_set1_ps(q.scale(gi)),
                                 total[r]);
      if constexpr (!fp4) {
        bsum[r] += load1(q.biases, gi, q.sk) * xsum[g];
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) res[r] = hsum(total[r]) + bsum[r];
}

// Row `row` of the stack dequantized into dst (K float32 values).
template <int bits, bool fp4>
__attribute__((target("avx2,fma,f16c,bmi2"))) void dequant_row(const Experts& q, size_t row,
                                                               float* dst) {
  const int groups = q.groups();
  const uint8_t* w = q.w + row * q.row_bytes();
  for (int g = 0; g < groups; g++) {
    size_t gi = row * groups + g;
    __m256 s = _mm256_set1_ps(q.scale(gi));
    if constexpr (fp4) {
      for (int k = g * q.group; k < (g + 1) * q.group; k += 8) {
        _mm256_storeu_ps(dst + k, _mm256_mul_ps(elems8<bits, fp4>(w, k), s));
      }
    } else {
      __m256 b = _mm256_set1_ps(load1(q.biases, gi, q.sk));
      for (int k = g * q.group; k < (g + 1) * q.group; k += 8) {
        _mm256_storeu_ps(dst + k, _mm256_fmadd_ps(elems8<bits, fp4>(w, k), s, b));
      }
    }
  }
}

// Row `row` of the stack dequantized into dst (K float32 values) as
// libmlx's CPU kernel computes each weight in the half type HK: affine,
// scale x q rounded to HK, then plus the bias, rounded again; mxfp4, the
// E2M1 values alone (exact in HK; the scale applies per group, in
// half_sweep).
template <Kind HK, int bits, bool fp4>
__attribute__((target("avx2,fma,f16c,bmi2"))) void dequant_row_half(const Experts& q, size_t row,
                                                                    float* dst) {
  const int groups = q.groups();
  const uint8_t* w = q.w + row * q.row_bytes();
  for (int g = 0; g < groups; g++) {
    if constexpr (fp4) {
      for (int k = g * q.group; k < (g + 1) * q.group; k += 8) {
        _mm256_storeu_ps(dst + k, elems8<bits, fp4>(w, k));
      }
    } else {
      size_t gi = row * groups + g;
      __m256 s = _mm256_set1_ps(q.scale(gi));
      __m256 b = _mm256_set1_ps(load1(q.biases, gi, q.sk));
      for (int k = g * q.group; k < (g + 1) * q.group; k += 8) {
        __m256 v = round_half<HK>(_mm256_mul_ps(s, elems8<bits, fp4>(w, k)));
        _mm256_storeu_ps(dst + k, round_half<HK>(_mm256_add_ps(v, b)));
      }
    }
  }
}

// One step of libmlx's half-precision chain for MB rows of x against row
// k of P panels (each NR weights per k, K rows, one after another): for
// each row i and lane, s = round(s + round(x[i][k] * w)), rounding to the
// half type HK.
template <Kind HK, int MB, int P>
__attribute__((target("avx2,fma,f16c"))) inline void half_step(__m256 (&s)[MB][2 * P],
                                                               const float* x, size_t ldx,
                                                               const float* panel, int K, int k) {
  __m256 b[2 * P];
#pragma GCC unroll 4
  for (int j = 0; j < P; j++) {
    const float* pk = panel + (static_cast<size_t>(j) * K + k) * NR;
    b[2 * j] = _mm256_loadu_ps(pk);
    b[2 * j + 1] = _mm256_loadu_ps(pk + 8);
  }
#pragma GCC unroll 4
  for (int i = 0; i < MB; i++) {
    const __m256 a = _mm256_broadcast_ss(x + i * ldx + k);
#pragma GCC unroll 4
    for (int j = 0; j < 2 * P; j++) {
      s[i][j] = round_half<HK>(_mm256_add_ps(s[i][j], round_half<HK>(_mm256_mul_ps(a, b[j]))));
    }
  }
}

// MB rows of x (x[i * ldx + k], values of the half type HK) against P
// panels of NR weights per k (from dequant_row_half, packed by
// pack_panel), in libmlx's order and rounding for HK: affine, for each k
// in turn, the product x * w rounded, then the running sum plus it,
// rounded; mxfp4, the same over each group into a group sum, then the
// group's scale (sc[(j * groups + g) * NR + c] for panel j, already in HK)
// times it, rounded, added to the running sum and rounded. Each lane is
// one output's whole chain, so a result does not depend on the rows or
// columns beside it; the MB x 2P chains are independent, which keeps the
// core busy while each waits on its last rounding. c: [MB][P * NR].
template <Kind HK, bool fp4, int MB, int P>
__attribute__((target("avx2,fma,f16c"))) void half_sweep(const float* x, size_t ldx,
                                                         const float* panel, int K, int group,
                                                         const float* sc, float* c) {
  __m256 acc[MB][2 * P];
#pragma GCC unroll 4
  for (int i = 0; i < MB; i++) {
#pragma GCC unroll 4
    for (int j = 0; j < 2 * P; j++) acc[i][j] = _mm256_setzero_ps();
  }
  if constexpr (!fp4) {
    for (int k = 0; k < K; k++) half_step<HK, MB, P>(acc, x, ldx, panel, K, k);
  } else {
    const int groups = K / group;
    for (int g = 0; g < groups; g++) {
      __m256 gs[MB][2 * P];
#pragma GCC unroll 4
      for (int i = 0; i < MB; i++) {
#pragma GCC unroll 4
        for (int j = 0; j < 2 * P; j++) gs[i][j] = _mm256_setzero_ps();
      }
      for (int k = g * group; k < (g + 1) * group; k++) half_step<HK, MB, P>(gs, x, ldx, panel, K, k);
#pragma GCC unroll 4
      for (int j = 0; j < 2 * P; j++) {
        const __m256 sj = _mm256_loadu_ps(sc + (static_cast<size_t>(j / 2) * groups + g) * NR + (j % 2) * 8);
#pragma GCC unroll 4
        for (int i = 0; i < MB; i++) {
          acc[i][j] = round_half<HK>(_mm256_add_ps(acc[i][j], round_half<HK>(_mm256_mul_ps(sj, gs[i][j]))));
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MB; i++) {
#pragma GCC unroll 4
    for (int j = 0; j < 2 * P; j++) _mm256_storeu_ps(c + (i * P * NR) + j * 8, acc[i][j]);
  }
}

// R (1 or 2) rows of x (ld K, values of the half type HK) against NR
// rows of the stack from row0 (nrows of them real; the rest repeat the
// last and are not used), affine, straight from the packed codes: 8 codes
// of each of 8 rows dequantized with libmlx's two roundings, transposed in
// registers, and the 8 products of each lane added in the order of k with
// libmlx's roundings (half_sweep's chain, without a panel in memory).
// c: [R][NR].
template <Kind HK, int bits, int R>
__attribute__((target("avx2,fma,f16c,bmi2"))) void half_direct(const Experts& q, const float* x,
                                                               size_t row0, int nrows, float* c) {
  const int K = q.K, groups = q.groups();
  const size_t rb = q.row_bytes();
  size_t ri[NR];
  for (int r = 0; r < NR; r++) ri[r] = row0 + std::min(r, nrows - 1);
  __m256 acc[R][2];
#pragma GCC unroll 2
  for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int g = 0; g < groups; g++) {
    float sc[NR], bi[NR];
    for (int r = 0; r < NR; r++) {
      sc[r] = q.scale(ri[r] * groups + g);
      bi[r] = load1(q.biases, ri[r] * groups + g, q.sk);
    }
    for (int k0 = g * q.group; k0 < (g + 1) * q.group; k0 += 8) {
#pragma GCC unroll 2
      for (int blk = 0; blk < 2; blk++) {
        __m256 t[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
          const int rr = blk * 8 + r;
          __m256 v = round_half<HK>(_mm256_mul_ps(_mm256_set1_ps(sc[rr]), elems8<bits, false>(q.w + ri[rr] * rb, k0)));
          t[r] = round_half<HK>(_mm256_add_ps(v, _mm256_set1_ps(bi[rr])));
        }
        archgen::transpose8_regs(t);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
#pragma GCC unroll 2
          for (int i = 0; i < R; i++) {
            const __m256 a = _mm256_broadcast_ss(x + static_cast<size_t>(i) * K + k0 + j);
            acc[i][blk] = round_half<HK>(_mm256_add_ps(acc[i][blk], round_half<HK>(_mm256_mul_ps(a, t[j]))));
          }
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < R; i++) {
    _mm256_storeu_ps(c + i * NR, acc[i][0]);
    _mm256_storeu_ps(c + i * NR + 8, acc[i][1]);
  }
}

// The kernels for one packing.
struct Kernels {
  void (*dot1)(const Experts&, const float*, const float*, size_t, float*);
  void (*dot4)(const Experts&, const float*, const float*, size_t, float*);
  void (*deq)(const Experts&, size_t, float*);
  // In libmlx's half-precision arithmetic (hdeq null where the product
  // runs in float32): the weights, and the sweeps of 1 to 4 rows of x.
  void (*hdeq)(const Experts&, size_t, float*);
  // hsweep[mb - 1]: mb rows of x over one panel; hsweep2[mb - 1]: mb
  // rows over two (the few rows of a decode step).
  void (*hsweep[4])(const float*, size_t, const float*, int, int, const float*, float*);
  void (*hsweep2[2])(const float*, size_t, const float*, int, int, const float*, float*);
  // hdirect[r - 1]: r rows of x from the packed codes (affine only).
  void (*hdirect[2])(const Experts&, const float*, size_t, int, float*);
};

template <int bits, bool fp4, Kind HK>
Kernels kernels() {
  Kernels k{dot_rows<bits, fp4, 1>, dot_rows<bits, fp4, 4>, dequant_row<bits, fp4>, nullptr, {}, {}, {}};
  if constexpr (HK != Kind::f32) {
    k.hdeq = dequant_row_half<HK, bits, fp4>;
    k.hsweep[0] = half_sweep<HK, fp4, 1, 1>;
    k.hsweep[1] = half_sweep<HK, fp4, 2, 1>;
    k.hsweep[2] = half_sweep<HK, fp4, 3, 1>;
    k.hsweep[3] = half_sweep<HK, fp4, 4, 1>;
    k.hsweep2[0] = half_sweep<HK, fp4, 1, 2>;
    k.hsweep2[1] = half_sweep<HK, fp4, 2, 2>;
    if constexpr (!fp4) {
      k.hdirect[0] = half_direct<HK, bits, 1>;
      k.hdirect[1] = half_direct<HK, bits, 2>;
    }
  }
  return k;
}

template <Kind HK>
Kernels kernels_in(int bits, bool fp4) {
  if (fp4) return kernels<4, true, HK>();
  switch (bits) {
    case 2: return kernels<2, false, HK>();
    case 3: return kernels<3, false, HK>();
    case 4: return kernels<4, false, HK>();
    case 5: return kernels<5, false, HK>();
    case 6: return kernels<6, false, HK>();
    default: return kernels<8, false, HK>();
  }
}

// The kernels for a packing, in float32 (hk f32) or in libmlx's
// arithmetic for the half type hk.
Kernels kernels_for(int bits, bool fp4, Kind hk) {
  switch (hk) {
    case Kind::bf16: return kernels_in<Kind::bf16>(bits, fp4);
    case Kind::f16: return kernels_in<Kind::f16>(bits, fp4);
    default: return kernels_in<Kind::f32>(bits, fp4);
  }
}

// One evaluation: the rows of x (float32 [rows, K], in xs in the order of
// their experts), each expert's rows start[e]..start[e + 1], and where each
// row's result goes.
struct Plan {
  Experts q;
  Kernels kern;
  std::vector<float> xs;      // [rows, K]: x's rows, grouped by expert
  std::vector<int> start;     // [E + 1]
  std::vector<int64_t> orow;  // [rows]: the output row of each
  std::vector<float> tmp;     // [rows, N]: the results, grouped by expert
  Kind hk = Kind::f32;        // the half type of libmlx's arithmetic, or f32
  // block types: each expert's rows on the integer grid (up to kGridRows
  // of them; more are rounded to the grid in xs, for the panels)
  std::vector<archgen::XB16> xb;
  // experts with more than kTileExpertRows rows where their products run
  // on the tile unit (terms != 0): each one's rows packed for it
  int terms = 0;
  std::vector<archgen::XTiles> xt;
  // experts with more than kGridRows rows where their products run on the
  // integer panels (qmv16.h's qmm16; empty where they do not): each one's
  // rows on x's grid
  std::vector<archgen::XI16> xi;
};

// An expert with more rows than this multiplies them on the tile unit,
// where it runs (as qmm.cpp's products of more rows than decode's).
constexpr int kTileExpertRows = 8;

// The bfloat16 parts of a plan's products on the tile unit, or 0: float32
// arithmetic only, the parts by archgen_tile_terms (mxfp4's values are
// bfloat16's).
int gather_tile_terms(const Plan& p) {
  return p.hk != Kind::f32 ? 0 : archgen_tile_terms(false, p.q.fp4);
}

// Calls f(e, r0, R) for every expert e with more than rows rows of x (its
// R rows from row r0 of the plan's xs), each expert a task of the pool.
template <typename F>
void each_big_expert(const Plan& p, int rows, F f) {
  std::vector<int> big;
  for (int e = 0; e < p.q.E; e++) {
    if (p.start[e + 1] - p.start[e] > rows) big.push_back(e);
  }
  archgen::Pool::get().run(static_cast<int>(big.size()), [&](int i) {
    const int e = big[i];
    f(e, p.start[e], p.start[e + 1] - p.start[e]);
  });
}

// Packs the rows of every expert that has more than kTileExpertRows of
// them for the tile unit.
void prepare_tiles(Plan& p) {
  p.xt.resize(p.q.E);
  const int K = p.q.K;
  each_big_expert(p, kTileExpertRows, [&p, K](int e, int r0, int R) {
    archgen::tiles_shape_x(R, K, p.terms, p.xt[e]);
    archgen::tiles_pack_x(p.xs.data() + static_cast<size_t>(r0) * K, static_cast<size_t>(K), 0,
                          R, p.xt[e]);
  });
}

// An expert of block-quantized rows with at most this many rows of x
// multiplies them from the blocks on x's integer grid (as BlockQMM's
// products do); with more, on the integer panels where they run
// (panels16), else on panels of decoded rows. Affine experts with more
// rows run on the integer panels too.
constexpr int kGridRows = 8;

// The products of an expert's R rows of x (from row r0 of the plan's xs)
// with its matrix rows [n_lo, n_hi) on panels: NR rows at a time decoded
// into float32 by decode(row, dst), packed once, and swept over every row
// of x (MR at a time, then the rest).
template <typename Decode>
__attribute__((target("avx2,fma,f16c,bmi2"))) void panel_products(Plan& p, int e, int n_lo,
                                                                  int n_hi, Decode decode) {
  const int K = p.q.K, N = p.q.N;
  const int r0 = p.start[e], R = p.start[e + 1] - r0;
  if (p.terms != 0 && R > kTileExpertRows) {
    // On the tile unit, with the expert's rows packed by prepare_tiles.
    archgen::tiles_products(
        p.xt[e], n_lo, n_hi,
        [&decode](int n, float* dst) {
          decode(n, dst);
          return static_cast<const float*>(dst);
        },
        [&](const float* c, size_t ldc, int n0, int nb) {
          for (int i = 0; i < R; i++) {
            std::memcpy(p.tmp.data() + static_cast<size_t>(r0 + i) * N + n0, c + i * ldc,
                        nb * sizeof(float));
          }
        });
    return;
  }
  thread_local std::vector<float> tile, panel, zeros;
  tile.resize(static_cast<size_t>(NR) * K);
  panel.resize(static_cast<size_t>(NR) * K);
  zeros.assign(K, 0.0f);
  const float* rows[NR];
  float c[MR * NR];
  const float* xe = p.xs.data() + static_cast<size_t>(r0) * K;
  for (int n0 = n_lo; n0 < n_hi; n0 += NR) {
    const int nb = std::min(NR, n_hi - n0);
    for (int r = 0; r < NR; r++) {
      if (r < nb) {
        float* d = tile.data() + static_cast<size_t>(r) * K;
        decode(n0 + r, d);
        rows[r] = d;
      } else {
        rows[r] = zeros.data();
      }
    }
    pack_panel(rows, K, panel.data());
    int m = 0;
    auto put = [&](int cnt) {
      for (int i = 0; i < cnt; i++) {
        std::memcpy(p.tmp.data() + static_cast<size_t>(r0 + m + i) * N + n0, c + i * NR,
                    nb * sizeof(float));
      }
    };
    for (; m + MR <= R; m += MR) {
      micro<MR>(xe + static_cast<size_t>(m) * K, K, panel.data(), K, c);
      put(MR);
    }
    const float* xm = xe + static_cast<size_t>(m) * K;
    switch (R - m) {
      case 5: micro<5>(xm, K, panel.data(), K, c); break;
      case 4: micro<4>(xm, K, panel.data(), K, c); break;
      case 3: micro<3>(xm, K, panel.data(), K, c); break;
      case 2: micro<2>(xm, K, panel.data(), K, c); break;
      case 1: micro<1>(xm, K, panel.data(), K, c); break;
    }
    put(R - m);
  }
}

// Expert e's rows against its block-quantized matrix rows [n_lo, n_hi):
// the products of blockq.h, as archgen_block_matmul computes them for the
// expert's matrix alone.
void run_expert_blocks(Plan& p, int e, int n_lo, int n_hi) {
  const Experts& q = p.q;
  const int K = q.K, N = q.N;
  const int r0 = p.start[e], R = p.start[e + 1] - r0;
  const size_t rb = q.row_bytes();
  const uint8_t* w = q.w + static_cast<size_t>(e) * N * rb;
  if (R <= kGridRows) {
    archgen::block_rows_q16(q.code, p.xb[e], w, static_cast<int64_t>(rb),
                            p.tmp.data() + static_cast<size_t>(r0) * N, Kind::f32, N, n_lo, n_hi);
    return;
  }
  if (!p.xi.empty()) {
    archgen::qmm16_block_rows(q.code, p.xi[e], w, static_cast<int64_t>(rb),
                              p.tmp.data() + static_cast<size_t>(r0) * N, Kind::f32, N, n_lo, n_hi);
    return;
  }
  panel_products(p, e, n_lo, n_hi, [&](int n, float* d) {
    archgen::block_dequant_row(q.code, w + static_cast<size_t>(n) * rb, d, K);
  });
}

// Whether the plan's experts of more than kGridRows rows run on the
// integer panels: float32 arithmetic off the tile unit, a block-quantized
// or a 4- or 8-bit affine stack, the panels on (archgen_qmm16_runs).
bool panels16(const Plan& p) {
  const Experts& q = p.q;
  return p.terms == 0 && p.hk == Kind::f32 && archgen_qmm16_runs() &&
         (q.code != 0 || (!q.fp4 && archgen::qmm16_fits(q.bits, q.group, q.K)));
}

// Puts the rows of every expert that has more than kGridRows of them on x's
// grid for the integer panels.
void prepare_panels16(Plan& p) {
  const Experts& q = p.q;
  p.xi.resize(q.E);
  each_big_expert(p, kGridRows, [&p, &q](int e, int r0, int R) {
    if (q.code != 0) {
      archgen::qmm16_shape(R, q.K, 32, archgen::block_codes_group(q.code), 8, p.xi[e]);
    } else {
      archgen::qmm16_shape(R, q.K, q.group, q.group, q.bits, p.xi[e]);
    }
    archgen::qmm16_prepare(p.xs.data() + static_cast<size_t>(r0) * q.K, 0, R, p.xi[e]);
  });
}

// Puts each expert's rows of a block-quantized stack into the form its
// products read (run_expert_blocks).
void prepare_blocks(Plan& p) {
  const int K = p.q.K;
  const bool wide = archgen_block_planes(), planes = archgen::block_planes_avx2(p.q.code);
  p.xb.resize(p.q.E);
  for (int e = 0; e < p.q.E; e++) {
    const int r0 = p.start[e], R = p.start[e + 1] - r0;
    float* xe = p.xs.data() + static_cast<size_t>(r0) * K;
    if (R == 0) continue;
    if (R <= kGridRows) {
      archgen::block_prepare_x(xe, R, K, wide, planes, p.xb[e]);
    } else if (p.terms == 0 && p.xi.empty()) {
      archgen::block_round_x(xe, R, K, xe);
    }
  }
}

// Expert e's rows against its matrix rows [n_lo, n_hi) in libmlx's
// arithmetic for the half type p.hk: per P panels of NR matrix rows, the
// weights as libmlx rounds them (and for mxfp4 the groups' scales in that
// type), then every row of the expert swept over them, up to 4 at a time
// over one panel, or, for an expert of one or two rows, over two panels at
// once (more independent chains for the core to overlap). Affine experts
// of one or two rows (a decode step) skip the panels: half_direct.
__attribute__((target("avx2,fma,f16c,bmi2"))) void run_expert_half(Plan& p, int e, int n_lo,
                                                                   int n_hi) {
  const Experts& q = p.q;
  const int K = q.K, N = q.N, groups = q.groups();
  const int r0 = p.start[e], R = p.start[e + 1] - r0;
  const size_t base = static_cast<size_t>(e) * N;
  if (R <= 2 && p.kern.hdirect[0] != nullptr) {
    float c[2 * NR];
    const float* xe = p.xs.data() + static_cast<size_t>(r0) * K;
    for (int n0 = n_lo; n0 < n_hi; n0 += NR) {
      const int nb = std::min(NR, n_hi - n0);
      p.kern.hdirect[R - 1](q, xe, base + n0, nb, c);
      for (int i = 0; i < R; i++) {
        std::memcpy(p.tmp.data() + static_cast<size_t>(r0 + i) * N + n0, c + i * NR, nb * sizeof(float));
      }
    }
    return;
  }
  const int P = R <= 2 ? 2 : 1;
  const int W = P * NR;
  thread_local std::vector<float> tile, panel, zeros, sc;
  tile.resize(static_cast<size_t>(W) * K);
  panel.resize(static_cast<size_t>(W) * K);
  zeros.assign(K, 0.0f);
  sc.assign(static_cast<size_t>(P) * groups * NR, 0.0f);
  const float* rows[2 * NR];
  float c[4 * NR];
  const float* xe = p.xs.data() + static_cast<size_t>(r0) * K;
  for (int n0 = n_lo; n0 < n_hi; n0 += W) {
    const int nb = std::min(W, n_hi - n0);
    for (int r = 0; r < W; r++) {
      if (r < nb) {
        float* d = tile.data() + static_cast<size_t>(r) * K;
        p.kern.hdeq(q, base + n0 + r, d);
        rows[r] = d;
        if (q.fp4) {
          for (int g = 0; g < groups; g++) {
            sc[(static_cast<size_t>(r / NR) * groups + g) * NR + r % NR] =
                archgen::round_to(q.scale((base + n0 + r) * groups + g), p.hk);
          }
        }
      } else {
        rows[r] = zeros.data();
      }
    }
    for (int j = 0; j < P; j++) {
      pack_panel(rows + j * NR, K, panel.data() + static_cast<size_t>(j) * NR * K);
    }
    for (int m = 0; m < R; m += 4) {
      const int mb = std::min(4, R - m);
      const float* xm = xe + static_cast<size_t>(m) * K;
      if (P == 2) {
        p.kern.hsweep2[mb - 1](xm, K, panel.data(), K, q.group, sc.data(), c);
      } else {
        p.kern.hsweep[mb - 1](xm, K, panel.data(), K, q.group, sc.data(), c);
      }
      for (int i = 0; i < mb; i++) {
        std::memcpy(p.tmp.data() + static_cast<size_t>(r0 + m + i) * N + n0, c + i * W,
                    nb * sizeof(float));
      }
    }
  }
}

// Expert e's rows against its matrix rows [n_lo, n_hi).
__attribute__((target("avx2,fma,f16c,bmi2"))) void run_expert(Plan& p, int e, int n_lo,
                                                              int n_hi) {
  const Experts& q = p.q;
  const int K = q.K, N = q.N;
  const int r0 = p.start[e], R = p.start[e + 1] - r0;
  const size_t base = static_cast<size_t>(e) * N;  // the expert's first row in the stack
  if (q.code != 0) {
    run_expert_blocks(p, e, n_lo, n_hi);
    return;
  }
  if (p.hk != Kind::f32) {
    run_expert_half(p, e, n_lo, n_hi);
    return;
  }
  if (R > kGridRows && !p.xi.empty()) {
    const size_t fo = base * q.groups() * archgen::kind_size(q.sk);
    archgen::qmm16_rows(p.xi[e], q.w + base * q.row_bytes(), static_cast<const char*>(q.scales) + fo,
                        static_cast<const char*>(q.biases) + fo, q.sk,
                        p.tmp.data() + static_cast<size_t>(r0) * N, Kind::f32, N, n_lo, n_hi);
    return;
  }
  if (R <= 2) {
    // Too few rows to pay for dequantizing: from the packed values.
    const int groups = q.groups();
    thread_local std::vector<float> xsum;
    xsum.resize(static_cast<size_t>(groups));
    for (int i = r0; i < r0 + R; i++) {
      const float* x = p.xs.data() + static_cast<size_t>(i) * K;
      for (int g = 0; g < groups; g++) {
        float t = 0;
        for (int k = g * q.group; k < (g + 1) * q.group; k++) t += x[k];
        xsum[g] = t;
      }
      float* out = p.tmp.data() + static_cast<size_t>(i) * N;
      int n = n_lo;
      for (; n + 4 <= n_hi; n += 4) p.kern.dot4(q, x, xsum.data(), base + n, out + n);
      for (; n < n_hi; n++) p.kern.dot1(q, x, xsum.data(), base + n, out + n);
    }
    return;
  }
  // A panel of NR matrix rows dequantized and packed once, then swept
  // over every row of the expert.
  panel_products(p, e, n_lo, n_hi, [&](int n, float* d) { p.kern.deq(q, base + n, d); });
}

// Every expert's rows, the experts' matrix rows split into tasks over the
// cores (weighted by the rows each task multiplies).
void run_plan(Plan& p) {
  auto& pool = archgen::Pool::get();
  const int E = p.q.E, N = p.q.N;
  const int blocks = (N + NR - 1) / NR;
  size_t rows = p.orow.size();
  size_t work = rows * static_cast<size_t>(N) * p.q.K;
  if (p.hk != Kind::f32) {
    work *= 8;  // libmlx's roundings: several times the operations per product
  }
  int want = work < (1u << 20) ? 1 : pool.threads() * 4;
  double total = 0;
  for (int e = 0; e < E; e++) {
    int R = p.start[e + 1] - p.start[e];
    if (R > 0) total += static_cast<double>(blocks) * (R + 2);
  }
  struct Task {
    int e, lo, hi;
  };
  std::vector<Task> tasks;
  for (int e = 0; e < E; e++) {
    int R = p.start[e + 1] - p.start[e];
    if (R == 0) continue;
    // Each task about total / want of the cost; a block of NR matrix rows
    // costs about R + 2 rows' products (the +2: decoding it).
    double cost = static_cast<double>(R + 2);
    int per = std::max(1, static_cast<int>(std::ceil(total / want / cost)));
    per = std::min(per, blocks);
    for (int b = 0; b < blocks; b += per) {
      tasks.push_back({e, b * NR, std::min(N, (b + per) * NR)});
    }
  }
  if (want == 1) {
    for (auto& t : tasks) run_expert(p, t.e, t.lo, t.hi);
  } else {
    pool.run(static_cast<int>(tasks.size()),
             [&](int i) { run_expert(p, tasks[i].e, tasks[i].lo, tasks[i].hi); });
  }
}

// The values of an index array of any layout (a broadcast has zero
// strides), in row-major order.
std::vector<uint32_t> read_indices(const mx::array& a) {
  std::vector<uint32_t> v(a.size());
  const uint32_t* p = a.data<uint32_t>();
  const int nd = static_cast<int>(a.ndim());
  for (size_t i = 0; i < v.size(); i++) {
    int64_t off = 0;
    size_t r = i;
    for (int d = nd - 1; d >= 0; d--) {
      off += static_cast<int64_t>(r % a.shape(d)) * a.strides()[d];
      r /= a.shape(d);
    }
    v[i] = p[off];
  }
  return v;
}

// Reads x ([..., M, K] of any float kind and layout) as float32 rows.
void read_rows(const mx::array& x, std::vector<float>& dst) {
  const int K = x.shape(-1);
  const size_t n = x.size() / K;
  dst.resize(n * K);
  archgen::Rows rows(x);
  const Kind k = kind_of(x.dtype());
  const size_t esz = archgen::kind_size(k);
  const char* base = static_cast<const char*>(x.data<void>());
  for (size_t r = 0; r < n; r++) {
    archgen::gather_f32(dst.data() + r * K, base + rows.offset(r) * esz, rows.last_stride, K, k);
  }
}

class NativeGatherQMM : public mx::UnaryPrimitive {
 public:
  // exact: for a bfloat16 or float16 output, libmlx's arithmetic in that
  // type (otherwise float32 sums, the results rounded once to the output's
  // dtype).
  // code: llama.cpp's block type of a stack of blocks (no scales or
  // biases; group, bits, fp4 and exact unused), 0 otherwise.
  NativeGatherQMM(mx::Stream s, int group, int bits, bool fp4, bool exact, int code = 0)
      : UnaryPrimitive(s), group_(group), bits_(bits), fp4_(fp4), exact_(exact), code_(code) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    // in: x, w, [scales, [biases,]] lhs indices, rhs indices.
    const bool has_b = !fp4_ && code_ == 0;
    const mx::array& x = in[0];
    const mx::array& w = in[1];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) enc.set_input_array(a);
    enc.set_output_array(out);
    Experts q{w.data<uint8_t>(),
              code_ == 0 ? in[2].data<void>() : nullptr,
              has_b ? in[3].data<void>() : nullptr,
              code_ == 0 ? kind_of(in[2].dtype()) : Kind::f32,
              static_cast<int>(w.size() / (w.shape(-2) * w.shape(-1))),
              w.shape(-2),
              x.shape(-1),
              group_,
              bits_,
              fp4_,
              code_};
    int bits = bits_;
    bool fp4 = fp4_;
    const Kind ok = kind_of(out.dtype());
    const Kind hk = exact_ && code_ == 0 ? ok : Kind::f32;
    enc.dispatch([q, bits, fp4, ok, hk, in, out]() mutable {
      const mx::array& x = in[0];
      const int K = q.K, N = q.N;
      const int M = x.ndim() >= 2 ? x.shape(-2) : 1;
      const int64_t xbatch = static_cast<int64_t>(x.size() / (static_cast<size_t>(M) * K));
      std::vector<uint32_t> li = read_indices(in[in.size() - 2]);
      std::vector<uint32_t> ri = read_indices(in[in.size() - 1]);
      std::vector<float> xf;
      read_rows(x, xf);
      Plan p;
      p.q = q;
      p.hk = hk;
      p.kern = kernels_for(bits, fp4, hk);
      // Count each expert's rows, then place them (a counting sort, stable,
      // so sorted indices keep their order). A product whose index lies
      // outside the stack or x gets NaN rows rather than a read out of
      // bounds.
      const size_t nb = ri.size();
      std::vector<int> count(q.E + 1, 0);
      std::vector<int64_t> bad;
      for (size_t b = 0; b < nb; b++) {
        if (ri[b] < static_cast<uint32_t>(q.E) && li[b] < static_cast<uint64_t>(xbatch)) {
          count[ri[b]] += M;
        } else {
          bad.push_back(static_cast<int64_t>(b));
        }
      }
      p.start.assign(q.E + 1, 0);
      for (int e = 0; e < q.E; e++) p.start[e + 1] = p.start[e] + count[e];
      const size_t rows = p.start[q.E];
      p.xs.resize(rows * K);
      p.orow.resize(rows);
      p.tmp.resize(rows * N);
      std::vector<int> fill(p.start.begin(), p.start.end() - 1);
      for (size_t b = 0; b < nb; b++) {
        if (ri[b] >= static_cast<uint32_t>(q.E) || li[b] >= static_cast<uint64_t>(xbatch)) {
          continue;
        }
        for (int m = 0; m < M; m++) {
          int i = fill[ri[b]]++;
          std::memcpy(p.xs.data() + static_cast<size_t>(i) * K,
                      xf.data() + (static_cast<size_t>(li[b]) * M + m) * K, K * sizeof(float));
          p.orow[i] = static_cast<int64_t>(b) * M + m;
        }
      }
      p.terms = gather_tile_terms(p);
      if (p.terms != 0) {
        prepare_tiles(p);
      }
      if (panels16(p)) {
        prepare_panels16(p);
      }
      if (q.code != 0) {
        prepare_blocks(p);
      }
      run_plan(p);
      char* o = static_cast<char*>(out.data<void>());
      const size_t osz = archgen::kind_size(ok);
      for (size_t i = 0; i < rows; i++) {
        archgen::from_f32(o + static_cast<size_t>(p.orow[i]) * N * osz, p.tmp.data() + i * N, N, ok);
      }
      for (int64_t b : bad) {
        for (int64_t i = b * M * N; i < (b + 1) * M * N; i++) {
          archgen::store1(o, static_cast<size_t>(i), std::numeric_limits<float>::quiet_NaN(), ok);
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's native gather_qmm runs on the CPU only");
  }

  const char* name() const override { return "ArchgenGatherQMM"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeGatherQMM*>(&other);
    return o != nullptr && o->group_ == group_ && o->bits_ == bits_ && o->fp4_ == fp4_ &&
           o->exact_ == exact_ && o->code_ == code_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    auto sh = in.back().shape();
    sh.push_back(in[0].ndim() >= 2 ? in[0].shape(-2) : 1);
    sh.push_back(in[1].shape(-2));
    return {sh};
  }

 private:
  int group_, bits_;
  bool fp4_, exact_;
  int code_;
};

bool cpu_ok() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  }();
  return ok;
}

std::atomic<int>& gqmm_switch() {
  static std::atomic<int> on{[] {
    if (const char* e = std::getenv("ARCHGEN_MLX_NATIVE_QMM")) {
      if (std::strcmp(e, "0") == 0) {
        return 0;
      }
    }
    return cpu_ok() ? 1 : 0;
  }()};
  return on;
}

// a itself where it is evaluated and row-contiguous (a checkpoint's
// weights), or a row-contiguous copy where it is not.
mx::array row_major(const mx::array& a, mx::Stream s) {
  if (a.is_available() && a.flags().row_contiguous) {
    return a;
  }
  return mx::contiguous(a, false, s);
}

}  // namespace

extern "C" int mlxg_native_gather_qmm(void) { return gqmm_switch().load(); }

extern "C" int mlxg_set_native_gather_qmm(int on) {
  return gqmm_switch().exchange(on && cpu_ok() ? 1 : 0);
}

std::optional<mx::array> archgen_native_gather_qmm(
    const mx::array& x, const mx::array& w, const mx::array& scales,
    const std::optional<mx::array>& biases, const std::optional<mx::array>& lhs,
    const std::optional<mx::array>& rhs, bool transpose, int group_size, int bits,
    const std::string& mode, bool sorted, mx::Stream s) {
  if (gqmm_switch().load() == 0 || s.device != mx::Device::cpu || !transpose) {
    return std::nullopt;
  }
  const bool fp4 = mode == "mxfp4";
  if (fp4) {
    if (bits != 4 || group_size != 32 || biases) {
      return std::nullopt;
    }
  } else if (mode != "affine" || !biases ||
             !(bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8) ||
             !(group_size == 32 || group_size == 64 || group_size == 128)) {
    return std::nullopt;
  }
  // mlx's own op checks and broadcasts the arguments (its errors are the
  // user's); its primitive's inputs are then run by this kernel instead.
  auto ref = mx::gather_qmm(x, w, scales, biases, lhs, rhs, transpose, group_size, bits, mode,
                            std::nullopt, sorted, s);
  // Where mlx computes in float32, the float32 kernels; where it computes
  // in bfloat16 or float16 (a half-precision input with scales of its
  // dtype, or mxfp4 with a half-precision input), as the half-precision
  // mode of quantized_matmul says: libmlx's arithmetic exactly (the
  // default), float32 sums rounded once, or libmlx's own kernel.
  if (!archgen::kernel_float(ref.dtype()) || ref.size() == 0 || !ref.has_primitive() ||
      std::strcmp(ref.primitive().name(), "GatherQMM") != 0) {
    return ref;
  }
  const bool half = ref.dtype() != mx::float32;
  const int hmode = half ? archgen_qmm_half_mode() : 0;
  if (half && hmode != 1 && hmode != 2) {
    return ref;
  }
  auto in = ref.inputs();
  const size_t want = fp4 ? 5 : 6;
  if (half && (in.size() != want || in[0].dtype() != ref.dtype() ||
               (!fp4 && (in[2].dtype() != ref.dtype() || in[3].dtype() != ref.dtype())))) {
    return ref;
  }
  if (in.size() != want || !archgen::kernel_float(in[0].dtype()) || in[1].ndim() < 3 ||
      in[1].dtype() != mx::uint32 || in[want - 2].dtype() != mx::uint32 ||
      in[want - 1].dtype() != mx::uint32 || (fp4 ? in[2].dtype() != mx::uint8
                                          : !archgen::kernel_float(in[2].dtype())) ||
      in[0].shape(-1) % group_size != 0 ||
      static_cast<int64_t>(in[1].shape(-1)) * 32 != static_cast<int64_t>(in[0].shape(-1)) * bits) {
    return ref;
  }
  for (size_t i = 1; i < (fp4 ? 3u : 4u); i++) {
    in[i] = row_major(in[i], s);
  }
  return mx::array(ref.shape(), ref.dtype(),
                   std::make_shared<NativeGatherQMM>(s, group_size, bits, fp4, half && hmode == 2),
                   std::move(in));
}

mx::array archgen_block_gather_matmul(const mx::array& x, const mx::array& w,
                                      const std::optional<mx::array>& lhs,
                                      const std::optional<mx::array>& rhs, int code,
                                      mx::Stream s) {
  const std::string op = "block_gather_matmul";
  if (s.device != mx::Device::cpu || !cpu_ok()) {
    throw std::invalid_argument(
        op + ": block-quantized experts run on x86-64 CPUs with AVX2, FMA, F16C and BMI2 only");
  }
  const archgen::BlockFormat f = archgen::block_format(code);
  if (f.values == 0) {
    throw std::invalid_argument(op + ": block type code " + std::to_string(code) +
                                " is not one archgen's kernels read");
  }
  if (w.ndim() != 3 || w.dtype() != mx::uint8) {
    throw std::invalid_argument(op + ": the experts are not a uint8 stack [experts, rows, row bytes] of blocks");
  }
  if (w.shape(2) <= 0 || w.shape(2) % f.bytes != 0) {
    throw std::invalid_argument(op + ": rows of " + std::to_string(w.shape(2)) +
                                " bytes are not whole blocks of " + std::to_string(f.bytes));
  }
  const int K = w.shape(2) / f.bytes * f.values;
  if (x.ndim() < 2 || !mx::issubdtype(x.dtype(), mx::floating) || x.shape(-1) != K) {
    throw std::invalid_argument(op + ": input of " + std::to_string(x.ndim()) +
                                " dimensions, the last " + std::to_string(x.ndim() < 1 ? 0 : x.shape(-1)) +
                                ", against experts' rows of " + std::to_string(K) + " values");
  }
  if (!rhs) {
    throw std::invalid_argument(op + ": no expert indices");
  }
  mx::Shape batch(x.shape().begin(), x.shape().end() - 2);
  auto index = [&](const mx::array& a, const char* what) {
    if (!mx::issubdtype(a.dtype(), mx::integer)) {
      throw std::invalid_argument(op + ": the " + what + " indices are not integers");
    }
    return mx::astype(a, mx::uint32, s);
  };
  mx::array li = lhs ? index(*lhs, "input")
                     : mx::reshape(mx::arange(0, static_cast<int>(x.size() / (x.shape(-2) * x.shape(-1))),
                                              mx::uint32, s),
                                   batch, s);
  auto both = mx::broadcast_arrays({li, index(*rhs, "expert")}, s);
  auto sh = both[0].shape();
  sh.push_back(x.shape(-2));
  sh.push_back(w.shape(1));
  if (x.size() == 0 || both[0].size() == 0 || w.shape(1) == 0) {
    return mx::zeros(sh, x.dtype(), s);
  }
  return mx::array(sh, x.dtype(), std::make_shared<NativeGatherQMM>(s, 0, 0, false, false, code),
                   {x, row_major(w, s), both[0], both[1]});
}
