// The rotary embedding (fastops.h): one pass over queries and keys with a
// cos and sin table made once for them all.
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

}  // namespace

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
