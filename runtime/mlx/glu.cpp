// SiLU, the gated SiLU product and the exact GELU (fastops.h), in lanes of
// 8 or 16.
#include "fastops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "fastkern.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace {

using namespace archgen::fast;

// ---- SiLU and its gated product ----

// libmlx computes silu(g) in float32 as g * sigmoid(g), with sigmoid(g) =
// 1 / (1 + exp(|g|)) for negative g and one minus that otherwise, and its
// exp as 2^k times a Cephes polynomial of the remainder (k = x log2(e)
// rounded half up, that rounding in double precision), one element at a
// time with libm's fmaf. The lanes below do the same operations in the
// same order, each rounded as IEEE rounds it, so every element equals
// libmlx's chain bit for bit; only the loop is wider.
struct GluJob {
  const float* g;
  Rows grows;
  const float* u;  // nullptr: silu(g) alone
  Rows urows;
  float* out;
  int64_t n;  // the last axis
};

// The polynomial's coefficients, highest degree first (Cephes expf).
constexpr float kExpPoly[7] = {1.535336188319500e-4f, 1.339887440266574e-3f,
                               9.618437357674640e-3f, 5.550332471162809e-2f,
                               2.402264791363012e-1f, 6.931472028550421e-1f, 1.0f};

// exp8 is libmlx's exp of x in lanes: 2^k times the Cephes polynomial of
// the remainder, the overflow past 88 and the underflow below -88 cut as
// libmlx cuts them, NaN passed on.
__attribute__((target("avx2,fma,f16c"))) inline __m256 exp8(__m256 x0) {
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  __m256 t = _mm256_mul_ps(x0, _mm256_set1_ps(1.442695f));
  __m256 fl = _mm256_round_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m256 up = _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(t, fl), half, _CMP_GE_OQ), one);
  __m256 k = _mm256_add_ps(fl, up);
  __m256 f = _mm256_sub_ps(t, k);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 7; i++) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExpPoly[i]));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(k), _mm256_set1_epi32(127)), 23);
  __m256 ex = _mm256_mul_ps(_mm256_castsi256_ps(e), p);
  ex = _mm256_blendv_ps(ex, x0, _mm256_cmp_ps(x0, x0, _CMP_UNORD_Q));
  ex = _mm256_blendv_ps(ex, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x0, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
  return _mm256_blendv_ps(ex, _mm256_setzero_ps(), _mm256_cmp_ps(x0, _mm256_set1_ps(-88.0f), _CMP_LT_OQ));
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 silu8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  __m256 y = _mm256_div_ps(one, _mm256_add_ps(one, exp8(a)));
  __m256 s = _mm256_blendv_ps(_mm256_sub_ps(one, y), y,
                              _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_mul_ps(x, s);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) inline __m512 silu16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 a = _mm512_abs_ps(x);
  __m512 t = _mm512_mul_ps(a, _mm512_set1_ps(1.442695f));
  __m512 fl = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(t, fl), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  __m512 k = _mm512_mask_add_ps(fl, up, fl, one);
  __m512 f = _mm512_sub_ps(t, k);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 7; i++) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExpPoly[i]));
  __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(k), _mm512_set1_epi32(127)), 23);
  __m512 ex = _mm512_mul_ps(_mm512_castsi512_ps(e), p);
  ex = _mm512_mask_mov_ps(ex, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  ex = _mm512_mask_mov_ps(ex, _mm512_cmp_ps_mask(a, _mm512_set1_ps(88.0f), _CMP_GT_OQ),
                          _mm512_set1_ps(INFINITY));
  __m512 y = _mm512_div_ps(one, _mm512_add_ps(one, ex));
  __m512 s = _mm512_mask_mov_ps(_mm512_sub_ps(one, y),
                                _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), y);
  return _mm512_mul_ps(x, s);
}

