package mlx

import (
	"fmt"
	"math"
	"testing"
)

// The kernels of fastops.h against libmlx's own fallbacks, computed in
// the same process on the same inputs (setNativeFastOps switches between
// them): every dtype, every shape class the forward passes build, and each
// instruction-set level the CPU has.

var fastDtypes = []Dtype{Float32, BFloat16, Float16}

// fastTol is how far a kernel's element may lie from libmlx's: float32
// sums in another order, or one unit in the last place of a half type where
// a sum of float32 products, rounded, lands on the other side of a rounding
// boundary.
func fastTol(dt Dtype) float64 {
	switch dt {
	case BFloat16:
		return 1.0 / 128
	case Float16:
		return 1.0 / 1024
	}
	return 2e-6
}

// withFast runs build with the native kernels on and off, and returns both
// results as float32.
func withFast(t *testing.T, build func(g *Graph) *Array) (native, fallback []float32, shape []int) {
	t.Helper()
	run := func(on bool) ([]float32, []int) {
		prev := setNativeFastOps(on)
		defer setNativeFastOps(prev)
		g := NewGraph(nil)
		defer g.Close()
		y := build(g)
		if err := g.Eval(y); err != nil {
			t.Fatal(err)
		}
		v, err := g.AsType(y, Float32).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Err(); err != nil {
			t.Fatal(err)
		}
		return v, y.Shape()
	}
	native, shape = run(true)
	fallback, fshape := run(false)
	if fmt.Sprint(shape) != fmt.Sprint(fshape) {
		t.Fatalf("shape %v, fallback's %v", shape, fshape)
	}
	return native, fallback, shape
}

// compareFast checks native against fallback within tol and reports how
// many elements differ at all.
func compareFast(t *testing.T, native, fallback []float32, tol float64) {
	t.Helper()
	if len(native) != len(fallback) {
		t.Fatalf("%d elements, fallback %d", len(native), len(fallback))
	}
	differ := 0
	for i := range fallback {
		g, w := float64(native[i]), float64(fallback[i])
		if g != w {
			differ++
		}
		if math.IsNaN(g) != math.IsNaN(w) || math.Abs(g-w) > tol*(1+math.Abs(w)) {
			t.Fatalf("element %d: %g, fallback %g", i, g, w)
		}
	}
	if differ > 0 {
		t.Logf("%d of %d elements differ from the fallback's (within %g)", differ, len(fallback), tol)
	}
}

// needFast skips a test where the native fast ops are off.
func needFast(t *testing.T) {
	if !NativeFastOps() {
		t.Skip("the native fast ops are off here (no AVX2, FMA and F16C, or ARCHGEN_MLX_NATIVE_FAST=0)")
	}
}

func randn(g *Graph, seed uint64, dt Dtype, shape ...int) *Array {
	return g.AsType(g.Normal(shape, Float32, 0, 1, g.RandomKey(seed)), dt)
}

func TestNativeNorms(t *testing.T) {
	needFast(t)
	for _, dt := range fastDtypes {
		for _, c := range []struct {
			name    string
			shape   []int
			w, b    bool
			layer   bool
			strided bool
			wdt     Dtype
		}{
			{"rms_decode", []int{1, 1, 576}, true, false, false, false, dt},
			{"rms_prefill", []int{1, 37, 576}, true, false, false, false, dt},
			{"rms_no_weight", []int{2, 5, 64}, false, false, false, false, dt},
			{"rms_strided", []int{3, 7, 96}, true, false, false, true, dt},
			{"rms_float32_weight", []int{1, 4, 128}, true, false, false, false, Float32},
			{"rms_odd_width", []int{3, 37}, true, false, false, false, dt},
			{"layer_affine", []int{1, 9, 576}, true, true, true, false, dt},
			{"layer_weight_only", []int{2, 3, 64}, true, false, true, false, dt},
			{"layer_bias_only", []int{2, 3, 64}, false, true, true, false, dt},
			{"layer_plain", []int{1, 33, 72}, false, false, true, true, dt},
		} {
			t.Run(fmt.Sprintf("%s_%s", c.name, dt), func(t *testing.T) {
				n := c.shape[len(c.shape)-1]
				native, fallback, _ := withFast(t, func(g *Graph) *Array {
					var x *Array
					if c.strided {
						s := append([]int{}, c.shape...)
						s[0], s[1] = s[1], s[0]
						x = g.Swapaxes(g.MultiplyScalar(randn(g, 1, dt, s...), 3), 0, 1)
					} else {
						x = g.MultiplyScalar(randn(g, 1, dt, c.shape...), 3)
					}
					var w, b *Array
					if c.w {
						w = g.AddScalar(randn(g, 2, c.wdt, n), 1)
					}
					if c.b {
						b = randn(g, 3, c.wdt, n)
					}
					if c.layer {
						return g.LayerNorm(x, w, b, 1e-5)
					}
					return g.RMSNorm(x, w, 1e-6)
				})
				compareFast(t, native, fallback, fastTol(dt))
			})
		}
	}
}

