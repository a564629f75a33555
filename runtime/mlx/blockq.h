// llama.cpp's block-quantized tensor types (the quantized types of GGUF
// files), read by archgen's CPU kernels in their own layout: a row of W is
// a run of blocks, each a fixed number of values (32, or 256 in the
// K-quants' super-blocks) in a fixed number of bytes. The kernels decode
// 32 values at a time (a chunk: a block, or an eighth of a super-block)
// into four float32 vectors, with the same float32 operations in the same
// order as llama.cpp's reference dequantization (gguf-py's numpy code), so
// a decoded value equals its reference to the bit; products add those
// values times x with fused multiply-adds.
//
// The layouts (bytes in order, little-endian; f16 is an IEEE half):
//   Q4_0   32 values, 18 bytes: f16 d, 16 bytes of 4-bit q (value i in the
//          low nibble of byte i, value 16+i in the high): d * (q - 8)
//   Q4_1   32, 20: f16 d, f16 m, 16 nibble bytes: d * q + m
//   Q5_0   32, 22: f16 d, a 32-bit word of fifth bits (bit i: value i), 16
//          nibble bytes: d * (q - 16)
//   Q5_1   32, 24: f16 d, f16 m, the fifth bits, 16 nibble bytes: d * q + m
//   Q8_0   32, 34: f16 d, 32 int8 q: q * d
//   Q2_K   256, 84: 16 bytes of 4-bit scale (low) and min (high) per group
//          of 16, 64 bytes of 2-bit q, f16 d, f16 dmin: (d sc) q - (dmin m)
//   Q3_K   256, 110: 32 bytes of high bits, 64 bytes of 2-bit q, 12 bytes
//          of sixteen 6-bit scales, f16 d: (d (sc - 32)) (q - 4 [high bit
//          clear])
//   Q4_K   256, 144: f16 d, f16 dmin, 12 bytes of eight 6-bit scales and
//          mins (groups of 32), 128 nibble bytes: (d sc) q - (dmin m)
//   Q5_K   256, 176: as Q4_K with 32 bytes of fifth bits before the nibbles
//   Q6_K   256, 210: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16
//          int8 scales (groups of 16), f16 d: (d sc) (q - 32)
//   IQ4_NL 32, 18: f16 d, 16 nibble bytes indexing a 16-value codebook:
//          d * kv[q]
//   IQ4_XS 256, 136: f16 d, 16 bits and 4 bytes of eight 6-bit scales
//          (groups of 32), 128 nibble bytes: (d (sc - 32)) kv[q]
//   MXFP4  32, 17: an E8M0 exponent, 16 nibble bytes of E2M1 codes
#ifndef ARCHGEN_MLX_BLOCKQ_H
#define ARCHGEN_MLX_BLOCKQ_H

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace archgen {

// llama.cpp's codes of the types.
enum BlockCode : int {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kMXFP4 = 39,
};

struct BlockFormat {
  int values;  // per block; 0 for a code the kernels do not read
  int bytes;
};

inline BlockFormat block_format(int code) {
  switch (code) {
    case kQ4_0: return {32, 18};
    case kQ4_1: return {32, 20};
    case kQ5_0: return {32, 22};
    case kQ5_1: return {32, 24};
    case kQ8_0: return {32, 34};
    case kQ2_K: return {256, 84};
    case kQ3_K: return {256, 110};
    case kQ4_K: return {256, 144};
    case kQ5_K: return {256, 176};
    case kQ6_K: return {256, 210};
    case kIQ4_NL: return {32, 18};
    case kIQ4_XS: return {256, 136};
    case kMXFP4: return {32, 17};
  }
  return {0, 0};
}

// The bytes of a row of k values of type code (k a multiple of its block).
inline int64_t block_row_bytes(int code, int64_t k) {
  BlockFormat f = block_format(code);
  return f.values == 0 ? 0 : k / f.values * f.bytes;
}

// The values and bytes of a block of type T.
template <int T>
constexpr BlockFormat kFormat = T == kQ4_0    ? BlockFormat{32, 18}
                                : T == kQ4_1  ? BlockFormat{32, 20}
                                : T == kQ5_0  ? BlockFormat{32, 22}
                                : T == kQ5_1  ? BlockFormat{32, 24}
                                : T == kQ8_0  ? BlockFormat{32, 34}
                                : T == kQ2_K  ? BlockFormat{256, 84}
                                : T == kQ3_K  ? BlockFormat{256, 110}
                                : T == kQ4_K  ? BlockFormat{256, 144}
                                : T == kQ5_K  ? BlockFormat{256, 176}
                                : T == kQ6_K  ? BlockFormat{256, 210}
                                : T == kIQ4_NL ? BlockFormat{32, 18}
                                : T == kIQ4_XS ? BlockFormat{256, 136}
                                               : BlockFormat{32, 17};

#define ARCHGEN_BQ __attribute__((target("avx2,fma,f16c"))) inline

ARCHGEN_BQ float bq_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 16 bytes of int8 values into two vectors of float32.
ARCHGEN_BQ void bq_widen(__m128i b, __m256* v) {
  v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
}

// The low and high nibbles of 16 bytes.
ARCHGEN_BQ __m128i bq_lo(__m128i b) { return _mm_and_si128(b, _mm_set1_epi8(0x0F)); }
ARCHGEN_BQ __m128i bq_hi(__m128i b) {
  return _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
}

// Bits 0..15 of m as 16 bytes, 0x10 where the bit is set.
ARCHGEN_BQ __m128i bq_fifth(uint32_t m) {
  const __m128i spread = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m128i sel = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(m & 0xFFFF)), spread);
  b = _mm_cmpeq_epi8(_mm_and_si128(b, sel), sel);
  return _mm_and_si128(b, _mm_set1_epi8(0x10));
}

