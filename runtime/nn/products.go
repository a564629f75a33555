package nn

import "github.com/archgen/archgen/runtime/mlx"

// Products applies linear layers that read one input x (a layer's q, k and
// v projections; gate and up) and returns their outputs in order. Where
// all are quantized alike, or all are float without biases, their products
// are one op (mlx.Graph's QuantizedMatmuls and Linears): x is prepared
// once and the kernel's threads take every layer's rows in one hand-off.
// Each output is what its layer's Apply gives, bit for bit; layers the
// kernel cannot take together (a mix of kinds, a float layer with a bias,
// a layer summed over a group) are applied one by one.
func Products(g *mlx.Graph, x *mlx.Array, ls ...*Linear) []*mlx.Array {
	out := make([]*mlx.Array, len(ls))
	switch {
	case len(ls) > 1 && sameQuantized(ls):
		qs := make([]mlx.Quantized, len(ls))
		for i, l := range ls {
			qs[i] = *l.Q
		}
		for i, y := range g.QuantizedMatmuls(x, qs) {
			if ls[i].Bias != nil {
				y = g.Add(y, ls[i].Bias)
			}
			out[i] = y
		}
	case len(ls) > 1 && plainFloat(ls):
		ws := make([]*mlx.Array, len(ls))
		for i, l := range ls {
			ws[i] = l.Weight
		}
		copy(out, g.Linears(x, ws))
	default:
		for i, l := range ls {
			out[i] = l.Apply(g, x)
		}
	}
	return out
}

// sameQuantized: every layer quantized with one mode, group size and bit
// width, and none summed over a group.
func sameQuantized(ls []*Linear) bool {
	for _, l := range ls {
		if l.Q == nil || l.Sum != nil {
			return false
		}
		if q, q0 := l.Q, ls[0].Q; q.Mode != q0.Mode || q.GroupSize != q0.GroupSize || q.Bits != q0.Bits {
			return false
		}
	}
	return true
}

// plainFloat: every layer a float weight without bias, none summed over a
// group (a float layer with a bias is mlx's addmm, which the grouped
// products do not reproduce).
func plainFloat(ls []*Linear) bool {
	for _, l := range ls {
		if l.Q != nil || l.Weight == nil || l.Bias != nil || l.Sum != nil {
			return false
		}
	}
	return true
}
