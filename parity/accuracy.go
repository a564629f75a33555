package parity

import (
	"fmt"
	"math"

	"github.com/archgen/archgen/runtime/nn"
)

// The default compute dtype on the CPU is float32 (nn.DefaultDtype): a
// half-precision checkpoint (bfloat16 or float16 weights, or quantized
// weights with half-precision scales) is computed in float32 on its own
// values, where mlx-lm computes in the checkpoint's dtype. Check holds the
// checkpoint's dtype (nn.CheckpointDtype) to mlx-lm's rounding; the
// default is held to a stronger standard instead, CheckAccuracy: no
// further from mlx-lm's float32 run on the same weights than mlx-lm's own
// run at the checkpoint's dtype is, step by step, that is, at least as
// accurate as mlx-lm.
//
// The default's caches hold keys and values in the checkpoint's
// half-precision dtype (nn.Params.CacheDtype; float32 in models that route
// to experts), as mlx-lm's run at that dtype holds them: half the bytes of
// float32 caches. Rounding them moves the logits by itself, so a step may
// also be as far from the float32 run as mlx-lm's float32 run holding its
// caches in that same dtype is, the cache's own cost as the oracle
// computes it (parity/refgen's caches_holding), plus the float32
// tolerance (the two are one computation in two float32 orders).

// AccuracySlack is how many times mlx-lm's own distance from its float32
// run the default's may be, at each step: 1, no further. The default
// computes in float32 on the checkpoint's values, as that run does, so it
// lies far inside (1e-6 of the scale against mlx-lm's 1e-3 to 4e-2 on
// these cases); the slack is a bound, not an allowance it needs.
const AccuracySlack = 1.0

// AccuracyFloor is the least bound of a step: two correct float32 orders
// of the same operations differ by up to the float32 level's tolerance.
var AccuracyFloor = Tolerances["float32"].Rel

// RefusedLevelBound bounds a level mlx-lm cannot run at its own dtype
// (bfloat16 and float16 mixtures of experts on the CPU): there is no
// distance of its to compare with, so the bound is what the default's own
// float32 arithmetic may move on the same weights as the float32 run (or
// the cache's rounding, as above). Its products
// of many rows carry x to 16 bits of its mantissa (the tile unit, and
// AVX-512's integer grid for quantized W): 2^-16 of each |x w|, which the
// cancellation in a sum (up to 32 times the result at these widths) and a
// few layers carry to 2^-11 of the logits' scale at most. A wrong formula
// moves them by 1e-2 or more (TestPlantedBugs).
var RefusedLevelBound = math.Ldexp(1, -11)

// Accuracy is one level of a case run at the default compute dtype,
// measured by CheckAccuracy against mlx-lm's float32 run on the level's
// weights, beside mlx-lm's own run at the level's dtype.
type Accuracy struct {
	Prefill      Diff  // the prefill logits against the float32 run's
	LevelPrefill *Diff // mlx-lm's at the level's dtype against the same; nil where it refuses
	CachePrefill *Diff // mlx-lm's float32 run with half-precision caches against the same; nil without
	Steps        []AccuracyStep
	// NearTie is the first step whose float32-run margin is below the
	// step's bound times its scale; len(Steps) when none is.
	NearTie int
	// Free are the product's own greedy tokens (generate.Tokens), and
	// FreeEqual how many of them, from the first, equal the float32 run's.
	Free      []int32
	FreeEqual int
}

// AccuracyStep is one decode step fed the float32 run's picks.
type AccuracyStep struct {
	Diff               // the step's logits against the float32 run's
	Level      *Diff   // mlx-lm's at the level's dtype against the same; nil where it refuses
	Cache      *Diff   // mlx-lm's float32 run with half-precision caches against the same; nil without
	Pick, Want int32   // our pick and the float32 run's
	Margin     float64 // the float32 run's top-1 minus top-2 logit
}

// Bound is how far from the float32 run a result may be when mlx-lm's
// own run at the level's dtype is level away (nil: mlx-lm refuses it) and
// its float32 run holding half-precision caches is cache away (nil: the
// level has none).
func Bound(level, cache *Diff) float64 {
	b := RefusedLevelBound
	if level != nil {
		b = math.Max(AccuracySlack*level.Rel(), AccuracyFloor)
	}
	if cache != nil {
		// the same computation as the default's in another float32 order:
		// within the float32 tolerance of it
		b = math.Max(b, AccuracySlack*cache.Rel()+AccuracyFloor)
	}
	return b
}

// Bound is the step's bound.
func (s AccuracyStep) Bound() float64 { return Bound(s.Level, s.Cache) }

// PrefillBound is the prefill's bound.
func (a *Accuracy) PrefillBound() float64 { return Bound(a.LevelPrefill, a.CachePrefill) }

// PrefillOK reports whether the prefill is within its bound.
func (a *Accuracy) PrefillOK() bool { return a.Prefill.Rel() <= a.PrefillBound() }

// ForcedOK reports whether every teacher-forced step is within its bound.
func (a *Accuracy) ForcedOK() bool {
	for _, s := range a.Steps {
		if s.Rel() > s.Bound() {
			return false
		}
	}
	return a.Steps != nil
}

