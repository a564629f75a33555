package nn

import (
	"fmt"
	"sort"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
)

// fp8Scale is the suffix of an FP8 weight's scale: W.weight_scale_inv
// beside W.weight, the layout of Hugging Face's FP8 checkpoints (Ministral
// 3's, one scale per tensor; DeepSeek-V3's, one per tile).
const fp8Scale = "_scale_inv"

// fp8Tile is the side of the square tiles a block-wise FP8 checkpoint
// scales (DeepSeek-V3's published layout: 128 x 128, the last ones in
// each row and column possibly partial).
const fp8Tile = 128

// dequantFP8 turns every FP8 weight of the checkpoint into floats at load:
// W.weight (F8_E4M3 codes, loaded as uint8) becomes from_fp8(W.weight)
// times W.weight_scale_inv, and the scale is consumed. The codes are read
// as FP8 values first: multiplying the raw uint8 codes by the scale would
// give other numbers. One scale for the tensor gives the scale's float
// dtype; a scale per 128 x 128 tile (a weight [m, n] beside a scale
// [ceil(m/128), ceil(n/128)], [1, 1] for a matrix of one tile) gives
// bfloat16, the products rounded once, as mlx-lm's DeepSeek-V3 sanitize
// makes them. A scale of another shape is
// refused, naming the tensor. In a group of processes each one dequantizes
// whole weights and keeps its slices of them.
func (l *loader) dequantFP8() error {
	var scales []string
	for name := range l.tensors {
		if strings.HasSuffix(name, ".weight"+fp8Scale) {
			scales = append(scales, name)
		}
	}
	if len(scales) == 0 {
		return nil
	}
	sort.Strings(scales)
	for _, sname := range scales {
		wname := strings.TrimSuffix(sname, fp8Scale)
		s, w := l.tensors[sname], l.tensors[wname]
		if w == nil {
			return fmt.Errorf("tensor %s: a scale without its weight %s", sname, wname)
		}
		if w.Dtype() != mlx.Uint8 {
			return fmt.Errorf("tensor %s: %s, want FP8 codes (F8_E4M3) beside its scale %s", wname, w.Dtype(), sname)
		}
		g := l.g
		var deq *mlx.Array
		switch {
		case !s.Dtype().IsFloat():
			return fmt.Errorf("tensor %s: %s, want a float scale", sname, s.Dtype())
		case s.Size() == 1 && s.Ndim() < 2:
			deq = g.Multiply(g.FromFP8(w, s.Dtype()), g.Reshape(s))
		default:
			ws := w.Shape()
			if len(ws) != 2 || s.Ndim() != 2 || s.Dim(0) != (ws[0]+fp8Tile-1)/fp8Tile || s.Dim(1) != (ws[1]+fp8Tile-1)/fp8Tile {
				return fmt.Errorf("tensor %s: shape %v beside the weight %s %v, want one float, or one per %d x %d tile: [%d %d] for a matrix",
					sname, s.Shape(), wname, ws, fp8Tile, fp8Tile, (max(ws[0], 1)+fp8Tile-1)/fp8Tile, (ws[len(ws)-1]+fp8Tile-1)/fp8Tile)
			}
			deq = fp8Tiles(g, w, s)
		}
		g.Keep(deq)
		if err := g.Eval(deq); err != nil {
			return fmt.Errorf("tensor %s: %w", wname, err)
		}
		w.Free()
		s.Free()
		delete(l.tensors, sname)
		l.tensors[wname] = deq
		// In a group, slices come from the dequantized weight, not from
		// the file's codes.
		delete(l.files, wname)
		delete(l.files, sname)
	}
	return nil
}

