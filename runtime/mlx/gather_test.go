package mlx

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// moeInputs makes a mixture-of-experts call's inputs: tokens x [T, 1, 1, K]
// (as mlx-lm expands them before its expert layers) of dtype dt, and each
// token's k experts out of e, drawn at random (int32 [T, k]).
func moeInputs(g *Graph, seed uint64, t, k, e, K int, dt Dtype) (x, idx *Array) {
	k1, k2 := g.RandomSplit(g.RandomKey(seed))
	x = g.AsType(g.Normal([]int{t, 1, 1, K}, Float32, 0, 1, k1), dt)
	// Random scores per expert; the top k of each token are its experts.
	scores := g.Uniform([]int{t, e}, Float32, k2)
	idx = g.AsType(g.Slice(g.Argsort(g.Negative(scores), -1), []int{0, 0}, []int{t, k}), Int32)
	return x, idx
}

// values reads a as float32s.
func values(t *testing.T, g *Graph, a *Array) []float32 {
	t.Helper()
	v, err := g.AsType(a, Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// closeTo checks got against want elementwise: within tol, absolute and
// relative to the size of want.
func closeTo(t *testing.T, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); !(d <= tol*(1+math.Abs(float64(want[i])))) {
			t.Fatalf("element %d: %g, want %g", i, got[i], want[i])
		}
	}
}

// TestGatherMMLoop checks GatherMM against a loop of Matmuls, one per token
// and chosen expert (float32: libmlx's CPU gather_mm takes no other dtype,
// see TestGatherErrors), with each token's
// experts in the indices and with the tokens sorted by expert (mlx-lm's
// path when many tokens are routed: sorted_indices, then unsorted back).
func TestGatherMMLoop(t *testing.T) {
	const T, k, E, K, N = 40, 2, 6, 64, 24
	for _, dt := range []Dtype{Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			x, idx := moeInputs(g, 11, T, k, E, K, dt)
			w := g.AsType(g.Normal([]int{E, K, N}, Float32, 0, 0.2, g.RandomKey(12)), dt)
			got := g.GatherMM(x, w, nil, idx, false)
			// mlx-lm's sorted form: the T*k (token, expert) pairs in order
			// of expert, each with its token's row.
			flat := g.Flatten(idx, 0, -1)
			order := g.Argsort(flat, 0)
			rows := g.Take(g.Flatten(x, 0, -3), g.FloorDivide(order, g.Scalar(k, Int32)), 0)
			sorted := g.GatherMM(rows, w, nil, g.Take(flat, order, 0), true)
			unsorted := g.Reshape(g.Take(sorted, g.Argsort(order, 0), 0), T, k, 1, N)
			if err := g.Eval(got, unsorted, idx); err != nil {
				t.Fatal(err)
			}
			if sh := got.Shape(); fmt.Sprint(sh) != fmt.Sprint([]int{T, k, 1, N}) || got.Dtype() != dt {
				t.Fatalf("shape %v dtype %s, want [%d %d 1 %d] %s", sh, got.Dtype(), T, k, N, dt)
			}
			ids, err := ToSlice[int32](idx)
			if err != nil {
				t.Fatal(err)
			}
			hit := map[int32]bool{}
			var loop []*Array
			for tok := 0; tok < T; tok++ {
				for j := 0; j < k; j++ {
					e := int(ids[tok*k+j])
					hit[int32(e)] = true
					xt := g.Slice(x, []int{tok, 0, 0, 0}, []int{tok + 1, 1, 1, K})
					we := g.Slice(w, []int{e, 0, 0}, []int{e + 1, K, N})
					loop = append(loop, g.Reshape(g.Matmul(g.Reshape(xt, 1, K), g.Reshape(we, K, N)), 1, 1, N))
				}
			}
			if len(hit) < E {
				t.Fatalf("the tokens hit %d of %d experts", len(hit), E)
			}
			want := g.Reshape(g.Concatenate(0, loop...), T, k, 1, N)
			if err := g.Eval(want); err != nil {
				t.Fatal(err)
			}
			const tol = 1e-5
			wv := values(t, g, want)
			closeTo(t, values(t, g, got), wv, tol)
			closeTo(t, values(t, g, unsorted), wv, tol)
		})
	}
}

