package kv

import (
	"github.com/archgen/archgen/runtime/mlx"
)

// Plain is a growing cache: keys and values live in buffers preallocated in
// steps of 256 positions and written with slice_update, never concatenated
// per token (mlx-lm's KVCache).
type Plain struct {
	keys, values *mlx.Array // [B, Hkv, capacity, D]; nil before the first Update
	offset       int
}

// NewPlain makes an empty growing cache.
func NewPlain() *Plain { return &Plain{} }

func (c *Plain) Offset() int { return c.offset }

func (c *Plain) Update(g *mlx.Graph, k, v *mlx.Array) KV {
	prev := c.offset
	ks, vs := k.Shape(), v.Shape()
	if len(ks) != 4 || len(vs) != 4 {
		g.Failf("kv: keys %v and values %v must be [B, Hkv, L, D]", ks, vs)
		return KV{Keys: k, Values: v}
	}
	n := ks[2]
	if c.keys == nil || prev+n > c.keys.Dim(2) {
		grow := (step + n - 1) / step * step
		nk := g.Zeros([]int{ks[0], ks[1], grow, ks[3]}, k.Dtype())
		nv := g.Zeros([]int{vs[0], vs[1], grow, vs[3]}, v.Dtype())
		if c.keys != nil {
			ok, ov := c.keys, c.values
			if prev%step != 0 {
				ok = g.Slice(ok, []int{0, 0, 0, 0}, []int{ks[0], ks[1], prev, ks[3]})
				ov = g.Slice(ov, []int{0, 0, 0, 0}, []int{vs[0], vs[1], prev, vs[3]})
			}
			nk = g.Concatenate(2, ok, nk)
			nv = g.Concatenate(2, ov, nv)
		}
		c.replace(g, nk, nv)
	}
	c.offset += n
	nk := g.SliceUpdate(c.keys, k, []int{0, 0, prev, 0}, []int{ks[0], ks[1], c.offset, ks[3]})
	nv := g.SliceUpdate(c.values, v, []int{0, 0, prev, 0}, []int{vs[0], vs[1], c.offset, vs[3]})
	c.replace(g, nk, nv)
	if c.offset < c.keys.Dim(2) {
		return KV{
			Keys:   g.Slice(c.keys, []int{0, 0, 0, 0}, []int{ks[0], ks[1], c.offset, ks[3]}),
			Values: g.Slice(c.values, []int{0, 0, 0, 0}, []int{vs[0], vs[1], c.offset, vs[3]}),
		}
	}
	return KV{Keys: c.keys, Values: c.values}
}

// replace makes k and v the cache's buffers, releasing the old ones. The
// graph that reads the old buffers keeps its own reference.
func (c *Plain) replace(g *mlx.Graph, k, v *mlx.Array) {
	g.Keep(k, v)
	c.keys.Free()
	c.values.Free()
	c.keys, c.values = k, v
}

func (c *Plain) Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	return causalMask(g, n, c.offset, window, forceArray)
}

func (c *Plain) Trim(n int) int {
	n = min(n, c.offset)
	c.offset -= n
	return n
}

func (c *Plain) Trimmable() bool { return true }

func (c *Plain) Nbytes() int {
	if c.keys == nil {
		return 0
	}
	return c.keys.Nbytes() + c.values.Nbytes()
}

func (c *Plain) Free() {
	c.keys.Free()
	c.values.Free()
	c.keys, c.values, c.offset = nil, nil, 0
}

// causalMask is mlx-lm's mask for a cache holding offset positions: an
// explicit array whenever a window is set, none for one query, and the
// "causal" mode otherwise unless an array is asked for.
func causalMask(g *mlx.Graph, n, offset, window int, forceArray bool) mlx.AttentionMask {
	switch {
	case window > 0:
		return mlx.MaskArray(CausalMaskArray(g, n, offset, window))
	case n == 1:
		return mlx.NoMask
	case forceArray:
		return mlx.MaskArray(CausalMaskArray(g, n, offset, 0))
	}
	return mlx.CausalMask
}

// CausalMaskArray is the boolean mask [n, offset+n] where query i (at
// position offset+i) attends to key j when j <= offset+i and, with a window,
// j > offset+i-window.
func CausalMaskArray(g *mlx.Graph, n, offset, window int) *mlx.Array {
	rinds := g.Arange(0, float64(offset+n), 1, mlx.Int32)
	linds := g.Arange(float64(offset), float64(offset+n), 1, mlx.Int32)
	l := g.ExpandDims(linds, 1)
	r := g.ExpandDims(rinds, 0)
	mask := g.GreaterEqual(l, r)
	if window > 0 {
		mask = g.LogicalAnd(mask, g.Less(l, g.AddScalar(r, float64(window))))
	}
	return mask
}

// quantizedAttention is attention over quantized keys and values.
func quantizedAttention(g *mlx.Graph, q *mlx.Array, kv KV, scale float32, mask mlx.AttentionMask) *mlx.Array {
	g.Failf("kv: quantized attention is not implemented yet")
	return q
}
