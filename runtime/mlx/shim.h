// The C ABI between runtime/mlx and libmlx's C++ API.
//
// Conventions:
//   - Handles are opaque: an mlxg_array owns one reference to an mlx array and
//     is released with mlxg_array_free (or mlxg_array_free_many).
//   - Every call that can fail returns an int status: 0 on success, non-zero on
//     failure, in which case *err receives a malloc'd message (free it with
//     mlxg_string_free). No C++ exception ever leaves this ABI.
//   - Results are written through the first pointer argument(s).
//   - A stream is passed by value; it names a stream made by mlxg_stream_new.
//     A call with a stream also makes it the calling thread's default stream
//     for its device, since some MLX ops build parts of themselves on the
//     default stream; so no OS thread's own stream ever enters a graph.
#ifndef ARCHGEN_MLX_SHIM_H
#define ARCHGEN_MLX_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlxg_array_ {
  void* ctx;
} mlxg_array;

typedef struct mlxg_stream_ {
  int index;
  int device_type; // 0 cpu, 1 gpu
  int device_index;
} mlxg_stream;

// Where a caller receives results and the error message of one call.
typedef struct mlxg_slot_ {
  mlxg_array res[4];
  char* err;
} mlxg_slot;

// A list of named arrays and string pairs, as loaders return them.
typedef struct mlxg_map_ {
  void* ctx;
} mlxg_map;

// The same order as mlx::core::Dtype::Val.
enum mlxg_dtype {
  MLXG_BOOL = 0,
  MLXG_UINT8,
  MLXG_UINT16,
  MLXG_UINT32,
  MLXG_UINT64,
  MLXG_INT8,
  MLXG_INT16,
  MLXG_INT32,
  MLXG_INT64,
  MLXG_FLOAT16,
  MLXG_FLOAT32,
  MLXG_FLOAT64,
  MLXG_BFLOAT16,
  MLXG_COMPLEX64,
};

enum mlxg_unary_op {
  MLXG_NEGATIVE = 0,
  MLXG_SQUARE,
  MLXG_SQRT,
  MLXG_RSQRT,
  MLXG_EXP,
  MLXG_LOG,
  MLXG_TANH,
  MLXG_ERF,
  MLXG_SIGMOID,
  MLXG_ABS,
  MLXG_SIN,
  MLXG_COS,
  MLXG_LOGICAL_NOT,
  MLXG_SILU,
  MLXG_GELU,
  MLXG_GELU_APPROX,
  MLXG_STOP_GRADIENT,
  MLXG_FLOOR,
  MLXG_RECIPROCAL,
  MLXG_LOG1P,
  MLXG_EXPM1,
};

enum mlxg_binary_op {
  MLXG_ADD = 0,
  MLXG_SUBTRACT,
  MLXG_MULTIPLY,
  MLXG_DIVIDE,
  MLXG_MAXIMUM,
  MLXG_MINIMUM,
  MLXG_POWER,
  MLXG_EQUAL,
  MLXG_NOT_EQUAL,
  MLXG_LESS,
  MLXG_LESS_EQUAL,
  MLXG_GREATER,
  MLXG_GREATER_EQUAL,
  MLXG_LOGICAL_AND,
  MLXG_LOGICAL_OR,
  MLXG_FLOOR_DIVIDE,
  MLXG_REMAINDER,
  MLXG_LOGADDEXP,
};

enum mlxg_reduce_op {
  MLXG_SUM = 0,
  MLXG_MEAN,
  MLXG_MAX,
  MLXG_MIN,
  MLXG_LOGSUMEXP,
  MLXG_ARGMAX,
  MLXG_ARGMIN,
  MLXG_NORM,
};

void mlxg_string_free(char* s);
const char* mlxg_version(void);

// Devices and streams.
int mlxg_device_count(int device_type);
int mlxg_stream_new(mlxg_stream* res, int device_type, int device_index, char** err);
int mlxg_synchronize(mlxg_stream s, char** err);