ARCHGEN_BQ __m128i bq_load(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// 16 bytes shifted right by s bits and masked to mask, byte by byte.
ARCHGEN_BQ __m128i bq_bits(__m128i b, int s, int mask) {
  return _mm_and_si128(_mm_srl_epi16(b, _mm_cvtsi32_si128(s)), _mm_set1_epi8(static_cast<char>(mask)));
}

// The sixteen values of IQ4_NL's and IQ4_XS's codebook, and the doubled
// E2M1 values of MXFP4.
ARCHGEN_BQ __m128i bq_iq4_table() {
  return _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}
ARCHGEN_BQ __m128i bq_fp4_table() {
  return _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
}

// The 6-bit scale and min of group j (0..7) of a Q4_K or Q5_K super-block.
inline void bq_scale_min_k4(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// chunk<T> decodes chunk c (values 32c..32c+31) of the block at b into w.
template <int T>
ARCHGEN_BQ void chunk(const uint8_t* b, int c, __m256* w);

template <>
ARCHGEN_BQ void chunk<kQ4_0>(const uint8_t* b, int, __m256* w) {
  const __m256 d = _mm256_set1_ps(bq_half(b));
  const __m128i q = bq_load(b + 2), eight = _mm_set1_epi8(8);
  bq_widen(_mm_sub_epi8(bq_lo(q), eight), w);
  bq_widen(_mm_sub_epi8(bq_hi(q), eight), w + 2);
  for (int i = 0; i < 4; i++) w[i] = _mm256_mul_ps(d, w[i]);
}

template <>
ARCHGEN_BQ void chunk<kQ4_1>(const uint8_t* b, int, __m256* w) {
  const __m256 d = _mm256_set1_ps(bq_half(b)), m = _mm256_set1_ps(bq_half(b + 2));
  const __m128i q = bq_load(b + 4);
  bq_widen(bq_lo(q), w);
  bq_widen(bq_hi(q), w + 2);
  for (int i = 0; i < 4; i++) w[i] = _mm256_add_ps(_mm256_mul_ps(d, w[i]), m);
}

template <>
ARCHGEN_BQ void chunk<kQ5_0>(const uint8_t* b, int, __m256* w) {
  const __m256 d = _mm256_set1_ps(bq_half(b));
  uint32_t h;
  std::memcpy(&h, b + 2, 4);
  const __m128i q = bq_load(b + 6), sixteen = _mm_set1_epi8(16);
  bq_widen(_mm_sub_epi8(_mm_or_si128(bq_lo(q), bq_fifth(h)), sixteen), w);
  bq_widen(_mm_sub_epi8(_mm_or_si128(bq_hi(q), bq_fifth(h >> 16)), sixteen), w + 2);
  for (int i = 0; i < 4; i++) w[i] = _mm256_mul_ps(d, w[i]);
}

template <>
ARCHGEN_BQ void chunk<kQ5_1>(const uint8_t* b, int, __m256* w) {
  const __m256 d = _mm256_set1_ps(bq_half(b)), m = _mm256_set1_ps(bq_half(b + 2));
  uint32_t h;
  std::memcpy(&h, b + 4, 4);
  const __m128i q = bq_load(b + 8);
  bq_widen(_mm_or_si128(bq_lo(q), bq_fifth(h)), w);
  bq_widen(_mm_or_si128(bq_hi(q), bq_fifth(h >> 16)), w + 2);
  for (int i = 0; i < 4; i++) w[i] = _mm256_add_ps(_mm256_mul_ps(d, w[i]), m);
}

template <>
ARCHGEN_BQ void chunk<kQ8_0>(const uint8_t* b, int, __m256* w) {
  const __m256 d = _mm256_set1_ps(bq_half(b));
  bq_widen(bq_load(b + 2), w);
  bq_widen(bq_load(b + 18), w + 2);
  for (int i = 0; i < 4; i++) w[i] = _mm256_mul_ps(w[i], d);
}

template <>
ARCHGEN_BQ void chunk<kQ2_K>(const uint8_t* b, int c, __m256* w) {
  const int h = c / 4, j = c % 4;
  const float d = bq_half(b + 80), dmin = bq_half(b + 82);
  const uint8_t* q = b + 16 + h * 32;
  bq_widen(bq_bits(bq_load(q), 2 * j, 3), w);
  bq_widen(bq_bits(bq_load(q + 16), 2 * j, 3), w + 2);
  for (int g = 0; g < 2; g++) {
    const int sc = b[c * 2 + g];
    const __m256 dl = _mm256_set1_ps(d * static_cast<float>(sc & 0x0F));
    const __m256 ml = _mm256_set1_ps(dmin * static_cast<float>(sc >> 4));
    w[2 * g] = _mm256_sub_ps(_mm256_mul_ps(dl, w[2 * g]), ml);
    w[2 * g + 1] = _mm256_sub_ps(_mm256_mul_ps(dl, w[2 * g + 1]), ml);
  }
}

// The 6-bit scale of group g (0..15) of a Q3_K super-block, less 32.
inline int bq_scale_k3(const uint8_t* s, int g) {
  const int lo = g < 8 ? (s[g] & 0x0F) : (s[g - 8] >> 4);
  const int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
  return static_cast<int8_t>(lo | (hi << 4)) - 32;
}

template <>
ARCHGEN_BQ void chunk<kQ3_K>(const uint8_t* b, int c, __m256* w) {
  const int h = c / 4, j = c % 4;
  const float d = bq_half(b + 108);
  const uint8_t* q = b + 32 + h * 32;
  const __m128i four = _mm_set1_epi8(4);
  for (int half = 0; half < 2; half++) {
    __m128i lo = bq_bits(bq_load(q + 16 * half), 2 * j, 3);
    __m128i hb = bq_bits(bq_load(b + 16 * half), c, 1);
    bq_widen(_mm_sub_epi8(_mm_add_epi8(lo, _mm_slli_epi16(hb, 2)), four), w + 2 * half);
  }
  for (int g = 0; g < 2; g++) {
    const __m256 dl = _mm256_set1_ps(d * static_cast<float>(bq_scale_k3(b + 96, 2 * c + g)));
    w[2 * g] = _mm256_mul_ps(dl, w[2 * g]);
    w[2 * g + 1] = _mm256_mul_ps(dl, w[2 * g + 1]);
  }
}

template <>
ARCHGEN_BQ void chunk<kQ4_K>(const uint8_t* b, int c, __m256* w) {
  int sc, m;
  bq_scale_min_k4(b + 4, c, &sc, &m);
  const __m256 dl = _mm256_set1_ps(bq_half(b) * static_cast<float>(sc));
  const __m256 ml = _mm256_set1_ps(bq_half(b + 2) * static_cast<float>(m));
  const uint8_t* q = b + 16 + (c / 2) * 32;
  const int s = 4 * (c % 2);
  bq_widen(bq_bits(bq_load(q), s, 0x0F), w);
  bq_widen(bq_bits(bq_load(q + 16), s, 0x0F), w + 2);
  for (int i = 0; i < 4; i++) w[i] = _mm256_sub_ps(_mm256_mul_ps(dl, w[i]), ml);
}

template <>
ARCHGEN_BQ void chunk<kQ5_K>(const uint8_t* b, int c, __m256* w) {
  int sc, m;
  bq_scale_min_k4(b + 4, c, &sc, &m);
  const __m256 dl = _mm256_set1_ps(bq_half(b) * static_cast<float>(sc));
  const __m256 ml = _mm256_set1_ps(bq_half(b + 2) * static_cast<float>(m));
  const uint8_t* q = b + 48 + (c / 2) * 32;
  const int s = 4 * (c % 2);
  for (int half = 0; half < 2; half++) {
    __m128i lo = bq_bits(bq_load(q + 16 * half), s, 0x0F);
    __m128i hb = bq_bits(bq_load(b + 16 + 16 * half), c, 1);
    bq_widen(_mm_or_si128(lo, _mm_slli_epi16(hb, 4)), w + 2 * half);
  }
  for (int i = 0; i < 4; i++) w[i] = _mm256_sub_ps(_mm256_mul_ps(dl, w[i]), ml);
}

template <>
ARCHGEN_BQ void chunk<kQ6_K>(const uint8_t* b, int c, __m256* w) {
  const int h = c / 4, j = c % 4;
  const float d = bq_half(b + 208);
  const uint8_t* ql = b + h * 64 + (j % 2) * 32;
  const uint8_t* qh = b + 128 + h * 32;
  const __m128i off = _mm_set1_epi8(32);
  for (int half = 0; half < 2; half++) {
    __m128i lo = bq_bits(bq_load(ql + 16 * half), 4 * (j / 2), 0x0F);
    __m128i hi = bq_bits(bq_load(qh + 16 * half), 2 * j, 3);
    bq_widen(_mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), off), w + 2 * half);
  }
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int g = 0; g < 2; g++) {
    const __m256 dl = _mm256_set1_ps(d * static_cast<float>(sc[2 * c + g]));
    w[2 * g] = _mm256_mul_ps(dl, w[2 * g]);
    w[2 * g + 1] = _mm256_mul_ps(dl, w[2 * g + 1]);
  }
}

