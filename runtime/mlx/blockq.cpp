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

constexpr float kGrid = 32767.0f;

constexpr int64_t kPrefetch = 8192;


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
                                                        float* res) {
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
    qblock<T>(row + static_cast<size_t>(c0 / per) * f.bytes, q, s, o);
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

template <int T>
void q16_rows_t(const XB16& x, const uint8_t* w, int64_t row_bytes, void* out, Kind ok, int N,
                int n_lo, int n_hi) {
  float res[4];
  const int M = x.M;
  for (int n = n_lo; n < n_hi; n++) {
    const uint8_t* row = w + n * row_bytes;
    // W streams from memory once a step: ask for it kPrefetch bytes ahead,
    // into L2, a row's worth per row (as qmv16.cpp does, and for the same
    // reason: the hardware prefetchers alone leave the kernel waiting)
    for (int64_t off = 0; off < row_bytes; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(row + kPrefetch + off), _MM_HINT_T1);
    }
    int m = 0;
    auto run = [&]<int MB>() {
      q16_block<T, MB>(x, m, row, res);
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

void block_prepare_x(const float* x, int M, int K, XB16& out) {
  out.M = M;
  out.K = K;
  out.q.resize(static_cast<size_t>(M) * K);
  out.step.resize(static_cast<size_t>(M) * (K / 32));
  out.sum.resize(static_cast<size_t>(M) * (K / 16));
  for (size_t c = 0; c < static_cast<size_t>(M) * (K / 32); c++) {
    grid_chunk(x + 32 * c, out.q.data() + 32 * c, out.step.data() + c, out.sum.data() + 2 * c);
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

}  // namespace archgen
