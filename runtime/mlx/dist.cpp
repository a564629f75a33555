// The extern "C" side of runtime/mlx's distributed binding (dist.h): each
// function calls one entry point of mlx::core::distributed and turns any
// exception into a status and a message.
#include "dist.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "mlx/distributed/distributed.h"
#include "mlx/distributed/ops.h"
#include "mlx/mlx.h"

namespace mx = mlx::core;
namespace md = mlx::core::distributed;

namespace {

int fail(char** err, const char* msg) {
  if (err != nullptr) {
    *err = strdup(msg);
  }
  return 1;
}

// Runs f, turning what it throws into a status and a message.
template <typename F>
int guarded(char** err, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::bad_alloc&) {
    return fail(err, "out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return fail(err, e.what());
  } catch (...) {
    return fail(err, "unknown C++ exception");
  }
}

mx::array& arr(mlxg_array a) {
  return *static_cast<mx::array*>(a.ctx);
}

md::Group& grp(mlxg_group g) {
  return *static_cast<md::Group*>(g.ctx);
}

mlxg_array out(mx::array x) {
  return mlxg_array{new mx::array(std::move(x))};
}

// The stream of a call, made the thread's default for its device as
// shim.cpp's calls do.
mx::Stream on(mlxg_stream s) {
  mx::Stream st(s.index, mx::Device(s.device_type == 1 ? mx::Device::gpu : mx::Device::cpu,
                                    s.device_index));
  mx::set_default_stream(st);
  return st;
}

mx::Dtype dtype_of(int d) {
  static const mx::Dtype table[] = {mx::bool_,   mx::uint8,   mx::uint16,  mx::uint32, mx::uint64,
                                    mx::int8,    mx::int16,   mx::int32,   mx::int64,  mx::float16,
                                    mx::float32, mx::float64, mx::bfloat16, mx::complex64};
  if (d < 0 || d >= static_cast<int>(sizeof(table) / sizeof(table[0]))) {
    throw std::invalid_argument("unknown dtype code " + std::to_string(d));
  }
  return table[d];
}

} // namespace

extern "C" {

int mlxg_dist_is_available(const char* backend) {
  try {
    return md::is_available(std::string(backend)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int mlxg_dist_init(mlxg_group* res, bool strict, const char* backend, char** err) {
  return guarded(err, [&] { res->ctx = new md::Group(md::init(strict, std::string(backend))); });
}

void mlxg_group_free(mlxg_group g) {
  delete static_cast<md::Group*>(g.ctx);
}

int mlxg_group_rank(mlxg_group g) {
  return grp(g).rank();
}

int mlxg_group_size(mlxg_group g) {
  return grp(g).size();
}

int mlxg_all_sum(mlxg_array* res, mlxg_array x, mlxg_group g, mlxg_stream s, char** err) {
  return guarded(err, [&] { *res = out(md::all_sum(arr(x), grp(g), on(s))); });
}

int mlxg_all_gather(mlxg_array* res, mlxg_array x, mlxg_group g, mlxg_stream s, char** err) {
  return guarded(err, [&] { *res = out(md::all_gather(arr(x), grp(g), on(s))); });
}

int mlxg_all_max(mlxg_array* res, mlxg_array x, mlxg_group g, mlxg_stream s, char** err) {
  return guarded(err, [&] { *res = out(md::all_max(arr(x), grp(g), on(s))); });
}

int mlxg_send(mlxg_array* res, mlxg_array x, int dst, mlxg_group g, mlxg_stream s, char** err) {
  return guarded(err, [&] { *res = out(md::send(arr(x), dst, grp(g), on(s))); });
}

int mlxg_recv(mlxg_array* res, const int32_t* shape, int ndim, int dtype, int src, mlxg_group g,
              mlxg_stream s, char** err) {
  return guarded(err, [&] {
    mx::Shape sh(shape, shape + ndim);
    *res = out(md::recv(sh, dtype_of(dtype), src, grp(g), on(s)));
  });
}

} // extern "C"
