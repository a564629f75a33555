// AVX-512 register pieces the kernels of this package share.
#ifndef ARCHGEN_MLX_AVX512_H
#define ARCHGEN_MLX_AVX512_H

#include <immintrin.h>

namespace archgen {

// The transpose of 16 rows of 16 32-bit entries in registers: afterwards
// r[c] holds what was column c (lane i: row i's entry c).
__attribute__((target("avx512f"))) inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // In each 128-bit lane L of u[4i + j]: rows 4i..4i+3 of column 4L + j.
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Column 4L + j gathers lane L of u[j], u[4 + j], u[8 + j], u[12 + j].
  for (int j = 0; j < 4; j++) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    r[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    r[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
}

}  // namespace archgen

#endif
