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
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpukern.h"

#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace {

using archgen::Kind;
using archgen::kind_of;
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

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// sum_k x[k] * W[n, k] for one row n of W, straight from its packed
// values: per group, (q . x) * scale + bias * sum(x of the group), where
// xsum holds those sums.
template <int bits>
__attribute__((target("avx2,fma,f16c"))) float dot_row(
    const float* x, const float* xsum, const uint8_t* w, const void* scales, const void* biases,
    Kind sk, size_t n, int K, int group) {
  const int groups = K / group;
  const uint8_t* row = w + n * K * bits / 8;
  const __m128i m4 = _mm_set1_epi8(0x0f);
  __m256 total = _mm256_setzero_ps();
  float bsum = 0;
  for (int g = 0; g < groups; g++) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int k0 = g * group; k0 < (g + 1) * group; k0 += 32) {
      const float* xs = x + k0;
      if constexpr (bits == 4) {
        __m128i v = _mm_loadu_si128((const __m128i*)(row + k0 / 2));
        __m128i lo = _mm_and_si128(v, m4);
        __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
        __m128i e0 = _mm_unpacklo_epi8(lo, hi);
        __m128i e1 = _mm_unpackhi_epi8(lo, hi);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(e0)), _mm256_loadu_ps(xs), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(e0, 8))),
                               _mm256_loadu_ps(xs + 8), acc1);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(e1)), _mm256_loadu_ps(xs + 16), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(e1, 8))),
                               _mm256_loadu_ps(xs + 24), acc1);
      } else {
        const uint8_t* q = row + k0;
        for (int p = 0; p < 4; p += 2) {
          acc0 = _mm256_fmadd_ps(
              _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q + 8 * p)))),
              _mm256_loadu_ps(xs + 8 * p), acc0);
          acc1 = _mm256_fmadd_ps(
              _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q + 8 * p + 8)))),
              _mm256_loadu_ps(xs + 8 * p + 8), acc1);
        }
      }
    }
    size_t gi = n * groups + g;
    total = _mm256_fmadd_ps(_mm256_add_ps(acc0, acc1), _mm256_set1_ps(load1(scales, gi, sk)), total);
    bsum += load1(biases, gi, sk) * xsum[g];
  }
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps(total, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  return _mm_cvtss_f32(t) + bsum;
}

constexpr int NB = 4;   // rows of W dequantized at a time
constexpr int MC = 64;  // rows of x per pass over a block of W