// Array handles and their facts.
void mlxg_array_free(mlxg_array a);
void mlxg_array_free_many(const mlxg_array* as, int n);
int mlxg_array_ndim(mlxg_array a);
void mlxg_array_shape(mlxg_array a, int32_t* shape);
int mlxg_array_dtype(mlxg_array a);
// The name of the primitive that computes a ("" for an array with none).
const char* mlxg_array_primitive(mlxg_array a);
size_t mlxg_array_size(mlxg_array a);
size_t mlxg_array_nbytes(mlxg_array a);
int mlxg_array_clone(mlxg_array* res, mlxg_array a, char** err);
// Evaluates a, makes it row-contiguous and copies its nbytes into dst.
int mlxg_array_read(mlxg_array a, void* dst, size_t nbytes, mlxg_stream s, char** err);

// Creation.
// A new array of shape and dtype whose bytes are not yet set; data is where
// they are, for the caller to fill before any use of the array.
int mlxg_alloc_data(mlxg_array* res, void** data, const int32_t* shape, int ndim, int dtype,
                    char** err);
int mlxg_from_data(mlxg_array* res, const void* data, const int32_t* shape, int ndim,
                   int dtype, char** err);
int mlxg_scalar(mlxg_array* res, double v, int dtype, char** err);
int mlxg_arange(mlxg_array* res, double start, double stop, double step, int dtype,
                mlxg_stream s, char** err);
int mlxg_full(mlxg_array* res, const int32_t* shape, int ndim, double v, int dtype,
              mlxg_stream s, char** err);

// Elementwise.
int mlxg_unary(mlxg_array* res, int op, mlxg_array a, mlxg_stream s, char** err);
int mlxg_binary(mlxg_array* res, int op, mlxg_array a, mlxg_array b, mlxg_stream s,
                char** err);
// a op v, or v op a when scalar_first; v takes a's dtype where a is floating,
// as a Python scalar does in mlx.
int mlxg_binary_scalar(mlxg_array* res, int op, mlxg_array a, double v, bool scalar_first,
                       mlxg_stream s, char** err);
int mlxg_where(mlxg_array* res, mlxg_array c, mlxg_array x, mlxg_array y, mlxg_stream s,
               char** err);
int mlxg_astype(mlxg_array* res, mlxg_array a, int dtype, mlxg_stream s, char** err);
// a's bytes read as dtype (the last axis scaled by the size ratio).
int mlxg_view(mlxg_array* res, mlxg_array a, int dtype, mlxg_stream s, char** err);
// FP8 (e4m3) codes held as uint8, to and from a float dtype.
int mlxg_from_fp8(mlxg_array* res, mlxg_array a, int dtype, mlxg_stream s, char** err);
int mlxg_to_fp8(mlxg_array* res, mlxg_array a, mlxg_stream s, char** err);
int mlxg_contiguous(mlxg_array* res, mlxg_array a, mlxg_stream s, char** err);
int mlxg_clip(mlxg_array* res, mlxg_array a, double lo, double hi, mlxg_stream s, char** err);

// Reductions; naxes < 0 reduces over every axis.
int mlxg_reduce(mlxg_array* res, int op, mlxg_array a, const int32_t* axes, int naxes,
                bool keepdims, mlxg_stream s, char** err);
int mlxg_softmax(mlxg_array* res, mlxg_array a, const int32_t* axes, int naxes, bool precise,
                 mlxg_stream s, char** err);
int mlxg_cumsum(mlxg_array* res, mlxg_array a, int axis, bool reverse, bool inclusive,
                mlxg_stream s, char** err);
int mlxg_sort(mlxg_array* res, mlxg_array a, int axis, bool arg, mlxg_stream s, char** err);
int mlxg_topk(mlxg_array* res, mlxg_array a, int k, int axis, mlxg_stream s, char** err);
int mlxg_argpartition(mlxg_array* res, mlxg_array a, int kth, int axis, mlxg_stream s,
                      char** err);

// Shapes.
int mlxg_reshape(mlxg_array* res, mlxg_array a, const int32_t* shape, int ndim,
                 mlxg_stream s, char** err);
// naxes < 0 reverses the axes.
int mlxg_transpose(mlxg_array* res, mlxg_array a, const int32_t* axes, int naxes,
                   mlxg_stream s, char** err);
