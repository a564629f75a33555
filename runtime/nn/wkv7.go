package nn

import (
	"slices"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// RWKV-7's time mix (the WKV-7 recurrence) and the token shift its layers
// share with their channel mix.
//
// The time mix reads x and the previous token's x (the token shift), and
// mixes them six ways by learned per-channel weights (x_r, x_w, x_k, x_v,
// x_a, x_g). r, k and v are linear projections; the in-context learning
// rate a, the decay w, the gate g and (in every layer but the first) the
// value's mix toward the first layer's values are low-rank projections
// (LoRA: down, an activation, up). Per head of D channels the state S
// [D, D] steps S = S diag(w) + (S a) bᵀ + v kᵀ, with a = -k̂ and b = k̂ ·
// iclr for the unit-length key k̂, and reads y = S r. y is normed per head
// (a LayerNorm with a weight and bias per head), takes the bonus
// (Σ r k r_k) v, is gated by g and projected back by o_proj. In half
// precision the state stays in the activations' dtype and the steps run
// one after another, as mlx-lm runs them on the CPU; in float32 archgen's
// kernel runs them in one op.

// ShiftDelta is the token shift of x [B, L, C]: the previous token's x
// minus x, the previous token of the first being the one kept in slot of s
// (zeros for a fresh sequence); the slot then keeps x's last token.
func ShiftDelta(g *mlx.Graph, s *kv.States, slot int, x *mlx.Array) *mlx.Array {
	B, L, C := x.Dim(0), x.Dim(1), x.Dim(2)
	prev := s.Slot(slot)
	if prev == nil {
		prev = g.Zeros([]int{B, 1, C}, x.Dtype())
	}
	if L > 1 {
		prev = g.Concatenate(1, prev, g.Slice(x, []int{0, 0, 0}, []int{B, L - 1, C}))
	}
	d := g.Subtract(prev, x) // built before the slot's array is released
	if L > 0 {
		s.SetSlot(g, slot, g.Contiguous(g.Slice(x, []int{0, L - 1, 0}, []int{B, L, C})))
	}
	return d
}

// Lerp is x + d · mu: x moved toward the previous token (d = prev - x) by
// mu per channel.
func Lerp(g *mlx.Graph, x, d, mu *mlx.Array) *mlx.Array {
	return g.Add(x, g.Multiply(d, mu))
}

// LoRA is a low-rank projection: Up(act(Down(x))).
type LoRA struct {
	Down, Up *Linear
	act      string
}

// LoRA reads the low-rank projection name: name.lora.0 [rank, in] without
// a bias, then the activation act ("tanh", "sigmoid" or "none"), then
// name.lora.2 [out, rank], with a bias when bias is set.
func (w *Weights) LoRA(name string, in, rank, out int, act string, bias bool) *LoRA {
	switch act {
	case "tanh", "sigmoid", "none":
	default:
		w.failf("%s: unknown activation %q (want tanh, sigmoid or none)", w.local(name), act)
	}
	return &LoRA{Down: w.Linear(name+".lora.0", rank, in, false), Up: w.Linear(name+".lora.2", out, rank, bias), act: act}
}

// Apply is the projection of x [..., in]: [..., out].
func (l *LoRA) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	h := l.Down.Apply(g, x)
	switch l.act {
	case "tanh":
		h = g.Tanh(h)
	case "sigmoid":
		h = g.Sigmoid(h)
	}
	return l.Up.Apply(g, h)
}

// Reshaped is the parameter name in shape, from any stored shape of as
// many values (mlx-lm's sanitize reshapes RWKV-7's per-head vectors so; a
// published checkpoint stores them flat).
func (w *Weights) Reshaped(name string, shape ...int) *mlx.Array {
	if w.l.record {
		w.spec(name, shape, nil, false)
		return nil
	}
	full := w.prefix + name
	if a, ok := w.l.tensors[full]; ok && a.Size() == count(shape) && !slices.Equal(a.Shape(), shape) {
		r := w.l.g.Reshape(a, shape...)
		if err := w.l.g.Err(); err != nil {
			w.failf("%s: reshaping to %v: %v", w.local(name), shape, err)
		} else {
			w.l.g.Keep(r)
			w.l.scratch = append(w.l.scratch, a)
			w.l.tensors[full] = r
		}
	}
	return w.param(name, shape, false)
}

// count is the number of values of shape.
func count(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// HeadLayerNorm is a LayerNorm of each head over its channels, with a
// weight and a bias per head: Weight · norm(x) + Bias, [heads, dims] each.
type HeadLayerNorm struct {
	Weight, Bias *mlx.Array
	Eps          float32
}

// HeadLayerNorm reads the per-head norm name: weight and bias, each
// [heads, dims] or stored flat.
func (w *Weights) HeadLayerNorm(name string, heads, dims int, eps float64) *HeadLayerNorm {
	return &HeadLayerNorm{Weight: w.Reshaped(name+".weight", heads, dims), Bias: w.Reshaped(name+".bias", heads, dims), Eps: float32(eps)}
}

// Apply normalizes x [..., heads, dims].
func (n *HeadLayerNorm) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	return g.Add(g.Multiply(n.Weight, g.LayerNorm(x, nil, nil, n.Eps)), n.Bias)
}

