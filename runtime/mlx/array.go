package mlx

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Array is a handle on an MLX array. One made by a graph's op belongs to the
// graph until Keep; one from NewArray or a loader belongs to the caller, who
// releases it with Free.
type Array struct {
	c   C.mlxg_array
	g   *Graph  // the owning graph; nil once kept, or when the caller owns it
	s   *Stream // the stream it was made on (nil for host data)
	i   int32   // index in the owning graph's handle list
	gen uint32  // the owning graph's generation when made
}

// errInvalid is the error of an array that holds nothing.
var errInvalid = errors.New("mlx: invalid array (freed, from a closed graph, or the result of a failed op)")

// valid reports whether a holds a live handle.
func (a *Array) valid() bool {
	return a != nil && a.c.ctx != nil && (a.g == nil || (!a.g.closed && a.g.gen == a.gen))
}

// Valid reports whether a holds a live array: false after Free, after its
// graph was closed, and for the result of a failed op.
func (a *Array) Valid() bool { return a.valid() }

// Free releases an array the caller owns. Freeing an array a graph still
// owns is refused (the graph frees it at Close); freeing twice is a no-op.
func (a *Array) Free() {
	if a == nil || a.c.ctx == nil || a.g != nil {
		return
	}
	C.mlxg_array_free(a.c)
	a.c.ctx = nil
}

// Ndim is the number of dimensions; 0 for an invalid array.
func (a *Array) Ndim() int {
	if !a.valid() {
		return 0
	}
	return int(C.mlxg_array_ndim(a.c))
}

// Shape is the array's shape; nil for an invalid array.
func (a *Array) Shape() []int {
	if !a.valid() {
		return nil
	}
	n := int(C.mlxg_array_ndim(a.c))
	var buf [16]int32
	dims := buf[:]
	if n > len(buf) {
		dims = make([]int32, n)
	}
	if n > 0 {
		C.mlxg_array_shape(a.c, (*C.int32_t)(unsafe.Pointer(&dims[0])))
	}
	out := make([]int, n)
	for i := range out {
		out[i] = int(dims[i])
	}
	return out
}

// Dim is the size of axis i (negative counts from the end); 0 when out of range.
func (a *Array) Dim(i int) int {
	sh := a.Shape()
	if i < 0 {
		i += len(sh)
	}
	if i < 0 || i >= len(sh) {
		return 0
	}
	return sh[i]
}

// Dtype is the element type; an invalid Dtype for an invalid array.
func (a *Array) Dtype() Dtype {
	if !a.valid() {
		return numDtypes
	}
	return Dtype(C.mlxg_array_dtype(a.c))
}

// primitiveName is the name of the primitive that computes a, "" for one
// with none; the tests use it to see which kernel an op was given.
func (a *Array) primitiveName() string {
	if !a.valid() {
		return ""
	}
	return C.GoString(C.mlxg_array_primitive(a.c))
}

// Size is the number of elements.
func (a *Array) Size() int {
	if !a.valid() {
		return 0
	}
	return int(C.mlxg_array_size(a.c))
}

// Nbytes is the size of the array's data in bytes.
func (a *Array) Nbytes() int {
	if !a.valid() {
		return 0
	}
	return int(C.mlxg_array_nbytes(a.c))
}

func (a *Array) String() string {
	if !a.valid() {
		return "array(invalid)"
	}
	return fmt.Sprintf("array(%v, %s)", a.Shape(), a.Dtype())
}

// readErr is the error of reading an invalid array: its graph's, when it has one.
func (a *Array) readErr() error {
	if a != nil && a.g != nil && a.g.err != nil {
		return a.g.err
	}
	return errInvalid
}

// readInto evaluates a and copies its data, row-major, into dst.
func (a *Array) readInto(dst unsafe.Pointer, nbytes int) error {
	if !a.valid() {
		return a.readErr()
	}
	s := a.s
	if s == nil {
		s = DefaultStream()
	}
	unlock := s.lock()
	var msg *C.char
	rc := C.mlxg_array_read(a.c, dst, C.size_t(nbytes), s.c, &msg)
	unlock()
	if rc != 0 {
		return takeErr("read", msg)
	}
	return nil
}

// Element is a Go type that maps to one MLX dtype.
type Element interface {
	bool | uint8 | uint16 | uint32 | uint64 | int8 | int16 | int32 | int64 | float32 | float64
}

