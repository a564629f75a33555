// rms_norm and layer_norm (fastops.h), alone or after a residual add, as
// one pass over each row that rounds where libmlx's chain of ops stores.
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
  // gate: nullptr, or a float32 array of x's shape whose silu multiplies
  // each normed row (the recurrent mixers' gated norm)
  const float* gate = nullptr;
  std::optional<Rows> grows;
};

// One row as libmlx's chain computes it: the statistics summed in float32
// in index order, the normalized row rounded to the output dtype, then
// times the weight and plus the bias, each rounded again. With a residual,
// the row is first x + r as libmlx's add gives it (the float32 sum rounded
// to x's dtype), which is written out too.
void norm_rows(const NormJob& j, int64_t r0, int64_t r1) {
  std::vector<float> xf(j.n), rf, wf, bf, gf;
  if (j.gate != nullptr) {
    gf.resize(j.n);
  }
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
    if (j.gate != nullptr) {
      gather_f32(gf.data(), reinterpret_cast<const char*>(j.gate) + j.grows->offset(r) * sizeof(float),
                 j.grows->last_stride, j.n, Kind::f32);
      for (int i = 0; i < j.n; i++) {
        const float g = gf[i];
        y[i] = round_to(y[i] * (g / (1.0f + std::exp(-g))), j.ok);
      }
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
  NativeNorm(mx::Stream s, float eps, bool layer, bool has_w, bool has_b, bool residual,
             bool gated = false)
      : Primitive(s),
        eps_(eps),
        layer_(layer),
        has_w_(has_w),
        has_b_(has_b),
        residual_(residual),
        gated_(gated) {}

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
    if (gated_) {
      j.gate = in[k].data<float>();
      j.grows = Rows(in[k]);
    }
    enc.dispatch([j, in, outs]() { run_norm(j); });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's native norm runs on the CPU only");
  }

  const char* name() const override {
    if (gated_) return "ArchgenGatedRMSNorm";
    if (residual_) return layer_ ? "ArchgenAddLayerNorm" : "ArchgenAddRMSNorm";
    return layer_ ? "ArchgenLayerNorm" : "ArchgenRMSNorm";
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeNorm*>(&other);
    return o != nullptr && o->eps_ == eps_ && o->layer_ == layer_ && o->has_w_ == has_w_ &&
           o->has_b_ == has_b_ && o->residual_ == residual_ && o->gated_ == gated_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    if (residual_) return {in[0].shape(), in[0].shape()};
    return {in[0].shape()};
  }

 private:
  float eps_;
  bool layer_, has_w_, has_b_, residual_, gated_;
};

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

std::optional<mx::array> archgen_native_gated_rms_norm(const mx::array& x,
                                                       const std::optional<mx::array>& weight,
                                                       const mx::array& gate, float eps,
                                                       mx::Stream s) {
  if (x.dtype() != mx::float32 || gate.dtype() != mx::float32 || gate.shape() != x.shape() ||
      (weight && weight->dtype() != mx::float32)) {
    return std::nullopt;
  }
  auto in = norm_inputs(x, std::nullopt, weight, std::nullopt, s);
  if (!in) {
    return std::nullopt;
  }
  in->first.push_back(gate);
  return mx::array(
      x.shape(), in->second,
      std::make_shared<NativeNorm>(s, eps, false, weight.has_value(), false, false, true),
      std::move(in->first));
}
