// A CPU kernel for the quantized linear layers of LLM checkpoints: y = x W^T
// with W affine-quantized (4 or 8 bits, groups of 32, 64 or 128, as mlx
// packs them), run as an MLX primitive of its own on x86-64 CPUs with AVX2,
// FMA and F16C. libmlx's own CPU kernel for this op is scalar and single
// threaded (and slower still for float16 and bfloat16 inputs); this one
// dequantizes a few rows of W at a time into float32, multiplies them
// against blocks of x with 8-wide fused multiply-adds, accumulates in
// float32, and splits the rows of W over the cores.
#include "qmm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "blockq.h"
#include "cpukern.h"
#include "panel.h"
#include "qmv16.h"
#include "tiles.h"

#include "mlx/backend/common/utils.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace {

using archgen::hsum;
using archgen::Kind;
using archgen::micro;
using archgen::MR;
using archgen::NR;
using archgen::pack_panel;
using archgen::round_half;
using archgen::transpose8_regs;
using archgen::kind_of;
using archgen::from_f32;
using archgen::load1;
using archgen::Pool;
using archgen::store1;
using archgen::to_f32;

// Dequantizes row n of W (K values) into dst.
template <int bits>
__attribute__((target("avx2,fma,f16c"))) void dequant_row(
    float* dst, const uint8_t* w, const void* scales, const void* biases, Kind sk, size_t n,
    int K, int group) {
  const int groups = K / group;
  const uint8_t* row = w + static_cast<size_t>(n) * K * bits / 8;
  const __m128i m4 = _mm_set1_epi8(0x0f);
  for (int g = 0; g < groups; g++) {
    __m256 s = _mm256_set1_ps(load1(scales, n * groups + g, sk));
    __m256 b = _mm256_set1_ps(load1(biases, n * groups + g, sk));
    for (int k0 = g * group; k0 < (g + 1) * group; k0 += 32) {
      float* d = dst + k0;
      if constexpr (bits == 4) {
        __m128i v = _mm_loadu_si128((const __m128i*)(row + k0 / 2));
        __m128i lo = _mm_and_si128(v, m4);
        __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
        __m128i e0 = _mm_unpacklo_epi8(lo, hi);  // elements 0..15
        __m128i e1 = _mm_unpackhi_epi8(lo, hi);  // elements 16..31
        __m128i parts[4] = {e0, _mm_srli_si128(e0, 8), e1, _mm_srli_si128(e1, 8)};
        for (int p = 0; p < 4; p++) {
          __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[p]));
          _mm256_storeu_ps(d + 8 * p, _mm256_fmadd_ps(f, s, b));
        }
      } else {
        const uint8_t* q = row + k0;
        for (int p = 0; p < 4; p++) {
          __m128i v = _mm_loadl_epi64((const __m128i*)(q + 8 * p));
          __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
          _mm256_storeu_ps(d + 8 * p, _mm256_fmadd_ps(f, s, b));
        }
      }
    }
  }
}

// res[r] = sum_k x[k] * W[n + r, k] for R rows of W, straight from their
// packed values: per group, (q . x) * scale + bias * sum(x of the group),
// where xsum holds those sums.
// Reorders x for dot_rows<4, R>: in each block of 16, the 8 even elements
// and then the 8 odd ones (the order of the low and high nibbles of 8
// packed bytes).
void deinterleave4(const float* x, float* dst, int K) {
  for (int b = 0; b < K; b += 16) {
    for (int i = 0; i < 8; i++) {
      dst[b + i] = x[b + 2 * i];
      dst[b + 8 + i] = x[b + 2 * i + 1];
    }
  }
}

template <int bits, int R>
__attribute__((target("avx2,fma,f16c"))) void dot_rows(
    const float* x, const float* xsum, const uint8_t* w, const void* scales, const void* biases,
    Kind sk, size_t n, int K, int group, float* res /* [R] */) {
  // R rows at once: each step's x is loaded once for all of them, and the
  // rows' accumulations are independent chains the core overlaps.
  const int groups = K / group;
  const size_t row_bytes = static_cast<size_t>(K) * bits / 8;
  const __m256i m4 = _mm256_set1_epi32(0x0f);
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
    for (int k0 = g * group; k0 < (g + 1) * group; k0 += 32) {
      const float* xs = x + k0;
      __m256 x0 = _mm256_loadu_ps(xs), x1 = _mm256_loadu_ps(xs + 8);
      __m256 x2 = _mm256_loadu_ps(xs + 16), x3 = _mm256_loadu_ps(xs + 24);
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        const uint8_t* row = w + (n + r) * row_bytes;
        __m256i e0, e1, e2, e3;
        if constexpr (bits == 4) {
          // Bytes widened to 32 bits; their low nibbles are the even
          // elements and their high nibbles the odd ones, which x (in the
          // order deinterleave4 gives it) matches.
          __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(row + k0 / 2)));
          __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(row + k0 / 2 + 8)));
          e0 = _mm256_and_si256(b0, m4);
          e1 = _mm256_srli_epi32(b0, 4);
          e2 = _mm256_and_si256(b1, m4);
          e3 = _mm256_srli_epi32(b1, 4);
        } else {
          const uint8_t* q = row + k0;
          e0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q)));
          e1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q + 8)));
          e2 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q + 16)));
          e3 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q + 24)));
        }
        acc0[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(e0), x0, acc0[r]);
        acc1[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(e1), x1, acc1[r]);
        acc0[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(e2), x2, acc0[r]);
        acc1[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(e3), x3, acc1[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      size_t gi = (n + r) * groups + g;
      total[r] = _mm256_fmadd_ps(_mm256_add_ps(acc0[r], acc1[r]),
                                 _mm256_set1_ps(load1(scales, gi, sk)), total[r]);
      bsum[r] += load1(biases, gi, sk) * xsum[g];
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) res[r] = hsum(total[r]) + bsum[r];
}

// dot_rows for MB rows of x (x[i * K + k], their group sums xsum[i *
// groups + g]) against one row n of W: res[i] for each. Each row of x goes
// through the very operations dot_rows gives it alone, in the same order,
// so a row's result does not depend on the rows beside it; the packed
// values are widened once for all MB rows.
template <int bits, int MB>
__attribute__((target("avx2,fma,f16c"))) void dot_rows_x(
    const float* x, const float* xsum, const uint8_t* w, const void* scales, const void* biases,
    Kind sk, size_t n, int K, int group, float* res /* [MB] */) {
  const int groups = K / group;
  const uint8_t* row = w + n * (static_cast<size_t>(K) * bits / 8);
  const __m256i m4 = _mm256_set1_epi32(0x0f);
  __m256 total[MB];
  float bsum[MB];
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) {
    total[i] = _mm256_setzero_ps();
    bsum[i] = 0;
  }
  for (int g = 0; g < groups; g++) {
    __m256 acc0[MB], acc1[MB];
#pragma GCC unroll 8
    for (int i = 0; i < MB; i++) acc0[i] = acc1[i] = _mm256_setzero_ps();
    for (int k0 = g * group; k0 < (g + 1) * group; k0 += 32) {
      __m256i e0, e1, e2, e3;
      if constexpr (bits == 4) {
        __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(row + k0 / 2)));
        __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(row + k0 / 2 + 8)));
        e0 = _mm256_and_si256(b0, m4);
        e1 = _mm256_srli_epi32(b0, 4);
        e2 = _mm256_and_si256(b1, m4);
        e3 = _mm256_srli_epi32(b1, 4);
      } else {
        const uint8_t* q = row + k0;
        e0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q)));
        e1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q + 8)));
        e2 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q + 16)));
        e3 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q + 24)));
      }
      const __m256 f0 = _mm256_cvtepi32_ps(e0), f1 = _mm256_cvtepi32_ps(e1);
      const __m256 f2 = _mm256_cvtepi32_ps(e2), f3 = _mm256_cvtepi32_ps(e3);
#pragma GCC unroll 8
      for (int i = 0; i < MB; i++) {
        const float* xs = x + static_cast<size_t>(i) * K + k0;
        acc0[i] = _mm256_fmadd_ps(f0, _mm256_loadu_ps(xs), acc0[i]);
        acc1[i] = _mm256_fmadd_ps(f1, _mm256_loadu_ps(xs + 8), acc1[i]);
        acc0[i] = _mm256_fmadd_ps(f2, _mm256_loadu_ps(xs + 16), acc0[i]);
        acc1[i] = _mm256_fmadd_ps(f3, _mm256_loadu_ps(xs + 24), acc1[i]);
      }
    }
    size_t gi = n * groups + g;
    const __m256 s = _mm256_set1_ps(load1(scales, gi, sk));
    const float b = load1(biases, gi, sk);
#pragma GCC unroll 8
    for (int i = 0; i < MB; i++) {
      total[i] = _mm256_fmadd_ps(_mm256_add_ps(acc0[i], acc1[i]), s, total[i]);
      bsum[i] += b * xsum[static_cast<size_t>(i) * groups + g];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) res[i] = hsum(total[i]) + bsum[i];
}

