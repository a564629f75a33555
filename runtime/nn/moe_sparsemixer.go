package nn

import (
	"math"

	"github.com/archgen/archgen/runtime/mlx"
)

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
