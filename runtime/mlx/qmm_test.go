package mlx

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// TestNativeQuantizedMatmul checks the shim's CPU kernel for quantized
// linear layers (qmm.cpp), where it applies, against mlx's dequantize
// followed by a float32 matmul: every bit width and group size it takes,
// float32 inputs with float32, float16 and bfloat16 scales (a GGUF
// checkpoint's are float16) and half-precision inputs with float32 scales,
// all of which mlx computes in float32; row counts that do and
// do not fill its blocks (1 to 8 take the packed values directly, 16 and 130
// the dequantized tiles), output widths that are not a multiple of 4, and an
// input that is a strided view.
//
// It runs once per instruction set this machine has (ISAs): on AVX-512
// machines the AVX2 kernels too, forced with SetNativeISA.
func TestNativeQuantizedMatmul(t *testing.T) {
	if !NativeQuantizedMatmul() {
		t.Skip("the native kernel is off here (no AVX2, FMA and F16C, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	for _, isa := range ProductISAs(t) {
		t.Run(isa.Name, func(t *testing.T) {
			defer isa.Set()()
			testNativeQuantizedMatmul(t)
		})
	}
}

// An instruction set of the native kernels, for tests that run each, and
// whether products of many rows of x run on the tile unit (Tiles, a
// NativeTiles mode: TilesOff but for the "amx" entry of ProductISAs).
type ISA struct {
	Name  string
	Level int
	Tiles int
}

// Set makes isa the process's instruction set and tile mode, and returns
// what puts the previous ones back.
func (isa ISA) Set() func() {
	level, tiles := SetNativeISA(isa.Level), SetNativeTiles(isa.Tiles)
	return func() { SetNativeTiles(tiles); SetNativeISA(level) }
}

// ISAs lists the instruction sets this machine runs (AVX2, and AVX-512
// where NativeISA reports it), the tile unit off; on one without AVX-512
// it says so in the test's log, so that a run's output shows which paths
// it covered.
func ISAs(t testing.TB) []ISA {
	out := []ISA{{"avx2", ISAAVX2, TilesOff}}
	if NativeISA() == ISAAVX512 {
		out = append(out, ISA{"avx512", ISAAVX512, TilesOff})
	} else {
		t.Logf("this machine does not run AVX-512 with VNNI (or ARCHGEN_MLX_ISA=avx2): its path is not covered here")
	}
	return out
}

// ProductISAs is ISAs and, where this machine has a tile unit, AVX-512
// with the tile unit at its default (TilesAuto): the instruction sets the
// tests of products run.
func ProductISAs(t testing.TB) []ISA {
	out := ISAs(t)
	if len(out) < 2 {
		return out
	}
	if tileUnitRuns() {
		out = append(out, ISA{"amx", ISAAVX512, TilesAuto})
	} else {
		t.Logf("this machine has no tile unit (Intel AMX with bfloat16): the tile path is not covered here")
	}
	return out
}

// tileTerms is the number of bfloat16 parts a product of m rows of x runs
// in on the tile unit at the current settings (0 where it runs elsewhere),
// as the kernel chooses them: float32 outputs of rows that would run on the
// panels; two terms for a bfloat16 W, three for the others but float32.
// block says W is
// block-quantized, quantized affine-quantized; neither is a float W.
func tileTerms(m int, wdt, out Dtype, quantized, block bool) int {
	mode := NativeTiles()
	if mode == TilesOff || out != Float32 {
		return 0
	}
	switch {
	case quantized || block:
		if m <= 8 {
			return 0
		}
	case wdt == Float32:
		if m <= 2 {
			return 0
		}
	default:
		if m <= 8 {
			return 0
		}
	}
	if mode != TilesAuto {
		return mode
	}
	switch {
	case !quantized && !block && wdt == Float32:
		return 0
	case !quantized && !block && wdt == BFloat16:
		return 2
	}
	return 3
}

func testNativeQuantizedMatmul(t *testing.T) {
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, dt := range [][2]Dtype{{Float32, Float32}, {Float32, Float16}, {Float32, BFloat16},
				{Float16, Float32}, {BFloat16, Float32}} {
				for _, m := range []int{1, 2, 3, 5, 16, 130} {
					name := fmt.Sprintf("b%d_g%d_x%s_s%s_m%d", bits, group, dt[0], dt[1], m)
					t.Run(name, func(t *testing.T) { checkQMM(t, bits, group, dt[0], dt[1], m, 70, 256, false) })
				}
			}
		}
	}
	t.Run("half", func(t *testing.T) {
		prev := setNativeQuantizedMatmulHalf(HalfQMMFloat32)
		defer setNativeQuantizedMatmulHalf(prev)
		for _, bits := range []int{4, 8} {
			for _, group := range []int{32, 64, 128} {
				for _, dt := range []Dtype{BFloat16, Float16} {
					for _, m := range []int{1, 2, 3, 5, 16, 130} {
						name := fmt.Sprintf("b%d_g%d_%s_m%d", bits, group, dt, m)
						t.Run(name, func(t *testing.T) { checkQMM(t, bits, group, dt, dt, m, 70, 256, false) })
					}
				}
			}
		}
	})
	t.Run("int8", func(t *testing.T) {
		prev := SetNativeQMVInt8(true)
		defer SetNativeQMVInt8(prev)
		for _, group := range []int{32, 64, 128} {
			for _, sdt := range []Dtype{Float32, Float16, BFloat16} {
				for _, m := range []int{1, 2, 3} {
					name := fmt.Sprintf("g%d_s%s_m%d", group, sdt, m)
					t.Run(name, func(t *testing.T) { checkQMM(t, 4, group, Float32, sdt, m, 70, 256, false) })
				}
			}
		}
	})
	t.Run("float_panels", func(t *testing.T) {
		// Where the integer panels do not run (switched off, or AVX2),
		// many rows run on the float32 panels.
		prev := SetNativeQMM16(false)
		defer SetNativeQMM16(prev)
		for _, bits := range []int{4, 8} {
			for _, m := range []int{9, 130} {
				t.Run(fmt.Sprintf("b%d_m%d", bits, m), func(t *testing.T) { checkQMM(t, bits, 64, Float32, BFloat16, m, 70, 256, false) })
			}
		}
	})
	// Rows of W whose bytes end inside a 64-byte load (K of 96 and 576),
	// and every block size of x's rows (8, 4, 2, 1) after whole blocks.
	for _, bits := range []int{4, 8} {
		for _, sh := range [][3]int{{15, 33, 96}, {23, 17, 576}, {9, 40, 64}} {
			name := fmt.Sprintf("tail_b%d_m%d_n%d_k%d", bits, sh[0], sh[1], sh[2])
			t.Run(name, func(t *testing.T) { checkQMM(t, bits, 32, Float32, Float16, sh[0], sh[1], sh[2], false) })
		}
	}
	t.Run("strided_input", func(t *testing.T) { checkQMM(t, 4, 32, Float32, Float16, 9, 33, 128, true) })
	t.Run("wide", func(t *testing.T) { checkQMM(t, 4, 64, Float32, Float32, 200, 1100, 512, false) })
}

