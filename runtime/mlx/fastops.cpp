// CPU kernels for the ops libmlx calls "fast" but has no CPU kernel for:
// rms_norm, layer_norm, rope and scaled-dot-product attention. On the CPU
// stream libmlx runs each as a chain of small ops (a cast, a square, a
// mean, a reciprocal square root, ...), each one scheduled, allocated and
// dispatched on its own; a decode step's norms, ropes and attentions were
// most of its time. Each kernel here is one MLX primitive that computes
// the same function in one pass over its input, rounding to the array's
// dtype where libmlx's chain stores an intermediate array, so that
// bfloat16 and float16 results match libmlx's to the last bit in nearly
// every element. Every builder returns nullopt where its kernel does not
// apply, and the shim then calls libmlx's own op.
#include "fastops.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "cpukern.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/backend/cpu/simd/simd.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

// The instruction level of the native kernels (qmm.cpp): 2 for AVX-512.
int archgen_isa_level();

namespace {

using archgen::from_f32;
using archgen::gather_f32;
using archgen::Kind;
using archgen::kind_of;
using archgen::load1;
using archgen::Pool;
using archgen::round_to;
using archgen::Rows;
using archgen::store1;

std::atomic<int>& fast_switch() {
  static std::atomic<int> on{[] {
    if (const char* e = std::getenv("ARCHGEN_MLX_NATIVE_FAST")) {
      if (std::strcmp(e, "0") == 0) {
        return 0;
      }
    }
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   __builtin_cpu_supports("f16c")
               ? 1
               : 0;
  }()};
  return on;
}

bool fast_enabled() { return fast_switch().load(std::memory_order_relaxed) != 0; }

// libmlx's own elementwise exp, sin and cos for one float (its CPU build
// here evaluates them one element at a time with these functions).
inline float mlx_exp(float x) { return mx::simd::exp(mx::simd::Simd<float, 1>(x)).value; }
inline float mlx_sin(float x) { return mx::simd::sin(mx::simd::Simd<float, 1>(x)).value; }
inline float mlx_cos(float x) { return mx::simd::cos(mx::simd::Simd<float, 1>(x)).value; }

// The most negative finite value of kind k (what a boolean mask writes).
float lowest(Kind k) {
  switch (k) {
    case Kind::f16:
      return -65504.0f;
    case Kind::bf16:
      return archgen::bf16_to_f32(0xff7f);
    default:
      return -std::numeric_limits<float>::max();
  }
}

// Common setup of a primitive's output and the encoder's view of its arrays.
mx::cpu::CommandEncoder& begin(mx::Stream s, const std::vector<mx::array>& in, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& enc = mx::cpu::get_command_encoder(s);
  for (auto& a : in) {
    enc.set_input_array(a);
  }
  enc.set_output_array(out);
  return enc;
}

// ---- rms_norm and layer_norm ----

struct NormJob {
  const void* x;
  Kind xk;
  Rows rows;
  const void* r;  // nullptr, or a residual of x's kind and shape: the row normed is x + r
  Rows rrows;
  void* sum;      // with r: where x + r is written, rows of n values of x's kind
  const void* w;  // nullptr: no weight
  const void* b;  // nullptr: no bias
  Kind ok;        // output kind; weight and bias have it too
  void* out;
  int n;
  float eps;
  bool layer;  // layer_norm rather than rms_norm
};

// One row as libmlx's chain computes it: the statistics summed in float32
// in index order, the normalized row rounded to the output dtype, then
// times the weight and plus the bias, each rounded again. With a residual,
// the row is first x + r as libmlx's add gives it (the float32 sum rounded
// to x's dtype), which is written out too.
void norm_rows(const NormJob& j, int64_t r0, int64_t r1) {
  std::vector<float> xf(j.n), rf, wf, bf;
  if (j.r != nullptr) {
    rf.resize(j.n);
  }
  if (j.w != nullptr) {
    wf.resize(j.n);
    archgen::to_f32(wf.data(), j.w, j.n, j.ok);
  }
  if (j.b != nullptr) {
    bf.resize(j.n);
    archgen::to_f32(bf.data(), j.b, j.n, j.ok);
  }
  const float inv_n = static_cast<float>(1.0 / j.n);
  size_t esz = archgen::kind_size(j.xk);
  for (int64_t r = r0; r < r1; r++) {
    gather_f32(xf.data(), static_cast<const char*>(j.x) + j.rows.offset(r) * esz,
               j.rows.last_stride, j.n, j.xk);
    if (j.r != nullptr) {
      gather_f32(rf.data(), static_cast<const char*>(j.r) + j.rrows.offset(r) * esz,
                 j.rrows.last_stride, j.n, j.xk);
      for (int i = 0; i < j.n; i++) xf[i] = round_to(xf[i] + rf[i], j.xk);
      from_f32(static_cast<char*>(j.sum) + r * j.n * esz, xf.data(), j.n, j.xk);
    }
    float mu = 0;
    if (j.layer) {
      float s = 0;
      for (int i = 0; i < j.n; i++) s += xf[i];
      mu = s * inv_n;
      for (int i = 0; i < j.n; i++) xf[i] = xf[i] - mu;
    }
    float ss = 0;
    for (int i = 0; i < j.n; i++) ss += xf[i] * xf[i];
    float scale = 1.0f / std::sqrt(ss * inv_n + j.eps);
    float* y = xf.data();
    for (int i = 0; i < j.n; i++) {
      float v = round_to(y[i] * scale, j.ok);
      if (j.w != nullptr) v = round_to(v * wf[i], j.ok);
      if (j.b != nullptr) v = round_to(v + bf[i], j.ok);
      y[i] = v;
    }
    from_f32(static_cast<char*>(j.out) + r * j.n * archgen::kind_size(j.ok), y, j.n, j.ok);
  }
}

void run_norm(const NormJob& j) {
  int64_t rows = j.rows.count;
  int64_t work = rows * j.n;
  auto& pool = Pool::get();
  int tasks = work < (1 << 17) ? 1 : static_cast<int>(std::min<int64_t>(rows, pool.threads()));
  int64_t per = (rows + tasks - 1) / tasks;
  pool.run(tasks, [&](int t) {
    int64_t lo = t * per, hi = std::min(rows, (t + 1) * per);
    if (lo < hi) norm_rows(j, lo, hi);
  });
}

// rms_norm or layer_norm of in[0]; with residual_, of in[0] + in[1], with
// that sum as a first output and the normed sum as the second. The weight
// and the bias follow, where there are.
class NativeNorm : public mx::Primitive {
 public:
  NativeNorm(mx::Stream s, float eps, bool layer, bool has_w, bool has_b, bool residual)
      : Primitive(s), eps_(eps), layer_(layer), has_w_(has_w), has_b_(has_b), residual_(residual) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) {
      enc.set_input_array(a);
    }
    for (auto& o : outs) {
      o.set_data(mx::allocator::malloc(o.nbytes()));
      enc.set_output_array(o);
    }
    const mx::array& x = in[0];
    mx::array& out = outs.back();
    int k = residual_ ? 2 : 1;
    const void* w = has_w_ ? in[k++].data<void>() : nullptr;
    const void* b = has_b_ ? in[k++].data<void>() : nullptr;
    NormJob j{x.data<void>(), kind_of(x.dtype()), Rows(x),
              residual_ ? in[1].data<void>() : nullptr, residual_ ? Rows(in[1]) : Rows(x),
              residual_ ? outs[0].data<void>() : nullptr, w, b, kind_of(out.dtype()),
              out.data<void>(), x.shape(-1), eps_, layer_};
    enc.dispatch([j, in, outs]() { run_norm(j); });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's native norm runs on the CPU only");
  }

  const char* name() const override {
    if (residual_) return layer_ ? "ArchgenAddLayerNorm" : "ArchgenAddRMSNorm";
    return layer_ ? "ArchgenLayerNorm" : "ArchgenRMSNorm";
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeNorm*>(&other);
    return o != nullptr && o->eps_ == eps_ && o->layer_ == layer_ && o->has_w_ == has_w_ &&
           o->has_b_ == has_b_ && o->residual_ == residual_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    if (residual_) return {in[0].shape(), in[0].shape()};
    return {in[0].shape()};
  }

 private:
  float eps_;
  bool layer_, has_w_, has_b_, residual_;
};