// DtypeOf is the dtype MLX stores T as. uint16 is uint16: float16 and
// bfloat16 data travel as their bits through NewArrayBits and Bits.
func DtypeOf[T Element]() Dtype {
	var z T
	switch any(z).(type) {
	case bool:
		return Bool
	case uint8:
		return Uint8
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case float32:
		return Float32
	case float64:
		return Float64
	}
	panic("unreachable")
}

// ToSlice evaluates a and returns its elements, row-major. T must match a's
// dtype exactly (see Float32s for a converting read).
func ToSlice[T Element](a *Array) ([]T, error) {
	if !a.valid() {
		return nil, a.readErr()
	}
	want := DtypeOf[T]()
	if got := a.Dtype(); got != want {
		return nil, &Error{Op: "read", Msg: fmt.Sprintf("array is %s, not %s", got, want)}
	}
	out := make([]T, a.Size())
	if len(out) == 0 {
		return out, nil
	}
	return out, a.readInto(unsafe.Pointer(&out[0]), len(out)*want.Size())
}

// Float32s evaluates a and returns its elements as float32. Float16,
// bfloat16 and float64 arrays are converted; other dtypes must use ToSlice.
func (a *Array) Float32s() ([]float32, error) {
	if !a.valid() {
		return nil, a.readErr()
	}
	switch a.Dtype() {
	case Float32:
		return ToSlice[float32](a)
	case Float16, BFloat16:
		bits, err := a.Bits()
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(bits))
		if a.Dtype() == BFloat16 {
			for i, b := range bits {
				out[i] = BFloat16ToFloat32(b)
			}
		} else {
			for i, b := range bits {
				out[i] = Float16ToFloat32(b)
			}
		}
		return out, nil
	case Float64:
		f, err := ToSlice[float64](a)
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(f))
		for i, v := range f {
			out[i] = float32(v)
		}
		return out, nil
	}
	return nil, &Error{Op: "read", Msg: fmt.Sprintf("array is %s, not a float dtype", a.Dtype())}
}

// Int32s evaluates a and returns its elements; a must be int32.
func (a *Array) Int32s() ([]int32, error) { return ToSlice[int32](a) }

// Uint32s evaluates a and returns its elements; a must be uint32.
func (a *Array) Uint32s() ([]uint32, error) { return ToSlice[uint32](a) }

// Bits evaluates a float16 or bfloat16 array and returns its raw 16-bit elements.
func (a *Array) Bits() ([]uint16, error) {
	if !a.valid() {
		return nil, a.readErr()
	}
	if d := a.Dtype(); d != Float16 && d != BFloat16 && d != Uint16 {
		return nil, &Error{Op: "read", Msg: fmt.Sprintf("array is %s, not a 16-bit type", d)}
	}
	out := make([]uint16, a.Size())
	if len(out) == 0 {
		return out, nil
	}
	return out, a.readInto(unsafe.Pointer(&out[0]), len(out)*2)
}

// Bytes evaluates a and returns its raw data, row-major.
func (a *Array) Bytes() ([]byte, error) {
	if !a.valid() {
		return nil, a.readErr()
	}
	out := make([]byte, a.Nbytes())
	if len(out) == 0 {
		return out, nil
	}
	return out, a.readInto(unsafe.Pointer(&out[0]), len(out))
}

// Item evaluates a one-element array and returns its value as float64.
func (a *Array) Item() (float64, error) {
	if !a.valid() {
		return 0, a.readErr()
	}
	if n := a.Size(); n != 1 {
		return 0, &Error{Op: "item", Msg: fmt.Sprintf("array has %d elements, not 1", n)}
	}
	b, err := a.Bytes()
	if err != nil {
		return 0, err
	}
	p := unsafe.Pointer(&b[0])
	switch a.Dtype() {
	case Bool:
		if b[0] != 0 {
			return 1, nil
		}
		return 0, nil
	case Uint8:
		return float64(b[0]), nil
	case Uint16:
		return float64(*(*uint16)(p)), nil
	case Uint32:
		return float64(*(*uint32)(p)), nil
	case Uint64:
		return float64(*(*uint64)(p)), nil
	case Int8:
		return float64(*(*int8)(p)), nil
	case Int16:
		return float64(*(*int16)(p)), nil
	case Int32:
		return float64(*(*int32)(p)), nil
	case Int64:
		return float64(*(*int64)(p)), nil
	case Float16:
		return float64(Float16ToFloat32(*(*uint16)(p))), nil
	case BFloat16:
		return float64(BFloat16ToFloat32(*(*uint16)(p))), nil
	case Float32:
		return float64(*(*float32)(p)), nil
	case Float64:
		return *(*float64)(p), nil
	}
	return 0, &Error{Op: "item", Msg: "unsupported dtype " + a.Dtype().String()}
}

