package nn

import (
	"github.com/archgen/archgen/runtime/mlx"
)

// A mixture of experts: a router picks k of E experts for each token and
// weighs their outputs; the experts are E feed-forward blocks whose weights
// are stacked ([E, out, in]) and run by gathered matmuls, only on the rows
// routed to them. Shared experts, when there are, run on every token.

// Experts are E linears stacked: Weight [E, out, in], dense, or Q, its
// quantized form; Bias [E, out] or nil.
type Experts struct {
	Weight *mlx.Array
	Q      *mlx.Quantized
	Bias   *mlx.Array
	// Sum, when set, is the group over which the experts' input columns
	// are split: their outputs are partial sums, which the block sums
	// over it once weighted (the bias is added by one process only).
	Sum *mlx.Group
}

// Apply is each row of x through the expert idx names for it: x
// [..., 1, in] with idx broadcasting against x's leading axes, [..., 1,
// out]. sorted says idx is sorted (all rows of an expert together).
func (e *Experts) Apply(g *mlx.Graph, x, idx *mlx.Array, sorted bool) *mlx.Array {
	var y *mlx.Array
	if e.Q != nil {
		y = gatherQMM(g, x, *e.Q, idx, sorted)
	} else {
		y = gatherMM(g, x, g.Swapaxes(e.Weight, -1, -2), idx, sorted)
	}
	if e.Bias != nil {
		y = g.Add(y, g.ExpandDims(g.Take(e.Bias, idx, 0), -2))
	}
	return y
}

// ExpertAct is how a gated expert combines its gate and up halves.
type ExpertAct int

const (
	// ActSwiGLU is silu(gate) * up.
	ActSwiGLU ExpertAct = iota
	// ActClampedSwiGLU is (clip(up, -limit, limit) + 1) * g * sigmoid(alpha
	// * g), g = min(gate, limit).
	ActClampedSwiGLU
	// ActGELU is gelu(up), exact, for ungated experts (no gate).
	ActGELU
	// ActReLU2 is relu(up)², for ungated experts (no gate).
	ActReLU2
	// ActGeGLU is gelu(gate) * up, the tanh-approximate GELU.
	ActGeGLU
	// ActGELUTanh is gelu(up), tanh-approximate, for ungated experts (no
	// gate).
	ActGELUTanh
)

// SwitchGLU are gated experts: down(act(gate(x), up(x))), each by the
// tokens' chosen experts. Gate is nil for ungated experts (up is then the
// first projection).
type SwitchGLU struct {
	Gate, Up, Down *Experts
	Act            ExpertAct
	Alpha, Limit   float64 // ActClampedSwiGLU
}

// sortAt is the number of (token, expert) pairs from which the rows are
// sorted by expert before the gathered matmuls, as mlx-lm does.
const sortAt = 64

// Apply runs x [..., D] through the experts idx [..., k] names: [..., k, D].
func (s *SwitchGLU) Apply(g *mlx.Graph, x, idx *mlx.Array) *mlx.Array {
	x = g.ExpandDims(x, -2, -3) // [..., 1, 1, D]
	shape := idx.Shape()
	if !idx.Valid() || len(shape) == 0 {
		return idx // a failed op's result: g reports its error
	}
	k := shape[len(shape)-1]
	n := 1
	for _, d := range shape {
		n *= d
	}
	sorted := n >= sortAt
	rows, inv := idx, (*mlx.Array)(nil)
	if sorted {
		flat := g.Flatten(idx, 0, -1)
		order := g.Argsort(flat, 0)
		inv = g.Argsort(order, 0)
		// each token's row once per chosen expert, then in expert order
		x = g.Flatten(x, 0, -3)                                                           // [T, 1, D]
		x = g.Flatten(g.BroadcastTo(g.ExpandDims(x, 1), x.Dim(0), k, 1, x.Dim(-1)), 0, 1) // [T*k, 1, D]
		x = g.Take(x, order, 0)                                                           // [n, 1, D]
		rows = g.Take(flat, order, 0)
	}
	up := s.Up.Apply(g, x, rows, sorted)
	var h *mlx.Array
	switch {
	case s.Act == ActGELU:
		h = g.GELU(up)
	case s.Act == ActReLU2:
		h = ReLUSquared(g, up)
	case s.Act == ActGELUTanh:
		h = g.GELUApprox(up)
	case s.Act == ActGeGLU:
		h = g.Multiply(g.GELUApprox(s.Gate.Apply(g, x, rows, sorted)), up)
	case s.Act == ActClampedSwiGLU:
		gate := g.BinaryScalar(mlx.OpMinimum, s.Gate.Apply(g, x, rows, sorted), s.Limit)
		u := g.Clip(up, -s.Limit, s.Limit)
		glu := g.Multiply(gate, g.Sigmoid(g.MultiplyScalar(gate, s.Alpha)))
		h = g.Multiply(g.AddScalar(u, 1), glu)
	default:
		h = g.SwiGLU(s.Gate.Apply(g, x, rows, sorted), up)
	}
	y := s.Down.Apply(g, h, rows, sorted)
	if sorted && y.Valid() {
		y = g.Take(y, inv, 0)
		y = g.Reshape(y, append(append([]int{}, shape...), y.Shape()[1:]...)...)
	}
	return g.Squeeze(y, -2)
}

// MoE is a sparse feed-forward block: the router's experts, weighted.
type MoE struct {
	Router  Router
	Experts *SwitchGLU
	// Shared, when set, runs on every token beside the routed experts,
	// scaled by sigmoid(SharedGate(x)) when SharedGate is set.
	Shared     *GLU
	SharedGate *Linear
	// Hits, when set, is handed each routing's experts; nil in use.
	Hits *ExpertHits
	// OutScale, when set (not 0), multiplies the routed experts' weighted
	// sum, in its dtype, before the shared expert is added.
	OutScale float64
}

