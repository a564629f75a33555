package mlx

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"unsafe"
)

// TensorInfo is one tensor's entry in a safetensors header.
type TensorInfo struct {
	Name  string
	Dtype Dtype
	Shape []int
	Begin int64 // byte offsets within the data section
	End   int64
}

// SafetensorsHeader is a checked safetensors header.
type SafetensorsHeader struct {
	Tensors  []TensorInfo // sorted by name
	Metadata map[string]string
	DataSize int64 // bytes of the data section the file holds
}

// maxHeader bounds the JSON header; real files stay far below it.
const maxHeader = 100 << 20

// ReadSafetensorsHeader reads and checks the header of a safetensors file:
// the length prefix against the file size, the JSON, every dtype and shape,
// and that each tensor's bytes lie inside the file and match its shape.
// Errors name the file and, where there is one, the tensor.
func ReadSafetensorsHeader(path string) (*SafetensorsHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return ParseSafetensorsHeader(f, st.Size(), path)
}

// ParseSafetensorsHeader is ReadSafetensorsHeader for any reader of a file
// of the given size; name is used in errors.
func ParseSafetensorsHeader(r io.Reader, size int64, name string) (*SafetensorsHeader, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: not a valid safetensors file: %s", name, fmt.Sprintf(format, args...))
	}
	var lenbuf [8]byte
	if size < 8 {
		return nil, bad("%d bytes, shorter than the 8-byte header length", size)
	}
	if _, err := io.ReadFull(r, lenbuf[:]); err != nil {
		return nil, bad("reading the header length: %v", err)
	}
	var n uint64
	for i := 7; i >= 0; i-- {
		n = n<<8 | uint64(lenbuf[i])
	}
	if n > uint64(size-8) {
		if string(lenbuf[:]) == "version " {
			return nil, bad("it starts with %q, as a Git LFS pointer file does: the tensors were not downloaded (git lfs pull)", "version ")
		}
		return nil, bad("header length %d exceeds the file's %d remaining bytes (truncated, or not safetensors)", n, size-8)
	}
	if n > maxHeader {
		return nil, bad("header length %d exceeds the %d-byte limit", n, maxHeader)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, bad("reading the %d-byte header: %v", n, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, bad("header is not a JSON object: %v", err)
	}
	out := &SafetensorsHeader{DataSize: size - 8 - int64(n)}
	for key, val := range raw {
		if key == "__metadata__" {
			if err := json.Unmarshal(val, &out.Metadata); err != nil {
				return nil, bad("__metadata__ is not an object of strings: %v", err)
			}
			continue
		}
		var t struct {
			Dtype   *string  `json:"dtype"`
			Shape   *[]int64 `json:"shape"`
			Offsets *[]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(val, &t); err != nil {
			return nil, bad("tensor %q: %v", key, err)
		}
		if t.Dtype == nil || t.Shape == nil || t.Offsets == nil {
			return nil, bad("tensor %q: needs dtype, shape and data_offsets", key)
		}
		dt, err := ParseDtype(*t.Dtype)
		if err != nil || dt == Complex64 {
			return nil, bad("tensor %q: unsupported dtype %q", key, *t.Dtype)
		}
		elems := int64(1)
		shape := make([]int, len(*t.Shape))
		for i, d := range *t.Shape {
			if d < 0 || d > math.MaxInt32 {
				return nil, bad("tensor %q: bad dimension %d", key, d)
			}
			shape[i] = int(d)
			if d != 0 && elems > math.MaxInt64/d/8 {
				return nil, bad("tensor %q: shape %v is too large", key, *t.Shape)
			}
			elems *= d
		}
		if len(*t.Offsets) != 2 {
			return nil, bad("tensor %q: data_offsets must be [begin, end]", key)
		}
		b, e := (*t.Offsets)[0], (*t.Offsets)[1]
		if b < 0 || e < b {
			return nil, bad("tensor %q: data_offsets [%d, %d] are out of order", key, b, e)
		}
		if e > out.DataSize {
			return nil, bad("tensor %q: data ends at byte %d, past the %d bytes of data the file holds (truncated?)", key, e, out.DataSize)
		}
		if want := elems * int64(dt.Size()); e-b != want {
			return nil, bad("tensor %q: %d bytes for shape %v of %s, which needs %d", key, e-b, shape, dt, want)
		}
		out.Tensors = append(out.Tensors, TensorInfo{Name: key, Dtype: dt, Shape: shape, Begin: b, End: e})
	}
	sort.Slice(out.Tensors, func(i, j int) bool { return out.Tensors[i].Name < out.Tensors[j].Name })
	return out, nil
}

// LoadSafetensors checks a safetensors file's header, then opens it lazily
// on stream s: each array reads its bytes when first evaluated. The arrays
// belong to the caller.
func LoadSafetensors(path string, s *Stream) (map[string]*Array, map[string]string, error) {
	if _, err := ReadSafetensorsHeader(path); err != nil {
		return nil, nil, err
	}
	if s == nil {
		s = DefaultStream()
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var am, mm C.mlxg_map
	var msg *C.char
	if C.mlxg_load_safetensors(&am, &mm, cpath, s.c, &msg) != 0 {
		return nil, nil, fmt.Errorf("%s: %w", path, takeErr("load_safetensors", msg))
	}
	defer C.mlxg_map_free(am)
	defer C.mlxg_map_free(mm)
	arrays := mapArrays(am, s)
	meta := map[string]string{}
	for i := 0; i < int(C.mlxg_map_size(mm)); i++ {
		meta[C.GoString(C.mlxg_map_key(mm, C.int(i)))] = C.GoString(C.mlxg_map_string(mm, C.int(i)))
	}
	return arrays, meta, nil
}

func mapArrays(m C.mlxg_map, s *Stream) map[string]*Array {
	out := map[string]*Array{}
	for i := 0; i < int(C.mlxg_map_size(m)); i++ {
		if C.mlxg_map_kind(m, C.int(i)) != 0 {
			continue
		}
		out[C.GoString(C.mlxg_map_key(m, C.int(i)))] = &Array{c: C.mlxg_map_array(m, C.int(i)), s: s}
	}
	return out
}

// SaveSafetensors writes arrays (evaluating them) and metadata to path.
func SaveSafetensors(path string, arrays map[string]*Array, meta map[string]string) error {
	names := make([]string, 0, len(arrays))
	for k := range arrays {
		names = append(names, k)
	}
	sort.Strings(names)
	cnames := make([]*C.char, len(names))
	hs := make([]C.mlxg_array, len(names))
	for i, n := range names {
		a := arrays[n]
		if !a.valid() {
			return fmt.Errorf("%s: tensor %q: %w", path, n, a.readErr())
		}
		cnames[i] = C.CString(n)
		hs[i] = a.c
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ckeys := make([]*C.char, len(keys))
	cvals := make([]*C.char, len(keys))
	for i, k := range keys {
		ckeys[i] = C.CString(k)
		cvals[i] = C.CString(meta[k])
	}
	defer func() {
		for _, p := range cnames {
			C.free(unsafe.Pointer(p))
		}
		for i := range ckeys {
			C.free(unsafe.Pointer(ckeys[i]))
			C.free(unsafe.Pointer(cvals[i]))
		}
	}()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	// C arrays of C pointers: the lists themselves live in C memory, as cgo
	// forbids Go memory holding pointers to be passed.
	cn := cPtrs(cnames)
	ck := cPtrs(ckeys)
	cv := cPtrs(cvals)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(ck))
	defer C.free(unsafe.Pointer(cv))
	var hp *C.mlxg_array
	if len(hs) > 0 {
		hp = &hs[0]
	}
	s := DefaultStream()
	for _, a := range arrays {
		if a.s != nil {
			s = a.s
			break
		}
	}
	unlock := s.lock()
	defer unlock()
	var msg *C.char
	if C.mlxg_save_safetensors(cpath, cn, hp, C.int(len(hs)), ck, cv, C.int(len(keys)), s.c, &msg) != 0 {
		return fmt.Errorf("%s: %w", path, takeErr("save_safetensors", msg))
	}
	return nil
}

func cPtrs(ps []*C.char) **C.char {
	n := max(len(ps), 1)
	out := (**C.char)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(uintptr(0)))))
	copy(unsafe.Slice(out, n), ps)
	return out
}