// ---- rope ----

struct RopeJob {
  const void* x;
  Kind k;
  Rows rows;  // x as [B * N * T, D]
  int64_t B, N, T;
  int D, dims;
  bool traditional;
  float scale;
  const int32_t* offsets;  // one, or one per batch row
  bool per_batch;
  const float* inv_freqs;  // dims / 2
  void* out;
};

// Rotates row (b, n, t) of x; cs holds the cos and sin of each of its
// frequencies, already rounded to x's dtype.
__attribute__((target("avx2,fma,f16c"))) void rope_row(const RopeJob& j, int64_t r,
                                                       const float* cs, float* buf) {
  size_t esz = archgen::kind_size(j.k);
  gather_f32(buf, static_cast<const char*>(j.x) + j.rows.offset(r) * esz, j.rows.last_stride,
             j.D, j.k);
  int half = j.dims / 2;
  float* y = buf + j.D;
  for (int i = 0; i < half; i++) {
    int a = j.traditional ? 2 * i : i;
    int b = j.traditional ? 2 * i + 1 : i + half;
    float x1 = buf[a], x2 = buf[b], c = cs[2 * i], s = cs[2 * i + 1];
    y[a] = round_to(round_to(x1 * c, j.k) - round_to(x2 * s, j.k), j.k);
    y[b] = round_to(round_to(x1 * s, j.k) + round_to(x2 * c, j.k), j.k);
  }
  for (int i = j.dims; i < j.D; i++) y[i] = buf[i];
  from_f32(static_cast<char*>(j.out) + r * j.D * esz, y, j.D, j.k);
}

// The cos and sin table of one rope call, kept for the next: every layer
// of a step rotates the same positions by the same frequencies.
struct RopeTable {
  std::vector<float> inv;
  std::vector<int32_t> offsets;
  float scale = 0;
  int64_t T = -1;
  Kind k = Kind::f32;
  std::vector<float> cs;  // [offsets][T][half][cos, sin]
};

