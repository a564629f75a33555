package mlx

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// deltaCase is one shape of the gated delta rule.
type deltaCase struct {
	B, T, Hk, Hv, Dk, Dv int
	vecGate, masked      bool
	zeroState            bool
}

// deltaInputs makes the recurrence's inputs as a model makes them: q and k
// l2-normalized, the decay in (0, 1) in float32, beta a sigmoid in q's
// dtype, the state float32.
func deltaInputs(g *Graph, c deltaCase, dt Dtype, seed uint64) (q, k, v, decay, beta, state, mask *Array) {
	key := g.RandomKey(seed)
	next := func() *Array {
		var sub *Array
		key, sub = g.RandomSplit(key)
		return sub
	}
	unit := func(shape []int) *Array {
		x := g.Normal(shape, Float32, 0, 1, next())
		n := g.Sqrt(g.Add(g.Sum(g.Multiply(x, x), true, -1), g.Full([]int{1}, 1e-6, Float32)))
		return g.AsType(g.Divide(x, n), dt)
	}
	q = unit([]int{c.B, c.T, c.Hk, c.Dk})
	k = unit([]int{c.B, c.T, c.Hk, c.Dk})
	v = g.AsType(g.Normal([]int{c.B, c.T, c.Hv, c.Dv}, Float32, 0, 1, next()), dt)
	gshape := []int{c.B, c.T, c.Hv}
	if c.vecGate {
		gshape = append(gshape, c.Dk)
	}
	decay = g.Sigmoid(g.Normal(gshape, Float32, 2, 1, next()))
	beta = g.AsType(g.Sigmoid(g.Normal([]int{c.B, c.T, c.Hv}, Float32, 0, 1, next())), dt)
	if c.zeroState {
		state = g.Zeros([]int{c.B, c.Hv, c.Dv, c.Dk}, Float32)
	} else {
		state = g.Normal([]int{c.B, c.Hv, c.Dv, c.Dk}, Float32, 0, 0.5, next())
	}
	if c.masked {
		bits := make([]bool, c.B*c.T)
		for i := range bits {
			bits[i] = i%3 != 1
		}
		mask = FromSlice(g, bits, c.B, c.T)
	}
	return
}

// TestGatedDelta runs archgen's gated delta kernel against the same
// recurrence composed of libmlx's ops (mlx-lm's gated_delta_ops, step by
// step) on the same inputs: scalar and per-channel decay, masks, grouped
// heads, row counts that leave partial blocks of lanes, each dtype, and
// every instruction level the CPU has. Output and state must agree bit for
// bit.
func TestGatedDelta(t *testing.T) {
	if NativeISA() == 0 {
		t.Skip("this CPU runs no native kernels (no AVX2): GatedDelta composes the ops, which this test compares with themselves")
	}
	cases := []deltaCase{
		{B: 1, T: 1, Hk: 2, Hv: 4, Dk: 16, Dv: 16},
		{B: 2, T: 9, Hk: 2, Hv: 4, Dk: 24, Dv: 20},
		{B: 1, T: 13, Hk: 1, Hv: 3, Dk: 32, Dv: 40, vecGate: true},
		{B: 2, T: 6, Hk: 2, Hv: 2, Dk: 8, Dv: 9, masked: true},
		{B: 2, T: 5, Hk: 1, Hv: 2, Dk: 16, Dv: 17, vecGate: true, masked: true, zeroState: true},
	}
	levels := isaLevels(t)
	for _, level := range levels {
		for _, dt := range []Dtype{Float32, BFloat16, Float16} {
			for i, c := range cases {
				t.Run(fmt.Sprintf("isa%d/%s/%d", level, dt, i), func(t *testing.T) {
					SetNativeISA(level)
					g := NewGraph(nil)
					defer g.Close()
					q, k, v, decay, beta, state, mask := deltaInputs(g, c, dt, uint64(7+i))
					y, s := g.GatedDelta(q, k, v, decay, beta, state, mask)
					if name := y.primitiveName(); name != "ArchgenGatedDelta" {
						t.Fatalf("the output came from %q, not archgen's kernel", name)
					}
					wy, ws := g.GatedDeltaOps(q, k, v, decay, beta, state, mask)
					if err := g.Eval(y, s, wy, ws); err != nil {
						t.Fatal(err)
					}
					if y.Dtype() != dt || fmt.Sprint(y.Shape()) != fmt.Sprint([]int{c.B, c.T, c.Hv, c.Dv}) {
						t.Fatalf("y is %s %v", y.Dtype(), y.Shape())
					}
					sameBits(t, "y", g.AsType(y, Float32), g.AsType(wy, Float32))
					sameBits(t, "state", s, ws)
				})
			}
		}
	}
}

// isaLevels are the instruction levels of the native kernels this CPU
// runs (1 AVX2, 2 AVX-512); the level in force is restored when t ends.
func isaLevels(t *testing.T) []int {
	prev := SetNativeISA(2)
	t.Cleanup(func() { SetNativeISA(prev) })
	if NativeISA() == 2 {
		return []int{1, 2}
	}
	return []int{1}
}

// sameBits fails unless a and b hold the same float32 values bit for bit.
func sameBits(t *testing.T, what string, a, b *Array) {
	t.Helper()
	av, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	bv, err := b.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	if len(av) != len(bv) {
		t.Fatalf("%s: %d values, the ops' %d", what, len(av), len(bv))
	}
	for i := range av {
		if math.Float32bits(av[i]) != math.Float32bits(bv[i]) {
			t.Fatalf("%s[%d] = %g, the ops give %g", what, i, av[i], bv[i])
		}
	}
}

// TestGatedDeltaGates runs the gated delta rule from its projections'
// outputs (GatedDeltaGates: q, k and v side by side, b and a strided views
// of a wider product) on archgen's kernel, and against the same steps
// composed of libmlx's ops (q and k to unit length, the gates, then
// GatedDeltaOps): within float32 rounding, at every instruction level, for
// one step (decode) and many, with grouped heads, a state carried in, and
// a negative eigenvalue's doubled write strength.
func TestGatedDeltaGates(t *testing.T) {
	if NativeISA() == 0 {
		t.Skip("this CPU runs no native kernels (no AVX2): GatedDeltaGates composes the ops, which this test compares with themselves")
	}
	cases := []struct {
		B, T int
		h    DeltaShape
		neg  bool
	}{
		{1, 1, DeltaShape{Hk: 2, Dk: 16, Hv: 4, Dv: 16}, false},
		{2, 9, DeltaShape{Hk: 2, Dk: 32, Hv: 4, Dv: 20}, true},
		{1, 5, DeltaShape{Hk: 1, Dk: 24, Hv: 3, Dv: 17}, false},
	}
	for _, level := range isaLevels(t) {
		for i, c := range cases {
			t.Run(fmt.Sprintf("isa%d/%d", level, i), func(t *testing.T) {
				SetNativeISA(level)
				g := NewGraph(nil)
				defer g.Close()
				h := c.h
				width := 2*h.Hk*h.Dk + h.Hv*h.Dv
				key := g.RandomKey(uint64(31 + i))
				next := func() *Array {
					var sub *Array
					key, sub = g.RandomSplit(key)
					return sub
				}
				qkv := g.Normal([]int{c.B, c.T, width}, Float32, 0, 1, next())
				// b and a as a model's one product gives them: views of a wider array.
				ba := g.Normal([]int{c.B, c.T, 3 * h.Hv}, Float32, 0, 1, next())
				parts := g.SplitAt(ba, []int{h.Hv, 2 * h.Hv}, -1)
				b, a := parts[0], parts[2]
				rate := g.Negative(g.Exp(g.Normal([]int{h.Hv}, Float32, 0, 1, next())))
				dtBias := g.Normal([]int{h.Hv}, Float32, 0, 1, next())
				state := g.Normal([]int{c.B, h.Hv, h.Dv, h.Dk}, Float32, 0, 0.5, next())
				y, s := g.GatedDeltaGates(qkv, b, a, rate, dtBias, state, nil, h, c.neg)
				if name := y.primitiveName(); name != "ArchgenGatedDeltaGates" {
					t.Fatalf("the output came from %q, not archgen's kernel", name)
				}
				// The same steps composed.
				kd := h.Hk * h.Dk
				in := g.SplitAt(qkv, []int{kd, 2 * kd}, -1)
				inv := 1 / math.Sqrt(float64(h.Dk))
				eps := float32(1e-6 * inv * inv)
				q := g.MultiplyScalar(g.RMSNorm(g.Reshape(in[0], c.B, c.T, h.Hk, h.Dk), nil, eps), inv*inv)
				k := g.MultiplyScalar(g.RMSNorm(g.Reshape(in[1], c.B, c.T, h.Hk, h.Dk), nil, eps), inv)
				v := g.Reshape(in[2], c.B, c.T, h.Hv, h.Dv)
				beta := g.Sigmoid(b)
				if c.neg {
					beta = g.MultiplyScalar(beta, 2)
				}
				decay := g.Exp(g.Multiply(rate, g.Softplus(g.Add(a, dtBias))))
				wy, ws := g.GatedDeltaOps(q, k, v, decay, beta, state, nil)
				// And the op's own composed form, where the kernels are off.
				was := setNativeRecurrent(false)
				fy, fs := g.GatedDeltaGates(qkv, b, a, rate, dtBias, state, nil, h, c.neg)
				setNativeRecurrent(was)
				if err := g.Eval(y, s, wy, ws, fy, fs); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(y.Shape()) != fmt.Sprint([]int{c.B, c.T, h.Hv, h.Dv}) {
					t.Fatalf("y is %v", y.Shape())
				}
				for _, p := range []struct {
					what      string
					got, want *Array
				}{{"y", y, wy}, {"state", s, ws}, {"composed y", fy, wy}, {"composed state", fs, ws}} {
					gv, _ := p.got.Float32s()
					wv, _ := p.want.Float32s()
					scale := 0.0
					for _, x := range wv {
						scale = max(scale, math.Abs(float64(x)))
					}
					for j := range wv {
						if d := math.Abs(float64(gv[j]) - float64(wv[j])); d > 1e-5*max(1, scale) {
							t.Fatalf("%s[%d] = %g, composed %g (scale %g)", p.what, j, gv[j], wv[j], scale)
						}
					}
				}
			})
		}
	}
	// Shapes it does not take are a graph error naming the op.
	g := NewGraph(nil)
	defer g.Close()
	z := func(shape ...int) *Array { return g.Zeros(shape, Float32) }
	h := DeltaShape{Hk: 2, Dk: 4, Hv: 4, Dv: 4}
	y, _ := g.GatedDeltaGates(z(1, 2, 31), z(1, 2, 4), z(1, 2, 4), z(4), z(4), z(1, 4, 4, 4), nil, h, false)
	if err := g.Eval(y); err == nil || !strings.Contains(err.Error(), "gated_delta_gates: want qkv [B, T, 2 Hk Dk + Hv Dv]") {
		t.Errorf("a qkv of the wrong width: %v", err)
	}
}