// Rows of x up to which a quantized W is multiplied from its packed values
// (dot_rows, dot_rows_x) rather than dequantized into panels: small
// batches of decoding, where each row's result then equals its own product
// alone, bit for bit. Past 8 rows the panels cost less CPU time
// (BenchmarkQuantizedMatmul on 1536 x 576, 4-bit: 1.26 s against 1.65 s
// of CPU at 8 rows, 1.77 s against 1.49 s at 12, 2.59 s against 1.27 s at
// 32).
constexpr int kDirectRows = 8;

// The 4-bit matrix-vector product on 8-bit integers, llama.cpp's way, for
// one or two rows of x: each block of 32 values of x is quantized to int8
// with its own scale (the block's largest magnitude over 127, rounded to
// nearest), the 32 products of a block's 4-bit weights and int8 values are
// summed exactly in integers (vpmaddubsw, then vpmaddwd), and each block's
// sum is scaled by x's block scale times W's group scale; the bias term
// uses the float32 sums of x, as dot_rows does. Each x value moves by at
// most half its block's step, so an output moves by at most the sum over
// blocks of that half step times the block's sum of |W| (the bound
// TestNativeQuantizedMatmul checks). Off unless
// ARCHGEN_MLX_NATIVE_QMV_INT8=1.
struct XQ8 {
  std::vector<int8_t> q;  // per block of 32: the 16 even entries, then the 16 odd ones
  std::vector<float> d;   // per block: the step
};

__attribute__((target("avx2,fma,f16c"))) void quantize_x8(const float* x, int K, XQ8& out) {
  const int blocks = K / 32;
  out.q.resize(static_cast<size_t>(K));
  out.d.resize(static_cast<size_t>(blocks));
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int b = 0; b < blocks; b++) {
    const float* xb = x + b * 32;
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xb + i), absmask));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    out.d[b] = amax / 127.0f;
    int8_t* q = out.q.data() + b * 32;
    for (int i = 0; i < 16; i++) {
      q[i] = static_cast<int8_t>(std::nearbyint(xb[2 * i] * inv));
      q[16 + i] = static_cast<int8_t>(std::nearbyint(xb[2 * i + 1] * inv));
    }
  }
}

template <int R>
__attribute__((target("avx2,fma,f16c"))) void dot_rows_q8(
    const XQ8& x, const float* xsum, const uint8_t* w, const void* scales, const void* biases,
    Kind sk, size_t n, int K, int group, float* res /* [R] */) {
  const int groups = K / group;
  const int per = group / 32;
  const size_t row_bytes = static_cast<size_t>(K) / 2;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 total[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) total[r] = _mm256_setzero_ps();
  for (int g = 0; g < groups; g++) {
    float sc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) sc[r] = load1(scales, (n + r) * groups + g, sk);
    for (int b = g * per; b < (g + 1) * per; b++) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q.data() + b * 32));
      const float d = x.d[b];
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) {
        // The row's 16 bytes in both halves: the low half keeps the low
        // nibbles (even entries), the high half the high ones (odd).
        __m256i v = _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (n + r) * row_bytes + b * 16)));
        __m256i q = _mm256_and_si256(_mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xf0), m4);
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), ones);
        total[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * sc[r]), total[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    float bsum = 0;
    for (int g = 0; g < groups; g++) bsum += load1(biases, (n + r) * groups + g, sk) * xsum[g];
    res[r] = hsum(total[r]) + bsum;
  }
}

std::atomic<int>& int8_switch() {
  static std::atomic<int> on{[] {
    const char* e = std::getenv("ARCHGEN_MLX_NATIVE_QMV_INT8");
    return e != nullptr && std::strcmp(e, "1") == 0 ? 1 : 0;
  }()};
  return on;
}

// Whether products of many rows of x by an affine or block-quantized W
// (and the experts' of gqmm.cpp) run on the 16-bit integer panels
// (qmm16) on AVX-512 with VNNI, rather than on the float32 panels: on by
// default, ARCHGEN_MLX_NATIVE_QMM16=0 turns it off (archgen_qmm16_runs).
std::atomic<int>& qmm16_switch() {
  static std::atomic<int> on{[] {
    const char* e = std::getenv("ARCHGEN_MLX_NATIVE_QMM16");
    return e != nullptr && std::strcmp(e, "0") == 0 ? 0 : 1;
  }()};
  return on;
}

// Whether the dense products of a float32 x and an affine-quantized W
// round x to 16 bits per group of W (qmv16.h): on by default,
// ARCHGEN_MLX_NATIVE_QMV16=0 turns it off (rounds_x), and every
// such product then multiplies x as it is on the float32 kernels.
std::atomic<int>& qmv16_switch() {
  static std::atomic<int> on{[] {
    const char* e = std::getenv("ARCHGEN_MLX_NATIVE_QMV16");
    return e != nullptr && std::strcmp(e, "0") == 0 ? 0 : 1;
  }()};
  return on;
}

// The most products one run_jobs call takes (a layer's q, k and v; gate
// and up).
constexpr int kMaxProducts = 8;

struct Job {
  const float* x;  // [M, K] float32
  const uint8_t* w;
  const void* scales;
  const void* biases;
  Kind sk;    // the kind of scales and biases, or of W when bits is 0
  Kind ok;    // the output's kind
  void* out;  // [M, N] of kind ok
  int M, N, K, group, bits;  // bits 0: W is a float array [N, K] of kind sk
  bool half = false;  // libmlx's half-precision arithmetic (half_qmm_rows), in the kind sk
  const archgen::XQ16* xq = nullptr;  // x quantized for the integer path of decode, where it runs
  bool xq_avx2 = false;               // xq is for the AVX2 kernel (qmv16_rows_avx2)
  const archgen::XI16* xi = nullptr;  // x on the 16-bit grid for the panels of qmm16, where they run
  // btype: W is block-quantized in llama.cpp's type of that code (blockq.h),
  // rows of row_bytes; bits is then -1 and scales, biases and sk unused
  int btype = 0;
  int64_t row_bytes = 0;
  const archgen::XB16* xb = nullptr;  // x on the integer grid, for up to kBlockDirectRows rows
  const archgen::XTiles* xt = nullptr;  // x packed for the tile unit, where it runs the product
};

// Rows of x up to which a block-quantized W is multiplied from its blocks
// on the integer grid (each chunk decoded once per 4 rows of x); more rows
// run on the panels.
constexpr int kBlockDirectRows = 8;

// Which instructions the native kernels use: kIsaAvx512 where the CPU and
// the operating system run AVX-512 with VNNI (the 16-bit integer path for
// the quantized products of decode, qmv16.h), kIsaAvx2 otherwise or where
// ARCHGEN_MLX_ISA=avx2 asks for it (the float32 kernels, as before).
constexpr int kIsaAvx2 = 1, kIsaAvx512 = 2;

int isa_supported() {
  static const int level = archgen::cpu_has_avx512_vnni() ? kIsaAvx512 : kIsaAvx2;
  return level;
}

std::atomic<int>& isa_level() {
  static std::atomic<int> level{[] {
    const char* e = std::getenv("ARCHGEN_MLX_ISA");
    if (e != nullptr && std::strcmp(e, "avx2") == 0) return kIsaAvx2;
    return isa_supported();
  }()};
  return level;
}

// Whether a dense product of a float32 x and an affine-quantized W of bits
// rounds x to 16 bits per group of W (qmv16.h): at 4 and 8 bits, unless
// qmv16_switch is off.
bool rounds_x(int bits) { return qmv16_switch().load() != 0 && (bits == 4 || bits == 8); }

// The tile unit's setting (ARCHGEN_MLX_TILES, mlxg_set_native_tiles): 0
// off, 1 to 3 the bfloat16 parts of every product it runs (tiles.h), or
// kTilesAuto, the default where the CPU runs it: the parts
// archgen_tile_terms chooses by the kind of W.
constexpr int kTilesAuto = 4;

std::atomic<int>& tiles_switch() {
  static std::atomic<int> v{[] {
    if (!archgen::cpu_has_amx_bf16()) return 0;
    const char* e = std::getenv("ARCHGEN_MLX_TILES");
    if (e == nullptr || std::strcmp(e, "auto") == 0) return kTilesAuto;
    if (std::strcmp(e, "1") == 0 || std::strcmp(e, "2") == 0 || std::strcmp(e, "3") == 0) {
      return e[0] - '0';
    }
    return 0;
  }()};
  return v;
}

