// The extern "C" side of runtime/mlx: each function turns handles into
// mlx::core values, calls one C++ API entry point and turns any exception
// into a status and a message. See shim.h for the conventions.
#include "shim.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#ifdef __GLIBC__  // defined by <cstdlib> above where the C library is glibc
#include <malloc.h>
#endif
#include <functional>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "fastops.h"
#include "qmm.h"
#include "recurrent.h"

namespace mx = mlx::core;

namespace {

// Sets *err to a copy of msg. strdup can fail only when memory is gone, and
// then the caller still sees a non-zero status.
void set_err(char** err, const char* msg) {
  if (err != nullptr) {
    *err = strdup(msg);
  }
}

#define MLXG_TRY(...)                                   \
  try {                                                 \
    __VA_ARGS__;                                        \
    return 0;                                           \
  } catch (const std::bad_alloc&) {                     \
    set_err(err, "out of memory (std::bad_alloc)");    \
    return 1;                                           \
  } catch (const std::exception& e) {                   \
    set_err(err, e.what());                             \
    return 1;                                           \
  } catch (...) {                                       \
    set_err(err, "unknown C++ exception");             \
    return 1;                                           \
  }

mx::array& A(mlxg_array a) {
  return *static_cast<mx::array*>(a.ctx);
}

std::optional<mx::array> opt(mlxg_array a) {
  if (a.ctx == nullptr) {
    return std::nullopt;
  }
  return A(a);
}

mlxg_array wrap(mx::array x) {
  return mlxg_array{new mx::array(std::move(x))};
}

mx::Device device(int type, int index) {
  return mx::Device(type == 1 ? mx::Device::gpu : mx::Device::cpu, index);
}

// S is the stream a call runs on. It also becomes the calling thread's
// default stream for its device: some MLX ops build parts of themselves on
// the default stream (quantized_matmul casts its input so), and the default
// stream of an OS thread is otherwise one MLX makes for that thread alone,
// which the next call, from another thread, could not use.
mx::Stream S(mlxg_stream s) {
  mx::Stream st(s.index, device(s.device_type, s.device_index));
  mx::set_default_stream(st);
  return st;
}

mx::Dtype to_dtype(int d) {
  switch (d) {
    case MLXG_BOOL: return mx::bool_;
    case MLXG_UINT8: return mx::uint8;
    case MLXG_UINT16: return mx::uint16;
    case MLXG_UINT32: return mx::uint32;
    case MLXG_UINT64: return mx::uint64;
    case MLXG_INT8: return mx::int8;
    case MLXG_INT16: return mx::int16;
    case MLXG_INT32: return mx::int32;
    case MLXG_INT64: return mx::int64;
    case MLXG_FLOAT16: return mx::float16;
    case MLXG_FLOAT32: return mx::float32;
    case MLXG_FLOAT64: return mx::float64;
    case MLXG_BFLOAT16: return mx::bfloat16;
    case MLXG_COMPLEX64: return mx::complex64;
  }
  throw std::invalid_argument("unknown dtype code " + std::to_string(d));
}

int from_dtype(mx::Dtype d) {
  switch (d.val()) {
    case mx::Dtype::Val::bool_: return MLXG_BOOL;
    case mx::Dtype::Val::uint8: return MLXG_UINT8;
    case mx::Dtype::Val::uint16: return MLXG_UINT16;
    case mx::Dtype::Val::uint32: return MLXG_UINT32;
    case mx::Dtype::Val::uint64: return MLXG_UINT64;
    case mx::Dtype::Val::int8: return MLXG_INT8;
    case mx::Dtype::Val::int16: return MLXG_INT16;
    case mx::Dtype::Val::int32: return MLXG_INT32;
    case mx::Dtype::Val::int64: return MLXG_INT64;
    case mx::Dtype::Val::float16: return MLXG_FLOAT16;
    case mx::Dtype::Val::float32: return MLXG_FLOAT32;
    case mx::Dtype::Val::float64: return MLXG_FLOAT64;
    case mx::Dtype::Val::bfloat16: return MLXG_BFLOAT16;
    case mx::Dtype::Val::complex64: return MLXG_COMPLEX64;
  }
  return -1;
}

mx::Shape shape_of(const int32_t* shape, int ndim) {
  return mx::Shape(shape, shape + ndim);
}

std::vector<int> ints(const int32_t* v, int n) {
  return std::vector<int>(v, v + n);
}

std::vector<mx::array> arrays(const mlxg_array* as, int n) {
  std::vector<mx::array> out;
  out.reserve(n);
  for (int i = 0; i < n; i++) {
    out.push_back(A(as[i]));
  }
  return out;
}

// A Python float or int beside an array, as mlx types it: a floating array
// keeps its dtype; otherwise an integral value keeps the array's integer
// dtype and a fractional one makes float32.
mx::array weak_scalar(double v, const mx::array& like) {
  mx::Dtype dt = like.dtype();
  if (mx::issubdtype(dt, mx::floating)) {
    return mx::array(static_cast<float>(v), dt);
  }
  if (dt != mx::bool_ && std::floor(v) == v) {
    return mx::array(static_cast<int64_t>(v), dt);
  }
  if (dt == mx::bool_ && (v == 0 || v == 1)) {
    return mx::array(v != 0);
  }
  return mx::array(static_cast<float>(v), mx::float32);
}

mx::array unary(int op, const mx::array& a, mx::Stream s) {
  switch (op) {
    case MLXG_NEGATIVE: return mx::negative(a, s);
    case MLXG_SQUARE: return mx::square(a, s);
    case MLXG_SQRT: return mx::sqrt(a, s);
    case MLXG_RSQRT: return mx::rsqrt(a, s);
    case MLXG_EXP: return mx::exp(a, s);
    case MLXG_LOG: return mx::log(a, s);
    case MLXG_TANH: return mx::tanh(a, s);
    case MLXG_ERF: return mx::erf(a, s);
    case MLXG_SIGMOID: return mx::sigmoid(a, s);
    case MLXG_ABS: return mx::abs(a, s);
    case MLXG_SIN: return mx::sin(a, s);
    case MLXG_COS: return mx::cos(a, s);
    case MLXG_LOGICAL_NOT: return mx::logical_not(a, s);
    case MLXG_SILU:
      // x * sigmoid(x)
      if (auto y = archgen_native_silu(a, std::nullopt, s)) {
        return *y;
      }
      return mx::multiply(a, mx::sigmoid(a, s), s);
    case MLXG_GELU: {
      // x * (1 + erf(x / sqrt(2))) / 2
      if (auto y = archgen_native_gelu(a, s)) {
        return *y;
      }
      auto t = mx::erf(mx::divide(a, weak_scalar(std::sqrt(2.0), a), s), s);
      auto u = mx::multiply(a, mx::add(weak_scalar(1.0, a), t, s), s);
      return mx::divide(u, weak_scalar(2.0, a), s);
    }
    case MLXG_GELU_APPROX: {
      // 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
      auto x3 = mx::power(a, weak_scalar(3.0, a), s);
      auto inner = mx::add(a, mx::multiply(weak_scalar(0.044715, a), x3, s), s);
      auto t = mx::tanh(mx::multiply(weak_scalar(std::sqrt(2.0 / M_PI), a), inner, s), s);
      auto half_x = mx::multiply(weak_scalar(0.5, a), a, s);
      return mx::multiply(half_x, mx::add(weak_scalar(1.0, a), t, s), s);
    }
    case MLXG_STOP_GRADIENT: return mx::stop_gradient(a, s);
    case MLXG_FLOOR: return mx::floor(a, s);
    case MLXG_RECIPROCAL: return mx::reciprocal(a, s);
    case MLXG_LOG1P: return mx::log1p(a, s);
    case MLXG_EXPM1: return mx::expm1(a, s);
  }
  throw std::invalid_argument("unknown unary op " + std::to_string(op));
}

mx::array binary(int op, const mx::array& a, const mx::array& b, mx::Stream s) {
  switch (op) {
    case MLXG_ADD: return mx::add(a, b, s);
    case MLXG_SUBTRACT: return mx::subtract(a, b, s);
    case MLXG_MULTIPLY: return mx::multiply(a, b, s);
    case MLXG_DIVIDE: return mx::divide(a, b, s);
    case MLXG_MAXIMUM: return mx::maximum(a, b, s);
    case MLXG_MINIMUM: return mx::minimum(a, b, s);
    case MLXG_POWER: return mx::power(a, b, s);
    case MLXG_EQUAL: return mx::equal(a, b, s);
    case MLXG_NOT_EQUAL: return mx::not_equal(a, b, s);
    case MLXG_LESS: return mx::less(a, b, s);
    case MLXG_LESS_EQUAL: return mx::less_equal(a, b, s);
    case MLXG_GREATER: return mx::greater(a, b, s);
    case MLXG_GREATER_EQUAL: return mx::greater_equal(a, b, s);
    case MLXG_LOGICAL_AND: return mx::logical_and(a, b, s);
    case MLXG_LOGICAL_OR: return mx::logical_or(a, b, s);
    case MLXG_FLOOR_DIVIDE: return mx::floor_divide(a, b, s);
    case MLXG_REMAINDER: return mx::remainder(a, b, s);
    case MLXG_LOGADDEXP: return mx::logaddexp(a, b, s);
  }
  throw std::invalid_argument("unknown binary op " + std::to_string(op));
}

// evaluate evaluates arrays on stream s (made the thread's default by S):
// arrays already queued are waited for on the host, the rest evaluated.
void evaluate(std::vector<mx::array> xs, mx::Stream s, bool async) {
  std::vector<mx::array> todo;
  for (auto& x : xs) {
    if (x.status() == mx::array::Status::unscheduled) {
      todo.push_back(x);
    } else if (!async) {
      x.wait();
    }
  }
  if (todo.empty()) {
    return;
  }
  if (async) {
    mx::async_eval(std::move(todo));
  } else {
    mx::eval(std::move(todo));
  }
}

// Loader results: named entries, each an array, a string or a string list.
struct Entry {
  std::string key;
  int kind = 3;
  std::optional<mx::array> arr;
  std::string str;
  std::vector<std::string> list;
};

struct Map {
  std::vector<Entry> entries;
};

mlxg_map new_map(Map* m) {
  return mlxg_map{m};
}

// array_map lists named arrays as a Map.
Map* array_map(const std::unordered_map<std::string, mx::array>& arrs) {
  auto* m = new Map();
  for (auto& [k, v] : arrs) {
    Entry e;
    e.key = k;
    e.kind = 0;
    e.arr = v;
    m->entries.push_back(std::move(e));
  }
  return m;
}

Map& M(mlxg_map m) {
  return *static_cast<Map*>(m.ctx);
}

} // namespace

