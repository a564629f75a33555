package nn

import "github.com/archgen/archgen/runtime/mlx"

// ScaleQueries multiplies the queries q [B, heads, L, head_dim], at
// positions offset..offset+L-1, by 1 + beta * log(1 + floor(p / positions))
// for their position p, computed in float32 and cast to q's dtype:
// attention sharpens with distance beyond each multiple of positions.
func ScaleQueries(g *mlx.Graph, q *mlx.Array, offset int, beta float64, positions int) *mlx.Array {
	L := q.Dim(2)
	p := g.Arange(float64(offset), float64(offset+L), 1, mlx.Float32)
	s := g.AddScalar(g.Floor(g.DivideScalar(p, float64(positions))), 1)
	s = g.AddScalar(g.MultiplyScalar(g.Log(s), beta), 1)
	s = g.Reshape(g.AsType(s, q.Dtype()), L, 1)
	return g.Multiply(q, s)
}