func TestNativeRoPE(t *testing.T) {
	needFast(t)
	for _, dt := range fastDtypes {
		for _, c := range []struct {
			name        string
			shape       []int // [B, H, L, D], or 3-D
			dims        int
			traditional bool
			base, scale float32
			freqs       bool
			offset      int
			offsets     []int32 // an array offset
			transposed  bool    // x is a [B, L, H, D] array's transpose
		}{
			{"decode", []int{1, 9, 1, 64}, 64, false, 10000, 1, false, 255, nil, true},
			{"prefill", []int{1, 9, 37, 64}, 64, false, 100000, 1, false, 0, nil, true},
			{"traditional", []int{1, 4, 5, 64}, 64, true, 10000, 1, false, 7, nil, false},
			{"partial", []int{1, 4, 5, 64}, 32, false, 10000, 1, false, 3, nil, false},
			{"partial_traditional", []int{2, 2, 3, 80}, 40, true, 10000, 1, false, 11, nil, false},
			{"scaled", []int{1, 2, 6, 32}, 32, false, 10000, 0.25, false, 100, nil, false},
			{"freqs", []int{1, 3, 4, 64}, 64, false, 0, 1, true, 4000, nil, true},
			{"array_offset", []int{1, 3, 2, 64}, 64, false, 10000, 1, false, 0, []int32{17}, false},
			{"batch_offsets", []int{3, 2, 2, 64}, 64, false, 10000, 1, false, 0, []int32{0, 5, 300}, true},
			{"three_dims", []int{4, 6, 32}, 32, false, 10000, 1, false, 9, nil, false},
			{"long_position", []int{1, 2, 1, 128}, 128, false, 500000, 1, false, 40000, nil, false},
		} {
			t.Run(fmt.Sprintf("%s_%s", c.name, dt), func(t *testing.T) {
				native, fallback, _ := withFast(t, func(g *Graph) *Array {
					var x *Array
					if c.transposed {
						s := append([]int{}, c.shape...)
						s[1], s[2] = s[2], s[1]
						x = g.Swapaxes(randn(g, 5, dt, s...), 1, 2)
					} else {
						x = randn(g, 5, dt, c.shape...)
					}
					r := &RoPE{Dims: c.dims, Traditional: c.traditional, Base: c.base, Scale: c.scale}
					if c.freqs {
						// Scaled frequencies, as a llama3-style rope makes them.
						f := make([]float32, c.dims/2)
						for i := range f {
							f[i] = float32(math.Pow(500000, float64(2*i)/float64(c.dims)) * (1 + float64(i%3)))
						}
						r.Freqs = FromSlice(g, f, len(f))
					}
					if c.offsets != nil {
						shape := []int{len(c.offsets)}
						if len(c.offsets) == 1 {
							shape = nil
						}
						return g.RoPEAt(x, r, FromSlice(g, c.offsets, shape...))
					}
					return g.RoPE(x, r, c.offset)
				})
				compareFast(t, native, fallback, fastTol(dt))
			})
		}
	}
}

// TestNativeSDPA checks the attention kernel against libmlx's for every
// dtype and the shapes and masks the forward passes build. It runs once
// per instruction set this machine has: on AVX-512 machines,
// float32 attention without a mask array runs each KV head's group of query
// heads together (attend_group512), and the AVX2 kernel is forced too;
// float32 prompts of 16 rows or more, causal or without a mask, run on
// the blocked kernels of either width (run_prefill).
func TestNativeSDPA(t *testing.T) {
	needFast(t)
	for _, isa := range ISAs(t) {
		t.Run(isa.Name, func(t *testing.T) {
			defer isa.Set()()
			testNativeSDPA(t)
		})
	}
}

func testNativeSDPA(t *testing.T) {
	for _, dt := range fastDtypes {
		for _, c := range []struct {
			name      string
			B, Hq, Hk int
			L, S, D   int
			mode      string // "", "causal", "bool", "additive", "window"
			sinks     bool
			strided   bool // keys and values a slice of a larger cache buffer
		}{
			{"decode", 1, 9, 3, 1, 256, 64, "", false, true},
			{"decode_long", 1, 9, 3, 1, 2048, 64, "", false, true},
			{"decode_mha", 1, 4, 4, 1, 33, 128, "", false, false},
			{"decode_group4", 1, 8, 2, 1, 70, 64, "", false, false},
			{"decode_mqa_d128", 1, 2, 1, 1, 45, 128, "", false, true},
			{"decode_group7", 1, 14, 2, 1, 90, 64, "", false, true}, // Qwen2.5-0.5B's heads
			{"prefill_group7_causal", 1, 14, 2, 20, 20, 64, "causal", false, false},
			{"decode_group3_d128", 1, 6, 2, 1, 40, 128, "", false, false},
			{"sinks_group5", 1, 10, 2, 1, 30, 64, "", true, false},
			{"prefill_causal", 1, 9, 3, 37, 37, 64, "causal", false, false},
			{"chunk_causal", 2, 4, 2, 16, 40, 64, "causal", false, true},
			{"more_queries_causal", 1, 2, 1, 5, 3, 32, "causal", false, false},
			{"prefill_long_causal", 1, 4, 2, 130, 130, 64, "causal", false, false},
			{"bool_mask", 2, 4, 2, 6, 20, 64, "bool", false, false},
			{"additive_mask", 1, 4, 1, 6, 20, 64, "additive", false, false},
			{"window", 1, 4, 2, 12, 12, 64, "window", false, false},
			{"sinks_decode", 1, 8, 2, 1, 50, 64, "", true, false},
			{"sinks_window", 1, 8, 2, 9, 9, 64, "window", true, false},
			{"odd_head_dim", 1, 3, 1, 3, 7, 40, "causal", false, false},
			// Prompts of float32 on the blocked path (run_prefill), and
			// beside it where it does not apply.
			{"prefill_llama1b_causal", 1, 32, 8, 300, 300, 64, "causal", false, false},
			{"chunk_offset_causal", 1, 8, 2, 100, 357, 64, "causal", false, true},
			{"prefill_d128_group2", 1, 4, 2, 50, 50, 128, "causal", false, false},
			{"prefill_no_mask", 1, 8, 2, 40, 90, 64, "", false, false},
			{"prefill_mha_odd_rows", 1, 3, 3, 37, 61, 32, "causal", false, false},
			{"prefill_batch2_group3", 2, 6, 2, 33, 47, 64, "causal", false, true},
			{"prefill_d48", 1, 4, 1, 20, 45, 48, "causal", false, false},
			{"prefill_small_one_thread", 1, 2, 1, 16, 20, 32, "causal", false, false},
			{"more_queries_long_causal", 1, 4, 2, 32, 16, 64, "causal", false, false},
			// A block of 16 query rows of which the first see no key
			// (read all of them) and the last see some.
			{"more_queries_mixed_block", 1, 4, 2, 40, 20, 64, "causal", false, false},
		} {
			t.Run(fmt.Sprintf("%s_%s", c.name, dt), func(t *testing.T) {
				native, fallback, _ := withFast(t, func(g *Graph) *Array {
					q := randn(g, 11, dt, c.B, c.Hq, c.L, c.D)
					var k, v *Array
					if c.strided {
						// A cache buffer with room past S, read up to S.
						k = g.Slice(randn(g, 12, dt, c.B, c.Hk, c.S+64, c.D), []int{0, 0, 0, 0}, []int{c.B, c.Hk, c.S, c.D})
						v = g.Slice(randn(g, 13, dt, c.B, c.Hk, c.S+64, c.D), []int{0, 0, 0, 0}, []int{c.B, c.Hk, c.S, c.D})
					} else {
						k = randn(g, 12, dt, c.B, c.Hk, c.S, c.D)
						v = randn(g, 13, dt, c.B, c.Hk, c.S, c.D)
					}
					scale := float32(1 / math.Sqrt(float64(c.D)))
					mask := NoMask
					switch c.mode {
					case "causal":
						mask = CausalMask
					case "bool":
						u := g.Uniform([]int{c.B, 1, c.L, c.S}, Float32, g.RandomKey(14))
						mask = MaskArray(g.Less(u, g.Scalar(0.7, Float32)))
					case "additive":
						mask = MaskArray(g.AsType(randn(g, 15, Float32, c.L, c.S), dt))
					case "window":
						// Query i sees keys i-3..i (a sliding window of 4).
						qi := g.ExpandDims(g.Arange(float64(c.S-c.L), float64(c.S), 1, Int32), 1)
						ki := g.ExpandDims(g.Arange(0, float64(c.S), 1, Int32), 0)
						mask = MaskArray(g.LogicalAnd(g.GreaterEqual(qi, ki), g.Less(g.Subtract(qi, ki), g.Scalar(4, Int32))))
					}
					var sinks *Array
					if c.sinks {
						sinks = randn(g, 16, dt, c.Hq)
					}
					return g.SDPASinks(q, k, v, scale, mask, sinks)
				})
				compareFast(t, native, fallback, fastTol(dt))
			})
		}
		// Keys and values read across their last axis (the transpose of
		// [B, H, D, S] buffers): the blocked path gathers them.
		t.Run(fmt.Sprintf("prefill_transposed_kv_%s", dt), func(t *testing.T) {
			const B, Hq, Hk, L, S, D = 1, 8, 2, 24, 70, 64
			native, fallback, _ := withFast(t, func(g *Graph) *Array {
				q := randn(g, 11, dt, B, Hq, L, D)
				k := g.Swapaxes(randn(g, 12, dt, B, Hk, D, S), 2, 3)
				v := g.Swapaxes(randn(g, 13, dt, B, Hk, D, S), 2, 3)
				return g.SDPA(q, k, v, 0.125, CausalMask)
			})
			compareFast(t, native, fallback, fastTol(dt))
		})
	}
}