const std::vector<float>& rope_table(const RopeJob& j) {
  thread_local RopeTable tab;
  int half = j.dims / 2;
  int64_t nb = j.per_batch ? j.B : 1;
  bool same = tab.T == j.T && tab.k == j.k && tab.scale == j.scale &&
              tab.inv.size() == static_cast<size_t>(half) &&
              std::equal(tab.inv.begin(), tab.inv.end(), j.inv_freqs) &&
              tab.offsets.size() == static_cast<size_t>(nb) &&
              std::equal(tab.offsets.begin(), tab.offsets.end(), j.offsets);
  if (same) {
    return tab.cs;
  }
  tab.inv.assign(j.inv_freqs, j.inv_freqs + half);
  tab.offsets.assign(j.offsets, j.offsets + nb);
  tab.scale = j.scale;
  tab.T = j.T;
  tab.k = j.k;
  tab.cs.resize(static_cast<size_t>(nb) * j.T * 2 * half);
  // Positions as libmlx forms them: (t + offset) in float32, times scale.
  for (int64_t b0 = 0; b0 < nb; b0++) {
    float off = static_cast<float>(j.offsets[b0]);
    for (int64_t t = 0; t < j.T; t++) {
      float pos = (static_cast<float>(t) + off) * j.scale;
      float* cs = tab.cs.data() + (b0 * j.T + t) * 2 * half;
      for (int i = 0; i < half; i++) {
        float theta = pos * j.inv_freqs[i];
        cs[2 * i] = round_to(mlx_cos(theta), j.k);
        cs[2 * i + 1] = round_to(mlx_sin(theta), j.k);
      }
    }
  }
  return tab.cs;
}

void run_rope(const RopeJob& j) {
  int half = j.dims / 2;
  std::vector<float> buf(2 * j.D);
  const std::vector<float>& tab = rope_table(j);
  int64_t nb = j.per_batch ? j.B : 1;
  for (int64_t b0 = 0; b0 < nb; b0++) {
    for (int64_t t = 0; t < j.T; t++) {
      const float* cs = tab.data() + (b0 * j.T + t) * 2 * half;
      int64_t blo = j.per_batch ? b0 : 0, bhi = j.per_batch ? b0 + 1 : j.B;
      for (int64_t b = blo; b < bhi; b++) {
        for (int64_t n = 0; n < j.N; n++) {
          rope_row(j, (b * j.N + n) * j.T + t, cs, buf.data());
        }
      }
    }
  }
}

// ---- cache writes ----

// Copies a 4-D array a (any strides) into dst, a row-major buffer of a's
// shape but T entries on axis 2, from entry at of that axis on.
void copy_positions(const mx::array& a, char* dst, int64_t T, int64_t at) {
  const size_t esz = a.itemsize();
  const int64_t B = a.shape(0), H = a.shape(1), L = a.shape(2), D = a.shape(3);
  const auto& st = a.strides();
  const char* src = a.data<char>();
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < H; h++) {
      for (int64_t t = 0; t < L; t++) {
        const char* s0 = src + (b * st[0] + h * st[1] + t * st[2]) * esz;
        char* d0 = dst + (((b * H + h) * T + at + t) * D) * esz;
        if (st[3] == 1) {
          std::memcpy(d0, s0, D * esz);
        } else {
          for (int64_t d = 0; d < D; d++) std::memcpy(d0 + d * esz, s0 + d * st[3] * esz, esz);
        }
      }
    }
  }
}

