package parity

import (
	"context"
	"fmt"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/nn"
)

// Result is one case level measured against mlx-lm by Check, under the
// parity standard: prefill logits and teacher-forced decode logits within
// the level's tolerance, and free-running greedy tokens equal to mlx-lm's
// up to its first near-tie.
type Result struct {
	Tol     Tolerance
	Prefill Diff   // the prefill logits against mlx-lm's (scale: all of them)
	Steps   []Step // the decode fed mlx-lm's picks, step by step
	// NearTie is the first step whose mlx-lm margin (top-1 minus top-2
	// logit) is below the tolerance times the step's scale: from there on a
	// correct implementation may pick another token. len(Steps) when no
	// step is that near.
	NearTie int
	// Free are the tokens of the product's own greedy decode loop
	// (generate.Tokens), and FreeEqual how many of them, from the first,
	// equal mlx-lm's.
	Free      []int32
	FreeEqual int
}

// Step is one teacher-forced decode step: the logits after the prompt and
// mlx-lm's picks before this one.
type Step struct {
	Diff           // the step's logits against mlx-lm's (scale: the step's own)
	Pick   int32   // the first largest of our logits
	Want   int32   // mlx-lm's pick
	Margin float64 // mlx-lm's top-1 minus top-2 logit
}

// NearTie reports whether a pick made with margin (top-1 minus top-2
// logit) is within reach of rounding that the tolerance allows: margin
// below rel times the scale of the logits.
func NearTie(margin, rel, scale float64) bool { return margin < rel*scale }

// PrefillOK reports whether the prefill logits lie within the tolerance.
func (r *Result) PrefillOK() bool { return r.Prefill.Rel() <= r.Tol.Rel }

// ForcedOK reports whether every teacher-forced step's logits lie within
// the tolerance.
func (r *Result) ForcedOK() bool { return r.Steps != nil && r.Worst().Rel() <= r.Tol.Rel }

// FreeOK reports whether the free-running tokens equal mlx-lm's at every
// step before its first near-tie.
func (r *Result) FreeOK() bool { return r.Free != nil && r.FreeEqual >= r.NearTie }

// Pass reports whether every check holds.
func (r *Result) Pass() bool { return r.PrefillOK() && r.ForcedOK() && r.FreeOK() }

// WorstStep is the index of the teacher-forced step furthest from
// mlx-lm's, relative to its scale (0 when there are no steps).
func (r *Result) WorstStep() int {
	w := 0
	for i, s := range r.Steps {
		if s.Rel() > r.Steps[w].Rel() {
			w = i
		}
	}
	return w
}

// Worst is the Diff of WorstStep.
func (r *Result) Worst() Diff {
	if len(r.Steps) == 0 {
		return Diff{}
	}
	return r.Steps[r.WorstStep()].Diff
}

// Problems says, one line each, which checks fail and where.
func (r *Result) Problems(vocab int) []string {
	var out []string
	if !r.PrefillOK() {
		d := r.Prefill
		out = append(out, fmt.Sprintf("prefill logits: max abs error %.3g (%.3g of the scale %.3g) at position %d, token %d; tolerance %.3g (%s)",
			d.MaxAbs, d.Rel(), d.Scale, d.At/vocab, d.At%vocab, r.Tol.Rel, r.Tol.Reason))
	}
	for i, s := range r.Steps {
		if s.Rel() > r.Tol.Rel {
			out = append(out, fmt.Sprintf("teacher-forced step %d: max abs error %.3g (%.3g of the step's scale %.3g) at token %d; tolerance %.3g (its pick %d, mlx-lm's %d)",
				i, s.MaxAbs, s.Rel(), s.Scale, s.At, r.Tol.Rel, s.Pick, s.Want))
		}
	}
	if r.Free != nil && !r.FreeOK() {
		i := r.FreeEqual
		out = append(out, fmt.Sprintf("free-running step %d picked %d, mlx-lm %d (mlx-lm's margin %.3g is no near-tie: its first is at step %d)",
			i, r.Free[i], r.Steps[i].Want, r.Steps[i].Margin, r.NearTie))
	}
	return out
}