int mlxg_swapaxes(mlxg_array* res, mlxg_array a, int axis1, int axis2, mlxg_stream s,
                  char** err);
int mlxg_expand_dims(mlxg_array* res, mlxg_array a, const int32_t* axes, int naxes,
                     mlxg_stream s, char** err);
// naxes < 0 squeezes every axis of size 1.
int mlxg_squeeze(mlxg_array* res, mlxg_array a, const int32_t* axes, int naxes,
                 mlxg_stream s, char** err);
int mlxg_flatten(mlxg_array* res, mlxg_array a, int start, int end, mlxg_stream s,
                 char** err);
int mlxg_broadcast_to(mlxg_array* res, mlxg_array a, const int32_t* shape, int ndim,
                      mlxg_stream s, char** err);
int mlxg_concatenate(mlxg_array* res, const mlxg_array* as, int n, int axis, mlxg_stream s,
                     char** err);
int mlxg_stack(mlxg_array* res, const mlxg_array* as, int n, int axis, mlxg_stream s,
               char** err);
// Splits into nparts equal parts (indices == NULL) or at nidx indices (nidx + 1
// parts); res must hold that many handles.
int mlxg_split(mlxg_array* res, mlxg_array a, int nparts, const int32_t* indices, int nidx,
               int axis, mlxg_stream s, char** err);
int mlxg_slice(mlxg_array* res, mlxg_array a, const int32_t* start, const int32_t* stop,
               const int32_t* strides, int ndim, mlxg_stream s, char** err);
int mlxg_slice_dynamic(mlxg_array* res, mlxg_array a, mlxg_array start, const int32_t* axes,
                       int naxes, const int32_t* sizes, int nsizes, mlxg_stream s,
                       char** err);
int mlxg_slice_update(mlxg_array* res, mlxg_array src, mlxg_array upd, const int32_t* start,
                      const int32_t* stop, const int32_t* strides, int ndim, mlxg_stream s,
                      char** err);
int mlxg_slice_update_dynamic(mlxg_array* res, mlxg_array src, mlxg_array upd,
                              mlxg_array start, const int32_t* axes, int naxes, mlxg_stream s,
                              char** err);
// has_axis false: take from the flattened array.
int mlxg_take(mlxg_array* res, mlxg_array a, mlxg_array idx, bool has_axis, int axis,
              mlxg_stream s, char** err);
int mlxg_take_along_axis(mlxg_array* res, mlxg_array a, mlxg_array idx, int axis,
                         mlxg_stream s, char** err);
int mlxg_put_along_axis(mlxg_array* res, mlxg_array a, mlxg_array idx, mlxg_array values,
                        int axis, mlxg_stream s, char** err);
int mlxg_tri(mlxg_array* res, mlxg_array a, int k, bool upper, mlxg_stream s, char** err);
int mlxg_pad(mlxg_array* res, mlxg_array a, const int32_t* axes, const int32_t* lo,
             const int32_t* hi, int naxes, double value, mlxg_stream s, char** err);

// Linear algebra and quantization.
int mlxg_matmul(mlxg_array* res, mlxg_array a, mlxg_array b, mlxg_stream s, char** err);
// x w^T: a linear layer's product, on archgen's kernel where it applies.
int mlxg_linear(mlxg_array* res, mlxg_array x, mlxg_array w, mlxg_stream s, char** err);
int mlxg_addmm(mlxg_array* res, mlxg_array c, mlxg_array a, mlxg_array b, float alpha,
               float beta, mlxg_stream s, char** err);
// res holds 3 handles: weight, scales, biases (biases empty for modes without).
int mlxg_quantize(mlxg_array* res, mlxg_array w, int group_size, int bits, const char* mode,
                  mlxg_stream s, char** err);
// biases.ctx may be NULL; dtype < 0 keeps the scales' dtype.
int mlxg_dequantize(mlxg_array* res, mlxg_array w, mlxg_array scales, mlxg_array biases,
                    int group_size, int bits, const char* mode, int dtype, mlxg_stream s,
                    char** err);