// Writes updates [B, H, n, D_p] (in[count_ + p]) into arrays [B, H, T, D_p]
// (in[p]) from position at_ of axis 2 on, an output each: a cache's keys
// and values (and a quantized cache's scales and biases) in one op. As
// mlx's slice_update, an array no one else holds gives its buffer to the
// output, which is then written in place; any other is copied first.
class NativeWritePositions : public mx::Primitive {
 public:
  NativeWritePositions(mx::Stream s, int count, int at) : Primitive(s), count_(count), at_(at) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) {
      enc.set_input_array(a);
    }
    // Every output holds a copy of the inputs, so an array given to this op
    // alone would never look free to give its buffer away. By now every
    // input is computed, and the outputs other than the one whose inputs
    // these are need theirs no more: they let them go, and each array's
    // holders are then what they are for mlx's own slice_update.
    for (auto& o : outs) {
      if (&o.inputs() != &in && !o.is_tracer()) {
        o.inputs().clear();
      }
    }
    std::vector<bool> whole(count_);
    for (int p = 0; p < count_; p++) {
      const mx::array& a = in[p];
      mx::array& out = outs[p];
      whole[p] = !(a.is_donatable() && a.flags().row_contiguous && a.data_size() == a.size());
      if (whole[p]) {
        out.set_data(mx::allocator::malloc(out.nbytes()));
      } else {
        out.copy_shared_buffer(a);
      }
      enc.set_output_array(out);
    }
    const int n = count_;
    const int64_t at = at_;
    enc.dispatch([in, outs, whole, n, at]() mutable {
      for (int p = 0; p < n; p++) {
        char* dst = outs[p].data<char>();
        const int64_t T = outs[p].shape(2);
        if (whole[p]) {
          copy_positions(in[p], dst, T, 0);
        }
        copy_positions(in[n + p], dst, T, at);
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's native cache write runs on the CPU only");
  }

  const char* name() const override { return "ArchgenWritePositions"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeWritePositions*>(&other);
    return o != nullptr && o->count_ == count_ && o->at_ == at_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    std::vector<mx::Shape> shapes;
    for (int p = 0; p < count_; p++) shapes.push_back(in[p].shape());
    return shapes;
  }

 private:
  int count_, at_;
};

// Rotates count_ arrays (a layer's queries and keys) by the same positions
// and frequencies, an output each: in is x_0 .. x_{count_-1}, the offsets,
// and the frequencies where freqs_ is set. The cos and sin table is made
// once for them all.
class NativeRope : public mx::Primitive {
 public:
  NativeRope(mx::Stream s, int count, int dims, bool traditional, float base, float scale,
             bool freqs)
      : Primitive(s),
        count_(count),
        dims_(dims),
        traditional_(traditional),
        base_(base),
        scale_(scale),
        freqs_(freqs) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& a : in) {
      enc.set_input_array(a);
    }
    const mx::array& off = in[count_];
    int half = dims_ / 2;
    // The inverse frequencies, as libmlx computes them: exp(-i * log(base)
    // / half) in float32, or 1 / freqs.
    auto inv = std::make_shared<std::vector<float>>(half);
    if (freqs_) {
      const float* f = in[count_ + 1].data<float>();
      for (int i = 0; i < half; i++) (*inv)[i] = 1.0f / f[i];
    } else {
      float c = std::log(base_) / half;
      for (int i = 0; i < half; i++) (*inv)[i] = mlx_exp(static_cast<float>(-i) * c);
    }
    std::vector<RopeJob> jobs;
    for (int p = 0; p < count_; p++) {
      const mx::array& x = in[p];
      mx::array& out = outs[p];
      out.set_data(mx::allocator::malloc(out.nbytes()));
      enc.set_output_array(out);
      int nd = static_cast<int>(x.ndim());
      int64_t B = x.shape(0), T = x.shape(nd - 2), N = 1;
      for (int i = 1; i < nd - 2; i++) N *= x.shape(i);
      jobs.push_back(RopeJob{x.data<void>(), kind_of(x.dtype()), Rows(x), B, N, T, x.shape(-1),
                             dims_, traditional_, scale_, off.data<int32_t>(), off.size() > 1,
                             inv->data(), out.data<void>()});
    }
    enc.dispatch([jobs, inv, in, outs]() {
      for (const auto& j : jobs) run_rope(j);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's native rope runs on the CPU only");
  }

  const char* name() const override { return "ArchgenRoPE"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeRope*>(&other);
    return o != nullptr && o->count_ == count_ && o->dims_ == dims_ &&
           o->traditional_ == traditional_ && o->base_ == base_ && o->scale_ == scale_ &&
           o->freqs_ == freqs_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    std::vector<mx::Shape> shapes;
    for (int p = 0; p < count_; p++) shapes.push_back(in[p].shape());
    return shapes;
  }

 private:
  int count_;
  int dims_;
  bool traditional_;
  float base_, scale_;
  bool freqs_;
};

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

__attribute__((target("avx2,fma,f16c"))) inline __m256 silu8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  __m256 t = _mm256_mul_ps(a, _mm256_set1_ps(1.442695f));
  // floor(t + 0.5) as double precision gives it: floor(t), plus one where
  // the (exact) fraction is at least a half.
  __m256 fl = _mm256_round_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m256 up = _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(t, fl), half, _CMP_GE_OQ), one);
  __m256 k = _mm256_add_ps(fl, up);
  __m256 f = _mm256_sub_ps(t, k);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 7; i++) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExpPoly[i]));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(k), _mm256_set1_epi32(127)), 23);
  __m256 ex = _mm256_mul_ps(_mm256_castsi256_ps(e), p);
  ex = _mm256_blendv_ps(ex, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  ex = _mm256_blendv_ps(ex, _mm256_set1_ps(INFINITY),
                        _mm256_cmp_ps(a, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
  __m256 y = _mm256_div_ps(one, _mm256_add_ps(one, ex));
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

// ---- scaled-dot-product attention ----

struct Strided4 {
  const char* p;
  int64_t s[4];  // element strides of [B, H, L, D]
};

Strided4 strided4(const mx::array& a) {
  Strided4 v{static_cast<const char*>(a.data<void>()), {0, 0, 0, 0}};
  int nd = static_cast<int>(a.ndim());
  for (int i = 0; i < nd; i++) {
    int d = 4 - nd + i;
    v.s[d] = a.shape(i) == 1 ? 0 : static_cast<int64_t>(a.strides()[i]);
  }
  return v;
}

struct AttnJob {
  Strided4 q, k, v, mask;
  Kind t;
  bool has_mask, bool_mask, causal;
  const void* sinks;  // [Hq] of kind t, or nullptr
  int B, Hq, Hkv, L, S, D, Dv;
  float scale;  // rounded to t
  void* out;    // [B, Hq, L, Dv]
};

__attribute__((target("avx2,fma,f16c"))) inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma,f16c"))) inline float dot(const float* a, const float* b, int n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
  }
  float s = hsum8(_mm256_add_ps(a0, a1));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

// y += a * x over n floats.
__attribute__((target("avx2,fma,f16c"))) inline void axpy(float* y, float a, const float* x, int n) {
  __m256 av = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; i++) y[i] += a * x[i];
}

// exp(x) for 8 floats (range reduction to 2^n * exp(r), |r| <= ln2/2, and
// a degree-6 polynomial); 0 below the smallest normal result.
__attribute__((target("avx2,fma,f16c"))) inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365447504f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

// Rounds 8 floats to kind k and back.
__attribute__((target("avx2,fma,f16c"))) inline __m256 round8(__m256 v, Kind k) {
  if (k == Kind::f16) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  if (k == Kind::bf16) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    u = _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
    return _mm256_castsi256_ps(u);
  }
  return v;
}