// out[m, n0..n0+NB) for rows m of x (MB of them) against NB rows of wt.
template <int MB>
__attribute__((target("avx2,fma,f16c"))) void micro(
    const float* x, const float* wt, int K, float* res /* [MB][NB] */) {
  __m256 acc[MB][NB];
  for (int i = 0; i < MB; i++)
    for (int j = 0; j < NB; j++) acc[i][j] = _mm256_setzero_ps();
  for (int k = 0; k < K; k += 8) {
    __m256 xv[MB];
    for (int i = 0; i < MB; i++) xv[i] = _mm256_loadu_ps(x + static_cast<size_t>(i) * K + k);
    for (int j = 0; j < NB; j++) {
      __m256 wv = _mm256_loadu_ps(wt + static_cast<size_t>(j) * K + k);
      for (int i = 0; i < MB; i++) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  for (int i = 0; i < MB; i++)
    for (int j = 0; j < NB; j++) res[i * NB + j] = hsum(acc[i][j]);
}

struct Job {
  const float* x;  // [M, K] float32
  const uint8_t* w;
  const void* scales;
  const void* biases;
  Kind sk, ok;
  void* out;  // [M, N] of kind ok
  int M, N, K, group, bits;
};

// run_rows for a float32 W [N, K]: the same blocks, read in place.
__attribute__((target("avx2,fma,f16c"))) void run_dense(const Job& j, int n_lo, int n_hi) {
  const float* w = reinterpret_cast<const float*>(j.w);
  thread_local std::vector<float> pad;
  float res[2 * NB];
  for (int m0 = 0; m0 < j.M; m0 += MC) {
    int m1 = std::min(j.M, m0 + MC);
    for (int n0 = n_lo; n0 < n_hi; n0 += NB) {
      int nb = std::min(NB, n_hi - n0);
      const float* wt = w + static_cast<size_t>(n0) * j.K;
      if (nb < NB) {
        pad.assign(static_cast<size_t>(NB) * j.K, 0.0f);
        std::memcpy(pad.data(), wt, sizeof(float) * nb * j.K);
        wt = pad.data();
      }
      int m = m0;
      for (; m + 2 <= m1; m += 2) {
        micro<2>(j.x + static_cast<size_t>(m) * j.K, wt, j.K, res);
        for (int i = 0; i < 2; i++)
          for (int r = 0; r < nb; r++)
            store1(j.out, static_cast<size_t>(m + i) * j.N + n0 + r, res[i * NB + r], j.ok);
      }
      for (; m < m1; m++) {
        micro<1>(j.x + static_cast<size_t>(m) * j.K, wt, j.K, res);
        for (int r = 0; r < nb; r++)
          store1(j.out, static_cast<size_t>(m) * j.N + n0 + r, res[r], j.ok);
      }
    }
  }
}

// Rows [n_lo, n_hi) of W against every row of x.
__attribute__((target("avx2,fma,f16c"))) void run_rows(const Job& j, int n_lo, int n_hi) {
  if (j.bits == 0) {
    run_dense(j, n_lo, n_hi);
    return;
  }
  if (j.M <= 2) {
    // Too few rows of x to pay for dequantizing W: multiply from the
    // packed values.
    int groups = j.K / j.group;
    thread_local std::vector<float> xsum;
    xsum.resize(static_cast<size_t>(groups));
    for (int m = 0; m < j.M; m++) {
      const float* x = j.x + static_cast<size_t>(m) * j.K;
      for (int g = 0; g < groups; g++) {
        float t = 0;
        for (int k = g * j.group; k < (g + 1) * j.group; k++) t += x[k];
        xsum[g] = t;
      }
      for (int n = n_lo; n < n_hi; n++) {
        float v = j.bits == 4
            ? dot_row<4>(x, xsum.data(), j.w, j.scales, j.biases, j.sk, n, j.K, j.group)
            : dot_row<8>(x, xsum.data(), j.w, j.scales, j.biases, j.sk, n, j.K, j.group);
        store1(j.out, static_cast<size_t>(m) * j.N + n, v, j.ok);
      }
    }
    return;
  }
  thread_local std::vector<float> tile;
  tile.resize(static_cast<size_t>(NB) * j.K);
  float res[2 * NB];
  for (int m0 = 0; m0 < j.M; m0 += MC) {
    int m1 = std::min(j.M, m0 + MC);
    for (int n0 = n_lo; n0 < n_hi; n0 += NB) {
      int nb = std::min(NB, n_hi - n0);
      for (int r = 0; r < NB; r++) {
        float* d = tile.data() + static_cast<size_t>(r) * j.K;
        if (r >= nb) {
          std::memset(d, 0, sizeof(float) * j.K);
        } else if (j.bits == 4) {
          dequant_row<4>(d, j.w, j.scales, j.biases, j.sk, n0 + r, j.K, j.group);
        } else {
          dequant_row<8>(d, j.w, j.scales, j.biases, j.sk, n0 + r, j.K, j.group);
        }
      }
      int m = m0;
      for (; m + 2 <= m1; m += 2) {
        micro<2>(j.x + static_cast<size_t>(m) * j.K, tile.data(), j.K, res);
        for (int i = 0; i < 2; i++)
          for (int r = 0; r < nb; r++)
            store1(j.out, static_cast<size_t>(m + i) * j.N + n0 + r, res[i * NB + r], j.ok);
      }
      for (; m < m1; m++) {
        micro<1>(j.x + static_cast<size_t>(m) * j.K, tile.data(), j.K, res);
        for (int r = 0; r < nb; r++)
          store1(j.out, static_cast<size_t>(m) * j.N + n0 + r, res[r], j.ok);
      }
    }
  }
}

void run_job(const Job& j) {
  auto& pool = Pool::get();
  size_t work = static_cast<size_t>(j.M) * j.N * j.K;
  int blocks = (j.N + NB - 1) / NB;
  // Small products are not worth waking the other cores for.
  int tasks = work < (1u << 22) ? 1 : std::min(blocks, pool.threads() * 4);
  int per = (blocks + tasks - 1) / tasks;
  tasks = (blocks + per - 1) / per;
  pool.run(tasks, [&](int t) {
    int lo = t * per * NB;
    int hi = std::min(j.N, (t + 1) * per * NB);
    if (lo < hi) {
      run_rows(j, lo, hi);
    }
  });
}

class NativeQMM : public mx::UnaryPrimitive {
 public:
  NativeQMM(mx::Stream s, int group, int bits) : UnaryPrimitive(s), group_(group), bits_(bits) {}

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
    Kind xk = kind_of(x.dtype());
    const void* xp = x.data<void>();
    enc.dispatch([j, xk, xp, x, w, scales, biases, out]() mutable {
      std::vector<float> xf;
      if (xk == Kind::f32) {
        j.x = static_cast<const float*>(xp);
      } else {
        xf.resize(static_cast<size_t>(j.M) * j.K);
        to_f32(xf.data(), xp, xf.size(), xk);
        j.x = xf.data();
      }
      run_job(j);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's native quantized matmul runs on the CPU only");
  }

  const char* name() const override { return "ArchgenQuantizedMatmul"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeQMM*>(&other);
    return o != nullptr && o->group_ == group_ && o->bits_ == bits_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    auto sh = in[0].shape();
    sh.back() = in[1].shape(0);
    return {sh};
  }

 private:
  int group_, bits_;
};

// x W^T for a float32 W [N, K] (in[1]) and x [..., K] (in[0]).
class NativeLinear : public mx::UnaryPrimitive {
 public:
  explicit NativeLinear(mx::Stream s) : UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    const mx::array& x = in[0];
    const mx::array& w = in[1];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    enc.set_input_array(x);
    enc.set_input_array(w);
    enc.set_output_array(out);
    int K = x.shape(-1);
    Job j{x.data<float>(), w.data<uint8_t>(), nullptr, nullptr, Kind::f32, Kind::f32,
          out.data<void>(), static_cast<int>(x.size() / K), w.shape(0), K, 0, 0};
    enc.dispatch([j, x, w, out]() { run_job(j); });
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

}  // namespace

extern "C" int mlxg_native_qmm(void) { return native_enabled() ? 1 : 0; }

namespace {

bool floating(mx::Dtype d) {
  return d == mx::float32 || d == mx::float16 || d == mx::bfloat16;
}

}  // namespace

std::optional<mx::array> archgen_native_qmm(const mx::array& x, const mx::array& w,
                                            const mx::array& scales,
                                            const std::optional<mx::array>& biases,
                                            bool transpose, int group_size, int bits,
                                            const std::string& mode, mx::Stream s) {
  if (!native_enabled() || s.device != mx::Device::cpu || !transpose || mode != "affine" ||
      !biases || (bits != 4 && bits != 8) ||
      (group_size != 32 && group_size != 64 && group_size != 128)) {
    return std::nullopt;
  }
  if (x.ndim() < 1 || w.ndim() != 2 || scales.ndim() != 2 || biases->ndim() != 2 ||
      w.dtype() != mx::uint32 || !floating(x.dtype()) || !floating(scales.dtype()) ||
      biases->dtype() != scales.dtype()) {
    return std::nullopt;
  }
  int K = x.shape(-1);
  int N = w.shape(0);
  if (K % group_size != 0 || w.shape(1) != K * bits / 32 || scales.shape(0) != N ||
      scales.shape(1) != K / group_size || biases->shape() != scales.shape() || x.size() == 0) {
    return std::nullopt;  // mlx's op reports these
  }
  // Only where mlx itself computes in float32: with a half-precision
  // input and half-precision scales, mlx accumulates in half precision,
  // and float32 sums, though closer to the exact product, would not pick
  // the greedy tokens mlx-lm picks on every checkpoint.
  auto dt = mx::promote_types(x.dtype(), scales.dtype());
  if (dt != mx::float32) {
    return std::nullopt;
  }
  auto out_shape = x.shape();
  out_shape.back() = N;
  std::vector<mx::array> inputs = {mx::contiguous(x, false, s), mx::contiguous(w, false, s),
                                   mx::contiguous(scales, false, s),
                                   mx::contiguous(*biases, false, s)};
  return mx::array(out_shape, dt, std::make_shared<NativeQMM>(s, group_size, bits),
                   std::move(inputs));
}

std::optional<mx::array> archgen_native_linear(const mx::array& x, const mx::array& w,
                                               mx::Stream s) {
  if (!native_enabled() || s.device != mx::Device::cpu || x.dtype() != mx::float32 ||
      w.dtype() != mx::float32 || x.ndim() < 1 || w.ndim() != 2 || !w.is_available() ||
      !w.flags().row_contiguous || w.shape(1) != x.shape(-1) || w.shape(1) % 8 != 0 ||
      x.size() == 0) {
    return std::nullopt;
  }
  auto out_shape = x.shape();
  out_shape.back() = w.shape(0);
  return mx::array(out_shape, mx::float32, std::make_shared<NativeLinear>(s),
                   {mx::contiguous(x, false, s), w});
}
