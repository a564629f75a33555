// A KV cache's step (fastops.h): the step's keys and values written into
// the cache's buffers in place, as slice_update writes them.
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

}  // namespace

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
