package nn

import "github.com/archgen/archgen/runtime/mlx"

// HeadNorm normalises x [..., heads, head_dim] over head_dim (a LayerNorm
// without weight or bias), then scales each head by its own row of Weight
// [heads, head_dim]. A nil HeadNorm leaves x as it is: a layer whose
// config turns its q and k norms off has none.
type HeadNorm struct {
	Weight *mlx.Array // [heads, head_dim]
	Eps    float32
}

// Apply normalizes x [..., heads, head_dim].
func (n *HeadNorm) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	if n == nil {
		return x
	}
	return g.Multiply(n.Weight, g.LayerNorm(x, nil, nil, n.Eps))
}

// HeadNorm is the per-head norm name: weight [heads, dims].
func (w *Weights) HeadNorm(name string, heads, dims int, eps float64) *HeadNorm {
	if w.l.record {
		w.spec(name+".weight", []int{heads, dims}, nil, true)
		return &HeadNorm{Eps: float32(eps)}
	}
	return &HeadNorm{Weight: w.param(name+".weight", []int{heads, dims}, false), Eps: float32(eps)}
}
