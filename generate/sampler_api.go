package generate

import "github.com/archgen/archgen/runtime/mlx"

// Sampler is the sampling of one sequence, step by step, for a decode loop
// of the caller's own (a batch of sequences, say): the same penalty and
// draws as Tokens makes, with the random state carried between draws.
type Sampler struct{ s *sampler }

// NewSampler starts sampling as s says (check it with s.Check first).
func NewSampler(s Sampling) *Sampler { return &Sampler{newSampler(s)} }

// Penalize applies the repetition penalty to logits [1, V] for the tokens
// of history (a 1-D integer array of the tokens fed so far, the step's
// input last; nil for none). It returns logits as they were when the
// penalty is off.
func (s *Sampler) Penalize(g *mlx.Graph, logits, history *mlx.Array) *mlx.Array {
	return s.s.penalize(g, logits, history)
}

// Penalizes reports whether Penalize needs a history.
func (s *Sampler) Penalizes() bool {
	return s.s.RepetitionPenalty != 0 && s.s.RepetitionPenalty != 1
}

// Context is how many of the last tokens the penalty looks at.
func (s *Sampler) Context() int { return s.s.RepetitionContext }

// Greedy reports whether Sample is an argmax (temperature 0), which the
// largest logit decides as well as the largest log-probability.
func (s *Sampler) Greedy() bool { return s.s.Temp == 0 }

// Sample picks a token from logprobs [1, V] (the penalized logits less
// their log-sum-exp): shape [1].
func (s *Sampler) Sample(g *mlx.Graph, logprobs *mlx.Array) *mlx.Array {
	return s.s.sample(g, logprobs)
}

// Free releases the random state.
func (s *Sampler) Free() { s.s.free() }
