// The row kernels over llama.cpp's block-quantized types (blockq.h): a row
// decoded into float32 (for the panels and for decoding), and products of
// few rows of x on a 16-bit integer grid, read from the blocks.
#include "blockq.h"

#include <algorithm>

#include "cpukern.h"

namespace archgen {

namespace {

template <int T>
__attribute__((target("avx2,fma,f16c"))) void dequant_row_t(const uint8_t* row, float* dst, int k) {
  __m256 w[4];
  for (int i = 0; i < k / 32; i++) {
    row_chunk<T>(row, i, w);
    for (int v = 0; v < 4; v++) _mm256_storeu_ps(dst + 32 * i + 8 * v, w[v]);
  }
}

}  // namespace

void block_dequant_row(int code, const uint8_t* row, float* dst, int k) {
  with_block_type(code, [&]<int T>() { dequant_row_t<T>(row, dst, k); });
}

}  // namespace archgen

namespace archgen {

namespace {

// x's grid: values within +-kGrid steps, so that each splits into two
// signed bytes for the AVX-512 kernel (h = (v - l) / 256 within +-127).
constexpr float kGrid = 32639.0f;

// W streams from memory once a step: the kernels ask for it kPrefetch
// bytes ahead of their reads, into L2 (as qmv16.cpp does, and for the same
// reason: the hardware prefetchers alone leave the kernel waiting), a line
// at a time as they go, so that the requests spread over the reads (a
// row's worth asked for at once stalled on the full miss queue).
constexpr int64_t kPrefetch = 8192;

// Asks for each line from *pf up to end, and moves *pf there.
inline void prefetch_to(const uint8_t** pf, const uint8_t* end) {
  for (; *pf < end; *pf += 64) _mm_prefetch(reinterpret_cast<const char*>(*pf), _MM_HINT_T1);
}


// One chunk of 32 values on the grid: q, the step, and the sums of its
// halves (times the step).
__attribute__((target("avx2,fma,f16c"))) void grid_chunk(const float* x, int16_t* q, float* step,
                                                         float* sums) {
  __m256 mx = _mm256_setzero_ps();
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int i = 0; i < 32; i += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(x + i), abs));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float st = amax / kGrid;
  const float inv = amax > 0 ? kGrid / amax : 0.0f;
  const __m256 vi = _mm256_set1_ps(inv), lim = _mm256_set1_ps(kGrid);
  int isum[2] = {0, 0};
  for (int h = 0; h < 2; h++) {
    __m256i acc = _mm256_setzero_si256();
    for (int i = 16 * h; i < 16 * h + 16; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vi);
      v = _mm256_min_ps(_mm256_max_ps(v, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim);
      const __m256i r = _mm256_cvtps_epi32(v);  // to nearest even
      acc = _mm256_add_epi32(acc, r);
      const __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), p);
    }
    alignas(32) int l[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(l), acc);
    for (int k = 0; k < 8; k++) isum[h] += l[k];
  }
  *step = st;
  sums[0] = static_cast<float>(isum[0]) * st;
  sums[1] = static_cast<float>(isum[1]) * st;
}

__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// MB rows of x (from row m0) against row n of W: each block decoded once
// (qblock), each chunk's bytes widened to 16 bits once, then multiplied
// into every row's sums (two pairs of 16-bit products a lane).
template <int T, int MB>
__attribute__((target("avx2,fma,f16c"))) void q16_block(const XB16& x, int m0, const uint8_t* row,
                                                        float* res, const uint8_t** pf) {
  constexpr BlockFormat f = kFormat<T>;
  constexpr int per = f.values / 32;
  const int chunks = x.K / 32;
  const size_t K = static_cast<size_t>(x.K);
  __m256 acc[MB];
  float bias[MB];
  for (int m = 0; m < MB; m++) {
    acc[m] = _mm256_setzero_ps();
    bias[m] = 0;
  }
  __m256i q[per];
  float s[2 * per], o[2 * per];
  for (int c0 = 0; c0 < chunks; c0 += per) {
    const uint8_t* blk = row + static_cast<size_t>(c0 / per) * f.bytes;
    if (pf != nullptr) prefetch_to(pf, blk + f.bytes + kPrefetch);
    qblock<T>(blk, q, s, o);
#pragma GCC unroll 8
    for (int i = 0; i < per; i++) {
      const int c = c0 + i;
      const __m256i q0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q[i]));
      const __m256i q1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q[i], 1));