// x W^T for W [N, row bytes] of uint8 holding llama.cpp's blocks of type
// code, and W's values decoded into dtype (qmm.h).
int mlxg_block_gather_matmul(mlxg_array* res, mlxg_array x, mlxg_array w, mlxg_array lhs,
                              mlxg_array rhs, int code, mlxg_stream s, char** err);
int mlxg_block_matmul(mlxg_array* res, mlxg_array x, mlxg_array w, int code, mlxg_stream s,
                      char** err);
int mlxg_block_dequantize(mlxg_array* res, mlxg_array w, int code, int dtype, mlxg_stream s,
                          char** err);
int mlxg_quantized_matmul(mlxg_array* res, mlxg_array x, mlxg_array w, mlxg_array scales,
                          mlxg_array biases, bool transpose, int group_size, int bits,
                          const char* mode, mlxg_stream s, char** err);
// The products of one x [..., K] by n matrices W_p [N_p, K] (a layer's q,
// k and v projections, say), into res[0..n): quantized_matmul with transpose
// for each (biases[p] empty where the mode has none), and linear for each.
// With head_dim above 0, x is [B, L, K] and each result [B, N_p / head_dim,
// L, head_dim], the product split into heads and transposed. Where
// archgen's kernel takes every part (one kind of W throughout) they are one
// op and one hand-off to its threads; otherwise n ops.
int mlxg_quantized_matmuls(mlxg_array* res, mlxg_array x, const mlxg_array* w,
                           const mlxg_array* scales, const mlxg_array* biases, int n,
                           int group_size, int bits, const char* mode, int head_dim,
                           mlxg_stream s, char** err);
int mlxg_linears(mlxg_array* res, mlxg_array x, const mlxg_array* w, int n, int head_dim,
                 mlxg_stream s, char** err);
// Matrix products with matrix-level gather: the batch entries of a (x) and
// b (w) that each product takes are picked by lhs and rhs (ctx == NULL: in
// order, broadcast as matmul's batch axes are). sorted: rhs (or lhs) is
// sorted, as mlx's sorted_indices.
int mlxg_gather_mm(mlxg_array* res, mlxg_array a, mlxg_array b, mlxg_array lhs, mlxg_array rhs,
                   bool sorted, mlxg_stream s, char** err);
// biases.ctx may be NULL (modes without biases).
int mlxg_gather_qmm(mlxg_array* res, mlxg_array x, mlxg_array w, mlxg_array scales,
                    mlxg_array biases, mlxg_array lhs, mlxg_array rhs, bool transpose,
                    int group_size, int bits, const char* mode, bool sorted, mlxg_stream s,
                    char** err);

// Fast kernels. Optional arrays pass ctx == NULL.
// silu(gate) * up (gate and up of one shape).
int mlxg_swiglu(mlxg_array* res, mlxg_array gate, mlxg_array up, mlxg_stream s, char** err);
// Each of n updates [B, H, k, D] written into its array [B, H, T, D] from
// position at of axis 2 on, into res[0..n) (a KV cache's step): one op
// where archgen's kernel takes them all, mlx's slice_update each otherwise.
int mlxg_write_positions(mlxg_array* res, const mlxg_array* arrs, const mlxg_array* updates,
                         int n, int at, mlxg_stream s, char** err);
// A cache's n arrays [C, H, T, D] with rows rewritten, into res[0..n):
// nm moves (triples dst, src, cols in moves: row src's first cols
// positions copied over row dst's, in order), then the rows of ng sources
// of updates (updates: ng lists of n arrays, NULL when nw is 0; nw rows in
// all, the sources' in order) written into rows slots[r] from positions
// at[r]. One op where archgen's kernel takes it, mlx's slices and
// slice_updates otherwise.
int mlxg_cache_rows(mlxg_array* res, const mlxg_array* arrs, const mlxg_array* updates, int n,
                    int ng, const int32_t* slots, const int32_t* at, int nw, const int32_t* moves,
                    int nm, mlxg_stream s, char** err);
// x + residual into res[0] and that sum rms-normed (layer false) or
// layer-normed into res[1]: one op where archgen's kernel takes it, an add
// and a norm otherwise.
int mlxg_add_norm(mlxg_array* res, mlxg_array x, mlxg_array residual, mlxg_array weight,
                  mlxg_array bias, float eps, bool layer, mlxg_stream s, char** err);
