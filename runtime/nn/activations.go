package nn

import (
	"math"

	"github.com/archgen/archgen/runtime/mlx"
)

// ReLUSquared is max(x, 0)², the activation of ungated relu² MLPs.
func ReLUSquared(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	return g.Square(g.Clip(x, 0, math.Inf(1)))
}
