package nn

import "github.com/archgen/archgen/runtime/mlx"

// PlainRMSNorm is x / rms(x) over the last axis, with no weight (mlx's
// fast.rms_norm given none), or x itself when Off: a norm that the config
// turns on or off (Llama 4's use_qk_norm).
type PlainRMSNorm struct {
	Eps float32
	Off bool
}

// NewPlainRMSNorm is the weightless norm, applied only when on.
func NewPlainRMSNorm(eps float64, on bool) *PlainRMSNorm {
	return &PlainRMSNorm{Eps: float32(eps), Off: !on}
}

// Apply normalizes x [..., dims], unless the norm is off.
func (n *PlainRMSNorm) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	if n.Off {
		return x
	}
	return g.RMSNorm(x, nil, n.Eps)
}