// TestGatedDeltaGatesPasses: a run long enough that the kernel goes
// through its steps in several passes (each pass's normed q and k and
// gates made first) gives, bit for bit, what the same steps give run in
// calls of one pass each, the state carried from call to call, at every
// instruction level; with a mask and two batch rows.
func TestGatedDeltaGatesPasses(t *testing.T) {
	if NativeISA() == 0 {
		t.Skip("this CPU runs no native kernels (no AVX2): GatedDeltaGates composes the ops")
	}
	h := DeltaShape{Hk: 16, Dk: 128, Hv: 32, Dv: 128}
	const B, T = 2, 300 // 2 * 300 steps of 16 * 2 * 128 + 2 * 32 floats: more than one pass holds
	cuts := []int{0, 70, 170, 250, T}
	for _, level := range isaLevels(t) {
		t.Run(fmt.Sprintf("isa%d", level), func(t *testing.T) {
			SetNativeISA(level)
			g := NewGraph(nil)
			defer g.Close()
			key := g.RandomKey(41)
			next := func() *Array {
				var sub *Array
				key, sub = g.RandomSplit(key)
				return sub
			}
			qkv := g.Normal([]int{B, T, 2*h.Hk*h.Dk + h.Hv*h.Dv}, Float32, 0, 1, next())
			b := g.Normal([]int{B, T, h.Hv}, Float32, 0, 1, next())
			a := g.Normal([]int{B, T, h.Hv}, Float32, 0, 1, next())
			rate := g.Negative(g.Exp(g.Normal([]int{h.Hv}, Float32, 0, 1, next())))
			dtBias := g.Normal([]int{h.Hv}, Float32, 0, 1, next())
			state := g.Normal([]int{B, h.Hv, h.Dv, h.Dk}, Float32, 0, 0.5, next())
			bits := make([]bool, B*T)
			for i := range bits {
				bits[i] = i%7 != 3
			}
			mask := FromSlice(g, bits, B, T)
			y, s := g.GatedDeltaGates(qkv, b, a, rate, dtBias, state, mask, h, false)
			steps := func(x *Array, t0, t1 int) *Array {
				start, stop := make([]int, x.Ndim()), x.Shape()
				start[1], stop[1] = t0, t1
				return g.Slice(x, start, stop)
			}
			var ys []*Array
			st := state
			for i := 1; i < len(cuts); i++ {
				t0, t1 := cuts[i-1], cuts[i]
				var yi *Array
				yi, st = g.GatedDeltaGates(steps(qkv, t0, t1), steps(b, t0, t1), steps(a, t0, t1), rate, dtBias, st, steps(mask, t0, t1), h, false)
				ys = append(ys, yi)
			}
			if err := g.Eval(y, s, st); err != nil {
				t.Fatal(err)
			}
			sameBits(t, "y", y, g.Concatenate(1, ys...))
			sameBits(t, "state", s, st)
		})
	}
}

// plainCopyEnv, set to 1 as a gated delta op is made, has its kernel move
// the state into its lanes and back with plain loops, one float at a time,
// rather than with vector transposes: the baseline of
// TestGatedDeltaDecodeCopies.
const plainCopyEnv = "ARCHGEN_MLX_DELTA_PLAIN_COPY"

// TestGatedDeltaDecodeCopies runs decode-shaped calls (one step each, four
// in a row, each carrying the state the one before left) of GatedDeltaGates
// and GatedDelta at state shapes whose sides are and are not multiples of
// 16 and 8, at every instruction level: the kernel moving each block's
// state in and out of its lanes with vector transposes gives, bit for bit,
// the outputs and states of the same calls with the plain copies, and of
// the first level; GatedDelta's also equal GatedDeltaOps'.
func TestGatedDeltaDecodeCopies(t *testing.T) {
	if NativeISA() == 0 {
		t.Skip("this CPU runs no native kernels (no AVX2): GatedDelta composes the ops")
	}
	t.Setenv(plainCopyEnv, "")
	levels := isaLevels(t)
	shapes := []struct{ Dk, Dv int }{{128, 128}, {64, 32}, {20, 36}, {16, 8}, {24, 20}, {5, 3}}
	const B, steps = 2, 4
	// each runs the steps on g, with the plain copies where plain is set,
	// and returns every step's output and state as float32 values.
	type calls func(g *Graph, plain bool) [][]float32
	values := func(t *testing.T, g *Graph, outs ...*Array) [][]float32 {
		t.Helper()
		if err := g.Eval(outs...); err != nil {
			t.Fatal(err)
		}
		var vs [][]float32
		for _, o := range outs {
			v, err := g.AsType(o, Float32).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		return vs
	}
	run := func(t *testing.T, g *Graph, plain bool, step func(i int, st *Array) (y, next *Array), state *Array, kernel string) [][]float32 {
		t.Helper()
		if plain {
			os.Setenv(plainCopyEnv, "1")
			defer os.Setenv(plainCopyEnv, "")
		}
		var all [][]float32
		st := state
		for i := 0; i < steps; i++ {
			var y *Array
			y, st = step(i, st)
			if kernel != "" {
				if name := y.primitiveName(); name != kernel {
					t.Fatalf("step %d's output came from %q, not %s", i, name, kernel)
				}
			}
			all = append(all, values(t, g, y, st)...)
		}
		return all
	}
	same := func(t *testing.T, what string, got, want [][]float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d arrays, want %d", what, len(got), len(want))
		}
		for i := range want {
			part := fmt.Sprintf("step %d's y", i/2)
			if i%2 == 1 {
				part = fmt.Sprintf("step %d's state", i/2)
			}
			if len(got[i]) != len(want[i]) {
				t.Fatalf("%s: %s has %d values, want %d", what, part, len(got[i]), len(want[i]))
			}
			for j := range want[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("%s: %s[%d] = %g, want %g", what, part, j, got[i][j], want[i][j])
				}
			}
		}
	}
	for si, sh := range shapes {
		h := DeltaShape{Hk: 2, Dk: sh.Dk, Hv: 4, Dv: sh.Dv}
		g := NewGraph(nil)
		defer g.Close()
		key := g.RandomKey(uint64(61 + si))
		next := func() *Array {
			var sub *Array
			key, sub = g.RandomSplit(key)
			return sub
		}
		at := func(x *Array, i int) *Array {
			start, stop := make([]int, x.Ndim()), x.Shape()
			start[1], stop[1] = i, i+1
			return g.Slice(x, start, stop)
		}
		// GatedDeltaGates from its projections' outputs, b and a views of
		// one wider product.
		qkv := g.Normal([]int{B, steps, 2*h.Hk*h.Dk + h.Hv*h.Dv}, Float32, 0, 1, next())
		ba := g.Normal([]int{B, steps, 2 * h.Hv}, Float32, 0, 1, next())
		parts := g.SplitAt(ba, []int{h.Hv}, -1)
		rate := g.Negative(g.Exp(g.Normal([]int{h.Hv}, Float32, 0, 1, next())))
		dtBias := g.Normal([]int{h.Hv}, Float32, 0, 1, next())
		state := g.Normal([]int{B, h.Hv, h.Dv, h.Dk}, Float32, 0, 0.5, next())
		var gates calls = func(g *Graph, plain bool) [][]float32 {
			return run(t, g, plain, func(i int, st *Array) (*Array, *Array) {
				return g.GatedDeltaGates(at(qkv, i), at(parts[0], i), at(parts[1], i), rate, dtBias, st, nil, h, false)
			}, state, "ArchgenGatedDeltaGates")
		}
		// GatedDelta from its inputs in each dtype, with a mask.
		type rule struct {
			name string
			each calls
			ops  calls
		}
		rules := []rule{{name: "gates", each: gates}}
		for _, dt := range []Dtype{Float32, BFloat16} {
			c := deltaCase{B: B, T: steps, Hk: h.Hk, Hv: h.Hv, Dk: h.Dk, Dv: h.Dv, vecGate: dt == BFloat16, masked: true}
			q, k, v, decay, beta, st0, mask := deltaInputs(g, c, dt, uint64(71+si))
			step := func(native bool) calls {
				return func(g *Graph, plain bool) [][]float32 {
					kernel := ""
					if native {
						kernel = "ArchgenGatedDelta"
					}
					return run(t, g, plain, func(i int, st *Array) (*Array, *Array) {
						if native {
							return g.GatedDelta(at(q, i), at(k, i), at(v, i), at(decay, i), at(beta, i), st, at(mask, i))
						}
						return g.GatedDeltaOps(at(q, i), at(k, i), at(v, i), at(decay, i), at(beta, i), st, at(mask, i))
					}, st0, kernel)
				}
			}
			rules = append(rules, rule{name: fmt.Sprintf("rule/%s", dt), each: step(true), ops: step(false)})
		}
		first := map[string][][]float32{}
		for _, level := range levels {
			for _, r := range rules {
				t.Run(fmt.Sprintf("Dk%d_Dv%d/isa%d/%s", h.Dk, h.Dv, level, r.name), func(t *testing.T) {
					SetNativeISA(level)
					got := r.each(g, false)
					same(t, "against the plain copies", got, r.each(g, true))
					if r.ops != nil {
						same(t, "against GatedDeltaOps", got, r.ops(g, false))
					}
					if want, ok := first[r.name]; ok {
						same(t, fmt.Sprintf("against isa%d", levels[0]), got, want)
					} else {
						first[r.name] = got
					}
				})
			}
		}
	}
}