// Check runs m (a case's checkpoint at one level) the way mlx-lm ran it for
// refs and want, and measures it against mlx-lm's results: the prompt in
// one call (Prefill); the decode chunked as refs.DecodeCalls, fed mlx-lm's
// picks (Greedy with force); and the product's decode loop,
// generate.Tokens, running free. The decodes use the caches refs asks for
// (mlx-lm's defaults, or a quantized KV cache). An error means a run could
// not finish; how far the results are from mlx-lm's is in the Result.
func Check(m nn.Model, refs *Refs, want *Dumps, level string) (*Result, error) {
	tol, ok := Tolerances[level]
	if !ok {
		return nil, fmt.Errorf("no tolerance for level %s", level)
	}
	ref, ok := refs.Levels[level]
	if !ok {
		return nil, fmt.Errorf("%s/%s: refs.json has no level %s", refs.Arch, refs.Case, level)
	}
	n, v := len(want.DecodeTokens), want.Vocab
	if len(ref.DecodeMargins) != n {
		return nil, fmt.Errorf("%s/%s %s: %d margins for %d decode steps", refs.Arch, refs.Case, level, len(ref.DecodeMargins), n)
	}
	r := &Result{Tol: tol, NearTie: n}
	var picks []int32
	var rows []float32
	var err error
	if r.Prefill, picks, rows, err = forcedRun(m, refs, want); err != nil {
		return nil, err
	}
	for i := range n {
		d, err := Compare(rows[i*v:(i+1)*v], want.Decode[i*v:(i+1)*v])
		if err != nil {
			return nil, fmt.Errorf("teacher-forced decode: step %d: %w", i, err)
		}
		s := Step{Diff: d, Pick: picks[i], Want: want.DecodeTokens[i], Margin: ref.DecodeMargins[i]}
		if r.NearTie == n && NearTie(s.Margin, tol.Rel, d.Scale) {
			r.NearTie = i
		}
		r.Steps = append(r.Steps, s)
	}

	if r.Free, r.FreeEqual, err = freeRun(m, refs, want); err != nil {
		return nil, err
	}
	return r, nil
}

// forcedRun runs m on want's prompt in one call, measured against want's
// prefill logits, and decodes chunked as refs.DecodeCalls with the caches
// refs asks for, fed want's picks: our picks and the logits of each step.
func forcedRun(m nn.Model, refs *Refs, want *Dumps) (Diff, []int32, []float32, error) {
	got, _, err := Prefill(m, want.Prompt)
	if err != nil {
		return Diff{}, nil, nil, fmt.Errorf("prefill: %w", err)
	}
	d, err := Compare(got, want.Prefill)
	if err != nil {
		return Diff{}, nil, nil, fmt.Errorf("prefill: %w", err)
	}
	caches, err := m.NewCachesWith(refs.CacheOptions())
	if err != nil {
		return Diff{}, nil, nil, err
	}
	defer freeCaches(caches)
	picks, rows, err := greedy(m, caches, want.Prompt, refs.DecodeCalls, len(want.DecodeTokens), want.DecodeTokens)
	if err != nil {
		return Diff{}, nil, nil, fmt.Errorf("teacher-forced decode: %w", err)
	}
	return d, picks, rows, nil
}

// freeRun is the product's own greedy decode loop (generate.Tokens) after
// want's prompt, with the caches refs asks for, for as many tokens as want
// picked, and how many of them, from the first, equal want's.
func freeRun(m nn.Model, refs *Refs, want *Dumps) ([]int32, int, error) {
	n := len(want.DecodeTokens)
	caches, err := m.NewCachesWith(refs.CacheOptions())
	if err != nil {
		return nil, 0, err
	}
	defer freeCaches(caches)
	free := []int32{}
	if _, err := generate.Tokens(context.Background(), m, want.Prompt, generate.Options{MaxTokens: n, Caches: caches},
		func(t int32) error { free = append(free, t); return nil }); err != nil {
		return nil, 0, fmt.Errorf("generate.Tokens: %w", err)
	}
	if len(free) != n {
		return nil, 0, fmt.Errorf("generate.Tokens made %d tokens, want %d", len(free), n)
	}
	equal := 0
	for equal < n && free[equal] == want.DecodeTokens[equal] {
		equal++
	}
	return free, equal, nil
}

// CacheOptions are the KV cache options the case decodes with: mlx-lm's
// defaults (the zero kv.Options), or the quantized cache of KVCache.
func (r *Refs) CacheOptions() kv.Options {
	if r.KVCache == nil {
		return kv.Options{}
	}
	return kv.Options{KVBits: r.KVCache.Bits, KVGroupSize: r.KVCache.GroupSize, QuantizedKVStart: r.KVCache.Start}
}