// Softmax over n scores in place, with an optional sink logit taking part
// in the maximum and the sum, as libmlx's precise softmax does it: exp(s -
// max) summed in float32, times the reciprocal of the sum, rounded to t.
__attribute__((target("avx2,fma,f16c"))) void softmax_row(float* s, int n, const float* sink,
                                                          Kind t) {
  float m = sink != nullptr ? *sink : -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; j++) m = std::max(m, s[j]);
  __m256 mv = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum8(acc);
  for (; j < n; j++) {
    s[j] = mlx_exp(s[j] - m);
    sum += s[j];
  }
  if (sink != nullptr) sum += mlx_exp(*sink - m);
  float norm = 1.0f / sum;
  __m256 nv = _mm256_set1_ps(norm);
  for (j = 0; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(s + j, round8(_mm256_mul_ps(_mm256_loadu_ps(s + j), nv), t));
  }
  for (; j < n; j++) s[j] = round_to(s[j] * norm, t);
}

// attend for float32 without a mask array, on AVX-512: the REP query
// heads of one KV head's group together, so that each key and value row is
// read once for all of them, and each head's output (NV vectors of 16) is
// kept in registers across the keys. The scores and the softmax are
// attend's; the weighted sum adds the same products per key in the same
// order, in lanes of 16 rather than 8.
template <int REP, int NV>
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void attend_group512(
    const AttnJob& j, int b, int h0, int l0, int l1, const float* kp, size_t kld, const float* vp,
    size_t vld) {
  thread_local std::vector<float> qf, sc;
  qf.resize(static_cast<size_t>(REP) * j.D);
  sc.resize(static_cast<size_t>(REP) * j.S);
  for (int l = l0; l < l1; l++) {
    int n = j.S;
    if (j.causal) n = std::min(l + j.S - j.L + 1, j.S);
    for (int r = 0; r < REP; r++) {
      float* q = qf.data() + r * j.D;
      gather_f32(q, j.q.p + (b * j.q.s[0] + (h0 + r) * j.q.s[1] + l * j.q.s[2]) * 4, j.q.s[3],
                 j.D, Kind::f32);
      for (int d = 0; d < j.D; d += 16) {
        _mm512_storeu_ps(q + d, _mm512_mul_ps(_mm512_loadu_ps(q + d), _mm512_set1_ps(j.scale)));
      }
    }
    for (int s = 0; s < n; s++) {
      const float* k = kp + s * kld;
      __m512 a[REP];
#pragma GCC unroll 4
      for (int r = 0; r < REP; r++) a[r] = _mm512_setzero_ps();
      for (int d = 0; d < j.D; d += 16) {
        const __m512 kv = _mm512_loadu_ps(k + d);
#pragma GCC unroll 4
        for (int r = 0; r < REP; r++) a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(qf.data() + r * j.D + d), kv, a[r]);
      }
#pragma GCC unroll 4
      for (int r = 0; r < REP; r++) sc[r * j.S + s] = _mm512_reduce_add_ps(a[r]);
    }
    __m512 acc[REP][NV];
#pragma GCC unroll 4
    for (int r = 0; r < REP; r++) {
      float sink = j.sinks != nullptr ? load1(j.sinks, h0 + r, Kind::f32) : 0.0f;
      softmax_row(sc.data() + r * j.S, n, j.sinks != nullptr ? &sink : nullptr, Kind::f32);
#pragma GCC unroll 8
      for (int c = 0; c < NV; c++) acc[r][c] = _mm512_setzero_ps();
    }
    for (int s = 0; s < n; s++) {
      const float* v = vp + s * vld;
#pragma GCC unroll 8
      for (int c = 0; c < NV; c++) {
        const __m512 vv = _mm512_loadu_ps(v + 16 * c);
#pragma GCC unroll 4
        for (int r = 0; r < REP; r++) {
          acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(sc[r * j.S + s]), vv, acc[r][c]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < REP; r++) {
      float* o = static_cast<float*>(j.out) + ((static_cast<size_t>(b) * j.Hq + h0 + r) * j.L + l) * j.Dv;
#pragma GCC unroll 8
      for (int c = 0; c < NV; c++) _mm512_storeu_ps(o + 16 * c, acc[r][c]);
    }
  }
}

// Runs attend_group512 where it applies (true): value rows of 64 (in
// pieces of up to 4 heads of the group) or of 128 (up to 2 heads), each
// piece reading the group's keys and values once for its heads.
bool attend_fast(const AttnJob& j, int b, int h0, int rep, int l0, int l1, const float* kp,
                 size_t kld, const float* vp, size_t vld) {
  if (archgen_isa_level() != 2 || j.t != Kind::f32 || j.has_mask || j.D % 16 != 0 ||
      (j.causal && l0 + j.S - j.L + 1 <= 0)) {
    return false;
  }
  const int piece = j.Dv == 64 ? 4 : j.Dv == 128 ? 2 : 0;
  if (piece == 0) {
    return false;
  }
  for (int h = 0; h < rep; h += piece) {
    const int r = std::min(piece, rep - h);
#define ARCHGEN_GROUP(R, V) \
  if (r == R && j.Dv == 16 * V) attend_group512<R, V>(j, b, h0 + h, l0, l1, kp, kld, vp, vld);
    ARCHGEN_GROUP(1, 4) ARCHGEN_GROUP(2, 4) ARCHGEN_GROUP(3, 4) ARCHGEN_GROUP(4, 4)
    ARCHGEN_GROUP(1, 8) ARCHGEN_GROUP(2, 8)
#undef ARCHGEN_GROUP
  }
  return true;
}

// The rows [l0, l1) of queries of heads [h0, h1) (one KV head's group) of
// batch row b.
__attribute__((target("avx2,fma,f16c"))) void attend(const AttnJob& j, int b, int hkv, int l0,
                                                    int l1) {
  int rep = j.Hq / j.Hkv;
  int h0 = hkv * rep;
  size_t esz = archgen::kind_size(j.t);
  thread_local std::vector<float> kf, vf, qf, sc, acc;
  // The group's keys and values as float32 rows: read in place where they
  // are float32 with unit stride along D (a cache's buffer), converted
  // once otherwise (they are read once per query row).
  int jend_all = j.S;
  if (j.causal) jend_all = std::max(0, std::min(j.S, (l1 - 1) + j.S - j.L + 1));
  if (jend_all == 0) jend_all = j.S;  // every row fully masked: see below
  const float *kp, *vp;
  size_t kld, vld;
  if (j.t == Kind::f32 && j.k.s[3] == 1 && j.v.s[3] == 1) {
    kp = reinterpret_cast<const float*>(j.k.p) + b * j.k.s[0] + hkv * j.k.s[1];
    vp = reinterpret_cast<const float*>(j.v.p) + b * j.v.s[0] + hkv * j.v.s[1];
    kld = j.k.s[2];
    vld = j.v.s[2];
  } else {
    kf.resize(static_cast<size_t>(jend_all) * j.D);
    vf.resize(static_cast<size_t>(jend_all) * j.Dv);
    for (int s = 0; s < jend_all; s++) {
      gather_f32(kf.data() + static_cast<size_t>(s) * j.D,
                 j.k.p + (b * j.k.s[0] + hkv * j.k.s[1] + s * j.k.s[2]) * esz, j.k.s[3], j.D,
                 j.t);
      gather_f32(vf.data() + static_cast<size_t>(s) * j.Dv,
                 j.v.p + (b * j.v.s[0] + hkv * j.v.s[1] + s * j.v.s[2]) * esz, j.v.s[3], j.Dv,
                 j.t);
    }
    kp = kf.data();
    vp = vf.data();
    kld = j.D;
    vld = j.Dv;
  }
  if (attend_fast(j, b, h0, rep, l0, l1, kp, kld, vp, vld)) {
    return;
  }
  qf.resize(j.D);
  sc.resize(j.S);
  acc.resize(j.Dv);
  const float low = lowest(j.t);
  for (int h = h0; h < h0 + rep; h++) {
    float sink = j.sinks != nullptr ? load1(j.sinks, h, j.t) : 0.0f;
    for (int l = l0; l < l1; l++) {
      gather_f32(qf.data(), j.q.p + (b * j.q.s[0] + h * j.q.s[1] + l * j.q.s[2]) * esz,
                 j.q.s[3], j.D, j.t);
      for (int d = 0; d < j.D; d++) qf[d] = round_to(qf[d] * j.scale, j.t);
      // Keys past a causal row's last are masked to the lowest value,
      // whose exp is 0 beside any real score: they are left out. A row
      // with no key to see (more queries than keys) sees all of them
      // equally, as libmlx's softmax over lowest values gives.
      int n = j.S;
      bool none = false;
      if (j.causal) {
        n = l + j.S - j.L + 1;
        if (n <= 0) {
          n = j.S;
          none = true;
        }
        n = std::min(n, j.S);
      }
      for (int s = 0; s < n; s++) {
        float v = none ? low : round_to(dot(qf.data(), kp + s * kld, j.D), j.t);
        if (j.has_mask) {
          const char* mp = j.mask.p + (b * j.mask.s[0] + h * j.mask.s[1] + l * j.mask.s[2] +
                                       s * j.mask.s[3]) * (j.bool_mask ? 1 : esz);
          if (j.bool_mask) {
            if (*mp == 0) v = low;
          } else {
            v = round_to(v + load1(mp, 0, j.t), j.t);
          }
        }
        sc[s] = v;
      }
      softmax_row(sc.data(), n, j.sinks != nullptr ? &sink : nullptr, j.t);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int s = 0; s < n; s++) {
        if (sc[s] != 0.0f) axpy(acc.data(), sc[s], vp + s * vld, j.Dv);
      }
      from_f32(static_cast<char*>(j.out) +
                   ((static_cast<size_t>(b) * j.Hq + h) * j.L + l) * j.Dv * esz,
               acc.data(), j.Dv, j.t);
    }
  }
}