// WKV7 is an RWKV-7 time mix's parameters, wired at load.
type WKV7 struct {
	Heads, HeadDim int
	// XR, XW, XK, XV, XA, XG mix x with the previous token for r, the
	// decay, k, v, a and the gate: [1, 1, hidden], as mlx-lm keeps them.
	XR, XW, XK, XV, XA, XG *mlx.Array
	// KK scales k before it is normed to k̂; KA mixes the learning rate
	// into k; RK weights the bonus: [heads, head_dim] each.
	KK, KA, RK                 *mlx.Array
	RProj, KProj, VProj, OProj *Linear
	WLoRA, ALoRA, GLoRA        *LoRA
	// VLoRA mixes v toward the carried first values; nil in the layer
	// whose values are the ones carried (First).
	VLoRA *LoRA
	GNorm *HeadLayerNorm
	// First: this layer's values are carried (under Carry) to the later
	// layers, which mix theirs toward them.
	First bool
	Carry *Carry
}

// Carry is the key of a value a forward pass hands from one layer to later
// ones (mlx.Graph.Carry): one per model and value, so that two models
// building on one graph keep theirs apart.
type Carry struct{ Name string }

// wkv7DecayScale is the decay's exponent scale: w = exp(-e^-0.5 ·
// sigmoid(·)), in (e^-0.607, 1); the constant as mlx-lm writes it.
const wkv7DecayScale = -0.606531

// Apply runs the time mix on x [B, L, hidden] (normed), the token shift in
// slot 0 of s and the state in slot 1, and returns [B, L, hidden].
func (p *WKV7) Apply(g *mlx.Graph, s *kv.States, x *mlx.Array) *mlx.Array {
	B, L, C := x.Dim(0), x.Dim(1), x.Dim(2)
	H, D := p.Heads, p.HeadDim
	heads := func(a *mlx.Array) *mlx.Array { return g.Reshape(a, B, L, H, D) }
	d := ShiftDelta(g, s, 0, x)
	xr, xw, xk := Lerp(g, x, d, p.XR), Lerp(g, x, d, p.XW), Lerp(g, x, d, p.XK)
	xv, xa, xg := Lerp(g, x, d, p.XV), Lerp(g, x, d, p.XA), Lerp(g, x, d, p.XG)

	k := heads(p.KProj.Apply(g, xk))
	v := heads(p.VProj.Apply(g, xv))
	r := heads(p.RProj.Apply(g, xr))
	iclr := heads(g.Sigmoid(p.ALoRA.Apply(g, xa)))
	gate := p.GLoRA.Apply(g, xg) // [B, L, hidden]
	if p.First {
		g.Carry(p.Carry, v)
	} else if first := g.Carried(p.Carry); first == nil {
		g.Failf("nn: the time mix mixes its values toward the first layer's, and no layer before it carried them")
	} else {
		v = Lerp(g, v, g.Subtract(first, v), heads(g.Sigmoid(p.VLoRA.Apply(g, xv))))
	}
	w := g.AsType(g.Sigmoid(heads(p.WLoRA.Apply(g, xw))), mlx.Float32)
	w = g.AsType(g.Exp(g.MultiplyScalar(w, wkv7DecayScale)), r.Dtype())
	kk := g.Multiply(k, p.KK)
	norm := g.Sqrt(g.Sum(g.Square(kk), true, -1))
	kk = g.Divide(kk, g.Maximum(norm, g.Scalar(1e-7, norm.Dtype()))) // k̂: unit length per head
	k = g.Multiply(k, g.AddScalar(g.Multiply(g.SubtractScalar(iclr, 1), p.KA), 1))
	a, b := g.Negative(kk), g.Multiply(kk, iclr)

	y := p.steps(g, s, 1, r, w, k, v, a, b) // [B, L, H, D]
	y = p.GNorm.Apply(g, y)
	bonus := g.Sum(g.Multiply(g.Multiply(r, k), p.RK), true, -1) // [B, L, H, 1]
	y = g.Reshape(g.Add(y, g.Multiply(bonus, v)), B, L, C)
	return p.OProj.Apply(g, g.Multiply(y, gate))
}

// steps runs the recurrence over r, w, k, v, a, b [B, L, H, D] from the
// state in slot of s (zeros for a fresh sequence), keeps the last state
// there, and returns y [B, L, H, D]. In half precision it runs a step at a
// time in the activations' dtype, as mlx-lm composes it, so that its
// roundings are the oracle's; in float32 archgen's kernel runs every step
// in one op (mlx.Graph.WKV7), within float32 rounding of them.
func (p *WKV7) steps(g *mlx.Graph, s *kv.States, slot int, r, w, k, v, a, b *mlx.Array) *mlx.Array {
	B, L, H, D := r.Dim(0), r.Dim(1), r.Dim(2), r.Dim(3)
	if r.Dtype() == mlx.Float32 && L > 0 {
		y, last := g.WKV7(r, w, k, v, a, b, s.Slot(slot))
		s.SetSlot(g, slot, last)
		return y
	}
	state := s.Slot(slot)
	if state == nil {
		state = g.Zeros([]int{B, H, D, D}, r.Dtype())
	}
	if L == 0 {
		return r
	}
	at := func(x *mlx.Array, t int) *mlx.Array {
		return g.Reshape(g.Slice(x, []int{0, t, 0, 0}, []int{B, t + 1, H, D}), B, H, D)
	}
	ys := make([]*mlx.Array, L)
	for t := range L {
		sab := g.Matmul(g.Matmul(state, g.ExpandDims(at(a, t), -1)), g.ExpandDims(at(b, t), -2))
		vk := g.Matmul(g.ExpandDims(at(v, t), -1), g.ExpandDims(at(k, t), -2))
		state = g.Add(g.Add(g.Multiply(state, g.ExpandDims(at(w, t), 2)), vk), sab)
		ys[t] = g.Matmul(state, g.ExpandDims(at(r, t), -1)) // [B, H, D, 1]
	}
	s.SetSlot(g, slot, state)
	return g.Reshape(g.Stack(1, ys...), B, L, H, D)
}
