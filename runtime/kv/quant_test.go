package kv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// The tolerance of a quantized cache, derived from its bits.
//
// MLX's affine quantization of a group of values with range
// R = max - min and n = 2^bits - 1 levels starts from the step s = R/n and
// then moves the step to s' = e/round(e/s), so that the group's edge e
// (whichever of min and max is larger in magnitude) lies exactly on the
// grid. Since |e| >= R/2, |e/s| >= n/2, and so s' <= s n/(n-1): a value
// inside the grid is off by at most s'/2, and one beyond its far end, cut
// off, by at most n(s - s') < s. Either way
//
//	|x - x̂| <= δ = R / (2^bits - 2)   per value, R of its group.    (1)
//
// Attention over quantized keys: a score q·k * scale moves by at most
// ε = scale Σ_d |q_d| δ_k(d) (δ_k of the group holding d). Moving every
// score of a softmax by at most ε scales each probability by a factor
// within [e^-2ε, e^2ε], so the probabilities move by at most e^2ε - 1 in
// sum. The output Σ_j p_j v̂_j then differs from Σ_j p_j v_j by at most
//
//	(e^2ε - 1) · (range_j v̂_jd) / 2  +  max_j δ_v(j, d)              (2)
//
// (the probabilities' changes sum to zero, so they act on the values less
// their midrange; the second term is the values' own error). TestQuantized
// tolerance checks (1) against MLX's quantizer and (2) against the cache's
// attention, with float32 rounding on top.

// quantStep is δ of (1) for every group of x [rows, d] in groups of group.
func quantStep(x []float32, d, group, bits int) []float64 {
	steps := make([]float64, len(x)/group)
	for gi := range steps {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range x[gi*group : (gi+1)*group] {
			lo, hi = min(lo, float64(v)), max(hi, float64(v))
		}
		steps[gi] = (hi - lo) / float64(int(1)<<bits-2)
	}
	return steps
}

func randn(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// TestQuantizedTolerance checks bound (1) on MLX's quantizer and bound (2)
// on attention over a quantized cache, for a causal prefill and a decode
// step, at 8 and 4 bits.
func TestQuantizedTolerance(t *testing.T) {
	const (
		hq, hkv, d, s = 4, 2, 128, 24
		rep           = hq / hkv
		fp32Slack     = 1e-5 // float32 rounding of O(1) outputs
	)
	scale := 1 / math.Sqrt(d)
	for _, tc := range []struct{ bits, group int }{{8, 64}, {4, 64}, {8, 32}, {4, 128}} {
		t.Run(fmt.Sprintf("%d bits, group %d", tc.bits, tc.group), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.bits), uint64(tc.group)))
			// s prefill positions, then one more decoded.
			qh := randn(rng, hq*(s+1)*d)
			kh := randn(rng, hkv*(s+1)*d)
			vh := randn(rng, hkv*(s+1)*d)
			g := mlx.NewGraph(nil)
			defer g.Close()

			// (1) on MLX's quantizer.
			all := mlx.FromSlice(g, kh, hkv*(s+1), d)
			deq, err := g.Dequantize(g.Quantize(all, tc.group, tc.bits), mlx.Float32).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			ks := quantStep(kh, d, tc.group, tc.bits)
			vs := quantStep(vh, d, tc.group, tc.bits)
			worst := 0.0
			for i := range kh {
				e := math.Abs(float64(kh[i] - deq[i]))
				if e > ks[i/tc.group]*(1+1e-5)+1e-7 {
					t.Fatalf("value %d: quantization error %g exceeds its bound %g", i, e, ks[i/tc.group])
				}
				worst = max(worst, e/ks[i/tc.group])
			}
			t.Logf("(1): largest error %.3f of its bound", worst)

			// (2) on the cache: positions [lo, hi) of head h, as [1, H, L, d].
			part := func(x []float32, heads, lo, hi int) *mlx.Array {
				out := make([]float32, 0, heads*(hi-lo)*d)
				for h := range heads {
					out = append(out, x[(h*(s+1)+lo)*d:(h*(s+1)+hi)*d]...)
				}
				return mlx.FromSlice(g, out, 1, heads, hi-lo, d)
			}
			c := NewQuantized(tc.bits, tc.group)
			defer c.Free()
			for _, st := range []struct{ lo, hi int }{{0, s}, {s, s + 1}} {
				q, k, v := part(qh, hq, st.lo, st.hi), part(kh, hkv, st.lo, st.hi), part(vh, hkv, st.lo, st.hi)
				mask := c.Mask(g, st.hi-st.lo, 0, false)
				got, err := Attend(g, q, c.Update(g, k, v), Spec{Scale: float32(scale), Mask: mask}).Float32s()
				if err != nil {
					t.Fatal(err)
				}
				dk, dv := part(kh, hkv, 0, st.hi), part(vh, hkv, 0, st.hi)
				want, err := g.SDPA(q, dk, dv, float32(scale), mask).Float32s()
				if err != nil {
					t.Fatal(err)
				}
				ratio := 0.0
				for h := range hq {
					kvh := h / rep
					for i := st.lo; i < st.hi; i++ {
						// ε for query i over the keys it sees (j <= i).
						eps := 0.0
						for j := 0; j <= i; j++ {
							sum := 0.0
							for x := range d {
								sum += math.Abs(float64(qh[(h*(s+1)+i)*d+x])) * ks[((kvh*(s+1)+j)*d+x)/tc.group]
							}
							eps = max(eps, scale*sum)
						}
						for x := range d {
							lo, hi, dmax := math.Inf(1), math.Inf(-1), 0.0
							for j := 0; j <= i; j++ {
								at := (kvh*(s+1)+j)*d + x
								step := vs[at/tc.group]
								lo, hi = min(lo, float64(vh[at])-step), max(hi, float64(vh[at])+step)
								dmax = max(dmax, step)
							}
							bound := math.Expm1(2*eps)*(hi-lo)/2 + dmax + fp32Slack
							at := (h*(st.hi-st.lo)+i-st.lo)*d + x
							diff := math.Abs(float64(got[at] - want[at]))
							if !(diff <= bound) {
								t.Fatalf("positions [%d, %d) head %d query %d dim %d: quantized attention differs by %g, bound %g",
									st.lo, st.hi, h, i, x, diff, bound)
							}
							ratio = max(ratio, diff/bound)
						}
					}
				}
				t.Logf("(2) on positions [%d, %d): largest difference %.3f of its bound", st.lo, st.hi, ratio)
			}
		})
	}
}
