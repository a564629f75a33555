// A KV cache's step (fastops.h): the step's keys and values written into
// the cache's buffers in place, as slice_update writes them.
#include "fastops.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "fastkern.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace {

using namespace archgen::fast;

// Bytes of cache arrays copied whole by a write that could not take the
// array's buffer (archgen_cache_rows_copied reports it).
std::atomic<int64_t> copied_whole{0};

// ---- cache writes ----

// A 4-D array's data as a copy reads it: its first byte, shape and
// strides (in elements). The op's task holds these, not arrays: an array
// the task held would look taken to the next op of a chain on it, which
// would then copy it whole instead of writing in place. mlx keeps an op's
// input buffers until its tasks have run.
struct Source {
  const char* data;
  int64_t shape[4], strides[4];
};

Source source_of(const mx::array& a) {
  Source s{a.data<char>(), {}, {}};
  for (int i = 0; i < 4; i++) {
    s.shape[i] = a.shape(i);
    s.strides[i] = a.strides()[i];
  }
  return s;
}

// Copies a (any strides) into dst, a row-major buffer [C, H, T, D] of a's H
// and D, with elements of esz bytes: a's row b goes to row slots[b] (b
// itself without slots) from entry at[b] of axis 2 on.
void copy_positions(const Source& a, size_t esz, char* dst, int64_t T, const int* slots,
                    const int* at) {
  const int64_t B = a.shape[0], H = a.shape[1], L = a.shape[2], D = a.shape[3];
  const int64_t* st = a.strides;
  for (int64_t b = 0; b < B; b++) {
    const int64_t row = slots == nullptr ? b : slots[b];
    const int64_t from = at == nullptr ? 0 : at[b];
    for (int64_t h = 0; h < H; h++) {
      for (int64_t t = 0; t < L; t++) {
        const char* s0 = a.data + (b * st[0] + h * st[1] + t * st[2]) * esz;
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
// entries of axis 2 copied over row dst's), then the writes: the rows of
// each list of updates (in[count + i*count + p] for list i), in order, row r
// into row slots[r] from entry at[r] on. As mlx's slice_update, an array no
// one else holds gives its buffer to the output, which is then written in
// place; any other is copied first.
class NativeCacheRows : public mx::Primitive {
 public:
  NativeCacheRows(mx::Stream s, int count, int lists, std::vector<int> slots,
                  std::vector<int> at, std::vector<int> moves)
      : Primitive(s),
        count_(count),
        lists_(lists),
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
    struct Target {
      char* data;
      int64_t H, T, D;
      size_t esz;
      bool whole;  // a's buffer not given: a copied first
      Source from;
    };
    std::vector<Target> targets;
    for (int p = 0; p < count_; p++) {
      const mx::array& a = in[p];
      mx::array& out = outs[p];
      const bool whole = !(a.is_donatable() && a.flags().row_contiguous && a.data_size() == a.size());
      if (whole) {
        copied_whole += static_cast<int64_t>(out.nbytes());
        out.set_data(mx::allocator::malloc(out.nbytes()));
      } else {
        out.copy_shared_buffer(a);
      }
      enc.set_output_array(out);
      targets.push_back({out.data<char>(), out.shape(1), out.shape(2), out.shape(3), out.itemsize(),
                         whole, source_of(a)});
    }
    std::vector<Source> updates;  // list-major, then by array
    for (int i = 0; i < lists_ * count_; i++) {
      updates.push_back(source_of(in[count_ + i]));
    }
    enc.dispatch([targets = std::move(targets), updates = std::move(updates), n = count_,
                  lists = lists_, slots = slots_, at = at_, moves = moves_]() {
      for (int p = 0; p < n; p++) {
        const Target& t = targets[p];
        if (t.whole) {
          copy_positions(t.from, t.esz, t.data, t.T, nullptr, nullptr);
        }
        const size_t row = static_cast<size_t>(t.H * t.T * t.D) * t.esz;
        for (size_t m = 0; m + 2 < moves.size(); m += 3) {
          const int64_t to = moves[m], from = moves[m + 1], cols = moves[m + 2];
          for (int64_t h = 0; h < t.H; h++) {
            std::memcpy(t.data + to * row + h * t.T * t.D * t.esz,
                        t.data + from * row + h * t.T * t.D * t.esz, cols * t.D * t.esz);
          }
        }
        size_t r = 0;
        for (int i = 0; i < lists; i++) {
          const Source& u = updates[i * n + p];
          copy_positions(u, t.esz, t.data, t.T, slots.data() + r, at.data() + r);
          r += u.shape[0];
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
    return o != nullptr && o->count_ == count_ && o->lists_ == lists_ && o->slots_ == slots_ &&
           o->at_ == at_ && o->moves_ == moves_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    std::vector<mx::Shape> shapes;
    for (int p = 0; p < count_; p++) shapes.push_back(in[p].shape());
    return shapes;
  }

 private:
  int count_, lists_;
  std::vector<int> slots_, at_, moves_;
};

}  // namespace

std::optional<std::vector<mx::array>> archgen_native_cache_rows(
    const std::vector<mx::array>& arrs, const std::vector<mx::array>& updates,
    const std::vector<int>& slots, const std::vector<int>& at, const std::vector<int>& moves,
    mx::Stream s) {
  if (!fast_enabled() || s.device != mx::Device::cpu || arrs.empty() ||
      updates.size() % arrs.size() != 0 || slots.size() != at.size() || moves.size() % 3 != 0) {
    return std::nullopt;
  }
  const size_t n = arrs.size(), lists = updates.size() / n;
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (size_t p = 0; p < n; p++) {
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
    size_t r = 0;
    for (size_t i = 0; i < lists; i++) {
      const auto& u = updates[i * n + p];
      if (u.ndim() != 4 || a.dtype() != u.dtype() || u.shape(1) != a.shape(1) ||
          u.shape(3) != a.shape(3)) {
        return std::nullopt;
      }
      for (int b = 0; b < u.shape(0); b++, r++) {
        if (r >= slots.size() || slots[r] < 0 || slots[r] >= C || at[r] < 0 ||
            at[r] + u.shape(2) > T) {
          return std::nullopt;
        }
      }
    }
    if (r != slots.size()) {
      return std::nullopt;
    }
    shapes.push_back(a.shape());
    dtypes.push_back(a.dtype());
  }
  std::vector<mx::array> in = arrs;
  in.insert(in.end(), updates.begin(), updates.end());
  return mx::array::make_arrays(
      std::move(shapes), dtypes,
      std::make_shared<NativeCacheRows>(s, static_cast<int>(n), static_cast<int>(lists), slots, at,
                                        moves),
      std::move(in));
}

int64_t archgen_cache_rows_copied() { return copied_whole.load(); }

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