// fp8Tiles is the FP8 codes w [m, n] read as values, each 128 x 128 tile
// times its scale in s [ceil(m/128), ceil(n/128)] (in float32 or the
// scale's wider dtype), rounded once to bfloat16.
func fp8Tiles(g *mlx.Graph, w, s *mlx.Array) *mlx.Array {
	m, n := w.Dim(0), w.Dim(1)
	tm, tn := s.Dim(0), s.Dim(1)
	v := g.FromFP8(w, mlx.Float32)
	if pm, pn := tm*fp8Tile-m, tn*fp8Tile-n; pm > 0 || pn > 0 {
		v = g.Pad(v, []int{0, 1}, []int{0, 0}, []int{pm, pn}, 0)
	}
	v = g.Reshape(v, tm, fp8Tile, tn, fp8Tile)
	v = g.Multiply(v, g.Reshape(s, tm, 1, tn, 1))
	v = g.Reshape(v, tm*fp8Tile, tn*fp8Tile)
	if v.Dim(0) != m || v.Dim(1) != n {
		v = g.Slice(v, []int{0, 0}, []int{m, n})
	}
	// a row-major copy: the products read a weight's rows as stored
	return g.Contiguous(g.AsType(v, mlx.BFloat16))
}

// unpackInt4 reads compressed-tensors' pack-quantized modules as affine
// 4-bit ones: W.weight_packed (int32 words of eight 4-bit values, the first
// in the low bits, as MLX packs them) becomes W.weight (the words as
// uint32), W.weight_scale [out, in/32] becomes W.scales, and W.biases is
// -8 times the scales (the values are stored offset by 8: symmetric
// integers from -8 to 7); W.weight_shape, [out, in], is checked against
// them and consumed. As mlx-lm's sanitize reads Kimi K2's INT4
// checkpoints.
func (l *loader) unpackInt4() error {
	var packed []string
	for name := range l.tensors {
		if strings.HasSuffix(name, ".weight_packed") {
			packed = append(packed, name)
		}
	}
	sort.Strings(packed)
	g := l.g
	for _, pname := range packed {
		base := strings.TrimSuffix(pname, "weight_packed")
		sname, shname := base+"weight_scale", base+"weight_shape"
		p, s, sh := l.tensors[pname], l.tensors[sname], l.tensors[shname]
		switch {
		case s == nil:
			return fmt.Errorf("tensor %s: packed weights without their scales %s", pname, sname)
		case p.Dtype() != mlx.Int32 && p.Dtype() != mlx.Uint32 || p.Ndim() != 2:
			return fmt.Errorf("tensor %s: %s %v, want int32 words [out, in/8] (eight 4-bit values each)", pname, p.Dtype(), p.Shape())
		case !s.Dtype().IsFloat() || s.Ndim() != 2 || s.Dim(0) != p.Dim(0) || s.Dim(1)*4 != p.Dim(1):
			return fmt.Errorf("tensor %s: %s %v beside %s %v, want a float scale per 32 values: [%d %d]", sname, s.Dtype(), s.Shape(), pname, p.Shape(), p.Dim(0), p.Dim(1)/4)
		}
		if sh != nil {
			want := []int32{int32(p.Dim(0)), int32(p.Dim(1) * 8)}
			var got []int32
			c := g.AsType(sh, mlx.Int32)
			err := g.Eval(c)
			if err == nil {
				got, err = c.Int32s()
			}
			if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				return fmt.Errorf("tensor %s: %v, want %v (the packed weights' rows and values)", shname, got, want)
			}
			sh.Free()
			delete(l.tensors, shname)
		}
		w := g.View(p, mlx.Uint32)
		b := g.MultiplyScalar(s, -8)
		g.Keep(w, b)
		if err := g.Eval(w, b); err != nil {
			return fmt.Errorf("tensor %s: %w", pname, err)
		}
		delete(l.tensors, pname)
		delete(l.tensors, sname)
		l.scratch = append(l.scratch, p)
		for name, a := range map[string]*mlx.Array{base + "weight": w, base + "scales": s, base + "biases": b} {
			if _, dup := l.tensors[name]; dup {
				return fmt.Errorf("tensor %s: both it and %s, its packed form", name, pname)
			}
			l.tensors[name] = a
		}
		delete(l.files, pname)
		delete(l.files, sname)
	}
	return nil
}
