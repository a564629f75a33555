// Pieces the CPU kernels of this package share (qmm.cpp, the fast ops of fastops.h, recurrent.cpp): a
// thread pool over the cores, the float kinds the kernels read and write,
// and conversions between them.
#ifndef ARCHGEN_MLX_CPUKERN_H
#define ARCHGEN_MLX_CPUKERN_H

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "mlx/mlx.h"

namespace archgen {

// Pool runs f(0..n-1) on the calling thread and one worker per other core.
//
// A decode step hands the pool a job every few tens of microseconds, and
// waking a sleeping thread costs about that much (a futex wake, and on a
// virtual machine an interrupt to a halted vCPU). So a worker that has
// finished a job keeps polling for the next one for a while
// (ARCHGEN_MLX_SPIN_US, 100 by default) before it sleeps on the condition
// variable, and the caller signals it only when it sleeps; while polling it
// yields its core to any other thread that wants it.
class Pool {
 public:
  static Pool& get() {
    static Pool* p = new Pool();  // never destroyed: workers outlive exit paths
    return *p;
  }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int n, const std::function<void(int)>& f) {
    if (n <= 1 || workers_.empty()) {
      for (int i = 0; i < n; i++) {
        f(i);
      }
      return;
    }
    std::unique_lock<std::mutex> run_lock(run_mu_);  // one job at a time
    Job job{&f, n};
    current_.store(&job);
    gen_.fetch_add(1);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_.notify_all();
    }
    job.work();
    // Wait for the workers' last tasks; they are short, so spin.
    while (job.done.load(std::memory_order_acquire) < n) {
      _mm_pause();
    }
    // No worker may still hold the job (it lives on this stack) on return.
    current_.store(nullptr);
    while (inside_.load() != 0) {
      _mm_pause();
    }
  }

 private:
  struct Job {
    const std::function<void(int)>* f;
    int n;
    std::atomic<int> next{0}, done{0};

    Job(const std::function<void(int)>* f, int n) : f(f), n(n) {}

    void work() {
      for (;;) {
        int i = next.fetch_add(1);
        if (i >= n) {
          return;
        }
        (*f)(i);
        done.fetch_add(1, std::memory_order_release);
      }
    }
  };

  Pool() {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* e = std::getenv("ARCHGEN_MLX_THREADS")) {
      n = std::atoi(e);
    }
    n = std::max(1, std::min(n, 64));
    if (const char* e = std::getenv("ARCHGEN_MLX_SPIN_US")) {
      spin_us_ = std::max(0, std::atoi(e));
    }
    for (int i = 1; i < n; i++) {
      workers_.emplace_back([this] { loop(); });
      workers_.back().detach();
    }
  }

  // poll waits up to spin_us_ for a generation other than seen.
  bool poll(uint64_t seen) const {
    if (spin_us_ == 0) {
      return false;
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    for (int i = 1;; i++) {
      if (gen_.load(std::memory_order_acquire) != seen) {
        return true;
      }
      _mm_pause();
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() > until) {
          return false;
        }
        std::this_thread::yield();
      }
    }
  }

  void loop() {
    uint64_t seen = gen_.load();
    for (;;) {
      if (!poll(seen)) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(lk, [&] { return gen_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      seen = gen_.load();
      inside_.fetch_add(1);
      if (Job* j = current_.load()) {
        j->work();
      }
      inside_.fetch_sub(1);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mu_, mu_;
  std::condition_variable cv_;
  std::atomic<Job*> current_{nullptr};
  std::atomic<uint64_t> gen_{0};
  std::atomic<int> sleepers_{0}, inside_{0};
  int spin_us_ = 100;
};

enum class Kind { f32, f16, bf16 };

inline Kind kind_of(mlx::core::Dtype d) {
  if (d == mlx::core::float16) return Kind::f16;
  if (d == mlx::core::bfloat16) return Kind::bf16;
  return Kind::f32;
}

inline bool kernel_float(mlx::core::Dtype d) {
  return d == mlx::core::float32 || d == mlx::core::float16 || d == mlx::core::bfloat16;
}

inline size_t kind_size(Kind k) { return k == Kind::f32 ? 4 : 2; }

__attribute__((target("avx2,fma,f16c"))) inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

__attribute__((target("avx2,fma,f16c"))) inline uint16_t f32_to_bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffff) > 0x7f800000) {
    u |= 0x00400000;  // NaN stays NaN
  } else {
    u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  }
  return static_cast<uint16_t>(u >> 16);
}