extern "C" {

void mlxg_string_free(char* s) {
  free(s);
}

const char* mlxg_version(void) {
  return mx::version();
}

int mlxg_device_count(int device_type) {
  try {
    auto d = device(device_type, 0);
    if (!mx::is_available(d)) {
      return 0;
    }
    return mx::device_count(d.type);
  } catch (...) {
    return 0;
  }
}

int mlxg_stream_new(mlxg_stream* res, int device_type, int device_index, char** err) {
  MLXG_TRY({
    auto d = device(device_type, device_index);
    if (!mx::is_available(d)) {
      throw std::invalid_argument(
          std::string(device_type == 1 ? "gpu" : "cpu") + " device " +
          std::to_string(device_index) + " is not available in this libmlx");
    }
    auto st = mx::new_thread_unsafe_stream(d);
    *res = mlxg_stream{st.index, device_type, device_index};
  })
}

int mlxg_synchronize(mlxg_stream s, char** err) {
  MLXG_TRY(mx::synchronize(S(s)))
}

void mlxg_array_free(mlxg_array a) {
  delete static_cast<mx::array*>(a.ctx);
}

void mlxg_array_free_many(const mlxg_array* as, int n) {
  for (int i = 0; i < n; i++) {
    delete static_cast<mx::array*>(as[i].ctx);
  }
}

int mlxg_array_ndim(mlxg_array a) {
  return static_cast<int>(A(a).ndim());
}

void mlxg_array_shape(mlxg_array a, int32_t* shape) {
  auto& sh = A(a).shape();
  for (size_t i = 0; i < sh.size(); i++) {
    shape[i] = sh[i];
  }
}

int mlxg_array_dtype(mlxg_array a) {
  return from_dtype(A(a).dtype());
}

const char* mlxg_array_primitive(mlxg_array a) {
  return A(a).has_primitive() ? A(a).primitive().name() : "";
}

size_t mlxg_array_size(mlxg_array a) {
  return A(a).size();
}

size_t mlxg_array_nbytes(mlxg_array a) {
  return A(a).nbytes();
}

int mlxg_array_clone(mlxg_array* res, mlxg_array a, char** err) {
  MLXG_TRY(*res = wrap(A(a)))
}

int mlxg_array_read(mlxg_array a, void* dst, size_t nbytes, mlxg_stream s, char** err) {
  MLXG_TRY({
    mx::array x = A(a);
    evaluate({x}, S(s), false);
    if (!x.flags().row_contiguous) {
      x = mx::contiguous(x, false, S(s));
      evaluate({x}, S(s), false);
    }
    if (x.nbytes() != nbytes) {
      throw std::invalid_argument(
          "read of " + std::to_string(nbytes) + " bytes from an array of " +
          std::to_string(x.nbytes()));
    }
    if (nbytes > 0) {
      std::memcpy(dst, x.data<uint8_t>(), nbytes);
    }
  })
}

namespace {

// A new array of shape and dtype with its bytes allocated and not yet set.
mx::array alloc_array(const int32_t* shape, int ndim, int dtype) {
  auto dt = to_dtype(dtype);
  auto sh = shape_of(shape, ndim);
  size_t n = 1;
  for (auto d : sh) {
    if (d < 0) {
      throw std::invalid_argument("negative dimension in shape");
    }
    n *= static_cast<size_t>(d);
  }
  return mx::array(mx::allocator::malloc(n * dt.size()), std::move(sh), dt);
}

}  // namespace

int mlxg_alloc_data(mlxg_array* res, void** data, const int32_t* shape, int ndim, int dtype,
                    char** err) {
  MLXG_TRY({
    auto a = alloc_array(shape, ndim, dtype);
    *data = a.data<void>();
    *res = wrap(std::move(a));
  })
}

int mlxg_from_data(mlxg_array* res, const void* data, const int32_t* shape, int ndim,
                   int dtype, char** err) {
  MLXG_TRY({
    auto a = alloc_array(shape, ndim, dtype);
    if (a.nbytes() > 0) {
      std::memcpy(a.data<void>(), data, a.nbytes());
    }
    *res = wrap(std::move(a));
  })
}

int mlxg_scalar(mlxg_array* res, double v, int dtype, char** err) {
  MLXG_TRY({
    auto dt = to_dtype(dtype);
    if (mx::issubdtype(dt, mx::floating)) {
      *res = wrap(mx::array(static_cast<float>(v), dt));
    } else if (dt == mx::bool_) {
      *res = wrap(mx::array(v != 0));
    } else {
      *res = wrap(mx::array(static_cast<int64_t>(v), dt));
    }
  })
}

int mlxg_arange(mlxg_array* res, double start, double stop, double step, int dtype,
                mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::arange(start, stop, step, to_dtype(dtype), S(s))))
}

