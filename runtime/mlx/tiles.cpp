// The tile products of tiles.h.
#include "tiles.h"

#include "avx512.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace archgen {

namespace {

// Linux's arch_prctl request for permission to use a dynamically enabled
// state component, and AMX's tile data component.
constexpr int kReqXcompPerm = 0x1023;
constexpr int kXfeatureTileData = 18;

// The tile configuration every product uses: palette 1, tiles 0 to 7 each
// of 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; t++) {
      colsb[t] = 64;
      rows[t] = 16;
    }
  }
};

// The bits of a rounded to the nearest bfloat16 (ties to even) in their
// upper halves; the lower halves are left over.
__attribute__((target("avx512f,avx512bw"))) inline __m512i round_bits(__m512 a) {
  const __m512i u = _mm512_castps_si512(a);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
}

// The float32 value of round_bits' bfloat16.
__attribute__((target("avx512f,avx512bw"))) inline __m512 widen(__m512i r) {
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// The 32 bfloat16 of r0's 16 values then r1's, in order.
__attribute__((target("avx512f,avx512bw"))) inline __m512i upper_halves(__m512i r0, __m512i r1) {
  alignas(64) static const uint16_t idx[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                               23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                               45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return _mm512_permutex2var_epi16(r0, _mm512_load_si512(idx), r1);
}

// The part of 32 values a step holds: their bfloat16 (hi) or the bfloat16
// of what that leaves (lo).
__attribute__((target("avx512f,avx512bw"))) inline __m512i part(__m512 a0, __m512 a1, bool lo) {
  __m512i r0 = round_bits(a0), r1 = round_bits(a1);
  if (lo) {
    r0 = round_bits(_mm512_sub_ps(a0, widen(r0)));
    r1 = round_bits(_mm512_sub_ps(a1, widen(r1)));
  }
  return upper_halves(r0, r1);
}

// The 32 values of row from k (zeros past K).
__attribute__((target("avx512f,avx512bw"))) inline void load32(const float* row, int k, int K,
                                                               __m512& a0, __m512& a1) {
  if (k + 32 <= K) {
    a0 = _mm512_loadu_ps(row + k);
    a1 = _mm512_loadu_ps(row + k + 16);
    return;
  }
  const int n0 = K - k < 16 ? K - k : 16, n1 = K - k - 16 > 0 ? K - k - 16 : 0;
  a0 = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n0) - 1), row + k);
  a1 = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n1) - 1), row + k + 16);
}

// The sums' tiles plus the products of the parts in tiles 4 to 7.
template <int XT, int WT>
__attribute__((target("amx-tile,amx-bf16"))) inline void products() {
  _tile_dpbf16ps(0, 4, 6);
  if (WT == 2) _tile_dpbf16ps(1, 4, 7);
  if (XT == 2) _tile_dpbf16ps(2, 5, 6);
  if (XT == 2 && WT == 2) _tile_dpbf16ps(3, 5, 7);
}

// XT tiles of x (16 rows each, packs xstride values apart) by WT tiles of
// W (wstride apart) over every step, in T terms, stored into c: tile
// (a, b) at rows 16a, columns 16b. Tiles 4 and 5 hold x's parts, 6 and 7
// W's, 0 to 3 the sums (x tile a by W tile b in tile 2a + b).
template <int T, int XT, int WT>
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void block(const uint16_t* x, size_t xstride,
                                                                 const uint16_t* w, size_t wstride,
                                                                 int steps, float* c, size_t ldc) {
  constexpr size_t tile = 512;
  constexpr size_t xstep = (T == 1 ? 1 : 2) * tile, wstep = (T == 3 ? 2 : 1) * tile;
  _tile_zero(0);
  if (WT == 2) _tile_zero(1);
  if (XT == 2) _tile_zero(2);
  if (XT == 2 && WT == 2) _tile_zero(3);
  for (int s = 0; s < steps; s++) {
    const uint16_t* xs = x + s * xstep;
    const uint16_t* ws = w + s * wstep;
    // x hi by W lo first (three terms), then x hi by W hi, then x lo by W
    // hi: the parts loaded in that order are reused across the products
    // (8 loads for 12 products).
    _tile_loadd(4, xs, 64);
    if (XT == 2) _tile_loadd(5, xs + xstride, 64);
    if (T == 3) {
      _tile_loadd(6, ws + tile, 64);
      if (WT == 2) _tile_loadd(7, ws + wstride + tile, 64);
      products<XT, WT>();
    }
    _tile_loadd(6, ws, 64);
    if (WT == 2) _tile_loadd(7, ws + wstride, 64);
    products<XT, WT>();
    if (T >= 2) {
      _tile_loadd(4, xs + tile, 64);
      if (XT == 2) _tile_loadd(5, xs + xstride + tile, 64);
      products<XT, WT>();
    }
  }
  const size_t stride = ldc * sizeof(float);
  _tile_stored(0, c, stride);
  if (WT == 2) _tile_stored(1, c + 16, stride);
  if (XT == 2) _tile_stored(2, c + 16 * ldc, stride);
  if (XT == 2 && WT == 2) _tile_stored(3, c + 16 * ldc + 16, stride);
}

