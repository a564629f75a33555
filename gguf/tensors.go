package gguf

import (
	"fmt"
	"os"
	"slices"

	"github.com/archgen/archgen/runtime/mlx"
)

// tensor is one tensor as Read holds it: a float array in Hugging Face's
// shape, or rows of llama.cpp's blocks (uint8 [rows, row bytes]) with the
// block format.
type tensor struct {
	array *mlx.Array
	block *mlx.BlockFormat
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
			t.array.Free()
		}
	}
	for _, p := range plans {
		off := h.DataOffset + int64(p.info.Offset)
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
