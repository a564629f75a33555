// archgen's CPU kernel for quantized linear layers (qmm.cpp), used by the
// shim's quantized_matmul where it applies.
#ifndef ARCHGEN_MLX_QMM_H
#define ARCHGEN_MLX_QMM_H

#include <optional>
#include <string>
#include <vector>

#include "mlx/mlx.h"

// x W^T as an array computed by archgen's kernel, or nullopt where the
// kernel does not apply (then mlx's quantized_matmul runs): a CPU without
// AVX2, FMA and F16C, a GPU stream, modes but affine, bits but 4 and 8,
// shapes mlx would refuse. Input and scales both of half precision run in
// libmlx's own rounding, bit for bit, unless archgen_qmm_half_mode() says
// otherwise. ARCHGEN_MLX_NATIVE_QMM=0 turns it off.
std::optional<mlx::core::array> archgen_native_qmm(
    const mlx::core::array& x, const mlx::core::array& w, const mlx::core::array& scales,
    const std::optional<mlx::core::array>& biases, bool transpose, int group_size, int bits,
    const std::string& mode, mlx::core::Stream s);

// x W^T (a linear layer) as archgen's kernel computes it, where x and W
// share a float dtype (float32, bfloat16 or float16) and W [N, K] is
// already evaluated and row-major; nullopt elsewhere (then mlx's matmul by
// the transpose runs). In bfloat16 and float16 the results equal libmlx's
// bit for bit. The same switch and CPU features as archgen_native_qmm.
std::optional<mlx::core::array> archgen_native_linear(const mlx::core::array& x,
                                                      const mlx::core::array& w,
                                                      mlx::core::Stream s);

// The products of x by several W_p (each as archgen_native_qmm takes it,
// with scales of one dtype; or each as archgen_native_linear takes it) as
// one op with an output per W_p: x prepared once and one hand-off to the
// kernel's threads for all of them. Each output equals that part's own
// product bit for bit. With head_dim set, x is [B, L, K] and each output
// [B, N_p / head_dim, L, head_dim]: the product's rows split into heads and
// transposed as attention reads them (a strided view of the rows the
// kernel writes). nullopt where any part is not taken, past 8 parts, or
// where the heads do not fit.
std::optional<std::vector<mlx::core::array>> archgen_native_qmms(
    const mlx::core::array& x, const std::vector<mlx::core::array>& ws,
    const std::vector<mlx::core::array>& scales, const std::vector<mlx::core::array>& biases,
    int group_size, int bits, int head_dim, mlx::core::Stream s);
std::optional<std::vector<mlx::core::array>> archgen_native_linears(
    const mlx::core::array& x, const std::vector<mlx::core::array>& ws, int head_dim,
    mlx::core::Stream s);

// x W^T for a W [N, row bytes] of uint8 holding llama.cpp's blocks of type
// code (blockq.h: Q4_0 to Q6_K, IQ4_NL, IQ4_XS, MXFP4) and a float x [...,
// K]: float32 arithmetic on the decoded values, the output in x's dtype.
// Throws std::invalid_argument (naming what does not fit) for codes the
// kernels do not read, rows that are not whole blocks, an x of another
// width, a GPU stream or a CPU without AVX2, FMA and F16C.
mlx::core::array archgen_block_matmul(const mlx::core::array& x, const mlx::core::array& w,
                                      int code, mlx::core::Stream s);

// The values of a block-quantized W [..., row bytes] of type code, decoded
// into [..., K] of dtype (a float dtype); in float32 each equals llama.cpp's
// reference dequantization to the bit. The same errors as
// archgen_block_matmul.
mlx::core::array archgen_block_dequantize(const mlx::core::array& w, int code,
                                          mlx::core::Dtype dtype, mlx::core::Stream s);

// The gather_qmm of a stack of block-quantized experts w [E, N, row bytes]
// (uint8, llama.cpp's type code): each row of x [..., M, K] times the
// transposed matrix rhs_indices picks (and lhs_indices, x's batch entry:
// by default each its own), in float32 on the values the blocks decode to
// (as archgen_block_matmul), output [broadcast indices..., M, N] in x's
// dtype. Throws std::invalid_argument naming what does not fit.
mlx::core::array archgen_block_gather_matmul(const mlx::core::array& x,
                                             const mlx::core::array& w,
                                             const std::optional<mlx::core::array>& lhs_indices,
                                             const std::optional<mlx::core::array>& rhs_indices,
                                             int code, mlx::core::Stream s);

// Whether the block kernels take x's byte planes (the AVX-512 VNNI path).
bool archgen_block_planes();

// The bfloat16 parts a product of many rows of a float32 x runs in on the
// tile unit (tiles.h), by the kind of its W's values, or 0 where the tile
// unit does not run (no AMX, the AVX2 level, switched off) or does not
// take that W: by default x as a pair (16 bits of its mantissa) and W's
// values exactly, two terms for values that are bfloat16's (a bfloat16 W,
// mxfp4's), three for float16, affine and block-quantized values, none for
// a float32 W (it stays on the float32 kernels); ARCHGEN_MLX_TILES=1..3
// fixes the count for every W. Rounding W to bfloat16 instead was measured
// to move mlx-lm's float16 levels and mixtures of experts' routers past the
// parity bounds.
int archgen_tile_terms(bool w_float32, bool w_bfloat16);

// Whether products of more than 8 rows of a float32 x by a 4- or 8-bit
// affine or block-quantized W run on the 16-bit integer panels (qmv16.h's
// qmm16): the instructions are AVX-512 with VNNI and
// ARCHGEN_MLX_NATIVE_QMM16 (or mlxg_set_native_qmm16) has not turned them
// off. The tile unit, where it runs, comes first.
bool archgen_qmm16_runs();

// How quantized products whose input and scales are both bfloat16 or both
// float16 run, for quantized_matmul and gather_qmm alike: 0 on libmlx's
// kernel (ARCHGEN_MLX_NATIVE_QMM_HALF=0), 1 on the float32 kernels, the
// result rounded once (=f32), 2 (the default) in libmlx's rounding, bit for
// bit.
int archgen_qmm_half_mode();

// gather_qmm (mixture-of-experts products, see gqmm.cpp) as an array
// computed by archgen's kernel where it applies: x86-64 CPUs with AVX2,
// FMA, F16C and BMI2, a CPU stream, transpose, affine at 2, 3, 4, 5, 6 or
// 8 bits in groups of 32, 64 or 128, or mxfp4; a computation mlx runs in
// float32, or in bfloat16 or float16 (half-precision input with scales of
// its dtype, or mxfp4 with half-precision input) as archgen_qmm_half_mode
// says. Elsewhere mlx's own gather_qmm (returned as is), or nullopt
// where the kernel is switched off (ARCHGEN_MLX_NATIVE_QMM=0, or
// mlxg_set_native_gather_qmm) or the mode or sizes do not apply. Arguments
// mlx refuses throw its error.
std::optional<mlx::core::array> archgen_native_gather_qmm(
    const mlx::core::array& x, const mlx::core::array& w, const mlx::core::array& scales,
    const std::optional<mlx::core::array>& biases,
    const std::optional<mlx::core::array>& lhs_indices,
    const std::optional<mlx::core::array>& rhs_indices, bool transpose, int group_size, int bits,
    const std::string& mode, bool sorted_indices, mlx::core::Stream s);

#endif