// TestConvStep runs a short convolution's step (ConvStep: the state and
// the new inputs read where they are, the bias and silu applied) on
// archgen's kernel against libmlx's conv1d over the two side by side, at
// every instruction level and with the kernels off, the weights as MLX's
// depthwise kernel [C, K, 1] and as taps [K, C]: outputs within float32
// rounding, the two layouts' the same bits, the next state exactly the
// last inputs.
func TestConvStep(t *testing.T) {
	if NativeISA() == 0 {
		t.Skip("this CPU runs no native kernels (no AVX2): ConvStep composes the ops, which this test compares with themselves")
	}
	cases := []struct {
		B, L, C, K int
		bias, silu bool
	}{
		{1, 1, 40, 4, false, true},
		{2, 7, 19, 3, true, false},
		{1, 1, 16, 2, true, true},
		{2, 2, 33, 4, false, false}, // fewer new inputs than the state holds
	}
	for _, level := range isaLevels(t) {
		for i, c := range cases {
			for _, native := range []bool{true, false} {
				t.Run(fmt.Sprintf("isa%d/%d/native=%v", level, i, native), func(t *testing.T) {
					SetNativeISA(level)
					g := NewGraph(nil)
					defer g.Close()
					key := g.RandomKey(uint64(5 + i))
					next := func() *Array {
						var sub *Array
						key, sub = g.RandomSplit(key)
						return sub
					}
					x := g.Normal([]int{c.B, c.L, c.C}, Float32, 0, 1, next())
					state := g.Normal([]int{c.B, c.K - 1, c.C}, Float32, 0, 1, next())
					w := g.Normal([]int{c.C, c.K, 1}, Float32, 0, 1, next())
					taps := g.Contiguous(g.Transpose(g.Reshape(w, c.C, c.K), 1, 0))
					var bias *Array
					if c.bias {
						bias = g.Normal([]int{c.C}, Float32, 0, 1, next())
					}
					was := setNativeRecurrent(native)
					y, st := g.ConvStep(x, state, w, bias, c.silu)
					ty, tst := g.ConvStep(x, state, taps, bias, c.silu)
					setNativeRecurrent(was)
					for _, a := range []*Array{y, ty} {
						if name := a.primitiveName(); native != (name == "ArchgenConvStep") {
							t.Fatalf("native %v: the output came from %q", native, name)
						}
					}
					all := g.Concatenate(1, state, x)
					want := g.Conv1D(all, w, 1, 0, 1, c.C)
					if c.bias {
						want = g.Add(want, bias)
					}
					if c.silu {
						want = g.SiLU(want)
					}
					wantState := g.Slice(all, []int{0, c.L, 0}, []int{c.B, c.L + c.K - 1, c.C})
					if err := g.Eval(y, st, ty, tst, want, wantState); err != nil {
						t.Fatal(err)
					}
					gv, _ := y.Float32s()
					wv, _ := want.Float32s()
					for j := range wv {
						if d := math.Abs(float64(gv[j]) - float64(wv[j])); d > 1e-5*max(1, math.Abs(float64(wv[j]))) {
							t.Fatalf("y[%d] = %g, conv1d %g", j, gv[j], wv[j])
						}
					}
					sameBits(t, "y from taps", ty, y)
					sameBits(t, "state", st, wantState)
					sameBits(t, "state from taps", tst, wantState)
				})
			}
		}
	}
	g := NewGraph(nil)
	defer g.Close()
	z := func(shape ...int) *Array { return g.Zeros(shape, Float32) }
	y, _ := g.ConvStep(z(1, 2, 8), z(1, 2, 8), z(8, 4, 1), nil, true)
	if err := g.Eval(y); err == nil || !strings.Contains(err.Error(), "conv_step: want x [B, L, C], state [B, K - 1, C], w [K, C] or [C, K, 1]") {
		t.Errorf("a state of the wrong length: %v", err)
	}
	g2 := NewGraph(nil)
	defer g2.Close()
	y, _ = g2.ConvStep(g2.Zeros([]int{1, 2, 8}, Float32), g2.Zeros([]int{1, 3, 8}, Float32), g2.Zeros([]int{4, 9}, Float32), nil, true)
	if err := g2.Eval(y); err == nil || !strings.Contains(err.Error(), "w [4, 9]") {
		t.Errorf("taps of the wrong width: %v", err)
	}
}

// TestGatedDeltaErrors: shapes the recurrence does not take are a graph
// error naming the op, never a crash.
func TestGatedDeltaErrors(t *testing.T) {
	g := NewGraph(nil)
	defer g.Close()
	c := deltaCase{B: 1, T: 2, Hk: 2, Hv: 3, Dk: 4, Dv: 4}
	q, k, _, _, _, state, _ := deltaInputs(g, deltaCase{B: 1, T: 2, Hk: 2, Hv: 4, Dk: 4, Dv: 4}, Float32, 1)
	_, _, v3, decay3, beta3, state3, _ := deltaInputs(g, c, Float32, 2)
	var v, decay, beta *Array
	y, _ := g.GatedDelta(q, k, v3, decay3, beta3, state3, nil)
	err := g.Eval(y)
	if err == nil {
		t.Fatal("3 value heads over 2 key heads ran")
	}
	if want := "mlx: gated_delta: want q, k [B, T, Hk, Dk], v [B, T, Hv, Dv] with Hv a multiple of Hk, g [B, T, Hv] or [B, T, Hv, Dk], beta [B, T, Hv], state [B, Hv, Dv, Dk], mask [B, T]; got q [1, 2, 2, 4], k [1, 2, 2, 4], v [1, 2, 3, 4], g [1, 2, 3], beta [1, 2, 3], state [1, 3, 4, 4]"; err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
	g2 := NewGraph(nil)
	defer g2.Close()
	q, k, v, decay, beta, _, _ = deltaInputs(g2, deltaCase{B: 1, T: 2, Hk: 2, Hv: 4, Dk: 4, Dv: 4}, Float32, 1)
	y, _ = g2.GatedDelta(q, k, v, decay, beta, g2.Zeros([]int{1, 4, 4, 5}, Float32), nil)
	if g2.Eval(y) == nil {
		t.Error("a state of the wrong width ran")
	}
	_ = state
}

// TestGatedDeltaMatchesMLXLM runs mlx-lm's own gated_delta_ops (what
// gated_delta_update runs on the CPU) on inputs written here, and compares
// its output and state with GatedDelta's bit for bit.
func TestGatedDeltaMatchesMLXLM(t *testing.T) {
	cases := []deltaCase{
		{B: 2, T: 9, Hk: 2, Hv: 4, Dk: 24, Dv: 20},
		{B: 1, T: 7, Hk: 1, Hv: 2, Dk: 32, Dv: 16, vecGate: true, masked: true},
	}
	for _, dt := range []Dtype{Float32, BFloat16} {
		for i, c := range cases {
			t.Run(fmt.Sprintf("%s/%d", dt, i), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				q, k, v, decay, beta, state, mask := deltaInputs(g, c, dt, uint64(40+i))
				in := map[string]*Array{"q": q, "k": k, "v": v, "g": decay, "beta": beta, "state": state}
				if mask != nil {
					in["mask"] = mask
				}
				y, s := g.GatedDelta(q, k, v, decay, beta, state, mask)
				sameAsMLXLM(t, g, in, y, s, "testdata/gated_delta_ref.py")
			})
		}
	}
}

