package mlx

/*
#cgo CXXFLAGS: -std=c++20 -O2 -I${SRCDIR}/../../.deps/mlx/mlx/include
#cgo LDFLAGS: -L${SRCDIR}/../../.deps/mlx/mlx/lib -lmlx -Wl,-rpath,${SRCDIR}/../../.deps/mlx/mlx/lib -lstdc++
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Version is the libmlx version this binding was built against, as MLX
// reports it ("0.32.4").
func Version() string { return C.GoString(C.mlxg_version()) }

// Error is a failure reported by MLX (or by this package's checks of an op's
// arguments): the op and the message, MLX's own where it came from MLX.
type Error struct {
	Op  string
	Msg string
}

func (e *Error) Error() string { return "mlx: " + e.Op + ": " + e.Msg }

// takeErr turns a message the shim allocated into an *Error and frees it.
func takeErr(op string, msg *C.char) error {
	s := "failed without a message"
	if msg != nil {
		s = C.GoString(msg)
		C.mlxg_string_free(msg)
	}
	return &Error{Op: op, Msg: s}
}

// Dtype is an array's element type.
type Dtype uint8

const (
	Bool Dtype = iota
	Uint8
	Uint16
	Uint32
	Uint64
	Int8
	Int16
	Int32
	Int64
	Float16
	Float32
	Float64
	BFloat16
	Complex64
	numDtypes
)

var dtypeNames = [...]string{"bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16",
	"int32", "int64", "float16", "float32", "float64", "bfloat16", "complex64"}

var dtypeSizes = [...]int{1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 2, 8}

func (d Dtype) String() string {
	if d < numDtypes {
		return dtypeNames[d]
	}
	return fmt.Sprintf("Dtype(%d)", uint8(d))
}

// Size is the number of bytes of one element.
func (d Dtype) Size() int {
	if d < numDtypes {
		return dtypeSizes[d]
	}
	return 0
}

// Valid reports whether d names one of MLX's dtypes.
func (d Dtype) Valid() bool { return d < numDtypes }

// IsFloat reports whether d is a real floating-point type.
func (d Dtype) IsFloat() bool {
	return d == Float16 || d == Float32 || d == Float64 || d == BFloat16
}

// ParseDtype reads a dtype's name as MLX, numpy and safetensors spell it
// ("float32", "bfloat16", "BF16", "F32", ...).
func ParseDtype(name string) (Dtype, error) {
	switch name {
	case "BOOL":
		return Bool, nil
	case "U8":
		return Uint8, nil
	case "F8_E4M3":
		return Uint8, nil // FP8 codes, held as uint8 as libmlx loads them (Graph.FromFP8 reads them)
	case "U16":
		return Uint16, nil
	case "U32":
		return Uint32, nil
	case "U64":
		return Uint64, nil
	case "I8":
		return Int8, nil
	case "I16":
		return Int16, nil
	case "I32":
		return Int32, nil
	case "I64":
		return Int64, nil
	case "F16", "half":
		return Float16, nil
	case "F32", "float":
		return Float32, nil
	case "F64", "double":
		return Float64, nil
	case "BF16":
		return BFloat16, nil
	}
	for i, n := range dtypeNames {
		if n == name {
			return Dtype(i), nil
		}
	}
	return 0, fmt.Errorf("mlx: unknown dtype %q", name)
}

// DeviceType is the kind of device a stream runs on.
type DeviceType uint8

const (
	CPU DeviceType = iota
	GPU
)

func (t DeviceType) String() string {
	if t == GPU {
		return "gpu"
	}
	return "cpu"
}

// Device names one device of the installed libmlx.
type Device struct {
	Type  DeviceType
	Index int
}

func (d Device) String() string { return fmt.Sprintf("%s:%d", d.Type, d.Index) }

// DeviceCount is how many devices of type t the installed libmlx can use:
// at least 1 for CPU; 0 for GPU on a CPU-only build.
func DeviceCount(t DeviceType) int { return int(C.mlxg_device_count(C.int(t))) }

// Stream is an MLX stream: the queue a graph's ops run on. Its evaluation is
// serialized, so any goroutine may use it.
type Stream struct {
	c   C.mlxg_stream
	dev Device
	mu  sync.Mutex
}

// streamsMu guards MLX's table of thread-independent streams: making a
// stream changes it, evaluating reads it.
var streamsMu sync.RWMutex

// NewStream makes a stream on device d. It fails when the installed libmlx
// has no such device.
func NewStream(d Device) (*Stream, error) {
	streamsMu.Lock()
	defer streamsMu.Unlock()
	var c C.mlxg_stream
	var msg *C.char
	if C.mlxg_stream_new(&c, C.int(d.Type), C.int(d.Index), &msg) != 0 {
		return nil, takeErr("new_stream", msg)
	}
	return &Stream{c: c, dev: d}, nil
}

var defaultStream struct {
	once sync.Once
	s    *Stream
	err  error
}

// DefaultStream is a CPU stream shared by the whole process.
func DefaultStream() *Stream {
	defaultStream.once.Do(func() {
		defaultStream.s, defaultStream.err = NewStream(Device{Type: CPU})
	})
	if defaultStream.err != nil {
		// libmlx without a CPU device cannot run anything this package does.
		panic(defaultStream.err)
	}
	return defaultStream.s
}

// Device is the device s runs on.
func (s *Stream) Device() Device { return s.dev }

func (s *Stream) String() string { return fmt.Sprintf("stream %d on %s", int(s.c.index), s.dev) }

// Synchronize waits until everything queued on s has run.
func (s *Stream) Synchronize() error {
	unlock := s.lock()
	defer unlock()
	var msg *C.char
	if C.mlxg_synchronize(s.c, &msg) != 0 {
		return takeErr("synchronize", msg)
	}
	return nil
}

// lock takes the stream for an evaluation and returns the unlock.
func (s *Stream) lock() func() {
	streamsMu.RLock()
	s.mu.Lock()
	stop := watch(s) // times evaluations that run collectives (dist.go)
	return func() {
		if stop != nil {
			stop()
		}
		s.mu.Unlock()
		streamsMu.RUnlock()
	}
}

// cstr is a C copy of s, freed by the caller.
func cstr(s string) *C.char { return C.CString(s) }

func cfree(p unsafe.Pointer) { C.free(p) }