func checkQMM(t *testing.T, bits, group int, xdt, sdt Dtype, m, n, k int, strided bool) {
	g := NewGraph(nil)
	defer g.Close()
	k1, k2 := g.RandomSplit(g.RandomKey(uint64(bits*1000 + group*10 + m)))
	w := g.Normal([]int{n, k}, Float32, 0, 0.2, k1)
	q := g.Quantize(w, group, bits)
	q.Scales = g.AsType(q.Scales, sdt)
	q.Biases = g.AsType(q.Biases, sdt)
	var x *Array
	if strided {
		x = g.Transpose(g.Normal([]int{k, m}, Float32, 0, 1, k2)) // [m, k], column-major
	} else {
		x = g.AsType(g.Normal([]int{m, k}, Float32, 0, 1, k2), xdt)
	}
	got := g.QuantizedMatmul(x, q, true)
	// The reference: the same quantized values dequantized by mlx from
	// float32 scales and biases (mlx dequantizes half-precision ones in
	// half precision), times the same input in float32.
	q32 := q
	q32.Scales, q32.Biases = g.AsType(q.Scales, Float32), g.AsType(q.Biases, Float32)
	wq := g.Dequantize(q32, Float32)
	want := g.Matmul(g.AsType(x, Float32), g.Transpose(wq))
	if err := g.Eval(got, want); err != nil {
		t.Fatal(err)
	}
	// mlx's dtype: float32 unless input and scales are both half
	// precision (the half-precision switch's cases).
	odt := Float32
	if xdt != Float32 && sdt != Float32 {
		odt = xdt
	}
	if got.Dtype() != odt {
		t.Fatalf("dtype %s, want %s", got.Dtype(), odt)
	}
	gv, err := g.AsType(got, Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	wv, err := want.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	// The same float32 products, summed in another order; a half-precision
	// output is then rounded once (unit roundoff ud).
	const tol = 1e-4
	ud := 0.0
	switch odt {
	case BFloat16:
		ud = math.Ldexp(1, -8)
	case Float16:
		ud = math.Ldexp(1, -11)
	}
	var slack []float64 // per element: what quantizing x to integers may add
	int8 := bits == 4 && m <= 2 && NativeQMVInt8()
	switch terms := tileTerms(m, sdt, odt, true, false); {
	case int8:
		slack = quantSlack(t, g, x, wq, m, n, k, 32, 127)
	case terms != 0:
		slack = tileSlack(t, g, x, wq, terms, false)
	case NativeQMV16() && (odt == Float32 || NativeQuantizedMatmulHalf() == HalfQMMFloat32):
		// Every row count rounds x to 16 bits per group of W.
		slack = quantSlack(t, g, x, wq, m, n, k, group, 32639)
	}
	differs := false
	for i := range wv {
		d := math.Abs(float64(gv[i] - wv[i]))
		bound := tol*(1+math.Abs(float64(wv[i]))) + ud*math.Abs(float64(wv[i]))
		differs = differs || d > bound
		if slack != nil {
			bound += slack[i]
		}
		if d > bound {
			t.Fatalf("element %d (row %d, col %d): %g, want %g (bound %g)", i, i/n, i%n, gv[i], wv[i], bound)
		}
	}
	if int8 && !differs {
		// The integer path must not be the float one under another name.
		t.Fatalf("the 8-bit integer path gave the float32 products to 1e-4; is it running?")
	}
}

// quantSlack bounds, per output, how far quantizing x to integers per
// block of values (levels steps on either side of zero, the step the
// block's largest magnitude over levels) can move x W^T: each x value
// moves by at most half its block's step, so an output moves by at most
// the sum over blocks of half the step times the block's sum of |W|, with
// 1e-6 of it for the float32 arithmetic of the step and the scaling.
// tileSlack is tileBound for each element of x [m, k] times w [n, k]^T
// (w's values in float32) on the tile unit in terms parts.
func tileSlack(t *testing.T, g *Graph, x, w *Array, terms int, wExact bool) []float64 {
	t.Helper()
	xv, err := g.AsType(x, Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	wv, err := g.AsType(w, Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	k := w.Dim(1)
	m, n := len(xv)/k, w.Dim(0)
	out := make([]float64, m*n)
	for r := 0; r < m; r++ {
		for c := 0; c < n; c++ {
			mag := 0.0
			for i := 0; i < k; i++ {
				mag += math.Abs(float64(xv[r*k+i]) * float64(wv[c*k+i]))
			}
			out[r*n+c] = tileBound(terms, k, wExact, mag)
		}
	}
	return out
}

func quantSlack(t *testing.T, g *Graph, x, wq *Array, m, n, k, block int, levels float64) []float64 {
	t.Helper()
	xv, err := g.AsType(x, Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	wv, err := wq.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, m*n)
	for r := 0; r < m; r++ {
		for c := 0; c < n; c++ {
			s := 0.0
			for b := 0; b < k; b += block {
				amax, wsum := 0.0, 0.0
				for i := b; i < b+block; i++ {
					amax = math.Max(amax, math.Abs(float64(xv[r*k+i])))
					wsum += math.Abs(float64(wv[c*k+i]))
				}
				s += amax / levels / 2 * wsum
			}
			out[r*n+c] = s * (1 + 1e-6)
		}
	}
	return out
}

// TestQuantizedMatmulHalfExact checks the default way of a quantized
// product with a bfloat16 or float16 input and scales of the same dtype,
// the native kernel in libmlx's rounding, against libmlx's own kernel in the
// same process: equal bit for bit, for every bit width and group size it
// takes, row counts of 1 to 9 and output widths that do not fill its 8
// lanes.
func TestQuantizedMatmulHalfExact(t *testing.T) {
	if !NativeQuantizedMatmul() {
		t.Skip("the native kernel is off here (no AVX2, FMA and F16C, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	prev := setNativeQuantizedMatmulHalf(HalfQMMExact)
	defer setNativeQuantizedMatmulHalf(prev)
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, dt := range []Dtype{BFloat16, Float16} {
				for _, mn := range [][2]int{{1, 70}, {2, 5}, {3, 19}, {9, 33}} {
					m, n := mn[0], mn[1]
					t.Run(fmt.Sprintf("b%d_g%d_%s_m%d_n%d", bits, group, dt, m, n), func(t *testing.T) {
						g := NewGraph(nil)
						defer g.Close()
						k1, k2 := g.RandomSplit(g.RandomKey(uint64(bits*100 + group + m)))
						q := g.Quantize(g.AsType(g.Normal([]int{n, 256}, Float32, 0, 0.2, k1), dt), group, bits)
						x := g.AsType(g.Normal([]int{m, 256}, Float32, 0, 1, k2), dt)
						ours := g.QuantizedMatmul(x, q, true)
						setNativeQuantizedMatmulHalf(HalfQMMLibmlx)
						theirs := g.QuantizedMatmul(x, q, true)
						setNativeQuantizedMatmulHalf(HalfQMMExact)
						if err := g.Eval(ours, theirs); err != nil {
							t.Fatal(err)
						}
						if ours.Dtype() != dt {
							t.Fatalf("dtype %s, want %s", ours.Dtype(), dt)
						}
						a, err := ours.Bits()
						if err != nil {
							t.Fatal(err)
						}
						b, err := theirs.Bits()
						if err != nil {
							t.Fatal(err)
						}
						for i := range b {
							if a[i] != b[i] {
								t.Fatalf("element %d: bits %#04x, libmlx's %#04x", i, a[i], b[i])
							}
						}
					})
				}
			}
		}
	}
}

// TestQuantizedMatmulHalfCloser shows why the half-precision switch is off
// by default, and that it is the better product: for a bfloat16 or float16
// input with scales of the same dtype, libmlx rounds to that dtype after
// every multiply and add, so its result lies farther from the exact
// product (the same quantized values and input in float32) than the native
// kernel's float32 sums rounded once. mlx-lm's parity references for the
// quantized levels are libmlx's products (parity/refgen/qdrift.py measures
// how far that moves their logits).
func TestQuantizedMatmulHalfCloser(t *testing.T) {
	if !NativeQuantizedMatmul() {
		t.Skip("the native kernel is off here (no AVX2, FMA and F16C, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	for _, dt := range []Dtype{BFloat16, Float16} {
		for _, k := range []int{64, 576} {
			t.Run(fmt.Sprintf("%s_k%d", dt, k), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				k1, k2 := g.RandomSplit(g.RandomKey(uint64(k)))
				q := g.Quantize(g.AsType(g.Normal([]int{96, k}, Float32, 0, 0.2, k1), dt), 64, 4)
				x := g.AsType(g.Normal([]int{4, k}, Float32, 0, 1, k2), dt)
				q32 := q
				q32.Scales, q32.Biases = g.AsType(q.Scales, Float32), g.AsType(q.Biases, Float32)
				exact := g.Matmul(g.AsType(x, Float32), g.Transpose(g.Dequantize(q32, Float32)))
				prev := setNativeQuantizedMatmulHalf(HalfQMMLibmlx)
				theirs := g.QuantizedMatmul(x, q, true)
				setNativeQuantizedMatmulHalf(HalfQMMFloat32)
				ours := g.QuantizedMatmul(x, q, true)
				setNativeQuantizedMatmulHalf(prev)
				if err := g.Eval(exact, theirs, ours); err != nil {
					t.Fatal(err)
				}
				ev, err := exact.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				errOf := func(a *Array) float64 {
					v, err := g.AsType(a, Float32).Float32s()
					if err != nil {
						t.Fatal(err)
					}
					m := 0.0
					for i := range ev {
						m = math.Max(m, math.Abs(float64(v[i]-ev[i])))
					}
					return m
				}
				eo, et := errOf(ours), errOf(theirs)
				t.Logf("largest error against the exact product: native %.3g, libmlx %.3g", eo, et)
				if eo >= et {
					t.Fatalf("the native kernel's error %g is not below libmlx's %g", eo, et)
				}
			})
		}
	}
}

// TestNativeLinear checks Linear, x W^T, on the kernel (float32, bfloat16
// and float16; W evaluated) and on mlx's where the kernel does not apply (W
// not yet evaluated), against mlx's matmul by W's transpose, for row counts
// that do and do not fill the kernel's blocks, widths that are not a
// multiple of 4, a strided x, and batched x.
func TestNativeLinear(t *testing.T) {
	if !NativeQuantizedMatmul() {
		t.Skip("the native kernel is off here (no AVX2, FMA and F16C, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	for _, isa := range ISAs(t) {
		for _, dt := range []Dtype{Float32, BFloat16, Float16} {
			t.Run(isa.Name+"/"+dt.String(), func(t *testing.T) {
				defer isa.Set()()
				checkLinear(t, dt)
			})
		}
	}
}

// TestPanelsAgreeAcrossISAs: the products of more rows than the direct
// kernels take run on packed panels, by micro-kernels of 8 lanes (AVX2)
// or 16 (AVX-512, two panels at a time) that add each output's products in
// the same order: the results are equal bit for bit, for every kind of W
// and numbers of rows that leave every remainder of a block.
func TestPanelsAgreeAcrossISAs(t *testing.T) {
	isas := ISAs(t)
	if len(isas) < 2 {
		t.Skip("one instruction set here: nothing to compare")
	}
	// 70 rows of W: two pairs of panels and a last one alone; 24: a pair
	// whose second panel is partly rows past W's
	for _, n := range []int{70, 24} {
		for _, wdt := range []Dtype{Float32, BFloat16, Float16} {
			for _, m := range []int{9, 11, 12, 13, 23, 24, 25, 130} {
				t.Run(fmt.Sprint(wdt, "_n", n, "_m", m), func(t *testing.T) {
					g := NewGraph(nil)
					defer g.Close()
					k1, k2 := g.RandomSplit(g.RandomKey(uint64(m)))
					w := g.AsType(g.Normal([]int{n, 136}, Float32, 0, 0.2, k1), wdt)
					x := g.Normal([]int{m, 136}, Float32, 0, 1, k2)
					if err := g.Eval(w, x); err != nil {
						t.Fatal(err)
					}
					var ys []*Array
					for _, isa := range isas {
						restore := isa.Set()
						y := g.Linear(x, w)
						if err := g.Eval(y); err != nil {
							t.Fatal(err)
						}
						restore()
						ys = append(ys, y)
					}
					sameArrays(t, "avx512 against avx2", ys[1], ys[0])
				})
			}
		}
	}
}

// checkLinear is TestNativeLinear for one dtype, over every shape class
// (one row of x, a few rows on the direct half-precision kernel, many rows
// on the panels, odd sizes, a batch axis, a strided x): float32 within 1e-4
// of libmlx's matmul; bfloat16 and float16 equal to it bit for bit.
func checkLinear(t *testing.T, dt Dtype) {
	for _, c := range []struct {
		shape   []int
		n, k    int
		strided bool
	}{{[]int{1, 64}, 70, 64, false}, {[]int{1, 576}, 1536, 576, false}, {[]int{1, 40}, 3, 40, false},
		{[]int{2, 64}, 5, 64, false}, {[]int{3, 136}, 33, 136, false}, {[]int{4, 72}, 19, 72, false},
		{[]int{5, 40}, 9, 40, false}, {[]int{8, 200}, 37, 200, false}, {[]int{7, 64}, 11, 64, true},
		{[]int{130, 256}, 70, 256, false}, {[]int{2, 7, 96}, 12, 96, false}, {[]int{9, 128}, 31, 128, true}} {
		t.Run(fmt.Sprint(c.shape, c.n, c.strided), func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			k1, k2 := g.RandomSplit(g.RandomKey(uint64(c.n*1000 + c.k)))
			w := g.AsType(g.Normal([]int{c.n, c.k}, Float32, 0, 0.2, k1), dt)
			if err := g.Eval(w); err != nil {
				t.Fatal(err)
			}
			var x *Array
			if c.strided {
				x = g.Transpose(g.AsType(g.Normal([]int{c.shape[1], c.shape[0]}, Float32, 0, 1, k2), dt))
			} else {
				x = g.AsType(g.Normal(c.shape, Float32, 0, 1, k2), dt)
			}
			want := g.Matmul(x, g.Transpose(w))
			native := g.Linear(x, w)
			// An unevaluated weight (w + 0) is not one the kernel takes.
			fallback := g.Linear(x, g.AddScalar(w, 0))
			if err := g.Eval(native, fallback, want); err != nil {
				t.Fatal(err)
			}
			if native.Dtype() != dt {
				t.Fatalf("dtype %s, want %s", native.Dtype(), dt)
			}
			wv, err := g.AsType(want, Float32).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			tol := 1e-4
			if dt != Float32 {
				tol = 0
			}
			for name, got := range map[string]*Array{"native": native, "fallback": fallback} {
				gv, err := g.AsType(got, Float32).Float32s()
				if err != nil {
					t.Fatal(err)
				}
				for i := range wv {
					if d := math.Abs(float64(gv[i] - wv[i])); d > tol*(1+math.Abs(float64(wv[i]))) {
						t.Fatalf("%s: element %d: %g, want %g", name, i, gv[i], wv[i])
					}
				}
			}
		})
	}
}

// BenchmarkQuantizedMatmul times the native kernel on SmolLM2-135M's MLP
// up-projection shape (1536 x 576, 4-bit, groups of 32, float16 scales as
// the GGUF's) for one row of x (a decode step's matrix-vector product,
// reported in GB/s of packed weights) and 512 rows (a prefill's product,
// in GFLOP/s), with libmlx's kernel beside it (ARCHGEN_MLX_NATIVE_QMM=0
// for a whole run).
func BenchmarkQuantizedMatmul(b *testing.B) {
	const n, k, chain = 1536, 576, 8
	for _, m := range []int{1, 4, 8, 12, 16, 32, 512} {
		b.Run(fmt.Sprintf("rows=%d", m), func(b *testing.B) {
			g := NewGraph(nil)
			defer g.Close()
			k1, k2 := g.RandomSplit(g.RandomKey(7))
			q := g.Quantize(g.Normal([]int{n, k}, Float32, 0, 0.2, k1), 32, 4)
			q.Scales = g.AsType(q.Scales, Float16)
			q.Biases = g.AsType(q.Biases, Float16)
			x := g.Normal([]int{m, k}, Float32, 0, 1, k2)
			if err := g.Eval(x, q.Weight, q.Scales, q.Biases); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				outs := make([]*Array, chain)
				for c := range outs {
					outs[c] = g.QuantizedMatmul(x, q, true)
				}
				if err := g.Eval(outs...); err != nil {
					b.Fatal(err)
				}
				for _, o := range outs {
					o.Free()
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N*chain)
			if m == 1 {
				b.ReportMetric(float64(n*k/2+n*k/32*4)/sec/1e9, "GB/s")
			} else {
				b.ReportMetric(2*float64(m*n*k)/sec/1e9, "GFLOP/s")
			}
		})
	}
}

// TestQMV16IsItsOwnPath checks that under each instruction set the decode
// products of 4- and 8-bit W do run on the 16-bit integer path: the same
// product with NativeQMV16 off (the float32 kernels on x as it is) must
// differ somewhere while both stay within checkQMM's bounds.
func TestQMV16IsItsOwnPath(t *testing.T) {
	for _, isa := range ISAs(t) {
		t.Run(isa.Name, func(t *testing.T) {
			defer isa.Set()()
			checkOwnPath(t, 2, "the integer path gave the float32 kernel's results", func(on bool) func() {
				prev := SetNativeQMV16(on)
				return func() { SetNativeQMV16(prev) }
			})
		})
	}
}

// TestQMM16IsItsOwnPath checks that on an AVX-512 machine products of
// many rows run on the 16-bit integer panels: the same product with them
// switched off (the float32 panels multiplying the same rounded x) must
// differ somewhere, in the last bits of the float32 sums, while both stay
// within checkQMM's bounds (testNativeQuantizedMatmul runs both).
func TestQMM16IsItsOwnPath(t *testing.T) {
	requireQMM16(t)
	checkOwnPath(t, 20, "the integer panels gave the float32 panels' results", setQMM16)
}

// requireQMM16 skips t where the integer panels do not run, and keeps the
// tile unit, which would take their products first, off while t runs.
func requireQMM16(t *testing.T) {
	t.Helper()
	if !NativeQMM16() {
		t.Skip("the integer panels do not run here (no AVX-512 with VNNI, ARCHGEN_MLX_ISA=avx2 or ARCHGEN_MLX_NATIVE_QMM16=0)")
	}
	if tileUnitRuns() && NativeTiles() != TilesOff {
		prev := SetNativeTiles(TilesOff)
		t.Cleanup(func() { SetNativeTiles(prev) })
	}
}

// setQMM16 turns the integer panels on or off and returns what restores
// the setting.
func setQMM16(on bool) func() {
	prev := SetNativeQMM16(on)
	return func() { SetNativeQMM16(prev) }
}

// checkOwnPath multiplies rows of x by a W of each bit width and group
// size with a path on and off (set turns it and returns what restores the
// setting), and fails with what where both give the same bits.
func checkOwnPath(t *testing.T, rows int, what string, set func(on bool) func()) {
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			t.Run(fmt.Sprintf("b%d_g%d", bits, group), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				k1, k2 := g.RandomSplit(g.RandomKey(uint64(bits + group)))
				q := g.Quantize(g.Normal([]int{64, 512}, Float32, 0, 0.2, k1), group, bits)
				x := g.Normal([]int{rows, 512}, Float32, 0, 1, k2)
				if err := g.Eval(x, q.Weight, q.Scales, q.Biases); err != nil {
					t.Fatal(err)
				}
				pathDiffers(t, what, set, func() ([]float32, error) { return g.QuantizedMatmul(x, q, true).Float32s() })
			})
		}
	}
}