int mlxg_full(mlxg_array* res, const int32_t* shape, int ndim, double v, int dtype,
              mlxg_stream s, char** err) {
  MLXG_TRY({
    auto dt = to_dtype(dtype);
    mx::array val = mx::issubdtype(dt, mx::floating)
        ? mx::array(static_cast<float>(v), dt)
        : (dt == mx::bool_ ? mx::array(v != 0) : mx::array(static_cast<int64_t>(v), dt));
    *res = wrap(mx::full(shape_of(shape, ndim), val, dt, S(s)));
  })
}

int mlxg_unary(mlxg_array* res, int op, mlxg_array a, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(unary(op, A(a), S(s))))
}

int mlxg_binary(mlxg_array* res, int op, mlxg_array a, mlxg_array b, mlxg_stream s,
                char** err) {
  MLXG_TRY(*res = wrap(binary(op, A(a), A(b), S(s))))
}

int mlxg_binary_scalar(mlxg_array* res, int op, mlxg_array a, double v, bool scalar_first,
                       mlxg_stream s, char** err) {
  MLXG_TRY({
    auto& x = A(a);
    auto c = weak_scalar(v, x);
    *res = wrap(scalar_first ? binary(op, c, x, S(s)) : binary(op, x, c, S(s)));
  })
}

int mlxg_where(mlxg_array* res, mlxg_array c, mlxg_array x, mlxg_array y, mlxg_stream s,
               char** err) {
  MLXG_TRY(*res = wrap(mx::where(A(c), A(x), A(y), S(s))))
}

int mlxg_astype(mlxg_array* res, mlxg_array a, int dtype, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::astype(A(a), to_dtype(dtype), S(s))))
}

int mlxg_view(mlxg_array* res, mlxg_array a, int dtype, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::view(A(a), to_dtype(dtype), S(s))))
}

int mlxg_from_fp8(mlxg_array* res, mlxg_array a, int dtype, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::from_fp8(A(a), to_dtype(dtype), S(s))))
}

int mlxg_to_fp8(mlxg_array* res, mlxg_array a, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::to_fp8(A(a), S(s))))
}

int mlxg_contiguous(mlxg_array* res, mlxg_array a, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::contiguous(A(a), false, S(s))))
}

int mlxg_clip(mlxg_array* res, mlxg_array a, double lo, double hi, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto& x = A(a);
    *res = wrap(mx::clip(x, weak_scalar(lo, x), weak_scalar(hi, x), S(s)));
  })
}

int mlxg_reduce(mlxg_array* res, int op, mlxg_array a, const int32_t* axes, int naxes,
                bool keepdims, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto& x = A(a);
    auto st = S(s);
    std::vector<int> ax;
    if (naxes < 0) {
      for (int i = 0; i < static_cast<int>(x.ndim()); i++) {
        ax.push_back(i);
      }
    } else {
      ax = ints(axes, naxes);
    }
    switch (op) {
      case MLXG_SUM: *res = wrap(mx::sum(x, ax, keepdims, st)); break;
      case MLXG_MEAN: *res = wrap(mx::mean(x, ax, keepdims, st)); break;
      case MLXG_MAX: *res = wrap(mx::max(x, ax, keepdims, st)); break;
      case MLXG_MIN: *res = wrap(mx::min(x, ax, keepdims, st)); break;
      case MLXG_LOGSUMEXP: *res = wrap(mx::logsumexp(x, ax, keepdims, st)); break;
      case MLXG_NORM: *res = wrap(mx::linalg::norm(x, ax, keepdims, st)); break;
      case MLXG_ARGMAX:
      case MLXG_ARGMIN: {
        if (ax.size() != 1) {
          throw std::invalid_argument("argmax and argmin take exactly one axis");
        }
        *res = wrap(op == MLXG_ARGMAX ? mx::argmax(x, ax[0], keepdims, st)
                                      : mx::argmin(x, ax[0], keepdims, st));
        break;
      }
      default:
        throw std::invalid_argument("unknown reduction " + std::to_string(op));
    }
  })
}

int mlxg_softmax(mlxg_array* res, mlxg_array a, const int32_t* axes, int naxes, bool precise,
                 mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::softmax(A(a), ints(axes, naxes), precise, S(s))))
}

int mlxg_cumsum(mlxg_array* res, mlxg_array a, int axis, bool reverse, bool inclusive,
                mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::cumsum(A(a), axis, reverse, inclusive, S(s))))
}

int mlxg_sort(mlxg_array* res, mlxg_array a, int axis, bool arg, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(arg ? mx::argsort(A(a), axis, S(s)) : mx::sort(A(a), axis, S(s))))
}

int mlxg_topk(mlxg_array* res, mlxg_array a, int k, int axis, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::topk(A(a), k, axis, S(s))))
}

