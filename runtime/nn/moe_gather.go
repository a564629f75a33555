package nn

import "github.com/archgen/archgen/runtime/mlx"

// gatherMM is x [..., 1, in] times the matrices w [E, in, out] that idx
// picks for each row (mlx's gather_mm). libmlx's CPU gather_mm takes
// float32 only (mlx-lm refuses a bfloat16 or float16 mixture of experts
// on the CPU for it): other dtypes multiply in float32, exactly widened,
// and the product is rounded back, as MLX's own half-precision matmuls
// accumulate in float32 and round once.
func gatherMM(g *mlx.Graph, x, w, idx *mlx.Array, sorted bool) *mlx.Array {
	if dt := x.Dtype(); dt != mlx.Float32 {
		y := g.GatherMM(g.AsType(x, mlx.Float32), g.AsType(w, mlx.Float32), nil, idx, sorted)
		return g.AsType(y, dt)
	}
	return g.GatherMM(x, w, nil, idx, sorted)
}

// gatherQMM is gatherMM over the quantized stack q [E, out, in], each
// picked matrix transposed (mlx's gather_qmm).
func gatherQMM(g *mlx.Graph, x *mlx.Array, q mlx.Quantized, idx *mlx.Array, sorted bool) *mlx.Array {
	return g.GatherQMM(x, q, nil, idx, true, sorted)
}