// gqmmCase is one GatherQMM check.
type gqmmCase struct {
	mode        string
	bits, group int
	dt          Dtype // of x, and of the scales and biases where the mode has floating ones
	transpose   bool
	sorted      bool
}

func (c gqmmCase) String() string {
	return fmt.Sprintf("%s_b%d_g%d_%s_t%v_s%v", c.mode, c.bits, c.group, c.dt, c.transpose, c.sorted)
}

// TestGatherQMM checks GatherQMM against libmlx's dequantize followed by
// GatherMM (itself checked above against a loop of matmuls) over the same
// quantized experts: affine at every bit width and group size MLX packs,
// in float32, bfloat16 and float16; mxfp4 (gpt-oss's experts); untransposed
// weights; and the sorted-indices path.
func TestGatherQMM(t *testing.T) {
	var cases []gqmmCase
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, dt := range []Dtype{Float32, BFloat16, Float16} {
				cases = append(cases, gqmmCase{"affine", bits, group, dt, true, false})
			}
		}
	}
	cases = append(cases,
		gqmmCase{"affine", 4, 64, Float32, true, true},
		gqmmCase{"affine", 4, 64, BFloat16, true, true},
		gqmmCase{"affine", 4, 32, Float32, false, false},
		gqmmCase{"mxfp4", 4, 32, Float32, true, false},
		gqmmCase{"mxfp4", 4, 32, BFloat16, true, false},
		gqmmCase{"mxfp4", 4, 32, Float32, true, true},
	)
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) { checkGatherQMM(t, c) })
	}
}

func checkGatherQMM(t *testing.T, c gqmmCase) {
	const E, K = 8, 256
	T, k, N := 3, 2, 40
	if !c.transpose {
		N = 64 // quantized along N, in whole groups
	}
	if c.sorted {
		T = 40
	}
	g := NewGraph(nil)
	defer g.Close()
	x, idx := moeInputs(g, uint64(c.bits*100+c.group), T, k, E, K, c.dt)
	shape := []int{E, N, K}
	if !c.transpose {
		shape = []int{E, K, N}
	}
	w := g.Normal(shape, Float32, 0, 0.2, g.RandomKey(uint64(c.group)))
	q := g.QuantizeMode(w, c.group, c.bits, c.mode)
	if c.mode == "affine" {
		q.Scales, q.Biases = g.AsType(q.Scales, c.dt), g.AsType(q.Biases, c.dt)
	}
	// The reference: the same quantized experts dequantized by mlx into
	// float32, then a gather of float32 matmuls.
	wq := g.Dequantize(q, Float32)
	if c.transpose {
		wq = g.Swapaxes(wq, -1, -2)
	}
	xs, ids, order := x, idx, (*Array)(nil)
	if c.sorted {
		flat := g.Flatten(idx, 0, -1)
		order = g.Argsort(flat, 0)
		xs = g.Take(g.Flatten(x, 0, -3), g.FloorDivide(order, g.Scalar(float64(k), Int32)), 0)
		ids = g.Take(flat, order, 0)
	}
	got := g.GatherQMM(xs, q, nil, ids, c.transpose, c.sorted)
	want := g.GatherMM(g.AsType(xs, Float32), wq, nil, ids, false)
	if c.sorted {
		back := g.Argsort(order, 0)
		got = g.Reshape(g.Take(got, back, 0), T, k, 1, N)
		want = g.Reshape(g.Take(want, back, 0), T, k, 1, N)
	}
	if err := g.Eval(got, want); err != nil {
		t.Fatal(err)
	}
	if sh := got.Shape(); fmt.Sprint(sh) != fmt.Sprint([]int{T, k, 1, N}) || got.Dtype() != c.dt {
		t.Fatalf("shape %v dtype %s, want [%d %d 1 %d] %s", sh, got.Dtype(), T, k, N, c.dt)
	}
	tol := 1e-4 // float32 products summed in another order
	switch c.dt {
	// With x, scales and biases all of a half type, mlx computes in that
	// type: each of the K = 256 partial sums (of size about 1 to 3 here)
	// rounded to 8 (bfloat16) or 11 (float16) bits, which moves the
	// result by up to about 0.1 (bfloat16) and 0.02 (float16); a wrong
	// expert moves it by about the outputs' own size (3 or so).
	case BFloat16:
		tol = 0.2
	case Float16:
		tol = 0.03
	}
	if c.dt == Float32 && c.mode == "affine" && c.transpose && (c.bits == 4 || c.bits == 8) && NativeQMM16() {
		// Experts of more than 8 rows run on the integer panels, x rounded
		// to 16 bits per group (gridSlack).
		tol += gridSlack(t, g, x, g.Dequantize(q, Float32), c.group)
	}
	closeTo(t, values(t, g, got), values(t, g, want), tol)
}

