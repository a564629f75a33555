// archgen's CPU kernels for the recurrences of linear-attention and
// state-space mixers and their short convolutions (recurrent.cpp): each
// recurrence runs the whole time loop inside one op, so that a head's state stays in cache for every token of a
// prefill, where composing libmlx's ops takes one small graph per token.
#ifndef ARCHGEN_MLX_RECURRENT_H
#define ARCHGEN_MLX_RECURRENT_H

#include <optional>
#include <vector>

#include "mlx/mlx.h"

// The gated delta rule over T steps, as mlx-lm's gated_delta_ops computes
// it one step at a time. q, k [B, T, Hk, Dk] and v [B, T, Hv, Dv] of one
// float dtype (value head h reads key head h / (Hv / Hk)); g the decay,
// float32 [B, T, Hv] (one per head) or [B, T, Hv, Dk] (one per key
// channel); beta [B, T, Hv]; state float32 [B, Hv, Dv, Dk]; mask, when
// set, bool [B, T] (a step where it is false computes its output but keeps
// the state it started from). Each step: S = S * g; m = S k; d = (v - m) *
// beta; S = S + k d; y = S q, every product and sum in float32 as libmlx
// rounds them (sums in index order), y rounded to q's dtype.
//
// Returns {y [B, T, Hv, Dv], state}, or nullopt where the kernel does not
// apply (another stream or dtype, a CPU without AVX2, the native kernels
// turned off); gated_delta_ops then composes libmlx's ops.
//
// The kernel moves each block of the state's rows into its vector lanes
// and back with vector transposes; where the environment holds
// ARCHGEN_MLX_DELTA_PLAIN_COPY=1 as the op is made (here or in
// archgen_gated_delta_gates), with plain loops one float at a time, the
// baseline the tests compare them with. Both give the same bits.
std::optional<std::vector<mlx::core::array>> archgen_native_gated_delta(
    const mlx::core::array& q, const mlx::core::array& k, const mlx::core::array& v,
    const mlx::core::array& g, const mlx::core::array& beta, const mlx::core::array& state,
    const std::optional<mlx::core::array>& mask, mlx::core::Stream s);

// The same recurrence composed of libmlx's ops, one step at a time, as
// mlx-lm's gated_delta_ops composes it: the reference of the kernel, and
// what runs where the kernel does not.
std::vector<mlx::core::array> archgen_gated_delta_ops(
    const mlx::core::array& q, const mlx::core::array& k, const mlx::core::array& v,
    const mlx::core::array& g, const mlx::core::array& beta, const mlx::core::array& state,
    const std::optional<mlx::core::array>& mask, mlx::core::Stream s);

// archgen_gated_delta_gates is the gated delta rule from its projections'
// outputs, float32: q, k and v side by side in qkv [B, T, 2 Hk Dk + Hv
// Dv], q and k scaled to unit length here (q also by Dk^-1/2), the write
// strength sigmoid(b) (twice that with neg) and the decay exp(rate
// softplus(a + dt_bias)), b and a [B, T, Hv], rate and dt_bias [Hv]; then
// the rule as archgen_gated_delta_ops. One op on archgen's kernel where it
// runs, libmlx's ops otherwise. Returns {y [B, T, Hv, Dv], state}; throws
// on other shapes or dtypes.
std::vector<mlx::core::array> archgen_gated_delta_gates(
    const mlx::core::array& qkv, const mlx::core::array& b, const mlx::core::array& a,
    const mlx::core::array& rate, const mlx::core::array& dt_bias, const mlx::core::array& state,
    const std::optional<mlx::core::array>& mask, int Hk, int Dk, int Hv, int Dv, bool neg,
    mlx::core::Stream s);

// archgen_conv_step is a short (depthwise, causal) convolution's step in
// float32: x [B, L, C] after the state [B, K - 1, C] by w, the taps [K, C]
// (each tap's weights over the channels, which the kernel reads as they
// are) or MLX's depthwise kernel [C, K, 1] (moved to taps on each call),
// plus bias [C] where given, then silu where asked. Returns {y [B, L, C],
// the next state (the last K - 1 of the state and x side by side)}: one op
// on archgen's kernel where it runs, libmlx's ops otherwise. Throws on
// other shapes or dtypes.
std::vector<mlx::core::array> archgen_conv_step(const mlx::core::array& x,
                                                const mlx::core::array& state,
                                                const mlx::core::array& w,
                                                const std::optional<mlx::core::array>& bias,
                                                bool silu, mlx::core::Stream s);

// Mamba2's state-space scan (SSD) over T steps, as mlx-lm's ssm_attn
// computes it without a mask: x [b, T, h, p], B and C [b, T, g, n] (head
// i reads group i / (h / g)), dt [b, T, h] raw, A_log, D and dt_bias [h],
// state [b, h, p, n] (none: zeros). With dt' = clip(softplus(float32(dt) +
// dt_bias), lo, hi) and A = -exp(A_log), each step is S = exp(dt' A) S +
// (dt' x) B; y = S C, then y + x D. Returns {y, state}.
//
// archgen_ssm_ops composes libmlx's ops in chunks of 256 steps exactly as
// ssm_attn does (its matmuls, cumulative sums and roundings), the form
// that matches mlx-lm bit for bit; archgen_native_ssm runs the recurrence
// step by step in float32 in one op, equal to it within float32 rounding
// (nullopt where it does not apply).
std::vector<mlx::core::array> archgen_ssm_ops(
    const mlx::core::array& x, const mlx::core::array& A_log, const mlx::core::array& B,
    const mlx::core::array& C, const mlx::core::array& D, const mlx::core::array& dt,
    const mlx::core::array& dt_bias, const std::optional<mlx::core::array>& state, float lo,
    float hi, mlx::core::Stream s);
