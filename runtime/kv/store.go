package kv

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// store is what a cache holds: its keys and values, dense or quantized, as
// arrays of shape [B, Hkv, N, *] whose axis 2 is the position. Dense, arrs
// is {keys, values}; quantized, it is the triples {weight, scales, biases}
// of the keys, then of the values. Every cache operation (grow, slice,
// write, reorder) acts on all of them alike, so that one piece of logic
// serves dense and quantized caches.
//
// The store owns its arrays: they were made by the graph of some step and
// kept, and set releases the ones a step replaces, so that nothing but that
// step's graph refers to an old buffer and MLX can write into it in place.
type store struct {
	arrs         []*mlx.Array // nil while empty
	bits, group  int          // bits 0: dense
	dtype        mlx.Dtype    // keys and values held in it (quantized: scales, biases); 0: as computed
	batch, heads int          // B and Hkv of what is held
	kdim, vdim   int          // head dims of keys and values (unpacked)
	broken       error        // a step failed midway: the arrays are unusable
}

func (s *store) empty() bool     { return s.arrs == nil }
func (s *store) quantized() bool { return s.bits > 0 }

// length is the number of positions the arrays have room for.
func (s *store) length() int {
	if s.arrs == nil {
		return 0
	}
	return s.arrs[0].Dim(2)
}

// check validates a step's keys and values, [B, Hkv, L, D], against each
// other and against what the store holds, recording a failure on g. It
// returns L, or -1 when the step must not touch the cache.
func (s *store) check(g *mlx.Graph, k, v *mlx.Array) int {
	if g.Err() != nil {
		return -1
	}
	if s.broken != nil {
		g.Failf("kv: the cache is unusable after a failed step: %v", s.broken)
		return -1
	}
	ks, vs := k.Shape(), v.Shape()
	if len(ks) != 4 || len(vs) != 4 || ks[0] != vs[0] || ks[1] != vs[1] || ks[2] != vs[2] {
		g.Failf("kv: keys %v and values %v must be [B, Hkv, L, D] with the same B, Hkv and L", ks, vs)
		return -1
	}
	if ks[2] == 0 {
		g.Failf("kv: a step of zero positions")
		return -1
	}
	if !s.empty() && (ks[0] != s.batch || ks[1] != s.heads || ks[3] != s.kdim || vs[3] != s.vdim) {
		g.Failf("kv: keys %v and values %v do not match the cache's [%d, %d, _, %d] and [%d, %d, _, %d]",
			ks, vs, s.batch, s.heads, s.kdim, s.batch, s.heads, s.vdim)
		return -1
	}
	if s.quantized() && (ks[3]%s.group != 0 || vs[3]%s.group != 0) {
		g.Failf("kv: a quantized cache needs head dims that are multiples of its group size %d; keys have %d, values %d",
			s.group, ks[3], vs[3])
		return -1
	}
	return ks[2]
}

// settle records the outcome of a step that changed the arrays: when g
// failed meanwhile, the store cannot be trusted any more.
func (s *store) settle(g *mlx.Graph) {
	if err := g.Err(); err != nil && s.broken == nil {
		s.broken = err
	}
}

// encode turns a step's keys and values into the store's form.
func (s *store) encode(g *mlx.Graph, k, v *mlx.Array) []*mlx.Array {
	if s.dtype != 0 {
		if k.Dtype() != s.dtype {
			k = g.AsType(k, s.dtype)
		}
		if v.Dtype() != s.dtype {
			v = g.AsType(v, s.dtype)
		}
	}
	if s.bits == 0 {
		return []*mlx.Array{k, v}
	}
	qk := g.Quantize(k, s.group, s.bits)
	qv := g.Quantize(v, s.group, s.bits)
	return []*mlx.Array{qk.Weight, qk.Scales, qk.Biases, qv.Weight, qv.Scales, qv.Biases}
}

// remember notes the dims of the first step a store holds.
func (s *store) remember(k, v *mlx.Array) {
	s.batch, s.heads, s.kdim, s.vdim = k.Dim(0), k.Dim(1), k.Dim(3), v.Dim(3)
}

// set makes arrs the store's arrays. Those g made are taken over from g
// (Keep); the store's previous arrays that arrs does not reuse are released.
func (s *store) set(g *mlx.Graph, arrs []*mlx.Array) {
	g.Keep(arrs...)
	for _, old := range s.arrs {
		reused := false
		for _, a := range arrs {
			reused = reused || a == old
		}
		if !reused {
			old.Free()
		}
	}
	s.arrs = arrs
}

