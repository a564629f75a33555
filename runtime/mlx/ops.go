package mlx

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// ---- creation ----

// FromSlice copies data into a new array of g. len(data) must be the
// product of shape.
func FromSlice[T Element](g *Graph, data []T, shape ...int) *Array {
	return g.fromData("array", unsafe.Pointer(unsafe.SliceData(data)), len(data), DtypeOf[T](), shape)
}

// FromBits copies raw float16 or bfloat16 bits into a new array of g.
func (g *Graph) FromBits(bits []uint16, dtype Dtype, shape ...int) *Array {
	if g.err == nil && dtype != Float16 && dtype != BFloat16 && dtype != Uint16 {
		g.Fail(&Error{Op: "array", Msg: fmt.Sprintf("%s is not a 16-bit type", dtype)})
	}
	return g.fromData("array", unsafe.Pointer(unsafe.SliceData(bits)), len(bits), dtype, shape)
}

func (g *Graph) fromData(op string, p unsafe.Pointer, n int, dt Dtype, shape []int) *Array {
	if !g.ok(op) {
		return g.bad
	}
	want := 1
	for _, d := range shape {
		if d < 0 {
			g.Fail(&Error{Op: op, Msg: fmt.Sprintf("bad dimension %d in shape %v", d, shape)})
			return g.bad
		}
		want *= d
	}
	if want != n {
		g.Fail(&Error{Op: op, Msg: fmt.Sprintf("%d elements do not fill shape %v", n, shape)})
		return g.bad
	}
	sh, err := shape32(shape)
	if err != nil {
		g.Fail(err)
		return g.bad
	}
	return g.done(op, C.mlxg_from_data(g.res0(), p, ptr32(sh), C.int(len(sh)), C.int(dt), g.errp()))
}

// Scalar is a zero-dimensional array holding v as dtype.
func (g *Graph) Scalar(v float64, dtype Dtype) *Array {
	if !g.ok("scalar") {
		return g.bad
	}
	return g.done("scalar", C.mlxg_scalar(g.res0(), C.double(v), C.int(dtype), g.errp()))
}

// Arange is [start, stop) by step, as dtype.
func (g *Graph) Arange(start, stop, step float64, dtype Dtype) *Array {
	if !g.ok("arange") {
		return g.bad
	}
	return g.done("arange", C.mlxg_arange(g.res0(), C.double(start), C.double(stop), C.double(step), C.int(dtype), g.s.c, g.errp()))
}

// Full is an array of the given shape filled with v.
func (g *Graph) Full(shape []int, v float64, dtype Dtype) *Array {
	if !g.ok("full") {
		return g.bad
	}
	return g.done("full", C.mlxg_full(g.res0(), g.ints(0, shape), C.int(len(shape)), C.double(v), C.int(dtype), g.s.c, g.errp()))
}

// Zeros is an array of zeros.
func (g *Graph) Zeros(shape []int, dtype Dtype) *Array { return g.Full(shape, 0, dtype) }

// Ones is an array of ones.
func (g *Graph) Ones(shape []int, dtype Dtype) *Array { return g.Full(shape, 1, dtype) }

// ---- elementwise ----

// UnaryOp names an elementwise op of one array.
type UnaryOp int

const (
	OpNegative UnaryOp = iota
	OpSquare
	OpSqrt
	OpRsqrt
	OpExp
	OpLog
	OpTanh
	OpErf
	OpSigmoid
	OpAbs
	OpSin
	OpCos
	OpLogicalNot
	OpSiLU
	OpGELU
	OpGELUApprox
	OpStopGradient
	OpFloor
	OpReciprocal
	OpLog1p
	OpExpm1
)

var unaryNames = [...]string{"negative", "square", "sqrt", "rsqrt", "exp", "log", "tanh", "erf",
	"sigmoid", "abs", "sin", "cos", "logical_not", "silu", "gelu", "gelu_approx", "stop_gradient",
	"floor", "reciprocal", "log1p", "expm1"}

func (op UnaryOp) String() string {
	if int(op) < len(unaryNames) && op >= 0 {
		return unaryNames[op]
	}
	return fmt.Sprintf("UnaryOp(%d)", int(op))
}

// Unary applies op to every element of a.
func (g *Graph) Unary(op UnaryOp, a *Array) *Array {
	name := op.String()
	if !g.ok(name, a) {
		return g.bad
	}
	return g.done(name, C.mlxg_unary(g.res0(), C.int(op), a.c, g.s.c, g.errp()))
}

func (g *Graph) Negative(a *Array) *Array   { return g.Unary(OpNegative, a) }
func (g *Graph) Square(a *Array) *Array     { return g.Unary(OpSquare, a) }
func (g *Graph) Sqrt(a *Array) *Array       { return g.Unary(OpSqrt, a) }
func (g *Graph) Rsqrt(a *Array) *Array      { return g.Unary(OpRsqrt, a) }
func (g *Graph) Exp(a *Array) *Array        { return g.Unary(OpExp, a) }
func (g *Graph) Log(a *Array) *Array        { return g.Unary(OpLog, a) }
func (g *Graph) Tanh(a *Array) *Array       { return g.Unary(OpTanh, a) }
func (g *Graph) Erf(a *Array) *Array        { return g.Unary(OpErf, a) }
func (g *Graph) Sigmoid(a *Array) *Array    { return g.Unary(OpSigmoid, a) }
func (g *Graph) Abs(a *Array) *Array        { return g.Unary(OpAbs, a) }
func (g *Graph) Sin(a *Array) *Array        { return g.Unary(OpSin, a) }
func (g *Graph) Cos(a *Array) *Array        { return g.Unary(OpCos, a) }
func (g *Graph) LogicalNot(a *Array) *Array { return g.Unary(OpLogicalNot, a) }
func (g *Graph) Floor(a *Array) *Array      { return g.Unary(OpFloor, a) }
func (g *Graph) Reciprocal(a *Array) *Array { return g.Unary(OpReciprocal, a) }
func (g *Graph) Log1p(a *Array) *Array      { return g.Unary(OpLog1p, a) }

// Expm1 is exp(a) - 1, exact near 0.
func (g *Graph) Expm1(a *Array) *Array { return g.Unary(OpExpm1, a) }

// SiLU is x * sigmoid(x).
func (g *Graph) SiLU(x *Array) *Array { return g.Unary(OpSiLU, x) }

// SwiGLU is silu(gate) * up, the product broadcasting as Multiply's. On
// the CPU with float32 arrays of one shape it is a single op whose result
// equals the two ops' bit for bit.
func (g *Graph) SwiGLU(gate, up *Array) *Array {
	if !g.ok("swiglu", gate, up) {
		return g.bad
	}
	return g.done("swiglu", C.mlxg_swiglu(g.res0(), gate.c, up.c, g.s.c, g.errp()))
}

// GELU is the exact GELU, x * (1 + erf(x / sqrt 2)) / 2.
func (g *Graph) GELU(x *Array) *Array { return g.Unary(OpGELU, x) }

// GELUApprox is the tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
func (g *Graph) GELUApprox(x *Array) *Array { return g.Unary(OpGELUApprox, x) }

// BinaryOp names an elementwise op of two arrays (broadcasting).
type BinaryOp int

const (
	OpAdd BinaryOp = iota
	OpSubtract
	OpMultiply
	OpDivide
	OpMaximum
	OpMinimum
	OpPower
	OpEqual
	OpNotEqual
	OpLess
	OpLessEqual
	OpGreater
	OpGreaterEqual
	OpLogicalAnd
	OpLogicalOr
	OpFloorDivide
	OpRemainder
	OpLogAddExp
)

var binaryNames = [...]string{"add", "subtract", "multiply", "divide", "maximum", "minimum",
	"power", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
	"logical_and", "logical_or", "floor_divide", "remainder", "logaddexp"}

func (op BinaryOp) String() string {
	if int(op) < len(binaryNames) && op >= 0 {
		return binaryNames[op]
	}
	return fmt.Sprintf("BinaryOp(%d)", int(op))
}

// Binary applies op elementwise, broadcasting a and b.
func (g *Graph) Binary(op BinaryOp, a, b *Array) *Array {
	name := op.String()
	if !g.ok(name, a, b) {
		return g.bad
	}
	return g.done(name, C.mlxg_binary(g.res0(), C.int(op), a.c, b.c, g.s.c, g.errp()))
}

