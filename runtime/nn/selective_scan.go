package nn

import (
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// The selective scan of Mamba (Mamba1): in_proj gives x and a gate z, each
// the inner width; x passes a short causal convolution and a silu; at
// every step x_proj gives the step's time-step input, B and C (each normed
// without weight where BCDtNorm holds, Falcon-Mamba), dt_proj and a
// softplus make the time steps, and each channel's state over StateSize
// decays by exp(dt A) and takes dt x B; y = state · C + D x, gated by
// silu(z). In half precision the state stays in the activations' dtype,
// rounded at every step, and the steps run one after another, as mlx-lm
// runs them; in float32 archgen's kernel runs the recurrence in one op.

// SelectiveScan is a Mamba layer's scan parameters.
type SelectiveScan struct {
	XProj, DtProj *Linear
	A             *mlx.Array // [inner, state]: -exp(A_log), made at load (Weights.Decay)
	D             *mlx.Array // [inner]
	DtRank        int
	StateSize     int
	// BCDtNorm: the time-step input, B and C are RMS-normed without a
	// weight, with eps NormEps.
	BCDtNorm bool
	NormEps  float32
	// DtNorm, BNorm and CNorm, where set, are their RMSNorms with weights
	// (Jamba's); Sequence projects and norms the whole sequence first and
	// then runs the recurrence, state = state · exp(dt A) + dt x B, a step
	// at a time (Jamba's order), where the default projects each step in
	// turn (Mamba's).
	DtNorm, BNorm, CNorm *RMSNorm
	Sequence             bool
}

// Apply runs the scan over x [B, L, inner] (convolved), the state in slot
// of s, and returns y [B, L, inner] before the gate.
func (p *SelectiveScan) Apply(g *mlx.Graph, s *kv.States, slot int, x *mlx.Array) *mlx.Array {
	if x.Dtype() == mlx.Float32 && x.Dim(1) > 0 {
		return p.applyNative(g, s, slot, x)
	}
	if p.Sequence {
		return p.applySequence(g, s, slot, x)
	}
	B, L, inner := x.Dim(0), x.Dim(1), x.Dim(2)
	state := s.Slot(slot)
	ys := make([]*mlx.Array, L)
	for t := range L {
		xt := g.Reshape(g.Slice(x, []int{0, t, 0}, []int{B, t + 1, inner}), B, inner)
		parts := g.SplitAt(p.XProj.Apply(g, xt), []int{p.DtRank, p.DtRank + p.StateSize}, -1)
		dt, b, c := p.norms(g, parts[0], parts[1], parts[2])
		delta := g.Softplus(p.DtProj.Apply(g, dt))                                      // [B, inner]
		next := g.Multiply(g.ExpandDims(g.Multiply(delta, xt), -1), g.ExpandDims(b, 1)) // [B, inner, state]
		if state != nil {
			next = g.Add(next, g.Multiply(state, g.Exp(g.Multiply(g.ExpandDims(delta, -1), p.A))))
		}
		y := g.Reshape(g.Matmul(next, g.ExpandDims(c, -1)), B, inner)
		ys[t] = g.Add(y, g.Multiply(p.D, xt))
		state = next
	}
	if state != nil {
		s.SetSlot(g, slot, state)
	}
	if L == 0 {
		return x
	}
	return g.Stack(1, ys...)
}

// norms applies the time-step input's, B's and C's norms.
func (p *SelectiveScan) norms(g *mlx.Graph, dt, b, c *mlx.Array) (*mlx.Array, *mlx.Array, *mlx.Array) {
	switch {
	case p.DtNorm != nil:
		return p.DtNorm.Apply(g, dt), p.BNorm.Apply(g, b), p.CNorm.Apply(g, c)
	case p.BCDtNorm:
		return g.RMSNorm(dt, nil, p.NormEps), g.RMSNorm(b, nil, p.NormEps), g.RMSNorm(c, nil, p.NormEps)
	}
	return dt, b, c
}

// applySequence is Apply in Jamba's order: the projections, norms, time
// steps and each step's input to the state for the whole sequence at
// once, then the recurrence a step at a time, then every step's output.
func (p *SelectiveScan) applySequence(g *mlx.Graph, s *kv.States, slot int, x *mlx.Array) *mlx.Array {
	B, L, inner := x.Dim(0), x.Dim(1), x.Dim(2)
	if L == 0 {
		return x
	}
	parts := g.SplitAt(p.XProj.Apply(g, x), []int{p.DtRank, p.DtRank + p.StateSize}, -1)
	dt, b, c := p.norms(g, parts[0], parts[1], parts[2])
	delta := g.Softplus(p.DtProj.Apply(g, dt))                                       // [B, L, inner]
	input := g.Multiply(g.ExpandDims(g.Multiply(delta, x), -1), g.ExpandDims(b, -2)) // [B, L, inner, state]
	decay := g.Exp(g.Multiply(g.ExpandDims(delta, -1), p.A))                         // [B, L, inner, state]
	step := func(a *mlx.Array, t int) *mlx.Array {
		return g.Reshape(g.Slice(a, []int{0, t, 0, 0}, []int{B, t + 1, inner, p.StateSize}), B, inner, p.StateSize)
	}
	state := s.Slot(slot)
	states := make([]*mlx.Array, L)
	for t := range L {
		next := step(input, t)
		if state != nil {
			next = g.Add(g.Multiply(state, step(decay, t)), next)
		}
		states[t] = next
		state = next
	}
	s.SetSlot(g, slot, state)
	y := g.Squeeze(g.Matmul(g.Stack(1, states...), g.ExpandDims(c, -1)), -1) // [B, L, inner]
	return g.Add(y, g.Multiply(p.D, x))
}

// applyNative is Apply in float32 on archgen's kernel: the projections,
// norms and time steps for the whole sequence at once, then the recurrence
// in one op (mlx.Graph.SelectiveScan), within float32 rounding of either
// order mlx-lm composes. Half precision keeps the composed steps, whose
// roundings are the oracle's.
func (p *SelectiveScan) applyNative(g *mlx.Graph, s *kv.States, slot int, x *mlx.Array) *mlx.Array {
	parts := g.SplitAt(p.XProj.Apply(g, x), []int{p.DtRank, p.DtRank + p.StateSize}, -1)
	dt, b, c := p.norms(g, parts[0], parts[1], parts[2])
	delta := g.Softplus(p.DtProj.Apply(g, dt))
	// x is float32, so the compute dtype is, and A and D with it
	y, last := g.SelectiveScan(x, delta, p.A, b, c, p.D, s.Slot(slot))
	s.SetSlot(g, slot, last)
	return y
}