#pragma GCC unroll 4
      for (int m = 0; m < MB; m++) {
        const int16_t* xq = x.q.data() + (m0 + m) * K + 32 * c;
        const float st = x.step[static_cast<size_t>(m0 + m) * chunks + c];
        const __m256i p0 = _mm256_madd_epi16(q0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)));
        const __m256i p1 = _mm256_madd_epi16(q1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 16)));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(s[2 * i] * st), acc[m]);
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(s[2 * i + 1] * st), acc[m]);
        const float* xs = x.sum.data() + static_cast<size_t>(m0 + m) * 2 * chunks + 2 * c;
        bias[m] += o[2 * i] * xs[0] + o[2 * i + 1] * xs[1];
      }
    }
  }
  for (int m = 0; m < MB; m++) res[m] = hsum8(acc[m]) + bias[m];
}

// The eight 6-bit scales and the eight 6-bit minimums of a Q4_K or Q5_K
// super-block at b (12 bytes from b + 4), as the low 8 bytes of scb and mb.
__attribute__((target("avx2,fma,f16c"))) inline void kq_scale_bytes(const uint8_t* b, __m128i& scb, __m128i& mb) {
  uint32_t sw[3];
  std::memcpy(sw, b + 4, 12);
  const uint32_t sc_lo = sw[0] & 0x3F3F3F3F, m_lo = sw[1] & 0x3F3F3F3F;
  const uint32_t sc_hi = (sw[2] & 0x0F0F0F0F) | ((sw[0] >> 2) & 0x30303030);
  const uint32_t m_hi = ((sw[2] >> 4) & 0x0F0F0F0F) | ((sw[1] >> 2) & 0x30303030);
  scb = _mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo));
  mb = _mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo));
}

// The K-quants of llama.cpp's Q4_K_M, Q5_K_M and Q6_K files on AVX2, a
// super-block of 256 values a step, on x's byte planes: the block's values
// made into registers of 32 unsigned bytes in x's order (Q6_K's offset,
// -32, taken back in the bias), multiplied by x's l and h planes with
// vpmaddubsw (a pair's sum within 2 * 63 * 128, exact in 16 bits) and
// widened by vpmaddwd (times 1 and 256) to 32-bit lanes of four values
// each, all in one chunk of 32 (in one group of 16 for Q6_K). A step's
// chunks' lanes are added together by vphaddd, eight chunks (Q6_K: eight
// groups of 16) in one register, which their factors (the block's scale
// times x's step) multiply in one instruction. Each register of values is
// multiplied as soon as it is made: made all at once for the step, they
// and their sums outnumbered the 16 registers and the kernel ran a third
// slower. The generic kernel (q16_block) widens W to 16 bits, decodes each
// block into arrays and scales each chunk alone. On an AMD EPYC (Zen 3, 2
// vCPUs) without AVX-512, BenchmarkBlockMatmul (both kernels interleaved
// in one run) read Q4_K at 8-12 GB/s here and 6-8 there, Q5_K at 10-11 and
// 6-7, Q6_K at 13-18 and 10-12; a 1B model's Q4_K_M decoded at 17 tokens/s
// where it had at 11-12 (llama.cpp: 30). Q4_0 ran slower this way (its
// blocks' scales are read one at a time either way), and Q8_0's signed
// bytes would overflow vpmaddubsw's pairs (the generic kernel reads it at
// the memory's rate).
template <int T>
constexpr bool kFast256 = T == kQ4_K || T == kQ5_K || T == kQ6_K;

// 32 unsigned bytes of W (each at most 63) times chunk c's 32 values of x
// on the grid, from its planes at xp (XB16's layout): 8 lanes, each the
// exact sum of four products.
__attribute__((target("avx2,fma,f16c"))) inline __m256i dot32(__m256i u, const int8_t* xp, int c) {
  const int8_t* l = xp + (c >> 1) * 128 + (c & 1) * 32;
  const __m256i lo = _mm256_maddubs_epi16(u, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(l)));
  const __m256i hi = _mm256_maddubs_epi16(u, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(l + 64)));
  return _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_set1_epi16(1)), _mm256_madd_epi16(hi, _mm256_set1_epi16(256)));
}

// x's sums of chunks c0..c0+7 (XB16 holds them per 16 values, at xs).
__attribute__((target("avx2,fma,f16c"))) inline __m256 chunk_sums8(const float* xs) {
  // the pairs added: chunks 0 1 4 5 2 3 6 7, then put in order
  const __m256 hs = _mm256_hadd_ps(_mm256_loadu_ps(xs), _mm256_loadu_ps(xs + 8));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(hs), _MM_SHUFFLE(3, 1, 2, 0)));
}

