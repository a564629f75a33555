package nn

import (
	"math"

	"github.com/archgen/archgen/runtime/mlx"
)

// The routers of a mixture of experts: each kind (RouterKind) turns a
// token's logits into k experts and their weights.

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
	// logits in float32, the k highest (with Bias added, where there is
	// one), divided by their sum (at least 1e-12).
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
	// RouteSigmoidTopK: sigmoid scores in the logits' dtype; the experts
	// are picked by the scores (widened to float32 plus Bias, where there
	// is one), weighted by their scores, renormalised over their sum plus
	// 1e-6 when Renorm, times Scale, cast to the input's dtype.
	RouteSigmoidTopK
	// RouteScoreGroup: RouteSigmoidGroup's choice from softmax scores
	// (sigmoid ones when Sigmoid) in float32, the correction bias added
	// only where there is one; the weights, times Scale, cast to the
	// input's dtype, so that the weighted sum is taken in it.
	RouteScoreGroup
	// RouteSoftmaxGroupMax: a softmax (in float32 inside) over all
	// experts; the k most probable within the TopKGroups of Groups groups
	// whose best probability is highest (where Groups > TopKGroups: the
	// other groups' probabilities set to zero), weighted by their
	// probabilities times Scale, in the logits' dtype, never renormalised
	// (DeepSeek-V2's group-limited greedy router; plain greedy with one
	// group).
	RouteSoftmaxGroupMax
	// RouteFloat32ScoreNorm: the logits widened to float32, soft-capped
	// as tanh(l / Softcap) * Softcap where Softcap is set, scored by a
	// sigmoid (by sqrt(softplus) where SqrtSoftplus); the experts are
	// picked by the scores plus Bias (where there is one), and weighted by
	// their plain scores over their sum, in float32, so that the weighted
	// sum is taken in float32 and cast back.
	RouteFloat32ScoreNorm
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
	// Imprecise: RouteTopKSoftmax's softmax accumulates in the logits'
	// dtype (mlx's softmax without precise).
	Imprecise bool
	// Norm, when set, norms the router's input first: an RMS norm whose
	// weight is its learned scale times a factor.
	Norm *RouterNorm
	// ExpertScale, when set, is a learned [E] multiplying each picked
	// expert's weight.
	ExpertScale *mlx.Array
	// Sigmoid: RouteScoreTopKNorm and RouteScoreGroup score by a sigmoid.
	Sigmoid bool
	// RouteSigmoidGroup's (and RouteSigmoidBias's) correction bias [E];
	// RouteSigmoidGroup's groups and scale.
	Bias               *mlx.Array
	Groups, TopKGroups int
	Scale              float64
	// Jitter: RouteSparseMixer's band, relative to each round's pick.
	Jitter float64
	// Softcap and SqrtSoftplus: RouteFloat32ScoreNorm's logit cap (0:
	// none) and score function.
	Softcap      float64
	SqrtSoftplus bool
	// Eps: RouteSigmoidGroup's and RouteScoreGroup's renormalisation divides by the weights' sum
	// plus Eps (0: the sum alone).
	Eps float64
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

// RouterNorm is an RMS norm of a router's input whose weight is Scale
// [D] times Factor, taken in Scale's dtype.
type RouterNorm struct {
	Scale  *mlx.Array
	Factor float64
	Eps    float64
}

// Route is x [..., D]'s experts [..., k] and their weights [..., k].
func (r *Router) Route(g *mlx.Graph, x *mlx.Array) (idx, weights *mlx.Array) {
	if n := r.Norm; n != nil {
		x = g.RMSNorm(x, g.MultiplyScalar(n.Scale, n.Factor), float32(n.Eps))
	}
	idx, weights = r.route(g, x)
	if r.ExpertScale != nil {
		weights = g.Multiply(weights, g.Take(r.ExpertScale, idx, 0))
	}
	return idx, weights
}

