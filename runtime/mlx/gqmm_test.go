package mlx

import (
	"fmt"
	"math"
	"testing"
)

// nativeCase is one check of the native gather_qmm against libmlx's.
type nativeCase struct {
	mode        string
	bits, group int
	xdt, sdt    Dtype // x's dtype; the scales' and biases' (affine)
	tokens, k   int   // tokens, and experts per token
	sorted      bool  // mlx-lm's sorted form
	m           int   // rows per product (1 but for the lhs case)
	strided     bool  // x a transposed view
}

func (c nativeCase) String() string {
	return fmt.Sprintf("%s_b%d_g%d_x%s_s%s_t%d_k%d_sorted%v_m%d_strided%v", c.mode, c.bits, c.group,
		c.xdt, c.sdt, c.tokens, c.k, c.sorted, c.m, c.strided)
}

// TestNativeGatherQMM checks archgen's gather_qmm kernel (gqmm.cpp) against
// libmlx's gather_qmm on the same inputs in the same process (the switch
// flipped between the two): affine at every bit width (2, 3, 4, 5, 6, 8)
// and group size (32, 64, 128) with float32 input and float32, bfloat16 and
// float16 scales, bfloat16 and float16 input with float32 scales (every
// combination mlx computes in float32), mxfp4; one token (a decode step:
// each expert one row, multiplied from the packed values) and 40 tokens
// (experts of several rows, on dequantized panels), indices unsorted and
// sorted as mlx-lm sorts them, several rows per product, a strided input.
// Where mlx computes in a half type (bfloat16 or float16 input with scales
// of its dtype, and mxfp4 with a half-precision input), the kernel does
// libmlx's arithmetic in that type (the default half-precision mode) and
// must equal libmlx's results bit for bit: every bit width and group size,
// 1, 2 and 40 tokens, unsorted and sorted.
func TestNativeGatherQMM(t *testing.T) {
	if !NativeGatherQMM() {
		t.Skip("the native kernel is off here (no AVX2, FMA, F16C and BMI2, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	prev := setNativeQuantizedMatmulHalf(HalfQMMExact)
	defer setNativeQuantizedMatmulHalf(prev)
	var cases []nativeCase
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, dt := range [][2]Dtype{{Float32, Float32}, {Float32, BFloat16}, {Float32, Float16},
				{BFloat16, Float32}, {Float16, Float32}} {
				for _, tk := range [][2]int{{1, 4}, {40, 2}} {
					cases = append(cases, nativeCase{"affine", bits, group, dt[0], dt[1], tk[0], tk[1], false, 1, false})
				}
			}
			cases = append(cases, nativeCase{"affine", bits, group, Float32, Float32, 40, 2, true, 1, false})
			for _, dt := range []Dtype{BFloat16, Float16} {
				// 2 tokens of 4 experts: experts of one and of two rows.
				for _, tk := range [][2]int{{1, 4}, {2, 4}, {40, 2}} {
					for _, sorted := range []bool{false, true} {
						cases = append(cases, nativeCase{"affine", bits, group, dt, dt, tk[0], tk[1], sorted, 1, false})
					}
				}
			}
		}
	}
	for _, dt := range []Dtype{BFloat16, Float16} {
		cases = append(cases, nativeCase{"mxfp4", 4, 32, dt, Uint8, 40, 2, true, 1, false},
			nativeCase{"affine", 4, 64, dt, dt, 3, 2, false, 5, false},
			nativeCase{"affine", 4, 64, dt, dt, 7, 2, false, 1, true})
	}
	for _, dt := range []Dtype{Float32, BFloat16, Float16} {
		for _, tk := range [][2]int{{1, 4}, {40, 2}} {
			cases = append(cases, nativeCase{"mxfp4", 4, 32, dt, Uint8, tk[0], tk[1], false, 1, false})
		}
	}
	cases = append(cases,
		nativeCase{"mxfp4", 4, 32, Float32, Uint8, 40, 2, true, 1, false},
		nativeCase{"affine", 4, 64, Float32, Float32, 3, 2, false, 5, false},
		nativeCase{"affine", 4, 64, Float32, Float16, 7, 2, false, 1, true},
		nativeCase{"affine", 4, 64, BFloat16, BFloat16, 5, 2, false, 1, false},
		nativeCase{"affine", 8, 32, Float16, Float16, 5, 2, false, 1, false},
	)
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) { checkNativeGatherQMM(t, c) })
	}
}