// sameAsMLXLM writes in to a file, runs script on it (with args after its
// input and output files), and compares y and s with the y and state it
// wrote, bit for bit. It returns what the script wrote.
func sameAsMLXLM(t *testing.T, g *Graph, in map[string]*Array, y, s *Array, script string, args ...string) map[string]*Array {
	t.Helper()
	all := []*Array{y, s}
	for _, a := range in {
		all = append(all, a)
	}
	if err := g.Eval(all...); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	inPath, outPath := filepath.Join(dir, "in.safetensors"), filepath.Join(dir, "out.safetensors")
	if err := SaveSafetensors(inPath, in, nil); err != nil {
		t.Fatal(err)
	}
	runPython(t, script, append([]string{inPath, outPath}, args...)...)
	ref, _, err := LoadSafetensors(outPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ref["y"].Dtype() != y.Dtype() {
		t.Fatalf("mlx-lm's y is %s, ours %s", ref["y"].Dtype(), y.Dtype())
	}
	sameBits(t, "y", g.AsType(y, Float32), g.AsType(ref["y"], Float32))
	sameBits(t, "state", s, ref["state"])
	return ref
}

// BenchmarkGatedDelta: one layer of Qwen3-Next's linear attention (16 key
// heads, 32 value heads, 128 by 128 state per head) in bfloat16, a decode
// step and a 512-token prefill, on archgen's kernel and as libmlx's ops
// one step at a time (what mlx-lm runs on the CPU).
func BenchmarkGatedDelta(b *testing.B) {
	benchRecurrence(b, func(g *Graph, T int) []*Array {
		q, k, v, decay, beta, state, _ := deltaInputs(g, deltaCase{B: 1, T: T, Hk: 16, Hv: 32, Dk: 128, Dv: 128}, BFloat16, 3)
		return []*Array{q, k, v, decay, beta, state}
	}, func(g *Graph, in []*Array, native bool) (*Array, *Array) {
		if native {
			return g.GatedDelta(in[0], in[1], in[2], in[3], in[4], in[5], nil)
		}
		return g.GatedDeltaOps(in[0], in[1], in[2], in[3], in[4], in[5], nil)
	})
}

// BenchmarkGatedDeltaGates: one layer of Qwen3.5-0.8B's linear attention
// from its projections' outputs (16 key heads and 16 value heads of 128)
// in float32, a decode step and a 512-token prefill, on archgen's kernel
// and as libmlx's ops (the norms, the gates, then the rule one step at a
// time).
func BenchmarkGatedDeltaGates(b *testing.B) {
	h := DeltaShape{Hk: 16, Dk: 128, Hv: 16, Dv: 128}
	benchRecurrence(b, func(g *Graph, T int) []*Array {
		key := g.RandomKey(7)
		next := func() *Array {
			var sub *Array
			key, sub = g.RandomSplit(key)
			return sub
		}
		return []*Array{
			g.Normal([]int{1, T, 2*h.Hk*h.Dk + h.Hv*h.Dv}, Float32, 0, 1, next()),
			g.Normal([]int{1, T, h.Hv}, Float32, 0, 1, next()),
			g.Normal([]int{1, T, h.Hv}, Float32, 0, 1, next()),
			g.Negative(g.Exp(g.Normal([]int{h.Hv}, Float32, 0, 1, next()))),
			g.Normal([]int{h.Hv}, Float32, 0, 1, next()),
			g.Normal([]int{1, h.Hv, h.Dv, h.Dk}, Float32, 0, 0.5, next()),
		}
	}, func(g *Graph, in []*Array, native bool) (*Array, *Array) {
		was := setNativeRecurrent(native)
		defer setNativeRecurrent(was)
		return g.GatedDeltaGates(in[0], in[1], in[2], in[3], in[4], in[5], nil, h, false)
	})
}

// benchRecurrence times a recurrence at a decode step and a 512-token
// prefill, on archgen's kernel and in its ops form: setup makes the inputs
// for T steps, run builds the op on a graph of each iteration.
func benchRecurrence(b *testing.B, setup func(g *Graph, T int) []*Array, run func(g *Graph, in []*Array, native bool) (*Array, *Array)) {
	for _, T := range []int{1, 512} {
		for _, native := range []bool{true, false} {
			name := fmt.Sprintf("T%d/ops", T)
			if native {
				name = fmt.Sprintf("T%d/kernel", T)
			}
			b.Run(name, func(b *testing.B) {
				g := NewGraph(nil)
				defer g.Close()
				in := setup(g, T)
				if err := g.Eval(in...); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					gs := NewGraph(nil)
					y, s := run(gs, in, native)
					if err := gs.Eval(y, s); err != nil {
						b.Fatal(err)
					}
					gs.Close()
				}
			})
		}
	}
}

// TestConv1DDepthwise checks Conv1D's depthwise causal form (groups = C,
// the inputs led by the K - 1 before them): archgen's kernel against
// libmlx's conv1d bit for bit, every dtype and instruction level, channel
// counts with partial blocks of lanes; and both against the definition,
// y_t = sum over k of w[c, k] x[t + k], in float64.
func TestConv1DDepthwise(t *testing.T) {
	if NativeISA() == 0 {
		t.Skip("this CPU runs no native kernels (no AVX2): Conv1D is libmlx's alone")
	}
	levels := isaLevels(t)
	for _, level := range levels {
		for _, dt := range []Dtype{Float32, BFloat16, Float16} {
			for _, shape := range [][4]int{{1, 1, 24, 4}, {2, 7, 37, 4}, {1, 9, 16, 3}} {
				B, L, C, K := shape[0], shape[1], shape[2], shape[3]
				t.Run(fmt.Sprintf("isa%d/%s/%v", level, dt, shape), func(t *testing.T) {
					SetNativeISA(level)
					g := NewGraph(nil)
					defer g.Close()
					k1, k2 := g.RandomSplit(g.RandomKey(uint64(11 + C)))
					x := g.AsType(g.Normal([]int{B, L + K - 1, C}, Float32, 0, 1, k1), dt)
					w := g.AsType(g.Normal([]int{C, K, 1}, Float32, 0, 1, k2), dt)
					y := g.Conv1D(x, w, 1, 0, 1, C)
					if name := y.primitiveName(); name != "ArchgenDepthwiseConv1d" {
						t.Fatalf("the output came from %q, not archgen's kernel", name)
					}
					was := setNativeRecurrent(false)
					ref := g.Conv1D(x, w, 1, 0, 1, C)
					setNativeRecurrent(was)
					if err := g.Eval(y, ref); err != nil {
						t.Fatal(err)
					}
					if y.Dtype() != dt || fmt.Sprint(y.Shape()) != fmt.Sprint([]int{B, L, C}) {
						t.Fatalf("y is %s %v", y.Dtype(), y.Shape())
					}
					sameBits(t, "y", g.AsType(y, Float32), g.AsType(ref, Float32))
					xv, _ := g.AsType(x, Float32).Float32s()
					wv, _ := g.AsType(w, Float32).Float32s()
					yv, _ := g.AsType(y, Float32).Float32s()
					tol := fastTol(dt) * 4
					for b := range B {
						for l := range L {
							for c := range C {
								var want float64
								for k := range K {
									want += float64(wv[c*K+k]) * float64(xv[(b*(L+K-1)+l+k)*C+c])
								}
								if got := float64(yv[(b*L+l)*C+c]); math.Abs(got-want) > tol*(1+math.Abs(want)) {
									t.Fatalf("y[%d, %d, %d] = %g, want %g", b, l, c, got, want)
								}
							}
						}
					}
				})
			}
		}
	}
}