int mlxg_argpartition(mlxg_array* res, mlxg_array a, int kth, int axis, mlxg_stream s,
                      char** err) {
  MLXG_TRY(*res = wrap(mx::argpartition(A(a), kth, axis, S(s))))
}

int mlxg_reshape(mlxg_array* res, mlxg_array a, const int32_t* shape, int ndim,
                 mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::reshape(A(a), shape_of(shape, ndim), S(s))))
}

int mlxg_transpose(mlxg_array* res, mlxg_array a, const int32_t* axes, int naxes,
                   mlxg_stream s, char** err) {
  MLXG_TRY({
    if (naxes < 0) {
      *res = wrap(mx::transpose(A(a), S(s)));
    } else {
      *res = wrap(mx::transpose(A(a), ints(axes, naxes), S(s)));
    }
  })
}

int mlxg_swapaxes(mlxg_array* res, mlxg_array a, int axis1, int axis2, mlxg_stream s,
                  char** err) {
  MLXG_TRY(*res = wrap(mx::swapaxes(A(a), axis1, axis2, S(s))))
}

int mlxg_expand_dims(mlxg_array* res, mlxg_array a, const int32_t* axes, int naxes,
                     mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::expand_dims(A(a), ints(axes, naxes), S(s))))
}

int mlxg_squeeze(mlxg_array* res, mlxg_array a, const int32_t* axes, int naxes,
                 mlxg_stream s, char** err) {
  MLXG_TRY({
    if (naxes < 0) {
      *res = wrap(mx::squeeze(A(a), S(s)));
    } else {
      *res = wrap(mx::squeeze(A(a), ints(axes, naxes), S(s)));
    }
  })
}

int mlxg_flatten(mlxg_array* res, mlxg_array a, int start, int end, mlxg_stream s,
                 char** err) {
  MLXG_TRY(*res = wrap(mx::flatten(A(a), start, end, S(s))))
}

int mlxg_broadcast_to(mlxg_array* res, mlxg_array a, const int32_t* shape, int ndim,
                      mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::broadcast_to(A(a), shape_of(shape, ndim), S(s))))
}

int mlxg_concatenate(mlxg_array* res, const mlxg_array* as, int n, int axis, mlxg_stream s,
                     char** err) {
  MLXG_TRY(*res = wrap(mx::concatenate(arrays(as, n), axis, S(s))))
}

int mlxg_stack(mlxg_array* res, const mlxg_array* as, int n, int axis, mlxg_stream s,
               char** err) {
  MLXG_TRY(*res = wrap(mx::stack(arrays(as, n), axis, S(s))))
}

int mlxg_split(mlxg_array* res, mlxg_array a, int nparts, const int32_t* indices, int nidx,
               int axis, mlxg_stream s, char** err) {
  MLXG_TRY({
    std::vector<mx::array> parts = indices == nullptr
        ? mx::split(A(a), nparts, axis, S(s))
        : mx::split(A(a), shape_of(indices, nidx), axis, S(s));
    for (size_t i = 0; i < parts.size(); i++) {
      res[i] = wrap(std::move(parts[i]));
    }
  })
}

int mlxg_slice(mlxg_array* res, mlxg_array a, const int32_t* start, const int32_t* stop,
               const int32_t* strides, int ndim, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::slice(A(a), shape_of(start, ndim), shape_of(stop, ndim),
                                 shape_of(strides, ndim), S(s))))
}

int mlxg_slice_dynamic(mlxg_array* res, mlxg_array a, mlxg_array start, const int32_t* axes,
                       int naxes, const int32_t* sizes, int nsizes, mlxg_stream s,
                       char** err) {
  MLXG_TRY(*res = wrap(mx::slice(A(a), A(start), ints(axes, naxes), shape_of(sizes, nsizes),
                                 S(s))))
}

int mlxg_slice_update(mlxg_array* res, mlxg_array src, mlxg_array upd, const int32_t* start,
                      const int32_t* stop, const int32_t* strides, int ndim, mlxg_stream s,
                      char** err) {
  MLXG_TRY(*res = wrap(mx::slice_update(A(src), A(upd), shape_of(start, ndim),
                                        shape_of(stop, ndim), shape_of(strides, ndim),
                                        S(s))))
}

int mlxg_slice_update_dynamic(mlxg_array* res, mlxg_array src, mlxg_array upd,
                              mlxg_array start, const int32_t* axes, int naxes, mlxg_stream s,
                              char** err) {
  MLXG_TRY(*res = wrap(mx::slice_update(A(src), A(upd), A(start), ints(axes, naxes), S(s))))
}

int mlxg_take(mlxg_array* res, mlxg_array a, mlxg_array idx, bool has_axis, int axis,
              mlxg_stream s, char** err) {
  MLXG_TRY({
    if (has_axis) {
      *res = wrap(mx::take(A(a), A(idx), axis, S(s)));
    } else {
      *res = wrap(mx::take(A(a), A(idx), S(s)));
    }
  })
}

int mlxg_take_along_axis(mlxg_array* res, mlxg_array a, mlxg_array idx, int axis,
                         mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::take_along_axis(A(a), A(idx), axis, S(s))))
}

int mlxg_put_along_axis(mlxg_array* res, mlxg_array a, mlxg_array idx, mlxg_array values,
                        int axis, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::put_along_axis(A(a), A(idx), A(values), axis, S(s))))
}

int mlxg_tri(mlxg_array* res, mlxg_array a, int k, bool upper, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(upper ? mx::triu(A(a), k, S(s)) : mx::tril(A(a), k, S(s))))
}

int mlxg_pad(mlxg_array* res, mlxg_array a, const int32_t* axes, const int32_t* lo,
             const int32_t* hi, int naxes, double value, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto& x = A(a);
    *res = wrap(mx::pad(x, ints(axes, naxes), shape_of(lo, naxes), shape_of(hi, naxes),
                        weak_scalar(value, x), "constant", S(s)));
  })
}

int mlxg_matmul(mlxg_array* res, mlxg_array a, mlxg_array b, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::matmul(A(a), A(b), S(s))))
}

int mlxg_linear(mlxg_array* res, mlxg_array x, mlxg_array w, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    if (auto y = archgen_native_linear(A(x), A(w), st)) {
      *res = wrap(std::move(*y));
    } else {
      *res = wrap(mx::matmul(A(x), mx::transpose(A(w), st), st));
    }
  })
}

int mlxg_addmm(mlxg_array* res, mlxg_array c, mlxg_array a, mlxg_array b, float alpha,
               float beta, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::addmm(A(c), A(a), A(b), alpha, beta, S(s))))
}

