// What the kernels of norm.cpp, rope.cpp, cachewrite.cpp, glu.cpp and
// sdpa.cpp share: the switch that turns them off, libmlx's own scalar
// functions, and the setup of a primitive's output.
#ifndef ARCHGEN_MLX_FASTKERN_H
#define ARCHGEN_MLX_FASTKERN_H

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "cpukern.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/backend/cpu/simd/simd.h"
#include "mlx/mlx.h"

// The instruction level of the native kernels (qmm.cpp): 2 for AVX-512.
int archgen_isa_level();

namespace archgen::fast {

namespace mx = mlx::core;

// The kernels' files say `using namespace archgen::fast` for these.
using archgen::from_f32;
using archgen::gather_f32;
using archgen::Kind;
using archgen::kind_of;
using archgen::load1;
using archgen::Pool;
using archgen::round_to;
using archgen::Rows;
using archgen::store1;

inline std::atomic<int>& fast_switch() {
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

inline bool fast_enabled() { return fast_switch().load(std::memory_order_relaxed) != 0; }

// libmlx's own elementwise exp, sin and cos for one float (its CPU build
// here evaluates them one element at a time with these functions).
inline float mlx_exp(float x) { return mx::simd::exp(mx::simd::Simd<float, 1>(x)).value; }
inline float mlx_sin(float x) { return mx::simd::sin(mx::simd::Simd<float, 1>(x)).value; }
inline float mlx_cos(float x) { return mx::simd::cos(mx::simd::Simd<float, 1>(x)).value; }

// The most negative finite value of kind k (what a boolean mask writes).
inline float lowest(Kind k) {
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
inline mx::cpu::CommandEncoder& begin(mx::Stream s, const std::vector<mx::array>& in, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& enc = mx::cpu::get_command_encoder(s);
  for (auto& a : in) {
    enc.set_input_array(a);
  }
  enc.set_output_array(out);
  return enc;
}

}  // namespace archgen::fast

#endif
