package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// TestShortConvTaps: a short convolution loaded at float32 keeps its
// weights as taps [kernel, channels] in their place (from MLX's layout and
// from Hugging Face's; the weights are held once), which its float32 step
// reads, within float32 rounding of the composed ops on the weights they
// stand for and with the same next state; loaded at bfloat16 it keeps the
// weights and no taps.
func TestShortConvTaps(t *testing.T) {
	const C, K = 20, 4
	dir := t.TempDir()
	var wv []float32 // the weights saved, [C, K, 1]
	save(t, dir, "model.safetensors", func(g *mlx.Graph) map[string]*mlx.Array {
		w := g.AsType(g.Normal([]int{C, K, 1}, mlx.Float32, 0, 1, g.RandomKey(5)), mlx.BFloat16)
		wf := g.AsType(w, mlx.Float32)
		if err := g.Eval(wf); err != nil {
			t.Fatal(err)
		}
		wv, _ = wf.Float32s()
		return map[string]*mlx.Array{
			"mlx.weight": w,
			"hf.weight":  g.Transpose(w, 0, 2, 1), // [C, 1, K]
			"hf.bias":    g.AsType(g.Normal([]int{C}, mlx.Float32, 0, 1, g.RandomKey(6)), mlx.BFloat16),
		}
	})
	for _, dt := range []mlx.Dtype{mlx.Float32, mlx.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			w, err := OpenWeights(dir, []byte(`{}`), Options{Dtype: dt})
			if err != nil {
				t.Fatal(err)
			}
			convs := []*ShortConv{w.ShortConv("mlx", C, K, false), w.ShortConv("hf", C, K, true)}
			params, err := w.Finish()
			if err != nil {
				t.Fatal(err)
			}
			defer params.Free()
			for i, c := range convs {
				if dt != mlx.Float32 {
					if c.Taps != nil || c.Weight == nil {
						t.Errorf("conv %d: taps %v and weight %v at %s", i, c.Taps, c.Weight, dt)
					}
					continue
				}
				if c.Weight != nil {
					t.Errorf("conv %d: the weight kept beside its taps", i)
				}
				if c.Taps == nil || c.Taps.Dtype() != mlx.Float32 || fmt.Sprint(c.Taps.Shape()) != fmt.Sprint([]int{K, C}) {
					t.Fatalf("conv %d: taps %v", i, c.Taps)
				}
				tv, _ := c.Taps.Float32s()
				for ch := range C {
					for k := range K {
						if tv[k*C+ch] != wv[ch*K+k] {
							t.Fatalf("conv %d: taps[%d, %d] = %g, weight[%d, %d] %g", i, k, ch, tv[k*C+ch], ch, k, wv[ch*K+k])
						}
					}
				}
				// Two calls (a prompt, then a step) through the kernel and
				// through the composed ops (no taps) on the weight the taps
				// stand for.
				g := mlx.NewGraph(nil)
				x := g.Normal([]int{2, 5, C}, mlx.Float32, 0, 1, g.RandomKey(7))
				composed := *c
				composed.Weight, composed.Taps = c.weight(g), nil
				if err := g.Eval(composed.Weight); err != nil {
					t.Fatal(err)
				}
				if back, _ := composed.Weight.Float32s(); fmt.Sprint(back) != fmt.Sprint(wv) || fmt.Sprint(composed.Weight.Shape()) != fmt.Sprint([]int{C, K, 1}) {
					t.Fatalf("conv %d: the weight from the taps %v %v, saved %v", i, composed.Weight.Shape(), back, wv)
				}
				sk, so := kv.NewStates(1), kv.NewStates(1)
				for _, part := range [][2]int{{0, 4}, {4, 5}} {
					xi := g.Slice(x, []int{0, part[0], 0}, []int{2, part[1], C})
					yk, yo := c.ApplySiLU(g, sk, 0, xi), composed.ApplySiLU(g, so, 0, xi)
					if err := g.Eval(yk, yo, sk.Slot(0), so.Slot(0)); err != nil {
						t.Fatal(err)
					}
					got, _ := yk.Float32s()
					want, _ := yo.Float32s()
					for j := range want {
						if math.Abs(float64(got[j]-want[j])) > 1e-5*(1+math.Abs(float64(want[j]))) {
							t.Fatalf("conv %d: y[%d] = %g, the composed ops %g", i, j, got[j], want[j])
						}
					}
					sameBits(t, fmt.Sprintf("conv %d: state", i), g, sk.Slot(0), so.Slot(0))
				}
				sk.Slot(0).Free()
				so.Slot(0).Free()
				g.Close()
			}
		})
	}
}