// GatherMM and GatherQMM report bad arguments as errors with MLX's message.
func TestGatherErrors(t *testing.T) {
	cases := []struct {
		name  string
		build func(g *Graph) *Array
		want  string
	}{
		{"gather_mm with mismatched inner dimensions", func(g *Graph) *Array {
			return g.GatherMM(g.Zeros([]int{2, 1, 1, 8}, Float32), g.Zeros([]int{4, 6, 3}, Float32), nil, g.Zeros([]int{2, 2}, Int32), false)
		}, "gather_mm: [gather_mm]"},
		{"gather_mm with float indices", func(g *Graph) *Array {
			return g.GatherMM(g.Zeros([]int{2, 1, 1, 8}, Float32), g.Zeros([]int{4, 8, 3}, Float32), nil, g.Zeros([]int{2, 2}, Float32), false)
		}, "gather_mm: [gather_mm]"},
		{"gather_mm in bfloat16 on the CPU", func(g *Graph) *Array {
			return g.GatherMM(g.Zeros([]int{2, 1, 1, 8}, BFloat16), g.Zeros([]int{4, 8, 3}, BFloat16), nil, g.Zeros([]int{2, 2}, Int32), false)
		}, "[GatherMM::eval] Currently only supports float32."},
		{"gather_qmm of an unpacked weight", func(g *Graph) *Array {
			q := Quantized{Weight: g.Zeros([]int{4, 3, 8}, Float32), Scales: g.Zeros([]int{4, 3, 1}, Float32),
				Biases: g.Zeros([]int{4, 3, 1}, Float32), GroupSize: 64, Bits: 4}
			return g.GatherQMM(g.Zeros([]int{2, 1, 1, 64}, Float32), q, nil, g.Zeros([]int{2, 2}, Int32), true, false)
		}, "gather_qmm: [gather_qmm]"},
		{"gather_qmm in affine mode without biases", func(g *Graph) *Array {
			q := g.Quantize(g.Zeros([]int{4, 3, 64}, Float32), 64, 4)
			q.Biases = nil
			return g.GatherQMM(g.Zeros([]int{2, 1, 1, 64}, Float32), q, nil, g.Zeros([]int{2, 2}, Int32), true, false)
		}, "gather_qmm: [gather_qmm]"},
		{"gather_qmm in an unknown mode", func(g *Graph) *Array {
			q := g.Quantize(g.Zeros([]int{4, 3, 64}, Float32), 64, 4)
			q.Mode = "int3"
			return g.GatherQMM(g.Zeros([]int{2, 1, 1, 64}, Float32), q, nil, g.Zeros([]int{2, 2}, Int32), true, false)
		}, "int3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			out := c.build(g)
			err := g.Eval(out)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}
