package nn

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// TestProducts: Products and ProductsByHead give what each layer's Apply
// gives (by heads: reshaped to [B, L, heads, head_dim] and transposed), bit
// for bit, for the kinds of layer a model holds: quantized with and
// without biases, float with and without, and a mix, which falls back to
// one product each.
func TestProducts(t *testing.T) {
	const in, headDim = 128, 16
	g := mlx.NewGraph(nil)
	defer g.Close()
	key := g.RandomKey(3)
	next := func() *mlx.Array {
		var k *mlx.Array
		key, k = g.RandomSplit(key)
		return k
	}
	linear := func(out int, quantized, bias bool) *Linear {
		l := &Linear{}
		w := g.Normal([]int{out, in}, mlx.Float32, 0, 0.2, next())
		if quantized {
			q := g.Quantize(w, 64, 4)
			l.Q = &q
		} else {
			l.Weight = w
		}
		if bias {
			l.Bias = g.Normal([]int{out}, mlx.Float32, 0, 1, next())
		}
		for _, a := range []*mlx.Array{l.Weight, l.Bias} {
			if a != nil {
				if err := g.Eval(a); err != nil {
					t.Fatal(err)
				}
			}
		}
		if l.Q != nil {
			if err := g.Eval(l.Q.Weight, l.Q.Scales, l.Q.Biases); err != nil {
				t.Fatal(err)
			}
		}
		return l
	}
	cases := []struct {
		name string
		ls   []*Linear
	}{
		{"quantized", []*Linear{linear(64, true, false), linear(32, true, false), linear(32, true, false)}},
		{"quantized with biases", []*Linear{linear(64, true, true), linear(32, true, true), linear(32, true, true)}},
		{"float", []*Linear{linear(64, false, false), linear(32, false, false)}},
		{"float with biases", []*Linear{linear(64, false, true), linear(32, false, true)}},
		{"a mix", []*Linear{linear(64, true, false), linear(32, false, false)}},
	}
	// a layer given twice, as values that are the keys' projection are
	qk, fk := linear(32, true, false), linear(32, false, false)
	cases = append(cases,
		struct {
			name string
			ls   []*Linear
		}{"quantized, keys as values", []*Linear{linear(64, true, false), qk, qk}},
		struct {
			name string
			ls   []*Linear
		}{"float, keys as values", []*Linear{linear(64, false, false), fk, fk}})
	for _, c := range cases {
		for _, L := range []int{1, 5} {
			t.Run(fmt.Sprintf("%s/L%d", c.name, L), func(t *testing.T) {
				x := g.Normal([]int{2, L, in}, mlx.Float32, 0, 1, next())
				got := Products(g, x, c.ls...)
				heads := ProductsByHead(g, x, headDim, c.ls...)
				for i, l := range c.ls {
					want := l.Apply(g, x)
					wantHeads := g.Transpose(g.Reshape(want, 2, L, want.Dim(-1)/headDim, headDim), 0, 2, 1, 3)
					same(t, g, fmt.Sprintf("layer %d", i), got[i], want)
					same(t, g, fmt.Sprintf("layer %d by heads", i), heads[i], wantHeads)
				}
				for i := 1; i < len(c.ls); i++ {
					if c.ls[i] == c.ls[i-1] && (got[i] != got[i-1] || heads[i] != heads[i-1]) {
						t.Errorf("layer %d, given again, was applied again", i)
					}
				}
			})
		}
	}
}

// same fails unless got and want have one shape and equal elements, bit
// for bit, in their logical order.
func same(t *testing.T, g *mlx.Graph, what string, got, want *mlx.Array) {
	t.Helper()
	gc, wc := g.Contiguous(got), g.Contiguous(want)
	if err := g.Eval(gc, wc); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(gc.Shape()) != fmt.Sprint(wc.Shape()) {
		t.Fatalf("%s: shape %v, want %v", what, gc.Shape(), wc.Shape())
	}
	gb, err := gc.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	wb, err := wc.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gb, wb) {
		t.Fatalf("%s: differs from the layer's own Apply", what)
	}
}