// route is Route on the router's (normed) input.
func (r *Router) route(g *mlx.Graph, x *mlx.Array) (idx, weights *mlx.Array) {
	if r.Kind == RouteSigmoidBias {
		return r.sigmoidBias(g, x)
	}
	logits := r.Gate.Apply(g, x)
	switch r.Kind {
	case RouteTopKSoftmax:
		idx = r.topK(g, logits)
		top := g.TakeAlongAxis(logits, idx, -1)
		switch {
		case r.Float32:
			weights = g.Softmax(g.AsType(top, mlx.Float32), false, -1)
		case r.Imprecise:
			weights = g.Softmax(top, false, -1)
		default:
			weights = g.Softmax(top, true, -1)
		}
	case RouteSigmoidGroup:
		return r.groupChoice(g, g.Sigmoid(g.AsType(logits, mlx.Float32)))
	case RouteScoreGroup:
		f := g.AsType(logits, mlx.Float32)
		p := g.Softmax(f, false, -1)
		if r.Sigmoid {
			p = g.Sigmoid(f)
		}
		idx, weights = r.groupChoice(g, p)
		return idx, g.AsType(weights, x.Dtype())
	case RouteSoftmaxGroupMax:
		p := r.dropGroups(g, g.Softmax(logits, true, -1), true)
		idx = r.topK(g, p)
		return idx, g.MultiplyScalar(g.TakeAlongAxis(p, idx, -1), r.Scale)
	case RouteSparseMixer:
		return r.sparseMixer(g, logits)
	case RouteFloat32ScoreNorm:
		return r.float32ScoreNorm(g, logits)
	case RouteSigmoidTopK:
		return r.sigmoidTopK(g, logits, x.Dtype())
	case RouteScoreTopKNorm:
		f := g.AsType(logits, mlx.Float32)
		var p *mlx.Array
		if r.Sigmoid {
			p = g.Sigmoid(f)
		} else {
			p = g.Softmax(f, false, -1)
		}
		if r.Bias != nil {
			idx = r.topK(g, g.Add(p, r.Bias)) // picked with the bias, weighed without
		} else {
			idx = r.topK(g, p)
		}
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

// groupChoice is the grouped routers' choice from float32 scores p: the
// k best of p plus the correction bias (where there is one), within the
// TopKGroups groups whose two best such scores sum highest (the others'
// scores set to zero), weighted by p, renormalised when Renorm (and k >
// 1), times Scale.
func (r *Router) groupChoice(g *mlx.Graph, p *mlx.Array) (idx, weights *mlx.Array) {
	s := p
	if r.Bias != nil {
		s = g.Add(p, r.Bias)
	}
	s = r.dropGroups(g, s, false)
	idx = r.topK(g, s)
	weights = g.TakeAlongAxis(p, idx, -1)
	if r.K > 1 && r.Renorm {
		sum := g.Sum(weights, true, -1)
		if r.Eps != 0 {
			sum = g.AddScalar(sum, r.Eps)
		}
		weights = g.Divide(weights, sum)
	}
	return idx, g.MultiplyScalar(weights, r.Scale)
}

// dropGroups sets to zero the scores s of every group of experts but the
// TopKGroups best of Groups (where Groups > TopKGroups), a group scored by
// its best score (byMax) or the sum of its two best.
func (r *Router) dropGroups(g *mlx.Graph, s *mlx.Array, byMax bool) *mlx.Array {
	if r.Groups <= 1 || r.Groups <= r.TopKGroups || !s.Valid() {
		return s
	}
	shape := s.Shape()
	e := shape[len(shape)-1]
	grouped := g.Reshape(s, append(append([]int{}, shape[:len(shape)-1]...), r.Groups, e/r.Groups)...)
	var best *mlx.Array // [..., groups, 1]
	if byMax {
		best = g.Max(grouped, true, -1)
	} else {
		best = g.Sum(g.TopK(grouped, 2, -1), true, -1)
	}
	drop := r.Groups - r.TopKGroups
	gs := best.Shape()
	start, stop := make([]int, len(gs)), append([]int{}, gs...)
	stop[len(stop)-2] = drop
	worst := g.Slice(g.Argpartition(best, drop-1, -2), start, stop)
	grouped = g.PutAlongAxis(grouped, worst, g.Scalar(0, s.Dtype()), -2)
	return g.Reshape(grouped, shape...)
}

// sigmoidTopK is RouteSigmoidTopK's choice from logits.
func (r *Router) sigmoidTopK(g *mlx.Graph, logits *mlx.Array, dt mlx.Dtype) (idx, weights *mlx.Array) {
	p := g.Sigmoid(logits)
	s := p
	if r.Bias != nil {
		s = g.Add(g.AsType(p, mlx.Float32), r.Bias)
	}
	idx = r.topK(g, s)
	weights = g.TakeAlongAxis(p, idx, -1)
	if r.Renorm {
		weights = g.Divide(weights, g.AddScalar(g.Sum(weights, true, -1), 1e-6))
	}
	return idx, g.AsType(g.MultiplyScalar(weights, r.Scale), dt)
}

// sigmoidBias is RouteSigmoidBias's choice for x [..., D]: the router runs
// on x widened to float32 (a quantized router then multiplies in float32
// too), the correction bias only reorders the experts, and the weights
// come back in x's dtype.
func (r *Router) sigmoidBias(g *mlx.Graph, x *mlx.Array) (idx, weights *mlx.Array) {
	p := g.Sigmoid(r.Gate.Apply(g, g.AsType(x, mlx.Float32)))
	idx = r.topK(g, g.Add(p, r.Bias))
	weights = g.TakeAlongAxis(p, idx, -1)
	weights = g.Divide(weights, g.AddScalar(g.Sum(weights, true, -1), 1e-20))
	return idx, g.AsType(weights, x.Dtype())
}

// float32ScoreNorm is RouteFloat32ScoreNorm's choice from logits [..., E].
func (r *Router) float32ScoreNorm(g *mlx.Graph, logits *mlx.Array) (idx, weights *mlx.Array) {
	f := g.AsType(logits, mlx.Float32)
	if r.Softcap > 0 {
		f = Softcap(g, f, r.Softcap)
	}
	var p *mlx.Array
	if r.SqrtSoftplus {
		p = g.Sqrt(g.Softplus(f))
	} else {
		p = g.Sigmoid(f)
	}
	s := p
	if r.Bias != nil {
		s = g.Add(p, r.Bias)
	}
	idx = r.topK(g, s)
	weights = g.TakeAlongAxis(p, idx, -1)
	return idx, g.Divide(weights, g.Sum(weights, true, -1))
}

// sparseMixer is RouteSparseMixer's choice from logits [..., E], in the
// logits' dtype throughout: K rounds, each picking the largest logit not
// yet picked and weighing it by a softmax (float32 inside) over the band
// of logits near it. A logit joins a round's band unless its distance
// below the round's pick, over the larger of its own magnitude and the
// pick, exceeds 2 * Jitter; the experts already picked stay out of every
// later band.
func (r *Router) sparseMixer(g *mlx.Graph, logits *mlx.Array) (idx, weights *mlx.Array) {
	dt := logits.Dtype()
	masked := logits
	inds := make([]*mlx.Array, 0, r.K)
	scores := make([]*mlx.Array, 0, r.K)
	for range r.K {
		top := g.Max(masked, true, -1)
		pick := g.Argmax(masked, -1, true)
		factor := g.Maximum(g.Abs(logits), top)
		far := g.BinaryScalar(mlx.OpGreater, g.Divide(g.Subtract(top, logits), factor), 2*r.Jitter)
		band := g.Softmax(g.Where(far, g.Scalar(math.Inf(-1), dt), masked), true, -1)
		scores = append(scores, g.TakeAlongAxis(band, pick, -1))
		inds = append(inds, pick)
		masked = g.PutAlongAxis(masked, pick, g.Scalar(math.Inf(-1), dt), -1)
	}
	return g.Concatenate(-1, inds...), g.Concatenate(-1, scores...)
}
