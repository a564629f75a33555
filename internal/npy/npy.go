// Package npy reads and writes numpy's .npy format (version 1.0 and 2.0
// headers, little-endian, C order) for the dtypes archgen exchanges with
// Python: float32, float64, int32, int64, uint32, uint8 and bool.
package npy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Array is an n-dimensional array read from or written to .npy. Data holds
// the elements in C order as one of []float32, []float64, []int32, []int64,
// []uint32, []uint8 or []bool.
type Array struct {
	Shape []int
	Data  any
}

var descrs = map[string]string{
	"<f4": "float32", "<f8": "float64", "<i4": "int32", "<i8": "int64",
	"<u4": "uint32", "|u1": "uint8", "|b1": "bool",
}

func descrOf(data any) (string, int, error) {
	switch d := data.(type) {
	case []float32:
		return "<f4", len(d), nil
	case []float64:
		return "<f8", len(d), nil
	case []int32:
		return "<i4", len(d), nil
	case []int64:
		return "<i8", len(d), nil
	case []uint32:
		return "<u4", len(d), nil
	case []uint8:
		return "|u1", len(d), nil
	case []bool:
		return "|b1", len(d), nil
	}
	return "", 0, fmt.Errorf("npy: unsupported data type %T", data)
}

// Write writes a as .npy to w.
func Write(w io.Writer, a Array) error {
	descr, n, err := descrOf(a.Data)
	if err != nil {
		return err
	}
	want := 1
	for _, d := range a.Shape {
		want *= d
	}
	if want != n {
		return fmt.Errorf("npy: %d elements do not fill shape %v", n, a.Shape)
	}
	dims := make([]string, len(a.Shape))
	for i, d := range a.Shape {
		dims[i] = strconv.Itoa(d)
	}
	shape := strings.Join(dims, ", ")
	if len(a.Shape) == 1 {
		shape += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape)
	// Magic, version 1.0, header length; the header is padded with spaces
	// and ends in a newline so the data starts on a 64-byte boundary.
	pad := 64 - (10+len(header)+1)%64
	if pad == 64 {
		pad = 0
	}
	header += strings.Repeat(" ", pad) + "\n"
	var buf bytes.Buffer
	buf.WriteString("\x93NUMPY\x01\x00")
	if err := binary.Write(&buf, binary.LittleEndian, uint16(len(header))); err != nil {
		return err
	}
	buf.WriteString(header)
	if _, err := w.Write(buf.Bytes()); err != nil {
		return err
	}
	if b, ok := a.Data.([]bool); ok {
		bs := make([]byte, len(b))
		for i, v := range b {
			if v {
				bs[i] = 1
			}
		}
		_, err := w.Write(bs)
		return err
	}
	return binary.Write(w, binary.LittleEndian, a.Data)
}

// WriteFile writes a to path.
func WriteFile(path string, a Array) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, a); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

var (
	reDescr = regexp.MustCompile(`'descr':\s*'([^']+)'`)
	reOrder = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	reShape = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// Read reads one .npy array from r.
func Read(r io.Reader) (Array, error) {
	var magic [8]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return Array{}, fmt.Errorf("npy: reading magic: %w", err)
	}
	if string(magic[:6]) != "\x93NUMPY" {
		return Array{}, fmt.Errorf("npy: not a .npy file")
	}
	var hlen int
	switch magic[6] {
	case 1:
		var n uint16
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return Array{}, err
		}
		hlen = int(n)
	case 2, 3:
		var n uint32
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return Array{}, err
		}
		if n > 1<<24 {
			return Array{}, fmt.Errorf("npy: header length %d too large", n)
		}
		hlen = int(n)
	default:
		return Array{}, fmt.Errorf("npy: unsupported version %d", magic[6])
	}
	h := make([]byte, hlen)
	if _, err := io.ReadFull(r, h); err != nil {
		return Array{}, fmt.Errorf("npy: reading header: %w", err)
	}
	header := string(h)
	md := reDescr.FindStringSubmatch(header)
	mo := reOrder.FindStringSubmatch(header)
	ms := reShape.FindStringSubmatch(header)
	if md == nil || mo == nil || ms == nil {
		return Array{}, fmt.Errorf("npy: malformed header %q", header)
	}
	if mo[1] == "True" {
		return Array{}, fmt.Errorf("npy: fortran order is not supported")
	}
	kind, ok := descrs[md[1]]
	if !ok {
		return Array{}, fmt.Errorf("npy: unsupported dtype %q", md[1])
	}
	var shape []int
	n := 1
	for _, f := range strings.Split(ms[1], ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return Array{}, fmt.Errorf("npy: bad shape %q", ms[1])
		}
		shape = append(shape, d)
		if d > 0 && n > math.MaxInt32/d {
			return Array{}, fmt.Errorf("npy: shape %v too large", shape)
		}
		n *= d
	}
	var data any
	switch kind {
	case "float32":
		data = make([]float32, n)
	case "float64":
		data = make([]float64, n)
	case "int32":
		data = make([]int32, n)
	case "int64":
		data = make([]int64, n)
	case "uint32":
		data = make([]uint32, n)
	case "uint8":
		data = make([]uint8, n)
	case "bool":
		bs := make([]byte, n)
		if _, err := io.ReadFull(r, bs); err != nil {
			return Array{}, fmt.Errorf("npy: reading data: %w", err)
		}
		b := make([]bool, n)
		for i, v := range bs {
			b[i] = v != 0
		}
		return Array{Shape: shape, Data: b}, nil
	}
	if err := binary.Read(r, binary.LittleEndian, data); err != nil {
		return Array{}, fmt.Errorf("npy: reading data: %w", err)
	}
	return Array{Shape: shape, Data: data}, nil
}

// ReadFile reads the .npy file at path.
func ReadFile(path string) (Array, error) {
	f, err := os.Open(path)
	if err != nil {
		return Array{}, err
	}
	defer f.Close()
	a, err := Read(f)
	if err != nil {
		return Array{}, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}