int mlxg_quantize(mlxg_array* res, mlxg_array w, int group_size, int bits, const char* mode,
                  mlxg_stream s, char** err) {
  MLXG_TRY({
    auto out = mx::quantize(A(w), group_size, bits, mode, std::nullopt, S(s));
    res[0] = wrap(out.at(0));
    res[1] = wrap(out.at(1));
    res[2] = out.size() > 2 ? wrap(out[2]) : mlxg_array{nullptr};
  })
}

int mlxg_dequantize(mlxg_array* res, mlxg_array w, mlxg_array scales, mlxg_array biases,
                    int group_size, int bits, const char* mode, int dtype, mlxg_stream s,
                    char** err) {
  MLXG_TRY({
    std::optional<mx::Dtype> dt;
    if (dtype >= 0) {
      dt = to_dtype(dtype);
    }
    *res = wrap(mx::dequantize(A(w), A(scales), opt(biases), group_size, bits, mode,
                               std::nullopt, dt, S(s)));
  })
}

int mlxg_block_gather_matmul(mlxg_array* res, mlxg_array x, mlxg_array w, mlxg_array lhs,
                              mlxg_array rhs, int code, mlxg_stream s, char** err) {
  MLXG_TRY({ *res = wrap(archgen_block_gather_matmul(A(x), A(w), opt(lhs), opt(rhs), code, S(s))); })
}

int mlxg_block_matmul(mlxg_array* res, mlxg_array x, mlxg_array w, int code, mlxg_stream s,
                      char** err) {
  MLXG_TRY({ *res = wrap(archgen_block_matmul(A(x), A(w), code, S(s))); })
}

int mlxg_block_dequantize(mlxg_array* res, mlxg_array w, int code, int dtype, mlxg_stream s,
                          char** err) {
  MLXG_TRY({ *res = wrap(archgen_block_dequantize(A(w), code, to_dtype(dtype), S(s))); })
}

int mlxg_quantized_matmul(mlxg_array* res, mlxg_array x, mlxg_array w, mlxg_array scales,
                          mlxg_array biases, bool transpose, int group_size, int bits,
                          const char* mode, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    if (auto y = archgen_native_qmm(A(x), A(w), A(scales), opt(biases), transpose, group_size,
                                    bits, mode, st)) {
      *res = wrap(std::move(*y));
    } else {
      *res = wrap(mx::quantized_matmul(A(x), A(w), A(scales), opt(biases), transpose,
                                       group_size, bits, mode, st));
    }
  })
}

namespace {

// by_heads checks that products of x by matrices of these row counts split
// into heads of head_dim (none when 0), and returns what turns one such
// product [B, L, N] into [B, N / head_dim, L, head_dim].
std::function<mx::array(mx::array)> by_heads(const mx::array& x, const std::vector<int>& rows,
                                             int head_dim, mx::Stream s) {
  if (head_dim == 0) {
    return [](mx::array y) { return y; };
  }
  if (head_dim < 0 || x.ndim() != 3) {
    throw std::invalid_argument("products by heads need x of three axes [B, L, K] and a head_dim above 0, got x of " +
                                std::to_string(x.ndim()) + " axes and head_dim " + std::to_string(head_dim));
  }
  for (int n : rows) {
    if (n % head_dim != 0) {
      throw std::invalid_argument("products by heads: " + std::to_string(n) +
                                  " rows do not split into heads of " + std::to_string(head_dim));
    }
  }
  const int B = x.shape(0), L = x.shape(1);
  return [=](mx::array y) {
    return mx::transpose(mx::reshape(y, {B, L, y.shape(-1) / head_dim, head_dim}, s), {0, 2, 1, 3}, s);
  };
}

}  // namespace

int mlxg_quantized_matmuls(mlxg_array* res, mlxg_array x, const mlxg_array* w,
                           const mlxg_array* scales, const mlxg_array* biases, int n,
                           int group_size, int bits, const char* mode, int head_dim,
                           mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    std::vector<mx::array> ys;
    std::vector<mx::array> ws, ss, bs;
    std::vector<int> rows;
    bool affine = true;
    for (int p = 0; p < n; p++) {
      ws.push_back(A(w[p]));
      ss.push_back(A(scales[p]));
      rows.push_back(ws.back().ndim() == 2 ? ws.back().shape(0) : 0);
      if (biases[p].ctx == nullptr) {
        affine = false;
      } else {
        bs.push_back(A(biases[p]));
      }
    }
    std::optional<std::vector<mx::array>> fused;
    if (affine && std::strcmp(mode, "affine") == 0) {
      fused = archgen_native_qmms(A(x), ws, ss, bs, group_size, bits, head_dim, st);
    }
    if (fused) {
      ys = std::move(*fused);
    } else {
      auto heads = by_heads(A(x), rows, head_dim, st);
      for (int p = 0; p < n; p++) {
        if (auto y = archgen_native_qmm(A(x), ws[p], ss[p], opt(biases[p]), true, group_size, bits,
                                        mode, st)) {
          ys.push_back(heads(std::move(*y)));
        } else {
          ys.push_back(heads(mx::quantized_matmul(A(x), ws[p], ss[p], opt(biases[p]), true,
                                                  group_size, bits, mode, st)));
        }
      }
    }
    for (int p = 0; p < n; p++) {
      res[p] = wrap(std::move(ys[p]));
    }
  })
}

int mlxg_linears(mlxg_array* res, mlxg_array x, const mlxg_array* w, int n, int head_dim,
                 mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    std::vector<mx::array> ws, ys;
    std::vector<int> rows;
    for (int p = 0; p < n; p++) {
      ws.push_back(A(w[p]));
      rows.push_back(ws.back().ndim() == 2 ? ws.back().shape(0) : 0);
    }
    if (auto fused = archgen_native_linears(A(x), ws, head_dim, st)) {
      ys = std::move(*fused);
    } else {
      auto heads = by_heads(A(x), rows, head_dim, st);
      for (int p = 0; p < n; p++) {
        if (auto y = archgen_native_linear(A(x), ws[p], st)) {
          ys.push_back(heads(std::move(*y)));
        } else {
          ys.push_back(heads(mx::matmul(A(x), mx::transpose(ws[p], st), st)));
        }
      }
    }
    for (int p = 0; p < n; p++) {
      res[p] = wrap(std::move(ys[p]));
    }
  })
}

int mlxg_gather_mm(mlxg_array* res, mlxg_array a, mlxg_array b, mlxg_array lhs, mlxg_array rhs,
                   bool sorted, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::gather_mm(A(a), A(b), opt(lhs), opt(rhs), sorted, S(s))))
}