// TestNativeSDPAHalfCache checks float32 queries attending over keys and
// values held in bfloat16 or float16 (a cache at the checkpoint's width
// under float32 compute): archgen's kernel reads them as stored and
// widens them exactly, so its output equals, bit for bit, its own over the
// keys and values cast to float32 first; libmlx (which promotes them)
// agrees within float32's tolerance. Under each instruction set: decode
// on the grouped kernel (keys read in place, strided buffers included),
// prompts on the blocked kernel, masks and sinks on the general one, and
// keys read across their last axis.
func TestNativeSDPAHalfCache(t *testing.T) {
	needFast(t)
	for _, isa := range ISAs(t) {
		t.Run(isa.Name, func(t *testing.T) {
			defer isa.Set()()
			for _, kvt := range []Dtype{BFloat16, Float16} {
				for _, c := range []struct {
					name       string
					B, Hq, Hk  int
					L, S, D    int
					mode       string // "", "causal", "bool"
					sinks      bool
					strided    bool // a slice of a larger cache buffer
					transposed bool // read across the last axis
				}{
					{"decode", 1, 9, 3, 1, 256, 64, "", false, true, false},
					{"decode_group8", 1, 32, 4, 1, 300, 64, "", false, false, false},
					{"decode_d128_group2", 1, 4, 2, 1, 70, 128, "", false, true, false},
					{"decode_odd_head_dim", 1, 4, 2, 1, 33, 40, "", false, false, false},
					{"sinks_decode", 1, 8, 2, 1, 50, 64, "", true, false, false},
					{"bool_mask", 2, 4, 2, 6, 20, 64, "bool", false, false, false},
					{"prefill_causal", 1, 8, 2, 40, 40, 64, "causal", false, false, false},
					{"chunk_offset_causal", 1, 8, 2, 100, 357, 64, "causal", false, true, false},
					{"small_causal", 1, 4, 2, 5, 9, 64, "causal", false, false, false},
					{"transposed_causal", 1, 8, 2, 24, 70, 64, "causal", false, false, true},
					{"transposed_decode", 1, 8, 2, 1, 70, 64, "", false, false, true},
				} {
					t.Run(fmt.Sprintf("%s_%s", c.name, kvt), func(t *testing.T) {
						build := func(g *Graph, widen bool) *Array {
							q := randn(g, 11, Float32, c.B, c.Hq, c.L, c.D)
							var k, v *Array
							switch {
							case c.strided:
								k = g.Slice(randn(g, 12, kvt, c.B, c.Hk, c.S+64, c.D), []int{0, 0, 0, 0}, []int{c.B, c.Hk, c.S, c.D})
								v = g.Slice(randn(g, 13, kvt, c.B, c.Hk, c.S+64, c.D), []int{0, 0, 0, 0}, []int{c.B, c.Hk, c.S, c.D})
							case c.transposed:
								k = g.Swapaxes(randn(g, 12, kvt, c.B, c.Hk, c.D, c.S), 2, 3)
								v = g.Swapaxes(randn(g, 13, kvt, c.B, c.Hk, c.D, c.S), 2, 3)
							default:
								k = randn(g, 12, kvt, c.B, c.Hk, c.S, c.D)
								v = randn(g, 13, kvt, c.B, c.Hk, c.S, c.D)
							}
							if widen {
								k, v = g.AsType(k, Float32), g.AsType(v, Float32)
							}
							mask := NoMask
							switch c.mode {
							case "causal":
								mask = CausalMask
							case "bool":
								u := g.Uniform([]int{c.B, 1, c.L, c.S}, Float32, g.RandomKey(14))
								mask = MaskArray(g.Less(u, g.Scalar(0.7, Float32)))
							}
							var sinks *Array
							if c.sinks {
								sinks = randn(g, 16, Float32, c.Hq)
							}
							return g.SDPASinks(q, k, v, float32(1/math.Sqrt(float64(c.D))), mask, sinks)
						}
						native, fallback, _ := withFast(t, func(g *Graph) *Array {
							y := build(g, false)
							if NativeFastOps() {
								if name := y.primitiveName(); name != "ArchgenSDPA" {
									t.Fatalf("primitive %q, want archgen's", name)
								}
							}
							return y
						})
						wide, _, _ := withFast(t, func(g *Graph) *Array { return build(g, true) })
						for i := range wide {
							if math.Float32bits(native[i]) != math.Float32bits(wide[i]) {
								t.Fatalf("[%d] = %g over %s keys and values, %g over them widened first", i, native[i], kvt, wide[i])
							}
						}
						compareFast(t, native, fallback, fastTol(Float32))
					})
				}
			}
		})
	}
}

