package nn

import (
	"github.com/archgen/archgen/runtime/mlx"
)

// float16Max is the largest finite float16.
const float16Max = 65504

// AddClipped is x + y, except in float16: there the sum is taken in
// float32 and clipped to float16's finite range before it is cast back,
// so that a residual stream saturates instead of overflowing to infinity.
func AddClipped(g *mlx.Graph, x, y *mlx.Array) *mlx.Array {
	if x.Dtype() != mlx.Float16 {
		return g.Add(x, y)
	}
	s := g.Add(g.AsType(x, mlx.Float32), g.AsType(y, mlx.Float32))
	return g.AsType(g.Clip(s, -float16Max, float16Max), mlx.Float16)
}