// GGUFValue is one metadata value of a GGUF file: an array (numbers and
// number lists arrive as arrays), a string, or a list of strings.
type GGUFValue struct {
	Array   *Array
	String  string
	Strings []string
	Kind    GGUFKind
}

// GGUFKind tells which field of a GGUFValue holds the value.
type GGUFKind int

const (
	GGUFArray GGUFKind = iota
	GGUFString
	GGUFStrings
	GGUFNone
)

// LoadGGUF loads a GGUF file's tensors (Q4_0, Q4_1 and Q8_0 arrive as MLX
// quantized triples: name.weight, name.scales, name.biases) and metadata on
// stream s. The arrays, metadata arrays included, belong to the caller.
func LoadGGUF(path string, s *Stream) (map[string]*Array, map[string]GGUFValue, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil, err
	}
	if s == nil {
		s = DefaultStream()
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var am, mm C.mlxg_map
	var msg *C.char
	unlock := s.lock()
	rc := C.mlxg_load_gguf(&am, &mm, cpath, s.c, &msg)
	unlock()
	if rc != 0 {
		return nil, nil, fmt.Errorf("%s: %w", path, takeErr("load_gguf", msg))
	}
	defer C.mlxg_map_free(am)
	defer C.mlxg_map_free(mm)
	arrays := mapArrays(am, s)
	meta := map[string]GGUFValue{}
	for i := 0; i < int(C.mlxg_map_size(mm)); i++ {
		ci := C.int(i)
		key := C.GoString(C.mlxg_map_key(mm, ci))
		v := GGUFValue{Kind: GGUFKind(C.mlxg_map_kind(mm, ci))}
		switch v.Kind {
		case GGUFArray:
			v.Array = &Array{c: C.mlxg_map_array(mm, ci), s: s}
		case GGUFString:
			v.String = C.GoString(C.mlxg_map_string(mm, ci))
		case GGUFStrings:
			n := int(C.mlxg_map_list_len(mm, ci))
			v.Strings = make([]string, n)
			for j := range v.Strings {
				v.Strings[j] = C.GoString(C.mlxg_map_list_item(mm, ci, C.int(j)))
			}
		}
		meta[key] = v
	}
	return arrays, meta, nil
}