template <int T, int MB>
__attribute__((target("avx2,fma,f16c"))) void fast_block256(const XB16& x, int m0, const uint8_t* row,
                                                            float* res, const uint8_t** pf) {
  constexpr BlockFormat f = kFormat<T>;
  const int chunks = x.K / 32;
  const size_t K = static_cast<size_t>(x.K);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[MB], bias[MB];
  for (int m = 0; m < MB; m++) {
    acc[m] = _mm256_setzero_ps();
    bias[m] = _mm256_setzero_ps();
  }
  for (int c0 = 0; c0 < chunks; c0 += 8) {
    const uint8_t* b = row + static_cast<size_t>(c0 / 8) * f.bytes;
    if (pf != nullptr) prefetch_to(pf, b + f.bytes + kPrefetch);
    // fw, ow: the factors (scale) and offsets (value of code 0) of the
    // eight chunks (Q6_K: of groups 0-7, and fw2, ow2 of groups 8-15)
    __m256 fw, ow, fw2 = _mm256_setzero_ps(), ow2 = _mm256_setzero_ps(), fwp = fw2, fwp2 = fw2;
    if constexpr (T == kQ4_K || T == kQ5_K) {
      __m128i scb, mb;
      kq_scale_bytes(b, scb, mb);
      fw = _mm256_mul_ps(_mm256_set1_ps(bq_half(b)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(scb)));
      ow = _mm256_mul_ps(_mm256_set1_ps(-bq_half(b + 2)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mb)));
    } else {
      // Q6_K: groups of 16, each its own int8 scale
      const __m256 d = _mm256_set1_ps(bq_half(b + 208));
      fw = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                reinterpret_cast<const __m128i*>(b + 192)))));
      fw2 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                 reinterpret_cast<const __m128i*>(b + 200)))));
      ow = _mm256_mul_ps(fw, _mm256_set1_ps(-32));
      ow2 = _mm256_mul_ps(fw2, _mm256_set1_ps(-32));
      const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
      fwp = _mm256_permutevar8x32_ps(fw, order);
      fwp2 = _mm256_permutevar8x32_ps(fw2, order);
    }