template <>
ARCHGEN_BQ void chunk<kIQ4_NL>(const uint8_t* b, int, __m256* w) {
  const __m256 d = _mm256_set1_ps(bq_half(b));
  const __m128i q = bq_load(b + 2), t = bq_iq4_table();
  bq_widen(_mm_shuffle_epi8(t, bq_lo(q)), w);
  bq_widen(_mm_shuffle_epi8(t, bq_hi(q)), w + 2);
  for (int i = 0; i < 4; i++) w[i] = _mm256_mul_ps(d, w[i]);
}

template <>
ARCHGEN_BQ void chunk<kIQ4_XS>(const uint8_t* b, int c, __m256* w) {
  uint16_t sh;
  std::memcpy(&sh, b + 2, 2);
  const int ls = ((b[4 + c / 2] >> (4 * (c % 2))) & 0x0F) | (((sh >> (2 * c)) & 3) << 4);
  const __m256 dl = _mm256_set1_ps(bq_half(b) * static_cast<float>(ls - 32));
  const __m128i q = bq_load(b + 8 + 16 * c), t = bq_iq4_table();
  bq_widen(_mm_shuffle_epi8(t, bq_lo(q)), w);
  bq_widen(_mm_shuffle_epi8(t, bq_hi(q)), w + 2);
  for (int i = 0; i < 4; i++) w[i] = _mm256_mul_ps(dl, w[i]);
}