// x W^T in half precision exactly as libmlx's CPU kernel computes it where
// x and the scales are both bfloat16 or both float16 (its arithmetic type
// is then that dtype): for each output, in the order of k, the weight
// rounds scale * q, then that plus bias, the product with x rounds, and the
// running sum rounds after every add. The rounding chain of one output is
// sequential, so the kernel runs 8 outputs (rows n..n+7 of W) side by side
// in the lanes of a vector, each lane doing libmlx's operations in libmlx's
// order: its results equal libmlx's bit for bit, at a fraction of its
// scalar loop's time. Rows past n_hi repeat the last row and are not
// stored.
template <Kind K, int bits>
__attribute__((target("avx2,fma,f16c"))) void half_qmm_rows(const Job& j, int n_lo, int n_hi) {
  constexpr int per_word = 32 / bits;
  constexpr uint32_t mask = (1u << bits) - 1;
  const int groups = j.K / j.group;
  const int words_per_row = j.K / per_word;
  const int words_per_group = j.group / per_word;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(j.w);
  const __m256i vmask = _mm256_set1_epi32(static_cast<int>(mask));
  for (int n0 = n_lo; n0 < n_hi; n0 += 8) {
    alignas(32) int rows[8];
    for (int l = 0; l < 8; l++) rows[l] = std::min(n0 + l, n_hi - 1);
    const __m256i idx = _mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(rows)),
                                           _mm256_set1_epi32(words_per_row));
    const int nb = std::min(8, n_hi - n0);
    // Each row of x in turn (a row's chain is the same whatever rows are
    // beside it); the weights are dequantized again for each.
    for (int m = 0; m < j.M; m++) {
      const float* x = j.x + static_cast<size_t>(m) * j.K;
      __m256 sum = _mm256_setzero_ps();
      for (int g = 0; g < groups; g++) {
        alignas(32) float sc[8], bi[8];
        for (int l = 0; l < 8; l++) {
          sc[l] = load1(j.scales, static_cast<size_t>(rows[l]) * groups + g, j.sk);
          bi[l] = load1(j.biases, static_cast<size_t>(rows[l]) * groups + g, j.sk);
        }
        const __m256 s = _mm256_load_ps(sc), b = _mm256_load_ps(bi);
        for (int wi = 0; wi < words_per_group; wi++) {
          const int word = g * words_per_group + wi;
          const __m256i packed = _mm256_i32gather_epi32(reinterpret_cast<const int*>(w + word), idx, 4);
#pragma GCC unroll 8
          for (int p = 0; p < per_word; p++) {
            __m256i q = _mm256_and_si256(_mm256_srli_epi32(packed, p * bits), vmask);
            __m256 wv = round_half<K>(_mm256_mul_ps(s, _mm256_cvtepi32_ps(q)));
            wv = round_half<K>(_mm256_add_ps(wv, b));
            __m256 prod = round_half<K>(_mm256_mul_ps(_mm256_set1_ps(x[word * per_word + p]), wv));
            sum = round_half<K>(_mm256_add_ps(sum, prod));
          }
        }
      }
      alignas(32) float out[8];
      _mm256_store_ps(out, sum);
      for (int l = 0; l < nb; l++) store1(j.out, static_cast<size_t>(m) * j.N + n0 + l, out[l], j.ok);
    }
  }
}

// Rows of x up to which a bfloat16 or float16 W is read straight from its
// values (half_rows) rather than converted into float32 panels: decode's
// matrix-vector products and small batches of them.
constexpr int kHalfDirectRows = 8;

// 8 bfloat16 or float16 values from p, widened to float32 (exactly).
template <Kind WK>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8_half(const uint16_t* p) {
  __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (WK == Kind::f16) {
    return _mm256_cvtph_ps(v);
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
}

// Rows [m0, m0 + MB) of x against rows [n_lo, n_hi) of a half-precision W,
// 8 rows of W at a time: each 8x8 block of W is loaded at its own width,
// widened and transposed in registers, so that a lane holds one output's
// sum and adds that output's products (each exact in float32) one k at a
// time, in the order of k, as libmlx's CPU matmul for these dtypes does
// (and the panel kernel for more rows): the results equal libmlx's bit for
// bit, whatever the number of rows. Rows past n_hi repeat the last row and
// are not stored.
template <Kind WK, int MB>
__attribute__((target("avx2,fma,f16c"))) void half_block(const float* x, const uint16_t* w, void* out,
                                                         Kind ok, int N, int K, int m0, int n_lo,
                                                         int n_hi) {
  const size_t ld = static_cast<size_t>(K);
  const float* xs = x + static_cast<size_t>(m0) * ld;
  for (int n0 = n_lo; n0 < n_hi; n0 += 8) {
    const uint16_t* rows[8];
    for (int r = 0; r < 8; r++) rows[r] = w + static_cast<size_t>(std::min(n0 + r, n_hi - 1)) * ld;
    __m256 acc[MB];
#pragma GCC unroll 4
    for (int i = 0; i < MB; i++) acc[i] = _mm256_setzero_ps();
    for (int k = 0; k < K; k += 8) {
      __m256 t[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) t[r] = load8_half<WK>(rows[r] + k);
      transpose8_regs(t);
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++) {
#pragma GCC unroll 4
        for (int i = 0; i < MB; i++) {
          acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(xs + i * ld + k + c), t[c], acc[i]);
        }
      }
    }
    const int nb = std::min(8, n_hi - n0);
    for (int i = 0; i < MB; i++) {
      alignas(32) float res[8];
      _mm256_store_ps(res, acc[i]);
      for (int r = 0; r < nb; r++) store1(out, static_cast<size_t>(m0 + i) * N + n0 + r, res[r], ok);
    }
  }
}

// x W^T for a bfloat16 or float16 W and up to kHalfDirectRows rows of x
// (as float32), output rows [n_lo, n_hi). W is streamed once per block of
// up to 4 rows of x, at the width of its own dtype.
template <Kind WK>
__attribute__((target("avx2,fma,f16c"))) void half_rows(const float* x, const uint16_t* w, void* out,
                                                        Kind ok, int M, int N, int K, int n_lo,
                                                        int n_hi) {
  int m = 0;
  for (; m + 4 <= M; m += 4) half_block<WK, 4>(x, w, out, ok, N, K, m, n_lo, n_hi);
  switch (M - m) {
    case 3: half_block<WK, 3>(x, w, out, ok, N, K, m, n_lo, n_hi); break;
    case 2: half_block<WK, 2>(x, w, out, ok, N, K, m, n_lo, n_hi); break;
    case 1: half_block<WK, 1>(x, w, out, ok, N, K, m, n_lo, n_hi); break;
  }
}

// Rows of x up to which a half-precision W against a float32 x (float32
// arithmetic on weights kept as stored) runs on mixed_rows.
constexpr int kMixedDotRows = 4;

// Whether j is a float32 product over a half-precision W with few rows of
// x: there is no rounding chain of libmlx's to follow (libmlx widens such
// a W to float32 and multiplies), so each output is a dot product.
inline bool mixed_dot(const Job& j) {
  return j.bits == 0 && j.sk != Kind::f32 && j.ok == Kind::f32 && j.M <= kMixedDotRows;
}

// Rows [n_lo, n_hi) of a bfloat16 or float16 W against MB rows of a
// float32 x: each row of W is read once at its own width, widened exactly,
// and multiplied into MB sums of 8 lanes each (two accumulators a row of x
// to hide the latency of the fused multiply-adds).
template <Kind WK, int MB>
__attribute__((target("avx2,fma,f16c"))) void mixed_block(const float* x, const uint16_t* w,
                                                          float* out, int N, int K, int n_lo,
                                                          int n_hi) {
  const size_t ld = static_cast<size_t>(K);
  for (int n = n_lo; n < n_hi; n++) {
    const uint16_t* row = w + static_cast<size_t>(n) * ld;
    __m256 a0[MB], a1[MB];
#pragma GCC unroll 4
    for (int i = 0; i < MB; i++) a0[i] = a1[i] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
      const __m256 w0 = load8_half<WK>(row + k), w1 = load8_half<WK>(row + k + 8);
#pragma GCC unroll 4
      for (int i = 0; i < MB; i++) {
        a0[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ld + k), w0, a0[i]);
        a1[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ld + k + 8), w1, a1[i]);
      }
    }
    for (; k < K; k += 8) {
      const __m256 w0 = load8_half<WK>(row + k);
#pragma GCC unroll 4
      for (int i = 0; i < MB; i++) a0[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ld + k), w0, a0[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MB; i++) out[static_cast<size_t>(i) * N + n] = hsum(_mm256_add_ps(a0[i], a1[i]));
  }
}

template <Kind WK>
void mixed_rows(const Job& j, int n_lo, int n_hi) {
  const uint16_t* w = reinterpret_cast<const uint16_t*>(j.w);
  float* out = static_cast<float*>(j.out);
  switch (j.M) {
    case 4: mixed_block<WK, 4>(j.x, w, out, j.N, j.K, n_lo, n_hi); break;
    case 3: mixed_block<WK, 3>(j.x, w, out, j.N, j.K, n_lo, n_hi); break;
    case 2: mixed_block<WK, 2>(j.x, w, out, j.N, j.K, n_lo, n_hi); break;
    default: mixed_block<WK, 1>(j.x, w, out, j.N, j.K, n_lo, n_hi); break;
  }
}

// Stores rows [m, m + rows) of the outputs c (a row every ldc floats) into
// columns [n0, n0 + nb) of j's output.
void put_rows(const Job& j, const float* c, int ldc, int m, int rows, int n0, int nb) {
  const size_t osz = archgen::kind_size(j.ok);
  for (int i = 0; i < rows; i++) {
    from_f32(static_cast<char*>(j.out) + ((static_cast<size_t>(m) + i) * j.N + n0) * osz,
             c + static_cast<size_t>(i) * ldc, nb, j.ok);
  }
}