#pragma GCC unroll 4
    for (int m = 0; m < MB; m++) {
      const int8_t* xp = x.planes.data() + static_cast<size_t>(m0 + m) * 2 * K + 64 * static_cast<size_t>(c0);
      const size_t xc = static_cast<size_t>(m0 + m) * chunks + c0;
      const __m256 st = _mm256_loadu_ps(x.step.data() + xc);
      const float* xs = x.sum.data() + 2 * xc;
      // The block's values are made into registers of 32 for each row of
      // x (from L1 after the first), each multiplied as soon as it is made:
      // made all at once, they and their sums outnumbered the registers.
      if constexpr (T == kQ6_K) {
        // Per half of 128 values, ql's 64 bytes give the low four bits
        // (low nibbles values 0-63, high 64-127) and qh's 32 bytes the top
        // two (bits 0-1, 2-3, 4-5, 6-7 for values 0-31, 32-63, 64-95,
        // 96-127). Chunk c's lanes 0-3 are group 2c's, 4-7 group 2c + 1's:
        // four chunks' lanes added by halves give groups 0 2 4 6 1 3 5 7
        // of theirs, whose factors fwp and fwp2 hold in that order.
        const __m256i m30 = _mm256_set1_epi8(0x30);
        __m256i g[2];
        for (int h = 0; h < 2; h++) {
          const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h));
          const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32));
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
          const __m256i p0 = dot32(_mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)), xp, 4 * h);
          const __m256i p1 = dot32(_mm256_or_si256(_mm256_and_si256(c, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)), xp, 4 * h + 1);
          const __m256i p2 = dot32(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(qh, m30)), xp, 4 * h + 2);
          const __m256i p3 = dot32(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)), xp, 4 * h + 3);
          g[h] = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
        }
        const __m256 s0 = _mm256_permutevar8x32_ps(st, _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3));
        const __m256 s1 = _mm256_permutevar8x32_ps(st, _mm256_setr_epi32(4, 5, 6, 7, 4, 5, 6, 7));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(g[0]), _mm256_mul_ps(fwp, s0), acc[m]);
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(g[1]), _mm256_mul_ps(fwp2, s1), acc[m]);
        bias[m] = _mm256_fmadd_ps(ow, _mm256_loadu_ps(xs), bias[m]);
        bias[m] = _mm256_fmadd_ps(ow2, _mm256_loadu_ps(xs + 8), bias[m]);
      } else {
        // 32 bytes a pair of chunks: low nibbles chunk 2j, high chunk 2j +
        // 1; Q5_K's fifth bits of chunk c are bit c of qh's 32 bytes
        constexpr int qs = T == kQ4_K ? 16 : 48;
        __m256i qh = _mm256_setzero_si256();
        if constexpr (T == kQ5_K) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
        __m256i h[4];
        for (int j = 0; j < 4; j++) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + qs + 32 * j));
          __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (T == kQ5_K) {
            // bit c moved to bit 4 (shifts of 16-bit words: the mask keeps
            // each byte's own bit)
            const __m256i m10 = _mm256_set1_epi8(0x10);
            lo = _mm256_or_si256(lo, _mm256_and_si256(j < 3 ? _mm256_slli_epi16(qh, 4 - 2 * j)
                                                            : _mm256_srli_epi16(qh, 2 * j - 4), m10));
            hi = _mm256_or_si256(hi, _mm256_and_si256(j < 2 ? _mm256_slli_epi16(qh, 3 - 2 * j)
                                                            : _mm256_srli_epi16(qh, 2 * j - 3), m10));
          }
          h[j] = _mm256_hadd_epi32(dot32(lo, xp, 2 * j), dot32(hi, xp, 2 * j + 1));
        }
        // lanes: chunks 0 1 2 3 of each half, then the halves added
        const __m256i a = _mm256_hadd_epi32(h[0], h[1]), c = _mm256_hadd_epi32(h[2], h[3]);
        const __m256i sums = _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(fw, st), acc[m]);
        bias[m] = _mm256_fmadd_ps(ow, chunk_sums8(xs), bias[m]);
      }
    }
  }
  for (int m = 0; m < MB; m++) res[m] = hsum8(_mm256_add_ps(acc[m], bias[m]));
}

#define ARCHGEN_BQ512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

// q16_block on AVX-512 with VNNI, for x with byte planes: two chunks a
// register.
template <int T, int MB>
ARCHGEN_BQ512 void q16_block512(const XB16& x, int m0, const uint8_t* row, float* res,
                                const uint8_t** pf) {
  constexpr BlockFormat f = kFormat<T>;
  constexpr int per = f.values / 32;
  constexpr int U = per < 2 ? 2 : per;  // chunks decoded at a time: whole pairs
  const int chunks = x.K / 32;
  const size_t K = static_cast<size_t>(x.K);
  const __m512i four = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i two = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512 acc[MB];
  __m128 bias[MB];
  for (int m = 0; m < MB; m++) {
    acc[m] = _mm512_setzero_ps();
    bias[m] = _mm_setzero_ps();
  }
  __m256i q[U];
  alignas(16) float s[2 * U], o[2 * U];
  for (int c0 = 0; c0 < chunks; c0 += U) {
    for (int b = 0; b < U / per; b++) {
      const uint8_t* blk = row + static_cast<size_t>(c0 / per + b) * f.bytes;
      if (pf != nullptr) prefetch_to(pf, blk + f.bytes + kPrefetch);
      qblock<T>(blk, q + b * per, s + 2 * b * per, o + 2 * b * per);
    }
    if constexpr (kSigned<T>) {
      // bytes offset by 128 to be unsigned; each value's bias takes it back
      for (int i = 0; i < U; i++) q[i] = _mm256_xor_si256(q[i], _mm256_set1_epi8(-128));
      for (int g = 0; g < 2 * U; g++) o[g] -= 128 * s[g];
    }
#pragma GCC unroll 4
    for (int i = 0; i < U; i += 2) {
      const int c = c0 + i;
      const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(q[i]), q[i + 1], 1);
      const __m512 sv = _mm512_permutexvar_ps(four, _mm512_castps128_ps512(_mm_load_ps(s + 2 * i)));
      const __m128 ov = _mm_load_ps(o + 2 * i);
#pragma GCC unroll 4
      for (int m = 0; m < MB; m++) {
        const int8_t* xp = x.planes.data() + (m0 + m) * 2 * K + 32 * static_cast<size_t>(c) * 2;
        const __m512i lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xp));
        const __m512i hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xp + 64));
        const __m512i v = _mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo);
        const float* st = x.step.data() + static_cast<size_t>(m0 + m) * chunks + c;
        const __m512 stv = _mm512_permutexvar_ps(
            two, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(st)))));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(sv, stv), acc[m]);
        const float* xs = x.sum.data() + static_cast<size_t>(m0 + m) * 2 * chunks + 2 * c;
        bias[m] = _mm_fmadd_ps(ov, _mm_loadu_ps(xs), bias[m]);
      }
    }
  }
  for (int m = 0; m < MB; m++) {
    __m128 b = _mm_add_ps(bias[m], _mm_movehl_ps(bias[m], bias[m]));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    res[m] = _mm512_reduce_add_ps(acc[m]) + _mm_cvtss_f32(b);
  }
}