template <>
ARCHGEN_BQ void chunk<kMXFP4>(const uint8_t* b, int, __m256* w) {
  // half of 2^(e - 127), as llama.cpp's E8M0 scale is applied to the
  // doubled codebook
  const uint32_t e = b[0];
  const uint32_t bits = e < 2 ? (0x00200000u << e) : ((e - 1) << 23);
  float df;
  std::memcpy(&df, &bits, 4);
  const __m256 d = _mm256_set1_ps(df);
  const __m128i q = bq_load(b + 1), t = bq_fp4_table();
  bq_widen(_mm_shuffle_epi8(t, bq_lo(q)), w);
  bq_widen(_mm_shuffle_epi8(t, bq_hi(q)), w + 2);
  for (int i = 0; i < 4; i++) w[i] = _mm256_mul_ps(d, w[i]);
}

// qchunk<T> gives chunk c of the block at b as 32 bytes q with, for each
// half of 16 values g, a scale s[g] and a bias o[g] such that value i is
// s[g] q[i] + o[g] (the decoded value up to float32 rounding): the form the
// integer kernels multiply. The bytes are unsigned (0 to 63) where the type
// has an offset or a minimum, signed where its values are (kSigned).
template <int T>
constexpr bool kSigned = T == kQ8_0 || T == kIQ4_NL || T == kIQ4_XS || T == kMXFP4;

