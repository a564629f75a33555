package generate

import (
	"fmt"
	"math"

	"github.com/archgen/archgen/runtime/mlx"
)

// Sampling says how the next token is picked from the model's logits, with
// the meaning mlx-lm's make_sampler and make_logits_processors give each
// knob. The zero value is greedy decoding.
type Sampling struct {
	// Temp divides the logits before sampling; 0 picks the most likely
	// token and ignores every other field but the repetition penalty.
	Temp float64
	// TopP keeps the smallest set of tokens whose probability reaches it
	// (used when 0 < TopP < 1).
	TopP float64
	// MinP drops tokens less likely than MinP times the most likely one
	// (used when > 0), keeping at least MinTokensToKeep (default 1).
	MinP            float64
	MinTokensToKeep int
	// TopK keeps the K most likely tokens (used when > 0).
	TopK int
	// RepetitionPenalty divides the positive logits (and multiplies the
	// negative ones) of the last RepetitionContext tokens (default 20);
	// 0 or 1 is off.
	RepetitionPenalty float64
	RepetitionContext int
	// Seed starts the random generator, as mx.random.seed does: the same
	// seed draws the same tokens as mlx-lm seeded with it.
	Seed uint64
}

// Check reports a knob outside its range.
func (s Sampling) Check(vocab int) error {
	switch {
	case s.Temp < 0 || math.IsNaN(s.Temp) || math.IsInf(s.Temp, 0):
		return fmt.Errorf("temperature %v must be finite and >= 0", s.Temp)
	case s.TopP < 0 || s.TopP > 1 || math.IsNaN(s.TopP):
		return fmt.Errorf("top-p %v must be in [0, 1]", s.TopP)
	case s.MinP < 0 || s.MinP > 1 || math.IsNaN(s.MinP):
		return fmt.Errorf("min-p %v must be in [0, 1]", s.MinP)
	case s.MinTokensToKeep < 0:
		return fmt.Errorf("min tokens to keep %d must be >= 1", s.MinTokensToKeep)
	case s.TopK < 0 || (s.TopK > 0 && vocab > 0 && s.TopK >= vocab):
		return fmt.Errorf("top-k %d must be in (0, %d)", s.TopK, vocab)
	case s.RepetitionPenalty < 0 || math.IsNaN(s.RepetitionPenalty):
		return fmt.Errorf("repetition penalty %v must be >= 0", s.RepetitionPenalty)
	case s.RepetitionContext < 0:
		return fmt.Errorf("repetition context %d must be >= 0", s.RepetitionContext)
	}
	return nil
}

// sampler carries the random state between steps.
type sampler struct {
	Sampling
	key *mlx.Array // owned; the generator's state, as mx.random's
}

func newSampler(s Sampling) *sampler {
	if s.MinTokensToKeep == 0 {
		s.MinTokensToKeep = 1
	}
	if s.RepetitionContext == 0 {
		s.RepetitionContext = 20
	}
	return &sampler{Sampling: s}
}

func (s *sampler) free() { s.key.Free() }

// penalize applies the repetition penalty to logits [1, V] for the tokens
// in history (a 1-D array, or nil).
func (s *sampler) penalize(g *mlx.Graph, logits, history *mlx.Array) *mlx.Array {
	if s.RepetitionPenalty == 0 || s.RepetitionPenalty == 1 || history == nil {
		return logits
	}
	n := history.Dim(0)
	if n == 0 {
		return logits
	}
	recent := history
	if n > s.RepetitionContext {
		recent = g.Slice(history, []int{n - s.RepetitionContext}, []int{n})
	}
	idx := g.ExpandDims(recent, 0)
	picked := g.TakeAlongAxis(logits, idx, -1)
	p := s.RepetitionPenalty
	picked = g.Where(g.Less(picked, g.Scalar(0, picked.Dtype())),
		g.MultiplyScalar(picked, p), g.DivideScalar(picked, p))
	return g.PutAlongAxis(logits, idx, picked, -1)
}

// sample picks a token from logprobs [1, V], as mlx-lm's sampler does: the
// filters in its order (top-p, min-p, top-k), then a categorical draw at the
// temperature; or the argmax when Temp is 0.
func (s *sampler) sample(g *mlx.Graph, logprobs *mlx.Array) *mlx.Array {
	if s.Temp == 0 {
		return g.Argmax(logprobs, -1, false)
	}
	logits := s.filter(g, logprobs)
	if s.key == nil {
		s.key = g.RandomKey(s.Seed)
		g.Keep(s.key)
	}
	// Split the state as mx.random's key sequence does: the first half
	// becomes the state, the second draws.
	next, sub := g.RandomSplit(s.key)
	g.Keep(next)
	s.key.Free()
	s.key = next
	return g.Categorical(logits, -1, sub)
}

// filter is logprobs [1, V] as the draw reads them: the filters in
// mlx-lm's order (top-p, min-p, top-k), then divided by the temperature
// (Temp > 0).
func (s *sampler) filter(g *mlx.Graph, logprobs *mlx.Array) *mlx.Array {
	if s.TopP > 0 && s.TopP < 1 {
		logprobs = topP(g, logprobs, s.TopP)
	}
	if s.MinP != 0 {
		logprobs = minP(g, logprobs, s.MinP, s.MinTokensToKeep)
	}
	if s.TopK > 0 {
		logprobs = topK(g, logprobs, s.TopK)
	}
	return g.MultiplyScalar(logprobs, 1/s.Temp)
}

func negInf(g *mlx.Graph, like *mlx.Array) *mlx.Array { return g.Scalar(math.Inf(-1), like.Dtype()) }

// topP keeps the most likely tokens whose probabilities sum to p: tokens
// below the probability at which the mass above reaches p are dropped.
func topP(g *mlx.Graph, logprobs *mlx.Array, p float64) *mlx.Array {
	sorted := g.Sort(logprobs, -1)
	probs := g.Exp(g.AsType(sorted, mlx.Float32))
	above := g.Cumsum(probs, -1, true, false)
	total := g.Add(g.Slice(above, []int{0, 0}, []int{1, 1}), g.Slice(probs, []int{0, 0}, []int{1, 1}))
	dropped := g.Sum(g.GreaterEqual(above, g.MultiplyScalar(total, p)), true, -1)
	threshold := g.TakeAlongAxis(sorted, g.AsType(dropped, mlx.Int32), -1)
	return g.Where(g.Less(logprobs, threshold), negInf(g, logprobs), logprobs)
}

// minP drops tokens less likely than p times the most likely, keeping the
// keep most likely in any case.
func minP(g *mlx.Graph, logprobs *mlx.Array, p float64, keep int) *mlx.Array {
	top := g.Max(logprobs, true, -1)
	remove := g.Less(logprobs, g.AddScalar(top, math.Log(p)))
	if keep > 1 {
		v := logprobs.Dim(-1)
		idx := g.Argpartition(logprobs, -keep, -1)
		idx = g.Slice(idx, []int{0, v - keep}, []int{1, v})
		remove = g.PutAlongAxis(remove, idx, g.Scalar(0, mlx.Bool), -1)
	}
	return g.Where(remove, negInf(g, logprobs), logprobs)
}

// topK keeps the k most likely tokens.
func topK(g *mlx.Graph, logprobs *mlx.Array, k int) *mlx.Array {
	v := logprobs.Dim(-1)
	idx := g.Argpartition(g.Negative(logprobs), k-1, -1)
	idx = g.Slice(idx, []int{0, k}, []int{1, v})
	return g.PutAlongAxis(logprobs, idx, negInf(g, logprobs), -1)
}