__attribute__((target("avx2,fma,f16c"))) inline float load1(const void* p, size_t i, Kind k) {
  switch (k) {
    case Kind::f16:
      return _cvtsh_ss(static_cast<const uint16_t*>(p)[i]);
    case Kind::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Writes v as kind k at index i of p.
__attribute__((target("avx2,fma,f16c"))) inline void store1(void* p, size_t i, float v, Kind k) {
  switch (k) {
    case Kind::f16:
      static_cast<uint16_t*>(p)[i] = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
      break;
    case Kind::bf16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

// v rounded to kind k and back: what storing it in an array of that kind
// keeps.
__attribute__((target("avx2,fma,f16c"))) inline float round_to(float v, Kind k) {
  switch (k) {
    case Kind::f16:
      return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
    case Kind::bf16:
      return bf16_to_f32(f32_to_bf16(v));
    default:
      return v;
  }
}

// Rounds each float32 lane to kind K (bfloat16 or float16, to nearest
// even, as mlx's conversions do for finite values) and back.
template <Kind K>
__attribute__((target("avx2,fma,f16c"))) inline __m256 round_half(__m256 v) {
  if constexpr (K == Kind::f16) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  } else {
    __m256i u = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
}

// Converts n values of kind k at p into float32 at dst.
__attribute__((target("avx2,fma,f16c"))) inline void to_f32(float* dst, const void* p, size_t n,
                                                            Kind k) {
  size_t i = 0;
  if (k == Kind::f32) {
    std::memcpy(dst, p, n * 4);
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(p);
  if (k == Kind::f16) {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(h + i))));
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(h + i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
  }
  for (; i < n; i++) {
    dst[i] = load1(p, i, k);
  }
}

// Converts n float32 values at src into kind k at dst (rounding to nearest
// even, as mlx's conversions do).
__attribute__((target("avx2,fma,f16c"))) inline void from_f32(void* dst, const float* src, size_t n,
                                                              Kind k) {
  if (k == Kind::f32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  size_t i = 0;
  uint16_t* h = static_cast<uint16_t*>(dst);
  if (k == Kind::f16) {
    for (; i + 8 <= n; i += 8) {
      _mm_storeu_si128((__m128i*)(h + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    }
  }
  for (; i < n; i++) {
    store1(dst, i, src[i], k);
  }
}

// Reads n values of kind k starting at p with the given element stride into
// float32.
__attribute__((target("avx2,fma,f16c"))) inline void gather_f32(float* dst, const void* p,
                                                                int64_t stride, size_t n, Kind k) {
  if (stride == 1) {
    to_f32(dst, p, n, k);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    dst[i] = load1(p, static_cast<size_t>(i * stride), k);
  }
}

// The element offsets of the rows of an array viewed as [rows, last axis]:
// row r's first element lies at offset(r) from the array's data.
struct Rows {
  std::vector<int64_t> shape, strides;  // the leading axes
  int64_t last_stride = 1;
  int64_t count = 1;

  explicit Rows(const mlx::core::array& a) {
    int nd = static_cast<int>(a.ndim());
    for (int i = 0; i + 1 < nd; i++) {
      shape.push_back(a.shape(i));
      strides.push_back(static_cast<int64_t>(a.strides()[i]));
      count *= a.shape(i);
    }
    last_stride = nd > 0 ? static_cast<int64_t>(a.strides()[nd - 1]) : 1;
  }

  int64_t offset(int64_t r) const {
    int64_t o = 0;
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; i--) {
      o += (r % shape[i]) * strides[i];
      r /= shape[i];
    }
    return o;
  }
};

}  // namespace archgen

#endif