// TestNativeFastOpsSwitch checks that the switch turns the kernels off: a
// graph built with them off is libmlx's own.
func TestNativeFastOpsSwitch(t *testing.T) {
	if !NativeFastOps() {
		t.Skip("the native fast ops are off here")
	}
	prev := setNativeFastOps(false)
	if NativeFastOps() {
		t.Fatal("still on after turning off")
	}
	setNativeFastOps(prev)
	if !NativeFastOps() {
		t.Fatal("off after turning back on")
	}
}

// BenchmarkFastOps times, per op, a chain of 30 of them (as a decode step
// of a 30-layer model has) evaluated at once, on the decode shapes of
// SmolLM2-135M, with the native kernels and with libmlx's fallbacks; an
// elementwise add is the yardstick of one libmlx op.
func BenchmarkFastOps(b *testing.B) {
	const chain = 30
	type op struct {
		name  string
		build func(g *Graph, x *Array, kv [2]*Array) *Array
		shape []int
	}
	rope := &RoPE{Dims: 64, Base: 100000, Scale: 1}
	ops := []op{
		{"add", func(g *Graph, x *Array, _ [2]*Array) *Array { return g.Add(x, x) }, []int{1, 1, 576}},
		{"rms_norm", func(g *Graph, x *Array, _ [2]*Array) *Array { return g.RMSNorm(x, nil, 1e-5) }, []int{1, 1, 576}},
		{"rope", func(g *Graph, x *Array, _ [2]*Array) *Array { return g.RoPE(x, rope, 255) }, []int{1, 9, 1, 64}},
		{"sdpa_256", func(g *Graph, x *Array, kv [2]*Array) *Array { return g.SDPA(x, kv[0], kv[1], 0.125, NoMask) }, []int{1, 9, 1, 64}},
		{"sdpa_2048", func(g *Graph, x *Array, kv [2]*Array) *Array { return g.SDPA(x, kv[0], kv[1], 0.125, NoMask) }, []int{1, 9, 1, 64}},
	}
	for _, dt := range []Dtype{Float32, BFloat16} {
		for _, o := range ops {
			for _, native := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/native=%v", o.name, dt, native)
				b.Run(name, func(b *testing.B) {
					prev := setNativeFastOps(native)
					defer setNativeFastOps(prev)
					g := NewGraph(nil)
					defer g.Close()
					S := 256
					if o.name == "sdpa_2048" {
						S = 2048
					}
					x0 := randn(g, 1, dt, o.shape...)
					kv := [2]*Array{randn(g, 2, dt, 1, 3, S, 64), randn(g, 3, dt, 1, 3, S, 64)}
					if err := g.Eval(x0, kv[0], kv[1]); err != nil {
						b.Fatal(err)
					}
					g.Keep(x0, kv[0], kv[1])
					defer func() { x0.Free(); kv[0].Free(); kv[1].Free() }()
					g.Reset()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						x := x0
						for j := 0; j < chain; j++ {
							x = o.build(g, x, kv)
						}
						if err := g.Eval(x); err != nil {
							b.Fatal(err)
						}
						g.Reset()
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chain)/1e3, "us/op")
				})
			}
		}
	}
}

// TestNativeRoPETable checks that the cos and sin table one rope call
// leaves for the next is used only when the next rotates the same
// positions by the same frequencies: ropes of one graph at the same and
// at other offsets, bases, scales and lengths, against the fallback's.
func TestNativeRoPETable(t *testing.T) {
	needFast(t)
	native, fallback, _ := withFast(t, func(g *Graph) *Array {
		x := randn(g, 21, Float32, 1, 2, 3, 64)
		a := &RoPE{Dims: 64, Base: 10000, Scale: 1}
		b := &RoPE{Dims: 64, Base: 500000, Scale: 1}
		c := &RoPE{Dims: 64, Base: 10000, Scale: 0.5}
		parts := []*Array{g.RoPE(x, a, 5), g.RoPE(x, a, 5), g.RoPE(x, a, 6), g.RoPE(x, b, 6),
			g.RoPE(x, c, 6), g.RoPE(g.Slice(x, []int{0, 0, 0, 0}, []int{1, 2, 2, 64}), c, 6)}
		for i, p := range parts {
			parts[i] = g.Reshape(p, -1)
		}
		return g.Concatenate(0, parts...)
	})
	compareFast(t, native, fallback, fastTol(Float32))
}

