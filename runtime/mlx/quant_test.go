package mlx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/archgen/archgen/internal/npy"
)

// TestQuantized checks MLX's affine quantization three ways: dequantize
// against numpy's unpacking of the packed words (testdata/numpy_ref.py),
// quantized_matmul against a numpy matmul with those weights, and every
// dequantized element near the original.
//
// The bound on that error follows from how MLX picks a group's scale s and
// bias: it anchors the group at its extreme of larger magnitude, e, and
// shrinks s to s' = e / round(e / s) so the anchor is exact. As |e| is at
// least half the group's range, |e / s| >= n/2 for n = 2^bits - 1 levels, so
// |s| <= |s'| (n + 1) / n, and the n steps of s' fall short of the range
// by at most n (|s| - |s'|) <= |s'|. Rounding adds |s'|/2: the error stays
// within 1.5 |s'|, and s' is the scale MLX stores.
func TestQuantized(t *testing.T) {
	type variant struct{ bits, group int }
	variants := []variant{{4, 32}, {4, 64}, {8, 32}, {8, 64}}
	rng := rand.New(rand.NewPCG(3, 4))
	rows, cols := 8, 128
	// The float32 kernels: by default the product rounds x to 16 bits per
	// group first, within the bound TestNativeQuantizedMatmul checks, and
	// this test is of the format and the arithmetic around it.
	defer SetNativeQMV16(SetNativeQMV16(false))
	w := randomInput(rng, f32(rows, cols))
	x := randomInput(rng, f32(3, cols))

	g := NewGraph(nil)
	defer g.Close()
	wa, xa := fromNpy(g, w), fromNpy(g, x)
	type result struct {
		q        Quantized
		deq, qmm *Array
	}
	var res []result
	var cases []numpyCase
	for _, v := range variants {
		q := g.Quantize(wa, v.group, v.bits)
		r := result{q: q, deq: g.Dequantize(q, Float32), qmm: g.QuantizedMatmul(xa, q, true)}
		if err := g.Eval(q.Weight, q.Scales, q.Biases, r.deq, r.qmm); err != nil {
			t.Fatal(err)
		}
		if got := q.Weight.Shape(); got[0] != rows || got[1] != cols*v.bits/32 {
			t.Fatalf("%d-bit packed shape %v", v.bits, got)
		}
		packed, err := q.Weight.Uint32s()
		if err != nil {
			t.Fatal(err)
		}
		scales, err := q.Scales.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		biases, err := q.Biases.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		gshape := []int{rows, cols / v.group}
		deq := fmt.Sprintf("dequantize(a, b, c, %d, %d)", v.group, v.bits)
		inputs := []npy.Array{
			{Shape: q.Weight.Shape(), Data: packed},
			{Shape: gshape, Data: scales},
			{Shape: gshape, Data: biases},
			x,
		}
		cases = append(cases,
			numpyCase{name: fmt.Sprintf("deq_%d_%d", v.bits, v.group), expr: deq, inputs: inputs},
			numpyCase{name: fmt.Sprintf("qmm_%d_%d", v.bits, v.group), expr: "d @ " + deq + ".T", inputs: inputs})
		res = append(res, r)
	}
	want := numpyEval(t, cases)
	orig := w.Data.([]float32)
	for i, v := range variants {
		r := res[i]
		t.Run(fmt.Sprintf("bits%d_group%d", v.bits, v.group), func(t *testing.T) {
			compare(t, r.deq, want[2*i][0], Float32, 1e-6)
			compare(t, r.qmm, want[2*i+1][0], Float32, 1e-4)
			deq, _ := r.deq.Float32s()
			scales, _ := r.q.Scales.Float32s()
			for j, d := range deq {
				// A group anchored at its maximum has a negative scale.
				step := math.Abs(float64(scales[j/cols*(cols/v.group)+(j%cols)/v.group]))
				if e := math.Abs(float64(d - orig[j])); e > 1.5*step {
					t.Fatalf("element %d: error %g exceeds 1.5 steps of %g", j, e, step)
				}
			}
		})
	}
}
