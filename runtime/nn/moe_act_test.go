package nn

import (
	"math"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// TestClampedSwiGLU runs experts with gpt-oss's clamped SwiGLU on values
// past the limit on both sides and checks each output against mlx-lm's
// formula (activations.swiglu_oai): g = min(gate, limit), u = clip(up,
// -limit, limit), (u + 1) * g * sigmoid(alpha * g), computed here in
// float64. The experts' gate and up are diagonal (expert 0: 2x and 1.5x,
// expert 1: -3x and -x) and down is the identity, so each output is one
// activation.
func TestClampedSwiGLU(t *testing.T) {
	const d, alpha, limit = 4, 1.702, 7.0
	g := mlx.NewGraph(nil)
	defer g.Close()
	diag := func(a, b float32) *mlx.Array {
		w := make([]float32, 2*d*d)
		for i := range d {
			w[i*d+i], w[d*d+i*d+i] = a, b
		}
		return mlx.FromSlice(g, w, 2, d, d)
	}
	gates, ups := [2]float64{2, -3}, [2]float64{1.5, -1}
	s := &SwitchGLU{
		Gate:  &Experts{Weight: diag(2, -3)},
		Up:    &Experts{Weight: diag(1.5, -1)},
		Down:  &Experts{Weight: diag(1, 1)},
		Act:   ActClampedSwiGLU,
		Alpha: alpha, Limit: limit,
	}
	xs := []float32{-6, -1, 0.5, 5, 4, -2.5, 3, -0.2}
	x := mlx.FromSlice(g, xs, 2, d)
	idx := mlx.FromSlice(g, []uint32{0, 1, 1, 0}, 2, 2)
	got, err := s.Apply(g, x, idx).Float32s() // [2 tokens, 2 experts, d]
	if err != nil {
		t.Fatal(err)
	}
	experts := []int{0, 1, 1, 0}
	clamped := 0
	for tok := range 2 {
		for k := range 2 {
			e := experts[tok*2+k]
			for i := range d {
				v := float64(xs[tok*d+i])
				gate, up := gates[e]*v, ups[e]*v
				if gate > limit || math.Abs(up) > limit {
					clamped++
				}
				gc, uc := math.Min(gate, limit), math.Max(-limit, math.Min(up, limit))
				want := (uc + 1) * gc / (1 + math.Exp(-alpha*gc))
				if at := (tok*2+k)*d + i; math.Abs(float64(got[at])-want) > 1e-5*math.Max(1, math.Abs(want)) {
					t.Errorf("token %d expert %d feature %d (gate %g, up %g): %g, want %g", tok, e, i, gate, up, got[at], want)
				}
			}
		}
	}
	if clamped < 4 {
		t.Fatalf("only %d values reach the limit; the test does not exercise the clamp", clamped)
	}
}
