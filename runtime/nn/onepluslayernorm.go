package nn

// LayerNormOnePlus is the norm name, a LayerNorm that scales by 1 + the
// checkpoint's weight: weight and bias [dims], the weight taken plus one in
// its stored dtype, as mlx-lm adds it.
func (w *Weights) LayerNormOnePlus(name string, dims int, eps float64) *LayerNorm {
	if w.l.record {
		w.spec(name+".weight", []int{dims}, nil, false)
		w.spec(name+".bias", []int{dims}, nil, false)
		return &LayerNorm{Eps: float32(eps)}
	}
	n := &LayerNorm{Eps: float32(eps)}
	if raw := w.take(name+".weight", []int{dims}, false); raw != nil {
		one := w.l.g.AddScalar(raw, 1)
		w.l.g.Keep(one)
		n.Weight = w.keep(one)
	}
	n.Bias = w.param(name+".bias", []int{dims}, false)
	return n
}