template <int T>
ARCHGEN_BQ void qchunk(const uint8_t* b, int c, __m256i* q, float* s, float* o);

ARCHGEN_BQ __m256i bq_join(__m128i lo, __m128i hi) { return _mm256_set_m128i(hi, lo); }

template <>
ARCHGEN_BQ void qchunk<kQ4_0>(const uint8_t* b, int, __m256i* q, float* s, float* o) {
  const __m128i v = bq_load(b + 2);
  *q = bq_join(bq_lo(v), bq_hi(v));
  s[0] = s[1] = bq_half(b);
  o[0] = o[1] = -8 * s[0];
}

template <>
ARCHGEN_BQ void qchunk<kQ4_1>(const uint8_t* b, int, __m256i* q, float* s, float* o) {
  const __m128i v = bq_load(b + 4);
  *q = bq_join(bq_lo(v), bq_hi(v));
  s[0] = s[1] = bq_half(b);
  o[0] = o[1] = bq_half(b + 2);
}

template <>
ARCHGEN_BQ void qchunk<kQ5_0>(const uint8_t* b, int, __m256i* q, float* s, float* o) {
  uint32_t h;
  std::memcpy(&h, b + 2, 4);
  const __m128i v = bq_load(b + 6);
  *q = bq_join(_mm_or_si128(bq_lo(v), bq_fifth(h)), _mm_or_si128(bq_hi(v), bq_fifth(h >> 16)));
  s[0] = s[1] = bq_half(b);
  o[0] = o[1] = -16 * s[0];
}

template <>
ARCHGEN_BQ void qchunk<kQ5_1>(const uint8_t* b, int, __m256i* q, float* s, float* o) {
  uint32_t h;
  std::memcpy(&h, b + 4, 4);
  const __m128i v = bq_load(b + 8);
  *q = bq_join(_mm_or_si128(bq_lo(v), bq_fifth(h)), _mm_or_si128(bq_hi(v), bq_fifth(h >> 16)));
  s[0] = s[1] = bq_half(b);
  o[0] = o[1] = bq_half(b + 2);
}

template <>
ARCHGEN_BQ void qchunk<kQ8_0>(const uint8_t* b, int, __m256i* q, float* s, float* o) {
  *q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  s[0] = s[1] = bq_half(b);
  o[0] = o[1] = 0;
}

template <>
ARCHGEN_BQ void qchunk<kQ2_K>(const uint8_t* b, int c, __m256i* q, float* s, float* o) {
  const int h = c / 4, j = c % 4;
  const float d = bq_half(b + 80), dmin = bq_half(b + 82);
  const uint8_t* p = b + 16 + h * 32;
  *q = bq_join(bq_bits(bq_load(p), 2 * j, 3), bq_bits(bq_load(p + 16), 2 * j, 3));
  for (int g = 0; g < 2; g++) {
    const int sc = b[c * 2 + g];
    s[g] = d * static_cast<float>(sc & 0x0F);
    o[g] = -(dmin * static_cast<float>(sc >> 4));
  }
}

template <>
ARCHGEN_BQ void qchunk<kQ3_K>(const uint8_t* b, int c, __m256i* q, float* s, float* o) {
  const int h = c / 4, j = c % 4;
  const float d = bq_half(b + 108);
  const uint8_t* p = b + 32 + h * 32;
  __m128i half[2];
  for (int i = 0; i < 2; i++) {
    __m128i lo = bq_bits(bq_load(p + 16 * i), 2 * j, 3);
    __m128i hb = bq_bits(bq_load(b + 16 * i), c, 1);
    half[i] = _mm_add_epi8(lo, _mm_slli_epi16(hb, 2));
  }
  *q = bq_join(half[0], half[1]);
  for (int g = 0; g < 2; g++) {
    s[g] = d * static_cast<float>(bq_scale_k3(b + 96, 2 * c + g));
    o[g] = -4 * s[g];
  }
}

