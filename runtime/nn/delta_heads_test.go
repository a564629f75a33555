package nn_test

import (
	"math"
	"testing"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// TestGatedDeltaTiledHeads: the gated delta rule with value heads in tiled
// order (value head h reads key head h mod key heads, llama.cpp's order)
// gives the grouped order's outputs on the same values with the value
// heads moved to grouped order (h reads key head h / 2 of two value heads
// a key head), in float32 (the one-op kernel) and in bfloat16 (libmlx's
// ops).
func TestGatedDeltaTiledHeads(t *testing.T) {
	const B, L, hk, hv, dk, dv = 1, 5, 2, 4, 4, 3
	r := hv / hk
	// grouped[j] is the tiled head that is grouped head j: grouped head
	// kh*r + c is tiled head c*hk + kh (copy c of key head kh)
	grouped := make([]int32, hv)
	for kh := 0; kh < hk; kh++ {
		for c := 0; c < r; c++ {
			grouped[kh*r+c] = int32(c*hk + kh)
		}
	}
	for _, dt := range []mlx.Dtype{mlx.Float32, mlx.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			g := mlx.NewGraph(nil)
			defer g.Close()
			key := g.RandomKey(7)
			normal := func(shape ...int) *mlx.Array {
				var k *mlx.Array
				key, k = g.RandomSplit(key)
				return g.Normal(shape, mlx.Float32, 0, 1, k)
			}
			qk := normal(B, L, 2*hk*dk)
			v := normal(B, L, hv, dv)
			b, a := normal(B, L, hv), normal(B, L, hv)
			rate := g.Negative(g.Exp(normal(hv)))
			dtBias := normal(hv)
			idx := mlx.FromSlice(g, grouped, hv)
			regroup := func(x *mlx.Array, axis int) *mlx.Array { return g.Take(x, idx, axis) }
			cast := func(x *mlx.Array) *mlx.Array { return g.AsType(x, dt) }
			tiledQKV := g.Concatenate(-1, qk, g.Reshape(v, B, L, hv*dv))
			groupedQKV := g.Concatenate(-1, qk, g.Reshape(regroup(v, 2), B, L, hv*dv))
			h := nn.DeltaHeads{KeyHeads: hk, ValueHeads: hv, KeyDim: dk, ValueDim: dv}
			yg := nn.GatedDelta(g, kv.NewStates(1), 0, cast(groupedQKV), cast(regroup(b, 2)), cast(regroup(a, 2)),
				regroup(rate, 0), cast(regroup(dtBias, 0)), h)
			h.Tiled = true
			yt := nn.GatedDelta(g, kv.NewStates(1), 0, cast(tiledQKV), cast(b), cast(a), rate, cast(dtBias), h)
			yt = regroup(yt, 2)
			if err := g.Eval(yg, yt); err != nil {
				t.Fatal(err)
			}
			got, _ := g.AsType(yt, mlx.Float32).Float32s()
			want, _ := g.AsType(yg, mlx.Float32).Float32s()
			if len(got) != B*L*hv*dv || len(got) != len(want) {
				t.Fatalf("%d and %d outputs, want %d", len(got), len(want), B*L*hv*dv)
			}
			var worst float64
			for i := range got {
				worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
			}
			if worst != 0 {
				t.Errorf("tiled heads differ from grouped ones by up to %g", worst)
			}
			// and the order matters: the tiled outputs are not the grouped
			// ones unmoved
			h.Tiled = false
			same := nn.GatedDelta(g, kv.NewStates(1), 0, cast(tiledQKV), cast(b), cast(a), rate, cast(dtBias), h)
			if err := g.Eval(same); err != nil {
				t.Fatal(err)
			}
			plain, _ := g.AsType(regroup(same, 2), mlx.Float32).Float32s()
			var moved float64
			for i := range plain {
				moved = math.Max(moved, math.Abs(float64(plain[i]-want[i])))
			}
			if moved < 1e-3 {
				t.Errorf("reading the value heads grouped gives the tiled result (%g apart)", moved)
			}
		})
	}
}