// The K-quants people run most (Q4_K, Q5_K, Q6_K) on AVX-512 with VNNI,
// a super-block at a time: its scales decoded once into per-group factors
// (scale times x's step) and the bias (the groups' minimums times x's
// sums), then its bytes made into registers of 64 values in x's own order,
// so that one pair of vpdpbusd (x's low and high planes) a register takes
// its products, each 32-bit lane four values of one group.
template <int T>
constexpr bool kWideK = T == kQ4_K || T == kQ5_K || T == kQ6_K;

// Each 16-bit word of v shifted left by a in the low 256 bits, by b in
// the high (srlv: right).
ARCHGEN_BQ512 __m512i bq_sllv(__m512i v, int a, int b) {
  return _mm512_sllv_epi16(v, _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(a)),
                                                 _mm256_set1_epi16(static_cast<int16_t>(b)), 1));
}
ARCHGEN_BQ512 __m512i bq_srlv(__m512i v, int a, int b) {
  return _mm512_srlv_epi16(v, _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(a)),
                                                 _mm256_set1_epi16(static_cast<int16_t>(b)), 1));
}

// Lane tables, built once (the kernels run a row a call: building them per
// call cost as much as a short row's products). kLaneGroups[k]: lane i ->
// i / per + first for the (per, first) of k: Q4_K/Q5_K registers 0-3
// (per 8, first 2r), Q6_K registers 0-3 (per 4, first 4r), and x's step
// per pair of groups of 16 (per 2, first 0).
struct LaneTables {
  alignas(64) int32_t groups[9][16];
  alignas(64) int16_t nibble_shift[32];  // 0 in 128-bit lanes 0 and 2, 4 in 1 and 3
  LaneTables() {
    for (int r = 0; r < 4; r++) {
      for (int i = 0; i < 16; i++) {
        groups[r][i] = i / 8 + 2 * r;
        groups[4 + r][i] = i / 4 + 4 * r;
      }
    }
    for (int i = 0; i < 16; i++) groups[8][i] = i / 2;
    for (int i = 0; i < 32; i++) nibble_shift[i] = (i / 8) % 2 == 0 ? 0 : 4;
  }
};
const LaneTables kLanes;

ARCHGEN_BQ512 __m512i bq_lanes(int k) { return _mm512_load_si512(kLanes.groups[k]); }