template <int T>
void sweep(const XTiles& x, const uint16_t* w, int wt, float* c, size_t ldc) {
  const size_t xstride = static_cast<size_t>(x.steps) * x.parts() * 512;
  const size_t wstride = tiles_w_size(x.K, T);
  const int xtiles = x.tiles();
  for (int x0 = 0; x0 < xtiles; x0 += 2) {
    const uint16_t* xp = x.v.data() + x0 * xstride;
    const bool x2 = x0 + 1 < xtiles;
    for (int w0 = 0; w0 < wt; w0 += 2) {
      const uint16_t* wp = w + w0 * wstride;
      float* cp = c + static_cast<size_t>(x0) * 16 * ldc + w0 * 16;
      const bool w2 = w0 + 1 < wt;
      if (x2 && w2) {
        block<T, 2, 2>(xp, xstride, wp, wstride, x.steps, cp, ldc);
      } else if (x2) {
        block<T, 2, 1>(xp, xstride, wp, wstride, x.steps, cp, ldc);
      } else if (w2) {
        block<T, 1, 2>(xp, xstride, wp, wstride, x.steps, cp, ldc);
      } else {
        block<T, 1, 1>(xp, xstride, wp, wstride, x.steps, cp, ldc);
      }
    }
  }
}

}  // namespace

bool cpu_has_amx_bf16() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    const bool tile = (d & (1u << 24)) != 0, bf16 = (d & (1u << 22)) != 0;
    const bool avx512 = (b & (1u << 16)) != 0 && (b & (1u << 30)) != 0;  // F, BW
    if (!tile || !bf16 || !avx512) return false;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0) return false;
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    // SSE, AVX, AVX-512's three components, and the tile configuration and
    // data (the data's permission is asked for next).
    if ((lo & 0xe6) != 0xe6 || (lo & (3u << 17)) != (3u << 17)) return false;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0;
  }();
  return ok;
}

size_t tiles_w_size(int K, int terms) {
  return static_cast<size_t>((K + 31) / 32) * (terms == 3 ? 2 : 1) * 512;
}

__attribute__((target("avx512f,avx512bw"))) void tiles_pack_w(const float* const* rows, int K,
                                                              int terms, uint16_t* dst) {
  const int steps = (K + 31) / 32, parts = terms == 3 ? 2 : 1;
  __m512i hi[16], lo[16];
  for (int s = 0; s < steps; s++) {
    // Each row's 32 values as 16 pairs, then the pairs of each k side by
    // side: the tile's row kp holds pair kp of the 16 rows.
    for (int r = 0; r < 16; r++) {
      __m512 a0, a1;
      load32(rows[r], s * 32, K, a0, a1);
      hi[r] = part(a0, a1, false);
      if (parts == 2) lo[r] = part(a0, a1, true);
    }
    uint16_t* t = dst + static_cast<size_t>(s) * parts * 512;
    transpose16(hi);
    for (int kp = 0; kp < 16; kp++) _mm512_storeu_si512(t + kp * 32, hi[kp]);
    if (parts == 2) {
      transpose16(lo);
      for (int kp = 0; kp < 16; kp++) _mm512_storeu_si512(t + 512 + kp * 32, lo[kp]);
    }
  }
}

void tiles_shape_x(int M, int K, int terms, XTiles& out) {
  out.M = M;
  out.K = K;
  out.terms = terms;
  out.steps = (K + 31) / 32;
  const size_t per_tile = static_cast<size_t>(out.steps) * out.parts() * 512;
  out.v.resize(static_cast<size_t>(out.tiles()) * per_tile);
  if (M % 16 != 0) {
    std::memset(out.v.data() + (out.tiles() - 1) * per_tile, 0, per_tile * sizeof(uint16_t));
  }
}

__attribute__((target("avx512f,avx512bw"))) void tiles_pack_x(const float* x, size_t ldx,
                                                              int m_lo, int m_hi, XTiles& out) {
  const int parts = out.parts();
  const size_t per_tile = static_cast<size_t>(out.steps) * parts * 512;
  for (int m = m_lo; m < m_hi; m++) {
    const float* row = x + static_cast<size_t>(m) * ldx;
    uint16_t* base = out.v.data() + (m / 16) * per_tile + (m % 16) * 32;
    for (int s = 0; s < out.steps; s++) {
      __m512 a0, a1;
      load32(row, s * 32, out.K, a0, a1);
      for (int p = 0; p < parts; p++) {
        _mm512_storeu_si512(base + (static_cast<size_t>(s) * parts + p) * 512, part(a0, a1, p == 1));
      }
    }
  }
}

__attribute__((target("amx-tile,amx-bf16,avx512f"))) void tiles_sweep(const XTiles& x,
                                                                       const uint16_t* w, int wt,
                                                                       float* c, size_t ldc) {
  static const TileConfig config;
  _tile_loadconfig(&config);
  switch (x.terms) {
    case 1: sweep<1>(x, w, wt, c, ldc); break;
    case 2: sweep<2>(x, w, wt, c, ldc); break;
    default: sweep<3>(x, w, wt, c, ldc); break;
  }
  _tile_release();
}

}  // namespace archgen