// TestNativeSwiGLU checks SiLU and SwiGLU's one-op kernel against libmlx's
// x * sigmoid(x) (times up) bit for bit, under each instruction set: random
// values at several scales, lengths that leave a tail, views whose rows or
// last axis are strided, and the special values of its exp (the cutoffs at
// +-88, the points where x log2(e) lies on a half, infinities, NaN, -0).
func TestNativeSwiGLU(t *testing.T) {
	needFast(t)
	special := []float32{0, float32(math.Copysign(0, -1)), 88, -88, 87.99999, -87.99999, 88.00001, -88.00001,
		100, -100, 1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		1e-30, -1e-30, 1e-45, -1e-45}
	for k := 0; k < 64; k++ {
		// x log2(e) near k + 1/2, where rounding to the exponent turns.
		x := (float32(k) + 0.5) / 1.442695
		for _, v := range []float32{x, math.Nextafter32(x, 0), math.Nextafter32(x, 200)} {
			special = append(special, v, -v)
		}
	}
	for _, isa := range ISAs(t) {
		t.Run(isa.Name, func(t *testing.T) {
			defer isa.Set()()
			cases := []struct {
				name  string
				build func(g *Graph) (gate, up *Array)
			}{
				{"decode", func(g *Graph) (*Array, *Array) {
					return g.MultiplyScalar(randn(g, 1, Float32, 1, 1, 1536), 4), randn(g, 2, Float32, 1, 1, 1536)
				}},
				{"tail", func(g *Graph) (*Array, *Array) {
					return g.MultiplyScalar(randn(g, 3, Float32, 3, 5, 37), 30), randn(g, 4, Float32, 3, 5, 37)
				}},
				{"prefill", func(g *Graph) (*Array, *Array) {
					return g.MultiplyScalar(randn(g, 5, Float32, 2, 96, 1024), 8), randn(g, 6, Float32, 2, 96, 1024)
				}},
				{"special", func(g *Graph) (*Array, *Array) {
					n := len(special)
					return FromSlice(g, special, n), randn(g, 7, Float32, n)
				}},
				{"transposed", func(g *Graph) (*Array, *Array) {
					return g.Transpose(g.MultiplyScalar(randn(g, 8, Float32, 40, 24), 6), 1, 0),
						g.Transpose(randn(g, 9, Float32, 40, 24), 1, 0)
				}},
				{"halves", func(g *Graph) (*Array, *Array) {
					gu := g.MultiplyScalar(randn(g, 10, Float32, 2, 3, 2*50), 5)
					return g.Slice(gu, []int{0, 0, 0}, []int{2, 3, 50}), g.Slice(gu, []int{0, 0, 50}, []int{2, 3, 100})
				}},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					for _, gated := range []bool{true, false} {
						native, fallback, _ := withFast(t, func(g *Graph) *Array {
							gate, up := c.build(g)
							var y *Array
							if gated {
								y = g.SwiGLU(gate, up)
							} else {
								y = g.SiLU(gate)
							}
							if NativeFastOps() {
								want := map[bool]string{true: "ArchgenSwiGLU", false: "ArchgenSiLU"}[gated]
								if name := y.primitiveName(); name != want {
									t.Fatalf("the op is %q, not %s", name, want)
								}
							}
							return y
						})
						for i := range fallback {
							a, b := native[i], fallback[i]
							if math.Float32bits(a) != math.Float32bits(b) && !(a != a && b != b) {
								t.Fatalf("gated %v, element %d: %g (%#x), libmlx's %g (%#x)", gated, i, a,
									math.Float32bits(a), b, math.Float32bits(b))
							}
						}
					}
				})
			}
		})
	}
}

// TestNativeRoPEs: a layer's queries and keys rotated in one op (RoPEs)
// equal their own RoPE calls bit for bit, in every dtype, for decode and
// prompt rows, strided inputs (the products' by-head layout), partial and
// traditional rotation, a frequency table and per-row offsets; arrays of
// two dtypes fall back to an op each with the same values.
func TestNativeRoPEs(t *testing.T) {
	needFast(t)
	for _, dt := range fastDtypes {
		for _, c := range []struct {
			name        string
			B, L, D     int
			dims        int
			traditional bool
			freqs       bool
			offset      int
			offsets     []int32
		}{
			{"decode", 1, 1, 64, 64, false, false, 255, nil},
			{"prefill", 1, 37, 64, 64, false, false, 0, nil},
			{"partial_traditional", 2, 3, 80, 40, true, false, 11, nil},
			{"freqs", 1, 4, 64, 64, false, true, 4000, nil},
			{"batch_offsets", 3, 2, 64, 64, false, false, 0, []int32{0, 5, 300}},
		} {
			t.Run(fmt.Sprintf("%s_%s", c.name, dt), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				// q and k as the by-head products give them: [B, H, L, D]
				// over rows [B, L, H, D].
				q := g.Swapaxes(randn(g, 5, dt, c.B, c.L, 9, c.D), 1, 2)
				k := g.Swapaxes(randn(g, 6, dt, c.B, c.L, 3, c.D), 1, 2)
				r := &RoPE{Dims: c.dims, Traditional: c.traditional, Base: 10000, Scale: 1}
				if c.freqs {
					f := make([]float32, c.dims/2)
					for i := range f {
						f[i] = float32(math.Pow(500000, float64(2*i)/float64(c.dims)) * (1 + float64(i%3)))
					}
					r.Freqs = FromSlice(g, f, len(f))
				}
				var both []*Array
				var wq, wk *Array
				if c.offsets != nil {
					at := FromSlice(g, c.offsets, len(c.offsets))
					both = g.RoPEsAt([]*Array{q, k}, r, at)
					wq, wk = g.RoPEAt(q, r, at), g.RoPEAt(k, r, at)
				} else {
					both = g.RoPEs([]*Array{q, k}, r, c.offset)
					wq, wk = g.RoPE(q, r, c.offset), g.RoPE(k, r, c.offset)
				}
				for i, y := range both {
					if name := y.primitiveName(); name != "ArchgenRoPE" {
						t.Fatalf("output %d: primitive %q, want archgen's rope", i, name)
					}
				}
				if err := g.Eval(both[0], both[1], wq, wk); err != nil {
					t.Fatal(err)
				}
				sameArrays(t, "q", both[0], wq)
				sameArrays(t, "k", both[1], wk)
			})
		}
	}
	t.Run("two_dtypes", func(t *testing.T) {
		g := NewGraph(nil)
		defer g.Close()
		q := randn(g, 7, Float32, 1, 4, 2, 64)
		k := randn(g, 8, BFloat16, 1, 2, 2, 64)
		r := &RoPE{Dims: 64, Base: 10000, Scale: 1}
		both := g.RoPEs([]*Array{q, k}, r, 9)
		wq, wk := g.RoPE(q, r, 9), g.RoPE(k, r, 9)
		if err := g.Eval(both[0], both[1], wq, wk); err != nil {
			t.Fatal(err)
		}
		sameArrays(t, "q", both[0], wq)
		sameArrays(t, "k", both[1], wk)
	})
}