// Every row of x against two packed panels of W side by side, on AVX-512:
// output columns n0..n0+NR from a, n0+NR..n0+NR+nb from b (nb, 1 to NR,
// of b's rows are real), the results sweep_panel's to the bit.
__attribute__((target("avx512f,avx2,fma,f16c"))) void sweep_panels512(const Job& j, const float* a,
                                                                      const float* b, int n0,
                                                                      int nb) {
  using archgen::micro512x2;
  using archgen::MR512x2;
  float c[MR512x2 * 2 * NR];
  auto put = [&](int m, int rows) {
    put_rows(j, c, 2 * NR, m, rows, n0, NR);
    put_rows(j, c + NR, 2 * NR, m, rows, n0 + NR, nb);
  };
  const size_t K = static_cast<size_t>(j.K);
  const float* x = j.x;
  int m = 0;
  for (; m + MR512x2 <= j.M; m += MR512x2) {
    micro512x2<MR512x2>(x + m * K, K, a, b, j.K, c);
    put(m, MR512x2);
  }
  switch (j.M - m) {
    case 7: micro512x2<7>(x + m * K, K, a, b, j.K, c); break;
    case 6: micro512x2<6>(x + m * K, K, a, b, j.K, c); break;
    case 5: micro512x2<5>(x + m * K, K, a, b, j.K, c); break;
    case 4: micro512x2<4>(x + m * K, K, a, b, j.K, c); break;
    case 3: micro512x2<3>(x + m * K, K, a, b, j.K, c); break;
    case 2: micro512x2<2>(x + m * K, K, a, b, j.K, c); break;
    case 1: micro512x2<1>(x + m * K, K, a, b, j.K, c); break;
  }
  put(m, j.M - m);
}

// Every row of x against one packed panel of W (output columns n0..n0+nb).
__attribute__((target("avx2,fma,f16c"))) void sweep_panel(const Job& j, const float* panel, int n0,
                                                          int nb) {
  float c[MR * NR];
  auto put = [&](int m, int rows) { put_rows(j, c, NR, m, rows, n0, nb); };
  const size_t K = static_cast<size_t>(j.K);
  int m = 0;
  for (; m + MR <= j.M; m += MR) {
    micro<MR>(j.x + m * K, K, panel, j.K, c);
    put(m, MR);
  }
  switch (j.M - m) {
    case 5: micro<5>(j.x + m * K, K, panel, j.K, c); break;
    case 4: micro<4>(j.x + m * K, K, panel, j.K, c); break;
    case 3: micro<3>(j.x + m * K, K, panel, j.K, c); break;
    case 2: micro<2>(j.x + m * K, K, panel, j.K, c); break;
    case 1: micro<1>(j.x + m * K, K, panel, j.K, c); break;
  }
  put(m, j.M - m);
}

// Row n of W as float32: decoded into dst (K values) where W is not
// float32, in place where it is.
__attribute__((target("avx2,fma,f16c"))) const float* decode_row(const Job& j, int n, float* dst) {
  const size_t K = static_cast<size_t>(j.K);
  if (j.btype != 0) {
    archgen::block_dequant_row(j.btype, j.w + n * j.row_bytes, dst, j.K);
  } else if (j.bits == 0 && j.sk == Kind::f32) {
    return reinterpret_cast<const float*>(j.w) + n * K;
  } else if (j.bits == 0) {
    to_f32(dst, j.w + n * K * 2, K, j.sk);
  } else if (j.bits == 4) {
    dequant_row<4>(dst, j.w, j.scales, j.biases, j.sk, n, j.K, j.group);
  } else {
    dequant_row<8>(dst, j.w, j.scales, j.biases, j.sk, n, j.K, j.group);
  }
  return dst;
}