int mlxg_gather_qmm(mlxg_array* res, mlxg_array x, mlxg_array w, mlxg_array scales,
                    mlxg_array biases, mlxg_array lhs, mlxg_array rhs, bool transpose,
                    int group_size, int bits, const char* mode, bool sorted, mlxg_stream s,
                    char** err) {
  MLXG_TRY({
    auto st = S(s);
    if (auto y = archgen_native_gather_qmm(A(x), A(w), A(scales), opt(biases), opt(lhs), opt(rhs),
                                           transpose, group_size, bits, mode, sorted, st)) {
      *res = wrap(std::move(*y));
    } else {
      *res = wrap(mx::gather_qmm(A(x), A(w), A(scales), opt(biases), opt(lhs), opt(rhs),
                                 transpose, group_size, bits, mode, std::nullopt, sorted, st));
    }
  })
}

int mlxg_swiglu(mlxg_array* res, mlxg_array gate, mlxg_array up, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    if (auto y = archgen_native_silu(A(gate), A(up), st)) {
      *res = wrap(std::move(*y));
    } else {
      auto g = A(gate);
      *res = wrap(mx::multiply(mx::multiply(g, mx::sigmoid(g, st), st), A(up), st));
    }
  })
}

int mlxg_rms_norm(mlxg_array* res, mlxg_array x, mlxg_array weight, float eps, mlxg_stream s,
                  char** err) {
  MLXG_TRY({
    auto st = S(s);
    if (auto y = archgen_native_norm(A(x), opt(weight), std::nullopt, eps, false, st)) {
      *res = wrap(std::move(*y));
    } else {
      *res = wrap(mx::fast::rms_norm(A(x), opt(weight), eps, st));
    }
  })
}

int mlxg_gated_rms_norm(mlxg_array* res, mlxg_array x, mlxg_array weight, mlxg_array gate,
                        float eps, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    if (auto y = archgen_native_gated_rms_norm(A(x), opt(weight), A(gate), eps, st)) {
      *res = wrap(std::move(*y));
    } else {
      auto& g = A(gate);
      mx::array normed = mx::fast::rms_norm(A(x), opt(weight), eps, st);
      *res = wrap(mx::multiply(normed, mx::multiply(g, mx::sigmoid(g, st), st), st));
    }
  })
}

int mlxg_conv1d(mlxg_array* res, mlxg_array x, mlxg_array w, int stride, int padding,
                int dilation, int groups, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    if (auto y = archgen_native_depthwise_conv1d(A(x), A(w), stride, padding, dilation, groups,
                                                 st)) {
      *res = wrap(std::move(*y));
    } else {
      *res = wrap(mx::conv1d(A(x), A(w), stride, padding, dilation, groups, st));
    }
  })
}

int mlxg_layer_norm(mlxg_array* res, mlxg_array x, mlxg_array weight, mlxg_array bias,
                    float eps, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    if (auto y = archgen_native_norm(A(x), opt(weight), opt(bias), eps, true, st)) {
      *res = wrap(std::move(*y));
    } else {
      *res = wrap(mx::fast::layer_norm(A(x), opt(weight), opt(bias), eps, st));
    }
  })
}

int mlxg_write_positions(mlxg_array* res, const mlxg_array* arrs, const mlxg_array* updates,
                         int n, int at, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    std::vector<mx::array> as, us, ys;
    for (int p = 0; p < n; p++) {
      as.push_back(A(arrs[p]));
      us.push_back(A(updates[p]));
    }
    if (auto fused = archgen_native_write_positions(as, us, at, st)) {
      ys = std::move(*fused);
    } else {
      for (int p = 0; p < n; p++) {
        const auto& a = as[p];
        const auto& u = us[p];
        if (a.ndim() != 4 || u.ndim() != 4) {
          throw std::invalid_argument("writing positions needs arrays and updates of 4 axes");
        }
        ys.push_back(mx::slice_update(a, u, mx::Shape{0, 0, at, 0},
                                      mx::Shape{a.shape(0), a.shape(1), at + u.shape(2), a.shape(3)},
                                      st));
      }
    }
    for (int p = 0; p < n; p++) {
      res[p] = wrap(std::move(ys[p]));
    }
  })
}

int mlxg_cache_rows(mlxg_array* res, const mlxg_array* arrs, const mlxg_array* updates, int n,
                    int ng, const int32_t* slots, const int32_t* at, int nw, const int32_t* moves,
                    int nm, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    std::vector<mx::array> as, us, ys;
    for (int p = 0; p < n; p++) {
      as.push_back(A(arrs[p]));
    }
    for (int i = 0; nw > 0 && i < ng * n; i++) {
      us.push_back(A(updates[i]));
    }
    std::vector<int> sl(slots, slots + nw), from(at, at + nw), mv(moves, moves + 3 * nm);
    if (auto fused = archgen_native_cache_rows(as, us, sl, from, mv, st)) {
      ys = std::move(*fused);
    } else {
      for (int p = 0; p < n; p++) {
        auto a = as[p];
        if (a.ndim() != 4) {
          throw std::invalid_argument("rewriting a cache's rows needs arrays of 4 axes");
        }
        const int H = a.shape(1), D = a.shape(3);
        for (int m = 0; m < nm; m++) {
          const int to = mv[3 * m], from_row = mv[3 * m + 1], cols = mv[3 * m + 2];
          auto row = mx::slice(a, mx::Shape{from_row, 0, 0, 0}, mx::Shape{from_row + 1, H, cols, D}, st);
          a = mx::slice_update(a, row, mx::Shape{to, 0, 0, 0}, mx::Shape{to + 1, H, cols, D}, st);
        }
        int r = 0;
        for (int i = 0; nw > 0 && i < ng; i++) {
          const auto& u = us[i * n + p];
          if (u.ndim() != 4) {
            throw std::invalid_argument("rewriting a cache's rows needs updates of 4 axes");
          }
          for (int b = 0; b < u.shape(0); b++, r++) {
            if (r >= nw) {
              throw std::invalid_argument("the updates hold more rows than the slots to write them to");
            }
            auto row = mx::slice(u, mx::Shape{b, 0, 0, 0}, mx::Shape{b + 1, u.shape(1), u.shape(2), u.shape(3)}, st);
            a = mx::slice_update(a, row, mx::Shape{sl[r], 0, from[r], 0},
                                 mx::Shape{sl[r] + 1, u.shape(1), from[r] + u.shape(2), u.shape(3)}, st);
          }
        }
        ys.push_back(a);
      }
    }
    for (int p = 0; p < n; p++) {
      res[p] = wrap(std::move(ys[p]));
    }
  })
}

