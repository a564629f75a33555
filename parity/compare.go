package parity

import (
	"fmt"
	"math"
)

// Tolerance bounds how far logits may be from mlx-lm's, as a fraction of
// the reference's scale (its largest absolute logit).
type Tolerance struct {
	Rel    float64
	Reason string
}

// Tolerances maps each level to its bound, for the prefill logits and the
// logits of every teacher-forced decode step. The same bound decides which
// greedy picks are near-ties (NearTie): free-running tokens must equal
// mlx-lm's up to its first one.
var Tolerances = map[string]Tolerance{
	"float32":  {1e-4, float32Reason},
	"bfloat16": {bf16Rel, bf16Reason},
	"float16":  {bf16Rel, "float16 rounds more finely than bfloat16 (10 mantissa bits to 7) within its range, which these logits do not leave: " + bf16Reason},
	"q8_g64":   {bf16Rel, "runs in bfloat16 on the same quantized weights: " + bf16Reason},
	"q8_g32":   {bf16Rel, "runs in bfloat16 on the same quantized weights: " + bf16Reason},
	"q4_g64":   {bf16Rel, "runs in bfloat16 on the same quantized weights: " + bf16Reason},
	"q4_g32":   {bf16Rel, "runs in bfloat16 on the same quantized weights: " + bf16Reason},
	// a case's extra level (cases.py's EXTRA_LEVELS)
	"mxfp4":       {bf16Rel, "runs in bfloat16 on the same mxfp4 weights: " + bf16Reason},
	"fp8_tiles":   {1e-4, "float32 arithmetic on weights read from FP8 tiles into bfloat16, as mlx-lm reads them: " + float32Reason},
	"int4_packed": {1e-4, "float32 arithmetic on 4-bit weights read from compressed-tensors' layout, as mlx-lm reads them: " + float32Reason},
	"q4_g32_kv_b": {bf16Rel, "runs in bfloat16 on the same quantized weights (kv_b_proj split and quantized again as mlx-lm's sanitize does): " + bf16Reason},
}

const (
	float32Reason = "float32 rounding differs between two correct orders of the same ops by " +
		"about 1e-6 of the logits' scale; a wrong formula (a rope variant, a norm, a mask) " +
		"moves them by 1e-2 or more"
	bf16Rel    = 0.06
	bf16Reason = "rounding to bfloat16 at another point is still correct and moves the logits " +
		"by percents: mlx-lm's own bfloat16 logits are up to 3.1% of the scale from its float32 " +
		"ones on these cases, and applying the input norms' weights before the cast instead " +
		"of after moves its bfloat16 and 4-bit logits by up to 3.6%; a correct implementation " +
		"may be that far on the other side, so twice that (the float32 level is the sharp test)"
)

// Diff is how far got is from want.
type Diff struct {
	MaxAbs float64 // largest |got - want|
	Scale  float64 // largest |want|
	At     int     // index of the largest difference
}

// Rel is MaxAbs relative to the reference's scale.
func (d Diff) Rel() float64 {
	if d.Scale == 0 {
		return d.MaxAbs
	}
	return d.MaxAbs / d.Scale
}

// Compare measures got against want; they must have the same length, and a
// NaN or infinity in got counts as an infinite difference.
func Compare(got, want []float32) (Diff, error) {
	if len(got) != len(want) {
		return Diff{}, fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	var d Diff
	for i := range want {
		w, g := float64(want[i]), float64(got[i])
		d.Scale = math.Max(d.Scale, math.Abs(w))
		e := math.Abs(g - w)
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		if e > d.MaxAbs {
			d.MaxAbs, d.At = e, i
		}
	}
	return d, nil
}

// Argmax is the index of the first largest value, as mx.argmax picks it.
func Argmax(row []float32) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}

// Margin is the largest value of row minus the second largest (0 on a
// tie), in float32 arithmetic: how near a tie the greedy pick from row is.
func Margin(row []float32) float64 {
	if len(row) < 2 {
		return math.Inf(1)
	}
	first, second := float32(math.Inf(-1)), float32(math.Inf(-1))
	for _, v := range row {
		switch {
		case v > first:
			first, second = v, first
		case v > second:
			second = v
		}
	}
	return float64(first - second)
}
