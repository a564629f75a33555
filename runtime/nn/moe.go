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
	case s.Act == ActClampedSwiGLU:
		gate := g.BinaryScalar(mlx.OpMinimum, s.Gate.Apply(g, x, rows, sorted), s.Limit)
		u := g.Clip(up, -s.Limit, s.Limit)
		glu := g.Multiply(gate, g.Sigmoid(g.MultiplyScalar(gate, s.Alpha)))
		h = g.Multiply(g.AddScalar(u, 1), glu)
	default:
		h = g.SwiGLU(s.Gate.Apply(g, x, rows, sorted), up)
	}
	y := s.Down.Apply(g, h, rows, sorted)
	if sorted {
		y = g.Take(y, inv, 0)
		y = g.Reshape(y, append(append([]int{}, shape...), y.Shape()[1:]...)...)
	}
	return g.Squeeze(y, -2)
}

// RouterKind is how a router turns its logits into k experts and their
// weights.
type RouterKind int

const (
	// RouteSoftmaxTopK: a softmax (in float32 inside) over all experts,
	// then the k largest probabilities, renormalised to sum to one when
	// Renorm.
	RouteSoftmaxTopK RouterKind = iota
	// RouteTopKSoftmax: the k largest logits, then a softmax over them
	// (in float32, and the weights left so, when Float32).
	RouteTopKSoftmax
	// RouteSigmoidGroup: sigmoid scores in float32; the experts are picked
	// by the scores plus Bias, within the TopKGroups of Groups groups
	// whose two best such scores sum highest; their weights are the
	// plain scores, renormalised when Renorm (and k > 1), times Scale.
	RouteSigmoidGroup
	// RouteScoreTopKNorm: a softmax (or a sigmoid, when Sigmoid) of the
	// logits in float32, the k highest, divided by their sum (at least
	// 1e-12).
	RouteScoreTopKNorm
	// RouteSigmoidBias: the logits of the input cast to float32, sigmoid
	// scores; the experts are picked by the scores plus Bias, and weighted
	// by their plain scores over their sum (plus 1e-20), cast to the
	// input's dtype, so that the weighted sum is taken in it.
	RouteSigmoidBias
	// RouteSparseMixer: K rounds of the largest logit not yet picked,
	// each weighted by a softmax over the logits within Jitter of it
	// (sparseMixer).
	RouteSparseMixer
)

// Router picks each token's experts: Gate [E, D] gives the logits.
type Router struct {
	Gate   *Linear
	Kind   RouterKind
	K      int
	Renorm bool
	// TopLast picks the k largest as the last k of a partition around the
	// k-th largest (argpartition(p, -k)[-k:]); otherwise as the first k of
	// one around the k-th smallest of the negated scores. The two list the
	// same experts in other orders, and the order is the order the
	// weighted outputs are summed in.
	TopLast bool
	// Float32: RouteTopKSoftmax's softmax in float32.
	Float32 bool
	// Sigmoid: RouteScoreTopKNorm scores by a sigmoid.
	Sigmoid bool
	// RouteSigmoidGroup's (and RouteSigmoidBias's) correction bias [E];
	// RouteSigmoidGroup's groups and scale.
	Bias               *mlx.Array
	Groups, TopKGroups int
	Scale              float64
	// Jitter: RouteSparseMixer's band, relative to each round's pick.
	Jitter float64
}

// topK is the indices of the k largest entries of s along its last axis.
func (r *Router) topK(g *mlx.Graph, s *mlx.Array) *mlx.Array {
	if !s.Valid() {
		return s // a failed op's result: g reports its error
	}
	shape := s.Shape()
	start := make([]int, len(shape))
	stop := append([]int{}, shape...)
	if r.TopLast {
		start[len(start)-1] = shape[len(shape)-1] - r.K
		return g.Slice(g.Argpartition(s, -r.K, -1), start, stop)
	}
	stop[len(stop)-1] = r.K
	return g.Slice(g.Argpartition(g.Negative(s), r.K-1, -1), start, stop)
}

// Route is x [..., D]'s experts [..., k] and their weights [..., k].
func (r *Router) Route(g *mlx.Graph, x *mlx.Array) (idx, weights *mlx.Array) {
	if r.Kind == RouteSigmoidBias {
		return r.sigmoidBias(g, x)
	}
	logits := r.Gate.Apply(g, x)
	switch r.Kind {
	case RouteTopKSoftmax:
		idx = r.topK(g, logits)
		top := g.TakeAlongAxis(logits, idx, -1)
		if r.Float32 {
			weights = g.Softmax(g.AsType(top, mlx.Float32), false, -1)
		} else {
			weights = g.Softmax(top, true, -1)
		}
	case RouteSigmoidGroup:
		return r.sigmoidGroup(g, logits)
	case RouteSparseMixer:
		return r.sparseMixer(g, logits)
	case RouteScoreTopKNorm:
		f := g.AsType(logits, mlx.Float32)
		var p *mlx.Array
		if r.Sigmoid {
			p = g.Sigmoid(f)
		} else {
			p = g.Softmax(f, false, -1)
		}
		idx = r.topK(g, p)
		weights = g.TakeAlongAxis(p, idx, -1)
		weights = g.Divide(weights, g.BinaryScalar(mlx.OpMaximum, g.Sum(weights, true, -1), 1e-12))
	default:
		p := g.Softmax(logits, true, -1)
		idx = r.topK(g, p)
		weights = g.TakeAlongAxis(p, idx, -1)
		if r.Renorm {
			weights = g.Divide(weights, g.Sum(weights, true, -1))
		}
	}
	return idx, weights
}

// sigmoidGroup is RouteSigmoidGroup's choice from logits.
func (r *Router) sigmoidGroup(g *mlx.Graph, logits *mlx.Array) (idx, weights *mlx.Array) {
	p := g.Sigmoid(g.AsType(logits, mlx.Float32))
	s := g.Add(p, r.Bias)
	if r.Groups > 1 && r.Groups > r.TopKGroups {
		shape := s.Shape()
		e := shape[len(shape)-1]
		grouped := g.Reshape(s, append(append([]int{}, shape[:len(shape)-1]...), r.Groups, e/r.Groups)...)
		best := g.Sum(g.TopK(grouped, 2, -1), true, -1) // [..., groups, 1]
		drop := r.Groups - r.TopKGroups
		gs := best.Shape()
		start, stop := make([]int, len(gs)), append([]int{}, gs...)
		stop[len(stop)-2] = drop
		worst := g.Slice(g.Argpartition(best, drop-1, -2), start, stop)
		grouped = g.PutAlongAxis(grouped, worst, g.Scalar(0, mlx.Float32), -2)
		s = g.Reshape(grouped, shape...)
	}
	idx = r.topK(g, s)
	weights = g.TakeAlongAxis(p, idx, -1)
	if r.K > 1 && r.Renorm {
		weights = g.Divide(weights, g.Sum(weights, true, -1))
	}
	return idx, g.MultiplyScalar(weights, r.Scale)
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
}

// GLU is a dense SwiGLU block: down(silu(gate(x)) * up(x)).
type GLU struct {
	Gate, Up, Down *Linear
}

// Apply is the block on x [..., D].
func (m *GLU) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
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
