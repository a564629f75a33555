package mlx

/*
#include "shim.h"
*/
import "C"

// GatherMM is a matrix product whose operands are picked per product from
// stacks of matrices: with a [..., M, K] and b [..., K, N], product i
// multiplies a's matrix lhsIndices[i] by b's matrix rhsIndices[i], the
// indices counting over each operand's batch axes flattened. A nil index
// array takes the matrices in order, broadcast as Matmul's batch axes are;
// lhsIndices and rhsIndices broadcast against each other and give the
// result's batch shape. This is how a mixture of experts runs its chosen
// experts: b stacks the experts' weights, rhsIndices names each token's.
// sortedIndices promises that rhsIndices is sorted (mlx-lm sorts tokens by
// expert when many are routed), which lets MLX take each expert once.
func (g *Graph) GatherMM(a, b, lhsIndices, rhsIndices *Array, sortedIndices bool) *Array {
	if !g.ok("gather_mm", a, b) || !g.okOpt("gather_mm", lhsIndices, rhsIndices) {
		return g.bad
	}
	return g.done("gather_mm", C.mlxg_gather_mm(g.res0(), a.c, b.c, opt(lhsIndices), opt(rhsIndices), C.bool(sortedIndices), g.s.c, g.errp()))
}

// GatherQMM is GatherMM with b quantized: x [..., M, K] times the matrices
// of q picked by the indices, each dequantize(q)[i].T when transpose (a
// stack of Linear weights [E, N, K], as mixtures of experts store theirs)
// and dequantize(q)[i] otherwise, without unpacking q. q.Mode selects MLX's
// quantization mode (affine, or mxfp4 as gpt-oss's experts use, with no
// biases), or one of llama.cpp's block types (BlockFormat: q.Weight uint8
// [E, N, row bytes], no scales; transpose only), multiplied by archgen's
// block kernels in float32 (as BlockMatmul).
func (g *Graph) GatherQMM(x *Array, q Quantized, lhsIndices, rhsIndices *Array, transpose, sortedIndices bool) *Array {
	if !g.okQuantized("gather_qmm", q, x) || !g.okOpt("gather_qmm", lhsIndices, rhsIndices) {
		return g.bad
	}
	if f, ok := BlockFormatOfMode(q.Mode); ok {
		if !transpose {
			g.Fail(&Error{Op: "gather_qmm", Msg: "block-quantized experts multiply only as their layers' weights (transpose)"})
			return g.bad
		}
		return g.done("gather_qmm", C.mlxg_block_gather_matmul(g.res0(), x.c, q.Weight.c, opt(lhsIndices), opt(rhsIndices), C.int(f.Code), g.s.c, g.errp()))
	}
	cm, free := cMode(q.Mode)
	defer free()
	return g.done("gather_qmm", C.mlxg_gather_qmm(g.res0(), x.c, q.Weight.c, q.Scales.c, opt(q.Biases), opt(lhsIndices), opt(rhsIndices), C.bool(transpose), C.int(q.GroupSize), C.int(q.Bits), cm, C.bool(sortedIndices), g.s.c, g.errp()))
}