void run_attention(const AttnJob& j) {
  // Tasks: (batch row, KV head, a block of query rows).
  int lb = j.L <= 16 ? j.L : 16;
  int lblocks = (j.L + lb - 1) / lb;
  int tasks = j.B * j.Hkv * lblocks;
  double work = static_cast<double>(j.B) * j.Hq * j.L * j.S * (j.D + j.Dv);
  auto& pool = Pool::get();
  auto body = [&](int t) {
    int lbk = t % lblocks, rest = t / lblocks;
    int hkv = rest % j.Hkv, b = rest / j.Hkv;
    int l0 = lbk * lb, l1 = std::min(j.L, l0 + lb);
    attend(j, b, hkv, l0, l1);
  };
  if (work < (1 << 18) || pool.threads() == 1) {
    for (int t = 0; t < tasks; t++) body(t);
    return;
  }
  // Causal blocks near the end see more keys: hand them out first.
  pool.run(tasks, [&](int t) { body(j.causal ? tasks - 1 - t : t); });
}

class NativeSDPA : public mx::UnaryPrimitive {
 public:
  NativeSDPA(mx::Stream s, float scale, bool causal, bool has_mask, bool has_sinks)
      : UnaryPrimitive(s),
        scale_(scale),
        causal_(causal),
        has_mask_(has_mask),
        has_sinks_(has_sinks) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    auto& enc = begin(stream(), in, out);
    const mx::array &q = in[0], &k = in[1], &v = in[2];
    Kind t = kind_of(q.dtype());
    AttnJob j{strided4(q), strided4(k), strided4(v), {nullptr, {0, 0, 0, 0}}, t, has_mask_,
              false, causal_, nullptr, q.shape(0), q.shape(1), k.shape(1), q.shape(2),
              k.shape(2), q.shape(3), v.shape(3), round_to(scale_, t), out.data<void>()};
    int i = 3;
    if (has_mask_) {
      j.mask = strided4(in[i]);
      j.bool_mask = in[i].dtype() == mx::bool_;
      i++;
    }
    if (has_sinks_) {
      j.sinks = in[i].data<void>();
    }
    enc.dispatch([j, in, out]() { run_attention(j); });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("archgen's native attention runs on the CPU only");
  }

  const char* name() const override { return "ArchgenSDPA"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeSDPA*>(&other);
    return o != nullptr && o->scale_ == scale_ && o->causal_ == causal_ &&
           o->has_mask_ == has_mask_ && o->has_sinks_ == has_sinks_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {{in[0].shape(0), in[0].shape(1), in[0].shape(2), in[2].shape(3)}};
  }

 private:
  float scale_;
  bool causal_, has_mask_, has_sinks_;
};

}  // namespace