// NewArray copies data into a new array of the given shape, owned by the
// caller. len(data) must be the product of shape; no shape makes a scalar.
func NewArray[T Element](data []T, shape ...int) (*Array, error) {
	return newArray(unsafe.Pointer(unsafe.SliceData(data)), len(data), DtypeOf[T](), shape)
}

// NewArrayFill makes an array of dtype and shape whose bytes fill writes
// (all of them, in the array's row-major layout): a checkpoint's tensor
// read from its file straight into the array's memory. The array is freed
// and fill's error returned when it fails.
func NewArrayFill(dtype Dtype, shape []int, fill func(dst []byte) error) (*Array, error) {
	sh, err := shape32(shape)
	if err != nil {
		return nil, err
	}
	var c C.mlxg_array
	var data unsafe.Pointer
	var msg *C.char
	if C.mlxg_alloc_data(&c, &data, ptr32(sh), C.int(len(sh)), C.int(dtype), &msg) != 0 {
		return nil, takeErr("array", msg)
	}
	a := &Array{c: c}
	if n := a.Nbytes(); n > 0 {
		if data == nil {
			a.Free()
			return nil, &Error{Op: "array", Msg: fmt.Sprintf("no memory for %d bytes", n)}
		}
		if err := fill(unsafe.Slice((*byte)(data), n)); err != nil {
			a.Free()
			return nil, err
		}
	}
	return a, nil
}

// NewArrayBits copies raw 16-bit float16 or bfloat16 data into a new array.
func NewArrayBits(bits []uint16, dtype Dtype, shape ...int) (*Array, error) {
	if dtype != Float16 && dtype != BFloat16 && dtype != Uint16 {
		return nil, &Error{Op: "array", Msg: fmt.Sprintf("%s is not a 16-bit type", dtype)}
	}
	return newArray(unsafe.Pointer(unsafe.SliceData(bits)), len(bits), dtype, shape)
}

func newArray(p unsafe.Pointer, n int, dt Dtype, shape []int) (*Array, error) {
	sh, err := shape32(shape)
	if err != nil {
		return nil, err
	}
	want := 1
	for _, d := range shape {
		want *= d
	}
	if want != n {
		return nil, &Error{Op: "array", Msg: fmt.Sprintf("%d elements do not fill shape %v", n, shape)}
	}
	var c C.mlxg_array
	var msg *C.char
	if C.mlxg_from_data(&c, p, ptr32(sh), C.int(len(sh)), C.int(dt), &msg) != 0 {
		return nil, takeErr("array", msg)
	}
	return &Array{c: c}, nil
}

// shape32 checks and converts a shape for the C side.
func shape32(shape []int) ([]int32, error) {
	sh := make([]int32, len(shape))
	for i, d := range shape {
		if d < 0 || d > math.MaxInt32 {
			return nil, &Error{Op: "array", Msg: fmt.Sprintf("bad dimension %d in shape %v", d, shape)}
		}
		sh[i] = int32(d)
	}
	return sh, nil
}

func ptr32(v []int32) *C.int32_t {
	if len(v) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&v[0]))
}

// Eval evaluates arrays that belong to no graph (or to several). Arrays of
// one graph are better evaluated with that graph's Eval, which also reports
// its recorded error.
func Eval(arrays ...*Array) error {
	hs := make([]C.mlxg_array, 0, len(arrays))
	var s *Stream
	for _, a := range arrays {
		if !a.valid() {
			return a.readErr()
		}
		if s == nil {
			s = a.s
		}
		hs = append(hs, a.c)
	}
	if len(hs) == 0 {
		return nil
	}
	if s == nil {
		s = DefaultStream()
	}
	unlock := s.lock()
	defer unlock()
	var msg *C.char
	if C.mlxg_eval(&hs[0], C.int(len(hs)), s.c, &msg) != 0 {
		return takeErr("eval", msg)
	}
	return nil
}

// Float16ToFloat32 widens IEEE half-precision bits.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// Subnormal: normalize.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// BFloat16ToFloat32 widens bfloat16 bits.
func BFloat16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBFloat16 rounds to the nearest bfloat16, ties to even, as MLX does.
func Float32ToBFloat16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40 // quiet NaN
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}
