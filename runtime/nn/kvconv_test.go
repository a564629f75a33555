package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// TestKVConvSteps: the keys' convolution over time run one input a call
// (a decode step, which reads the state where it is) gives, bit for bit,
// what it gives over all the inputs side by side in one call, outputs and
// state, in every float dtype, for two and three taps; and a prompt in
// pieces then single steps the same again. The run in one call lies within
// rounding of the definition.
func TestKVConvSteps(t *testing.T) {
	const B, H, T, D = 2, 3, 7, 8
	for _, dt := range []mlx.Dtype{mlx.Float32, mlx.BFloat16, mlx.Float16} {
		for _, taps := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/taps%d", dt, taps), func(t *testing.T) {
				g := mlx.NewGraph(nil)
				defer g.Close()
				key := g.RandomKey(uint64(17 + taps))
				next := func() *mlx.Array {
					var sub *mlx.Array
					key, sub = g.RandomSplit(key)
					return sub
				}
				c := &KVConv{Taps: taps}
				for range taps {
					c.K = append(c.K, g.AsType(g.Normal([]int{1, H, 1, 1}, mlx.Float32, 0, 1, next()), dt))
				}
				u := g.AsType(g.Normal([]int{B, H, T, D}, mlx.Float32, 0, 1, next()), dt)
				steps := func(t0, t1 int) *mlx.Array {
					return g.Slice(u, []int{0, 0, t0, 0}, []int{B, H, t1, D})
				}
				whole := kv.NewStates(1)
				want := c.over(g, whole, 0, u, c.K)
				// The whole run against the definition, Σ_j w[j] u[t - (taps - 1) + j]
				// from a zero state, in float64.
				uv, _ := g.AsType(u, mlx.Float32).Float32s()
				yv, _ := g.AsType(want, mlx.Float32).Float32s()
				var wv [][]float32
				for _, w := range c.K {
					v, _ := g.AsType(w, mlx.Float32).Float32s()
					wv = append(wv, v)
				}
				tol := 1e-5
				if dt != mlx.Float32 {
					tol = 2e-2
				}
				for i := range yv {
					b, h, tt, d := i/(H*T*D), i/(T*D)%H, i/D%T, i%D
					var sum float64
					for j := range taps {
						if at := tt - (taps - 1) + j; at >= 0 {
							sum += float64(wv[j][h]) * float64(uv[((b*H+h)*T+at)*D+d])
						}
					}
					if math.Abs(float64(yv[i])-sum) > tol*(1+math.Abs(sum)) {
						t.Fatalf("y[%d, %d, %d, %d] = %g, want %g", b, h, tt, d, yv[i], sum)
					}
				}
				for _, cuts := range [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {0, 3, 4, 6, 7}} {
					s := kv.NewStates(1)
					var ys []*mlx.Array
					for i := 1; i < len(cuts); i++ {
						ys = append(ys, c.over(g, s, 0, steps(cuts[i-1], cuts[i]), c.K))
					}
					got := g.Concatenate(2, ys...)
					if err := g.Eval(want, got, whole.Slot(0), s.Slot(0)); err != nil {
						t.Fatal(err)
					}
					if got.Dtype() != dt {
						t.Fatalf("y is %s", got.Dtype())
					}
					sameBits(t, fmt.Sprintf("cuts %v: y", cuts), g, got, want)
					sameBits(t, fmt.Sprintf("cuts %v: state", cuts), g, s.Slot(0), whole.Slot(0))
					s.Slot(0).Free()
				}
				whole.Slot(0).Free()
			})
		}
	}
}

// sameBits fails unless a and b hold the same values bit for bit (as
// float32, which holds every half-precision value exactly).
func sameBits(t *testing.T, what string, g *mlx.Graph, a, b *mlx.Array) {
	t.Helper()
	if fmt.Sprint(a.Shape()) != fmt.Sprint(b.Shape()) {
		t.Fatalf("%s: shape %v, want %v", what, a.Shape(), b.Shape())
	}
	av, err := g.AsType(a, mlx.Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	bv, err := g.AsType(b, mlx.Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for i := range av {
		if math.Float32bits(av[i]) != math.Float32bits(bv[i]) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, av[i], bv[i])
		}
	}
}