// pathDiffers computes product with a path on and then off (set turns it
// and returns what restores the setting), and fails with what where both
// give the same bits.
func pathDiffers(t *testing.T, what string, set func(on bool) func(), product func() ([]float32, error)) {
	t.Helper()
	var outs [2][]float32
	for i, on := range []bool{true, false} {
		restore := set(on)
		v, err := product()
		restore()
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = v
	}
	if slices.Equal(outs[0], outs[1]) {
		t.Fatalf("%s bit for bit; is it running?", what)
	}
}

// TestLinearHalfWeights: a float32 x against a bfloat16 or float16 W (the
// default float32 compute on a half-precision checkpoint, W kept as
// stored) runs on archgen's kernel, alone and grouped, comes out float32,
// and equals libmlx's float32 matmul of x and W widened (which is exact)
// to float32 rounding, over every shape class of checkLinear; grouped
// products of Ws of two dtypes fall back to one product each.
func TestLinearHalfWeights(t *testing.T) {
	if !NativeQuantizedMatmul() {
		t.Skip("the native kernel is off here (no AVX2, FMA and F16C, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	for _, isa := range ProductISAs(t) {
		for _, dt := range []Dtype{BFloat16, Float16} {
			for _, c := range []struct {
				shape   []int
				n, k    int
				strided bool
			}{{[]int{1, 64}, 70, 64, false}, {[]int{1, 576}, 1536, 576, false}, {[]int{1, 40}, 3, 40, false},
				{[]int{2, 64}, 5, 64, false}, {[]int{3, 136}, 33, 136, false}, {[]int{4, 72}, 19, 72, false},
				{[]int{5, 40}, 9, 40, false}, {[]int{8, 200}, 37, 200, false}, {[]int{7, 64}, 11, 64, true},
				{[]int{130, 256}, 70, 256, false}, {[]int{2, 7, 96}, 12, 96, false}, {[]int{2, 128}, 31, 128, true}} {
				t.Run(fmt.Sprint(isa.Name, "/", dt, c.shape, c.n, c.strided), func(t *testing.T) {
					defer isa.Set()()
					g := NewGraph(nil)
					defer g.Close()
					k1, k2 := g.RandomSplit(g.RandomKey(uint64(c.n*1000 + c.k)))
					w := g.AsType(g.Normal([]int{c.n, c.k}, Float32, 0, 0.2, k1), dt)
					w2 := g.AsType(g.Normal([]int{c.n + 8, c.k}, Float32, 0, 0.2, k2), dt)
					w32 := g.AsType(w2, Float32)
					if err := g.Eval(w, w2, w32); err != nil {
						t.Fatal(err)
					}
					var x *Array
					if c.strided {
						x = g.Transpose(g.Normal([]int{c.shape[1], c.shape[0]}, Float32, 0, 1, k2))
					} else {
						x = g.Normal(c.shape, Float32, 0, 1, k2)
					}
					got := g.Linear(x, w)
					grouped := g.Linears(x, []*Array{w, w2})
					mixed := g.Linears(x, []*Array{w, w32})
					if name := got.primitiveName(); name != "ArchgenLinear" {
						t.Fatalf("primitive %q, want archgen's linear", name)
					}
					if name := grouped[0].primitiveName(); name != "ArchgenLinears" {
						t.Fatalf("grouped: primitive %q, want archgen's grouped products", name)
					}
					if name := mixed[0].primitiveName(); name == "ArchgenLinears" {
						t.Fatalf("Ws of two dtypes grouped as one op (%q)", name)
					}
					if err := g.Eval(append(append([]*Array{got}, grouped...), mixed...)...); err != nil {
						t.Fatal(err)
					}
					for i, y := range []*Array{got, grouped[0], grouped[1], mixed[0], mixed[1]} {
						if y.Dtype() != Float32 {
							t.Fatalf("output %d: dtype %s, want float32", i, y.Dtype())
						}
					}
					near := func(what string, got *Array, w *Array) {
						t.Helper()
						want := g.Matmul(x, g.Transpose(g.AsType(w, Float32)))
						if err := g.Eval(want); err != nil {
							t.Fatal(err)
						}
						gv, err := got.Float32s()
						if err != nil {
							t.Fatal(err)
						}
						wv, err := want.Float32s()
						if err != nil {
							t.Fatal(err)
						}
						// On the tile unit, x and W in bfloat16 parts.
						var slack []float64
						if terms := tileTerms(x.Size()/c.k, w.Dtype(), Float32, false, false); terms != 0 {
							slack = tileSlack(t, g, x, w, terms, w.Dtype() == BFloat16)
						}
						for i := range wv {
							bound := 1e-5 * (1 + math.Abs(float64(wv[i])))
							if slack != nil {
								bound += slack[i]
							}
							if d := math.Abs(float64(gv[i] - wv[i])); d > bound {
								t.Fatalf("%s: element %d: %g, want %g", what, i, gv[i], wv[i])
							}
						}
					}
					near("alone", got, w)
					near("grouped, part 0", grouped[0], w)
					near("grouped, part 1", grouped[1], w2)
					near("two dtypes, part 0", mixed[0], w)
					near("two dtypes, part 1", mixed[1], w2)
				})
			}
		}
	}
}