template <>
ARCHGEN_BQ void qchunk<kQ4_K>(const uint8_t* b, int c, __m256i* q, float* s, float* o) {
  int sc, m;
  bq_scale_min_k4(b + 4, c, &sc, &m);
  const uint8_t* p = b + 16 + (c / 2) * 32;
  const int sh = 4 * (c % 2);
  *q = bq_join(bq_bits(bq_load(p), sh, 0x0F), bq_bits(bq_load(p + 16), sh, 0x0F));
  s[0] = s[1] = bq_half(b) * static_cast<float>(sc);
  o[0] = o[1] = -(bq_half(b + 2) * static_cast<float>(m));
}

template <>
ARCHGEN_BQ void qchunk<kQ5_K>(const uint8_t* b, int c, __m256i* q, float* s, float* o) {
  int sc, m;
  bq_scale_min_k4(b + 4, c, &sc, &m);
  const uint8_t* p = b + 48 + (c / 2) * 32;
  const int sh = 4 * (c % 2);
  __m128i half[2];
  for (int i = 0; i < 2; i++) {
    __m128i lo = bq_bits(bq_load(p + 16 * i), sh, 0x0F);
    __m128i hb = bq_bits(bq_load(b + 16 + 16 * i), c, 1);
    half[i] = _mm_or_si128(lo, _mm_slli_epi16(hb, 4));
  }
  *q = bq_join(half[0], half[1]);
  s[0] = s[1] = bq_half(b) * static_cast<float>(sc);
  o[0] = o[1] = -(bq_half(b + 2) * static_cast<float>(m));
}

template <>
ARCHGEN_BQ void qchunk<kQ6_K>(const uint8_t* b, int c, __m256i* q, float* s, float* o) {
  const int h = c / 4, j = c % 4;
  const float d = bq_half(b + 208);
  const uint8_t* ql = b + h * 64 + (j % 2) * 32;
  const uint8_t* qh = b + 128 + h * 32;
  __m128i half[2];
  for (int i = 0; i < 2; i++) {
    __m128i lo = bq_bits(bq_load(ql + 16 * i), 4 * (j / 2), 0x0F);
    __m128i hi = bq_bits(bq_load(qh + 16 * i), 2 * j, 3);
    half[i] = _mm_or_si128(lo, _mm_slli_epi16(hi, 4));
  }
  *q = bq_join(half[0], half[1]);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int g = 0; g < 2; g++) {
    s[g] = d * static_cast<float>(sc[2 * c + g]);
    o[g] = -32 * s[g];
  }
}

template <>
ARCHGEN_BQ void qchunk<kIQ4_NL>(const uint8_t* b, int, __m256i* q, float* s, float* o) {
  const __m128i v = bq_load(b + 2), t = bq_iq4_table();
  *q = bq_join(_mm_shuffle_epi8(t, bq_lo(v)), _mm_shuffle_epi8(t, bq_hi(v)));
  s[0] = s[1] = bq_half(b);
  o[0] = o[1] = 0;
}

template <>
ARCHGEN_BQ void qchunk<kIQ4_XS>(const uint8_t* b, int c, __m256i* q, float* s, float* o) {
  uint16_t sh;
  std::memcpy(&sh, b + 2, 2);
  const int ls = ((b[4 + c / 2] >> (4 * (c % 2))) & 0x0F) | (((sh >> (2 * c)) & 3) << 4);
  const __m128i v = bq_load(b + 8 + 16 * c), t = bq_iq4_table();
  *q = bq_join(_mm_shuffle_epi8(t, bq_lo(v)), _mm_shuffle_epi8(t, bq_hi(v)));
  s[0] = s[1] = bq_half(b) * static_cast<float>(ls - 32);
  o[0] = o[1] = 0;
}

template <>
ARCHGEN_BQ void qchunk<kMXFP4>(const uint8_t* b, int, __m256i* q, float* s, float* o) {
  const uint32_t e = b[0];
  const uint32_t bits = e < 2 ? (0x00200000u << e) : ((e - 1) << 23);
  float df;
  std::memcpy(&df, &bits, 4);
  const __m128i v = bq_load(b + 1), t = bq_fp4_table();
  *q = bq_join(_mm_shuffle_epi8(t, bq_lo(v)), _mm_shuffle_epi8(t, bq_hi(v)));
  s[0] = s[1] = df;
  o[0] = o[1] = 0;
}