__attribute__((target("avx2,fma,f16c"))) void glu_row8(const float* g, const float* u, float* o,
                                                       int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 y = silu8(_mm256_loadu_ps(g + i));
    if (u != nullptr) y = _mm256_mul_ps(y, _mm256_loadu_ps(u + i));
    _mm256_storeu_ps(o + i, y);
  }
  if (i < n) {  // the tail through a padded block, by the same lanes
    float gb[8] = {}, ub[8] = {}, ob[8];
    std::memcpy(gb, g + i, (n - i) * 4);
    if (u != nullptr) std::memcpy(ub, u + i, (n - i) * 4);
    __m256 y = silu8(_mm256_loadu_ps(gb));
    if (u != nullptr) y = _mm256_mul_ps(y, _mm256_loadu_ps(ub));
    _mm256_storeu_ps(ob, y);
    std::memcpy(o + i, ob, (n - i) * 4);
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void glu_row16(
    const float* g, const float* u, float* o, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 y = silu16(_mm512_maskz_loadu_ps(m, g + i));
    if (u != nullptr) y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(m, u + i));
    _mm512_mask_storeu_ps(o + i, m, y);
  }
}

void run_glu(const GluJob& j) {
  int64_t rows = j.grows.count;
  bool wide = archgen_isa_level() == 2;
  auto body = [&](int64_t r0, int64_t r1) {
    // A row whose last axis is not contiguous (a transposed or broadcast
    // view) is gathered first.
    std::vector<float> gb(j.grows.last_stride != 1 ? j.n : 0);
    std::vector<float> ub(j.u != nullptr && j.urows.last_stride != 1 ? j.n : 0);
    for (int64_t r = r0; r < r1; r++) {
      const float* g = j.g + j.grows.offset(r);
      if (!gb.empty()) {
        gather_f32(gb.data(), g, j.grows.last_stride, j.n, Kind::f32);
        g = gb.data();
      }
      const float* u = j.u != nullptr ? j.u + j.urows.offset(r) : nullptr;
      if (!ub.empty()) {
        gather_f32(ub.data(), u, j.urows.last_stride, j.n, Kind::f32);
        u = ub.data();
      }
      float* o = j.out + r * j.n;
      if (wide) {
        glu_row16(g, u, o, j.n);
      } else {
        glu_row8(g, u, o, j.n);
      }
    }
  };
  auto& pool = Pool::get();
  int tasks = rows * j.n < (1 << 16) ? 1 : static_cast<int>(std::min<int64_t>(rows, pool.threads()));
  int64_t per = (rows + tasks - 1) / tasks;
  pool.run(tasks, [&](int t) { body(t * per, std::min(rows, (t + 1) * per)); });
}

class NativeGLU : public mx::UnaryPrimitive {
 public:
  NativeGLU(mx::Stream s, bool gated) : UnaryPrimitive(s), gated_(gated) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    auto& enc = begin(stream(), in, out);
    const mx::array& g = in[0];
    GluJob j{g.data<float>(), Rows(g), gated_ ? in[1].data<float>() : nullptr,
             gated_ ? Rows(in[1]) : Rows(g), out.data<float>(), g.shape(-1)};
    enc.dispatch([j, in, out]() { run_glu(j); });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's native SiLU runs on the CPU only");
  }

  const char* name() const override { return gated_ ? "ArchgenSwiGLU" : "ArchgenSiLU"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeGLU*>(&other);
    return o != nullptr && o->gated_ == gated_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape()};
  }

 private:
  bool gated_;
};

// ---- the exact GELU ----

// libmlx's GELU chain (the shim's: x / sqrt(2), erf, 1 +, times x, / 2)
// in float32, each op one pass over the array, its erf one element at a
// time with libm's fmaf: Abramowitz and Stegun's 7.1.26 (t = 1 / (1 +
// 0.3275911 |v|), a quartic in t, times exp(-v^2) by the Cephes polynomial
// above), the sign of v applied last (v > 0: the value, else its
// negation). The lanes below run the same operations in the same order,
// each rounded as IEEE rounds it, so every element equals the chain's bit
// for bit, in one pass.
constexpr float kErfPoly[5] = {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f,
                               0.254829592f};