func checkNativeGatherQMM(t *testing.T, c nativeCase) {
	const E, K, N = 8, 256, 42
	g := NewGraph(nil)
	defer g.Close()
	seed := uint64(c.bits*1000 + c.group*10 + c.tokens)
	x, idx := moeInputs(g, seed, c.tokens, c.k, E, K, c.xdt)
	if c.strided {
		// The same values, laid out column-major.
		x = g.Reshape(g.Transpose(g.Contiguous(g.Transpose(g.Reshape(x, c.tokens, K)))), c.tokens, 1, 1, K)
	}
	var lhs *Array
	if c.m > 1 {
		// Several rows per product: x [tokens, m, K], each product takes
		// the rows of one token (lhs) and one expert (rhs).
		x = g.AsType(g.Normal([]int{c.tokens, c.m, K}, Float32, 0, 1, g.RandomKey(seed+1)), c.xdt)
		lhs = g.AsType(g.Remainder(g.Arange(0, float64(c.tokens*c.k), 1, Int32), g.Scalar(float64(c.tokens), Int32)), Uint32)
		idx = g.Flatten(idx, 0, -1)
	}
	w := g.Normal([]int{E, N, K}, Float32, 0, 0.2, g.RandomKey(seed+2))
	q := g.QuantizeMode(w, c.group, c.bits, c.mode)
	if c.mode == "affine" {
		q.Scales, q.Biases = g.AsType(q.Scales, c.sdt), g.AsType(q.Biases, c.sdt)
	}
	ids := idx
	var order *Array
	if c.sorted {
		flat := g.Flatten(idx, 0, -1)
		order = g.Argsort(flat, 0)
		x = g.Take(g.Flatten(x, 0, -3), g.FloorDivide(order, g.Scalar(float64(c.k), Int32)), 0)
		ids = g.Take(flat, order, 0)
	}
	if err := g.Eval(x, ids, q.Weight, q.Scales); err != nil {
		t.Fatal(err)
	}
	run := func(native bool) []float32 {
		prev := setNativeGatherQMM(native)
		defer setNativeGatherQMM(prev)
		y := g.GatherQMM(x, q, lhs, ids, true, c.sorted)
		if err := g.Eval(y); err != nil {
			t.Fatal(err)
		}
		return values(t, g, y)
	}
	half := c.xdt != Float32 && c.sdt != Float32 // mlx computes in c.xdt
	if half {
		// Bit for bit, and the kernel really ran (libmlx's own primitive
		// is GatherQMM).
		prev := setNativeGatherQMM(true)
		y := g.GatherQMM(x, q, lhs, ids, true, c.sorted)
		setNativeGatherQMM(prev)
		if name := y.primitiveName(); name != "ArchgenGatherQMM" {
			t.Fatalf("primitive %q, want archgen's", name)
		}
		if y.Dtype() != c.xdt {
			t.Fatalf("dtype %s, want %s", y.Dtype(), c.xdt)
		}
		a, b := runBits(t, g, x, q, lhs, ids, c.sorted, true), runBits(t, g, x, q, lhs, ids, c.sorted, false)
		for i := range b {
			if a[i] != b[i] {
				t.Fatalf("element %d (row %d, col %d): bits %#04x, libmlx's %#04x", i, i/N, i%N, a[i], b[i])
			}
		}
		return
	}
	got, want := run(true), run(false)
	tol := 1e-4 // float32 sums in another order
	slack := 0.0
	if NativeQMM16() && c.mode == "affine" && (c.bits == 4 || c.bits == 8) {
		// Experts of more than 8 rows multiply x rounded to 16 bits per
		// group (the integer panels): each value moves by at most half its
		// group's step, the group's largest magnitude over 32639, so an
		// output by at most the sum over groups of that times the group's
		// size and W's largest magnitude (over every row of x and W here).
		slack = gridSlack(t, g, x, g.Dequantize(q, Float32), c.group)
	}
	for i := range want {
		d := math.Abs(float64(got[i] - want[i]))
		if !(d <= tol*(1+math.Abs(float64(want[i])))+slack) {
			t.Fatalf("element %d (row %d, col %d): %g, want %g (libmlx)", i, i/N, i%N, got[i], want[i])
		}
	}
}

// gridSlack bounds how far rounding x to 16 bits per group of W moves any
// product of a row of x by a row of w: the sum over groups of the
// group's largest magnitude in x over 2 * 32639, times the group's size
// and w's largest magnitude (with 1% for w's values as mlx dequantizes
// them, in the scales' precision).
func gridSlack(t *testing.T, g *Graph, x, w *Array, group int) float64 {
	t.Helper()
	xv := values(t, g, x)
	wv := values(t, g, w)
	K := x.Dim(-1)
	wmax := 0.0
	for _, v := range wv {
		wmax = math.Max(wmax, math.Abs(float64(v)))
	}
	s := 0.0
	for g0 := 0; g0 < K; g0 += group {
		amax := 0.0
		for r := 0; r < len(xv)/K; r++ {
			for k := g0; k < g0+group; k++ {
				amax = math.Max(amax, math.Abs(float64(xv[r*K+k])))
			}
		}
		s += amax / 32639 / 2 * float64(group) * wmax
	}
	return s * 1.01
}