// BinaryScalar is a op v. The scalar is typed as a Python scalar is in mlx:
// a floating array keeps its dtype.
func (g *Graph) BinaryScalar(op BinaryOp, a *Array, v float64) *Array {
	name := op.String()
	if !g.ok(name, a) {
		return g.bad
	}
	return g.done(name, C.mlxg_binary_scalar(g.res0(), C.int(op), a.c, C.double(v), false, g.s.c, g.errp()))
}

// ScalarBinary is v op a, typed as BinaryScalar.
func (g *Graph) ScalarBinary(op BinaryOp, v float64, a *Array) *Array {
	name := op.String()
	if !g.ok(name, a) {
		return g.bad
	}
	return g.done(name, C.mlxg_binary_scalar(g.res0(), C.int(op), a.c, C.double(v), true, g.s.c, g.errp()))
}

func (g *Graph) Add(a, b *Array) *Array          { return g.Binary(OpAdd, a, b) }
func (g *Graph) Subtract(a, b *Array) *Array     { return g.Binary(OpSubtract, a, b) }
func (g *Graph) Multiply(a, b *Array) *Array     { return g.Binary(OpMultiply, a, b) }
func (g *Graph) Divide(a, b *Array) *Array       { return g.Binary(OpDivide, a, b) }
func (g *Graph) Maximum(a, b *Array) *Array      { return g.Binary(OpMaximum, a, b) }
func (g *Graph) Minimum(a, b *Array) *Array      { return g.Binary(OpMinimum, a, b) }
func (g *Graph) Power(a, b *Array) *Array        { return g.Binary(OpPower, a, b) }
func (g *Graph) Equal(a, b *Array) *Array        { return g.Binary(OpEqual, a, b) }
func (g *Graph) NotEqual(a, b *Array) *Array     { return g.Binary(OpNotEqual, a, b) }
func (g *Graph) Less(a, b *Array) *Array         { return g.Binary(OpLess, a, b) }
func (g *Graph) LessEqual(a, b *Array) *Array    { return g.Binary(OpLessEqual, a, b) }
func (g *Graph) Greater(a, b *Array) *Array      { return g.Binary(OpGreater, a, b) }
func (g *Graph) GreaterEqual(a, b *Array) *Array { return g.Binary(OpGreaterEqual, a, b) }
func (g *Graph) LogicalAnd(a, b *Array) *Array   { return g.Binary(OpLogicalAnd, a, b) }
func (g *Graph) LogicalOr(a, b *Array) *Array    { return g.Binary(OpLogicalOr, a, b) }

// FloorDivide is a // b: the floor of the quotient (an integer for integer
// arrays, as Python's //).
func (g *Graph) FloorDivide(a, b *Array) *Array { return g.Binary(OpFloorDivide, a, b) }

// Remainder is a % b, with the sign of b as Python's %.
func (g *Graph) Remainder(a, b *Array) *Array { return g.Binary(OpRemainder, a, b) }

// LogAddExp is log(exp(a) + exp(b)), computed without overflow.
func (g *Graph) LogAddExp(a, b *Array) *Array { return g.Binary(OpLogAddExp, a, b) }

// Softplus is log(1 + exp(a)), as mlx's nn.softplus: logaddexp(a, 0).
func (g *Graph) Softplus(a *Array) *Array {
	if !g.ok("softplus", a) {
		return g.bad
	}
	return g.LogAddExp(a, g.Scalar(0, a.Dtype()))
}

// AddScalar is a + v.
func (g *Graph) AddScalar(a *Array, v float64) *Array { return g.BinaryScalar(OpAdd, a, v) }

// SubtractScalar is a - v.
func (g *Graph) SubtractScalar(a *Array, v float64) *Array {
	return g.BinaryScalar(OpSubtract, a, v)
}

// MultiplyScalar is a * v.
func (g *Graph) MultiplyScalar(a *Array, v float64) *Array {
	return g.BinaryScalar(OpMultiply, a, v)
}

// DivideScalar is a / v.
func (g *Graph) DivideScalar(a *Array, v float64) *Array { return g.BinaryScalar(OpDivide, a, v) }

// PowerScalar is a ** v.
func (g *Graph) PowerScalar(a *Array, v float64) *Array { return g.BinaryScalar(OpPower, a, v) }

// Where picks x where cond holds and y elsewhere.
func (g *Graph) Where(cond, x, y *Array) *Array {
	if !g.ok("where", cond, x, y) {
		return g.bad
	}
	return g.done("where", C.mlxg_where(g.res0(), cond.c, x.c, y.c, g.s.c, g.errp()))
}

// AsType converts a to dtype.
func (g *Graph) AsType(a *Array, dtype Dtype) *Array {
	if !g.ok("astype", a) {
		return g.bad
	}
	return g.done("astype", C.mlxg_astype(g.res0(), a.c, C.int(dtype), g.s.c, g.errp()))
}

// View is a's bytes read as dtype, without conversion (mlx's view): the
// last axis grows or shrinks by the ratio of the sizes (four uint8 to one
// uint32).
func (g *Graph) View(a *Array, dtype Dtype) *Array {
	if !g.ok("view", a) {
		return g.bad
	}
	return g.done("view", C.mlxg_view(g.res0(), a.c, C.int(dtype), g.s.c, g.errp()))
}

// FromFP8 reads a's uint8 values as FP8 (e4m3) codes, as a safetensors
// F8_E4M3 tensor loads, and returns their values in dtype.
func (g *Graph) FromFP8(a *Array, dtype Dtype) *Array {
	if !g.ok("from_fp8", a) {
		return g.bad
	}
	return g.done("from_fp8", C.mlxg_from_fp8(g.res0(), a.c, C.int(dtype), g.s.c, g.errp()))
}

// ToFP8 rounds a float array to FP8 (e4m3) codes held as uint8.
func (g *Graph) ToFP8(a *Array) *Array {
	if !g.ok("to_fp8", a) {
		return g.bad
	}
	return g.done("to_fp8", C.mlxg_to_fp8(g.res0(), a.c, g.s.c, g.errp()))
}

// Contiguous is a copy of a laid out row-major.
func (g *Graph) Contiguous(a *Array) *Array {
	if !g.ok("contiguous", a) {
		return g.bad
	}
	return g.done("contiguous", C.mlxg_contiguous(g.res0(), a.c, g.s.c, g.errp()))
}

// Clip limits a to [lo, hi].
func (g *Graph) Clip(a *Array, lo, hi float64) *Array {
	if !g.ok("clip", a) {
		return g.bad
	}
	return g.done("clip", C.mlxg_clip(g.res0(), a.c, C.double(lo), C.double(hi), g.s.c, g.errp()))
}

// ---- reductions ----

type reduceOp int

const (
	opSum reduceOp = iota
	opMean
	opMax
	opMin
	opLogSumExp
	opArgmax
	opArgmin
	opNorm
)

var reduceNames = [...]string{"sum", "mean", "max", "min", "logsumexp", "argmax", "argmin", "norm"}

func (g *Graph) reduce(op reduceOp, a *Array, keepdims bool, axes []int) *Array {
	name := reduceNames[op]
	if !g.ok(name, a) {
		return g.bad
	}
	n := len(axes)
	if n == 0 && op != opArgmax && op != opArgmin {
		n = -1
	}
	return g.done(name, C.mlxg_reduce(g.res0(), C.int(op), a.c, g.ints(0, axes), C.int(n), C.bool(keepdims), g.s.c, g.errp()))
}

// Sum adds over axes (every axis when none are given).
func (g *Graph) Sum(a *Array, keepdims bool, axes ...int) *Array {
	return g.reduce(opSum, a, keepdims, axes)
}

// Mean averages over axes (every axis when none are given).
func (g *Graph) Mean(a *Array, keepdims bool, axes ...int) *Array {
	return g.reduce(opMean, a, keepdims, axes)
}

// Max is the maximum over axes (every axis when none are given).
func (g *Graph) Max(a *Array, keepdims bool, axes ...int) *Array {
	return g.reduce(opMax, a, keepdims, axes)
}

// Min is the minimum over axes (every axis when none are given).
func (g *Graph) Min(a *Array, keepdims bool, axes ...int) *Array {
	return g.reduce(opMin, a, keepdims, axes)
}

// LogSumExp is log(sum(exp(a))) over axes, computed stably.
func (g *Graph) LogSumExp(a *Array, keepdims bool, axes ...int) *Array {
	return g.reduce(opLogSumExp, a, keepdims, axes)
}