// TestNativeAddNorm: the residual update and the norm after it as one op
// (AddRMSNorm, AddLayerNorm) equal Add and the norm's own op bit for bit, in
// every dtype, with and without weight and bias, for decode and prompt rows
// and a strided input; a residual of another dtype falls back to an add and
// a norm with the same values.
func TestNativeAddNorm(t *testing.T) {
	needFast(t)
	for _, dt := range fastDtypes {
		for _, c := range []struct {
			name            string
			shape           []int
			layer, w, b     bool
			strided         bool
			residualFloat32 bool
		}{
			{"rms_decode", []int{1, 1, 576}, false, true, false, false, false},
			{"rms_prefill", []int{2, 37, 576}, false, true, false, false, false},
			{"rms_no_weight", []int{1, 5, 64}, false, false, false, false, false},
			{"rms_strided", []int{2, 3, 64}, false, true, false, true, false},
			{"layer", []int{1, 7, 96}, true, true, true, false, false},
			{"layer_no_bias", []int{1, 7, 96}, true, true, false, false, false},
			{"residual_of_another_dtype", []int{1, 3, 64}, false, true, false, false, true},
		} {
			t.Run(fmt.Sprintf("%s_%s", c.name, dt), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				n := c.shape[len(c.shape)-1]
				x := randn(g, 1, dt, c.shape...)
				if c.strided {
					x = g.Swapaxes(randn(g, 1, dt, c.shape[1], c.shape[0], n), 0, 1)
				}
				rdt := dt
				if c.residualFloat32 {
					rdt = Float32
				}
				r := randn(g, 2, rdt, c.shape...)
				var w, b *Array
				if c.w {
					w = randn(g, 3, dt, n)
				}
				if c.b {
					b = randn(g, 4, dt, n)
				}
				var h, hn, want *Array
				if c.layer {
					h, hn = g.AddLayerNorm(x, r, w, b, 1e-5)
					want = g.LayerNorm(g.Add(x, r), w, b, 1e-5)
				} else {
					h, hn = g.AddRMSNorm(x, r, w, 1e-6)
					want = g.RMSNorm(g.Add(x, r), w, 1e-6)
				}
				if !c.residualFloat32 {
					prim := "ArchgenAddRMSNorm"
					if c.layer {
						prim = "ArchgenAddLayerNorm"
					}
					for _, y := range []*Array{h, hn} {
						if name := y.primitiveName(); name != prim {
							t.Fatalf("primitive %q, want %q", name, prim)
						}
					}
				}
				sum := g.Add(x, r)
				if err := g.Eval(h, hn, want, sum); err != nil {
					t.Fatal(err)
				}
				sameArrays(t, "sum", h, sum)
				sameArrays(t, "normed", hn, want)
			})
		}
	}
}

// TestWritePositions: a cache step's writes as one op (WritePositions)
// equal SliceUpdate of each pair, for dense buffers, a broadcast buffer
// (zeros, as a cache's first step makes them), strided updates (the
// products' by-head layout), parts of different widths and dtypes (a
// quantized cache's packed values, scales and biases) and a prompt's
// several positions; with the native ops off, SliceUpdate runs instead.
func TestWritePositions(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(fmt.Sprintf("native=%v", native), func(t *testing.T) {
			prev := setNativeFastOps(native)
			defer setNativeFastOps(prev)
			g := NewGraph(nil)
			defer g.Close()
			const B, H, T = 2, 3, 16
			for _, c := range []struct {
				name string
				at   int
				n    int
			}{{"first", 0, 1}, {"middle", 7, 1}, {"prompt", 3, 5}, {"last", T - 1, 1}} {
				arrs := []*Array{
					randn(g, 1, Float32, B, H, T, 64),
					g.Zeros([]int{B, H, T, 64}, BFloat16),
					g.AsType(g.Multiply(randn(g, 2, Float32, B, H, T, 8), g.Scalar(1000, Float32)), Uint32),
				}
				updates := []*Array{
					g.Swapaxes(randn(g, 3, Float32, B, c.n, H, 64), 1, 2),
					randn(g, 4, BFloat16, B, H, c.n, 64),
					g.AsType(g.Multiply(randn(g, 5, Float32, B, H, c.n, 8), g.Scalar(1000, Float32)), Uint32),
				}
				if err := g.Eval(append(append([]*Array{}, arrs...), updates...)...); err != nil {
					t.Fatal(err)
				}
				got := g.WritePositions(arrs, updates, c.at)
				if native {
					for i, y := range got {
						if name := y.primitiveName(); name != "ArchgenCacheRows" {
							t.Fatalf("%s: output %d: primitive %q, want archgen's", c.name, i, name)
						}
					}
				}
				for i, a := range arrs {
					want := g.SliceUpdate(a, updates[i], []int{0, 0, c.at, 0}, []int{B, H, c.at + c.n, a.Dim(3)})
					if err := g.Eval(got[i], want); err != nil {
						t.Fatal(err)
					}
					sameValues(t, g, fmt.Sprintf("%s: part %d", c.name, i), got[i], want)
				}
			}
			checkOpErrors(t, []opError{
				{"past the positions", "", func(g *Graph) []*Array {
					return g.WritePositions([]*Array{randn(g, 1, Float32, 1, 2, 4, 8)}, []*Array{randn(g, 2, Float32, 1, 2, 2, 8)}, 3)
				}},
				{"three axes", "mlx: write_positions: writing positions needs arrays and updates of 4 axes", func(g *Graph) []*Array {
					return g.WritePositions([]*Array{randn(g, 1, Float32, 2, 4, 8)}, []*Array{randn(g, 2, Float32, 2, 1, 8)}, 0)
				}},
				{"counts", "mlx: write_positions: 2 arrays and 1 updates", func(g *Graph) []*Array {
					a := randn(g, 1, Float32, 1, 2, 4, 8)
					return g.WritePositions([]*Array{a, a}, []*Array{randn(g, 2, Float32, 1, 2, 1, 8)}, 0)
				}},
			})
		})
	}
}

// opError is an op built on a graph of its own, which must fail on
// evaluation, with want as its error ("": any error).
type opError struct {
	name, want string
	build      func(g *Graph) []*Array
}

func checkOpErrors(t *testing.T, cases []opError) {
	t.Helper()
	for _, e := range cases {
		bad := NewGraph(nil)
		err := bad.Eval(e.build(bad)...)
		bad.Close()
		if err == nil || (e.want != "" && err.Error() != e.want) {
			t.Fatalf("%s: error %v, want %q", e.name, err, e.want)
		}
	}
}