// The gated delta rule over all steps (recurrent.h): y into res[0], the
// state after the last step into res[1]; archgen's kernel where it applies
// and native is true, libmlx's ops one step at a time otherwise. mask may
// be empty.
int mlxg_gated_delta(mlxg_array* res, mlxg_array q, mlxg_array k, mlxg_array v, mlxg_array g,
                     mlxg_array beta, mlxg_array state, mlxg_array mask, bool native,
                     mlxg_stream s, char** err);
int mlxg_rms_norm(mlxg_array* res, mlxg_array x, mlxg_array weight, float eps, mlxg_stream s,
                  char** err);
// rms_norm of x (times weight; it may be empty), then times silu(gate).
int mlxg_gated_rms_norm(mlxg_array* res, mlxg_array x, mlxg_array weight, mlxg_array gate,
                        float eps, mlxg_stream s, char** err);
// Mamba2's state-space scan (recurrent.h): y into res[0], the last state
// into res[1]; archgen's kernel where it applies and native is true,
// libmlx's ops as mlx-lm's ssm_attn composes them otherwise. state may be
// empty.
int mlxg_ssm_scan(mlxg_array* res, mlxg_array x, mlxg_array A_log, mlxg_array B, mlxg_array C,
                  mlxg_array D, mlxg_array dt, mlxg_array dt_bias, mlxg_array state, float lo,
                  float hi, bool native, mlxg_stream s, char** err);
// Mamba's selective scan in float32 (recurrent.h): y into res[0], the last
// state into res[1]. state may be empty.
// The gated delta rule from its projections' outputs, float32
// (recurrent.h): y into res[0], the last state into res[1]. mask may be
// empty.
// A short convolution's step in float32 (recurrent.h): y into res[0],
// the next state into res[1]. bias may be empty.
int mlxg_conv_step(mlxg_array* res, mlxg_array x, mlxg_array state, mlxg_array w,
                   mlxg_array bias, bool silu, mlxg_stream s, char** err);
int mlxg_gated_delta_gates(mlxg_array* res, mlxg_array qkv, mlxg_array b, mlxg_array a,
                           mlxg_array rate, mlxg_array dt_bias, mlxg_array state, mlxg_array mask,
                           int hk, int dk, int hv, int dv, bool neg, mlxg_stream s, char** err);
int mlxg_selective_scan(mlxg_array* res, mlxg_array x, mlxg_array dt, mlxg_array a, mlxg_array b,
                        mlxg_array c, mlxg_array d, mlxg_array state, mlxg_stream s, char** err);
// A diagonal linear recurrence in float32 (recurrent.h): y into res[0],
// the last state into res[1]. state may be empty.
int mlxg_linear_recurrence(mlxg_array* res, mlxg_array a, mlxg_array u, mlxg_array state,
                           mlxg_stream s, char** err);
// RWKV-7's WKV-7 recurrence in float32 (recurrent.h): y into res[0], the
// last state into res[1]. state may be empty.
int mlxg_wkv7(mlxg_array* res, mlxg_array r, mlxg_array w, mlxg_array k, mlxg_array v,
              mlxg_array a, mlxg_array b, mlxg_array state, mlxg_stream s, char** err);
// Lightning attention's constant-decay recurrence (recurrent.h): y into
// res[0], the last state into res[1]; archgen's float32 kernel where native
// is true, libmlx's ops one step at a time as mlx-lm's recurrent_gla
// composes them otherwise. state may be empty.
int mlxg_lightning(mlxg_array* res, mlxg_array q, mlxg_array k, mlxg_array v, mlxg_array decay,
                   mlxg_array state, double scale, bool native, mlxg_stream s, char** err);
// mlx's conv1d: x [B, L, C_in], w [C_out, K, C_in / groups].
int mlxg_conv1d(mlxg_array* res, mlxg_array x, mlxg_array w, int stride, int padding,
                int dilation, int groups, mlxg_stream s, char** err);
int mlxg_layer_norm(mlxg_array* res, mlxg_array x, mlxg_array weight, mlxg_array bias,
                    float eps, mlxg_stream s, char** err);