// qblock<T> gives every chunk of the block at b as qchunk does (q[c], and
// s and o at 2c and 2c + 1): for the K-quants, the super-block's shared
// scales and bytes are read once for its eight chunks.
template <int T>
ARCHGEN_BQ void qblock(const uint8_t* b, __m256i* q, float* s, float* o) {
  for (int c = 0; c < kFormat<T>.values / 32; c++) qchunk<T>(b, c, q + c, s + 2 * c, o + 2 * c);
}

ARCHGEN_BQ __m256i bq_load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The eight 6-bit scales and mins of a Q4_K or Q5_K super-block times d
// and -dmin, each twice (a chunk's two halves share them), into s and o:
// bq_scale_min_k4 for all eight at once, on 32-bit words.
ARCHGEN_BQ void bq_scales_k4(const uint8_t* b, float* s, float* o) {
  uint32_t w[3];
  std::memcpy(w, b + 4, 12);
  const uint32_t sc_lo = w[0] & 0x3F3F3F3F, m_lo = w[1] & 0x3F3F3F3F;
  const uint32_t sc_hi = (w[2] & 0x0F0F0F0F) | ((w[0] >> 2) & 0x30303030);
  const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0F) | ((w[1] >> 2) & 0x30303030);
  const __m256 d = _mm256_set1_ps(bq_half(b)), dmin = _mm256_set1_ps(bq_half(b + 2));
  const __m128i sc = _mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo));
  const __m128i m = _mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo));
  const __m128i sc2 = _mm_unpacklo_epi8(sc, sc), m2 = _mm_unpacklo_epi8(m, m);
  for (int h = 0; h < 2; h++) {
    const __m256 sv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(h ? _mm_srli_si128(sc2, 8) : sc2));
    const __m256 mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(h ? _mm_srli_si128(m2, 8) : m2));
    _mm256_storeu_ps(s + 8 * h, _mm256_mul_ps(d, sv));
    _mm256_storeu_ps(o + 8 * h, _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(dmin, mv)));
  }
}

template <>
ARCHGEN_BQ void qblock<kQ4_K>(const uint8_t* b, __m256i* q, float* s, float* o) {
  bq_scales_k4(b, s, o);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int p = 0; p < 4; p++) {
    const __m256i v = bq_load32(b + 16 + 32 * p);
    q[2 * p] = _mm256_and_si256(v, m4);
    q[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
}

template <>
ARCHGEN_BQ void qblock<kQ5_K>(const uint8_t* b, __m256i* q, float* s, float* o) {
  bq_scales_k4(b, s, o);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  const __m256i qh = bq_load32(b + 16);
  // bit c of qh, moved to bit 4: chunk c's fifth bit
  const __m256i h[8] = {_mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 3), _mm256_slli_epi16(qh, 2),
                        _mm256_slli_epi16(qh, 1), qh,                      _mm256_srli_epi16(qh, 1),
                        _mm256_srli_epi16(qh, 2), _mm256_srli_epi16(qh, 3)};
  for (int p = 0; p < 4; p++) {
    const __m256i v = bq_load32(b + 48 + 32 * p);
    q[2 * p] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(h[2 * p], m10));
    q[2 * p + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                   _mm256_and_si256(h[2 * p + 1], m10));
  }
}

template <>
ARCHGEN_BQ void qblock<kQ6_K>(const uint8_t* b, __m256i* q, float* s, float* o) {
  const __m256 d = _mm256_set1_ps(bq_half(b + 208)), off = _mm256_set1_ps(-32);
  const __m128i sc = bq_load(b + 192);
  for (int h = 0; h < 2; h++) {
    const __m256 sv = _mm256_mul_ps(
        d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h ? _mm_srli_si128(sc, 8) : sc)));
    _mm256_storeu_ps(s + 8 * h, sv);
    _mm256_storeu_ps(o + 8 * h, _mm256_mul_ps(off, sv));
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  for (int h = 0; h < 2; h++) {
    const __m256i l0 = bq_load32(b + 64 * h), l1 = bq_load32(b + 64 * h + 32);
    const __m256i qh = bq_load32(b + 128 + 32 * h);
    // chunk j's two high bits are bits 2j, 2j + 1 of qh, moved to bits 4, 5
    q[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
    q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
    q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
    q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
  }
}

// Chunk i of a row of type T.
template <int T>
ARCHGEN_BQ void row_chunk(const uint8_t* row, int i, __m256* w) {
  constexpr BlockFormat f = kFormat<T>;
  constexpr int per = f.values / 32;
  chunk<T>(row + static_cast<size_t>(i / per) * f.bytes, i % per, w);
}