int mlxg_add_norm(mlxg_array* res, mlxg_array x, mlxg_array residual, mlxg_array weight,
                  mlxg_array bias, float eps, bool layer, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    std::vector<mx::array> ys;
    if (auto both = archgen_native_add_norm(A(x), A(residual), opt(weight), opt(bias), eps, layer,
                                            st)) {
      ys = std::move(*both);
    } else {
      auto h = mx::add(A(x), A(residual), st);
      ys.push_back(h);
      if (auto y = archgen_native_norm(h, opt(weight), opt(bias), eps, layer, st)) {
        ys.push_back(std::move(*y));
      } else if (layer) {
        ys.push_back(mx::fast::layer_norm(h, opt(weight), opt(bias), eps, st));
      } else {
        ys.push_back(mx::fast::rms_norm(h, opt(weight), eps, st));
      }
    }
    res[0] = wrap(std::move(ys[0]));
    res[1] = wrap(std::move(ys[1]));
  })
}

int mlxg_gated_delta(mlxg_array* res, mlxg_array q, mlxg_array k, mlxg_array v, mlxg_array g,
                     mlxg_array beta, mlxg_array state, mlxg_array mask, bool native,
                     mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    std::optional<std::vector<mx::array>> ys;
    if (native) {
      ys = archgen_native_gated_delta(A(q), A(k), A(v), A(g), A(beta), A(state), opt(mask), st);
    }
    if (!ys) {
      ys = archgen_gated_delta_ops(A(q), A(k), A(v), A(g), A(beta), A(state), opt(mask), st);
    }
    res[0] = wrap(std::move((*ys)[0]));
    res[1] = wrap(std::move((*ys)[1]));
  })
}

int mlxg_conv_step(mlxg_array* res, mlxg_array x, mlxg_array state, mlxg_array w,
                   mlxg_array bias, bool silu, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto ys = archgen_conv_step(A(x), A(state), A(w), opt(bias), silu, S(s));
    res[0] = wrap(std::move(ys[0]));
    res[1] = wrap(std::move(ys[1]));
  })
}

int mlxg_gated_delta_gates(mlxg_array* res, mlxg_array qkv, mlxg_array b, mlxg_array a,
                           mlxg_array rate, mlxg_array dt_bias, mlxg_array state, mlxg_array mask,
                           int hk, int dk, int hv, int dv, bool neg, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto ys = archgen_gated_delta_gates(A(qkv), A(b), A(a), A(rate), A(dt_bias), A(state),
                                        opt(mask), hk, dk, hv, dv, neg, S(s));
    res[0] = wrap(std::move(ys[0]));
    res[1] = wrap(std::move(ys[1]));
  })
}

int mlxg_selective_scan(mlxg_array* res, mlxg_array x, mlxg_array dt, mlxg_array a, mlxg_array b,
                        mlxg_array c, mlxg_array d, mlxg_array state, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto ys = archgen_selective_scan(A(x), A(dt), A(a), A(b), A(c), A(d), opt(state), S(s));
    res[0] = wrap(std::move(ys[0]));
    res[1] = wrap(std::move(ys[1]));
  })
}

int mlxg_linear_recurrence(mlxg_array* res, mlxg_array a, mlxg_array u, mlxg_array state,
                           mlxg_stream s, char** err) {
  MLXG_TRY({
    auto ys = archgen_linear_recurrence(A(a), A(u), opt(state), S(s));
    res[0] = wrap(std::move(ys[0]));
    res[1] = wrap(std::move(ys[1]));
  })
}

int mlxg_wkv7(mlxg_array* res, mlxg_array r, mlxg_array w, mlxg_array k, mlxg_array v,
              mlxg_array a, mlxg_array b, mlxg_array state, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto ys = archgen_wkv7(A(r), A(w), A(k), A(v), A(a), A(b), opt(state), S(s));
    res[0] = wrap(std::move(ys[0]));
    res[1] = wrap(std::move(ys[1]));
  })
}

int mlxg_lightning(mlxg_array* res, mlxg_array q, mlxg_array k, mlxg_array v, mlxg_array decay,
                   mlxg_array state, double scale, bool native, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto ys = native ? archgen_lightning(A(q), A(k), A(v), A(decay), opt(state), scale, S(s))
                     : archgen_lightning_ops(A(q), A(k), A(v), A(decay), opt(state), scale, S(s));
    res[0] = wrap(std::move(ys[0]));
    res[1] = wrap(std::move(ys[1]));
  })
}

int mlxg_ssm_scan(mlxg_array* res, mlxg_array x, mlxg_array A_log, mlxg_array B, mlxg_array C,
                  mlxg_array D, mlxg_array dt, mlxg_array dt_bias, mlxg_array state, float lo,
                  float hi, bool native, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto st = S(s);
    std::optional<std::vector<mx::array>> ys;
    if (native) {
      ys = archgen_native_ssm(A(x), A(A_log), A(B), A(C), A(D), A(dt), A(dt_bias), opt(state), lo,
                              hi, st);
    }
    if (!ys) {
      ys = archgen_ssm_ops(A(x), A(A_log), A(B), A(C), A(D), A(dt), A(dt_bias), opt(state), lo, hi,
                           st);
    }
    res[0] = wrap(std::move((*ys)[0]));
    res[1] = wrap(std::move((*ys)[1]));
  })
}

int mlxg_ropes(mlxg_array* res, const mlxg_array* xs, int n, int dims, bool traditional,
               bool has_base, float base, float scale, int offset, mlxg_array offset_arr,
               mlxg_array freqs, mlxg_stream s, char** err) {
  MLXG_TRY({
    std::optional<float> b;
    if (has_base) {
      b = base;
    }
    auto st = S(s);
    auto off = offset_arr.ctx != nullptr ? A(offset_arr) : mx::array(offset, mx::int32);
    std::vector<mx::array> in;
    for (int p = 0; p < n; p++) {
      in.push_back(A(xs[p]));
    }
    std::vector<mx::array> ys;
    if (auto fused = archgen_native_ropes(in, dims, traditional, b, scale, off, opt(freqs), st)) {
      ys = std::move(*fused);
    } else {
      for (const auto& x : in) {
        if (auto y = archgen_native_rope(x, dims, traditional, b, scale, off, opt(freqs), st)) {
          ys.push_back(std::move(*y));
        } else if (offset_arr.ctx != nullptr) {
          ys.push_back(mx::fast::rope(x, dims, traditional, b, scale, A(offset_arr), opt(freqs), st));
        } else {
          ys.push_back(mx::fast::rope(x, dims, traditional, b, scale, offset, opt(freqs), st));
        }
      }
    }
    for (int p = 0; p < n; p++) {
      res[p] = wrap(std::move(ys[p]));
    }
  })
}

int mlxg_rope(mlxg_array* res, mlxg_array x, int dims, bool traditional, bool has_base,
              float base, float scale, int offset, mlxg_array offset_arr, mlxg_array freqs,
              mlxg_stream s, char** err) {
  return mlxg_ropes(res, &x, 1, dims, traditional, has_base, base, scale, offset, offset_arr,
                    freqs, s, err);
}