// TestGatherQMM16IsItsOwnPath: on an AVX-512 machine, experts with more
// than 8 rows of x run on the integer panels (checkNativeGatherQMM holds
// them to libmlx's values): switched off, the float32 panels multiply x
// unrounded, and the two must differ somewhere.
func TestGatherQMM16IsItsOwnPath(t *testing.T) {
	if !NativeGatherQMM() {
		t.Skip("the native kernel is off here (no AVX2, FMA, F16C and BMI2, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	requireQMM16(t)
	for _, bits := range []int{4, 8} {
		t.Run(fmt.Sprint("b", bits), func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			x, idx := moeInputs(g, 5, 40, 2, 4, 256, Float32) // 80 rows over 4 experts
			q := g.QuantizeMode(g.Normal([]int{4, 42, 256}, Float32, 0, 0.2, g.RandomKey(6)), 64, bits, "affine")
			pathDiffers(t, "the integer panels gave the float32 panels' results", setQMM16, func() ([]float32, error) {
				return g.GatherQMM(x, q, nil, idx, true, false).Float32s()
			})
		})
	}
}

// runBits is gather_qmm's result as raw 16-bit values, with archgen's
// kernel (native) or libmlx's.
func runBits(t *testing.T, g *Graph, x *Array, q Quantized, lhs, ids *Array, sorted, native bool) []uint16 {
	t.Helper()
	prev := setNativeGatherQMM(native)
	defer setNativeGatherQMM(prev)
	y := g.GatherQMM(x, q, lhs, ids, true, sorted)
	if err := g.Eval(y); err != nil {
		t.Fatal(err)
	}
	v, err := y.Bits()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestNativeGatherQMMSwitch checks that the switch turns the kernel off and
// on again.
func TestNativeGatherQMMSwitch(t *testing.T) {
	if !NativeGatherQMM() {
		t.Skip("the native kernel is off here")
	}
	prev := setNativeGatherQMM(false)
	if NativeGatherQMM() || !prev {
		t.Fatal("the switch did not turn the kernel off")
	}
	setNativeGatherQMM(true)
	if !NativeGatherQMM() {
		t.Fatal("the switch did not turn the kernel on")
	}
}

// TestNativeGatherQMMHalfModes checks that the half-precision mode of
// quantized_matmul governs gather_qmm alike, on a bfloat16 input with
// bfloat16 scales: HalfQMMLibmlx (ARCHGEN_MLX_NATIVE_QMM_HALF=0) gives
// libmlx's own primitive; HalfQMMFloat32 (=f32) archgen's float32 kernel,
// whose results are those of the same values in float32 (the input and
// scales widened exactly) rounded once to bfloat16; HalfQMMExact (the
// default) archgen's primitive in libmlx's arithmetic.
func TestNativeGatherQMMHalfModes(t *testing.T) {
	if !NativeGatherQMM() {
		t.Skip("the native kernel is off here")
	}
	prev := setNativeQuantizedMatmulHalf(HalfQMMExact)
	defer setNativeQuantizedMatmulHalf(prev)
	const E, K, N = 8, 256, 42
	g := NewGraph(nil)
	defer g.Close()
	x, idx := moeInputs(g, 11, 40, 2, E, K, BFloat16)
	q := g.Quantize(g.Normal([]int{E, N, K}, Float32, 0, 0.2, g.RandomKey(12)), 64, 4)
	q.Scales, q.Biases = g.AsType(q.Scales, BFloat16), g.AsType(q.Biases, BFloat16)
	q32 := q
	q32.Scales, q32.Biases = g.AsType(q.Scales, Float32), g.AsType(q.Biases, Float32)
	if err := g.Eval(x, idx, q.Weight, q.Scales, q.Biases, q32.Scales, q32.Biases); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		mode int
		prim string
	}{{HalfQMMLibmlx, "GatherQMM"}, {HalfQMMFloat32, "ArchgenGatherQMM"}, {HalfQMMExact, "ArchgenGatherQMM"}} {
		setNativeQuantizedMatmulHalf(m.mode)
		y := g.GatherQMM(x, q, nil, idx, true, false)
		if got := y.primitiveName(); got != m.prim || y.Dtype() != BFloat16 {
			t.Fatalf("mode %d: primitive %q of %s, want %q of bfloat16", m.mode, got, y.Dtype(), m.prim)
		}
	}
	setNativeQuantizedMatmulHalf(HalfQMMFloat32)
	ours := g.GatherQMM(x, q, nil, idx, true, false)
	f32 := g.AsType(g.GatherQMM(g.AsType(x, Float32), q32, nil, idx, true, false), BFloat16)
	if err := g.Eval(ours, f32); err != nil {
		t.Fatal(err)
	}
	a, err := ours.Bits()
	if err != nil {
		t.Fatal(err)
	}
	b, err := f32.Bits()
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		if a[i] != b[i] {
			t.Fatalf("element %d: bits %#04x, the float32 product rounded: %#04x", i, a[i], b[i])
		}
	}
}

