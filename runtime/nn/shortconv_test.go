package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// TestShortConvTaps: a short convolution loaded at float32 keeps its
// weights' taps [kernel, channels] beside them (from MLX's layout and from
// Hugging Face's), which its float32 step reads, within float32 rounding
// of the composed ops and with the same next state; loaded at bfloat16 it
// keeps none.
func TestShortConvTaps(t *testing.T) {
	const C, K = 20, 4
	dir := t.TempDir()
	save(t, dir, "model.safetensors", func(g *mlx.Graph) map[string]*mlx.Array {
		w := g.AsType(g.Normal([]int{C, K, 1}, mlx.Float32, 0, 1, g.RandomKey(5)), mlx.BFloat16)
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
					if c.Taps != nil {
						t.Errorf("conv %d: taps at %s", i, dt)
					}
					continue
				}
				if c.Taps == nil || c.Taps.Dtype() != mlx.Float32 || fmt.Sprint(c.Taps.Shape()) != fmt.Sprint([]int{K, C}) {
					t.Fatalf("conv %d: taps %v", i, c.Taps)
				}
				wv, _ := c.Weight.Float32s()
				tv, _ := c.Taps.Float32s()
				for ch := range C {
					for k := range K {
						if tv[k*C+ch] != wv[ch*K+k] {
							t.Fatalf("conv %d: taps[%d, %d] = %g, weight[%d, %d] %g", i, k, ch, tv[k*C+ch], ch, k, wv[ch*K+k])
						}
					}
				}
				// Two calls (a prompt, then a step) through the kernel and
				// through the composed ops (no taps).
				g := mlx.NewGraph(nil)
				x := g.Normal([]int{2, 5, C}, mlx.Float32, 0, 1, g.RandomKey(7))
				composed := *c
				composed.Taps = nil
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
