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

// Copies a 4-D array a (any strides) into dst, a row-major buffer [C, H, T,
// D] of a's H and D: a's row b goes to row slots[b] (b itself without
// slots) from entry at[b] of axis 2 on.
void copy_positions(const mx::array& a, char* dst, int64_t T, const std::vector<int>& slots,
                    const std::vector<int>& at) {
  const size_t esz = a.itemsize();
  const int64_t B = a.shape(0), H = a.shape(1), L = a.shape(2), D = a.shape(3);
  const auto& st = a.strides();
  const char* src = a.data<char>();
  for (int64_t b = 0; b < B; b++) {
    const int64_t row = slots.empty() ? b : slots[b];
    const int64_t from = at.empty() ? 0 : at[b];
    for (int64_t h = 0; h < H; h++) {
      for (int64_t t = 0; t < L; t++) {
        const char* s0 = src + (b * st[0] + h * st[1] + t * st[2]) * esz;
        char* d0 = dst + (((row * H + h) * T + from + t) * D) * esz;
        if (st[3] == 1) {
          std::memcpy(d0, s0, D * esz);
        } else {
          for (int64_t d = 0; d < D; d++) std::memcpy(d0 + d * esz, s0 + d * st[3] * esz, esz);
        }
      }
    }
  }
}

// Rows of a cache's arrays [C, H, T, D_p] (its keys and values, a quantized
// cache's scales and biases: in[0..count)) rewritten in one op with an
// output per array: first the moves, in order (row src's first cols
// entries of axis 2 copied over row dst's), then the writes (update row b,
// in[count + p], into row slots[b] from entry at[b] on). As mlx's
// slice_update, an array no one else holds gives its buffer to the output,
// which is then written in place; any other is copied first.
class NativeCacheRows : public mx::Primitive {
 public:
  NativeCacheRows(mx::Stream s, int count, bool writes, std::vector<int> slots,
                  std::vector<int> at, std::vector<int> moves)
      : Primitive(s),
        count_(count),
        writes_(writes),
        slots_(std::move(slots)),
        at_(std::move(at)),
        moves_(std::move(moves)) {}

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
    enc.dispatch([in, outs, whole, n = count_, writes = writes_, slots = slots_, at = at_,
                  moves = moves_]() mutable {
      for (int p = 0; p < n; p++) {
        char* dst = outs[p].data<char>();
        const int64_t H = outs[p].shape(1), T = outs[p].shape(2), D = outs[p].shape(3);
        const size_t esz = outs[p].itemsize();
        if (whole[p]) {
          copy_positions(in[p], dst, T, {}, {});
        }
        for (size_t m = 0; m + 2 < moves.size(); m += 3) {
          const int64_t to = moves[m], from = moves[m + 1], cols = moves[m + 2];
          for (int64_t h = 0; h < H; h++) {
            std::memcpy(dst + ((to * H + h) * T) * D * esz, dst + ((from * H + h) * T) * D * esz,
                        cols * D * esz);
          }
        }
        if (writes) {
          copy_positions(in[n + p], dst, T, slots, at);
        }
      }
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("archgen's native cache write runs on the CPU only");
  }

  const char* name() const override { return "ArchgenCacheRows"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const NativeCacheRows*>(&other);
    return o != nullptr && o->count_ == count_ && o->writes_ == writes_ && o->slots_ == slots_ &&
           o->at_ == at_ && o->moves_ == moves_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    std::vector<mx::Shape> shapes;
    for (int p = 0; p < count_; p++) shapes.push_back(in[p].shape());
    return shapes;
  }

 private:
  int count_;
  bool writes_;
  std::vector<int> slots_, at_, moves_;
};

}  // namespace

std::optional<std::vector<mx::array>> archgen_native_cache_rows(
    const std::vector<mx::array>& arrs, const std::vector<mx::array>& updates,
    const std::vector<int>& slots, const std::vector<int>& at, const std::vector<int>& moves,
    mx::Stream s) {
  if (!fast_enabled() || s.device != mx::Device::cpu || arrs.empty() ||
      (!updates.empty() && arrs.size() != updates.size()) || moves.size() % 3 != 0) {
    return std::nullopt;
  }
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (size_t p = 0; p < arrs.size(); p++) {
    const auto& a = arrs[p];
    if (a.ndim() != 4) {
      return std::nullopt;  // mlx's own ops report what is wrong
    }
    const int C = a.shape(0), T = a.shape(2);
    for (size_t m = 0; m < moves.size(); m += 3) {
      if (moves[m] < 0 || moves[m] >= C || moves[m + 1] < 0 || moves[m + 1] >= C ||
          moves[m] == moves[m + 1] || moves[m + 2] < 0 || moves[m + 2] > T) {
        return std::nullopt;
      }
    }
    if (!updates.empty()) {
      const auto& u = updates[p];
      if (u.ndim() != 4 || a.dtype() != u.dtype() || u.shape(1) != a.shape(1) ||
          u.shape(3) != a.shape(3) || static_cast<int>(slots.size()) != u.shape(0) ||
          static_cast<int>(at.size()) != u.shape(0)) {
        return std::nullopt;
      }
      for (int b = 0; b < u.shape(0); b++) {
        if (slots[b] < 0 || slots[b] >= C || at[b] < 0 || at[b] + u.shape(2) > T) {
          return std::nullopt;
        }
      }
    }
    shapes.push_back(a.shape());
    dtypes.push_back(a.dtype());
  }
  std::vector<mx::array> in = arrs;
  in.insert(in.end(), updates.begin(), updates.end());
  return mx::array::make_arrays(
      std::move(shapes), dtypes,
      std::make_shared<NativeCacheRows>(s, static_cast<int>(arrs.size()), !updates.empty(), slots,
                                        at, moves),
      std::move(in));
}

std::optional<std::vector<mx::array>> archgen_native_write_positions(
    const std::vector<mx::array>& arrs, const std::vector<mx::array>& updates, int at,
    mx::Stream s) {
  if (arrs.empty() || arrs.size() != updates.size() || at < 0) {
    return std::nullopt;
  }
  for (size_t p = 0; p < arrs.size(); p++) {
    if (arrs[p].ndim() != 4 || updates[p].ndim() != 4 ||
        updates[p].shape(0) != arrs[p].shape(0)) {
      return std::nullopt;  // mlx's slice_update reports what is wrong
    }
  }
  const int B = arrs[0].shape(0);
  std::vector<int> slots(B), from(B, at);
  for (int b = 0; b < B; b++) slots[b] = b;
  return archgen_native_cache_rows(arrs, updates, slots, from, {}, s);
}
