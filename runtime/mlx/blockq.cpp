// The row kernels over llama.cpp's block-quantized types (blockq.h): a row
// decoded into float32, and products of few rows of x read from the blocks.
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

__attribute__((target("avx2,fma"))) inline float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// MB rows of x (from x, rows ld apart) against row n of W: each chunk is
// decoded once and multiplied into every row's two accumulators.
template <int T, int MB>
__attribute__((target("avx2,fma,f16c"))) void dot_block(const float* x, size_t ld, const uint8_t* row,
                                                        int k, float* res) {
  __m256 a[MB][2];
  for (int m = 0; m < MB; m++) a[m][0] = a[m][1] = _mm256_setzero_ps();
  __m256 w[4];
  for (int i = 0; i < k / 32; i++) {
    row_chunk<T>(row, i, w);
#pragma GCC unroll 4
    for (int m = 0; m < MB; m++) {
      const float* xm = x + m * ld + 32 * i;
      a[m][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xm), w[0], a[m][0]);
      a[m][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xm + 8), w[1], a[m][1]);
      a[m][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xm + 16), w[2], a[m][0]);
      a[m][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xm + 24), w[3], a[m][1]);
    }
  }
  for (int m = 0; m < MB; m++) res[m] = sum8(_mm256_add_ps(a[m][0], a[m][1]));
}

template <int T>
__attribute__((target("avx2,fma,f16c"))) void rows_t(const float* x, int M, int K, const uint8_t* w,
                                                     int64_t row_bytes, void* out, Kind ok, int N,
                                                     int n_lo, int n_hi) {
  const size_t ld = static_cast<size_t>(K);
  float res[4];
  for (int n = n_lo; n < n_hi; n++) {
    const uint8_t* row = w + n * row_bytes;
    int m = 0;
    for (; m + 4 <= M; m += 4) {
      dot_block<T, 4>(x + m * ld, ld, row, K, res);
      for (int i = 0; i < 4; i++) store1(out, static_cast<size_t>(m + i) * N + n, res[i], ok);
    }
    switch (M - m) {
      case 3: dot_block<T, 3>(x + m * ld, ld, row, K, res); break;
      case 2: dot_block<T, 2>(x + m * ld, ld, row, K, res); break;
      case 1: dot_block<T, 1>(x + m * ld, ld, row, K, res); break;
    }
    for (int i = 0; i < M - m; i++) store1(out, static_cast<size_t>(m + i) * N + n, res[i], ok);
  }
}

}  // namespace

void block_dequant_row(int code, const uint8_t* row, float* dst, int k) {
  with_block_type(code, [&]<int T>() { dequant_row_t<T>(row, dst, k); });
}

void block_rows(int code, const float* x, int M, int K, const uint8_t* w, int64_t row_bytes,
                void* out, Kind ok, int N, int n_lo, int n_hi) {
  with_block_type(code, [&]<int T>() { rows_t<T>(x, M, K, w, row_bytes, out, ok, N, n_lo, n_hi); });
}

}  // namespace archgen
