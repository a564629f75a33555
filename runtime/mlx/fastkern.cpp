// The switch of the fast ops' kernels (fastkern.h), for the C callers.
#include "fastkern.h"

using archgen::fast::fast_enabled;
using archgen::fast::fast_switch;

extern "C" int mlxg_native_fast(void) { return fast_enabled() ? 1 : 0; }

extern "C" int mlxg_set_native_fast(int on) {
  static const bool cpu_ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return fast_switch().exchange(on && cpu_ok ? 1 : 0);
}