template <int T, int MB>
ARCHGEN_BQ512 void kq_block512(const XB16& x, int m0, const uint8_t* row, float* res,
                               const uint8_t** pf) {
  constexpr BlockFormat f = kFormat<T>;
  const int chunks = x.K / 32;
  const size_t K = static_cast<size_t>(x.K);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[MB], bias[MB];
  for (int m = 0; m < MB; m++) {
    acc[m] = _mm512_setzero_ps();
    bias[m] = _mm512_setzero_ps();
  }
  // a register's lanes -> its groups' factors: Q4_K and Q5_K, groups of 32
  // (8 lanes each; register p holds groups 2p and 2p + 1); Q6_K, groups of
  // 16 (4 lanes; register r, groups 4r to 4r + 3)
  __m512i idx[4];
  for (int r = 0; r < 4; r++) idx[r] = bq_lanes(T == kQ6_K ? 4 + r : r);
  const __m512i pairs = bq_lanes(8);  // x's step per 32 values, for groups of 16
  for (int c0 = 0; c0 < chunks; c0 += 8) {
    const uint8_t* b = row + static_cast<size_t>(c0 / 8) * f.bytes;
    if (pf != nullptr) prefetch_to(pf, b + f.bytes + kPrefetch);
    __m512 fac[MB];
    __m512i w[4];
    if constexpr (T == kQ6_K) {
      const __m512 s = _mm512_mul_ps(_mm512_set1_ps(bq_half(b + 208)),
                                     _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bq_load(b + 192))));
      const __m512 o = _mm512_mul_ps(s, _mm512_set1_ps(-32));
      for (int m = 0; m < MB; m++) {
        const size_t xc = static_cast<size_t>(m0 + m) * chunks + c0;
        const __m512 st = _mm512_permutexvar_ps(pairs, _mm512_castps256_ps512(_mm256_loadu_ps(x.step.data() + xc)));
        fac[m] = _mm512_mul_ps(s, st);
        bias[m] = _mm512_fmadd_ps(o, _mm512_loadu_ps(x.sum.data() + 2 * xc), bias[m]);
      }
      const __m512i m30 = _mm512_set1_epi8(0x30);
      for (int h = 0; h < 2; h++) {
        // ql's 64 bytes: low nibbles values 0-63 of the half, high 64-127;
        // qh's 32 bytes in both halves, each chunk's two bits moved to 4, 5
        const __m512i ql = _mm512_loadu_si512(b + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
        w[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(bq_sllv(qh, 4, 2), m30));
        w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                       _mm512_and_si512(bq_srlv(qh, 0, 2), m30));
      }
    } else {
      __m128i scb, mb;
      kq_scale_bytes(b, scb, mb);
      const __m256 s = _mm256_mul_ps(_mm256_set1_ps(bq_half(b)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(scb)));
      // each minimum twice: x's sums are per 16 values
      const __m512 o = _mm512_mul_ps(_mm512_set1_ps(-bq_half(b + 2)),
                                     _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(mb, mb))));
      for (int m = 0; m < MB; m++) {
        const size_t xc = static_cast<size_t>(m0 + m) * chunks + c0;
        fac[m] = _mm512_castps256_ps512(_mm256_mul_ps(s, _mm256_loadu_ps(x.step.data() + xc)));
        bias[m] = _mm512_fmadd_ps(o, _mm512_loadu_ps(x.sum.data() + 2 * xc), bias[m]);
      }
      constexpr int qs = T == kQ4_K ? 16 : 48;
      __m512i qh = _mm512_setzero_si512();
      if constexpr (T == kQ5_K) {
        qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
      }
#pragma GCC unroll 4
      for (int p = 0; p < 4; p++) {
        // 32 bytes in both halves: low nibbles (chunk 2p) below, high
        // (chunk 2p + 1) above
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + qs + 32 * p)));
        w[p] = _mm512_and_si512(bq_srlv(v, 0, 4), m4);
        if constexpr (T == kQ5_K) {
          // bit c of qh is chunk c's fifth: bits 2p and 2p + 1 to bit 4
          const __m512i hb = p < 2 ? bq_sllv(qh, 4 - 2 * p, 3 - 2 * p) : bq_srlv(qh, 2 * p - 4, 2 * p - 3);
          w[p] = _mm512_or_si512(w[p], _mm512_and_si512(hb, _mm512_set1_epi8(0x10)));
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
#pragma GCC unroll 4
      for (int m = 0; m < MB; m++) {
        const int8_t* xp = x.planes.data() + static_cast<size_t>(m0 + m) * 2 * K + (32 * static_cast<size_t>(c0) + 64 * r) * 2;
        const __m512i lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r], _mm512_loadu_si512(xp));
        const __m512i hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r], _mm512_loadu_si512(xp + 64));
        const __m512i v = _mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo);
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_permutexvar_ps(idx[r], fac[m]), acc[m]);
      }
    }
  }
  for (int m = 0; m < MB; m++) res[m] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m], bias[m]));
}

// Q5_0 and Q5_1 on AVX-512 with VNNI, two blocks (64 values) a register:
// each block's 16 nibble bytes in two 128-bit lanes (low nibbles, values
// 0-15, then high, 16-31), its 32 fifth bits a byte mask (0x10 where set),
// one vpdpbusd pair against x's planes; a block's factor is d times x's
// step, its bias (-16 d, or m) times x's sum. These are the fallback types
// of llama.cpp's K-quant files for rows that are not whole super-blocks
// (SmolLM2's 576 and 960, Qwen2.5-0.5B's 896).
template <int T>
constexpr bool kWide5 = T == kQ5_0 || T == kQ5_1;