extern "C" int mlxg_native_fast(void) { return fast_enabled() ? 1 : 0; }

extern "C" int mlxg_set_native_fast(int on) {
  static const bool cpu_ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return fast_switch().exchange(on && cpu_ok ? 1 : 0);
}

namespace {

// The inputs of a native norm of x (after residual, when there is one) and
// its output dtype, libmlx's: x's, or promoted with the weight's (and the
// bias's, with a weight); nullopt where the kernel does not apply.
std::optional<std::pair<std::vector<mx::array>, mx::Dtype>> norm_inputs(
    const mx::array& x, const std::optional<mx::array>& residual,
    const std::optional<mx::array>& weight, const std::optional<mx::array>& bias, mx::Stream s) {
  if (!fast_enabled() || s.device != mx::Device::cpu || x.ndim() < 1 || x.size() == 0 ||
      !archgen::kernel_float(x.dtype())) {
    return std::nullopt;
  }
  if (residual && (residual->dtype() != x.dtype() || residual->shape() != x.shape())) {
    return std::nullopt;
  }
  int n = x.shape(-1);
  for (auto* p : {&weight, &bias}) {
    if (*p && ((*p)->ndim() != 1 || (*p)->shape(0) != n || !archgen::kernel_float((*p)->dtype()))) {
      return std::nullopt;  // mlx's op reports these
    }
  }
  mx::Dtype ot = x.dtype();
  if (weight) ot = bias ? mx::result_type(x, *weight, *bias) : mx::result_type(x, *weight);
  if (!archgen::kernel_float(ot)) {
    return std::nullopt;
  }
  std::vector<mx::array> in = {x};
  if (residual) in.push_back(*residual);
  if (weight) in.push_back(mx::astype(*weight, ot, s));
  if (bias) in.push_back(mx::astype(*bias, ot, s));
  return std::make_pair(std::move(in), ot);
}

}  // namespace

std::optional<mx::array> archgen_native_norm(const mx::array& x,
                                             const std::optional<mx::array>& weight,
                                             const std::optional<mx::array>& bias, float eps,
                                             bool layer, mx::Stream s) {
  auto in = norm_inputs(x, std::nullopt, weight, bias, s);
  if (!in) {
    return std::nullopt;
  }
  return mx::array(
      x.shape(), in->second,
      std::make_shared<NativeNorm>(s, eps, layer, weight.has_value(), bias.has_value(), false),
      std::move(in->first));
}

std::optional<std::vector<mx::array>> archgen_native_add_norm(
    const mx::array& x, const mx::array& residual, const std::optional<mx::array>& weight,
    const std::optional<mx::array>& bias, float eps, bool layer, mx::Stream s) {
  auto in = norm_inputs(x, residual, weight, bias, s);
  if (!in) {
    return std::nullopt;
  }
  return mx::array::make_arrays(
      {x.shape(), x.shape()}, {x.dtype(), in->second},
      std::make_shared<NativeNorm>(s, eps, layer, weight.has_value(), bias.has_value(), true),
      std::move(in->first));
}

