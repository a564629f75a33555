package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// Type is a GGML tensor type code, as a GGUF file's tensor entries hold it.
type Type uint32

// typeNames are llama.cpp's names of its tensor types.
var typeNames = map[Type]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
	10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K",
	16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S",
	22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
	29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4", 40: "NVFP4", 41: "Q1_0",
}

func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// Float types: F32, F16 and BF16, read as they are.
const (
	typeF32  Type = 0
	typeF16  Type = 1
	typeBF16 Type = 30
)

// readable are the types Read loads: the float types as they are, and
// llama.cpp's block-quantized types that archgen's kernels run in their
// own layout (mlx.BlockFormats).
var readable = func() []Type {
	out := []Type{typeF32, typeF16, typeBF16}
	for _, f := range mlx.BlockFormats() {
		out = append(out, Type(f.Code))
	}
	return out
}()

func isReadable(t Type) bool {
	for _, r := range readable {
		if r == t {
			return true
		}
	}
	return false
}

func readableNames() string {
	names := make([]string, len(readable))
	for i, t := range readable {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// TensorInfo is one tensor entry of a GGUF header.
type TensorInfo struct {
	Name   string
	Type   Type
	Dims   []uint64 // llama.cpp's order: the fastest-varying first
	Offset uint64   // within the data section
}

// Header is what a GGUF file says before its tensor data: the version, the
// tensor entries in file order, and the metadata keys, with the values of
// those that hold a single string (Strings) and of every key (Values).
type Header struct {
	Version uint32
	Keys    []string
	Strings map[string]string
	Values  map[string]Value
	Tensors []TensorInfo
	// DataOffset is where the tensor data begins (the header's end, rounded
	// up to general.alignment); Size is the file's size.
	DataOffset, Size int64
}

// ValueKind is the shape of a metadata value.
type ValueKind int

const (
	ValueNumber  ValueKind = iota // an integer, float or bool
	ValueString                   // a string
	ValueNumbers                  // an array of numbers
	ValueStrings                  // an array of strings
	ValueNested                   // an array of arrays (kept as its kind only)
)

// Value is one metadata value.
type Value struct {
	Kind ValueKind
	Num  float64 // ValueNumber (bools as 0 and 1)
	F32  bool    // ValueNumber stored as a float32
	Bool bool    // ValueNumber stored as a bool
	Str  string
	Nums []float64
	Strs []string
}

// ReadHeader reads and checks the header of the GGUF file at path. Errors
// name the file, and the key or tensor where there is one.
func ReadHeader(path string) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return ParseHeader(bufio.NewReaderSize(f, 1<<16), st.Size(), path)
}

// maxArrayDepth bounds arrays of arrays in metadata; real files nest none.
const maxArrayDepth = 8

// ParseHeader is ReadHeader for any reader of a file of the given size;
// name is used in errors. Every count and length is checked against the
// bytes the file has left before anything is allocated for it.
func ParseHeader(r io.Reader, size int64, name string) (*Header, error) {
	p := &headerReader{r: r, left: size, size: size}
	h, err := p.header()
	if err != nil {
		return nil, fmt.Errorf("%s: not a valid GGUF file: %w", name, err)
	}
	return h, nil
}

type headerReader struct {
	r    io.Reader
	size int64 // the file's size
	left int64 // bytes of the file not yet read
	buf  [8]byte
}

var errShort = errors.New("the file ends inside its header (truncated?)")

func (p *headerReader) bytes(n int) ([]byte, error) {
	if int64(n) > p.left {
		return nil, errShort
	}
	if _, err := io.ReadFull(p.r, p.buf[:n]); err != nil {
		return nil, errShort
	}
	p.left -= int64(n)
	return p.buf[:n], nil
}

func (p *headerReader) u32() (uint32, error) {
	b, err := p.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (p *headerReader) u64() (uint64, error) {
	b, err := p.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (p *headerReader) skip(n uint64) error {
	if n > uint64(p.left) {
		return errShort
	}
	if _, err := io.CopyN(io.Discard, p.r, int64(n)); err != nil {
		return errShort
	}
	p.left -= int64(n)
	return nil
}

func (p *headerReader) str() (string, error) {
	n, err := p.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(p.left) {
		return "", fmt.Errorf("a string of %d bytes is longer than the %d bytes left (truncated?)", n, p.left)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(p.r, b); err != nil {
		return "", errShort
	}
	p.left -= int64(n)
	return string(b), nil
}

// valueSizes are the byte sizes of GGUF's fixed-size metadata types.
var valueSizes = map[uint32]uint64{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

const (
	valueString = 8
	valueArray  = 9
)

// number reads one fixed-size metadata value of type t.
func (p *headerReader) number(t uint32) (float64, error) {
	b, err := p.bytes(int(valueSizes[t]))
	if err != nil {
		return 0, err
	}
	switch t {
	case 0, 7:
		return float64(b[0]), nil
	case 1:
		return float64(int8(b[0])), nil
	case 2:
		return float64(binary.LittleEndian.Uint16(b)), nil
	case 3:
		return float64(int16(binary.LittleEndian.Uint16(b))), nil
	case 4:
		return float64(binary.LittleEndian.Uint32(b)), nil
	case 5:
		return float64(int32(binary.LittleEndian.Uint32(b))), nil
	case 6:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), nil
	case 10:
		return float64(binary.LittleEndian.Uint64(b)), nil
	case 11:
		return float64(int64(binary.LittleEndian.Uint64(b))), nil
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
}

// value reads one metadata value of type t.
func (p *headerReader) value(t uint32, depth int) (Value, error) {
	if _, ok := valueSizes[t]; ok {
		f, err := p.number(t)
		return Value{Kind: ValueNumber, Num: f, F32: t == 6, Bool: t == 7}, err
	}
	switch t {
	case valueString:
		s, err := p.str()
		return Value{Kind: ValueString, Str: s}, err
	case valueArray:
		if depth >= maxArrayDepth {
			return Value{}, fmt.Errorf("arrays nested more than %d deep", maxArrayDepth)
		}
		et, err := p.u32()
		if err != nil {
			return Value{}, err
		}
		n, err := p.u64()
		if err != nil {
			return Value{}, err
		}
		if sz, ok := valueSizes[et]; ok {
			if sz != 0 && n > uint64(p.left)/sz {
				return Value{}, fmt.Errorf("an array of %d values is longer than the %d bytes left (truncated?)", n, p.left)
			}
			v := Value{Kind: ValueNumbers, Nums: make([]float64, n)}
			for i := range v.Nums {
				if v.Nums[i], err = p.number(et); err != nil {
					return Value{}, err
				}
			}
			return v, nil
		}
		if et != valueString && et != valueArray {
			return Value{}, fmt.Errorf("unknown array value type %d", et)
		}
		// Each string or array takes at least 8 bytes.
		if n > uint64(p.left)/8 {
			return Value{}, fmt.Errorf("an array of %d values is longer than the %d bytes left (truncated?)", n, p.left)
		}
		v := Value{Kind: ValueStrings}
		if et == valueArray {
			v.Kind = ValueNested
		}
		for i := uint64(0); i < n; i++ {
			e, err := p.value(et, depth+1)
			if err != nil {
				return Value{}, err
			}
			if et == valueString {
				v.Strs = append(v.Strs, e.Str)
			}
		}
		return v, nil
	}
	return Value{}, fmt.Errorf("unknown value type %d", t)
}

func (p *headerReader) header() (*Header, error) {
	magic, err := p.bytes(4)
	if err != nil {
		return nil, fmt.Errorf("%d bytes, shorter than the GGUF magic", p.left)
	}
	if string(magic) != "GGUF" {
		return nil, fmt.Errorf("starts with %q, not the GGUF magic", magic)
	}
	h := &Header{Strings: map[string]string{}, Values: map[string]Value{}, Size: p.size}
	if h.Version, err = p.u32(); err != nil {
		return nil, err
	}
	if h.Version != 2 && h.Version != 3 {
		return nil, fmt.Errorf("version %d is not supported (2 or 3)", h.Version)
	}
	nt, err := p.u64()
	if err != nil {
		return nil, err
	}
	nkv, err := p.u64()
	if err != nil {
		return nil, err
	}
	// A key-value pair takes at least 13 bytes, a tensor entry 24.
	if nkv > uint64(p.left)/13 || nt > uint64(p.left)/24 {
		return nil, fmt.Errorf("%d metadata keys and %d tensors do not fit in the %d bytes left (truncated?)", nkv, nt, p.left)
	}
	for i := uint64(0); i < nkv; i++ {
		key, err := p.str()
		if err != nil {
			return nil, fmt.Errorf("metadata key %d: %w", i, err)
		}
		t, err := p.u32()
		if err != nil {
			return nil, fmt.Errorf("metadata key %s: %w", key, err)
		}
		v, err := p.value(t, 0)
		if err != nil {
			return nil, fmt.Errorf("metadata key %s: %w", key, err)
		}
		h.Keys = append(h.Keys, key)
		h.Values[key] = v
		if v.Kind == ValueString {
			h.Strings[key] = v.Str
		}
	}
	for i := uint64(0); i < nt; i++ {
		var ti TensorInfo
		if ti.Name, err = p.str(); err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
		nd, err := p.u32()
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", ti.Name, err)
		}
		if nd == 0 || nd > 4 {
			return nil, fmt.Errorf("tensor %s: %d dimensions (want 1 to 4)", ti.Name, nd)
		}
		elems := uint64(1)
		for d := uint32(0); d < nd; d++ {
			n, err := p.u64()
			if err != nil {
				return nil, fmt.Errorf("tensor %s: %w", ti.Name, err)
			}
			if n > math.MaxInt32 || (n != 0 && elems > math.MaxInt64/n) {
				return nil, fmt.Errorf("tensor %s: dimension %d is too large", ti.Name, n)
			}
			elems *= n
			ti.Dims = append(ti.Dims, n)
		}
		t, err := p.u32()
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", ti.Name, err)
		}
		ti.Type = Type(t)
		if ti.Offset, err = p.u64(); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", ti.Name, err)
		}
		h.Tensors = append(h.Tensors, ti)
	}
	align := int64(32)
	if v, ok := h.Values["general.alignment"]; ok {
		if v.Kind != ValueNumber || v.Num < 1 || v.Num > 1<<20 || v.Num != math.Trunc(v.Num) {
			return nil, fmt.Errorf("metadata key general.alignment: %v is not an alignment", v.Num)
		}
		align = int64(v.Num)
	}
	end := h.Size - p.left
	h.DataOffset = (end + align - 1) / align * align
	return h, nil
}

// check refuses what Read cannot load, before any tensor data is read: an
// architecture without a mapping, a tensor type archgen does not run.
func (h *Header) check(path string, archs []nn.Arch) error {
	if name, ok := h.Strings["general.architecture"]; ok {
		if _, _, ok := find(archs, name, metadata{path: path, raw: h.Values}); !ok {
			// the name is read, but only from files holding what this one lacks
			var needs []string
			for _, a := range archs {
				if a.GGUF != nil && a.GGUF.Requires != "" && (a.GGUF.Arch == name || slices.Contains(a.GGUF.Aliases, name)) {
					k, _, _ := requirement(a.GGUF.Requires)
					held := "absent"
					if v, ok := h.Values[name+"."+k]; ok {
						switch v.Kind {
						case ValueNumber:
							held = strconv.FormatFloat(v.Num, 'g', -1, 64)
						default:
							held = "not a number"
						}
					}
					needs = append(needs, fmt.Sprintf("%s.%s (%s's; this file's: %s)", name, a.GGUF.Requires, a.Name, held))
				}
			}
			if len(needs) > 0 {
				return fmt.Errorf("%s: GGUF architecture %q is read only from files with %s", path, name, strings.Join(needs, " or "))
			}
			return fmt.Errorf("%s: GGUF architecture %q is not supported (supported: %v)", path, name, Supported(archs))
		}
	}
	for _, t := range h.Tensors {
		if !isReadable(t.Type) {
			return fmt.Errorf("%s: tensor %s is stored as %s, which archgen cannot read (readable: %s)",
				path, t.Name, t.Type, readableNames())
		}
	}
	return nil
}