// Norm is the 2-norm over axes (every axis when none are given), as
// mlx.linalg.norm computes it: in a at least floating type.
func (g *Graph) Norm(a *Array, keepdims bool, axes ...int) *Array {
	return g.reduce(opNorm, a, keepdims, axes)
}

// Argmax is the index of the maximum along axis.
func (g *Graph) Argmax(a *Array, axis int, keepdims bool) *Array {
	return g.reduce(opArgmax, a, keepdims, []int{axis})
}

// Argmin is the index of the minimum along axis.
func (g *Graph) Argmin(a *Array, axis int, keepdims bool) *Array {
	return g.reduce(opArgmin, a, keepdims, []int{axis})
}

// Softmax normalizes over axes; precise computes in float32 for
// lower-precision inputs, as mlx's precise=True.
func (g *Graph) Softmax(a *Array, precise bool, axes ...int) *Array {
	if !g.ok("softmax", a) {
		return g.bad
	}
	if len(axes) == 0 {
		axes = []int{-1}
	}
	return g.done("softmax", C.mlxg_softmax(g.res0(), a.c, g.ints(0, axes), C.int(len(axes)), C.bool(precise), g.s.c, g.errp()))
}

// Cumsum is the running sum along axis.
func (g *Graph) Cumsum(a *Array, axis int, reverse, inclusive bool) *Array {
	if !g.ok("cumsum", a) {
		return g.bad
	}
	return g.done("cumsum", C.mlxg_cumsum(g.res0(), a.c, C.int(axis), C.bool(reverse), C.bool(inclusive), g.s.c, g.errp()))
}

// Sort sorts along axis.
func (g *Graph) Sort(a *Array, axis int) *Array {
	if !g.ok("sort", a) {
		return g.bad
	}
	return g.done("sort", C.mlxg_sort(g.res0(), a.c, C.int(axis), false, g.s.c, g.errp()))
}

// Argsort is the permutation that sorts a along axis.
func (g *Graph) Argsort(a *Array, axis int) *Array {
	if !g.ok("argsort", a) {
		return g.bad
	}
	return g.done("argsort", C.mlxg_sort(g.res0(), a.c, C.int(axis), true, g.s.c, g.errp()))
}

// TopK is the k largest values along axis, in no particular order.
func (g *Graph) TopK(a *Array, k, axis int) *Array {
	if !g.ok("topk", a) {
		return g.bad
	}
	return g.done("topk", C.mlxg_topk(g.res0(), a.c, C.int(k), C.int(axis), g.s.c, g.errp()))
}

// Argpartition is the indices that put the kth element in its sorted place
// along axis, smaller ones before it.
func (g *Graph) Argpartition(a *Array, kth, axis int) *Array {
	if !g.ok("argpartition", a) {
		return g.bad
	}
	return g.done("argpartition", C.mlxg_argpartition(g.res0(), a.c, C.int(kth), C.int(axis), g.s.c, g.errp()))
}

// ---- shapes ----

// Reshape gives a a new shape of the same size; one dimension may be -1.
func (g *Graph) Reshape(a *Array, shape ...int) *Array {
	if !g.ok("reshape", a) {
		return g.bad
	}
	return g.done("reshape", C.mlxg_reshape(g.res0(), a.c, g.ints(0, shape), C.int(len(shape)), g.s.c, g.errp()))
}

// Transpose permutes the axes (reverses them when none are given).
func (g *Graph) Transpose(a *Array, axes ...int) *Array {
	if !g.ok("transpose", a) {
		return g.bad
	}
	n := len(axes)
	if n == 0 {
		n = -1
	}
	return g.done("transpose", C.mlxg_transpose(g.res0(), a.c, g.ints(0, axes), C.int(n), g.s.c, g.errp()))
}

// Swapaxes exchanges two axes.
func (g *Graph) Swapaxes(a *Array, axis1, axis2 int) *Array {
	if !g.ok("swapaxes", a) {
		return g.bad
	}
	return g.done("swapaxes", C.mlxg_swapaxes(g.res0(), a.c, C.int(axis1), C.int(axis2), g.s.c, g.errp()))
}

// ExpandDims inserts axes of size 1.
func (g *Graph) ExpandDims(a *Array, axes ...int) *Array {
	if !g.ok("expand_dims", a) {
		return g.bad
	}
	return g.done("expand_dims", C.mlxg_expand_dims(g.res0(), a.c, g.ints(0, axes), C.int(len(axes)), g.s.c, g.errp()))
}

// Squeeze removes axes of size 1 (all of them when none are given).
func (g *Graph) Squeeze(a *Array, axes ...int) *Array {
	if !g.ok("squeeze", a) {
		return g.bad
	}
	n := len(axes)
	if n == 0 {
		n = -1
	}
	return g.done("squeeze", C.mlxg_squeeze(g.res0(), a.c, g.ints(0, axes), C.int(n), g.s.c, g.errp()))
}

// Flatten merges axes start..end (inclusive) into one.
func (g *Graph) Flatten(a *Array, start, end int) *Array {
	if !g.ok("flatten", a) {
		return g.bad
	}
	return g.done("flatten", C.mlxg_flatten(g.res0(), a.c, C.int(start), C.int(end), g.s.c, g.errp()))
}

// BroadcastTo broadcasts a to shape.
func (g *Graph) BroadcastTo(a *Array, shape ...int) *Array {
	if !g.ok("broadcast_to", a) {
		return g.bad
	}
	return g.done("broadcast_to", C.mlxg_broadcast_to(g.res0(), a.c, g.ints(0, shape), C.int(len(shape)), g.s.c, g.errp()))
}

// Concatenate joins arrays along axis.
func (g *Graph) Concatenate(axis int, arrays ...*Array) *Array {
	if !g.ok("concatenate", arrays...) {
		return g.bad
	}
	if len(arrays) == 0 {
		g.Fail(&Error{Op: "concatenate", Msg: "no arrays"})
		return g.bad
	}
	hs := handles(arrays)
	return g.done("concatenate", C.mlxg_concatenate(g.res0(), &hs[0], C.int(len(hs)), C.int(axis), g.s.c, g.errp()))
}

// Stack joins arrays along a new axis.
func (g *Graph) Stack(axis int, arrays ...*Array) *Array {
	if !g.ok("stack", arrays...) {
		return g.bad
	}
	if len(arrays) == 0 {
		g.Fail(&Error{Op: "stack", Msg: "no arrays"})
		return g.bad
	}
	hs := handles(arrays)
	return g.done("stack", C.mlxg_stack(g.res0(), &hs[0], C.int(len(hs)), C.int(axis), g.s.c, g.errp()))
}

// Split cuts a into n equal parts along axis.
func (g *Graph) Split(a *Array, n, axis int) []*Array {
	return g.split(a, n, nil, axis)
}

// SplitAt cuts a along axis at the given indices: len(indices)+1 parts.
func (g *Graph) SplitAt(a *Array, indices []int, axis int) []*Array {
	return g.split(a, len(indices)+1, indices, axis)
}

func (g *Graph) split(a *Array, n int, indices []int, axis int) []*Array {
	out := make([]*Array, max(n, 0))
	for i := range out {
		out[i] = g.bad
	}
	if !g.ok("split", a) {
		return out
	}
	if n <= 0 {
		g.Fail(&Error{Op: "split", Msg: fmt.Sprintf("cannot split into %d parts", n)})
		return out
	}
	res := (*C.mlxg_array)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.mlxg_array{}))))
	defer C.free(unsafe.Pointer(res))
	var idx *C.int32_t
	if indices != nil {
		idx = g.ints(0, indices)
		if idx == nil {
			// SplitAt with no indices is one part, the whole array.
			idx = (*C.int32_t)(unsafe.Pointer(&g.ibuf[0]))
		}
	}
	if C.mlxg_split(res, a.c, C.int(n), idx, C.int(len(indices)), C.int(axis), g.s.c, g.errp()) != 0 {
		g.failC("split")
		return out
	}
	parts := unsafe.Slice(res, n)
	for i := range out {
		out[i] = g.adopt(parts[i])
	}
	return out
}

// Slice is a[start:stop] on every axis, stride 1.
func (g *Graph) Slice(a *Array, start, stop []int) *Array {
	return g.SliceStrided(a, start, stop, nil)
}