std::optional<std::vector<mx::array>> archgen_native_write_positions(
    const std::vector<mx::array>& arrs, const std::vector<mx::array>& updates, int at,
    mx::Stream s) {
  if (!fast_enabled() || s.device != mx::Device::cpu || arrs.empty() ||
      arrs.size() != updates.size() || at < 0) {
    return std::nullopt;
  }
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (size_t p = 0; p < arrs.size(); p++) {
    const auto& a = arrs[p];
    const auto& u = updates[p];
    if (a.ndim() != 4 || u.ndim() != 4 || a.dtype() != u.dtype() || u.shape(0) != a.shape(0) ||
        u.shape(1) != a.shape(1) || u.shape(3) != a.shape(3) ||
        at + u.shape(2) > a.shape(2)) {
      return std::nullopt;  // mlx's slice_update reports what is wrong
    }
    shapes.push_back(a.shape());
    dtypes.push_back(a.dtype());
  }
  std::vector<mx::array> in = arrs;
  in.insert(in.end(), updates.begin(), updates.end());
  return mx::array::make_arrays(
      std::move(shapes), dtypes,
      std::make_shared<NativeWritePositions>(s, static_cast<int>(arrs.size()), at),
      std::move(in));
}

std::optional<std::vector<mx::array>> archgen_native_ropes(
    const std::vector<mx::array>& xs, int dims, bool traditional, std::optional<float> base,
    float scale, const mx::array& offset, const std::optional<mx::array>& freqs, mx::Stream s) {
  if (!fast_enabled() || s.device != mx::Device::cpu || xs.empty() || dims <= 0 ||
      dims % 2 != 0 || base.has_value() == freqs.has_value() || offset.ndim() > 1 ||
      !mx::issubdtype(offset.dtype(), mx::integer)) {
    return std::nullopt;
  }
  if (freqs && (freqs->ndim() != 1 || freqs->shape(0) != dims / 2)) {
    return std::nullopt;
  }
  std::vector<mx::array> in;
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (const auto& x : xs) {
    // Each as mlx's rope takes it, all of one dtype (and so one table).
    if (x.ndim() < 3 || x.size() == 0 || !archgen::kernel_float(x.dtype()) ||
        x.dtype() != xs[0].dtype() || dims > x.shape(-1) ||
        (offset.size() != 1 && offset.size() != static_cast<size_t>(x.shape(0)))) {
      return std::nullopt;
    }
    in.push_back(x);
    shapes.push_back(x.shape());
    dtypes.push_back(x.dtype());
  }
  in.push_back(mx::astype(offset, mx::int32, s));
  if (freqs) in.push_back(mx::astype(*freqs, mx::float32, s));
  return mx::array::make_arrays(
      std::move(shapes), dtypes,
      std::make_shared<NativeRope>(s, static_cast<int>(xs.size()), dims, traditional,
                                   base.value_or(1.0f), scale, freqs.has_value()),
      std::move(in));
}

std::optional<mx::array> archgen_native_rope(const mx::array& x, int dims, bool traditional,
                                             std::optional<float> base, float scale,
                                             const mx::array& offset,
                                             const std::optional<mx::array>& freqs,
                                             mx::Stream s) {
  auto ys = archgen_native_ropes({x}, dims, traditional, base, scale, offset, freqs, s);
  if (!ys) {
    return std::nullopt;
  }
  return std::move(ys->front());
}

std::optional<mx::array> archgen_native_sdpa(const mx::array& q, const mx::array& k,
                                             const mx::array& v, float scale,
                                             const std::string& mask_mode,
                                             const std::optional<mx::array>& mask,
                                             const std::optional<mx::array>& sinks,
                                             mx::Stream s) {
  if (!fast_enabled() || s.device != mx::Device::cpu || q.ndim() != 4 || k.ndim() != 4 ||
      v.ndim() != 4 || q.dtype() != k.dtype() || q.dtype() != v.dtype() ||
      !archgen::kernel_float(q.dtype()) || q.size() == 0 || k.shape(2) == 0) {
    return std::nullopt;
  }
  int B = q.shape(0), Hq = q.shape(1), L = q.shape(2), S = k.shape(2);
  if (k.shape(0) != B || v.shape(0) != B || k.shape(3) != q.shape(3) ||
      v.shape(1) != k.shape(1) || v.shape(2) != S || k.shape(1) == 0 ||
      Hq % k.shape(1) != 0) {
    return std::nullopt;
  }
  bool causal = mask_mode == "causal";
  if (!(mask_mode.empty() || causal || mask_mode == "array") || (causal && mask) ||
      (mask_mode == "array" && !mask)) {
    return std::nullopt;
  }
  std::vector<mx::array> in = {q, k, v};
  if (mask) {
    const int want[4] = {B, Hq, L, S};
    int nd = static_cast<int>(mask->ndim());
    if (nd > 4 || mx::promote_types(mask->dtype(), q.dtype()) != q.dtype()) {
      return std::nullopt;
    }
    for (int i = 0; i < nd; i++) {
      int d = mask->shape(i), w = want[4 - nd + i];
      if (d != 1 && d != w) return std::nullopt;
    }
    in.push_back(mask->dtype() == mx::bool_ ? *mask : mx::astype(*mask, q.dtype(), s));
  }
  if (sinks) {
    if (sinks->ndim() != 1 || sinks->shape(0) != Hq ||
        mx::promote_types(sinks->dtype(), q.dtype()) != q.dtype()) {
      return std::nullopt;
    }
    in.push_back(mx::astype(*sinks, q.dtype(), s));
  }
  mx::Shape out_shape{B, Hq, L, v.shape(3)};
  return mx::array(std::move(out_shape), q.dtype(),
                   std::make_shared<NativeSDPA>(s, scale, causal, mask.has_value(),
                                                sinks.has_value()),
                   std::move(in));
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