// TestConv1DErrors: weights that do not fit the input are libmlx's error,
// naming the op.
func TestConv1DErrors(t *testing.T) {
	g := NewGraph(nil)
	defer g.Close()
	const C, K = 5, 4
	x := g.Zeros([]int{1, 3, C}, Float32)
	bad := g.Conv1D(x, g.Zeros([]int{C, K, 2}, Float32), 1, 0, 1, C)
	err := g.Eval(bad)
	if want := "mlx: conv1d: Given groups=5 and weights of shape (5,4,2), expected to have 10 input channels but got 5 input channels instead."; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// BenchmarkConv1DDepthwise: the short convolution of one Qwen3-Next
// linear-attention layer (8192 channels, 4 taps) in bfloat16, a decode
// step and a 512-token prefill, archgen's kernel beside libmlx's conv1d.
func BenchmarkConv1DDepthwise(b *testing.B) {
	g := NewGraph(nil)
	defer g.Close()
	const C, K = 8192, 4
	for _, L := range []int{1, 512} {
		k1, k2 := g.RandomSplit(g.RandomKey(1))
		x := g.AsType(g.Normal([]int{1, L + K - 1, C}, Float32, 0, 1, k1), BFloat16)
		w := g.AsType(g.Normal([]int{C, K, 1}, Float32, 0, 1, k2), BFloat16)
		if err := g.Eval(x, w); err != nil {
			b.Fatal(err)
		}
		for _, native := range []bool{true, false} {
			name := fmt.Sprintf("L%d/mlx", L)
			if native {
				name = fmt.Sprintf("L%d/kernel", L)
			}
			b.Run(name, func(b *testing.B) {
				was := setNativeRecurrent(native)
				defer setNativeRecurrent(was)
				for b.Loop() {
					gs := NewGraph(nil)
					if err := gs.Eval(gs.Conv1D(x, w, 1, 0, 1, C)); err != nil {
						b.Fatal(err)
					}
					gs.Close()
				}
			})
		}
	}
}

// BenchmarkConvStep: the short convolution's step of one Qwen3.5-0.8B
// linear-attention layer (q, k and v side by side, 6144 channels, 4 taps)
// in float32 with silu, a decode step and a 512-token prefill, on
// archgen's kernel, the weights as taps [K, C] (what a model keeps) and as
// MLX's depthwise kernel [C, K, 1].
func BenchmarkConvStep(b *testing.B) {
	g := NewGraph(nil)
	defer g.Close()
	const C, K = 6144, 4
	k1, k2, k3 := g.RandomKey(1), g.RandomKey(2), g.RandomKey(3)
	w := g.Normal([]int{C, K, 1}, Float32, 0, 1, k3)
	taps := g.Contiguous(g.Transpose(g.Reshape(w, C, K), 1, 0))
	state := g.Normal([]int{1, K - 1, C}, Float32, 0, 1, k2)
	if err := g.Eval(w, taps, state); err != nil {
		b.Fatal(err)
	}
	for _, L := range []int{1, 512} {
		x := g.Normal([]int{1, L, C}, Float32, 0, 1, k1)
		if err := g.Eval(x); err != nil {
			b.Fatal(err)
		}
		for _, layout := range []struct {
			name string
			w    *Array
		}{{"taps", taps}, {"stored", w}} {
			b.Run(fmt.Sprintf("L%d/%s", L, layout.name), func(b *testing.B) {
				for b.Loop() {
					gs := NewGraph(nil)
					y, next := gs.ConvStep(x, state, layout.w, nil, true)
					if err := gs.Eval(y, next); err != nil {
						b.Fatal(err)
					}
					gs.Close()
				}
			})
		}
	}
}

// ssmCase is one shape of the Mamba2 scan.
type ssmCase struct {
	b, T, h, p, g, n int
	state            bool
	dDtype           Dtype // D's dtype: the activations', or float32 as loaded
}

func ssmInputs(g *Graph, c ssmCase, dt Dtype, seed uint64) (x, bm, cm, dtr, state *Array, p *SSM) {
	key := g.RandomKey(seed)
	next := func() *Array {
		var sub *Array
		key, sub = g.RandomSplit(key)
		return sub
	}
	x = g.AsType(g.Normal([]int{c.b, c.T, c.h, c.p}, Float32, 0, 1, next()), dt)
	bm = g.AsType(g.Normal([]int{c.b, c.T, c.g, c.n}, Float32, 0, 1, next()), dt)
	cm = g.AsType(g.Normal([]int{c.b, c.T, c.g, c.n}, Float32, 0, 1, next()), dt)
	dtr = g.AsType(g.Normal([]int{c.b, c.T, c.h}, Float32, -1, 1, next()), dt)
	if c.state {
		state = g.Normal([]int{c.b, c.h, c.p, c.n}, Float32, 0, 0.5, next())
	}
	p = &SSM{
		ALog:   g.Normal([]int{c.h}, Float32, 0, 1, next()),
		D:      g.AsType(g.Normal([]int{c.h}, Float32, 0, 1, next()), c.dDtype),
		DtBias: g.AsType(g.Normal([]int{c.h}, Float32, 0, 0.5, next()), dt),
		DtMin:  0.001, DtMax: 100,
	}
	return
}

// ssmCases cover chunks of the ops form (256 steps): one, several and a
// part; grouped heads; a state carried in; D in float32 beside half
// activations (it promotes y, as in mlx-lm).
var ssmCases = []ssmCase{
	{b: 1, T: 1, h: 4, p: 8, g: 1, n: 16, state: true, dDtype: Float32},
	{b: 2, T: 9, h: 4, p: 20, g: 2, n: 8, dDtype: Float32},
	{b: 1, T: 300, h: 2, p: 16, g: 1, n: 32, state: true},
}

// TestSSMScanMatchesMLXLM: SSMScanOps against mlx-lm's own ssm_update (its
// CPU path, ssm_attn) on the same inputs, bit for bit.
func TestSSMScanMatchesMLXLM(t *testing.T) {
	for _, dt := range []Dtype{Float32, BFloat16} {
		for i, c := range ssmCases {
			t.Run(fmt.Sprintf("%s/%d", dt, i), func(t *testing.T) {
				if c.dDtype == 0 {
					c.dDtype = dt
				}
				g := NewGraph(nil)
				defer g.Close()
				x, bm, cm, dtr, state, p := ssmInputs(g, c, dt, uint64(60+i))
				in := map[string]*Array{"x": x, "B": bm, "C": cm, "dt": dtr, "A_log": p.ALog, "D": p.D, "dt_bias": p.DtBias}
				if state != nil {
					in["state"] = state
				}
				y, s := g.SSMScanOps(x, bm, cm, dtr, state, p)
				sameAsMLXLM(t, g, in, y, s, "testdata/ssm_ref.py", fmt.Sprint(p.DtMin), fmt.Sprint(p.DtMax))
			})
		}
	}
}

// TestSSMScan: archgen's kernel against the ops form at every dtype and
// instruction level, within float32 rounding of a sum reordered (its
// recurrence multiplies the decays step by step where the ops form takes
// exponentials of cumulative sums, and sums products where the ops form
// multiplies matrices): a relative 1e-4 of the largest output in float32,
// and a unit of the half type's last place beyond that.
func TestSSMScan(t *testing.T) {
	if NativeISA() == 0 {
		t.Skip("this CPU runs no native kernels (no AVX2): SSMScan composes the ops")
	}
	levels := isaLevels(t)
	for _, level := range levels {
		for _, dt := range []Dtype{Float32, BFloat16, Float16} {
			for i, c := range ssmCases {
				t.Run(fmt.Sprintf("isa%d/%s/%d", level, dt, i), func(t *testing.T) {
					SetNativeISA(level)
					if c.dDtype == 0 {
						c.dDtype = dt
					}
					g := NewGraph(nil)
					defer g.Close()
					x, bm, cm, dtr, state, p := ssmInputs(g, c, dt, uint64(80+i))
					y, s := g.SSMScan(x, bm, cm, dtr, state, p)
					if name := s.primitiveName(); name != "ArchgenSSMScan" {
						t.Fatalf("the state came from %q, not archgen's kernel", name)
					}
					wy, ws := g.SSMScanOps(x, bm, cm, dtr, state, p)
					if err := g.Eval(y, s, wy, ws); err != nil {
						t.Fatal(err)
					}
					if y.Dtype() != wy.Dtype() || fmt.Sprint(y.Shape()) != fmt.Sprint(wy.Shape()) {
						t.Fatalf("y %s %v, the ops' %s %v", y.Dtype(), y.Shape(), wy.Dtype(), wy.Shape())
					}
					near(t, "y", g.AsType(y, Float32), g.AsType(wy, Float32), dt) // rounded to x's dtype before D x joins it
					near(t, "state", s, ws, Float32)
				})
			}
		}
	}
}

// near fails unless every value of a lies within the scan's tolerance of
// b's, relative to b's largest magnitude.
func near(t *testing.T, what string, a, b *Array, dt Dtype) {
	t.Helper()
	av, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	bv, err := b.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	scale := 0.0
	for _, v := range bv {
		scale = max(scale, math.Abs(float64(v)))
	}
	tol := 1e-4 * scale
	switch dt {
	case BFloat16:
		tol += scale / 128
	case Float16:
		tol += scale / 1024
	}
	worst := 0.0
	for i := range av {
		d := math.Abs(float64(av[i]) - float64(bv[i]))
		worst = max(worst, d)
		if d > tol || math.IsNaN(float64(av[i])) != math.IsNaN(float64(bv[i])) {
			t.Fatalf("%s[%d] = %g, the ops give %g (tolerance %g)", what, i, av[i], bv[i], tol)
		}
	}
	t.Logf("%s: largest difference %.3g of %.3g", what, worst, scale)
}

// TestSSMScanErrors: shapes the scan does not take are a graph error
// naming the op and every shape.
func TestSSMScanErrors(t *testing.T) {
	g := NewGraph(nil)
	defer g.Close()
	x, bm, cm, dtr, _, p := ssmInputs(g, ssmCase{b: 1, T: 2, h: 3, p: 4, g: 2, n: 5, dDtype: Float32}, Float32, 1)
	y, _ := g.SSMScan(x, bm, cm, dtr, nil, p)
	err := g.Eval(y)
	want := "mlx: ssm_scan: want x [b, T, h, p], B and C [b, T, g, n] with h a multiple of g, A_log, D and dt_bias [h], dt [b, T, h], state [b, h, p, n]; got x [1, 2, 3, 4], B [1, 2, 2, 5], C [1, 2, 2, 5], A_log [3], D [3], dt [1, 2, 3], dt_bias [3]"
	if err == nil || err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
}

// BenchmarkSSMScan: one Mamba2 layer's scan (32 heads of 64 channels, a
// state of 128, one group) in bfloat16, a decode step and a 512-token
// prefill, archgen's kernel beside the ops form (mlx-lm's ssm_attn).
func BenchmarkSSMScan(b *testing.B) {
	var p *SSM
	benchRecurrence(b, func(g *Graph, T int) []*Array {
		c := ssmCase{b: 1, T: T, h: 32, p: 64, g: 1, n: 128, state: true, dDtype: BFloat16}
		var x, bm, cm, dtr, state *Array
		x, bm, cm, dtr, state, p = ssmInputs(g, c, BFloat16, 3)
		return []*Array{x, bm, cm, dtr, state, p.ALog, p.D, p.DtBias}
	}, func(g *Graph, in []*Array, native bool) (*Array, *Array) {
		if native {
			return g.SSMScan(in[0], in[1], in[2], in[3], in[4], p)
		}
		return g.SSMScanOps(in[0], in[1], in[2], in[3], in[4], p)
	})
}

// selectiveOps is Mamba's selective scan composed of libmlx's ops a step
// at a time, as mlx-lm's mamba module composes it.
func selectiveOps(g *Graph, x, dt, a, b, c, d, state *Array) (*Array, *Array) {
	B, T, D, N := x.Dim(0), x.Dim(1), x.Dim(2), a.Dim(1)
	ys := make([]*Array, T)
	for t := range T {
		xt := g.Reshape(g.Slice(x, []int{0, t, 0}, []int{B, t + 1, D}), B, D)
		dtt := g.Reshape(g.Slice(dt, []int{0, t, 0}, []int{B, t + 1, D}), B, D)
		bt := g.Reshape(g.Slice(b, []int{0, t, 0}, []int{B, t + 1, N}), B, N)
		ct := g.Reshape(g.Slice(c, []int{0, t, 0}, []int{B, t + 1, N}), B, N)
		next := g.Multiply(g.ExpandDims(g.Multiply(dtt, xt), -1), g.ExpandDims(bt, 1))
		if state != nil {
			next = g.Add(next, g.Multiply(state, g.Exp(g.Multiply(g.ExpandDims(dtt, -1), a))))
		}
		ys[t] = g.Add(g.Reshape(g.Matmul(next, g.ExpandDims(ct, -1)), B, D), g.Multiply(d, xt))
		state = next
	}
	return g.Stack(1, ys...), state
}

// TestSelectiveScan: archgen's float32 kernel against the ops composed a
// step at a time, within float32 rounding (a relative 1e-5 of the largest
// value), with and without a state, and its refusals of other shapes and
// dtypes as graph errors.
func TestSelectiveScan(t *testing.T) {
	for i, c := range []struct{ b, T, d, n int }{{1, 1, 4, 3}, {2, 7, 9, 5}, {1, 33, 16, 16}} {
		for _, withState := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/state=%v", i, withState), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				seed := uint64(100 + 10*i)
				x := randn(g, seed, Float32, c.b, c.T, c.d)
				dt := g.Softplus(randn(g, seed+1, Float32, c.b, c.T, c.d))
				a := g.Negative(g.Exp(g.MultiplyScalar(randn(g, seed+2, Float32, c.d, c.n), 0.5)))
				bm := randn(g, seed+3, Float32, c.b, c.T, c.n)
				cm := randn(g, seed+4, Float32, c.b, c.T, c.n)
				d := randn(g, seed+5, Float32, c.d)
				var state *Array
				if withState {
					state = randn(g, seed+6, Float32, c.b, c.d, c.n)
				}
				y, s := g.SelectiveScan(x, dt, a, bm, cm, d, state)
				wy, ws := selectiveOps(g, x, dt, a, bm, cm, d, state)
				if err := g.Eval(y, s, wy, ws); err != nil {
					t.Fatal(err)
				}
				near(t, "y", y, wy, Float32)
				near(t, "state", s, ws, Float32)
			})
		}
	}
	g := NewGraph(nil)
	defer g.Close()
	x := randn(g, 1, Float32, 1, 2, 3)
	y, _ := g.SelectiveScan(x, x, randn(g, 2, Float32, 4, 5), randn(g, 3, Float32, 1, 2, 5), randn(g, 4, Float32, 1, 2, 5), randn(g, 5, Float32, 3), nil)
	err := g.Eval(y)
	want := "mlx: selective_scan: want x and dt [b, T, d], A [d, n], B and C [b, T, n], D [d], state [b, d, n]; got x [1, 2, 3], dt [1, 2, 3], A [4, 5], B [1, 2, 5], C [1, 2, 5], D [3]"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to contain %q", err, want)
	}
	g2 := NewGraph(nil)
	defer g2.Close()
	bf := g2.AsType(randn(g2, 1, Float32, 1, 2, 3), BFloat16)
	y, _ = g2.SelectiveScan(bf, bf, randn(g2, 2, Float32, 3, 5), randn(g2, 3, Float32, 1, 2, 5), randn(g2, 4, Float32, 1, 2, 5), randn(g2, 5, Float32, 3), nil)
	if err := g2.Eval(y); err == nil || !strings.Contains(err.Error(), "the selective scan takes float32 arrays") {
		t.Errorf("bfloat16: %v", err)
	}
}

