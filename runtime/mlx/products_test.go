package mlx

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestQuantizedMatmuls: the products of one x by several quantized
// matrices, as one op, equal each matrix's own QuantizedMatmul bit for bit,
// under each instruction set, for decode's rows and a prefill's, every bit
// width and group size the kernel takes, float32 and half-precision
// arithmetic, and parts that a task of the kernel's threads holds together
// (a layer's q, k and v at SmolLM2-135M's widths, split over several tasks
// whose rows cross from one part into the next); and they are one op,
// archgen's.
func TestQuantizedMatmuls(t *testing.T) {
	if !NativeQuantizedMatmul() {
		t.Skip("the native kernel is off here (no AVX2, FMA and F16C, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	shapes := []struct {
		k, headDim int
		parts      []int
	}{
		{256, 2, []int{70, 24, 24}},     // one task: below the size worth splitting
		{576, 64, []int{576, 192, 192}}, // q, k, v: tasks cross the parts' edges
		{576, 128, []int{1536, 1536}},   // gate, up
	}
	for _, isa := range ProductISAs(t) {
		for _, bits := range []int{4, 8} {
			for _, group := range []int{32, 64, 128} {
				for _, dt := range [][2]Dtype{{Float32, Float32}, {Float32, BFloat16}, {BFloat16, BFloat16}, {Float16, Float16}} {
					for _, m := range []int{1, 3, 40} {
						for si, sh := range shapes {
							if sh.k%group != 0 || (si > 0 && (group != 64 || m == 3)) {
								continue
							}
							name := fmt.Sprintf("%s/b%d_g%d_x%s_s%s_m%d_k%d_%v", isa.Name, bits, group, dt[0], dt[1], m, sh.k, sh.parts)
							t.Run(name, func(t *testing.T) {
								defer isa.Set()()
								checkQuantizedMatmuls(t, bits, group, dt[0], dt[1], m, sh.k, sh.headDim, sh.parts)
							})
						}
					}
				}
			}
		}
	}
}

func checkQuantizedMatmuls(t *testing.T, bits, group int, xdt, sdt Dtype, m, k, headDim int, parts []int) {
	g := NewGraph(nil)
	defer g.Close()
	key := g.RandomKey(uint64(bits*1000 + group*10 + m))
	qs := make([]Quantized, len(parts))
	for i, n := range parts {
		var k1 *Array
		k1, key = g.RandomSplit(key)
		q := g.Quantize(g.Normal([]int{n, k}, Float32, 0, 0.2, k1), group, bits)
		q.Scales, q.Biases = g.AsType(q.Scales, sdt), g.AsType(q.Biases, sdt)
		qs[i] = q
		if err := g.Eval(q.Weight, q.Scales, q.Biases); err != nil {
			t.Fatal(err)
		}
	}
	b := 1 + min(m-1, 1) // two sequences beside each other, past decode's one row
	x := g.AsType(g.Normal([]int{b, m, k}, Float32, 0, 1, key), xdt)
	ys := g.QuantizedMatmuls(x, qs)
	heads := g.QuantizedMatmulsByHead(x, qs, headDim)
	for i := range qs {
		for _, y := range []*Array{ys[i], heads[i]} {
			if name := y.primitiveName(); name != "ArchgenQuantizedMatmuls" {
				t.Fatalf("part %d: primitive %q, want archgen's grouped products", i, name)
			}
		}
	}
	want := make([]*Array, len(qs))
	wantHeads := make([]*Array, len(qs))
	for i, q := range qs {
		want[i] = g.QuantizedMatmul(x, q, true)
		wantHeads[i] = g.Transpose(g.Reshape(want[i], b, m, parts[i]/headDim, headDim), 0, 2, 1, 3)
	}
	if err := g.Eval(append(append(ys, heads...), want...)...); err != nil {
		t.Fatal(err)
	}
	for i := range qs {
		sameArrays(t, fmt.Sprintf("part %d", i), ys[i], want[i])
		sameValues(t, g, fmt.Sprintf("part %d by heads", i), heads[i], wantHeads[i])
	}
}

// sameValues fails unless got and want have one shape and dtype and equal
// elements bit for bit, read in their logical order (whatever their
// strides).
func sameValues(t *testing.T, g *Graph, what string, got, want *Array) {
	t.Helper()
	// A copy in row-major order; adding zero would not keep -0 and NaN bits.
	gc, wc := g.Contiguous(got), g.Contiguous(want)
	if err := g.Eval(gc, wc); err != nil {
		t.Fatal(err)
	}
	sameArrays(t, what, gc, wc)
}

// sameArrays fails unless got and want have one shape and dtype and the
// same bytes.
func sameArrays(t *testing.T, what string, got, want *Array) {
	t.Helper()
	if fmt.Sprint(got.Shape()) != fmt.Sprint(want.Shape()) || got.Dtype() != want.Dtype() {
		t.Fatalf("%s: %s %v, want %s %v", what, got.Dtype(), got.Shape(), want.Dtype(), want.Shape())
	}
	gb, err := got.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	wb, err := want.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gb, wb) {
		for i := range gb {
			if gb[i] != wb[i] {
				t.Fatalf("%s: byte %d of %d differs from its own product's", what, i, len(gb))
			}
		}
	}
}

