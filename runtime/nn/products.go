package nn

import (
	"slices"

	"github.com/archgen/archgen/runtime/mlx"
)

// Products applies linear layers that read one input x (a layer's q, k and
// v projections; gate and up) and returns their outputs in order. Where
// all are quantized alike, or all are float without biases, their products
// are one op (mlx.Graph's QuantizedMatmuls and Linears): x is prepared
// once and the kernel's threads take every layer's rows in one hand-off.
// Each output is what its layer's Apply gives, bit for bit; layers the
// kernel cannot take together (a mix of kinds, a float layer with a bias,
// a layer summed over a group) are applied one by one. A layer given more
// than once (values that are the keys' projection) is applied once, its
// output returned at each of its places.
func Products(g *mlx.Graph, x *mlx.Array, ls ...*Linear) []*mlx.Array {
	return products(g, x, 0, ls)
}

// ProductsByHead is Products for x [B, L, in] and layers whose outputs are
// heads of headDim values (attention's projections): each output is [B,
// out / headDim, L, headDim], the layer's Apply reshaped to [B, L, heads,
// headDim] and transposed, as attention reads it. The grouped products
// give that layout as they write their rows, without a reshape or a
// transpose in the graph.
func ProductsByHead(g *mlx.Graph, x *mlx.Array, headDim int, ls ...*Linear) []*mlx.Array {
	return products(g, x, headDim, ls)
}

func products(g *mlx.Graph, x *mlx.Array, headDim int, ls []*Linear) []*mlx.Array {
	if repeats(ls) {
		at, uniq := distinct(ls)
		ys := products(g, x, headDim, uniq)
		out := make([]*mlx.Array, len(ls))
		for i, j := range at {
			out[i] = ys[j]
		}
		return out
	}
	out := make([]*mlx.Array, len(ls))
	// A bias [out] added to a product by heads is [heads, 1, headDim].
	bias := func(b *mlx.Array) *mlx.Array {
		if headDim == 0 {
			return b
		}
		return g.Reshape(b, b.Dim(0)/headDim, 1, headDim)
	}
	switch {
	case (len(ls) > 1 || headDim > 0) && sameQuantized(ls):
		qs := make([]mlx.Quantized, len(ls))
		for i, l := range ls {
			qs[i] = *l.Q
		}
		var ys []*mlx.Array
		if headDim > 0 {
			ys = g.QuantizedMatmulsByHead(x, qs, headDim)
		} else {
			ys = g.QuantizedMatmuls(x, qs)
		}
		for i, y := range ys {
			if ls[i].Bias != nil {
				y = g.Add(y, bias(ls[i].Bias))
			}
			out[i] = y
		}
	case (len(ls) > 1 || headDim > 0) && plainFloat(ls):
		ws := make([]*mlx.Array, len(ls))
		for i, l := range ls {
			ws[i] = l.Weight
		}
		if headDim > 0 {
			copy(out, g.LinearsByHead(x, ws, headDim))
		} else {
			copy(out, g.Linears(x, ws))
		}
	default:
		for i, l := range ls {
			y := l.Apply(g, x)
			if headDim > 0 {
				y = g.Transpose(g.Reshape(y, x.Dim(0), x.Dim(1), y.Dim(-1)/headDim, headDim), 0, 2, 1, 3)
			}
			out[i] = y
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

// repeats reports whether a layer stands twice in ls (a handful of
// layers: compared pairwise, nothing allocated on the common path).
func repeats(ls []*Linear) bool {
	for i := range ls {
		for j := i + 1; j < len(ls); j++ {
			if ls[i] == ls[j] {
				return true
			}
		}
	}
	return false
}

// distinct lists each layer of ls once, in order, and where each of ls
// sits in that list.
func distinct(ls []*Linear) (at []int, uniq []*Linear) {
	at = make([]int, len(ls))
	for i, l := range ls {
		j := slices.Index(uniq, l)
		if j < 0 {
			j = len(uniq)
			uniq = append(uniq, l)
		}
		at[i] = j
	}
	return at, uniq
}
