package kv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// TestSinksQuantized checks attention with sinks over a quantized cache
// against MLX's fused attention with the same sinks over the very keys and
// values the cache holds, dequantized: the two differ only in the order of
// their float32 operations. mlx-lm refuses sinks over a quantized cache,
// so MLX's kernel is the reference. Sinks large enough to take most of
// the probability must also move the output well past that tolerance, so
// that a path ignoring them fails.
func TestSinksQuantized(t *testing.T) {
	const hq, d, s = 4, 64, 12
	for _, hkv := range []int{2, 4} {
		for _, bits := range []int{8, 4} {
			t.Run(fmt.Sprintf("kv_heads %d, %d bits", hkv, bits), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(hkv), uint64(bits)))
				g := mlx.NewGraph(nil)
				defer g.Close()
				q := mlx.FromSlice(g, randn(rng, hq*(s+1)*d), 1, hq, s+1, d)
				k := mlx.FromSlice(g, randn(rng, hkv*(s+1)*d), 1, hkv, s+1, d)
				v := mlx.FromSlice(g, randn(rng, hkv*(s+1)*d), 1, hkv, s+1, d)
				sinkVals := make([]float32, hq)
				for i := range sinkVals {
					sinkVals[i] = float32(1.5 + rng.NormFloat64())
				}
				sinks := mlx.FromSlice(g, sinkVals, hq)
				part := func(a *mlx.Array, lo, hi int) *mlx.Array {
					sh := a.Shape()
					return g.Contiguous(g.Slice(a, []int{0, 0, lo, 0}, []int{sh[0], sh[1], hi, sh[3]}))
				}
				scale := float32(1 / math.Sqrt(d))
				c := NewQuantized(bits, 64)
				defer c.Free()
				for _, st := range []struct{ lo, hi int }{{0, s}, {s, s + 1}} {
					mask := c.Mask(g, st.hi-st.lo, 0, false)
					kvs := c.Update(g, part(k, st.lo, st.hi), part(v, st.lo, st.hi))
					qs := part(q, st.lo, st.hi)
					got, err := Attend(g, qs, kvs, Spec{Scale: scale, Mask: mask, Sinks: sinks}).Float32s()
					if err != nil {
						t.Fatal(err)
					}
					dk, dv := g.Dequantize(*kvs.QKeys, mlx.Float32), g.Dequantize(*kvs.QValues, mlx.Float32)
					want, err := g.SDPASinks(qs, dk, dv, scale, mask, sinks).Float32s()
					if err != nil {
						t.Fatal(err)
					}
					plain, err := g.SDPA(qs, dk, dv, scale, mask).Float32s()
					if err != nil {
						t.Fatal(err)
					}
					worst, moved := 0.0, 0.0
					for i := range want {
						worst = max(worst, math.Abs(float64(got[i]-want[i])))
						moved = max(moved, math.Abs(float64(plain[i]-want[i])))
					}
					t.Logf("positions %d-%d: largest difference %.2g; the sinks move the output by up to %.2g", st.lo, st.hi, worst, moved)
					if worst > 1e-5 {
						t.Errorf("positions %d-%d: attention with sinks over the quantized cache is %g from MLX's over its dequantized keys and values", st.lo, st.hi, worst)
					}
					if moved < 1e-2 {
						t.Errorf("positions %d-%d: the sinks move MLX's attention by only %g; the test cannot tell them from none", st.lo, st.hi, moved)
					}
				}
			})
		}
	}
}

// TestSinksErrors: sinks that do not give one logit to each query head are
// an error of the step, over dense and quantized caches alike.
func TestSinksErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		cache Cache
		want  string
	}{
		{"dense", NewPlain(), "mlx: scaled_dot_product_attention: [scaled_dot_product_attention] Received invalid shape for sinks (3)."},
		{"quantized", NewQuantized(8, 64), "kv: sinks [3] do not give one logit to each of the 4 query heads"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := mlx.NewGraph(nil)
			defer g.Close()
			defer c.cache.Free()
			q, k := g.Zeros([]int{1, 4, 3, 64}, mlx.Float32), g.Zeros([]int{1, 2, 3, 64}, mlx.Float32)
			mask := c.cache.Mask(g, 3, 0, false)
			Attend(g, q, c.cache.Update(g, k, k), Spec{Scale: 0.125, Mask: mask, Sinks: g.Zeros([]int{3}, mlx.Float32)})
			if err := g.Err(); err == nil || err.Error() != c.want {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}