// quantize converts a dense store to the given quantization, quantizing
// every position it has room for (as mlx-lm's to_quantized does).
func (s *store) quantize(g *mlx.Graph, bits, group int) {
	if s.arrs != nil && (s.kdim%group != 0 || s.vdim%group != 0) {
		g.Failf("kv: a quantized cache needs head dims that are multiples of its group size %d; keys have %d, values %d",
			group, s.kdim, s.vdim)
		return
	}
	s.bits, s.group = bits, group
	if s.arrs == nil {
		return
	}
	enc := s.encode(g, s.arrs[0], s.arrs[1])
	if g.Err() != nil {
		s.bits, s.group = 0, 0 // still dense, as it was
		return
	}
	s.set(g, enc)
}

// free releases the arrays; the store is empty afterwards (and usable again).
func (s *store) free() {
	for _, a := range s.arrs {
		a.Free()
	}
	s.arrs = nil
	s.broken = nil
}

func (s *store) nbytes() int {
	n := 0
	for _, a := range s.arrs {
		n += a.Nbytes()
	}
	return n
}

// kv presents arrays in the store's form as attention reads them.
func (s *store) kv(arrs []*mlx.Array) KV {
	if s.bits == 0 {
		return KV{Keys: arrs[0], Values: arrs[1]}
	}
	return KV{
		QKeys:   &mlx.Quantized{Weight: arrs[0], Scales: arrs[1], Biases: arrs[2], GroupSize: s.group, Bits: s.bits},
		QValues: &mlx.Quantized{Weight: arrs[3], Scales: arrs[4], Biases: arrs[5], GroupSize: s.group, Bits: s.bits},
	}
}

// ---- operations on lists of [B, H, N, *] arrays, along axis 2 ----

// dims4 is a's shape, or zeros when a is not a live 4-D array (the op it
// feeds then fails on g and records why).
func dims4(a *mlx.Array) []int {
	if sh := a.Shape(); len(sh) == 4 {
		return sh
	}
	return []int{0, 0, 0, 0}
}

// slicePos is each array's positions [start, stop).
func slicePos(g *mlx.Graph, arrs []*mlx.Array, start, stop int) []*mlx.Array {
	out := make([]*mlx.Array, len(arrs))
	for i, a := range arrs {
		sh := dims4(a)
		out[i] = g.Slice(a, []int{0, 0, start, 0}, []int{sh[0], sh[1], stop, sh[3]})
	}
	return out
}

// concatPos joins lists of arrays position-wise: out[i] is the
// concatenation of parts[0][i], parts[1][i], ... along axis 2.
func concatPos(g *mlx.Graph, parts ...[]*mlx.Array) []*mlx.Array {
	out := make([]*mlx.Array, len(parts[0]))
	for i := range out {
		xs := make([]*mlx.Array, len(parts))
		for j, p := range parts {
			xs[j] = p[i]
		}
		out[i] = g.Concatenate(2, xs...)
	}
	return out
}

// zerosPos is zeros shaped like each of like but with n positions.
func zerosPos(g *mlx.Graph, like []*mlx.Array, n int) []*mlx.Array {
	out := make([]*mlx.Array, len(like))
	for i, a := range like {
		sh := dims4(a)
		out[i] = g.Zeros([]int{sh[0], sh[1], n, sh[3]}, a.Dtype())
	}
	return out
}

// writePos writes each update into its array from position at on, all in
// one op.
func writePos(g *mlx.Graph, arrs, updates []*mlx.Array, at int) []*mlx.Array {
	return g.WritePositions(arrs, updates, at)
}

// fresh gives each array a handle of g's, so that the store owns what it
// keeps even when the caller passed in arrays it owns itself.
func fresh(g *mlx.Graph, arrs []*mlx.Array) []*mlx.Array {
	out := make([]*mlx.Array, len(arrs))
	for i, a := range arrs {
		out[i] = g.Reshape(a, dims4(a)...)
	}
	return out
}

// checkQuantization validates bits and a group size for MLX's affine
// quantization.
func checkQuantization(bits, group int) error {
	switch bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return fmt.Errorf("kv: %d-bit KV quantization is not supported (2, 3, 4, 5, 6 or 8)", bits)
	}
	switch group {
	case 32, 64, 128:
	default:
		return fmt.Errorf("kv: KV quantization group size %d is not supported (32, 64 or 128)", group)
	}
	return nil
}