// Exactly one of has_base and freqs.ctx; offset_arr.ctx == NULL uses offset.
int mlxg_rope(mlxg_array* res, mlxg_array x, int dims, bool traditional, bool has_base,
              float base, float scale, int offset, mlxg_array offset_arr, mlxg_array freqs,
              mlxg_stream s, char** err);
// mlxg_rope of n arrays by the same positions, into res[0..n): one op where
// archgen's kernel takes them all (one dtype), n otherwise.
int mlxg_ropes(mlxg_array* res, const mlxg_array* xs, int n, int dims, bool traditional,
               bool has_base, float base, float scale, int offset, mlxg_array offset_arr,
               mlxg_array freqs, mlxg_stream s, char** err);
// mask_mode: "", "causal" or "array" (then mask.ctx is the mask).
int mlxg_sdpa(mlxg_array* res, mlxg_array q, mlxg_array k, mlxg_array v, float scale,
              const char* mask_mode, mlxg_array mask, mlxg_array sinks, mlxg_stream s,
              char** err);

// Random.
int mlxg_random_key(mlxg_array* res, uint64_t seed, char** err);
// res holds 2 handles.
int mlxg_random_split(mlxg_array* res, mlxg_array key, mlxg_stream s, char** err);
int mlxg_random_categorical(mlxg_array* res, mlxg_array logits, int axis, mlxg_array key,
                            mlxg_stream s, char** err);
int mlxg_random_uniform(mlxg_array* res, const int32_t* shape, int ndim, int dtype,
                        mlxg_array key, mlxg_stream s, char** err);
int mlxg_random_normal(mlxg_array* res, const int32_t* shape, int ndim, int dtype,
                       float loc, float scale, mlxg_array key, mlxg_stream s, char** err);

// Evaluation on stream s: arrays already queued are waited for, the others
// evaluated.
int mlxg_eval(const mlxg_array* as, int n, mlxg_stream s, char** err);
int mlxg_async_eval(const mlxg_array* as, int n, mlxg_stream s, char** err);

// Files. Maps are freed with mlxg_map_free.
int mlxg_load_safetensors(mlxg_map* arrays, mlxg_map* meta, const char* path, mlxg_stream s,
                          char** err);
// Evaluates the arrays on s first, as mlxg_eval does.
int mlxg_save_safetensors(const char* path, const char* const* names, const mlxg_array* as,
                          int n, const char* const* keys, const char* const* vals, int m,
                          mlxg_stream s, char** err);
// meta holds, per key, one of: an array, a string, a list of strings (kind 0..2).
int mlxg_load_gguf(mlxg_map* arrays, mlxg_map* meta, const char* path, mlxg_stream s,
                   char** err);
void mlxg_map_free(mlxg_map m);
int mlxg_map_size(mlxg_map m);
const char* mlxg_map_key(mlxg_map m, int i);
// Kind of entry i: 0 array, 1 string, 2 string list, 3 empty.
int mlxg_map_kind(mlxg_map m, int i);
// A new handle on entry i's array.
mlxg_array mlxg_map_array(mlxg_map m, int i);
const char* mlxg_map_string(mlxg_map m, int i);
int mlxg_map_list_len(mlxg_map m, int i);
const char* mlxg_map_list_item(mlxg_map m, int i, int j);

// Whether quantized_matmul runs archgen's CPU kernel (qmm.cpp) where it
// applies: 1 on x86-64 CPUs with AVX2, FMA and F16C unless
// ARCHGEN_MLX_NATIVE_QMM=0.
int mlxg_native_qmm(void);

// How quantized_matmul with a half-precision input and scales of the same
// dtype runs where mlxg_native_qmm is 1 (0 where it is not): 2 on archgen's
// kernel in libmlx's rounding, bit for bit (the default); 1 on archgen's
// float32 kernels, the result rounded once (ARCHGEN_MLX_NATIVE_QMM_HALF=f32);
// 0 on libmlx's own kernel (ARCHGEN_MLX_NATIVE_QMM_HALF=0).
// mlxg_set_native_qmm_half sets the mode and returns the previous one.
int mlxg_native_qmm_half(void);
int mlxg_set_native_qmm_half(int mode);

