// The register-blocked float32 matrix product the CPU kernels of this
// package share (qmm.cpp, gqmm.cpp): rows of a weight matrix packed into
// panels of NR columns, swept by a micro-kernel over MR rows of the input
// at a time, and a horizontal sum; its 8 x 8 transpose in registers serves
// recurrent.cpp's state lanes too.
#ifndef ARCHGEN_MLX_PANEL_H
#define ARCHGEN_MLX_PANEL_H

#include <immintrin.h>

#include <cstddef>

namespace archgen {

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr int NR = 16;  // columns of the output (rows of W) per packed panel
constexpr int MR = 6;   // rows of x per call of the micro-kernel

// The 8x8 transpose of r in registers: afterwards r[c] holds what was
// column c (lane i: row i's element c).
__attribute__((target("avx2,fma"))) inline void transpose8_regs(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  // t0 = a0 b0 a1 b1 | a4 b4 a5 b5, t1 = a2 b2 a3 b3 | a6 b6 a7 b7, ...
  __m256 s0 = _mm256_shuffle_ps(t[0], t[2], 0x44), s1 = _mm256_shuffle_ps(t[0], t[2], 0xee);
  __m256 s2 = _mm256_shuffle_ps(t[1], t[3], 0x44), s3 = _mm256_shuffle_ps(t[1], t[3], 0xee);
  __m256 s4 = _mm256_shuffle_ps(t[4], t[6], 0x44), s5 = _mm256_shuffle_ps(t[4], t[6], 0xee);
  __m256 s6 = _mm256_shuffle_ps(t[5], t[7], 0x44), s7 = _mm256_shuffle_ps(t[5], t[7], 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// The transpose of an 8x8 block: dst[c * ldd + r] = src[r][c] for the 8
// rows src[0..8), each read from its own pointer.
__attribute__((target("avx2,fma,f16c"))) inline void transpose8(const float* const* src, size_t k,
                                                               float* dst, size_t ldd) {
  __m256 r[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src[i] + k);
  transpose8_regs(r);
  for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + i * ldd, r[i]);
}

// Packs NR rows of W (rows[r], K float32 values each) into panel[k * NR +
// r]: the layout the micro-kernel reads one k at a time.
__attribute__((target("avx2,fma,f16c"))) inline void pack_panel(const float* const* rows, int K,
                                                         float* panel) {
  for (int k = 0; k < K; k += 8) {
    transpose8(rows, k, panel + static_cast<size_t>(k) * NR, NR);
    transpose8(rows + 8, k, panel + static_cast<size_t>(k) * NR + 8, NR);
  }
}

// c[i][0..NR) = sum_k x[i * ldx + k] * panel[k][0..NR) for MB rows of x:
// MB x 16 outputs held in 2 * MB registers, one broadcast of x and two
// loads of the panel per 2 * MB fused multiply-adds.
template <int MB>
__attribute__((target("avx2,fma,f16c"))) inline void micro(const float* x, size_t ldx, const float* panel,
                                                   int K, float* c /* [MB][NR] */) {
  // The loops over MB are unrolled so that the accumulators live in
  // registers.
  __m256 acc[MB][2];
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int k = 0; k < K; k++) {
    __m256 b0 = _mm256_loadu_ps(panel + static_cast<size_t>(k) * NR);
    __m256 b1 = _mm256_loadu_ps(panel + static_cast<size_t>(k) * NR + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MB; i++) {
      __m256 a = _mm256_broadcast_ss(x + i * ldx + k);
      acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB; i++) {
    _mm256_storeu_ps(c + i * NR, acc[i][0]);
    _mm256_storeu_ps(c + i * NR + 8, acc[i][1]);
  }
}

// MR512x2 rows of x per call of micro512x2.
constexpr int MR512x2 = 8;

// micro on AVX-512 over two panels side by side (a, then b: 32 outputs a
// row of x, each panel row one 16-lane register), MB rows at once: two
// loads of the panels and MB broadcasts per 2 * MB fused multiply-adds.
// Each output lane takes the same fused multiply-adds in the same order of
// k as in micro, so the results are micro's to the bit.
template <int MB>
__attribute__((target("avx512f,avx2,fma,f16c"))) inline void micro512x2(
    const float* x, size_t ldx, const float* a, const float* b, int K, float* c /* [MB][2 * NR] */) {
  static_assert(NR == 16, "a panel row is one 16-lane register");
  __m512 acc[MB][2];
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int k = 0; k < K; k++) {
    const __m512 b0 = _mm512_loadu_ps(a + static_cast<size_t>(k) * NR);
    const __m512 b1 = _mm512_loadu_ps(b + static_cast<size_t>(k) * NR);
#pragma GCC unroll 16
    for (int i = 0; i < MB; i++) {
      const __m512 xv = _mm512_set1_ps(x[i * ldx + k]);
      acc[i][0] = _mm512_fmadd_ps(xv, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xv, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MB; i++) {
    _mm512_storeu_ps(c + i * 2 * NR, acc[i][0]);
    _mm512_storeu_ps(c + i * 2 * NR + NR, acc[i][1]);
  }
}

}  // namespace archgen

#endif
