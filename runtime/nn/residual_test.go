package nn

import (
	"math"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// TestAddClipped: in float16 a residual sum past float16's range saturates
// at its largest finite value (a plain sum overflows to infinity); in
// float32 it is the plain sum.
func TestAddClipped(t *testing.T) {
	g := mlx.NewGraph(nil)
	defer g.Close()
	x32 := mlx.FromSlice(g, []float32{60000, -60000, 1.5}, 3)
	y32 := mlx.FromSlice(g, []float32{60000, -60000, 2.25}, 3)
	x16, y16 := g.AsType(x32, mlx.Float16), g.AsType(y32, mlx.Float16)
	clipped, plain, f32 := AddClipped(g, x16, y16), g.Add(x16, y16), AddClipped(g, x32, y32)
	if err := g.Eval(clipped, plain, f32); err != nil {
		t.Fatal(err)
	}
	if clipped.Dtype() != mlx.Float16 {
		t.Fatalf("dtype %s, want float16", clipped.Dtype())
	}
	got, _ := clipped.Float32s()
	if got[0] != 65504 || got[1] != -65504 || got[2] != 3.75 {
		t.Errorf("float16 clipped sums %v, want [65504 -65504 3.75]", got)
	}
	p, _ := plain.Float32s()
	if !math.IsInf(float64(p[0]), 1) {
		t.Errorf("a plain float16 sum of 60000 and 60000 is %v; the test assumes it overflows", p[0])
	}
	f, _ := f32.Float32s()
	if f[0] != 120000 || f[2] != 3.75 {
		t.Errorf("float32 sums %v, want plain sums", f)
	}
}