// FreeOK reports whether the free-running tokens equal the float32 run's
// at every step before its first near-tie.
func (a *Accuracy) FreeOK() bool { return a.Free != nil && a.FreeEqual >= a.NearTie }

// Pass reports whether every check holds.
func (a *Accuracy) Pass() bool { return a.PrefillOK() && a.ForcedOK() && a.FreeOK() }

// Worst is the step whose distance is the largest share of its bound.
func (a *Accuracy) Worst() int {
	w := 0
	for i, s := range a.Steps {
		if s.Rel()/s.Bound() > a.Steps[w].Rel()/a.Steps[w].Bound() {
			w = i
		}
	}
	return w
}

// Problems says, one line each, which checks fail and where.
func (a *Accuracy) Problems() []string {
	var out []string
	if !a.PrefillOK() {
		out = append(out, fmt.Sprintf("prefill logits: %.3g of the scale from mlx-lm's float32 run, more than the bound %.3g (mlx-lm's own: %s; its float32 run with half-precision caches: %s)",
			a.Prefill.Rel(), a.PrefillBound(), levelRel(a.LevelPrefill), cacheRel(a.CachePrefill)))
	}
	for i, s := range a.Steps {
		if s.Rel() > s.Bound() {
			out = append(out, fmt.Sprintf("teacher-forced step %d: %.3g of the step's scale from mlx-lm's float32 run, more than the bound %.3g (mlx-lm's own: %s; its float32 run with half-precision caches: %s; our pick %d, the float32 run's %d)",
				i, s.Rel(), s.Bound(), levelRel(s.Level), cacheRel(s.Cache), s.Pick, s.Want))
		}
	}
	if a.Free != nil && !a.FreeOK() {
		i := a.FreeEqual
		out = append(out, fmt.Sprintf("free-running step %d picked %d, mlx-lm's float32 run %d (its margin %.3g is no near-tie: its first is at step %d)",
			i, a.Free[i], a.Steps[i].Want, a.Steps[i].Margin, a.NearTie))
	}
	return out
}

func levelRel(d *Diff) string {
	if d == nil {
		return "none, mlx-lm refuses the level"
	}
	return fmt.Sprintf("%.3g", d.Rel())
}

func cacheRel(d *Diff) string {
	if d == nil {
		return "none, the level holds no half-precision tensor"
	}
	return fmt.Sprintf("%.3g", d.Rel())
}

// CheckAccuracy runs m (a case's checkpoint at a half-precision level,
// loaded at the default compute dtype) as mlx-lm ran it for run, and
// measures it against mlx-lm's float32 run on the same weights: the
// prompt in one call; the decode chunked as refs.DecodeCalls and fed the
// float32 run's picks; and generate.Tokens running free. Each is held to
// Bound of mlx-lm's own distance at that step. An error means a run could
// not finish.
func CheckAccuracy(m nn.Model, refs *Refs, run *Float32Run) (*Accuracy, error) {
	want := &run.Run
	cached := *run
	switch {
	case m.Info().CacheDtype == 0:
		// the caches hold float32: the cache's runs bound nothing
		cached.CachePrefill, cached.CacheDecode = nil, nil
	case run.CachePrefill == nil:
		return nil, fmt.Errorf("the model's caches hold %s, and mlx-lm's float32 run has no run with such caches (make parity-models makes them)", m.Info().CacheDtype)
	}
	run = &cached
	n, v := len(want.DecodeTokens), want.Vocab
	a := &Accuracy{NearTie: n}
	var picks []int32
	var rows []float32
	var err error
	if a.Prefill, picks, rows, err = forcedRun(m, refs, want); err != nil {
		return nil, err
	}
	if a.LevelPrefill, err = compareOptional(run.LevelPrefill, want.Prefill); err != nil {
		return nil, err
	}
	if a.CachePrefill, err = compareOptional(run.CachePrefill, want.Prefill); err != nil {
		return nil, err
	}
	for i := range n {
		ref := want.Decode[i*v : (i+1)*v]
		d, err := Compare(rows[i*v:(i+1)*v], ref)
		if err != nil {
			return nil, fmt.Errorf("teacher-forced decode: step %d: %w", i, err)
		}
		s := AccuracyStep{Diff: d, Pick: picks[i], Want: want.DecodeTokens[i], Margin: Margin(ref)}
		if s.Level, err = compareOptional(row(run.LevelDecode, i, v), ref); err != nil {
			return nil, err
		}
		if s.Cache, err = compareOptional(row(run.CacheDecode, i, v), ref); err != nil {
			return nil, err
		}
		if a.NearTie == n && NearTie(s.Margin, s.Bound(), d.Scale) {
			a.NearTie = i
		}
		a.Steps = append(a.Steps, s)
	}

	if a.Free, a.FreeEqual, err = freeRun(m, refs, want); err != nil {
		return nil, err
	}
	return a, nil
}

// compareOptional is Compare(got, want), or nil when got is absent.
func compareOptional(got, want []float32) (*Diff, error) {
	if got == nil {
		return nil, nil
	}
	d, err := Compare(got, want)
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// row is row i of rows of v values, nil when rows is.
func row(rows []float32, i, v int) []float32 {
	if rows == nil {
		return nil
	}
	return rows[i*v : (i+1)*v]
}