// TestCacheRows: a batched cache's row moves and per-row writes as one op
// (CacheRows) equal slices and SliceUpdates applied one by one, in order:
// moves that read a row an earlier move wrote, writes at different
// positions per row into rows other than the update's, parts of different
// widths and dtypes, a broadcast buffer; with the native ops off, mlx's
// ops run instead. Bad plans fail with the op named.
func TestCacheRows(t *testing.T) {
	for _, native := range []bool{true, false} {
		t.Run(fmt.Sprintf("native=%v", native), func(t *testing.T) {
			prev := setNativeFastOps(native)
			defer setNativeFastOps(prev)
			g := NewGraph(nil)
			defer g.Close()
			const C, H, T = 5, 3, 12
			type list struct{ rows, n int } // a source of updates: its rows, and the positions each writes
			for _, c := range []struct {
				name      string
				lists     []list
				slots, at []int
				moves     []RowMove
			}{
				{"moves", nil, nil, nil, []RowMove{{1, 4, 7}, {3, 1, 12}, {0, 2, 1}}},
				{"writes", []list{{3, 1}}, []int{4, 0, 2}, []int{11, 0, 5}, nil},
				{"a prompt's positions", []list{{2, 3}}, []int{1, 3}, []int{2, 9}, nil},
				{"both", []list{{2, 2}}, []int{1, 2}, []int{0, 10}, []RowMove{{1, 2, 6}, {4, 1, 3}}},
				{"sources of different lengths", []list{{1, 3}, {2, 5}}, []int{0, 3, 4}, []int{0, 2, 7}, []RowMove{{2, 0, 4}}},
			} {
				arrs := []*Array{
					randn(g, 1, Float32, C, H, T, 64),
					g.Zeros([]int{C, H, T, 64}, BFloat16),
					g.AsType(g.Multiply(randn(g, 2, Float32, C, H, T, 8), g.Scalar(1000, Float32)), Uint32),
				}
				var updates [][]*Array
				for i, l := range c.lists {
					k := uint64(10 * i)
					updates = append(updates, []*Array{
						g.Swapaxes(randn(g, k+3, Float32, l.rows, l.n, H, 64), 1, 2),
						randn(g, k+4, BFloat16, l.rows, H, l.n, 64),
						g.AsType(g.Multiply(randn(g, k+5, Float32, l.rows, H, l.n, 8), g.Scalar(1000, Float32)), Uint32),
					})
				}
				all := append([]*Array{}, arrs...)
				for _, u := range updates {
					all = append(all, u...)
				}
				if err := g.Eval(all...); err != nil {
					t.Fatal(err)
				}
				got := g.CacheRows(arrs, updates, c.slots, c.at, c.moves)
				for i, y := range got {
					if name := y.primitiveName(); native && name != "ArchgenCacheRows" {
						t.Fatalf("%s: output %d: primitive %q, want archgen's", c.name, i, name)
					}
				}
				for i, a := range arrs {
					want := a
					for _, m := range c.moves {
						row := g.Slice(want, []int{m.Src, 0, 0, 0}, []int{m.Src + 1, H, m.Cols, a.Dim(3)})
						want = g.SliceUpdate(want, row, []int{m.Dst, 0, 0, 0}, []int{m.Dst + 1, H, m.Cols, a.Dim(3)})
					}
					r := 0
					for j, l := range c.lists {
						for b := range l.rows {
							row := g.Slice(updates[j][i], []int{b, 0, 0, 0}, []int{b + 1, H, l.n, a.Dim(3)})
							want = g.SliceUpdate(want, row, []int{c.slots[r], 0, c.at[r], 0}, []int{c.slots[r] + 1, H, c.at[r] + l.n, a.Dim(3)})
							r++
						}
					}
					if err := g.Eval(got[i], want); err != nil {
						t.Fatal(err)
					}
					sameValues(t, g, fmt.Sprintf("%s: part %d", c.name, i), got[i], want)
				}
			}
			checkOpErrors(t, []opError{
				{"past the positions", "", func(g *Graph) []*Array {
					return g.CacheRows([]*Array{randn(g, 1, Float32, 2, 2, 4, 8)}, [][]*Array{{randn(g, 2, Float32, 1, 2, 2, 8)}}, []int{1}, []int{3}, nil)
				}},
				{"a row past the slots", "", func(g *Graph) []*Array {
					return g.CacheRows([]*Array{randn(g, 1, Float32, 2, 2, 4, 8)}, nil, nil, nil, []RowMove{{0, 2, 1}})
				}},
				{"three axes", "mlx: cache_rows: rewriting a cache's rows needs arrays of 4 axes", func(g *Graph) []*Array {
					return g.CacheRows([]*Array{randn(g, 1, Float32, 2, 4, 8)}, nil, nil, nil, []RowMove{{0, 1, 1}})
				}},
				{"counts", "mlx: cache_rows: 1 arrays, 1 sources of updates, 2 rows and 1 positions to write", func(g *Graph) []*Array {
					return g.CacheRows([]*Array{randn(g, 1, Float32, 2, 2, 4, 8)}, [][]*Array{{randn(g, 2, Float32, 2, 2, 1, 8)}}, []int{0, 1}, []int{0}, nil)
				}},
				{"a source short of arrays", "mlx: cache_rows: 2 arrays, 1 sources of updates, 1 rows and 1 positions to write", func(g *Graph) []*Array {
					return g.CacheRows([]*Array{randn(g, 1, Float32, 2, 2, 4, 8), randn(g, 1, Float32, 2, 2, 4, 8)}, [][]*Array{{randn(g, 2, Float32, 1, 2, 1, 8)}}, []int{0}, []int{0}, nil)
				}},
				{"more rows than slots", "mlx: cache_rows: 1 arrays, 2 sources of updates, 1 rows and 1 positions to write", func(g *Graph) []*Array {
					return g.CacheRows([]*Array{randn(g, 1, Float32, 2, 2, 4, 8)}, [][]*Array{{randn(g, 2, Float32, 1, 2, 1, 8)}, {randn(g, 3, Float32, 1, 2, 1, 8)}}, []int{0}, []int{0}, nil)
				}},
			})
		})
	}
}

