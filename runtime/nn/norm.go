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

// Softcap is tanh(x / c) * c, which bounds x to (-c, c); a cap of 0 is
// none (x as it is), as a config's 0 turns the cap off.
func Softcap(g *mlx.Graph, x *mlx.Array, c float64) *mlx.Array {
	if c == 0 {
		return x
	}
	return g.MultiplyScalar(g.Tanh(g.DivideScalar(x, c)), c)
}

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

// AddApply is x + r and that sum normalized, as RMSNorm's.
func (n *PlainRMSNorm) AddApply(g *mlx.Graph, x, r *mlx.Array) (h, normed *mlx.Array) {
	h = g.Add(x, r)
	return h, n.Apply(g, h)
}

// HeadNorm normalises x [..., heads, head_dim] over head_dim (a LayerNorm
// without weight or bias, or with RMS x / rms(x)), then scales each head by
// its own row of Weight [heads, head_dim]. A nil HeadNorm leaves x as it is: a layer whose
// config turns its q and k norms off has none.
type HeadNorm struct {
	Weight *mlx.Array // [heads, head_dim]
	Eps    float32
	RMS    bool // x / rms(x) rather than a LayerNorm
}

// Apply normalizes x [..., heads, head_dim].
func (n *HeadNorm) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	if n == nil {
		return x
	}
	if n.RMS {
		return g.Multiply(g.RMSNorm(x, nil, n.Eps), n.Weight)
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

// HeadRMSNorm is HeadNorm over x / rms(x): each head normed without a
// weight, then scaled by its own row of name.weight [heads, dims].
func (w *Weights) HeadRMSNorm(name string, heads, dims int, eps float64) *HeadNorm {
	n := w.HeadNorm(name, heads, dims, eps)
	n.RMS = true
	return n
}