// Rows [n_lo, n_hi) of W against every row of x.
__attribute__((target("avx2,fma,f16c"))) void run_rows(const Job& j, int n_lo, int n_hi) {
  if (j.xb != nullptr) {
    archgen::block_rows_q16(j.btype, *j.xb, j.w, j.row_bytes, j.out, j.ok, j.N, n_lo, n_hi);
    return;
  }
  if (j.half) {
    if (j.sk == Kind::bf16) {
      if (j.bits == 4) half_qmm_rows<Kind::bf16, 4>(j, n_lo, n_hi);
      else half_qmm_rows<Kind::bf16, 8>(j, n_lo, n_hi);
    } else {
      if (j.bits == 4) half_qmm_rows<Kind::f16, 4>(j, n_lo, n_hi);
      else half_qmm_rows<Kind::f16, 8>(j, n_lo, n_hi);
    }
    return;
  }
  if (j.xq != nullptr && j.xq_avx2) {
    archgen::qmv16_rows_avx2(*j.xq, j.w, j.scales, j.biases, j.sk, j.out, j.ok, j.N, n_lo, n_hi);
    return;
  }
  if (j.xq != nullptr) {
    archgen::qmv16_rows(*j.xq, j.w, j.scales, j.biases, j.sk, j.out, j.ok, j.N, n_lo, n_hi);
    return;
  }
  if (j.xi != nullptr && j.btype != 0) {
    archgen::qmm16_block_rows(j.btype, *j.xi, j.w, j.row_bytes, j.out, j.ok, j.N, n_lo, n_hi);
    return;
  }
  if (j.xi != nullptr) {
    archgen::qmm16_rows(*j.xi, j.w, j.scales, j.biases, j.sk, j.out, j.ok, j.N, n_lo, n_hi);
    return;
  }
  if (j.bits != 0 && j.M > 2 && j.M <= kDirectRows) {
    // Every row of x prepared as dot_rows reads it, then each row of W
    // against blocks of them.
    const int groups = j.K / j.group;
    const size_t K = static_cast<size_t>(j.K);
    thread_local std::vector<float> xsum, xd;
    xsum.resize(static_cast<size_t>(j.M) * groups);
    const float* xs = j.x;
    if (j.bits == 4) {
      xd.resize(static_cast<size_t>(j.M) * K);
      for (int m = 0; m < j.M; m++) deinterleave4(j.x + m * K, xd.data() + m * K, j.K);
      xs = xd.data();
    }
    for (int m = 0; m < j.M; m++) {
      const float* x = j.x + m * K;
      for (int g = 0; g < groups; g++) {
        float t = 0;
        for (int k = g * j.group; k < (g + 1) * j.group; k++) t += x[k];
        xsum[static_cast<size_t>(m) * groups + g] = t;
      }
    }
    float res[4];
    for (int n = n_lo; n < n_hi; n++) {
      int m = 0;
      for (; m + 4 <= j.M; m += 4) {
        if (j.bits == 4) {
          dot_rows_x<4, 4>(xs + m * K, xsum.data() + m * groups, j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
        } else {
          dot_rows_x<8, 4>(xs + m * K, xsum.data() + m * groups, j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
        }
        for (int i = 0; i < 4; i++) store1(j.out, static_cast<size_t>(m + i) * j.N + n, res[i], j.ok);
      }
      for (; m < j.M; m++) {
        if (j.bits == 4) {
          dot_rows_x<4, 1>(xs + m * K, xsum.data() + m * groups, j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
        } else {
          dot_rows_x<8, 1>(xs + m * K, xsum.data() + m * groups, j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
        }
        store1(j.out, static_cast<size_t>(m) * j.N + n, res[0], j.ok);
      }
    }
    return;
  }
  if (j.bits != 0 && j.M <= 2) {
    // Too few rows of x to pay for dequantizing W: multiply from the
    // packed values.
    int groups = j.K / j.group;
    thread_local std::vector<float> xsum, xd;
    xsum.resize(static_cast<size_t>(groups));
    xd.resize(static_cast<size_t>(j.K));
    for (int m = 0; m < j.M; m++) {
      const float* x = j.x + static_cast<size_t>(m) * j.K;
      for (int g = 0; g < groups; g++) {
        float t = 0;
        for (int k = g * j.group; k < (g + 1) * j.group; k++) t += x[k];
        xsum[g] = t;
      }
      float res[4];
      if (j.bits == 4 && int8_switch().load() != 0) {
        thread_local XQ8 xq;
        quantize_x8(x, j.K, xq);
        int n = n_lo;
        for (; n + 4 <= n_hi; n += 4) {
          dot_rows_q8<4>(xq, xsum.data(), j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
          for (int r = 0; r < 4; r++) store1(j.out, static_cast<size_t>(m) * j.N + n + r, res[r], j.ok);
        }
        for (; n < n_hi; n++) {
          dot_rows_q8<1>(xq, xsum.data(), j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
          store1(j.out, static_cast<size_t>(m) * j.N + n, res[0], j.ok);
        }
        continue;
      }
      if (j.bits == 4) {
        deinterleave4(x, xd.data(), j.K);
        x = xd.data();
      }
      int n = n_lo;
      for (; n + 4 <= n_hi; n += 4) {
        if (j.bits == 4) {
          dot_rows<4, 4>(x, xsum.data(), j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
        } else {
          dot_rows<8, 4>(x, xsum.data(), j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
        }
        for (int r = 0; r < 4; r++) store1(j.out, static_cast<size_t>(m) * j.N + n + r, res[r], j.ok);
      }
      for (; n < n_hi; n++) {
        if (j.bits == 4) {
          dot_rows<4, 1>(x, xsum.data(), j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
        } else {
          dot_rows<8, 1>(x, xsum.data(), j.w, j.scales, j.biases, j.sk, n, j.K, j.group, res);
        }
        store1(j.out, static_cast<size_t>(m) * j.N + n, res[0], j.ok);
      }
    }
    return;
  }
  if (mixed_dot(j)) {
    if (j.sk == Kind::bf16) {
      mixed_rows<Kind::bf16>(j, n_lo, n_hi);
    } else {
      mixed_rows<Kind::f16>(j, n_lo, n_hi);
    }
    return;
  }
  if (j.bits == 0 && j.sk != Kind::f32 && j.M <= kHalfDirectRows) {
    const uint16_t* w = reinterpret_cast<const uint16_t*>(j.w);
    if (j.sk == Kind::bf16) {
      half_rows<Kind::bf16>(j.x, w, j.out, j.ok, j.M, j.N, j.K, n_lo, n_hi);
    } else {
      half_rows<Kind::f16>(j.x, w, j.out, j.ok, j.M, j.N, j.K, n_lo, n_hi);
    }
    return;
  }
  if (j.bits == 0 && j.M <= 2 && j.sk == Kind::f32) {
    // A float32 W read once, row by row, against one or two rows of x.
    const size_t K = static_cast<size_t>(j.K);
    for (int n = n_lo; n < n_hi; n++) {
      const float* w = reinterpret_cast<const float*>(j.w) + n * K;
      for (int m = 0; m < j.M; m++) {
        const float* x = j.x + m * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        size_t k = 0;
        for (; k + 16 <= K; k += 16) {
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(w + k), a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), _mm256_loadu_ps(w + k + 8), a1);
        }
        for (; k < K; k += 8) {
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(w + k), a0);
        }
        store1(j.out, static_cast<size_t>(m) * j.N + n, hsum(_mm256_add_ps(a0, a1)), j.ok);
      }
    }
    return;
  }
  if (j.xt != nullptr) {
    archgen::tiles_products(
        *j.xt, n_lo, n_hi, [&j](int n, float* dst) { return decode_row(j, n, dst); },
        [&j](const float* c, size_t ldc, int n0, int nb) {
          put_rows(j, c, static_cast<int>(ldc), 0, j.M, n0, nb);
        });
    return;
  }
  // Otherwise each panel of NR rows of W is dequantized (or, for float32
  // W, read in place), packed once, and swept over every row of x; on
  // AVX-512 two panels at a time, side by side (a lone last one on the AVX2
  // kernel, whose results are the same).
  const size_t K = static_cast<size_t>(j.K);
  thread_local std::vector<float> tile, panel, zeros;
  tile.resize(NR * K);
  panel.resize(2 * NR * K);
  zeros.assign(K, 0.0f);
  const float* rows[NR];
  // pack_at packs the panel of rows [n0, n0 + nb) of W into dst.
  auto pack_at = [&](int n0, int nb, float* dst) {
    for (int r = 0; r < NR; r++) {
      rows[r] = r < nb ? decode_row(j, n0 + r, tile.data() + r * K) : zeros.data();
    }
    pack_panel(rows, j.K, dst);
  };
  const bool pairs = isa_level().load() == kIsaAvx512;
  for (int n0 = n_lo; n0 < n_hi;) {
    const int nb = std::min(NR, n_hi - n0);
    pack_at(n0, nb, panel.data());
    if (pairs && n_hi - n0 > NR) {
      const int nb2 = std::min(NR, n_hi - n0 - NR);
      pack_at(n0 + NR, nb2, panel.data() + NR * K);
      sweep_panels512(j, panel.data(), panel.data() + NR * K, n0, nb2);
      n0 += 2 * NR;
      continue;
    }
    sweep_panel(j, panel.data(), n0, nb);
    n0 += NR;
  }
}

// The bfloat16 parts of j's product on the tile unit, or 0 where it runs on
// other kernels: products whose rows of x would otherwise run on the
// panels, computed in float32 with a float32 output (half-precision
// outputs keep libmlx's rounding on the panels); the parts as
// archgen_tile_terms chooses them.
int tile_terms(const Job& j) {
  if (j.half || j.ok != Kind::f32) return 0;
  const bool panels = j.btype != 0  ? j.M > kBlockDirectRows
                      : j.bits != 0 ? j.M > kDirectRows
                      : j.sk == Kind::f32 ? j.M > 2
                                          : j.M > kHalfDirectRows;
  if (!panels) return 0;
  return archgen_tile_terms(j.bits == 0 && j.sk == Kind::f32, j.bits == 0 && j.sk == Kind::bf16);
}

// Puts j's rows of x on the grid of the integer panels (qmm16), once, here,
// its rows shared among the pool's tasks (a thread_local named inside them
// would be their own thread's), and points j at it.
void prepare_xi(Pool& pool, Job& j, int group, int wgroup, int bits) {
  thread_local archgen::XI16 xi_here;
  archgen::XI16* xi = &xi_here;
  archgen::qmm16_shape(j.M, j.K, group, wgroup, bits, *xi);
  const float* x = j.x;
  const int M = j.M, tasks = std::min(M, pool.threads());
  pool.run(tasks, [&](int t) { archgen::qmm16_prepare(x, M * t / tasks, M * (t + 1) / tasks, *xi); });
  j.xi = xi;
}

// run_jobs computes n products of one x (the same M, K and kind of W,
// group and bits; a layer's q, k and v, say) as if their W were one matrix
// stacked by rows: x is prepared once, and the blocks of NR rows of all of
// them are shared among the pool's tasks in one hand-off. Each output row is
// computed as a product of its own would compute it, whatever rows a task
// holds, so the results are those of n separate products.
void run_jobs(Job* js, int n) {
  auto& pool = Pool::get();
  Job& j = js[0];
  if (const int terms = tile_terms(j); terms != 0) {
    // Many rows of x on the tile unit: x packed once, here (its tiles
    // shared among the pool's tasks), for every task's rows of W.
    // (The tasks reach this thread's x through the pointer: a thread_local
    // named inside them would be their own thread's.)
    thread_local archgen::XTiles xt_here;
    archgen::XTiles* xt = &xt_here;
    archgen::tiles_shape_x(j.M, j.K, terms, *xt);
    const int xtiles = xt->tiles();
    const int tasks = std::min(xtiles, pool.threads());
    pool.run(tasks, [&](int t) {
      const int lo = xtiles * t / tasks * 16, hi = std::min(j.M, xtiles * (t + 1) / tasks * 16);
      archgen::tiles_pack_x(j.x, static_cast<size_t>(j.K), lo, hi, *xt);
    });
    for (int p = 0; p < n; p++) js[p].xt = xt;
  } else if (!j.half && j.bits != 0 && j.btype == 0 && rounds_x(j.bits) &&
      !(j.bits == 4 && j.M <= 2 && int8_switch().load() != 0)) {
    // Where x is rounded (rounds_x), every product of a float32 x and the
    // quantized W is that of x rounded to 16 bits per group of W: on
    // integers for the rows of decode, x quantized once, here, for every
    // task's rows of W; with the float32 kernels on the rounded x
    // otherwise (the integer panels on AVX-512).
    const bool avx512 = isa_level().load() == kIsaAvx512;
    if (j.M <= kDirectRows && archgen::qmv16_fits(j.bits, j.group, j.K)) {
      thread_local archgen::XQ16 xq;
      if (avx512) {
        archgen::qmv16_prepare(j.x, j.M, j.K, j.group, j.bits, xq);
      } else {
        archgen::qmv16_prepare_avx2(j.x, j.M, j.K, j.group, j.bits, xq);
      }
      j.xq = &xq;
      j.xq_avx2 = !avx512;
    } else if (archgen_qmm16_runs() && archgen::qmm16_fits(j.bits, j.group, j.K)) {
      prepare_xi(pool, j, j.group, j.group, j.bits);
    } else {
      thread_local std::vector<float> xr;
      xr.resize(static_cast<size_t>(j.M) * j.K);
      if (avx512) {
        archgen::qmv16_round(j.x, j.M, j.K, j.group, xr.data());
      } else {
        archgen::qmv16_round_avx2(j.x, j.M, j.K, j.group, xr.data());
      }
      j.x = xr.data();
    }
    for (int p = 1; p < n; p++) {
      js[p].x = j.x;
      js[p].xq = j.xq;
      js[p].xq_avx2 = j.xq_avx2;
      js[p].xi = j.xi;
    }
  }
  if (j.btype != 0 && j.xt == nullptr) {
    // Block-quantized W: x on the integer grid of 32-value chunks, for the
    // integer kernels on few rows and, rounded, for the panels on more.
    if (j.M <= kBlockDirectRows) {
      thread_local archgen::XB16 xb;
      archgen::block_prepare_x(j.x, j.M, j.K, archgen_block_planes(), archgen::block_planes_avx2(j.btype), xb);
      j.xb = &xb;
    } else if (archgen_qmm16_runs()) {
      prepare_xi(pool, j, 32, archgen::block_codes_group(j.btype), 8);
    } else {
      thread_local std::vector<float> xr;
      xr.resize(static_cast<size_t>(j.M) * j.K);
      archgen::block_round_x(j.x, j.M, j.K, xr.data());
      j.x = xr.data();
    }
    for (int p = 1; p < n; p++) {
      js[p].x = j.x;
      js[p].xb = j.xb;
      js[p].xi = j.xi;
    }
  }
  // first[p] is the index of product p's first block in the stack.
  int first[kMaxProducts + 1];
  size_t rows = 0;
  first[0] = 0;
  for (int p = 0; p < n; p++) {
    first[p + 1] = first[p] + (js[p].N + NR - 1) / NR;
    rows += static_cast<size_t>(js[p].N);
  }
  const int blocks = first[n];
  size_t work = static_cast<size_t>(j.M) * rows * j.K;
  if (j.half) {
    work *= 16;  // about 16 times the operations per product of the float32 kernels
  }
  // Small products are not worth handing to the other cores. From 2^18
  // multiply-adds (a 576 x 576 layer against one row: some 20 us on one
  // core) they are, as the pool's workers poll for the next job between
  // the products of a step rather than sleep (cpukern.h).
  // A half-precision W against a few rows of x (half_rows) costs about 4
  // times the CPU of a float32 product of its size (the widening and the
  // transposes), so it pays at a quarter of the size.
  if (j.bits == 0 && j.sk != Kind::f32 && j.M <= kHalfDirectRows && !mixed_dot(j)) {
    work *= 4;
  }
  int tasks = work < (size_t{1} << 18) ? 1 : std::min(blocks, pool.threads() * 4);
  int per = (blocks + tasks - 1) / tasks;
  tasks = (blocks + per - 1) / per;
  pool.run(tasks, [&](int t) {
    const int b0 = t * per, b1 = std::min(blocks, (t + 1) * per);
    for (int p = 0; p < n; p++) {
      const int lo = std::max(b0, first[p]), hi = std::min(b1, first[p + 1]);
      if (lo < hi) {
        run_rows(js[p], (lo - first[p]) * NR, std::min(js[p].N, (hi - first[p]) * NR));
      }
    }
  });
}

void run_job(const Job& job) {
  Job j = job;
  run_jobs(&j, 1);
}

// x as the kernels read it: float32 rows of K values, one after another.
// An x that is float32 and row-contiguous is read in place; any other
// (another float dtype, a transposed or broadcast view) is converted into
// a buffer, so the graph needs no copy of its own before the kernel.
struct XIn {
  const void* p;
  Kind k;
  bool contiguous;
  archgen::Rows rows;

  explicit XIn(const mx::array& x)
      : p(x.data<void>()), k(kind_of(x.dtype())), contiguous(x.flags().row_contiguous), rows(x) {}

  const float* read(std::vector<float>& buf, int M, int K) const {
    if (k == Kind::f32 && contiguous) {
      return static_cast<const float*>(p);
    }
    buf.resize(static_cast<size_t>(M) * K);
    if (contiguous) {
      to_f32(buf.data(), p, buf.size(), k);
    } else {
      size_t esz = archgen::kind_size(k);
      for (int m = 0; m < M; m++) {
        archgen::gather_f32(buf.data() + static_cast<size_t>(m) * K,
                            static_cast<const char*>(p) + rows.offset(m) * esz, rows.last_stride,
                            K, k);
      }
    }
    return buf.data();
  }
};

// a itself where it is evaluated and row-contiguous (a checkpoint's
// weights), or a row-contiguous copy where it is not.
mx::array row_major(const mx::array& a, mx::Stream s) {
  if (a.is_available() && a.flags().row_contiguous) {
    return a;
  }
  return mx::contiguous(a, false, s);
}

class NativeQMM : public mx::UnaryPrimitive {
 public:
  // f32sums: for a half-precision input and scales, sum in float32 and
  // round once (the half-precision switch) rather than libmlx's rounding
  // after every operation.
  NativeQMM(mx::Stream s, int group, int bits, bool f32sums)
      : UnaryPrimitive(s), group_(group), bits_(bits), f32sums_(f32sums) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    const mx::array& x = in[0];
    const mx::array& w = in[1];
    const mx::array& scales = in[2];
    const mx::array& biases = in[3];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    enc.set_input_array(w);
    enc.set_input_array(scales);
    enc.set_input_array(biases);
    enc.set_output_array(out);
    int K = x.shape(-1);
    int N = w.shape(0);
    int M = static_cast<int>(x.size() / K);
    Job j{nullptr,
          w.data<uint8_t>(),
          scales.data<void>(),
          biases.data<void>(),
          kind_of(scales.dtype()),
          kind_of(out.dtype()),
          out.data<void>(),
          M,
          N,
          K,
          group_,
          bits_};
    j.half = out.dtype() != mx::float32 && !f32sums_;
    XIn xi(x);
    enc.dispatch([j, xi, x, w, scales, biases, out]() mutable {
      std::vector<float> xf;
      j.x = xi.read(xf, j.M, j.K);
      run_job(j);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's native quantized matmul runs on the CPU only");
  }

  const char* name() const override { return "ArchgenQuantizedMatmul"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeQMM*>(&other);
    return o != nullptr && o->group_ == group_ && o->bits_ == bits_ && o->f32sums_ == f32sums_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    auto sh = in[0].shape();
    sh.back() = in[1].shape(0);
    return {sh};
  }

 private:
  int group_, bits_;
  bool f32sums_;
};

// Runs j, a product of x by one W with no scales or biases (a float W, or
// rows of blocks), on stream s into out: out's memory, W's bytes and the
// output's kind are filled in, and x is read as float32 when the task runs.
void run_product(mx::Stream s, const mx::array& x, const mx::array& w, mx::array& out, Job j) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& enc = mx::cpu::get_command_encoder(s);
  enc.set_input_array(x);
  enc.set_input_array(w);
  enc.set_output_array(out);
  j.w = w.data<uint8_t>();
  j.ok = kind_of(out.dtype());
  j.out = out.data<void>();
  XIn xi(x);
  enc.dispatch([j, xi, x, w, out]() mutable {
    std::vector<float> xf;
    j.x = xi.read(xf, j.M, j.K);
    run_job(j);
  });
}

// x W^T for a W [N, K] (in[1]) and an x [..., K] (in[0]) of one float dtype.
// For bfloat16 and float16, up to kHalfDirectRows rows of x read W at its
// own width (half_rows), more rows run on the panel kernel; both add each
// output's products (exact in float32) in the order of k, one at a time, as
// libmlx's own CPU matmul for those dtypes does, so the results are
// libmlx's to the bit.
class NativeLinear : public mx::UnaryPrimitive {
 public:
  explicit NativeLinear(mx::Stream s) : UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    const mx::array& x = in[0];
    const mx::array& w = in[1];
    int K = x.shape(-1);
    Job j{nullptr, nullptr, nullptr, nullptr, kind_of(w.dtype()), Kind::f32,
          nullptr, static_cast<int>(x.size() / K), w.shape(0), K, 0, 0};
    run_product(stream(), x, w, out, j);
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's native linear layer runs on the CPU only");
  }

  const char* name() const override { return "ArchgenLinear"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return dynamic_cast<const NativeLinear*>(&other) != nullptr;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    auto sh = in[0].shape();
    sh.back() = in[1].shape(0);
    return {sh};
  }
};

// x W^T for a W [N, row bytes] (in[1]) block-quantized in llama.cpp's type
// code_ (blockq.h) and an x [..., K] (in[0]) of a float dtype: float32
// arithmetic on the values decoded from the blocks, the output in x's
// dtype.
class BlockQMM : public mx::UnaryPrimitive {
 public:
  BlockQMM(mx::Stream s, int code) : UnaryPrimitive(s), code_(code) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    const mx::array& x = in[0];
    const mx::array& w = in[1];
    int K = x.shape(-1);
    Job j{nullptr, nullptr, nullptr, nullptr, Kind::f32, Kind::f32,
          nullptr, static_cast<int>(x.size() / K), w.shape(0), K, 0, -1};
    j.btype = code_;
    j.row_bytes = w.shape(1);
    run_product(stream(), x, w, out, j);
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's block-quantized products run on the CPU only");
  }

  const char* name() const override { return "ArchgenBlockMatmul"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const BlockQMM*>(&other);
    return o != nullptr && o->code_ == code_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    auto sh = in[0].shape();
    sh.back() = in[1].shape(0);
    return {sh};
  }

 private:
  int code_;
};

// The rows of a block-quantized W [..., row bytes] (in[0]) of type code_
// decoded into [..., k_] of the output's float dtype.
class BlockDequantize : public mx::UnaryPrimitive {
 public:
  BlockDequantize(mx::Stream s, int code, int k) : UnaryPrimitive(s), code_(code), k_(k) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    const mx::array& w = in[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(w);
    enc.set_output_array(out);
    const int code = code_, k = k_;
    const int64_t rows = static_cast<int64_t>(out.size() / k), row_bytes = w.shape(-1);
    const uint8_t* src = w.data<uint8_t>();
    void* dst = out.data<void>();
    const Kind ok = kind_of(out.dtype());
    enc.dispatch([code, k, rows, row_bytes, src, dst, ok, w, out]() {
      auto& pool = Pool::get();
      const int64_t tasks = std::min<int64_t>(rows, pool.threads() * 4);
      pool.run(static_cast<int>(tasks), [&](int t) {
        std::vector<float> buf(static_cast<size_t>(k));
        for (int64_t r = rows * t / tasks; r < rows * (t + 1) / tasks; r++) {
          float* row = ok == Kind::f32 ? static_cast<float*>(dst) + r * k : buf.data();
          archgen::block_dequant_row(code, src + r * row_bytes, row, k);
          if (ok != Kind::f32) {
            from_f32(static_cast<char*>(dst) + r * k * archgen::kind_size(ok), row, k, ok);
          }
        }
      });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's block-quantized decoding runs on the CPU only");
  }

  const char* name() const override { return "ArchgenBlockDequantize"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const BlockDequantize*>(&other);
    return o != nullptr && o->code_ == code_ && o->k_ == k_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    auto sh = in[0].shape();
    sh.back() = k_;
    return {sh};
  }

 private:
  int code_, k_;
};

// The shape of x [..., K] times a W of n rows: [..., n]; by heads of
// head_dim (x [B, L, K]), [B, n / head_dim, L, head_dim].
mx::Shape product_shape(const mx::array& x, int n, int head_dim) {
  if (head_dim == 0) {
    auto sh = x.shape();
    sh.back() = n;
    return sh;
  }
  return {x.shape(0), n / head_dim, x.shape(1), head_dim};
}

// x W_p^T for several W_p of one kind sharing x (a layer's q, k and v
// projections; gate and up), as one op with an output per W: quantized
// (in[1 + 3p], in[2 + 3p], in[3 + 3p] are W_p's packed weights, scales and
// biases) when bits_ is set, float W_p (in[1 + p]) of x's dtype (or half
// precision, against a float32 x) otherwise.
// One hand-off to the pool covers them all, and x is prepared once; every
// output equals what NativeQMM or NativeLinear computes for its W alone.
//
// With head_dim_ set, x is [B, L, K] and each output [B, N_p / head_dim_, L,
// head_dim_]: the product split into heads and laid out as attention reads
// them, which is a view of the product's own rows (the strides of
// reshaping [B, L, N_p] to [B, L, H, D] and swapping L and H), so the
// kernel writes its rows as ever and the graph needs no reshape or
// transpose.
class NativeProducts : public mx::Primitive {
 public:
  NativeProducts(mx::Stream s, int parts, int group, int bits, bool f32sums, int head_dim)
      : Primitive(s), parts_(parts), group_(group), bits_(bits), f32sums_(f32sums),
        head_dim_(head_dim) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    const mx::array& x = in[0];
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (const auto& a : in) enc.set_input_array(a);
    const int K = x.shape(-1);
    const int M = static_cast<int>(x.size() / K);
    std::array<Job, kMaxProducts> js;
    for (int p = 0; p < parts_; p++) {
      mx::array& out = outs[p];
      if (head_dim_ != 0) {
        by_heads(out);
      } else {
        out.set_data(mx::allocator::malloc(out.nbytes()));
      }
      enc.set_output_array(out);
      if (bits_ != 0) {
        const mx::array& w = in[1 + 3 * p];
        const mx::array& scales = in[2 + 3 * p];
        js[p] = Job{nullptr, w.data<uint8_t>(), scales.data<void>(), in[3 + 3 * p].data<void>(),
                    kind_of(scales.dtype()), kind_of(out.dtype()), out.data<void>(), M, w.shape(0), K,
                    group_, bits_};
        js[p].half = out.dtype() != mx::float32 && !f32sums_;
      } else {
        const mx::array& w = in[1 + p];
        js[p] = Job{nullptr, w.data<uint8_t>(), nullptr, nullptr, kind_of(w.dtype()),
                    kind_of(out.dtype()), out.data<void>(), M, w.shape(0), K, 0, 0};
      }
    }
    XIn xi(x);
    const int n = parts_;
    enc.dispatch([js, n, xi, in, outs]() mutable {
      std::vector<float> xf;
      const float* xp = xi.read(xf, js[0].M, js[0].K);
      for (int p = 0; p < n; p++) js[p].x = xp;
      run_jobs(js.data(), n);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's native products run on the CPU only");
  }

  const char* name() const override {
    return bits_ != 0 ? "ArchgenQuantizedMatmuls" : "ArchgenLinears";
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeProducts*>(&other);
    return o != nullptr && o->parts_ == parts_ && o->group_ == group_ && o->bits_ == bits_ &&
           o->f32sums_ == f32sums_ && o->head_dim_ == head_dim_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    std::vector<mx::Shape> shapes;
    const int stride = bits_ != 0 ? 3 : 1;
    for (int p = 0; p < parts_; p++) {
      shapes.push_back(product_shape(in[0], in[1 + stride * p].shape(0), head_dim_));
    }
    return shapes;
  }

 private:
  // by_heads gives out [B, H, L, D] a buffer of B * L rows of H * D values
  // and the strides that read it by heads.
  static void by_heads(mx::array& out) {
    const int64_t H = out.shape(1), L = out.shape(2), D = out.shape(3);
    mx::Strides st = {L * H * D, D, H * D, 1};
    auto [size, row, col] = mx::check_contiguity(out.shape(), st);
    mx::array::Flags f{};
    f.contiguous = size == out.size();
    f.row_contiguous = row;
    f.col_contiguous = col;
    out.set_data(mx::allocator::malloc(out.nbytes()), out.size(), std::move(st), f);
  }

  int parts_, group_, bits_;
  bool f32sums_;
  int head_dim_;
};

bool native_enabled() {
  static const bool ok = [] {
    if (const char* e = std::getenv("ARCHGEN_MLX_NATIVE_QMM")) {
      if (std::strcmp(e, "0") == 0) {
        return false;
      }
    }
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return ok;
}

// How quantized products whose input and scales are both of half
// precision (which libmlx computes in that precision, rounding after every
// multiply and add) run: kHalfExact (the default) on half_qmm_rows, in
// libmlx's rounding, bit for bit; kHalfF32 on the float32 kernels, summing
// in float32 and rounding once (ARCHGEN_MLX_NATIVE_QMM_HALF=f32), closer to
// the exact product but not to mlx-lm's references for the quantized parity
// levels, which carry libmlx's rounding (see parity/refgen/qdrift.py);
// kHalfLibmlx on libmlx's own kernel (ARCHGEN_MLX_NATIVE_QMM_HALF=0).
constexpr int kHalfLibmlx = 0, kHalfF32 = 1, kHalfExact = 2;

std::atomic<int>& half_mode() {
  static std::atomic<int> mode{[] {
    const char* e = std::getenv("ARCHGEN_MLX_NATIVE_QMM_HALF");
    if (e != nullptr && std::strcmp(e, "f32") == 0) return kHalfF32;
    if (e != nullptr && std::strcmp(e, "0") == 0) return kHalfLibmlx;
    return kHalfExact;
  }()};
  return mode;
}

}  // namespace

extern "C" int mlxg_native_qmm(void) { return native_enabled() ? 1 : 0; }

extern "C" int mlxg_native_qmm_half(void) { return native_enabled() ? half_mode().load() : 0; }

extern "C" int mlxg_set_native_qmm_half(int mode) { return half_mode().exchange(mode); }

int archgen_qmm_half_mode() { return half_mode().load(); }

int archgen_isa_level() { return native_enabled() ? isa_level().load() : 0; }

namespace {

// The tile unit's setting where it runs (0 where it does not: no AMX, the
// AVX2 level, the native kernels off).
int tile_mode() {
  return native_enabled() && isa_level().load() == kIsaAvx512 ? tiles_switch().load() : 0;
}

}  // namespace

int archgen_tile_terms(bool w_float32, bool w_bfloat16) {
  const int mode = tile_mode();
  if (mode != kTilesAuto) return mode;
  if (w_float32) return 0;
  return w_bfloat16 ? 2 : 3;
}

bool archgen_block_planes() { return isa_level().load() == kIsaAvx512; }

extern "C" int mlxg_native_isa(void) { return native_enabled() ? isa_level().load() : 0; }

extern "C" int mlxg_set_native_isa(int level) {
  return isa_level().exchange(std::min(std::max(level, kIsaAvx2), isa_supported()));
}

extern "C" int mlxg_native_tiles(void) { return tile_mode(); }

extern "C" int mlxg_set_native_tiles(int mode) {
  if (!archgen::cpu_has_amx_bf16() || mode < 0 || mode > kTilesAuto) mode = 0;
  return tiles_switch().exchange(mode);
}

extern "C" int mlxg_native_qmv_int8(void) {
  return native_enabled() && int8_switch().load() != 0 ? 1 : 0;
}

extern "C" int mlxg_set_native_qmv_int8(int on) { return int8_switch().exchange(on ? 1 : 0); }

bool archgen_qmm16_runs() {
  return isa_level().load() == kIsaAvx512 && qmm16_switch().load() != 0;
}

extern "C" int mlxg_native_qmv16(void) { return native_enabled() && qmv16_switch().load() != 0 ? 1 : 0; }

extern "C" int mlxg_set_native_qmv16(int on) { return qmv16_switch().exchange(on ? 1 : 0); }

extern "C" int mlxg_native_qmm16(void) { return native_enabled() && archgen_qmm16_runs() ? 1 : 0; }

extern "C" int mlxg_set_native_qmm16(int on) { return qmm16_switch().exchange(on ? 1 : 0); }

namespace {

bool floating(mx::Dtype d) {
  return d == mx::float32 || d == mx::float16 || d == mx::bfloat16;
}

}  // namespace

namespace {

// Whether archgen_native_qmm takes these arguments (see qmm.h).
bool qmm_applies(const mx::array& x, const mx::array& w, const mx::array& scales,
                 const std::optional<mx::array>& biases, bool transpose, int group_size, int bits,
                 const std::string& mode, mx::Stream s) {
  if (!native_enabled() || s.device != mx::Device::cpu || !transpose || mode != "affine" ||
      !biases || (bits != 4 && bits != 8) ||
      (group_size != 32 && group_size != 64 && group_size != 128)) {
    return false;
  }
  if (x.ndim() < 1 || w.ndim() != 2 || scales.ndim() != 2 || biases->ndim() != 2 ||
      w.dtype() != mx::uint32 || !floating(x.dtype()) || !floating(scales.dtype()) ||
      biases->dtype() != scales.dtype()) {
    return false;
  }
  int K = x.shape(-1);
  int N = w.shape(0);
  if (K % group_size != 0 || w.shape(1) != K * bits / 32 || scales.shape(0) != N ||
      scales.shape(1) != K / group_size || biases->shape() != scales.shape() || x.size() == 0) {
    return false;  // mlx's op reports these
  }
  // Where mlx computes in float32 (a float32 input or float32 scales), the
  // float32 kernels; where it computes in half precision (a half-precision
  // input and half-precision scales), as half_mode says.
  auto dt = mx::promote_types(x.dtype(), scales.dtype());
  return dt == mx::float32 || half_mode().load() != kHalfLibmlx;
}

// Whether archgen_native_linear takes these arguments.
bool linear_applies(const mx::array& x, const mx::array& w, mx::Stream s) {
  // x and W of one dtype, or a float32 x against a half-precision W (read
  // at its own width and widened exactly: float32 arithmetic on the
  // checkpoint's weights as stored).
  return native_enabled() && s.device == mx::Device::cpu && floating(x.dtype()) &&
         floating(w.dtype()) && (x.dtype() == w.dtype() || x.dtype() == mx::float32) &&
         x.ndim() >= 1 && w.ndim() == 2 && w.is_available() &&
         w.flags().row_contiguous && w.shape(1) == x.shape(-1) && w.shape(1) % 8 == 0 &&
         x.size() != 0;
}

}  // namespace

std::optional<mx::array> archgen_native_qmm(const mx::array& x, const mx::array& w,
                                            const mx::array& scales,
                                            const std::optional<mx::array>& biases,
                                            bool transpose, int group_size, int bits,
                                            const std::string& mode, mx::Stream s) {
  if (!qmm_applies(x, w, scales, biases, transpose, group_size, bits, mode, s)) {
    return std::nullopt;
  }
  auto out_shape = x.shape();
  out_shape.back() = w.shape(0);
  std::vector<mx::array> inputs = {x, row_major(w, s), row_major(scales, s),
                                   row_major(*biases, s)};
  return mx::array(out_shape, mx::promote_types(x.dtype(), scales.dtype()),
                   std::make_shared<NativeQMM>(s, group_size, bits, half_mode().load() == kHalfF32),
                   std::move(inputs));
}

std::optional<mx::array> archgen_native_linear(const mx::array& x, const mx::array& w,
                                               mx::Stream s) {
  if (!linear_applies(x, w, s)) {
    return std::nullopt;
  }
  auto out_shape = x.shape();
  out_shape.back() = w.shape(0);
  return mx::array(out_shape, mx::promote_types(x.dtype(), w.dtype()),
                   std::make_shared<NativeLinear>(s), {x, w});
}

namespace {

// Whether the products' rows split into heads of head_dim (0: no heads).
bool heads_fit(const mx::array& x, const std::vector<mx::array>& ws, int head_dim) {
  if (head_dim == 0) {
    return true;
  }
  if (head_dim < 0 || x.ndim() != 3) {
    return false;
  }
  for (const auto& w : ws) {
    if (w.ndim() != 2 || w.shape(0) % head_dim != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<std::vector<mx::array>> archgen_native_qmms(
    const mx::array& x, const std::vector<mx::array>& ws, const std::vector<mx::array>& scales,
    const std::vector<mx::array>& biases, int group_size, int bits, int head_dim, mx::Stream s) {
  const size_t n = ws.size();
  if (n < 1 || n > static_cast<size_t>(kMaxProducts) || scales.size() != n ||
      biases.size() != n || !heads_fit(x, ws, head_dim)) {
    return std::nullopt;
  }
  // Each part as archgen_native_qmm would take it alone, and all of one
  // kind: the same dtype of scales, so the same arithmetic and output.
  std::vector<mx::array> inputs = {x};
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (size_t p = 0; p < n; p++) {
    if (scales[p].dtype() != scales[0].dtype() ||
        !qmm_applies(x, ws[p], scales[p], biases[p], true, group_size, bits, "affine", s)) {
      return std::nullopt;
    }
    inputs.push_back(row_major(ws[p], s));
    inputs.push_back(row_major(scales[p], s));
    inputs.push_back(row_major(biases[p], s));
    shapes.push_back(product_shape(x, ws[p].shape(0), head_dim));
    dtypes.push_back(mx::promote_types(x.dtype(), scales[p].dtype()));
  }
  return mx::array::make_arrays(
      std::move(shapes), dtypes,
      std::make_shared<NativeProducts>(s, static_cast<int>(n), group_size, bits,
                                       half_mode().load() == kHalfF32, head_dim),
      std::move(inputs));
}

std::optional<std::vector<mx::array>> archgen_native_linears(const mx::array& x,
                                                             const std::vector<mx::array>& ws,
                                                             int head_dim, mx::Stream s) {
  const size_t n = ws.size();
  if (n < 1 || n > static_cast<size_t>(kMaxProducts) || !heads_fit(x, ws, head_dim)) {
    return std::nullopt;
  }
  std::vector<mx::array> inputs = {x};
  std::vector<mx::Shape> shapes;
  for (size_t p = 0; p < n; p++) {
    // all of one kind: the same dtype of W, so the same kernel and output
    if (ws[p].dtype() != ws[0].dtype() || !linear_applies(x, ws[p], s)) {
      return std::nullopt;
    }
    inputs.push_back(ws[p]);
    shapes.push_back(product_shape(x, ws[p].shape(0), head_dim));
  }
  return mx::array::make_arrays(std::move(shapes),
                                std::vector<mx::Dtype>(n, mx::promote_types(x.dtype(), ws[0].dtype())),
                                std::make_shared<NativeProducts>(s, static_cast<int>(n), 0, 0, false, head_dim),
                                std::move(inputs));
}

namespace {

// The values per row of a block-quantized W of row_bytes in type code, or
// an error naming what does not fit.
int block_values(int code, int64_t row_bytes, const char* op) {
  archgen::BlockFormat f = archgen::block_format(code);
  if (f.values == 0) {
    throw std::invalid_argument(std::string(op) + ": block type code " + std::to_string(code) +
                                " is not one archgen's kernels read");
  }
  if (row_bytes <= 0 || row_bytes % f.bytes != 0) {
    throw std::invalid_argument(std::string(op) + ": rows of " + std::to_string(row_bytes) +
                                " bytes are not whole blocks of " + std::to_string(f.bytes));
  }
  return static_cast<int>(row_bytes / f.bytes * f.values);
}

void block_cpu(mx::Stream s, const char* op) {
  static const bool features = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  if (s.device != mx::Device::cpu || !features) {
    throw std::invalid_argument(std::string(op) +
                                ": block-quantized weights run on x86-64 CPUs with AVX2, FMA and F16C only");
  }
}

}  // namespace

mx::array archgen_block_matmul(const mx::array& x, const mx::array& w, int code, mx::Stream s) {
  const char* op = "block_matmul";
  block_cpu(s, op);
  if (w.ndim() != 2 || w.dtype() != mx::uint8) {
    throw std::invalid_argument(std::string(op) + ": the weight is not a uint8 matrix of blocks");
  }
  const int K = block_values(code, w.shape(1), op);
  if (x.ndim() < 1 || !floating(x.dtype()) || x.shape(-1) != K) {
    throw std::invalid_argument(std::string(op) + ": input of last dimension " +
                                std::to_string(x.ndim() < 1 ? 0 : x.shape(-1)) +
                                " against rows of " + std::to_string(K) + " values");
  }
  auto out_shape = x.shape();
  out_shape.back() = w.shape(0);
  if (x.size() == 0 || w.shape(0) == 0) {
    return mx::zeros(out_shape, x.dtype(), s);
  }
  return mx::array(out_shape, x.dtype(), std::make_shared<BlockQMM>(s, code),
                   {x, row_major(w, s)});
}

mx::array archgen_block_dequantize(const mx::array& w, int code, mx::Dtype dtype, mx::Stream s) {
  const char* op = "block_dequantize";
  block_cpu(s, op);
  if (w.ndim() < 1 || w.dtype() != mx::uint8) {
    throw std::invalid_argument(std::string(op) + ": the weight is not a uint8 array of blocks");
  }
  if (!floating(dtype)) {
    throw std::invalid_argument(std::string(op) + ": the output dtype is not a float dtype");
  }
  const int K = block_values(code, w.shape(-1), op);
  auto out_shape = w.shape();
  out_shape.back() = K;
  if (w.size() == 0) {
    return mx::zeros(out_shape, dtype, s);
  }
  return mx::array(out_shape, dtype, std::make_shared<BlockDequantize>(s, code, K),
                   {row_major(w, s)});
}