// linearOps is the diagonal recurrence h = a h + u composed of libmlx's
// ops a step at a time, from state (nil: zeros).
func linearOps(g *Graph, a, u, state *Array) (*Array, *Array) {
	b, T, d := a.Dim(0), a.Dim(1), a.Dim(2)
	h := state
	if h == nil {
		h = g.Zeros([]int{b, d}, Float32)
	}
	step := func(v *Array, t int) *Array { return g.Reshape(g.Slice(v, []int{0, t, 0}, []int{b, t + 1, d}), b, d) }
	ys := make([]*Array, T)
	for t := range T {
		h = g.Add(g.Multiply(step(a, t), h), step(u, t))
		ys[t] = h
	}
	return g.Stack(1, ys...), h
}

// TestLinearRecurrence: archgen's kernel of the diagonal recurrence gives
// the composed steps' values bit for bit (each product rounded before its
// sum, as libmlx's multiply then add round them), with and without a
// state, over channels that fill and do not fill its blocks of 64; other
// shapes and dtypes are refused by name.
func TestLinearRecurrence(t *testing.T) {
	for i, c := range []struct{ b, T, d int }{{1, 1, 4}, {2, 7, 9}, {1, 33, 64}, {3, 5, 130}} {
		for _, withState := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/state=%v", i, withState), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				seed := uint64(300 + 10*i)
				a := g.Sigmoid(randn(g, seed, Float32, c.b, c.T, c.d))
				u := randn(g, seed+1, Float32, c.b, c.T, c.d)
				var state *Array
				if withState {
					state = randn(g, seed+2, Float32, c.b, c.d)
				}
				y, s := g.LinearRecurrence(a, u, state)
				wy, ws := linearOps(g, a, u, state)
				if err := g.Eval(y, s, wy, ws); err != nil {
					t.Fatal(err)
				}
				sameBits(t, "y", y, wy)
				sameBits(t, "state", s, ws)
			})
		}
	}
	g := NewGraph(nil)
	defer g.Close()
	a := randn(g, 1, Float32, 1, 2, 3)
	y, _ := g.LinearRecurrence(a, a, randn(g, 2, Float32, 1, 4))
	want := "mlx: linear_recurrence: want a and u [b, T, d], state [b, d]; got a [1, 2, 3], u [1, 2, 3], state [1, 4]"
	if err := g.Eval(y); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to contain %q", err, want)
	}
	g2 := NewGraph(nil)
	defer g2.Close()
	bf := g2.AsType(randn(g2, 1, Float32, 1, 2, 3), BFloat16)
	y, _ = g2.LinearRecurrence(bf, bf, nil)
	if err := g2.Eval(y); err == nil || !strings.Contains(err.Error(), "the linear recurrence takes float32 arrays") {
		t.Errorf("bfloat16: %v", err)
	}
}

// wkv7Ops is the WKV-7 recurrence composed of libmlx's ops a step at a
// time, as mlx-lm composes it: sab = (S a) bᵀ, S = S diag(w) + v kᵀ + sab,
// y = S r.
func wkv7Ops(g *Graph, r, w, k, v, a, b, state *Array) (*Array, *Array) {
	B, T, H, D := r.Dim(0), r.Dim(1), r.Dim(2), r.Dim(3)
	if state == nil {
		state = g.Zeros([]int{B, H, D, D}, Float32)
	}
	at := func(x *Array, t int) *Array {
		return g.Reshape(g.Slice(x, []int{0, t, 0, 0}, []int{B, t + 1, H, D}), B, H, D)
	}
	ys := make([]*Array, T)
	for t := range T {
		sab := g.Matmul(g.Matmul(state, g.ExpandDims(at(a, t), -1)), g.ExpandDims(at(b, t), -2))
		vk := g.Matmul(g.ExpandDims(at(v, t), -1), g.ExpandDims(at(k, t), -2))
		state = g.Add(g.Add(g.Multiply(state, g.ExpandDims(at(w, t), 2)), vk), sab)
		ys[t] = g.Reshape(g.Matmul(state, g.ExpandDims(at(r, t), -1)), B, H, D)
	}
	return g.Stack(1, ys...), state
}

// TestWKV7: archgen's float32 kernel against the ops composed a step at
// a time, within float32 rounding, with and without a state, on decays in
// (0.5, 1) and unit-length keys as RWKV-7 makes them; and its refusals of
// other shapes and dtypes as graph errors.
func TestWKV7(t *testing.T) {
	for i, c := range []struct{ b, T, h, d int }{{1, 1, 1, 4}, {2, 7, 3, 8}, {1, 40, 2, 16}} {
		for _, withState := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/state=%v", i, withState), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				seed := uint64(300 + 10*i)
				shape := []int{c.b, c.T, c.h, c.d}
				r := randn(g, seed, Float32, shape...)
				w := g.Exp(g.MultiplyScalar(g.Sigmoid(randn(g, seed+1, Float32, shape...)), -0.606531))
				k := randn(g, seed+2, Float32, shape...)
				v := randn(g, seed+3, Float32, shape...)
				kk := randn(g, seed+4, Float32, shape...)
				kk = g.Divide(kk, g.Sqrt(g.Sum(g.Square(kk), true, -1)))
				iclr := g.Sigmoid(randn(g, seed+5, Float32, shape...))
				a, b := g.Negative(kk), g.Multiply(kk, iclr)
				var state *Array
				if withState {
					state = randn(g, seed+6, Float32, c.b, c.h, c.d, c.d)
				}
				y, s := g.WKV7(r, w, k, v, a, b, state)
				wy, ws := wkv7Ops(g, r, w, k, v, a, b, state)
				if err := g.Eval(y, s, wy, ws); err != nil {
					t.Fatal(err)
				}
				near(t, "y", y, wy, Float32)
				near(t, "state", s, ws, Float32)
			})
		}
	}
	g := NewGraph(nil)
	defer g.Close()
	x := randn(g, 1, Float32, 1, 2, 3, 4)
	y, _ := g.WKV7(x, x, x, x, x, randn(g, 2, Float32, 1, 2, 3, 5), nil)
	err := g.Eval(y)
	want := "mlx: wkv7: want r, w, k, v, a and b [b, T, H, D], state [b, H, D, D]; got r [1, 2, 3, 4], w [1, 2, 3, 4], k [1, 2, 3, 4], v [1, 2, 3, 4], a [1, 2, 3, 4], b [1, 2, 3, 5]"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to contain %q", err, want)
	}
	g2 := NewGraph(nil)
	defer g2.Close()
	bf := g2.AsType(randn(g2, 1, Float32, 1, 2, 3, 4), BFloat16)
	y, _ = g2.WKV7(bf, bf, bf, bf, bf, bf, nil)
	if err := g2.Eval(y); err == nil || !strings.Contains(err.Error(), "the WKV-7 recurrence takes float32 arrays") {
		t.Errorf("bfloat16: %v", err)
	}
}

// lightningCase is one shape of lightning attention's recurrence.
type lightningCase struct {
	B, T, H, Dk, Dv int
	state, strided  bool
}