// GLU is a dense SwiGLU block: down(silu(gate(x)) * up(x)).
type GLU struct {
	Gate, Up, Down *Linear
	// GateUp, when set, is gate and up in one projection (gate's rows
	// first), split after it runs; Gate and Up are then unused.
	GateUp *Linear
	// Act ActReLU2 makes it ungated: down(relu(up(x))²), Gate unused.
	Act ExpertAct
}

// Apply is the block on x [..., D].
func (m *GLU) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	if m.Act == ActReLU2 {
		return m.Down.Apply(g, ReLUSquared(g, m.Up.Apply(g, x)))
	}
	if m.GateUp != nil {
		gu := g.Split(m.GateUp.Apply(g, x), 2, -1)
		return m.Down.Apply(g, g.SwiGLU(gu[0], gu[1]))
	}
	gateUp := Products(g, x, m.Gate, m.Up)
	return m.Down.Apply(g, g.SwiGLU(gateUp[0], gateUp[1]))
}

// ExpertHits collects the experts a block's routings pick, to see that
// routing spreads over them.
type ExpertHits struct {
	pending []*mlx.Array
	// Counts are the times each expert was picked, by Count.
	Counts map[int]int
}

// Count reads the routings since the last Count into Counts.
func (h *ExpertHits) Count() error {
	if h.Counts == nil {
		h.Counts = map[int]int{}
	}
	defer func() {
		for _, a := range h.pending {
			a.Free()
		}
		h.pending = nil
	}()
	for _, a := range h.pending {
		if err := mlx.Eval(a); err != nil {
			return err
		}
		idx, err := a.Uint32s()
		if err != nil {
			return err
		}
		for _, e := range idx {
			h.Counts[int(e)]++
		}
	}
	return nil
}

// Apply is x [..., D] through each token's experts, summed by their
// weights: [..., D].
func (m *MoE) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	idx, w := m.Router.Route(g, x)
	return m.combine(g, x, idx, w)
}

// combine is x [..., D] through the experts idx [..., k] names for each
// token, summed by their weights w [..., k], plus the shared expert on x
// where there is one.
func (m *MoE) combine(g *mlx.Graph, x, idx, w *mlx.Array) *mlx.Array {
	if m.Hits != nil {
		c := g.Contiguous(idx)
		g.Keep(c)
		m.Hits.pending = append(m.Hits.pending, c)
	}
	y := m.Experts.Apply(g, x, idx)
	dt := y.Dtype()
	y = g.Sum(g.Multiply(y, g.ExpandDims(w, -1)), false, -2)
	if y.Dtype() != dt { // float32 weights: the sum is cast back
		y = g.AsType(y, dt)
	}
	if m.OutScale != 0 {
		y = g.MultiplyScalar(y, m.OutScale)
	}
	if grp := m.Experts.Down.Sum; grp != nil {
		y = g.AllSum(y, grp)
	}
	if m.Shared == nil {
		return y
	}
	s := m.Shared.Apply(g, x)
	if m.SharedGate != nil {
		s = g.Multiply(g.Sigmoid(m.SharedGate.Apply(g, x)), s)
	}
	return g.Add(y, s)
}

// ExpertsBeside is a sparse block that runs beside a layer's dense MLP,
// each branch with norms of its own: the router reads the residual stream
// h as it is, the experts read it normed by InNorm, and the dense MLP's
// output normed by DenseNorm is added to the experts' normed by OutNorm.
type ExpertsBeside struct {
	MoE                        *MoE
	InNorm, OutNorm, DenseNorm Normalizer
}

// Apply is the sum of the dense MLP's output dense [..., D] and the
// experts' on h [..., D], each normed; a nil block (a layer without
// experts) is dense as it is.
func (b *ExpertsBeside) Apply(g *mlx.Graph, h, dense *mlx.Array) *mlx.Array {
	if b == nil {
		return dense
	}
	idx, w := b.MoE.Router.Route(g, h)
	y := b.MoE.combine(g, b.InNorm.Apply(g, h), idx, w)
	return g.Add(b.DenseNorm.Apply(g, dense), b.OutNorm.Apply(g, y))
}

// gatherMM is x [..., 1, in] times the matrices w [E, in, out] that idx
// picks for each row (mlx's gather_mm). libmlx's CPU gather_mm takes
// float32 only (mlx-lm refuses a bfloat16 or float16 mixture of experts
// on the CPU for it): other dtypes multiply in float32, exactly widened,
// and the product is rounded back, as MLX's own half-precision matmuls
// accumulate in float32 and round once.
func gatherMM(g *mlx.Graph, x, w, idx *mlx.Array, sorted bool) *mlx.Array {
	if dt := x.Dtype(); dt != mlx.Float32 {
		y := g.GatherMM(g.AsType(x, mlx.Float32), g.AsType(w, mlx.Float32), nil, idx, sorted)
		return g.AsType(y, dt)
	}
	return g.GatherMM(x, w, nil, idx, sorted)
}

// gatherQMM is gatherMM over the quantized stack q [E, out, in], each
// picked matrix transposed (mlx's gather_qmm).
func gatherQMM(g *mlx.Graph, x *mlx.Array, q mlx.Quantized, idx *mlx.Array, sorted bool) *mlx.Array {
	return g.GatherQMM(x, q, nil, idx, true, sorted)
}