// TestGatedRMSNorm: the gated norm (GatedRMSNorm: rms_norm times silu of a
// gate) on archgen's norm kernel against libmlx's ops composed, with and
// without a weight, a gate read through strides (a view of a wider
// array), and one row or many.
func TestGatedRMSNorm(t *testing.T) {
	needFast(t)
	for _, c := range []struct {
		shape    []int
		weighted bool
	}{{[]int{1, 1, 4, 32}, true}, {[]int{2, 5, 3, 40}, false}, {[]int{3, 128}, true}} {
		t.Run(fmt.Sprint(c.shape, c.weighted), func(t *testing.T) {
			n := c.shape[len(c.shape)-1]
			build := func(g *Graph) *Array {
				x := randn(g, 1, Float32, c.shape...)
				wide := randn(g, 2, Float32, append(append([]int{}, c.shape[:len(c.shape)-1]...), 2*n)...)
				gate := g.SplitAt(wide, []int{n}, -1)[1] // strided rows
				var w *Array
				if c.weighted {
					w = randn(g, 3, Float32, n)
				}
				y := g.GatedRMSNorm(x, w, gate, 1e-6)
				if name := y.primitiveName(); NativeFastOps() && name != "ArchgenGatedRMSNorm" {
					t.Fatalf("the output came from %q, not archgen's kernel", name)
				}
				return y
			}
			native, fallback, _ := withFast(t, build)
			compareFast(t, native, fallback, 4*fastTol(Float32))
			// And against the composed steps, by hand.
			g := NewGraph(nil)
			defer g.Close()
			x := randn(g, 1, Float32, c.shape...)
			wide := randn(g, 2, Float32, append(append([]int{}, c.shape[:len(c.shape)-1]...), 2*n)...)
			gate := g.SplitAt(wide, []int{n}, -1)[1]
			var w *Array
			if c.weighted {
				w = randn(g, 3, Float32, n)
			}
			want := g.Multiply(g.SiLU(gate), g.RMSNorm(x, w, 1e-6))
			if err := g.Eval(want); err != nil {
				t.Fatal(err)
			}
			wv, _ := want.Float32s()
			compareFast(t, native, wv, 4*fastTol(Float32))
		})
	}
}

// BenchmarkPrefillAttention times one float32 causal attention of a 1B
// Llama's heads (32 query heads over 8 KV heads of 64) with the native
// kernels: a 2048-token prompt at once, and the last 512 rows of an
// 8192-token prompt against all its keys. It reports GFLOP/s counting
// 2*D multiply-adds (QK and PV) per visible (row, key) pair, 2 flops each.
func BenchmarkPrefillAttention(b *testing.B) {
	const Hq, Hkv, D = 32, 8, 64
	for _, sh := range [][2]int{{2048, 2048}, {512, 8192}} {
		L, S := sh[0], sh[1]
		b.Run(fmt.Sprintf("L=%d/S=%d", L, S), func(b *testing.B) {
			prev := setNativeFastOps(true)
			defer setNativeFastOps(prev)
			g := NewGraph(nil)
			defer g.Close()
			q := randn(g, 1, Float32, 1, Hq, L, D)
			k := randn(g, 2, Float32, 1, Hkv, S, D)
			v := randn(g, 3, Float32, 1, Hkv, S, D)
			if err := g.Eval(q, k, v); err != nil {
				b.Fatal(err)
			}
			g.Keep(q, k, v)
			defer func() { q.Free(); k.Free(); v.Free() }()
			g.Reset()
			// Row l of L sees keys 0 .. l+S-L.
			pairs := float64(L)*float64(S-L) + float64(L)*float64(L+1)/2
			flops := pairs * Hq * 4 * D
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				y := g.SDPA(q, k, v, 0.125, CausalMask)
				if err := g.Eval(y); err != nil {
					b.Fatal(err)
				}
				g.Reset()
			}
			b.ReportMetric(flops/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
		})
	}
}

// TestNativeGELU checks the exact GELU's one-op kernel against libmlx's
// chain (x / sqrt(2), erf, 1 +, times x, / 2) bit for bit: random values
// at several scales, a tail, a strided view, and the special values of
// its erf and exp (the -88 cutoff of exp(-v^2), the points where -v^2
// log2(e) lies on a half, 0 and -0, infinities, NaN, tiny values).
func TestNativeGELU(t *testing.T) {
	needFast(t)
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 13.26, -13.26, 13.27, -13.27, 13.3, -13.3,
		100, -100, 1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		1e-30, -1e-30, 1e-45, -1e-45, 3e-3, -3e-3}
	for k := 0; k < 64; k++ {
		// -v^2 log2(e) near -(k + 1/2), where rounding to the exponent
		// turns: x = sqrt(2) v.
		v := math.Sqrt((float64(k) + 0.5) / 1.442695)
		x := float32(v * math.Sqrt2)
		for _, y := range []float32{x, math.Nextafter32(x, 0), math.Nextafter32(x, 200)} {
			special = append(special, y, -y)
		}
	}
	for _, isa := range ISAs(t) {
		t.Run(isa.Name, func(t *testing.T) {
			defer isa.Set()()
			cases := []struct {
				name  string
				build func(g *Graph) *Array
			}{
				{"rows", func(g *Graph) *Array { return g.MultiplyScalar(randn(g, 1, Float32, 2, 37, 1536), 3) }},
				{"tail", func(g *Graph) *Array { return g.MultiplyScalar(randn(g, 3, Float32, 3, 5, 37), 8) }},
				{"special", func(g *Graph) *Array { return FromSlice(g, special, len(special)) }},
				{"transposed", func(g *Graph) *Array {
					return g.Transpose(g.MultiplyScalar(randn(g, 8, Float32, 40, 24), 4), 1, 0)
				}},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					native, fallback, _ := withFast(t, func(g *Graph) *Array {
						y := g.GELU(c.build(g))
						if NativeFastOps() {
							if name := y.primitiveName(); name != "ArchgenGELU" {
								t.Fatalf("the op is %q, not ArchgenGELU", name)
							}
						}
						return y
					})
					for i := range fallback {
						a, b := native[i], fallback[i]
						if math.Float32bits(a) != math.Float32bits(b) && !(a != a && b != b) {
							t.Fatalf("element %d: %g (%#x), libmlx's %g (%#x)", i, a, math.Float32bits(a), b, math.Float32bits(b))
						}
					}
				})
			}
		})
	}
}