template <int T, int MB>
ARCHGEN_BQ512 void q5_block512(const XB16& x, int m0, const uint8_t* row, float* res,
                               const uint8_t** pf) {
  constexpr BlockFormat f = kFormat<T>;
  constexpr int qh_at = T == kQ5_0 ? 2 : 4, qs_at = T == kQ5_0 ? 6 : 8;
  const int chunks = x.K / 32;
  const size_t K = static_cast<size_t>(x.K);
  const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
  const __m512i shifts = _mm512_load_si512(kLanes.nibble_shift);
  const __m512i halves = bq_lanes(0);
  __m512 acc[MB];
  float bias[MB];
  for (int m = 0; m < MB; m++) {
    acc[m] = _mm512_setzero_ps();
    bias[m] = 0;
  }
  for (int c0 = 0; c0 < chunks; c0 += 2) {
    const uint8_t* b0 = row + static_cast<size_t>(c0) * f.bytes;
    const uint8_t* b1 = b0 + f.bytes;
    if (pf != nullptr) prefetch_to(pf, b1 + f.bytes + kPrefetch);
    const __m128i q0 = bq_load(b0 + qs_at), q1 = bq_load(b1 + qs_at);
    __m512i v = _mm512_castsi128_si512(q0);
    v = _mm512_inserti32x4(v, q0, 1);
    v = _mm512_inserti32x4(v, q1, 2);
    v = _mm512_inserti32x4(v, q1, 3);
    uint32_t h0, h1;
    std::memcpy(&h0, b0 + qh_at, 4);
    std::memcpy(&h1, b1 + qh_at, 4);
    const __mmask64 hm = static_cast<__mmask64>(h0) | (static_cast<__mmask64>(h1) << 32);
    const __m512i w = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(v, shifts), m4), _mm512_maskz_mov_epi8(hm, m10));
    const float d0 = bq_half(b0), d1 = bq_half(b1);
    const float o0 = T == kQ5_0 ? -16 * d0 : bq_half(b0 + 2);
    const float o1 = T == kQ5_0 ? -16 * d1 : bq_half(b1 + 2);
#pragma GCC unroll 4
    for (int m = 0; m < MB; m++) {
      const size_t xc = static_cast<size_t>(m0 + m) * chunks + c0;
      const float* st = x.step.data() + xc;
      const __m512 fac = _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(_mm_setr_ps(d0 * st[0], d1 * st[1], 0, 0)));
      const int8_t* xp = x.planes.data() + static_cast<size_t>(m0 + m) * 2 * K + 64 * static_cast<size_t>(c0);
      const __m512i lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xp));
      const __m512i hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xp + 64));
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo)), fac, acc[m]);
      const float* xs = x.sum.data() + 2 * xc;
      bias[m] += o0 * (xs[0] + xs[1]) + o1 * (xs[2] + xs[3]);
    }
  }
  for (int m = 0; m < MB; m++) res[m] = _mm512_reduce_add_ps(acc[m]) + bias[m];
}

template <int T>
void q16_rows_t(const XB16& x, const uint8_t* w, int64_t row_bytes, void* out, Kind ok, int N,
                int n_lo, int n_hi) {
  float res[4];
  const int M = x.M;
  const bool wide = x.wide;
  const bool fast = kFast256<T> && x.K % 256 == 0 && !x.planes.empty();
  // the next line to ask for: the rows are contiguous, so the requests
  // run on from one row into the next
  const uint8_t* pf = w + n_lo * row_bytes + kPrefetch;
  for (int n = n_lo; n < n_hi; n++) {
    const uint8_t* row = w + n * row_bytes;
    int m = 0;
    auto run = [&]<int MB>() {
      // the first pass over the row asks for what follows it
      const uint8_t** p = m == 0 ? &pf : nullptr;
      if (wide && kWideK<T>) {
        kq_block512<T, MB>(x, m, row, res, p);
      } else if (wide && kWide5<T>) {
        q5_block512<T, MB>(x, m, row, res, p);
      } else if (wide) {
        q16_block512<T, MB>(x, m, row, res, p);
      } else if (fast) {
        if constexpr (kFast256<T>) fast_block256<T, MB>(x, m, row, res, p);
      } else {
        q16_block<T, MB>(x, m, row, res, p);
      }
      for (int i = 0; i < MB; i++) store1(out, static_cast<size_t>(m + i) * N + n, res[i], ok);
      m += MB;
    };
    while (M - m >= 4) run.template operator()<4>();
    switch (M - m) {
      case 3: run.template operator()<3>(); break;
      case 2: run.template operator()<2>(); break;
      case 1: run.template operator()<1>(); break;
    }
  }
}

}  // namespace

