package nn

import (
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// The keys' and values' short convolution over time (Baichuan-M1): before
// the rope, each kv head's keys, and its values, become a causal
// convolution of the last Taps raw ones, one weight per head and tap. The
// layer's cache is a kv.List of a state (slot 0: the last Taps - 1 raw
// keys, slot 1: the values; mlx-lm's ArraysCache) and the attention's
// cache, in that order (mlx-lm's CacheList).

// KVConv is the convolution's weights: K[j] and V[j] [1, kv heads, 1, 1]
// weigh the input j steps after the oldest of the Taps it reads.
type KVConv struct {
	K, V []*mlx.Array
	Taps int
}

// KVConv reads the convolution's weights name.conv_k and name.conv_v
// [1, 1, heads, 1, taps].
func (w *Weights) KVConv(name string, heads, taps int) *KVConv {
	c := &KVConv{Taps: taps}
	shape := []int{1, 1, heads, 1, taps}
	for _, t := range []struct {
		name string
		out  *[]*mlx.Array
	}{{name + ".conv_k", &c.K}, {name + ".conv_v", &c.V}} {
		if w.l.record {
			w.spec(t.name, shape, nil, false)
			continue
		}
		raw := w.take(t.name, shape, false)
		if raw == nil {
			continue
		}
		g := w.l.g
		at := make([]int, taps-1)
		for j := range at {
			at[j] = j + 1
		}
		for _, p := range g.SplitAt(g.Reshape(raw, 1, heads, taps, 1, 1), at, 2) {
			tap := g.Reshape(p, 1, heads, 1, 1)
			g.Keep(tap)
			*t.out = append(*t.out, w.keep(tap))
		}
		w.l.scratch = append(w.l.scratch, raw)
	}
	return c
}

// KVConvStates are the spec of an attention layer's cache with the
// convolution's state before it: a list of the two-slot state and spec.
func KVConvStates(spec CacheSpec) CacheSpec {
	return CacheSpec{Parts: []CacheSpec{{States: 2}, spec}}
}

// KVConvolve convolves keys and values [B, kv heads, L, head_dim] over
// time, reading and keeping the last raw ones in the state part of the
// layer's cache c, and returns them with the attention part of c.
func KVConvolve(g *mlx.Graph, c kv.Cache, conv *KVConv, k, v *mlx.Array) (*mlx.Array, *mlx.Array, kv.Cache) {
	l, ok := c.(*kv.List)
	if !ok || l.Parts() != 2 {
		g.Failf("nn: attention with a convolution of its keys and values needs a list of a state and an attention cache, got %T (make the caches with the model's NewCaches)", c)
		return k, v, c
	}
	s := StatesOf(g, l.Part(0), 2)
	k = conv.over(g, s, 0, k, conv.K)
	v = conv.over(g, s, 1, v, conv.V)
	s.Advance(k.Dim(2))
	return k, v, l.Part(1)
}

// over is the convolution of u [B, H, L, D] with weights w (a tap each),
// its state in slot: Σ_j w[j] u[t - (Taps - 1) + j], summed from the
// oldest input on, each product and sum in u's dtype.
func (c *KVConv) over(g *mlx.Graph, s *kv.States, slot int, u *mlx.Array, w []*mlx.Array) *mlx.Array {
	keep := c.Taps - 1
	B, H, L, D := u.Dim(0), u.Dim(1), u.Dim(2), u.Dim(3)
	past := s.Slot(slot)
	if past == nil {
		past = g.Zeros([]int{B, H, keep, D}, u.Dtype())
	}
	// steps(from, n) are the n inputs from the from-th of the state and u
	// side by side, and next the last keep of them. A single new input
	// reads the state where it is (the same products and sums as the
	// inputs side by side give); more go side by side in one copy.
	var steps func(from, n int) *mlx.Array
	var next *mlx.Array
	if L == 1 && keep > 0 {
		steps = func(from, n int) *mlx.Array {
			switch {
			case from == keep:
				return u
			case keep == 1:
				return past
			}
			return g.Slice(past, []int{0, 0, from, 0}, []int{B, H, from + n, D})
		}
		next = u
		if keep > 1 {
			next = g.Concatenate(2, steps(1, keep-1), u)
		}
	} else {
		all := g.Concatenate(2, past, u) // [B, H, keep + L, D]
		steps = func(from, n int) *mlx.Array {
			return g.Slice(all, []int{0, 0, from, 0}, []int{B, H, from + n, D})
		}
		next = steps(L, keep)
	}
	var y *mlx.Array
	for j := range c.Taps {
		term := g.Multiply(steps(j, L), w[j])
		if y == nil {
			y = term
		} else {
			y = g.Add(y, term)
		}
	}
	s.SetSlot(g, slot, next)
	return y
}