__attribute__((target("avx2,fma,f16c"))) inline __m256 gelu8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 v = _mm256_div_ps(x, _mm256_set1_ps(static_cast<float>(std::sqrt(2.0))));
  __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a, one));
  __m256 r = _mm256_fmadd_ps(_mm256_set1_ps(kErfPoly[0]), t, _mm256_set1_ps(kErfPoly[1]));
  for (int i = 2; i < 5; i++) r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(kErfPoly[i]));
  __m256 nv = _mm256_xor_ps(v, _mm256_set1_ps(-0.0f));
  __m256 e = _mm256_xor_ps(exp8(_mm256_mul_ps(nv, v)), _mm256_set1_ps(-0.0f));
  __m256 res = _mm256_fmadd_ps(_mm256_mul_ps(e, t), r, one);
  __m256 erf = _mm256_blendv_ps(_mm256_xor_ps(res, _mm256_set1_ps(-0.0f)), res,
                                _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ));
  return _mm256_div_ps(_mm256_mul_ps(x, _mm256_add_ps(one, erf)), _mm256_set1_ps(2.0f));
}

__attribute__((target("avx2,fma,f16c"))) void gelu_row8(const float* x, float* o, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, gelu8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float xb[8] = {}, ob[8];
    std::memcpy(xb, x + i, (n - i) * 4);
    _mm256_storeu_ps(ob, gelu8(_mm256_loadu_ps(xb)));
    std::memcpy(o + i, ob, (n - i) * 4);
  }
}

struct GeluJob {
  const float* x;
  Rows rows;
  float* out;
  int64_t n;
};

void run_gelu(const GeluJob& j) {
  int64_t rows = j.rows.count;
  auto body = [&](int64_t r0, int64_t r1) {
    std::vector<float> xb(j.rows.last_stride != 1 ? j.n : 0);
    for (int64_t r = r0; r < r1; r++) {
      const float* x = j.x + j.rows.offset(r);
      if (!xb.empty()) {
        gather_f32(xb.data(), x, j.rows.last_stride, j.n, Kind::f32);
        x = xb.data();
      }
      gelu_row8(x, j.out + r * j.n, j.n);
    }
  };
  auto& pool = Pool::get();
  int tasks = rows * j.n < (1 << 16) ? 1 : static_cast<int>(std::min<int64_t>(rows, pool.threads()));
  int64_t per = (rows + tasks - 1) / tasks;
  pool.run(tasks, [&](int t) { body(t * per, std::min(rows, (t + 1) * per)); });
}

class NativeGELU : public mx::UnaryPrimitive {
 public:
  explicit NativeGELU(mx::Stream s) : UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    auto& enc = begin(stream(), in, out);
    const mx::array& x = in[0];
    GeluJob j{x.data<float>(), Rows(x), out.data<float>(), x.shape(-1)};
    enc.dispatch([j, in, out]() { run_gelu(j); });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's native GELU runs on the CPU only");
  }

  const char* name() const override { return "ArchgenGELU"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return dynamic_cast<const NativeGELU*>(&other) != nullptr;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape()};
  }
};

}  // namespace

std::optional<mx::array> archgen_native_gelu(const mx::array& x, mx::Stream s) {
  if (!fast_enabled() || s.device != mx::Device::cpu || x.dtype() != mx::float32 || x.ndim() < 1 ||
      x.size() == 0) {
    return std::nullopt;
  }
  return mx::array(x.shape(), mx::float32, std::make_shared<NativeGELU>(s), {x});
}

std::optional<mx::array> archgen_native_silu(const mx::array& gate,
                                             const std::optional<mx::array>& up, mx::Stream s) {
  if (!fast_enabled() || s.device != mx::Device::cpu || gate.dtype() != mx::float32 ||
      gate.ndim() < 1 || gate.size() == 0 ||
      (up && (up->dtype() != mx::float32 || up->shape() != gate.shape()))) {
    return std::nullopt;
  }
  std::vector<mx::array> in = {gate};
  if (up) in.push_back(*up);
  return mx::array(gate.shape(), mx::float32, std::make_shared<NativeGLU>(s, up.has_value()),
                   std::move(in));
}
