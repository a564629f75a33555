package nn

import "github.com/archgen/archgen/runtime/mlx"

// RMSNorm is x / rms(x) * Weight over the last axis (mlx's fast.rms_norm).
// Gemma's norm, x / rms(x) * (1 + w), is an RMSNorm whose Weight holds
// 1 + w, computed once at load (see Weights.RMSNormOnePlus).
type RMSNorm struct {
	Weight *mlx.Array // [dims]
	Eps    float32
}

// Apply normalizes x [..., dims]. A nil RMSNorm leaves x as it is (q and
// k norms a config turns off).
func (n *RMSNorm) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	if n == nil {
		return x
	}
	return g.RMSNorm(x, n.Weight, n.Eps)
}

// AddApply is x + r and that sum normalized: a residual update and the
// next sublayer's input, as one op where the kernel takes them (see
// mlx.Graph.AddRMSNorm). A nil RMSNorm gives the sum twice.
func (n *RMSNorm) AddApply(g *mlx.Graph, x, r *mlx.Array) (h, normed *mlx.Array) {
	if n == nil {
		h = g.Add(x, r)
		return h, h
	}
	return g.AddRMSNorm(x, r, n.Weight, n.Eps)
}

// LayerNorm is (x - mean) / std * Weight + Bias over the last axis (mlx's
// fast.layer_norm).
type LayerNorm struct {
	Weight, Bias *mlx.Array // [dims]
	Eps          float32
}

// Apply normalizes x [..., dims]. A nil LayerNorm leaves x as it is.
func (n *LayerNorm) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	if n == nil {
		return x
	}
	return g.LayerNorm(x, n.Weight, n.Bias, n.Eps)
}

// AddApply is x + r and that sum normalized, as one op where the kernel
// takes them (see mlx.Graph.AddLayerNorm). A nil LayerNorm gives the sum
// twice.
func (n *LayerNorm) AddApply(g *mlx.Graph, x, r *mlx.Array) (h, normed *mlx.Array) {
	if n == nil {
		h = g.Add(x, r)
		return h, h
	}
	return g.AddLayerNorm(x, r, n.Weight, n.Bias, n.Eps)
}

// Softcap is tanh(x / c) * c, which bounds x to (-c, c).
func Softcap(g *mlx.Graph, x *mlx.Array, c float64) *mlx.Array {
	return g.MultiplyScalar(g.Tanh(g.DivideScalar(x, c)), c)
}