// lightningSlopes are a model's decay rates for H heads, from 2^-0.5 down
// to 2^-8 (a head's decay is exp(-slope)).
func lightningSlopes(h int) []float32 {
	s := make([]float32, h)
	for i := range s {
		s[i] = float32(math.Pow(2, -0.5-7.5*float64(i)/float64(max(1, h-1))))
	}
	return s
}

// lightningInputs makes the recurrence's inputs in dtype dt: q, k and v
// normal (strided: slices of one wider array, as a fused projection gives
// them), logDecay the negated slopes in float32 and decay exp(logDecay),
// and a state where the case has one (nil otherwise).
func lightningInputs(g *Graph, c lightningCase, dt Dtype, seed uint64) (q, k, v, logDecay, decay, state *Array) {
	key := g.RandomKey(seed)
	next := func() *Array {
		var sub *Array
		key, sub = g.RandomSplit(key)
		return sub
	}
	if c.strided {
		wide := g.AsType(g.Normal([]int{c.B, c.T, c.H, 2*c.Dk + c.Dv + 3}, Float32, 0, 1, next()), dt)
		parts := g.SplitAt(wide, []int{c.Dk, 2 * c.Dk, 2*c.Dk + c.Dv}, -1)
		q, k, v = parts[0], parts[1], parts[2]
	} else {
		q = g.AsType(g.Normal([]int{c.B, c.T, c.H, c.Dk}, Float32, 0, 1, next()), dt)
		k = g.AsType(g.Normal([]int{c.B, c.T, c.H, c.Dk}, Float32, 0, 1, next()), dt)
		v = g.AsType(g.Normal([]int{c.B, c.T, c.H, c.Dv}, Float32, 0, 1, next()), dt)
	}
	logDecay = g.Negative(FromSlice(g, lightningSlopes(c.H), c.H))
	decay = g.Exp(logDecay)
	if c.state {
		state = g.AsType(g.Normal([]int{c.B, c.H, c.Dk, c.Dv}, Float32, 0, 1, next()), dt)
	}
	return
}

// lightningCases: one step and many, one head and several, key and value
// widths unequal, filling the kernel's blocks of columns and not.
var lightningCases = []lightningCase{
	{B: 1, T: 1, H: 1, Dk: 16, Dv: 8},
	{B: 2, T: 5, H: 2, Dk: 8, Dv: 24},
	{B: 1, T: 33, H: 3, Dk: 64, Dv: 64},
	{B: 2, T: 33, H: 2, Dk: 20, Dv: 20},
	{B: 1, T: 5, H: 3, Dk: 24, Dv: 72},
}

// lightningPaths runs f at every width of the kernel's vectors this CPU
// runs: the baseline (the recurrent kernels turned off), then each native
// level.
func lightningPaths(t *testing.T, f func(t *testing.T)) {
	levels := isaLevels(t)
	t.Run("baseline", func(t *testing.T) {
		was := setNativeRecurrent(false)
		defer setNativeRecurrent(was)
		f(t)
	})
	for _, level := range levels {
		t.Run(fmt.Sprintf("isa%d", level), func(t *testing.T) {
			SetNativeISA(level)
			f(t)
		})
	}
}

// TestLightning runs archgen's lightning kernel against the recurrence
// composed of libmlx's ops (LightningOps, mlx-lm's recurrent_gla) in
// float32: q, k and v contiguous and strided, with and without a state, at
// every width of the kernel's vectors. The state agrees bit for bit (each
// step's products rounded before their sum, as the ops round them), y
// within float32 rounding of a sum in another order (a relative 1e-4 of
// the largest value); every width gives the same bits.
func TestLightning(t *testing.T) {
	for i, c := range lightningCases {
		for _, withState := range []bool{false, true} {
			for _, strided := range []bool{false, true} {
				c.state, c.strided = withState, strided
				t.Run(fmt.Sprintf("%d/state=%v/strided=%v", i, withState, strided), func(t *testing.T) {
					g := NewGraph(nil)
					defer g.Close()
					scale := 1 / math.Sqrt(float64(c.Dk))
					q, k, v, _, decay, state := lightningInputs(g, c, Float32, uint64(500+i))
					wy, ws := g.LightningOps(q, k, v, decay, state, scale)
					if err := g.Eval(wy, ws); err != nil {
						t.Fatal(err)
					}
					var first *Array
					lightningPaths(t, func(t *testing.T) {
						y, s := g.Lightning(q, k, v, decay, state, scale)
						if name := y.primitiveName(); name != "ArchgenLightning" {
							t.Fatalf("the output came from %q, not archgen's kernel", name)
						}
						if err := g.Eval(y, s); err != nil {
							t.Fatal(err)
						}
						if fmt.Sprint(y.Shape(), s.Shape()) != fmt.Sprint([]int{c.B, c.T, c.H, c.Dv}, []int{c.B, c.H, c.Dk, c.Dv}) {
							t.Fatalf("y is %v, the state %v", y.Shape(), s.Shape())
						}
						near(t, "y", y, wy, Float32)
						sameBits(t, "state", s, ws)
						if first == nil {
							first = y
						} else {
							sameBits(t, "y beside the first width's", y, first)
						}
					})
				})
			}
		}
	}
}

// TestLightningSplit: the kernel over T steps equals the kernel over the
// first steps, then the rest from the state they left, bit for bit (the
// same operations in the same order), with and without a state to start.
func TestLightningSplit(t *testing.T) {
	for i, c := range []lightningCase{{B: 2, T: 33, H: 3, Dk: 16, Dv: 24}, {B: 1, T: 9, H: 2, Dk: 20, Dv: 8, state: true, strided: true}} {
		for _, at := range []int{1, c.T / 2, c.T - 1} {
			t.Run(fmt.Sprintf("%d/at%d", i, at), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				scale := 1 / math.Sqrt(float64(c.Dk))
				q, k, v, _, decay, state := lightningInputs(g, c, Float32, 77)
				y, s := g.Lightning(q, k, v, decay, state, scale)
				part := func(x *Array, lo, hi int) *Array {
					return g.Slice(x, []int{0, lo, 0, 0}, []int{c.B, hi, c.H, x.Dim(3)})
				}
				y1, s1 := g.Lightning(part(q, 0, at), part(k, 0, at), part(v, 0, at), decay, state, scale)
				y2, s2 := g.Lightning(part(q, at, c.T), part(k, at, c.T), part(v, at, c.T), decay, s1, scale)
				if err := g.Eval(y, s, y1, y2, s2); err != nil {
					t.Fatal(err)
				}
				sameBits(t, "y", g.Concatenate(1, y1, y2), y)
				sameBits(t, "state", s2, s)
			})
		}
	}
}

// TestLightningNoSteps: over no steps both forms give an empty y and the
// state they were given (zeros for none).
func TestLightningNoSteps(t *testing.T) {
	for _, withState := range []bool{false, true} {
		t.Run(fmt.Sprintf("state=%v", withState), func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			c := lightningCase{B: 2, T: 0, H: 3, Dk: 8, Dv: 12, state: withState}
			q, k, v, _, decay, state := lightningInputs(g, c, Float32, 9)
			want := state
			if want == nil {
				want = g.Zeros([]int{c.B, c.H, c.Dk, c.Dv}, Float32)
			}
			for _, native := range []bool{true, false} {
				y, s := g.Lightning(q, k, v, decay, state, 0.5)
				if !native {
					y, s = g.LightningOps(q, k, v, decay, state, 0.5)
				}
				if err := g.Eval(y, s, want); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(y.Shape()) != fmt.Sprint([]int{c.B, 0, c.H, c.Dv}) {
					t.Fatalf("native %v: y is %v", native, y.Shape())
				}
				sameBits(t, "state", s, want)
			}
		})
	}
}

// TestLightningHalf: LightningOps in bfloat16 and float16 (a model's half
// precision path, its state rounded to the half type twice every step)
// against the float32 kernel on the same inputs cast to float32 (the
// decay as the ops round it), within lightningHalfTol.
func TestLightningHalf(t *testing.T) {
	for _, dt := range []Dtype{BFloat16, Float16} {
		for i, c := range lightningCases {
			for _, withState := range []bool{false, true} {
				c.state = withState
				t.Run(fmt.Sprintf("%s/%d/state=%v", dt, i, withState), func(t *testing.T) {
					g := NewGraph(nil)
					defer g.Close()
					scale := 1 / math.Sqrt(float64(c.Dk))
					q, k, v, _, decay, state := lightningInputs(g, c, dt, uint64(600+i))
					hy, hs := g.LightningOps(q, k, v, decay, state, scale)
					f32 := func(x *Array) *Array { return g.AsType(x, Float32) }
					var s32 *Array
					if state != nil {
						s32 = f32(state)
					}
					// The decay as the ops use it, rounded to the half type.
					y, s := g.Lightning(f32(q), f32(k), f32(v), f32(g.AsType(decay, dt)), s32, scale)
					if err := g.Eval(hy, hs, y, s); err != nil {
						t.Fatal(err)
					}
					if hy.Dtype() != dt || hs.Dtype() != dt {
						t.Fatalf("y %s, state %s: want both %s", hy.Dtype(), hs.Dtype(), dt)
					}
					halfNear(t, "y", f32(hy), y, lightningHalfTol(dt, c.T))
					halfNear(t, "state", f32(hs), s, lightningHalfTol(dt, c.T))
				})
			}
		}
	}
}

// lightningHalfTol is how far the recurrence in half precision over T
// steps may stray from float32's, relative to the largest value: each
// step rounds the state twice (the decayed state, then the sum), each at
// most half a unit of the half type's last place (2^-7 of the value in
// bfloat16, 2^-10 in float16) at the largest magnitude, and the errors of
// the steps add as a random walk: two units times sqrt(T + 1).
func lightningHalfTol(dt Dtype, T int) float64 {
	unit := 1.0 / 128
	if dt == Float16 {
		unit = 1.0 / 1024
	}
	return 2 * unit * math.Sqrt(float64(T+1))
}

