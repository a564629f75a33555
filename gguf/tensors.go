package gguf

import (
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/archgen/archgen/runtime/mlx"
)

// tensor is one tensor as Read holds it: a float array in Hugging Face's
// shape; rows of llama.cpp's blocks (uint8 [rows, row bytes]) with the
// block format; or MLX's affine form (packed weights, scales and biases, at
// bits, in groups of 32).
type tensor struct {
	array          *mlx.Array
	block          *mlx.BlockFormat
	scales, biases *mlx.Array
	bits           int
}

func (t tensor) free() {
	for _, a := range []*mlx.Array{t.array, t.scales, t.biases} {
		if a != nil {
			a.Free()
		}
	}
}

// layout is how a tensor entry lies in the file: the array Read makes of
// it (dtype and shape) and its bytes, checked against the file's size.
func layout(h *Header, t TensorInfo) (mlx.Dtype, []int, *mlx.BlockFormat, int64, error) {
	shape := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[len(t.Dims)-1-i] = int(d)
	}
	elems := int64(1)
	for _, d := range shape {
		elems *= int64(d)
	}
	// No type takes less than 2 bits a value: a tensor of more values than
	// four times the file's bytes cannot be in it (and its byte count
	// could overflow).
	if elems > 4*h.Size {
		return 0, nil, nil, 0, fmt.Errorf("tensor %s: %d values cannot fit in a file of %d bytes (truncated?)", t.Name, elems, h.Size)
	}
	var dt mlx.Dtype
	var f *mlx.BlockFormat
	var n int64
	switch t.Type {
	case typeF32:
		dt, n = mlx.Float32, elems*4
	case typeF16:
		dt, n = mlx.Float16, elems*2
	case typeBF16:
		dt, n = mlx.BFloat16, elems*2
	default:
		bf, ok := mlx.BlockFormatOfCode(int(t.Type))
		if !ok {
			return 0, nil, nil, 0, fmt.Errorf("tensor %s is stored as %s, which archgen cannot read (readable: %s)", t.Name, t.Type, readableNames())
		}
		if len(shape) != 2 && len(shape) != 3 {
			return 0, nil, nil, 0, fmt.Errorf("tensor %s is stored as %s, which archgen reads for matrices and stacks of them (experts' weights) only", t.Name, bf.Name)
		}
		k := shape[len(shape)-1]
		if k == 0 || k%bf.Values != 0 {
			return 0, nil, nil, 0, fmt.Errorf("tensor %s: rows of %d values are not whole %s blocks of %d", t.Name, k, bf.Name, bf.Values)
		}
		f = &bf
		dt = mlx.Uint8
		shape[len(shape)-1] = bf.RowBytes(k)
		n = elems / int64(k) * int64(shape[len(shape)-1])
	}
	if int64(t.Offset) > h.Size || n > h.Size-h.DataOffset-int64(t.Offset) {
		return 0, nil, nil, 0, fmt.Errorf("tensor %s: its %d bytes at offset %d run past the end of the file (truncated?)", t.Name, n, t.Offset)
	}
	return dt, shape, f, n, nil
}