// Whether the native kernel's 4-bit products for one or two rows of x run
// on 8-bit integers (x quantized per block of 32 values, as llama.cpp
// does): 1 where mlxg_native_qmm is and ARCHGEN_MLX_NATIVE_QMV_INT8=1 or
// mlxg_set_native_qmv_int8 turned it on; the setter returns the previous
// setting.
int mlxg_native_qmv_int8(void);
int mlxg_set_native_qmv_int8(int on);

// Whether the native kernel's dense products of a float32 x by an
// affine-quantized W round x to 16 bits per group of W (qmv16.h): 1 where
// mlxg_native_qmm is and neither ARCHGEN_MLX_NATIVE_QMV16=0 nor
// mlxg_set_native_qmv16 turned it off (the setter returns the previous
// setting).
int mlxg_native_qmv16(void);
int mlxg_set_native_qmv16(int on);

// Whether the native kernel's products of more than 8 rows of a float32 x
// by a 4- or 8-bit affine or a block-quantized W (and a mixture's experts
// of more than 8 rows) run on 16-bit integer panels (qmv16.h's qmm16): 1 where mlxg_native_qmm is, the instructions are AVX-512 with
// VNNI, and neither ARCHGEN_MLX_NATIVE_QMM16=0 nor mlxg_set_native_qmm16
// turned it off (the setter returns the previous setting). The tile unit,
// where it runs, takes those products first.
int mlxg_native_qmm16(void);
int mlxg_set_native_qmm16(int on);

// The instructions the native quantized kernel uses where mlxg_native_qmm
// is 1 (0 where it is not): 2 where the CPU and the operating system run
// AVX-512 with VNNI, for the quantized products of up to 8 rows of a
// float32 x on 16-bit integers (qmv16.h); 1 for AVX2 and its float32
// kernels, also where ARCHGEN_MLX_ISA=avx2 asks for them.
// mlxg_set_native_isa sets the level, at most what the machine runs, and
// returns the previous one.
int mlxg_native_isa(void);
int mlxg_set_native_isa(int level);
// mlxg_native_tiles reports the tile unit's setting for the products of many
// rows of x (0 off, or where the kernels run AVX2 only; 1 to 3 bfloat16
// parts a product, 4 the parts chosen by W's kind); mlxg_set_native_tiles
// sets it (0 where the CPU has no AMX with bfloat16) and returns the
// previous setting.
int mlxg_native_tiles(void);
int mlxg_set_native_tiles(int mode);

// Whether rms_norm, layer_norm, rope and sdpa run archgen's CPU kernels
// (fastops.h) where they apply: 1 on x86-64 CPUs with AVX2, FMA and F16C
// unless ARCHGEN_MLX_NATIVE_FAST=0. mlxg_set_native_fast turns them on or
// off (on only where the CPU allows) and returns the previous setting.
int mlxg_native_fast(void);
int mlxg_set_native_fast(int on);
// mlxg_set_native_recurrent turns the kernels of recurrent.h on (where the
// CPU allows) or off, and returns the previous setting.
int mlxg_set_native_recurrent(int on);

// Whether gather_qmm runs archgen's CPU kernel (gqmm.cpp) where it applies:
// 1 on x86-64 CPUs with AVX2, FMA, F16C and BMI2 unless
// ARCHGEN_MLX_NATIVE_QMM=0. mlxg_set_native_gather_qmm turns it on or off
// (on only where the CPU allows) and returns the previous setting.
int mlxg_native_gather_qmm(void);
int mlxg_set_native_gather_qmm(int on);


// Memory.
size_t mlxg_get_active_memory(void);
int64_t mlxg_cache_rows_copied(void);
size_t mlxg_get_peak_memory(void);
void mlxg_reset_peak_memory(void);
size_t mlxg_get_cache_memory(void);
size_t mlxg_set_memory_limit(size_t limit);
size_t mlxg_get_memory_limit(void);
size_t mlxg_set_cache_limit(size_t limit);
void mlxg_clear_cache(void);
void mlxg_trim_heap(void);
int mlxg_heap_mmap_threshold(size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
