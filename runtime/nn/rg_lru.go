package nn

import (
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// The Real-Gated Linear Recurrent Unit (Griffin's RG-LRU). Two gates,
// each a block-diagonal linear (one [head_dim, head_dim] block a head,
// with a bias) and a sigmoid, are read from the unit's input x: the input
// gate i and the recurrence gate r. The decay is a = exp(-8 r softplus(Λ))
// (Λ the learned recurrent_param, one a channel), and each channel's state
// steps h = a h + sqrt(1 - a²) (i x); at the first position of a sequence
// (no state yet) the input is taken unscaled. Everything is computed in
// the activations' dtype, the state too, as mlx-lm computes it: in half
// precision a step at a time, in float32 on archgen's kernel
// (mlx.Graph.LinearRecurrence), which rounds each step as those ops do.

// RGLRU is a recurrent layer's RG-LRU parameters: Lambda [width], the
// gates' weights [heads, head_dim, head_dim] (x · w, per head) and biases
// [heads, head_dim].
type RGLRU struct {
	Lambda                         *mlx.Array
	InputWeight, InputBias         *mlx.Array
	RecurrentWeight, RecurrentBias *mlx.Array
	Heads, HeadDim                 int
}

// RGLRU reads the unit name: name.recurrent_param [width],
// name.input_gate_weight and name.recurrent_gate_weight [heads, width /
// heads, width / heads], name.input_gate_bias and name.recurrent_gate_bias
// [heads, width / heads]. None is quantized (mlx-lm quantizes linear
// layers only). width must be a multiple of heads.
func (w *Weights) RGLRU(name string, width, heads int) *RGLRU {
	if heads < 1 || width%heads != 0 {
		w.failf("%s: width %d is not a multiple of %d heads", w.local(name), width, heads)
		return &RGLRU{}
	}
	hd := width / heads
	r := &RGLRU{Heads: heads, HeadDim: hd}
	read := func(n string, shape ...int) *mlx.Array {
		if w.l.record {
			w.spec(name+"."+n, shape, nil, false)
			return nil
		}
		return w.param(name+"."+n, shape, false)
	}
	r.Lambda = read("recurrent_param", width)
	r.InputWeight = read("input_gate_weight", heads, hd, hd)
	r.InputBias = read("input_gate_bias", heads, hd)
	r.RecurrentWeight = read("recurrent_gate_weight", heads, hd, hd)
	r.RecurrentBias = read("recurrent_gate_bias", heads, hd)
	return r
}

// gate is sigmoid(x · w + b) per head, over x [B, L, width].
func (r *RGLRU) gate(g *mlx.Graph, x, w, b *mlx.Array) *mlx.Array {
	B, L := x.Dim(0), x.Dim(1)
	h := g.Transpose(g.Reshape(x, B, L, r.Heads, r.HeadDim), 0, 2, 1, 3) // [B, heads, L, head_dim]
	h = g.Add(g.Transpose(g.Matmul(h, w), 0, 2, 1, 3), b)                // [B, L, heads, head_dim]
	return g.Sigmoid(g.Reshape(h, B, L, r.Heads*r.HeadDim))
}

// Apply runs the unit over x [B, L, width] (the convolved branch), its
// state h in slot of s (none: a fresh sequence), and returns every
// step's h [B, L, width].
func (r *RGLRU) Apply(g *mlx.Graph, s *kv.States, slot int, x *mlx.Array) *mlx.Array {
	B, L, W := x.Dim(0), x.Dim(1), x.Dim(2)
	if L == 0 {
		return x
	}
	in := r.gate(g, x, r.InputWeight, r.InputBias)
	rec := r.gate(g, x, r.RecurrentWeight, r.RecurrentBias)
	logA := g.Multiply(g.MultiplyScalar(rec, -8), g.Softplus(r.Lambda))
	a := g.Exp(logA)
	scale := g.Sqrt(g.ScalarBinary(mlx.OpSubtract, 1, g.Exp(g.MultiplyScalar(logA, 2))))
	h := s.Slot(slot)
	if h == nil {
		// a fresh sequence: its first input is not scaled
		scale = g.Concatenate(1, g.Ones([]int{B, 1, W}, scale.Dtype()), g.Slice(scale, []int{0, 1, 0}, []int{B, L, W}))
	}
	u := g.Multiply(g.Multiply(x, in), g.AsType(scale, x.Dtype()))
	if x.Dtype() == mlx.Float32 && (h != nil || L > 1) {
		// archgen's kernel: every step in one op, each rounded as the
		// composed steps below round it
		y, last := g.LinearRecurrence(a, u, h)
		s.SetSlot(g, slot, last)
		return y
	}
	step := func(v *mlx.Array, t int) *mlx.Array {
		return g.Reshape(g.Slice(v, []int{0, t, 0}, []int{B, t + 1, W}), B, W)
	}
	if h == nil && L > 1 {
		h = g.Zeros([]int{B, W}, u.Dtype()) // as mlx-lm starts a prompt's scan
	}
	ys := make([]*mlx.Array, L)
	for t := range L {
		if h == nil {
			h = step(u, t) // a fresh sequence's one step: its input
		} else {
			h = g.Add(g.Multiply(step(a, t), h), step(u, t))
		}
		ys[t] = h
	}
	s.SetSlot(g, slot, h)
	return g.Stack(1, ys...)
}