// TestLinears: the products of one x by several float weights, as one op,
// equal each weight's own Linear bit for bit, in float32, bfloat16 and
// float16, for decode's rows and a prefill's, under each instruction set.
func TestLinears(t *testing.T) {
	if !NativeQuantizedMatmul() {
		t.Skip("the native kernel is off here (no AVX2, FMA and F16C, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	for _, isa := range ISAs(t) {
		for _, dt := range []Dtype{Float32, BFloat16, Float16} {
			for _, m := range []int{1, 3, 40} {
				t.Run(fmt.Sprintf("%s/%s_m%d", isa.Name, dt, m), func(t *testing.T) {
					defer isa.Set()()
					g := NewGraph(nil)
					defer g.Close()
					key := g.RandomKey(uint64(m))
					var ws []*Array
					for _, n := range []int{576, 192, 192} {
						var k1 *Array
						k1, key = g.RandomSplit(key)
						ws = append(ws, g.AsType(g.Normal([]int{n, 576}, Float32, 0, 0.2, k1), dt))
					}
					if err := g.Eval(ws...); err != nil {
						t.Fatal(err)
					}
					b := 1 + min(m-1, 1)
					x := g.AsType(g.Normal([]int{b, m, 576}, Float32, 0, 1, key), dt)
					ys := g.Linears(x, ws)
					heads := g.LinearsByHead(x, ws, 64)
					for i := range ws {
						for _, y := range []*Array{ys[i], heads[i]} {
							if name := y.primitiveName(); name != "ArchgenLinears" {
								t.Fatalf("part %d: primitive %q, want archgen's grouped products", i, name)
							}
						}
					}
					var want []*Array
					for _, w := range ws {
						want = append(want, g.Linear(x, w))
					}
					if err := g.Eval(append(append(ys, heads...), want...)...); err != nil {
						t.Fatal(err)
					}
					for i, w := range ws {
						sameArrays(t, fmt.Sprintf("part %d", i), ys[i], want[i])
						wantHeads := g.Transpose(g.Reshape(want[i], b, m, w.Dim(0)/64, 64), 0, 2, 1, 3)
						sameValues(t, g, fmt.Sprintf("part %d by heads", i), heads[i], wantHeads)
					}
				})
			}
		}
	}
}

// TestProductsFallBack: matrices the kernel does not take together (a
// mode it does not run, scales of two dtypes, a weight not yet evaluated)
// still give each its own product, as separate ops; and matrices
// quantized differently are refused with an error that says so.
func TestProductsFallBack(t *testing.T) {
	g := NewGraph(nil)
	defer g.Close()
	k1, k2 := g.RandomSplit(g.RandomKey(5))
	w := g.Normal([]int{64, 128}, Float32, 0, 0.2, k1)
	x := g.Normal([]int{2, 128}, Float32, 0, 1, k2)
	a := g.Quantize(w, 64, 4)
	b := g.Quantize(w, 64, 4)
	b.Scales, b.Biases = g.AsType(b.Scales, BFloat16), g.AsType(b.Biases, BFloat16)
	fp := g.QuantizeMode(w, 32, 4, "mxfp4")
	if err := g.Eval(x, a.Weight, a.Scales, a.Biases, b.Scales, b.Biases, fp.Weight, fp.Scales); err != nil {
		t.Fatal(err)
	}
	check := func(what string, ys []*Array, want ...*Array) {
		t.Helper()
		if err := g.Eval(append(ys, want...)...); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			sameArrays(t, fmt.Sprintf("%s, part %d", what, i), ys[i], want[i])
		}
	}
	check("two dtypes of scales", g.QuantizedMatmuls(x, []Quantized{a, b}), g.QuantizedMatmul(x, a, true), g.QuantizedMatmul(x, b, true))
	check("mxfp4", g.QuantizedMatmuls(x, []Quantized{fp, fp}), g.QuantizedMatmul(x, fp, true), g.QuantizedMatmul(x, fp, true))
	x3 := g.Reshape(x, 1, 2, 128)
	byHeads := func(y *Array) *Array { return g.Contiguous(g.Transpose(g.Reshape(y, 1, 2, 4, 16), 0, 2, 1, 3)) }
	fh := g.QuantizedMatmulsByHead(x3, []Quantized{fp}, 16)
	check("mxfp4 by heads", []*Array{g.Contiguous(fh[0])}, byHeads(g.QuantizedMatmul(x3, fp, true)))
	lazy := g.Multiply(w, g.Scalar(2, Float32))
	check("a weight not evaluated", g.Linears(x, []*Array{w, lazy}), g.Linear(x, w), g.Linear(x, lazy))

	c := a
	c.Bits = 8
	refused := func(what, want string, f func(g *Graph) []*Array) {
		t.Helper()
		bad := NewGraph(nil)
		defer bad.Close()
		if err := bad.Eval(f(bad)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: error %v, want one saying %q", what, err, want)
		}
	}
	refused("bits", "quantized differently", func(g *Graph) []*Array { return g.QuantizedMatmuls(x, []Quantized{a, c}) })
	refused("two axes by heads", "three axes", func(g *Graph) []*Array { return g.QuantizedMatmulsByHead(x, []Quantized{a}, 16) })
	refused("heads that do not fit", "do not split into heads of 48", func(g *Graph) []*Array { return g.LinearsByHead(x3, []*Array{w}, 48) })
	refused("mxfp4 heads that do not fit", "do not split into heads of 48", func(g *Graph) []*Array { return g.QuantizedMatmulsByHead(x3, []Quantized{fp}, 48) })
}