int mlxg_sdpa(mlxg_array* res, mlxg_array q, mlxg_array k, mlxg_array v, float scale,
              const char* mask_mode, mlxg_array mask, mlxg_array sinks, mlxg_stream s,
              char** err) {
  MLXG_TRY({
    auto st = S(s);
    if (auto y = archgen_native_sdpa(A(q), A(k), A(v), scale, mask_mode, opt(mask), opt(sinks),
                                     st)) {
      *res = wrap(std::move(*y));
    } else {
      *res = wrap(mx::fast::scaled_dot_product_attention(A(q), A(k), A(v), scale, mask_mode,
                                                         opt(mask), opt(sinks), false, st));
    }
  })
}

int mlxg_random_key(mlxg_array* res, uint64_t seed, char** err) {
  MLXG_TRY(*res = wrap(mx::random::key(seed)))
}

int mlxg_random_split(mlxg_array* res, mlxg_array key, mlxg_stream s, char** err) {
  MLXG_TRY({
    auto [a, b] = mx::random::split(A(key), S(s));
    res[0] = wrap(a);
    res[1] = wrap(b);
  })
}

int mlxg_random_categorical(mlxg_array* res, mlxg_array logits, int axis, mlxg_array key,
                            mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::random::categorical(A(logits), axis, opt(key), S(s))))
}

int mlxg_random_uniform(mlxg_array* res, const int32_t* shape, int ndim, int dtype,
                        mlxg_array key, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::random::uniform(shape_of(shape, ndim), to_dtype(dtype), opt(key),
                                           S(s))))
}

int mlxg_random_normal(mlxg_array* res, const int32_t* shape, int ndim, int dtype,
                       float loc, float scale, mlxg_array key, mlxg_stream s, char** err) {
  MLXG_TRY(*res = wrap(mx::random::normal(shape_of(shape, ndim), to_dtype(dtype), loc, scale,
                                          opt(key), S(s))))
}

int mlxg_eval(const mlxg_array* as, int n, mlxg_stream s, char** err) {
  MLXG_TRY(evaluate(arrays(as, n), S(s), false))
}

int mlxg_async_eval(const mlxg_array* as, int n, mlxg_stream s, char** err) {
  MLXG_TRY(evaluate(arrays(as, n), S(s), true))
}

int mlxg_load_safetensors(mlxg_map* arrays_out, mlxg_map* meta_out, const char* path,
                          mlxg_stream s, char** err) {
  MLXG_TRY({
    auto [arrs, meta] = mx::load_safetensors(std::string(path), S(s));
    auto* am = array_map(arrs);
    auto* mm = new Map();
    for (auto& [k, v] : meta) {
      Entry e;
      e.key = k;
      e.kind = 1;
      e.str = v;
      mm->entries.push_back(std::move(e));
    }
    *arrays_out = new_map(am);
    *meta_out = new_map(mm);
  })
}

int mlxg_save_safetensors(const char* path, const char* const* names, const mlxg_array* as,
                          int n, const char* const* keys, const char* const* vals, int m,
                          mlxg_stream s, char** err) {
  MLXG_TRY({
    std::vector<mx::array> xs = arrays(as, n);
    evaluate(xs, S(s), false);
    std::unordered_map<std::string, mx::array> arrs;
    for (int i = 0; i < n; i++) {
      arrs.insert_or_assign(names[i], A(as[i]));
    }
    std::unordered_map<std::string, std::string> meta;
    for (int i = 0; i < m; i++) {
      meta[keys[i]] = vals[i];
    }
    mx::save_safetensors(std::string(path), std::move(arrs), std::move(meta));
  })
}

int mlxg_load_gguf(mlxg_map* arrays_out, mlxg_map* meta_out, const char* path, mlxg_stream s,
                   char** err) {
  MLXG_TRY({
    auto [arrs, meta] = mx::load_gguf(std::string(path), S(s));
    auto* am = array_map(arrs);
    auto* mm = new Map();
    for (auto& [k, v] : meta) {
      Entry e;
      e.key = k;
      if (auto* a = std::get_if<mx::array>(&v)) {
        e.kind = 0;
        e.arr = *a;
      } else if (auto* str = std::get_if<std::string>(&v)) {
        e.kind = 1;
        e.str = *str;
      } else if (auto* list = std::get_if<std::vector<std::string>>(&v)) {
        e.kind = 2;
        e.list = *list;
      } else {
        e.kind = 3;
      }
      mm->entries.push_back(std::move(e));
    }
    *arrays_out = new_map(am);
    *meta_out = new_map(mm);
  })
}

void mlxg_map_free(mlxg_map m) {
  delete static_cast<Map*>(m.ctx);
}

int mlxg_map_size(mlxg_map m) {
  return static_cast<int>(M(m).entries.size());
}

const char* mlxg_map_key(mlxg_map m, int i) {
  return M(m).entries.at(i).key.c_str();
}

int mlxg_map_kind(mlxg_map m, int i) {
  return M(m).entries.at(i).kind;
}

mlxg_array mlxg_map_array(mlxg_map m, int i) {
  auto& e = M(m).entries.at(i);
  if (!e.arr.has_value()) {
    return mlxg_array{nullptr};
  }
  return wrap(*e.arr);
}

const char* mlxg_map_string(mlxg_map m, int i) {
  return M(m).entries.at(i).str.c_str();
}

int mlxg_map_list_len(mlxg_map m, int i) {
  return static_cast<int>(M(m).entries.at(i).list.size());
}

const char* mlxg_map_list_item(mlxg_map m, int i, int j) {
  return M(m).entries.at(i).list.at(j).c_str();
}

int64_t mlxg_cache_rows_copied(void) { return archgen_cache_rows_copied(); }

size_t mlxg_get_active_memory(void) {
  return mx::get_active_memory();
}

size_t mlxg_get_peak_memory(void) {
  return mx::get_peak_memory();
}

void mlxg_reset_peak_memory(void) {
  mx::reset_peak_memory();
}

size_t mlxg_get_cache_memory(void) {
  return mx::get_cache_memory();
}

size_t mlxg_set_memory_limit(size_t limit) {
  return mx::set_memory_limit(limit);
}

size_t mlxg_get_memory_limit(void) {
  return mx::get_memory_limit();
}

size_t mlxg_set_cache_limit(size_t limit) {
  return mx::set_cache_limit(limit);
}

void mlxg_clear_cache(void) {
  mx::clear_cache();
  mlxg_trim_heap();
}

int mlxg_heap_mmap_threshold(size_t bytes) {
#ifdef __GLIBC__
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes)) == 1 ? 1 : 0;
#else
  (void)bytes;
  return 0;
#endif
}

void mlxg_trim_heap(void) {
#ifdef __GLIBC__
  // freed buffers back to the system: glibc keeps them in its arenas
  malloc_trim(0);
#endif
}

} // extern "C"