// SliceStrided is a[start:stop:strides]; nil strides are all 1.
func (g *Graph) SliceStrided(a *Array, start, stop, strides []int) *Array {
	if !g.ok("slice", a) {
		return g.bad
	}
	n := len(start)
	if len(stop) != n || (strides != nil && len(strides) != n) {
		g.Fail(&Error{Op: "slice", Msg: fmt.Sprintf("start %v, stop %v and strides %v differ in length", start, stop, strides)})
		return g.bad
	}
	if strides == nil {
		strides = ones(n)
	}
	return g.done("slice", C.mlxg_slice(g.res0(), a.c, g.ints(0, start), g.ints(16, stop), g.ints(32, strides), C.int(n), g.s.c, g.errp()))
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// SliceDynamic slices sizes elements along axes, starting at the positions
// held in start (an integer array, one entry per axis), so the start can
// change without rebuilding the graph's shape.
func (g *Graph) SliceDynamic(a, start *Array, axes, sizes []int) *Array {
	if !g.ok("slice", a, start) {
		return g.bad
	}
	return g.done("slice", C.mlxg_slice_dynamic(g.res0(), a.c, start.c, g.ints(0, axes), C.int(len(axes)), g.ints(16, sizes), C.int(len(sizes)), g.s.c, g.errp()))
}

// SliceUpdate is src with src[start:stop] replaced by update.
func (g *Graph) SliceUpdate(src, update *Array, start, stop []int) *Array {
	return g.SliceUpdateStrided(src, update, start, stop, nil)
}

// SliceUpdateStrided is src with src[start:stop:strides] replaced by update.
func (g *Graph) SliceUpdateStrided(src, update *Array, start, stop, strides []int) *Array {
	if !g.ok("slice_update", src, update) {
		return g.bad
	}
	n := len(start)
	if len(stop) != n || (strides != nil && len(strides) != n) {
		g.Fail(&Error{Op: "slice_update", Msg: fmt.Sprintf("start %v, stop %v and strides %v differ in length", start, stop, strides)})
		return g.bad
	}
	if strides == nil {
		strides = ones(n)
	}
	return g.done("slice_update", C.mlxg_slice_update(g.res0(), src.c, update.c, g.ints(0, start), g.ints(16, stop), g.ints(32, strides), C.int(n), g.s.c, g.errp()))
}

// WritePositions writes each update [B, H, n, D] into its array [B, H, T,
// D] from position at of axis 2 on: SliceUpdate of each, as a KV cache's
// step writes its keys and values. Where archgen's kernel takes them all
// (updates of their arrays' dtype, fitting) they are one op with an output
// per array, equal to SliceUpdate's, an array nothing else holds written in
// place as SliceUpdate writes it.
func (g *Graph) WritePositions(arrs, updates []*Array, at int) []*Array {
	const op = "write_positions"
	if !g.ok(op, append(append([]*Array{}, arrs...), updates...)...) {
		return g.bads(len(arrs))
	}
	if len(arrs) == 0 || len(arrs) != len(updates) {
		g.Fail(&Error{Op: op, Msg: fmt.Sprintf("%d arrays and %d updates", len(arrs), len(updates))})
		return g.bads(len(arrs))
	}
	as, us := handles(arrs), handles(updates)
	return g.results(op, len(arrs), func(res *C.mlxg_array) C.int {
		return C.mlxg_write_positions(res, &as[0], &us[0], C.int(len(as)), C.int(at), g.s.c, g.errp())
	})
}

// RowMove copies row Src's first Cols positions (axis 2) over row Dst's.
type RowMove struct{ Dst, Src, Cols int }

// CacheRows rewrites rows of a cache's arrays [C, H, T, D] (its keys and
// values, or a quantized cache's triples), one output each: first the
// moves, in order, then the writes. updates holds one list per source, each
// list an array per cache array ([B_i, H, n_i, D]); the sources' rows, in
// order, are written into rows slots[r] from positions at[r] on (updates
// nil for none). As WritePositions, an array nothing else holds is written
// in place: every row a step writes goes in one op, since each op of a
// chain on one array would still hold it for the next.
func (g *Graph) CacheRows(arrs []*Array, updates [][]*Array, slots, at []int, moves []RowMove) []*Array {
	const op = "cache_rows"
	all := append([]*Array{}, arrs...)
	var flatUp []*Array
	for _, u := range updates {
		all = append(all, u...)
		flatUp = append(flatUp, u...)
	}
	if !g.ok(op, all...) {
		return g.bads(len(arrs))
	}
	rows := 0
	for _, u := range updates {
		if len(u) != len(arrs) {
			rows = -1
			break
		}
		rows += u[0].Dim(0)
	}
	if len(arrs) == 0 || rows != len(slots) || len(slots) != len(at) || (updates == nil) != (len(slots) == 0) {
		g.Fail(&Error{Op: op, Msg: fmt.Sprintf("%d arrays, %d sources of updates, %d rows and %d positions to write", len(arrs), len(updates), len(slots), len(at))})
		return g.bads(len(arrs))
	}
	flat := make([]int, 0, 3*len(moves))
	for _, m := range moves {
		flat = append(flat, m.Dst, m.Src, m.Cols)
	}
	as := handles(arrs)
	var us []C.mlxg_array
	var up *C.mlxg_array
	if flatUp != nil {
		us = handles(flatUp)
		up = &us[0]
	}
	return g.results(op, len(arrs), func(res *C.mlxg_array) C.int {
		return C.mlxg_cache_rows(res, &as[0], up, C.int(len(as)), C.int(len(updates)), g.ints(0, slots), g.ints(len(slots), at),
			C.int(len(slots)), g.ints(2*len(slots), flat), C.int(len(moves)), g.s.c, g.errp())
	})
}

// SliceUpdateDynamic is src with update written at the positions held in
// start (one entry per axis in axes).
func (g *Graph) SliceUpdateDynamic(src, update, start *Array, axes []int) *Array {
	if !g.ok("slice_update", src, update, start) {
		return g.bad
	}
	return g.done("slice_update", C.mlxg_slice_update_dynamic(g.res0(), src.c, update.c, start.c, g.ints(0, axes), C.int(len(axes)), g.s.c, g.errp()))
}

// Take gathers entries of a along axis at indices.
func (g *Graph) Take(a, indices *Array, axis int) *Array {
	if !g.ok("take", a, indices) {
		return g.bad
	}
	return g.done("take", C.mlxg_take(g.res0(), a.c, indices.c, true, C.int(axis), g.s.c, g.errp()))
}

// TakeFlat gathers entries of the flattened a at indices.
func (g *Graph) TakeFlat(a, indices *Array) *Array {
	if !g.ok("take", a, indices) {
		return g.bad
	}
	return g.done("take", C.mlxg_take(g.res0(), a.c, indices.c, false, 0, g.s.c, g.errp()))
}

// TakeAlongAxis gathers along axis with indices shaped like a.
func (g *Graph) TakeAlongAxis(a, indices *Array, axis int) *Array {
	if !g.ok("take_along_axis", a, indices) {
		return g.bad
	}
	return g.done("take_along_axis", C.mlxg_take_along_axis(g.res0(), a.c, indices.c, C.int(axis), g.s.c, g.errp()))
}

// PutAlongAxis is a with values written at indices along axis (indices
// shaped like a, or broadcasting; values broadcast against them).
func (g *Graph) PutAlongAxis(a, indices, values *Array, axis int) *Array {
	if !g.ok("put_along_axis", a, indices, values) {
		return g.bad
	}
	return g.done("put_along_axis", C.mlxg_put_along_axis(g.res0(), a.c, indices.c, values.c, C.int(axis), g.s.c, g.errp()))
}

// Triu zeroes what lies below the kth diagonal of the last two axes.
func (g *Graph) Triu(a *Array, k int) *Array {
	if !g.ok("triu", a) {
		return g.bad
	}
	return g.done("triu", C.mlxg_tri(g.res0(), a.c, C.int(k), true, g.s.c, g.errp()))
}

// Tril zeroes what lies above the kth diagonal of the last two axes.
func (g *Graph) Tril(a *Array, k int) *Array {
	if !g.ok("tril", a) {
		return g.bad
	}
	return g.done("tril", C.mlxg_tri(g.res0(), a.c, C.int(k), false, g.s.c, g.errp()))
}

// Pad pads the given axes with value: lo before, hi after.
func (g *Graph) Pad(a *Array, axes, lo, hi []int, value float64) *Array {
	if !g.ok("pad", a) {
		return g.bad
	}
	if len(lo) != len(axes) || len(hi) != len(axes) {
		g.Fail(&Error{Op: "pad", Msg: "axes, lo and hi differ in length"})
		return g.bad
	}
	return g.done("pad", C.mlxg_pad(g.res0(), a.c, g.ints(0, axes), g.ints(16, lo), g.ints(32, hi), C.int(len(axes)), C.double(value), g.s.c, g.errp()))
}

// ---- linear algebra and quantization ----

// Matmul is the matrix product, batched over leading axes.
func (g *Graph) Matmul(a, b *Array) *Array {
	if !g.ok("matmul", a, b) {
		return g.bad
	}
	return g.done("matmul", C.mlxg_matmul(g.res0(), a.c, b.c, g.s.c, g.errp()))
}

// Linear is x w^T, a linear layer's product for a weight w [out, in]: the
// matrix product by w's transpose, on archgen's own CPU kernel for an
// evaluated float32, bfloat16 or float16 weight of x's dtype (see
// NativeQuantizedMatmul; half-precision results equal mlx's bit for bit),
// mlx's matmul otherwise.
func (g *Graph) Linear(x, w *Array) *Array {
	if !g.ok("linear", x, w) {
		return g.bad
	}
	return g.done("linear", C.mlxg_linear(g.res0(), x.c, w.c, g.s.c, g.errp()))
}

// Addmm is beta*c + alpha*(a @ b).
func (g *Graph) Addmm(c, a, b *Array, alpha, beta float32) *Array {
	if !g.ok("addmm", c, a, b) {
		return g.bad
	}
	return g.done("addmm", C.mlxg_addmm(g.res0(), c.c, a.c, b.c, C.float(alpha), C.float(beta), g.s.c, g.errp()))
}

// Quantized is a quantized matrix as MLX stores it: packed uint32 weights
// and per-group scales, with per-group biases in affine mode. Mode is MLX's
// quantization mode ("affine", "mxfp4", "mxfp8", "nvfp4"); empty means
// affine.
type Quantized struct {
	Weight, Scales, Biases *Array
	GroupSize, Bits        int
	Mode                   string
}

// Quantize quantizes w along its last axis (affine mode).
func (g *Graph) Quantize(w *Array, groupSize, bits int) Quantized {
	return g.QuantizeMode(w, groupSize, bits, "affine")
}

// QuantizeMode quantizes w along its last axis in the given mode; Biases is
// nil for the modes that have none (all but affine).
func (g *Graph) QuantizeMode(w *Array, groupSize, bits int, mode string) Quantized {
	q := Quantized{Weight: g.bad, Scales: g.bad, Biases: g.bad, GroupSize: groupSize, Bits: bits, Mode: mode}
	if !g.ok("quantize", w) {
		return q
	}
	cm, free := cMode(mode)
	defer free()
	if C.mlxg_quantize(&g.st.slot.res[0], w.c, C.int(groupSize), C.int(bits), cm, g.s.c, g.errp()) != 0 {
		g.failC("quantize")
		return q
	}
	q.Weight = g.adopt(g.st.slot.res[0])
	q.Scales = g.adopt(g.st.slot.res[1])
	if g.st.slot.res[2].ctx != nil {
		q.Biases = g.adopt(g.st.slot.res[2])
	} else {
		q.Biases = nil
	}
	return q
}

// cAffine is the mode string every affine call passes, made once.
var cAffine = C.CString("affine")

// cQuantModes holds MLX's quantization modes as C strings, made once.
var cQuantModes = map[string]*C.char{"": cAffine, "affine": cAffine, "mxfp4": C.CString("mxfp4"),
	"mxfp8": C.CString("mxfp8"), "nvfp4": C.CString("nvfp4")}

// cMode is mode as a C string, and what frees it: one made for the call
// when mode is not one of MLX's (MLX then names it in its error).
func cMode(mode string) (*C.char, func()) {
	if c, ok := cQuantModes[mode]; ok {
		return c, func() {}
	}
	c := C.CString(mode)
	return c, func() { C.free(unsafe.Pointer(c)) }
}

// okQuantized checks q's arrays: Biases may be nil where the mode has none,
// and Scales where the mode is a block format (BlockFormat).
func (g *Graph) okQuantized(op string, q Quantized, args ...*Array) bool {
	if IsBlockMode(q.Mode) {
		return g.ok(op, append(args, q.Weight)...)
	}
	return g.ok(op, append(args, q.Weight, q.Scales)...) && g.okOpt(op, q.Biases)
}

// Dequantize unpacks q into dtype (the scales' dtype when dtype is not valid).
func (g *Graph) Dequantize(q Quantized, dtype Dtype) *Array {
	if !g.okQuantized("dequantize", q) {
		return g.bad
	}
	if f, ok := BlockFormatOfMode(q.Mode); ok {
		return g.BlockDequantize(q.Weight, f, dtype)
	}
	dt := C.int(-1)
	if dtype.Valid() {
		dt = C.int(dtype)
	}
	cm, free := cMode(q.Mode)
	defer free()
	return g.done("dequantize", C.mlxg_dequantize(g.res0(), q.Weight.c, q.Scales.c, opt(q.Biases), C.int(q.GroupSize), C.int(q.Bits), cm, dt, g.s.c, g.errp()))
}

// QuantizedMatmul is x @ dequantize(q).T when transpose (a Linear layer's
// weight), x @ dequantize(q) otherwise, without unpacking q.
func (g *Graph) QuantizedMatmul(x *Array, q Quantized, transpose bool) *Array {
	if !g.okQuantized("quantized_matmul", q, x) {
		return g.bad
	}
	if f, ok := BlockFormatOfMode(q.Mode); ok {
		if !transpose {
			g.Fail(&Error{Op: "quantized_matmul", Msg: "a block-quantized matrix multiplies only as a linear layer's weight (transpose)"})
			return g.bad
		}
		return g.BlockMatmul(x, q.Weight, f)
	}
	cm, free := cMode(q.Mode)
	defer free()
	return g.done("quantized_matmul", C.mlxg_quantized_matmul(g.res0(), x.c, q.Weight.c, q.Scales.c, opt(q.Biases), C.bool(transpose), C.int(q.GroupSize), C.int(q.Bits), cm, g.s.c, g.errp()))
}

// QuantizedMatmuls is QuantizedMatmul(x, q, true) for each q in qs, the
// products of one x by several matrices (a layer's q, k and v
// projections; gate and up). Where archgen's kernel takes them all (the
// same mode, group size and bits, and scales of one dtype) they are one op
// with an output per matrix, x is prepared once and the kernel's threads
// share all their rows in one hand-off; each output equals its own
// QuantizedMatmul bit for bit. Otherwise they are separate products.
func (g *Graph) QuantizedMatmuls(x *Array, qs []Quantized) []*Array {
	return g.quantizedMatmuls(x, qs, 0)
}

// QuantizedMatmulsByHead is QuantizedMatmuls for an x [B, L, K] whose
// products split into heads of headDim values, each output [B, N /
// headDim, L, headDim] (the reshape to [B, L, heads, headDim] and the
// transpose that attention reads): archgen's kernel writes its rows as
// ever and returns them under those strides, with no op of the graph's
// own for the reshape or transpose.
func (g *Graph) QuantizedMatmulsByHead(x *Array, qs []Quantized, headDim int) []*Array {
	return g.quantizedMatmuls(x, qs, headDim)
}

func (g *Graph) quantizedMatmuls(x *Array, qs []Quantized, headDim int) []*Array {
	const op = "quantized_matmuls"
	for _, q := range qs {
		if !g.okQuantized(op, q, x) {
			return g.bads(len(qs))
		}
	}
	if len(qs) == 0 {
		g.Fail(&Error{Op: op, Msg: "no matrices"})
		return nil
	}
	for _, q := range qs[1:] {
		if q.GroupSize != qs[0].GroupSize || q.Bits != qs[0].Bits || q.Mode != qs[0].Mode {
			g.Fail(&Error{Op: op, Msg: fmt.Sprintf("matrices quantized differently (%d bits in groups of %d, mode %q; and %d bits in groups of %d, mode %q)",
				qs[0].Bits, qs[0].GroupSize, qs[0].Mode, q.Bits, q.GroupSize, q.Mode)})
			return g.bads(len(qs))
		}
	}
	if f, ok := BlockFormatOfMode(qs[0].Mode); ok {
		// block formats: a product each (heads laid out as the grouped
		// products lay them out)
		out := make([]*Array, len(qs))
		for i, q := range qs {
			y := g.BlockMatmul(x, q.Weight, f)
			if headDim > 0 {
				y = g.Transpose(g.Reshape(y, x.Dim(0), x.Dim(1), y.Dim(-1)/headDim, headDim), 0, 2, 1, 3)
			}
			out[i] = y
		}
		return out
	}
	n := len(qs)
	args := make([]C.mlxg_array, 3*n)
	for i, q := range qs {
		args[i], args[n+i], args[2*n+i] = q.Weight.c, q.Scales.c, opt(q.Biases)
	}
	cm, free := cMode(qs[0].Mode)
	defer free()
	return g.results(op, n, func(res *C.mlxg_array) C.int {
		return C.mlxg_quantized_matmuls(res, x.c, &args[0], &args[n], &args[2*n], C.int(n), C.int(qs[0].GroupSize), C.int(qs[0].Bits), cm, C.int(headDim), g.s.c, g.errp())
	})
}

// bads is n of g's invalid array, what a failed op of n outputs returns.
func (g *Graph) bads(n int) []*Array {
	out := make([]*Array, n)
	for i := range out {
		out[i] = g.bad
	}
	return out
}

// results runs call, which writes an op's n outputs into res[0..n), and
// adopts them; n invalid arrays, the error recorded, when it fails.
func (g *Graph) results(op string, n int, call func(res *C.mlxg_array) C.int) []*Array {
	res := make([]C.mlxg_array, n)
	if call(&res[0]) != 0 {
		g.failC(op)
		return g.bads(n)
	}
	out := make([]*Array, n)
	for i := range out {
		out[i] = g.adopt(res[i])
	}
	return out
}

// Linears is Linear(x, w) for each w in ws: one op with an output per
// weight where archgen's kernel takes them all (see QuantizedMatmuls),
// separate products otherwise.
func (g *Graph) Linears(x *Array, ws []*Array) []*Array { return g.linears(x, ws, 0) }

// LinearsByHead is Linears for an x [B, L, K] whose products split into
// heads of headDim values, each output [B, N / headDim, L, headDim] (see
// QuantizedMatmulsByHead).
func (g *Graph) LinearsByHead(x *Array, ws []*Array, headDim int) []*Array {
	return g.linears(x, ws, headDim)
}

func (g *Graph) linears(x *Array, ws []*Array, headDim int) []*Array {
	if !g.ok("linears", append([]*Array{x}, ws...)...) {
		return g.bads(len(ws))
	}
	if len(ws) == 0 {
		g.Fail(&Error{Op: "linears", Msg: "no weights"})
		return nil
	}
	hs := handles(ws)
	return g.results("linears", len(ws), func(res *C.mlxg_array) C.int {
		return C.mlxg_linears(res, x.c, &hs[0], C.int(len(hs)), C.int(headDim), g.s.c, g.errp())
	})
}

// ---- fast kernels ----

var noArray C.mlxg_array

func opt(a *Array) C.mlxg_array {
	if a == nil {
		return noArray
	}
	return a.c
}

// RMSNorm is x / rms(x) * weight over the last axis; weight may be nil.
func (g *Graph) RMSNorm(x, weight *Array, eps float32) *Array {
	if !g.ok("rms_norm", x) || !g.okOpt("rms_norm", weight) {
		return g.bad
	}
	return g.done("rms_norm", C.mlxg_rms_norm(g.res0(), x.c, opt(weight), C.float(eps), g.s.c, g.errp()))
}

// GatedRMSNorm is RMSNorm(x, weight, eps) times silu(gate) (gate of x's
// shape), for float32 x and gate one op on archgen's norm kernel (libmlx's
// ops otherwise): the recurrent mixers' gated output norm.
func (g *Graph) GatedRMSNorm(x, weight, gate *Array, eps float32) *Array {
	if !g.ok("gated_rms_norm", x, gate) || !g.okOpt("gated_rms_norm", weight) {
		return g.bad
	}
	return g.done("gated_rms_norm", C.mlxg_gated_rms_norm(g.res0(), x.c, opt(weight), gate.c, C.float(eps), g.s.c, g.errp()))
}

// LayerNorm normalizes the last axis, then scales by weight and adds bias
// (either may be nil).
func (g *Graph) LayerNorm(x, weight, bias *Array, eps float32) *Array {
	if !g.ok("layer_norm", x) || !g.okOpt("layer_norm", weight, bias) {
		return g.bad
	}
	return g.done("layer_norm", C.mlxg_layer_norm(g.res0(), x.c, opt(weight), opt(bias), C.float(eps), g.s.c, g.errp()))
}

// AddRMSNorm is Add(x, residual) and RMSNorm of that sum: a residual
// stream's update and the next sublayer's normed input. Where archgen's
// kernel takes them (x and residual of one shape and dtype) they are one op
// with both outputs, each equal to Add's and RMSNorm's bit for bit.
func (g *Graph) AddRMSNorm(x, residual, weight *Array, eps float32) (sum, normed *Array) {
	return g.addNorm("rms_norm", x, residual, weight, nil, eps, false)
}

// AddLayerNorm is AddRMSNorm with LayerNorm.
func (g *Graph) AddLayerNorm(x, residual, weight, bias *Array, eps float32) (sum, normed *Array) {
	return g.addNorm("layer_norm", x, residual, weight, bias, eps, true)
}

func (g *Graph) addNorm(op string, x, residual, weight, bias *Array, eps float32, layer bool) (*Array, *Array) {
	if !g.ok(op, x, residual) || !g.okOpt(op, weight, bias) {
		return g.bad, g.bad
	}
	ys := g.results(op, 2, func(res *C.mlxg_array) C.int {
		return C.mlxg_add_norm(res, x.c, residual.c, opt(weight), opt(bias), C.float(eps), C.bool(layer), g.s.c, g.errp())
	})
	return ys[0], ys[1]
}

// RoPE describes a rotary embedding: the first Dims features of the last
// axis rotate, by frequencies from Base, or from Freqs when it is set.
type RoPE struct {
	Dims        int
	Traditional bool // rotate interleaved pairs rather than halves
	Base        float32
	Scale       float32
	Freqs       *Array
}

// RoPE rotates x (shape [..., L, D]) for positions offset..offset+L-1.
func (g *Graph) RoPE(x *Array, r *RoPE, offset int) *Array {
	return g.rope(x, r, offset, nil)
}

// RoPEAt is RoPE with the offset in an array: a scalar, or one per batch row.
func (g *Graph) RoPEAt(x *Array, r *RoPE, offset *Array) *Array {
	if offset == nil {
		g.Fail(&Error{Op: "rope", Msg: "nil offset array"})
		return g.bad
	}
	return g.rope(x, r, 0, offset)
}

// RoPEs is RoPE of each of xs, all rotated by the same positions (a
// layer's queries and keys): one op with an output each where archgen's
// kernel takes them all (arrays of one dtype), which makes the positions'
// cos and sin table once for them; each output equals its own RoPE bit for
// bit.
func (g *Graph) RoPEs(xs []*Array, r *RoPE, offset int) []*Array { return g.ropes(xs, r, offset, nil) }

// RoPEsAt is RoPEs with the offset in an array (see RoPEAt).
func (g *Graph) RoPEsAt(xs []*Array, r *RoPE, offset *Array) []*Array {
	if offset == nil {
		g.Fail(&Error{Op: "rope", Msg: "nil offset array"})
		return g.bads(len(xs))
	}
	return g.ropes(xs, r, 0, offset)
}

func (g *Graph) ropes(xs []*Array, r *RoPE, offset int, offArr *Array) []*Array {
	if !g.ok("rope", xs...) || !g.okOpt("rope", r.Freqs, offArr) {
		return g.bads(len(xs))
	}
	if len(xs) == 0 {
		g.Fail(&Error{Op: "rope", Msg: "no arrays"})
		return nil
	}
	hs := handles(xs)
	return g.results("rope", len(xs), func(res *C.mlxg_array) C.int {
		return C.mlxg_ropes(res, &hs[0], C.int(len(hs)), C.int(r.Dims), C.bool(r.Traditional), C.bool(r.Freqs == nil), C.float(r.Base), C.float(r.Scale), C.int(offset), opt(offArr), opt(r.Freqs), g.s.c, g.errp())
	})
}

func (g *Graph) rope(x *Array, r *RoPE, offset int, offArr *Array) *Array {
	if !g.ok("rope", x) || !g.okOpt("rope", r.Freqs, offArr) {
		return g.bad
	}
	hasBase := r.Freqs == nil
	return g.done("rope", C.mlxg_rope(g.res0(), x.c, C.int(r.Dims), C.bool(r.Traditional), C.bool(hasBase), C.float(r.Base), C.float(r.Scale), C.int(offset), opt(offArr), opt(r.Freqs), g.s.c, g.errp()))
}

// AttentionMask is how scaled dot-product attention masks its scores.
type AttentionMask struct {
	Mode  string // "", "causal" or "array"
	Array *Array // for "array": boolean (true attends) or additive
}

// NoMask lets every query see every key.
var NoMask = AttentionMask{}

// CausalMask lets query i see keys up to its own position, aligned at the end.
var CausalMask = AttentionMask{Mode: "causal"}

// MaskArray masks with an explicit array.
func MaskArray(m *Array) AttentionMask { return AttentionMask{Mode: "array", Array: m} }

var cModes = map[string]*C.char{"": C.CString(""), "causal": C.CString("causal"), "array": C.CString("array")}

// SDPA is softmax(q k^T * scale + mask) v with q [B, Hq, L, D] and k, v
// [B, Hkv, S, D]; grouped-query attention when Hq is a multiple of Hkv.
func (g *Graph) SDPA(q, k, v *Array, scale float32, mask AttentionMask) *Array {
	return g.SDPASinks(q, k, v, scale, mask, nil)
}

// SDPASinks is SDPA with per-head attention sinks (nil for none).
func (g *Graph) SDPASinks(q, k, v *Array, scale float32, mask AttentionMask, sinks *Array) *Array {
	op := "scaled_dot_product_attention"
	if !g.ok(op, q, k, v) || !g.okOpt(op, mask.Array, sinks) {
		return g.bad
	}
	mode, ok := cModes[mask.Mode]
	if !ok {
		g.Fail(&Error{Op: op, Msg: fmt.Sprintf("unknown mask mode %q", mask.Mode)})
		return g.bad
	}
	if (mask.Mode == "array") != (mask.Array != nil) {
		g.Fail(&Error{Op: op, Msg: "an array mask needs mode \"array\" and an array"})
		return g.bad
	}
	return g.done(op, C.mlxg_sdpa(g.res0(), q.c, k.c, v.c, C.float(scale), mode, opt(mask.Array), opt(sinks), g.s.c, g.errp()))
}

// ---- random ----

// RandomKey is a PRNG key from a seed.
func (g *Graph) RandomKey(seed uint64) *Array {
	if !g.ok("random_key") {
		return g.bad
	}
	return g.done("random_key", C.mlxg_random_key(g.res0(), C.uint64_t(seed), g.errp()))
}

// RandomSplit makes two new keys from key.
func (g *Graph) RandomSplit(key *Array) (*Array, *Array) {
	if !g.ok("random_split", key) {
		return g.bad, g.bad
	}
	if C.mlxg_random_split(&g.st.slot.res[0], key.c, g.s.c, g.errp()) != 0 {
		g.failC("random_split")
		return g.bad, g.bad
	}
	a := g.adopt(g.st.slot.res[0])
	return a, g.adopt(g.st.slot.res[1])
}

// Categorical samples indices along axis with probabilities softmax(logits).
// A nil key draws from MLX's global generator.
func (g *Graph) Categorical(logits *Array, axis int, key *Array) *Array {
	if !g.ok("categorical", logits) || !g.okOpt("categorical", key) {
		return g.bad
	}
	return g.done("categorical", C.mlxg_random_categorical(g.res0(), logits.c, C.int(axis), opt(key), g.s.c, g.errp()))
}

// Uniform samples [0, 1) uniformly.
func (g *Graph) Uniform(shape []int, dtype Dtype, key *Array) *Array {
	if !g.okOpt("uniform", key) {
		return g.bad
	}
	return g.done("uniform", C.mlxg_random_uniform(g.res0(), g.ints(0, shape), C.int(len(shape)), C.int(dtype), opt(key), g.s.c, g.errp()))
}

// Normal samples a normal distribution.
func (g *Graph) Normal(shape []int, dtype Dtype, loc, scale float32, key *Array) *Array {
	if !g.okOpt("normal", key) {
		return g.bad
	}
	return g.done("normal", C.mlxg_random_normal(g.res0(), g.ints(0, shape), C.int(len(shape)), C.int(dtype), C.float(loc), C.float(scale), opt(key), g.s.c, g.errp()))
}

// GatedDelta runs the gated delta rule (Qwen3-Next's and Qwen3.5's linear
// attention) over every step of q, k [B, T, Hk, Dk] and v [B, T, Hv, Dv]
// from state (float32 [B, Hv, Dv, Dk]; zeros for a fresh sequence), with
// decay g (float32 [B, T, Hv], or [B, T, Hv, Dk] per key channel) and
// beta [B, T, Hv]; mask (bool [B, T], or nil) marks the steps whose state
// carries on. Each step: S = S * g; d = (v - S k) * beta; S = S + k d;
// y = S q. It returns y [B, T, Hv, Dv] in q's dtype and the last state: one
// op on archgen's kernel, equal bit for bit to GatedDeltaOps.
func (g *Graph) GatedDelta(q, k, v, decay, beta, state, mask *Array) (y, last *Array) {
	return g.gatedDelta(q, k, v, decay, beta, state, mask, true)
}

// ConvStep is a short (depthwise, causal) convolution's step in float32:
// x [B, L, C] after state [B, K - 1, C] (the inputs before them) by w,
// plus bias [C] (nil: none), then silu where asked. w is the taps [K, C],
// each tap's weights over the channels, which the kernel reads as they
// are (the layout a model keeps from loading, nn.ShortConv's Taps), or
// MLX's depthwise kernel [C, K, 1], which it moves to taps on each call.
// It returns y [B, L, C] and the next state, the last K - 1 of state and x
// side by side: one op on archgen's kernel where it runs (libmlx's ops
// otherwise), within float32 rounding of Conv1D over them.
func (g *Graph) ConvStep(x, state, w, bias *Array, silu bool) (y, next *Array) {
	const op = "conv_step"
	if !g.ok(op, x, state, w) || !g.okOpt(op, bias) {
		return g.bad, g.bad
	}
	ys := g.results(op, 2, func(res *C.mlxg_array) C.int {
		return C.mlxg_conv_step(res, x.c, state.c, w.c, opt(bias), C.bool(silu), g.s.c, g.errp())
	})
	return ys[0], ys[1]
}

// DeltaShape is the gated delta rule's heads: Hk key heads of Dk, Hv value
// heads of Dv.
type DeltaShape struct{ Hk, Dk, Hv, Dv int }

// GatedDeltaGates is GatedDelta from its projections' outputs, in float32:
// q, k and v side by side in qkv [B, T, 2 Hk Dk + Hv Dv] (after the
// convolution), q and k scaled to unit length here (x / sqrt(mean(x²) +
// 1e-6 / Dk), q then by 1/Dk, k by Dk^-1/2), the write strength sigmoid(b)
// (twice that with neg) and the decay exp(rate softplus(a + dtBias)) made
// from b and a [B, T, Hv] and rate and dtBias [Hv]. One op on archgen's
// kernel where it runs (libmlx's ops otherwise), within float32 rounding
// of the same steps composed.
func (g *Graph) GatedDeltaGates(qkv, b, a, rate, dtBias, state, mask *Array, h DeltaShape, neg bool) (y, last *Array) {
	const op = "gated_delta_gates"
	if !g.ok(op, qkv, b, a, rate, dtBias, state) || !g.okOpt(op, mask) {
		return g.bad, g.bad
	}
	ys := g.results(op, 2, func(res *C.mlxg_array) C.int {
		return C.mlxg_gated_delta_gates(res, qkv.c, b.c, a.c, rate.c, dtBias.c, state.c, opt(mask), C.int(h.Hk), C.int(h.Dk), C.int(h.Hv), C.int(h.Dv), C.bool(neg), g.s.c, g.errp())
	})
	return ys[0], ys[1]
}

// GatedDeltaOps is GatedDelta composed of libmlx's ops one step at a time,
// as mlx-lm's gated_delta_ops composes it on the CPU.
func (g *Graph) GatedDeltaOps(q, k, v, decay, beta, state, mask *Array) (y, last *Array) {
	return g.gatedDelta(q, k, v, decay, beta, state, mask, false)
}

func (g *Graph) gatedDelta(q, k, v, decay, beta, state, mask *Array, native bool) (*Array, *Array) {
	const op = "gated_delta"
	if !g.ok(op, q, k, v, decay, beta, state) || !g.okOpt(op, mask) {
		return g.bad, g.bad
	}
	ys := g.results(op, 2, func(res *C.mlxg_array) C.int {
		return C.mlxg_gated_delta(res, q.c, k.c, v.c, decay.c, beta.c, state.c, opt(mask), C.bool(native), g.s.c, g.errp())
	})
	return ys[0], ys[1]
}

// Conv1D is mlx's conv1d: x [B, L, C_in] by w [C_out, K, C_in / groups],
// giving [B, (L + 2 padding - dilation (K - 1) - 1) / stride + 1, C_out].
// groups = C_in = C_out is a depthwise convolution, the short causal
// convolution of the recurrent mixers (x then holds the K - 1 inputs before
// it, their state, ahead of the new ones).
func (g *Graph) Conv1D(x, w *Array, stride, padding, dilation, groups int) *Array {
	if !g.ok("conv1d", x, w) {
		return g.bad
	}
	return g.done("conv1d", C.mlxg_conv1d(g.res0(), x.c, w.c, C.int(stride), C.int(padding), C.int(dilation), C.int(groups), g.s.c, g.errp()))
}

// SelectiveScan is Mamba's selective scan in float32 in one op (archgen's
// kernel, parallel over batch rows and channels): x and dt [b, T, d] (dt
// after its softplus), A [d, n] (-exp(A_log)), B and C [b, T, n], D [d],
// from state ([b, d, n]; nil for a fresh sequence). Each step is S = S
// exp(dt A) + dt x B and y = S · C + D x. It returns y and the last state.
func (g *Graph) SelectiveScan(x, dt, a, b, c, d, state *Array) (y, last *Array) {
	const op = "selective_scan"
	if !g.ok(op, x, dt, a, b, c, d) || !g.okOpt(op, state) {
		return g.bad, g.bad
	}
	ys := g.results(op, 2, func(res *C.mlxg_array) C.int {
		return C.mlxg_selective_scan(res, x.c, dt.c, a.c, b.c, c.c, d.c, opt(state), g.s.c, g.errp())
	})
	return ys[0], ys[1]
}

// LinearRecurrence is a diagonal linear recurrence in float32 in one op
// (archgen's kernel, parallel over batch rows and blocks of channels): a
// and u [b, T, d], from state ([b, d]; nil for zeros). Each step is h = a
// h + u, the product rounded to float32 before the sum, as the composed
// ops round it. It returns every step's h [b, T, d] and the last [b, d].
func (g *Graph) LinearRecurrence(a, u, state *Array) (y, last *Array) {
	const op = "linear_recurrence"
	if !g.ok(op, a, u) || !g.okOpt(op, state) {
		return g.bad, g.bad
	}
	ys := g.results(op, 2, func(res *C.mlxg_array) C.int {
		return C.mlxg_linear_recurrence(res, a.c, u.c, opt(state), g.s.c, g.errp())
	})
	return ys[0], ys[1]
}

// WKV7 is RWKV-7's WKV-7 recurrence in float32 in one op (archgen's
// kernel, parallel over batch rows, heads and state rows): r, w, k, v, a
// and b [b, T, H, D], from state ([b, H, D, D]; nil for a fresh sequence).
// Per head each step is S = S diag(w) + v kᵀ + (S a) bᵀ, S a taken from
// the state before the step, and y = S r. It returns y [b, T, H, D] and
// the last state.
func (g *Graph) WKV7(r, w, k, v, a, b, state *Array) (y, last *Array) {
	const op = "wkv7"
	if !g.ok(op, r, w, k, v, a, b) || !g.okOpt(op, state) {
		return g.bad, g.bad
	}
	ys := g.results(op, 2, func(res *C.mlxg_array) C.int {
		return C.mlxg_wkv7(res, r.c, w.c, k.c, v.c, a.c, b.c, opt(state), g.s.c, g.errp())
	})
	return ys[0], ys[1]
}

// Lightning is lightning attention's constant-decay linear recurrence
// (the linear attention of mlx-lm's bailing_moe_linear) in float32 in one
// op (archgen's kernel, parallel over batch rows, heads and blocks of
// value columns): q and k [B, T, H, Dk], v [B, T, H, Dv] (any strides),
// decay [H] (each head's per-step multiplier a, already exponentiated),
// from state ([B, H, Dk, Dv]; nil for zeros). Per head each step is S = a
// S + kᵀ v and y = (scale q) S, each product rounded before its sum as
// the composed ops round them. It returns y [B, T, H, Dv] and the last
// state: the state equal to LightningOps' in float32, y within float32
// rounding of it. Other dtypes are an error (LightningOps takes them).
func (g *Graph) Lightning(q, k, v, decay, state *Array, scale float64) (y, last *Array) {
	return g.lightning(q, k, v, decay, state, scale, true)
}

// LightningOps is Lightning composed of libmlx's ops one step at a time,
// as mlx-lm's bailing_moe_linear composes it (recurrent_gla), in q's float
// dtype: the decay cast to it, q times scale, each step kᵀ v and q S as
// matrix products of one row. The last state stays in q's dtype (a wider
// state given promotes it, as libmlx promotes).
func (g *Graph) LightningOps(q, k, v, decay, state *Array, scale float64) (y, last *Array) {
	return g.lightning(q, k, v, decay, state, scale, false)
}

func (g *Graph) lightning(q, k, v, decay, state *Array, scale float64, native bool) (*Array, *Array) {
	const op = "lightning"
	if !g.ok(op, q, k, v, decay) || !g.okOpt(op, state) {
		return g.bad, g.bad
	}
	ys := g.results(op, 2, func(res *C.mlxg_array) C.int {
		return C.mlxg_lightning(res, q.c, k.c, v.c, decay.c, opt(state), C.double(scale), C.bool(native), g.s.c, g.errp())
	})
	return ys[0], ys[1]
}

// SSM holds the parameters of a Mamba2 state-space layer's scan, each
// [heads]: ALog (A = -exp(ALog)), D (the skip connection) and DtBias;
// DtMin and DtMax clip the time steps.
type SSM struct {
	ALog, D, DtBias *Array
	DtMin, DtMax    float32
}

// SSMScan runs Mamba2's state-space scan (SSD) over every step: x [b, T,
// h, p], B and C [b, T, g, n] (head i reads group i / (h / g)), dt [b, T,
// h] raw, from state (float32 [b, h, p, n]; nil for a fresh sequence).
// With dt' = clip(softplus(float32(dt) + DtBias), DtMin, DtMax) each step
// is S = exp(dt' A) S + (dt' x) B; y = S C + D x. It returns y and the
// last state, on archgen's kernel: a step-by-step recurrence in float32
// that equals mlx-lm's chunked ssm_attn within float32 rounding
// (SSMScanOps is that form, bit for bit).
func (g *Graph) SSMScan(x, b, c, dt, state *Array, p *SSM) (y, last *Array) {
	return g.ssmScan(x, b, c, dt, state, p, true)
}

// SSMScanOps is SSMScan composed of libmlx's ops in chunks of 256 steps as
// mlx-lm's ssm_attn composes them (without its batch masks).
func (g *Graph) SSMScanOps(x, b, c, dt, state *Array, p *SSM) (y, last *Array) {
	return g.ssmScan(x, b, c, dt, state, p, false)
}

func (g *Graph) ssmScan(x, b, c, dt, state *Array, p *SSM, native bool) (*Array, *Array) {
	const op = "ssm_scan"
	if !g.ok(op, x, b, c, dt, p.ALog, p.D, p.DtBias) || !g.okOpt(op, state) {
		return g.bad, g.bad
	}
	ys := g.results(op, 2, func(res *C.mlxg_array) C.int {
		return C.mlxg_ssm_scan(res, x.c, p.ALog.c, b.c, c.c, p.D.c, dt.c, p.DtBias.c, opt(state),
			C.float(p.DtMin), C.float(p.DtMax), C.bool(native), g.s.c, g.errp())
	})
	return ys[0], ys[1]
}
