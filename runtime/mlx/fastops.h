// archgen's CPU kernels for the ops libmlx calls "fast" but has no CPU
// kernel for, and for SiLU: rms_norm and layer_norm (norm.cpp), rope
// (rope.cpp), a KV cache's step (cachewrite.cpp), scaled-dot-product
// attention (sdpa.cpp) and SiLU (glu.cpp), used by the shim where they
// apply. On the CPU stream libmlx runs each as a chain of small ops (a
// cast, a square, a mean, a reciprocal square root, ...), each one
// scheduled, allocated and dispatched on its own; a decode step's norms,
// ropes and attentions were most of its time. Each kernel is one MLX
// primitive that computes the same function in one pass over its input,
// rounding to the array's dtype where libmlx's chain stores an
// intermediate array, so that bfloat16 and float16 results match libmlx's
// to the last bit in nearly every element.
#ifndef ARCHGEN_MLX_FASTOPS_H
#define ARCHGEN_MLX_FASTOPS_H

#include <optional>
#include <vector>
#include <string>

#include "mlx/mlx.h"

// Each returns the op as an array computed by archgen's kernel, or nullopt
// where the kernel does not apply and mlx's own op should run: a CPU without
// AVX2, FMA and F16C, a GPU stream, dtypes but float32, float16 and
// bfloat16, arguments mlx would refuse (mlx's op then reports them).
// ARCHGEN_MLX_NATIVE_FAST=0 turns them all off.

// rms_norm (layer = false) or layer_norm (layer = true) over the last axis,
// as mlx::core::fast's.
std::optional<mlx::core::array> archgen_native_norm(const mlx::core::array& x,
                                                    const std::optional<mlx::core::array>& weight,
                                                    const std::optional<mlx::core::array>& bias,
                                                    float eps, bool layer, mlx::core::Stream s);

// rms_norm of float32 x (times weight where given), each value then times
// silu(gate) (gate: float32, x's shape), as one op; nullopt where the
// kernel does not apply.
std::optional<mlx::core::array> archgen_native_gated_rms_norm(
    const mlx::core::array& x, const std::optional<mlx::core::array>& weight,
    const mlx::core::array& gate, float eps, mlx::core::Stream s);

// x + residual (of x's shape and dtype, as mlx's add gives it) and that sum
// normed as archgen_native_norm normalizes, as one op with the two outputs.
std::optional<std::vector<mlx::core::array>> archgen_native_add_norm(
    const mlx::core::array& x, const mlx::core::array& residual,
    const std::optional<mlx::core::array>& weight, const std::optional<mlx::core::array>& bias,
    float eps, bool layer, mlx::core::Stream s);

// Each update [B, H, n, D_p] written into its array [B, H, T, D_p] from
// position at of axis 2 on (a KV cache's step), as mlx's slice_update
// writes it, one op with an output per array; nullopt where any pair does
// not fit (then mlx's slice_update runs and reports it).
std::optional<std::vector<mlx::core::array>> archgen_native_write_positions(
    const std::vector<mlx::core::array>& arrs, const std::vector<mlx::core::array>& updates,
    int at, mlx::core::Stream s);

// A cache's rows rewritten in one op, an output per array [C, H, T, D_p]:
// moves (triples dst, src, cols: row src's first cols entries of axis 2
// copied over row dst's, in order), then, when updates are given (lists of
// one array per cache array, one list after the other), the lists' rows in
// order, row r written into row slots[r] from entry at[r] of axis 2 on.
// nullopt where anything does not fit (the caller then composes mlx's ops).
std::optional<std::vector<mlx::core::array>> archgen_native_cache_rows(
    const std::vector<mlx::core::array>& arrs, const std::vector<mlx::core::array>& updates,
    const std::vector<int>& slots, const std::vector<int>& at, const std::vector<int>& moves,
    mlx::core::Stream s);

// The bytes archgen's cache writes have copied whole so far: arrays whose
// buffers something else still held, so that the write could not go in
// place.
int64_t archgen_cache_rows_copied();

// archgen_native_rope of several arrays of one dtype (a layer's queries
// and keys) by the same positions and frequencies, as one op with an output
// each; nullopt where any is not taken.
std::optional<std::vector<mlx::core::array>> archgen_native_ropes(
    const std::vector<mlx::core::array>& xs, int dims, bool traditional,
    std::optional<float> base, float scale, const mlx::core::array& offset,
    const std::optional<mlx::core::array>& freqs, mlx::core::Stream s);

// mlx::core::fast::rope with an array offset (a scalar or one per batch row).
std::optional<mlx::core::array> archgen_native_rope(const mlx::core::array& x, int dims,
                                                    bool traditional, std::optional<float> base,
                                                    float scale, const mlx::core::array& offset,
                                                    const std::optional<mlx::core::array>& freqs,
                                                    mlx::core::Stream s);

// mlx::core::fast::scaled_dot_product_attention, where q, k and v share a
// dtype, or float32 queries attend over half-precision keys and values (a
// cache held at the checkpoint's width under float32 compute), read as
// stored and widened exactly: what libmlx's promotion to float32 computes,
// without the float32 copy of the cache.
std::optional<mlx::core::array> archgen_native_sdpa(
    const mlx::core::array& q, const mlx::core::array& k, const mlx::core::array& v, float scale,
    const std::string& mask_mode, const std::optional<mlx::core::array>& mask,
    const std::optional<mlx::core::array>& sinks, mlx::core::Stream s);

// The exact GELU, x (1 + erf(x / sqrt(2))) / 2, float32 only, equal to
// libmlx's chain of ops (its erf: Abramowitz and Stegun 7.1.26) bit for
// bit.
std::optional<mlx::core::array> archgen_native_gelu(const mlx::core::array& x, mlx::core::Stream s);

// silu(gate) (up absent) or silu(gate) * up, float32 only, equal to
// libmlx's gate * sigmoid(gate) (times up) bit for bit; up has gate's shape.
std::optional<mlx::core::array> archgen_native_silu(const mlx::core::array& gate,
                                                    const std::optional<mlx::core::array>& up,
                                                    mlx::core::Stream s);

#endif