std::optional<std::vector<mlx::core::array>> archgen_native_ssm(
    const mlx::core::array& x, const mlx::core::array& A_log, const mlx::core::array& B,
    const mlx::core::array& C, const mlx::core::array& D, const mlx::core::array& dt,
    const mlx::core::array& dt_bias, const std::optional<mlx::core::array>& state, float lo,
    float hi, mlx::core::Stream s);

// archgen_selective_scan is Mamba's selective scan in float32 in one op: x
// and dt [b, T, d] (dt after its softplus), A [d, n] (-exp(A_log)), B and C
// [b, T, n], D [d], state [b, d, n] (none: zeros); each step S = S exp(dt A)
// + dt x B, y = S · C + D x. Returns {y, state}; throws on other shapes or
// dtypes.
std::vector<mlx::core::array> archgen_selective_scan(
    const mlx::core::array& x, const mlx::core::array& dt, const mlx::core::array& A,
    const mlx::core::array& B, const mlx::core::array& C, const mlx::core::array& D,
    const std::optional<mlx::core::array>& state, mlx::core::Stream s);

// archgen_linear_recurrence is a diagonal linear recurrence in float32 in
// one op: a and u [b, T, d], state [b, d] (none: zeros); each step h = a h
// + u (the product rounded before the sum), y its every h. Returns {y,
// state}; throws on other shapes or dtypes.
std::vector<mlx::core::array> archgen_linear_recurrence(
    const mlx::core::array& a, const mlx::core::array& u,
    const std::optional<mlx::core::array>& state, mlx::core::Stream s);

// archgen_wkv7 is RWKV-7's WKV-7 recurrence in float32 in one op: r, w, k,
// v, a, b [b, T, H, D], state [b, H, D, D] (none: zeros); per head each
// step S = S diag(w) + v kᵀ + (S a) bᵀ (S a from the state before the step),
// y = S r. Returns {y, state}; throws on other shapes or dtypes.
std::vector<mlx::core::array> archgen_wkv7(
    const mlx::core::array& r, const mlx::core::array& w, const mlx::core::array& k,
    const mlx::core::array& v, const mlx::core::array& a, const mlx::core::array& b,
    const std::optional<mlx::core::array>& state, mlx::core::Stream s);

// Lightning attention's constant-decay linear recurrence: q and k [B, T,
// H, Dk], v [B, T, H, Dv], decay [H] (the per-step multiplier a_h itself),
// state [B, H, Dk, Dv] (none: zeros). Per head each step is S = a_h S +
// k_tᵀ v_t, y_t = (scale q_t) S. Returns {y [B, T, H, Dv], the last state
// [B, H, Dk, Dv]}; throws on other shapes.
//
// archgen_lightning is archgen's kernel, float32 only (throws on other
// dtypes): one op over every step, parallel over (batch row, head, block
// of value columns), each product rounded before its sum as the composed
// ops round them and each y summed over the state's rows in order. Its
// vectors are AVX-512's, AVX2's or the CPU's baseline ones by the native
// level in force (the baseline where the recurrent kernels are turned
// off), all giving the same bits. archgen_lightning_ops composes libmlx's
// ops one step at a time exactly as mlx-lm's recurrent_gla
// (bailing_moe_linear) does, in q's float dtype: the form that matches
// mlx-lm bit for bit. In float32 the kernel's state equals the ops' bit
// for bit and its y lies within float32 rounding of theirs.
std::vector<mlx::core::array> archgen_lightning(const mlx::core::array& q,
                                                const mlx::core::array& k,
                                                const mlx::core::array& v,
                                                const mlx::core::array& decay,
                                                const std::optional<mlx::core::array>& state,
                                                double scale, mlx::core::Stream s);
std::vector<mlx::core::array> archgen_lightning_ops(const mlx::core::array& q,
                                                    const mlx::core::array& k,
                                                    const mlx::core::array& v,
                                                    const mlx::core::array& decay,
                                                    const std::optional<mlx::core::array>& state,
                                                    double scale, mlx::core::Stream s);

// mlx::core::conv1d where it is a depthwise causal convolution, the short
// convolution of the recurrent mixers: x [B, L, C] and w [C, K, 1] of one
// float dtype, stride 1, no padding, dilation 1, groups C. Each output is
// the sum over k of x[b, l + k, c] * w[c, k, 0] in float32, products
// rounded and added in k's order as libmlx's CPU convolution adds them,
// rounded to x's dtype. nullopt elsewhere.
std::optional<mlx::core::array> archgen_native_depthwise_conv1d(const mlx::core::array& x,
                                                               const mlx::core::array& w,
                                                               int stride, int padding,
                                                               int dilation, int groups,
                                                               mlx::core::Stream s);

#endif