// Calls f.template operator()<T>() for the type code (false when the code
// is not a type the kernels read).
template <typename F>
bool with_block_type(int code, F&& f) {
  switch (code) {
    case kQ4_0: f.template operator()<kQ4_0>(); return true;
    case kQ4_1: f.template operator()<kQ4_1>(); return true;
    case kQ5_0: f.template operator()<kQ5_0>(); return true;
    case kQ5_1: f.template operator()<kQ5_1>(); return true;
    case kQ8_0: f.template operator()<kQ8_0>(); return true;
    case kQ2_K: f.template operator()<kQ2_K>(); return true;
    case kQ3_K: f.template operator()<kQ3_K>(); return true;
    case kQ4_K: f.template operator()<kQ4_K>(); return true;
    case kQ5_K: f.template operator()<kQ5_K>(); return true;
    case kQ6_K: f.template operator()<kQ6_K>(); return true;
    case kIQ4_NL: f.template operator()<kIQ4_NL>(); return true;
    case kIQ4_XS: f.template operator()<kIQ4_XS>(); return true;
    case kMXFP4: f.template operator()<kMXFP4>(); return true;
  }
  return false;
}

enum class Kind;

// Rows of x prepared for the integer kernels (block_rows_q16): each 32
// values on a grid of 16-bit integers, the step of a chunk its largest
// magnitude over 32767 (values rounded to nearest), and the sums of each
// 16 rounded values, for the biases.
struct XB16 {
  int M = 0, K = 0;
  std::vector<int16_t> q;   // [M, K]
  std::vector<float> step;  // [M, K / 32]
  std::vector<float> sum;   // [M, K / 16]
  // Each value v as signed bytes l and h, v = 256 h + l, per 64 values
  // their l then their h ([M, K / 64, 2, 64]), where a kernel reads them
  // (block_prepare_x); empty otherwise.
  std::vector<int8_t> planes;
  // Whether the AVX-512 kernels read the planes (block_prepare_x's wide).
  bool wide = false;
};

// Puts M rows of K values (K a multiple of 32) on the grid into out, with
// the byte planes where K is a multiple of 64 and the AVX-512 kernels read
// them (wide), or where K is a multiple of 256 and planes asks for them (the
// AVX2 kernels of block_planes_avx2's types).
void block_prepare_x(const float* x, int M, int K, bool wide, bool planes, XB16& out);

// Whether the AVX2 kernels read the byte planes of x for W of this type
// (llama.cpp's code): Q4_K, Q5_K and Q6_K.
bool block_planes_avx2(int code);

// The same rows rounded to the grid, as float32 (where the panels multiply
// more rows of x, so that a product does not depend on the rows beside it).
void block_round_x(const float* x, int M, int K, float* out);

// x W^T for rows [n_lo, n_hi) of a block-quantized W [N, K] (rows of
// row_bytes) against the rows of x, out [M, N] of kind ok, on the integer
// grid of x: each chunk's signed bytes times x's 16-bit values summed
// exactly in 32-bit integers, scaled by the chunk's scales times x's step,
// plus the biases times x's sums. With x's byte planes, on AVX-512 with
// VNNI: two chunks a register, four bytes of W (unsigned: the signed types
// offset by 128, the offset taken back in the biases) times four of each
// plane a lane (vpdpbusd), 256 times the high sums plus the low; with AVX2
// otherwise, W's bytes widened to 16 bits against x's values.
void block_rows_q16(int code, const XB16& x, const uint8_t* w, int64_t row_bytes, void* out,
                    Kind ok, int N, int n_lo, int n_hi);

// The values a scale of type code's blocks holds for the integer panels
// (qmv16.h's qmm16_block_rows): 16 for Q2_K, Q3_K and Q6_K, 32 for the
// others.
int block_codes_group(int code);

// A row of k values of type code as unsigned bytes and a scale and offset
// per block_codes_group(code) values (value = s * code + o): the signed
// types' bytes offset by 128, their offsets taking it back.
void block_codes_row(int code, const uint8_t* row, int k, uint8_t* codes, float* s, float* o);

// Decodes a row of k values of type code into dst.
void block_dequant_row(int code, const uint8_t* row, float* dst, int k);

}  // namespace archgen

#endif