namespace {

// 16 values v of the grid (|v| <= kGrid) as their planes' bytes: h = (v +
// 128) >> 8 and l = v - 256 h, both within a signed byte.
__attribute__((target("avx2,fma,f16c"))) void split_planes16(const int16_t* q, int8_t* l, int8_t* h) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i hv = _mm256_srai_epi16(_mm256_add_epi16(v, _mm256_set1_epi16(128)), 8);
  const __m256i lv = _mm256_sub_epi16(v, _mm256_slli_epi16(hv, 8));
  // packed within each 128-bit half, then the halves' low quarters joined
  const __m256i b = _mm256_permute4x64_epi64(_mm256_packs_epi16(lv, hv), _MM_SHUFFLE(3, 1, 2, 0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(l), _mm256_castsi256_si128(b));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), _mm256_extracti128_si256(b, 1));
}

}  // namespace

void block_prepare_x(const float* x, int M, int K, bool wide, bool planes, XB16& out) {
  out.M = M;
  out.K = K;
  const size_t n = static_cast<size_t>(M) * K;
  out.q.resize(n);
  out.step.resize(n / 32);
  out.sum.resize(n / 16);
  for (size_t c = 0; c < n / 32; c++) {
    grid_chunk(x + 32 * c, out.q.data() + 32 * c, out.step.data() + c, out.sum.data() + 2 * c);
  }
  out.planes.clear();
  out.wide = wide && K % 64 == 0;
  if (K % 64 != 0 || !(out.wide || (planes && K % 256 == 0))) {
    return;
  }
  out.planes.resize(2 * n);
  for (size_t i = 0; i < n; i += 16) {
    int8_t* p = out.planes.data() + (i / 64) * 128 + i % 64;
    split_planes16(out.q.data() + i, p, p + 64);
  }
}

void block_round_x(const float* x, int M, int K, float* out) {
  alignas(32) int16_t q[32];
  float step, sums[2];
  for (size_t c = 0; c < static_cast<size_t>(M) * (K / 32); c++) {
    grid_chunk(x + 32 * c, q, &step, sums);
    for (int i = 0; i < 32; i++) out[32 * c + i] = static_cast<float>(q[i]) * step;
  }
}

void block_rows_q16(int code, const XB16& x, const uint8_t* w, int64_t row_bytes, void* out,
                    Kind ok, int N, int n_lo, int n_hi) {
  with_block_type(code, [&]<int T>() { q16_rows_t<T>(x, w, row_bytes, out, ok, N, n_lo, n_hi); });
}

bool block_planes_avx2(int code) {
  bool fast = false;
  with_block_type(code, [&]<int T>() { fast = kFast256<T>; });
  return fast;
}

int block_codes_group(int code) {
  return code == kQ2_K || code == kQ3_K || code == kQ6_K ? 16 : 32;
}

namespace {

template <int T>
ARCHGEN_BQ void codes_row_t(const uint8_t* row, int k, uint8_t* codes, float* s, float* o) {
  constexpr BlockFormat f = kFormat<T>;
  constexpr int per = f.values / 32;
  constexpr bool g16 = T == kQ2_K || T == kQ3_K || T == kQ6_K;
  __m256i q[per];
  alignas(16) float ss[2 * per], oo[2 * per];
  for (int b = 0; b < k / f.values; b++) {
    qblock<T>(row + static_cast<size_t>(b) * f.bytes, q, ss, oo);
    for (int c = 0; c < per; c++) {
      const int chunk = b * per + c;
      __m256i v = q[c];
      if constexpr (kSigned<T>) v = _mm256_xor_si256(v, _mm256_set1_epi8(-128));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + static_cast<size_t>(chunk) * 32), v);
      for (int h = 0; h < (g16 ? 2 : 1); h++) {
        const float sv = ss[2 * c + h];
        const float ov = kSigned<T> ? oo[2 * c + h] - 128 * sv : oo[2 * c + h];
        s[g16 ? 2 * chunk + h : chunk] = sv;
        o[g16 ? 2 * chunk + h : chunk] = ov;
      }
    }
  }
}

}  // namespace

void block_codes_row(int code, const uint8_t* row, int k, uint8_t* codes, float* s, float* o) {
  with_block_type(code, [&]<int T>() { codes_row_t<T>(row, k, codes, s, o); });
}

}  // namespace archgen
