package nn

// LayerNormBias is the norm name with a weight [dims] and, when bias is
// set, a bias [dims]; without one it is mlx's LayerNorm(bias=False).
func (w *Weights) LayerNormBias(name string, dims int, eps float64, bias bool) *LayerNorm {
	if bias {
		return w.LayerNorm(name, dims, eps)
	}
	if w.l.record {
		w.spec(name+".weight", []int{dims}, nil, true)
		return &LayerNorm{Eps: float32(eps)}
	}
	return &LayerNorm{Weight: w.param(name+".weight", []int{dims}, false), Eps: float32(eps)}
}