// readTensors reads every tensor of the file at path: float types as
// arrays, block types as their rows of blocks, straight from the file into
// each array's memory. Every entry is checked (type, rows, bounds) before
// any data is read.
func readTensors(path string, h *Header) (map[string]tensor, error) {
	type plan struct {
		info  TensorInfo
		dt    mlx.Dtype
		shape []int
		block *mlx.BlockFormat
	}
	var plans []plan
	seen := map[string]bool{}
	for _, t := range h.Tensors {
		if seen[t.Name] {
			return nil, fmt.Errorf("%s: tensor %s appears twice", path, t.Name)
		}
		seen[t.Name] = true
		dt, shape, f, _, err := layout(h, t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		plans = append(plans, plan{t, dt, shape, f})
	}
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	out := map[string]tensor{}
	free := func() {
		for _, t := range out {
			t.free()
		}
	}
	for _, p := range plans {
		off := h.DataOffset + int64(p.info.Offset)
		if spec, ok := affineTypes[p.info.Type]; ok {
			t, ok, err := readAffine(file, path, p.info, off, p.shape, spec.bits)
			if err != nil {
				free()
				return nil, err
			}
			if ok {
				out[p.info.Name] = t
				continue
			}
		}
		a, err := mlx.NewArrayFill(p.dt, slices.Clone(p.shape), func(dst []byte) error {
			if _, err := file.ReadAt(dst, off); err != nil {
				return fmt.Errorf("%s: tensor %s: reading %d bytes at %d: %w", path, p.info.Name, len(dst), off, err)
			}
			return nil
		})
		if err != nil {
			free()
			return nil, err
		}
		out[p.info.Name] = tensor{array: a, block: p.block}
	}
	return out, nil
}

// readAffine reads a Q4_0, Q4_1 or Q8_0 matrix or stack of matrices
// (shape: [..., rows, its blocks' bytes]) in MLX's affine form; false (and
// nothing read into arrays) when a block's bias does not fit float16.
func readAffine(file *os.File, path string, info TensorInfo, off int64, shape []int, bits int) (tensor, bool, error) {
	rows := 1
	for _, d := range shape[:len(shape)-1] {
		rows *= d
	}
	raw := make([]byte, rows*shape[len(shape)-1])
	if _, err := file.ReadAt(raw, off); err != nil {
		return tensor{}, false, fmt.Errorf("%s: tensor %s: reading %d bytes at %d: %w", path, info.Name, len(raw), off, err)
	}
	f, ok := toAffine(info.Type, raw)
	if !ok {
		return tensor{}, false, nil
	}
	k := int(info.Dims[0])
	lead := shape[:len(shape)-1]
	w, err := mlx.NewArray(f.weight, append(slices.Clone(lead), k*bits/32)...)
	if err != nil {
		return tensor{}, false, err
	}
	sc, err := mlx.NewArrayBits(f.scales, mlx.Float16, append(slices.Clone(lead), k/32)...)
	if err != nil {
		w.Free()
		return tensor{}, false, err
	}
	bi, err := mlx.NewArrayBits(f.biases, mlx.Float16, append(slices.Clone(lead), k/32)...)
	if err != nil {
		w.Free()
		sc.Free()
		return tensor{}, false, err
	}
	return tensor{array: w, scales: sc, biases: bi, bits: bits}, true, nil
}

// Q4_0, Q4_1 and Q8_0 are MLX's affine quantization in groups of 32
// exactly: value = scale q + bias with an unsigned q, scale the block's d,
// and bias its m (Q4_1) or -8 d (Q4_0) or -128 d (Q8_0, whose signed q
// then moves up by 128), each exact in float16. They load in that form,
// which archgen's tuned affine kernels run (the AVX-512 integer path among
// them); Q4_1 takes the file's bytes, Q4_0 and Q8_0 two more bytes a block
// (a bias beside the scale). A block whose bias float16 cannot hold
// exactly (an overflow) keeps the file's own layout.
var affineTypes = map[Type]struct {
	bits  int
	bytes int // per block of 32
}{2: {4, 18}, 3: {4, 20}, 8: {8, 34}}

// affineForm is a tensor of Q4_0, Q4_1 or Q8_0 in MLX's affine form.
type affineForm struct {
	weight []uint32 // [rows, 32 * bits / 32 words per block]
	scales []uint16 // float16 [rows, blocks]
	biases []uint16
}

// toAffine transcodes blocks (raw, of type t) into MLX's affine form;
// false when a bias does not fit float16 exactly.
func toAffine(t Type, raw []byte) (affineForm, bool) {
	spec := affineTypes[t]
	n := len(raw) / spec.bytes
	f := affineForm{
		weight: make([]uint32, n*spec.bits),
		scales: make([]uint16, n),
		biases: make([]uint16, n),
	}
	for b := 0; b < n; b++ {
		blk := raw[b*spec.bytes : (b+1)*spec.bytes]
		d := uint16(blk[0]) | uint16(blk[1])<<8
		f.scales[b] = d
		w := f.weight[b*spec.bits : (b+1)*spec.bits]
		switch t {
		case 2, 3:
			qs := blk[2:]
			if t == 3 {
				f.biases[b] = uint16(blk[2]) | uint16(blk[3])<<8
				qs = blk[4:]
			} else {
				bias, ok := halfBits(-8 * mlx.Float16ToFloat32(d))
				if !ok {
					return f, false
				}
				f.biases[b] = bias
			}
			// value i is the low nibble of byte i (i < 16) or the high
			// nibble of byte i - 16; MLX packs value k at bits 4 (k % 8) of
			// word k / 8
			for k := 0; k < 32; k++ {
				v := uint32(qs[k%16] & 0x0F)
				if k >= 16 {
					v = uint32(qs[k-16] >> 4)
				}
				w[k/8] |= v << (4 * (k % 8))
			}
		case 8:
			bias, ok := halfBits(-128 * mlx.Float16ToFloat32(d))
			if !ok {
				return f, false
			}
			f.biases[b] = bias
			for k := 0; k < 32; k++ {
				w[k/4] |= uint32(blk[2+k]^0x80) << (8 * (k % 4))
			}
		}
	}
	return f, true
}

// halfBits is v as float16 bits, when float16 holds it exactly.
func halfBits(v float32) (uint16, bool) {
	bits := math.Float32bits(v)
	sign := uint16(bits>>16) & 0x8000
	a := math.Abs(float64(v))
	switch {
	case a == 0:
		return sign, true
	case math.IsInf(a, 0) || math.IsNaN(a):
		return 0, false
	case a < 1.0/16384: // below float16's normals: a multiple of 2^-24
		m := a * (1 << 24)
		if m != math.Trunc(m) || m >= 1024 {
			return 0, false
		}
		return sign | uint16(m), true
	}
	frac, exp := math.Frexp(a) // a = frac 2^exp, frac in [0.5, 1)
	e := exp - 1 + 15
	m := (2*frac - 1) * 1024
	if e > 30 || m != math.Trunc(m) {
		return 0, false
	}
	return sign | uint16(e)<<10 | uint16(m), true
}
