package mlx

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/archgen/archgen/internal/npy"
)

// The op tests compare every op with numpy: each case names its inputs,
// builds the op on a graph, and gives the numpy expression of the same
// computation; testdata/numpy_ref.py evaluates the expressions (no MLX
// involved) and the results are compared in value, shape and dtype.

// input is one random input of a case.
type input struct {
	shape []int
	kind  byte // 'f' floats in [-2, 2), 'p' positive floats, 'i' int32 in [0, n), 'b' bool
	n     int
}

func f32(shape ...int) input        { return input{shape: shape, kind: 'f'} }
func pos(shape ...int) input        { return input{shape: shape, kind: 'p'} }
func idx(n int, shape ...int) input { return input{shape: shape, kind: 'i', n: n} }
func boolean(shape ...int) input    { return input{shape: shape, kind: 'b'} }

type opCase struct {
	name   string
	in     []input
	expr   string // numpy, over inputs a, b, c, ...
	dtype  Dtype  // the dtype MLX must give
	tol    float64
	build  func(g *Graph, x []*Array) *Array
	buildN func(g *Graph, x []*Array) []*Array // for ops with several results
}

func opCases() []opCase {
	const t = 1e-5
	un := func(name, expr string, kind func(...int) input, f func(g *Graph, a *Array) *Array) opCase {
		return opCase{name: name, in: []input{kind(3, 5)}, expr: expr, dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return f(g, x[0]) }}
	}
	bin := func(name, expr string, f func(g *Graph, a, b *Array) *Array) opCase {
		return opCase{name: name, in: []input{f32(3, 4), f32(4)}, expr: expr, dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return f(g, x[0], x[1]) }}
	}
	cmp := func(name, expr string, f func(g *Graph, a, b *Array) *Array) opCase {
		return opCase{name: name, in: []input{idx(3, 4, 4), idx(3, 4)}, expr: expr, dtype: Bool,
			build: func(g *Graph, x []*Array) *Array { return f(g, x[0], x[1]) }}
	}
	return []opCase{
		// Linear algebra.
		{name: "matmul", in: []input{f32(2, 3, 4), f32(4, 5)}, expr: "a @ b", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Matmul(x[0], x[1]) }},
		{name: "addmm", in: []input{f32(3, 5), f32(3, 4), f32(4, 5)}, expr: "0.5 * a + 2.0 * (b @ c)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Addmm(x[0], x[1], x[2], 2, 0.5) }},
		// gather_mm as a mixture of experts calls it: tokens a [T, 1, 1, K],
		// experts b [E, K, N], each token's experts c [T, k].
		{name: "gather_mm_rhs", in: []input{f32(5, 1, 1, 8), f32(4, 8, 3), idx(4, 5, 2)},
			expr: "np.stack([np.stack([a[t, 0] @ b[c[t, j]] for j in range(2)]) for t in range(5)])", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.GatherMM(x[0], x[1], nil, x[2], false) }},
		{name: "gather_mm_lhs_rhs", in: []input{f32(3, 2, 8), f32(4, 8, 3), idx(3, 6), idx(4, 6)},
			expr: "np.stack([a[c[i]] @ b[d[i]] for i in range(6)])", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.GatherMM(x[0], x[1], x[2], x[3], false) }},

		// Elementwise, two arrays (broadcasting).
		bin("add", "a + b", (*Graph).Add),
		bin("subtract", "a - b", (*Graph).Subtract),
		bin("multiply", "a * b", (*Graph).Multiply),
		bin("divide", "a / b", (*Graph).Divide),
		bin("maximum", "np.maximum(a, b)", (*Graph).Maximum),
		bin("minimum", "np.minimum(a, b)", (*Graph).Minimum),
		{name: "power", in: []input{pos(3, 4), f32(3, 4)}, expr: "a ** b", dtype: Float32, tol: 1e-4,
			build: func(g *Graph, x []*Array) *Array { return g.Power(x[0], x[1]) }},
		{name: "floor_divide", in: []input{idx(20, 3, 4), idx(5, 4)}, expr: "a // (b + 1)", dtype: Int32,
			build: func(g *Graph, x []*Array) *Array { return g.FloorDivide(x[0], g.AddScalar(x[1], 1)) }},
		{name: "floor_divide_float", in: []input{f32(3, 4), pos(4)}, expr: "np.floor(a / b)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.FloorDivide(x[0], x[1]) }},
		{name: "remainder", in: []input{idx(20, 3, 4), idx(5, 4)}, expr: "a % (b + 1)", dtype: Int32,
			build: func(g *Graph, x []*Array) *Array { return g.Remainder(x[0], g.AddScalar(x[1], 1)) }},
		cmp("equal", "a == b", (*Graph).Equal),
		cmp("not_equal", "a != b", (*Graph).NotEqual),
		cmp("less", "a < b", (*Graph).Less),
		cmp("less_equal", "a <= b", (*Graph).LessEqual),
		cmp("greater", "a > b", (*Graph).Greater),
		cmp("greater_equal", "a >= b", (*Graph).GreaterEqual),
		{name: "logical_and", in: []input{boolean(6), boolean(6)}, expr: "a & b", dtype: Bool,
			build: func(g *Graph, x []*Array) *Array { return g.LogicalAnd(x[0], x[1]) }},
		{name: "logical_or", in: []input{boolean(6), boolean(6)}, expr: "a | b", dtype: Bool,
			build: func(g *Graph, x []*Array) *Array { return g.LogicalOr(x[0], x[1]) }},
		{name: "logical_not", in: []input{boolean(6)}, expr: "~a", dtype: Bool,
			build: func(g *Graph, x []*Array) *Array { return g.LogicalNot(x[0]) }},

		// Scalars take the array's dtype, as Python scalars do in mlx.
		{name: "add_scalar", in: []input{f32(5)}, expr: "a + 1.5", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.AddScalar(x[0], 1.5) }},
		{name: "multiply_scalar_bf16", in: []input{f32(8)}, expr: "bf16(bf16(a) * 3.0)", dtype: BFloat16, tol: 1e-2,
			build: func(g *Graph, x []*Array) *Array { return g.MultiplyScalar(g.AsType(x[0], BFloat16), 3) }},
		{name: "scalar_subtract", in: []input{f32(5)}, expr: "2.0 - a", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.ScalarBinary(OpSubtract, 2, x[0]) }},
		{name: "int_times_fraction", in: []input{idx(9, 5)}, expr: "(a * 0.5).astype(np.float32)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.MultiplyScalar(x[0], 0.5) }},
		{name: "int_plus_int", in: []input{idx(9, 5)}, expr: "a + 3", dtype: Int32,
			build: func(g *Graph, x []*Array) *Array { return g.AddScalar(x[0], 3) }},

		// Elementwise, one array.
		un("negative", "-a", f32, (*Graph).Negative),
		un("square", "a * a", f32, (*Graph).Square),
		un("sqrt", "np.sqrt(a)", pos, (*Graph).Sqrt),
		un("rsqrt", "1 / np.sqrt(a)", pos, (*Graph).Rsqrt),
		un("exp", "np.exp(a)", f32, (*Graph).Exp),
		un("log", "np.log(a)", pos, (*Graph).Log),
		un("tanh", "np.tanh(a)", f32, (*Graph).Tanh),
		un("erf", "erf(a)", f32, (*Graph).Erf),
		un("sigmoid", "sigmoid(a)", f32, (*Graph).Sigmoid),
		un("silu", "silu(a)", f32, (*Graph).SiLU),
		un("gelu", "gelu(a)", f32, (*Graph).GELU),
		un("gelu_approx", "gelu_approx(a)", f32, (*Graph).GELUApprox),
		un("abs", "np.abs(a)", f32, (*Graph).Abs),
		un("sin", "np.sin(a)", f32, (*Graph).Sin),
		un("cos", "np.cos(a)", f32, (*Graph).Cos),
		un("floor", "np.floor(a)", f32, (*Graph).Floor),
		un("reciprocal", "1 / a", pos, (*Graph).Reciprocal),
		un("log1p", "np.log1p(a)", pos, (*Graph).Log1p),
		{name: "clip", in: []input{f32(10)}, expr: "np.clip(a, -0.5, 0.75)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Clip(x[0], -0.5, 0.75) }},
		{name: "where", in: []input{boolean(3, 4), f32(3, 4), f32(4)}, expr: "np.where(a, b, c)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Where(x[0], x[1], x[2]) }},

		// Softmax and reductions.
		{name: "softmax", in: []input{f32(3, 7)}, expr: "softmax(a)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Softmax(x[0], false, -1) }},
		{name: "softmax_axis0", in: []input{f32(3, 7)}, expr: "softmax(a, axis=0)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Softmax(x[0], false, 0) }},
		{name: "softmax_precise_bf16", in: []input{f32(2, 9)}, expr: "softmax(bf16(a))", dtype: BFloat16, tol: 1e-2,
			build: func(g *Graph, x []*Array) *Array { return g.Softmax(g.AsType(x[0], BFloat16), true, -1) }},
		{name: "sum", in: []input{f32(3, 4, 5)}, expr: "np.sum(a, axis=(0, 2))", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Sum(x[0], false, 0, 2) }},
		{name: "sum_all", in: []input{f32(3, 4)}, expr: "np.sum(a)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Sum(x[0], false) }},
		{name: "mean_keepdims", in: []input{f32(3, 4)}, expr: "np.mean(a, axis=1, keepdims=True)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Mean(x[0], true, 1) }},
		{name: "max", in: []input{f32(3, 4)}, expr: "np.max(a, axis=-1)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Max(x[0], false, -1) }},
		{name: "min", in: []input{f32(3, 4)}, expr: "np.min(a, axis=0)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Min(x[0], false, 0) }},
		{name: "logsumexp", in: []input{f32(3, 6)}, expr: "logsumexp(a, axis=-1)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.LogSumExp(x[0], false, -1) }},
		{name: "argmax", in: []input{f32(4, 9)}, expr: "np.argmax(a, axis=-1).astype(np.uint32)", dtype: Uint32,
			build: func(g *Graph, x []*Array) *Array { return g.Argmax(x[0], -1, false) }},
		{name: "argmin", in: []input{f32(4, 9)}, expr: "np.argmin(a, axis=0).astype(np.uint32)", dtype: Uint32,
			build: func(g *Graph, x []*Array) *Array { return g.Argmin(x[0], 0, false) }},
		{name: "cumsum", in: []input{f32(3, 5)}, expr: "np.cumsum(a, axis=1)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Cumsum(x[0], 1, false, true) }},
		{name: "sort", in: []input{f32(3, 6)}, expr: "np.sort(a, axis=-1)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Sort(x[0], -1) }},
		{name: "argsort", in: []input{f32(3, 6)}, expr: "np.argsort(a, axis=-1).astype(np.uint32)", dtype: Uint32,
			build: func(g *Graph, x []*Array) *Array { return g.Argsort(x[0], -1) }},
		// topk returns the k largest in no set order: sort them to compare.
		{name: "topk", in: []input{f32(2, 10)}, expr: "np.sort(a, axis=-1)[:, -3:]", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Sort(g.TopK(x[0], 3, -1), -1) }},

		// Shapes.
		{name: "reshape", in: []input{f32(2, 6)}, expr: "a.reshape(3, 4)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Reshape(x[0], 3, -1) }},
		{name: "transpose", in: []input{f32(2, 3, 4)}, expr: "a.transpose(1, 2, 0)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Transpose(x[0], 1, 2, 0) }},
		{name: "transpose_reverse", in: []input{f32(2, 3, 4)}, expr: "a.T", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Transpose(x[0]) }},
		{name: "swapaxes", in: []input{f32(2, 3, 4)}, expr: "np.swapaxes(a, -1, -2)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Swapaxes(x[0], -1, -2) }},
		{name: "expand_dims", in: []input{f32(2, 3)}, expr: "a[:, None, :, None]", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.ExpandDims(x[0], 1, 3) }},
		{name: "squeeze", in: []input{f32(1, 3, 1, 2)}, expr: "a.reshape(3, 2)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Squeeze(x[0]) }},
		{name: "squeeze_axis", in: []input{f32(1, 3, 1, 2)}, expr: "a.reshape(1, 3, 2)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Squeeze(x[0], 2) }},
		{name: "flatten", in: []input{f32(2, 3, 4)}, expr: "a.reshape(2, 12)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Flatten(x[0], 1, 2) }},
		{name: "broadcast_to", in: []input{f32(1, 3)}, expr: "np.broadcast_to(a, (4, 3))", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.BroadcastTo(x[0], 4, 3) }},
		{name: "concatenate", in: []input{f32(2, 3), f32(2, 5)}, expr: "np.concatenate([a, b], axis=1)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Concatenate(1, x[0], x[1]) }},
		{name: "stack", in: []input{f32(2, 3), f32(2, 3)}, expr: "np.stack([a, b], axis=1)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Stack(1, x[0], x[1]) }},
		{name: "split", in: []input{f32(2, 9)}, expr: "np.split(a, 3, axis=1)", dtype: Float32,
			buildN: func(g *Graph, x []*Array) []*Array { return g.Split(x[0], 3, 1) }},
		{name: "split_at", in: []input{f32(2, 9)}, expr: "np.split(a, [2, 7], axis=1)", dtype: Float32,
			buildN: func(g *Graph, x []*Array) []*Array { return g.SplitAt(x[0], []int{2, 7}, 1) }},
		{name: "slice", in: []input{f32(4, 6)}, expr: "a[1:3, 2:6]", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Slice(x[0], []int{1, 2}, []int{3, 6}) }},
		{name: "slice_strided", in: []input{f32(4, 6)}, expr: "a[0:4:2, 1:6:2]", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array {
				return g.SliceStrided(x[0], []int{0, 1}, []int{4, 6}, []int{2, 2})
			}},
		{name: "slice_dynamic", in: []input{f32(4, 6)}, expr: "a[:, 3:5]", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array {
				return g.SliceDynamic(x[0], FromSlice(g, []int32{3}), []int{1}, []int{4, 2})
			}},
		{name: "slice_update", in: []input{f32(4, 6), f32(2, 3)}, expr: "np.concatenate([a[:1], np.concatenate([a[1:3, :2], b, a[1:3, 5:]], axis=1), a[3:]])", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array {
				return g.SliceUpdate(x[0], x[1], []int{1, 2}, []int{3, 5})
			}},
		{name: "slice_update_dynamic", in: []input{f32(1, 2, 8, 3), f32(1, 2, 2, 3)}, expr: "np.concatenate([a[:, :, :5], b, a[:, :, 7:]], axis=2)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array {
				return g.SliceUpdateDynamic(x[0], x[1], FromSlice(g, []int32{5}), []int{2})
			}},
		{name: "take", in: []input{f32(7, 4), idx(7, 2, 3)}, expr: "a[b]", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Take(x[0], x[1], 0) }},
		{name: "take_flat", in: []input{f32(3, 4), idx(12, 5)}, expr: "a.reshape(-1)[b]", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.TakeFlat(x[0], x[1]) }},
		{name: "take_along_axis", in: []input{f32(3, 5), idx(5, 3, 2)}, expr: "np.take_along_axis(a, b, axis=1)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.TakeAlongAxis(x[0], x[1], 1) }},
		{name: "put_along_axis", in: []input{f32(3, 5), idx(5, 3, 2), f32(3, 2)}, expr: "(lambda x: (np.put_along_axis(x, b, c, axis=1), x)[1])(a.copy())", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.PutAlongAxis(x[0], x[1], x[2], 1) }},
		{name: "triu", in: []input{f32(4, 4)}, expr: "np.triu(a, 1)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Triu(x[0], 1) }},
		{name: "tril", in: []input{f32(4, 4)}, expr: "np.tril(a)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Tril(x[0], 0) }},
		{name: "pad", in: []input{f32(2, 3)}, expr: "np.pad(a, ((0, 0), (1, 2)), constant_values=0.5)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Pad(x[0], []int{1}, []int{1}, []int{2}, 0.5) }},

		// Creation and conversion.
		{name: "arange", expr: "np.arange(2, 11, 3).astype(np.int32)", dtype: Int32,
			build: func(g *Graph, x []*Array) *Array { return g.Arange(2, 11, 3, Int32) }},
		{name: "arange_float", expr: "np.arange(0, 1, 0.25).astype(np.float32)", dtype: Float32, tol: t,
			build: func(g *Graph, x []*Array) *Array { return g.Arange(0, 1, 0.25, Float32) }},
		{name: "zeros", expr: "np.zeros((2, 3), np.float32)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Zeros([]int{2, 3}, Float32) }},
		{name: "ones", expr: "np.ones((4,), np.int32)", dtype: Int32,
			build: func(g *Graph, x []*Array) *Array { return g.Ones([]int{4}, Int32) }},
		{name: "full", expr: "np.full((2, 2), 2.5, np.float32)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Full([]int{2, 2}, 2.5, Float32) }},
		{name: "scalar", expr: "np.float32(-3.25)", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Scalar(-3.25, Float32) }},
		{name: "astype_int", in: []input{f32(8)}, expr: "(a * 3).astype(np.int32)", dtype: Int32,
			build: func(g *Graph, x []*Array) *Array { return g.AsType(g.MultiplyScalar(x[0], 3), Int32) }},
		{name: "astype_bf16", in: []input{f32(8)}, expr: "bf16(a)", dtype: BFloat16,
			build: func(g *Graph, x []*Array) *Array { return g.AsType(x[0], BFloat16) }},
		{name: "contiguous", in: []input{f32(3, 4)}, expr: "a.T.copy()", dtype: Float32,
			build: func(g *Graph, x []*Array) *Array { return g.Contiguous(g.Transpose(x[0])) }},

		// Fast kernels.
		{name: "rms_norm", in: []input{f32(2, 3, 16), f32(16)}, expr: "rms_norm(a, b, 1e-5)", dtype: Float32, tol: 1e-5,
			build: func(g *Graph, x []*Array) *Array { return g.RMSNorm(x[0], x[1], 1e-5) }},
		{name: "rms_norm_noweight", in: []input{f32(2, 16)}, expr: "rms_norm(a, 1.0, 1e-6)", dtype: Float32, tol: 1e-5,
			build: func(g *Graph, x []*Array) *Array { return g.RMSNorm(x[0], nil, 1e-6) }},
		{name: "layer_norm", in: []input{f32(2, 3, 16), f32(16), f32(16)}, expr: "layer_norm(a, b, c, 1e-5)", dtype: Float32, tol: 1e-5,
			build: func(g *Graph, x []*Array) *Array { return g.LayerNorm(x[0], x[1], x[2], 1e-5) }},
		{name: "rope", in: []input{f32(1, 2, 5, 8)}, expr: "rope(a, 8, False, 10000.0, 1.0, 3)", dtype: Float32, tol: 1e-4,
			build: func(g *Graph, x []*Array) *Array {
				return g.RoPE(x[0], &RoPE{Dims: 8, Base: 10000, Scale: 1}, 3)
			}},
		{name: "rope_traditional_partial", in: []input{f32(1, 2, 5, 8)}, expr: "rope(a, 4, True, 500.0, 0.5, 0)", dtype: Float32, tol: 1e-4,
			build: func(g *Graph, x []*Array) *Array {
				return g.RoPE(x[0], &RoPE{Dims: 4, Traditional: true, Base: 500, Scale: 0.5}, 0)
			}},
		{name: "rope_freqs", in: []input{f32(1, 2, 4, 8), pos(4)}, expr: "rope(a, 8, False, None, 1.0, 7, b)", dtype: Float32, tol: 1e-4,
			build: func(g *Graph, x []*Array) *Array {
				return g.RoPE(x[0], &RoPE{Dims: 8, Scale: 1, Freqs: x[1]}, 7)
			}},
		{name: "rope_offset_array", in: []input{f32(2, 2, 3, 8)}, expr: "rope(a, 8, False, 10000.0, 1.0, [4, 9])", dtype: Float32, tol: 1e-4,
			build: func(g *Graph, x []*Array) *Array {
				return g.RoPEAt(x[0], &RoPE{Dims: 8, Base: 10000, Scale: 1}, FromSlice(g, []int32{4, 9}, 2))
			}},
		{name: "sdpa", in: []input{f32(1, 4, 3, 8), f32(1, 2, 5, 8), f32(1, 2, 5, 8)}, expr: "sdpa(a, b, c, 0.35)", dtype: Float32, tol: 1e-5,
			build: func(g *Graph, x []*Array) *Array { return g.SDPA(x[0], x[1], x[2], 0.35, NoMask) }},
		{name: "sdpa_causal", in: []input{f32(1, 2, 4, 8), f32(1, 2, 6, 8), f32(1, 2, 6, 8)}, expr: "sdpa(a, b, c, 0.35, 'causal')", dtype: Float32, tol: 1e-5,
			build: func(g *Graph, x []*Array) *Array { return g.SDPA(x[0], x[1], x[2], 0.35, CausalMask) }},
		{name: "sdpa_array_mask", in: []input{f32(1, 2, 4, 8), f32(1, 1, 4, 8), f32(1, 1, 4, 8), boolean(4, 4)}, expr: "sdpa(a, b, c, 0.5, d | np.eye(4, dtype=bool))", dtype: Float32, tol: 1e-5,
			build: func(g *Graph, x []*Array) *Array {
				eye := g.Equal(g.ExpandDims(g.Arange(0, 4, 1, Int32), 1), g.Arange(0, 4, 1, Int32))
				return g.SDPA(x[0], x[1], x[2], 0.5, MaskArray(g.LogicalOr(x[3], eye)))
			}},
	}
}

func TestOpsAgainstNumpy(t *testing.T) {
	cases := opCases()
	rng := rand.New(rand.NewPCG(1, 2))
	np := make([]numpyCase, len(cases))
	for i, c := range cases {
		np[i] = numpyCase{name: c.name, expr: c.expr}
		for _, in := range c.in {
			np[i].inputs = append(np[i].inputs, randomInput(rng, in))
		}
	}
	want := numpyEval(t, np)
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			var xs []*Array
			for _, a := range np[ci].inputs {
				xs = append(xs, fromNpy(g, a))
			}
			var outs []*Array
			if c.buildN != nil {
				outs = c.buildN(g, xs)
			} else {
				outs = []*Array{c.build(g, xs)}
			}
			if err := g.Eval(outs...); err != nil {
				t.Fatal(err)
			}
			if len(outs) != len(want[ci]) {
				t.Fatalf("%d results, numpy has %d", len(outs), len(want[ci]))
			}
			for i, out := range outs {
				compare(t, out, want[ci][i], c.dtype, c.tol)
			}
		})
	}
}

// numpyCase is one expression for testdata/numpy_ref.py and its inputs.
type numpyCase struct {
	name   string
	expr   string
	inputs []npy.Array
}

// numpyEval evaluates each case's expression with numpy and returns its
// results (one, or several for an expression giving a list).
func numpyEval(t *testing.T, cases []numpyCase) [][]npy.Array {
	t.Helper()
	dir := t.TempDir()
	type entry struct {
		Name   string   `json:"name"`
		Expr   string   `json:"expr"`
		Inputs []string `json:"inputs"`
	}
	var manifest []entry
	for _, c := range cases {
		e := entry{Name: c.name, Expr: c.expr, Inputs: []string{}}
		for i, a := range c.inputs {
			p := fmt.Sprintf("%s.in.%d.npy", c.name, i)
			if err := npy.WriteFile(filepath.Join(dir, p), a); err != nil {
				t.Fatal(err)
			}
			e.Inputs = append(e.Inputs, p)
		}
		manifest = append(manifest, e)
	}
	b, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	runPython(t, "testdata/numpy_ref.py", dir)
	out := make([][]npy.Array, len(cases))
	for i, c := range cases {
		single := filepath.Join(dir, c.name+".out.npy")
		if _, err := os.Stat(single); err == nil {
			a, err := npy.ReadFile(single)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = []npy.Array{a}
			continue
		}
		for j := 0; ; j++ {
			p := filepath.Join(dir, fmt.Sprintf("%s.out.%d.npy", c.name, j))
			if _, err := os.Stat(p); err != nil {
				break
			}
			a, err := npy.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = append(out[i], a)
		}
		if out[i] == nil {
			t.Fatalf("numpy gave no result for %s", c.name)
		}
	}
	return out
}

func randomInput(rng *rand.Rand, in input) npy.Array {
	n := 1
	for _, d := range in.shape {
		n *= d
	}
	switch in.kind {
	case 'i':
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(rng.IntN(in.n))
		}
		return npy.Array{Shape: in.shape, Data: v}
	case 'b':
		v := make([]bool, n)
		for i := range v {
			v[i] = rng.IntN(2) == 1
		}
		return npy.Array{Shape: in.shape, Data: v}
	case 'p':
		v := make([]float32, n)
		for i := range v {
			v[i] = 0.1 + 2.9*rng.Float32()
		}
		return npy.Array{Shape: in.shape, Data: v}
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = 4*rng.Float32() - 2
	}
	return npy.Array{Shape: in.shape, Data: v}
}

func fromNpy(g *Graph, a npy.Array) *Array {
	switch d := a.Data.(type) {
	case []float32:
		return FromSlice(g, d, a.Shape...)
	case []int32:
		return FromSlice(g, d, a.Shape...)
	case []uint32:
		return FromSlice(g, d, a.Shape...)
	case []bool:
		return FromSlice(g, d, a.Shape...)
	}
	g.Failf("test: unsupported npy data %T", a.Data)
	return nil
}

// compare checks out against numpy's result: shape, dtype and values
// within tol (absolute, plus tol relative to the value's size).
func compare(t *testing.T, out *Array, want npy.Array, dtype Dtype, tol float64) {
	t.Helper()
	if got := out.Dtype(); got != dtype {
		t.Errorf("dtype %s, want %s", got, dtype)
	}
	wantShape := want.Shape
	if wantShape == nil {
		wantShape = []int{}
	}
	if got := out.Shape(); !slices.Equal(got, wantShape) {
		t.Fatalf("shape %v, want %v", got, wantShape)
	}
	w := asFloat64s(want.Data)
	var got []float64
	switch out.Dtype() {
	case Bool:
		v, err := ToSlice[bool](out)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range v {
			got = append(got, b2f(b))
		}
	case Int32:
		v, err := out.Int32s()
		if err != nil {
			t.Fatal(err)
		}
		got = asFloat64s(v)
	case Uint32:
		v, err := out.Uint32s()
		if err != nil {
			t.Fatal(err)
		}
		got = asFloat64s(v)
	default:
		v, err := out.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		got = asFloat64s(v)
	}
	if len(got) != len(w) {
		t.Fatalf("%d values, want %d", len(got), len(w))
	}
	bad := 0
	for i := range got {
		if d := math.Abs(got[i] - w[i]); d > tol*(1+math.Abs(w[i])) || math.IsNaN(got[i]) != math.IsNaN(w[i]) {
			if bad < 5 {
				t.Errorf("element %d: got %g, want %g", i, got[i], w[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d elements differ", bad, len(got))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func asFloat64s(data any) []float64 {
	var out []float64
	switch d := data.(type) {
	case []float32:
		for _, v := range d {
			out = append(out, float64(v))
		}
	case []float64:
		out = append(out, d...)
	case []int32:
		for _, v := range d {
			out = append(out, float64(v))
		}
	case []int64:
		for _, v := range d {
			out = append(out, float64(v))
		}
	case []uint32:
		for _, v := range d {
			out = append(out, float64(v))
		}
	case []uint8:
		for _, v := range d {
			out = append(out, float64(v))
		}
	case []bool:
		for _, v := range d {
			out = append(out, b2f(v))
		}
	}
	return out
}

// python is the project venv's interpreter, made by `make setup`.
func python(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../.deps/py/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup`", err)
	}
	return p
}

func runPython(t *testing.T, script string, args ...string) {
	t.Helper()
	cmd := exec.Command(python(t), append([]string{script}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}
