package nn

import "github.com/archgen/archgen/runtime/mlx"

// gatherMM is x [..., 1, in] times the matrices w [E, in, out] that idx
// picks for each row.
func gatherMM(g *mlx.Graph, x, w, idx *mlx.Array, sorted bool) *mlx.Array {
	return g.Matmul(x, g.Take(w, idx, 0))
}

// gatherQMM is gatherMM over the quantized stack q [E, out, in], each
// picked matrix transposed.
func gatherQMM(g *mlx.Graph, x *mlx.Array, q mlx.Quantized, idx *mlx.Array, sorted bool) *mlx.Array {
	p := mlx.Quantized{Weight: g.Take(q.Weight, idx, 0), Scales: g.Take(q.Scales, idx, 0), Biases: g.Take(q.Biases, idx, 0), GroupSize: q.GroupSize, Bits: q.Bits}
	return g.Matmul(x, g.Swapaxes(g.Dequantize(p, x.Dtype()), -1, -2))
}