// halfNear fails unless every value of a lies within rel times b's largest
// magnitude of b's.
func halfNear(t *testing.T, what string, a, b *Array, rel float64) {
	t.Helper()
	av, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	bv, err := b.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	scale := 0.0
	for _, v := range bv {
		scale = max(scale, math.Abs(float64(v)))
	}
	worst := 0.0
	for i := range av {
		d := math.Abs(float64(av[i]) - float64(bv[i]))
		worst = max(worst, d)
		if d > rel*scale || math.IsNaN(float64(av[i])) {
			t.Fatalf("%s[%d] = %g, the kernel gives %g (tolerance %g)", what, i, av[i], bv[i], rel*scale)
		}
	}
	t.Logf("%s: largest difference %.3g of %.3g (tolerance %.3g)", what, worst, scale, rel*scale)
}

// TestLightningErrors: dtypes and shapes the recurrence does not take are
// a graph error naming the op and every shape or dtype, never a crash.
func TestLightningErrors(t *testing.T) {
	z := func(g *Graph, dt Dtype, shape ...int) *Array { return g.Zeros(shape, dt) }
	cases := []struct {
		name  string
		build func(g *Graph) (*Array, *Array)
		want  string
	}{
		{"bfloat16 inputs to the kernel", func(g *Graph) (*Array, *Array) {
			return g.Lightning(z(g, BFloat16, 1, 2, 3, 4), z(g, BFloat16, 1, 2, 3, 4), z(g, BFloat16, 1, 2, 3, 6), z(g, Float32, 3), nil, 0.5)
		}, "mlx: lightning: the lightning recurrence's kernel takes float32 arrays; got q bfloat16, k bfloat16, v bfloat16, decay float32"},
		{"a float16 state to the kernel", func(g *Graph) (*Array, *Array) {
			return g.Lightning(z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 6), z(g, Float32, 3), z(g, Float16, 1, 3, 4, 6), 0.5)
		}, "mlx: lightning: the lightning recurrence's kernel takes float32 arrays; got q float32, k float32, v float32, decay float32, state float16"},
		{"a bfloat16 decay to the kernel", func(g *Graph) (*Array, *Array) {
			return g.Lightning(z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 6), z(g, BFloat16, 3), nil, 0.5)
		}, "mlx: lightning: the lightning recurrence's kernel takes float32 arrays; got q float32, k float32, v float32, decay bfloat16"},
		{"k of another width", func(g *Graph) (*Array, *Array) {
			return g.Lightning(z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 5), z(g, Float32, 1, 2, 3, 6), z(g, Float32, 3), nil, 0.5)
		}, "mlx: lightning: want q and k [B, T, H, Dk], v [B, T, H, Dv], decay [H], state [B, H, Dk, Dv]; got q [1, 2, 3, 4], k [1, 2, 3, 5], v [1, 2, 3, 6], decay [3]"},
		{"v of other steps", func(g *Graph) (*Array, *Array) {
			return g.Lightning(z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 3, 3, 6), z(g, Float32, 3), nil, 0.5)
		}, "mlx: lightning: want q and k [B, T, H, Dk], v [B, T, H, Dv], decay [H], state [B, H, Dk, Dv]; got q [1, 2, 3, 4], k [1, 2, 3, 4], v [1, 3, 3, 6], decay [3]"},
		{"q of three axes", func(g *Graph) (*Array, *Array) {
			return g.Lightning(z(g, Float32, 2, 3, 4), z(g, Float32, 2, 3, 4), z(g, Float32, 1, 2, 3, 6), z(g, Float32, 3), nil, 0.5)
		}, "mlx: lightning: want q and k [B, T, H, Dk], v [B, T, H, Dv], decay [H], state [B, H, Dk, Dv]; got q [2, 3, 4], k [2, 3, 4], v [1, 2, 3, 6], decay [3]"},
		{"a decay of the wrong length", func(g *Graph) (*Array, *Array) {
			return g.Lightning(z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 6), z(g, Float32, 2), nil, 0.5)
		}, "mlx: lightning: want q and k [B, T, H, Dk], v [B, T, H, Dv], decay [H], state [B, H, Dk, Dv]; got q [1, 2, 3, 4], k [1, 2, 3, 4], v [1, 2, 3, 6], decay [2]"},
		{"a state of value rows by key columns", func(g *Graph) (*Array, *Array) {
			return g.Lightning(z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 6), z(g, Float32, 3), z(g, Float32, 1, 3, 6, 4), 0.5)
		}, "mlx: lightning: want q and k [B, T, H, Dk], v [B, T, H, Dv], decay [H], state [B, H, Dk, Dv]; got q [1, 2, 3, 4], k [1, 2, 3, 4], v [1, 2, 3, 6], decay [3], state [1, 3, 6, 4]"},
		{"the ops: a state of the wrong shape", func(g *Graph) (*Array, *Array) {
			return g.LightningOps(z(g, BFloat16, 1, 2, 3, 4), z(g, BFloat16, 1, 2, 3, 4), z(g, BFloat16, 1, 2, 3, 6), z(g, Float32, 3), z(g, BFloat16, 2, 3, 4, 6), 0.5)
		}, "mlx: lightning: want q and k [B, T, H, Dk], v [B, T, H, Dv], decay [H], state [B, H, Dk, Dv]; got q [1, 2, 3, 4], k [1, 2, 3, 4], v [1, 2, 3, 6], decay [3], state [2, 3, 4, 6]"},
		{"the ops: v of another dtype", func(g *Graph) (*Array, *Array) {
			return g.LightningOps(z(g, BFloat16, 1, 2, 3, 4), z(g, BFloat16, 1, 2, 3, 4), z(g, Float32, 1, 2, 3, 6), z(g, Float32, 3), nil, 0.5)
		}, "mlx: lightning: the lightning recurrence's ops take q, k and v of one float dtype, a float decay and state; got q bfloat16, k bfloat16, v float32, decay float32"},
		{"the ops: integer inputs", func(g *Graph) (*Array, *Array) {
			return g.LightningOps(z(g, Int32, 1, 2, 3, 4), z(g, Int32, 1, 2, 3, 4), z(g, Int32, 1, 2, 3, 6), z(g, Float32, 3), nil, 0.5)
		}, "mlx: lightning: the lightning recurrence's ops take q, k and v of one float dtype, a float decay and state; got q int32, k int32, v int32, decay float32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			y, s := c.build(g)
			if y.Valid() || s.Valid() {
				t.Fatal("a refused recurrence returned valid arrays")
			}
			if err := g.Eval(y); err == nil || err.Error() != c.want {
				t.Errorf("error\n%v\nwant\n%s", err, c.want)
			}
		})
	}
}

// TestLightningMatchesMLXLM runs mlx-lm's own recurrent_gla on inputs
// written here and compares LightningOps' output and state with it bit for
// bit, in float32 and bfloat16; and the float32 kernel on the same inputs
// cast to float32 with it: in float32 the state bit for bit and y within
// float32 rounding, in bfloat16 within lightningHalfTol.
func TestLightningMatchesMLXLM(t *testing.T) {
	const script = "testdata/lightning_ref.py" // mlx-lm's recurrent_gla on the inputs
	cases := []lightningCase{
		{B: 2, T: 9, H: 3, Dk: 16, Dv: 24},
		{B: 1, T: 7, H: 4, Dk: 32, Dv: 32, state: true},
	}
	for _, dt := range []Dtype{Float32, BFloat16} {
		for i, c := range cases {
			t.Run(fmt.Sprintf("%s/%d", dt, i), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				scale := 1 / math.Sqrt(float64(c.Dk))
				q, k, v, logDecay, decay, state := lightningInputs(g, c, dt, uint64(700+i))
				in := map[string]*Array{"q": q, "k": k, "v": v, "g": logDecay}
				f32 := func(x *Array) *Array { return g.AsType(x, Float32) }
				var s32 *Array
				if state != nil {
					in["state"] = state
					s32 = f32(state)
				}
				y, s := g.LightningOps(q, k, v, decay, state, scale)
				ref := sameAsMLXLM(t, g, in, y, s, script, fmt.Sprint(scale))
				ky, ks := g.Lightning(f32(q), f32(k), f32(v), f32(g.AsType(decay, dt)), s32, scale)
				if err := g.Eval(ky, ks); err != nil {
					t.Fatal(err)
				}
				if dt == Float32 {
					near(t, "kernel y", ky, ref["y"], Float32)
					sameBits(t, "kernel state", ks, ref["state"])
				} else {
					halfNear(t, "y", f32(ref["y"]), ky, lightningHalfTol(dt, c.T))
					halfNear(t, "state", f32(ref["state"]), ks, lightningHalfTol(dt, c.T))
				}
			})
		}
	}
}

// BenchmarkLightning: one layer of lightning attention (16 heads, 128 by
// 128 state per head) in float32, a decode step and a 512-token prefill,
// on archgen's kernel and as libmlx's ops one step at a time (what mlx-lm
// runs).
func BenchmarkLightning(b *testing.B) {
	const scale = 0.08838834764831845 // 128^-1/2
	benchRecurrence(b, func(g *Graph, T int) []*Array {
		q, k, v, _, decay, state := lightningInputs(g, lightningCase{B: 1, T: T, H: 16, Dk: 128, Dv: 128, state: true}, Float32, 3)
		return []*Array{q, k, v, decay, state}
	}, func(g *Graph, in []*Array, native bool) (*Array, *Array) {
		if native {
			return g.Lightning(in[0], in[1], in[2], in[3], in[4], scale)
		}
		return g.LightningOps(in[0], in[1], in[2], in[3], in[4], scale)
	})
}
