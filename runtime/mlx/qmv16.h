// The quantized products on 16-bit integers: the AVX-512 path of the
// native quantized linear layer (qmm.cpp) where this machine runs AVX-512
// with VNNI. qmv16 multiplies the few rows of x of decode straight from W's
// packed values; qmm16 the many rows of a prompt or a large batch, from
// panels of W's integer values.
//
// Each row of x is quantized per group of W (the group's largest magnitude
// over 32639 is its step, values rounded to nearest), and each value v is
// held as two signed bytes, v = 256 h + l. The products of a group's 4- or
// 8-bit weights with both bytes are summed exactly in 32-bit integers
// (vpdpbusd, four unsigned weight bytes or nibbles times four signed bytes
// of x at a time, with no widening of W), 256 times the h sums plus the l
// sums are the 16-bit products' sums, and each group's sum is scaled by x's
// step times W's scale; the bias term takes the float32 sums of the rounded
// x, as the float kernels do. An x value moves by at most half its group's
// step, 1/65278 of the group's largest magnitude, so an output moves by at
// most the sum over groups of that half step times the group's sum of |W|:
// about 257 times less than x quantized to 8 bits per block of 32, as
// llama.cpp's kernels do.
#ifndef ARCHGEN_MLX_QMV16_H
#define ARCHGEN_MLX_QMV16_H

#include <cstdint>
#include <vector>

#include "cpukern.h"

namespace archgen {

// Rows of x quantized for qmv16_rows.
struct XQ16 {
  int M = 0, K = 0, group = 0, bits = 0;
  // x's values v on the grid, as signed bytes l and h with v = 256 h + l,
  // per row in chunks of W's 64-byte loads (chunks of them per row): at 4
  // bits, 128 values a chunk, planes of 64 bytes l and h of the even values
  // (W's low nibbles) then l and h of the odd ones; at 8 bits, 64 values,
  // l then h, in order. Values past K are zero.
  int chunks = 0;
  std::vector<int8_t> planes;
  // The AVX2 kernel's x at 8 bits: the values v, [M, K], in order (planes
  // then empty).
  std::vector<int16_t> values;
  std::vector<float> step;  // [M, K / group]
  std::vector<float> sum;   // [M, K / group]: the float32 sums of x
};

// Whether the integer path takes W of this shape: 4 or 8 bits, groups of
// 32, 64 or 128, and K a multiple of 64. (qmv16_round takes any K that is
// a multiple of the group.)
bool qmv16_fits(int bits, int group, int K);

// Quantizes M rows of K float32 values (x[m * K + k]) into out.
void qmv16_prepare(const float* x, int M, int K, int group, int bits, XQ16& out);

// x (M rows of K values) rounded to the grid qmv16_prepare puts it on,
// as float32, into out: where the integer path does not run (more rows of
// x, a K it does not take), the float32 kernels multiply this x, so that a
// product does not depend on how many rows were computed with it.
void qmv16_round(const float* x, int M, int K, int group, float* out);

// out[m, n] = sum_k x[m, k] W[n, k] for every row m of x and the rows
// [n_lo, n_hi) of W (packed as mlx packs it, scales and biases of kind sk
// [N, K / group]), stored as kind ok into out [M, N]. A result does not
// depend on the other rows of x or W computed beside it.
void qmv16_rows(const XQ16& x, const uint8_t* w, const void* scales, const void* biases, Kind sk,
                void* out, Kind ok, int N, int n_lo, int n_hi);

// The same on AVX2 (qmv16avx2.cpp): x put on the same grid by AVX2's
// instructions, rounded as qmv16_round rounds it, in the same planes for a
// 4-bit W and as its 16-bit values (XQ16's values) for an 8-bit one, and
// the rows' products from W's packed values with vpmaddubsw and vpmaddwd
// (4 bits) or vpmaddwd alone (8 bits) in place of vpdpbusd.
void qmv16_prepare_avx2(const float* x, int M, int K, int group, int bits, XQ16& out);
void qmv16_round_avx2(const float* x, int M, int K, int group, float* out);
void qmv16_rows_avx2(const XQ16& x, const uint8_t* w, const void* scales, const void* biases, Kind sk,
                     void* out, Kind ok, int N, int n_lo, int n_hi);

// Rows of x on qmv16_prepare's grid, each value v as its two signed bytes
// l and h (v = 256 h + l), for qmm16_rows, in blocks of rows that the
// kernel sweeps together: blocks of kQmm16Rows rows, then the remaining
// rows in blocks of 4, 2 and 1 (at most one of each). A block of b rows
// from row r0 holds, from byte r0 * 2K, for each unit of k (8 values at 4
// bits, 4 at 8), each row's bytes of the unit side by side: at 4 bits the
// l bytes of the unit's even values (W's low nibbles), of its odd values,
// then the h bytes of each; at 8 bits the l bytes then the h bytes. Its
// steps, from r0 * (K / group), and sums, from r0 * (K / wgroup), for each
// group, the block's rows side by side.
constexpr int kQmm16Rows = 8;
struct XI16 {
  int M = 0, K = 0;
  int group = 0;   // values to a step of x
  int wgroup = 0;  // values to a scale of W: group, or 16 under groups of 32
  int bits = 0;    // W's: 4, or 8 (also block-quantized W's bytes)
  std::vector<int8_t> v;
  std::vector<float> step;  // a step per row and group
  std::vector<float> sum;   // the float32 sum of x as rounded per row and group of W
};

// Whether qmm16_rows takes W of this shape: 4 or 8 bits, groups of 32, 64
// or 128, K a multiple of the group.
bool qmm16_fits(int bits, int group, int K);

// Sizes out for M rows of K values in groups of group, against W of bits
// whose scales hold for wgroup values.
void qmm16_shape(int M, int K, int group, int wgroup, int bits, XI16& out);

// Puts rows [m_lo, m_hi) of x (M rows of K float32 values, sized by
// qmm16_shape) on the grid, into out: the same values qmv16_prepare and
// qmv16_round put them on.
void qmm16_prepare(const float* x, int m_lo, int m_hi, XI16& out);

// out[m, n] = sum_k x[m, k] W[n, k] for every row m of x and the rows
// [n_lo, n_hi) of W (of x.bits, packed as mlx packs it, scales and biases
// of kind sk [N, K / group]), stored as kind ok into out [M, N]. Each 16
// rows of W are packed into a panel of their bytes transposed per 32-bit
// word (16 rows' values for a unit of k in one load) and swept over
// blocks of x's rows: vpdpbusd multiplies four of W's values in each row
// by four bytes of x, summing exactly into 32-bit integers a group at a
// time, and each group's sums (256 times the h sums plus the l sums) are
// scaled by x's step times W's scale, as qmv16_rows scales them. A result
// does not depend on the other rows of x or W computed beside it.
void qmm16_rows(const XI16& x, const uint8_t* w, const void* scales, const void* biases, Kind sk,
                void* out, Kind ok, int N, int n_lo, int n_hi);

// The same for a block-quantized W (llama.cpp's type code, rows of
// row_bytes), x prepared in groups of 32 at 8 bits with wgroup
// block_codes_group(code): each row of W decoded into its unsigned bytes
// and the scale and offset of each group (block_codes_row), then packed and
// swept as qmm16_rows does.
void qmm16_block_rows(int code, const XI16& x, const uint8_t* w, int64_t row_bytes, void* out,
                      Kind ok, int N, int n_lo, int n_hi);

// Whether this machine runs the AVX-512 instructions the integer path uses
// (F, BW, VL and VNNI, with the operating system saving their registers).
bool cpu_has_avx512_vnni();

}  // namespace archgen

#endif