// TestNativeGatherQMMBadIndex checks that a product whose expert index
// lies outside the stack gets NaN rows from archgen's kernel, in float32
// and in bfloat16 alike, rather than a read out of bounds, and that the
// other products keep their values.
func TestNativeGatherQMMBadIndex(t *testing.T) {
	if !NativeGatherQMM() {
		t.Skip("the native kernel is off here")
	}
	prev := setNativeQuantizedMatmulHalf(HalfQMMExact)
	defer setNativeQuantizedMatmulHalf(prev)
	const E, K, N = 4, 128, 24
	for _, dt := range []Dtype{Float32, BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			x := g.AsType(g.Normal([]int{2, 1, 1, K}, Float32, 0, 1, g.RandomKey(21)), dt)
			q := g.Quantize(g.AsType(g.Normal([]int{E, N, K}, Float32, 0, 0.2, g.RandomKey(22)), dt), 64, 4)
			bad := FromSlice(g, []uint32{1, E + 3}, 2, 1)
			good := FromSlice(g, []uint32{1, 1}, 2, 1)
			y := g.GatherQMM(x, q, nil, bad, true, false)
			ref := g.GatherQMM(x, q, nil, good, true, false)
			if name := y.primitiveName(); name != "ArchgenGatherQMM" {
				t.Fatalf("primitive %q, want archgen's", name)
			}
			if err := g.Eval(y, ref); err != nil {
				t.Fatal(err)
			}
			got, want := values(t, g, y), values(t, g, ref)
			for i := range got {
				if i < N && got[i] != want[i] {
					t.Fatalf("element %d of the good product: %g, want %g", i, got[i], want[i])
				}
				if i >= N && !math.IsNaN(float64(got[i])) {
					t.Fatalf("element %d of the product with expert %d of %d: %g, want NaN", i, E+3, E, got[i])
				}
			}
		})
	}
}

// BenchmarkGatherQMM times one expert layer's product, archgen's kernel
// (native) beside libmlx's (libmlx), in one process, on OLMoE-1B-7B's
// expert shape (64 experts of 1024 x 2048, the up projection; 8 experts
// per token), 4-bit in groups of 64: float32 input and scales, and
// bfloat16 input and scales as mlx-community's checkpoints run (the
// native side then in libmlx's bfloat16 arithmetic, the default
// half-precision mode); one token (a decode step: 8 experts of one row)
// and 32 tokens sorted by expert as mlx-lm sorts them (256 rows over the
// experts they hit); and a 512-token prompt's (64 rows an expert, on the
// tile unit where the CPU has one; native only).
func BenchmarkGatherQMM(b *testing.B) {
	const E, N, K, k = 64, 1024, 2048, 8
	for _, dt := range []Dtype{Float32, BFloat16} {
		for _, tokens := range []int{1, 32, 512} {
			for _, native := range []bool{true, false} {
				side := "libmlx"
				if native {
					side = "native"
				}
				if tokens > 32 && !native {
					continue // libmlx's scalar kernel takes minutes a prompt
				}
				b.Run(fmt.Sprintf("dtype=%s/tokens=%d/%s", dt, tokens, side), func(b *testing.B) {
					if native && !NativeGatherQMM() {
						b.Skip("the native kernel is off here")
					}
					prev := setNativeGatherQMM(native)
					defer setNativeGatherQMM(prev)
					prevHalf := setNativeQuantizedMatmulHalf(HalfQMMExact)
					defer setNativeQuantizedMatmulHalf(prevHalf)
					g := NewGraph(nil)
					defer g.Close()
					x, idx := moeInputs(g, 5, tokens, k, E, K, dt)
					q := g.Quantize(g.AsType(g.Normal([]int{E, N, K}, Float32, 0, 0.02, g.RandomKey(6)), dt), 64, 4)
					sorted := tokens*k >= 64
					if sorted {
						flat := g.Flatten(idx, 0, -1)
						order := g.Argsort(flat, 0)
						x = g.Take(g.Flatten(x, 0, -3), g.FloorDivide(order, g.Scalar(k, Int32)), 0)
						idx = g.Take(flat, order, 0)
					}
					if err := g.Eval(x, idx, q.Weight, q.Scales, q.Biases); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						y := g.GatherQMM(x, q, nil, idx, true, sorted)
						if err := g.Eval(y); err != nil {
							b.Fatal(err)
						}
						y.Free()
					}
					b.StopTimer() // not the freeing of the weights
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(2*float64(tokens*k*N*K)/sec/1e9, "GFLOP/s")
				})
			}
		}
	}
}
